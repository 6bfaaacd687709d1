//! `slice`: a contiguous range `[start, start + len)` of `x` along one axis; the output shape is
//! `x`'s with that axis's extent replaced by `len`. The attribute is
//! [`Attr::Window`]` { axis, start, len }`. Exact: a copy.
//!
//! Rule: `x̄ += pad(ḡ, axis, start, shape(x))`.

use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// `(axis, start, len)` of a window attribute (zeros for another kind, which [`super::infer`]
/// has rejected before any caller gets here).
pub(crate) fn window(attr: Attr) -> (usize, usize, usize) {
    match attr {
        Attr::Window { axis, start, len } => (axis, start, len),
        _ => (0, 0, 0),
    }
}

/// `s` with its extent along `axis` replaced by `len`.
pub(crate) fn with_extent(op: Opcode, s: Shape, axis: usize, len: usize) -> Result<Shape, OpError> {
    if axis >= s.rank() {
        return Err(OpError::BadTarget { op, from: s, to: s });
    }
    let mut d = s.dims();
    d[axis] = len;
    Ok(Shape::new(&d[..s.rank()])?)
}

/// The shape rule: `x` with its extent along `axis` replaced by `len`, the window inside `x`.
///
/// # Errors
/// [`OpError::BadTarget`] when the window does not fit.
#[inline(always)]
pub(crate) fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let (axis, start, len) = window(attr);
    let out = with_extent(op, super::nth(args, 0), axis, len)?;
    check_window(op, super::nth(args, 0), out, axis, start)?;
    Ok(out)
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    let (axis, start, _) = window(k.attr);
    kernel(k.arg(0), k.shape(0), k.out, k.out_shape, axis, start);
    Ok(())
}

/// The shape rule of `slice` (`small` is the output) and `pad` (`small` is the input): the two
/// shapes agree except along `axis`, where `start + small[axis] <= big[axis]`.
///
/// # Errors
/// [`OpError::BadTarget`] otherwise.
pub fn check_window(
    op: Opcode,
    big: Shape,
    small: Shape,
    axis: usize,
    start: usize,
) -> Result<(), OpError> {
    // The error names the argument's shape first: `slice` brings `big` to `small`, `pad`
    // brings `small` to `big`.
    let (from, to) = if op == Opcode::Pad {
        (small, big)
    } else {
        (big, small)
    };
    let bad = OpError::BadTarget { op, from, to };
    if big.rank() != small.rank() || axis >= big.rank() {
        return Err(bad);
    }
    for k in 0..big.rank() {
        let (b, s) = (big.dim(k).unwrap_or(0), small.dim(k).unwrap_or(0));
        let ok = if k == axis {
            start.checked_add(s).is_some_and(|end| end <= b)
        } else {
            b == s
        };
        if !ok {
            return Err(bad);
        }
    }
    Ok(())
}

/// `(outer, inner)`: the products of the extents before and after `axis`.
pub(crate) fn outer_inner(s: Shape, axis: usize) -> (usize, usize) {
    let d = s.dims();
    let outer = d[..axis].iter().product();
    let inner = d[axis + 1..s.rank()].iter().product();
    (outer, inner)
}

/// A window along one axis: both tensors are `[outer, n, inner]` around it, `n_big` for the
/// whole and `n_small` for the window, which starts at `start`.
#[derive(Clone, Copy)]
pub(crate) struct Window {
    pub(crate) outer: usize,
    pub(crate) inner: usize,
    pub(crate) start: usize,
    pub(crate) n_big: usize,
    pub(crate) n_small: usize,
}

/// The window copy `slice` and `pad` share: `big[o, start + j, i]` ↔ `small[o, j, i]`, towards
/// the window when `small_is_dst`, out of it otherwise. Exact: a copy.
pub(crate) fn copy_window<E: Copy>(w: Window, src: &[E], dst: &mut [E], small_is_dst: bool) {
    let n = w.n_small * w.inner;
    for o in 0..w.outer {
        let at_big = (o * w.n_big + w.start) * w.inner;
        let at_small = o * w.n_small * w.inner;
        let (from, to) = if small_is_dst {
            (at_big, at_small)
        } else {
            (at_small, at_big)
        };
        if let (Some(s), Some(d)) = (src.get(from..from + n), dst.get_mut(to..to + n)) {
            d.copy_from_slice(s);
        }
    }
}

/// Copies the window: `out[o, j, i] = x[o, start + j, i]` over `x: [outer, n_x, inner]`.
pub fn kernel<E: Element>(
    x: &[E],
    x_shape: Shape,
    out: &mut [E],
    out_shape: Shape,
    axis: usize,
    start: usize,
) {
    let (outer, inner) = outer_inner(x_shape, axis);
    let (nx, no) = (
        x_shape.dim(axis).unwrap_or(0),
        out_shape.dim(axis).unwrap_or(0),
    );
    let w = Window {
        outer,
        inner,
        start,
        n_big: nx,
        n_small: no,
    };
    copy_window(w, x, out, true);
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let s = r.shape_of(v.args[0]);
    let (axis, start, _) = window(v.attr);
    Ok([
        want(v.wants[0], || r.pad(v.cotangent, axis, start, s))?,
        None,
        None,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal() {
        let x = [0., 1., 2., 3., 4., 5.];
        let mut out = [0.0f32; 2];
        kernel(&x, Shape::matrix(2, 3), &mut out, Shape::matrix(2, 1), 1, 2);
        assert_eq!(out, [2., 5.]);
        let mut row = [0.0f32; 3];
        kernel(&x, Shape::matrix(2, 3), &mut row, Shape::matrix(1, 3), 0, 1);
        assert_eq!(row, [3., 4., 5.]);
        assert!(check_window(
            Opcode::Slice,
            Shape::matrix(2, 3),
            Shape::matrix(2, 2),
            1,
            2
        )
        .is_err());
    }
}
