// The demo page: train the digits MLP live from a host-made plan, compare the parameter digest
// with the host oracle's, then classify digits drawn by hand.
//
// `?fast` runs the fixed training a whole epoch per frame (the end-to-end test uses it); without
// it a few steps per frame, so the curve is seen growing. `window.tapeplan` holds the results.

import init, { Trainer, digestF32, version } from "./pkg/tapeplan_wasm.js";
import { drawCurve } from "./curve.js";
import {
  ASSET_FILES, DemoRun, argmax, decodeAssets, firstBitDifference, medianStepMs, testCorrect,
} from "./demo-run.js";

const FAST = new URLSearchParams(location.search).has("fast");
const $ = (id) => document.getElementById(id);
const result = { phase: "loading" };
window.tapeplan = result;

function phase(p) {
  result.phase = p;
  document.body.dataset.phase = p;
}

function status(text, cls = "") {
  const s = $("status");
  s.textContent = text;
  s.className = `status ${cls}`;
}

const frame = () =>
  new Promise((resolve) => (FAST ? setTimeout(resolve, 0) : requestAnimationFrame(resolve)));

async function fetchBytes(name) {
  const r = await fetch(`assets/${name}`);
  if (!r.ok) throw new Error(`assets/${name}: HTTP ${r.status} (run \`cargo xtask web-assets\`)`);
  return new Uint8Array(await r.arrayBuffer());
}

async function loadAssets() {
  const r = await fetch("assets/manifest.json");
  if (!r.ok) throw new Error(`assets/manifest.json: HTTP ${r.status} (run \`cargo xtask web-assets\`)`);
  const manifest = await r.json();
  const bytes = Object.fromEntries(
    await Promise.all(ASSET_FILES.map(async (n) => [n, await fetchBytes(n)])),
  );
  return decodeAssets(manifest, (n) => bytes[n]);
}

// ---- training ----------------------------------------------------------------------------

async function train(assets) {
  const m = assets.manifest;
  const trainer = new Trainer(assets.plan);
  trainer.loadParameters(assets.init);
  if (trainer.digest() !== m.init_digest) {
    throw new Error(`initial digest ${trainer.digest()} is not the host's ${m.init_digest}`);
  }
  const run = new DemoRun(trainer, assets);
  $("steps").textContent = run.steps;
  $("run-about").textContent = `${m.epochs} epochs × ${run.perEpoch} steps, batch ${m.batch}, lr ${m.lr}`;
  for (const id of ["digest", "verdict", "trace", "accuracy"]) $(id).textContent = "–";
  $("verdict").className = $("trace").className = "";
  phase("training");
  status("training…");
  const perFrame = FAST ? run.perEpoch : 2;
  const t0 = performance.now();
  while (!run.done) {
    let loss = NaN;
    for (let i = 0; i < perFrame && !run.done; i++) loss = run.next();
    $("step").textContent = run.step;
    $("epoch").textContent = `${Math.min(run.epoch + 1, m.epochs)} / ${m.epochs}`;
    $("loss-now").textContent = loss.toFixed(4);
    drawCurve($("loss"), run.losses, run.step, run.steps, run.perEpoch, 2.6);
    await frame();
  }
  const seconds = (performance.now() - t0) / 1000;

  const correct = testCorrect(trainer, assets);
  const accuracy = correct / assets.testLabels.length;
  $("accuracy").textContent = `${(100 * accuracy).toFixed(1)}% (${correct}/${assets.testLabels.length})`;

  const digest = trainer.digest();
  const match = digest === m.digest;
  $("digest").textContent = digest;
  $("expected").textContent = m.digest;
  $("verdict").textContent = match ? "✓ equal: the same bits as the host oracle" : "✗ different";
  $("verdict").className = match ? "ok" : "fail";
  const diff = firstBitDifference(run.losses, assets.losses);
  const trace = diff < 0 ? "equal" : `step-${diff + 1}`;
  $("trace").textContent = diff < 0
    ? `✓ all ${run.steps} losses equal (digest ${digestF32(run.losses)})`
    : `✗ first differs at step ${diff + 1}: ${run.losses[diff]} vs ${assets.losses[diff]}`;
  $("trace").className = diff < 0 ? "ok" : "fail";
  status(`trained ${run.steps} steps in ${seconds.toFixed(2)} s${FAST ? " (fast mode)" : ""}`,
    match ? "ok" : "fail");
  Object.assign(result, {
    digest, expected: m.digest, match, lossTrace: trace, correct, accuracy,
    lossTraceDigest: digestF32(run.losses), trainSeconds: seconds,
  });
  return trainer;
}

/** The median train-step time in ms on a fresh trainer (also `window.tapeplanBench`). */
function benchStepMs(assets, blocks = 101, perBlock = 25) {
  const t = new Trainer(assets.plan);
  t.loadParameters(assets.init);
  const ms = medianStepMs(t, assets, () => performance.now(), blocks, perBlock);
  t.free();
  return ms;
}

function timeSteps(assets) {
  const ms = benchStepMs(assets);
  window.tapeplanBench = (blocks, perBlock) => benchStepMs(assets, blocks, perBlock);
  result.stepMs = ms;
  $("step-ms").textContent = `${(1000 * ms).toFixed(1)} µs (${Math.round(1000 / ms)} steps/s; ` +
    `median of 101 blocks of 25 steps${crossOriginIsolated ? "" : ", coarse timer"})`;
}

// ---- drawing -----------------------------------------------------------------------------

/**
 * The 8×8 optdigits counts of the drawing, made as NIST's preprocessing made UCI optdigits: the
 * ink's bounding box scaled (aspect kept) to fit 20×32 pixels, centred in a 32×32 bitmap; a
 * bitmap pixel is set when at least 40% of it is inked; each count is the number of set pixels
 * in a non-overlapping 4×4 block (0..16). `null` for an empty pad.
 */
function downsample(pad) {
  const W = pad.width, H = pad.height;
  const alpha = pad.getContext("2d").getImageData(0, 0, W, H).data;
  let x0 = W, y0 = H, x1 = -1, y1 = -1;
  for (let y = 0; y < H; y++) {
    for (let x = 0; x < W; x++) {
      if (alpha[4 * (y * W + x) + 3] > 24) {
        if (x < x0) x0 = x; if (x > x1) x1 = x;
        if (y < y0) y0 = y; if (y > y1) y1 = y;
      }
    }
  }
  if (x1 < 0) return null;
  const bw = x1 - x0 + 1, bh = y1 - y0 + 1;
  const s = Math.min(20 / bw, 32 / bh);
  const ox = 16 - (bw * s) / 2, oy = 16 - (bh * s) / 2;
  const counts = new Uint8Array(64);
  for (let ty = 0; ty < 32; ty++) {
    const ya = y0 + (ty - oy) / s, yb = y0 + (ty + 1 - oy) / s;
    if (yb <= y0 || ya >= y1 + 1) continue;
    for (let tx = 0; tx < 32; tx++) {
      const xa = x0 + (tx - ox) / s, xb = x0 + (tx + 1 - ox) / s;
      if (xb <= x0 || xa >= x1 + 1) continue;
      // The mean ink of the source pixels whose centres fall in this bitmap pixel; when it is
      // smaller than a source pixel (an enlarged stroke), the source pixel under its centre.
      let ink = 0, n = 0;
      for (let y = Math.max(0, Math.ceil(ya - 0.5)); y < Math.min(H, yb - 0.5); y++) {
        for (let x = Math.max(0, Math.ceil(xa - 0.5)); x < Math.min(W, xb - 0.5); x++) {
          ink += alpha[4 * (y * W + x) + 3];
          n++;
        }
      }
      if (n === 0) {
        const y = Math.max(0, Math.min(H - 1, Math.floor((ya + yb) / 2)));
        const x = Math.max(0, Math.min(W - 1, Math.floor((xa + xb) / 2)));
        ink = alpha[4 * (y * W + x) + 3];
        n = 1;
      }
      if (ink / n >= 0.4 * 255) counts[(ty >> 2) * 8 + (tx >> 2)] += 1;
    }
  }
  return counts;
}

function showPreview(counts) {
  const g = $("preview").getContext("2d");
  const c = $("preview").width / 8;
  for (let i = 0; i < 64; i++) {
    const v = 255 - Math.round((counts ? counts[i] : 0) * 255 / 16);
    g.fillStyle = `rgb(${v},${v},${v})`;
    g.fillRect((i % 8) * c, (i >> 3) * c, c, c);
  }
}

function predict(trainer, assets, counts) {
  showPreview(counts);
  if (!counts) {
    $("prediction").textContent = "–";
    $("probs").textContent = "";
    result.prediction = null;
    return;
  }
  const { batch, features, pixel_scale: scale } = assets.manifest;
  const x = new Float32Array(batch * features);
  for (let j = 0; j < features; j++) x[j] = counts[j] * scale;
  const logits = trainer.forward(x);
  const classes = logits.length / batch;
  const row = Array.from(logits.subarray(0, classes));
  const best = argmax(row);
  const mx = Math.max(...row);
  const e = row.map((v) => Math.exp(v - mx));
  const sum = e.reduce((a, b) => a + b, 0);
  $("prediction").textContent = `${best}`;
  $("probs").innerHTML = e
    .map((v, i) => `<div class="bar${i === best ? " best" : ""}"><span>${i}</span>` +
      `<div style="width:${(100 * v / sum).toFixed(1)}%"></div><span>${(100 * v / sum).toFixed(1)}%</span></div>`)
    .join("");
  result.prediction = best;
  result.counts = Array.from(counts);
}

/** The true label of the test digit shown (`null`: a drawing, which has none). */
function showTruth(label) {
  $("truth").textContent = label == null ? "" : `true label: ${label}`;
  result.truth = label;
}

function setUpPad(getModel) {
  const pad = $("pad");
  const g = pad.getContext("2d");
  g.lineCap = g.lineJoin = "round";
  g.strokeStyle = "#1d2330";
  g.lineWidth = 28;
  let last = null;
  const at = (e) => {
    const r = pad.getBoundingClientRect();
    return [(e.clientX - r.left) * pad.width / r.width, (e.clientY - r.top) * pad.height / r.height];
  };
  const update = () => {
    showTruth(null);
    const model = getModel();
    if (model) predict(model.trainer, model.assets, downsample(pad));
    else showPreview(downsample(pad));
  };
  pad.addEventListener("pointerdown", (e) => {
    pad.setPointerCapture(e.pointerId);
    last = at(e);
    g.beginPath(); g.arc(last[0], last[1], g.lineWidth / 2, 0, 2 * Math.PI);
    g.fillStyle = g.strokeStyle; g.fill();
  });
  pad.addEventListener("pointermove", (e) => {
    if (!last) return;
    const p = at(e);
    g.beginPath(); g.moveTo(last[0], last[1]); g.lineTo(p[0], p[1]); g.stroke();
    last = p;
  });
  const end = () => { if (last) { last = null; update(); } };
  pad.addEventListener("pointerup", end);
  pad.addEventListener("pointercancel", end);
  $("clear").addEventListener("click", () => { g.clearRect(0, 0, pad.width, pad.height); update(); });
  return { pad, g };
}

// ---- main --------------------------------------------------------------------------------

async function main() {
  await init();
  const assets = await loadAssets();
  let model = null;
  const { pad, g } = setUpPad(() => model);
  showPreview(null);
  drawCurve($("loss"), [], 0, assets.manifest.steps,
    Math.floor(assets.manifest.train_rows / assets.manifest.batch), 2.6);

  const probe = new Trainer(assets.plan);
  $("arena").textContent = `${probe.arenaBytes} bytes (${probe.persistentElems} persistent + ` +
    `${probe.arenaElems - probe.persistentElems} scratch f32s)`;
  $("plan-info").textContent = `${assets.plan.length} bytes, plan id ${probe.planId.toString(16)}, ` +
    `entries ${probe.entryNames().join(", ")}; tapeplan-wasm ${version()}`;
  probe.free();
  fetch("pkg/tapeplan_wasm_bg.wasm", { method: "HEAD" }).then((r) => {
    const n = Number(r.headers.get("content-length"));
    if (n > 0) $("wasm-size").textContent = `${n} bytes (${(n / 1024).toFixed(1)} KiB)`;
  }).catch(() => {});

  const trainer = await train(assets);
  model = { trainer, assets };
  timeSteps(assets);
  $("sample").disabled = false;
  $("sample").addEventListener("click", () => {
    g.clearRect(0, 0, pad.width, pad.height);
    const i = Math.floor(Math.random() * assets.testLabels.length);
    predict(trainer, assets, assets.testPixels.subarray(64 * i, 64 * i + 64));
    showTruth(assets.testLabels[i]);
  });
  $("again").disabled = false;
  $("again").addEventListener("click", async () => {
    $("again").disabled = true;
    const old = model.trainer;
    model = null;
    old.free();
    model = { trainer: await train(assets), assets };
    phase("done");
    $("again").disabled = false;
  });
  phase("done");
}

main().catch((e) => {
  console.error(e);
  result.error = String(e && e.message ? e.message : e);
  status(`error: ${result.error}`, "fail");
  phase("error");
});
