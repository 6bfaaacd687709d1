//! The planner's tests that run the built `tapeplan` binary (in a scratch folder each, see
//! `common`), one module per subject, linked as one test binary (`cli`): the workspace then links
//! the planner once for them, not once per file.
//!
//! `cargo test -p tapeplan-planner --test cli` runs them all; a subject alone:
//! `cargo test -p tapeplan-planner --test cli -- cli_onnx::`. The library's own tests (no binary
//! spawned) are the other test binary, `library`.

mod common;

mod cli_any_plan;
mod cli_hostile;
mod cli_onnx;
mod cli_robustness;
mod cli_words;
mod eval;
mod exchange;
mod run_paths;
mod verify_any_plan;
mod verify_hostile;
mod verify_serial;
