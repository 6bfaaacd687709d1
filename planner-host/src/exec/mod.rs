//! Stage 3, host execution: the oracle ([`oracle`]), the schedule's interpreter ([`interp`]),
//! the `no_std` runtime driven from the host ([`runtime`]), a plan file replayed with the
//! reference kernels ([`replay`]), rounding-error reports
//! ([`precision`]), and device verification: transcripts ([`transcript`]), the check
//! ([`verify`]) and its outcome ([`report`]).

pub mod forward;
pub mod interp;
pub mod oracle;
pub mod precision;
pub mod replay;
pub mod report;
pub mod runtime;
pub mod training;
pub mod transcript;
pub mod verify;

pub use oracle::{first_difference, same_bits, BitDiff, Oracle, OracleError, Parameters};
pub use runtime::{argmax, RuntimeModel, TrainError};
