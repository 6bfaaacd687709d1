//! The selective build (`docs/selective-build.md`): a plan parsed and run over an op set fixed
//! at compile time gives the same bits as the whole vocabulary, and a plan using an opcode
//! outside the set is refused at validation with an error naming it.

use crate::common;

use common::*;
use tapeplan_core::{op_set, BuildOps, OpError, OpSet, Opcode, Ops};
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

/// What three training steps of `mlp_plan()` give over op set `O`, from the same parameters
/// and inputs: each step's output `y` and persistent region, then the final `w`, as bits.
type Steps = (Vec<(Vec<u32>, Vec<u32>)>, Vec<u32>);

fn three_steps<O: Ops>(plan: &Plan<'_>) -> Steps {
    let (w, b) = (floats(1, 12), floats(2, 4));
    let mut arena = vec![f32::NAN; plan.arena_elems()];
    let mut s = Session::bind_selective::<O>(plan, &mut arena).unwrap();
    let train = plan.entry("train_step").unwrap();
    s.load_parameter("w", &w).unwrap();
    s.load_parameter("b", &b).unwrap();
    let steps = (0..3u64)
        .map(|step| {
            s.set_input(train, "x", &floats(10 + step, 6)).unwrap();
            s.run(train).unwrap();
            (bits(s.output(train, "y").unwrap()), bits(s.persistent()))
        })
        .collect();
    (steps, bits(s.parameter("w").unwrap()))
}

#[test]
fn selective_run_has_the_whole_vocabularys_bits() {
    use mlp::*;
    let bytes = mlp_plan();
    let whole = Plan::parse(&bytes).unwrap();
    let want = three_steps::<BuildOps>(&whole);
    for selective in [
        parse_with::<MlpOps>(&bytes),
        parse_with::<MlpAndConv>(&bytes),
    ] {
        assert_eq!(three_steps::<MlpOps>(&selective.unwrap()), want);
    }
    // The update is `w - 0.125 * w` (the builder's learning rate), elementwise: checked in
    // f64 against the session's own parameters three steps on.
    let expect: Vec<f32> = floats(1, 12)
        .iter()
        .map(|&v| {
            let mut v = v;
            for _ in 0..3 {
                v = (f64::from(v) - f64::from(LR) * f64::from(v)) as f32;
            }
            v
        })
        .collect();
    assert_eq!(want.1, bits(&expect));
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

/// The CRC-32 of `mlp_plan()`'s bytes (its header's `crc32`), pinned: the plan builder is
/// deterministic, so this changes only with the plan format or the builder (the assertion
/// in the test below then prints the new value).
const MLP_PLAN_CRC32: u32 = 0x03a9_f509;
// `mlp_plan()`, validated here in full ("on the host"), as the one plan of a build.
op_set!(struct MlpPrevalidated = [MatMul, Broadcast, Add, Tanh, Fill, Mul, Sub];
    prevalidated_crc32 = MLP_PLAN_CRC32);
// A build whose one plan is another.
op_set!(struct OtherPrevalidated = [MatMul, Broadcast, Add, Tanh, Fill, Mul, Sub];
    prevalidated_crc32 = MLP_PLAN_CRC32 ^ 1);

/// A build that names its one plan (`Ops::PREVALIDATED_CRC32`) takes that plan on its header
/// and checksum and runs it to the fully validated plan's bits; it refuses another valid plan,
/// and a corrupted copy of its own still fails the header's checksum.
#[test]
fn a_prevalidated_build_runs_its_own_plan_only() {
    let bytes = mlp_plan();
    let whole = Plan::parse(&bytes).unwrap();
    assert_eq!(
        whole.crc32(),
        MLP_PLAN_CRC32,
        "mlp_plan()'s CRC-32 changed: pin {:#010x}",
        whole.crc32()
    );
    let pre = parse_with::<MlpPrevalidated>(&bytes).unwrap();
    assert_eq!(
        three_steps::<MlpPrevalidated>(&pre),
        three_steps::<BuildOps>(&whole)
    );
    // Another plan (this one, as far as the build knows).
    let err = parse_with::<OtherPrevalidated>(&bytes).unwrap_err();
    assert_eq!(
        err,
        ParseError::Validate(ValidateError::NotPrevalidated {
            expected: MLP_PLAN_CRC32 ^ 1,
            found: MLP_PLAN_CRC32,
        })
    );
    assert!(err.to_string().contains("checksum"), "{err}");
    // A flipped bit anywhere after the header's checksum field fails the checksum first.
    let mut bad = bytes.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(matches!(
        parse_with::<MlpPrevalidated>(&bad),
        Err(ParseError::Decode(_))
    ));
}
