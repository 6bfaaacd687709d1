// The page, end to end, in Debian's headless Chromium driven by playwright-core. At 1200 px:
// open the page (served by `cargo xtask browser` on 127.0.0.1), let it run the fixed training,
// read its digest and the host oracle's, draw a digit on the pad, show a test digit and its
// true label, keep a screenshot. At a phone's 390×844: check that nothing is wider than the
// screen, then upload the user's own plan, CSV and initial parameters into the "your own
// model" form (first a wrong file, which must be an error on the page), train, read the digest
// and the per-epoch report, keep a screenshot.
//
//   node wasm/e2e/browser.mjs URL SCREENSHOT.png [PHONE.png PLAN CSV INIT OPTIONS_JSON]
//
// Prints `RESULT key=value …` and the own run's report as `OWN_LOG <line>` for the xtask to
// check (`tapeplan train`'s digest and lines for the same files); exits non-zero when the page
// fails, logs an error, or its demo digest differs from the host oracle's.

import { chromium } from "playwright-core";

const [url, screenshot, phoneShot, ownPlan, ownCsv, ownInit, ownOptions] = process.argv.slice(2);
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
/**
 * The page at a phone's 390×844: its width, then the own-model mode with the files given,
 * after one wrong upload (the CSV as the plan) that must show an error.
 */
async function phoneRun(browser, errors) {
  const page = await browser.newPage({ viewport: { width: 390, height: 844 } });
  page.on("console", (m) => {
    console.error(`[phone page ${m.type()}] ${m.text()}`);
    if (m.type() === "error") errors.push(m.text());
  });
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction(
    () => ["done", "error"].includes(document.body.dataset.phase) && window.tapeplanOwn?.phase === "ready",
    null,
    { timeout: 180_000 },
  );
  const scrollWidth = await page.evaluate(() =>
    Math.max(document.documentElement.scrollWidth, document.body.scrollWidth));
  const wide = await page.evaluate(() =>
    [...document.querySelectorAll("body *")]
      .filter((e) => e.getBoundingClientRect().right > 390.5)
      .slice(0, 5)
      .map((e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className} right=${e.getBoundingClientRect().right}`));
  if (scrollWidth > 390) throw new Error(`at 390 px the page is ${scrollWidth} px wide: ${wide.join(", ")}`);

  const done = () => page.waitForFunction(
    () => ["done", "error"].includes(window.tapeplanOwn.phase), null, { timeout: 120_000 });
  // A wrong file: the CSV given as the plan is an error shown on the page, not a crash.
  await page.setInputFiles("#own-plan", ownCsv);
  await page.setInputFiles("#own-csv", ownCsv);
  await page.evaluate(() => { window.tapeplanOwn.phase = "submitted"; });
  await page.click("#own-train");
  await done();
  const bad = await page.evaluate(() => window.tapeplanOwn);
  if (bad.phase !== "error" || !/plan rejected/.test(bad.error)) {
    throw new Error(`a CSV given as the plan: ${JSON.stringify(bad)}`);
  }
  const shown = await page.textContent("#own-status");
  if (!shown.includes("plan rejected")) throw new Error(`the page shows ${JSON.stringify(shown)}`);

  const o = JSON.parse(ownOptions);
  await page.setInputFiles("#own-plan", ownPlan);
  await page.setInputFiles("#own-init", ownInit);
  await page.fill("#own-epochs", String(o.epochs));
  await page.fill("#own-seed", String(o.seed));
  await page.fill("#own-split-seed", String(o.splitSeed));
  await page.fill("#own-train-fraction", String(o.trainFraction));
  await page.fill("#own-val-fraction", String(o.valFraction));
  await page.setChecked("#own-standardize", o.standardize);
  await page.evaluate(() => { window.tapeplanOwn.phase = "submitted"; });
  await page.click("#own-train");
  await done();
  const own = await page.evaluate(() => window.tapeplanOwn);
  if (own.phase !== "done") throw new Error(`the own-model run failed: ${own.error}`);
  const widthAfter = await page.evaluate(() =>
    Math.max(document.documentElement.scrollWidth, document.body.scrollWidth));
  if (widthAfter > 390) throw new Error(`after training at 390 px the page is ${widthAfter} px wide`);
  await page.screenshot({ path: phoneShot, fullPage: true });
  await page.close();
  return { ...own, scrollWidth: Math.max(scrollWidth, widthAfter) };
}

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

  // A test digit: the page shows the model's prediction and the digit's true label.
  await page.click("#sample");
  await page.waitForFunction(() => window.tapeplan.truth != null, null, { timeout: 10_000 });
  const truth = await page.evaluate(() => window.tapeplan.truth);
  const truthText = await page.textContent("#truth");
  if (!(truth >= 0 && truth <= 9) || truthText !== `true label: ${truth}`) {
    throw new Error(`a test digit shows ${JSON.stringify(truthText)} for label ${truth}`);
  }

  await page.screenshot({ path: screenshot, fullPage: true });
  const own = ownPlan ? await phoneRun(browser, errors) : {};
  const match = r.digest === r.expected;
  for (const line of own.log ?? []) console.log(`OWN_LOG ${line}`);
  console.log(
    `RESULT digest=${r.digest} expected=${r.expected} match=${match} loss_trace=${r.lossTrace} ` +
      `accuracy=${r.accuracy.toFixed(4)} correct=${r.correct} step_ms=${r.stepMs.toFixed(4)} ` +
      `drawn_seven_predicted=${drawn} train_seconds=${r.trainSeconds.toFixed(2)} truth=${truth}` +
      (ownPlan
        ? ` own_digest=${own.digest} own_seconds=${own.seconds.toFixed(2)} own_steps=${own.steps} ` +
          `phone_scroll_width=${own.scrollWidth} phone_screenshot=${phoneShot}`
        : ""),
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
