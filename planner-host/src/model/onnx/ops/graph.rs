//! Constants, shapes and casts: `Identity`, `Constant`, `Shape`, `Size`, `ConstantOfShape`, `Cast`, `CastLike`.

use tapeplan_core::{Attr, Opcode};

use super::checked_product;
use super::layout::known_ints;
use crate::model::onnx::proto::tensor_proto::DataType;
use crate::model::onnx::tensor::{data_type_name, Elements, TensorData};
use crate::model::onnx::translate::{dims_of, NodeCx, BOOL, FLOAT};
use crate::model::onnx::OnnxError;

pub(super) fn identity(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    cx.alias_output(0, 0)
}

pub(super) fn constant(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let data = if let Some(t) = cx.attr_tensor("value")? {
        t
    } else if cx.attribute_names().any(|a| a == "value_float") {
        TensorData::f32(vec![], vec![cx.attr_float("value_float", 0.0)])
    } else if let Some(v) = cx
        .node()
        .attribute
        .iter()
        .find(|a| a.name() == "value_floats")
    {
        TensorData::f32(vec![v.floats.len()], v.floats.clone())
    } else if cx.attribute_names().any(|a| a == "value_int") {
        TensorData::i64(vec![], vec![cx.attr_int("value_int", 0)])
    } else if let Some(v) = cx.attr_ints("value_ints") {
        TensorData::i64(vec![v.len()], v)
    } else {
        return Err(cx.unsupported(
            "a Constant without a tensor, float or int value",
            "value, value_float(s), value_int(s)",
        ));
    };
    cx.set_known_output(0, data)
}

pub(super) fn shape(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let dims: Vec<i64> = match cx.known(0) {
        Some(t) => t.dims.iter().map(|&d| d as i64).collect(),
        None => {
            let x = cx.data_of_types(0, &[FLOAT, BOOL])?;
            dims_of(cx.shape(x)?).iter().map(|&d| d as i64).collect()
        }
    };
    let r = dims.len() as i64;
    let clamp = |v: i64| (if v < 0 { v.saturating_add(r) } else { v }).clamp(0, r) as usize;
    let start = clamp(cx.attr_int("start", 0));
    let end = clamp(cx.attr_int("end", r));
    let part = dims.get(start..end.max(start)).unwrap_or(&[]).to_vec();
    cx.set_known_output(0, TensorData::i64(vec![part.len()], part))
}

pub(super) fn size(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let n = match cx.known(0) {
        Some(t) => checked_product(&t.dims).ok_or_else(|| cx.invalid("extents overflow"))?,
        None => {
            let x = cx.data_of_types(0, &[FLOAT, BOOL])?;
            cx.shape(x)?.elems()
        }
    };
    cx.set_known_output(0, TensorData::i64(vec![], vec![n as i64]))
}

pub(super) fn constant_of_shape(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let dims: Vec<usize> = cx
        .const_ints(0, "the shape")?
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| cx.invalid(format!("extent {d}"))))
        .collect::<Result<_, _>>()?;
    let n = checked_product(&dims)
        .filter(|&n| n <= 1 << 24)
        .ok_or_else(|| cx.unsupported(format!("extents {dims:?}"), "at most 2^24 elements"))?;
    let value = cx
        .attr_tensor("value")?
        .unwrap_or_else(|| TensorData::f32(vec![1], vec![0.0]));
    let mut out = match &value.elements {
        Elements::F32(v) if v.len() == 1 => TensorData::f32(vec![], vec![v[0]; n]),
        Elements::Int(v) if v.len() == 1 => {
            value.with_elements(value.data_type, Elements::Int(vec![v[0]; n]))
        }
        _ => {
            return Err(cx.unsupported(
                format!(
                    "a value of type {} and {} elements",
                    value.type_name(),
                    value.dims.iter().product::<usize>()
                ),
                "one FLOAT or integer value",
            ))
        }
    };
    out.dims = dims;
    cx.set_known_output(0, out)
}

pub(super) fn cast(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let to = cx.attr_int("to", 0) as i32;
    cast_to(cx, to)
}

pub(super) fn cast_like(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let to = cx.input_type(1)?;
    cast_to(cx, to)
}

/// Input 0 cast to element type `to` (`Cast`'s attribute, `CastLike`'s second input's type).
pub(super) fn cast_to(cx: &mut NodeCx<'_>, to: i32) -> Result<(), OnnxError> {
    if let Some(k) = cx.known(0).filter(|t| t.data_type == FLOAT && to == FLOAT) {
        // A constant cast to its own type (a function body's `CastLike` of a constant to the
        // input's type): still known at plan time.
        let k = k.clone();
        return cx.set_known_output(0, k);
    }
    if let Some(k) = known_ints(cx, 0) {
        let Elements::Int(v) = &k.elements else {
            return Err(cx.invalid("not integers"));
        };
        let out = match to {
            FLOAT => TensorData::f32(k.dims.clone(), v.iter().map(|&x| x as f32).collect()),
            t if matches!(DataType::try_from(t), Ok(DataType::Int64 | DataType::Int32)) => {
                k.with_elements(t, Elements::Int(v.clone()))
            }
            t => {
                return Err(cx.unsupported(
                    format!("a cast of known integers to {}", data_type_name(t)),
                    "FLOAT, INT32, INT64",
                ))
            }
        };
        return cx.set_known_output(0, out);
    }
    let from = cx.input_type(0)?;
    if to != FLOAT || !matches!(from, FLOAT | BOOL) {
        return Err(cx.unsupported(
            format!(
                "a cast from {} to {}",
                data_type_name(from),
                data_type_name(to)
            ),
            "casts to FLOAT from FLOAT or BOOL (masks are already 0/1 in f32)",
        ));
    }
    let x = cx.data_of_types(0, &[FLOAT, BOOL])?;
    let s = cx.shape(x)?;
    let y = cx.push(Opcode::Reshape, Attr::target(s), &[x])?;
    cx.set_output(0, y, FLOAT)
}
