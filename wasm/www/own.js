// The page's "your own model" mode: a plan, a CSV and optional initial parameters chosen by the
// user, trained live by the package's TrainRun exactly as `tapeplan train PLAN --data CSV
// [--init FILE]` trains them, so the digest shown equals the `parameter digest:` line the host
// prints for the same files and options. A few steps run per frame, so the page stays live.
//
// `window.tapeplanOwn` holds the state (`phase`: idle, training, done or error; `digest`,
// `log`, `error`) for the end-to-end test.

import init, { TrainRun, targetWidth } from "./pkg/tapeplan_wasm.js";
import { drawCurve } from "./curve.js";
import { csvText, reportLines, startRun } from "./own-run.js";

const FAST = new URLSearchParams(location.search).has("fast");
const $ = (id) => document.getElementById(id);
const state = { phase: "loading" };
window.tapeplanOwn = state;

function status(text, cls = "") {
  $("own-status").textContent = text;
  $("own-status").className = `status ${cls}`;
  state.status = text;
}

const frame = () =>
  new Promise((resolve) => (FAST ? setTimeout(resolve, 0) : requestAnimationFrame(resolve)));

async function fileBytes(id) {
  const f = $(id).files[0];
  return f ? new Uint8Array(await f.arrayBuffer()) : null;
}

/** A form field as a number in `[lo, hi]`, or an Error naming the field. */
function numberField(id, name, lo, hi, integer = false) {
  const text = $(id).value.trim();
  const v = Number(text);
  if (text === "" || !Number.isFinite(v) || v < lo || v > hi || (integer && !Number.isInteger(v))) {
    throw new Error(`${name}: ${JSON.stringify(text)} is not ${integer ? "an integer" : "a number"} in [${lo}, ${hi}]`);
  }
  return v;
}

/** A seed field: an integer in [0, 2^64), kept exact as a BigInt. */
function seedField(id, name) {
  const text = $(id).value.trim();
  if (!/^[0-9]+$/.test(text) || BigInt(text) >= 2n ** 64n) {
    throw new Error(`${name}: ${JSON.stringify(text)} is not an integer in [0, 2^64)`);
  }
  return BigInt(text);
}

function options() {
  return {
    epochs: numberField("own-epochs", "epochs", 1, 100000, true),
    seed: seedField("own-seed", "seed"),
    splitSeed: seedField("own-split-seed", "split seed"),
    trainFraction: numberField("own-train-fraction", "train fraction", 0, 1),
    valFraction: numberField("own-val-fraction", "validation fraction", 0, 0.999999),
    scale: numberField("own-scale", "scale", -3.4e38, 3.4e38),
    standardize: $("own-standardize").checked,
  };
}

/** FNV-1a 64 of `bytes` as 16 hex digits: the digests a run description pins its files by
 * (`tapeplan digest`, `plan_digest`, `data_digest`, `init_digest`). */
function fnv1a64(bytes) {
  const mask = (1n << 64n) - 1n;
  let h = 0xcbf29ce484222325n;
  for (const b of bytes) {
    h ^= BigInt(b);
    h = (h * 0x100000001b3n) & mask;
  }
  return h.toString(16).padStart(16, "0");
}

/**
 * A run description (`tapeplan train --write-run`, `docs/getting-started/verify-a-device.md`)
 * applied to the form: its files must be the ones chosen (by their digests), its seed, split
 * seed and epochs replace the fields, and the options a description cannot say take their
 * defaults, so the run is the one `tapeplan verify` and the firmware replay.
 */
function applyRun(text, files) {
  const kv = new Map();
  for (const line of text.split("\n")) {
    for (const tok of line.replace(/#.*/, "").trim().split(/\s+/).filter(Boolean)) {
      const eq = tok.indexOf("=");
      if (eq <= 0) throw new Error(`run description: ${JSON.stringify(tok)} is not key=value`);
      kv.set(tok.slice(0, eq), tok.slice(eq + 1));
    }
  }
  if (!kv.has("plan")) throw new Error("run description: the page trains plan= runs (a plan file); this one has no plan= key");
  for (const [key, file, what] of [["plan", files.plan, "plan"], ["data", files.data, "data (CSV)"], ["init", files.init, "initial parameters"]]) {
    const want = kv.get(`${key}_digest`);
    if (want === undefined) continue;
    if (!file) throw new Error(`run description: it names ${key}=${kv.get(key)}: choose that file as the ${what}`);
    const got = fnv1a64(file);
    if (got !== want.toLowerCase()) {
      throw new Error(`run description: the chosen ${what} has digest ${got}, the run names ${key}=${kv.get(key)} with ${key}_digest=${want}`);
    }
  }
  if (!kv.has("data")) throw new Error("run description: without data= it trains the bundled digits; the page trains a CSV");
  for (const [key, id] of [["seed", "own-seed"], ["split_seed", "own-split-seed"], ["epochs", "own-epochs"]]) {
    if (!kv.has(key)) throw new Error(`run description: no ${key}=`);
    $(id).value = kv.get(key);
  }
  $("own-train-fraction").value = "0.8";
  $("own-val-fraction").value = "0";
  $("own-scale").value = "1";
  $("own-standardize").checked = false;
  return Number(kv.get("samples"));
}

let current = null;

async function train() {
  $("own-train").disabled = true;
  if (current) {
    current.free();
    current = null;
  }
  Object.assign(state, { phase: "training", digest: null, log: [], error: null });
  $("own-digest").textContent = "–";
  $("own-log").textContent = "";
  status("reading the files…");
  const plan = await fileBytes("own-plan");
  const data = await fileBytes("own-csv");
  if (!plan || !data) throw new Error("choose a plan (.plan) and a data file (.csv) first");
  const initBytes = await fileBytes("own-init");
  const runFile = await fileBytes("own-run");
  const samples = runFile
    ? applyRun(new TextDecoder().decode(runFile), { plan, data, init: initBytes })
    : null;
  const files = { plan, csv: await csvText(data), init: initBytes };
  const { run, init: how } = startRun({ TrainRun, targetWidth }, files, options());
  if (samples !== null && run.trainRows !== samples) {
    throw new Error(`run description: samples=${samples}, but the CSV's training split has ${run.trainRows} rows`);
  }
  current = run;
  const steps = run.totalSteps, perEpoch = run.stepsPerEpoch;
  $("own-steps").textContent = steps;
  status(`training: initial parameters: ${how}`);
  let top = 0;
  const t0 = performance.now();
  while (!run.done) {
    const until = performance.now() + (FAST ? 100 : 12);
    while (!run.done && performance.now() < until) run.advance(FAST ? 64 : 4);
    const losses = run.losses();
    if (top === 0 && losses.length) {
      top = 1.1 * Math.max(...losses.subarray(0, Math.min(losses.length, Math.max(1, perEpoch))));
    }
    drawCurve($("own-loss"), losses, losses.length, steps, perEpoch, top || 1);
    $("own-step").textContent = run.step;
    const epochs = steps / perEpoch;
    $("own-epoch").textContent = `${Math.min(run.epochsDone + 1, epochs)} / ${epochs}`;
    $("own-loss-now").textContent = losses.length ? losses[losses.length - 1].toFixed(4) : "–";
    const log = reportLines(run);
    $("own-log").textContent = log.join("\n");
    state.log = log;
    await frame();
  }
  const seconds = (performance.now() - t0) / 1000;
  const digest = run.parameterDigest();
  $("own-digest").textContent = digest;
  state.log = reportLines(run);
  $("own-log").textContent = state.log.join("\n");
  Object.assign(state, { phase: "done", digest, seconds, steps: run.step });
  status(`trained ${run.step} steps in ${seconds.toFixed(2)} s: compare the digest with \`tapeplan train\`'s "parameter digest:" line`, "ok");
}

async function main() {
  await init();
  $("own-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    train()
      .catch((e) => {
        console.warn(e);
        state.phase = "error";
        state.error = String(e && e.message ? e.message : e);
        status(`error: ${state.error}`, "fail");
      })
      .finally(() => {
        $("own-train").disabled = false;
      });
  });
  $("own-train").disabled = false;
  status("choose a plan and a CSV, then Train");
  state.phase = "ready";
}

main().catch((e) => {
  state.phase = "error";
  state.error = String(e && e.message ? e.message : e);
  status(`error: ${state.error}`, "fail");
});
