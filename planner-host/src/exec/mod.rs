//! Host execution: the oracle, the interpreter, the runtime driven from the host, verification.

pub mod interp;
pub mod oracle;
pub mod precision;
pub mod runtime;
pub mod verify;
