//! MNIST-1D's CNN (Greydanus, "Scaling Down Deep Learning", 2020) built with the layer API,
//! planned, and trained through the `no_std` runtime on the host, checked bit for bit against
//! an oracle, then evaluated on the test split.
//!
//! ```sh
//! cargo run --release -p tapeplan-planner --example mnist1d            # 6000 steps
//! cargo run --release -p tapeplan-planner --example mnist1d -- 300     # a prefix of the schedule
//! ```
//!
//! The paper's setup (its repository's `models.py` `ConvBase` and `train.py`): three `Conv1d`
//! with 25 channels (kernel 5 then 3, 3; stride 2, padding 1), ReLU after each, a linear head on
//! the flattened 25 × 5 features; cross-entropy; Adam with learning rate 1e-2, PyTorch's betas
//! and epsilon, weight decay 0; batch 100; batch `k` is rows `(100 k) mod 4000` to `+ 100` of
//! the training split, in order; 6000 steps. Initialization is PyTorch's default, from the
//! layer API's seeded stream with seed [`SEED`], fixed before any run. The test accuracy is
//! measured once, after the last step: no selection on the test split.
//!
//! The oracle is independent of the plan: core's tape interpreter for the loss, its engine
//! reverse scan (`Run::backward`) for the gradient, and the optimizer's update body computed
//! directly; the runtime runs the planned `train_step`. Every step, every parameter and piece of
//! optimizer state of the runtime must equal the oracle's bit for bit.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use tapeplan_core::{Compute, MathProfile, NodeId, Recordable, Run, Shape, Tape, Tensor};
use tapeplan_planner::exec::runtime::RuntimeModel;
use tapeplan_planner::io::data::{load_csv, Dataset};
use tapeplan_planner::model::nn::{Conv1d, Flatten, Linear, ReLU, Sequential};
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{softmax_cross_entropy, ForwardCx, Mode, Model, ParamSpec};
use tapeplan_planner::plan::rewrite::{self as passes, Passes};
use tapeplan_planner::plan::{self as planner, EntrySpec, PlanOptions, Root};
use tapeplan_planner::protocol::{
    digest_f32, ENTRY_FORWARD, ENTRY_INIT, ENTRY_TRAIN_STEP, INPUT_LABELS, OUTPUT_LOGITS,
    OUTPUT_LOSS,
};

/// The initialization seed, fixed before the first run.
const SEED: u64 = 42;
/// The paper's batch size.
const BATCH: usize = 100;
/// The paper's number of steps.
const STEPS: usize = 6000;
/// The paper's learning rate.
const LR: f32 = 1e-2;
/// Samples per signal.
const LENGTH: usize = 40;
/// Rows of the training split (the rest is the test split).
const TRAIN_ROWS: usize = 4000;

/// The paper's `ConvBase`, in the layer API.
fn cnn() -> Sequential {
    Sequential::new(&[1, LENGTH])
        .push(Conv1d::new(1, 25, 5).stride(2).padding(1))
        .push(ReLU)
        .push(Conv1d::new(25, 25, 3).stride(2).padding(1))
        .push(ReLU)
        .push(Conv1d::new(25, 25, 3).stride(2).padding(1))
        .push(ReLU)
        .push(Flatten)
        .push(Linear::new(125, 10))
        .seed(SEED)
}

/// The recorded training job: forward, loss, recorded gradient, recorded Adam update.
struct Job {
    tape: Tape,
    x: NodeId,
    labels: NodeId,
    params: Vec<NodeId>,
    specs: Vec<ParamSpec>,
    state: Vec<NodeId>,
    state_init: Vec<(Shape, f32)>,
    state_names: Vec<String>,
    loss: NodeId,
    optimizer: Optimizer,
    bytes: Vec<u8>,
}

/// Records `model`'s job at batch `batch` and plans `init`, `forward` and `train_step`.
fn build(model: &Sequential, batch: usize, optimizer: Optimizer) -> Result<Job> {
    let specs = model.parameters()?;
    let inputs = model.inputs(batch)?;
    let mut tape = Tape::new();
    let x = tape.input(&inputs[0].name, inputs[0].shape);
    let labels = tape.input(INPUT_LABELS, Shape::vector(batch));
    let params: Vec<NodeId> = specs
        .iter()
        .map(|s| tape.parameter(&s.name, s.shape))
        .collect();
    let cx = |mode| ForwardCx {
        batch,
        mode,
        inputs: std::slice::from_ref(&x),
        params: &params,
        rng: None,
    };
    let eval = model.record(&mut tape, &cx(Mode::Eval))?;
    let train = model.record(&mut tape, &cx(Mode::Train))?;
    if !train.buffer_updates.is_empty() {
        bail!("this example's job does not update buffers");
    }
    let loss = softmax_cross_entropy(&mut tape.trace(), &train.output, &labels)?;
    let adjoints = tape.differentiate(loss, &params)?;
    let grads: Vec<Option<NodeId>> = params.iter().map(|p| adjoints.get(*p).copied()).collect();
    let shapes: Vec<(String, Shape)> = specs.iter().map(|s| (s.name.clone(), s.shape)).collect();
    let state_specs = optimizer.state(&shapes);
    let state: Vec<NodeId> = state_specs
        .iter()
        .map(|s| tape.parameter(&s.name, s.shape))
        .collect();
    let (new_params, new_state) = optimizer.step(&mut tape.trace(), &params, &grads, &state)?;
    let mut train_roots = vec![Root::Output {
        name: OUTPUT_LOSS.into(),
        node: loss,
    }];
    for (p, v) in params
        .iter()
        .chain(&state)
        .zip(new_params.iter().chain(&new_state))
    {
        if let Some(v) = v {
            train_roots.push(Root::Update {
                param: *p,
                value: *v,
            });
        }
    }
    let mut init_roots = Vec::new();
    for (leaf, s) in state.iter().zip(&state_specs) {
        let value = tape.trace().fill(s.init, s.shape)?;
        init_roots.push(Root::Update {
            param: *leaf,
            value,
        });
    }
    let entries = vec![
        EntrySpec {
            name: ENTRY_FORWARD.into(),
            roots: vec![Root::Output {
                name: OUTPUT_LOGITS.into(),
                node: eval.output,
            }],
            guarded: false,
        },
        EntrySpec {
            name: ENTRY_TRAIN_STEP.into(),
            roots: train_roots,
            guarded: false,
        },
        EntrySpec {
            name: ENTRY_INIT.into(),
            roots: init_roots,
            guarded: false,
        },
    ];
    let options = PlanOptions::default();
    let (rewritten, map, _) = passes::rewrite(
        &tape,
        Passes::default(),
        options.math,
        &passes::update_values(&entries),
    )?;
    let schedule = planner::plan_with(&rewritten, &passes::remap_entries(&entries, &map), options)?;
    Ok(Job {
        x,
        labels,
        params,
        state_init: state_specs.iter().map(|s| (s.shape, s.init)).collect(),
        state_names: state_specs.iter().map(|s| s.name.clone()).collect(),
        state,
        specs,
        loss,
        optimizer,
        bytes: schedule.to_bytes(),
        tape,
    })
}

/// The oracle: the tape interpreter, the engine reverse scan and the update body.
struct Oracle<'j> {
    job: &'j Job,
    params: Vec<Tensor>,
    state: Vec<Tensor>,
}

impl<'j> Oracle<'j> {
    fn new(job: &'j Job) -> Result<Oracle<'j>> {
        Ok(Oracle {
            job,
            params: job
                .specs
                .iter()
                .map(|s| Tensor::new(s.shape, s.init.clone()))
                .collect::<Result<_, _>>()?,
            state: job
                .state_init
                .iter()
                .map(|&(shape, v)| Tensor {
                    shape,
                    data: vec![v; shape.elems()],
                })
                .collect(),
        })
    }

    fn step(&mut self, x: &[f32], labels: &[f32]) -> Result<f32> {
        let job = self.job;
        let mut run = Run::new(&job.tape);
        run.set(job.x, Tensor::new(job.tape.shape(job.x)?, x.to_vec())?)?;
        run.set(
            job.labels,
            Tensor::new(job.tape.shape(job.labels)?, labels.to_vec())?,
        )?;
        for (p, v) in job.params.iter().zip(&self.params) {
            run.set(*p, v.clone())?;
        }
        for (p, v) in job.state.iter().zip(&self.state) {
            run.set(*p, v.clone())?;
        }
        let adjoints = run.backward(job.loss, Tensor::scalar(1.0), &job.params)?;
        let loss = run.value(job.loss).map_or(f32::NAN, |t| t.data[0]);
        let grads: Vec<Option<Tensor>> = job
            .params
            .iter()
            .map(|p| adjoints.get(*p).cloned())
            .collect();
        let (new_params, new_state) = job.optimizer.step(
            &mut Compute::with_math(MathProfile::default()),
            &self.params,
            &grads,
            &self.state,
        )?;
        for (p, n) in self.params.iter_mut().zip(new_params) {
            if let Some(n) = n {
                *p = n;
            }
        }
        for (p, n) in self.state.iter_mut().zip(new_state) {
            if let Some(n) = n {
                *p = n;
            }
        }
        Ok(loss)
    }
}

fn main() -> Result<()> {
    let steps: usize = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .with_context(|| format!("steps: {a:?} is not a count"))?,
        None => STEPS,
    };
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/mnist1d.csv.gz");
    let all = load_csv(&path, LENGTH).with_context(|| format!("loading {}", path.display()))?;
    if all.len() != 5000 {
        bail!("{} holds {} rows, expected 5000", path.display(), all.len());
    }
    let train = all.subset(&(0..TRAIN_ROWS).collect::<Vec<_>>());
    let test = all.subset(&(TRAIN_ROWS..all.len()).collect::<Vec<_>>());

    let model = cnn();
    let t0 = Instant::now();
    let job = build(&model, BATCH, Optimizer::adam(LR))?;
    let n_params: usize = job.specs.iter().map(|s| s.init.len()).sum();
    let mut rt = RuntimeModel::new(&job.bytes)?;
    for s in &job.specs {
        rt.load_parameter(&s.name, &s.init)?;
    }
    println!(
        "mnist1d: CNN {n_params} parameters; plan {} B, arena {} B; planned in {:.2} s",
        job.bytes.len(),
        rt.arena_bytes(),
        t0.elapsed().as_secs_f64()
    );
    let mut oracle = Oracle::new(&job)?;
    let names: Vec<String> = job.specs.iter().map(|s| s.name.clone()).collect();

    let t0 = Instant::now();
    let mut checked = 0usize;
    for step in 0..steps {
        let start = (step * BATCH) % train.len();
        let (x, labels) = batch_rows(&train, start, BATCH);
        let loss_rt = rt.train_step(&x, &labels)?;
        let loss_or = oracle.step(&x, &labels)?;
        if loss_rt.to_bits() != loss_or.to_bits() {
            bail!("step {step}: loss {loss_rt} (runtime) != {loss_or} (oracle)");
        }
        for (name, value) in names
            .iter()
            .zip(&oracle.params)
            .chain(job.state_names.iter().zip(&oracle.state))
        {
            let got = rt.parameter(name)?;
            if got
                .iter()
                .zip(&value.data)
                .any(|(a, b)| a.to_bits() != b.to_bits())
            {
                bail!("step {step}: {name} differs between the runtime and the oracle");
            }
        }
        checked += 1;
        if (step + 1) % 500 == 0 || step + 1 == steps {
            println!(
                "step {:>5}  loss {loss_rt:.4}  ({:.1} s)",
                step + 1,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let mut params = Vec::new();
    for s in &job.specs {
        params.extend(rt.parameter(&s.name)?);
    }
    let test_x: Vec<f32> = (0..test.len())
        .flat_map(|i| test.row(i).0.to_vec())
        .collect();
    let test_labels: Vec<u8> = (0..test.len()).map(|i| test.row(i).1).collect();
    let acc = rt.accuracy(&test_x, &test_labels, LENGTH, BATCH)?;
    let train_x: Vec<f32> = (0..train.len())
        .flat_map(|i| train.row(i).0.to_vec())
        .collect();
    let train_labels: Vec<u8> = (0..train.len()).map(|i| train.row(i).1).collect();
    let train_acc = rt.accuracy(&train_x, &train_labels, LENGTH, BATCH)?;
    println!("bitwise: {checked}/{steps} steps identical (runtime vs oracle: loss, parameters, optimizer state)");
    println!(
        "train accuracy {:.1} % ({} rows)",
        100.0 * train_acc,
        train.len()
    );
    println!("test accuracy {:.1} % ({} rows)", 100.0 * acc, test.len());
    println!(
        "digest {:016x} (FNV-1a of the final parameters' bits, state_dict order)",
        digest_f32(&params)
    );
    Ok(())
}

/// Rows `start .. start + n` of `set` (features and labels as `f32`).
fn batch_rows(set: &Dataset, start: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
    let mut x = Vec::with_capacity(n * set.n_features());
    let mut labels = Vec::with_capacity(n);
    for i in start..start + n {
        let (row, label) = set.row(i);
        x.extend_from_slice(row);
        labels.push(f32::from(label));
    }
    (x, labels)
}
