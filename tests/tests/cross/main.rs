//! The cross-crate tests, one module per subject, linked as one test binary (`cross`): the
//! workspace then builds one executable for them, not one per file.
//!
//! `cargo test -p tapeplan-tests` runs them all; a subject alone: `cargo test -p tapeplan-tests
//! --test cross -- fusion::` (the simd step of `cargo xtask ci` runs `simd_training::`,
//! `fusion::` and `fusion_hostile_chains::` this way under `--features simd`).
//!
//! What the modules share (the conformance cases, the one sequential interpreter of plan bytes,
//! the test generator, the runtime tests' plan builder) is the crate's library, `tapeplan_tests`.

mod activations;
mod arena;
mod closure;
mod conformance;
mod conv;
mod dropout;
mod eager;
mod forward_mode;
mod fusion;
mod fusion_hostile;
mod fusion_hostile_chains;
mod higher_order;
mod hostile;
mod normalization;
mod numerics;
mod optimizers;
mod passes;
mod pooling;
mod reductions;
mod seeds;
mod sgd_fusion;
mod simd_training;
mod spec;
mod training;
mod transpose_fold;
