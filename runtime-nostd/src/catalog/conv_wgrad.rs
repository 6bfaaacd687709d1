//! The `simd` catalog's channel-lane kernel for `conv_weight_grad` (the weight gradient) over
//! small output planes: the 1-D CNNs of issue 15 (signals of 19, 10 and 5 samples, 25 channels)
//! and small 2-D layers. Lanes are output channels `co` of one group, distinct outputs each,
//! never distinct terms of one sum.
//!
//! Per batch element the cotangent's plane `gy[n, group's co, :]` is transposed once into a
//! stack buffer `gt[position][co]` (rows padded to whole vectors with zeros), so that a
//! position's channels load as contiguous vectors; the sums live in a second stack buffer,
//! `acc[ci_local][tap][vector of co]`, across the whole batch, and a register tile of up to
//! [`TILE_TAPS`] taps by [`TILE_VECTORS`] vectors of channels runs over every output position of
//! one batch element, the input value `x[n, ci, ih, iw]` one broadcast shared by the tile's
//! vectors, each cotangent vector shared by the tile's taps.
//!
//! Bounds: each buffer holds at most [`BUF`] `f32`s (32 KiB, 64 KiB in all): `gt` one batch
//! element's output plane × the group's channels rounded up to a whole vector, `acc` a group's
//! input channels × kernel taps × that rounded channel count. [`fits`] says whether a geometry
//! is taken (also at least [`MIN_CHANNELS`] output channels per group, or all of a vector);
//! the catalog otherwise runs `conv_adjoint::conv_weight_grad` (lanes over channels gathered
//! per position) or the reference. The catalog runs on hosts and wasm only (not on the
//! firmware's stacks), where 64 KiB of stack is no concern.
//!
//! Index arithmetic is bounded by the lengths of buffers the caller checked against the
//! geometry (see the catalog's module doc), so it cannot overflow.
#![allow(clippy::arithmetic_side_effects)]

use super::lanes::{L, V};
use tapeplan_core::ops::conv::Geometry;

/// Each stack buffer's bound, in `f32`s (32 KiB).
pub(crate) const BUF: usize = 8192;

/// The fewest output channels per group the kernel takes (with fewer, e.g. a depthwise
/// convolution, most lanes would idle).
const MIN_CHANNELS: usize = 4;

/// Kernel taps per register tile (one accumulator row of [`TILE_VECTORS`] each): five covers
/// the 1-D CNNs' kernels of 3 and 5 in one tile.
const TILE_TAPS: usize = 5;

/// Vectors of output channels per register tile.
const TILE_VECTORS: usize = 2;

/// True when [`run`] takes geometry `g`: kernels and strides of at least 1, at least
/// [`MIN_CHANNELS`] output channels per group (or all of a vector), and both stack buffers
/// within [`BUF`] (see the module doc).
pub(crate) fn fits(g: &Geometry) -> bool {
    let (_, hw_out, taps) = g.planes();
    let cout_g = g.c_out_group();
    let padded = cout_g.div_ceil(L) * L;
    let within = |v: Option<usize>| v.is_some_and(|v| v <= BUF);
    g.axes.iter().all(|a| a.kernel >= 1 && a.stride >= 1)
        && g.groups >= 1
        && cout_g >= MIN_CHANNELS.min(L)
        && within(hw_out.checked_mul(padded))
        && within(
            g.c_in_group()
                .checked_mul(taps)
                .and_then(|v| v.checked_mul(padded)),
        )
}

/// `u = conv_weight_grad(x, gy)` (`gy` the cotangent, `y`-shaped; `u` `w`-shaped) over
/// row-major buffers of geometry `geo` (lengths checked by the caller; [`fits`] holds).
///
/// # Arithmetic order
/// The reference's (`tapeplan_core::ops::conv_weight_grad::kernel`): each
/// `u[co, ci_local, kh, kw]` starts at `+0.0` and accumulates
/// `acc = acc + x[n, ci, ih, iw] * gy[n, co, oh, ow]` (product rounded, then sum rounded, never
/// fused) over the batch `n` in increasing order, then the output positions `(oh, ow)`
/// row-major, skipping positions whose `(ih, iw)` lies in the padding. Each lane of each
/// accumulator is one output's own sum (lanes are output channels; a group's last vector is
/// padded with zero cotangents whose lanes are never stored), kept in `acc` between batch
/// elements.
pub(crate) fn run(x: &[f32], gy: &[f32], u: &mut [f32], geo: &Geometry) {
    let (hw_in, hw_out, taps) = geo.planes();
    let (cin_g, cout_g) = (geo.c_in_group(), geo.c_out_group());
    let nvec = cout_g.div_ceil(L);
    let width = nvec * L;
    let mut gt = [0.0f32; BUF];
    let mut acc = [V::splat(0.0); BUF / L];
    for group in 0..geo.groups {
        let acc = acc.get_mut(..cin_g * taps * nvec).unwrap_or(&mut []);
        acc.fill(V::splat(0.0));
        let gt = gt.get_mut(..hw_out * width).unwrap_or(&mut []);
        gt.fill(0.0);
        for n in 0..geo.batch {
            // `gt[p · width + c] = gy[n, group·cout_g + c, p]`.
            let g_at = (n * geo.c_out + group * cout_g) * hw_out;
            let planes = gy.get(g_at..g_at + cout_g * hw_out).unwrap_or(&[]);
            for (c, plane) in planes.chunks_exact(hw_out.max(1)).enumerate() {
                for (dst, &v) in gt.iter_mut().skip(c).step_by(width).zip(plane) {
                    *dst = v;
                }
            }
            for cil in 0..cin_g {
                let x_at = (n * geo.c_in + group * cin_g + cil) * hw_in;
                let xc = x.get(x_at..x_at + hw_in).unwrap_or(&[]);
                let mut t0 = 0;
                while t0 < taps {
                    let tt = (taps - t0).min(TILE_TAPS);
                    let mut v0 = 0;
                    while v0 < nvec {
                        let cc = (nvec - v0).min(TILE_VECTORS);
                        let at = |t: usize| (cil * taps + t0 + t) * nvec + v0;
                        let p = Plane {
                            geo,
                            xc,
                            gt,
                            width,
                            t0,
                            v0,
                        };
                        macro_rules! tile {
                            ($t:literal, $c:literal) => {
                                p.tile::<$t, $c>(acc, at)
                            };
                        }
                        match (tt, cc) {
                            (5, 2) => tile!(5, 2),
                            (4, 2) => tile!(4, 2),
                            (3, 2) => tile!(3, 2),
                            (2, 2) => tile!(2, 2),
                            (1, 2) => tile!(1, 2),
                            (5, _) => tile!(5, 1),
                            (4, _) => tile!(4, 1),
                            (3, _) => tile!(3, 1),
                            (2, _) => tile!(2, 1),
                            _ => tile!(1, 1),
                        }
                        v0 += cc;
                    }
                    t0 += tt;
                }
            }
        }
        // `u[group·cout_g + c, cil, t]` is lane `c mod L` of `acc[(cil·taps + t)·nvec + c / L]`.
        for c in 0..cout_g {
            let co = group * cout_g + c;
            for (i, o) in u
                .get_mut(co * cin_g * taps..(co + 1) * cin_g * taps)
                .unwrap_or(&mut [])
                .iter_mut()
                .enumerate()
            {
                if let Some(v) = acc.get(i * nvec + c / L) {
                    *o = v.as_array().get(c % L).copied().unwrap_or(0.0);
                }
            }
        }
    }
}

/// One batch element, one input channel, one tile's first tap `t0` and first vector `v0` of
/// channels.
struct Plane<'a> {
    geo: &'a Geometry,
    /// `x[n, ci]`, one input plane.
    xc: &'a [f32],
    /// The transposed cotangent, `width` lanes per output position.
    gt: &'a [f32],
    width: usize,
    t0: usize,
    v0: usize,
}

impl Plane<'_> {
    /// Adds this batch element's terms to the sums of taps `t0 .. t0 + T` by channel vectors
    /// `v0 .. v0 + C`: `acc[at(t) + c]`, over every output position in row-major order.
    #[inline(always)]
    fn tile<const T: usize, const C: usize>(&self, acc: &mut [V], at: impl Fn(usize) -> usize) {
        let [ah, aw] = self.geo.axes;
        let mut a = [[V::splat(0.0); C]; T];
        for (t, row) in a.iter_mut().enumerate() {
            for (c, v) in row.iter_mut().enumerate() {
                *v = acc.get(at(t) + c).copied().unwrap_or(V::splat(0.0));
            }
        }
        // Each tap's `(kh, kw)` and the columns `ow` whose `iw` lies inside the row.
        let khw: [(usize, usize); T] =
            core::array::from_fn(|t| ((self.t0 + t) / aw.kernel, (self.t0 + t) % aw.kernel));
        let cols: [(usize, usize); T] = khw.map(|(_, kw)| aw.valid(kw));
        let inner_lo = cols.iter().map(|c| c.0).max().unwrap_or(0);
        let inner_hi = cols.iter().map(|c| c.1).min().unwrap_or(0).max(inner_lo);
        let lane0 = self.v0 * L;
        for oh in 0..ah.output {
            // The `x` offset of column 0 for each tap (`ow`'s is `base + ow · stride`), `None`
            // when the tap's row lies in the padding.
            let base: [Option<isize>; T] = khw.map(|(kh, kw)| {
                let ih = (oh * ah.stride + kh * ah.dilation) as isize - ah.pad as isize;
                (ih >= 0 && (ih as usize) < ah.input)
                    .then(|| ih * aw.input as isize + (kw * aw.dilation) as isize - aw.pad as isize)
            });
            let row = oh * aw.output;
            let mut step = |ow: usize, check: bool| {
                let g_at = (row + ow) * self.width + lane0;
                let gv: [V; C] = core::array::from_fn(|c| {
                    self.gt
                        .get(g_at + c * L..g_at + (c + 1) * L)
                        .and_then(|s| <&[f32; L]>::try_from(s).ok())
                        .map_or(V::splat(0.0), |s| V::new(*s))
                });
                for ((ar, b), col) in a.iter_mut().zip(&base).zip(&cols) {
                    let Some(b) = *b else {
                        continue;
                    };
                    if check && !(col.0..col.1).contains(&ow) {
                        continue;
                    }
                    let i = (b + (ow * aw.stride) as isize) as usize;
                    let xv = V::splat(self.xc.get(i).copied().unwrap_or(0.0));
                    for (ac, g) in ar.iter_mut().zip(&gv) {
                        *ac += xv * *g;
                    }
                }
            };
            for ow in 0..inner_lo.min(aw.output) {
                step(ow, true);
            }
            for ow in inner_lo..inner_hi {
                step(ow, false);
            }
            for ow in inner_hi..aw.output {
                step(ow, true);
            }
        }
        for (t, row) in a.iter().enumerate() {
            for (c, v) in row.iter().enumerate() {
                if let Some(d) = acc.get_mut(at(t) + c) {
                    *d = *v;
                }
            }
        }
    }
}
