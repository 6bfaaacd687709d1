//! The `simd` catalog's kernels for the convolution's adjoints: `conv_transpose` (the input
//! gradient) and `conv_weight_grad` (the weight gradient). Each reproduces its reference
//! kernel's bits (`tapeplan_core::ops::conv_transpose::kernel`,
//! `tapeplan_core::ops::conv_weight_grad::kernel`): the same rounded products, added one at a
//! time in the reference's order to an accumulator that starts at `+0.0`, taps that fall in the
//! padding (or off the stride) skipped, never multiplied by zero. Lanes are always distinct
//! outputs, never distinct terms of one output's sum.
//!
//! Index arithmetic is bounded by the lengths of buffers the caller checked against the
//! geometry (see the catalog's module doc), so it cannot overflow.
#![allow(clippy::arithmetic_side_effects)]

use super::lanes::{L, V};
use tapeplan_core::ops::conv::{Axis, Geometry};

/// The largest kernel extent per axis the kernels take (their per-row tables of taps live on
/// the stack); a larger kernel runs the reference.
pub(crate) const MAX_KERNEL: usize = 16;

/// True when the kernels here take geometry `g` (else the reference runs): kernels up to
/// [`MAX_KERNEL`] per axis, and for `conv_transpose` (`transpose`) at least
/// [`super::MIN_SIMD_COLUMNS`] columns per residue class of the stride.
pub(crate) fn fits(g: &Geometry, transpose: bool) -> bool {
    let [_, aw] = g.axes;
    g.axes
        .iter()
        .all(|a| a.kernel >= 1 && a.kernel <= MAX_KERNEL)
        && (!transpose || aw.input.div_ceil(aw.stride.max(1)) >= super::MIN_SIMD_COLUMNS)
}

/// `a.source(o, k)` in signed arithmetic: the input position tap `k` of output `o` reads,
/// negative in the leading padding.
#[inline(always)]
fn signed_source(a: &Axis, o: usize, k: usize) -> isize {
    (o * a.stride + k * a.dilation) as isize - a.pad as isize
}

// ---------------------------------------------------------------------------------------------
// conv_transpose.

/// `z = conv_transpose(gy, w)` (`gy` the cotangent, `y`-shaped; `z` `x`-shaped) over row-major
/// buffers of geometry `geo` (lengths checked by the caller; [`fits`] holds).
///
/// # Arithmetic order
/// The reference's: each `z[n, ci, ih, iw]` starts at `+0.0` and accumulates
/// `acc = acc + gy[n, co, oh, ow] * w[co, ci_local, kh, kw]` (product rounded, then sum rounded,
/// never fused) over its group's output channels `co` in increasing order, then the taps
/// `(kh, kw)` row-major, for the one `(oh, ow)` each tap reaches, skipping taps that reach no
/// output (off the stride or past the edge).
///
/// Lanes are input-gradient columns of one residue class modulo the stride: `iw = p + s·j` for
/// consecutive `j` (with stride 1, plain consecutive columns). Within a class a tap `kw` either
/// reaches every column (at `ow = j + c` for a constant `c`, so the cotangent's values load as
/// one contiguous vector) or none. A register tile holds four input channels of one group by two
/// vectors of columns (one channel by four vectors when the group has fewer than four channels
/// left), over the whole `co, kh, kw` loop; columns whose every reaching tap lands inside the
/// cotangent run a tile at a time (the last vector overlapping the one before it when needed:
/// recomputing an output gives the same bits), the others one output at a time in the same
/// order.
pub(crate) fn conv_transpose(gy: &[f32], w: &[f32], z: &mut [f32], geo: &Geometry) {
    let [ah, aw] = geo.axes;
    let cin_g = geo.c_in_group();
    let (hw_in, _, _) = geo.planes();
    let s = aw.stride;
    for n in 0..geo.batch {
        for group in 0..geo.groups {
            let mut cil = 0;
            while cil < cin_g {
                let ci = group * cin_g + cil;
                let r = if cin_g - cil >= 4 { 4 } else { 1 };
                let t = Spread::new(geo, gy, w, n, group, cil);
                for p in 0..s.min(aw.input) {
                    let cols = t.cols(p);
                    for ih in 0..ah.input {
                        let rows = t.rows(ih);
                        // Columns `iw = p + s·j`, `j < count`.
                        let count = (aw.input - p).div_ceil(s);
                        let (ja, jb) = (cols.lo.min(count), cols.hi.min(count));
                        let (ja, jb) = if jb >= ja + L {
                            (ja, jb)
                        } else {
                            (count, count)
                        };
                        let row_at = |k: usize| (n * geo.c_in + ci + k) * hw_in + ih * aw.input;
                        let mut one = |j: usize| {
                            for k in 0..r {
                                if let Some(o) = z.get_mut(row_at(k) + p + s * j) {
                                    *o = t.one(k, &rows, &cols, j);
                                }
                            }
                        };
                        (0..ja).for_each(&mut one);
                        (jb..count).for_each(&mut one);
                        let mut store = |j: usize, acc: &[V]| {
                            for (k, v) in acc.iter().enumerate() {
                                let at = row_at(k % r) + p + s * (j + (k / r) * L);
                                if s == 1 {
                                    if let Some(dst) = z.get_mut(at..at + L) {
                                        dst.copy_from_slice(v.as_array());
                                    }
                                } else {
                                    for (l, &e) in v.as_array().iter().enumerate() {
                                        if let Some(o) = z.get_mut(at + l * s) {
                                            *o = e;
                                        }
                                    }
                                }
                            }
                        };
                        // Whole tiles, the last one overlapping the one before it when
                        // the interior is not a multiple of the tile (recomputing an output
                        // gives the same bits); single vectors when no whole tile fits.
                        let full = if r == 4 { 2 * L } else { 4 * L };
                        let mut j = ja;
                        while jb - ja >= full && j < jb {
                            let at = j.min(jb - full);
                            if r == 4 {
                                store(at, &t.vectors::<4, 2, 8>(&rows, &cols, at));
                            } else {
                                store(at, &t.vectors::<1, 4, 4>(&rows, &cols, at));
                            }
                            j += full;
                        }
                        while j < jb {
                            let at = j.min(jb - L);
                            if r == 4 {
                                store(at, &t.vectors::<4, 1, 4>(&rows, &cols, at));
                            } else {
                                store(at, &t.vectors::<1, 1, 1>(&rows, &cols, at));
                            }
                            j += L;
                        }
                    }
                }
                cil += r;
            }
        }
    }
}

/// For one input row `ih`: the cotangent row `oh` each kernel row `kh` reaches, if any.
struct Rows {
    oh: [Option<usize>; MAX_KERNEL],
}

/// For one residue class `p` of columns: the offset `c` with `ow = j + c` for each kernel column
/// `kw` that reaches the class (`None` for one off the stride), and the range `lo..hi` of `j`
/// where every reaching tap lands inside the cotangent row.
struct Cols {
    off: [Option<isize>; MAX_KERNEL],
    lo: usize,
    hi: usize,
}

/// One batch element, one group and a tile of input channels from `cil` (local to the group):
/// the group's cotangent channels and their weights.
struct Spread<'a> {
    geo: &'a Geometry,
    /// `gy[n, group's output channels]`.
    gy: &'a [f32],
    /// `w[group's output channels]`.
    w: &'a [f32],
    /// The first input channel of the tile, local to the group.
    cil: usize,
}

impl<'a> Spread<'a> {
    fn new(
        geo: &'a Geometry,
        gy: &'a [f32],
        w: &'a [f32],
        n: usize,
        group: usize,
        cil: usize,
    ) -> Self {
        let (_, hw_out, taps) = geo.planes();
        let (cin_g, cout_g) = (geo.c_in_group(), geo.c_out_group());
        let g_at = (n * geo.c_out + group * cout_g) * hw_out;
        let w_at = group * cout_g * cin_g * taps;
        Spread {
            geo,
            gy: gy.get(g_at..g_at + cout_g * hw_out).unwrap_or(&[]),
            w: w.get(w_at..w_at + cout_g * cin_g * taps).unwrap_or(&[]),
            cil,
        }
    }

    fn rows(&self, ih: usize) -> Rows {
        let ah = self.geo.axes[0];
        let mut oh = [None; MAX_KERNEL];
        for (kh, o) in oh.iter_mut().enumerate().take(ah.kernel) {
            let num = (ih + ah.pad) as isize - (kh * ah.dilation) as isize;
            if num < 0 {
                continue;
            }
            let (q, rem) = if ah.stride == 1 {
                (num as usize, 0)
            } else {
                (num as usize / ah.stride, num as usize % ah.stride)
            };
            if rem == 0 && q < ah.output {
                *o = Some(q);
            }
        }
        Rows { oh }
    }

    fn cols(&self, p: usize) -> Cols {
        let aw = self.geo.axes[1];
        let s = aw.stride as isize;
        let mut off = [None; MAX_KERNEL];
        let (mut lo, mut hi) = (0isize, isize::MAX);
        for (kw, o) in off.iter_mut().enumerate().take(aw.kernel) {
            let num = (p + aw.pad) as isize - (kw * aw.dilation) as isize;
            if num.rem_euclid(s) != 0 {
                continue;
            }
            let c = num.div_euclid(s);
            *o = Some(c);
            // `0 <= j + c < output`.
            lo = lo.max(-c);
            hi = hi.min(aw.output as isize - c);
        }
        Cols {
            off,
            lo: lo.max(0) as usize,
            hi: hi.max(0) as usize,
        }
    }

    /// `z[n, ci + k, ih, p + s·j]` alone (`rows` of row `ih`, `cols` of class `p`), in the
    /// reference's order.
    fn one(&self, k: usize, rows: &Rows, cols: &Cols, j: usize) -> f32 {
        let [ah, aw] = self.geo.axes;
        let (_, hw_out, taps) = self.geo.planes();
        let cin_g = self.geo.c_in_group();
        let mut acc = 0.0f32;
        for col in 0..self.geo.c_out_group() {
            let wc = (col * cin_g + self.cil + k) * taps;
            for (kh, oh) in rows.oh.iter().enumerate().take(ah.kernel) {
                let Some(oh) = *oh else {
                    continue;
                };
                let grow = col * hw_out + oh * aw.output;
                for (kw, off) in cols.off.iter().enumerate().take(aw.kernel) {
                    let Some(ow) = off.map(|c| j as isize + c) else {
                        continue;
                    };
                    if ow < 0 || ow as usize >= aw.output {
                        continue;
                    }
                    let gv = self.gy.get(grow + ow as usize).copied().unwrap_or(0.0);
                    let wv = self.w.get(wc + kh * aw.kernel + kw).copied().unwrap_or(0.0);
                    acc += gv * wv;
                }
            }
        }
        acc
    }

    /// Outputs at columns `j + c·L ..` (`+ l`) of the residue class, channels `cil + k`, for
    /// `k < R`, `c < C`, as `acc[c·R + k]` (`A = R·C`); every reaching tap inside the row.
    #[inline(always)]
    fn vectors<const R: usize, const C: usize, const A: usize>(
        &self,
        rows: &Rows,
        cols: &Cols,
        j: usize,
    ) -> [V; A] {
        let [ah, aw] = self.geo.axes;
        let (_, hw_out, taps) = self.geo.planes();
        let cin_g = self.geo.c_in_group();
        let mut acc = [V::splat(0.0); A];
        for col in 0..self.geo.c_out_group() {
            let wc = (col * cin_g + self.cil) * taps;
            for (kh, oh) in rows.oh.iter().enumerate().take(ah.kernel) {
                let Some(oh) = *oh else {
                    continue;
                };
                let grow = self
                    .gy
                    .get(col * hw_out + oh * aw.output..)
                    .and_then(|s| s.get(..aw.output))
                    .unwrap_or(&[]);
                for (kw, off) in cols.off.iter().enumerate().take(aw.kernel) {
                    let Some(off) = *off else {
                        continue;
                    };
                    let at = (j as isize + off) as usize;
                    // One check for the tile's columns.
                    let Some(gs) = grow.get(at..at + C * L) else {
                        continue;
                    };
                    let (gc, _) = gs.as_chunks::<L>();
                    let gv: [V; C] =
                        core::array::from_fn(|c| gc.get(c).map_or(V::splat(0.0), |s| V::new(*s)));
                    let wt = wc + kh * aw.kernel + kw;
                    let wv: [V; R] = core::array::from_fn(|k| {
                        V::splat(self.w.get(wt + k * taps).copied().unwrap_or(0.0))
                    });
                    for (c, &gc) in gv.iter().enumerate() {
                        for (k, &wk) in wv.iter().enumerate() {
                            if let Some(a) = acc.get_mut(c * R + k) {
                                *a += gc * wk;
                            }
                        }
                    }
                }
            }
        }
        acc
    }
}

// ---------------------------------------------------------------------------------------------
// conv_weight_grad.

/// Kernel taps per register tile of the weight gradient (one accumulator vector each).
const TAPS: usize = 9;

/// `u = conv_weight_grad(x, gy)` (`gy` the cotangent, `y`-shaped; `u` `w`-shaped) over
/// row-major buffers of geometry `geo` (lengths checked by the caller; [`fits`] holds).
///
/// # Arithmetic order
/// The reference's: each `u[co, ci_local, kh, kw]` starts at `+0.0` and accumulates
/// `acc = acc + x[n, ci, ih, iw] * gy[n, co, oh, ow]` (product rounded, then sum rounded, never
/// fused) over the batch `n` in increasing order, then the output positions `(oh, ow)`
/// row-major, skipping positions whose `(ih, iw)` lies in the padding.
///
/// Lanes are `L` consecutive output channels `co` (the last tile partial: its spare lanes
/// compute on a repeated channel and are never stored), and a register tile holds up to
/// [`TAPS`] kernel taps of one local input channel, one vector each, over the whole `n, oh, ow`
/// loop: every lane and every accumulator is one output's own sum, in its own order. At each
/// position the cotangent's `L` channels are gathered once and shared by the tile's taps; the
/// input value is one broadcast when the tile's channels share a group, else gathered per lane
/// (depthwise).
pub(crate) fn conv_weight_grad(x: &[f32], gy: &[f32], u: &mut [f32], geo: &Geometry) {
    let cout_g = geo.c_out_group();
    if cout_g >= WG_SAME || geo.groups == 1 {
        weight_grad::<WG_SAME, WgSame>(x, gy, u, geo);
    } else {
        weight_grad::<WG_MIXED, WgMixed>(x, gy, u, geo);
    }
}

/// A vector of `N` `f32` lanes (`wide`'s IEEE lane-wise sums and products, never fused).
trait Vector<const N: usize>:
    Copy + core::ops::Add<Output = Self> + core::ops::Mul<Output = Self>
{
    fn splat(x: f32) -> Self;
    fn from_lanes(a: [f32; N]) -> Self;
    fn lanes(self) -> [f32; N];
}

macro_rules! vector {
    ($t:ty, $n:literal) => {
        impl Vector<$n> for $t {
            #[inline(always)]
            fn splat(x: f32) -> Self {
                <$t>::splat(x)
            }
            #[inline(always)]
            fn from_lanes(a: [f32; $n]) -> Self {
                <$t>::new(a)
            }
            #[inline(always)]
            fn lanes(self) -> [f32; $n] {
                self.to_array()
            }
        }
    };
}
vector!(wide::f32x4, 4);
vector!(wide::f32x8, 8);
vector!(wide::f32x16, 16);

/// The weight gradient's lanes when a tile's channels share a group (the input value is a
/// broadcast) and when they do not (gathered per lane), by the build's vector width: gathers
/// of 16 lanes cost more than they save (`conv_speed`, see the catalog's docs).
#[cfg(target_feature = "avx512f")]
const WG_SAME: usize = 8;
#[cfg(target_feature = "avx512f")]
type WgSame = wide::f32x8;
#[cfg(not(target_feature = "avx512f"))]
const WG_SAME: usize = L;
#[cfg(not(target_feature = "avx512f"))]
type WgSame = V;
const WG_MIXED: usize = 4;
type WgMixed = wide::f32x4;

fn weight_grad<const N: usize, W: Vector<N>>(x: &[f32], gy: &[f32], u: &mut [f32], geo: &Geometry) {
    let (_, _, taps) = geo.planes();
    let (cin_g, cout_g) = (geo.c_in_group(), geo.c_out_group());
    if cout_g == 0 || cin_g == 0 {
        return;
    }
    let mut co0 = 0;
    while co0 < geo.c_out {
        let lanes = N.min(geo.c_out - co0);
        let co: [usize; N] = core::array::from_fn(|l| co0 + l.min(lanes - 1));
        let one_group = co0 / cout_g == (co0 + lanes - 1) / cout_g;
        for cil in 0..cin_g {
            // `x` channel of each lane.
            let ci: [usize; N] = co.map(|c| (c / cout_g) * cin_g + cil);
            let mut t0 = 0;
            while t0 < taps {
                let acc = if one_group {
                    gather_taps::<N, W, true>(x, gy, geo, &co, &ci, t0)
                } else {
                    gather_taps::<N, W, false>(x, gy, geo, &co, &ci, t0)
                };
                for (t, a) in acc.iter().enumerate().take(taps - t0) {
                    for (l, v) in a.lanes().into_iter().enumerate().take(lanes) {
                        if let Some(o) = u.get_mut(((co0 + l) * cin_g + cil) * taps + t0 + t) {
                            *o = v;
                        }
                    }
                }
                t0 += TAPS;
            }
        }
        co0 += lanes;
    }
}

/// The sums of taps `t0 ..` (up to [`TAPS`]) for output channels `co` (one per lane) reading
/// input channels `ci`; `SAME`: every lane reads the same input channel.
#[inline(always)]
fn gather_taps<const N: usize, W: Vector<N>, const SAME: bool>(
    x: &[f32],
    gy: &[f32],
    geo: &Geometry,
    co: &[usize; N],
    ci: &[usize; N],
    t0: usize,
) -> [W; TAPS] {
    let [ah, aw] = geo.axes;
    let (hw_in, hw_out, taps) = geo.planes();
    let mut acc = [W::splat(0.0); TAPS];
    // Each tap of the tile: `(kh, kw)` and the columns `ow` whose `iw` lies inside the row.
    let mut kh = [0usize; TAPS];
    let mut kw = [0usize; TAPS];
    let mut cols = [(0usize, 0usize); TAPS];
    for t in 0..TAPS.min(taps - t0) {
        if let (Some(h), Some(w), Some(c)) = (kh.get_mut(t), kw.get_mut(t), cols.get_mut(t)) {
            (*h, *w) = ((t0 + t) / aw.kernel, (t0 + t) % aw.kernel);
            *c = aw.valid(*w);
        }
    }
    // Where every tap's column lies inside the row.
    let used = TAPS.min(taps - t0);
    let inner_lo = cols.iter().take(used).map(|c| c.0).max().unwrap_or(0);
    let inner_hi = cols
        .iter()
        .take(used)
        .map(|c| c.1)
        .min()
        .unwrap_or(0)
        .max(inner_lo);
    for n in 0..geo.batch {
        let g_at: [usize; N] = co.map(|c| (n * geo.c_out + c) * hw_out);
        let x_at: [usize; N] = ci.map(|c| (n * geo.c_in + c) * hw_in);
        let x_at0 = x_at.first().copied().unwrap_or(0);
        for oh in 0..ah.output {
            // The input row each tap reads (as an offset of `x`'s channel), `None` in the
            // padding or past the tile's taps.
            let mut row: [Option<isize>; TAPS] = [None; TAPS];
            for (t, r) in row.iter_mut().enumerate().take(taps - t0) {
                let (h, w) = (
                    kh.get(t).copied().unwrap_or(0),
                    kw.get(t).copied().unwrap_or(0),
                );
                let ih = signed_source(&ah, oh, h);
                if ih >= 0 && (ih as usize) < ah.input {
                    // `x` offset of column `ow` is `base + ow · stride`.
                    *r = Some(ih * aw.input as isize + signed_source(&aw, 0, w));
                }
            }
            let g_row = oh * aw.output;
            let mut step = |ow: usize, check: bool| {
                let gv =
                    W::from_lanes(g_at.map(|a| gy.get(a + g_row + ow).copied().unwrap_or(0.0)));
                for t in 0..TAPS {
                    let (Some(Some(base)), Some(&(lo, hi)), Some(a)) =
                        (row.get(t), cols.get(t), acc.get_mut(t))
                    else {
                        continue;
                    };
                    if check && !(lo..hi).contains(&ow) {
                        continue;
                    }
                    let at = (*base + (ow * aw.stride) as isize) as usize;
                    let xv = if SAME {
                        W::splat(x.get(x_at0 + at).copied().unwrap_or(0.0))
                    } else {
                        W::from_lanes(x_at.map(|a| x.get(a + at).copied().unwrap_or(0.0)))
                    };
                    *a = *a + xv * gv;
                }
            };
            for ow in 0..inner_lo.min(aw.output) {
                step(ow, true);
            }
            for ow in inner_lo..inner_hi {
                step(ow, false);
            }
            for ow in inner_hi.max(inner_lo)..aw.output {
                step(ow, true);
            }
        }
    }
    acc
}
