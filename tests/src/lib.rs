//! Cross-crate tests live in `tests/`; this library holds what they share with the examples.

pub mod dual;
