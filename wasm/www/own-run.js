// A run of the user's own plan, CSV and initial parameters, with no page in it: the file
// readers around the package's `TrainRun` (which does the rest in Rust: the CSV's rows, the
// split, the epoch order, the digest) and its report in `tapeplan train`'s words (the numbers
// are formatted here, not in the module, which stays smaller without Rust's float formatting).
// The page (own.js), Node (../e2e/train-plan.mjs) and the package test use it.

import { f32le } from "./demo-run.js";

/**
 * The tensors of a safetensors file (an 8-byte little-endian header length, a JSON header, the
 * tensors' bytes): `Map<name, {dtype, shape, bytes}>`. Throws on a malformed file.
 * @param {Uint8Array} bytes
 */
export function readSafetensors(bytes) {
  if (bytes.length < 8) throw new Error("not a safetensors file: shorter than its 8-byte header length");
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLen = Number(view.getBigUint64(0, true));
  if (headerLen > bytes.length - 8) throw new Error("not a safetensors file: its header runs past the end");
  let header;
  try {
    header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + headerLen)));
  } catch (e) {
    throw new Error(`not a safetensors file: its header is not JSON (${e.message})`);
  }
  const data = bytes.subarray(8 + headerLen);
  const out = new Map();
  for (const [name, t] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const [a, b] = t.data_offsets ?? [];
    if (!(a <= b && b <= data.length)) throw new Error(`safetensors: ${name}'s data_offsets are out of range`);
    out.set(name, { dtype: t.dtype, shape: t.shape, bytes: data.subarray(a, b) });
  }
  return out;
}

/**
 * Gives a TrainRun its initial parameters as `tapeplan train` does: from a safetensors file
 * under the plan's names (`--init`; `PLAN.init.safetensors` beside a plan from ONNX or the layer
 * API), else the `--layers` MLP's seeded Glorot initialization (the run throws for any other
 * plan). Answers what was done, for the page.
 * @param run a TrainRun
 * @param {Uint8Array | null} init the safetensors file's bytes, or null
 */
export function loadInitial(run, init) {
  if (!init) {
    run.glorot();
    return "the MLP's seeded Glorot initialization";
  }
  const file = readSafetensors(init);
  let n = 0;
  for (const name of run.tensorNames()) {
    const t = file.get(name);
    if (!t) continue; // the run names what is missing at its first step
    if (t.dtype !== "F32") throw new Error(`initial parameters: ${name} is ${t.dtype}, not F32`);
    const want = Array.from(run.parameterShape(name));
    if (t.shape.length !== want.length || t.shape.some((d, i) => d !== want[i])) {
      throw new Error(`initial parameters: ${name} is [${t.shape}], the plan's is [${want}]`);
    }
    run.loadParameter(name, f32le(t.bytes));
    n++;
  }
  return `${n} tensors from the initial-parameters file`;
}

/**
 * A CSV file's text; a gzip file (by its magic bytes) is decompressed first.
 * @param {Uint8Array} bytes
 */
export async function csvText(bytes) {
  if (bytes[0] === 0x1f && bytes[1] === 0x8b) {
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return await new Response(stream).text();
  }
  return new TextDecoder().decode(bytes);
}

/** `tapeplan train`'s defaults for the run's options. */
export const DEFAULTS = {
  epochs: 10, seed: 42, splitSeed: 0, trainFraction: 0.8, valFraction: 0, scale: 1, standardize: false,
};

/**
 * A new TrainRun over the files, with its initial parameters loaded.
 * @param TrainRun the package's class
 * @param {{plan: Uint8Array, csv: string, init: Uint8Array | null}} files
 * @param {object} options as DEFAULTS
 */
export function startRun(TrainRun, files, options = {}) {
  const o = { ...DEFAULTS, ...options };
  const run = new TrainRun(files.plan, files.csv, o.epochs, BigInt(o.seed), BigInt(o.splitSeed),
    o.trainFraction, o.valFraction, o.scale, o.standardize);
  try {
    return { run, init: loadInitial(run, files.init) };
  } catch (e) {
    run.free();
    throw e;
  }
}

// ---- the report, in `tapeplan train`'s words ----------------------------------------------

/** A finite number's exact value as sign and the fraction num / den (BigInts). */
function exact(x) {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const hi = view.getUint32(0), lo = view.getUint32(4);
  const biased = (hi >>> 20) & 0x7ff;
  let m = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
  let e = -1074;
  if (biased !== 0) {
    m |= 1n << 52n;
    e = biased - 1075;
  }
  const sign = hi >>> 31 ? "-" : "";
  return e >= 0 ? { sign, num: m << BigInt(e), den: 1n } : { sign, num: m, den: 1n << BigInt(-e) };
}

/** num / den rounded to an integer, ties to even (Rust's rule for exact ties). */
function roundHalfEven(num, den) {
  const q = num / den, r2 = 2n * (num % den);
  return r2 > den || (r2 === den && q % 2n === 1n) ? q + 1n : q;
}

/** `x` with `d` decimals, as Rust's `format!("{x:.d}")` writes an `f64` (ties to even). */
export function fixed(x, d) {
  const { sign, num, den } = exact(x);
  const s = roundHalfEven(num * 10n ** BigInt(d), den).toString().padStart(d + 1, "0");
  return sign + (d ? `${s.slice(0, -d)}.${s.slice(-d)}` : s);
}

/** `x` with `d` decimals in scientific notation, as Rust's `format!("{x:.de}")` (`1.2345e-4`). */
export function exponential(x, d) {
  const { sign, num, den } = exact(x);
  if (num === 0n) return `${sign}0${d ? "." + "0".repeat(d) : ""}e0`;
  const pow = (k) => (k >= 0 ? [10n ** BigInt(k), 1n] : [1n, 10n ** BigInt(-k)]);
  const atLeast = (k) => { const [a, b] = pow(k); return num * b >= a * den; }; // |x| ≥ 10^k
  let k = Math.floor(Math.log10(Math.abs(x)));
  while (!atLeast(k)) k--;
  while (atLeast(k + 1)) k++;
  const [a, b] = pow(k - d);
  let n = roundHalfEven(num * b, den * a);
  if (n === 10n ** BigInt(d + 1)) {
    n = 10n ** BigInt(d);
    k++;
  }
  const s = n.toString();
  return `${sign}${s[0]}${d ? "." + s.slice(1) : ""}e${k}`;
}

/** A split's metrics (`[1, correct, rows]` or `[2, mse, mae]`) as `tapeplan train` prints them. */
export function metricsText(m) {
  if (m[0] === 1) return `accuracy: ${fixed(Math.fround(m[1] / m[2]), 3)}`;
  const show = (v) => (v !== 0 && Math.abs(v) < 1e-3 ? exponential(v, 4) : fixed(v, 6));
  return `MSE: ${show(m[1])}, MAE: ${show(m[2])}`;
}

/**
 * The run's report so far as `tapeplan train` prints it: the split, the class names, each
 * epoch's mean loss and validation metrics (and skipped steps), then the test metrics and the
 * parameter digest when the run is over.
 * @param run a TrainRun
 */
export function reportLines(run) {
  const lines = run.header();
  for (let k = 0; k < run.epochsDone; k++) {
    const [mean, refused, ...val] = run.epochReport(k);
    const epoch = String(k + 1).padStart(3);
    if (refused > 0) lines.push(`epoch ${epoch}: skipped ${refused} non-finite step(s) (guarded: nothing committed)`);
    lines.push(`epoch ${epoch}: mean loss ${fixed(mean, 6)}${val.length ? `, validation ${metricsText(val)}` : ""}`);
  }
  if (run.done) {
    const test = run.testMetrics();
    if (test.length) lines.push(`test ${metricsText(test)}`);
    lines.push(`parameter digest: ${run.parameterDigest()}`);
  }
  return lines;
}
