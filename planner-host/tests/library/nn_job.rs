//! The layer API through the general training job: a CNN `Sequential` with batch normalization
//! (buffers updated by the training step) and dropout (the job's generator), planned and
//! trained through the `no_std` runtime, bit for bit against the oracle at every step for SGD
//! and Adam; the `forward` entry likewise; a frozen backbone plans a smaller arena.

use tapeplan_planner::exec::oracle::Oracle;
use tapeplan_planner::exec::RuntimeModel;
use tapeplan_planner::model::nn::{
    BatchNorm1d, Conv1d, Dropout, Flatten, Linear, MaxPool1d, ReLU, Sequential,
};
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{JobOptions, Loss, TrainingJob};
use tapeplan_planner::plan::PlanOptions;
use tapeplan_planner::protocol::SplitMix64;

const BATCH: usize = 8;
const LENGTH: usize = 12;
const CLASSES: usize = 3;

fn cnn() -> Sequential {
    Sequential::new(&[1, LENGTH])
        .push(Conv1d::new(1, 4, 3).padding(1))
        .push(BatchNorm1d::new(4))
        .push(ReLU)
        .push(MaxPool1d::new(2))
        .push(Dropout::new(0.2))
        .push(Flatten)
        .push_named("fc", Linear::new(4 * LENGTH / 2, CLASSES))
        .seed(5)
}

/// A batch: signals uniform in `[-1, 1)`, labels in `0..CLASSES`.
fn batch(rng: &mut SplitMix64) -> (Vec<f32>, Vec<f32>) {
    let x = (0..BATCH * LENGTH)
        .map(|_| 2.0 * rng.next_f32() - 1.0)
        .collect();
    let labels = (0..BATCH).map(|_| rng.below(CLASSES) as f32).collect();
    (x, labels)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn train_bitwise(optimizer: Optimizer) {
    train_bitwise_model(&cnn(), optimizer, &["*"]);
}

fn train_bitwise_model(model: &Sequential, optimizer: Optimizer, trainable: &[&str]) {
    let job = TrainingJob::for_model(model)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(optimizer)
        .batch(BATCH)
        .trainable(trainable.iter().copied())
        .options(JobOptions {
            seed: 11,
            ..JobOptions::default()
        })
        .build()
        .unwrap();
    let bytes = job.schedule.to_bytes();
    let mut rt = RuntimeModel::new(&bytes).unwrap();
    for p in &job.parameters {
        rt.load_parameter(&p.name, &p.init).unwrap();
    }
    let mut oracle = Oracle::with_initial_parameters(&job).unwrap();
    let mut rng = SplitMix64::new(3);
    let steps = 10;
    for step in 0..steps {
        let (x, labels) = batch(&mut rng);
        let a = rt.train_step(&x, &labels).unwrap();
        let b = oracle.step(&x, &labels).unwrap();
        assert!(a.is_finite());
        assert_eq!(a.to_bits(), b.to_bits(), "step {step}: loss");
        for (p, v) in job.parameters.iter().zip(&oracle.params) {
            assert_eq!(
                bits(&rt.parameter(&p.name).unwrap()),
                bits(&v.data),
                "step {step}: {}",
                p.name
            );
        }
        for (s, v) in job.state_specs.iter().zip(&oracle.state) {
            assert_eq!(
                bits(&rt.parameter(&s.name).unwrap()),
                bits(&v.data),
                "step {step}: {}",
                s.name
            );
        }
    }
    // The buffers moved as PyTorch's: one count per training step, a running mean away from 0.
    assert_eq!(
        rt.parameter("1.num_batches_tracked").unwrap(),
        vec![steps as f32]
    );
    assert!(rt
        .parameter("1.running_mean")
        .unwrap()
        .iter()
        .any(|&m| m != 0.0));
    // Inference: no dropout, the running statistics; the same bits as the oracle's.
    let (x, _) = batch(&mut rng);
    assert_eq!(
        bits(&rt.logits(&x).unwrap()),
        bits(&oracle.logits(&x).unwrap())
    );
}

#[test]
fn a_cnn_sequential_trains_bitwise_with_sgd() {
    train_bitwise(Optimizer::sgd(0.1));
}

#[test]
fn a_cnn_sequential_trains_bitwise_with_adam() {
    train_bitwise(Optimizer::adam(0.01));
}

#[test]
fn a_frozen_backbone_plans_a_smaller_arena() {
    let model = cnn();
    let partial = TrainingJob::for_model(&model)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(Optimizer::adam(0.01))
        .batch(BATCH)
        .trainable(["fc.*"])
        .build()
        .unwrap();
    let full = partial.full_update_arena_bytes.unwrap();
    let arena = RuntimeModel::new(&partial.schedule.to_bytes())
        .unwrap()
        .arena_bytes();
    assert!(arena < full, "partial {arena} B, full {full} B");
    assert_eq!(partial.trainable_names(), vec!["fc.weight", "fc.bias"]);
}

/// Three convolution + batch-norm blocks, frozen, under a trainable head.
fn deep() -> Sequential {
    let mut s = Sequential::new(&[1, LENGTH])
        .push(Conv1d::new(1, 6, 3).padding(1))
        .push(BatchNorm1d::new(6))
        .push(ReLU);
    for _ in 0..2 {
        s = s
            .push(Conv1d::new(6, 6, 3).padding(1))
            .push(BatchNorm1d::new(6))
            .push(ReLU);
    }
    s.push(Flatten)
        .push_named("fc", Linear::new(6 * LENGTH, CLASSES))
        .seed(9)
}

/// A frozen backbone's parameter-only work (the batch norms' broadcast weights and biases,
/// which the evaluation forward recorded first) is computed right before its reader instead of
/// at the start of the step: a smaller `train_step`, the same bits.
#[test]
fn work_on_frozen_parameters_is_computed_just_in_time() {
    let model = deep();
    let plan = |interleave_updates: bool| {
        TrainingJob::for_model(&model)
            .loss(Loss::SoftmaxCrossEntropy)
            .optimizer(Optimizer::adam(0.01))
            .batch(BATCH)
            .trainable(["fc.*"])
            .options(JobOptions {
                planning: PlanOptions {
                    interleave_updates,
                    ..PlanOptions::default()
                },
                ..JobOptions::default()
            })
            .build()
            .unwrap()
    };
    let arena = |job: &TrainingJob| job.schedule.entry("train_step").unwrap().report.entry_bytes;
    let job = plan(true);
    let (aware, tape) = (arena(&job), arena(&plan(false)));
    assert!(aware < tape, "memory-aware {aware} B, tape order {tape} B");
    // Each instruction computed from frozen parameters and constants alone comes right before
    // its first reader: only other such instructions lie between them.
    let entry = job.schedule.entry("train_step").unwrap();
    let updated: Vec<&str> = entry.updates.iter().map(|(n, _)| n.as_str()).collect();
    let mut frozen: std::collections::BTreeSet<u32> = job
        .schedule
        .parameters
        .iter()
        .filter(|(name, _, _)| !updated.contains(&name.as_str()))
        .map(|(_, t, _)| *t)
        .collect();
    let mut frozen_only = vec![false; entry.instrs.len()];
    for (k, i) in entry.instrs.iter().enumerate() {
        let args = &i.args[..i.op.arity()];
        if args.iter().all(|a| frozen.contains(a)) {
            frozen_only[k] = true;
            frozen.insert(i.out);
        }
    }
    let sunk = frozen_only.iter().filter(|&&f| f).count();
    assert!(sunk > 6, "{sunk} instructions on frozen parameters");
    for (k, i) in entry.instrs.iter().enumerate() {
        if !frozen_only[k] {
            continue;
        }
        let reader = (k + 1..entry.instrs.len())
            .find(|&r| entry.instrs[r].args[..entry.instrs[r].op.arity()].contains(&i.out))
            .unwrap();
        assert!(
            (k + 1..reader).all(|j| frozen_only[j]),
            "instruction {k} ({:?}) is read first at {reader}",
            i.op
        );
    }
    train_bitwise_model(&model, Optimizer::adam(0.01), &["fc.*"]);
}

/// A frozen backbone whose batch norms stay in evaluation mode (`eval_mode(true)`, PyTorch's
/// `backbone.eval()`): the head trains bit for bit against the oracle, the running statistics
/// and counts never move, and the plan is smaller than with batch statistics.
#[test]
fn a_frozen_backbone_in_eval_mode_keeps_its_running_statistics() {
    let model = |eval_mode: bool| {
        Sequential::new(&[1, LENGTH])
            .push(Conv1d::new(1, 4, 3).padding(1))
            .push(BatchNorm1d::new(4).eval_mode(eval_mode))
            .push(ReLU)
            .push(Flatten)
            .push_named("fc", Linear::new(4 * LENGTH, CLASSES))
            .seed(5)
    };
    let job_of = |m: &Sequential| {
        TrainingJob::for_model(m)
            .loss(Loss::SoftmaxCrossEntropy)
            .optimizer(Optimizer::adam(0.01))
            .batch(BATCH)
            .trainable(["fc.*"])
            .build()
            .unwrap()
    };
    let (eval_model, train_model) = (model(true), model(false));
    let job = job_of(&eval_model);
    let batch_stats = job_of(&train_model);
    assert!(
        job.schedule.arena_elems < batch_stats.schedule.arena_elems,
        "{} vs {} elements",
        job.schedule.arena_elems,
        batch_stats.schedule.arena_elems
    );
    let bytes = job.schedule.to_bytes();
    let mut rt = RuntimeModel::new(&bytes).unwrap();
    for p in &job.parameters {
        rt.load_parameter(&p.name, &p.init).unwrap();
    }
    let mut oracle = Oracle::with_initial_parameters(&job).unwrap();
    let mut rng = SplitMix64::new(3);
    for step in 0..5 {
        let (x, labels) = batch(&mut rng);
        let a = rt.train_step(&x, &labels).unwrap();
        let b = oracle.step(&x, &labels).unwrap();
        assert_eq!(a.to_bits(), b.to_bits(), "step {step}: loss");
        assert_eq!(
            bits(&rt.parameter("fc.weight").unwrap()),
            bits(
                &oracle.params[job
                    .parameters
                    .iter()
                    .position(|p| p.name == "fc.weight")
                    .unwrap()]
                .data
            ),
            "step {step}: fc.weight"
        );
    }
    // The running statistics are in the plan (the normalization reads them) and unchanged;
    // `num_batches_tracked` is read by nothing, yet kept (`Root::Keep`), unchanged too, so the
    // plan's tensors are the whole state_dict.
    for name in ["1.running_mean", "1.running_var", "1.num_batches_tracked"] {
        let init = &job.parameters.iter().find(|p| p.name == name).unwrap().init;
        assert_eq!(bits(&rt.parameter(name).unwrap()), bits(init), "{name}");
    }
    // So the export is the whole state_dict PyTorch's `load_state_dict` (strict) wants, and
    // a state_dict with the count imports back.
    let plan = tapeplan_runtime::Plan::parse_alloc(&bytes).unwrap();
    let exported =
        tapeplan_planner::io::exchange::export_plan_params(&plan, rt.persistent()).unwrap();
    let keys: Vec<String> = safetensors::SafeTensors::deserialize(&exported)
        .unwrap()
        .names()
        .into_iter()
        .map(str::to_owned)
        .collect();
    for p in &job.parameters {
        assert!(keys.contains(&p.name), "{} not exported: {keys:?}", p.name);
    }
    let back =
        tapeplan_planner::io::exchange::import_into_persistent(&plan, rt.persistent(), &exported)
            .unwrap();
    assert_eq!(bits(&back), bits(rt.persistent()));
}
