// The median train-step time of the demo's digits MLP in Node, for one or more `--target web`
// packages (e.g. the default one and the small modules `cargo xtask wasm-small` builds),
// interleaved round by round so that the machine's load falls on each alike:
// `medianStepMs` of wasm/www/demo-run.js (101 blocks of 25 steps after a warm-up block).
//
//   cargo xtask web-assets
//   node wasm/e2e/step-time.mjs ROUNDS PKG_DIR...
//
// Prints one line per package: its median over the rounds of each round's median, in ms.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath, pathToFileURL } from "node:url";

import { ASSET_FILES, decodeAssets, medianStepMs } from "../www/demo-run.js";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const [rounds, ...dirs] = process.argv.slice(2);
const manifest = JSON.parse(readFileSync(here("../www/assets/manifest.json"), "utf8"));
const files = Object.fromEntries(
  ASSET_FILES.map((n) => [n, new Uint8Array(readFileSync(here(`../www/assets/${n}`)))]),
);
const assets = decodeAssets(manifest, (n) => files[n]);
const pkgs = [];
for (const dir of dirs) {
  // A fresh copy of the glue per package: each instantiates its own module.
  const url = pathToFileURL(join(dir, "tapeplan_wasm.js")).href + `?${pkgs.length}`;
  const pkg = await import(url);
  pkg.initSync({ module: readFileSync(join(dir, "tapeplan_wasm_bg.wasm")) });
  pkgs.push(pkg);
}
const times = dirs.map(() => []);
for (let r = 0; r < Number(rounds); r++) {
  pkgs.forEach((pkg, i) => {
    const t = new pkg.Trainer(assets.plan);
    t.loadParameters(assets.init);
    times[i].push(medianStepMs(t, assets, () => performance.now()));
    t.free();
  });
}
const median = (a) => a.slice().sort((x, y) => x - y)[a.length >> 1];
dirs.forEach((d, i) => {
  const all = times[i].map((t) => t.toFixed(4)).join(" ");
  console.log(`${d}: ${median(times[i]).toFixed(4)} ms per step (rounds: ${all})`);
});
