#!/usr/bin/env bash
# GPT-2 encoding throughput, one thread: our tokenizer (xtrain-bench-tokenizer) against js-tiktoken
# (node, as shipped: one Tiktoken instance built once from its bundled gpt2 ranks, a warm-up pass,
# each text encoded as one string) on the same texts in the same run; prints a table
# (docs/PERF.md, "Tokenizer").
#   english:  Debian's fortunes, all of them (2.6 MB)
#   licenses: Debian's /usr/share/common-licenses texts
#   scripts:  the fortunes with ASCII letters mapped onto Greek, Cyrillic, Devanagari, Hangul and
#             CJK, one script per line (multi-byte letters, long pieces)
# Ours: once with an empty piece cache (cold: text never seen before) and repeated (warm: the
# steady state of a large corpus). MB/s per wall-clock second and per CPU second of the process
# (the machine may be shared; CPU time is what one core does).
# Usage: scripts/bench/tokenizer.sh [SECONDS per measurement, default 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${XTRAIN_BUILD_DIR:-$root/build}
seconds=${1:-3}
"$root/scripts/build.sh" xtrain-bench-tokenizer >/dev/null
cache=$("$root/scripts/fetch-gpt2-reference.sh")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fortunes=()
for f in /usr/share/games/fortunes/*; do
  case "$f" in *.dat | *.u8) continue ;; esac
  [ -f "$f" ] && fortunes+=("$f")
done
cat "${fortunes[@]}" >"$work/english"
cat /usr/share/common-licenses/* >"$work/licenses"
node -e '
  const fs = require("fs");
  const bases = [0x3b1, 0x430, 0x915, 0xac00, 0x4e00];
  const lines = fs.readFileSync(process.argv[1], "utf8").split("\n");
  fs.writeFileSync(process.argv[2], lines.map((line, i) => line.replace(/[a-z]/gi,
      (c) => String.fromCodePoint(bases[i % bases.length] + (c.toLowerCase().charCodeAt(0) - 97)))).join("\n"));
' "$work/english" "$work/scripts"

printf '%-9s %6s %9s | %-23s %-23s | %-23s | %7s\n' "text" "MB" "tokens" "ours cold wall/cpu MB/s" \
  "ours warm wall/cpu MB/s" "js-tiktoken wall/cpu" "speedup"
for text in english licenses scripts; do
  read -r _ bytes tokens cold_wall cold_cpu warm_wall warm_cpu < <("$build/bin/xtrain-bench-tokenizer" \
    "$cache/gpt2" "$seconds" "$work/$text")
  read -r js_tokens js_wall js_cpu < <(node "$root/scripts/gpt2-reference.cjs" "$cache" bench "$work/$text" "$seconds")
  if [ "$tokens" != "$js_tokens" ]; then
    echo "tokenizer bench: $text: $tokens tokens from ours but $js_tokens from js-tiktoken" >&2
    exit 1
  fi
  awk -v text="$text" -v bytes="$bytes" -v tokens="$tokens" -v cw="$cold_wall" -v cc="$cold_cpu" \
    -v ww="$warm_wall" -v wc="$warm_cpu" -v jw="$js_wall" -v jc="$js_cpu" 'BEGIN {
      printf "%-9s %6.2f %9d | %10.1f / %-10.1f %10.1f / %-10.1f | %10.2f / %-10.2f | %6.0fx\n",
             text, bytes / 1e6, tokens, cw, cc, ww, wc, jw, jc, cc / jc }'
done
echo "speedup: ours cold (CPU) over js-tiktoken (CPU). One thread each; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)."
