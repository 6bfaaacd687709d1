//! `max_pool_gather(x, h)`: `h` (of `x`'s shape) read at each window's first maximum of `x`
//! (see [`super::max_pool`]): the adjoint of [`super::max_pool_scatter`] in its second
//! argument, and the tangent of `max_pool` (`max_pool(x) = max_pool_gather(x, x)`, bit for bit).
//!
//! Rule: `h̄ += max_pool_scatter(x, ḡ)` (linear in `h`); nothing for `x`.

use super::pool::{check_pooled, geometry, pooled_shape, window_of};
use super::{nth, want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, PoolWindow, Recordable, Shape};

/// The shape rule: `x` as `max_pool` takes it, `h` of `x`'s shape; the output is the pooled
/// shape.
///
/// # Errors
/// [`OpError::BadPool`] for a window that does not fit `x`; [`OpError::ShapeMismatch`] for an
/// `h` of another shape than `x`.
#[inline(always)]
pub(crate) fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let x = nth(args, 0);
    let pooled = pooled_shape(geometry(op, window_of(attr), x)?, x)?;
    check_pooled(op, x, x, nth(args, 1))?;
    Ok(pooled)
}

/// The reference kernel: `out[w] = h[first maximum of x in window w]`. Exact: a selection.
pub fn kernel<E: Element>(x: &[E], x_shape: Shape, h: &[E], out: &mut [E], window: PoolWindow) {
    let Ok(geo) = geometry(Opcode::MaxPool, window, x_shape) else {
        return;
    };
    geo.for_each_argmax(x, |w, i| {
        if let (Some(slot), Some(&v)) = (out.get_mut(w), h.get(i)) {
            *slot = v;
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
    let dh = want(v.wants[1], || r.max_pool_scatter(v.args[0], v.cotangent, w))?;
    Ok([None, dh, None])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathers_at_the_first_maximum() {
        let x = [3., 3., 1., 3.];
        let h = [10., 20., 30., 40.];
        let w = PoolWindow::new_1d(2, 1, [0, 0]);
        let mut out = [f32::NAN; 3];
        kernel(&x, Shape::new(&[1, 1, 4]).unwrap(), &h, &mut out, w);
        assert_eq!(out, [10., 20., 40.]);
        let mut y = [f32::NAN; 3];
        super::super::max_pool::kernel(&x, Shape::new(&[1, 1, 4]).unwrap(), &mut y, w);
        let mut same = [f32::NAN; 3];
        kernel(&x, Shape::new(&[1, 1, 4]).unwrap(), &x, &mut same, w);
        assert_eq!(y, same);
    }
}
