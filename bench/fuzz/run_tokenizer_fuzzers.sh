#!/usr/bin/env bash
# libFuzzer runs of the tokenizer file readers and the encoder, each for a fixed budget under
# AddressSanitizer and UndefinedBehaviorSanitizer:
#   fuzz_tokenizer_json      tokenizer.json (parse_hf_tokenizer), then encode/decode with it
#   fuzz_tokenizer_tiktoken  `base64 rank` files and Megatron's TikTokenizer JSON (parse_tiktoken)
#   fuzz_tokenizer_gpt2      vocab.json + merges.txt (parse_gpt2_bpe)
#   fuzz_tokenizer_encode    any text through a fixed tokenizer.json: UTF-8 round-trips, the rest is refused
#   fuzz_tokenizer_unigram   a Unigram model's pieces and a text: the tokens spell the text
# Installs Debian's clang-14 and libclang-rt-14-dev when missing (not a CI dependency: run by
# hand). Seeds are written here from small fixtures, and from tiktoken's r50k ranks when
# build/test-references holds them (scripts/install-test-references.sh).
#
#   bench/fuzz/run_tokenizer_fuzzers.sh [SECONDS_EACH]     (default 90)
# Prints each fuzzer's final stats (executions, crashes) and exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/../.."
budget=${1:-90}
missing=()
for p in clang-14 libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

out=build/fuzz
mkdir -p "$out"
flags=(-std=c++20 -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -Isrc
       $(pkg-config --cflags libpcre2-8 libutf8proc sentencepiece))
libs=(-lfmt $(pkg-config --libs libpcre2-8 libutf8proc sentencepiece))
# The tokenizer sources once (instrumented for the fuzzer), then each harness linked with them.
mkdir -p "$out/obj"
objects=()
for src in src/tessel/data/tokenizer.cpp src/tessel/data/utf8.cpp src/tessel/data/tokenizers/*.cpp; do
  objects+=("$out/obj/$(basename "$src" .cpp).o")
done
printf '%s\n' src/tessel/data/tokenizer.cpp src/tessel/data/utf8.cpp src/tessel/data/tokenizers/*.cpp |
  xargs -P "$(nproc)" -I{} sh -c 'clang++-14 "$@" -fsanitize=fuzzer-no-link -c {} -o "'"$out"'/obj/$(basename {} .cpp).o"' _ "${flags[@]}"
names=(json tiktoken gpt2 encode unigram)
for name in "${names[@]}"; do
  clang++-14 "${flags[@]}" -fsanitize=fuzzer "bench/fuzz/fuzz_tokenizer_$name.cpp" "${objects[@]}" "${libs[@]}" \
    -o "$out/fuzz_tokenizer_$name"
done

# Seeds: the test fixtures' shapes, small enough for the fuzzer to mutate.
for name in "${names[@]}"; do mkdir -p "$out/corpus_tokenizer_$name"; done
/usr/bin/python3 - "$out" <<'PY'
import base64, json, sys
out = sys.argv[1]
def byte_char(b):
    printable = 33 <= b <= 126 or 0xA1 <= b <= 0xAC or b >= 0xAE
    return chr(b) if printable else None
alphabet, n = {}, 256
for b in range(256):
    c = byte_char(b)
    if c is None:
        c = chr(n); n += 1
    alphabet[b] = c
bl = lambda s: "".join(alphabet[b] for b in s.encode())
vocab = {alphabet[b]: b for b in range(256)}
merges = [(" ", "t"), ("h", "e"), (" t", "he"), ("a", "a"), ("i", "n")]
for a, b in merges:
    vocab[bl(a + b)] = len(vocab)
vocab["<|endoftext|>"] = len(vocab)
tok = {"added_tokens": [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>", "special": True},
                        {"id": len(vocab), "content": "<s>", "lstrip": True}],
       "normalizer": {"type": "NFC"},
       "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
           {"type": "Split", "pattern": {"Regex": r"\p{L}+|\p{N}{1,3}|\s+(?!\S)|\s+|[^\s\p{L}\p{N}]+"}, "behavior": "Isolated"},
           {"type": "Digits", "individual_digits": True},
           {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
       "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
                          "special_tokens": {"<s>": {"id": "<s>", "ids": [len(vocab)]}}},
       "decoder": {"type": "ByteLevel"},
       "model": {"type": "BPE", "ignore_merges": True, "vocab": vocab, "merges": [[bl(a), bl(b)] for a, b in merges]}}
open(f"{out}/corpus_tokenizer_json/seed_pairs", "w").write(json.dumps(tok))
tok["model"]["merges"] = [f"{bl(a)} {bl(b)}" for a, b in merges]
tok["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True}
tok["normalizer"] = None
open(f"{out}/corpus_tokenizer_json/seed_strings", "w").write(json.dumps(tok))
# SentencePiece-style (Llama 2, Gemma): byte fallback, the text normalizers, Metaspace, its decoders.
space = "\u2581"
sp_vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
for b in range(256):
    sp_vocab[f"<0x{b:02X}>"] = 3 + b
for piece in [space, "a", "b", space + "a", "ab", space + "ab"]:
    sp_vocab[piece] = len(sp_vocab)
sp = {"added_tokens": [{"id": 0, "content": "<unk>", "special": True}, {"id": 1, "content": "<s>", "special": True, "normalized": False},
                       {"id": 2, "content": "</s>", "special": True, "rstrip": True}],
      "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}, {"type": "Strip", "strip_left": True, "strip_right": False},
                                                       {"type": "Replace", "pattern": {"Regex": "\\s{2,}"}, "content": " "}]},
      "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Metaspace", "replacement": space, "prepend_scheme": "first", "split": True},
                                                            {"type": "Punctuation", "behavior": "Isolated"}, {"type": "WhitespaceSplit"}]},
      "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
                         "special_tokens": {"<s>": {"id": "<s>", "ids": [1]}}},
      "decoder": {"type": "Sequence", "decoders": [{"type": "Metaspace", "replacement": space, "prepend_scheme": "first"}, {"type": "ByteFallback"},
                                                 {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 1}]},
      "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True, "vocab": sp_vocab,
                "merges": [f"{space} a", "a b", f"{space}a b"]}}
open(f"{out}/corpus_tokenizer_json/seed_sentencepiece", "w").write(json.dumps(sp))
sp["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": space}, {"type": "Replace", "pattern": {"String": " "}, "content": space}]}
sp["pre_tokenizer"] = None
sp["decoder"] = {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": space}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}]}
open(f"{out}/corpus_tokenizer_json/seed_llama2", "w").write(json.dumps(sp))
# Unigram (T5-style: NFKC, Metaspace; and with byte fallback and Llama 2's decoders).
unigram = {"added_tokens": [{"id": 0, "content": "<unk>", "special": True}, {"id": 2, "content": "</s>", "special": True}],
           "normalizer": {"type": "NFKC"},
           "pre_tokenizer": {"type": "Metaspace", "replacement": space, "prepend_scheme": "always", "split": True},
           "post_processor": {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "</s>"}}],
                              "special_tokens": {"</s>": {"id": "</s>", "ids": [2]}}},
           "decoder": {"type": "Metaspace", "replacement": space, "prepend_scheme": "always", "split": True},
           "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": False,
                     "vocab": [["<unk>", 0.0], ["<s>", 0.0], ["</s>", 0.0], [space, -2.0], ["a", -3.0], ["b", -3.5], [space + "a", -2.5],
                               ["ab", -4.0], [space + "ab", -3.0], ["\u00e9", -5.0]]}}
open(f"{out}/corpus_tokenizer_json/seed_unigram", "w").write(json.dumps(unigram))
unigram["model"]["byte_fallback"] = True
unigram["model"]["vocab"] += [[f"<0x{b:02X}>", -10.0] for b in range(256)]
unigram["decoder"] = sp["decoder"]
open(f"{out}/corpus_tokenizer_json/seed_unigram_bytes", "w").write(json.dumps(unigram))
open(f"{out}/corpus_tokenizer_unigram/seed", "wb").write(
    "\n".join(chr(65 + i) + p for i, p in enumerate(["a", "b", "ab", "abc", "\u00e9", "\u4e2d\u6587", space + "the", "the"])).encode()
    + b"\0" + "abcab \u00e9x \u4e2d\u6587 the\u2581the \U0001F44D".encode())
merges_txt = "#version: 0.2\n" + "".join(f"{bl(a)} {bl(b)}\n" for a, b in merges)
open(f"{out}/corpus_tokenizer_gpt2/seed", "w").write(json.dumps(vocab) + "\0" + merges_txt)
ranks = [bytes([b]) for b in range(256)] + [(a + b).encode() for a, b in merges]
open(f"{out}/corpus_tokenizer_tiktoken/seed_lines", "w").write(
    "".join(f"{base64.b64encode(t).decode()} {r}\n" for r, t in enumerate(ranks)))
open(f"{out}/corpus_tokenizer_tiktoken/seed_megatron.json", "w").write(json.dumps(
    [{"rank": r, "token_bytes": base64.b64encode(t).decode(), "token_str": ""} for r, t in enumerate(ranks)]))
open(f"{out}/corpus_tokenizer_encode/seed", "w").write(
    "Hello world, it's 2026! \u4e2d\u6587 caf\u00e9 e\u0301  \n\n\t<|endoftext|> x <s> word words \U0001F44D 12345")
PY
if [ -s build/test-references/r50k_base.tiktoken ]; then
  head -2000 build/test-references/r50k_base.tiktoken > "$out/corpus_tokenizer_tiktoken/seed_r50k_head"
fi

status=0
for name in "${names[@]}"; do
  echo "== fuzz_tokenizer_$name: $budget s"
  if ! "$out/fuzz_tokenizer_$name" -max_total_time="$budget" -print_final_stats=1 -rss_limit_mb=2048 -timeout=20 \
       -artifact_prefix="$out/crash_tokenizer_$name-" "$out/corpus_tokenizer_$name" > "$out/fuzz_tokenizer_$name.log" 2>&1; then
    status=1
    tail -40 "$out/fuzz_tokenizer_$name.log"
  fi
  grep -E "^stat::(number_of_executed_units|peak_rss_mb|new_units_added)|^Done|ERROR|SUMMARY" "$out/fuzz_tokenizer_$name.log" || true
done
exit $status
