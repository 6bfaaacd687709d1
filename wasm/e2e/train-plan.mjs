// Trains any single-input classification plan (`tapeplan plan …`) in Node with the WebAssembly
// package, as a page would in a browser: the plan's bytes, its initial parameters from a
// safetensors file under the plan's names (`PLAN.init.safetensors`, `tapeplan export`), the rows
// of a CSV (a header line, the features, the label last). The batches are the file's rows in
// order (no shuffle, the last partial batch left out). docs/getting-started/train-in-a-browser.md.
//
//   wasm-pack build --target nodejs --out-dir pkg-node     # in wasm/
//   node wasm/e2e/train-plan.mjs PLAN INIT.safetensors DATA.csv EPOCHS

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const { Trainer } = createRequire(import.meta.url)(here("../pkg-node/tapeplan_wasm.js"));

const [planPath, initPath, csvPath, epochsArg] = process.argv.slice(2);
if (!csvPath) {
  console.error("usage: node train-plan.mjs PLAN INIT.safetensors DATA.csv [EPOCHS]");
  process.exit(2);
}
const epochs = Number(epochsArg ?? 5);
const t = new Trainer(new Uint8Array(readFileSync(planPath)));

// safetensors: an 8-byte little-endian header length, a JSON header, the tensors' bytes.
const st = readFileSync(initPath);
const headerLen = Number(st.readBigUInt64LE(0));
const header = JSON.parse(st.subarray(8, 8 + headerLen).toString("utf8"));
let loaded = 0;
for (const name of t.parameterNames()) {
  const h = header[name];
  if (!h) continue; // optimizer state: the plan's `init` entry sets it
  if (h.dtype !== "F32") throw new Error(`${initPath}: ${name} is ${h.dtype}, not F32`);
  const [a, b] = h.data_offsets;
  const bytes = st.subarray(8 + headerLen + a, 8 + headerLen + b);
  t.loadParameter(name, new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length)));
  loaded += 1;
}
if (t.entryNames().includes("init")) t.run("init");

const shape = Array.from(t.inputShape("train_step", "x")); // [batch, …]: a row is the rest
const batch = shape[0];
const dIn = shape.slice(1).reduce((a, b) => a * b, 1);
const rows = readFileSync(csvPath, "utf8").trim().split("\n").slice(1).map((l) => l.split(",").map(Number));
if (rows[0].length !== dIn + 1) throw new Error(`${csvPath}: ${rows[0].length - 1} features, the plan's x takes ${dIn}`);
console.log(`plan ${planPath}: ${t.arenaBytes} arena bytes, batch ${batch}, ${dIn} features; ${loaded} tensors from ${initPath}; ${rows.length} rows`);

const x = new Float32Array(batch * dIn);
const labels = new Float32Array(batch);
const steps = Math.floor(rows.length / batch);
for (let epoch = 1; epoch <= epochs; epoch++) {
  let sum = 0;
  for (let s = 0; s < steps; s++) {
    for (let r = 0; r < batch; r++) {
      const row = rows[s * batch + r];
      x.set(row.slice(0, dIn), r * dIn);
      labels[r] = row[dIn];
    }
    sum += t.trainStep(x, labels);
  }
  console.log(`epoch ${epoch}: mean loss ${(sum / steps).toFixed(6)}`);
}
console.log(`digest ${t.digest()}`);
