// Hugging Face's tokenizers library (Rust, through its Node binding npm @anush008/tokenizers) on
// TEXT_FILE with TOKENIZER_JSON: prints one JSON object with the ids of encode(text,
// add_special_tokens=true) and (=false), and decode(the first, skip_special_tokens=false).
// usage: node hf_rust_reference.mjs REFERENCE_DIR TOKENIZER_JSON TEXT_FILE
import fs from "fs";
import path from "path";
import { createRequire } from "module";
const [dir, json, file] = process.argv.slice(2);
const require = createRequire(path.resolve(dir, "package.json"));
const { Tokenizer } = require(path.resolve(dir, "node_modules/@anush008/tokenizers"));
const tokenizer = Tokenizer.fromFile(json);
const text = fs.readFileSync(file, "utf8");
const withSpecial = (await tokenizer.encode(text, null, { addSpecialTokens: true })).getIds();
const without = (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds();
const decoded = await tokenizer.decode(withSpecial, false);
process.stdout.write(JSON.stringify({ with_special: withSpecial, without_special: without, decoded }) + "\n");
