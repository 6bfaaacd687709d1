//! The runtime's integration tests, one module per subject, linked as one test binary
//! (`runtime`): the workspace then links one executable for them, not one per file.
//!
//! `cargo test -p tapeplan-runtime --test runtime` runs them all; a subject alone:
//! `cargo test -p tapeplan-runtime --test runtime -- reject::` (`cargo xtask ci` runs `reject::`
//! this way once per single-math-profile build, and `cargo xtask miri` runs `reject::`,
//! `checkpoint::` and `run::`).
//!
//! `common` (the test plan builder) and `sweep` (the transcendental sweeps) stay in folders of
//! their own beside this one: the cross-crate tests (`tapeplan-tests`), the wasm crate's test and
//! the `mathcheck` example include them by path.

#[path = "../common/mod.rs"]
mod common;
#[path = "../fma_case/mod.rs"]
mod fma_case;
#[path = "../common/rng.rs"]
#[allow(dead_code)]
mod rng;
#[path = "../sweep/mod.rs"]
mod sweep;

mod checkpoint;
mod fma;
mod hostile;
mod limits;
mod model;
mod reject;
mod run;
mod selective;
mod simd_catalog;
mod simd_conv_adjoints;
mod simd_max_pool;
// Its plans use fused chains and the whole vocabulary.
#[cfg(all(feature = "fusion", feature = "all-ops"))]
mod stand_in_attack;
mod transcendentals;
mod unsafe_fence;
mod worst_case;
