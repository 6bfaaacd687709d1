//! Issue 13's check of tapeplan's recorded gradients against an independent autodiff: ONNX
//! Runtime's on-device training (`onnxruntime-training-cpu` 1.19.2) on the five test models of
//! `scripts/onnx_models.py` (an MLP, a 1-D CNN, a 2-D CNN with batch normalization, a
//! depthwise-separable block, an embedding + mean-pool text classifier).
//!
//! `scripts/ort_check.py` wrote, per model, ORT's forward outputs (inference), and over 5 fixed
//! batches from the initializers: each step's cross-entropy loss and gradients (per parameter,
//! by name), and the parameters after the 5 SGD steps (lr 0.1). This test reads the models as
//! [`OnnxModel`]s, records the loss, its gradient (`Tape::differentiate`) and the SGD update on
//! one tape, plans a `train_step` and a `forward` entry, and runs the same 5 steps through the
//! oracle (`tapeplan_core::Run`) and the `no_std` runtime from the plan's bytes: the two are
//! compared bit for bit, and each with ORT's numbers within `1e-5 + 1e-4·|ORT|` per element.
//! The cross-entropy models train the same batches with Adam, AdamW (ORT's `AdamWOptimizer` in
//! PyTorch's mode) and SGD with momentum and Nesterov momentum (PyTorch's update over ORT's
//! gradients) too: [`adam_and_momentum_steps_match_onnx_runtime_training`].
//!
//! The files are checked in (`tests/data/onnx/`); `cargo xtask ort-check` regenerates them with
//! ONNX Runtime into a fresh directory and runs this test on that (`TAPEPLAN_ORT_DIR`).
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use tapeplan_core::{MathProfile, NodeId, Run, Shape, Tape, Tensor};
use tapeplan_planner::exec::oracle::Oracle;
use tapeplan_planner::exec::RuntimeModel;
use tapeplan_planner::model::onnx::OnnxModel;
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{
    mean_squared_error, softmax_cross_entropy, ForwardCx, Mode, Model, ParamKind, ParamSpec,
};
use tapeplan_planner::model::{Loss, TrainingJob};
use tapeplan_planner::plan::{plan, plan_with, EntrySpec, PlanOptions, Root};
use tapeplan_runtime::{Plan as RtPlan, Session};

/// The per-element bound against ONNX Runtime: `|ours − ORT| ≤ ATOL + RTOL·|ORT|`.
const ATOL: f64 = 1e-5;
/// See [`ATOL`].
const RTOL: f64 = 1e-4;

/// The table's relative differences are over the elements with `|ORT| ≥ REL_FLOOR`: below, a
/// value is rounding noise of a sum that cancels (the conv bias before a batch normalization
/// in training mode has a gradient of exactly 0 in exact arithmetic), held by the absolute part.
const REL_FLOOR: f64 = 1e-4;

/// The loss a check trains with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LossKind {
    /// Cross-entropy over labels `[batch]` (ORT's `CrossEntropyLoss`, mean reduction).
    Ce,
    /// Mean squared error over float targets shaped as the output (ORT's `MSELoss`).
    Mse,
}

/// The checks: the five models with cross-entropy, and the MLP as a regression head too.
const CASES: &[(&str, LossKind)] = &[
    ("mlp", LossKind::Ce),
    ("cnn1d", LossKind::Ce),
    ("cnn2d_bn", LossKind::Ce),
    ("dwsep", LossKind::Ce),
    ("text", LossKind::Ce),
    ("mlp", LossKind::Mse),
];

fn data_dir() -> PathBuf {
    match std::env::var_os("TAPEPLAN_ORT_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/onnx"),
    }
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("an array of numbers")
        .iter()
        .map(|x| x.as_f64().expect("a number") as f32)
        .collect()
}

/// The largest absolute and relative differences, and whether every element is within the
/// bound.
#[derive(Clone, Copy, Default, Debug)]
struct Diff {
    abs: f64,
    rel: f64,
    worst_excess: f64,
}

impl Diff {
    fn add(&mut self, ours: &[f32], ort: &[f32], what: &str) {
        assert_eq!(ours.len(), ort.len(), "{what}: element counts");
        for (&a, &b) in ours.iter().zip(ort) {
            let (a, b) = (f64::from(a), f64::from(b));
            assert!(a.is_finite(), "{what}: {a} is not finite");
            let d = (a - b).abs();
            self.abs = self.abs.max(d);
            if b.abs() >= REL_FLOOR {
                self.rel = self.rel.max(d / b.abs());
            }
            self.worst_excess = self.worst_excess.max(d - (ATOL + RTOL * b.abs()));
        }
    }

    fn ok(&self) -> bool {
        self.worst_excess <= 0.0
    }
}

/// What one model's check measured.
struct Report {
    loss: Diff,
    grads: Diff,
    params: Diff,
    forward: Diff,
    /// Arena and plan bytes of a `train_step` training every parameter.
    full: (usize, usize),
    /// The same training only the classifier head (the last `Gemm`: `fc.*`, `fc2.*`).
    head: (usize, usize),
}

/// The leaves of a training tape: the model's inputs at `batch`, the labels, the persistent
/// tensors.
fn leaves_of(
    model: &OnnxModel,
    tape: &mut Tape,
    batch: usize,
    target: Shape,
) -> (Vec<NodeId>, NodeId, Vec<NodeId>) {
    let inputs = model
        .inputs(batch)
        .unwrap()
        .iter()
        .map(|i| tape.input(&i.name, i.shape))
        .collect();
    let labels = tape.input("labels", target);
    let leaves = model
        .parameters()
        .unwrap()
        .iter()
        .map(|s| tape.parameter(&s.name, s.shape))
        .collect();
    (inputs, labels, leaves)
}

/// Records the loss of `output` against `target`.
fn record_loss(tape: &mut Tape, kind: LossKind, output: NodeId, target: NodeId) -> NodeId {
    match kind {
        LossKind::Ce => softmax_cross_entropy(&mut tape.trace(), &output, &target),
        LossKind::Mse => mean_squared_error(&mut tape.trace(), &output, &target),
    }
    .unwrap()
}

/// Records the gradient of `loss` for the parameters `trains` accepts and their SGD update:
/// the trainable leaves, their gradients and new values.
fn sgd(
    tape: &mut Tape,
    specs: &[ParamSpec],
    leaves: &[NodeId],
    loss: NodeId,
    lr: f32,
    trains: impl Fn(&str) -> bool,
) -> (Vec<NodeId>, Vec<Option<NodeId>>, Vec<Option<NodeId>>) {
    let trainable: Vec<NodeId> = specs
        .iter()
        .zip(leaves)
        .filter(|(s, _)| s.kind == ParamKind::Parameter && trains(&s.name))
        .map(|(_, &l)| l)
        .collect();
    let adjoints = tape.differentiate(loss, &trainable).unwrap();
    let grads: Vec<Option<NodeId>> = trainable
        .iter()
        .map(|p| adjoints.get(*p).copied())
        .collect();
    let (updated, _) = Optimizer::sgd(lr)
        .step(&mut tape.trace(), &trainable, &grads, &[])
        .unwrap();
    (trainable, grads, updated)
}

/// The arena and plan bytes of a plan of one `train_step` (loss, gradient, SGD update, the
/// running statistics' new values) that trains the parameters `trains` accepts.
fn train_step_plan(
    model: &OnnxModel,
    batch: usize,
    kind: LossKind,
    target: Shape,
    trains: impl Fn(&str) -> bool,
) -> (usize, usize) {
    let specs = model.parameters().unwrap();
    let mut tape = Tape::new();
    let (inputs, labels, leaves) = leaves_of(model, &mut tape, batch, target);
    let fwd = model
        .record(
            &mut tape,
            &ForwardCx {
                batch,
                mode: Mode::Train,
                inputs: &inputs,
                params: &leaves,
                rng: None,
            },
        )
        .unwrap();
    let loss = record_loss(&mut tape, kind, fwd.output, labels);
    let (trainable, _, updated) = sgd(&mut tape, &specs, &leaves, loss, 0.1, trains);
    let mut roots = vec![Root::Output {
        name: "loss".into(),
        node: loss,
    }];
    for (p, v) in trainable.iter().zip(&updated) {
        roots.push(Root::Update {
            param: *p,
            value: v.unwrap(),
        });
    }
    for &(k, v) in &fwd.buffer_updates {
        roots.push(Root::Update {
            param: leaves[k],
            value: v,
        });
    }
    // Gradients materialized (no SGD fusion): what the body's gradient costs. With the fused
    // update the MLP's full step needs no more than its head-only step (5 536 B both).
    let schedule = plan_with(
        &tape,
        &[EntrySpec {
            name: "train_step".into(),
            roots,
            guarded: false,
        }],
        PlanOptions {
            fuse_sgd: false,
            ..PlanOptions::default()
        },
    )
    .unwrap();
    let bytes = schedule.to_bytes();
    let arena = RtPlan::parse(&bytes).unwrap().arena_elems() * 4;
    (arena, bytes.len())
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn check_model(name: &str, kind: LossKind) -> Report {
    let dir = data_dir();
    let bytes = std::fs::read(dir.join(format!("{name}.onnx"))).expect("the model file");
    let results = match kind {
        LossKind::Ce => format!("{name}.ort.json"),
        LossKind::Mse => format!("{name}.mse.ort.json"),
    };
    let ort: Value =
        serde_json::from_slice(&std::fs::read(dir.join(results)).expect("ORT's results")).unwrap();
    let model = OnnxModel::from_bytes(&bytes).unwrap();
    let batch = ort["batch"].as_u64().unwrap() as usize;
    let lr = ort["lr"].as_f64().unwrap() as f32;

    // The persistent tensors: ORT's trainable set is the model's parameters, its frozen set the
    // buffers (batch normalization's running statistics).
    let specs = model.parameters().unwrap();
    let trainable_names: Vec<String> = ort["trainable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let ours: Vec<String> = specs
        .iter()
        .filter(|s| s.kind == ParamKind::Parameter)
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(ours, trainable_names, "{name}: the parameters");

    // One tape: inputs, labels, persistent leaves, the forward at the batch and at batch 1
    // (over the same leaves), the loss, its gradient, the SGD update.
    let mut tape = Tape::new();
    let input_specs = model.inputs(batch).unwrap();
    let target = match kind {
        LossKind::Ce => Shape::vector(batch),
        LossKind::Mse => {
            let width = floats(&ort["steps"][0]["labels"]).len() / batch;
            Shape::matrix(batch, width)
        }
    };
    let (inputs, labels, leaves) = leaves_of(&model, &mut tape, batch, target);
    let cx = |mode, batch, inputs| ForwardCx {
        batch,
        mode,
        inputs,
        params: &leaves,
        rng: None,
    };
    // Training (batch normalization on the batch's statistics, as ORT trains), and inference
    // at the batch and at batch 1 (the running statistics, as ORT's inference).
    let train_fwd = model
        .record(&mut tape, &cx(Mode::Train, batch, &inputs))
        .unwrap();
    let logits = model
        .record(&mut tape, &cx(Mode::Eval, batch, &inputs))
        .unwrap()
        .output;
    let one_specs = model.inputs(1).unwrap();
    let one_inputs: Vec<NodeId> = one_specs
        .iter()
        .map(|i| tape.input(&format!("{}@1", i.name), i.shape))
        .collect();
    let logits_1 = model
        .record(&mut tape, &cx(Mode::Eval, 1, &one_inputs))
        .unwrap()
        .output;
    let loss = record_loss(&mut tape, kind, train_fwd.output, labels);
    let (trainable, grads, updated) = sgd(&mut tape, &specs, &leaves, loss, lr, |_| true);
    let grads: Vec<NodeId> = grads
        .into_iter()
        .map(|g| g.expect("every parameter reaches the loss"))
        .collect();

    let mut roots = vec![Root::Output {
        name: "loss".into(),
        node: loss,
    }];
    for (k, g) in grads.iter().enumerate() {
        roots.push(Root::Output {
            name: format!("grad{k}"),
            node: *g,
        });
    }
    for (p, v) in trainable.iter().zip(&updated) {
        roots.push(Root::Update {
            param: *p,
            value: v.expect("an update"),
        });
    }
    for &(k, v) in &train_fwd.buffer_updates {
        assert_eq!(
            specs[k].kind,
            ParamKind::Buffer,
            "{name}: only buffers get new values"
        );
        roots.push(Root::Update {
            param: leaves[k],
            value: v,
        });
    }
    let schedule = plan(
        &tape,
        &[
            EntrySpec {
                name: "train_step".into(),
                roots,
                guarded: false,
            },
            EntrySpec {
                name: "forward".into(),
                roots: vec![
                    Root::Output {
                        name: "logits".into(),
                        node: logits,
                    },
                    Root::Output {
                        name: "logits1".into(),
                        node: logits_1,
                    },
                ],
                guarded: false,
            },
        ],
    )
    .unwrap();
    let plan_bytes = schedule.to_bytes();
    let parsed = RtPlan::parse(&plan_bytes).unwrap();
    let mut arena = vec![0.0f32; parsed.arena_elems()];
    let mut session = Session::bind(&parsed, &mut arena).unwrap();
    for s in &specs {
        if parsed.parameter(&s.name).is_some() {
            session.load_parameter(&s.name, &s.init).unwrap();
        }
    }
    let train = parsed.entry("train_step").unwrap();
    let forward = parsed.entry("forward").unwrap();

    // The oracle's persistent values, carried by hand from step to step.
    let mut values: Vec<Vec<f32>> = specs.iter().map(|s| s.init.clone()).collect();
    let mut report = Report {
        loss: Diff::default(),
        grads: Diff::default(),
        params: Diff::default(),
        forward: Diff::default(),
        full: train_step_plan(&model, batch, kind, target, |_| true),
        head: train_step_plan(&model, batch, kind, target, |n| {
            n.starts_with("fc.") || n.starts_with("fc2.")
        }),
    };
    let set_inputs = |run: &mut Run<'_>, step: &Value| {
        for (spec, &leaf) in model.data_inputs().iter().zip(&inputs) {
            let v = floats(&step["inputs"][&spec.onnx_name]);
            run.set(leaf, Tensor::new(run_shape(&tape, leaf), v).unwrap())
                .unwrap();
        }
        run.set(
            labels,
            Tensor::new(target, floats(&step["labels"])).unwrap(),
        )
        .unwrap();
    };
    fn run_shape(tape: &Tape, id: NodeId) -> Shape {
        tape.shape(id).unwrap()
    }

    // The forward outputs (ORT's inference of the untouched model, step 0's batch), at the
    // batch and, row by row, at batch 1.
    let steps = ort["steps"].as_array().unwrap();
    {
        let mut run = Run::with_math(&tape, MathProfile::Precise);
        for (leaf, v) in leaves.iter().zip(&values) {
            run.set(
                *leaf,
                Tensor::new(tape.shape(*leaf).unwrap(), v.clone()).unwrap(),
            )
            .unwrap();
        }
        set_inputs(&mut run, &steps[0]);
        for (k, spec) in model.data_inputs().iter().enumerate() {
            let all = floats(&steps[0]["inputs"][&spec.onnx_name]);
            let row = all.len() / batch;
            run.set(
                one_inputs[k],
                Tensor::new(one_specs[k].shape, all[..row].to_vec()).unwrap(),
            )
            .unwrap();
        }
        run.forward().unwrap();
        let oracle = run.value(logits).unwrap().data.clone();
        let oracle_1 = run.value(logits_1).unwrap().data.clone();
        for (k, spec) in model.data_inputs().iter().enumerate() {
            let v = floats(&steps[0]["inputs"][&spec.onnx_name]);
            session
                .set_input(forward, &input_specs[k].name, &v)
                .unwrap();
            let row = v.len() / batch;
            session
                .set_input(forward, &format!("{}@1", one_specs[k].name), &v[..row])
                .unwrap();
        }
        session.run(forward).unwrap();
        let rt = session.output(forward, "logits").unwrap().to_vec();
        let rt_1 = session.output(forward, "logits1").unwrap().to_vec();
        assert_eq!(
            bits(&oracle),
            bits(&rt),
            "{name}: forward, oracle vs runtime"
        );
        assert_eq!(
            bits(&oracle_1),
            bits(&rt_1),
            "{name}: batch-1 forward, oracle vs runtime"
        );
        // Row 0 at batch 1 is row 0 at the batch, bit for bit (each output row accumulates
        // in the same order whatever the batch).
        assert_eq!(
            bits(&oracle_1),
            bits(&oracle[..oracle_1.len()]),
            "{name}: batch-1 forward vs the batch's row 0"
        );
        let expected = floats(&ort["forward"]);
        report.forward.add(&oracle, &expected, "forward");
        let width = expected.len() / batch;
        report
            .forward
            .add(&oracle_1, &expected[..width], "forward at batch 1");
    }

    for (k, step) in steps.iter().enumerate() {
        let mut run = Run::with_math(&tape, MathProfile::Precise);
        for (leaf, v) in leaves.iter().zip(&values) {
            run.set(
                *leaf,
                Tensor::new(tape.shape(*leaf).unwrap(), v.clone()).unwrap(),
            )
            .unwrap();
        }
        set_inputs(&mut run, step);
        // The batch-1 inputs are not read by the loss: any value.
        for (i, s) in one_inputs.iter().zip(&one_specs) {
            run.set(
                *i,
                Tensor::new(s.shape, vec![0.0; s.shape.elems()]).unwrap(),
            )
            .unwrap();
        }
        run.forward().unwrap();
        let loss_o = run.value(loss).unwrap().data.clone();
        let grads_o: Vec<Vec<f32>> = grads
            .iter()
            .map(|g| run.value(*g).unwrap().data.clone())
            .collect();
        let updated_o: Vec<Vec<f32>> = updated
            .iter()
            .map(|u| run.value(u.unwrap()).unwrap().data.clone())
            .collect();

        for (spec, i) in model.data_inputs().iter().zip(&input_specs) {
            session
                .set_input(train, &i.name, &floats(&step["inputs"][&spec.onnx_name]))
                .unwrap();
        }
        session
            .set_input(train, "labels", &floats(&step["labels"]))
            .unwrap();
        session.run(train).unwrap();
        let loss_r = session.output(train, "loss").unwrap().to_vec();
        assert_eq!(
            bits(&loss_o),
            bits(&loss_r),
            "{name} step {k}: loss, oracle vs runtime"
        );
        for (j, g) in grads_o.iter().enumerate() {
            let r = session.output(train, &format!("grad{j}")).unwrap();
            assert_eq!(
                bits(g),
                bits(r),
                "{name} step {k}: gradient {j}, oracle vs runtime"
            );
        }

        report
            .loss
            .add(&loss_o, &[step["loss"].as_f64().unwrap() as f32], "loss");
        for (j, g) in grads_o.iter().enumerate() {
            let expected = floats(&step["grads"][&trainable_names[j]]);
            report.grads.add(g, &expected, &trainable_names[j]);
        }
        let buffers_o: Vec<(usize, Vec<f32>)> = train_fwd
            .buffer_updates
            .iter()
            .map(|&(k, v)| (k, run.value(v).unwrap().data.clone()))
            .collect();
        for (k, v) in buffers_o {
            values[k] = v;
        }
        let mut j = 0;
        for (s, v) in specs.iter().zip(values.iter_mut()) {
            if s.kind == ParamKind::Parameter {
                *v = updated_o[j].clone();
                j += 1;
            }
            {
                assert_eq!(
                    bits(v),
                    bits(session.parameter(&s.name).unwrap()),
                    "{name} step {k}: {} after the update, oracle vs runtime",
                    s.name
                );
            }
        }
    }
    for (s, v) in specs.iter().zip(&values) {
        if s.kind == ParamKind::Parameter {
            report
                .params
                .add(v, &floats(&ort["params_after"][&s.name]), &s.name);
        }
    }
    report
}

#[test]
fn gradients_and_sgd_steps_match_onnx_runtime_training() {
    let mut failed = Vec::new();
    println!(
        "{:<9} {:>17} {:>17} {:>17} {:>17} {:>10} {:>10} {:>7}",
        "model",
        "loss abs/rel",
        "grads abs/rel",
        "params(5) abs/rel",
        "forward abs/rel",
        "arena full",
        "arena head",
        "plan B"
    );
    let mut reports: BTreeMap<String, Report> = BTreeMap::new();
    for &(model, kind) in CASES {
        let name = match kind {
            LossKind::Ce => model.to_owned(),
            LossKind::Mse => format!("{model} mse"),
        };
        let r = check_model(model, kind);
        let cell = |d: &Diff| format!("{:.1e}/{:.1e}", d.abs, d.rel);
        println!(
            "{:<9} {:>17} {:>17} {:>17} {:>17} {:>10} {:>10} {:>7}",
            name,
            cell(&r.loss),
            cell(&r.grads),
            cell(&r.params),
            cell(&r.forward),
            r.full.0,
            r.head.0,
            r.full.1
        );
        for (what, d) in [
            ("loss", r.loss),
            ("gradients", r.grads),
            ("parameters after 5 steps", r.params),
            ("forward", r.forward),
        ] {
            if !d.ok() {
                failed.push(format!(
                    "{name}: {what} exceed 1e-5 + 1e-4·|ORT| by {:.2e}",
                    d.worst_excess
                ));
            }
        }
        // Training the head only records no gradient through the body: a smaller arena.
        assert!(
            r.head.0 < r.full.0,
            "{name}: head-only arena {} vs full {}",
            r.head.0,
            r.full.0
        );
        reports.insert(name, r);
    }
    assert!(failed.is_empty(), "{failed:#?}");
    assert_eq!(reports.len(), CASES.len());
}

fn load(name: &str) -> OnnxModel {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/onnx")
        .join(format!("{name}.onnx"));
    OnnxModel::from_bytes(&std::fs::read(path).unwrap()).unwrap()
}

/// What the models declare: parameters under their `state_dict` names with PyTorch's layouts,
/// running statistics as buffers, `Constant` shape arithmetic folded (no leaf), the named batch
/// given at any size, the INT64 ids an input.
#[test]
fn onnx_models_describe_themselves_as_pytorch_would() {
    let mlp = load("mlp");
    let specs = mlp.parameters().unwrap();
    let names: Vec<(&str, Vec<usize>)> = specs
        .iter()
        .map(|s| (s.name.as_str(), s.shape.dims()[..s.shape.rank()].to_vec()))
        .collect();
    assert_eq!(
        names,
        [
            ("fc1.weight", vec![32, 16]),
            ("fc1.bias", vec![32]),
            ("fc2.weight", vec![4, 32]),
            ("fc2.bias", vec![4]),
        ]
    );
    assert!(specs.iter().all(|s| s.kind == ParamKind::Parameter));
    assert_eq!(mlp.batch_dim(), Some("batch"));
    let inputs = mlp.inputs(7).unwrap();
    assert_eq!(inputs.len(), 1);
    // The single data input is `x` in the plan, `input` in the graph.
    assert_eq!(
        (inputs[0].name.as_str(), inputs[0].shape),
        ("x", Shape::matrix(7, 16))
    );
    assert!(mlp.names().contains(&("input".to_owned(), "x".to_owned())));

    let bn = load("cnn2d_bn");
    let kinds: Vec<(String, ParamKind)> = bn
        .parameters()
        .unwrap()
        .into_iter()
        .map(|s| (s.name, s.kind))
        .collect();
    assert!(kinds.contains(&("bn.running_mean".into(), ParamKind::Buffer)));
    assert!(kinds.contains(&("bn.running_var".into(), ParamKind::Buffer)));
    assert!(kinds.contains(&("bn.weight".into(), ParamKind::Parameter)));
    // The flatten's Constants (0, [0], [-1]) are folded shape arithmetic: no leaf.
    assert_eq!(kinds.len(), 8, "{kinds:?}");

    let text = load("text");
    let inputs = text.inputs(3).unwrap();
    assert_eq!(
        (inputs[0].name.as_str(), inputs[0].shape),
        ("x", Shape::matrix(3, 6))
    );
    assert_eq!(text.data_inputs()[0].data_type, 7, "INT64");
    // The table reaches Gather through Identity: one parameter, under its own name.
    assert_eq!(text.parameters().unwrap()[0].name, "embedding.weight");
    assert!(text.inputs(0).is_err());
}

/// In training mode the running statistics get new values (ONNX's convention, checked against
/// numpy-style arithmetic in f64 here); in inference mode none.
#[test]
fn batch_norm_running_statistics_update_in_training_only() {
    let model = load("cnn2d_bn");
    let specs = model.parameters().unwrap();
    let mut tape = Tape::new();
    let x = tape.input("x", model.inputs(2).unwrap()[0].shape);
    let leaves: Vec<NodeId> = specs
        .iter()
        .map(|s| tape.parameter(&s.name, s.shape))
        .collect();
    let cx = |mode| ForwardCx {
        batch: 2,
        mode,
        inputs: std::slice::from_ref(&x),
        params: &leaves,
        rng: None,
    };
    let eval = model.record(&mut tape, &cx(Mode::Eval)).unwrap();
    assert!(eval.buffer_updates.is_empty());
    let train = model.record(&mut tape, &cx(Mode::Train)).unwrap();
    let updated: Vec<&str> = train
        .buffer_updates
        .iter()
        .map(|&(k, _)| specs[k].name.as_str())
        .collect();
    assert_eq!(updated, ["bn.running_mean", "bn.running_var"]);

    // The new running mean against f64: 0.9·old + 0.1·mean over (N, H, W) of the conv output.
    let mut run = Run::with_math(&tape, MathProfile::Precise);
    let xs: Vec<f32> = (0..2 * 64)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
        .collect();
    run.set(
        x,
        Tensor::new(Shape::new(&[2, 1, 8, 8]).unwrap(), xs.clone()).unwrap(),
    )
    .unwrap();
    for (s, l) in specs.iter().zip(&leaves) {
        run.set(*l, Tensor::new(s.shape, s.init.clone()).unwrap())
            .unwrap();
    }
    run.forward().unwrap();
    let w = &specs[0].init; // conv.weight [4, 1, 3, 3]
    let b = &specs[1].init; // conv.bias [4]
    let old = &specs[4].init; // bn.running_mean
    assert_eq!(specs[4].name, "bn.running_mean");
    let new_mean = &run.value(train.buffer_updates[0].1).unwrap().data;
    for c in 0..4 {
        let mut sum = 0.0f64;
        for n in 0..2 {
            for i in 0..8i32 {
                for j in 0..8i32 {
                    let mut acc = f64::from(b[c]);
                    for di in 0..3i32 {
                        for dj in 0..3i32 {
                            let (y, z) = (i + di - 1, j + dj - 1);
                            if (0..8).contains(&y) && (0..8).contains(&z) {
                                acc += f64::from(w[c * 9 + (di * 3 + dj) as usize])
                                    * f64::from(xs[n * 64 + (y * 8 + z) as usize]);
                            }
                        }
                    }
                    sum += acc;
                }
            }
        }
        let expected = 0.9 * f64::from(old[c]) + 0.1 * sum / 128.0;
        let got = f64::from(new_mean[c]);
        assert!(
            (got - expected).abs() < 1e-6,
            "channel {c}: {got} vs {expected}"
        );
    }
}

/// The initial parameters and buffers as safetensors: every persistent tensor under its ONNX
/// (`state_dict`) name, its shape and its initializer's values.
#[test]
fn initial_parameters_are_a_state_dict() {
    let model = load("cnn2d_bn");
    let bytes = model.initial_safetensors().unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let specs = model.parameters().unwrap();
    assert_eq!(st.len(), specs.len());
    for s in &specs {
        let t = st.tensor(&s.name).unwrap();
        assert_eq!(t.shape(), &s.shape.dims()[..s.shape.rank()]);
        let values: Vec<f32> = t
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(values, s.init, "{}", s.name);
    }
    assert_eq!(st.tensor("conv.weight").unwrap().shape(), [4, 1, 3, 3]);
    assert!(st.tensor("bn.running_var").is_ok());
}

/// The general training job of `model` (as `tapeplan plan --onnx` builds it) at `batch`.
fn job_of(model: &OnnxModel, loss: Loss, optimizer: Optimizer, batch: usize) -> TrainingJob {
    TrainingJob::for_model(model)
        .loss(loss)
        .optimizer(optimizer)
        .batch(batch)
        .build()
        .unwrap()
}

/// The runtime model of `job`'s `plan` bytes, its initial parameters loaded.
fn loaded<'p>(job: &TrainingJob, plan: &'p [u8]) -> RuntimeModel<'p> {
    let mut rt = RuntimeModel::new(plan).unwrap();
    for s in &job.parameters {
        rt.load_parameter(&s.name, &s.init).unwrap();
    }
    rt
}

/// The same check through the general training job, as `tapeplan plan --onnx` builds it
/// (`TrainingJob::for_model`: entries `forward`, `forward_1`, `train_step`), its oracle
/// (`Oracle::gradients`, `Oracle::step_inputs`) and the runtime wrapper (`RuntimeModel`, inputs
/// by name): runtime and oracle bit for bit, each within `1e-5 + 1e-4·|ORT|` of ORT's losses,
/// gradients, parameters after 5 steps and forward outputs.
#[test]
fn the_training_job_of_an_onnx_model_trains_like_onnx_runtime() {
    for &(name, kind) in CASES {
        let dir = data_dir();
        let bytes = std::fs::read(dir.join(format!("{name}.onnx"))).unwrap();
        let results = match kind {
            LossKind::Ce => format!("{name}.ort.json"),
            LossKind::Mse => format!("{name}.mse.ort.json"),
        };
        let ort: Value =
            serde_json::from_slice(&std::fs::read(dir.join(results)).unwrap()).unwrap();
        let model = OnnxModel::from_bytes(&bytes).unwrap();
        let batch = ort["batch"].as_u64().unwrap() as usize;
        let lr = ort["lr"].as_f64().unwrap() as f32;
        let loss = match kind {
            LossKind::Ce => Loss::SoftmaxCrossEntropy,
            LossKind::Mse => Loss::MeanSquaredError,
        };
        let job = job_of(&model, loss, Optimizer::sgd(lr), batch);
        let plan = job.schedule.to_bytes();
        let mut rt = loaded(&job, &plan);
        let mut oracle = Oracle::with_initial_parameters(&job).unwrap();
        let target_name = job.target_name.clone();
        let steps = ort["steps"].as_array().unwrap();
        let inputs_of = |step: &Value| -> Vec<(String, Vec<f32>)> {
            model
                .data_inputs()
                .iter()
                .map(|i| (i.name.clone(), floats(&step["inputs"][&i.onnx_name])))
                .collect()
        };

        // Forward (inference) before training, at the batch and at batch 1.
        let x0 = inputs_of(&steps[0]);
        let named: Vec<(&str, &[f32])> =
            x0.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
        let fwd = rt.forward_named(&named).unwrap();
        let plain: Vec<&[f32]> = x0.iter().map(|(_, v)| v.as_slice()).collect();
        assert_eq!(
            bits(&fwd),
            bits(&oracle.forward(&plain).unwrap()),
            "{name}: forward"
        );
        let mut d = Diff::default();
        d.add(&fwd, &floats(&ort["forward"]), "forward");
        let row: Vec<(&str, &[f32])> = x0
            .iter()
            .map(|(n, v)| (n.as_str(), &v[..v.len() / batch]))
            .collect();
        let fwd1 = rt.forward_1(&row).unwrap();
        assert_eq!(bits(&fwd1), bits(&fwd[..fwd1.len()]), "{name}: forward_1");
        assert!(d.ok(), "{name}: forward {d:?}");

        let (mut dl, mut dg) = (Diff::default(), Diff::default());
        for (k, step) in steps.iter().enumerate() {
            let xs = inputs_of(step);
            let target = floats(&step["labels"]);
            let plain: Vec<&[f32]> = xs.iter().map(|(_, v)| v.as_slice()).collect();
            let (loss_g, grads) = oracle.gradients(&plain, &target).unwrap();
            for (pname, g) in &grads {
                dg.add(&g.data, &floats(&step["grads"][pname]), pname);
            }
            let loss_o = oracle.step_inputs(&plain, &target).unwrap();
            assert_eq!(loss_g.to_bits(), loss_o.to_bits());
            let mut named: Vec<(&str, &[f32])> =
                xs.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
            named.push((target_name.as_str(), &target));
            let loss_r = rt.train_step_named(&named).unwrap();
            assert_eq!(loss_o.to_bits(), loss_r.to_bits(), "{name} step {k}: loss");
            dl.add(&[loss_r], &[step["loss"].as_f64().unwrap() as f32], "loss");
        }
        let mut dp = Diff::default();
        for (pname, t) in oracle.named_parameters() {
            assert_eq!(
                bits(&t.data),
                bits(&rt.parameter(&pname).unwrap()),
                "{name}: {pname}"
            );
            if let Some(expected) = ort["params_after"].get(&pname) {
                dp.add(&t.data, &floats(expected), &pname);
            }
        }
        assert!(
            dl.ok() && dg.ok() && dp.ok(),
            "{name}: loss {dl:?} grads {dg:?} params {dp:?}"
        );
    }
}

/// The optimizer of an `optimizers` entry of ORT's results (`scripts/ort_check.py`'s
/// `OPTIMIZERS`): ONNX Runtime's `AdamWOptimizer` in PyTorch's mode (weight decay 0: Adam), or
/// PyTorch's momentum over ORT's gradients.
fn optimizer_of(entry: &Value) -> Optimizer {
    let f = |k: &str| entry[k].as_f64().unwrap() as f32;
    match entry["kind"].as_str().unwrap() {
        "adamw" => Optimizer::Adam {
            lr: f("lr"),
            beta1: f("beta1"),
            beta2: f("beta2"),
            eps: f("eps"),
            decoupled_weight_decay: f("weight_decay"),
        },
        "momentum" => Optimizer::Momentum {
            lr: f("lr"),
            momentum: f("momentum"),
            nesterov: entry["nesterov"].as_bool().unwrap(),
        },
        other => panic!("unknown optimizer kind {other}"),
    }
}

/// Adam, AdamW and SGD with momentum (plain and Nesterov) against ONNX Runtime: the general
/// training job of each cross-entropy model, with each optimizer of its results file, trains
/// over ORT's 5 batches from the initializers through the runtime and the oracle (bit for bit,
/// every persistent tensor and optimizer state every step); each step's loss and the parameters
/// after the 5 steps are within `1e-5 + 1e-4·|ORT|` of ORT's. ORT's Adam is its own kernel
/// (`AdamWOptimizer`, `adam_mode=0`: PyTorch's algorithm, `eps` after the bias-corrected square
/// root, decoupled decay first); its momentum is PyTorch's update in numpy over ORT's gradients.
#[test]
fn adam_and_momentum_steps_match_onnx_runtime_training() {
    let mut failed = Vec::new();
    let mut checked = 0;
    println!(
        "{:<9} {:<9} {:>17} {:>17}",
        "model", "optimizer", "losses abs/rel", "params(5) abs/rel"
    );
    for &(name, kind) in CASES.iter().filter(|(_, k)| *k == LossKind::Ce) {
        let dir = data_dir();
        let bytes = std::fs::read(dir.join(format!("{name}.onnx"))).unwrap();
        let ort: Value =
            serde_json::from_slice(&std::fs::read(dir.join(format!("{name}.ort.json"))).unwrap())
                .unwrap();
        assert_eq!(kind, LossKind::Ce);
        let model = OnnxModel::from_bytes(&bytes).unwrap();
        let batch = ort["batch"].as_u64().unwrap() as usize;
        let optimizers = ort["optimizers"].as_object().expect("ORT's optimizers");
        assert_eq!(
            optimizers.keys().collect::<Vec<_>>(),
            ["adam", "adamw", "momentum", "nesterov"],
            "{name}"
        );
        // Parameters whose gradient is zero in exact arithmetic (a conv bias before a batch
        // normalization in training mode: the normalization subtracts it again): ORT's and
        // ours are rounding noise (below 1e-5 of the model's largest gradient at every step),
        // which Adam divides by its own square root into steps of about `lr` and an arbitrary
        // sign. Their values after Adam are not compared (their gradients are, by the SGD
        // check; the loss does not depend on them, and the losses are compared every step).
        let steps_json = ort["steps"].as_array().unwrap();
        let largest = |p: &str| -> f32 {
            steps_json
                .iter()
                .flat_map(|s| floats(&s["grads"][p]))
                .fold(0.0f32, |m, g| m.max(g.abs()))
        };
        let trainable: Vec<String> = ort["trainable"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        let top = trainable.iter().map(|p| largest(p)).fold(0.0f32, f32::max);
        let noise: Vec<&str> = trainable
            .iter()
            .map(String::as_str)
            .filter(|p| largest(p) < 1e-5 * top)
            .collect();
        let expected_noise: &[&str] = if name == "cnn2d_bn" {
            &["conv.bias"]
        } else {
            &[]
        };
        assert_eq!(noise, expected_noise, "{name}: zero-gradient parameters");
        for (opt_name, entry) in optimizers {
            let job = job_of(
                &model,
                Loss::SoftmaxCrossEntropy,
                optimizer_of(entry),
                batch,
            );
            let plan = job.schedule.to_bytes();
            let mut rt = loaded(&job, &plan);
            let mut oracle = Oracle::with_initial_parameters(&job).unwrap();
            let target_name = job.target_name.clone();
            let losses = floats(&entry["losses"]);
            let (mut dl, mut dp) = (Diff::default(), Diff::default());
            for (k, step) in ort["steps"].as_array().unwrap().iter().enumerate() {
                let xs: Vec<(String, Vec<f32>)> = model
                    .data_inputs()
                    .iter()
                    .map(|i| (i.name.clone(), floats(&step["inputs"][&i.onnx_name])))
                    .collect();
                let target = floats(&step["labels"]);
                let plain: Vec<&[f32]> = xs.iter().map(|(_, v)| v.as_slice()).collect();
                let loss_o = oracle.step_inputs(&plain, &target).unwrap();
                let mut named: Vec<(&str, &[f32])> =
                    xs.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
                named.push((target_name.as_str(), &target));
                let loss_r = rt.train_step_named(&named).unwrap();
                assert_eq!(
                    loss_o.to_bits(),
                    loss_r.to_bits(),
                    "{name} {opt_name} step {k}: loss"
                );
                dl.add(&[loss_r], &[losses[k]], "loss");
                for (s, v) in job.state_specs.iter().zip(&oracle.state) {
                    assert_eq!(
                        bits(&v.data),
                        bits(&rt.parameter(&s.name).unwrap()),
                        "{name} {opt_name} step {k}: {}",
                        s.name
                    );
                }
            }
            for (pname, t) in oracle.named_parameters() {
                assert_eq!(
                    bits(&t.data),
                    bits(&rt.parameter(&pname).unwrap()),
                    "{name} {opt_name}: {pname}"
                );
                let adam = entry["kind"] == "adamw";
                if adam && noise.contains(&pname.as_str()) {
                    continue;
                }
                if let Some(expected) = entry["params_after"].get(&pname) {
                    dp.add(&t.data, &floats(expected), &pname);
                }
            }
            let cell = |d: &Diff| format!("{:.1e}/{:.1e}", d.abs, d.rel);
            println!(
                "{name:<9} {opt_name:<9} {:>17} {:>17}",
                cell(&dl),
                cell(&dp)
            );
            for (what, d) in [("losses", dl), ("parameters after 5 steps", dp)] {
                if !d.ok() {
                    failed.push(format!(
                        "{name} {opt_name}: {what} exceed 1e-5 + 1e-4·|ORT| by {:.2e}",
                        d.worst_excess
                    ));
                }
            }
            checked += 1;
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
    assert_eq!(checked, 5 * 4);
}
