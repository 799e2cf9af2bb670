// Hugging Face's tokenizers library (Rust, through npm @anush008/tokenizers): its normalizers NFC,
// NFD, NFKC, NFKD and Lowercase on INPUT_FILE, each written to OUT_DIR/<name>.txt.
// usage: node hf_normalize.mjs REFERENCE_DIR INPUT_FILE OUT_DIR
import fs from "fs";
import path from "path";
import { createRequire } from "module";
const [dir, file, out] = process.argv.slice(2);
const require = createRequire(path.resolve(dir, "package.json"));
const t = require(path.resolve(dir, "node_modules/@anush008/tokenizers"));
const text = fs.readFileSync(file, "utf8");
const normalizers = { nfc: t.nfcNormalizer(), nfd: t.nfdNormalizer(), nfkc: t.nfkcNormalizer(), nfkd: t.nfkdNormalizer(),
                      lowercase: t.lowercase() };
for (const [name, n] of Object.entries(normalizers)) fs.writeFileSync(path.join(out, name + ".txt"), n.normalizeString(text));
