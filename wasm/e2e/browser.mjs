// The demo page, end to end, in Debian's headless Chromium driven by playwright-core:
// open the page (served by `cargo xtask browser` on 127.0.0.1), let it run the fixed training,
// read its digest and the host oracle's, draw a digit on the pad, keep a screenshot.
//
//   node wasm/e2e/browser.mjs URL SCREENSHOT.png
//
// Prints `RESULT key=value …` for the xtask to check; exits non-zero when the page fails,
// logs an error, or its digest differs from the host oracle's.

import { chromium } from "playwright-core";

const [url, screenshot] = process.argv.slice(2);
if (!url || !screenshot) {
  console.error("usage: node browser.mjs URL SCREENSHOT.png");
  process.exit(2);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
let failed = false;
try {
  const page = await browser.newPage({ viewport: { width: 1200, height: 860 } });
  const errors = [];
  page.on("console", (m) => {
    console.error(`[page ${m.type()}] ${m.text()}`);
    if (m.type() === "error") errors.push(m.text());
  });
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction(
    () => ["done", "error"].includes(document.body.dataset.phase),
    null,
    { timeout: 180_000 },
  );
  const r = await page.evaluate(() => window.tapeplan);
  if (r.phase === "error") throw new Error(`the page failed: ${r.error}`);

  // Draw a "7" on the pad as a person would, and let the page predict it.
  const box = await page.locator("#pad").boundingBox();
  const at = (fx, fy) => [box.x + fx * box.width, box.y + fy * box.height];
  const stroke = [[0.22, 0.18], [0.5, 0.18], [0.78, 0.18], [0.66, 0.45], [0.55, 0.68], [0.47, 0.88]];
  await page.mouse.move(...at(...stroke[0]));
  await page.mouse.down();
  for (const p of stroke.slice(1)) await page.mouse.move(...at(...p), { steps: 8 });
  await page.mouse.up();
  await page.waitForFunction(() => window.tapeplan.prediction != null, null, { timeout: 10_000 });
  const drawn = await page.evaluate(() => window.tapeplan.prediction);

  await page.screenshot({ path: screenshot, fullPage: true });
  const match = r.digest === r.expected;
  console.log(
    `RESULT digest=${r.digest} expected=${r.expected} match=${match} loss_trace=${r.lossTrace} ` +
      `accuracy=${r.accuracy.toFixed(4)} correct=${r.correct} step_ms=${r.stepMs.toFixed(4)} ` +
      `drawn_seven_predicted=${drawn} train_seconds=${r.trainSeconds.toFixed(2)}`,
  );
  if (errors.length) throw new Error(`the page logged errors: ${errors.join(" | ")}`);
  if (!match) throw new Error(`digest ${r.digest} differs from the host oracle's ${r.expected}`);
} catch (e) {
  failed = true;
  console.error(`browser test: ${e.message || e}`);
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
