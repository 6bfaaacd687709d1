//! The native scalar runtime's train-step time on the browser demo's plan and batches, to set
//! next to the page's (`cargo xtask browser` prints both):
//!
//! ```text
//! cargo xtask web-assets
//! cargo run --release -p tapeplan-wasm --example step_time
//! ```
//!
//! Drives the planner's `RuntimeModel` (the `no_std` runtime over a `Vec` arena) with the same
//! timing loop as the page (`medianStepMs` in `www/demo-run.js`): a warm-up block, then the
//! median of 101 blocks of 25 steps over the first epoch's batches.

// The planner is a host-only dev-dependency: on wasm32 (`wasm-pack test` builds examples too)
// this example is empty.
#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    native::main();
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::time::Instant;

    use tapeplan_planner::exec::RuntimeModel;

    fn read(name: &str) -> Vec<u8> {
        let path = format!("{}/www/assets/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{path}: {e} (run `cargo xtask web-assets`)"))
    }

    pub fn main() {
        let (plan, init) = (read("digits.plan"), read("init.f32"));
        let (pixels, labels, order) = (
            read("train-pixels.u8"),
            read("train-labels.u8"),
            read("epoch-order.u16"),
        );
        let (batch, d_in) = (32, 64);
        let mut model = RuntimeModel::new(&plan).expect("the demo plan loads");
        let init: Vec<f32> = init
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let mut at = 0;
        for (name, elems) in [("w1", 64 * 32), ("b1", 32), ("w2", 32 * 10), ("b2", 10)] {
            model
                .load_parameter(name, &init[at..at + elems])
                .expect("parameter loads");
            at += elems;
        }
        let rows = labels.len();
        let batches: Vec<(Vec<f32>, Vec<f32>)> = (0..rows / batch)
            .map(|b| {
                let idx: Vec<usize> = (b * batch..(b + 1) * batch)
                    .map(|k| usize::from(u16::from_le_bytes([order[2 * k], order[2 * k + 1]])))
                    .collect();
                let x = idx
                    .iter()
                    .flat_map(|&i| pixels[i * d_in..(i + 1) * d_in].iter())
                    .map(|&p| f32::from(p) * 0.0625)
                    .collect();
                let y = idx.iter().map(|&i| f32::from(labels[i])).collect();
                (x, y)
            })
            .collect();
        let per_block = 25;
        let mut k = 0;
        let mut block = || {
            let t0 = Instant::now();
            for _ in 0..per_block {
                let (x, y) = &batches[k % batches.len()];
                std::hint::black_box(model.train_step(x, y).expect("step runs"));
                k += 1;
            }
            t0.elapsed().as_secs_f64() * 1e3 / per_block as f64
        };
        block();
        let mut times: Vec<f64> = (0..101).map(|_| block()).collect();
        times.sort_by(f64::total_cmp);
        let ms = times[times.len() / 2];
        println!(
        "native scalar runtime: train step median {:.1} us ({:.0} steps/s; median of 101 blocks of {per_block})",
        ms * 1e3,
        1e3 / ms
    );
        println!("RESULT step_ms={ms:.4}");
    }
}
