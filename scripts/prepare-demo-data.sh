#!/usr/bin/env bash
# Builds data/fortunes.txt, the demo's training text (configs/demo.json), from the Debian
# `fortunes` packages: every plain-text fortune file (not the .dat indexes or the .u8 copies),
# in name order, reduced to printable ASCII, newlines and tabs so samples print cleanly.
# Usage: scripts/prepare-demo-data.sh [OUTPUT]   (default: data/fortunes.txt under the repository)
set -euo pipefail

src=/usr/share/games/fortunes
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/data/fortunes.txt}

if [ ! -d "$src" ]; then
  echo "error: $src: not found; install the corpus with: apt-get install -y fortunes" >&2
  exit 1
fi
files=()
for f in "$src"/*; do
  case "$f" in *.dat | *.u8) continue ;; esac
  [ -f "$f" ] && files+=("$f")
done
if [ ${#files[@]} -eq 0 ]; then
  echo "error: $src: no plain-text fortune files" >&2
  exit 1
fi

mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
cat "${files[@]}" | LC_ALL=C tr -cd '\11\12\40-\176' >"$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "$out: $(wc -c <"$out") bytes from ${#files[@]} fortune files"
