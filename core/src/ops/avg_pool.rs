//! `avg_pool`: the mean over each window of a channels-first tensor (`[N, C, L]` or
//! `[N, C, H, W]`), ONNX's `AveragePool` and PyTorch's `avg_pool1d`/`avg_pool2d` (floor mode).
//! The attribute is a [`crate::PoolWindow`] (kernel, strides, dilations, ONNX-ordered pads and
//! `count_include_pad`); padding counts as zero. The window geometry is stated in
//! [`super::pool`].
//!
//! `count_include_pad`: with it, every window divides by the kernel's tap count; without it, by
//! the number of its taps that land on the input. ONNX's attribute defaults to 0 (without);
//! PyTorch's `nn.AvgPool1d`/`nn.AvgPool2d` default to `count_include_pad=True` (with). An
//! importer sets the flag from the source's own attribute or default.
//!
//! An instruction, not a composition: a `slice`/`add` spelling needs one tensor per tap, and
//! the divisor of a window without `count_include_pad` varies with the window. Rule:
//! `x̄ += avg_pool_backward(ḡ, shape(x))` ([`super::avg_pool_backward`], whose own rule is
//! `avg_pool`: the two close).
//!
//! **Global average pooling** is no instruction: it is `mean_to(x, [N, C, 1, 1])` (a `sum_to`
//! then a division), [`crate::Recordable::global_avg_pool`].

use super::pool::{geometry, window_of};
use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Element, Opcode, PoolWindow, Recordable, Shape};

/// The shape rule: the pooled shape (see [`super::pool`]).
pub(crate) use super::pool::infer_pooled as infer;

/// The reference kernel over `x` of shape `x_shape` (checked by the shape rule).
///
/// # Arithmetic order
/// Windows in increasing row-major output order. Each window's sum starts at `+0.0` and adds
/// its real taps in row-major window order (`acc = acc + x[i]`; a padded tap would add `+0`,
/// which changes no bit of an accumulator that starts at `+0`, so it is skipped); then one
/// division `acc / count`, `count` the divisor above converted to the element type (exact up to
/// 2^24 taps).
pub fn kernel<E: Element>(x: &[E], x_shape: Shape, out: &mut [E], window: PoolWindow) {
    let Ok(g) = geometry(Opcode::AvgPool, window, x_shape) else {
        return;
    };
    g.for_each_window(|o, taps| {
        let mut acc = E::ZERO;
        for i in taps {
            if let Some(&v) = x.get(i) {
                acc = acc + v;
            }
        }
        let count = g.count(o, window.count_include_pad);
        if let Some(slot) = out.get_mut(o) {
            *slot = acc / E::from_f32(count as f32);
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
    let s = r.shape_of(v.args[0]);
    let d = want(v.wants[0], || r.avg_pool_backward(v.cotangent, w, s))?;
    Ok([d, None, None])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Attr;
    use alloc::{vec, vec::Vec};

    fn pool(x: &[f32], shape: &[usize], w: PoolWindow) -> Vec<f32> {
        let xs = Shape::new(shape).unwrap();
        let os = infer(Opcode::AvgPool, Attr::Pool(w), &[xs]).unwrap();
        let mut out = vec![f32::NAN; os.elems()];
        kernel(x, xs, &mut out, w);
        out
    }

    #[test]
    fn literal_count_include_pad_both_ways() {
        // [1, 1, 4], kernel 3, stride 2, one pad each side: windows {-1, 0, 1}, {1, 2, 3}.
        let x = [1., 2., 3., 4.];
        let w = PoolWindow::new_1d(3, 2, [1, 1]);
        // Without (ONNX's default): (1 + 2) / 2, (2 + 3 + 4) / 3.
        assert_eq!(pool(&x, &[1, 1, 4], w), [1.5, 3.0]);
        // With (PyTorch's default): (0 + 1 + 2) / 3, 9 / 3.
        let with = w.with_count_include_pad(true);
        assert_eq!(pool(&x, &[1, 1, 4], with), [1.0, 3.0]);
    }

    #[test]
    fn literal_2d() {
        // 3x3, kernel 2x2, stride 1, pads [0, 0, 1, 1] (end of each axis): 3x3 output.
        let x = [1., 2., 3., 4., 5., 6., 7., 8., 9.];
        let w = PoolWindow::new_2d([2, 2], [1, 1], [0, 0, 1, 1]);
        assert_eq!(
            pool(&x, &[1, 1, 3, 3], w),
            [3., 4., 4.5, 6., 7., 7.5, 7.5, 8.5, 9.]
        );
        let with = w.with_count_include_pad(true);
        assert_eq!(
            pool(&x, &[1, 1, 3, 3], with),
            [3., 4., 2.25, 6., 7., 3.75, 3.75, 4.25, 2.25]
        );
    }
}
