#![doc = include_str!("../README.md")]
#![no_std]
// `deny`, not `forbid`: one fenced function (`catalog::lanes::splat_each`, a volatile read of
// a reference) allows it; nothing else may.
#![deny(unsafe_code)]
// Nothing on the decode, validate or execute path may index, unwrap or overflow on any input.
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::arithmetic_side_effects
)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod catalog;
mod checkpoint;
mod error;
mod exec;
mod fused;
mod limits;
mod plan;
mod program;
pub mod protocol;
mod session;
mod validate;

pub use checkpoint::{
    checkpoint_bytes, restore_checkpoint, save_checkpoint, write_checkpoint, Checkpoint,
    CheckpointError, CHECKPOINT_CRC_OFFSET, CHECKPOINT_HEADER_BYTES, CHECKPOINT_MAGIC,
    CHECKPOINT_VERSION,
};
pub use error::{DecodeError, ExecError, FusionRule, Operand, ParseError, Section, ValidateError};
pub use limits::Limits;
pub use plan::{Binding, EntryId, Plan};
#[cfg(feature = "decoded-run")]
pub use program::DecodedPlan;
#[cfg(all(feature = "alloc", feature = "decoded-run"))]
pub use program::DecodedPlanBuf;
pub use program::{Decoded, Program, MAX_BOUND_INPUTS};
pub use session::Session;
pub use validate::{Scratch, DEFAULT_SCRATCH_TENSORS, MAX_SCRATCH_TENSORS};

pub use tapeplan_core::format::{BindingKind, TensorKind};
pub use tapeplan_core::{
    op_set, ArithProfile, BuildOps, MathProfile, OpError, OpSet, Opcode, Ops, Shape,
};
