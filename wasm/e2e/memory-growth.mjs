// Whether a `--target web` package's memory grows over repeated training: 20 times the demo's
// fixed run (440 steps, `parameters()` read after each), a `Trainer` made and freed each time;
// prints the module's memory size after each. For the small module's allocator (feature
// `small-alloc`, lol_alloc's free list), against the npm package's dlmalloc.
//
//   cargo xtask web-assets
//   node wasm/e2e/memory-growth.mjs PKG_DIR

import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { ASSET_FILES, DemoRun, decodeAssets } from "../www/demo-run.js";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const dir = resolve(process.argv[2]);
const pkg = await import(pathToFileURL(join(dir, "tapeplan_wasm.js")).href);
const exports = pkg.initSync({ module: readFileSync(join(dir, "tapeplan_wasm_bg.wasm")) });
const manifest = JSON.parse(readFileSync(here("../www/assets/manifest.json"), "utf8"));
const files = Object.fromEntries(
  ASSET_FILES.map((n) => [n, new Uint8Array(readFileSync(here(`../www/assets/${n}`)))]),
);
const assets = decodeAssets(manifest, (n) => files[n]);
const bytes = [];
for (let r = 0; r < 20; r++) {
  const t = new pkg.Trainer(assets.plan);
  t.loadParameters(assets.init);
  const run = new DemoRun(t, assets);
  while (!run.done) {
    run.next();
    t.parameters();
  }
  t.free();
  bytes.push(exports.memory.buffer.byteLength);
}
console.log(`${dir}: memory after each run (bytes): ${bytes.join(" ")}`);
