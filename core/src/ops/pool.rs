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

    /// `(kernel_h, kernel_w)` when the windows tile the input: on both axes the stride equals
    /// the kernel, the dilation is 1, there is no padding before the input and every window
    /// lies within it (`out · kernel <= len`: no padding after it is reached). PyTorch's
    /// `MaxPool2d(k)` and `MaxPool1d(k)` without padding are such windows. Then window
    /// `(oh, ow)` of a plane holds exactly the elements of rows `oh · kh ..` and columns
    /// `ow · kw ..`, all real, and no two windows share one.
    pub(crate) fn tiles(&self) -> Option<(usize, usize)> {
        let tiled = |a: &Axis| {
            a.stride == a.kernel
                && a.dilation == 1
                && a.pad == 0
                && a.out.saturating_mul(a.kernel) <= a.len
        };
        (tiled(&self.h) && tiled(&self.w)).then_some((self.h.kernel, self.w.kernel))
    }

    /// Calls `f(window, i)` for every window in [`Geometry::for_each_window`]'s order, `i` the
    /// index (into the whole input) of the window's first maximum by [`argmax`]'s rule, in the
    /// same row-major window order: the same calls as `for_each_window` with `argmax`. When
    /// the windows tile the input ([`Geometry::tiles`]) each window is read as `kh` runs of
    /// `kw` elements, with no per-tap index arithmetic (`max_pool`, `max_pool_scatter` and
    /// `max_pool_gather` all take this path: the digits CNN's whole step, C2 of `cargo xtask
    /// bench --peers`, 1.35 -> 0.67 ms, `peers serve` medians of three interleaved rounds,
    /// 2026-12-03).
    #[inline(always)]
    pub(crate) fn for_each_argmax<E: crate::Element>(
        &self,
        x: &[E],
        mut f: impl FnMut(usize, usize),
    ) {
        let Some((kh, kw)) = self.tiles() else {
            self.for_each_window(|w, taps| {
                if let Some(i) = argmax(x, taps) {
                    f(w, i);
                }
            });
            return;
        };
        let row = self.w.len;
        let mut window = 0usize;
        for plane in 0..self.planes {
            let base = plane.saturating_mul(self.in_plane());
            for oh in 0..self.h.out {
                let top = base.saturating_add(oh.saturating_mul(kh).saturating_mul(row));
                for ow in 0..self.w.out {
                    let start = top.saturating_add(ow.saturating_mul(kw));
                    if let Some(i) = tile_argmax(x, start, [kh, kw], row) {
                        f(window, i);
                    }
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

/// A max pooling whose windows tile the input (stride equal to the kernel, dilation 1, no
/// padding reached; PyTorch's `MaxPool2d(k)`), as kernels outside this crate need it:
/// `planes = N · C` planes of `rows × cols` elements (`rows = 1` for `[N, C, L]`), window
/// `(oh, ow)` of a plane holding rows `oh · kernel[0] ..` and columns `ow · kernel[1] ..`, for
/// `oh < out[0]`, `ow < out[1]`. Rows and columns past `out · kernel` belong to no window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tiling {
    /// `N · C`.
    pub planes: usize,
    /// The input's rows per plane.
    pub rows: usize,
    /// The input's columns per plane.
    pub cols: usize,
    /// Window rows and columns.
    pub kernel: [usize; 2],
    /// The output's rows and columns per plane.
    pub out: [usize; 2],
}

/// The [`Tiling`] of `op` (`max_pool`, `max_pool_gather` or `max_pool_scatter`) with `attr`
/// over `x`; `None` for another opcode, a window the shape rule refuses, or windows that do
/// not tile the input.
pub fn tiling(op: Opcode, attr: Attr, x: Shape) -> Option<Tiling> {
    if !matches!(
        op,
        Opcode::MaxPool | Opcode::MaxPoolScatter | Opcode::MaxPoolGather
    ) {
        return None;
    }
    let g = geometry(op, window_of(attr), x).ok()?;
    let (kh, kw) = g.tiles()?;
    Some(Tiling {
        planes: g.planes,
        rows: g.h.len,
        cols: g.w.len,
        kernel: [kh, kw],
        out: [g.h.out, g.w.out],
    })
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
            Some((_, b)) if !takes_over(b, v) => {}
            _ => best = Some((i, v)),
        }
    }
    best.map(|(i, _)| i)
}

/// [`argmax`]'s rule: a later tap `v` takes over from the maximum so far `best` when it is NaN
/// or greater, unless `best` is NaN.
#[inline(always)]
fn takes_over<E: crate::Element>(best: E, v: E) -> bool {
    !best.is_nan() && (v.is_nan() || v > best)
}

/// [`argmax`] over a window of `kernel[0]` runs of `kernel[1]` elements, run `r` starting at
/// `start + r · row` (a tile: [`Geometry::tiles`]), in row-major window order. A run that does
/// not lie within `x` is skipped, as `argmax` skips taps outside it.
///
/// A branch per comparison, as in `argmax`: on the digits CNN's activations (ReLU's zeros tie)
/// it predicts well, and a conditional move (`select_unpredictable`) or selects on a flag made
/// the whole step 3-8 % slower (`peers serve`, C2, 2026-12-03).
#[inline(always)]
fn tile_argmax<E: crate::Element>(
    x: &[E],
    start: usize,
    kernel: [usize; 2],
    row: usize,
) -> Option<usize> {
    let mut best: Option<(usize, E)> = None;
    let mut first = start;
    for _ in 0..kernel[0] {
        if let Some(run) = x.get(first..first.saturating_add(kernel[1])) {
            for (i, &v) in (first..).zip(run) {
                match best {
                    Some((_, b)) if !takes_over(b, v) => {}
                    _ => best = Some((i, v)),
                }
            }
        }
        first = first.saturating_add(row);
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PoolWindow;
    use alloc::{vec, vec::Vec};

    /// SplitMix64 (Steele, Lea and Flood 2014), for test inputs.
    fn mix(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce5_e9b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The tiled walk names the same first maximum as the reference walk, window by window:
    /// 1-D and 2-D inputs, kernels 1 to 3 per axis, extents that leave a remainder (floor mode),
    /// values drawn from a few (ties), `±0` and NaNs of two payloads.
    #[test]
    fn tiled_windows_name_the_reference_walks_first_maximum() {
        let values = [
            -1.0f32,
            -0.0,
            0.0,
            1.0,
            1.0,
            2.0,
            f32::NAN,
            f32::from_bits(0x7fc0_0001),
            f32::NEG_INFINITY,
        ];
        let mut state = 7u64;
        let mut tiled = 0;
        for case in 0..400 {
            let pick = |s: &mut u64, n: u64| (mix(s) % n) as usize;
            let (kh, kw) = (1 + pick(&mut state, 3), 1 + pick(&mut state, 3));
            let one_d = case % 4 == 0;
            let (kh, sh) = if one_d { (1, 1) } else { (kh, kh) };
            let (n, c) = (1 + pick(&mut state, 2), 1 + pick(&mut state, 3));
            let (h, w) = (kh + pick(&mut state, 6), kw + pick(&mut state, 6));
            let dims: Vec<usize> = if one_d {
                vec![n, c, w]
            } else {
                vec![n, c, h, w]
            };
            let x_shape = Shape::new(&dims).unwrap();
            let elems: usize = dims.iter().product();
            let x: Vec<f32> = (0..elems)
                .map(|_| {
                    let k = pick(&mut state, 12);
                    values.get(k).copied().unwrap_or(k as f32 / 4.0)
                })
                .collect();
            let (kh16, kw16) = (kh as u16, kw as u16);
            let window = PoolWindow::new_2d([kh16, kw16], [sh as u16, kw16], [0; 4]);
            let g = geometry(Opcode::MaxPool, window, x_shape).unwrap();
            assert!(g.tiles().is_some(), "{dims:?} {window:?}");
            tiled += 1;
            let (mut fast, mut walk) = (Vec::new(), Vec::new());
            g.for_each_argmax(&x, |w, i| fast.push((w, i)));
            g.for_each_window(|w, taps| {
                if let Some(i) = argmax(&x, taps) {
                    walk.push((w, i));
                }
            });
            assert_eq!(fast, walk, "{dims:?} {window:?} {x:?}");
        }
        assert_eq!(tiled, 400);
    }

    /// Windows that overlap, skip, dilate or pad are not tiles: they keep the reference walk.
    #[test]
    fn only_plain_windows_are_tiles() {
        let x = Shape::new(&[1, 1, 5, 5]).unwrap();
        let tiles = |w: PoolWindow| geometry(Opcode::MaxPool, w, x).unwrap().tiles();
        assert_eq!(
            tiles(PoolWindow::new_2d([2, 2], [2, 2], [0; 4])),
            Some((2, 2))
        );
        assert_eq!(tiles(PoolWindow::new_2d([2, 2], [1, 1], [0; 4])), None);
        assert_eq!(tiles(PoolWindow::new_2d([2, 2], [3, 3], [0; 4])), None);
        assert_eq!(
            tiles(PoolWindow::new_2d([2, 2], [2, 2], [0, 0, 1, 1])),
            None
        );
        assert_eq!(
            tiles(PoolWindow::new_2d([2, 2], [2, 2], [1, 1, 0, 0])),
            None
        );
        let dilated = PoolWindow::new_2d([2, 2], [2, 2], [0; 4]).with_dilations([2, 2]);
        assert_eq!(tiles(dilated), None);
    }
}
