// Prints Tokenizers.js's (npm @huggingface/tokenizers) encoding of TEXT_FILE with TOKENIZER_JSON,
// special tokens as the post-processor adds them.
// usage: node hf_tokenizers_ids.mjs REFERENCE_DIR TOKENIZER_JSON TEXT_FILE
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";
const [dir, json, file] = process.argv.slice(2);
const pkg = path.resolve(dir, "node_modules/@huggingface/tokenizers");
const main = JSON.parse(fs.readFileSync(path.join(pkg, "package.json"), "utf8")).main;
const { Tokenizer } = await import(pathToFileURL(path.join(pkg, main)).href);
const configFile = path.join(path.dirname(json), "tokenizer_config.json");
const config = fs.existsSync(configFile) ? JSON.parse(fs.readFileSync(configFile, "utf8")) : {};
const tokenizer = new Tokenizer(JSON.parse(fs.readFileSync(json, "utf8")), config);
const { ids } = tokenizer.encode(fs.readFileSync(file, "utf8"));
process.stdout.write(ids.join(" ") + "\n");
