// The Node package (`wasm-pack build --target nodejs` into wasm/pkg-node) used as a JavaScript
// user would: typed arrays in and out, Errors thrown, the fixed demo run equal to the host
// oracle. Run by `cargo xtask wasm-test` as `node --test wasm/e2e/`.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

import { ASSET_FILES, DemoRun, decodeAssets, firstBitDifference, testCorrect } from "../www/demo-run.js";
import {
  exponential, fixed, metricsText, parseF32, readCsv, readSafetensors, reportLines, startRun,
} from "../www/own-run.js";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const require = createRequire(import.meta.url);
const pkg = require(here("../pkg-node/tapeplan_wasm.js"));
const { Trainer, digestF32 } = pkg;

const manifest = JSON.parse(readFileSync(here("../www/assets/manifest.json"), "utf8"));
const files = Object.fromEntries(
  ASSET_FILES.map((n) => [n, new Uint8Array(readFileSync(here(`../www/assets/${n}`)))]),
);
const assets = decodeAssets(manifest, (n) => files[n]);

function trainer() {
  const t = new Trainer(assets.plan);
  t.loadParameters(assets.init);
  return t;
}

test("the fixed demo run equals the host oracle, bit for bit", () => {
  const t = trainer();
  assert.equal(t.digest(), manifest.init_digest);
  const run = new DemoRun(t, assets);
  while (!run.done) run.next();
  assert.equal(run.steps, manifest.steps);
  assert.equal(firstBitDifference(run.losses, assets.losses), -1);
  assert.equal(digestF32(run.losses), manifest.loss_trace_digest);
  assert.equal(t.digest(), manifest.digest);
  assert.equal(testCorrect(t, assets), manifest.test_correct);
  t.free();
});

test("bad plan bytes throw an Error carrying the runtime's message", () => {
  for (const bad of [new Uint8Array(0), assets.plan.subarray(0, 100), new TextEncoder().encode("plan?")]) {
    assert.throws(() => new Trainer(bad), (e) => e instanceof Error && /^plan rejected: /.test(e.message));
  }
  const flipped = assets.plan.slice();
  flipped[flipped.length - 1] ^= 1;
  assert.throws(() => new Trainer(flipped), Error);
});

test("hostile bytes never trap: every rejection is an Error, not a WebAssembly.RuntimeError", () => {
  // A fixed xorshift stream, so a failure reproduces.
  let seed = 0x9e3779b9;
  const rand = (n) => {
    seed ^= seed << 13; seed >>>= 0;
    seed ^= seed >>> 17;
    seed ^= seed << 5; seed >>>= 0;
    return seed % n;
  };
  let rejected = 0;
  for (let i = 0; i < 3000; i++) {
    const bytes = assets.plan.slice(0, 1 + rand(assets.plan.length));
    for (let k = rand(4); k >= 0; k--) bytes[rand(bytes.length)] = rand(256);
    try {
      new Trainer(bytes).free();
    } catch (e) {
      assert.ok(!(e instanceof WebAssembly.RuntimeError), `trap on case ${i}: ${e}`);
      assert.ok(e instanceof Error && e.message.startsWith("plan rejected: "), String(e));
      rejected++;
    }
  }
  assert.ok(rejected > 2900, `${rejected} of 3000 rejected`);
  // The module still works after all that.
  assert.equal(trainer().digest(), manifest.init_digest);
});

test("parameters by name and all at once, as Float32Arrays", () => {
  const t = trainer();
  assert.deepEqual(t.parameterNames(), ["w1", "b1", "w2", "b2"]);
  assert.deepEqual(Array.from(t.parameterShape("w1")), [64, 32]);
  const all = t.parameters();
  assert.ok(all instanceof Float32Array);
  assert.equal(all.length, t.parameterElems);
  assert.deepEqual(all, assets.init);
  const w2 = t.parameter("w2");
  assert.deepEqual(w2, assets.init.subarray(64 * 32 + 32, 64 * 32 + 32 + 320));
  w2.fill(0.5);
  t.loadParameter("w2", w2);
  assert.deepEqual(t.parameter("w2"), w2);
  assert.throws(() => t.loadParameter("w2", new Float32Array(3)), /3 elements given where the tensor has 320/);
  assert.throws(() => t.loadParameter("w7", new Float32Array(3)), /no parameter of that name/);
  const u = new Trainer(assets.plan);
  u.loadPersistent(t.persistent());
  assert.equal(u.digest(), t.digest());
});

test("entries by name: inputs, run, outputs", () => {
  const t = trainer();
  assert.deepEqual(t.entryNames().sort(), ["forward", "train_step"]);
  assert.deepEqual(t.inputNames("train_step").sort(), ["labels", "x"]);
  const run = new DemoRun(t, assets);
  run.fillBatch(0);
  t.setInput("train_step", "x", run.x);
  t.setInput("train_step", "labels", run.y);
  t.run("train_step");
  const [loss] = t.output("train_step", "loss");
  assert.equal(Math.fround(loss), assets.losses[0]);
  assert.throws(() => t.run("backward"), /no entry named "backward"/);
});

test("TypeScript declarations describe the API", () => {
  for (const dts of ["../pkg-node/tapeplan_wasm.d.ts", "../www/pkg/tapeplan_wasm.d.ts"]) {
    const text = readFileSync(here(dts), "utf8");
    assert.match(text, /export class Trainer/);
    assert.match(text, /trainStep\(x: Float32Array[^,]*, target: Float32Array[^)]*\): number;/);
    assert.match(text, /forward\(x: Float32Array[^)]*\): Float32Array;/);
    assert.match(text, /parameters\(\): Float32Array;/);
    assert.match(text, /digest\(\): string;/);
    assert.match(text, /constructor\(bytes: Uint8Array[^)]*\);/);
  }
});

test("numbers are written as Rust's format! writes them (ties to even)", () => {
  // Each expected text printed by rustc 1.95's `format!` for the same f64.
  const cases = [
    [0.0625, "0.062", "0.062500", "6.2500e-2"],
    [0.1875, "0.188", "0.187500", "1.8750e-1"],
    [0.5, "0.500", "0.500000", "5.0000e-1"],
    [2.5, "2.500", "2.500000", "2.5000e0"],
    [0.0078125, "0.008", "0.007812", "7.8125e-3"],
    [0.5078125, "0.508", "0.507812", "5.0781e-1"],
    [-0, "-0.000", "-0.000000", "-0.0000e0"],
    [0.00012345, "0.000", "0.000123", "1.2345e-4"],
    [0.000999995, "0.001", "0.001000", "1.0000e-3"],
    [1.25e-5, "0.000", "0.000013", "1.2500e-5"],
    [3, "3.000", "3.000000", "3.0000e0"],
  ];
  for (const [x, f3, f6, e4] of cases) {
    assert.equal(fixed(x, 3), f3, `${x}`);
    assert.equal(fixed(x, 6), f6, `${x}`);
    assert.equal(exponential(x, 4), e4, `${x}`);
  }
  assert.equal(fixed(0.5, 0), "0");
  assert.equal(fixed(1.5, 0), "2");
  // 1 of 16 correct is 0.0625 exactly: Rust prints 0.062 (JavaScript's toFixed would say 0.063).
  assert.equal(metricsText([1, 1, 16]), "accuracy: 0.062");
  assert.equal(metricsText([2, 0.25, 0.000675]), "MSE: 0.250000, MAE: 6.7500e-4");
});

test("a TrainRun trains a plan on a CSV, initialized by Glorot or by a safetensors file", () => {
  // The demo's 64-32-10 MLP on the first 200 test digits, label last, with a header.
  const rows = ["p" + Array.from({ length: 64 }, (_, j) => j).join(",p") + ",digit"];
  for (let i = 0; i < 200; i++) {
    rows.push([...assets.testPixels.subarray(64 * i, 64 * i + 64), assets.testLabels[i]].join(","));
  }
  const csv = rows.join("\n");
  const options = { epochs: 2, seed: 7, scale: 0.0625, valFraction: 0.25 };
  const { run, init } = startRun(pkg, { plan: assets.plan, csv, init: null }, options);
  assert.equal(init, "the MLP's seeded Glorot initialization");
  assert.deepEqual(run.tensorNames(), ["w1", "b1", "w2", "b2"]);
  // 200 rows: 160 train, 40 of them validation: 120 rows, 3 steps of 32 per epoch.
  assert.equal(run.stepsPerEpoch, 3);
  let steps = 0;
  while (!run.done) steps += run.advance(2);
  assert.equal(steps, 6);
  assert.equal(run.losses().length, 6);
  const lines = reportLines(run);
  // The demo plan's arena: 27 328 bytes since the transpose of w2 is folded into the product
  // that reads it (matmul_nt), 28 608 since the SGD update is fused into the weight gradients'
  // products, 30 144 before (docs/benchmarks.md, "Memory of a training step").
  assert.equal(lines[0], "training for 2 epochs: 120 train rows, 40 validation rows, 40 test rows, batch 32, arena 27328 bytes");
  assert.match(lines[1], /^epoch {3}1: mean loss \d\.\d{6}, validation accuracy: 0\.\d{3}$/);
  assert.match(lines[3], /^test accuracy: 0\.\d{3}$/);
  assert.match(lines[4], /^parameter digest: 0x[0-9a-f]{16}$/);
  const digest = run.parameterDigest();

  // The same run from a safetensors file holding the Glorot values (those of a run that has
  // not stepped) gives the same digest.
  const fresh = startRun(pkg, { plan: assets.plan, csv, init: null }, options).run;
  const header = {};
  const parts = [];
  let at = 0;
  for (const name of fresh.tensorNames()) {
    const values = fresh.parameter(name);
    header[name] = { dtype: "F32", shape: Array.from(fresh.parameterShape(name)), data_offsets: [at, at + 4 * values.length] };
    parts.push(new Uint8Array(values.buffer, values.byteOffset, values.byteLength));
    at += 4 * values.length;
  }
  fresh.free();
  const json = new TextEncoder().encode(JSON.stringify(header));
  const file = new Uint8Array(8 + json.length + at);
  new DataView(file.buffer).setBigUint64(0, BigInt(json.length), true);
  file.set(json, 8);
  let o = 8 + json.length;
  for (const p of parts) { file.set(p, o); o += p.length; }
  assert.deepEqual([...readSafetensors(file).keys()], ["w1", "b1", "w2", "b2"]);
  const { run: fromFile, init: how } = startRun(pkg, { plan: assets.plan, csv, init: file }, options);
  assert.equal(how, "4 tensors from the initial-parameters file");
  while (!fromFile.done) fromFile.advance(100);
  assert.equal(fromFile.parameterDigest(), digest);
  run.free();
  fromFile.free();

  // What does not fit is an Error naming it.
  assert.throws(() => startRun(pkg, { plan: assets.plan, csv: "1,2,3\n4,5,6\n", init: null }),
    /the data has 2 features per row; the plan's input x is \[32, 64\] \(64 per row\)/);
  assert.throws(() => startRun(pkg, { plan: assets.plan, csv, init: new Uint8Array(4) }),
    /not a safetensors file/);
});

test("CSV text is read as `tapeplan train` reads it", () => {
  const t = readCsv("a,b,label\r\n1, 2.5 ,dog\n\n-3,4e-1,cat\n5,6,dog\n", 0);
  assert.deepEqual(Array.from(t.features), [1, 2.5, -3, Math.fround(0.4), 5, 6]);
  assert.deepEqual(Array.from(t.targets), [1, 0, 1]);
  assert.deepEqual(t.classNames, ["cat", "dog"]);
  assert.equal(t.nFeatures, 2);
  // Class names in UTF-8 byte order (Rust's String order), not UTF-16's.
  assert.deepEqual(readCsv("1,\u{1F600}\n2,\uFF21\n3,b\n", 0).classNames, ["b", "\uFF21", "\u{1F600}"]);
  const n = readCsv("0.5,1,2\n1.5,3,0.0\n", 0);
  assert.deepEqual([n.nFeatures, ...n.targets, n.classNames.length], [2, 2, 0, 0]);
  const r = readCsv("1,2,3,4\n", 2);
  assert.deepEqual([...r.features, ...r.targets], [1, 2, 3, 4]);
  for (const [text, width, wanted] of [
    ["x,y\n", 0, "the CSV has no data rows"],
    ["1,2\n3\n", 0, "line 2: 1 columns where the first data row has 2"],
    ["1,2\nx,3\n", 0, 'line 2, column 1: "x" is not a number'],
    ["1,inf\n", 0, 'line 1, column 2: "inf" is not an integer label'],
    ["1,2.5\n", 0, 'line 1, column 2: "2.5" is not an integer label'],
    ["1,1e40,0\n", 0, 'line 1, column 2: "1e40" is not finite'],
    ["nan,0\n", 0, 'line 1, column 1: "nan" is not finite'],
    ["0x10,0\n", 0, 'line 1, column 1: "0x10" is not a number'],
    ["1,300\n", 0, "line 1, column 2: label 300 is outside 0..=255"],
    ['1,"a"\n', 0, "line 1: quoted fields are not read here"],
    ["1\n", 0, "the rows have 1 columns: too few for 1 target column(s) and a feature"],
    ["1,2\n", 2, "the rows have 2 columns: too few for 2 target column(s) and a feature"],
  ]) {
    assert.throws(() => readCsv(text, width), (e) => e.message.startsWith(wanted), `${JSON.stringify(text)}`);
  }
});

test("decimals become f32 as Rust's parse::<f32>() makes them: rounded once", () => {
  const bits = (x) => new Uint32Array(new Float32Array([x]).buffer)[0];
  // 1 + 2^-24 is the midpoint of 1 and 1 + 2^-23: a decimal a hair above it rounds up, one
  // a hair below rounds down, the midpoint itself to even (1). Through f64 (parseFloat, then
  // Math.fround) the first two would both land on the midpoint and round to 1.
  assert.equal(bits(parseF32("1.00000005960464477539062500000001")), 0x3f800001);
  assert.equal(bits(parseF32("1.00000005960464477539062499999999")), 0x3f800000);
  assert.equal(bits(parseF32("1.000000059604644775390625")), 0x3f800000);
  assert.equal(bits(parseF32("-1.00000005960464477539062500000001")), 0xbf800001);
  // 1 + 3·2^-24, the midpoint of 1 + 2^-23 and 1 + 2^-22: exactly on it, ties to even (up).
  assert.equal(bits(parseF32("1.000000178813934326171875")), 0x3f800002);
  assert.equal(bits(parseF32("0.1")), 0x3dcccccd);
  assert.equal(bits(parseF32("1e-46")), 0);
  assert.equal(bits(parseF32("-1.4e-45")), 0x80000001);
  assert.equal(parseF32("1e39"), Infinity);
  assert.equal(parseF32("-inf"), -Infinity);
  for (const bad of ["", ".", "1e", "e5", "0x1", "1_0", "1,0", " 1"]) assert.ok(Number.isNaN(parseF32(bad)), bad);
  for (const good of ["1.", ".5", "+2", "00012", "1E+3"]) assert.ok(Number.isFinite(parseF32(good)), good);
});
