// Validate messages against schemas/json/ with Ajv 2020 in strict mode, as another system
// would: `node validate.mjs <schema dir> <messages.jsonl>` where each line is
// {"schema": "<Type>", "data": <message>}. Every schema is compiled (strict: an unknown
// keyword, a type-less keyword or an unknown format is an error, and so is any warning).
// Prints {"compiled": n, "validated": n, "errors": [...], "warnings": [...]}; exit 1 on any.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const [schemaDir, messagesPath] = process.argv.slice(2);
const warnings = [];
const logger = {
  log: () => {},
  warn: (...args) => warnings.push(args.join(" ")),
  error: (...args) => warnings.push(args.join(" ")),
};
const strict = { strict: true, strictTypes: true, strictTuples: true, strictRequired: true };
const ajv = new Ajv2020({ ...strict, allErrors: true, logger });
addFormats(ajv);
const validators = {};
const errors = [];
for (const file of readdirSync(schemaDir).filter((f) => f.endsWith(".json")).sort()) {
  const schema = JSON.parse(readFileSync(join(schemaDir, file), "utf8"));
  try {
    validators[schema.title] = ajv.compile(schema);
  } catch (err) {
    errors.push(`${file}: ${err.message}`);
  }
}
let validated = 0;
if (messagesPath) {
  for (const line of readFileSync(messagesPath, "utf8").split("\n").filter(Boolean)) {
    const { schema, data } = JSON.parse(line);
    const validate = validators[schema];
    if (!validate) {
      errors.push(`no schema ${schema}`);
      continue;
    }
    if (!validate(data)) errors.push(`${schema} ${JSON.stringify(validate.errors)}`);
    validated += 1;
  }
}
console.log(JSON.stringify({ compiled: Object.keys(validators).length, validated, errors, warnings }));
process.exit(errors.length || warnings.length ? 1 : 0);
