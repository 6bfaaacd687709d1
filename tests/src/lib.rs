//! What the cross-crate tests share: the conformance cases (one or more per opcode) with their
//! inputs and builders, and the dual number of forward mode (shared with the example
//! `forward_mode`). The tests themselves are one binary, `tests/tests/cross/` (one module per
//! subject), so the workspace links one test executable for them instead of one per file.
#![allow(missing_docs, clippy::unwrap_used, clippy::indexing_slicing)]

pub mod cases;
pub mod dual;
pub mod readers;
