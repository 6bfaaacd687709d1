//! The planner's library tests (no `tapeplan` process spawned), one module per subject, linked as
//! one test binary (`library`): the workspace then links the planner once for them, not once per
//! file.
//!
//! `cargo test -p tapeplan-planner --test library` runs them all; a subject alone:
//! `cargo test -p tapeplan-planner --test library -- onnx_ort::` (`cargo xtask ort-check` runs
//! that one this way). The tests that run the CLI are the other test binary, `cli`.

mod checkpoint_resume;
mod emit;
mod general_job;
mod hostile_inputs;
mod large_plan;
mod long_names;
mod mlp_plan_bytes;
mod nn_job;
mod onnx;
mod onnx_ort;
mod remat;
