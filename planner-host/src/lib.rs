//! # tapeplan-planner
//!
//! The host side of tapeplan: build a model ([`model`]), record its loss, its gradient
//! ([`tapeplan_core::Tape::differentiate`]) and its optimizer update ([`model::optim`]) as one
//! tape, plan the entries `forward` and `train_step` over one static arena ([`plan`]), write the
//! plan's bytes ([`plan::writer`]), and check the runtime against the oracle ([`exec::oracle`]).

pub mod exec;
pub mod io;
pub mod model;
pub mod plan;
pub mod protocol;

pub use plan::{plan, plan_with, EntrySpec, MemoryReport, Plan, PlanError, PlanOptions, Root};
