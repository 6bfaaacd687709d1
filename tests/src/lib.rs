//! What the cross-crate tests share: the conformance cases (one or more per opcode) with their
//! inputs and builders, the dual number of forward mode (shared with the example
//! `forward_mode`), the one sequential reference interpreter of plan bytes and the test
//! generator of the hostile suites, and the runtime tests' plan builder. The tests themselves are
//! one binary, `tests/tests/cross/` (one module per subject), so the workspace links one test
//! executable for them instead of one per file.
#![allow(missing_docs, clippy::unwrap_used, clippy::indexing_slicing)]

pub mod alike;
/// The runtime tests' plan builder, record editors and host helpers, included by path: the
/// runtime's own tests cannot depend on this crate, and the fused-chain suite moved here from
/// them builds its plans with it.
#[path = "../../runtime-nostd/tests/common/mod.rs"]
pub mod builder;
pub mod cases;
pub mod dual;
pub mod readers;
#[path = "../../runtime-nostd/tests/common/rng.rs"]
pub mod rng;
pub mod sequential;
