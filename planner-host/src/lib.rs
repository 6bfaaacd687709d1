//! # tapeplan-planner
//!
//! The host side of tapeplan: build a model ([`model`]), record its loss, its gradient
//! ([`tapeplan_core::Tape::differentiate`]) and its optimizer update ([`optim`]) as one tape,
//! plan the entries `forward` and `train_step` over one static arena ([`planner`]), write the
//! plan's bytes ([`writer`]), and check the runtime against the oracle ([`oracle`]).

pub mod data;
pub mod exchange;
pub mod inspect;
pub mod interp;
pub mod model;
pub mod optim;
pub mod oracle;
pub mod passes;
pub mod planner;
pub mod plot;
pub mod precision;
pub mod rng;
pub mod train;
pub mod verify;
pub mod writer;

pub use planner::{plan, plan_with, EntrySpec, MemoryReport, Plan, PlanError, PlanOptions, Root};
