// Trains any plan (`tapeplan plan …`) on a CSV in Node with the WebAssembly package, as the
// page's "your own model" mode does in a browser and as `tapeplan train PLAN --data CSV [--init
// FILE] --epochs N --seed S` does on the host: the same split, epoch order and batches, so the
// last line, `parameter digest: 0x…`, equals the host's. The CSV: an optional header, the label
// last (or a regression plan's targets). Without INIT an `--layers` MLP gets the seeded Glorot
// initialization. docs/getting-started/train-in-a-browser.md.
//
//   wasm-pack build --target nodejs --out-dir pkg-node     # in wasm/
//   node wasm/e2e/train-plan.mjs PLAN DATA.csv [INIT.safetensors|-] [EPOCHS] [SEED]
//
// With TAPEPLAN_WASM_PKG=DIR it uses the `--target web` package in DIR instead (e.g. the small
// module `cargo xtask wasm-small` builds into target/npm/small).

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { csvText, reportLines, startRun } from "../www/own-run.js";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const webPkg = process.env.TAPEPLAN_WASM_PKG;
let pkg;
if (webPkg) {
  pkg = await import(pathToFileURL(join(webPkg, "tapeplan_wasm.js")).href);
  pkg.initSync({ module: readFileSync(join(webPkg, "tapeplan_wasm_bg.wasm")) });
} else {
  pkg = createRequire(import.meta.url)(here("../pkg-node/tapeplan_wasm.js"));
}

const [planPath, csvPath, initPath, epochs, seed] = process.argv.slice(2);
if (!csvPath) {
  console.error("usage: node train-plan.mjs PLAN DATA.csv [INIT.safetensors|-] [EPOCHS] [SEED]");
  process.exit(2);
}
const read = (p) => new Uint8Array(readFileSync(p));
const files = {
  plan: read(planPath),
  csv: await csvText(read(csvPath)),
  init: initPath && initPath !== "-" ? read(initPath) : null,
};
const { run, init } = startRun(pkg, files, { epochs: Number(epochs ?? 10), seed: seed ?? "42" });
console.log(`initial parameters: ${init}`);
while (!run.done) run.advance(1000);
for (const line of reportLines(run)) console.log(line);
