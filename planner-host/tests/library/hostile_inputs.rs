//! Hostile and careless inputs to the surfaces that take a user's model, data and files: ONNX
//! bytes, layer stacks, trainable patterns. Never a panic, never an unbounded allocation or
//! loop; an error naming what is wrong.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use prost::Message;
use tapeplan_planner::model::onnx::proto::{
    tensor_shape_proto::dimension::Value as Dim, type_proto, ModelProto,
};
use tapeplan_planner::model::onnx::OnnxModel;
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{Loss, TrainingJob};

fn model_bytes(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/onnx")
        .join(format!("{name}.onnx"));
    std::fs::read(p).unwrap()
}

/// From bytes to a planned job at batch `batch`: `Ok(())` or the error's text; a panic fails.
fn plan_onnx(
    bytes: &[u8],
    batch: usize,
    trainable: &[&str],
    frozen: &[&str],
) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(|| {
        let m = OnnxModel::from_bytes(bytes).map_err(|e| e.to_string())?;
        TrainingJob::for_model(&m)
            .loss(Loss::SoftmaxCrossEntropy)
            .batch(batch)
            .trainable(trainable.iter().copied())
            .frozen(frozen.iter().copied())
            .build()
            .map(|_| ())
            .map_err(|e| e.to_string())
    }))
    .unwrap_or_else(|_| panic!("panicked"))
}

fn mutate(name: &str, f: impl FnOnce(&mut ModelProto)) -> Vec<u8> {
    let mut m = ModelProto::decode(model_bytes(name).as_slice()).unwrap();
    f(&mut m);
    m.encode_to_vec()
}

fn input_dims(
    m: &mut ModelProto,
) -> &mut Vec<tapeplan_planner::model::onnx::proto::tensor_shape_proto::Dimension> {
    let g = m.graph.as_mut().unwrap();
    let init: Vec<String> = g.initializer.iter().map(|i| i.name().to_owned()).collect();
    let input = g
        .input
        .iter_mut()
        .find(|i| !init.contains(&i.name().to_owned()))
        .unwrap();
    match input.r#type.as_mut().unwrap().value.as_mut().unwrap() {
        type_proto::Value::TensorType(t) => &mut t.shape.as_mut().unwrap().dim,
        _ => unreachable!(),
    }
}

fn rename_initializer(m: &mut ModelProto, index: usize, to: &str) {
    let g = m.graph.as_mut().unwrap();
    let old = g.initializer[index].name().to_owned();
    g.initializer[index].name = Some(to.into());
    for n in &mut g.node {
        for i in &mut n.input {
            if *i == old {
                *i = to.into();
            }
        }
    }
    for i in &mut g.input {
        if i.name() == old {
            i.name = Some(to.into());
        }
    }
}

#[test]
fn truncated_or_flipped_onnx_bytes_are_errors_never_panics() {
    for name in ["mlp", "cnn1d", "cnn2d_bn", "dwsep", "text"] {
        let b = model_bytes(name);
        assert_eq!(plan_onnx(&b, 2, &[], &[]), Ok(()), "{name}");
        // Every cut short of the whole file loses the graph's tail: a decode error or a graph
        // that no longer translates, never a plan and never a panic.
        for cut in (0..b.len()).step_by((b.len() / 64).max(1)) {
            assert!(
                plan_onnx(&b[..cut], 2, &[], &[]).is_err(),
                "{name} cut at {cut}"
            );
        }
        // Single bit flips: anything but a panic (`plan_onnx` fails the test on one).
        for k in 0..200usize {
            let mut c = b.clone();
            let i = (k * 7919) % c.len();
            c[i] ^= 1 << (k % 8);
            let _ = plan_onnx(&c, 2, &[], &[]);
        }
    }
}

#[test]
fn hostile_input_extents_are_errors_naming_the_input() {
    for (d, why) in [
        (0i64, "a zero extent (extents [0, 16]) is not supported (supported: ranks up to 4 (rank 5 for MaxPool and AveragePool), extents of at least 1"),
        (-3, "extent -3"),
        (1 << 40, "extents [1099511627776, 16] (element count exceeds 268435456) is not supported"),
    ] {
        let b = mutate("mlp", |m| {
            input_dims(m)[0].value = Some(Dim::DimValue(d));
        });
        let e = plan_onnx(&b, 2, &[], &[]).unwrap_err();
        assert!(e.contains("\"input\"") && e.contains(why), "{d}: {e}");
    }
    let e = plan_onnx(&model_bytes("mlp"), 0, &[], &[]).unwrap_err();
    assert!(e.contains("at least 1"), "{e}");
    let e = plan_onnx(&model_bytes("mlp"), 2, &[], &["*"]).unwrap_err();
    assert!(e.contains("no parameter is left trainable"), "{e}");
    let e = plan_onnx(&model_bytes("mlp"), 2, &["head.*"], &[]).unwrap_err();
    assert!(e.contains("\"head.*\" matches no parameter"), "{e}");
    let cycle = mutate("mlp", |m| {
        let g = m.graph.as_mut().unwrap();
        let last = g.node.last().unwrap().output[0].clone();
        g.node[0].input[0] = last;
    });
    let e = plan_onnx(&cycle, 2, &[], &[]).unwrap_err();
    assert!(
        e.contains("/fc1/Gemm") && e.contains("never defined"),
        "{e}"
    );
}

/// A model tensor named as the job names one of its own (the optimizer's `opt.step`, the
/// loss's `labels`) used to give a plan every runtime refuses ("name already used"): the job
/// now refuses it, naming the name.
#[test]
fn a_tensor_named_as_the_jobs_own_is_refused_naming_it() {
    for taken in ["opt.step", "labels"] {
        let b = mutate("mlp", |m| rename_initializer(m, 0, taken));
        let r = catch_unwind(AssertUnwindSafe(|| {
            let m = OnnxModel::from_bytes(&b).unwrap();
            TrainingJob::for_model(&m)
                .optimizer(Optimizer::adam(1e-3))
                .batch(2)
                .build()
                .map(|_| ())
                .map_err(|e| e.to_string())
        }))
        .unwrap();
        let e = r.unwrap_err();
        assert!(e.contains(&format!("{taken:?} is taken twice")), "{e}");
    }
}

/// Names over the plan format's 24 bytes are shortened; a name that another's shortening
/// gives is an error naming it, not two tensors under one name.
#[test]
fn long_onnx_names_that_collide_when_shortened_are_refused() {
    use tapeplan_planner::model::onnx::model::state_name;
    let long = "features.0.block.conv_depthwise.weight";
    let short = state_name(long);
    assert!(
        short.len() <= 24 && short.starts_with("features.0.bloc~"),
        "{short}"
    );
    let b = mutate("mlp", |m| {
        rename_initializer(m, 0, long);
        rename_initializer(m, 2, &short);
    });
    let e = plan_onnx(&b, 2, &[], &[]).unwrap_err();
    assert!(
        e.contains(&format!("two ONNX names take the plan name {short:?}")),
        "{e}"
    );
    // Alone, the long name plans under its shortened form, with Adam too: its state
    // `<name>.m` would be 26 bytes, so it takes the hashed state name that fits.
    let b = mutate("mlp", |m| rename_initializer(m, 0, long));
    assert_eq!(plan_onnx(&b, 2, &[], &[]), Ok(()));
    let m = OnnxModel::from_bytes(&b).unwrap();
    let job = TrainingJob::for_model(&m)
        .optimizer(Optimizer::adam(1e-3))
        .batch(2)
        .build()
        .unwrap();
    let m_name = tapeplan_planner::model::names::optimizer_state_name(&short, "m");
    assert!(
        m_name.len() <= 24 && m_name.starts_with("features.0.bl~") && m_name.ends_with(".m"),
        "{m_name}"
    );
    assert!(
        job.state_specs.iter().any(|s| s.name == m_name),
        "{:?}",
        job.state_specs
    );
}

/// Layer widths a careless or hostile caller gives: errors naming the layer or the tensor,
/// before any allocation (a 2^40-channel convolution used to abort on a failed allocation of
/// 13 TB).
#[test]
fn hostile_layer_widths_are_errors_before_any_allocation() {
    use tapeplan_planner::model::nn::{
        BatchNorm1d, Conv1d, Embedding, LayerNorm, Linear, MaxPool1d, Sequential,
    };
    use tapeplan_planner::model::Model;
    let build = |m: Sequential| -> String {
        catch_unwind(AssertUnwindSafe(|| {
            Model::parameters(&m)
                .map_err(|e| e.to_string())
                .and_then(|_| {
                    TrainingJob::for_model(&m)
                        .loss(Loss::MeanSquaredError)
                        .batch(2)
                        .build()
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                })
                .unwrap_err()
        }))
        .unwrap_or_else(|_| panic!("panicked"))
    };
    let huge = 1usize << 40;
    for (m, why) in [
        (
            Sequential::new(&[1, 8]).push(Conv1d::new(1, huge, 3)),
            "exceeds",
        ),
        (
            Sequential::new(&[4]).push(Linear::new(4, usize::MAX)),
            "exceeds",
        ),
        (
            Sequential::new(&[3]).push(Embedding::new(huge, huge)),
            "exceeds",
        ),
        (Sequential::new(&[4]).push(Linear::new(4, 0)), "empty"),
        (Sequential::new(&[0, 8]).push(Conv1d::new(0, 4, 3)), "empty"),
        (Sequential::new(&[1, 8]).push(Conv1d::new(1, 0, 3)), "empty"),
        (Sequential::new(&[0]).push(BatchNorm1d::new(0)), "empty"),
        (
            Sequential::new(&[4]).push(LayerNorm::new(&[5])),
            "layer 0 (LayerNorm)",
        ),
        (
            Sequential::new(&[1, 4]).push(Conv1d::new(1, 2, 9)),
            "does not fit",
        ),
        (
            Sequential::new(&[1, 8]).push(Conv1d::new(1, 2, 3).stride(0)),
            "stride 0",
        ),
        (
            Sequential::new(&[4]).push(Linear::new(5, 2)),
            "layer 0 (Linear)",
        ),
        (
            Sequential::new(&[1, 8]).push(MaxPool1d::new(9)),
            "does not fit",
        ),
        (
            Sequential::new(&[4])
                .push_named("fc", Linear::new(4, 4))
                .push_named("fc", Linear::new(4, 2)),
            "distinct names",
        ),
    ] {
        let e = build(m);
        assert!(e.contains(why), "{why}: {e}");
    }
    // A layer name past the plan format's 24 bytes is no longer an error: its keys take their
    // shortened plan names (`model::names::plan_name`), and the job plans, with Adam too.
    let long = Sequential::new(&[4]).push_named("a_layer_name_over_24_bytes", Linear::new(4, 2));
    let job = TrainingJob::for_model(&long)
        .loss(Loss::MeanSquaredError)
        .optimizer(Optimizer::adam(1e-3))
        .batch(2)
        .build()
        .unwrap();
    assert!(job
        .parameters
        .iter()
        .all(|p| p.name.len() <= 24 && p.name.contains('~')));
}
