//! Every parameter name can take every optimizer: models whose `state_dict` keys are long (a
//! layer stack nested three deep, an ONNX graph with long initializer names) plan with Adam and
//! SGD with momentum, train through the `no_std` runtime bit for bit against the oracle, classify
//! their training state by the one rule (`model::names::is_training_state`), and export and
//! import their model tensors (the file's full keys match their shortened plan names).
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::PathBuf;

use prost::Message;
use tapeplan_planner::exec::oracle::Oracle;
use tapeplan_planner::exec::RuntimeModel;
use tapeplan_planner::io::exchange::{
    export_plan_params, import_into_persistent, is_training_state,
};
use tapeplan_planner::model::names::{fits, optimizer_state_name, plan_name};
use tapeplan_planner::model::nn::{BatchNorm1d, Conv1d, Flatten, Linear, ReLU, Sequential};
use tapeplan_planner::model::onnx::proto::ModelProto;
use tapeplan_planner::model::onnx::OnnxModel;
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{Loss, TrainingJob};
use tapeplan_planner::protocol::SplitMix64;

const BATCH: usize = 4;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A layer stack whose keys are `features.10.block.0.weight` (26 bytes: shortened),
/// `features.10.block.0.bias` (24: fits, but its `.m` would not),
/// `features.10.block.1.running_mean` (a buffer, shortened), `classifier_head.weight` (22: its
/// `.m` fits exactly) and `classifier_head.bias`.
fn long_named_stack() -> Sequential {
    let block = Sequential::block()
        .push(Conv1d::new(1, 3, 3).padding(1))
        .push(BatchNorm1d::new(3))
        .push(ReLU);
    let stage = Sequential::block().push_named("block", block);
    let features = Sequential::block().push_named("10", stage);
    Sequential::new(&[1, 6])
        .push_named("features", features)
        .push(Flatten)
        .push_named("classifier_head", Linear::new(18, 3))
        .seed(4)
}

/// `cnn2d_bn.onnx` (conv, batch normalization with running statistics, linear) with its
/// initializers renamed: `features.10.block.<name>` (every one past 24 bytes) and the linear
/// layer's `classifier.head.1.weight` (24 bytes) and `classifier.head.1.bias` (22).
fn long_named_onnx() -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/onnx/cnn2d_bn.onnx");
    let mut m = ModelProto::decode(std::fs::read(p).unwrap().as_slice()).unwrap();
    let g = m.graph.as_mut().unwrap();
    let renames: Vec<(String, String)> = g
        .initializer
        .iter()
        .map(|i| {
            let old = i.name().to_owned();
            let new = match old.as_str() {
                "fc.weight" => "classifier.head.1.weight".to_owned(),
                "fc.bias" => "classifier.head.1.bias".to_owned(),
                _ => format!("features.10.block.{old}"),
            };
            (old, new)
        })
        .collect();
    for (old, new) in &renames {
        for i in &mut g.initializer {
            if i.name() == old {
                i.name = Some(new.clone());
            }
        }
        for n in &mut g.node {
            for i in &mut n.input {
                if i == old {
                    *i = new.clone();
                }
            }
        }
    }
    m.encode_to_vec()
}

/// Trains `job` 8 steps through the runtime and the oracle on the same random batches
/// (`x: [BATCH, x_elems]`, labels in `0..3`): every loss and every persistent tensor bitwise
/// equal. Then checks the training state is exactly the job's state by the one rule, and that
/// export → import of the model tensors is the identity on their bits and leaves state alone.
fn train_bitwise_and_round_trip(job: &TrainingJob, x_elems: usize) {
    let bytes = job.schedule.to_bytes();
    let mut rt = RuntimeModel::new(&bytes).unwrap();
    for p in &job.parameters {
        rt.load_parameter(&p.name, &p.init).unwrap();
    }
    let mut oracle = Oracle::with_initial_parameters(job).unwrap();
    let mut rng = SplitMix64::new(9);
    for step in 0..8 {
        let x: Vec<f32> = (0..BATCH * x_elems)
            .map(|_| 2.0 * rng.next_f32() - 1.0)
            .collect();
        let labels: Vec<f32> = (0..BATCH).map(|_| rng.below(3) as f32).collect();
        let a = rt.train_step(&x, &labels).unwrap();
        let b = oracle.step(&x, &labels).unwrap();
        assert!(a.is_finite());
        assert_eq!(a.to_bits(), b.to_bits(), "step {step}: loss");
        // Parameters and buffers, then the optimizer's and the generator's state.
        let names = job.parameters.iter().map(|p| &p.name);
        let names = names.chain(job.state_specs.iter().map(|s| &s.name));
        for (name, v) in names.zip(oracle.params.iter().chain(&oracle.state)) {
            let got = bits(&rt.parameter(name).unwrap());
            assert_eq!(got, bits(&v.data), "step {step}: {name}");
        }
    }
    // Every plan name fits; the training state is exactly the job's state.
    let plan = rt.plan();
    let all: Vec<&str> = plan.parameters().map(|b| b.name).collect();
    assert!(all.iter().all(|n| fits(n)), "{all:?}");
    let state: Vec<&str> = all
        .iter()
        .copied()
        .filter(|n| is_training_state(n, &all))
        .collect();
    let mut want: Vec<&str> = job.state_specs.iter().map(|s| s.name.as_str()).collect();
    let mut got = state.clone();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want);
    // Export writes the model tensors, under their plan names; import restores their bits and
    // leaves the training state as the base has it (zeros here).
    let file = export_plan_params(plan, rt.persistent()).unwrap();
    let st = safetensors::SafeTensors::deserialize(&file).unwrap();
    let mut keys: Vec<&str> = st.names();
    keys.sort_unstable();
    let mut model_names: Vec<&str> = job.parameters.iter().map(|p| p.name.as_str()).collect();
    model_names.sort_unstable();
    assert_eq!(keys, model_names);
    let zeros = vec![0.0f32; rt.persistent().len()];
    let back = import_into_persistent(plan, &zeros, &file).unwrap();
    for b in plan.parameters() {
        let want = if state.contains(&b.name) {
            vec![0u32; b.range().len()]
        } else {
            bits(&rt.persistent()[b.range()])
        };
        assert_eq!(bits(&back[b.range()]), want, "{}", b.name);
    }
}

#[test]
fn a_long_named_layer_stack_takes_adam_and_momentum() {
    let model = long_named_stack();
    let names = model.names().unwrap();
    let full: Vec<&str> = names.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        full,
        [
            "features.10.block.0.weight",
            "features.10.block.0.bias",
            "features.10.block.1.weight",
            "features.10.block.1.bias",
            "features.10.block.1.running_mean",
            "features.10.block.1.running_var",
            "features.10.block.1.num_batches_tracked",
            "classifier_head.weight",
            "classifier_head.bias",
        ]
    );
    for (f, p) in &names {
        assert_eq!(*p, plan_name(f));
    }
    // 26 bytes: `features.10.blo~` and the hash.
    assert!(names[0].1.starts_with("features.10.blo~") && names[0].1.len() == 24);
    assert_eq!(names[1].1, "features.10.block.0.bias");
    for optimizer in [
        Optimizer::adam(0.01),
        Optimizer::Momentum {
            lr: 0.05,
            momentum: 0.9,
            nesterov: true,
        },
    ] {
        let job = TrainingJob::for_model(&model)
            .loss(Loss::SoftmaxCrossEntropy)
            .optimizer(optimizer)
            .batch(BATCH)
            .build()
            .unwrap();
        let state: Vec<&str> = job.state_specs.iter().map(|s| s.name.as_str()).collect();
        let bias = "features.10.block.0.bias";
        let suffix = if optimizer == Optimizer::adam(0.01) {
            "m"
        } else {
            "b"
        };
        // The 24-byte bias takes a hashed state name; a 22-byte name keeps `<name>.m`.
        let hashed = optimizer_state_name(bias, suffix);
        assert!(hashed.starts_with("features.10.b~"), "{hashed}");
        assert!(state.contains(&hashed.as_str()), "{state:?}");
        assert!(
            state.contains(&format!("classifier_head.bias.{suffix}").as_str()),
            "{state:?}"
        );
        train_bitwise_and_round_trip(&job, 6);
    }
}

#[test]
fn an_onnx_model_with_long_initializer_names_trains_with_adam() {
    let m = OnnxModel::from_bytes(&long_named_onnx()).unwrap();
    let renamed: Vec<(String, String)> = m.names().into_iter().filter(|(a, b)| a != b).collect();
    // Every `features.10.block.*` key is past 24 bytes; the input is `x`.
    assert_eq!(
        renamed.len(),
        7,
        "{renamed:?}: conv weight and bias, bn weight, bias, running mean and var; input"
    );
    let job = TrainingJob::for_model(&m)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(Optimizer::adam(0.01))
        .batch(BATCH)
        .build()
        .unwrap();
    let state: Vec<&str> = job.state_specs.iter().map(|s| s.name.as_str()).collect();
    assert!(
        state.contains(&optimizer_state_name("classifier.head.1.weight", "v").as_str())
            && state.contains(&"classifier.head.1.bias.v"),
        "{state:?}"
    );
    train_bitwise_and_round_trip(&job, 64);

    // The initializers file `tapeplan plan --onnx` writes is keyed by the full ONNX names:
    // import matches each to its shortened plan name.
    let bytes = job.schedule.to_bytes();
    let rt = RuntimeModel::new(&bytes).unwrap();
    let plan = rt.plan();
    let zeros = vec![0.0f32; rt.persistent().len()];
    let loaded = import_into_persistent(plan, &zeros, &m.initial_safetensors().unwrap()).unwrap();
    for p in m.params() {
        let b = plan.parameters().find(|b| b.name == p.spec.name).unwrap();
        assert_eq!(
            bits(&loaded[b.range()]),
            bits(&p.spec.init),
            "{}",
            p.onnx_name
        );
    }
}
