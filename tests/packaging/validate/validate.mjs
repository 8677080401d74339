// Validates every object of one or more multi-document YAML files against the Kubernetes API
// schemas, offline: the compiled OpenAPI validators of npm's kubernetes-models (and
// @kubernetes-models/prometheus-operator for ServiceMonitor). Those schemas, like the API server's
// OpenAPI, do not forbid unknown fields, so the object is also walked through a recording proxy:
// a field the validator never looked at is one the schema does not define (a typo such as
// "readinesProbe" fails here, as `kubectl apply --validate=strict` would fail it).
//
// Kinds from CRDs that no npm package models (snapshot.storage.k8s.io's VolumeSnapshotClass) have
// their CRD's openAPIV3Schema in crds/<group>_<version>_<Kind>.json, compiled with ajv, and their
// metadata checked with the ObjectMeta schema. A kind with neither is an error, never skipped.
//
//   node validate.mjs rendered.yaml [more.yaml ...]      exit 0 when every object is valid
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { pathToFileURL, fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const here = dirname(fileURLToPath(import.meta.url));
const modules = join(here, "node_modules");

function modelFile(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : [null, apiVersion];
  if (group === "monitoring.coreos.com") {
    return join(modules, "@kubernetes-models/prometheus-operator", group, version, `${kind}.js`);
  }
  return join(modules, "kubernetes-models", group ?? "", version, `${kind}.js`);
}

async function loadValidator(schemaFile) {
  const mod = await import(pathToFileURL(schemaFile).href);
  return mod.validate;
}

// A CRD kind: its schema from crds/, and ObjectMeta's for the metadata.
async function crdValidatorFor(apiVersion, kind) {
  const [group, version] = apiVersion.split("/");
  const file = join(here, "crds", `${group}_${version}_${kind}.json`);
  let schema;
  try {
    schema = JSON.parse(readFileSync(file, "utf8"));
  } catch (e) {
    if (e.code === "ENOENT") return null;
    throw new Error(`${file}: ${e.message}`);
  }
  const { default: Ajv } = await import("ajv");
  const body = new Ajv({ allErrors: true, strict: true }).compile(schema);
  const meta = await loadValidator(join(modules, "@kubernetes-models/apimachinery/_schemas",
    "IoK8sApimachineryPkgApisMetaV1ObjectMeta.js"));
  const validate = (obj) => {
    const okBody = body(obj);
    const okMeta = meta(obj.metadata, { instancePath: "/metadata" });
    validate.errors = [...(body.errors ?? []), ...(meta.errors ?? [])];
    return okBody && okMeta;
  };
  return validate;
}

// The model module imports its validator from a _schemas file; load that file directly.
async function validatorFor(apiVersion, kind) {
  const file = modelFile(apiVersion, kind);
  let src;
  try {
    src = readFileSync(file, "utf8");
  } catch {
    return apiVersion.includes("/") ? crdValidatorFor(apiVersion, kind) : null;
  }
  const m = src.match(/import\{validate\}from"([^"]+_schemas\/[^"]+\.js)"/);
  if (!m) throw new Error(`cannot find the schema import in ${file}`);
  const mod = await import(pathToFileURL(join(dirname(file), m[1])).href);
  return mod.validate;
}

// Wraps plain objects so that every property the validator reads is recorded by path.
function recording(value, path, seen) {
  if (value === null || typeof value !== "object") return value;
  return new Proxy(value, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver);
      if (typeof prop !== "string") return v;
      if (Object.prototype.hasOwnProperty.call(target, prop)) {
        seen.add(`${path}/${prop}`);
        return recording(v, `${path}/${prop}`, seen);
      }
      return v;
    },
    has(target, prop) {
      if (typeof prop === "string") seen.add(`${path}/${prop}`);
      return Reflect.has(target, prop);
    },
  });
}

function unknownFields(value, path, seen, out) {
  if (value === null || typeof value !== "object") return;
  for (const key of Object.keys(value)) {
    const p = `${path}/${key}`;
    if (!Array.isArray(value) && !seen.has(p)) {
      out.push(p);
      continue;
    }
    unknownFields(value[key], p, seen, out);
  }
}

let failures = 0;
let objects = 0;
for (const file of process.argv.slice(2)) {
  const docs = parseAllDocuments(readFileSync(file, "utf8"));
  for (const doc of docs) {
    if (doc.errors.length) {
      console.error(`${file}: YAML error: ${doc.errors[0].message}`);
      failures++;
      continue;
    }
    const obj = doc.toJS();
    if (obj === null || obj === undefined) continue;
    objects++;
    const name = `${file}: ${obj.kind ?? "?"}/${obj.metadata?.name ?? "?"}`;
    if (typeof obj.apiVersion !== "string" || typeof obj.kind !== "string") {
      console.error(`${name}: apiVersion and kind are required`);
      failures++;
      continue;
    }
    const validate = await validatorFor(obj.apiVersion, obj.kind);
    if (!validate) {
      console.error(`${name}: no schema for ${obj.apiVersion} ${obj.kind}`);
      failures++;
      continue;
    }
    const seen = new Set();
    const ok = validate(recording(obj, "", seen));
    const problems = ok ? [] : (validate.errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message ?? e.keyword} ${JSON.stringify(e.params ?? {})}`);
    const unknown = [];
    unknownFields(obj, "", seen, unknown);
    for (const u of unknown) problems.push(`${u} is not a field of ${obj.apiVersion} ${obj.kind}`);
    if (!obj.metadata?.name) problems.push("/metadata/name is required");
    if (problems.length) {
      failures++;
      for (const p of problems) console.error(`${name}: ${p}`);
    }
  }
}
console.log(`schema validation: ${objects} objects, ${failures} invalid`);
process.exit(failures === 0 && objects > 0 ? 0 : 1);
