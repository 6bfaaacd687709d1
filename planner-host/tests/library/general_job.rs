//! The general training job (issue 13): a hand-recorded model with two inputs, a buffer,
//! dropout and a custom loss, planned and trained through the `no_std` runtime, bit for bit
//! against the oracle for SGD and Adam; the entries `forward`, `forward_1` and `eval_loss`;
//! partial update (a frozen backbone) against full update; the BCE and L1 losses against f64
//! by hand; and the bridge from the oracle's gradients to a parameter store's step.

use tapeplan_core::{NodeId, Recordable, Shape, Tape, TapeError, Trace};
use tapeplan_planner::exec::oracle::{Oracle, Parameters};
use tapeplan_planner::exec::RuntimeModel;
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{
    Activation, Forward, ForwardCx, InputSpec, JobOptions, Loss, LossRecorder, Mlp, Mode, Model,
    ModelError, ParamKind, ParamSpec, TrainingJob,
};
use tapeplan_planner::protocol::SplitMix64;

/// `out = tanh(drop((a − μ) · wa) + b · wb + bias)`, `a: [batch, 3]`, `b: [batch, 2]`,
/// `out: [batch, 1]`. `μ` is the batch mean of `a` in training mode (and the buffer
/// `norm.running_mean` is moved towards it by 0.25), the buffer itself in inference mode, as
/// batch normalization's mean does. Dropout (probability `p`) in training mode only.
struct TwoInput {
    p: f32,
}

const A: usize = 3;
const B: usize = 2;

impl Model for TwoInput {
    fn parameters(&self) -> Result<Vec<ParamSpec>, ModelError> {
        let p = |name: &str, shape: Shape, kind, init: Vec<f32>| ParamSpec {
            name: name.into(),
            shape,
            kind,
            init,
        };
        Ok(vec![
            p(
                "lin_a.weight",
                Shape::matrix(A, 1),
                ParamKind::Parameter,
                vec![0.3, -0.2, 0.5],
            ),
            p(
                "lin_b.weight",
                Shape::matrix(B, 1),
                ParamKind::Parameter,
                vec![-0.4, 0.1],
            ),
            p("bias", Shape::vector(1), ParamKind::Parameter, vec![0.05]),
            p(
                "norm.running_mean",
                Shape::matrix(1, A),
                ParamKind::Buffer,
                vec![0.0; A],
            ),
        ])
    }

    fn inputs(&self, batch: usize) -> Result<Vec<InputSpec>, ModelError> {
        Ok(vec![
            InputSpec {
                name: "a".into(),
                shape: Shape::matrix(batch, A),
            },
            InputSpec {
                name: "b".into(),
                shape: Shape::matrix(batch, B),
            },
        ])
    }

    fn uses_rng(&self) -> bool {
        self.p > 0.0
    }

    fn record(&self, tape: &mut Tape, cx: &ForwardCx<'_>) -> Result<Forward, ModelError> {
        let mut t = tape.trace();
        let ([a, b], [wa, wb, bias, rm]) = (cx.inputs, cx.params) else {
            return Err(ModelError::Invalid("two inputs, four tensors".into()));
        };
        let sa = Shape::matrix(cx.batch, A);
        let (mean, updates) = match cx.mode {
            Mode::Train => {
                let m = t.mean_to(a, Shape::matrix(1, A))?;
                let keep = t.scale(rm, 0.75)?;
                let part = t.scale(&m, 0.25)?;
                let moved = t.add(&keep, &part)?;
                (m, vec![(3, moved)])
            }
            Mode::Eval => (*rm, Vec::new()),
        };
        let mb = t.broadcast(&mean, sa)?;
        let centered = t.sub(a, &mb)?;
        let za = t.matmul(&centered, wa)?;
        let za = match (cx.mode, cx.rng) {
            (Mode::Train, Some(rng)) => t.dropout(&za, self.p, &rng.key, &rng.counter)?,
            _ => za,
        };
        let zb = t.matmul(b, wb)?;
        let z = t.add(&za, &zb)?;
        let bb = t.broadcast(bias, Shape::matrix(cx.batch, 1))?;
        let z = t.add(&z, &bb)?;
        Ok(Forward {
            output: t.tanh(&z)?,
            buffer_updates: updates,
        })
    }
}

/// A custom loss: half the summed squared error, divided by the batch (not by the elements).
struct HalfSquares;

impl LossRecorder for HalfSquares {
    fn target_name(&self) -> &str {
        "target"
    }

    fn record(
        &self,
        t: &mut Trace<'_>,
        output: NodeId,
        target: NodeId,
    ) -> Result<NodeId, TapeError> {
        let batch = t.shape_of(&output).dim(0).unwrap_or(1);
        let d = t.sub(&output, &target)?;
        let dd = t.mul(&d, &d)?;
        let s = t.sum_all(&dd)?;
        t.scale(&s, 0.5 / batch as f32)
    }
}

fn random(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.next_f32() * 2.0 - 1.0).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A runtime model of `job` with the model's initial values loaded.
fn runtime<'b>(job: &TrainingJob, bytes: &'b [u8]) -> RuntimeModel<'b> {
    let mut rt = RuntimeModel::new(bytes).unwrap();
    for p in &job.parameters {
        rt.load_parameter(&p.name, &p.init).unwrap();
    }
    rt
}

/// Trains `job` 20 steps through the runtime and the oracle on the same batches; every step's
/// loss, every persistent tensor, and the entries `forward`, `forward_1` and `eval_loss`
/// bitwise equal. Answers the oracle's losses.
fn train_and_compare(job: &TrainingJob, batch: usize) -> Vec<f32> {
    let bytes = job.schedule.to_bytes();
    let mut rt = runtime(job, &bytes);
    let mut oracle = Oracle::with_initial_parameters(job).unwrap();
    let mut rng = SplitMix64::new(11);
    let mut losses = Vec::new();
    for step in 0..20 {
        let a = random(&mut rng, batch * A);
        let b = random(&mut rng, batch * B);
        let y = random(&mut rng, batch);
        let target = job.target_name.as_str();
        let l_rt = rt
            .train_step_named(&[("a", &a), ("b", &b), (target, &y)])
            .unwrap();
        let l_or = if step % 2 == 0 {
            oracle.step_inputs(&[&a, &b], &y).unwrap()
        } else {
            oracle
                .step_named(&[(target, &y), ("b", &b), ("a", &a)])
                .unwrap()
        };
        assert_eq!(l_rt.to_bits(), l_or.to_bits(), "step {step}: loss");
        losses.push(l_or);
        for (spec, value) in job.parameters.iter().zip(&oracle.params) {
            assert_eq!(
                bits(&rt.parameter(&spec.name).unwrap()),
                bits(&value.data),
                "step {step}: {}",
                spec.name
            );
        }
        for (spec, value) in job.state_specs.iter().zip(&oracle.state) {
            assert_eq!(
                bits(&rt.parameter(&spec.name).unwrap()),
                bits(&value.data),
                "step {step}: {}",
                spec.name
            );
        }
        // The inference entries, on fresh data.
        let a = random(&mut rng, batch * A);
        let b = random(&mut rng, batch * B);
        let out_rt = rt.forward_named(&[("a", &a), ("b", &b)]).unwrap();
        assert_eq!(bits(&out_rt), bits(&oracle.forward(&[&a, &b]).unwrap()));
        let el_rt = rt.eval_loss(&[("a", &a), ("b", &b), (target, &y)]).unwrap();
        let el_or = oracle.eval_loss(&[&a, &b], &y).unwrap();
        assert_eq!(el_rt.to_bits(), el_or.to_bits(), "step {step}: eval loss");
        let one_rt = rt.forward_1(&[("a", &a[..A]), ("b", &b[..B])]).unwrap();
        let one_or = oracle.forward_1(&[&a[..A], &b[..B]]).unwrap();
        assert_eq!(bits(&one_rt), bits(&one_or));
        // Batch 1 is the first row of the batch: the model is row-wise in inference mode.
        assert_eq!(bits(&one_or), bits(&out_rt[..1]));
    }
    losses
}

#[test]
fn a_hand_recorded_model_trains_bitwise_with_sgd_and_adam() {
    let batch = 8;
    for (optimizer, p, guarded) in [
        (Optimizer::sgd(0.2), 0.0, false),
        (Optimizer::adam(0.05), 0.0, false),
        (Optimizer::sgd(0.2), 0.25, false),
        (Optimizer::adam(0.05), 0.25, true),
    ] {
        let model = TwoInput { p };
        let job = TrainingJob::for_model(&model)
            .custom_loss(&HalfSquares)
            .optimizer(optimizer)
            .batch(batch)
            .options(JobOptions {
                seed: 5,
                guarded,
                ..JobOptions::default()
            })
            .build()
            .unwrap();
        assert_eq!(job.loss, None);
        let bytes = job.schedule.to_bytes();
        assert_eq!(RuntimeModel::new(&bytes).unwrap().is_guarded(), guarded);
        assert_eq!(job.trainable, [true, true, true, false]);
        assert_eq!(job.buffer_updates.len(), 1);
        let entries: Vec<&str> = job
            .schedule
            .entries
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        let want: &[&str] = if optimizer == Optimizer::sgd(0.2) && p == 0.0 {
            &["forward", "train_step", "forward_1", "eval_loss"]
        } else {
            &["forward", "train_step", "init", "forward_1", "eval_loss"]
        };
        assert_eq!(entries, want);
        let losses = train_and_compare(&job, batch);
        // Named bindings: a wrong or missing name is an error naming it.
        let mut o = Oracle::with_initial_parameters(&job).unwrap();
        let (a, b, y) = (vec![0.0; batch * A], vec![0.0; batch * B], vec![0.0; batch]);
        let e = o
            .step_named(&[("a", &a), ("c", &b), ("target", &y)])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no input named \"c\" (the job's inputs: a, b, target)"),
            "{e}"
        );
        let e = o
            .step_named(&[("a", &a), ("target", &y)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("input \"b\" not given"), "{e}");
        assert!(losses.iter().all(|l| l.is_finite() && *l > 0.0));
        // The buffer moved: 20 steps of `0.75 · rm + 0.25 · mean` from zero.
        let oracle_rm = {
            let mut o = Oracle::with_initial_parameters(&job).unwrap();
            let mut rng = SplitMix64::new(11);
            let a = random(&mut rng, batch * A);
            let b = random(&mut rng, batch * B);
            let y = random(&mut rng, batch);
            o.step_inputs(&[&a, &b], &y).unwrap();
            // One step from zero: 0.25 · the batch mean, computed here in f64.
            let mean: Vec<f64> = (0..A)
                .map(|j| (0..batch).map(|r| a[r * A + j] as f64).sum::<f64>() / batch as f64)
                .collect();
            (o.params[3].data.clone(), mean)
        };
        for (got, mean) in oracle_rm.0.iter().zip(&oracle_rm.1) {
            assert!((*got as f64 - 0.25 * mean).abs() < 1e-6, "{got} vs {mean}");
        }
    }
}

/// Freezing all but the last layer of a 3-layer MLP: a smaller arena than full update, the
/// frozen layers untouched, and the last layer's update (SGD: `w − lr·g`, so its gradient)
/// bit-identical to the full job's.
#[test]
fn partial_update_freezes_a_backbone_in_less_memory() {
    let mlp = Mlp {
        sizes: vec![12, 10, 8, 4],
        activation: Activation::Tanh,
    };
    let model = mlp.model(0.0, 3);
    let batch = 16;
    let build = |frozen: &[&str]| {
        TrainingJob::for_model(&model)
            .loss(Loss::SoftmaxCrossEntropy)
            .optimizer(Optimizer::sgd(0.1))
            .batch(batch)
            .frozen(frozen.iter().copied())
            .build()
            .unwrap()
    };
    let full = build(&[]);
    let partial = build(&["?1", "?2"]);
    assert_eq!(partial.trainable_names(), ["w3", "b3"]);
    assert_eq!(full.full_update_arena_bytes, None);
    let (p_arena, f_arena) = (
        partial.schedule.arena_elems * 4,
        full.schedule.arena_elems * 4,
    );
    assert_eq!(partial.full_update_arena_bytes, Some(f_arena));
    assert!(p_arena < f_arena, "partial {p_arena} B vs full {f_arena} B");
    println!("{}", partial.subset_report().unwrap());
    // The recorded gradient is smaller: no rule reaches the frozen layers. Nothing of the
    // shape of a frozen weight or of a hidden activation's adjoint is recorded.
    assert!(
        partial.update_start - partial.gradient_start < full.update_start - full.gradient_start
    );
    let grad_shapes: Vec<Shape> = partial.tape.nodes()
        [partial.gradient_start..partial.update_start]
        .iter()
        .map(|n| n.shape)
        .collect();
    for frozen in [
        Shape::matrix(12, 10),
        Shape::matrix(10, 8),
        Shape::matrix(batch, 10),
        Shape::matrix(batch, 8),
    ] {
        assert!(
            !grad_shapes.contains(&frozen),
            "{frozen:?} in the partial gradient"
        );
    }
    let full_shapes: Vec<Shape> = full.tape.nodes()[full.gradient_start..full.update_start]
        .iter()
        .map(|n| n.shape)
        .collect();
    assert!(full_shapes.contains(&Shape::matrix(12, 10)));
    let (pb, fb) = (partial.schedule.to_bytes(), full.schedule.to_bytes());
    let (mut pr, mut fr) = (runtime(&partial, &pb), runtime(&full, &fb));
    let mut rng = SplitMix64::new(9);
    let x = random(&mut rng, batch * 12);
    let labels: Vec<f32> = (0..batch).map(|i| (i % 4) as f32).collect();
    let inputs = [("x", &x[..]), ("labels", &labels[..])];
    let (lp, lf) = (
        pr.train_step_named(&inputs).unwrap(),
        fr.train_step_named(&inputs).unwrap(),
    );
    assert_eq!(lp.to_bits(), lf.to_bits());
    for name in ["w3", "b3"] {
        let (p, f) = (pr.parameter(name).unwrap(), fr.parameter(name).unwrap());
        assert_eq!(bits(&p), bits(&f), "{name}");
    }
    for (i, name) in ["w1", "b1", "w2", "b2"].into_iter().enumerate() {
        assert_eq!(
            bits(&pr.parameter(name).unwrap()),
            bits(&partial.parameters[i].init)
        );
        assert_ne!(
            bits(&fr.parameter(name).unwrap()),
            bits(&full.parameters[i].init)
        );
    }
    // The oracle agrees, gradient by gradient.
    let (op, of) = (
        Oracle::with_initial_parameters(&partial).unwrap(),
        Oracle::with_initial_parameters(&full).unwrap(),
    );
    let (gp, gf) = (
        op.gradients(&[&x], &labels).unwrap().1,
        of.gradients(&[&x], &labels).unwrap().1,
    );
    assert_eq!(gp.len(), 2);
    for (p, f) in gp.iter().zip(&gf[4..]) {
        assert_eq!(p.0, f.0);
        assert_eq!(bits(&p.1.data), bits(&f.1.data));
    }
    // Adam keeps state only for the trained parameters, and trains bitwise as the oracle.
    let adam = TrainingJob::for_model(&model)
        .optimizer(Optimizer::adam(0.01))
        .batch(batch)
        .trainable(["*3"])
        .build()
        .unwrap();
    let ab = adam.schedule.to_bytes();
    let mut ar = runtime(&adam, &ab);
    let mut ao = Oracle::with_initial_parameters(&adam).unwrap();
    for step in 0..10 {
        let x = random(&mut rng, batch * 12);
        let l_rt = ar
            .train_step_named(&[("x", &x), ("labels", &labels)])
            .unwrap();
        let l_or = ao.step_inputs(&[&x], &labels).unwrap();
        assert_eq!(l_rt.to_bits(), l_or.to_bits(), "adam step {step}");
        for (spec, v) in adam.parameters.iter().zip(&ao.params) {
            assert_eq!(bits(&ar.parameter(&spec.name).unwrap()), bits(&v.data));
        }
    }
    assert_eq!(bits(&ao.params[0].data), bits(&adam.parameters[0].init));
    let per_param: Vec<&str> = adam
        .state_specs
        .iter()
        .map(|s| s.name.as_str())
        .filter(|n| !n.starts_with("opt."))
        .collect();
    assert_eq!(per_param, ["w3.m", "b3.m", "w3.v", "b3.v"]);
    // A pattern that matches nothing is an error naming it.
    let e = TrainingJob::for_model(&model)
        .frozen(["features.*"])
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"features.*\" matches no parameter"), "{e}");
}

/// A linear model `x · w + bias` with fixed values, for losses checked by hand.
fn linear_job(loss: Loss, batch: usize, d: usize) -> TrainingJob {
    let mlp = Mlp {
        sizes: vec![3, d],
        activation: Activation::Tanh,
    };
    TrainingJob::for_model(&mlp.model(0.0, 17))
        .loss(loss)
        .batch(batch)
        .build()
        .unwrap()
}

/// The logits of the linear job in f64: `x · w + b`.
fn logits_f64(job: &TrainingJob, x: &[f32], batch: usize, d: usize) -> Vec<f64> {
    let (w, b) = (&job.parameters[0].init, &job.parameters[1].init);
    let mut out = vec![0.0f64; batch * d];
    for r in 0..batch {
        for c in 0..d {
            let mut s = b[c] as f64;
            for k in 0..3 {
                s += x[r * 3 + k] as f64 * w[k * d + c] as f64;
            }
            out[r * d + c] = s;
        }
    }
    out
}

#[test]
fn bce_and_l1_match_their_definitions_in_f64() {
    let (batch, d) = (5, 2);
    let mut rng = SplitMix64::new(3);
    let x: Vec<f32> = (0..batch * 3).map(|_| rng.next_f32() * 6.0 - 3.0).collect();
    // BCE targets in [0, 1] (soft labels included); L1 targets anywhere.
    let z: Vec<f32> = (0..batch * d).map(|i| [0.0, 1.0, 0.25][i % 3]).collect();
    let y: Vec<f32> = random(&mut rng, batch * d);
    let n = (batch * d) as f64;
    for (loss, target) in [(Loss::BceWithLogits, &z), (Loss::L1, &y)] {
        let job = linear_job(loss, batch, d);
        assert_eq!(job.target_name, "y");
        let logits = logits_f64(&job, &x, batch, d);
        // PyTorch's definitions, reduction='mean'.
        let per: Vec<f64> = logits
            .iter()
            .zip(target.iter())
            .map(|(&l, &t)| {
                let t = t as f64;
                match loss {
                    Loss::BceWithLogits => l.max(0.0) - l * t + (-l.abs()).exp().ln_1p(),
                    _ => (l - t).abs(),
                }
            })
            .collect();
        let want = per.iter().sum::<f64>() / n;
        // d loss / d bias_c = mean over rows of σ(l) − z (BCE) or sign(l − y) (L1), / n.
        let grad_bias: Vec<f64> = (0..d)
            .map(|c| {
                (0..batch)
                    .map(|r| {
                        let (l, t) = (logits[r * d + c], target[r * d + c] as f64);
                        match loss {
                            Loss::BceWithLogits => 1.0 / (1.0 + (-l).exp()) - t,
                            _ => (l - t).signum(),
                        }
                    })
                    .sum::<f64>()
                    / n
            })
            .collect();
        let oracle = Oracle::with_initial_parameters(&job).unwrap();
        let (got, grads) = oracle.gradients(&[&x], target).unwrap();
        assert!(
            (got as f64 - want).abs() <= 1e-6 * want.abs().max(1.0),
            "{loss:?}: {got} vs {want}"
        );
        for (g, w) in grads[1].1.data.iter().zip(&grad_bias) {
            assert!(
                (*g as f64 - w).abs() <= 1e-6,
                "{loss:?} bias grad {g} vs {w}"
            );
        }
        // The runtime's eval_loss (no dropout, no buffers: the training loss) is the oracle's.
        let bytes = job.schedule.to_bytes();
        let mut rt = runtime(&job, &bytes);
        let el = rt.eval_loss(&[("x", &x), ("y", target)]).unwrap();
        assert_eq!(el.to_bits(), got.to_bits());
    }
}

/// The bridge: the oracle's recorded gradients stepped by a parameter store give the bits the
/// plan's `train_step` commits, for Adam over five steps.
#[test]
fn oracle_gradients_and_parameter_store_step_reproduce_train_step() {
    let mlp = Mlp {
        sizes: vec![5, 6, 3],
        activation: Activation::Relu,
    };
    let batch = 4;
    let job = TrainingJob::for_model(&mlp.model(0.0, 21))
        .optimizer(Optimizer::adam(0.02))
        .batch(batch)
        .build()
        .unwrap();
    let bytes = job.schedule.to_bytes();
    let mut rt = runtime(&job, &bytes);
    let oracle = Oracle::with_initial_parameters(&job).unwrap();
    let mut store = Parameters::new(job.optimizer, oracle.named_parameters()).unwrap();
    let mut rng = SplitMix64::new(4);
    for step in 0..5 {
        let x = random(&mut rng, batch * 5);
        let labels: Vec<f32> = (0..batch).map(|i| ((i + step) % 3) as f32).collect();
        let current = Oracle::new(
            &job,
            &store
                .tensors
                .iter()
                .map(|(_, t)| t.data.clone())
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let (loss, grads) = current.gradients(&[&x], &labels).unwrap();
        store.step(&grads).unwrap();
        let l_rt = rt
            .train_step_named(&[("x", &x), ("labels", &labels)])
            .unwrap();
        assert_eq!(loss.to_bits(), l_rt.to_bits(), "step {step}");
        for (name, t) in &store.tensors {
            assert_eq!(bits(&t.data), bits(&rt.parameter(name).unwrap()), "{name}");
        }
    }
    // Bad gradients are refused by name.
    let e = store
        .step(&[("w9".into(), tapeplan_core::Tensor::scalar(0.0))])
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"w9\""), "{e}");
    let e = store
        .step(&[("w1".into(), tapeplan_core::Tensor::scalar(0.0))])
        .unwrap_err()
        .to_string();
    assert!(e.contains("gradient of w1"), "{e}");
}

/// `forward_1` and `eval_loss` are opt-in for the `--layers` MLP (its plan bytes are pinned)
/// and on for every other model; the MLP built through the general job with them off has the
/// `--layers` bytes.
#[test]
fn eval_entries_are_opt_in_for_the_layers_mlp() {
    let mlp = Mlp {
        sizes: vec![4, 3, 2],
        activation: Activation::Tanh,
    };
    let names = |job: &TrainingJob| -> Vec<String> {
        job.schedule
            .entries
            .iter()
            .map(|e| e.name.clone())
            .collect()
    };
    let layers = TrainingJob::build(
        mlp.clone(),
        Loss::SoftmaxCrossEntropy,
        Optimizer::sgd(0.1),
        2,
    )
    .unwrap();
    assert_eq!(names(&layers), ["forward", "train_step"]);
    let general = TrainingJob::for_model(&mlp)
        .optimizer(Optimizer::sgd(0.1))
        .batch(2)
        .build()
        .unwrap();
    assert_eq!(
        names(&general),
        ["forward", "train_step", "forward_1", "eval_loss"]
    );
    let without = TrainingJob::for_model(&mlp)
        .optimizer(Optimizer::sgd(0.1))
        .batch(2)
        .options(JobOptions {
            eval_entries: Some(false),
            ..JobOptions::default()
        })
        .build()
        .unwrap();
    assert_eq!(without.schedule.to_bytes(), layers.schedule.to_bytes());
    let with = TrainingJob::build_with(
        mlp,
        Loss::SoftmaxCrossEntropy,
        Optimizer::sgd(0.1),
        2,
        JobOptions {
            eval_entries: Some(true),
            ..JobOptions::default()
        },
    )
    .unwrap();
    assert_eq!(with.schedule.to_bytes(), general.schedule.to_bytes());
}

/// A model with neither a generator nor buffers whose training forward still differs (its
/// output doubled in training mode): the job notices and records both, so `eval_loss` is the
/// inference-mode loss, not the training one.
struct DoubledInTraining;

impl Model for DoubledInTraining {
    fn parameters(&self) -> Result<Vec<ParamSpec>, ModelError> {
        Ok(vec![ParamSpec {
            name: "w".into(),
            shape: Shape::matrix(2, 1),
            kind: ParamKind::Parameter,
            init: vec![0.5, -1.5],
        }])
    }

    fn inputs(&self, batch: usize) -> Result<Vec<InputSpec>, ModelError> {
        Ok(vec![InputSpec {
            name: "x".into(),
            shape: Shape::matrix(batch, 2),
        }])
    }

    fn record(&self, tape: &mut Tape, cx: &ForwardCx<'_>) -> Result<Forward, ModelError> {
        let mut t = tape.trace();
        let z = t.matmul(&cx.inputs[0], &cx.params[0])?;
        let output = match cx.mode {
            Mode::Train => t.scale(&z, 2.0)?,
            Mode::Eval => z,
        };
        Ok(Forward {
            output,
            buffer_updates: Vec::new(),
        })
    }
}

#[test]
fn a_mode_dependent_forward_gets_its_own_eval_loss() {
    let job = TrainingJob::for_model(&DoubledInTraining)
        .loss(Loss::MeanSquaredError)
        .batch(2)
        .build()
        .unwrap();
    assert_ne!(job.eval_loss, Some(job.loss_node));
    let (x, y) = ([1.0f32, 2.0, -1.0, 0.5], [0.25f32, -0.75]);
    // x · w = [-2.5, -1.25]; by hand: eval mean((x·w − y)²), train mean((2·x·w − y)²).
    let eval_want = ((-2.5f64 - 0.25).powi(2) + (-1.25f64 + 0.75).powi(2)) / 2.0;
    let train_want = ((-5.0f64 - 0.25).powi(2) + (-2.5f64 + 0.75).powi(2)) / 2.0;
    let bytes = job.schedule.to_bytes();
    let mut rt = runtime(&job, &bytes);
    let el = rt.eval_loss(&[("x", &x), ("y", &y)]).unwrap();
    assert_eq!(el as f64, eval_want);
    let tl = rt.train_step_named(&[("x", &x), ("y", &y)]).unwrap();
    assert_eq!(tl as f64, train_want);
}
