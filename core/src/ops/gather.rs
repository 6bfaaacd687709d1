//! `gather(data, indices)`: ONNX's `Gather` along one axis (the attribute `Axis`), and so the
//! embedding lookup (`gather(table, ids)` along axis 0 of a table `[V, D]`, PyTorch's
//! `nn.Embedding` / `F.embedding`). The output's shape is
//! `data[..axis] ++ indices ++ data[axis + 1..]`: each index picks one slice of `data` along the
//! axis.
//!
//! Indices are integers stored as `f32` (as `one_hot`'s labels). An index `i` of an axis of
//! extent `n` is **valid** when it is an integer in `[-n, n)`; a negative one counts from the end
//! (`i + n`, ONNX's rule). An invalid index (a fraction, out of range, an infinity, NaN) gives a
//! slice of zeros (`+0`): bad data never reads outside the tensor and never fails the run.
//!
//! An instruction: no composition of the others picks rows by a runtime index (a `one_hot`
//! matrix product would, at `V` times the work and the arena, and with `0 * inf = NaN` leaking
//! from non-finite rows). Rule: `data̅ += scatter_add(indices, ḡ, axis, shape(data))`
//! ([`super::scatter_add`], whose rule is `gather`: the two close); nothing for `indices`.

use super::slice::outer_inner;
use super::{nth, want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape, MAX_RANK};

/// The axis of an `Axis` or `AxisTo` attribute.
pub(crate) fn axis_of(attr: Attr) -> usize {
    match attr {
        Attr::Axis(a) | Attr::AxisTo(a, _) => a,
        _ => 0,
    }
}

/// `data[..axis] ++ indices ++ data[axis + 1..]`, or `None` when the axis is not below `data`'s
/// rank or the rank would exceed [`MAX_RANK`].
pub(crate) fn gathered_shape(data: Shape, indices: Shape, axis: usize) -> Option<Shape> {
    if axis >= data.rank() {
        return None;
    }
    let rank = data.rank() - 1 + indices.rank();
    if rank > MAX_RANK {
        return None;
    }
    let (d, i) = (data.dims(), indices.dims());
    let mut out = [0usize; MAX_RANK];
    out[..axis].copy_from_slice(&d[..axis]);
    out[axis..axis + indices.rank()].copy_from_slice(&i[..indices.rank()]);
    out[axis + indices.rank()..rank].copy_from_slice(&d[axis + 1..data.rank()]);
    Shape::new(&out[..rank]).ok()
}

/// The shape rule: `data[..axis] ++ indices ++ data[axis + 1..]`.
///
/// # Errors
/// [`OpError::ShapeMismatch`] (naming `data` and `indices`) when the axis is not below `data`'s
/// rank or the output's rank would exceed [`MAX_RANK`].
#[inline(always)]
pub(crate) fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let (data, indices) = (nth(args, 0), nth(args, 1));
    gathered_shape(data, indices, axis_of(attr)).ok_or(OpError::ShapeMismatch {
        op,
        lhs: data,
        rhs: indices,
    })
}

/// The position an index stored as an element selects along an axis of extent `n`: `Some` for
/// an integer in `[-n, n)` (a negative one counts from the end), `None` for anything else.
pub fn index_of<E: Element>(v: E, n: usize) -> Option<usize> {
    let f = v.to_f64();
    let n_f = n as f64;
    if !(f >= -n_f && f < n_f) || f != (f as i64) as f64 {
        return None;
    }
    let i = f as i64;
    let i = if i < 0 { i + n as i64 } else { i };
    usize::try_from(i).ok().filter(|&i| i < n)
}

/// The reference kernel: `data: [outer, n, inner]` around the axis, `indices` flat (`m` of
/// them), `out: [outer, m, inner]`; `out[o, j, :] = data[o, index(indices[j]), :]`, or `+0` for an
/// invalid index. Exact: a copy.
pub fn kernel<E: Element>(
    data: &[E],
    data_shape: Shape,
    indices: &[E],
    out: &mut [E],
    axis: usize,
) {
    if axis >= data_shape.rank() {
        return;
    }
    let (outer, inner) = outer_inner(data_shape, axis);
    let n = data_shape.dim(axis).unwrap_or(0);
    let m = indices.len();
    for o in 0..outer {
        for (j, &v) in indices.iter().enumerate() {
            let at = (o * m + j) * inner;
            let Some(dst) = out.get_mut(at..at + inner) else {
                return;
            };
            let src = index_of(v, n).and_then(|i| {
                let from = (o * n + i) * inner;
                data.get(from..from + inner)
            });
            match src {
                Some(src) => dst.copy_from_slice(src),
                None => dst.iter_mut().for_each(|d| *d = E::ZERO),
            }
        }
    }
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    kernel(k.arg(0), k.shape(0), k.arg(1), k.out, axis_of(k.attr));
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let s = r.shape_of(v.args[0]);
    let axis = axis_of(v.attr);
    let d = want(v.wants[0], || {
        r.scatter_add(v.args[1], v.cotangent, axis, s)
    })?;
    Ok([d, None, None])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedding_rows_negative_and_invalid_indices() {
        // A table [4, 2]; indices 2, -1 (the last row), 0, and four invalid ones.
        let table = [0., 1., 10., 11., 20., 21., 30., 31.];
        let ids = [2., -1., 0., 4., -5., 1.5, f32::NAN];
        let s = Shape::matrix(4, 2);
        let out_shape = infer(Opcode::Gather, Attr::Axis(0), &[s, Shape::vector(7)]).unwrap();
        assert_eq!(out_shape, Shape::matrix(7, 2));
        let mut out = [9.0f32; 14];
        kernel(&table, s, &ids, &mut out, 0);
        assert_eq!(
            out,
            [20., 21., 30., 31., 0., 1., 0., 0., 0., 0., 0., 0., 0., 0.]
        );
        assert_eq!(index_of(f32::INFINITY, 4), None);
        assert_eq!(index_of(-0.0f32, 4), Some(0));
    }

    #[test]
    fn onnx_gather_along_axis_1() {
        // ONNX's example: data [3, 3], indices [[0, 2]] along axis 1 -> [3, 1, 2].
        let data = [1.0, 1.2, 1.9, 2.3, 3.4, 3.9, 4.5, 5.7, 5.9];
        let (s, is) = (Shape::matrix(3, 3), Shape::matrix(1, 2));
        let o = infer(Opcode::Gather, Attr::Axis(1), &[s, is]).unwrap();
        assert_eq!(o, Shape::new(&[3, 1, 2]).unwrap());
        let mut out = [0.0f32; 6];
        kernel(&data, s, &[0., 2.], &mut out, 1);
        assert_eq!(out, [1.0, 1.9, 2.3, 3.9, 4.5, 5.9]);
        // Rank beyond 4, or an axis beyond the rank: refused.
        let big = Shape::new(&[2, 2, 2]).unwrap();
        assert!(infer(Opcode::Gather, Attr::Axis(0), &[big, big]).is_err());
        assert!(infer(Opcode::Gather, Attr::Axis(2), &[s, is]).is_err());
    }
}
