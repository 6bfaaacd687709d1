//! The ONNX reader and the graph → tape translation, without Python: models built here with the
//! schema's generated types, serialized with `prost`, read back, translated, and run through the
//! oracle and the runtime (bit for bit), against values computed independently in `f64`.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;

use prost::Message;
use tapeplan_planner::exec::forward::run_forward;
use tapeplan_planner::model::onnx::proto::{
    attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto, type_proto,
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use tapeplan_planner::model::onnx::{
    read_model, translate, Elements, OnnxError, TensorData, TranslateOptions, OPERATORS,
};

fn value_info(name: &str, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(DataType::Float as i32),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| tensor_shape_proto::Dimension {
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A tensor's header: name, extents, element type; no elements yet.
fn header(name: &str, dims: &[i64], t: DataType) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(t as i32),
        ..Default::default()
    }
}

/// A FLOAT tensor in `float_data`.
fn floats(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        float_data: v.to_vec(),
        ..header(name, dims, DataType::Float)
    }
}

/// A FLOAT tensor in `raw_data` (little-endian), as `torch.onnx.export` writes weights.
fn raw_floats(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        raw_data: Some(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        ..header(name, dims, DataType::Float)
    }
}

/// An INT64 tensor in `int64_data`.
fn ints(name: &str, v: &[i64]) -> TensorProto {
    TensorProto {
        int64_data: v.to_vec(),
        ..header(name, &[v.len() as i64], DataType::Int64)
    }
}

fn attr(name: &str, t: AttributeType) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(t as i32),
        ..Default::default()
    }
}

fn attr_int(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        i: Some(i),
        ..attr(name, AttributeType::Int)
    }
}

fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        ints: v.to_vec(),
        ..attr(name, AttributeType::Ints)
    }
}

fn attr_string(name: &str, s: &str) -> AttributeProto {
    AttributeProto {
        s: Some(s.as_bytes().to_vec()),
        ..attr(name, AttributeType::String)
    }
}

fn attr_tensor(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto {
        t: Some(t),
        ..attr(name, AttributeType::Tensor)
    }
}

fn node(
    op: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(name.into()),
        input: inputs.iter().map(|s| (*s).into()).collect(),
        output: outputs.iter().map(|s| (*s).into()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

/// A `Constant` node holding `t` as output `out`.
fn constant(out: &str, t: TensorProto) -> NodeProto {
    node("Constant", "", &[], &[out], vec![attr_tensor("value", t)])
}

fn model(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    initializer: Vec<TensorProto>,
) -> Vec<u8> {
    ModelProto {
        ir_version: Some(9),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            node: nodes,
            name: Some("g".into()),
            initializer,
            input: inputs,
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Reads, translates and runs `bytes` with input `x`; checks that the oracle and the runtime
/// agree bit for bit and returns the first output.
fn run(bytes: &[u8], x: &[f32]) -> Vec<f32> {
    let m = read_model(bytes).unwrap();
    let t = translate(&m, &TranslateOptions::default()).unwrap();
    let inputs = BTreeMap::from([("x".to_owned(), x.to_vec())]);
    let out = run_forward(&t, &inputs).unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&out.oracle[0]),
        bits(&out.runtime[0]),
        "oracle vs runtime"
    );
    out.oracle[0].clone()
}

/// A two-layer MLP as `torch.onnx.export` writes one: `Gemm` with `transB=1` (weights `[out,
/// in]` in `raw_data`), `Relu`, then `MatMul` + `Add` (weights in `float_data`) and `Softmax`.
#[test]
fn an_mlp_reads_translates_and_runs_bitwise_against_f64() {
    let w1 = [0.5f32, -1.0, 0.25, 1.5, 0.75, -0.5]; // [2 out, 3 in]
    let b1 = [0.1f32, -0.2];
    let w2 = [1.0f32, -2.0, 0.5, 0.25, -1.0, 2.0]; // [2 in, 3 out]
    let b2 = [0.0f32, 0.5, -0.5];
    let bytes = model(
        vec![
            node(
                "Gemm",
                "fc1",
                &["x", "w1", "b1"],
                &["h"],
                vec![attr_int("transB", 1)],
            ),
            node("Relu", "act", &["h"], &["a"], vec![]),
            node("MatMul", "fc2", &["a", "w2"], &["z"], vec![]),
            node("Add", "bias2", &["z", "b2"], &["logits"], vec![]),
            node(
                "Softmax",
                "sm",
                &["logits"],
                &["p"],
                vec![attr_int("axis", -1)],
            ),
        ],
        vec![value_info("x", &[2, 3])],
        vec![value_info("p", &[2, 3])],
        vec![
            raw_floats("w1", &[2, 3], &w1),
            raw_floats("b1", &[2], &b1),
            floats("w2", &[2, 3], &w2),
            floats("b2", &[3], &b2),
        ],
    );
    let x = [1.0f32, 2.0, 3.0, -1.0, 0.5, 2.0];
    let got = run(&bytes, &x);
    // f64 reference from the definitions.
    for r in 0..2 {
        let h: Vec<f64> = (0..2)
            .map(|o| {
                let s: f64 = (0..3)
                    .map(|i| f64::from(x[r * 3 + i]) * f64::from(w1[o * 3 + i]))
                    .sum();
                (s + f64::from(b1[o])).max(0.0)
            })
            .collect();
        let z: Vec<f64> = (0..3)
            .map(|j| {
                (0..2).map(|i| h[i] * f64::from(w2[i * 3 + j])).sum::<f64>() + f64::from(b2[j])
            })
            .collect();
        let m = z.iter().cloned().fold(f64::MIN, f64::max);
        let e: Vec<f64> = z.iter().map(|v| (v - m).exp()).collect();
        let s: f64 = e.iter().sum();
        for j in 0..3 {
            let want = e[j] / s;
            let g = f64::from(got[r * 3 + j]);
            assert!(
                (g - want).abs() <= 1e-6 * want.abs() + 1e-7,
                "row {r} col {j}: {g} vs {want}"
            );
        }
    }
    // The translation's bookkeeping: one input, four trainable parameters, one output.
    let t = translate(&read_model(&bytes).unwrap(), &TranslateOptions::default()).unwrap();
    assert_eq!(t.inputs.len(), 1);
    assert_eq!(t.parameters.len(), 4);
    assert!(t.parameters.iter().all(|p| p.trainable));
    assert_eq!(t.parameters[0].value, w1);
    assert_eq!(t.parameters[0].onnx_name, "w1");
    assert_eq!(t.outputs[0].onnx_name, "p");
}

/// `Reshape` by a `Constant` shape with `0` (copy) and `-1` (inferred), then a rank-3
/// `Transpose` that rotates blocks, `(2, 0, 1)`, checked element by element.
#[test]
fn reshape_by_a_constant_and_a_block_transpose_move_every_element_right() {
    let bytes = model(
        vec![
            constant("shape", ints("", &[0, 3, -1])),
            node("Reshape", "r", &["x", "shape"], &["y"], vec![]),
            node(
                "Transpose",
                "t",
                &["y"],
                &["z"],
                vec![attr_ints("perm", &[2, 0, 1])],
            ),
        ],
        vec![value_info("x", &[2, 12])],
        vec![value_info("z", &[4, 2, 3])],
        vec![],
    );
    let x: Vec<f32> = (0..24).map(|v| v as f32).collect();
    let z = run(&bytes, &x);
    // y[a, b, c] = x[a * 12 + b * 4 + c] (shape [2, 3, 4]); z[c, a, b] = y[a, b, c].
    for a in 0..2 {
        for b in 0..3 {
            for c in 0..4 {
                assert_eq!(z[c * 6 + a * 3 + b], x[a * 12 + b * 4 + c]);
            }
        }
    }
}

/// `Pad` with a non-zero constant keeps every bit of `x` (`-0.0` and NaN included) and writes
/// the value around it; a negative pad cuts.
#[test]
fn pad_with_a_value_is_exact_and_negative_pads_cut() {
    let bytes = model(
        vec![
            constant("pads", ints("", &[1, 0, 0, -1])),
            constant("v", floats("", &[], &[2.5])),
            node(
                "Pad",
                "p",
                &["x", "pads", "v"],
                &["y"],
                vec![attr_string("mode", "constant")],
            ),
        ],
        vec![value_info("x", &[2, 3])],
        vec![value_info("y", &[3, 2])],
        vec![],
    );
    let x = [-0.0f32, f32::NAN, 1.0, 3.0, -4.0, 5.0];
    let y = run(&bytes, &x);
    let want = [2.5f32, 2.5, -0.0, f32::NAN, 3.0, -4.0];
    assert_eq!(y.len(), 6);
    for (g, w) in y.iter().zip(&want) {
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "{y:?}"
        );
    }
}

/// Reductions with `keepdims=0` and axes as an input, and a comparison's BOOL mask as `0`/`1`
/// feeding `Where`.
#[test]
fn reduce_mean_and_where_over_a_mask() {
    let bytes = model(
        vec![
            constant("axes", ints("", &[1])),
            node(
                "ReduceSum",
                "s",
                &["x", "axes"],
                &["s"],
                vec![attr_int("keepdims", 0)],
            ),
            constant("zero", floats("", &[], &[0.0])),
            node("Greater", "g", &["s", "zero"], &["pos"], vec![]),
            node("Neg", "n", &["s"], &["neg"], vec![]),
            node("Where", "w", &["pos", "s", "neg"], &["abs"], vec![]),
        ],
        vec![value_info("x", &[2, 3])],
        vec![value_info("abs", &[2])],
        vec![],
    );
    let y = run(&bytes, &[1.0, 2.0, 3.0, -1.0, -2.0, 0.5]);
    assert_eq!(y, [6.0, 2.5]);
}

#[test]
fn an_unsupported_operator_names_the_node_the_operator_and_what_is_supported() {
    let bytes = model(
        vec![node(
            "ConvTranspose",
            "features.0",
            &["x", "w"],
            &["y"],
            vec![],
        )],
        vec![value_info("x", &[1, 1, 4, 4])],
        vec![value_info("y", &[1, 1, 5, 5])],
        vec![floats("w", &[1, 1, 2, 2], &[1.0; 4])],
    );
    let err = translate(&read_model(&bytes).unwrap(), &TranslateOptions::default()).unwrap_err();
    assert!(err.is_unsupported());
    let msg = err.to_string();
    for part in ["features.0", "ConvTranspose", "supported", "Gemm", "MatMul"] {
        assert!(msg.contains(part), "{msg}");
    }
}

#[test]
fn an_unsupported_attribute_or_mode_is_named() {
    let bytes = model(
        vec![node(
            "Pad",
            "p",
            &["x", "pads"],
            &["y"],
            vec![attr_string("mode", "reflect")],
        )],
        vec![value_info("x", &[2, 3])],
        vec![value_info("y", &[2, 5])],
        vec![ints("pads", &[0, 1, 0, 1])],
    );
    let msg = translate(&read_model(&bytes).unwrap(), &TranslateOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("\"p\"") && msg.contains("reflect") && msg.contains("constant"),
        "{msg}"
    );
    let bytes = model(
        vec![node(
            "Relu",
            "r",
            &["x"],
            &["y"],
            vec![attr_int("alpha", 1)],
        )],
        vec![value_info("x", &[2])],
        vec![value_info("y", &[2])],
        vec![],
    );
    let msg = translate(&read_model(&bytes).unwrap(), &TranslateOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("attribute \"alpha\"") && msg.contains("no attributes"),
        "{msg}"
    );
}

#[test]
fn an_integer_input_is_an_unsupported_data_type() {
    let mut bytes = model(
        vec![node("Add", "a", &["x", "x"], &["y"], vec![])],
        vec![value_info("x", &[2])],
        vec![value_info("y", &[2])],
        vec![],
    );
    let mut m = ModelProto::decode(bytes.as_slice()).unwrap();
    if let Some(type_proto::Value::TensorType(t)) = m.graph.as_mut().unwrap().input[0]
        .r#type
        .as_mut()
        .unwrap()
        .value
        .as_mut()
    {
        t.elem_type = Some(DataType::Int32 as i32);
    }
    bytes = m.encode_to_vec();
    let err = translate(&read_model(&bytes).unwrap(), &TranslateOptions::default()).unwrap_err();
    assert!(
        err.is_unsupported() && err.to_string().contains("INT32"),
        "{err}"
    );
}

/// Every field a tensor's elements may sit in.
#[test]
fn tensors_read_from_every_field() {
    let t = TensorData::from_proto(&raw_floats("a", &[2], &[1.5, -0.0])).unwrap();
    assert_eq!(t.dims, [2]);
    assert!(
        matches!(&t.elements, Elements::F32(v) if v[0] == 1.5 && v[1].to_bits() == (-0.0f32).to_bits())
    );
    let t = TensorData::from_proto(&ints("b", &[3, -1])).unwrap();
    assert_eq!(t.to_i64().unwrap(), [3, -1]);
    let raw_i64 = TensorProto {
        raw_data: Some([7i64, -2].iter().flat_map(|v| v.to_le_bytes()).collect()),
        ..header("r", &[2], DataType::Int64)
    };
    assert_eq!(
        TensorData::from_proto(&raw_i64).unwrap().to_i64().unwrap(),
        [7, -2]
    );
    let bools = TensorProto {
        int32_data: vec![1, 0, 1],
        ..header("m", &[3], DataType::Bool)
    };
    assert_eq!(
        TensorData::from_proto(&bools).unwrap().to_f32().unwrap(),
        [1.0, 0.0, 1.0]
    );
    // Too few raw bytes, too few elements, a negative extent: errors, not panics.
    let mut short = raw_floats("c", &[3], &[1.0, 2.0]);
    assert!(matches!(
        TensorData::from_proto(&short),
        Err(OnnxError::Tensor { .. })
    ));
    short.raw_data = None;
    short.float_data = vec![1.0];
    assert!(matches!(
        TensorData::from_proto(&short),
        Err(OnnxError::Tensor { .. })
    ));
    short.dims = vec![-1];
    assert!(matches!(
        TensorData::from_proto(&short),
        Err(OnnxError::Tensor { .. })
    ));
    let strings = TensorProto {
        string_data: vec![b"a".to_vec()],
        ..header("s", &[1], DataType::String)
    };
    assert!(TensorData::from_proto(&strings)
        .unwrap_err()
        .is_unsupported());
}

/// Bad bytes are an error, never a panic: every truncation of a valid model, and its bytes
/// flipped one at a time, read (or fail) and translate (or fail) without panicking.
#[test]
fn bad_bytes_are_errors_never_panics() {
    let bytes = model(
        vec![
            node(
                "Gemm",
                "fc",
                &["x", "w"],
                &["h"],
                vec![attr_int("transB", 1)],
            ),
            node("Softmax", "sm", &["h"], &["p"], vec![]),
        ],
        vec![value_info("x", &[1, 2])],
        vec![value_info("p", &[1, 2])],
        vec![raw_floats("w", &[2, 2], &[1.0, 2.0, 3.0, 4.0])],
    );
    assert!(matches!(
        read_model(b"\xff\xff\xff"),
        Err(OnnxError::Decode(_))
    ));
    for n in 0..bytes.len() {
        if let Ok(m) = read_model(&bytes[..n]) {
            let _ = translate(&m, &TranslateOptions::default());
        }
    }
    for i in 0..bytes.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= flip;
            if let Ok(m) = read_model(&b) {
                let _ = translate(&m, &TranslateOptions::default());
            }
        }
    }
}

/// `docs/onnx.md` lists every row of the operator table.
#[test]
fn the_document_lists_every_operator() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/onnx.md")).unwrap();
    for op in OPERATORS {
        assert!(
            doc.contains(&format!("| {} |", op.name)),
            "docs/onnx.md lacks a row for {}",
            op.name
        );
    }
}

/// The way `torch.onnx.export` writes a flatten before a linear layer: a named batch dimension,
/// `Shape` → `Gather` → `Unsqueeze` → `Concat` → `Reshape` (shape arithmetic folded at plan
/// time), `Identity`, and `Gemm` with `transB=1`; the batch is chosen at translation.
#[test]
fn a_torch_style_flatten_folds_its_shape_arithmetic() {
    let mut x_info = value_info("x", &[0, 2, 3]);
    if let Some(type_proto::Value::TensorType(t)) = x_info.r#type.as_mut().unwrap().value.as_mut() {
        t.shape.as_mut().unwrap().dim[0].value = Some(
            tensor_shape_proto::dimension::Value::DimParam("batch".into()),
        );
    }
    let idx0 = TensorProto {
        int64_data: vec![0],
        ..header("", &[], DataType::Int64)
    };
    let w: Vec<f32> = (0..12).map(|v| v as f32 * 0.25 - 1.0).collect(); // [2 out, 6 in]
    let bytes = model(
        vec![
            node("Shape", "", &["x"], &["s"], vec![]),
            constant("i0", idx0),
            node(
                "Gather",
                "",
                &["s", "i0"],
                &["n"],
                vec![attr_int("axis", 0)],
            ),
            constant("ax", ints("", &[0])),
            node("Unsqueeze", "", &["n", "ax"], &["n1"], vec![]),
            constant("m1", ints("", &[-1])),
            node(
                "Concat",
                "",
                &["n1", "m1"],
                &["shape"],
                vec![attr_int("axis", 0)],
            ),
            node("Reshape", "", &["x", "shape"], &["flat"], vec![]),
            node("Identity", "", &["w"], &["w_id"], vec![]),
            node(
                "Gemm",
                "fc",
                &["flat", "w_id"],
                &["y"],
                vec![attr_int("transB", 1)],
            ),
        ],
        vec![x_info],
        vec![value_info("y", &[0, 2])],
        vec![raw_floats("w", &[2, 6], &w)],
    );
    let m = read_model(&bytes).unwrap();
    // Without the batch's extent: an error that says so.
    let err = translate(&m, &TranslateOptions::default()).unwrap_err();
    assert!(err.to_string().contains("\"batch\""), "{err}");
    let options = TranslateOptions {
        dim_params: BTreeMap::from([("batch".to_owned(), 3)]),
        ..Default::default()
    };
    let t = translate(&m, &options).unwrap();
    // The weight behind `Identity` is the initializer, under its own name.
    assert_eq!(t.parameters.len(), 1);
    assert_eq!(t.parameters[0].onnx_name, "w");
    // The shape arithmetic left nothing on the tape but the reshape: input, parameter,
    // reshape, transpose, matmul.
    assert_eq!(
        t.tape.len(),
        5,
        "{:?}",
        t.tape.nodes().iter().map(|n| n.op).collect::<Vec<_>>()
    );
    let x: Vec<f32> = (0..18).map(|v| v as f32 * 0.5).collect();
    let out = run_forward(&t, &BTreeMap::from([("x".to_owned(), x.clone())])).unwrap();
    assert_eq!(out.oracle[0], out.runtime[0]);
    for r in 0..3 {
        for o in 0..2 {
            // Small integers and quarters: exact in f32 whatever the order.
            let want: f32 = (0..6).map(|i| x[r * 6 + i] * w[o * 6 + i]).sum();
            assert_eq!(out.oracle[0][r * 2 + o], want);
        }
    }
}

/// Every permutation of a rank-3 tensor (the block swaps and the sliced ones) moves every
/// element where the definition says.
#[test]
fn every_rank_3_permutation_is_exact() {
    let dims = [2usize, 3, 4];
    let x: Vec<f32> = (0..24).map(|v| v as f32 - 7.5).collect();
    for perm in [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ] {
        let out: Vec<i64> = perm.iter().map(|&a| dims[a] as i64).collect();
        let bytes = model(
            vec![node(
                "Transpose",
                "t",
                &["x"],
                &["y"],
                vec![attr_ints("perm", &perm.map(|a| a as i64))],
            )],
            vec![value_info("x", &[2, 3, 4])],
            vec![value_info("y", &out)],
            vec![],
        );
        let y = run(&bytes, &x);
        let od = perm.map(|a| dims[a]);
        for i in 0..od[0] {
            for j in 0..od[1] {
                for k in 0..od[2] {
                    let mut src = [0usize; 3];
                    src[perm[0]] = i;
                    src[perm[1]] = j;
                    src[perm[2]] = k;
                    let want = x[src[0] * 12 + src[1] * 4 + src[2]];
                    assert_eq!(y[(i * od[1] + j) * od[2] + k], want, "perm {perm:?}");
                }
            }
        }
    }
}

/// Hostile numbers in attributes and constant inputs (extents, pads, axes, indices at the ends
/// of `i64`) are errors, never panics or overflows.
#[test]
fn hostile_numbers_are_errors_never_panics() {
    let cases: Vec<(NodeProto, Vec<TensorProto>)> = vec![
        (
            node("Reshape", "r", &["x", "s"], &["y"], vec![]),
            vec![ints("s", &[i64::MAX, i64::MAX, -1])],
        ),
        (
            node("Reshape", "r", &["x", "s"], &["y"], vec![]),
            vec![ints("s", &[-7, 2])],
        ),
        (
            node("Pad", "p", &["x", "s"], &["y"], vec![]),
            vec![ints("s", &[i64::MIN, i64::MAX, i64::MAX, 0])],
        ),
        (
            node("Pad", "p", &["x", "s"], &["y"], vec![]),
            vec![ints("s", &[i64::MAX, 0, i64::MAX, 0])],
        ),
        (
            node("Slice", "s", &["x", "a", "b"], &["y"], vec![]),
            vec![
                ints("a", &[i64::MIN, i64::MIN]),
                ints("b", &[i64::MAX, i64::MIN]),
            ],
        ),
        (
            node("Unsqueeze", "u", &["x", "s"], &["y"], vec![]),
            vec![ints("s", &[i64::MIN])],
        ),
        (
            node(
                "Transpose",
                "t",
                &["x"],
                &["y"],
                vec![attr_ints("perm", &[0, 0])],
            ),
            vec![],
        ),
        (
            node(
                "Softmax",
                "s",
                &["x"],
                &["y"],
                vec![attr_int("axis", i64::MIN)],
            ),
            vec![],
        ),
        (
            node("Gather", "g", &["s", "i"], &["y"], vec![]),
            vec![ints("s", &[3, 4]), ints("i", &[i64::MIN])],
        ),
    ];
    for (n, init) in cases {
        let op = n.op_type().to_owned();
        let bytes = model(
            vec![n],
            vec![value_info("x", &[2, 3])],
            vec![value_info("y", &[2, 3])],
            init,
        );
        let m = read_model(&bytes).unwrap();
        let r = translate(&m, &TranslateOptions::default());
        assert!(r.is_err(), "{op}: hostile numbers were accepted");
    }
    // `Shape`'s start and end clamp (ONNX's definition): an empty shape, folded at plan time.
    let bytes = model(
        vec![node(
            "Shape",
            "s",
            &["x"],
            &["y"],
            vec![attr_int("start", i64::MIN), attr_int("end", i64::MIN)],
        )],
        vec![value_info("x", &[2, 3])],
        vec![value_info("y", &[0])],
        vec![],
    );
    let t = translate(&read_model(&bytes).unwrap(), &TranslateOptions::default()).unwrap();
    assert!(t.outputs.is_empty());
    assert_eq!(t.folded_outputs[0].2.dims, [0]);
}

/// `Conv` with `auto_pad="SAME_UPPER"` and stride 2 over `x = 0..25` (`[1, 1, 5, 5]`), a 2×2
/// kernel and a bias: `ceil(5 / 2) = 3` outputs per axis need `(3 − 1)·2 + 2 − 5 = 1` pad, at the
/// end (`SAME_UPPER`), so `y[i, j] = b + Σ w[p, q] · x[2i + p, 2j + q]` with `x` zero past index
/// 4; computed here in f64 (every value is an exact small integer sum).
#[test]
fn conv_with_same_upper_padding_is_the_explicit_end_padding() {
    let w = [1.0f32, 2.0, 3.0, 4.0];
    let bytes = model(
        vec![node(
            "Conv",
            "c",
            &["x", "w", "b"],
            &["y"],
            vec![
                attr_string("auto_pad", "SAME_UPPER"),
                attr_ints("strides", &[2, 2]),
                attr_ints("kernel_shape", &[2, 2]),
            ],
        )],
        vec![value_info("x", &[1, 1, 5, 5])],
        vec![value_info("y", &[1, 1, 3, 3])],
        vec![floats("w", &[1, 1, 2, 2], &w), floats("b", &[1], &[0.5])],
    );
    let x: Vec<f32> = (0..25).map(|v| v as f32).collect();
    let y = run(&bytes, &x);
    let at = |r: usize, c: usize| {
        if r < 5 && c < 5 {
            f64::from(x[r * 5 + c])
        } else {
            0.0
        }
    };
    let mut want = Vec::new();
    for i in 0..3 {
        for j in 0..3 {
            let mut acc = 0.5f64;
            for p in 0..2 {
                for q in 0..2 {
                    acc += f64::from(w[p * 2 + q]) * at(2 * i + p, 2 * j + q);
                }
            }
            want.push(acc as f32);
        }
    }
    assert_eq!(y, want);
    assert_eq!(y[8], 0.5 + 24.0); // the corner window holds one real element
}

/// Reads, translates and runs `bytes` with the given inputs; checks that the oracle and the
/// runtime agree bit for bit on every output and returns the outputs.
fn run_all(bytes: &[u8], inputs: &[(&str, Vec<f32>)]) -> Vec<Vec<f32>> {
    let m = read_model(bytes).unwrap();
    let t = translate(&m, &TranslateOptions::default()).unwrap();
    let inputs: BTreeMap<String, Vec<f32>> = inputs
        .iter()
        .map(|(n, v)| ((*n).to_owned(), v.clone()))
        .collect();
    let out = run_forward(&t, &inputs).unwrap();
    let bits = |v: &Vec<Vec<f32>>| -> Vec<Vec<u32>> {
        v.iter()
            .map(|o| o.iter().map(|x| x.to_bits()).collect())
            .collect()
    };
    assert_eq!(bits(&out.oracle), bits(&out.runtime), "oracle vs runtime");
    out.oracle
}

/// An INT64 graph input or output.
fn int_info(name: &str, dims: &[i64]) -> ValueInfoProto {
    let mut v = value_info(name, dims);
    if let Some(type_proto::Value::TensorType(t)) = v.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.elem_type = Some(DataType::Int64 as i32);
    }
    v
}

/// `BatchNormalization` with `training_mode=1`: Y from the batch statistics and ONNX's running
/// statistics (`momentum` the weight of the old value, the biased variance), against f64.
#[test]
fn batch_normalization_in_training_mode_follows_onnx_running_statistics() {
    let x = [1.0f32, -2.0, 3.0, 0.5, 4.0, 1.0, -1.0, 2.5]; // [N=2, C=2, L=2]
    let (scale, bias) = ([2.0f32, 0.5], [0.25f32, -1.0]);
    let (mean0, var0) = ([0.5f32, -0.5], [1.5f32, 2.0]);
    let (eps, momentum) = (1e-3f32, 0.8f32);
    let bytes = model(
        vec![node(
            "BatchNormalization",
            "bn",
            &["x", "scale", "bias", "mean", "var"],
            &["y", "running_mean", "running_var"],
            vec![
                attr_int("training_mode", 1),
                AttributeProto {
                    f: Some(eps),
                    ..attr("epsilon", AttributeType::Float)
                },
                AttributeProto {
                    f: Some(momentum),
                    ..attr("momentum", AttributeType::Float)
                },
            ],
        )],
        vec![value_info("x", &[2, 2, 2])],
        vec![
            value_info("y", &[2, 2, 2]),
            value_info("running_mean", &[2]),
            value_info("running_var", &[2]),
        ],
        vec![
            floats("scale", &[2], &scale),
            floats("bias", &[2], &bias),
            floats("mean", &[2], &mean0),
            floats("var", &[2], &var0),
        ],
    );
    let out = run_all(&bytes, &[("x", x.to_vec())]);
    let at = |n: usize, c: usize, l: usize| f64::from(x[(n * 2 + c) * 2 + l]);
    for c in 0..2 {
        let vals: Vec<f64> = (0..2)
            .flat_map(|n| (0..2).map(move |l| (n, l)))
            .map(|(n, l)| at(n, c, l))
            .collect();
        let mu = vals.iter().sum::<f64>() / 4.0;
        let var = vals.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / 4.0;
        for n in 0..2 {
            for l in 0..2 {
                let want = (at(n, c, l) - mu) / (var + f64::from(eps)).sqrt() * f64::from(scale[c])
                    + f64::from(bias[c]);
                let got = f64::from(out[0][(n * 2 + c) * 2 + l]);
                assert!((got - want).abs() < 1e-6, "y[{n},{c},{l}] {got} vs {want}");
            }
        }
        let m = f64::from(momentum);
        let rm = f64::from(mean0[c]) * m + mu * (1.0 - m);
        let rv = f64::from(var0[c]) * m + var * (1.0 - m);
        assert!((f64::from(out[1][c]) - rm).abs() < 1e-6, "running mean {c}");
        assert!((f64::from(out[2][c]) - rv).abs() < 1e-6, "running var {c}");
    }
}

/// `MaxPool` with `ceil_mode` (a last window over the end, padding as −inf) and its Indices
/// output (row-major flat indices of each window's first maximum, as INT64), by hand.
#[test]
fn max_pool_with_ceil_mode_and_indices() {
    // x: [1, 1, 3, 3] = 0..9 with a tie; kernel 2, stride 2, ceil_mode: 2×2 windows, the last
    // row and column of windows hold one real row/column.
    let x = [1.0f32, 5.0, 2.0, 5.0, 0.0, 7.0, 3.0, 8.0, 4.0];
    let bytes = model(
        vec![node(
            "MaxPool",
            "p",
            &["x"],
            &["y", "i"],
            vec![
                attr_ints("kernel_shape", &[2, 2]),
                attr_ints("strides", &[2, 2]),
                attr_int("ceil_mode", 1),
            ],
        )],
        vec![value_info("x", &[1, 1, 3, 3])],
        vec![value_info("y", &[1, 1, 2, 2]), int_info("i", &[1, 1, 2, 2])],
        vec![],
    );
    let out = run_all(&bytes, &[("x", x.to_vec())]);
    // Windows {0,1,3,4} → 5 at 1 (the first of the tie 1, 3), {2,5} → 7 at 5, {6,7} → 8 at 7,
    // {8} → 4 at 8.
    assert_eq!(out[0], [5.0, 7.0, 8.0, 4.0]);
    assert_eq!(out[1], [1.0, 5.0, 7.0, 8.0]);
}

/// `ArgMax` with ties: the lowest index, and with `select_last_index=1` the highest, INT64.
#[test]
fn arg_max_ties_both_ways() {
    let x = [3.0f32, 0.0, 3.0, 3.0, -1.0, 2.0, -1.0, 2.0]; // [2, 4]
    let graph = |last: i64| {
        model(
            vec![node(
                "ArgMax",
                "a",
                &["x"],
                &["i"],
                vec![
                    attr_int("axis", 1),
                    attr_int("keepdims", 0),
                    attr_int("select_last_index", last),
                ],
            )],
            vec![value_info("x", &[2, 4])],
            vec![int_info("i", &[2])],
            vec![],
        )
    };
    assert_eq!(run_all(&graph(0), &[("x", x.to_vec())])[0], [0.0, 1.0]);
    assert_eq!(run_all(&graph(1), &[("x", x.to_vec())])[0], [3.0, 3.0]);
}

/// `Gather` of FLOAT data along axis 1 with run-time INT64 indices, negative ones from the end.
#[test]
fn gather_of_float_data_with_runtime_indices() {
    let data: Vec<f32> = (0..6).map(|v| v as f32 * 1.5).collect(); // [2, 3]
    let bytes = model(
        vec![node(
            "Gather",
            "g",
            &["x", "idx"],
            &["y"],
            vec![attr_int("axis", 1)],
        )],
        vec![value_info("x", &[2, 3]), int_info("idx", &[3])],
        vec![value_info("y", &[2, 3])],
        vec![],
    );
    let out = run_all(
        &bytes,
        &[("x", data.clone()), ("idx", vec![2.0, -3.0, -1.0])],
    );
    assert_eq!(out[0], [3.0, 0.0, 3.0, 7.5, 4.5, 7.5]);
}

/// A batched `MatMul` whose batch axes broadcast (`[2, 1, 2, 3] x [3, 3, 2]` → `[2, 3, 2, 2]`)
/// against f64 (small integers: exact).
#[test]
fn batched_matmul_broadcasts_batch_axes() {
    let a: Vec<f32> = (0..12).map(|v| (v % 5) as f32 - 2.0).collect();
    let b: Vec<f32> = (0..18).map(|v| (v % 7) as f32 - 3.0).collect();
    let bytes = model(
        vec![node("MatMul", "mm", &["x", "b"], &["y"], vec![])],
        vec![value_info("x", &[2, 1, 2, 3])],
        vec![value_info("y", &[2, 3, 2, 2])],
        vec![floats("b", &[3, 3, 2], &b)],
    );
    let y = run(&bytes, &a);
    let mut want = Vec::new();
    for i in 0..2 {
        for j in 0..3 {
            for r in 0..2 {
                for c in 0..2 {
                    let s: f64 = (0..3)
                        .map(|k| {
                            f64::from(a[(i * 2 + r) * 3 + k]) * f64::from(b[(j * 3 + k) * 2 + c])
                        })
                        .sum();
                    want.push(s as f32);
                }
            }
        }
    }
    assert_eq!(y, want);
}

/// `OnnxModel`: a name past the plan format's 24 bytes is shortened (prefix, `~`, hash) with the
/// mapping kept; a non-uniform `Constant` used as data is a buffer; a uniform one is a `fill`;
/// the model records at another batch over given leaves; a fixed batch refuses another.
#[test]
fn an_onnx_model_names_its_tensors_and_keeps_constants_out_of_training() {
    use tapeplan_planner::model::onnx::model::state_name;
    use tapeplan_planner::model::onnx::OnnxModel;
    use tapeplan_planner::model::{ForwardCx, Mode, Model, ParamKind};

    assert_eq!(state_name("fc.weight"), "fc.weight");
    let long = "layer1.0.downsample.1.running_mean";
    let short = state_name(long);
    assert!(
        short.len() <= 24 && short.starts_with("layer1.0.downsa~"),
        "{short}"
    );
    assert_ne!(short, state_name("layer1.0.downsample.1.running_var"));
    // A multi-byte character is not cut.
    assert!(state_name("ééééééééééééééééééééé.w").starts_with("ééééééé~"));

    let mut x_info = value_info("x", &[0, 3]);
    if let Some(type_proto::Value::TensorType(t)) = x_info.r#type.as_mut().unwrap().value.as_mut() {
        t.shape.as_mut().unwrap().dim[0].value =
            Some(tensor_shape_proto::dimension::Value::DimParam("N".into()));
    }
    let weight = "encoder.layers.0.self_attention.weight"; // 38 bytes
    let bytes = model(
        vec![
            constant("scale", floats("", &[3], &[1.0, 2.0, 3.0])),
            constant("half", floats("", &[3], &[0.5; 3])),
            node("Mul", "", &["x", "scale"], &["xs"], vec![]),
            node("Add", "", &["xs", "half"], &["xh"], vec![]),
            node(
                "Gemm",
                "fc",
                &["xh", weight],
                &["y"],
                vec![attr_int("transB", 1)],
            ),
        ],
        vec![x_info],
        vec![value_info("y", &[0, 2])],
        vec![floats(weight, &[2, 3], &[1.0, 0.0, -1.0, 0.5, 0.25, 2.0])],
    );
    let m = OnnxModel::from_bytes(&bytes).unwrap();
    let specs = m.parameters().unwrap();
    let kinds: Vec<(&str, ParamKind)> = specs.iter().map(|s| (s.name.as_str(), s.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("scale", ParamKind::Buffer),
            (state_name(weight).as_str(), ParamKind::Parameter)
        ]
    );
    assert!(m.names().contains(&(weight.to_owned(), state_name(weight))));
    // Recorded at batch 2 over given leaves: y = (x·scale + 0.5)·Wᵀ, checked by hand.
    let mut tape = tapeplan_core::Tape::new();
    let x = tape.input("x", m.inputs(2).unwrap()[0].shape);
    let leaves: Vec<_> = specs
        .iter()
        .map(|s| tape.parameter(&s.name, s.shape))
        .collect();
    let fwd = m
        .record(
            &mut tape,
            &ForwardCx {
                batch: 2,
                mode: Mode::Train,
                inputs: &[x],
                params: &leaves,
                rng: None,
            },
        )
        .unwrap();
    assert!(fwd.buffer_updates.is_empty());
    let mut run = tapeplan_core::Run::new(&tape);
    let xv = [1.0f32, 1.0, 1.0, -1.0, 0.0, 2.0];
    run.set(
        x,
        tapeplan_core::Tensor::new(tapeplan_core::Shape::matrix(2, 3), xv.to_vec()).unwrap(),
    )
    .unwrap();
    for (s, l) in specs.iter().zip(&leaves) {
        run.set(
            *l,
            tapeplan_core::Tensor::new(s.shape, s.init.clone()).unwrap(),
        )
        .unwrap();
    }
    run.forward().unwrap();
    // Row 0: h = [1.5, 2.5, 3.5]; row 1: h = [-0.5, 0.5, 6.5].
    assert_eq!(
        run.value(fwd.output).unwrap().data,
        [
            1.5 - 3.5,
            0.75 + 0.625 + 7.0,
            -0.5 - 6.5,
            -0.25 + 0.125 + 13.0
        ]
    );

    // A fixed batch takes no other.
    let fixed = model(
        vec![node("Relu", "", &["x"], &["y"], vec![])],
        vec![value_info("x", &[4, 3])],
        vec![value_info("y", &[4, 3])],
        vec![],
    );
    let m = OnnxModel::from_bytes(&fixed).unwrap();
    assert!(m.inputs(4).is_ok());
    let err = m.inputs(2).unwrap_err().to_string();
    assert!(err.contains("fix the batch at 4"), "{err}");

    // An unsupported operator: the error names the node, the operator and what is supported.
    let bad = model(
        vec![node("ConvTranspose", "up.0", &["x", "w"], &["y"], vec![])],
        vec![value_info("x", &[1, 1, 4, 4])],
        vec![value_info("y", &[1, 1, 5, 5])],
        vec![floats("w", &[1, 1, 2, 2], &[1.0; 4])],
    );
    let msg = OnnxModel::from_bytes(&bad).unwrap_err().to_string();
    for part in ["up.0", "ConvTranspose", "supported", "Gemm"] {
        assert!(msg.contains(part), "{msg}");
    }
}
