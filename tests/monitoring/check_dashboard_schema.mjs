// Validates Grafana dashboard JSON files against tests/monitoring/dashboard.schema.json with ajv
// (the copy pinned by tests/packaging/validate/package-lock.json).
//   node check_dashboard_schema.mjs DASHBOARD.json [...]     exit 0 when every file is valid
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "..", "packaging", "validate", "package.json"));
const Ajv = require("ajv");
const ajv = new (Ajv.default ?? Ajv)({ allErrors: true, strict: true, strictRequired: false });
const validate = ajv.compile(JSON.parse(readFileSync(join(here, "dashboard.schema.json"), "utf8")));
let failures = 0;
for (const file of process.argv.slice(2)) {
  if (!validate(JSON.parse(readFileSync(file, "utf8")))) {
    failures++;
    for (const e of validate.errors) {
      console.error(`${file}: ${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`);
    }
  }
}
console.log(`dashboard schema: ${process.argv.length - 2} files, ${failures} invalid`);
process.exit(failures === 0 && process.argv.length > 2 ? 0 : 1);
