//! `max_pool_scatter(x, g)`: `max_pool`'s adjoint. Output of `x`'s shape: zeros, then each
//! window's `g` added at the window's first maximum of `x` (see [`super::max_pool`]; PyTorch's
//! `max_pool2d_with_indices_backward`).
//!
//! Rule: `ḡ += max_pool_gather(x, h̄)` (linear in `g`); nothing for `x` (which element wins is
//! piecewise constant in `x`).

use super::pool::{check_pooled, geometry, pooled_shape, window_of};
use super::{nth, want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, PoolWindow, Recordable, Shape};

/// The shape rule: `x` as `max_pool` takes it, `g` of the pooled shape; the output is `x`'s
/// shape.
///
/// # Errors
/// [`OpError::BadPool`] for a window that does not fit `x`; [`OpError::ShapeMismatch`] for a
/// `g` of another shape than the pooled one.
#[inline(always)]
pub(crate) fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let x = nth(args, 0);
    let pooled = pooled_shape(geometry(op, window_of(attr), x)?, x)?;
    check_pooled(op, x, pooled, nth(args, 1))?;
    Ok(x)
}

/// The reference kernel.
///
/// # Arithmetic order
/// Every output element starts at `+0.0`; windows are visited in increasing row-major output
/// order and each adds its `g` (`acc = acc + g[w]`) at its first maximum. Where windows overlap
/// (stride below the kernel) an element accumulates its windows' values in increasing window
/// order.
pub fn kernel<E: Element>(x: &[E], x_shape: Shape, g: &[E], out: &mut [E], window: PoolWindow) {
    for o in out.iter_mut() {
        *o = E::ZERO;
    }
    let Ok(geo) = geometry(Opcode::MaxPool, window, x_shape) else {
        return;
    };
    geo.for_each_argmax(x, |w, i| {
        if let (Some(slot), Some(&v)) = (out.get_mut(i), g.get(w)) {
            *slot = *slot + v;
        }
    });
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    kernel(k.arg(0), k.shape(0), k.arg(1), k.out, window_of(k.attr));
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let w = window_of(v.attr);
    let dg = want(v.wants[1], || r.max_pool_gather(v.args[0], v.cotangent, w))?;
    Ok([None, dg, None])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_windows_and_ties_go_to_the_first_maximum() {
        // [1, 1, 4], kernel 2, stride 1: windows {0,1}, {1,2}, {2,3}.
        // x = [3, 3, 1, 3]: window 0's maximum is element 0 (first of the tie), window 1's is
        // element 1, window 2's is element 3.
        let x = [3., 3., 1., 3.];
        let g = [10., 20., 40.];
        let w = PoolWindow::new_1d(2, 1, [0, 0]);
        let mut out = [f32::NAN; 4];
        kernel(&x, Shape::new(&[1, 1, 4]).unwrap(), &g, &mut out, w);
        assert_eq!(out, [10., 20., 0., 40.]);
        // x = [1, 5, 2, 0]: element 1 wins windows 0 and 1, which accumulate there.
        kernel(
            &[1., 5., 2., 0.],
            Shape::new(&[1, 1, 4]).unwrap(),
            &g,
            &mut out,
            w,
        );
        assert_eq!(out, [0., 30., 40., 0.]);
    }
}
