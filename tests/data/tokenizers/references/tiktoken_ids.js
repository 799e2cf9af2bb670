// Prints npm tiktoken's encoding of TEXT_FILE (read as UTF-8), ids separated by spaces.
// usage: node tiktoken_ids.js REFERENCE_DIR ENCODING TEXT_FILE
const fs = require("fs");
const path = require("path");
const [dir, encoding, file] = process.argv.slice(2);
const { get_encoding } = require(path.resolve(dir, "node_modules/tiktoken"));
const enc = get_encoding(encoding);
// encode_ordinary: special-token text is ordinary text, as tessel's TikTokenizer treats it.
const ids = enc.encode_ordinary(fs.readFileSync(file, "utf8"));
process.stdout.write(Array.from(ids).join(" ") + "\n");
enc.free();
