//! `avg_pool_backward(g)`: `avg_pool`'s adjoint (PyTorch's `avg_pool2d_backward`), from the
//! pooled shape back to the input's, which its attribute carries: [`crate::Attr::PoolTo`]
//! (the window and the output shape; the input's extents do not follow from the pooled ones
//! under the floor rule). Each input element receives `g[w] / count[w]` from every window `w`
//! that covers it.
//!
//! Rule: `ḡ += avg_pool(h̄)` with the same window: the adjoint of a linear map, so the two
//! instructions close.

use super::pool::{check_pooled, geometry, pooled_shape, window_of};
use super::{nth, target_of, want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, PoolWindow, Recordable, Shape};

/// The shape rule: the target (the output) pooled by the window is `g`'s shape.
///
/// # Errors
/// [`OpError::BadPool`] for a window that does not fit the target; [`OpError::ShapeMismatch`]
/// for a `g` of another shape than the pooled one.
#[inline(always)]
pub(crate) fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let x = target_of(op, attr)?;
    let pooled = pooled_shape(geometry(op, window_of(attr), x)?, x)?;
    check_pooled(op, x, pooled, nth(args, 0))?;
    Ok(x)
}

/// The reference kernel: `g` of the pooled shape to `out` of shape `x_shape`.
///
/// # Arithmetic order
/// Every output element starts at `+0.0`; windows are visited in increasing row-major output
/// order; each computes `q = g[w] / count[w]` once (the divisor as in [`super::avg_pool`]) and
/// adds it (`acc = acc + q`) to each of its real taps in row-major window order. An element
/// covered by several windows accumulates their `q` in increasing window order.
pub fn kernel<E: Element>(g: &[E], out: &mut [E], x_shape: Shape, window: PoolWindow) {
    for o in out.iter_mut() {
        *o = E::ZERO;
    }
    let Ok(geo) = geometry(Opcode::AvgPool, window, x_shape) else {
        return;
    };
    geo.for_each_window(|w, taps| {
        let Some(&v) = g.get(w) else { return };
        let q = v / E::from_f32(geo.count(w, window.count_include_pad) as f32);
        for i in taps {
            if let Some(slot) = out.get_mut(i) {
                *slot = *slot + q;
            }
        }
    });
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    kernel(k.arg(0), k.out, k.out_shape, window_of(k.attr));
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let w = window_of(v.attr);
    let d = want(v.wants[0], || r.avg_pool(v.cotangent, w))?;
    Ok([d, None, None])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_both_divisors() {
        // [1, 1, 4], kernel 3, stride 2, one pad each side: windows {-1, 0, 1}, {1, 2, 3};
        // element 1 is in both.
        let w = PoolWindow::new_1d(3, 2, [1, 1]);
        let s = Shape::new(&[1, 1, 4]).unwrap();
        let mut out = [f32::NAN; 4];
        kernel(&[6., 9.], &mut out, s, w);
        assert_eq!(out, [3., 6., 3., 3.]);
        kernel(&[6., 9.], &mut out, s, w.with_count_include_pad(true));
        assert_eq!(out, [2., 5., 3., 3.]);
        assert!(infer(
            Opcode::AvgPoolBackward,
            Attr::PoolTo(w, s),
            &[Shape::new(&[1, 1, 3]).unwrap()]
        )
        .is_err());
    }
}
