//! The cross-crate tests, one module per subject, linked as one test binary (`cross`): the
//! workspace then builds one executable for them, not one per file.
//!
//! `cargo test -p tapeplan-tests` runs them all; a subject alone: `cargo test -p tapeplan-tests
//! --test cross -- fusion::` (the simd step of `cargo xtask ci` runs `simd_training::` and
//! `fusion::` this way under `--features simd`).

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
mod higher_order;
mod hostile;
mod normalization;
mod numerics;
mod optimizers;
mod passes;
mod pooling;
mod reductions;
mod seeds;
mod simd_training;
mod spec;
mod training;
