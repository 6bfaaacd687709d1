//! Layout and indexing: `Transpose`, `Reshape`, `Flatten`, `Squeeze`, `Unsqueeze`, `Concat`, `Slice`, `Pad`, `Gather`; integer shape arithmetic is folded at plan time.

use tapeplan_core::{Attr, NodeId, Opcode, Recordable, Shape};

use super::checked_product;
use crate::model::onnx::tensor::{Elements, TensorData};
use crate::model::onnx::translate::{dims_of, NodeCx, BOOL, FLOAT, INT32, INT64};
use crate::model::onnx::OnnxError;

pub(super) fn transpose(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let s = cx.shape(x)?;
    let dims = dims_of(s);
    let r = dims.len();
    let perm: Vec<usize> = match cx.attr_ints("perm") {
        Some(p) => p
            .iter()
            .map(|&a| cx.axis(a, r))
            .collect::<Result<Vec<usize>, OnnxError>>()?,
        None => (0..r).rev().collect(),
    };
    let mut seen = vec![false; r];
    if perm.len() != r || perm.iter().any(|&a| std::mem::replace(&mut seen[a], true)) {
        return Err(cx.invalid(format!("perm {perm:?} is not a permutation of {r} axes")));
    }
    let mut budget = MAX_TRANSPOSE_SLICES;
    let y = permute(cx, x, &perm, &mut budget)?;
    let y = if y == x {
        let out_shape = cx.shape(y)?;
        cx.push(Opcode::Reshape, Attr::target(out_shape), &[x])?
    } else {
        y
    };
    cx.set_output(0, y, FLOAT)
}

/// The most `slice` instructions a transpose outside the block swaps may take.
pub const MAX_TRANSPOSE_SLICES: usize = 64;

/// `x` with its axes permuted (`out` axis `i` is `x`'s axis `perm[i]`), every element copied.
///
/// Leaving out extent-1 axes (they do not move elements), the identity is a `reshape` and a
/// rotation (the first `k` axes, as one block of rows, swapped with the others) one `transpose`
/// between `reshape`s. Any other permutation slices `x` along the axis that becomes the first
/// (one slice per index), permutes each slice (one axis fewer to move) and concatenates them:
/// at most `budget` slices in all.
pub(super) fn permute(
    cx: &mut NodeCx<'_>,
    x: NodeId,
    perm: &[usize],
    budget: &mut usize,
) -> Result<NodeId, OnnxError> {
    let s = cx.shape(x)?;
    let dims = dims_of(s);
    let out_dims: Vec<usize> = perm.iter().map(|&a| dims[a]).collect();
    let out_shape = cx.shape_from(&out_dims)?;
    let big: Vec<usize> = (0..dims.len()).filter(|&a| dims[a] > 1).collect();
    let q: Vec<usize> = perm
        .iter()
        .filter(|&&a| dims[a] > 1)
        .map(|a| big.iter().position(|b| b == a).unwrap_or(0))
        .collect();
    let m = q.len();
    if q.iter().enumerate().all(|(i, &v)| i == v) {
        return cx.reshape(x, out_shape);
    }
    if let Some(k) = q
        .first()
        .copied()
        .filter(|&k| (0..m).all(|i| q[i] == (k + i) % m))
    {
        let rows: usize = big[..k].iter().map(|&a| dims[a]).product();
        let cols: usize = big[k..].iter().map(|&a| dims[a]).product();
        let x2 = cx.reshape(x, Shape::matrix(rows, cols))?;
        let t = cx.push(Opcode::Transpose, Attr::NONE, &[x2])?;
        return cx.reshape(t, out_shape);
    }
    // The first output axis of extent > 1 comes from `a`: slice along it.
    let (lead, a) = perm
        .iter()
        .enumerate()
        .find(|&(_, &a)| dims[a] > 1)
        .map(|(i, &a)| (i, a))
        .ok_or_else(|| cx.invalid("no axis to move"))?;
    if dims[a] > *budget {
        return Err(cx.unsupported(
            format!("perm {perm:?} of shape {s}"),
            format!(
                "permutations that swap two blocks of axes (every rank-2 transpose), and others that take at most {MAX_TRANSPOSE_SLICES} slices"
            ),
        ));
    }
    *budget -= dims[a];
    let mut acc: Option<NodeId> = None;
    for i in 0..dims[a] {
        let piece = cx.push(
            Opcode::Slice,
            Attr::Window {
                axis: a,
                start: i,
                len: 1,
            },
            &[x],
        )?;
        let p = permute(cx, piece, perm, budget)?;
        acc = Some(match acc {
            None => p,
            Some(prev) => cx.push(Opcode::Concat, Attr::Axis(lead), &[prev, p])?,
        });
    }
    acc.ok_or_else(|| cx.invalid("an empty axis"))
}

/// Output `0` is input `0` (of `FLOAT` or `BOOL` type) with extents `dims` (a copy).
pub(super) fn reshaped(cx: &mut NodeCx<'_>, dims: &[usize]) -> Result<(), OnnxError> {
    if let Some(k) = known_ints(cx, 0) {
        // Shape arithmetic (torch's flatten: Shape → Gather → Unsqueeze → Concat → Reshape):
        // folded at plan time.
        if Some(k.len()) != checked_product(dims) {
            return Err(cx.invalid(format!("extents {dims:?} do not hold {} elements", k.len())));
        }
        let mut t = k;
        t.dims = dims.to_vec();
        return cx.set_known_output(0, t);
    }
    let t = cx.input_type(0)?;
    let x = cx.data_of_types(0, &[FLOAT, BOOL])?;
    let shape = cx.shape_from(dims)?;
    if shape.elems() != cx.shape(x)?.elems() {
        return Err(cx.invalid(format!(
            "extents {dims:?} do not hold the {} elements of {}",
            cx.shape(x)?.elems(),
            cx.shape(x)?
        )));
    }
    let y = cx.push(Opcode::Reshape, Attr::target(shape), &[x])?;
    cx.set_output(0, y, t)
}

/// The extents of input `0` (known or on the tape) without making it a tape leaf.
pub(super) fn input_dims(cx: &mut NodeCx<'_>) -> Result<Vec<usize>, OnnxError> {
    if let Some(t) = cx.known(0) {
        return Ok(t.dims.clone());
    }
    let x = cx.data_of_types(0, &[FLOAT, BOOL])?;
    Ok(dims_of(cx.shape(x)?))
}

pub(super) fn reshape(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let dims = input_dims(cx)?;
    let target = cx.const_ints(1, "the shape")?;
    let allowzero = cx.attr_int("allowzero", 0) != 0;
    let mut out = Vec::with_capacity(target.len());
    let mut infer = None;
    for (k, &t) in target.iter().enumerate() {
        match t {
            -1 if infer.is_none() => {
                infer = Some(k);
                out.push(1);
            }
            0 if !allowzero => {
                out.push(*dims.get(k).ok_or_else(|| {
                    cx.invalid(format!("shape {target:?}: no extent {k} to copy"))
                })?)
            }
            t if t >= 0 => out.push(usize::try_from(t).unwrap_or(usize::MAX)),
            _ => return Err(cx.invalid(format!("shape {target:?}"))),
        }
    }
    let total: usize = dims.iter().product();
    if let Some(k) = infer {
        let rest = checked_product(&out).unwrap_or(0);
        if rest == 0 || !total.is_multiple_of(rest) {
            return Err(cx.invalid(format!("shape {target:?} does not divide {total} elements")));
        }
        out[k] = total / rest;
    }
    reshaped(cx, &out)
}

pub(super) fn flatten(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let dims = input_dims(cx)?;
    let r = dims.len();
    let a = cx.attr_int("axis", 1);
    let axis = if a == r as i64 {
        r
    } else {
        cx.axis(a, r.max(1))?
    };
    let rows: usize = dims[..axis.min(r)].iter().product();
    let cols: usize = dims[axis.min(r)..].iter().product();
    reshaped(cx, &[rows, cols])
}

/// Axes from input 1 (newer opsets) or the `axes` attribute (older ones); `None` when neither.
pub(super) fn axes_list(cx: &NodeCx<'_>) -> Result<Option<Vec<i64>>, OnnxError> {
    if cx.has_input(1) {
        return cx.const_ints(1, "the axes").map(Some);
    }
    Ok(cx.attr_ints("axes"))
}

pub(super) fn squeeze(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let dims = input_dims(cx)?;
    let r = dims.len();
    let axes: Vec<usize> = match axes_list(cx)? {
        Some(a) => a.iter().map(|&v| cx.axis(v, r)).collect::<Result<_, _>>()?,
        None => (0..r).filter(|&a| dims[a] == 1).collect(),
    };
    if let Some(&a) = axes.iter().find(|&&a| dims[a] != 1) {
        return Err(cx.invalid(format!("axis {a} has extent {}, not 1", dims[a])));
    }
    let out: Vec<usize> = (0..r)
        .filter(|a| !axes.contains(a))
        .map(|a| dims[a])
        .collect();
    reshaped(cx, &out)
}

pub(super) fn unsqueeze(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let dims = input_dims(cx)?;
    let axes = axes_list(cx)?.ok_or_else(|| cx.invalid("no axes"))?;
    let r = dims.len() + axes.len();
    let axes: Vec<usize> = axes
        .iter()
        .map(|&v| cx.axis(v, r))
        .collect::<Result<_, _>>()?;
    let mut rest = dims.iter();
    let mut out = Vec::with_capacity(r);
    for a in 0..r {
        if axes.contains(&a) {
            out.push(1);
        } else {
            out.push(*rest.next().ok_or_else(|| cx.invalid("repeated axes"))?);
        }
    }
    reshaped(cx, &out)
}

/// Input `i` when it is an integer tensor known at plan time (shape arithmetic, folded).
pub(super) fn known_ints(cx: &NodeCx<'_>, i: usize) -> Option<TensorData> {
    cx.known(i)
        .filter(|t| matches!(t.elements, Elements::Int(_)))
        .cloned()
}

/// Integer tensors known at plan time concatenated along `axis`.
pub(super) fn concat_known(
    cx: &NodeCx<'_>,
    parts: &[TensorData],
    axis: i64,
) -> Result<TensorData, OnnxError> {
    let first = &parts[0];
    let r = first.dims.len();
    let axis = cx.axis(axis, r)?;
    let mut dims = first.dims.clone();
    dims[axis] = 0;
    let outer: usize = first.dims[..axis].iter().product();
    let mut chunks = Vec::new();
    for p in parts {
        let same = p.dims.len() == r && (0..r).all(|a| a == axis || p.dims[a] == first.dims[a]);
        let Elements::Int(v) = &p.elements else {
            return Err(cx.invalid("mixed element types"));
        };
        if !same {
            return Err(cx.invalid(format!("extents {:?} and {:?}", first.dims, p.dims)));
        }
        dims[axis] += p.dims[axis];
        chunks.push((v, p.dims[axis..].iter().product::<usize>()));
    }
    let mut out = Vec::new();
    for o in 0..outer {
        for (v, width) in &chunks {
            let part = v
                .get(o * width..(o + 1) * width)
                .ok_or_else(|| cx.invalid("elements do not match the extents"))?;
            out.extend_from_slice(part);
        }
    }
    let mut t = first.with_elements(first.data_type, Elements::Int(out));
    t.dims = dims;
    Ok(t)
}

pub(super) fn concat(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let n = cx.num_inputs();
    let known: Vec<TensorData> = (0..n).filter_map(|i| known_ints(cx, i)).collect();
    if n > 0 && known.len() == n {
        let out = concat_known(cx, &known, cx.attr_int("axis", 0))?;
        return cx.set_known_output(0, out);
    }
    let mut acc = cx.data(0)?;
    let r = cx.shape(acc)?.rank();
    let axis = cx.axis(cx.attr_int("axis", 0), r)?;
    for i in 1..n {
        let x = cx.data(i)?;
        acc = cx.push(Opcode::Concat, Attr::Axis(axis), &[acc, x])?;
    }
    if n == 1 {
        let s = cx.shape(acc)?;
        acc = cx.push(Opcode::Reshape, Attr::target(s), &[acc])?;
    }
    cx.set_output(0, acc, FLOAT)
}

/// `x` cut to `[start, start + len)` along `axis` (nothing when that is the whole extent).
pub(super) fn window(
    cx: &mut NodeCx<'_>,
    x: NodeId,
    axis: usize,
    start: usize,
    len: usize,
) -> Result<NodeId, OnnxError> {
    if start == 0 && cx.shape(x)?.dim(axis) == Some(len) {
        return Ok(x);
    }
    cx.push(Opcode::Slice, Attr::Window { axis, start, len }, &[x])
}

pub(super) fn slice(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let mut x = cx.data(0)?;
    let dims = dims_of(cx.shape(x)?);
    let r = dims.len();
    let (starts, ends, axes, steps) = if cx.opset() < 10 {
        let s = cx
            .attr_ints("starts")
            .ok_or_else(|| cx.invalid("no starts"))?;
        let e = cx.attr_ints("ends").ok_or_else(|| cx.invalid("no ends"))?;
        (s, e, cx.attr_ints("axes"), None)
    } else {
        let s = cx.const_ints(1, "starts")?;
        let e = cx.const_ints(2, "ends")?;
        let a = if cx.has_input(3) {
            Some(cx.const_ints(3, "axes")?)
        } else {
            None
        };
        let st = if cx.has_input(4) {
            Some(cx.const_ints(4, "steps")?)
        } else {
            None
        };
        (s, e, a, st)
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    if starts.len() != ends.len() || axes.len() != starts.len() {
        return Err(cx.invalid("starts, ends and axes differ in length"));
    }
    if let Some(st) = &steps {
        if st.len() != starts.len() {
            return Err(cx.invalid("steps and starts differ in length"));
        }
        if let Some(bad) = st.iter().find(|&&v| v != 1) {
            return Err(cx.unsupported(format!("step {bad}"), "steps of 1"));
        }
    }
    for k in 0..starts.len() {
        let axis = cx.axis(axes[k], r)?;
        let d = dims[axis] as i64;
        let clamp = |v: i64| (if v < 0 { v.saturating_add(d) } else { v }).clamp(0, d);
        let (s, e) = (clamp(starts[k]), clamp(ends[k]));
        if e <= s {
            return Err(cx.unsupported(
                format!("an empty slice along axis {axis}"),
                "non-empty slices (zero-extent tensors are not planned)",
            ));
        }
        x = window(cx, x, axis, s as usize, (e - s) as usize)?;
    }
    if x == cx.data(0)? {
        let s = cx.shape(x)?;
        x = cx.push(Opcode::Reshape, Attr::target(s), &[x])?;
    }
    cx.set_output(0, x, FLOAT)
}

pub(super) fn pad(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let mode = cx.attr_string("mode", "constant");
    if mode != "constant" {
        return Err(cx.unsupported(format!("mode {mode:?}"), "mode \"constant\""));
    }
    let x0 = cx.data(0)?;
    let dims = dims_of(cx.shape(x0)?);
    let r = dims.len();
    let (pads, value) = if cx.opset() < 11 {
        let p = cx.attr_ints("pads").ok_or_else(|| cx.invalid("no pads"))?;
        (p, cx.attr_float("value", 0.0))
    } else {
        let p = cx.const_ints(1, "the pads")?;
        let v = if cx.has_input(2) {
            *cx.const_floats(2, "the constant value")?
                .first()
                .unwrap_or(&0.0)
        } else {
            0.0
        };
        (p, v)
    };
    let axes: Vec<usize> = if cx.has_input(3) {
        cx.const_ints(3, "the axes")?
            .iter()
            .map(|&a| cx.axis(a, r))
            .collect::<Result<_, _>>()?
    } else {
        (0..r).collect()
    };
    if pads.len() != 2 * axes.len() {
        return Err(cx.invalid(format!("{} pads for {} axes", pads.len(), axes.len())));
    }
    let n = axes.len();
    let mut x = x0;
    // Negative pads cut, first; then the zero pads, which a mask of ones replays for a non-zero
    // value.
    for (k, &axis) in axes.iter().enumerate() {
        let cut = |p: i64| p.saturating_neg().max(0);
        let (cut_b, cut_e) = (cut(pads[k]), cut(pads[k + n]));
        let d = cx.shape(x)?.dim(axis).unwrap_or(0) as i64;
        if cut_b.saturating_add(cut_e) >= d {
            return Err(cx.unsupported(
                format!("pads {pads:?} leave nothing along axis {axis}"),
                "non-empty results",
            ));
        }
        x = window(cx, x, axis, cut_b as usize, (d - cut_b - cut_e) as usize)?;
    }
    let cut_shape = cx.shape(x)?;
    let mut windows = Vec::new();
    for (k, &axis) in axes.iter().enumerate() {
        let add = |p: i64| usize::try_from(p.max(0)).unwrap_or(usize::MAX);
        let (add_b, add_e) = (add(pads[k]), add(pads[k + n]));
        if add_b > 0 || add_e > 0 {
            let d = cx.shape(x)?.dim(axis).unwrap_or(0);
            let len = d
                .checked_add(add_b)
                .and_then(|l| l.checked_add(add_e))
                .ok_or_else(|| cx.invalid(format!("pads {pads:?} overflow")))?;
            let w = Attr::Window {
                axis,
                start: add_b,
                len,
            };
            windows.push(w);
            x = cx.push(Opcode::Pad, w, &[x])?;
        }
    }
    if value.to_bits() != 0.0f32.to_bits() && !windows.is_empty() {
        // `select(pad(ones), pad(x), value)`: `x` where it was, the value in the padding, every
        // bit exact (`-0.0` and NaN included).
        let mut mask = cx.fill(1.0, cut_shape)?;
        for &w in &windows {
            mask = cx.push(Opcode::Pad, w, &[mask])?;
        }
        let out_shape = cx.shape(x)?;
        let v = cx.fill(value, out_shape)?;
        x = cx.push(Opcode::Select, Attr::NONE, &[mask, x, v])?;
    }
    if x == x0 {
        let s = cx.shape(x)?;
        x = cx.push(Opcode::Reshape, Attr::target(s), &[x])?;
    }
    cx.set_output(0, x, FLOAT)
}

pub(super) fn gather(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let (Some(data), Some(idx)) = (known_ints(cx, 0), known_ints(cx, 1)) else {
        let x = cx.data(0)?;
        let i = cx.data_of_types(1, &[INT64, INT32])?;
        let r = cx.shape(x)?.rank();
        let axis = cx.axis(cx.attr_int("axis", 0), r)?;
        let y = cx.record(|t| t.gather(&x, &i, axis))?;
        return cx.set_output(0, y, FLOAT);
    };
    let (Elements::Int(v), Elements::Int(ix)) = (&data.elements, &idx.elements) else {
        return Err(cx.invalid("not integers"));
    };
    let r = data.dims.len();
    let axis = cx.axis(cx.attr_int("axis", 0), r)?;
    let n = data.dims[axis] as i64;
    let outer: usize = data.dims[..axis].iter().product();
    let inner: usize = data.dims[axis + 1..].iter().product();
    let mut out = Vec::with_capacity(outer * ix.len() * inner);
    for o in 0..outer {
        for &i in ix {
            let j = if i < 0 { i + n } else { i };
            if !(0..n).contains(&j) {
                return Err(cx.invalid(format!("index {i} outside [-{n}, {n})")));
            }
            let start = (o * n as usize + j as usize) * inner;
            let part = v
                .get(start..start + inner)
                .ok_or_else(|| cx.invalid("elements do not match the extents"))?;
            out.extend_from_slice(part);
        }
    }
    let mut dims = data.dims[..axis].to_vec();
    dims.extend_from_slice(&idx.dims);
    dims.extend_from_slice(&data.dims[axis + 1..]);
    let mut t = data.with_elements(data.data_type, Elements::Int(out));
    t.dims = dims;
    cx.set_known_output(0, t)
}
