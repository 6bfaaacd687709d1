// The loss curve on a canvas: every step's loss (light) and its running average (dark), epochs
// marked. The demo (app.js) and the own-model mode (own.js) draw with it.

/** A round grid step for the range `[0, top]`: 1, 2 or 5 times a power of ten, about 5 lines. */
function gridStep(top) {
  const raw = top / 5;
  const p = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw) ?? raw;
}

/**
 * Draws `losses[0..n)` of a run of `steps` steps, `perEpoch` a epoch, the axis from 0 to `top`.
 * @param {HTMLCanvasElement} c
 */
export function drawCurve(c, losses, n, steps, perEpoch, top) {
  const g = c.getContext("2d");
  const W = c.width, H = c.height;
  const L = 44, R = 10, T = 12, B = 30;
  const px = (k) => L + ((W - L - R) * k) / Math.max(1, steps - 1);
  const py = (v) => T + (H - T - B) * (1 - Math.min(v, top) / top);
  g.clearRect(0, 0, W, H);
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = "#667085";
  g.strokeStyle = "#e6e9ef";
  g.lineWidth = 1;
  const dv = top === 2.6 ? 0.5 : gridStep(top);
  const digits = Math.max(0, -Math.floor(Math.log10(dv)));
  for (let v = 0; v <= top + 1e-9; v += dv) {
    g.beginPath(); g.moveTo(L, py(v)); g.lineTo(W - R, py(v)); g.stroke();
    g.fillText(v.toFixed(digits || 1), 8, py(v) + 4);
  }
  const epochs = Math.ceil(steps / Math.max(1, perEpoch));
  const every = Math.max(1, Math.ceil(epochs / 20));
  for (let e = 0; e * perEpoch < steps; e += every) {
    const x = px(e * perEpoch);
    g.beginPath(); g.moveTo(x, T); g.lineTo(x, H - B); g.stroke();
    g.fillText(`${e + 1}`, x + 3, H - B + 14);
  }
  g.fillText("epoch", W - R - 34, H - 4);
  g.fillText("loss", L + 6, T + 10);
  if (n === 0) return;
  g.strokeStyle = "rgba(47,111,222,0.35)";
  g.beginPath();
  for (let k = 0; k < n; k++) (k ? g.lineTo : g.moveTo).call(g, px(k), py(losses[k]));
  g.stroke();
  g.strokeStyle = "#2f6fde";
  g.lineWidth = 2;
  g.beginPath();
  let avg = losses[0];
  for (let k = 0; k < n; k++) {
    avg = k === 0 ? losses[0] : 0.9 * avg + 0.1 * losses[k];
    (k ? g.lineTo : g.moveTo).call(g, px(k), py(avg));
  }
  g.stroke();
}
