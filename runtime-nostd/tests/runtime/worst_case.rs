//! Validation time stays bounded for plans at the spec's limits.

use crate::common;

use std::time::Instant;

use common::*;
use tapeplan_core::format::{BindingKind, TensorKind};
use tapeplan_core::Opcode;
use tapeplan_runtime::Plan;

/// 4096 tensors sharing one range, a chain of 4095 in-place `neg`s, 16 entries running all of
/// it: every pair of tensors must be looked at.
fn chain_plan() -> Vec<u8> {
    let mut b = Builder::new(4, 0);
    let mut prev = b.tensor(0, &[4], TensorKind::Scratch);
    let first = prev;
    for _ in 0..4095 {
        let t = b.tensor(0, &[4], TensorKind::Scratch);
        b.instr(Opcode::Neg, t, &[prev], 0);
        prev = t;
    }
    for e in 0..16 {
        let e = b.entry(&format!("e{e}"), 0, 4095);
        b.bind("x", BindingKind::Input, e, first);
        b.bind("y", BindingKind::Output, e, prev);
    }
    b.build()
}

#[test]
fn chain_at_the_limits_validates_and_runs() {
    let bytes = chain_plan();
    let t = Instant::now();
    let plan = Plan::parse(&bytes).unwrap();
    let took = t.elapsed();
    eprintln!("validated {} bytes in {took:?}", bytes.len());
    assert_eq!(plan.n_tensors(), 4096);
    run_everything(&bytes);
}
