//! Host tests of the Rust API under the JavaScript one: the digits job, trained through a
//! [`Trainer`], against the planner's oracle, bit for bit; and every rejection path answers an
//! [`Error`] rather than panicking.

use tapeplan_planner::exec::Oracle;
use tapeplan_planner::io::data;
use tapeplan_planner::model::optim::Sgd;
use tapeplan_planner::model::TrainingJob;
use tapeplan_planner::model::{glorot_uniform, Activation, Loss, Mlp};
use tapeplan_runtime::protocol::digest_f32;
use tapeplan_runtime::{BindingKind, ExecError};

use super::{Error, Trainer};

fn digits_job() -> TrainingJob {
    let mlp = Mlp {
        sizes: vec![64, 32, 10],
        activation: Activation::Tanh,
    };
    TrainingJob::build(mlp, Loss::SoftmaxCrossEntropy, Sgd { lr: 0.1 }, 32).unwrap()
}

fn loaded(job: &TrainingJob, seed: u64) -> (Trainer, Vec<Vec<f32>>) {
    let mut t = Trainer::from_bytes(&job.schedule.to_bytes()).unwrap();
    let init = glorot_uniform(&job.parameter_shapes(), seed);
    for ((name, _), v) in job.parameter_shapes().iter().zip(&init) {
        t.load_parameter(name, v).unwrap();
    }
    (t, init)
}

#[test]
fn describes_the_plan() {
    let job = digits_job();
    let (t, _) = loaded(&job, 1);
    assert_eq!(t.parameter_names(), ["w1", "b1", "w2", "b2"]);
    let mut entries = t.entry_names();
    entries.sort();
    assert_eq!(entries, ["forward", "train_step"]);
    assert_eq!(t.parameter_shape("w1").unwrap(), [64, 32]);
    assert_eq!(t.parameter_shape("b2").unwrap(), [10]);
    assert_eq!(t.input_shape("train_step", "x").unwrap(), [32, 64]);
    assert_eq!(t.input_shape("train_step", "labels").unwrap(), [32]);
    assert_eq!(t.output_shape("forward", "logits").unwrap(), [32, 10]);
    assert_eq!(t.output_names("train_step").unwrap(), ["loss"]);
    assert_eq!(t.parameter_elems(), 64 * 32 + 32 + 32 * 10 + 10);
    assert!(t.persistent().len() >= t.parameter_elems());
}

#[test]
fn trains_bit_for_bit_with_the_oracle() {
    let job = digits_job();
    let (mut t, init) = loaded(&job, 42);
    let mut oracle = Oracle::new(&job, &init).unwrap();
    let digits = data::digits().unwrap();
    let (train, _) = digits.split_seeded(0, data::DIGITS_TRAIN_ROWS);
    for (x, labels) in train.batches(32).take(12) {
        let loss = t.train_step(x, &labels).unwrap();
        let expected = oracle.step(x, &labels).unwrap();
        assert_eq!(loss.to_bits(), expected.to_bits());
    }
    let names = t.parameter_names();
    let mut image = vec![0.0f32; t.persistent().len()];
    for (name, p) in names.iter().zip(&oracle.params) {
        let got = t.parameter(name).unwrap();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&p.data), "{name}");
        let b = job_binding_range(&t, name);
        image[b].copy_from_slice(&p.data);
    }
    // The digest is of the persistent region: the oracle's parameters placed where the plan
    // keeps them, padding zero.
    assert_eq!(t.digest(), format!("{:016x}", digest_f32(&image)));
    let x = &train.features[..32 * 64];
    let logits = t.forward(x).unwrap();
    let expected = oracle.logits(x).unwrap();
    assert_eq!(
        logits.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
        expected.iter().map(|f| f.to_bits()).collect::<Vec<_>>()
    );
}

fn job_binding_range(t: &Trainer, name: &str) -> std::ops::Range<usize> {
    t.binding("", BindingKind::Parameter, name).unwrap().range()
}

#[test]
fn parameters_and_persistent_round_trip() {
    let job = digits_job();
    let (t, init) = loaded(&job, 7);
    let all: Vec<f32> = init.concat();
    assert_eq!(t.parameters(), all);
    let digest = t.digest();
    let saved = t.persistent().to_vec();
    let mut u = Trainer::from_bytes(&job.schedule.to_bytes()).unwrap();
    assert_ne!(u.digest(), digest);
    u.load_parameters(&all).unwrap();
    assert_eq!(u.digest(), digest);
    let mut v = Trainer::from_bytes(&job.schedule.to_bytes()).unwrap();
    v.load_persistent(&saved).unwrap();
    assert_eq!(v.digest(), digest);
    assert_eq!(
        u.load_parameters(&all[1..]),
        Err(Error::Length {
            what: "parameters",
            expected_elems: all.len(),
            found_elems: all.len() - 1
        })
    );
    assert!(matches!(u.load_persistent(&[]), Err(Error::Length { .. })));
    // A failed load changes nothing.
    assert_eq!(u.digest(), digest);
}

#[test]
fn generic_entry_calls_match_the_convenience_ones() {
    let job = digits_job();
    let (mut a, _) = loaded(&job, 3);
    let (mut b, _) = loaded(&job, 3);
    let digits = data::digits().unwrap();
    let (x, labels) = digits.batches(32).next().unwrap();
    let loss = a.train_step(x, &labels).unwrap();
    b.set_input("train_step", "x", x).unwrap();
    b.set_input("train_step", "labels", &labels).unwrap();
    b.run("train_step").unwrap();
    assert_eq!(b.output("train_step", "loss").unwrap(), [loss]);
    assert_eq!(a.digest(), b.digest());
    b.set_input("forward", "x", x).unwrap();
    b.run("forward").unwrap();
    assert_eq!(
        b.output("forward", "logits").unwrap(),
        a.forward(x).unwrap()
    );
}

#[test]
fn bad_plan_bytes_are_errors_with_the_runtime_message() {
    let job = digits_job();
    let bytes = job.schedule.to_bytes();
    for bad in [
        &[][..],
        &bytes[..bytes.len() - 1],
        &bytes[..40],
        b"not a plan at all, just some text",
    ] {
        let e = Trainer::from_bytes(bad).err().expect("rejected");
        assert!(matches!(e, Error::Plan(_)), "{e}");
        assert!(e.to_string().starts_with("plan rejected: "), "{e}");
    }
    // One flipped byte anywhere: rejected (the checksum covers every byte) and never a panic.
    for i in (0..bytes.len()).step_by(7) {
        let mut b = bytes.clone();
        b[i] ^= 0x5a;
        assert!(Trainer::from_bytes(&b).is_err(), "byte {i}");
    }
}

#[test]
#[cfg(feature = "messages")]
fn misuse_is_an_error_naming_what_was_wrong() {
    let job = digits_job();
    let (mut t, _) = loaded(&job, 1);
    let e = t.load_parameter("w9", &[0.0]).unwrap_err();
    assert_eq!(
        e,
        Error::Run {
            context: "parameter \"w9\"".into(),
            error: ExecError::UnknownName {
                kind: BindingKind::Parameter
            }
        }
    );
    assert_eq!(e.to_string(), "parameter \"w9\": no parameter of that name");
    let e = t.load_parameter("b1", &[0.0; 3]).unwrap_err();
    assert!(
        e.to_string()
            .contains("3 elements given where the tensor has 32"),
        "{e}"
    );
    assert_eq!(
        t.run("backward").unwrap_err().to_string(),
        "the plan has no entry named \"backward\""
    );
    assert_eq!(
        t.train_step(&[0.0; 5], &[0.0; 32]).unwrap_err().to_string(),
        "input \"x\" of train_step: 5 elements given where the tensor has 2048"
    );
    assert_eq!(
        t.train_step(&[0.0; 2048], &[0.0; 31])
            .unwrap_err()
            .to_string(),
        "input \"labels\" of train_step: 31 elements given where the tensor has 32"
    );
    assert!(t.forward(&[0.0; 5]).is_err());
    assert!(t.set_input("forward", "labels", &[0.0; 32]).is_err());
    assert!(t.output("forward", "loss").is_err());
    assert!(t.input_shape("train_step", "z").is_err());
    assert!(t.parameter_shape("nope").is_err());
}

tapeplan_runtime::op_set!(
    /// The digits MLP's opcodes: what `cargo xtask wasm-small` puts in the small module's
    /// `WasmOps` for the demo's plan.
    struct DigitsOps = [
        Fill, Add, Sub, Mul, Div, Neg, Tanh, Exp, Log, Detach, MatMul, Broadcast, SumTo, MaxTo,
        OneHot, SgdMatMul, MatMulNt
    ]
);

#[test]
fn a_selective_build_refuses_a_plan_outside_its_op_set_naming_the_opcode() {
    use tapeplan_runtime::{Ops, ParseError, ValidateError};
    let tanh = digits_job().schedule.to_bytes();
    let plan = super::parse_in::<DigitsOps>(&tanh).unwrap();
    assert_eq!(plan.op_set(), DigitsOps::SET);

    let relu = TrainingJob::build(
        Mlp {
            sizes: vec![64, 32, 10],
            activation: Activation::Relu,
        },
        Loss::SoftmaxCrossEntropy,
        Sgd { lr: 0.1 },
        32,
    )
    .unwrap()
    .schedule
    .to_bytes();
    // The whole vocabulary loads it; the digits MLP's set does not, and says which opcode.
    assert!(super::parse_in::<tapeplan_runtime::BuildOps>(&relu).is_ok());
    let e = Error::from(super::parse_in::<DigitsOps>(&relu).unwrap_err());
    assert!(
        matches!(
            e,
            Error::Plan(ParseError::Validate(ValidateError::ShapeRule {
                error: tapeplan_runtime::OpError::Unsupported {
                    op: tapeplan_runtime::Opcode::Relu
                },
                ..
            }))
        ),
        "{e:?}"
    );
    // With the messages, the runtime's; without (the small module), the variants, which name
    // the opcode too.
    let want = if cfg!(feature = "messages") {
        "plan rejected: instruction 3: relu is not in this build's vocabulary"
    } else {
        "plan rejected: Validate(ShapeRule { instr: 3, error: Unsupported { op: Relu } })"
    };
    assert!(e.to_string().starts_with(want), "{e}");
}

#[test]
#[cfg(not(feature = "messages"))]
fn without_messages_an_error_names_its_variant_and_fields() {
    let job = digits_job();
    let (mut t, _) = loaded(&job, 1);
    let e = t.load_parameter("w9", &[0.0]).unwrap_err();
    assert_eq!(
        e,
        Error::Run {
            context: "parameter \"w9\"".into(),
            error: ExecError::UnknownName {
                kind: BindingKind::Parameter
            }
        }
    );
    assert_eq!(
        e.to_string(),
        "parameter \"w9\": UnknownName { kind: Parameter }"
    );
    assert_eq!(
        t.train_step(&[0.0; 5], &[0.0; 32]).unwrap_err().to_string(),
        "input \"x\" of train_step: LengthMismatch { expected_elems: 2048, found_elems: 5 }"
    );
}
