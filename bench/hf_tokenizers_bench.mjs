// Hugging Face's tokenizers library (Rust 0.22 through npm @anush008/tokenizers) encoding one text
// with one tokenizer.json, one call at a time (one thread): the same JSON line as tokenizer_bench.
// encode(text, add_special_tokens=true), as tessel's encode.
// usage: node hf_tokenizers_bench.mjs REFERENCE_DIR TOKENIZER_JSON TEXT_FILE ROUNDS
import fs from "fs";
import path from "path";
import { createRequire } from "module";
const [dir, json, file, rounds] = process.argv.slice(2);
const require = createRequire(path.resolve(dir, "package.json"));
const { Tokenizer } = require(path.resolve(dir, "node_modules/@anush008/tokenizers"));
const t0 = process.hrtime.bigint();
const tokenizer = Tokenizer.fromFile(json);
const load_s = Number(process.hrtime.bigint() - t0) / 1e9;
const text = fs.readFileSync(file, "utf8");
const bytes = Buffer.byteLength(text);
const options = { addSpecialTokens: true };
let tokens = (await tokenizer.encode(text.slice(0, 10000), null, options)).getLength();
const mbps = [];
for (let r = 0; r < Number(rounds); r++) {
  const start = process.hrtime.bigint();
  const encoding = await tokenizer.encode(text, null, options);
  mbps.push(bytes / 1e6 / (Number(process.hrtime.bigint() - start) / 1e9));
  tokens = encoding.getLength();
}
mbps.sort((a, b) => a - b);
console.log(JSON.stringify({ impl: "hf-tokenizers", tokens, bytes, best_mb_s: +mbps[mbps.length - 1].toFixed(3),
                             median_mb_s: +mbps[Math.floor(mbps.length / 2)].toFixed(3), load_s: +load_s.toFixed(3) }));
