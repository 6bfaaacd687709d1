//! The format's caps (`docs/plan-format.md`, "Validation", rule 1) and the validator's working
//! memory: a plan over `Plan::parse`'s stack scratch is refused with the way out named, loads
//! through a larger scratch, and a plan over the spec's caps is refused by every reader.

use crate::common;

use common::*;
use tapeplan_core::format::TensorKind;
use tapeplan_runtime::{
    DecodeError, Limits, ParseError, Plan, Scratch, Section, DEFAULT_SCRATCH_TENSORS,
};

/// The demo MLP plan with `extra` unused one-element scratch tensors appended above its arena.
fn mlp_with_tensors(extra: u32) -> Vec<u8> {
    let mut b = mlp_builder();
    let base = b.arena_elems;
    for k in 0..extra {
        b.tensor(base + 4 * k, &[1], TensorKind::Scratch);
    }
    b.arena_elems = base + 4 * extra;
    b.build()
}

#[test]
fn a_plan_over_the_stack_scratch_names_the_way_out_and_loads_with_a_larger_scratch() {
    let tensors = DEFAULT_SCRATCH_TENSORS as u32 + 1;
    let bytes = mlp_with_tensors(tensors - 10);
    let err = Plan::parse(&bytes).unwrap_err();
    assert_eq!(
        err,
        ParseError::Decode(DecodeError::ScratchTooSmall {
            tensors,
            capacity: DEFAULT_SCRATCH_TENSORS as u32,
        })
    );
    assert!(
        err.to_string().contains("Plan::parse_with_scratch"),
        "{err}"
    );
    let mut scratch = Box::new(Scratch::<8192>::new());
    let plan = Plan::parse_with_scratch(&bytes, &Limits::DEFAULT, &mut scratch).unwrap();
    assert!(plan.entry("train_step").is_some());
    #[cfg(feature = "alloc")]
    assert!(Plan::parse_alloc(&bytes).is_ok());
    // Within the stack scratch, the plan is as before.
    assert!(Plan::parse(&mlp_with_tensors(100)).is_ok());
}

#[test]
fn a_plan_over_the_format_caps_is_refused() {
    let cap = Limits::DEFAULT.max_tensors;
    assert_eq!(cap, 16_384);
    let bytes = mlp_with_tensors(cap - 10 + 1);
    let too_many = ParseError::Decode(DecodeError::TooMany {
        section: Section::Tensors,
        found: cap + 1,
        limit: cap,
    });
    assert_eq!(Plan::parse(&bytes).unwrap_err(), too_many);
    let mut scratch = Box::new(Scratch::<{ 1 << 16 }>::new());
    assert_eq!(
        Plan::parse_with_scratch(&bytes, &Limits::DEFAULT, &mut scratch).unwrap_err(),
        too_many
    );
    // Exactly at the cap, it loads.
    let at_cap = mlp_with_tensors(cap - 10);
    assert!(Plan::parse_with_scratch(&at_cap, &Limits::DEFAULT, &mut scratch).is_ok());
}
