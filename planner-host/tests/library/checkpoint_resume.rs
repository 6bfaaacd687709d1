//! A restored run continues bit-identically to one that never stopped (issue 4): train 2N
//! steps straight, versus N steps, save a checkpoint, restore it into a fresh arena bound by a
//! fresh session, and N more.

use tapeplan_planner::exec::RuntimeModel;
use tapeplan_planner::io::data;
use tapeplan_planner::io::exchange::{checkpoint_of, restore_into_model};
use tapeplan_planner::model::optim::{Optimizer, Sgd};
use tapeplan_planner::model::{glorot_uniform, Activation, Loss, Mlp};
use tapeplan_planner::model::{JobOptions, TrainingJob};
use tapeplan_runtime::{
    checkpoint_bytes, restore_checkpoint, save_checkpoint, Checkpoint, CheckpointError, Plan,
    Session,
};

const N: usize = 12;
const BATCH: usize = 16;

fn job(lr: f32) -> TrainingJob {
    let mlp = Mlp {
        sizes: vec![64, 16, 10],
        activation: Activation::Tanh,
    };
    TrainingJob::build(mlp, Loss::SoftmaxCrossEntropy, Sgd { lr }, BATCH).unwrap()
}

/// The first `2N` batches of the digits training split, as (features, labels).
fn batches() -> Vec<(Vec<f32>, Vec<f32>)> {
    let digits = data::digits().unwrap();
    let (train, _) = digits.split_seeded(0, data::DIGITS_TRAIN_ROWS);
    let order = train.subset(&train.shuffled_indices(7));
    order
        .batches(BATCH)
        .take(2 * N)
        .map(|(x, l)| (x.to_vec(), l))
        .collect()
}

fn steps(plan: &Plan<'_>, arena: &mut [f32], batches: &[(Vec<f32>, Vec<f32>)]) -> Vec<u32> {
    let train = plan.entry("train_step").unwrap();
    let mut s = Session::bind(plan, arena).unwrap();
    let mut losses = Vec::new();
    for (x, labels) in batches {
        s.set_input(train, "x", x).unwrap();
        s.set_input(train, "labels", labels).unwrap();
        s.run(train).unwrap();
        losses.push(s.output(train, "loss").unwrap()[0].to_bits());
    }
    losses
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A fresh arena: the plan's `init` entry run (optimizer and generator state), then the
/// model's parameters from the seeded initializer.
fn initialized_arena(job: &TrainingJob, plan: &Plan<'_>) -> Vec<f32> {
    let mut arena = vec![0.0f32; plan.arena_elems()];
    let mut s = Session::bind(plan, &mut arena).unwrap();
    if let Some(init) = plan.entry("init") {
        s.run(init).unwrap();
    }
    let shapes = job.parameter_shapes();
    for ((name, _), v) in shapes.iter().zip(glorot_uniform(&shapes, 42)) {
        s.load_parameter(name, &v).unwrap();
    }
    arena
}

#[test]
fn session_resume_from_a_checkpoint_is_bit_identical_to_an_uninterrupted_run() {
    resume_is_bit_identical(&job(0.1));
}

/// Adam (moments and step counter in the persistent region), dropout (generator key and
/// counter there too) and guarded steps: all of it must come back.
/// Adam (moments and step counter in the persistent region), dropout (generator key and
/// counter there too) and guarded steps.
fn adam_dropout_job() -> TrainingJob {
    let mlp = Mlp {
        sizes: vec![64, 16, 10],
        activation: Activation::Tanh,
    };
    let options = JobOptions {
        guarded: true,
        dropout: 0.25,
        seed: 99,
        ..Default::default()
    };
    TrainingJob::build_with(
        mlp,
        Loss::SoftmaxCrossEntropy,
        Optimizer::adam(0.01),
        BATCH,
        options,
    )
    .unwrap()
}

/// All of the optimizer's and the generator's state must come back.
#[test]
fn resume_restores_optimizer_and_generator_state() {
    let job = adam_dropout_job();
    let bytes = job.schedule.to_bytes();
    let plan = Plan::parse(&bytes).unwrap();
    let names: Vec<&str> = plan.parameters().map(|b| b.name).collect();
    assert!(names.contains(&"rng.counter"), "{names:?}");
    assert!(names.iter().any(|n| n.starts_with("w1.")), "{names:?}");
    let model_elems: usize = job.parameter_shapes().iter().map(|(_, s)| s.elems()).sum();
    assert!(plan.persistent_elems() > 2 * model_elems);
    resume_is_bit_identical(&job);
}

fn resume_is_bit_identical(job: &TrainingJob) {
    let bytes = job.schedule.to_bytes();
    let plan = Plan::parse(&bytes).unwrap();
    let data = batches();
    assert_eq!(data.len(), 2 * N);
    let persistent = plan.persistent_elems();

    // 2N steps straight.
    let mut straight = initialized_arena(job, &plan);
    let straight_losses = steps(&plan, &mut straight, &data);

    // N steps, save.
    let mut first = initialized_arena(job, &plan);
    let mut losses = steps(&plan, &mut first, &data[..N]);
    let mut blob = vec![0u8; checkpoint_bytes(&plan)];
    {
        let s = Session::bind(&plan, &mut first).unwrap();
        save_checkpoint(&s, N as u32, &mut blob).unwrap();
    }
    drop(first);

    // A fresh arena (garbage in it), a fresh plan view and session: restore, N more.
    let plan2 = Plan::parse(&bytes).unwrap();
    let mut resumed = vec![f32::from_bits(0x7fc0_1234); plan2.arena_elems()];
    {
        let mut s = Session::bind(&plan2, &mut resumed).unwrap();
        assert_eq!(restore_checkpoint(&mut s, &blob), Ok(N as u32));
    }
    losses.extend(steps(&plan2, &mut resumed, &data[N..]));

    assert_eq!(losses, straight_losses, "loss trace differs after resume");
    assert_eq!(
        bits(&resumed[..persistent]),
        bits(&straight[..persistent]),
        "persistent region differs after resume"
    );
    // And training did move the state (the test is not vacuous): everything but the
    // generator's key, which is constant.
    let init = initialized_arena(job, &plan);
    for b in plan.parameters().filter(|b| b.name != "rng.key") {
        assert_ne!(
            bits(&init[b.range()]),
            bits(&straight[b.range()]),
            "{} never changed",
            b.name
        );
    }
}

#[test]
fn runtime_model_resume_through_the_host_helpers_is_bit_identical() {
    for job in [job(0.1), adam_dropout_job()] {
        runtime_model_resume(&job);
    }
}

fn runtime_model_resume(job: &TrainingJob) {
    let bytes = job.schedule.to_bytes();
    let data = batches();
    let shapes = job.parameter_shapes();
    let init = glorot_uniform(&shapes, 42);
    let load = |m: &mut RuntimeModel<'_>| {
        for ((name, _), v) in shapes.iter().zip(&init) {
            m.load_parameter(name, v).unwrap();
        }
    };

    let mut straight = RuntimeModel::new(&bytes).unwrap();
    load(&mut straight);
    for (x, l) in &data {
        straight.train_step(x, l).unwrap();
    }

    let mut first = RuntimeModel::new(&bytes).unwrap();
    load(&mut first);
    for (x, l) in &data[..N] {
        first.train_step(x, l).unwrap();
    }
    let blob = checkpoint_of(&first, 3).unwrap();
    drop(first);

    let mut resumed = RuntimeModel::new(&bytes).unwrap();
    let ck = Checkpoint::parse(&blob).unwrap();
    assert_eq!(ck.sequence(), 3);
    restore_into_model(&mut resumed, &ck).unwrap();
    for (x, l) in &data[N..] {
        resumed.train_step(x, l).unwrap();
    }
    assert_eq!(bits(resumed.persistent()), bits(straight.persistent()));
}

#[test]
fn a_checkpoint_of_another_plan_is_refused() {
    let a = job(0.1);
    let b = job(0.05); // same layout, another learning rate: another plan_id
    let (a_bytes, b_bytes) = (a.schedule.to_bytes(), b.schedule.to_bytes());
    let (pa, pb) = (
        Plan::parse(&a_bytes).unwrap(),
        Plan::parse(&b_bytes).unwrap(),
    );
    assert_ne!(pa.plan_id(), pb.plan_id());
    assert_eq!(pa.persistent_elems(), pb.persistent_elems());

    let mut arena = initialized_arena(&a, &pa);
    let mut blob = vec![0u8; checkpoint_bytes(&pa)];
    save_checkpoint(&Session::bind(&pa, &mut arena).unwrap(), 0, &mut blob).unwrap();

    let mut other = initialized_arena(&b, &pb);
    let before = bits(&other);
    let mut s = Session::bind(&pb, &mut other).unwrap();
    assert_eq!(
        restore_checkpoint(&mut s, &blob),
        Err(CheckpointError::WrongPlan {
            checkpoint_plan_id: pa.plan_id(),
            plan_id: pb.plan_id()
        })
    );
    assert_eq!(bits(&other), before);

    let mut model = RuntimeModel::new(&b_bytes).unwrap();
    let err = restore_into_model(&mut model, &Checkpoint::parse(&blob).unwrap()).unwrap_err();
    assert!(err.to_string().contains("not to this plan"), "{err}");
}
