//! The conformance cases shared by the first-order and second-order suites: one or more per
//! opcode, each a small function of random inputs reduced to a scalar.

use tapeplan_core::{
    ConvAttr, NodeId, Opcode, PoolWindow, Recordable, Reduction, RunningStats, Shape, Tape, Trace,
};
use tapeplan_planner::protocol::SplitMix64;

/// A case: the inputs' shapes and value ranges, and the function body from inputs to a value
/// that is then reduced as `sum(body * w)` with a random weight `w` so that every element's
/// gradient differs.
pub struct Case {
    pub name: &'static str,
    pub covers: &'static [Opcode],
    pub inputs: &'static [(&'static [usize], f32, f32)],
    /// Which inputs are differentiated (the others are data, like labels).
    pub wrt: &'static [bool],
    pub body: fn(&mut Trace<'_>, &[NodeId]) -> NodeId,
}

/// Inputs within `2h` of a kink of the case's function, where central differences straddle it:
/// `(input values, element)`.
pub fn near_kink(case: &str, v: &[Vec<f32>], i: usize) -> bool {
    let close = |a: f32, b: f32| (a - b).abs() < 4e-2;
    match case {
        "relu" | "heaviside" | "abs" | "sign" | "equal" | "greater" | "select" => {
            close(v[0][i], 0.0)
        }
        "maximum" | "minimum" | "l1_loss" => close(v[0][i], v[1][i]),
        "leaky_relu" => close(v[0][i], 0.0),
        "softplus_beta" => close(v[0][i], 2.5),
        "hardswish" => close(v[0][i], -3.0) || close(v[0][i], 3.0),
        // The maximum of a row (argmax) or of a group over axes {0, 2} (stride 4 within 12)
        // changes hands when two of its entries are close.
        "argmax" => {
            let row = &v[0][(i / 4) * 4..(i / 4) * 4 + 4];
            row.iter()
                .enumerate()
                .any(|(j, &y)| j != i % 4 && close(y, v[0][i]))
        }
        "reduce_axes_0_2" => {
            let j = (i % 12) / 4;
            (0..24)
                .filter(|&k| (k % 12) / 4 == j && k != i)
                .any(|k| close(v[0][k], v[0][i]))
        }
        // The row maximum changes hands when two entries of a row are close.
        "max_to" => {
            let row = i / 4;
            let r = &v[0][row * 4..row * 4 + 4];
            let mut sorted = r.to_vec();
            sorted.sort_by(f32::total_cmp);
            close(sorted[3], sorted[2])
        }
        // A window's maximum changes hands when two of its entries are close: conservatively,
        // any other entry of the same plane (the planes are 7 and 25 elements).
        "max_pool_1d" | "max_pool_2d" => {
            let plane = if case == "max_pool_1d" { 7 } else { 25 };
            let p = i / plane;
            let x = &v[0][p * plane..(p + 1) * plane];
            x.iter()
                .enumerate()
                .any(|(j, &y)| j != i % plane && close(y, v[0][i]))
        }
        _ => false,
    }
}

/// What a convolution's rules speak: the three convolution instructions.
const CONV_OPS: &[Opcode] = &[Opcode::Conv, Opcode::ConvTranspose, Opcode::ConvWeightGrad];
/// The 2-D max-pool window of the conformance cases: kernel `[3, 2]`, strides 2, pads
/// `[1, 0, 0, 1]`, dilations `[1, 2]` over a `5 × 5` plane: a `2 × 2` output.
pub fn max_pool_2d_window() -> PoolWindow {
    PoolWindow::new_2d([3, 2], [2, 2], [1, 0, 0, 1]).with_dilations([1, 2])
}

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "add",
            covers: &[Opcode::Add],
            inputs: &[(&[3, 4], -2.0, 2.0), (&[3, 4], -2.0, 2.0)],
            wrt: &[true, true],
            body: |t, x| t.add(&x[0], &x[1]).unwrap(),
        },
        Case {
            name: "sub",
            covers: &[Opcode::Sub, Opcode::Neg],
            inputs: &[(&[3, 4], -2.0, 2.0), (&[3, 4], -2.0, 2.0)],
            wrt: &[true, true],
            body: |t, x| t.sub(&x[0], &x[1]).unwrap(),
        },
        Case {
            name: "mul",
            covers: &[Opcode::Mul],
            inputs: &[(&[3, 4], -2.0, 2.0), (&[3, 4], -2.0, 2.0)],
            wrt: &[true, true],
            body: |t, x| t.mul(&x[0], &x[1]).unwrap(),
        },
        Case {
            name: "square",
            covers: &[Opcode::Mul],
            inputs: &[(&[5], -2.0, 2.0)],
            wrt: &[true],
            body: |t, x| t.mul(&x[0], &x[0]).unwrap(),
        },
        Case {
            name: "div",
            covers: &[Opcode::Div],
            inputs: &[(&[3, 4], -2.0, 2.0), (&[3, 4], 0.5, 2.0)],
            wrt: &[true, true],
            body: |t, x| t.div(&x[0], &x[1]).unwrap(),
        },
        Case {
            name: "neg",
            covers: &[Opcode::Neg],
            inputs: &[(&[7], -2.0, 2.0)],
            wrt: &[true],
            body: |t, x| t.neg(&x[0]).unwrap(),
        },
        Case {
            name: "tanh",
            covers: &[Opcode::Tanh, Opcode::Fill],
            inputs: &[(&[2, 5], -3.0, 3.0)],
            wrt: &[true],
            body: |t, x| t.tanh(&x[0]).unwrap(),
        },
        Case {
            name: "relu",
            covers: &[Opcode::Relu, Opcode::Heaviside],
            inputs: &[(&[2, 5], -3.0, 3.0)],
            wrt: &[true],
            body: |t, x| t.relu(&x[0]).unwrap(),
        },
        Case {
            name: "heaviside",
            covers: &[Opcode::Heaviside],
            inputs: &[(&[2, 5], -3.0, 3.0), (&[2, 5], -1.0, 1.0)],
            wrt: &[true, true],
            body: |t, x| {
                let h = t.heaviside(&x[0]).unwrap();
                t.mul(&h, &x[1]).unwrap()
            },
        },
        Case {
            name: "exp",
            covers: &[Opcode::Exp],
            inputs: &[(&[6], -2.0, 2.0)],
            wrt: &[true],
            body: |t, x| t.exp(&x[0]).unwrap(),
        },
        Case {
            name: "log",
            covers: &[Opcode::Log],
            inputs: &[(&[6], 0.5, 3.0)],
            wrt: &[true],
            body: |t, x| t.log(&x[0]).unwrap(),
        },
        Case {
            name: "detach",
            covers: &[Opcode::Detach],
            inputs: &[(&[6], -2.0, 2.0)],
            wrt: &[true],
            body: |t, x| {
                let d = t.detach(&x[0]).unwrap();
                let s = t.mul(&d, &x[0]).unwrap();
                t.add(&s, &x[0]).unwrap()
            },
        },
        Case {
            name: "equal",
            covers: &[Opcode::Equal],
            inputs: &[(&[6], -2.0, 2.0), (&[6], -1.0, 1.0)],
            wrt: &[true, true],
            body: |t, x| {
                let e = t.equal(&x[0], &x[0]).unwrap();
                t.mul(&e, &x[1]).unwrap()
            },
        },
        Case {
            name: "matmul",
            covers: &[Opcode::MatMul, Opcode::Transpose],
            inputs: &[(&[3, 4], -1.0, 1.0), (&[4, 2], -1.0, 1.0)],
            wrt: &[true, true],
            body: |t, x| t.matmul(&x[0], &x[1]).unwrap(),
        },
        Case {
            name: "sgd_matmul",
            covers: &[Opcode::SgdMatMul, Opcode::MatMul, Opcode::Transpose],
            inputs: &[
                (&[3, 2], -1.0, 1.0),
                (&[4, 3], -1.0, 1.0),
                (&[4, 2], -1.0, 1.0),
            ],
            wrt: &[true, true, true],
            body: |t, x| t.sgd_matmul(&x[0], &x[1], &x[2], 0.5).unwrap(),
        },
        Case {
            name: "matmul_batched",
            covers: &[Opcode::MatMul, Opcode::Transpose],
            inputs: &[(&[2, 3, 4], -1.0, 1.0), (&[2, 4, 2], -1.0, 1.0)],
            wrt: &[true, true],
            body: |t, x| {
                let y = t.matmul(&x[0], &x[1]).unwrap();
                t.mul(&y, &y).unwrap()
            },
        },
        Case {
            name: "transpose_batched",
            covers: &[Opcode::Transpose],
            inputs: &[(&[2, 3, 4], -1.0, 1.0)],
            wrt: &[true],
            body: |t, x| t.transpose(&x[0]).unwrap(),
        },
        Case {
            name: "transpose",
            covers: &[Opcode::Transpose],
            inputs: &[(&[3, 4], -1.0, 1.0)],
            wrt: &[true],
            body: |t, x| t.transpose(&x[0]).unwrap(),
        },
        Case {
            name: "reshape",
            covers: &[Opcode::Reshape],
            inputs: &[(&[3, 4], -1.0, 1.0)],
            wrt: &[true],
            body: |t, x| t.reshape(&x[0], Shape::matrix(2, 6)).unwrap(),
        },
        Case {
            name: "broadcast_row",
            covers: &[Opcode::Broadcast, Opcode::SumTo],
            inputs: &[(&[4], -1.0, 1.0)],
            wrt: &[true],
            body: |t, x| t.broadcast(&x[0], Shape::matrix(3, 4)).unwrap(),
        },
        Case {
            name: "broadcast_col",
            covers: &[Opcode::Broadcast, Opcode::SumTo],
            inputs: &[(&[3, 1], -1.0, 1.0)],
            wrt: &[true],
            body: |t, x| t.broadcast(&x[0], Shape::matrix(3, 4)).unwrap(),
        },
        Case {
            name: "sum_to_cols",
            covers: &[Opcode::SumTo, Opcode::Broadcast],
            inputs: &[(&[3, 4], -1.0, 1.0)],
            wrt: &[true],
            body: |t, x| t.sum_to(&x[0], Shape::vector(4)).unwrap(),
        },
        Case {
            name: "sum_to_all",
            covers: &[Opcode::SumTo, Opcode::Broadcast],
            inputs: &[(&[3, 4], -1.0, 1.0)],
            wrt: &[true],
            body: |t, x| t.sum_to(&x[0], Shape::SCALAR).unwrap(),
        },
        Case {
            name: "max_to",
            covers: &[Opcode::MaxTo, Opcode::Equal, Opcode::Broadcast],
            inputs: &[(&[3, 4], -1.0, 1.0)],
            wrt: &[true],
            body: |t, x| t.max_to(&x[0], Shape::matrix(3, 1)).unwrap(),
        },
        Case {
            name: "one_hot",
            covers: &[Opcode::OneHot],
            inputs: &[(&[4], 0.0, 0.0), (&[4, 3], -1.0, 1.0)],
            wrt: &[false, true],
            body: |t, x| {
                let o = t.one_hot(&x[0], 3).unwrap();
                t.mul(&o, &x[1]).unwrap()
            },
        },
        Case {
            name: "sqrt",
            covers: &[Opcode::Sqrt],
            inputs: &[(&[6], 0.25, 3.0)],
            wrt: &[true],
            body: |t, x| t.sqrt(&x[0]).unwrap(),
        },
        Case {
            name: "erf",
            covers: &[Opcode::Erf],
            inputs: &[(&[6], -3.0, 3.0)],
            wrt: &[true],
            body: |t, x| t.erf(&x[0]).unwrap(),
        },
        Case {
            name: "sigmoid",
            covers: &[Opcode::Sigmoid],
            inputs: &[(&[6], -4.0, 4.0)],
            wrt: &[true],
            body: |t, x| t.sigmoid(&x[0]).unwrap(),
        },
        Case {
            name: "softplus",
            covers: &[Opcode::Softplus, Opcode::Sigmoid],
            inputs: &[(&[8], -4.0, 24.0)],
            wrt: &[true],
            body: |t, x| t.softplus(&x[0]).unwrap(),
        },
        Case {
            name: "logsumexp",
            covers: &[
                Opcode::LogSumExp,
                Opcode::Equal,
                Opcode::Select,
                Opcode::Exp,
                Opcode::Broadcast,
            ],
            inputs: &[(&[3, 4], -3.0, 3.0)],
            wrt: &[true],
            body: |t, x| t.logsumexp_to(&x[0], Shape::matrix(3, 1)).unwrap(),
        },
        Case {
            name: "logsumexp_columns",
            covers: &[Opcode::LogSumExp],
            inputs: &[(&[2, 3, 2], -3.0, 3.0)],
            wrt: &[true],
            body: |t, x| t.logsumexp_to(&x[0], Shape::new(&[3, 1]).unwrap()).unwrap(),
        },
        Case {
            name: "log_softmax",
            covers: &[Opcode::LogSumExp, Opcode::Sub],
            inputs: &[(&[3, 4], -3.0, 3.0)],
            wrt: &[true],
            body: |t, x| t.log_softmax(&x[0], 1).unwrap(),
        },
        Case {
            name: "softmax",
            covers: &[Opcode::MaxTo, Opcode::Detach, Opcode::Div],
            inputs: &[(&[4, 3], -3.0, 3.0)],
            wrt: &[true],
            body: |t, x| t.softmax(&x[0], 0).unwrap(),
        },
        Case {
            name: "bce_with_logits",
            covers: &[Opcode::BceWithLogits, Opcode::Sigmoid, Opcode::Neg],
            inputs: &[(&[3, 4], -4.0, 4.0), (&[3, 4], 0.0, 1.0)],
            wrt: &[true, true],
            body: |t, x| {
                t.binary_cross_entropy_with_logits(&x[0], &x[1], Reduction::None)
                    .unwrap()
            },
        },
        Case {
            name: "bce_with_logits_mean",
            covers: &[Opcode::BceWithLogits, Opcode::SumTo, Opcode::Div],
            inputs: &[(&[2, 3], -4.0, 4.0), (&[2, 3], 0.0, 1.0)],
            wrt: &[true, false],
            body: |t, x| {
                t.binary_cross_entropy_with_logits(&x[0], &x[1], Reduction::Mean)
                    .unwrap()
            },
        },
        Case {
            name: "l1_loss",
            covers: &[Opcode::Abs, Opcode::Sub],
            inputs: &[(&[3, 4], -2.0, 2.0), (&[3, 4], -2.0, 2.0)],
            wrt: &[true, true],
            body: |t, x| t.l1_loss(&x[0], &x[1], Reduction::Sum).unwrap(),
        },
        Case {
            name: "huber_loss",
            covers: &[Opcode::Abs, Opcode::Select, Opcode::Greater],
            inputs: &[(&[3, 4], -2.0, 2.0), (&[3, 4], -2.0, 2.0)],
            wrt: &[true, true],
            body: |t, x| t.huber_loss(&x[0], &x[1], 1.0, Reduction::None).unwrap(),
        },
        Case {
            name: "leaky_relu",
            covers: &[Opcode::Select, Opcode::Greater],
            inputs: &[(&[8], -2.0, 2.0)],
            wrt: &[true],
            body: |t, x| t.leaky_relu(&x[0], 0.1).unwrap(),
        },
        Case {
            name: "silu",
            covers: &[Opcode::Sigmoid, Opcode::Mul],
            inputs: &[(&[8], -4.0, 4.0)],
            wrt: &[true],
            body: |t, x| t.silu(&x[0]).unwrap(),
        },
        Case {
            name: "gelu",
            covers: &[Opcode::Erf],
            inputs: &[(&[8], -3.0, 3.0)],
            wrt: &[true],
            body: |t, x| t.gelu(&x[0]).unwrap(),
        },
        Case {
            name: "gelu_tanh",
            covers: &[Opcode::Tanh],
            inputs: &[(&[8], -3.0, 3.0)],
            wrt: &[true],
            body: |t, x| t.gelu_tanh(&x[0]).unwrap(),
        },
        Case {
            name: "softplus_beta",
            covers: &[Opcode::Softplus, Opcode::Select],
            inputs: &[(&[8], -4.0, 4.0)],
            wrt: &[true],
            body: |t, x| t.softplus_beta(&x[0], 2.0, 5.0).unwrap(),
        },
        Case {
            name: "hardswish",
            covers: &[Opcode::Maximum, Opcode::Minimum],
            inputs: &[(&[8], -5.0, 5.0)],
            wrt: &[true],
            body: |t, x| t.hardswish(&x[0]).unwrap(),
        },
        Case {
            name: "batch_norm_train",
            covers: &[Opcode::SumTo, Opcode::Sqrt, Opcode::Reshape],
            inputs: &[(&[4, 3], -2.0, 2.0), (&[3], 0.5, 1.5), (&[3], -1.0, 1.0)],
            wrt: &[true, true, true],
            body: |t, x| {
                let rv = t.fill(1.0, Shape::vector(3)).unwrap();
                let stats = RunningStats::PyTorch { momentum: 0.1 };
                t.batch_norm_train(&x[0], Some(&x[1]), Some(&x[2]), &rv, &rv, stats, 1e-5)
                    .unwrap()
                    .y
            },
        },
        Case {
            name: "batch_norm_running_stats",
            covers: &[Opcode::SumTo, Opcode::Reshape],
            inputs: &[(&[2, 2, 3], -2.0, 2.0), (&[2], 0.5, 1.5)],
            wrt: &[true, true],
            body: |t, x| {
                let stats = RunningStats::Onnx { momentum: 0.9 };
                let out = t
                    .batch_norm_train(&x[0], None, None, &x[1], &x[1], stats, 1e-5)
                    .unwrap();
                t.mul(&out.running_mean, &out.running_var).unwrap()
            },
        },
        Case {
            name: "batch_norm_eval",
            covers: &[Opcode::Sqrt, Opcode::Div],
            inputs: &[(&[3, 2], -2.0, 2.0), (&[2], -1.0, 1.0), (&[2], 0.5, 2.0)],
            wrt: &[true, true, true],
            body: |t, x| {
                t.batch_norm_eval(&x[0], None, None, &x[1], &x[2], 1e-5)
                    .unwrap()
            },
        },
        Case {
            name: "layer_norm",
            covers: &[Opcode::SumTo, Opcode::Sqrt, Opcode::Broadcast],
            inputs: &[
                (&[2, 2, 3], -2.0, 2.0),
                (&[2, 3], 0.5, 1.5),
                (&[2, 3], -1.0, 1.0),
            ],
            wrt: &[true, true, true],
            body: |t, x| {
                t.layer_norm(&x[0], 2, Some(&x[1]), Some(&x[2]), 1e-5)
                    .unwrap()
            },
        },
        Case {
            name: "abs",
            covers: &[Opcode::Abs, Opcode::Sign],
            inputs: &[(&[8], -2.0, 2.0)],
            wrt: &[true],
            body: |t, x| t.abs(&x[0]).unwrap(),
        },
        Case {
            name: "sign",
            covers: &[Opcode::Sign],
            inputs: &[(&[6], -2.0, 2.0), (&[6], -1.0, 1.0)],
            wrt: &[true, true],
            body: |t, x| {
                let s = t.sign(&x[0]).unwrap();
                t.mul(&s, &x[1]).unwrap()
            },
        },
        Case {
            name: "pow3",
            covers: &[Opcode::Pow],
            inputs: &[(&[6], -2.0, 2.0)],
            wrt: &[true],
            body: |t, x| t.pow_const(&x[0], 3.0).unwrap(),
        },
        Case {
            name: "pow_half",
            covers: &[Opcode::Pow],
            inputs: &[(&[6], 0.5, 2.0)],
            wrt: &[true],
            body: |t, x| t.pow_const(&x[0], 0.5).unwrap(),
        },
        Case {
            name: "pow0",
            covers: &[Opcode::Pow],
            inputs: &[(&[6], -2.0, 2.0)],
            wrt: &[true],
            body: |t, x| t.pow_const(&x[0], 0.0).unwrap(),
        },
        Case {
            name: "maximum",
            covers: &[Opcode::Maximum, Opcode::GreaterEqual, Opcode::Greater],
            inputs: &[(&[3, 4], -2.0, 2.0), (&[3, 4], -2.0, 2.0)],
            wrt: &[true, true],
            body: |t, x| t.maximum(&x[0], &x[1]).unwrap(),
        },
        Case {
            name: "minimum",
            covers: &[Opcode::Minimum, Opcode::GreaterEqual, Opcode::Greater],
            inputs: &[(&[3, 4], -2.0, 2.0), (&[3, 4], -2.0, 2.0)],
            wrt: &[true, true],
            body: |t, x| t.minimum(&x[0], &x[1]).unwrap(),
        },
        Case {
            name: "greater",
            covers: &[Opcode::Greater, Opcode::GreaterEqual],
            inputs: &[(&[6], -2.0, 2.0), (&[6], -1.0, 1.0)],
            wrt: &[true, true],
            body: |t, x| {
                let z = t.fill(0.0, Shape::vector(6)).unwrap();
                let m = t.greater(&x[0], &z).unwrap();
                let n = t.less_equal(&x[0], &z).unwrap();
                let a = t.mul(&m, &x[1]).unwrap();
                let b = t.mul(&n, &x[0]).unwrap();
                t.add(&a, &b).unwrap()
            },
        },
        Case {
            name: "select",
            covers: &[Opcode::Select],
            inputs: &[(&[6], -2.0, 2.0), (&[6], -1.0, 1.0), (&[6], -1.0, 1.0)],
            wrt: &[true, true, true],
            body: |t, x| {
                let z = t.fill(0.0, Shape::vector(6)).unwrap();
                let c = t.greater(&x[0], &z).unwrap();
                let inf = t.fill(f32::INFINITY, Shape::vector(6)).unwrap();
                let e = t.select(&c, &x[1], &x[2]).unwrap();
                let f = t.select(&c, &e, &inf).unwrap();
                let g = t.select(&c, &f, &e).unwrap();
                t.mul(&g, &x[0]).unwrap()
            },
        },
        Case {
            name: "slice",
            covers: &[Opcode::Slice, Opcode::Pad],
            inputs: &[(&[3, 5], -1.0, 1.0)],
            wrt: &[true],
            body: |t, x| t.slice(&x[0], 1, 1, 3).unwrap(),
        },
        Case {
            name: "pad",
            covers: &[Opcode::Pad, Opcode::Slice],
            inputs: &[(&[2, 3], -1.0, 1.0)],
            wrt: &[true],
            body: |t, x| t.pad(&x[0], 0, 1, Shape::matrix(4, 3)).unwrap(),
        },
        Case {
            name: "concat",
            covers: &[Opcode::Concat, Opcode::Slice],
            inputs: &[(&[2, 3], -1.0, 1.0), (&[2, 2], -1.0, 1.0)],
            wrt: &[true, true],
            body: |t, x| t.concat(&x[0], &x[1], 1).unwrap(),
        },
        Case {
            name: "mean",
            covers: &[Opcode::SumTo, Opcode::Div],
            inputs: &[(&[3, 4], -1.0, 1.0)],
            wrt: &[true],
            body: |t, x| t.mean_to(&x[0], Shape::matrix(3, 1)).unwrap(),
        },
        Case {
            name: "uniform",
            covers: &[Opcode::Uniform],
            inputs: &[(&[], 0.0, 0.0), (&[], 0.0, 0.0), (&[6], -1.0, 1.0)],
            wrt: &[false, false, true],
            body: |t, x| {
                let u = t.uniform(&x[0], &x[1], Shape::vector(6)).unwrap();
                let d = t.dropout(&x[2], 0.5, &x[0], &x[1]).unwrap();
                let ux = t.mul(&u, &x[2]).unwrap();
                t.add(&ux, &d).unwrap()
            },
        },
        Case {
            name: "conv1d",
            covers: CONV_OPS,
            // Stride 2, padding 1 before and 2 after, dilation 2: L_out = (9 + 3 - 5) / 2 + 1 = 4.
            inputs: &[(&[2, 2, 9], -1.0, 1.0), (&[3, 2, 3], -1.0, 1.0)],
            wrt: &[true, true],
            body: |t, x| {
                let a = ConvAttr::d1(2, 1, 2, 2, 1);
                t.conv(&x[0], &x[1], None, a).unwrap()
            },
        },
        Case {
            name: "conv2d_groups",
            covers: CONV_OPS,
            // Two groups, stride [2, 1], padding top 1, right 2, dilation [1, 2]: out 3 × 2.
            inputs: &[(&[2, 2, 5, 4], -1.0, 1.0), (&[4, 1, 2, 3], -1.0, 1.0)],
            wrt: &[true, true],
            body: |t, x| {
                let a = ConvAttr::d2([2, 1], [1, 0], [0, 2], [1, 2], 2);
                t.conv(&x[0], &x[1], None, a).unwrap()
            },
        },
        Case {
            name: "conv2d_depthwise_bias",
            covers: &[
                Opcode::Conv,
                Opcode::ConvTranspose,
                Opcode::ConvWeightGrad,
                Opcode::Reshape,
                Opcode::Broadcast,
                Opcode::SumTo,
            ],
            // Depthwise (groups = C_in = 3), padding 1 all round: "same" 4 × 4.
            inputs: &[
                (&[1, 3, 4, 4], -1.0, 1.0),
                (&[3, 1, 3, 3], -1.0, 1.0),
                (&[3], -1.0, 1.0),
            ],
            wrt: &[true, true, true],
            body: |t, x| {
                let a = ConvAttr::d2([1, 1], [1, 1], [1, 1], [1, 1], 3);
                t.conv(&x[0], &x[1], Some(&x[2]), a).unwrap()
            },
        },
        Case {
            name: "conv_transpose",
            covers: CONV_OPS,
            // The input gradient of a stride-2 1-D convolution of a length-8 input (an extent a
            // stride-2 convolution maps to 3 like a length-7 one: `extent` says which).
            inputs: &[(&[2, 4, 3], -1.0, 1.0), (&[4, 1, 3], -1.0, 1.0)],
            wrt: &[true, true],
            body: |t, x| {
                let a = ConvAttr::d1(2, 0, 0, 1, 2);
                t.conv_transpose(&x[0], &x[1], a, &[8]).unwrap()
            },
        },
        Case {
            name: "conv_weight_grad",
            covers: CONV_OPS,
            inputs: &[(&[2, 2, 4, 5], -1.0, 1.0), (&[2, 3, 2, 2], -1.0, 1.0)],
            wrt: &[true, true],
            body: |t, x| {
                // Kernel 2 × 3, stride 2, padding 0 / right 1: out (4 - 2) / 2 + 1 = 2 and
                // (5 + 1 - 3) / 2 + 1 = 2.
                let a = ConvAttr::d2([2, 2], [0, 0], [0, 1], [1, 1], 1);
                t.conv_weight_grad(&x[0], &x[1], a, &[2, 3]).unwrap()
            },
        },
        Case {
            name: "max_pool_1d",
            covers: &[Opcode::MaxPool, Opcode::MaxPoolScatter],
            inputs: &[(&[2, 2, 7], -3.0, 3.0)],
            wrt: &[true],
            body: |t, x| t.max_pool(&x[0], PoolWindow::new_1d(3, 2, [1, 1])).unwrap(),
        },
        Case {
            name: "max_pool_2d",
            covers: &[
                Opcode::MaxPool,
                Opcode::MaxPoolScatter,
                Opcode::MaxPoolGather,
                Opcode::Mul,
            ],
            inputs: &[(&[1, 2, 5, 5], -3.0, 3.0)],
            wrt: &[true],
            body: |t, x| {
                let y = t.max_pool(&x[0], max_pool_2d_window()).unwrap();
                t.mul(&y, &y).unwrap()
            },
        },
        Case {
            name: "avg_pool_1d_count_include_pad",
            covers: &[Opcode::AvgPool, Opcode::AvgPoolBackward],
            inputs: &[(&[2, 3, 6], -2.0, 2.0)],
            wrt: &[true],
            body: |t, x| {
                let w = PoolWindow::new_1d(3, 2, [1, 1]).with_count_include_pad(true);
                t.avg_pool(&x[0], w).unwrap()
            },
        },
        Case {
            name: "avg_pool_2d",
            covers: &[Opcode::AvgPool, Opcode::AvgPoolBackward, Opcode::Mul],
            inputs: &[(&[1, 2, 5, 4], -2.0, 2.0)],
            wrt: &[true],
            body: |t, x| {
                let w = PoolWindow::new_2d([2, 3], [1, 2], [1, 1, 0, 1]);
                let y = t.avg_pool(&x[0], w).unwrap();
                t.mul(&y, &y).unwrap()
            },
        },
        Case {
            name: "global_avg_pool",
            covers: &[Opcode::SumTo, Opcode::Div, Opcode::Broadcast],
            inputs: &[(&[2, 3, 3, 4], -2.0, 2.0)],
            wrt: &[true],
            body: |t, x| {
                let y = t.global_avg_pool(&x[0]).unwrap();
                t.mul(&y, &y).unwrap()
            },
        },
        Case {
            name: "embedding",
            covers: &[Opcode::Gather, Opcode::ScatterAdd],
            inputs: &[(&[4, 3], -2.0, 2.0), (&[5], 0.0, 0.0)],
            wrt: &[true, false],
            body: |t, x| t.embedding(&x[0], &x[1]).unwrap(),
        },
        Case {
            name: "gather_axis_1",
            covers: &[Opcode::Gather, Opcode::ScatterAdd, Opcode::Mul],
            inputs: &[(&[2, 3, 4], -2.0, 2.0), (&[2, 2], 0.0, 0.0)],
            wrt: &[true, false],
            body: |t, x| {
                let y = t.gather(&x[0], &x[1], 1).unwrap();
                t.mul(&y, &y).unwrap()
            },
        },
        Case {
            name: "argmax",
            covers: &[Opcode::ArgMax, Opcode::Mul],
            inputs: &[(&[3, 4], -2.0, 2.0), (&[3, 1], -1.0, 1.0)],
            wrt: &[true, true],
            body: |t, x| {
                let i = t.argmax(&x[0], 1).unwrap();
                let y = t.mul(&i, &x[1]).unwrap();
                let m = t.max_to(&x[0], Shape::matrix(3, 1)).unwrap();
                t.mul(&y, &m).unwrap()
            },
        },
        Case {
            name: "reduce_axes_0_2",
            covers: &[Opcode::SumTo, Opcode::MaxTo, Opcode::Reshape, Opcode::Div],
            inputs: &[(&[2, 3, 4], -2.0, 2.0)],
            wrt: &[true],
            body: |t, x| {
                let s = t.sum_axes(&x[0], &[0, 2], false).unwrap();
                let m = t.mean_axes(&x[0], &[2, 0], false).unwrap();
                let k = t.max_axes(&x[0], &[0, 2], false).unwrap();
                let sm = t.mul(&s, &m).unwrap();
                t.mul(&sm, &k).unwrap()
            },
        },
        Case {
            name: "prod_to_rows",
            covers: &[
                Opcode::ProdTo,
                Opcode::CumprodExclusive,
                Opcode::AffineScan,
                Opcode::Mul,
            ],
            inputs: &[(&[3, 4], -1.5, 1.5)],
            wrt: &[true],
            body: |t, x| t.prod_to(&x[0], Shape::matrix(3, 1)).unwrap(),
        },
        Case {
            name: "prod_axes_0_2",
            covers: &[Opcode::ProdTo, Opcode::CumprodExclusive, Opcode::Reshape],
            inputs: &[(&[2, 3, 2], -1.5, 1.5)],
            wrt: &[true],
            body: |t, x| t.prod_axes(&x[0], &[0, 2], false).unwrap(),
        },
        Case {
            name: "cumprod_exclusive",
            covers: &[Opcode::CumprodExclusive, Opcode::AffineScan],
            inputs: &[(&[2, 3, 2], -1.5, 1.5)],
            wrt: &[true],
            body: |t, x| t.cumprod_exclusive(&x[0], 0b101, true).unwrap(),
        },
        Case {
            name: "affine_scan",
            covers: &[Opcode::AffineScan, Opcode::Mul],
            inputs: &[(&[3, 4], -1.5, 1.5), (&[3, 4], -1.5, 1.5)],
            wrt: &[true, true],
            body: |t, x| t.affine_scan(&x[0], &x[1], 0b01, false).unwrap(),
        },
        Case {
            name: "softmax_ce",
            covers: &[
                Opcode::MaxTo,
                Opcode::Detach,
                Opcode::Exp,
                Opcode::Log,
                Opcode::OneHot,
            ],
            inputs: &[(&[4], 0.0, 0.0), (&[4, 3], -2.0, 2.0)],
            wrt: &[false, true],
            body: |t, x| {
                let l = tapeplan_planner::model::softmax_cross_entropy(t, &x[1], &x[0]).unwrap();
                let s = t.shape_of(&x[1]);
                t.broadcast(&l, s).unwrap()
            },
        },
        // Last: cases added later draw their random points after the others' (the tests
        // that sample points from one generator keep the earlier cases' points).
        Case {
            name: "matmul_tn",
            covers: &[Opcode::MatMulTn, Opcode::MatMulNt, Opcode::MatMul],
            inputs: &[(&[4, 3], -1.0, 1.0), (&[4, 2], -1.0, 1.0)],
            wrt: &[true, true],
            body: |t, x| t.matmul_tn(&x[0], &x[1]).unwrap(),
        },
        Case {
            name: "matmul_nt_batched",
            covers: &[Opcode::MatMulNt, Opcode::MatMulTn, Opcode::MatMul],
            inputs: &[(&[2, 3, 4], -1.0, 1.0), (&[2, 5, 4], -1.0, 1.0)],
            wrt: &[true, true],
            body: |t, x| {
                let y = t.matmul_nt(&x[0], &x[1]).unwrap();
                t.mul(&y, &y).unwrap()
            },
        },
    ]
}

pub fn random_input(
    rng: &mut SplitMix64,
    shape: Shape,
    lo: f32,
    hi: f32,
    is_labels: bool,
) -> Vec<f32> {
    (0..shape.elems())
        .map(|_| {
            if is_labels {
                rng.below(3) as f32
            } else {
                lo + (hi - lo) * rng.next_f32()
            }
        })
        .collect()
}

pub struct Built {
    pub tape: Tape,
    pub inputs: Vec<NodeId>,
    pub w: NodeId,
    pub f: NodeId,
    pub grads: Vec<Option<NodeId>>,
}

pub fn build(case: &Case) -> Built {
    let mut tape = Tape::new();
    let inputs: Vec<NodeId> = case
        .inputs
        .iter()
        .enumerate()
        .map(|(k, (dims, _, _))| tape.input(&format!("x{k}"), Shape::new(dims).unwrap()))
        .collect();
    let (body, w) = {
        let mut t = tape.trace();
        let body = (case.body)(&mut t, &inputs);
        let s = t.shape_of(&body);
        (body, s)
    };
    let w = tape.input("w", w);
    let f = {
        let mut t = tape.trace();
        let p = t.mul(&body, &w).unwrap();
        t.sum_all(&p).unwrap()
    };
    let wrt: Vec<NodeId> = inputs
        .iter()
        .zip(case.wrt)
        .filter(|(_, &d)| d)
        .map(|(x, _)| *x)
        .collect();
    let adj = tape.differentiate(f, &wrt).unwrap();
    let grads = inputs
        .iter()
        .zip(case.wrt)
        .map(|(x, &d)| if d { adj.get(*x).copied() } else { None })
        .collect();
    Built {
        tape,
        inputs,
        w,
        f,
        grads,
    }
}

/// Bit patterns, every NaN as one class.
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|x| if x.is_nan() { 0x7fc0_0000 } else { x.to_bits() })
        .collect()
}
