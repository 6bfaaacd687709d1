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

// ---- the CSV, as `tapeplan train` reads it ------------------------------------------------

/** Rust's `f32`/`f64` `FromStr` grammar: a decimal with an optional exponent, or inf/nan. */
const DECIMAL = /^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$/;
const SPECIAL = /^[+-]?(?:inf|infinity|nan)$/i;

/** Whether Rust's `text.parse::<f64>()` (or `f32`) succeeds. */
export function isNumber(text) {
  return DECIMAL.test(text) || SPECIAL.test(text);
}

/** The exact value of a decimal string as sign, digits and a power of ten (BigInt, int). */
function decimalParts(text) {
  const m = /^([+-]?)([0-9]*)\.?([0-9]*)(?:[eE]([+-]?[0-9]+))?$/.exec(text);
  return { digits: BigInt(`${m[2]}${m[3]}` || "0"), exp: Number(m[4] ?? 0) - m[3].length };
}

/**
 * `text.parse::<f32>()` as Rust computes it: the decimal rounded once, to the nearest `f32`
 * (ties to even), not through `f64`. `NaN` when Rust's parse fails.
 */
export function parseF32(text) {
  if (!isNumber(text)) return NaN;
  const v = Number(text.replace(/inf(inity)?$/i, "Infinity"));
  const f = Math.fround(v);
  if (!Number.isFinite(v) || f === v) return f;
  // v is the decimal rounded to f64; rounding it again to f32 is the decimal's rounding unless
  // v fell exactly on the midpoint of two f32s: then the decimal decides (it may be just above
  // or below the midpoint, or on it: ties to even, which Math.fround did).
  const bits = new Uint32Array(new Float32Array([f]).buffer)[0];
  const other = new Float32Array(new Uint32Array([Math.abs(f) < Math.abs(v) ? bits + 1 : bits - 1]).buffer)[0];
  if ((f + other) / 2 !== v) return f;
  const { digits, exp } = decimalParts(text);
  const { num, den } = exact(Math.abs(v));
  // Compare digits · 10^exp with num / den.
  const lhs = exp >= 0 ? digits * 10n ** BigInt(exp) * den : digits * den;
  const rhs = exp >= 0 ? num : num * 10n ** BigInt(-exp);
  if (lhs === rhs) return f;
  const above = lhs > rhs; // |decimal| > |midpoint|
  const far = Math.abs(f) > Math.abs(other) ? f : other, near = far === f ? other : f;
  return above ? far : near;
}

/** `text.parse::<i64>()`'s grammar and range. */
function parseI64(text) {
  if (!/^[+-]?[0-9]+$/.test(text)) return null;
  const v = BigInt(text);
  return v >= -(2n ** 63n) && v < 2n ** 63n ? v : null;
}

/** UTF-8 byte order (Rust's `String` order), for class names. */
function byteOrder(a, b) {
  const x = new TextEncoder().encode(a), y = new TextEncoder().encode(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

/**
 * Reads a CSV's text as `tapeplan train` reads it for a plan: comma-separated fields, each
 * trimmed, blank lines skipped; the first row a header when none of its fields is a number;
 * every row as wide as the first data row; the features the first columns, finite numbers
 * (decimal to `f32` exactly); then one label column (`targetWidth` 0: integers 0..=255, or
 * class names, class k the k-th of the sorted names) or `targetWidth` float targets. Quoted
 * fields are not read (an error says so). Throws an Error naming the line and column.
 * @param {string} text
 * @param {number} targetWidth from the package's `targetWidth(plan)`
 */
export function readCsv(text, targetWidth) {
  const rows = [];
  const lines = text.replace(/^\uFEFF/, "").split(/\r?\n/);
  for (let k = 0; k < lines.length; k++) {
    if (lines[k].trim() === "") continue;
    if (lines[k].includes('"')) {
      throw new Error(`line ${k + 1}: quoted fields are not read here (use \`tapeplan train\`, or write the CSV without quotes)`);
    }
    const fields = lines[k].split(",").map((f) => f.trim());
    if (rows.length === 0 && !rows.header && fields.every((f) => !isNumber(f))) {
      rows.header = fields;
      continue;
    }
    rows.push([k + 1, fields]);
  }
  if (rows.length === 0) throw new Error("the CSV has no data rows");
  const width = rows[0][1].length;
  const nt = targetWidth || 1;
  if (nt >= width) throw new Error(`the rows have ${width} columns: too few for ${nt} target column(s) and a feature`);
  const nf = width - nt;
  const features = new Float32Array(rows.length * nf);
  const targets = new Float32Array(rows.length * nt);
  const number = (line, col, field) => {
    const x = parseF32(field);
    if (Number.isNaN(x) && !SPECIAL.test(field)) throw new Error(`line ${line}, column ${col}: "${field}" is not a number`);
    if (!Number.isFinite(x)) throw new Error(`line ${line}, column ${col}: "${field}" is not finite`);
    return x;
  };
  rows.forEach(([line, fields], r) => {
    if (fields.length !== width) throw new Error(`line ${line}: ${fields.length} columns where the first data row has ${width}`);
    for (let c = 0; c < nf; c++) features[r * nf + c] = number(line, c + 1, fields[c]);
    if (targetWidth) for (let c = 0; c < nt; c++) targets[r * nt + c] = number(line, nf + c + 1, fields[nf + c]);
  });
  let classNames = [];
  if (!targetWidth) {
    const labels = rows.map(([, f]) => f[nf]);
    if (labels.every(isNumber)) {
      rows.forEach(([line, f], r) => {
        let v = parseI64(f[nf]);
        if (v === null) {
          const x = Number(f[nf].replace(/inf(inity)?$/i, "Infinity"));
          v = Number.isFinite(x) && Number.isInteger(x) && Math.abs(x) < 1e15 ? BigInt(x) : null;
        }
        if (v === null) throw new Error(`line ${line}, column ${nf + 1}: "${f[nf]}" is not an integer label`);
        if (v < 0n || v > 255n) throw new Error(`line ${line}, column ${nf + 1}: label ${v} is outside 0..=255`);
        targets[r] = Number(v);
      });
    } else {
      classNames = [...new Set(labels)].sort(byteOrder);
      if (classNames.length > 256) {
        throw new Error(`the label column holds ${classNames.length} class names; at most 256 classes are supported`);
      }
      const index = new Map(classNames.map((n, k) => [n, k]));
      labels.forEach((l, r) => { targets[r] = index.get(l); });
    }
  }
  return { features, targets, nFeatures: nf, classNames };
}

/**
 * A new TrainRun over the files (the CSV read for the plan by `readCsv`), with its initial
 * parameters loaded.
 * @param pkg the package: its `TrainRun` class and `targetWidth` function
 * @param {{plan: Uint8Array, csv: string, init: Uint8Array | null}} files
 * @param {object} options as DEFAULTS
 */
export function startRun(pkg, files, options = {}) {
  const o = { ...DEFAULTS, ...options };
  const t = readCsv(files.csv, pkg.targetWidth(files.plan));
  const run = new pkg.TrainRun(files.plan, t.features, t.targets, t.nFeatures, t.classNames, o.epochs,
    BigInt(o.seed), BigInt(o.splitSeed), o.trainFraction, o.valFraction, o.scale, o.standardize);
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
