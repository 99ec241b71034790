// Validates Kubernetes manifests offline against the Kubernetes OpenAPI
// schemas that npm's kubernetes-models compiles into its model classes.
//
//   node deploy/validate_k8s.mjs NODE_PREFIX FILE.yaml...
//
// NODE_PREFIX is the directory whose node_modules holds the packages of
// deploy/npm/package.json (deploy/setup.sh installs them in
// /opt/lockstep-npm). For every YAML document in every file it
//   1. picks the model class from apiVersion + kind (an unknown pair is an
//      error: a typo in either would otherwise skip validation),
//   2. runs the class's validate() (types, required fields, enums, formats),
//   3. rejects fields the schema does not know. The OpenAPI schemas allow
//      unknown fields (the API server drops them silently, so a misspelt
//      `readinesProbe` would vanish); the schema's compiled validator reads
//      exactly the fields it knows, so every key of a plain object that the
//      validator never read is unknown. Objects the validator enumerates
//      (label maps, free-form maps) accept any key.
// Prints one line per document; exits 1 if any document is invalid, 2 on
// usage errors.
import { readFileSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [prefixArg, ...files] = process.argv.slice(2);
const prefix = prefixArg ? resolve(prefixArg) : prefixArg;
if (!prefix || files.length === 0) {
  console.error("usage: node validate_k8s.mjs NODE_PREFIX FILE.yaml...");
  process.exit(2);
}
const modules = join(prefix, "node_modules");
if (!existsSync(join(modules, "kubernetes-models"))) {
  console.error(`validate_k8s: ${modules}/kubernetes-models is missing (run deploy/setup.sh)`);
  process.exit(2);
}
const YAML = createRequire(join(prefix, "package.json"))("yaml");

// Wraps an object tree in proxies that record which keys are read.
const records = new WeakMap(); // target -> { read: Set, enumerated: bool, proxy }
function track(value) {
  if (value === null || typeof value !== "object") return value;
  let rec = records.get(value);
  if (rec) return rec.proxy;
  rec = { read: new Set(), enumerated: false, proxy: null };
  records.set(value, rec);
  rec.proxy = new Proxy(value, {
    get(t, k, r) { rec.read.add(k); return track(Reflect.get(t, k, r)); },
    has(t, k) { rec.read.add(k); return Reflect.has(t, k); },
    getOwnPropertyDescriptor(t, k) { rec.read.add(k); return Reflect.getOwnPropertyDescriptor(t, k); },
    ownKeys(t) { rec.enumerated = true; return Reflect.ownKeys(t); },
  });
  return rec.proxy;
}
function unknownFields(value, path, out) {
  if (Array.isArray(value)) {
    value.forEach((v, i) => unknownFields(v, `${path}[${i}]`, out));
    return;
  }
  if (value === null || typeof value !== "object") return;
  const rec = records.get(value);
  for (const k of Object.keys(value)) {
    const p = path ? `${path}.${k}` : k;
    if (!rec || (!rec.enumerated && !rec.read.has(k))) {
      out.push(p);
      continue;
    }
    unknownFields(value[k], p, out);
  }
}

async function modelFile(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string" || !/^[A-Za-z0-9]+$/.test(kind)) {
    return null;
  }
  // "v1" -> v1/, "apps/v1" -> apps/v1/, "networking.k8s.io/v1" -> networking.k8s.io/v1/
  if (!/^([a-z0-9.-]+\/)?v[0-9]+((alpha|beta)[0-9]+)?$/.test(apiVersion)) return null;
  const file = join(modules, "kubernetes-models", apiVersion, `${kind}.js`);
  return existsSync(file) ? file : null;
}

let bad = 0;
for (const file of files) {
  let docs;
  try {
    docs = YAML.parseAllDocuments(readFileSync(file, "utf8"));
  } catch (e) {
    console.log(`${file}: cannot read: ${e.message}`);
    bad++;
    continue;
  }
  let n = 0;
  for (const doc of docs) {
    n++;
    const where = `${file} document ${n}`;
    if (doc.errors.length > 0) {
      console.log(`${where}: invalid YAML: ${doc.errors[0].message}`);
      bad++;
      continue;
    }
    const obj = doc.toJS();
    if (obj === null || obj === undefined) continue; // empty document
    if (typeof obj !== "object" || Array.isArray(obj)) {
      console.log(`${where}: expected a mapping with apiVersion and kind`);
      bad++;
      continue;
    }
    const name = `${obj.kind}/${obj.metadata?.name ?? "?"}`;
    const model = await modelFile(obj.apiVersion, obj.kind);
    if (model === null) {
      console.log(`${where} (${name}): unknown apiVersion/kind ${obj.apiVersion}/${obj.kind}`);
      bad++;
      continue;
    }
    const mod = await import(pathToFileURL(model).href);
    const Cls = mod[obj.kind];
    try {
      new Cls(obj).validate();
    } catch (e) {
      console.log(`${where} (${name}): ${e.message}`);
      bad++;
      continue;
    }
    // The raw schema validator the class uses, run on a tracked copy.
    const schemaName = readFileSync(model, "utf8").match(/_schemas\/(\w+)\.js/)?.[1];
    if (!schemaName) {
      console.log(`${where} (${name}): cannot find the schema of ${model}`);
      bad++;
      continue;
    }
    const { validate } = await import(
      pathToFileURL(join(modules, "kubernetes-models", "_schemas", `${schemaName}.js`)).href);
    const copy = structuredClone(obj);
    validate(track(copy));
    const unknown = [];
    unknownFields(copy, "", unknown);
    if (unknown.length > 0) {
      console.log(`${where} (${name}): unknown field(s) ${unknown.join(", ")}`);
      bad++;
      continue;
    }
    console.log(`${where} (${name}): valid ${obj.apiVersion} ${obj.kind}`);
  }
}
process.exit(bad === 0 ? 0 : 1);
