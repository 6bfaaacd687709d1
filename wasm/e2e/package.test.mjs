// The Node package (`wasm-pack build --target nodejs` into wasm/pkg-node) used as a JavaScript
// user would: typed arrays in and out, Errors thrown, the fixed demo run equal to the host
// oracle. Run by `cargo xtask wasm-test` as `node --test wasm/e2e/`.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

import { ASSET_FILES, DemoRun, decodeAssets, firstBitDifference, testCorrect } from "../www/demo-run.js";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const require = createRequire(import.meta.url);
const { Trainer, digestF32 } = require(here("../pkg-node/tapeplan_wasm.js"));

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
