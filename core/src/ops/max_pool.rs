//! `max_pool`: the maximum over each window of a channels-first tensor (`[N, C, L]` or
//! `[N, C, H, W]`), ONNX's `MaxPool` and PyTorch's `max_pool1d`/`max_pool2d` (floor mode). The
//! attribute is a [`crate::PoolWindow`] (kernel, strides, dilations, ONNX-ordered pads); padding
//! counts as `-inf`. The window geometry is stated in [`super::pool`].
//!
//! An instruction, not a composition: the `slice`/`maximum` spelling needs one tensor per
//! kernel tap and would send the cotangent of a tie to every tied element, where max pool's
//! gradient goes to **one** element per window: the first maximum in row-major window order
//! (PyTorch's max pool with indices does the same). Its rules speak two instructions of their
//! own, so that the rules close:
//!
//! - `max_pool` — rule: `x̄ += max_pool_scatter(x, ḡ)`;
//! - [`super::max_pool_scatter`]`(x, g)` → `x`'s shape: each window's `g` added at the window's
//!   first maximum — rule: `ḡ += max_pool_gather(x, h̄)`, nothing for `x` (the selection is
//!   piecewise constant in `x`);
//! - [`super::max_pool_gather`]`(x, h)` → pooled shape: `h` read at each window's first maximum
//!   — rule: `h̄ += max_pool_scatter(x, ḡ)`, nothing for `x`.
//!
//! `max_pool(x)` and `max_pool_gather(x, x)` are the same bits.

use super::pool::{geometry, window_of};
use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Element, PoolWindow, Recordable, Shape};

/// The shape rule: the pooled shape (see [`super::pool`]).
pub(crate) use super::pool::infer_pooled as infer;

/// The reference kernel over `x` of shape `x_shape` (checked by the shape rule).
///
/// # Arithmetic order
/// Windows in increasing row-major output order; in each, the real taps in row-major window
/// order. The first real tap is the maximum so far; a later tap takes over when it is NaN or
/// greater, unless the maximum so far is NaN. So NaN propagates (the first NaN), and among
/// equal values (`-0` and `+0` included) the first wins. Exact: a selection.
pub fn kernel<E: Element>(x: &[E], x_shape: Shape, out: &mut [E], window: PoolWindow) {
    let Ok(g) = geometry(crate::Opcode::MaxPool, window, x_shape) else {
        return;
    };
    g.for_each_argmax(x, |o, i| {
        if let (Some(slot), Some(&v)) = (out.get_mut(o), x.get(i)) {
            *slot = v;
        }
    });
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    kernel(k.arg(0), k.shape(0), k.out, window_of(k.attr));
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let w = window_of(v.attr);
    let d = want(v.wants[0], || r.max_pool_scatter(v.args[0], v.cotangent, w))?;
    Ok([d, None, None])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Attr, OpError, Opcode};
    use alloc::{vec, vec::Vec};

    fn pool(x: &[f32], shape: &[usize], w: PoolWindow) -> (Vec<f32>, Shape) {
        let xs = Shape::new(shape).unwrap();
        let os = infer(Opcode::MaxPool, Attr::Pool(w), &[xs]).unwrap();
        let mut out = vec![f32::NAN; os.elems()];
        kernel(x, xs, &mut out, w);
        (out, os)
    }

    #[test]
    fn literal_2d_stride_and_padding() {
        // 3x3 input, kernel 2x2, stride 1, no padding.
        let x = [1., 2., 3., 4., 5., 6., 7., 8., 9.];
        let w = PoolWindow::new_2d([2, 2], [1, 1], [0; 4]);
        let (y, s) = pool(&x, &[1, 1, 3, 3], w);
        assert_eq!(s, Shape::new(&[1, 1, 2, 2]).unwrap());
        assert_eq!(y, [5., 6., 8., 9.]);
        // Kernel 2x2, stride 2, one row of padding at the top and one column at the left:
        // windows start at -1: rows {-1, 0}, {1, 2}; columns {-1, 0}, {1, 2}.
        let x = [-1., -2., -3., -4., -5., -6., -7., -8., -9.];
        let w = PoolWindow::new_2d([2, 2], [2, 2], [1, 1, 0, 0]);
        let (y, s) = pool(&x, &[1, 1, 3, 3], w);
        assert_eq!(s, Shape::new(&[1, 1, 2, 2]).unwrap());
        // Padding is -inf: a window of padding and -1 gives -1, not 0.
        assert_eq!(y, [-1., -2., -4., -5.]);
    }

    #[test]
    fn literal_1d_dilation_nan_and_signed_zero() {
        // [N=1, C=2, L=5], kernel 2, dilation 2, stride 1: taps {i, i + 2}.
        let x = [0., 5., 1., 3., 9., -0.0, f32::NAN, 0.0, 1., 2.];
        let w = PoolWindow::new_1d(2, 1, [0, 0]).with_dilations([1, 2]);
        let (y, s) = pool(&x, &[1, 2, 5], w);
        assert_eq!(s, Shape::new(&[1, 2, 3]).unwrap());
        assert_eq!(&y[..3], &[1., 5., 9.]);
        // -0 then +0: the first wins.
        assert_eq!(y[3].to_bits(), 0x8000_0000);
        assert!(y[4].is_nan());
        assert_eq!(y[5], 2.0);
    }

    #[test]
    fn hostile_windows_are_refused() {
        let x4 = Shape::new(&[1, 1, 3, 3]).unwrap();
        let x3 = Shape::new(&[1, 1, 3]).unwrap();
        let ok = PoolWindow::new_2d([2, 2], [1, 1], [0; 4]);
        let bad = |w: PoolWindow, x: Shape| {
            assert!(
                matches!(
                    infer(Opcode::MaxPool, Attr::Pool(w), &[x]),
                    Err(OpError::BadPool { .. })
                ),
                "{w:?} over {x}"
            );
        };
        bad(
            PoolWindow {
                kernel: [0, 2],
                ..ok
            },
            x4,
        );
        bad(
            PoolWindow {
                strides: [1, 0],
                ..ok
            },
            x4,
        );
        bad(ok.with_dilations([0, 1]), x4);
        bad(PoolWindow::new_2d([4, 1], [1, 1], [0; 4]), x4); // larger than the input
        bad(
            PoolWindow::new_2d([2, 2], [1, 1], [u16::MAX, 0, u16::MAX, 0]),
            x4,
        );
        bad(ok.with_count_include_pad(true), x4); // max pool counts nothing
        bad(ok, x3); // a 1-D tensor with a 2-D window
        bad(ok, Shape::matrix(3, 3));
        // A window of padding only: kernel 1 over pads of 1 on each side.
        bad(PoolWindow::new_1d(1, 1, [1, 0]), x3);
        // Dilation that skips every real element of a window: taps at -1 and +1 over a
        // length-1 axis.
        bad(
            PoolWindow::new_1d(2, 1, [1, 1]).with_dilations([1, 2]),
            Shape::new(&[1, 1, 1]).unwrap(),
        );
        assert!(infer(Opcode::MaxPool, Attr::Pool(ok), &[x4]).is_ok());
        // The wrong attribute kind.
        assert!(super::super::infer(Opcode::MaxPool, Attr::Target(x4), &[x4]).is_err());
    }
}
