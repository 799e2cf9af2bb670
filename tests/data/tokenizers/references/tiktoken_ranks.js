// Writes npm tiktoken's bundled ranks of ENCODING as a tiktoken rank file (`base64 rank` lines).
// Its bpe_ranks string holds runs "NAME START token token ...": consecutive ranks from START.
// usage: node tiktoken_ranks.js REFERENCE_DIR ENCODING > ENCODING.tiktoken
const path = require("path");
const [dir, encoding] = process.argv.slice(2);
const data = require(path.resolve(dir, "node_modules/tiktoken/encoders", encoding + ".json"));
const out = [];
for (const line of data.bpe_ranks.split("\n")) {
  if (!line) continue;
  const fields = line.split(" ");
  const start = Number.parseInt(fields[1], 10);
  for (let i = 2; i < fields.length; i++) out.push(fields[i] + " " + (start + i - 2));
}
process.stdout.write(out.join("\n") + "\n");
