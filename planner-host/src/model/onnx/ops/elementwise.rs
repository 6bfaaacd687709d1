//! Elementwise operators beyond the table's plain unary and binary rows: comparisons, `Where`, the variadic `Max`/`Min`/`Sum`, `Pow`, `Reciprocal`, the parameterized activations and `Clip`.

use tapeplan_core::{Attr, NodeId, Opcode, Recordable};

use crate::model::onnx::translate::{broadcast_shapes, NodeCx, BOOL, FLOAT};
use crate::model::onnx::OnnxError;

pub(super) fn compare(
    cx: &mut NodeCx<'_>,
    op: Opcode,
    swap: bool,
    types: &[i32],
) -> Result<(), OnnxError> {
    let (a, b) = (cx.data_of_types(0, types)?, cx.data_of_types(1, types)?);
    let (a, b) = if swap { (b, a) } else { (a, b) };
    let y = cx.elementwise(op, &[a, b])?;
    cx.set_output(0, y, BOOL)
}

pub(super) fn equal(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    compare(cx, Opcode::Equal, false, &[FLOAT, BOOL])
}

pub(super) fn greater(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    compare(cx, Opcode::Greater, false, &[FLOAT])
}

pub(super) fn greater_or_equal(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    compare(cx, Opcode::GreaterEqual, false, &[FLOAT])
}

pub(super) fn less(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    compare(cx, Opcode::Greater, true, &[FLOAT])
}

pub(super) fn less_or_equal(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    compare(cx, Opcode::GreaterEqual, true, &[FLOAT])
}

pub(super) fn where_(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let c = cx.data_of_types(0, &[BOOL, FLOAT])?;
    let (x, y) = (cx.data(1)?, cx.data(2)?);
    let out = cx.elementwise(Opcode::Select, &[c, x, y])?;
    cx.set_output(0, out, FLOAT)
}

/// Folds a variadic operator left to right over its inputs.
pub(super) fn variadic(cx: &mut NodeCx<'_>, op: Opcode) -> Result<(), OnnxError> {
    let n = cx.num_inputs();
    if n == 0 {
        return Err(cx.invalid("no inputs"));
    }
    let mut acc = cx.data(0)?;
    for i in 1..n {
        let x = cx.data(i)?;
        acc = cx.elementwise(op, &[acc, x])?;
    }
    if n == 1 {
        // One input: the value itself, copied so that the output is a node of its own.
        let s = cx.shape(acc)?;
        acc = cx.push(Opcode::Reshape, Attr::target(s), &[acc])?;
    }
    cx.set_output(0, acc, FLOAT)
}

pub(super) fn max(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    variadic(cx, Opcode::Maximum)
}

pub(super) fn min(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    variadic(cx, Opcode::Minimum)
}

pub(super) fn sum(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    variadic(cx, Opcode::Add)
}

pub(super) fn pow(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let p = cx.const_floats(1, "the exponent")?;
    let Some(&p0) = p.first() else {
        return Err(cx.invalid("an empty exponent"));
    };
    if p.iter().any(|v| v.to_bits() != p0.to_bits()) {
        return Err(cx.unsupported(
            "an exponent tensor whose elements differ",
            "one exponent known at plan time (all elements equal)",
        ));
    }
    let exp_dims = cx.known(1).map(|t| t.dims.clone()).unwrap_or_default();
    let xs = cx.shape(x)?;
    let es = cx.shape_from(&exp_dims)?;
    let out_shape = broadcast_shapes(xs, es)
        .ok_or_else(|| cx.invalid(format!("shapes {xs} and {es} do not broadcast")))?;
    let xb = cx.broadcast(x, out_shape)?;
    let y = cx.push(Opcode::Pow, Attr::Pow(p0), &[xb])?;
    cx.set_output(0, y, FLOAT)
}

pub(super) fn reciprocal(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let s = cx.shape(x)?;
    let one = cx.fill(1.0, s)?;
    let y = cx.push(Opcode::Div, Attr::NONE, &[one, x])?;
    cx.set_output(0, y, FLOAT)
}

pub(super) fn leaky_relu(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let alpha = cx.attr_float("alpha", 0.01);
    let y = cx.record(|t| t.leaky_relu(&x, alpha))?;
    cx.set_output(0, y, FLOAT)
}

pub(super) fn hard_sigmoid(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let (alpha, beta) = (cx.attr_float("alpha", 0.2), cx.attr_float("beta", 0.5));
    let y = cx.record(|t| t.hardsigmoid(&x, alpha, beta))?;
    cx.set_output(0, y, FLOAT)
}

pub(super) fn hard_swish(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let y = cx.record(|t| t.hardswish(&x))?;
    cx.set_output(0, y, FLOAT)
}

pub(super) fn gelu(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let y = match cx.attr_string("approximate", "none").as_str() {
        "none" => cx.record(|t| t.gelu(&x))?,
        "tanh" => cx.record(|t| t.gelu_tanh(&x))?,
        other => {
            return Err(cx.unsupported(
                format!("approximate {other:?}"),
                "approximate \"none\" and \"tanh\"",
            ))
        }
    };
    cx.set_output(0, y, FLOAT)
}

/// A bound of `Clip`: an attribute before opset 11, an optional input after; `None` when absent.
pub(super) enum Bound {
    Known(f32),
    Data(NodeId),
}

pub(super) fn clip_bound(
    cx: &mut NodeCx<'_>,
    i: usize,
    attr: &str,
) -> Result<Option<Bound>, OnnxError> {
    if cx.opset() < 11 {
        let present = cx.attribute_names().any(|a| a == attr);
        return Ok(present.then(|| Bound::Known(cx.attr_float(attr, 0.0))));
    }
    if !cx.has_input(i) {
        return Ok(None);
    }
    if cx.known(i).is_some() {
        let v = cx.const_floats(i, attr)?;
        let [v] = v[..] else {
            return Err(cx.invalid(format!("{attr} has {} elements, not 1", v.len())));
        };
        return Ok(Some(Bound::Known(v)));
    }
    Ok(Some(Bound::Data(cx.data(i)?)))
}

pub(super) fn clip(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let lo = clip_bound(cx, 1, "min")?;
    let hi = clip_bound(cx, 2, "max")?;
    let y = match (&lo, &hi) {
        (Some(Bound::Known(a)), Some(Bound::Known(b))) => {
            let (a, b) = (*a, *b);
            cx.record(|t| t.clamp(&x, a, b))?
        }
        _ => {
            let mut y = x;
            for (bound, op) in [(lo, Opcode::Maximum), (hi, Opcode::Minimum)] {
                let b = match bound {
                    None => continue,
                    Some(Bound::Known(v)) => {
                        let s = cx.shape(x)?;
                        cx.fill(v, s)?
                    }
                    Some(Bound::Data(b)) => b,
                };
                y = cx.elementwise(op, &[y, b])?;
            }
            if y == x {
                let s = cx.shape(x)?;
                y = cx.push(Opcode::Reshape, Attr::target(s), &[x])?;
            }
            y
        }
    };
    cx.set_output(0, y, FLOAT)
}
