//! `pad`: `x` placed at offset `start` along one axis of a larger zero tensor (the target shape):
//! `slice`'s adjoint. Its attribute is a `Window { axis, start, len }` like `slice`'s, `len` the
//! output's extent along `axis`.
//!
//! Rule: `x̄ += slice(ḡ, axis, start, len(x))`.

use super::slice::{check_window, copy_window, outer_inner, window, with_extent, Window};
use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// The shape rule: `x` with its extent along `axis` replaced by `len`, `x` inside it at
/// `start`.
///
/// # Errors
/// [`OpError::BadTarget`] when `x` does not fit.
#[inline(always)]
pub(crate) fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let (axis, start, len) = window(attr);
    let out = with_extent(op, super::nth(args, 0), axis, len)?;
    check_window(op, out, super::nth(args, 0), axis, start)?;
    Ok(out)
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    let (axis, start, _) = window(k.attr);
    kernel(k.arg(0), k.shape(0), k.out, k.out_shape, axis, start);
    Ok(())
}

/// Zeros `out`, then `out[o, start + j, i] = x[o, j, i]`.
pub fn kernel<E: Element>(
    x: &[E],
    x_shape: Shape,
    out: &mut [E],
    out_shape: Shape,
    axis: usize,
    start: usize,
) {
    for o in out.iter_mut() {
        *o = E::ZERO;
    }
    let (outer, inner) = outer_inner(out_shape, axis);
    let (nx, no) = (
        x_shape.dim(axis).unwrap_or(0),
        out_shape.dim(axis).unwrap_or(0),
    );
    let w = Window {
        outer,
        inner,
        start,
        n_big: no,
        n_small: nx,
    };
    copy_window(w, x, out, false);
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let s = r.shape_of(v.args[0]);
    let (axis, start, _) = window(v.attr);
    let len = s.dim(axis).unwrap_or(0);
    Ok([
        want(v.wants[0], || r.slice(v.cotangent, axis, start, len))?,
        None,
        None,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal() {
        let mut out = [9.0f32; 6];
        kernel(
            &[7., 8.],
            Shape::matrix(2, 1),
            &mut out,
            Shape::matrix(2, 3),
            1,
            1,
        );
        assert_eq!(out, [0., 7., 0., 0., 8., 0.]);
    }

    /// A window that does not fit: the error names the argument's shape, then the target's
    /// (issue 16: it used to name them the other way round).
    #[test]
    fn a_bad_window_names_the_argument_first() {
        let x = Shape::matrix(2, 2);
        let attr = Attr::Window {
            axis: 1,
            start: 2,
            len: 3,
        };
        assert_eq!(
            infer(Opcode::Pad, attr, &[x]),
            Err(OpError::BadTarget {
                op: Opcode::Pad,
                from: x,
                to: Shape::matrix(2, 3),
            })
        );
        // `slice`'s argument is the larger shape: it comes first too.
        let big = Shape::matrix(2, 3);
        assert_eq!(
            super::super::slice::infer(Opcode::Slice, attr, &[big]),
            Err(OpError::BadTarget {
                op: Opcode::Slice,
                from: big,
                to: Shape::matrix(2, 3),
            })
        );
    }
}
