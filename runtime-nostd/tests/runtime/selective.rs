//! The selective build (`docs/selective-build.md`): a plan parsed and run over an op set fixed
//! at compile time gives the same bits as the whole vocabulary, and a plan using an opcode
//! outside the set is refused at validation with an error naming it.

use crate::common;

use common::*;
use tapeplan_core::{op_set, OpError, OpSet, Opcode, Ops};
use tapeplan_runtime::{Limits, ParseError, Plan, Scratch, Session, ValidateError};

// The MLP plan's instructions, listed by hand from `mlp_builder` (not from the plan).
op_set!(struct MlpOps = [MatMul, Broadcast, Add, Tanh, Fill, Mul, Sub]);
// The same without `tanh`.
op_set!(struct NoTanh = [MatMul, Broadcast, Add, Fill, Mul, Sub]);
// The same with `conv` too (an op set may hold more than the plan uses).
op_set!(struct MlpAndConv = [MatMul, Broadcast, Add, Tanh, Fill, Mul, Sub, Conv]);

fn parse_with<O: Ops>(bytes: &[u8]) -> Result<Plan<'_>, ParseError> {
    let mut scratch = Scratch::<64>::new();
    Plan::parse_selective::<O, 64>(bytes, &Limits::DEFAULT, &mut scratch)
}

#[test]
fn plan_op_set_is_the_instructions_opcodes() {
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let set = plan.op_set();
    assert_eq!(set, MlpOps::SET);
    assert_eq!(set.len(), 7);
    assert_eq!(
        set.to_string(),
        "fill, add, sub, mul, tanh, matmul, broadcast"
    );
    assert_eq!(
        set.variants().to_string(),
        "Fill, Add, Sub, Mul, Tanh, MatMul, Broadcast"
    );
    assert!(!set.contains(Opcode::Conv) && !set.contains(Opcode::Input));
    assert_eq!(set.iter().collect::<OpSet>(), set);
    assert_eq!(
        set.intersection(NoTanh::SET)
            .union(OpSet::EMPTY.with(Opcode::Tanh)),
        set
    );
    // The core set holds all of them; `conv` is not in it.
    assert_eq!(set.intersection(OpSet::CORE), set);
    assert!(!OpSet::CORE.contains(Opcode::Conv) && OpSet::ALL.contains(Opcode::Conv));
    assert_eq!(OpSet::ALL.len(), Opcode::ALL.len());
}

#[test]
fn selective_run_has_the_whole_vocabularys_bits() {
    use mlp::*;
    let bytes = mlp_plan();
    let whole = Plan::parse(&bytes).unwrap();
    for selective in [
        parse_with::<MlpOps>(&bytes),
        parse_with::<MlpAndConv>(&bytes),
    ] {
        let selective = selective.unwrap();
        let (w, b) = (floats(1, 12), floats(2, 4));
        let mut arena_a = vec![f32::NAN; whole.arena_elems()];
        let mut arena_b = vec![f32::NAN; whole.arena_elems()];
        let mut a = Session::bind(&whole, &mut arena_a).unwrap();
        let mut s = Session::bind_selective::<MlpOps>(&selective, &mut arena_b).unwrap();
        let train = whole.entry("train_step").unwrap();
        a.load_parameter("w", &w).unwrap();
        a.load_parameter("b", &b).unwrap();
        s.load_parameter("w", &w).unwrap();
        s.load_parameter("b", &b).unwrap();
        for step in 0..3u64 {
            let x = floats(10 + step, 6);
            a.set_input(train, "x", &x).unwrap();
            a.run(train).unwrap();
            s.set_input(train, "x", &x).unwrap();
            s.run(train).unwrap();
            assert_eq!(
                bits(a.output(train, "y").unwrap()),
                bits(s.output(train, "y").unwrap())
            );
            assert_eq!(bits(a.persistent()), bits(s.persistent()));
        }
        // The update is `w - 0.125 * w` (the builder's learning rate), elementwise: checked in
        // f64 against the session's own parameters three steps on.
        let expect: Vec<f32> = w
            .iter()
            .map(|&v| {
                let mut v = v;
                for _ in 0..3 {
                    v = (f64::from(v) - f64::from(LR) * f64::from(v)) as f32;
                }
                v
            })
            .collect();
        assert_eq!(bits(s.parameter("w").unwrap()), bits(&expect));
    }
}

#[test]
fn opcode_outside_the_set_is_refused_by_name() {
    let bytes = mlp_plan();
    let err = parse_with::<NoTanh>(&bytes).unwrap_err();
    match err {
        ParseError::Validate(ValidateError::ShapeRule { instr, error }) => {
            assert_eq!(instr, 3, "the fourth instruction is the tanh");
            assert_eq!(error, OpError::Unsupported { op: Opcode::Tanh });
        }
        other => panic!("expected the shape rule's refusal, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("tanh"), "{message}");
    assert!(message.contains("selective build's op set"), "{message}");
}

#[test]
fn session_over_a_smaller_set_refuses_to_run_the_opcode() {
    // Parsed over the whole vocabulary, run over a set without `tanh`: the run answers an
    // error naming the opcode, never a panic or other bits.
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let mut arena = vec![0.0f32; plan.arena_elems()];
    let mut s = Session::bind_selective::<NoTanh>(&plan, &mut arena).unwrap();
    let fwd = plan.entry("forward").unwrap();
    let err = s.run(fwd).unwrap_err();
    assert!(err.to_string().contains("tanh"), "{err}");
}
