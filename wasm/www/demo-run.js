// The digits demo's fixed run, with no page in it: decoding the assets `cargo xtask web-assets`
// writes, the batches in the host's epoch order, one training step, test accuracy. The page
// (app.js) and the Node package test (../e2e/package.test.mjs) both use it, so both run exactly
// the run the host oracle ran.

/** The files of wasm/www/assets/, besides manifest.json. */
export const ASSET_FILES = [
  "digits.plan",
  "train-pixels.u8",
  "train-labels.u8",
  "test-pixels.u8",
  "test-labels.u8",
  "epoch-order.u16",
  "init.f32",
  "loss-trace.f32",
];

/** Little-endian f32s (every platform a browser runs on is little-endian, but say so). */
export function f32le(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(bytes.byteLength >> 2);
  for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(4 * i, true);
  return out;
}

function u16le(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Uint16Array(bytes.byteLength >> 1);
  for (let i = 0; i < out.length; i++) out[i] = view.getUint16(2 * i, true);
  return out;
}

/**
 * The assets as typed arrays.
 * @param {object} manifest the parsed manifest.json
 * @param {(name: string) => Uint8Array} file the bytes of one of ASSET_FILES
 */
export function decodeAssets(manifest, file) {
  return {
    manifest,
    plan: file("digits.plan"),
    trainPixels: file("train-pixels.u8"),
    trainLabels: file("train-labels.u8"),
    testPixels: file("test-pixels.u8"),
    testLabels: file("test-labels.u8"),
    order: u16le(file("epoch-order.u16")),
    init: f32le(file("init.f32")),
    losses: f32le(file("loss-trace.f32")),
  };
}

/**
 * Writes the features of `pixels` rows `rows` into `x` (`[rows.length, features]`): each
 * pixel count times the manifest's scale (1/16, exact in f32, as the host computes them).
 */
export function fillFeatures(x, pixels, rows, features, scale) {
  for (let r = 0; r < rows.length; r++) {
    const src = rows[r] * features;
    for (let j = 0; j < features; j++) x[r * features + j] = pixels[src + j] * scale;
  }
}

/** The index of the largest element, the first of equals (NaN never wins), as the host's. */
export function argmax(row) {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
  return best;
}

/** The first index where two Float32Arrays differ in bits (NaNs equal), or -1. */
export function firstBitDifference(a, b) {
  const n = Math.min(a.length, b.length);
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < n; i++) {
    if (ua[i] !== ub[i] && !(Number.isNaN(a[i]) && Number.isNaN(b[i]))) return i;
  }
  return a.length === b.length ? -1 : n;
}

/**
 * The fixed run: `tapeplan demo`'s epochs over the training split, each in the host's shuffled
 * order, full batches only (the last `train_rows % batch` rows of each epoch are dropped).
 */
export class DemoRun {
  /** @param trainer a Trainer over assets.plan, its parameters loaded from assets.init */
  constructor(trainer, assets) {
    const m = assets.manifest;
    this.trainer = trainer;
    this.assets = assets;
    this.batch = m.batch;
    this.features = m.features;
    this.rows = m.train_rows;
    this.perEpoch = Math.floor(m.train_rows / m.batch);
    this.steps = m.epochs * this.perEpoch;
    this.step = 0;
    this.losses = new Float32Array(this.steps);
    this.x = new Float32Array(m.batch * m.features);
    this.y = new Float32Array(m.batch);
  }

  get done() {
    return this.step >= this.steps;
  }

  get epoch() {
    return Math.floor(this.step / this.perEpoch);
  }

  /** Fills x and y with batch `k` of the run (0-based). */
  fillBatch(k) {
    const epoch = Math.floor(k / this.perEpoch);
    const b = k % this.perEpoch;
    const start = epoch * this.rows + b * this.batch;
    const rows = this.assets.order.subarray(start, start + this.batch);
    fillFeatures(this.x, this.assets.trainPixels, rows, this.features, this.assets.manifest.pixel_scale);
    for (let r = 0; r < rows.length; r++) this.y[r] = this.assets.trainLabels[rows[r]];
  }

  /** Runs the next training step; answers its loss. */
  next() {
    this.fillBatch(this.step);
    const loss = this.trainer.trainStep(this.x, this.y);
    this.losses[this.step] = loss;
    this.step += 1;
    return loss;
  }
}

/** Correct answers of the `forward` entry over the test split (last batch padded with zeros). */
export function testCorrect(trainer, assets) {
  const { batch, features, pixel_scale: scale } = assets.manifest;
  const n = assets.testLabels.length;
  const x = new Float32Array(batch * features);
  let correct = 0;
  for (let start = 0; start < n; start += batch) {
    const rows = [];
    for (let r = start; r < Math.min(start + batch, n); r++) rows.push(r);
    x.fill(0);
    fillFeatures(x, assets.testPixels, rows, features, scale);
    const logits = trainer.forward(x);
    const classes = logits.length / batch;
    rows.forEach((row, r) => {
      if (argmax(logits.subarray(r * classes, (r + 1) * classes)) === assets.testLabels[row]) correct++;
    });
  }
  return correct;
}

/**
 * The median time of one train step, in milliseconds: `blocks` blocks of `perBlock` steps
 * (after a warm-up block), each timed with `now()`, on a trainer of its own.
 */
export function medianStepMs(trainer, assets, now, blocks = 101, perBlock = 25) {
  const run = new DemoRun(trainer, assets);
  const batches = [];
  for (let k = 0; k < run.perEpoch; k++) {
    run.fillBatch(k);
    batches.push([run.x.slice(), run.y.slice()]);
  }
  let k = 0;
  const block = () => {
    const t0 = now();
    for (let i = 0; i < perBlock; i++, k++) {
      const [x, y] = batches[k % batches.length];
      trainer.trainStep(x, y);
    }
    return (now() - t0) / perBlock;
  };
  block();
  const times = [];
  for (let b = 0; b < blocks; b++) times.push(block());
  times.sort((a, b) => a - b);
  return times[times.length >> 1];
}
