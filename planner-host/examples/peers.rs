//! tapeplan's side of the side-by-side benchmark against JAX (issue 15; `cargo xtask bench
//! --peers`, docs/benchmarks.md "Against JAX").
//!
//! `peers export DIR [--epochs N]` writes the workloads W1, W2 and W3 exactly as issue 15 defines
//! them, and C1 and C2, the device issue's MNIST-1D CNN and digits 2-D CNN, one safetensors file
//! each (`DIR/W1.safetensors`, …): the initial parameters (`init.w1`, `init.b1`, …; `W ~
//! U(±1/√fan_in)`, `b = 0`; for C1 and C2 `init.0.weight`, … under PyTorch's names and layouts,
//! PyTorch's default initialization), every step's batch gathered in batch order (`x`, `[steps,
//! batch, d_in]`; `y`, `[steps, batch]` class indices or `[steps, batch, d_out]` targets), W1's,
//! C1's and C2's held-out rows (`test.x`, `test.labels`), and the workload's definition in the
//! file's `__metadata__`. Every system reads these files, so all start from the same data, weights
//! and batch order.
//!
//! C1 is the CNN of MNIST-1D's paper (Greydanus 2020; `model::run::mnist1d_cnn`: three
//! `Conv1d` with 25 channels, kernel 5/3/3, stride 2, padding 1, ReLU, `Linear(125, 10)`),
//! softmax cross-entropy, Adam lr 1e-2, batch 100 taken in order from the 4 000 training rows
//! (the paper repository's schedule), a fifth of the other workloads' epochs (at least one: 40
//! steps an epoch), test accuracy on the 1 000 test rows.
//!
//! C2 is the device issue's 2-D CNN for the digits (`model::run::digits_cnn` with
//! [`DIGITS_CNN_CHANNELS`]: `Conv2d(1, 16, 3, padding 1)`, ReLU, `MaxPool2d(2)`,
//! `Conv2d(16, 32, 3, padding 1)`, ReLU, `MaxPool2d(2)`, `Linear(128, 10)`; 6 090 parameters),
//! softmax cross-entropy, Adam lr 3e-3 (`firmware-demo/models/digits_cnn.run`'s), batch 32,
//! on W1's data: the same training rows, batch order and held-out rows, W1's epochs.
//!
//! `peers serve DIR` is the benchmark's tapeplan worker: it plans each workload twice (with
//! `--fusion speed`, per chain time first, as a host with arena to spare plans: W3's short
//! chains run unfused, 0.93 of the default `auto`'s step for a third more arena; the other
//! workloads' steps are `auto`'s within noise; once under the default `separate` arithmetic
//! profile, system `tapeplan`, once
//! under `fma`, system `tapeplan-fma`: one fused multiply-add per matrix-product step, other
//! bits, its own check figures), binds its arena, decodes `train_step` once (`Session::decode_with_inputs`) and warms up; then,
//! for each line `run W<n> <system>` read on standard input, it trains from the initial parameters over
//! every step of the file (`run_program_with_inputs` reading each batch's `x` and `y` where the
//! file's tensors hold them, no copy, for batches of at least `BIND_MIN_ELEMS` inputs; smaller
//! ones `write_binding` then `run_program`; the loss read back)
//! and answers one line: `result W<n> <system> ns_per_step=… loss_last_epoch=…
//! loss_final=… param_abs_sum=… accuracy=…` (the time covers the steps only, not the reset).
//! The Python worker (`scripts/peers_bench.py`) answers the same lines for JAX.
//!
//! Build it as `cargo xtask bench --peers` does: `RUSTFLAGS="-C target-cpu=native" cargo build
//! --release -p tapeplan-planner --example peers --features simd`.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use tapeplan_core::ArithProfile;
use tapeplan_planner::io::data;
use tapeplan_planner::io::exchange::is_training_state;
use tapeplan_planner::model::optim::{Optimizer, Sgd};
use tapeplan_planner::model::run::{digits_cnn, mnist1d_cnn, DIGITS_CNN_CHANNELS};
use tapeplan_planner::model::{Activation, JobOptions, Loss, Mlp, TrainingJob};
use tapeplan_planner::plan::FusionPolicy;
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_planner::PlanOptions;
use tapeplan_runtime::catalog::CATALOG;
use tapeplan_runtime::{Decoded, Plan, Session};

/// The workloads' names, in table order.
const WORKLOADS: [&str; 5] = ["W1", "W2", "W3", "C1", "C2"];

/// The smallest batch of inputs (elements of `x`) the worker reads in place
/// (`Session::run_program_with_inputs`) rather than copies in: W1 and C2 (2 048), W2 (50 176)
/// and C1 (4 000) are read in place, W3 (2) is copied. W2 per step 604 -> 531 us with this stop's
/// merges, about 4 % of it from not copying (interleaved `peers serve` medians, 2026-12-03);
/// W3's three floats cost less to copy than the bound path's dispatch (about 5 % of its step).
const BIND_MIN_ELEMS: usize = 1024;

/// Epochs of every workload unless `--epochs` says otherwise.
const DEFAULT_EPOCHS: usize = 10;

/// W1's training rows: 45 batches of 32 from the shuffled digits; the other 357 are held out.
const W1_TRAIN_ROWS: usize = 45 * 32;

/// C1's model, by its name in run descriptions.
const MNIST1D_CNN: &str = "mnist1d_cnn";

/// The seed of C1's initial parameters.
const C1_SEED: u64 = 15;

/// C2's model, by its name in run descriptions.
const DIGITS_CNN: &str = "digits_cnn";

/// The seed of C2's initial parameters.
const C2_SEED: u64 = 16;

/// One workload's definition (issue 15, "Workloads").
#[derive(Clone, Debug, PartialEq)]
struct Spec {
    /// `mlp` (the dense layers of `sizes`), [`MNIST1D_CNN`] or [`DIGITS_CNN`] (whose `sizes`
    /// are only their input and output widths).
    model: String,
    sizes: Vec<usize>,
    activation: Activation,
    loss: Loss,
    /// `sgd` or `adam`.
    optimizer: String,
    lr: f32,
    batch: usize,
    steps_per_epoch: usize,
    epochs: usize,
}

impl Spec {
    fn steps(&self) -> usize {
        self.steps_per_epoch * self.epochs
    }

    fn d_in(&self) -> usize {
        self.sizes[0]
    }

    fn d_out(&self) -> usize {
        *self.sizes.last().unwrap_or(&1)
    }

    fn target_elems(&self) -> usize {
        match self.loss {
            Loss::SoftmaxCrossEntropy => self.batch,
            _ => self.batch * self.d_out(),
        }
    }

    fn metadata(&self) -> HashMap<String, String> {
        let sizes: Vec<String> = self.sizes.iter().map(usize::to_string).collect();
        HashMap::from([
            ("model".into(), self.model.clone()),
            ("sizes".into(), sizes.join(",")),
            ("activation".into(), self.activation.name().into()),
            (
                "loss".into(),
                match self.loss {
                    Loss::SoftmaxCrossEntropy => "ce",
                    Loss::MeanSquaredError => "mse",
                    Loss::BceWithLogits => "bce",
                    Loss::L1 => "l1",
                }
                .into(),
            ),
            ("optimizer".into(), self.optimizer.clone()),
            ("lr".into(), format!("{:e}", self.lr)),
            ("batch".into(), self.batch.to_string()),
            ("steps_per_epoch".into(), self.steps_per_epoch.to_string()),
            ("epochs".into(), self.epochs.to_string()),
        ])
    }

    fn from_metadata(m: &HashMap<String, String>) -> Result<Spec> {
        let get = |k: &str| m.get(k).ok_or_else(|| anyhow!("metadata has no {k:?}"));
        let num = |k: &str| -> Result<usize> {
            get(k)?
                .parse()
                .with_context(|| format!("metadata {k:?} is not a count"))
        };
        Ok(Spec {
            model: m.get("model").cloned().unwrap_or_else(|| "mlp".into()),
            sizes: get("sizes")?
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .context("metadata \"sizes\"")?,
            activation: match get("activation")?.as_str() {
                "tanh" => Activation::Tanh,
                "relu" => Activation::Relu,
                a => bail!("unknown activation {a:?}"),
            },
            loss: match get("loss")?.as_str() {
                "ce" => Loss::SoftmaxCrossEntropy,
                "mse" => Loss::MeanSquaredError,
                l => bail!("unknown loss {l:?}"),
            },
            optimizer: get("optimizer")?.clone(),
            lr: get("lr")?.parse().context("metadata \"lr\"")?,
            batch: num("batch")?,
            steps_per_epoch: num("steps_per_epoch")?,
            epochs: num("epochs")?,
        })
    }

    fn optimizer(&self) -> Result<Optimizer> {
        Ok(match self.optimizer.as_str() {
            "sgd" => Sgd { lr: self.lr }.into(),
            "adam" => Optimizer::adam(self.lr),
            o => bail!("unknown optimizer {o:?}"),
        })
    }

    /// The workload planned under `arith`.
    fn job(&self, arith: ArithProfile) -> Result<TrainingJob> {
        let options = JobOptions {
            planning: PlanOptions {
                arith,
                // Time first, as a host that can spare the arena plans (`--fusion speed`).
                fusion: FusionPolicy::Speed,
                ..PlanOptions::default()
            },
            ..JobOptions::default()
        };
        Ok(match self.model.as_str() {
            "mlp" => TrainingJob::build_with(
                Mlp {
                    sizes: self.sizes.clone(),
                    activation: self.activation,
                },
                self.loss,
                self.optimizer()?,
                self.batch,
                options,
            )?,
            MNIST1D_CNN | DIGITS_CNN => {
                let model = if self.model == MNIST1D_CNN {
                    mnist1d_cnn(C1_SEED)
                } else {
                    digits_cnn(DIGITS_CNN_CHANNELS, C2_SEED)
                };
                TrainingJob::for_model(&model)
                    .loss(self.loss)
                    .optimizer(self.optimizer()?)
                    .batch(self.batch)
                    .options(options)
                    .build()?
            }
            m => bail!("unknown model {m:?}"),
        })
    }
}

/// A workload's tensors: name, shape, values.
type Tensors = Vec<(String, Vec<usize>, Vec<f32>)>;

/// `W ~ U(±1/√fan_in)` (row-major `[fan_in, fan_out]`), `b = 0`, drawn from `SplitMix64(seed)`
/// in layer order.
fn init_parameters(sizes: &[usize], seed: u64) -> Tensors {
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::new();
    for (l, pair) in sizes.windows(2).enumerate() {
        let bound = 1.0 / (pair[0] as f32).sqrt();
        let w = (0..pair[0] * pair[1])
            .map(|_| (2.0 * rng.next_f32() - 1.0) * bound)
            .collect();
        out.push((format!("init.w{}", l + 1), vec![pair[0], pair[1]], w));
        out.push((
            format!("init.b{}", l + 1),
            vec![pair[1]],
            vec![0.0; pair[1]],
        ));
    }
    out
}

/// The rows of every step, `[steps, batch]`: each epoch a fresh shuffle of `0..rows` (by
/// `SplitMix64(seed ^ (epoch + 1) << 32)`), cut into `rows / batch` batches.
fn batch_order(rows: usize, batch: usize, epochs: usize, seed: u64) -> Vec<usize> {
    let mut out = Vec::with_capacity(rows / batch * batch * epochs);
    for epoch in 0..epochs {
        let mut idx: Vec<usize> = (0..rows).collect();
        SplitMix64::new(seed ^ ((epoch as u64 + 1) << 32)).shuffle(&mut idx);
        out.extend_from_slice(&idx[..rows / batch * batch]);
    }
    out
}

fn gather(rows: &[f32], width: usize, order: &[usize]) -> Vec<f32> {
    order
        .iter()
        .flat_map(|&r| &rows[r * width..(r + 1) * width])
        .copied()
        .collect()
}

/// A standard normal draw (Box–Muller, in f64) from two uniforms of `rng`.
fn normal(rng: &mut SplitMix64) -> f32 {
    let u1 = 1.0 - rng.next_u64() as f64 / 2f64.powi(64);
    let u2 = rng.next_u64() as f64 / 2f64.powi(64);
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

/// W1's data (and C2's): the digits shuffled by seed 1, the first [`W1_TRAIN_ROWS`] rows for
/// training (a fresh order every epoch, [`batch_order`] seed 2, batches of 32), the other 357
/// held out.
fn w1_data(epochs: usize) -> Result<Tensors> {
    let digits = data::digits()?;
    let idx = digits.shuffled_indices(1);
    let (train, test) = idx.split_at(W1_TRAIN_ROWS);
    let (train, test) = (digits.subset(train), digits.subset(test));
    let order = batch_order(train.len(), 32, epochs, 2);
    let labels: Vec<f32> = train.labels.iter().map(|&l| f32::from(l)).collect();
    let steps = order.len() / 32;
    let test_labels = test.labels.iter().map(|&l| f32::from(l)).collect();
    Ok(vec![
        (
            "x".into(),
            vec![steps, 32, 64],
            gather(&train.features, 64, &order),
        ),
        ("y".into(), vec![steps, 32], gather(&labels, 1, &order)),
        ("test.x".into(), vec![test.len(), 64], test.features.clone()),
        ("test.labels".into(), vec![test.len()], test_labels),
    ])
}

/// A layer-API model's initial parameters (`init.0.weight`, …: PyTorch's names, layouts and
/// default initialization, drawn by the model's seed).
fn model_parameters(spec: &Spec) -> Result<Tensors> {
    let job = spec.job(ArithProfile::Separate)?;
    Ok(job
        .parameters
        .iter()
        .map(|p| {
            (
                format!("init.{}", p.name),
                p.shape.dims()[..p.shape.rank()].to_vec(),
                p.init.clone(),
            )
        })
        .collect())
}

/// The workload `id` with `epochs` epochs: its definition and tensors.
fn workload(id: &str, epochs: usize) -> Result<(Spec, Tensors)> {
    let mut t: Tensors = Vec::new();
    let spec = match id {
        "W1" => {
            t.extend(w1_data(epochs)?);
            Spec {
                model: "mlp".into(),
                sizes: vec![64, 32, 10],
                activation: Activation::Tanh,
                loss: Loss::SoftmaxCrossEntropy,
                optimizer: "sgd".into(),
                lr: 0.1,
                batch: 32,
                steps_per_epoch: W1_TRAIN_ROWS / 32,
                epochs,
            }
        }
        "W2" => {
            let (batches, batch) = (16, 64);
            let mut rng = SplitMix64::new(3);
            let pool: Vec<f32> = (0..batches * batch * 784)
                .map(|_| normal(&mut rng))
                .collect();
            let labels: Vec<f32> = (0..batches * batch).map(|_| rng.below(10) as f32).collect();
            // The pool's batches in order, every epoch.
            let order: Vec<usize> = (0..epochs).flat_map(|_| 0..batches * batch).collect();
            let steps = order.len() / batch;
            t.push((
                "x".into(),
                vec![steps, batch, 784],
                gather(&pool, 784, &order),
            ));
            t.push(("y".into(), vec![steps, batch], gather(&labels, 1, &order)));
            Spec {
                model: "mlp".into(),
                sizes: vec![784, 128, 10],
                activation: Activation::Relu,
                loss: Loss::SoftmaxCrossEntropy,
                optimizer: "adam".into(),
                lr: 1e-3,
                batch,
                steps_per_epoch: batches,
                epochs,
            }
        }
        "W3" => {
            let n = 256;
            let mut rng = SplitMix64::new(4);
            let x: Vec<f32> = (0..2 * n).map(|_| 2.0 * rng.next_f32() - 1.0).collect();
            let y: Vec<f32> = x
                .chunks_exact(2)
                .map(|p| {
                    let pi = std::f64::consts::PI;
                    ((pi * f64::from(p[0])).sin() * (pi * f64::from(p[1])).cos() / 2.0) as f32
                })
                .collect();
            let order = batch_order(n, 1, epochs, 5);
            let steps = order.len();
            t.push(("x".into(), vec![steps, 1, 2], gather(&x, 2, &order)));
            t.push(("y".into(), vec![steps, 1, 1], gather(&y, 1, &order)));
            Spec {
                model: "mlp".into(),
                sizes: vec![2, 16, 16, 1],
                activation: Activation::Tanh,
                loss: Loss::MeanSquaredError,
                optimizer: "sgd".into(),
                lr: 0.01,
                batch: 1,
                steps_per_epoch: n,
                epochs,
            }
        }
        "C1" => {
            let all = data::mnist1d()?;
            let (rows, batch, length) = (4000, 100, 40);
            let train = all.subset(&(0..rows).collect::<Vec<_>>());
            let test = all.subset(&(rows..all.len()).collect::<Vec<_>>());
            let epochs = (epochs / 5).max(1);
            // The paper repository's order: batch k is rows (100 k) mod 4000 onwards.
            let order: Vec<usize> = (0..epochs).flat_map(|_| 0..rows).collect();
            let steps = order.len() / batch;
            let labels: Vec<f32> = train.labels.iter().map(|&l| f32::from(l)).collect();
            t.push((
                "x".into(),
                vec![steps, batch, length],
                gather(&train.features, length, &order),
            ));
            t.push(("y".into(), vec![steps, batch], gather(&labels, 1, &order)));
            t.push((
                "test.x".into(),
                vec![test.len(), length],
                test.features.clone(),
            ));
            let test_labels = test.labels.iter().map(|&l| f32::from(l)).collect();
            t.push(("test.labels".into(), vec![test.len()], test_labels));
            let spec = Spec {
                model: MNIST1D_CNN.into(),
                sizes: vec![length, 10],
                activation: Activation::Relu,
                loss: Loss::SoftmaxCrossEntropy,
                optimizer: "adam".into(),
                lr: 1e-2,
                batch,
                steps_per_epoch: rows / batch,
                epochs,
            };
            t.extend(model_parameters(&spec)?);
            return Ok((spec, t));
        }
        "C2" => {
            t.extend(w1_data(epochs)?);
            let spec = Spec {
                model: DIGITS_CNN.into(),
                sizes: vec![64, 10],
                activation: Activation::Relu,
                loss: Loss::SoftmaxCrossEntropy,
                optimizer: "adam".into(),
                lr: 3e-3,
                batch: 32,
                steps_per_epoch: W1_TRAIN_ROWS / 32,
                epochs,
            };
            t.extend(model_parameters(&spec)?);
            return Ok((spec, t));
        }
        _ => bail!("unknown workload {id:?} (W1, W2, W3, C1, C2)"),
    };
    // Each workload's own stream: W1 draws from seed 11, W2 from 12, W3 from 13.
    let seed = 10 + u64::from(id.as_bytes()[1] - b'0');
    t.extend(init_parameters(&spec.sizes, seed));
    Ok((spec, t))
}

fn export(dir: &Path, epochs: usize) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for id in WORKLOADS {
        let (spec, tensors) = workload(id, epochs)?;
        let bytes: Vec<Vec<u8>> = tensors
            .iter()
            .map(|(_, _, v)| v.iter().flat_map(|f| f.to_le_bytes()).collect())
            .collect();
        let views = tensors
            .iter()
            .zip(&bytes)
            .map(|((n, s, _), b)| Ok((n.as_str(), TensorView::new(Dtype::F32, s.clone(), b)?)))
            .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
        let file = safetensors::serialize(views, Some(spec.metadata()))?;
        let path = dir.join(format!("{id}.safetensors"));
        std::fs::write(&path, file).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("peers: wrote {} ({} steps)", path.display(), spec.steps());
    }
    Ok(())
}

/// A workload read back from its file.
struct Loaded {
    id: String,
    spec: Spec,
    tensors: HashMap<String, Vec<f32>>,
}

fn load(dir: &Path, id: &str) -> Result<Loaded> {
    let path = dir.join(format!("{id}.safetensors"));
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let (_, meta) = SafeTensors::read_metadata(&bytes)?;
    let spec = Spec::from_metadata(
        meta.metadata()
            .as_ref()
            .ok_or_else(|| anyhow!("{} has no metadata", path.display()))?,
    )?;
    let st = SafeTensors::deserialize(&bytes)?;
    let mut tensors = HashMap::new();
    for (name, view) in st.tensors() {
        if view.dtype() != Dtype::F32 {
            bail!("{}: tensor {name} is not f32", path.display());
        }
        let values = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        tensors.insert(name, values);
    }
    Ok(Loaded {
        id: id.into(),
        spec,
        tensors,
    })
}

/// What one training run gives: the check figures.
struct Figures {
    ns_per_step: f64,
    loss_last_epoch: f64,
    loss_final: f32,
    param_abs_sum: f64,
    accuracy: Option<f64>,
}

/// A workload planned and bound, ready to train from its initial parameters.
struct Runner<'p> {
    w: &'p Loaded,
    /// `tapeplan` (the `separate` arithmetic profile) or `tapeplan-fma`.
    system: &'static str,
    plan: &'p Plan<'p>,
    arena: Vec<f32>,
    decoded: Vec<Decoded>,
    losses: Vec<f32>,
}

impl<'p> Runner<'p> {
    fn train(&mut self) -> Result<Figures> {
        let plan = self.plan;
        let spec = &self.w.spec;
        let t = &self.w.tensors;
        let tensor = |n: &str| {
            t.get(n)
                .ok_or_else(|| anyhow!("{}: no tensor {n}", self.w.id))
        };
        let mut s = Session::bind(plan, &mut self.arena)?;
        // The model's tensors, not the optimizer's state (`w1.m`, `opt.step`, …).
        let all: Vec<&str> = plan.parameters().map(|b| b.name).collect();
        let params: Vec<String> = all
            .iter()
            .filter(|n| !is_training_state(n, &all))
            .map(|n| n.to_string())
            .collect();
        for name in &params {
            s.load_parameter(name, tensor(&format!("init.{name}"))?)?;
        }
        if let Some(init) = plan.entry("init") {
            s.run(init)?;
        }
        let e = plan
            .entry("train_step")
            .ok_or_else(|| anyhow!("no train_step"))?;
        let tname = match spec.loss {
            Loss::SoftmaxCrossEntropy => "labels",
            _ => "y",
        };
        let bl = plan
            .output(e, "loss")
            .ok_or_else(|| anyhow!("no output loss"))?;
        // A batch of at least `BIND_MIN_ELEMS` inputs is read where it is, not copied into the
        // arena (`Session::decode_with_inputs`), its labels checked once, up front; a smaller
        // one is copied in (`write_binding`), which costs less than the bound path's dispatch.
        let (nx, ny) = (spec.batch * spec.d_in(), spec.target_elems());
        let bind = nx >= BIND_MIN_ELEMS;
        let (xs, ys) = (tensor("x")?, tensor("y")?);
        let program = if bind {
            if tname == "labels" {
                s.check_labels(e, tname, ys)?;
            }
            s.decode_with_inputs(e, &mut self.decoded, &["x", tname])?
        } else {
            s.decode(e, &mut self.decoded)?
        };
        let (bx, bt) = (
            plan.input(e, "x").ok_or_else(|| anyhow!("no input x"))?,
            plan.input(e, tname)
                .ok_or_else(|| anyhow!("no input {tname}"))?,
        );
        let steps = spec.steps();
        self.losses.clear();
        let start = Instant::now();
        for (x, y) in xs.chunks_exact(nx).zip(ys.chunks_exact(ny)).take(steps) {
            if bind {
                s.run_program_with_inputs(&program, &[x, y])?;
            } else {
                s.write_binding(&bx, x)?;
                s.write_binding(&bt, y)?;
                s.run_program(&program)?;
            }
            self.losses.push(s.read_binding(&bl)[0]);
        }
        let elapsed = start.elapsed();
        if self.losses.len() != steps {
            bail!("{}: the file holds fewer than {steps} steps", self.w.id);
        }
        let last = &self.losses[steps - spec.steps_per_epoch..];
        let param_abs_sum = params
            .iter()
            .map(|n| {
                Ok(s.parameter(n)?
                    .iter()
                    .map(|v| f64::from(v.abs()))
                    .sum::<f64>())
            })
            .sum::<Result<f64>>()?;
        let accuracy = match (t.get("test.x"), t.get("test.labels")) {
            (Some(x), Some(labels)) => Some(test_accuracy(&mut s, spec, x, labels)?),
            _ => None,
        };
        Ok(Figures {
            ns_per_step: elapsed.as_nanos() as f64 / steps as f64,
            loss_last_epoch: last.iter().map(|&l| f64::from(l)).sum::<f64>() / last.len() as f64,
            loss_final: self.losses[steps - 1],
            param_abs_sum,
            accuracy,
        })
    }
}

/// The fraction of `labels` the `forward` entry's logits rank first, the rows run a batch at a
/// time (the last batch padded with zero rows, whose logits are ignored).
fn test_accuracy(s: &mut Session<'_, '_>, spec: &Spec, x: &[f32], labels: &[f32]) -> Result<f64> {
    let plan = s.plan();
    let e = plan.entry("forward").ok_or_else(|| anyhow!("no forward"))?;
    let (d_in, classes) = (spec.d_in(), spec.d_out());
    let mut batch_x = vec![0.0f32; spec.batch * d_in];
    let mut right = 0usize;
    for (rows, want) in x.chunks(spec.batch * d_in).zip(labels.chunks(spec.batch)) {
        batch_x.fill(0.0);
        batch_x[..rows.len()].copy_from_slice(rows);
        s.set_input(e, "x", &batch_x)?;
        s.run(e)?;
        let logits = s.output(e, "logits")?;
        for (row, &label) in logits.chunks_exact(classes).zip(want) {
            let best = (0..classes)
                .max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a)))
                .unwrap_or(0);
            right += usize::from(best as f32 == label);
        }
    }
    Ok(right as f64 / labels.len() as f64)
}

fn serve(dir: &Path) -> Result<()> {
    let loaded: Vec<Loaded> = WORKLOADS
        .iter()
        .map(|id| load(dir, id))
        .collect::<Result<_>>()?;
    let systems = [
        ("tapeplan", ArithProfile::Separate),
        ("tapeplan-fma", ArithProfile::Fma),
    ];
    let mut plans = Vec::new();
    let mut which = Vec::new();
    for w in &loaded {
        for (system, arith) in systems {
            plans.push(w.spec.job(arith)?.schedule.to_bytes());
            which.push((w, system));
        }
    }
    let parsed: Vec<Plan<'_>> = plans
        .iter()
        .map(|b| Plan::parse(b))
        .collect::<Result<_, _>>()?;
    let mut runners: Vec<Runner<'_>> = which
        .iter()
        .zip(&parsed)
        .map(|(&(w, system), plan)| Runner {
            w,
            system,
            plan,
            arena: vec![0.0; plan.arena_elems()],
            decoded: vec![Decoded::EMPTY; plan.n_instrs()],
            losses: Vec::with_capacity(w.spec.steps()),
        })
        .collect();
    for r in &mut runners {
        r.train()?;
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready tapeplan-{CATALOG}")?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["run", id, system] => {
                let r = runners
                    .iter_mut()
                    .find(|r| r.w.id == id && r.system == system)
                    .ok_or_else(|| anyhow!("unknown workload or system {id:?} {system:?}"))?;
                let f = r.train()?;
                writeln!(
                    out,
                    "result {id} {system} ns_per_step={:.1} loss_last_epoch={:.7} loss_final={:.7} param_abs_sum={:.5} accuracy={}",
                    f.ns_per_step,
                    f.loss_last_epoch,
                    f.loss_final,
                    f.param_abs_sum,
                    f.accuracy.map_or("-".into(), |a| format!("{a:.5}"))
                )?;
                out.flush()?;
            }
            ["quit"] | [] => break,
            _ => bail!("unknown command {line:?} (run W<n> tapeplan|tapeplan-fma, quit)"),
        }
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match &args[..] {
        [cmd, dir] if cmd == "export" => export(Path::new(dir), DEFAULT_EPOCHS),
        [cmd, dir, flag, n] if cmd == "export" && flag == "--epochs" => {
            export(Path::new(dir), n.parse().context("--epochs takes a count")?)
        }
        [cmd, dir] if cmd == "serve" => serve(&PathBuf::from(dir)),
        _ => bail!("usage: peers export DIR [--epochs N] | peers serve DIR"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor<'t>(t: &'t Tensors, name: &str) -> &'t (String, Vec<usize>, Vec<f32>) {
        t.iter().find(|(n, _, _)| n == name).unwrap()
    }

    #[test]
    fn initial_weights_are_uniform_within_one_over_sqrt_fan_in() {
        let t = init_parameters(&[64, 32, 10], 11);
        let names: Vec<&str> = t.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["init.w1", "init.b1", "init.w2", "init.b2"]);
        for (name, fan_in) in [("init.w1", 64.0f32), ("init.w2", 32.0)] {
            let (_, _, w) = tensor(&t, name);
            let bound = 1.0 / fan_in.sqrt();
            assert!(w.iter().all(|v| v.abs() < bound), "{name} outside ±{bound}");
            // U(-a, a) has mean 0 and variance a²/3.
            let n = w.len() as f64;
            let mean = w.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
            let var = w.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / n;
            let a2 = f64::from(bound).powi(2);
            assert!(mean.abs() < 0.1 * f64::from(bound), "{name} mean {mean}");
            assert!(
                (var / (a2 / 3.0) - 1.0).abs() < 0.2,
                "{name} variance {var}"
            );
        }
        assert_eq!(tensor(&t, "init.w1").1, [64, 32]);
        assert!(tensor(&t, "init.b2").2.iter().all(|&b| b == 0.0));
    }

    #[test]
    fn every_epoch_is_a_fresh_permutation() {
        let order = batch_order(256, 1, 3, 5);
        assert_eq!(order.len(), 3 * 256);
        let epochs: Vec<&[usize]> = order.chunks(256).collect();
        for e in &epochs {
            let mut sorted = e.to_vec();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..256).collect::<Vec<_>>());
        }
        assert_ne!(epochs[0], epochs[1]);
        // 1 437 rows in batches of 32: the last 29 of each shuffle fall off.
        assert_eq!(batch_order(1437, 32, 2, 2).len(), 2 * 44 * 32);
    }

    #[test]
    fn w1_splits_the_digits_into_45_batches_and_357_held_out_rows() {
        let (spec, t) = workload("W1", 2).unwrap();
        assert_eq!((spec.steps_per_epoch, spec.steps()), (45, 90));
        let (_, xs, x) = tensor(&t, "x");
        assert_eq!(xs, &[90, 32, 64]);
        let (_, ts, test) = tensor(&t, "test.x");
        assert_eq!(ts, &[357, 64]);
        // Every pixel is a count over 16; the training rows of an epoch and the held-out rows
        // are together the whole set (compared as multisets of rows).
        assert!(x
            .iter()
            .all(|&v| (v * 16.0).fract() == 0.0 && (0.0..=1.0).contains(&v)));
        let digits = data::digits().unwrap();
        let key = |r: &[f32]| r.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
        let mut all: Vec<Vec<u32>> = digits.features.chunks(64).map(key).collect();
        let mut ours: Vec<Vec<u32>> = x[..45 * 32 * 64]
            .chunks(64)
            .chain(test.chunks(64))
            .map(key)
            .collect();
        all.sort();
        ours.sort();
        assert_eq!(ours, all);
        let (_, _, y) = tensor(&t, "y");
        assert!(y
            .iter()
            .all(|&l| l.fract() == 0.0 && (0.0..10.0).contains(&l)));
    }

    #[test]
    fn c1_takes_mnist1d_batches_in_order_with_pytorch_named_parameters() {
        let (spec, t) = workload("C1", 10).unwrap();
        assert_eq!((spec.steps_per_epoch, spec.steps()), (40, 80));
        assert_eq!(Spec::from_metadata(&spec.metadata()).unwrap(), spec);
        let (_, xs, x) = tensor(&t, "x");
        assert_eq!(xs, &[80, 100, 40]);
        let all = data::mnist1d().unwrap();
        // Step 41 (the second epoch's second batch) is training rows 100..200.
        assert_eq!(&x[41 * 4000..42 * 4000], &all.features[100 * 40..200 * 40]);
        assert_eq!(tensor(&t, "test.x").1, [1000, 40]);
        for (name, shape) in [
            ("init.0.weight", vec![25, 1, 5]),
            ("init.2.weight", vec![25, 25, 3]),
            ("init.4.bias", vec![25]),
            ("init.7.weight", vec![10, 125]),
        ] {
            assert_eq!(tensor(&t, name).1, shape, "{name}");
        }
        // PyTorch's default: weights and biases within ±1/√fan_in (fan_in 5 for the first
        // convolution).
        let bound = 1.0 / 5f32.sqrt();
        assert!(tensor(&t, "init.0.bias").2.iter().all(|v| v.abs() <= bound));
        assert!(tensor(&t, "init.0.bias").2.iter().any(|&v| v != 0.0));
    }

    #[test]
    fn c2_trains_the_digits_cnn_on_w1s_batches_with_pytorch_named_parameters() {
        let (spec, t) = workload("C2", 2).unwrap();
        let (_, w1) = workload("W1", 2).unwrap();
        assert_eq!((spec.steps_per_epoch, spec.steps()), (45, 90));
        assert_eq!(Spec::from_metadata(&spec.metadata()).unwrap(), spec);
        for name in ["x", "y", "test.x", "test.labels"] {
            assert_eq!(tensor(&t, name), tensor(&w1, name), "{name}");
        }
        let names: Vec<&str> = t
            .iter()
            .filter_map(|(n, _, _)| n.strip_prefix("init."))
            .collect();
        assert_eq!(
            names,
            ["0.weight", "0.bias", "3.weight", "3.bias", "7.weight", "7.bias"]
        );
        for (name, shape) in [
            ("init.0.weight", vec![16, 1, 3, 3]),
            ("init.3.weight", vec![32, 16, 3, 3]),
            ("init.3.bias", vec![32]),
            ("init.7.weight", vec![10, 128]),
        ] {
            assert_eq!(tensor(&t, name).1, shape, "{name}");
        }
        // PyTorch's default: within ±1/√fan_in (fan_in 16 · 9 for the second convolution).
        let bound = 1.0 / 144f32.sqrt();
        assert!(tensor(&t, "init.3.weight")
            .2
            .iter()
            .all(|v| v.abs() <= bound));
        assert_eq!(spec.optimizer().unwrap(), Optimizer::adam(3e-3));
    }

    #[test]
    fn w3_targets_are_sin_pi_x0_cos_pi_x1_over_2() {
        let (spec, t) = workload("W3", 1).unwrap();
        assert_eq!((spec.batch, spec.steps()), (1, 256));
        let (_, _, x) = tensor(&t, "x");
        let (_, _, y) = tensor(&t, "y");
        for (p, &target) in x.chunks(2).zip(y) {
            assert!(p.iter().all(|v| (-1.0..1.0).contains(v)));
            let want =
                (std::f32::consts::PI * p[0]).sin() * (std::f32::consts::PI * p[1]).cos() / 2.0;
            assert!(
                (target - want).abs() < 1e-5,
                "{p:?}: {target} against {want}"
            );
        }
    }

    #[test]
    fn w2_inputs_look_standard_normal_and_the_definition_round_trips() {
        let (spec, t) = workload("W2", 1).unwrap();
        let (_, shape, x) = tensor(&t, "x");
        assert_eq!(shape, &[16, 64, 784]);
        let n = x.len() as f64;
        let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / n - mean * mean;
        assert!(
            mean.abs() < 0.01 && (var - 1.0).abs() < 0.01,
            "{mean} {var}"
        );
        assert_eq!(Spec::from_metadata(&spec.metadata()).unwrap(), spec);
        assert_eq!(spec.optimizer().unwrap(), Optimizer::adam(1e-3));
        let mut bad = spec.metadata();
        bad.insert("loss".into(), "hinge".into());
        assert!(Spec::from_metadata(&bad)
            .unwrap_err()
            .to_string()
            .contains("hinge"));
    }
}
