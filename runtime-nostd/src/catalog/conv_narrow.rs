//! The `simd` catalog's kernels for narrow convolutions, `conv` and `conv_transpose` over rows
//! too short for the column lanes of `lanes::conv` and `conv_adjoint::conv_transpose` (fewer
//! than `MIN_SIMD_COLUMNS` output columns, or columns per residue class of the stride): the
//! 1-D CNNs of issue 15, whose signals shrink to 19, 10 and 5 samples. Lanes are channels of the
//! written tensor instead: output channels `co` for `conv`, input channels `ci` for
//! `conv_transpose`, distinct outputs each, never distinct terms of one sum.
//!
//! Both are one loop over a *source* tensor (`x` for `conv`, the cotangent `gy` for
//! `conv_transpose`) written into a *destination* (`y`, the input gradient `z`): each
//! destination element `d[n, c_d, q]` starts at `+0.0` and adds `s[n, c_s, q'] · w[…, t]` over
//! its group's source channels `c_s` in increasing order, then the kernel taps `t = (kh, kw)`
//! row-major, for the one source position `q'` tap `t` pairs with `q`, skipping taps that pair
//! with none (the padding for `conv`; off the stride or past the edge for `conv_transpose`).
//! That is each reference kernel's `# Arithmetic order`.
//!
//! A row's destination columns split into classes (`Class`: all columns for `conv`, one
//! residue class modulo the stride for `conv_transpose`) whose members pair with the same
//! column taps; members whose every tap reads inside the source row run a register tile of
//! four with each packed weight vector loaded once per tap, the others as single positions (or
//! tiles of four consecutive columns) through per-column tap tables.
//!
//! A tile's destination channels are one vector of `L` lanes, or two (`2L`) when a group has
//! more than `L` of them and their weights fit the pack: each source value, broadcast once,
//! then feeds two vectors (C1's 25 channels under AVX-512: one tile of 16 + 9 lanes instead of
//! two passes over the source; `conv` 0.69× and `conv_transpose` 0.62× the one-vector time on
//! its middle layer). The weights of a tile are packed, per `(c_s, t)`, into its vectors on
//! the stack: at most [`PACK`] `f32`s used (32 KiB; the array holds twice that for two
//! vectors), so a group may have at most `PACK / L` source channels × taps with one vector
//! (2048 with 4 lanes, 512 with 16), half that with two; the per-column tap
//! tables take destination rows of at most [`MAX_WIDTH`] columns, kernels of at most
//! `conv_adjoint::MAX_KERNEL` taps per axis. [`fits`] says whether a geometry is taken; the
//! catalog then runs the column-lane kernels or the reference. The catalog runs on hosts and
//! wasm only (not on the firmware's stacks), where about 45 KiB of stack (the pack, 8.7 KiB
//! of tap tables, one row of outputs: at most [`MAX_WIDTH`] vectors, 4 KiB with 16 lanes)
//! is no concern (64 KiB more for the two-vector pack's array).
//!
//! Index arithmetic is bounded by the lengths of buffers the caller checked against the
//! geometry (see the catalog's module doc), so it cannot overflow.
#![allow(clippy::arithmetic_side_effects)]

use super::conv_adjoint::MAX_KERNEL;
use super::lanes::{L, V};
use tapeplan_core::ops::conv::{Axis, Geometry};

/// The packed weights' bound, in `f32`s (32 KiB): a group's source channels × kernel taps × `L`.
pub(crate) const PACK: usize = 8192;

/// The widest destination row (columns) the per-column tap tables hold.
pub(crate) const MAX_WIDTH: usize = 64;

/// Destination positions of one row per register tile (one accumulator vector each).
const TILE: usize = 4;

/// The fewest destination channels per group the kernels take: with fewer (a depthwise
/// convolution) most lanes would idle, and the reference or the column lanes run.
const MIN_CHANNELS: usize = 4;

/// True when the kernels here take geometry `g` for `conv` (`transpose` false) or
/// `conv_transpose`: kernels of at most `MAX_KERNEL` taps per axis (and for `conv_transpose` a
/// column stride of at most `MAX_KERNEL`: one `Class` per residue), destination rows of at most
/// [`MAX_WIDTH`] columns, at least [`MIN_CHANNELS`] destination channels per group (or all of
/// them, when fewer than a vector), and a group's source channels × taps × `L` within [`PACK`].
pub(crate) fn fits(g: &Geometry, transpose: bool) -> bool {
    let (src_g, dst_g) = if transpose {
        (g.c_out_group(), g.c_in_group())
    } else {
        (g.c_in_group(), g.c_out_group())
    };
    let (_, _, taps) = g.planes();
    let width = if transpose {
        g.axes[1].input
    } else {
        g.axes[1].output
    };
    g.axes
        .iter()
        .all(|a| a.kernel >= 1 && a.kernel <= MAX_KERNEL && a.stride >= 1)
        && width <= MAX_WIDTH
        && (!transpose || g.axes[1].stride <= MAX_KERNEL)
        && dst_g >= MIN_CHANNELS.min(L)
        && src_g
            .checked_mul(taps)
            .and_then(|v| v.checked_mul(L))
            .is_some_and(|v| v <= PACK)
}

/// For one destination position along an axis: the taps `k` that pair with a source position,
/// in increasing `k`, and that position, `(k, source)`; `count` of them.
#[derive(Clone, Copy)]
struct Taps {
    at: [(u32, u32); MAX_KERNEL],
    count: usize,
}

impl Taps {
    /// The taps of destination position `q` along axis `a`: for `conv` the input position
    /// `q · stride + k · dilation − pad` inside the input, for `conv_transpose` the output
    /// position `o` with `o · stride + k · dilation − pad = q`, when it exists.
    fn of(a: &Axis, q: usize, transpose: bool) -> Taps {
        let mut t = Taps {
            at: [(0, 0); MAX_KERNEL],
            count: 0,
        };
        for k in 0..a.kernel.min(MAX_KERNEL) {
            let source = if transpose {
                let num = (q + a.pad) as isize - (k * a.dilation) as isize;
                if num < 0
                    || !(num as usize).is_multiple_of(a.stride)
                    || num as usize / a.stride >= a.output
                {
                    continue;
                }
                num as usize / a.stride
            } else {
                let pos = (q * a.stride + k * a.dilation) as isize - a.pad as isize;
                if pos < 0 || pos as usize >= a.input {
                    continue;
                }
                pos as usize
            };
            if let Some(e) = t.at.get_mut(t.count) {
                *e = (k as u32, source as u32);
                t.count += 1;
            }
        }
        t
    }

    fn iter(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.at
            .iter()
            .take(self.count)
            .map(|&(k, s)| (k as usize, s as usize))
    }
}

/// `conv` (`transpose` false: `src = x`, `dst = y`) or `conv_transpose` (`src = gy`, `dst = z`)
/// over row-major buffers of geometry `geo` (lengths checked by the caller; [`fits`] holds).
///
/// # Arithmetic order
/// The reference's (see the module doc): each destination element starts at `+0.0` and
/// accumulates `acc = acc + s · w` (product rounded, then sum rounded, never fused) over its
/// group's source channels in increasing order, then the taps `(kh, kw)` row-major, skipping
/// taps that pair with no source position. Lanes are `L` or `2L` destination channels of one
/// group (the last tile of a group partial: its spare lanes compute on zero weights and are
/// never stored);
/// a register tile holds [`TILE`] consecutive positions of one destination row, one vector
/// each, over the whole channel and tap loop: every lane and every accumulator is one output's
/// own sum, in its own order.
pub(crate) fn run(src: &[f32], w: &[f32], dst: &mut [f32], geo: &Geometry, transpose: bool) {
    let dst_g = if transpose {
        geo.c_in_group()
    } else {
        geo.c_out_group()
    };
    // Two vectors of channels per tile when a group has more than one vector's worth (each
    // source value then feeds two vectors) and their packed weights fit.
    let (_, _, taps) = geo.planes();
    let src_g = if transpose {
        geo.c_out_group()
    } else {
        geo.c_in_group()
    };
    if dst_g > L && src_g * taps * 2 * L <= PACK {
        run_tiles::<2>(src, w, dst, geo, transpose);
    } else {
        run_tiles::<1>(src, w, dst, geo, transpose);
    }
}

/// [`run`] with tiles of `NV` vectors of destination channels.
fn run_tiles<const NV: usize>(
    src: &[f32],
    w: &[f32],
    dst: &mut [f32],
    geo: &Geometry,
    transpose: bool,
) {
    let [ah, aw] = geo.axes;
    let (hw_in, hw_out, taps) = geo.planes();
    let (cin_g, cout_g) = (geo.c_in_group(), geo.c_out_group());
    let (src_g, dst_g, c_src, c_dst, plane_src, plane_dst) = if transpose {
        (cout_g, cin_g, geo.c_out, geo.c_in, hw_out, hw_in)
    } else {
        (cin_g, cout_g, geo.c_in, geo.c_out, hw_in, hw_out)
    };
    let (rows, width, src_width) = if transpose {
        (ah.input, aw.input, aw.output)
    } else {
        (ah.output, aw.output, aw.input)
    };
    // The taps of every destination column.
    let mut cols = [Taps {
        at: [(0, 0); MAX_KERNEL],
        count: 0,
    }; MAX_WIDTH];
    for (q, c) in cols.iter_mut().enumerate().take(width) {
        *c = Taps::of(&aw, q, transpose);
    }
    let mut classes = [Class::EMPTY; MAX_KERNEL];
    let n_classes = Class::all(&aw, transpose, &mut classes);
    let mut pack = [[V::splat(0.0); NV]; PACK / L];
    let mut row_out = [[V::splat(0.0); NV]; MAX_WIDTH];
    for group in 0..geo.groups {
        let mut d0 = 0;
        while d0 < dst_g {
            let lanes = (NV * L).min(dst_g - d0);
            // `pack[c·taps + t][v]`, lane `l`: the weight of source channel `c` (local), tap
            // `t`, for destination channel `d0 + v·L + l` (local).
            for c in 0..src_g {
                for t in 0..taps {
                    let Some(p) = pack.get_mut(c * taps + t) else {
                        continue;
                    };
                    for (v, pv) in p.iter_mut().enumerate() {
                        let lane = |l: usize| {
                            let l = v * L + l;
                            if l >= lanes {
                                return 0.0;
                            }
                            let (co, cil) = if transpose {
                                (group * cout_g + c, d0 + l)
                            } else {
                                (group * cout_g + d0 + l, c)
                            };
                            w.get((co * cin_g + cil) * taps + t).copied().unwrap_or(0.0)
                        };
                        *pv = V::new(core::array::from_fn(lane));
                    }
                }
            }
            let pack = pack.get(..src_g * taps).unwrap_or(&[]);
            for n in 0..geo.batch {
                let s_at = (n * c_src + group * src_g) * plane_src;
                let g = Src {
                    s: src.get(s_at..s_at + src_g * plane_src).unwrap_or(&[]),
                    pack,
                    plane: plane_src,
                    width: src_width,
                    kw: aw.kernel,
                    taps,
                };
                let d_at = (n * c_dst + group * dst_g + d0) * plane_dst;
                for qh in 0..rows {
                    let rt = Taps::of(&ah, qh, transpose);
                    // The row's outputs, one vector of channels per column, written out
                    // channel by channel after the row.
                    let mut store = |q: usize, a: &[V; NV]| {
                        if let Some(o) = row_out.get_mut(q) {
                            *o = *a;
                        }
                    };
                    for class in classes.iter().take(n_classes) {
                        // Members `q = first + s·j`, `j < count`; `lo..hi` all taps inside.
                        let (lo, hi) = (class.lo.min(class.count), class.hi.min(class.count));
                        let (lo, hi) = if hi >= lo + TILE { (lo, hi) } else { (0, 0) };
                        let q_of = |j: usize| class.first + class.every * j;
                        for (a, b) in [(0, lo), (hi, class.count)] {
                            // Consecutive columns (`every` 1) a tile at a time, others alone.
                            let mut j = a;
                            while j < b {
                                let q = q_of(j);
                                if class.every == 1 && b - j >= TILE {
                                    let acc = tile::<TILE, NV>(&g, &rt, &cols, q);
                                    for (i, a) in acc.iter().enumerate() {
                                        store(q + i, a);
                                    }
                                    j += TILE;
                                } else {
                                    let [a] = tile::<1, NV>(&g, &rt, &cols, q);
                                    store(q, &a);
                                    j += 1;
                                }
                            }
                        }
                        // Whole tiles, the last one overlapping the one before it (recomputing
                        // an output gives the same bits).
                        let mut j = lo;
                        while j < hi {
                            let at = j.min(hi - TILE);
                            let acc = match class.step {
                                1 => g.interior::<TILE, 1>(&rt, class, at),
                                2 => g.interior::<TILE, 2>(&rt, class, at),
                                _ => g.interior::<TILE, 0>(&rt, class, at),
                            };
                            for (i, a) in acc.iter().enumerate() {
                                store(q_of(at + i), a);
                            }
                            j += TILE;
                        }
                    }
                    let row_out = row_out.get(..width).unwrap_or(&[]);
                    write_row(row_out, lanes, dst, d_at + qh * width, plane_dst);
                }
            }
            d0 += lanes;
        }
    }
}

/// Stores one destination row of each of the tile's channels: `dst[at + l · stride + q]` =
/// lane `l` of `row[q]` (lanes `l < lanes`, positions `q < row.len()`), a block of four lanes
/// by four positions at a time transposed in registers (`wide::f32x4::transpose`; rows of
/// fewer than four positions one value at a time). Out of line, so that its loops keep their
/// bounds in registers.
#[inline(never)]
fn write_row<const NV: usize>(
    row: &[[V; NV]],
    lanes: usize,
    dst: &mut [f32],
    at: usize,
    stride: usize,
) {
    const B: usize = 4;
    let width = row.len();
    let lane_of = |q: usize, l: usize| {
        row.get(q)
            .and_then(|r| r.get(l / L))
            .and_then(|v| v.as_array().get(l % L))
            .copied()
            .unwrap_or(0.0)
    };
    let mut l0 = 0;
    while l0 < lanes {
        let n_l = (lanes - l0).min(B);
        // Lanes `l0 .. l0 + B` lie in one vector: `L` is a multiple of `B`.
        let (v, i0) = (l0 / L, l0 % L);
        if width < B {
            for q in 0..width {
                for j in 0..n_l {
                    if let Some(d) = dst.get_mut(at + (l0 + j) * stride + q) {
                        *d = lane_of(q, l0 + j);
                    }
                }
            }
            l0 += B;
            continue;
        }
        // Blocks at `0, B, 2B, …`, the last one moved back to end at `width` (it stores some
        // values a second time, the same values).
        let mut q0 = 0;
        while q0 < width {
            let q = q0.min(width - B);
            let block: [wide::f32x4; B] = core::array::from_fn(|k| {
                let four = row
                    .get(q + k)
                    .and_then(|r| r.get(v))
                    .and_then(|v| v.as_array().get(i0..i0 + B))
                    .and_then(|s| <[f32; B]>::try_from(s).ok())
                    .unwrap_or([0.0; B]);
                wide::f32x4::new(four)
            });
            let t = wide::f32x4::transpose(block);
            for (j, t) in t.iter().enumerate().take(n_l) {
                let o = at + (l0 + j) * stride + q;
                if let Some(d) = dst.get_mut(o..o + B) {
                    d.copy_from_slice(t.as_array());
                }
            }
            q0 += B;
        }
        l0 += B;
    }
}

/// One batch element and group of a call: the source channels and the packed weights.
struct Src<'a, const NV: usize> {
    /// The group's source channels, `plane` elements each.
    s: &'a [f32],
    /// The packed weights, `taps` tiles of `NV` vectors per source channel.
    pack: &'a [[V; NV]],
    plane: usize,
    /// Source row length.
    width: usize,
    /// Kernel taps per row (`K_w`) and in all (`K_h · K_w`).
    kw: usize,
    taps: usize,
}

/// The sums of destination positions `qw .. qw + P` of one row (row taps `rt`, column taps
/// `cols`), `NV` vectors of channel lanes each.
#[inline(always)]
fn tile<const P: usize, const NV: usize>(
    g: &Src<'_, NV>,
    rt: &Taps,
    cols: &[Taps],
    qw: usize,
) -> [[V; NV]; P] {
    let mut acc = [[V::splat(0.0); NV]; P];
    let Some(ct) = cols.get(qw..qw + P) else {
        return acc;
    };
    for (sc, pc) in
        g.s.chunks_exact(g.plane.max(1))
            .zip(g.pack.chunks_exact(g.taps.max(1)))
    {
        for (kh, sh) in rt.iter() {
            let srow = sc.get(sh * g.width..).unwrap_or(&[]);
            let prow = pc.get(kh * g.kw..).unwrap_or(&[]);
            for (a, c) in acc.iter_mut().zip(ct) {
                for (kw, sw) in c.iter() {
                    let xv = V::splat(srow.get(sw).copied().unwrap_or(0.0));
                    let wv = prow.get(kw).copied().unwrap_or([V::splat(0.0); NV]);
                    for (av, &w) in a.iter_mut().zip(&wv) {
                        *av += xv * w;
                    }
                }
            }
        }
    }
    acc
}

/// The destination columns `q = first + every · j` (`j < count`) of one residue class: for
/// `conv` all columns (one class, `every` 1), for `conv_transpose` one class per residue modulo
/// the stride (`every` the stride). Every member pairs with the same column taps `k`, tap `k`
/// reading source column `j · step + off` (`taps[..n]` as `(k, off)` in increasing `k`);
/// members `lo..hi` read inside the source row for every tap.
#[derive(Clone, Copy)]
struct Class {
    first: usize,
    every: usize,
    count: usize,
    step: usize,
    taps: [(usize, isize); MAX_KERNEL],
    n: usize,
    lo: usize,
    hi: usize,
}

impl Class {
    const EMPTY: Class = Class {
        first: 0,
        every: 1,
        count: 0,
        step: 1,
        taps: [(0, 0); MAX_KERNEL],
        n: 0,
        lo: 0,
        hi: 0,
    };

    /// The classes of axis `a`'s destination columns into `out`; how many.
    fn all(a: &Axis, transpose: bool, out: &mut [Class; MAX_KERNEL]) -> usize {
        let k_max = a.kernel.min(MAX_KERNEL);
        if !transpose {
            let mut c = Class {
                count: a.output,
                step: a.stride,
                ..Class::EMPTY
            };
            let (mut lo, mut hi) = (0usize, a.output);
            for (k, t) in c.taps.iter_mut().enumerate().take(k_max) {
                *t = (k, (k * a.dilation) as isize - a.pad as isize);
                let (l, h) = a.valid(k);
                (lo, hi) = (lo.max(l), hi.min(h));
            }
            c.n = k_max;
            (c.lo, c.hi) = (lo, hi.max(lo));
            if let Some(o) = out.first_mut() {
                *o = c;
            }
            return 1;
        }
        let s = a.stride.max(1);
        let mut n = 0;
        for r in 0..s.min(a.input).min(MAX_KERNEL) {
            let mut c = Class {
                first: r,
                every: s,
                count: (a.input - r).div_ceil(s),
                ..Class::EMPTY
            };
            let (mut lo, mut hi) = (0isize, c.count as isize);
            for k in 0..k_max {
                let num = (r + a.pad) as isize - (k * a.dilation) as isize;
                if num.rem_euclid(s as isize) != 0 {
                    continue;
                }
                let off = num.div_euclid(s as isize);
                if let Some(t) = c.taps.get_mut(c.n) {
                    *t = (k, off);
                    c.n += 1;
                }
                // `0 <= j + off < output`.
                lo = lo.max(-off);
                hi = hi.min(a.output as isize - off);
            }
            c.lo = lo.max(0) as usize;
            c.hi = (hi.max(0) as usize).max(c.lo);
            if let Some(o) = out.get_mut(n) {
                *o = c;
                n += 1;
            }
        }
        n
    }
}

impl<const NV: usize> Src<'_, NV> {
    /// The sums of class members `j .. j + P` of one row (row taps `rt`), every column tap
    /// inside the source row: `NV` vectors of channel lanes each, in the reference's order
    /// (source channels, then row taps, then column taps). `STEP` is the class's `step` when it
    /// is 1 or 2 (the window of `P` members then one slice with constant offsets, each source
    /// value broadcast straight from memory), 0 for any other step.
    #[inline(always)]
    fn interior<const P: usize, const STEP: usize>(
        &self,
        rt: &Taps,
        class: &Class,
        j: usize,
    ) -> [[V; NV]; P] {
        let mut acc = [[V::splat(0.0); NV]; P];
        let taps = class.taps.get(..class.n).unwrap_or(&[]);
        let step = if STEP == 0 { class.step } else { STEP };
        // The window of the `P` members' source columns, one slice per tap.
        let span = (P - 1) * step + 1;
        for (sc, pc) in self
            .s
            .chunks_exact(self.plane.max(1))
            .zip(self.pack.chunks_exact(self.taps.max(1)))
        {
            for (kh, sh) in rt.iter() {
                let srow = sc.get(sh * self.width..).unwrap_or(&[]);
                let prow = pc.get(kh * self.kw..).unwrap_or(&[]);
                for &(kw, off) in taps {
                    let wv = prow.get(kw).copied().unwrap_or([V::splat(0.0); NV]);
                    let base = ((j * class.step) as isize + off) as usize;
                    let win = srow.get(base..base + span).unwrap_or(&[]);
                    for (p, a) in acc.iter_mut().enumerate() {
                        let xv = V::splat(win.get(p * step).copied().unwrap_or(0.0));
                        for (av, &w) in a.iter_mut().zip(&wv) {
                            *av += xv * w;
                        }
                    }
                }
            }
        }
        acc
    }
}
