// Fails when the build produced no test files, so `node --test` can never pass by running nothing.
import { readdirSync } from "node:fs";

const files = readdirSync(new URL("../dist/test/", import.meta.url)).filter((name) =>
  name.endsWith(".test.js"),
);
if (files.length === 0) {
  console.error("no compiled test files in dist/test/");
  process.exit(1);
}
console.log(`${files.length} test file(s): ${files.join(", ")}`);
