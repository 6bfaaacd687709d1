//! The `simd` catalog's convolutions as matrix products over gathered columns (im2col): `conv`,
//! `conv_transpose` and `conv_weight_grad` each become the register-tiled product of
//! `lanes` (its `separate` step) over a block of columns gathered onto the stack, so that the
//! convolutions of small CNNs (issue 15's C1: 25 channels over signals of 19, 10 and 5
//! samples) run at the products' rate instead of lanes over their 25 channels.
//!
//! Each is a product whose reduction index `r` is the reference's summation order flattened:
//!
//! | op | product | `r` (row-major) | columns `c` (row-major) |
//! |---|---|---|---|
//! | `conv` | `y[co, c] = Σ_r w[co, r] · X[r, c]` | `(ci, kh, kw)` | `(n, oh, ow)` |
//! | `conv_transpose` | `z[ci, c] = Σ_r wᵀ[ci, r] · G[r, c]` | `(co, kh, kw)` | `(n, ih, iw)` |
//! | `conv_weight_grad` | `uᵀ[r, co] = Σ_c X[r, c] · gᵀ[c, co]` | `(ci, kh, kw)` | `(n, oh, ow)` |
//!
//! where `X[r, c]` is the input value tap `(kh, kw)` of channel `ci` reads for output position
//! `c`, and `G[r, c]` the cotangent value tap `(kh, kw)` of channel `co` pairs with input
//! position `c`. `conv_transpose` runs one product per residue class of the strides (the input
//! positions whose taps pair with outputs, and only those taps: no product is spent on a tap
//! off the stride); `conv_weight_grad` reduces over the columns, its output channels rounded
//! up to whole vectors (the spare lanes never stored). The product's accumulators start at
//! `+0.0` and add `a · b` (rounded product, rounded sum) over increasing `r` (for
//! `conv_weight_grad`, increasing `c`, block after block, each block's sums continued from the
//! stored `f32`): each reference kernel's `# Arithmetic order`, one output per accumulator
//! lane.
//!
//! # Why the padding's zeros keep the bits
//! Where the reference *skips* a tap (padding, off the stride, past the edge), the gathered
//! matrix holds `+0.0` and the product adds `0 · f` for the other factor `f`. That is exact
//! when `f` is finite: `0 · f` is `±0`, and an accumulator that started at `+0.0` under
//! round-to-nearest is never `-0` (`+0 + -0 = +0`, and an exact cancellation gives `+0`), so
//! adding `±0` leaves every accumulator's bits unchanged (a NaN or an infinity stays what it
//! was). The other factor is the weights for `conv` and `conv_transpose` and the cotangent for
//! `conv_weight_grad`: each function checks that they are all finite and otherwise returns
//! `false` (nothing written), and the catalog runs its other kernels, which skip.
//!
//! # Bounds
//! The gathered block and the product's block each hold at most [`BUF`] `f32`s (32 KiB, an L1
//! data cache); `conv_transpose`'s transposed weights too. Columns per block: the largest
//! multiple of 16 within both, at least 16; reductions of at least [`MIN_TERMS`] terms and
//! at least [`MIN_ROWS`] output rows per group; kernels of at most `MAX_KERNEL` taps per axis
//! (the per-axis tap lines); offsets into the gathered tensor below `u32::MAX` (the index
//! table). The catalog runs on hosts and wasm only (not on the firmware's stacks), where the
//! at most 160 KiB of stack buffers (`conv_weight_grad`'s five) are no concern.
//!
//! Index arithmetic is bounded by the lengths of buffers the caller checked against the
//! geometry (see the catalog's module doc), so it cannot overflow.
#![allow(clippy::arithmetic_side_effects)]

use super::conv_adjoint::MAX_KERNEL;
use super::lanes::{self, Separate, L};
use tapeplan_core::ops::conv::{Axis, Geometry};

/// Each stack buffer's bound, in `f32`s (32 KiB).
pub(crate) const BUF: usize = 8192;

/// The fewest terms per output sum (the reduction's length `r`) taken: with fewer, each
/// register tile's loads and stores of its sums outweigh its few multiply-adds, and the
/// channel-lane kernels run (C1's first layer: one input channel, five taps).
pub(crate) const MIN_TERMS: usize = 16;

/// The fewest output rows of a product per group (output channels; input channels for
/// `conv_transpose`) taken: with fewer (a depthwise convolution) the tiles of one row idle.
pub(crate) const MIN_ROWS: usize = 4;

/// Columns per block are a multiple of this, and at least this: two vectors of 8 lanes.
const COLUMN_STEP: usize = 16;

/// The destination positions one kernel tap pairs with a source position, along one axis:
/// `q` in `lo .. hi`, reading source position `src0 + (q − lo) · step`.
#[derive(Clone, Copy, Default)]
struct Line {
    lo: usize,
    hi: usize,
    step: usize,
    src0: usize,
}

impl Line {
    /// For the destination run `q0 .. q0 + len`: `(d0, count, s0)`, the first paired
    /// destination's offset in the run, how many are paired (consecutive from there), and the
    /// first one's source position.
    fn within(&self, q0: usize, len: usize) -> (usize, usize, usize) {
        let first = self.lo.max(q0);
        let end = self.hi.min(q0 + len);
        if first >= end {
            return (0, 0, 0);
        }
        (
            first - q0,
            end - first,
            self.src0 + (first - self.lo) * self.step,
        )
    }
}

/// One axis's taps as [`Line`]s over its destination positions, in increasing kernel tap
/// `k[i]`, `n` of them, over `count` destination positions.
#[derive(Clone, Copy)]
struct Taps {
    at: [Line; MAX_KERNEL],
    k: [usize; MAX_KERNEL],
    n: usize,
    count: usize,
}

impl Taps {
    /// `conv`'s: destinations are outputs, and output `o` within `Axis::valid(k)` reads input
    /// `o · stride + k · dilation − pad`.
    fn conv(a: &Axis) -> Taps {
        let mut t = Taps {
            at: [Line::default(); MAX_KERNEL],
            k: core::array::from_fn(|k| k),
            n: a.kernel.min(MAX_KERNEL),
            count: a.output,
        };
        for (k, line) in t.at.iter_mut().enumerate().take(t.n) {
            let (lo, hi) = a.valid(k);
            if lo < hi {
                *line = Line {
                    lo,
                    hi,
                    step: a.stride,
                    src0: a.source(lo, k),
                };
            }
        }
        t
    }

    /// `conv_transpose`'s for the residue class `r` of the stride: destinations are the inputs
    /// `q = r + j · stride` (as `j`), and tap `k` pairs input `q` with the output `o` of
    /// `o · stride + k · dilation − pad = q` when it exists. Only the taps that pair with the
    /// class at all (`r + pad − k · dilation` a multiple of the stride) are kept, each pairing
    /// `j` with `o = j + off` for its own `off` (a line of step 1 over `j`).
    fn class(a: &Axis, r: usize) -> Taps {
        let s = a.stride.max(1);
        let count = a.input.saturating_sub(r).div_ceil(s);
        let mut t = Taps {
            at: [Line::default(); MAX_KERNEL],
            k: [0; MAX_KERNEL],
            n: 0,
            count,
        };
        for k in 0..a.kernel.min(MAX_KERNEL) {
            let num = (r + a.pad) as isize - (k * a.dilation) as isize;
            if num.rem_euclid(s as isize) != 0 {
                continue;
            }
            let off = num.div_euclid(s as isize);
            let lo = (-off).max(0);
            let hi = (count as isize).min(a.output as isize - off).max(lo);
            if let (Some(line), Some(kk)) = (t.at.get_mut(t.n), t.k.get_mut(t.n)) {
                *line = Line {
                    lo: lo as usize,
                    hi: hi as usize,
                    step: 1,
                    src0: (lo + off).max(0) as usize,
                };
                *kk = k;
                t.n += 1;
            }
        }
        t
    }
}

/// The source of a gather: a tensor `[N, channels, h, w]` (`plane`), read from channel `first`
/// of each batch element for `per_group` channels, each through the tap lines `th`, `tw` onto
/// the destination plane `th.count × tw.count`.
struct Gather<'a> {
    src: &'a [f32],
    channels: usize,
    first: usize,
    per_group: usize,
    plane: [usize; 2],
    th: &'a Taps,
    tw: &'a Taps,
}

impl<'a> Gather<'a> {
    /// `conv`'s input `x` of geometry `g`, group `group`'s channels, through `conv`'s taps.
    fn input(x: &'a [f32], g: &Geometry, group: usize, (th, tw): (&'a Taps, &'a Taps)) -> Self {
        let cin_g = g.c_in_group();
        Gather {
            src: x,
            channels: g.c_in,
            first: group * cin_g,
            per_group: cin_g,
            plane: [g.axes[0].input, g.axes[1].input],
            th,
            tw,
        }
    }

    /// Writes columns `from .. from + cols` (each `(n, qh, qw)` over the destination plane):
    /// element `(r, c)` at `out[r · cols + c − from]`, `+0.0` where the tap pairs with no
    /// source position. `idx` (at least `taps · cols`) receives
    /// each tap's source offsets for the group's first channel, then every channel's values
    /// are read through it (the other channels are whole planes further on).
    fn fill(&self, from: usize, cols: usize, out: &mut [f32], idx: &mut [u32]) {
        let width = self.tw.count;
        let [kh_n, kw_n] = [self.th.n, self.tw.n];
        let [sh, sw] = self.plane;
        let taps = kh_n * kw_n;
        let Some(idx) = idx.get_mut(..taps * cols) else {
            return;
        };
        idx.fill(NONE);
        // Runs within one row of one batch element's destination plane.
        runs(from, cols, self.th.count * width, |n, pos, dc, len| {
            let base = (n * self.channels + self.first) * sh * sw;
            let mut done = 0;
            while done < len {
                let (qh, qw) = ((pos + done) / width, (pos + done) % width);
                let part = (width - qw).min(len - done);
                for kh in 0..kh_n {
                    // The source row tap `kh` pairs with destination row `qh`, if any.
                    let lh = self.th.at.get(kh).copied().unwrap_or_default();
                    let (_, paired, ih) = lh.within(qh, 1);
                    if paired == 0 {
                        continue;
                    }
                    for kw in 0..kw_n {
                        let lw = self.tw.at.get(kw).copied().unwrap_or_default();
                        let (d0, count, s0) = lw.within(qw, part);
                        let at = (kh * kw_n + kw) * cols + dc + done + d0;
                        let slots = idx.get_mut(at..at + count).unwrap_or(&mut []);
                        let first = base + ih * sw + s0;
                        for (i, e) in slots.iter_mut().enumerate() {
                            *e = (first + i * lw.step) as u32;
                        }
                    }
                }
                done += part;
            }
        });
        let plane = sh * sw;
        for ci in 0..self.per_group {
            let src = self.src.get(ci * plane..).unwrap_or(&[]);
            for (t, it) in idx.chunks_exact(cols.max(1)).enumerate() {
                let r = ci * taps + t;
                let dst = out.get_mut(r * cols..).unwrap_or(&mut []);
                // `NONE` is past the end of any `src` (`axes_fit`), on 32-bit targets too.
                for (d, &i) in dst.iter_mut().zip(it) {
                    *d = src.get(i as usize).copied().unwrap_or(0.0);
                }
            }
        }
    }
}

/// No source position (a skipped tap) in [`Gather::fill`]'s index table.
const NONE: u32 = u32::MAX;

/// Splits columns `from .. from + cols` (row-major over `[N, plane]`) into runs within one
/// batch element: `f(n, position, column − from, length)`.
fn runs(from: usize, cols: usize, plane: usize, mut f: impl FnMut(usize, usize, usize, usize)) {
    if plane == 0 {
        return;
    }
    let mut c = from;
    while c < from + cols {
        let (n, pos) = (c / plane, c % plane);
        let len = (plane - pos).min(from + cols - c);
        f(n, pos, c - from, len);
        c += len;
    }
}

/// Columns per block: the largest multiple of [`COLUMN_STEP`] with `rows × columns` and
/// `out_rows × columns` within [`BUF`]; `None` below [`COLUMN_STEP`].
fn block_columns(rows: usize, out_rows: usize) -> Option<usize> {
    let c = BUF / rows.max(out_rows).max(1);
    (c >= COLUMN_STEP).then_some(c / COLUMN_STEP * COLUMN_STEP)
}

/// True when the tap lines hold both axes of `g` and every offset into the gathered tensor
/// `src` fits the `u32` index table (below [`NONE`]).
fn axes_fit(g: &Geometry, src: &[f32]) -> bool {
    src.len() < NONE as usize
        && g.axes
            .iter()
            .all(|a| a.kernel >= 1 && a.kernel <= MAX_KERNEL && a.stride >= 1)
}

/// True when every value of `v` is finite (chunks without an early exit inside, so that the
/// test runs on vectors).
fn finite(v: &[f32]) -> bool {
    v.chunks(256)
        .all(|c| c.iter().fold(true, |all, x| all & x.is_finite()))
}

/// `y = conv(x, w)` over row-major buffers of geometry `g` (lengths checked by the caller) as
/// products over gathered columns (see the module doc); `false`, nothing written, when the
/// geometry is outside the bounds or a weight is not finite.
///
/// # Arithmetic order
/// `tapeplan_core::ops::conv::kernel`'s: each output starts at `+0.0` and adds `x · w` over its
/// group's input channels, then the taps `(kh, kw)` row-major (the padding's taps add `+0 · w`,
/// which keeps the bits: see the module doc).
pub(crate) fn conv(x: &[f32], w: &[f32], y: &mut [f32], g: &Geometry) -> bool {
    let (_, hw_out, taps) = g.planes();
    let (cin_g, cout_g) = (g.c_in_group(), g.c_out_group());
    let terms = cin_g * taps;
    let Some(cb) = block_columns(terms, cout_g) else {
        return false;
    };
    if terms < MIN_TERMS || cout_g < MIN_ROWS || !axes_fit(g, x) || !finite(w) {
        return false;
    }
    let [ah, aw] = g.axes;
    let (th, tw) = (Taps::conv(&ah), Taps::conv(&aw));
    let mut cols = [0.0f32; BUF];
    let mut idx = [0u32; BUF];
    let mut prod = [0.0f32; BUF];
    let total = g.batch * hw_out;
    for group in 0..g.groups {
        let gather = Gather::input(x, g, group, (&th, &tw));
        let wg = w
            .get(group * cout_g * terms..(group + 1) * cout_g * terms)
            .unwrap_or(&[]);
        let mut c0 = 0;
        while c0 < total {
            let nb = cb.min(total - c0);
            gather.fill(c0, nb, &mut cols, &mut idx);
            let (b, o) = (
                cols.get(..terms * nb).unwrap_or(&[]),
                prod.get_mut(..cout_g * nb).unwrap_or(&mut []),
            );
            lanes::product_into::<Separate>(wg, b, o, (cout_g, terms, nb), false);
            scatter(o, nb, y, (g.c_out, group * cout_g, cout_g), c0, hw_out);
            c0 += nb;
        }
    }
    true
}

/// `z = conv_transpose(gy, w)` (the input gradient; `gy` of the output's shape, `z` of the
/// input's) as products over gathered columns, one per residue class of the strides (the
/// input positions `(rh + sh · jh, rw + sw · jw)`, whose taps pair with outputs: no product is
/// spent on a tap off the stride); `false`, nothing written, when the geometry is outside the
/// bounds or a weight is not finite.
///
/// # Arithmetic order
/// `tapeplan_core::ops::conv_transpose::kernel`'s: each `z` element starts at `+0.0` and adds
/// `gy · w` over its group's output channels, then the taps `(kh, kw)` row-major, the taps its
/// class never pairs left out; a tap past the edge adds `+0 · w` (see the module doc).
pub(crate) fn conv_transpose(gy: &[f32], w: &[f32], z: &mut [f32], g: &Geometry) -> bool {
    let (_, _, taps) = g.planes();
    let (cin_g, cout_g) = (g.c_in_group(), g.c_out_group());
    let most = cout_g * taps;
    let Some(cb) = block_columns(most, cin_g) else {
        return false;
    };
    if most < MIN_TERMS || cin_g < MIN_ROWS || cin_g * most > BUF || !axes_fit(g, gy) || !finite(w)
    {
        return false;
    }
    let [ah, aw] = g.axes;
    let mut scratch = Scratch {
        cols: [0.0; BUF],
        idx: [0; BUF],
        prod: [0.0; BUF],
        wt: [0.0; BUF],
    };
    // Batch elements per pass: with more than one residue class, every class writes its share
    // of the same elements of `z` (at most [`Z_PASS_ELEMS`] of them) before the next pass, so
    // that the classes' interleaved stores find `z`'s lines still in the L1 cache. One class
    // at a time over the whole batch, each class stored into every line of `z` again after the
    // class before it had left the cache: those stores were a third of C1's `conv_transpose`
    // outside the product (perf, Zen 4, 2026-12-05). Peers A/B: C1 0.973 (passes of 2 048
    // elements 1.039 of these, 8 192 1.019; passes of as many batch elements as one block of
    // columns held, 1.011 of none).
    let (hw_in, _, _) = g.planes();
    let classes = ah.stride.min(ah.input) * aw.stride.min(aw.input);
    let pass = if classes > 1 {
        (Z_PASS_ELEMS / (cin_g * hw_in).max(1)).max(1)
    } else {
        g.batch
    };
    for group in 0..g.groups {
        // Every class's transposed weights, one after another in `wt` (the classes' taps are
        // each of the kernel's at most once: `cin_g · most` elements at most).
        let mut at = 0;
        for_classes(&ah, &aw, |class| {
            at += class.weights(w, g, group, scratch.wt.get_mut(at..).unwrap_or(&mut []));
        });
        let mut n0 = 0;
        while n0 < g.batch {
            let n1 = (n0 + pass).min(g.batch);
            let mut at = 0;
            for_classes(&ah, &aw, |class| {
                let terms = cout_g * class.th.n * class.tw.n;
                let wt = at..at + cin_g * terms;
                at = wt.end;
                class.run((gy, &mut *z), g, (group, n0..n1), (cb, wt), &mut scratch);
            });
            n0 = n1;
        }
    }
    true
}

/// The elements of `z` one pass of [`conv_transpose`]'s residue classes writes, at most (16
/// KiB: half an L1 data cache), unless one batch element's are more.
const Z_PASS_ELEMS: usize = 4096;

/// Calls `f` with each residue class of the strides, in increasing `(rh, rw)`.
fn for_classes(ah: &Axis, aw: &Axis, mut f: impl FnMut(&Class<'_>)) {
    for rh in 0..ah.stride.min(ah.input) {
        let th = Taps::class(ah, rh);
        for rw in 0..aw.stride.min(aw.input) {
            let tw = Taps::class(aw, rw);
            f(&Class {
                r: [rh, rw],
                th: &th,
                tw: &tw,
            });
        }
    }
}

/// [`conv_transpose`]'s stack buffers: the gathered columns and their index table, the
/// product's block, the classes' transposed weights.
struct Scratch {
    cols: [f32; BUF],
    idx: [u32; BUF],
    prod: [f32; BUF],
    wt: [f32; BUF],
}

/// One residue class of [`conv_transpose`]: the input positions `(r[0] + sh · jh, r[1] + sw ·
/// jw)`, and the taps that pair them with outputs.
struct Class<'a> {
    r: [usize; 2],
    th: &'a Taps,
    tw: &'a Taps,
}

impl Class<'_> {
    /// Writes the class's transposed weights of group `group` at the start of `wt`:
    /// `wt[ci, (co, i, j)] = w[group's co, ci, class tap (k[i], k[j])]`; answers their count,
    /// `cin_g · cout_g · th.n · tw.n` (fewer written when `wt` is shorter).
    fn weights(&self, w: &[f32], g: &Geometry, group: usize, wt: &mut [f32]) -> usize {
        let (_, _, taps) = g.planes();
        let (cin_g, cout_g) = (g.c_in_group(), g.c_out_group());
        let (th, tw) = (self.th, self.tw);
        let terms = cout_g * th.n * tw.n;
        for ci in 0..cin_g {
            for co in 0..cout_g {
                let at = ((group * cout_g + co) * cin_g + ci) * taps;
                let src = w.get(at..at + taps).unwrap_or(&[]);
                for (i, &kh) in th.k.iter().enumerate().take(th.n) {
                    for (j, &kw) in tw.k.iter().enumerate().take(tw.n) {
                        let t = ci * terms + (co * th.n + i) * tw.n + j;
                        if let Some(d) = wt.get_mut(t) {
                            *d = src.get(kh * g.axes[1].kernel + kw).copied().unwrap_or(0.0);
                        }
                    }
                }
            }
        }
        cin_g * terms
    }

    /// The class's `z` values of group `group` and batch elements `batch`, `cb` columns a
    /// block, from the class's transposed weights `scratch.wt[wt]` ([`Class::weights`]).
    fn run(
        &self,
        (gy, z): (&[f32], &mut [f32]),
        g: &Geometry,
        (group, batch): (usize, core::ops::Range<usize>),
        (cb, wt): (usize, core::ops::Range<usize>),
        scratch: &mut Scratch,
    ) {
        let (hw_in, _, _) = g.planes();
        let (cin_g, cout_g) = (g.c_in_group(), g.c_out_group());
        let [ah, aw] = g.axes;
        let (th, tw) = (self.th, self.tw);
        let terms = cout_g * th.n * tw.n;
        let plane = th.count * tw.count;
        let Scratch {
            cols,
            idx,
            prod,
            wt: wts,
        } = scratch;
        let gather = Gather {
            src: gy,
            channels: g.c_out,
            first: group * cout_g,
            per_group: cout_g,
            plane: [ah.output, aw.output],
            th,
            tw,
        };
        let (mut c0, end) = (batch.start * plane, batch.end * plane);
        while c0 < end {
            let nb = cb.min(end - c0);
            let o = prod.get_mut(..cin_g * nb).unwrap_or(&mut []);
            if terms == 0 {
                // No tap pairs the class with an output: the reference's `+0.0`.
                o.fill(0.0);
            } else {
                gather.fill(c0, nb, cols, idx);
                let (a, b) = (
                    wts.get(wt.clone()).unwrap_or(&[]),
                    cols.get(..terms * nb).unwrap_or(&[]),
                );
                lanes::product_into::<Separate>(a, b, o, (cin_g, terms, nb), false);
            }
            // Column `(n, jh, jw)` is input position `(r0 + sh · jh, r1 + sw · jw)`.
            let width = tw.count;
            runs(c0, nb, plane, |n, pos, dc, len| {
                let mut done = 0;
                while done < len {
                    let (jh, jw) = ((pos + done) / width, (pos + done) % width);
                    let part = (width - jw).min(len - done);
                    let at = (self.r[0] + ah.stride * jh) * aw.input + self.r[1] + aw.stride * jw;
                    // `part` values, `aw.stride` apart in `z` (`part >= 1`), each slice
                    // checked once (`step_by` recomputed its remaining length every element).
                    let span = (part - 1) * aw.stride + 1;
                    for ci in 0..cin_g {
                        let d = (n * g.c_in + group * cin_g + ci) * hw_in + at;
                        let s = ci * nb + dc + done;
                        let (Some(src), Some(dst)) = (o.get(s..s + part), z.get_mut(d..d + span))
                        else {
                            continue;
                        };
                        for (i, &v) in src.iter().enumerate() {
                            if let Some(d) = dst.get_mut(i * aw.stride) {
                                *d = v;
                            }
                        }
                    }
                    done += part;
                }
            });
            c0 += nb;
        }
    }
}

/// `u = conv_weight_grad(x, gy)` (the weight gradient, `w`'s shape) as products over gathered
/// columns, the sums continued block after block; `false`, nothing written, when the geometry
/// is outside the bounds or a cotangent value is not finite.
///
/// # Arithmetic order
/// `tapeplan_core::ops::conv_weight_grad::kernel`'s: each `u` element starts at `+0.0` and
/// adds `x · gy` over the batch, then the output positions `(oh, ow)` row-major; a position
/// whose tap reads the padding adds `+0 · gy` (see the module doc).
pub(crate) fn conv_weight_grad(x: &[f32], gy: &[f32], u: &mut [f32], g: &Geometry) -> bool {
    let (_, hw_out, taps) = g.planes();
    let (cin_g, cout_g) = (g.c_in_group(), g.c_out_group());
    let terms = cin_g * taps;
    // The product's columns: the group's output channels, rounded up to whole vectors.
    let lanes = cout_g.div_ceil(L) * L;
    let Some(cb) = block_columns(terms, lanes) else {
        return false;
    };
    if terms < MIN_TERMS
        || cout_g < MIN_ROWS
        || terms * lanes > BUF
        || !axes_fit(g, x)
        || !finite(gy)
    {
        return false;
    }
    let [ah, aw] = g.axes;
    let (th, tw) = (Taps::conv(&ah), Taps::conv(&aw));
    let mut cols = [0.0f32; BUF];
    let mut idx = [0u32; BUF];
    // `gt[c, co]`: the cotangent's columns as rows, spare lanes `+0.0`; `gc` its `[co, c]`.
    let mut gt = [0.0f32; BUF];
    let mut gc = [0.0f32; BUF];
    // `acc[r, co]`: the sums, `uᵀ`.
    let mut acc = [0.0f32; BUF];
    let total = g.batch * hw_out;
    for group in 0..g.groups {
        let gather = Gather::input(x, g, group, (&th, &tw));
        let acc = acc.get_mut(..terms * lanes).unwrap_or(&mut []);
        acc.fill(0.0);
        let mut c0 = 0;
        while c0 < total {
            let nb = cb.min(total - c0);
            gather.fill(c0, nb, &mut cols, &mut idx);
            // The cotangent's block `[co, c]`, then transposed into `gt`.
            scatter_from(
                gy,
                (g.c_out, group * cout_g, cout_g),
                c0,
                hw_out,
                &mut gc,
                nb,
            );
            lanes::pack_transposed_into(&gc, nb, &mut gt, nb, cout_g, lanes);
            let (a, b) = (
                cols.get(..terms * nb).unwrap_or(&[]),
                gt.get(..nb * lanes).unwrap_or(&[]),
            );
            lanes::product_into::<Separate>(a, b, acc, (terms, nb, lanes), c0 > 0);
            c0 += nb;
        }
        // `u[co, r] = acc[r, co]`.
        let ug = u
            .get_mut(group * cout_g * terms..(group + 1) * cout_g * terms)
            .unwrap_or(&mut []);
        for (co, row) in ug.chunks_exact_mut(terms.max(1)).enumerate() {
            for (d, s) in row.iter_mut().zip(acc.iter().skip(co).step_by(lanes)) {
                *d = *s;
            }
        }
    }
    true
}

/// Copies channels `first .. first + rows` of `src: [N, channels, plane]`, columns `from ..
/// from + nb` (over `[N, plane]`), into the block `p: [rows, nb]`: [`scatter`]'s inverse.
fn scatter_from(
    src: &[f32],
    (channels, first, rows): (usize, usize, usize),
    from: usize,
    plane: usize,
    p: &mut [f32],
    nb: usize,
) {
    runs(from, nb, plane, |n, pos, dc, len| {
        for r in 0..rows {
            let at = (n * channels + first + r) * plane + pos;
            if let (Some(s), Some(d)) = (
                src.get(at..at + len),
                p.get_mut(r * nb + dc..r * nb + dc + len),
            ) {
                d.copy_from_slice(s);
            }
        }
    });
}

/// Copies a product's block `p: [rows, nb]` (columns `from .. from + nb` over `[N, plane]`)
/// into channels `first .. first + rows` of `dst: [N, channels, plane]`.
fn scatter(
    p: &[f32],
    nb: usize,
    dst: &mut [f32],
    (channels, first, rows): (usize, usize, usize),
    from: usize,
    plane: usize,
) {
    runs(from, nb, plane, |n, pos, dc, len| {
        for r in 0..rows {
            let at = (n * channels + first + r) * plane + pos;
            if let (Some(s), Some(d)) = (
                p.get(r * nb + dc..r * nb + dc + len),
                dst.get_mut(at..at + len),
            ) {
                d.copy_from_slice(s);
            }
        }
    });
}
