#![doc = include_str!("../README.md")]
#![no_std]
#![forbid(unsafe_code)]

mod error;
mod limits;
mod plan;
mod session;
mod validate;

pub use error::{Operand, PlanError, RunError, Section};
pub use limits::Limits;
pub use plan::{Binding, EntryId, Plan};
pub use session::Session;
pub use validate::{Scratch, DEFAULT_SCRATCH_TENSORS};

pub use tapeplan_core::format::{BindingKind, TensorKind};
pub use tapeplan_core::{OpError, Opcode, Shape};
