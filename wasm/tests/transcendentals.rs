//! The runtime's transcendental kernels in WebAssembly (`simd128` with the `simd` catalog, as
//! the `wasm-simd` step builds it; the scalar catalog otherwise) give the reference kernels'
//! bits (`libm`) on every edge of the `libm` algorithms and on a strided sweep of all `f32` bit
//! patterns: the same subset `tapeplan-runtime`'s `tests/runtime/transcendentals.rs` runs on the host.
#![cfg(target_arch = "wasm32")]

#[path = "../../runtime-nostd/tests/sweep/mod.rs"]
mod sweep;

use wasm_bindgen_test::wasm_bindgen_test;

/// Every 9973rd bit pattern (about 431,000 inputs per function).
const STRIDE: u64 = 9_973;

#[wasm_bindgen_test]
fn transcendentals_match_libm() {
    let edges = sweep::edge_inputs();
    let strided: Vec<f32> = (0..=u64::from(u32::MAX))
        .step_by(STRIDE as usize)
        .map(|b| f32::from_bits(b as u32))
        .collect();
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for op in sweep::FUNCTIONS {
        for x in [&edges[..], &edges[3..], &strided[..]] {
            if let Some(m) = sweep::first_mismatch(op, x, &mut got, &mut want) {
                panic!("{}", sweep::describe(op, m));
            }
        }
    }
}
