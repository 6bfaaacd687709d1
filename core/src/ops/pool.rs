//! The window geometry the pooling instructions share (`max_pool`, `max_pool_scatter`,
//! `max_pool_gather`, `avg_pool`, `avg_pool_backward`): the shape rule of a [`PoolWindow`] over
//! a channels-first tensor, and the walk over each window's taps.
//!
//! A tensor `[N, C, L]` is pooled as `[N, C, 1, L]`; `[N, C, H, W]` as itself. Along one
//! spatial axis of extent `len`, window `o` starts at `o * stride` in the padded coordinate
//! (`pad_begin` positions of padding, then the `len` real positions, then `pad_end`), and its
//! taps are at `o * stride + t * dilation` for `t = 0, 1, …, kernel - 1`. A tap is **real** when
//! it lands on the input (`pad_begin <= p < pad_begin + len`); the others are padding. The
//! kernels visit only the real taps (padding counts as `-inf` for the maximum, which never wins
//! over a real element, and as `+0` for the sum, which adds nothing to an accumulator that
//! starts at `+0`), and the shape rule refuses a window without a real tap, so each window has
//! at least one.
//!
//! Index arithmetic: the shape rule checks that every padded extent fits in a `u32`, so a
//! padded coordinate fits in `usize` on every target.

use super::{nth, OpError};
use crate::{Attr, Opcode, PoolWindow, Shape};

/// One spatial axis of a pooling window, checked by [`geometry`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Axis {
    /// The input's extent.
    pub(crate) len: usize,
    /// Kernel taps.
    pub(crate) kernel: usize,
    pub(crate) stride: usize,
    pub(crate) dilation: usize,
    /// Padding before the input.
    pub(crate) pad: usize,
    /// The output's extent.
    pub(crate) out: usize,
}

impl Axis {
    /// Checks one axis and computes its output extent (`None` when the values do not fit:
    /// a zero kernel, stride or dilation, a window larger than the padded input, or a padded
    /// extent beyond `u32`).
    fn new(len: usize, kernel: u16, stride: u16, dilation: u16, pads: [u16; 2]) -> Option<Axis> {
        if kernel == 0 || stride == 0 || dilation == 0 {
            return None;
        }
        let (k, s, d) = (u64::from(kernel), u64::from(stride), u64::from(dilation));
        let span = u64::try_from(len)
            .ok()?
            .checked_add(u64::from(pads[0]))?
            .checked_add(u64::from(pads[1]))?;
        if span > u64::from(u32::MAX) {
            return None;
        }
        let reach = (k - 1).checked_mul(d)?.checked_add(1)?;
        let out = span.checked_sub(reach)? / s + 1;
        Some(Axis {
            len,
            kernel: usize::try_from(k).ok()?,
            stride: usize::try_from(s).ok()?,
            dilation: usize::try_from(d).ok()?,
            pad: usize::from(pads[0]),
            out: usize::try_from(out).ok()?,
        })
    }

    /// The real taps of window `o`: `t` in `[t0, t1)` (empty when the window holds none).
    #[inline(always)]
    pub(crate) fn taps(&self, o: usize) -> (usize, usize) {
        let a = o.saturating_mul(self.stride);
        let d = self.dilation.max(1);
        let t0 = if a >= self.pad {
            0
        } else {
            (self.pad - a).div_ceil(d)
        };
        let end = self.pad.saturating_add(self.len);
        let t1 = if end > a {
            (end - a).div_ceil(d).min(self.kernel)
        } else {
            0
        };
        (t0, t1.max(t0))
    }

    /// The input position of tap `t` of window `o` (a real tap: see [`Axis::taps`]).
    #[inline(always)]
    pub(crate) fn pos(&self, o: usize, t: usize) -> usize {
        o.saturating_mul(self.stride)
            .saturating_add(t.saturating_mul(self.dilation))
            .saturating_sub(self.pad)
    }
}

/// A pooling over `planes = N * C` planes of `h.len × w.len` elements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) planes: usize,
    pub(crate) h: Axis,
    pub(crate) w: Axis,
}

impl Geometry {
    /// The elements of one input plane.
    pub(crate) fn in_plane(&self) -> usize {
        self.h.len.saturating_mul(self.w.len)
    }

    /// Calls `f(window, taps)` for every window in increasing row-major output order (plane,
    /// then output row, then output column), `taps` listing the input indices (into the whole
    /// tensor) of the window's real taps in row-major window order.
    #[inline(always)]
    pub(crate) fn for_each_window(&self, mut f: impl FnMut(usize, Taps)) {
        let (h, w) = (self.h, self.w);
        let mut window = 0usize;
        for plane in 0..self.planes {
            let base = plane.saturating_mul(self.in_plane());
            for oh in 0..h.out {
                let (h0, h1) = h.taps(oh);
                for ow in 0..w.out {
                    let (w0, w1) = w.taps(ow);
                    let taps = Taps {
                        base,
                        h,
                        w,
                        oh,
                        ow,
                        th: h0,
                        h1,
                        tw: w0,
                        w0,
                        w1,
                    };
                    f(window, taps);
                    window = window.saturating_add(1);
                }
            }
        }
    }

    /// The divisor of window number `window` for average pooling: every tap of the kernel with
    /// `count_include_pad`, else the real taps only.
    pub(crate) fn count(&self, window: usize, count_include_pad: bool) -> usize {
        if count_include_pad {
            return self.h.kernel.saturating_mul(self.w.kernel);
        }
        let ow = window % self.w.out.max(1);
        let oh = (window / self.w.out.max(1)) % self.h.out.max(1);
        let (h0, h1) = self.h.taps(oh);
        let (w0, w1) = self.w.taps(ow);
        (h1 - h0).saturating_mul(w1 - w0)
    }
}

/// The real taps of one window, in row-major window order: input indices into the whole
/// tensor.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Taps {
    base: usize,
    h: Axis,
    w: Axis,
    oh: usize,
    ow: usize,
    th: usize,
    h1: usize,
    tw: usize,
    w0: usize,
    w1: usize,
}

impl Iterator for Taps {
    type Item = usize;

    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        if self.tw >= self.w1 {
            self.tw = self.w0;
            self.th += 1;
        }
        if self.th >= self.h1 || self.w0 >= self.w1 {
            return None;
        }
        let row = self
            .base
            .saturating_add(self.h.pos(self.oh, self.th).saturating_mul(self.w.len));
        let i = row.saturating_add(self.w.pos(self.ow, self.tw));
        self.tw += 1;
        Some(i)
    }
}

/// The window of a pooling attribute (the identity window for another kind, which
/// [`super::infer`] has rejected before any caller gets here).
pub(crate) fn window_of(attr: Attr) -> PoolWindow {
    match attr {
        Attr::Pool(w) | Attr::PoolTo(w, _) => w,
        _ => PoolWindow::new_2d([1, 1], [1, 1], [0; 4]),
    }
}

/// The geometry of pooling `x` with `window`, checked: `x` of rank 3 (`[N, C, L]`, the window's
/// `h` entries the identity) or 4 (`[N, C, H, W]`); kernels, strides and dilations at least 1;
/// each window no larger than the padded input and holding at least one real element; each
/// padded extent within `u32`; the output within the element cap. `max_pool_*` opcodes take
/// `count_include_pad = false` only.
///
/// # Errors
/// [`OpError::BadPool`] naming the input shape.
pub(crate) fn geometry(op: Opcode, window: PoolWindow, x: Shape) -> Result<Geometry, OpError> {
    let bad = OpError::BadPool { op, shape: x };
    let PoolWindow {
        kernel,
        strides,
        dilations,
        pads,
        count_include_pad,
    } = window;
    let is_max = matches!(
        op,
        Opcode::MaxPool | Opcode::MaxPoolScatter | Opcode::MaxPoolGather
    );
    if is_max && count_include_pad {
        return Err(bad);
    }
    let d = x.dims();
    let (planes, len_h, len_w) = match x.rank() {
        3 => {
            let identity = kernel[0] == 1
                && strides[0] == 1
                && dilations[0] == 1
                && pads[0] == 0
                && pads[2] == 0;
            if !identity {
                return Err(bad);
            }
            (d[0].saturating_mul(d[1]), 1, d[2])
        }
        4 => (d[0].saturating_mul(d[1]), d[2], d[3]),
        _ => return Err(bad),
    };
    let h = Axis::new(
        len_h,
        kernel[0],
        strides[0],
        dilations[0],
        [pads[0], pads[2]],
    )
    .ok_or(bad)?;
    let w = Axis::new(
        len_w,
        kernel[1],
        strides[1],
        dilations[1],
        [pads[1], pads[3]],
    )
    .ok_or(bad)?;
    let g = Geometry { planes, h, w };
    // The output's element count is capped before the windows are walked (with no plane there
    // is no window, whatever the extents).
    pooled_shape(g, x)?;
    if planes > 0 {
        for axis in [h, w] {
            if (0..axis.out).any(|o| {
                let (t0, t1) = axis.taps(o);
                t0 >= t1
            }) {
                return Err(bad);
            }
        }
    }
    Ok(g)
}

/// The pooled shape: `x`'s with its spatial extents replaced by the output's.
pub(crate) fn pooled_shape(g: Geometry, x: Shape) -> Result<Shape, OpError> {
    let d = x.dims();
    Ok(if x.rank() == 3 {
        Shape::new(&[d[0], d[1], g.w.out])?
    } else {
        Shape::new(&[d[0], d[1], g.h.out, g.w.out])?
    })
}

/// The shape rule of the instructions from the input to the pooled tensor (`max_pool`,
/// `avg_pool`): the pooled shape of argument 0.
///
/// # Errors
/// [`OpError::BadPool`] when the window does not fit (see [`geometry`]).
pub(crate) fn infer_pooled(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let x = nth(args, 0);
    pooled_shape(geometry(op, window_of(attr), x)?, x)
}

/// Checks that argument `k` has the pooled shape of `x`.
///
/// # Errors
/// [`OpError::ShapeMismatch`] otherwise.
pub(crate) fn check_pooled(
    op: Opcode,
    x: Shape,
    pooled: Shape,
    found: Shape,
) -> Result<(), OpError> {
    if found != pooled {
        return Err(OpError::ShapeMismatch {
            op,
            lhs: x,
            rhs: found,
        });
    }
    Ok(())
}

/// The index (into the whole input) of the first maximum among a window's real taps, in the
/// order given: a tap takes over when it is NaN or greater than the maximum so far, unless the
/// maximum so far is NaN (so the first NaN wins, and among equal values, `-0` and `+0`
/// included, the first). `None` for a window without taps (which the shape rule refuses).
pub(crate) fn argmax<E: crate::Element>(x: &[E], taps: Taps) -> Option<usize> {
    let mut best: Option<(usize, E)> = None;
    for i in taps {
        let Some(&v) = x.get(i) else { continue };
        match best {
            Some((_, b)) if b.is_nan() || !(v.is_nan() || v > b) => {}
            _ => best = Some((i, v)),
        }
    }
    best.map(|(i, _)| i)
}
