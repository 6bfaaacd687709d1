//! The `fma` arithmetic profile in WebAssembly (`simd128` with the `simd` catalog, as the
//! `wasm-simd` step builds it; the scalar catalog otherwise): wasm has no fused multiply-add the
//! runtime may use (relaxed SIMD's `madd` may or may not fuse), so each step is `libm::fmaf`,
//! and the pinned product (`runtime-nostd/tests/fma_case`) has the digest the host's catalogs
//! (scalar, SSE2 software, AVX-512 `vfmadd`) give.
#![cfg(target_arch = "wasm32")]

#[path = "../../runtime-nostd/tests/fma_case/mod.rs"]
mod fma_case;

use tapeplan_core::ArithProfile;
use wasm_bindgen_test::wasm_bindgen_test;

#[wasm_bindgen_test]
fn pinned_fma_product_has_the_hosts_bits() {
    let (catalog, reference) = fma_case::products(ArithProfile::Fma);
    assert_eq!(fma_case::digest(&reference), fma_case::FMA_DIGEST);
    assert_eq!(fma_case::digest(&catalog), fma_case::FMA_DIGEST);
    let (separate, _) = fma_case::products(ArithProfile::Separate);
    assert_ne!(fma_case::digest(&separate), fma_case::FMA_DIGEST);
}
