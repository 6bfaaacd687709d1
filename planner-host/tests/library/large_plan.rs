//! A model deeper than a device plan: over the 4096 tensors `Plan::parse` validates with its
//! stack scratch, within the format's 16 384. It plans, `Plan::parse` refuses it naming the
//! way out, `Plan::parse_alloc` loads it, and it trains bit for bit with the oracle. (A plan
//! over the format's caps: `tapeplan-runtime`'s `tests/limits.rs`; the planner refuses one
//! because it validates every plan with the runtime.)

use tapeplan_planner::exec::oracle::Oracle;
use tapeplan_planner::exec::RuntimeModel;
use tapeplan_planner::model::nn::{Linear, Sequential, Tanh};
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{JobOptions, Loss, TrainingJob};
use tapeplan_planner::plan::PlanOptions;
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_runtime::{DecodeError, ParseError, Plan, DEFAULT_SCRATCH_TENSORS};

const WIDTH: usize = 4;
const BATCH: usize = 2;

fn deep(layers: usize) -> Sequential {
    let mut s = Sequential::new(&[WIDTH]);
    for _ in 0..layers {
        s = s.push(Linear::new(WIDTH, WIDTH)).push(Tanh);
    }
    s.push(Linear::new(WIDTH, 2)).seed(1)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn a_plan_over_the_stack_scratch_loads_with_parse_alloc_and_trains_bitwise() {
    let model = deep(110);
    let job = TrainingJob::for_model(&model)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(Optimizer::sgd(0.05))
        .batch(BATCH)
        // One planning attempt per entry (tape order, unfused, no SGD fusion, no transpose
        // folding), so the test stays quick in a debug build; the plan's size is what it is about.
        .options(JobOptions {
            planning: PlanOptions {
                fusion: tapeplan_planner::FusionPolicy::Off,
                fuse_sgd: false,
                fold_transposes: false,
                interleave_updates: false,
                ..PlanOptions::default()
            },
            ..JobOptions::default()
        })
        .build()
        .unwrap();
    let bytes = job.schedule.to_bytes();
    let tensors = job.schedule.tensors.len();
    assert!(tensors > DEFAULT_SCRATCH_TENSORS, "{tensors} tensors");
    match Plan::parse(&bytes) {
        Err(ParseError::Decode(DecodeError::ScratchTooSmall {
            tensors: t,
            capacity,
        })) => {
            assert_eq!(t as usize, tensors);
            assert_eq!(capacity as usize, DEFAULT_SCRATCH_TENSORS);
            let msg = Plan::parse(&bytes).unwrap_err().to_string();
            assert!(msg.contains("parse_with_scratch"), "{msg}");
        }
        other => panic!("expected ScratchTooSmall, got {other:?}"),
    }
    let plan = Plan::parse_alloc(&bytes).unwrap();
    assert_eq!(plan.arena_elems(), job.schedule.arena_elems);

    let mut rt = RuntimeModel::new(&bytes).unwrap();
    for p in &job.parameters {
        rt.load_parameter(&p.name, &p.init).unwrap();
    }
    let mut oracle = Oracle::with_initial_parameters(&job).unwrap();
    let mut rng = SplitMix64::new(4);
    for step in 0..3 {
        let x: Vec<f32> = (0..BATCH * WIDTH).map(|_| rng.next_f32() - 0.5).collect();
        let labels: Vec<f32> = (0..BATCH).map(|_| rng.below(2) as f32).collect();
        let a = rt.train_step(&x, &labels).unwrap();
        let b = oracle.step(&x, &labels).unwrap();
        assert_eq!(a.to_bits(), b.to_bits(), "step {step}: loss");
        for (p, v) in job.parameters.iter().zip(&oracle.params) {
            assert_eq!(
                bits(&rt.parameter(&p.name).unwrap()),
                bits(&v.data),
                "{}",
                p.name
            );
        }
    }
}

/// A model far over the format's caps is refused before any planning work (the old path planned
/// it in full first: minutes for a thousand layers), naming what to change.
#[test]
fn a_model_over_the_format_caps_is_refused_before_planning() {
    let err = TrainingJob::for_model(&deep(1000))
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(Optimizer::sgd(0.05))
        .batch(BATCH)
        .build()
        .unwrap_err()
        .to_string();
    assert!(err.contains("over the format's cap of 16384"), "{err}");
    assert!(err.contains("--trainable"), "{err}");
}
