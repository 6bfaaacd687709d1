//! The `simd` catalog's channel-lane kernel for `conv_weight_grad` (the weight gradient) over
//! small output planes: the 1-D CNNs of issue 15 (signals of 19, 10 and 5 samples, 25 channels)
//! and small 2-D layers. Lanes are output channels `co` of one group, distinct outputs each,
//! never distinct terms of one sum.
//!
//! Per tile of taps and chunk of batch elements the cotangent's planes `gy[n, group's co, :]`
//! are transposed into a stack buffer `gt[n][position][co]` (rows padded to whole vectors with
//! zeros), so that a position's channels load as contiguous vectors; the sums live in a second
//! stack buffer, `acc[ci_local][tap][vector of co]`, across the whole batch, and a register
//! tile of up to [`TILE_TAPS`] taps by [`TILE_VECTORS`] vectors of channels (by two input
//! channels when that is at most twelve accumulators) runs over every output position of each
//! batch element of the chunk in turn (its sums leave the registers once per chunk), the input
//! value `x[n, ci, ih, iw]` one broadcast shared by the tile's vectors, each cotangent vector
//! shared by the tile's taps and input channels.
//!
//! Bounds: each buffer holds at most [`BUF`] `f32`s (32 KiB, 64 KiB in all): `gt` as many batch
//! elements' output planes × the group's channels rounded up to a whole vector as fit (C1's
//! three layers: 13, 25 and 51 elements with 8 or 16 lanes, 15, 29 and 58 with 4), at least one,
//! `acc` a group's
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

/// The most accumulators (taps × vectors) per input channel of a tile that still takes two
/// input channels: 6 (C1's kernels of 3 by two vectors: 12 accumulators, 15 registers with the
/// cotangent vectors and the broadcast, within AVX2's and SSE2's 16).
const PAIR_MAX: usize = 6;

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
/// padded with zero cotangents whose lanes are never stored), in registers over a chunk of
/// batch elements and kept in `acc` between chunks.
pub(crate) fn run(x: &[f32], gy: &[f32], u: &mut [f32], geo: &Geometry) {
    let (hw_in, hw_out, taps) = geo.planes();
    let (cin_g, cout_g) = (geo.c_in_group(), geo.c_out_group());
    let nvec = cout_g.div_ceil(L);
    let width = nvec * L;
    let mut gt = [0.0f32; BUF];
    let mut acc = [V::splat(0.0); BUF / L];
    let aw = geo.axes[1];
    for group in 0..geo.groups {
        let acc = acc.get_mut(..cin_g * taps * nvec).unwrap_or(&mut []);
        acc.fill(V::splat(0.0));
        // The transposed cotangents of up to `chunk` batch elements at once, `per` values each
        // (`fits` keeps one element's within the buffer): a register tile then adds a whole
        // chunk's terms before its sums go back to `acc`.
        let per = hw_out * width;
        let chunk = BUF.checked_div(per).unwrap_or(1).max(1);
        let gt = gt.get_mut(..(chunk * per).min(BUF)).unwrap_or(&mut []);
        gt.fill(0.0);
        // Taps a tile at a time, outermost: each output's sum still runs over the batch, then
        // the positions, and a tile's taps are worked out once, not per batch element and
        // input channel (their divisions cost as much as a 1-D tile's arithmetic).
        let mut t0 = 0;
        while t0 < taps {
            let tt = (taps - t0).min(TILE_TAPS);
            // Each tap's `(kh, kw)` and the columns `ow` whose `iw` lies inside the row.
            let khw: [(usize, usize); TILE_TAPS] =
                core::array::from_fn(|t| ((t0 + t) / aw.kernel, (t0 + t) % aw.kernel));
            let cols: [(usize, usize); TILE_TAPS] = khw.map(|(_, kw)| aw.valid(kw));
            let mut n0 = 0;
            while n0 < geo.batch {
                let nb = (geo.batch - n0).min(chunk);
                // `gt[i · per + p · width + c] = gy[n0 + i, group·cout_g + c, p]`.
                for (i, g) in gt.chunks_exact_mut(per.max(1)).take(nb).enumerate() {
                    let g_at = ((n0 + i) * geo.c_out + group * cout_g) * hw_out;
                    let planes = gy.get(g_at..g_at + cout_g * hw_out).unwrap_or(&[]);
                    transpose(planes, hw_out, g, width);
                }
                let mut cil = 0;
                while cil < cin_g {
                    // Two input channels per tile when both fit the registers beside the
                    // tile's taps and channel vectors: each cotangent vector then feeds twice
                    // as many sums.
                    let pair = cin_g - cil >= 2 && tt * TILE_VECTORS.min(nvec) <= PAIR_MAX;
                    let mut v0 = 0;
                    while v0 < nvec {
                        let cc = (nvec - v0).min(TILE_VECTORS);
                        let at = |i: usize, t: usize| ((cil + i) * taps + t0 + t) * nvec + v0;
                        let p = Plane {
                            geo,
                            x,
                            x_at: (n0 * geo.c_in + group * cin_g + cil) * hw_in,
                            nb,
                            gt,
                            per,
                            width,
                            khw: &khw,
                            cols: &cols,
                            v0,
                        };
                        macro_rules! tile {
                            ($t:literal, $c:literal) => {
                                if pair {
                                    p.tile::<$t, $c, 2>(acc, at)
                                } else {
                                    p.tile::<$t, $c, 1>(acc, at)
                                }
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
                    cil += if pair { 2 } else { 1 };
                }
                n0 += nb;
            }
            t0 += tt;
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

/// `gt[p · width + c] = planes[c · hw + p]` for the `planes.len() / hw` channels `c` and the
/// `hw` positions `p` (`gt` holds `hw` rows of `width ≥` channels): four positions at a time,
/// each channel's four values read as one slice and stored into four rows. Out of line, so that
/// its loops keep their bounds in registers (inlined into [`run`], an index per element reloaded
/// them from the stack on every store).
#[inline(never)]
fn transpose(planes: &[f32], hw: usize, gt: &mut [f32], width: usize) {
    const P: usize = 4;
    let channels = planes.len().checked_div(hw).unwrap_or(0).min(width);
    let mut p0 = 0;
    let mut rows = gt.chunks_exact_mut(width.max(1)).take(hw);
    while p0 + P <= hw {
        let (Some(r0), Some(r1), Some(r2), Some(r3)) =
            (rows.next(), rows.next(), rows.next(), rows.next())
        else {
            return;
        };
        let quads = r0
            .iter_mut()
            .zip(r1.iter_mut())
            .zip(r2.iter_mut().zip(r3.iter_mut()))
            .take(channels);
        for (((d0, d1), (d2, d3)), plane) in quads.zip(planes.chunks_exact(hw)) {
            if let Some(&[a, b, c, d]) = plane.get(p0..p0 + P) {
                (*d0, *d1, *d2, *d3) = (a, b, c, d);
            }
        }
        p0 += P;
    }
    for (p, row) in (p0..hw).zip(rows) {
        for (d, plane) in row.iter_mut().take(channels).zip(planes.chunks_exact(hw)) {
            if let Some(&v) = plane.get(p) {
                *d = v;
            }
        }
    }
}

/// A chunk of `nb` batch elements from `n0`, one or two input channels from `ci`, one tile's
/// first tap `t0` and first vector `v0` of channels.
struct Plane<'a> {
    geo: &'a Geometry,
    /// The whole input, and the offset of `x[n0, ci]` in it (`x[n0, ci + 1]` follows; batch
    /// element `n0 + i` lies `i · c_in` planes further).
    x: &'a [f32],
    x_at: usize,
    nb: usize,
    /// The chunk's transposed cotangents, `per` values each, `width` lanes per output position.
    gt: &'a [f32],
    per: usize,
    width: usize,
    /// The tile's taps, `(kh, kw)` each, and the columns `[lo, hi)` each reads inside the row.
    khw: &'a [(usize, usize); TILE_TAPS],
    cols: &'a [(usize, usize); TILE_TAPS],
    v0: usize,
}

impl Plane<'_> {
    /// Adds the chunk's terms to the sums of input channels `0 .. CI` of the tile, taps
    /// `0 .. T` and channel vectors `v0 .. v0 + C`: `acc[at(i, t) + c]`, over its batch
    /// elements in increasing order, then every output position in row-major order.
    #[inline(always)]
    fn tile<const T: usize, const C: usize, const CI: usize>(
        &self,
        acc: &mut [V],
        at: impl Fn(usize, usize) -> usize,
    ) {
        let [ah, aw] = self.geo.axes;
        let mut a = [[[V::splat(0.0); C]; T]; CI];
        for (i, ai) in a.iter_mut().enumerate() {
            for (t, row) in ai.iter_mut().enumerate() {
                for (c, v) in row.iter_mut().enumerate() {
                    *v = acc.get(at(i, t) + c).copied().unwrap_or(V::splat(0.0));
                }
            }
        }
        let khw: [(usize, usize); T] =
            core::array::from_fn(|t| self.khw.get(t).copied().unwrap_or((0, 0)));
        let cols: [(usize, usize); T] =
            core::array::from_fn(|t| self.cols.get(t).copied().unwrap_or((0, 0)));
        let inner_lo = cols.iter().map(|c| c.0).max().unwrap_or(0);
        let inner_hi = cols.iter().map(|c| c.1).min().unwrap_or(0).max(inner_lo);
        let lane0 = self.v0 * L;
        let (hw_in, _, _) = self.geo.planes();
        for e in 0..self.nb {
            // `x[n0 + e, ci]` and `x[n0 + e, ci + 1]` (the second empty in a tile of one).
            let xa = self.x_at + e * self.geo.c_in * hw_in;
            let plane = |k: usize| {
                let at = xa + k * hw_in;
                self.x.get(at..at + hw_in).unwrap_or(&[])
            };
            let xc = [plane(0), if CI == 2 { plane(1) } else { &[] }];
            let gt = self.gt.get(e * self.per..).unwrap_or(&[]);
            for oh in 0..ah.output {
                // The `x` offset of column 0 for each tap (`ow`'s is `base + ow · stride`), `None`
                // when the tap's row lies in the padding.
                let base: [Option<isize>; T] = khw.map(|(kh, kw)| {
                    let ih = (oh * ah.stride + kh * ah.dilation) as isize - ah.pad as isize;
                    (ih >= 0 && (ih as usize) < ah.input).then(|| {
                        ih * aw.input as isize + (kw * aw.dilation) as isize - aw.pad as isize
                    })
                });
                let row = oh * aw.output;
                // The tile's cotangent vectors at output column `ow`.
                let gv_at = |ow: usize| -> [V; C] {
                    let g_at = (row + ow) * self.width + lane0;
                    core::array::from_fn(|c| {
                        gt.get(g_at + c * L..g_at + (c + 1) * L)
                            .and_then(|s| <&[f32; L]>::try_from(s).ok())
                            .map_or(V::splat(0.0), |s| V::new(*s))
                    })
                };
                let step = |a: &mut [[[V; C]; T]; CI], ow: usize, check: bool| {
                    let gv = gv_at(ow);
                    for (ai, xc) in a.iter_mut().zip(&xc) {
                        for ((ar, b), col) in ai.iter_mut().zip(&base).zip(&cols) {
                            let Some(b) = *b else {
                                continue;
                            };
                            if check && !(col.0..col.1).contains(&ow) {
                                continue;
                            }
                            let i = (b + (ow * aw.stride) as isize) as usize;
                            let xv = V::splat(xc.get(i).copied().unwrap_or(0.0));
                            for (ac, g) in ar.iter_mut().zip(&gv) {
                                *ac += xv * *g;
                            }
                        }
                    }
                };
                for ow in 0..inner_lo.min(aw.output) {
                    step(&mut a, ow, true);
                }
                // The tile's taps read `T` consecutive inputs (a 1-D kernel or one kernel row,
                // dilation 1; any taps whose offsets happen to be consecutive read the same
                // values): inside the row, one window slice per input channel, each value
                // broadcast from memory.
                let contig = match base.first() {
                    Some(&Some(b0))
                        if (0..T).all(|t| base.get(t) == Some(&Some(b0 + t as isize))) =>
                    {
                        Some(b0)
                    }
                    _ => None,
                };
                if let Some(b0) = contig {
                    for ow in inner_lo..inner_hi {
                        let gv = gv_at(ow);
                        let at = (b0 + (ow * aw.stride) as isize) as usize;
                        for (ai, xc) in a.iter_mut().zip(&xc) {
                            let win = xc.get(at..at + T).unwrap_or(&[]);
                            for (t, ar) in ai.iter_mut().enumerate() {
                                let xv = V::splat(win.get(t).copied().unwrap_or(0.0));
                                for (ac, g) in ar.iter_mut().zip(&gv) {
                                    *ac += xv * *g;
                                }
                            }
                        }
                    }
                } else {
                    for ow in inner_lo..inner_hi {
                        step(&mut a, ow, false);
                    }
                }
                for ow in inner_hi..aw.output {
                    step(&mut a, ow, true);
                }
            }
        }
        for (i, ai) in a.iter().enumerate() {
            for (t, row) in ai.iter().enumerate() {
                for (c, v) in row.iter().enumerate() {
                    if let Some(d) = acc.get_mut(at(i, t) + c) {
                        *d = *v;
                    }
                }
            }
        }
    }
}
