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
  const files = { plan, csv: await csvText(data), init: await fileBytes("own-init") };
  const { run, init: how } = startRun({ TrainRun, targetWidth }, files, options());
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
