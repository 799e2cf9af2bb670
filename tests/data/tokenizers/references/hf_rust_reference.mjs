// Hugging Face's tokenizers library (Rust, through its Node binding npm @anush008/tokenizers) on
// each text of TEXTS_JSON (a JSON list of strings) with TOKENIZER_JSON: prints a JSON list with,
// per text, the ids of encode(text, add_special_tokens=true) and (=false), and the decode of each
// (skip_special_tokens=false).
// usage: node hf_rust_reference.mjs REFERENCE_DIR TOKENIZER_JSON TEXTS_JSON
import fs from "fs";
import path from "path";
import { createRequire } from "module";
const [dir, json, file] = process.argv.slice(2);
const require = createRequire(path.resolve(dir, "package.json"));
const { Tokenizer } = require(path.resolve(dir, "node_modules/@anush008/tokenizers"));
const tokenizer = Tokenizer.fromFile(json);
const results = [];
for (const text of JSON.parse(fs.readFileSync(file, "utf8"))) {
  const withSpecial = (await tokenizer.encode(text, null, { addSpecialTokens: true })).getIds();
  const without = (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds();
  results.push({ with_special: withSpecial, without_special: without, decoded: await tokenizer.decode(withSpecial, false),
                 decoded_bare: await tokenizer.decode(without, false) });
}
process.stdout.write(JSON.stringify(results) + "\n");
