// Prints gpt-3-encoder's encoding of TEXT_FILE (OpenAI's GPT-2 encoder ported to JavaScript).
// Its encode() grows its result with Array.concat once per pre-token, quadratic on a long text,
// so the text goes in chunks cut just before a space that follows a non-space character: no
// match of GPT-2's pattern spans such a place, and a match never ends in white space there, so
// the chunks' encodings joined are the whole text's.
// usage: node gpt2_encoder_ids.js REFERENCE_DIR TEXT_FILE
const fs = require("fs");
const path = require("path");
const [dir, file] = process.argv.slice(2);
const { encode } = require(path.resolve(dir, "node_modules/gpt-3-encoder"));
const text = fs.readFileSync(file, "utf8");
const out = [];
let start = 0;
for (let i = 1; i <= text.length; i++) {
  const cut = i === text.length || (i - start >= 2000 && text[i] === " " && !/\s/.test(text[i - 1]));
  if (!cut) continue;
  for (const id of encode(text.slice(start, i))) out.push(id);
  start = i;
}
process.stdout.write(out.join(" ") + "\n");
