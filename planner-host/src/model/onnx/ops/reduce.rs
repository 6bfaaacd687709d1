//! Reductions: `ReduceSum`, `ReduceMean`, `ReduceMax`, `ReduceProd`, `Softmax`, `LogSoftmax`, `ArgMax`.

use tapeplan_core::{Attr, Opcode, Recordable, Shape};

use crate::model::onnx::tensor::TensorData;
use crate::model::onnx::translate::{dims_of, NodeCx, FLOAT, INT64};

use super::layout::axes_list;
use crate::model::onnx::OnnxError;

#[derive(Clone, Copy)]
pub(super) enum Reduce {
    Sum,
    Mean,
    Max,
    Prod,
}

pub(super) fn reduce(cx: &mut NodeCx<'_>, how: Reduce) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let dims = dims_of(cx.shape(x)?);
    let r = dims.len();
    let keepdims = cx.attr_int("keepdims", 1) != 0;
    let noop = cx.attr_int("noop_with_empty_axes", 0) != 0;
    let axes: Vec<usize> = match axes_list(cx)? {
        Some(a) if !a.is_empty() => a.iter().map(|&v| cx.axis(v, r)).collect::<Result<_, _>>()?,
        _ if noop => {
            let s = cx.shape(x)?;
            let y = cx.push(Opcode::Reshape, Attr::target(s), &[x])?;
            return cx.set_output(0, y, FLOAT);
        }
        _ => (0..r).collect(),
    };
    let kept: Vec<usize> = (0..r)
        .map(|a| if axes.contains(&a) { 1 } else { dims[a] })
        .collect();
    let kshape = cx.shape_from(&kept)?;
    let mut y = match how {
        Reduce::Max => cx.push(Opcode::MaxTo, Attr::target(kshape), &[x])?,
        Reduce::Prod => cx.push(Opcode::ProdTo, Attr::target(kshape), &[x])?,
        Reduce::Sum | Reduce::Mean => cx.push(Opcode::SumTo, Attr::target(kshape), &[x])?,
    };
    if let Reduce::Mean = how {
        let count: usize = axes.iter().map(|&a| dims[a]).product::<usize>();
        let f = cx.fill(count as f32, kshape)?;
        y = cx.push(Opcode::Div, Attr::NONE, &[y, f])?;
    }
    if !keepdims {
        let out: Vec<usize> = (0..r)
            .filter(|a| !axes.contains(a))
            .map(|a| dims[a])
            .collect();
        let s = cx.shape_from(&out)?;
        y = cx.reshape(y, s)?;
    }
    cx.set_output(0, y, FLOAT)
}

pub(super) fn reduce_sum(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    reduce(cx, Reduce::Sum)
}

pub(super) fn reduce_mean(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    reduce(cx, Reduce::Mean)
}

pub(super) fn reduce_max(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    reduce(cx, Reduce::Max)
}

pub(super) fn reduce_prod(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    reduce(cx, Reduce::Prod)
}

/// Softmax (`log = false`) or log-softmax over the node's axis: `d = x - max(x)`, then
/// `exp(d) / sum(exp(d))` or `d - log(sum(exp(d)))`, as ONNX's reference computes them.
pub(super) fn softmax_like(cx: &mut NodeCx<'_>, log: bool) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let shape = cx.shape(x)?;
    let dims = dims_of(shape);
    let r = dims.len();
    // Opset 13 normalizes along one axis (default -1); before, over the flattened trailing axes
    // from `axis` (default 1).
    let (xw, axis) = if cx.opset() >= 13 {
        (x, cx.axis(cx.attr_int("axis", -1), r)?)
    } else {
        let a = cx.axis(cx.attr_int("axis", 1), r)?;
        let rows: usize = dims[..a].iter().product();
        let cols: usize = dims[a..].iter().product();
        (cx.reshape(x, Shape::matrix(rows, cols))?, 1)
    };
    let ws = cx.shape(xw)?;
    let mut kept = dims_of(ws);
    kept[axis] = 1;
    let kshape = cx.shape_from(&kept)?;
    let m = cx.push(Opcode::MaxTo, Attr::target(kshape), &[xw])?;
    let mb = cx.broadcast(m, ws)?;
    let d = cx.push(Opcode::Sub, Attr::NONE, &[xw, mb])?;
    let e = cx.push(Opcode::Exp, Attr::NONE, &[d])?;
    let s = cx.push(Opcode::SumTo, Attr::target(kshape), &[e])?;
    let y = if log {
        let l = cx.push(Opcode::Log, Attr::NONE, &[s])?;
        let lb = cx.broadcast(l, ws)?;
        cx.push(Opcode::Sub, Attr::NONE, &[d, lb])?
    } else {
        let sb = cx.broadcast(s, ws)?;
        cx.push(Opcode::Div, Attr::NONE, &[e, sb])?
    };
    let y = cx.reshape(y, shape)?;
    cx.set_output(0, y, FLOAT)
}

pub(super) fn softmax(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    softmax_like(cx, false)
}

pub(super) fn log_softmax(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    softmax_like(cx, true)
}

pub(super) fn arg_max(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let s = cx.shape(x)?;
    let dims = dims_of(s);
    let r = dims.len();
    let axis = cx.axis(cx.attr_int("axis", 0), r)?;
    let mut kept = dims.clone();
    kept[axis] = 1;
    let kshape = cx.shape_from(&kept)?;
    let mut y = if cx.attr_int("select_last_index", 0) == 0 {
        cx.record(|t| t.argmax(&x, axis))?
    } else {
        // The highest index where x equals its maximum: max_to of `mask · index`.
        let mut ramp_dims = vec![1; r];
        ramp_dims[axis] = dims[axis];
        let ramp = TensorData::f32(ramp_dims, (0..dims[axis]).map(|i| i as f32).collect());
        let ramp = cx.constant("index", ramp)?;
        cx.record(|t| {
            let m = t.max_to(&x, kshape)?;
            let m = t.broadcast(&m, s)?;
            let at_max = t.equal(&x, &m)?;
            let ramp = t.broadcast(&ramp, s)?;
            let idx = t.mul(&at_max, &ramp)?;
            t.max_to(&idx, kshape)
        })?
    };
    if cx.attr_int("keepdims", 1) == 0 {
        let out: Vec<usize> = (0..r).filter(|&a| a != axis).map(|a| dims[a]).collect();
        let out = cx.shape_from(&out)?;
        y = cx.reshape(y, out)?;
    }
    cx.set_output(0, y, INT64)
}
