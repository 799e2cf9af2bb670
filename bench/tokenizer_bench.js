// npm tiktoken's encoding throughput on one text (its WASM build of the Rust core; node runs
// it on one thread): the same JSON line as tokenizer_bench. encode_ordinary, as tessel's
// TikTokenizer encodes (special-token text is text).
// usage: node tokenizer_bench.js REFERENCE_DIR ENCODING TEXT_FILE ROUNDS
const fs = require("fs");
const path = require("path");
const [dir, encoding, file, rounds] = process.argv.slice(2);
const { get_encoding } = require(path.resolve(dir, "node_modules/tiktoken"));
const t0 = process.hrtime.bigint();
const enc = get_encoding(encoding);
const load_s = Number(process.hrtime.bigint() - t0) / 1e9;
const text = fs.readFileSync(file, "utf8");
const bytes = Buffer.byteLength(text);
let tokens = enc.encode_ordinary(text.slice(0, 10000)).length;
const mbps = [];
for (let r = 0; r < Number(rounds); r++) {
  const start = process.hrtime.bigint();
  tokens = enc.encode_ordinary(text).length;
  mbps.push(bytes / 1e6 / (Number(process.hrtime.bigint() - start) / 1e9));
}
mbps.sort((a, b) => a - b);
console.log(JSON.stringify({ impl: "tiktoken", tokens, bytes, best_mb_s: +mbps[mbps.length - 1].toFixed(3),
                             median_mb_s: +mbps[Math.floor(mbps.length / 2)].toFixed(3), load_s: +load_s.toFixed(3) }));
enc.free();
