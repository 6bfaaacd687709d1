//! # tapeplan-planner
//!
//! The host side of tapeplan, one folder per stage, in the order the data flows:
//!
//! 1. [`model`]: model building: the layer stack ([`model::Mlp`]), losses, dropout, optimizers
//!    as recorded spec, and the **job description**: [`model::TrainingJob`] records the loss,
//!    its gradient ([`tapeplan_core::Tape::differentiate`]) and the optimizer update as one
//!    tape and plans it; [`model::RunConfig`] names a whole training run (what firmware builds
//!    and a device transcript names).
//! 2. [`plan`](mod@plan): planning, one pass per file (prune, fold/CSE, order, liveness, fusion, in-place,
//!    offsets, persistent region), whose product is the planner's [`Schedule`]; and the writer
//!    that turns a schedule into plan bytes.
//! 3. [`exec`]: host execution: the [`exec::oracle`], the schedule's interpreter, the `no_std`
//!    runtime driven from the host ([`exec::RuntimeModel`]), the training loop, device
//!    verification and transcripts.
//! 4. [`io`]: data sets, safetensors exchange and checkpoints, loss plots, plan listings.
//! 5. The `tapeplan` CLI (the binary, `src/main.rs` and `src/cli/`), which only parses options
//!    and prints.
//!
//! [`protocol`] holds what host and devices must compute alike (the seeded generator, the epoch
//! shuffle seeds, the data digest).

pub mod exec;
pub mod io;
pub mod model;
pub mod plan;
pub mod protocol;

pub use plan::{
    plan, plan_with, ChainCost, EntrySpec, FusionPolicy, MemoryReport, PlanOptions, PlanningError,
    Root, Schedule,
};
