//! The lane-level kernels: elementwise loops and the matrix product, over vectors of `f32`
//! lanes with feature `simd` (the `wide` crate: safe, `no_std`; its add, sub, mul, div and
//! sqrt are the IEEE operations, lane by lane, and it never fuses a multiply with an add), or as
//! plain monomorphic loops without it.
//!
//! The vector width is fixed at compile time by the target's features: 16 lanes with
//! AVX-512F, 8 with AVX, else 4 (SSE2 on x86_64, `simd128` on wasm32, `wide`'s portable
//! fallback elsewhere). Host builds that want AVX2 or AVX-512 compile with
//! `-C target-cpu=native` (or `-C target-feature=+avx2` / `+avx512f`): the `no_std` runtime
//! cannot detect features at run time.
#![allow(clippy::arithmetic_side_effects)]

use super::Src;
use tapeplan_core::ops::{
    abs, add, detach, div, equal, greater, greater_equal, heaviside, maximum, minimum, mul, neg,
    relu, select as sel, sign, sqrt, sub,
};

#[cfg(feature = "simd")]
mod width {
    #[cfg(target_feature = "avx512f")]
    pub type V = wide::f32x16;
    /// Integer lanes of the same width (bit patterns and exponents in `vecmath`).
    #[cfg(target_feature = "avx512f")]
    pub type I = wide::i32x16;
    #[cfg(target_feature = "avx512f")]
    pub const CATALOG: &str = "simd-avx512";
    /// Vectors of columns per matrix-product tile (registers: `MR * NR` accumulators, `NR` of
    /// `b`, one broadcast of `a`; under `separate` the broadcasts are embedded in the multiplies
    /// and the tiles take 8 rows by 2 vectors: `Step::SPLAT_EACH`).
    #[cfg(target_feature = "avx512f")]
    pub const NR: usize = 4;

    #[cfg(all(not(target_feature = "avx512f"), target_feature = "avx"))]
    pub type V = wide::f32x8;
    #[cfg(all(not(target_feature = "avx512f"), target_feature = "avx"))]
    pub type I = wide::i32x8;
    #[cfg(all(not(target_feature = "avx512f"), target_feature = "avx"))]
    pub const CATALOG: &str = "simd-avx2";
    #[cfg(all(not(target_feature = "avx512f"), target_feature = "avx"))]
    pub const NR: usize = 2;

    #[cfg(not(any(target_feature = "avx512f", target_feature = "avx")))]
    pub type V = wide::f32x4;
    #[cfg(not(any(target_feature = "avx512f", target_feature = "avx")))]
    pub type I = wide::i32x4;
    #[cfg(all(
        not(any(target_feature = "avx512f", target_feature = "avx")),
        target_feature = "sse2"
    ))]
    pub const CATALOG: &str = "simd-sse2";
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    pub const CATALOG: &str = "simd128";
    #[cfg(not(any(
        target_feature = "avx512f",
        target_feature = "avx",
        target_feature = "sse2",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    pub const CATALOG: &str = "simd-portable";
    #[cfg(not(any(target_feature = "avx512f", target_feature = "avx")))]
    pub const NR: usize = 2;

    pub const L: usize = core::mem::size_of::<V>() / 4;

    /// Twice `V`'s lanes where the target has no wider register (`wide` then runs each
    /// operation on two vectors, one after the other: two independent dependency chains for
    /// latency-bound code, `vecmath::two`); `V` itself under AVX-512.
    #[cfg(target_feature = "avx512f")]
    pub type V2 = wide::f32x16;
    #[cfg(target_feature = "avx512f")]
    pub type I2 = wide::i32x16;
    #[cfg(all(not(target_feature = "avx512f"), target_feature = "avx"))]
    pub type V2 = wide::f32x16;
    #[cfg(all(not(target_feature = "avx512f"), target_feature = "avx"))]
    pub type I2 = wide::i32x16;
    #[cfg(not(any(target_feature = "avx512f", target_feature = "avx")))]
    pub type V2 = wide::f32x8;
    #[cfg(not(any(target_feature = "avx512f", target_feature = "avx")))]
    pub type I2 = wide::i32x8;
    pub const L2: usize = core::mem::size_of::<V2>() / 4;
}

#[cfg(feature = "simd")]
pub(crate) use width::{CATALOG, I, I2, L, L2, V, V2};
#[cfg(feature = "simd")]
pub const LANES: usize = L;

#[cfg(not(feature = "simd"))]
pub(crate) const CATALOG: &str = "scalar";
#[cfg(not(feature = "simd"))]
pub const LANES: usize = 1;

/// A one-argument elementwise operation: its scalar (the reference's function) and, with
/// `simd`, its lane-wise form, which must give the same bits lane by lane. The default lane
/// form applies the scalar to each lane; operations without a lane form of their own
/// (`VECTOR = false`: `pow` and the `fast` transcendentals) run the scalar loop instead.
pub(crate) trait UnOp: Copy {
    /// True when [`UnOp::v`] is a real lane-wise form.
    #[cfg(feature = "simd")]
    const VECTOR: bool = false;
    fn s(self, x: f32) -> f32;
    #[cfg(feature = "simd")]
    #[inline(always)]
    fn v(self, x: V) -> V {
        V::new(x.to_array().map(|e| self.s(e)))
    }
    /// True when [`UnOp::v2`] is a lane-wise form over [`V2`] worth running instead of
    /// [`UnOp::v`] (latency-bound operations: the transcendentals).
    #[cfg(feature = "simd")]
    const WIDE: bool = false;
    /// The lane-wise form over [`V2`]: the same bits lane by lane as [`UnOp::v`].
    #[cfg(feature = "simd")]
    #[inline(always)]
    fn v2(self, x: V2) -> V2 {
        V2::new(x.to_array().map(|e| self.s(e)))
    }
}

/// A two-argument elementwise operation (see [`UnOp`]).
pub(crate) trait BinOp: Copy {
    fn s(self, a: f32, b: f32) -> f32;
    #[cfg(feature = "simd")]
    fn v(self, a: V, b: V) -> V;
}

/// The lane-wise operations, each with the reference scalar it reproduces.
pub(crate) mod ops {
    use super::*;

    macro_rules! bin {
        ($name:ident, $f:path, |$a:ident, $b:ident| $v:expr) => {
            #[derive(Clone, Copy)]
            pub(crate) struct $name;
            impl BinOp for $name {
                #[inline(always)]
                fn s(self, a: f32, b: f32) -> f32 {
                    $f(a, b)
                }
                #[cfg(feature = "simd")]
                #[inline(always)]
                fn v(self, $a: V, $b: V) -> V {
                    $v
                }
            }
        };
    }

    macro_rules! un {
        ($name:ident, $f:path, |$x:ident| $v:expr) => {
            #[derive(Clone, Copy)]
            pub(crate) struct $name;
            impl UnOp for $name {
                #[cfg(feature = "simd")]
                const VECTOR: bool = true;
                #[inline(always)]
                fn s(self, x: f32) -> f32 {
                    $f(x)
                }
                #[cfg(feature = "simd")]
                #[inline(always)]
                fn v(self, $x: V) -> V {
                    $v
                }
            }
        };
    }

    #[cfg(feature = "simd")]
    #[inline(always)]
    fn splat(x: f32) -> V {
        V::splat(x)
    }

    bin!(Add, add::scalar, |a, b| a + b);
    bin!(Sub, sub::scalar, |a, b| a - b);
    // The IEEE product, except `0 · ±inf`: NaN from non-NaN operands becomes the zero signed by
    // the exclusive or of the operands' sign bits (`mul`'s zero preservation).
    bin!(Mul, mul::scalar, |a, b| {
        let p = a * b;
        let zero_times_inf = p.is_nan() & !(a.is_nan() | b.is_nan());
        zero_times_inf.select((a ^ b) & splat(-0.0), p)
    });
    // `Mul` where one operand is a finite nonzero constant ([`super::mul`]): the product is then
    // never `0 · inf`, and the plain IEEE product is `mul::scalar`'s in every lane.
    #[cfg(feature = "simd")]
    bin!(MulByFinite, mul::scalar, |a, b| a * b);
    bin!(Div, div::scalar, |a, b| a / b);
    // Masks: ordered comparisons (false when either side is NaN), as in the scalar code.
    bin!(Equal, equal::scalar, |a, b| a
        .simd_eq(b)
        .select(splat(1.0), splat(0.0)));
    bin!(Greater, greater::scalar, |a, b| a
        .simd_gt(b)
        .select(splat(1.0), splat(0.0)));
    bin!(GreaterEqual, greater_equal::scalar, |a, b| a
        .simd_ge(b)
        .select(splat(1.0), splat(0.0)));
    // NaN in either argument gives NaN; ties give `a`.
    bin!(Maximum, maximum::scalar, |a, b| (a.is_nan() | b.is_nan())
        .select(splat(f32::NAN), a.simd_ge(b).select(a, b)));
    bin!(Minimum, minimum::scalar, |a, b| (a.is_nan() | b.is_nan())
        .select(splat(f32::NAN), a.simd_le(b).select(a, b)));

    // `-x` and `|x|` are sign-bit operations (NaN included).
    un!(Neg, neg::scalar, |x| -x);
    un!(Abs, abs::scalar, |x| x.abs());
    un!(Detach, detach::scalar, |x| x);
    // `sqrt` is correctly rounded in IEEE 754, in `libm` and in every vector unit.
    un!(Sqrt, sqrt::scalar, |x| x.sqrt());
    // `x` where `x > 0` or NaN, else `+0.0`.
    un!(Relu, relu::scalar, |x| (x.simd_gt(splat(0.0)) | x.is_nan())
        .select(x, splat(0.0)));
    // `1` where `x > 0`, NaN stays, else `0`.
    un!(Heaviside, heaviside::scalar, |x| x
        .simd_gt(splat(0.0))
        .select(splat(1.0), x.is_nan().select(x, splat(0.0))));
    // `1`, `-1`, NaN stays, else `+0.0`.
    un!(Sign, sign::scalar, |x| x.simd_gt(splat(0.0)).select(
        splat(1.0),
        x.simd_lt(splat(0.0))
            .select(splat(-1.0), x.is_nan().select(x, splat(0.0)))
    ));
}

// ---------------------------------------------------------------------------------------------
// Elementwise loops.

/// `out[i] = op(a[i])`, `a` its own buffer or the output itself.
#[inline(always)]
pub(crate) fn unary<O: UnOp>(op: O, a: Src<'_>, out: &mut [f32]) {
    match a {
        Src::Buf(x) => un_buf(op, x, out),
        Src::Out => un_out(op, out),
        // Every element `op` of the one value: the scalar form gives the lane form's bits.
        Src::Splat(c) => out.fill(op.s(c)),
    }
}

/// Vectors of a [`Chunk`]: [`V2`]'s lanes in [`V`]s (two below AVX-512, one with it).
#[cfg(feature = "simd")]
pub(crate) const CHUNK_VECS: usize = L2 / L;

/// One chunk of a small fused chain's values ([`crate::fused`]): [`L2`] lanes, held in
/// registers from member to member.
#[cfg(feature = "simd")]
pub(crate) type Chunk = [V; CHUNK_VECS];

/// [`super::with_elementwise`] over one [`Chunk`] of each argument (`b` unread by a unary op)
/// into `out`: the lane operations of the buffer kernels, so each lane's bits are theirs (lanes
/// the chain does not use are computed too and never stored). Written through `out`, not
/// returned: a returned `Option` of vectors went through the stack in pieces that the next
/// load waited on.
#[cfg(feature = "simd")]
pub(crate) struct OnChunk<'c> {
    pub a: &'c Chunk,
    pub b: &'c Chunk,
    pub out: &'c mut Chunk,
}

#[cfg(feature = "simd")]
impl super::OnElementwise for OnChunk<'_> {
    type Out = ();
    #[inline(always)]
    fn unary<U: UnOp>(self, op: U) {
        if U::WIDE {
            // The latency-bound transcendentals over the whole chunk at once, as `un_out`.
            let mut wide = [0.0f32; L2];
            for (w, v) in wide.as_chunks_mut::<L>().0.iter_mut().zip(self.a) {
                *w = v.to_array();
            }
            let y = op.v2(V2::new(wide)).to_array();
            for (o, w) in self.out.iter_mut().zip(y.as_chunks::<L>().0) {
                *o = V::new(*w);
            }
        } else {
            for (o, &x) in self.out.iter_mut().zip(self.a) {
                *o = op.v(x);
            }
        }
    }
    #[inline(always)]
    fn binary<B: BinOp>(self, op: B) {
        for ((o, &a), &b) in self.out.iter_mut().zip(self.a).zip(self.b) {
            *o = op.v(a, b);
        }
    }
    #[inline(always)]
    fn mul(self) {
        self.binary(ops::Mul)
    }
}

/// `mul` over `out` ([`ops::Mul`]); with `simd`, by a finite nonzero constant (a `Splat`: Adam's
/// and SGD's `β`s and learning rates) without `Mul`'s lane test for `0 · inf`, which such a
/// product never is (the bits are the same; the test cost about as much as the product).
#[inline(always)]
pub(crate) fn mul(a: Src<'_>, b: Src<'_>, out: &mut [f32]) {
    #[cfg(feature = "simd")]
    if let (Src::Splat(c), _) | (_, Src::Splat(c)) = (a, b) {
        if c.is_finite() && c != 0.0 {
            return binary(ops::MulByFinite, a, b, out);
        }
    }
    binary(ops::Mul, a, b, out)
}

/// `out[i] = op(a[i], b[i])`, each argument its own buffer or the output itself.
#[inline(always)]
pub(crate) fn binary<O: BinOp>(op: O, a: Src<'_>, b: Src<'_>, out: &mut [f32]) {
    match (a, b) {
        (Src::Buf(x), Src::Buf(y)) => bin_bufs(op, x, y, out),
        (Src::Out, Src::Buf(y)) => bin_lhs(op, y, out),
        (Src::Buf(x), Src::Out) => bin_rhs(op, x, out),
        (Src::Out, Src::Out) => bin_both(op, out),
        (Src::Splat(c), Src::Buf(y)) => bin_splat_buf::<O, true>(op, c, y, out),
        (Src::Buf(x), Src::Splat(c)) => bin_splat_buf::<O, false>(op, c, x, out),
        (Src::Splat(c), Src::Out) => bin_splat_out::<O, true>(op, c, out),
        (Src::Out, Src::Splat(c)) => bin_splat_out::<O, false>(op, c, out),
        (Src::Splat(c), Src::Splat(d)) => out.fill(op.s(c, d)),
    }
}

#[cfg(not(feature = "simd"))]
mod loops {
    use super::{BinOp, UnOp};

    pub(super) fn un_buf<O: UnOp>(op: O, x: &[f32], out: &mut [f32]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = op.s(v);
        }
    }
    pub(super) fn un_out<O: UnOp>(op: O, out: &mut [f32]) {
        for o in out.iter_mut() {
            *o = op.s(*o);
        }
    }
    pub(super) fn bin_bufs<O: BinOp>(op: O, x: &[f32], y: &[f32], out: &mut [f32]) {
        for ((o, &a), &b) in out.iter_mut().zip(x).zip(y) {
            *o = op.s(a, b);
        }
    }
    pub(super) fn bin_lhs<O: BinOp>(op: O, y: &[f32], out: &mut [f32]) {
        for (o, &b) in out.iter_mut().zip(y) {
            *o = op.s(*o, b);
        }
    }
    pub(super) fn bin_rhs<O: BinOp>(op: O, x: &[f32], out: &mut [f32]) {
        for (o, &a) in out.iter_mut().zip(x) {
            *o = op.s(a, *o);
        }
    }
    pub(super) fn bin_both<O: BinOp>(op: O, out: &mut [f32]) {
        for o in out.iter_mut() {
            *o = op.s(*o, *o);
        }
    }
    /// `out[i] = op(c, x[i])` with `LEFT`, else `op(x[i], c)`.
    pub(super) fn bin_splat_buf<O: BinOp, const LEFT: bool>(
        op: O,
        c: f32,
        x: &[f32],
        out: &mut [f32],
    ) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = if LEFT { op.s(c, v) } else { op.s(v, c) };
        }
    }
    /// `out[i] = op(c, out[i])` with `LEFT`, else `op(out[i], c)`.
    pub(super) fn bin_splat_out<O: BinOp, const LEFT: bool>(op: O, c: f32, out: &mut [f32]) {
        for o in out.iter_mut() {
            *o = if LEFT { op.s(c, *o) } else { op.s(*o, c) };
        }
    }
}

#[cfg(feature = "simd")]
mod loops {
    use super::{BinOp, UnOp, L, L2, V, V2};

    #[inline(always)]
    fn ld(c: &[f32; L]) -> V {
        V::new(*c)
    }

    pub(super) fn un_buf<O: UnOp>(op: O, x: &[f32], out: &mut [f32]) {
        if !O::VECTOR {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = op.s(v);
            }
            return;
        }
        let (mut out, mut x) = (out, x);
        if O::WIDE {
            let (oc, ot) = out.as_chunks_mut::<L2>();
            let (xc, xt) = x.as_chunks::<L2>();
            for (o, a) in oc.iter_mut().zip(xc) {
                *o = op.v2(V2::new(*a)).to_array();
            }
            (out, x) = (ot, xt);
        }
        let (oc, ot) = out.as_chunks_mut::<L>();
        let (xc, xt) = x.as_chunks::<L>();
        for (o, a) in oc.iter_mut().zip(xc) {
            *o = op.v(ld(a)).to_array();
        }
        for (o, &a) in ot.iter_mut().zip(xt) {
            *o = op.s(a);
        }
    }
    pub(super) fn un_out<O: UnOp>(op: O, out: &mut [f32]) {
        if !O::VECTOR {
            for o in out.iter_mut() {
                *o = op.s(*o);
            }
            return;
        }
        let mut out = out;
        if O::WIDE {
            let (oc, ot) = out.as_chunks_mut::<L2>();
            for o in oc.iter_mut() {
                *o = op.v2(V2::new(*o)).to_array();
            }
            out = ot;
        }
        let (oc, ot) = out.as_chunks_mut::<L>();
        for o in oc.iter_mut() {
            *o = op.v(ld(o)).to_array();
        }
        for o in ot.iter_mut() {
            *o = op.s(*o);
        }
    }
    pub(super) fn bin_bufs<O: BinOp>(op: O, x: &[f32], y: &[f32], out: &mut [f32]) {
        let (oc, ot) = out.as_chunks_mut::<L>();
        let (xc, xt) = x.as_chunks::<L>();
        let (yc, yt) = y.as_chunks::<L>();
        for ((o, a), b) in oc.iter_mut().zip(xc).zip(yc) {
            *o = op.v(ld(a), ld(b)).to_array();
        }
        for ((o, &a), &b) in ot.iter_mut().zip(xt).zip(yt) {
            *o = op.s(a, b);
        }
    }
    pub(super) fn bin_lhs<O: BinOp>(op: O, y: &[f32], out: &mut [f32]) {
        let (oc, ot) = out.as_chunks_mut::<L>();
        let (yc, yt) = y.as_chunks::<L>();
        for (o, b) in oc.iter_mut().zip(yc) {
            *o = op.v(ld(o), ld(b)).to_array();
        }
        for (o, &b) in ot.iter_mut().zip(yt) {
            *o = op.s(*o, b);
        }
    }
    pub(super) fn bin_rhs<O: BinOp>(op: O, x: &[f32], out: &mut [f32]) {
        let (oc, ot) = out.as_chunks_mut::<L>();
        let (xc, xt) = x.as_chunks::<L>();
        for (o, a) in oc.iter_mut().zip(xc) {
            *o = op.v(ld(a), ld(o)).to_array();
        }
        for (o, &a) in ot.iter_mut().zip(xt) {
            *o = op.s(a, *o);
        }
    }
    pub(super) fn bin_both<O: BinOp>(op: O, out: &mut [f32]) {
        let (oc, ot) = out.as_chunks_mut::<L>();
        for o in oc.iter_mut() {
            let v = ld(o);
            *o = op.v(v, v).to_array();
        }
        for o in ot.iter_mut() {
            *o = op.s(*o, *o);
        }
    }
    /// `out[i] = op(c, x[i])` with `LEFT`, else `op(x[i], c)`: `c` in every lane.
    pub(super) fn bin_splat_buf<O: BinOp, const LEFT: bool>(
        op: O,
        c: f32,
        x: &[f32],
        out: &mut [f32],
    ) {
        let cv = V::splat(c);
        let (oc, ot) = out.as_chunks_mut::<L>();
        let (xc, xt) = x.as_chunks::<L>();
        for (o, a) in oc.iter_mut().zip(xc) {
            let a = ld(a);
            *o = if LEFT { op.v(cv, a) } else { op.v(a, cv) }.to_array();
        }
        for (o, &a) in ot.iter_mut().zip(xt) {
            *o = if LEFT { op.s(c, a) } else { op.s(a, c) };
        }
    }
    /// `out[i] = op(c, out[i])` with `LEFT`, else `op(out[i], c)`: `c` in every lane.
    pub(super) fn bin_splat_out<O: BinOp, const LEFT: bool>(op: O, c: f32, out: &mut [f32]) {
        let cv = V::splat(c);
        let (oc, ot) = out.as_chunks_mut::<L>();
        for o in oc.iter_mut() {
            let a = ld(o);
            *o = if LEFT { op.v(cv, a) } else { op.v(a, cv) }.to_array();
        }
        for o in ot.iter_mut() {
            *o = if LEFT { op.s(c, *o) } else { op.s(*o, c) };
        }
    }
}

use loops::{bin_both, bin_bufs, bin_lhs, bin_rhs, bin_splat_buf, bin_splat_out, un_buf, un_out};

/// Column sums: `out[j] = Σ_r x[r, j]` for row-major `x: [rows, cols]` (`x.len()` a multiple
/// of `cols = out.len()`), each output a chain from `+0.0` over the rows in increasing order
/// (`sum_to`'s order). Up to four vectors of columns stay in registers over all the rows (one
/// call per row to the elementwise addition cost W1's bias gradients about 1 µs a step); lanes
/// are distinct columns; the last columns, fewer than a vector, run as scalar chains.
#[cfg(feature = "simd")]
pub(crate) fn column_sums(x: &[f32], out: &mut [f32]) {
    const C: usize = 4;
    let cols = out.len();
    if cols == 0 {
        return;
    }
    let mut j = 0;
    while j + L <= cols {
        let c = ((cols - j) / L).min(C);
        match c {
            4 => column_tile::<4>(x, out, j),
            3 => column_tile::<3>(x, out, j),
            2 => column_tile::<2>(x, out, j),
            _ => column_tile::<1>(x, out, j),
        }
        j += c * L;
    }
    for (jj, o) in out.iter_mut().enumerate().skip(j) {
        *o = x
            .chunks_exact(cols)
            .fold(0.0, |acc, row| acc + row.get(jj).copied().unwrap_or(0.0));
    }
}

/// Columns `j..j + C·L` of [`column_sums`].
#[cfg(feature = "simd")]
#[inline(always)]
fn column_tile<const C: usize>(x: &[f32], out: &mut [f32], j: usize) {
    let cols = out.len();
    let mut acc = [V::splat(0.0); C];
    for row in x.chunks_exact(cols) {
        let Some(r) = row.get(j..j + C * L) else {
            return;
        };
        for (a, v) in acc.iter_mut().zip(r.chunks_exact(L)) {
            *a += V::new(<[f32; L]>::try_from(v).unwrap_or([0.0; L]));
        }
    }
    if let Some(o) = out.get_mut(j..j + C * L) {
        for (o, a) in o.chunks_exact_mut(L).zip(&acc) {
            o.copy_from_slice(a.as_array());
        }
    }
}

/// `out[i] = if c[i] != 0 { a[i] } else { b[i] }` (the reference's `select`).
pub(crate) fn select(c: &[f32], a: &[f32], b: &[f32], out: &mut [f32]) {
    #[cfg(feature = "simd")]
    let (out, c, a, b) = {
        let (oc, ot) = out.as_chunks_mut::<L>();
        let (cc, ct) = c.as_chunks::<L>();
        let (ac, at) = a.as_chunks::<L>();
        let (bc, bt) = b.as_chunks::<L>();
        let zero = V::splat(0.0);
        for (((o, c), a), b) in oc.iter_mut().zip(cc).zip(ac).zip(bc) {
            // `c != 0` (NaN included) is `!(c == 0)` with an ordered equality.
            *o = V::new(*c)
                .simd_eq(zero)
                .select(V::new(*b), V::new(*a))
                .to_array();
        }
        (ot, ct, at, bt)
    };
    for (((o, &c), &a), &b) in out.iter_mut().zip(c).zip(a).zip(b) {
        *o = sel::scalar(c, a, b);
    }
}

/// The transpose of an 8×8 block (a permutation: exact whatever the method). With `simd`,
/// `wide`'s `f32x8::transpose` (AVX shuffles where present).
#[inline(always)]
pub(crate) fn transpose8(rows: [[f32; 8]; 8]) -> [[f32; 8]; 8] {
    #[cfg(feature = "simd")]
    {
        wide::f32x8::transpose(rows.map(wide::f32x8::new)).map(wide::f32x8::to_array)
    }
    #[cfg(not(feature = "simd"))]
    {
        let mut t = [[0.0f32; 8]; 8];
        for (r, row) in rows.iter().enumerate() {
            for (c, &v) in row.iter().enumerate() {
                if let Some(slot) = t.get_mut(c).and_then(|tc| tc.get_mut(r)) {
                    *slot = v;
                }
            }
        }
        t
    }
}

// ---------------------------------------------------------------------------------------------
// The matrix product.

/// `out = a · b` for row-major `a: [m, k]`, `b: [k, n]`, `out: [m, n]` (lengths checked by
/// the caller). Each `out[i, j]` starts at `+0.0` and accumulates `a[i, p] * b[p, j]` over
/// increasing `p`, product rounded, then sum rounded: the reference's order.
#[cfg(not(feature = "simd"))]
pub(crate) fn matmul(a: &[f32], b: &[f32], out: &mut [f32], m: usize, k: usize, n: usize) {
    tapeplan_core::ops::matmul::kernel(a, b, out, m, k, n);
}

/// `out = a · b` under the `fma` arithmetic profile: each `out[i, j]` starts at `+0.0` and
/// becomes `fma(a[i, p], b[p, j], acc)` (one rounding) over increasing `p`, the reference's
/// (`tapeplan_core::ops::matmul::kernel_fma`) order and bits.
#[cfg(all(not(feature = "simd"), feature = "arith-fma"))]
pub(crate) fn matmul_fma(a: &[f32], b: &[f32], out: &mut [f32], m: usize, k: usize, n: usize) {
    tapeplan_core::ops::matmul::kernel_fma(a, b, out, m, k, n);
}

/// True when this build's `fma` matrix product runs on a hardware fused multiply-add (x86_64
/// with the `fma` target feature, which AVX-512F implies, and `simd`); otherwise each step is
/// `libm::fmaf`, lane by lane (the same bits, in software).
pub const FMA_HARDWARE: bool = cfg!(all(
    feature = "simd",
    target_arch = "x86_64",
    target_feature = "fma"
));

/// One multiply-accumulate step of the matrix product's register tile, lane by lane: the
/// arithmetic profile's (see `tapeplan_core::ArithProfile`).
#[cfg(feature = "simd")]
pub(crate) trait Step: Copy {
    /// Whether [`matmul_with`] runs the steps `p` in blocks whose rows of `b` stay in the L1
    /// cache (see there): worth it when `b`'s reads from L2 bound the tiles (a hardware fused
    /// multiply-add; the separate step on AMD's cores), not with a call to `libm::fmaf`, and
    /// not with AVX-512 (see [`AVX512`]).
    const BLOCK_P: bool;
    /// Whether each product of a tile reads its own broadcast of `a`'s element from memory
    /// ([`splat_each`]) instead of sharing one broadcast register across the tile's vectors of
    /// columns, whole tiles run out of line ([`wide_tile`]) and the tiles are 8 rows by 2
    /// vectors ([`block`]).
    const SPLAT_EACH: bool = false;
    /// The accumulator after the step `acc ⊕ x · y`.
    fn v(acc: V, x: V, y: V) -> V;
}

/// The `separate` step: `acc + x * y`, the product rounded, then the sum (`wide`'s lane-wise
/// IEEE operations, never fused).
#[cfg(feature = "simd")]
#[derive(Clone, Copy)]
pub(crate) struct Separate;

#[cfg(feature = "simd")]
impl Step for Separate {
    const BLOCK_P: bool = !AVX512;
    const SPLAT_EACH: bool = SPLAT_EACH_SEPARATE;
    #[inline(always)]
    fn v(acc: V, x: V, y: V) -> V {
        acc + x * y
    }
}

/// True where the separate step's tiles read a broadcast of `a`'s element per product
/// ([`splat_each`]): AVX-512 on x86_64. There a 16-lane `vbroadcastss` from memory takes a
/// slot on a floating-point pipe on AMD's Zen 4 (whose multiplies and adds fill all four of
/// them under `separate`), while a multiply with its broadcast embedded (`{1to16}`) broadcasts
/// in the load unit: W2's forward product `[64, 784] x [784, 128]` as standalone 4 × 4-vector
/// tiles runs at 93 against 112 GFLOP/s (`example fp_peak`, 2026-12-05). Under `fma` the
/// adds' pipes are free and the shared broadcast stays (embedded: 112 against 115 GFLOP/s);
/// with eight lanes or fewer there is no embedded broadcast.
#[cfg(feature = "simd")]
const SPLAT_EACH_SEPARATE: bool = AVX512;

/// AVX-512 on x86_64 (sixteen lanes, thirty-two registers). There [`matmul_with`] does not block
/// the steps `p` under either step: W2's forward product `[64, 784] x [784, 128]` then reads
/// each tile's rows of the batch `a` front to back (four or eight streams, which the
/// prefetcher follows) instead of 128 bytes of all 64 rows per block (64 streams, the batch
/// arriving cold from memory each training step), and its tiles start from `+0.0` instead of
/// reloading their sums from `out` 25 times; `b` (392 KiB) streams from L2 for each tile of
/// rows. Zen 4, peers A/B of the whole W2 step (6 launches × 7 rounds, 2026-12-05, with the
/// 4-row tiles of the time): separate 0.937, `fma` 0.965; `example product_cost` (the batch
/// hot in cache, five launches of each build interleaved): separate 128.1-128.7 ->
/// 120.8-123.0 µs, `fma` 112.6-114.0 -> 110.2-110.9 µs. On an AVX-512 Xeon (2026-12-04) the
/// hot product ran unblocked at 128 against 132 µs blocked under separate, but 92 against
/// 84 µs under `fma`; the whole step was not measured there, and no Xeon was at hand to: the
/// choice for `fma` rests on Zen 4's figures.
#[cfg(feature = "simd")]
const AVX512: bool = cfg!(all(target_arch = "x86_64", target_feature = "avx512f"));

/// `x` in every lane, read from memory by a load the compiler may neither merge with another
/// read of `x` nor keep in a register: each product of a tile row then folds its own load
/// into the multiply as an embedded broadcast (see [`SPLAT_EACH_SEPARATE`]). The value is `x`'s:
/// a volatile read only keeps the read where it is written. Tiles of one vector of columns do
/// without it: their broadcast has one use, which the multiply embeds anyway.
/// `core::hint::black_box` of the row instead (no `unsafe`) made the tile spill: 51-55 GFLOP/s.
#[cfg(feature = "simd")]
#[inline(always)]
#[allow(unsafe_code)]
fn splat_each(x: &f32) -> V {
    // SAFETY: `x` is a shared reference: valid for reads, aligned and initialized for the
    // whole call. The one `unsafe` of the runtime (`lib.rs` denies `unsafe_code`; the attribute
    // above allows it here, and `tests/runtime/unsafe_fence.rs` checks there is no other).
    V::splat(unsafe { core::ptr::read_volatile(x) })
}

/// The `fma` step: `fma(x, y, acc)`, rounded once. With the `fma` target feature on x86_64,
/// `wide`'s `mul_add`, which is then `vfmadd` (`_mm_fmadd_ps`, `_mm256_fmadd_ps`,
/// `_mm512_fmadd_ps`: IEEE-754 `fusedMultiplyAdd`); elsewhere (SSE2 without FMA, wasm
/// `simd128`, whose relaxed-SIMD `madd` may or may not fuse and so is not used, the portable
/// fallback) `libm::fmaf` lane by lane. `wide`'s `mul_add` is never called without the
/// feature: there it is a separate multiply and add.
#[cfg(all(feature = "simd", feature = "arith-fma"))]
#[derive(Clone, Copy)]
pub(crate) struct Fused;

#[cfg(all(feature = "simd", feature = "arith-fma"))]
impl Step for Fused {
    const BLOCK_P: bool = FMA_HARDWARE && !AVX512;
    #[inline(always)]
    fn v(acc: V, x: V, y: V) -> V {
        #[cfg(all(target_arch = "x86_64", target_feature = "fma"))]
        #[allow(clippy::disallowed_methods)]
        // the one caller: fused here, under the feature
        {
            x.mul_add(y, acc)
        }
        #[cfg(not(all(target_arch = "x86_64", target_feature = "fma")))]
        {
            let (mut c, x, y) = (acc.to_array(), x.to_array(), y.to_array());
            for ((c, x), y) in c.iter_mut().zip(x).zip(y) {
                *c = libm::fmaf(x, y, *c);
            }
            V::new(c)
        }
    }
}

/// Rows per matrix-product tile. 4 everywhere: with AVX-512, 6 rows (24 accumulators) spilled
/// and measured slower (183 against 261 GFLOP/s on `[784, 64] x [64, 128]`).
#[cfg(feature = "simd")]
const MR: usize = 4;

/// `out = a · b` for row-major `a: [m, k]`, `b: [k, n]`, `out: [m, n]` (lengths checked by
/// the caller).
///
/// # Arithmetic order
/// Each `out[i, j]` starts at `+0.0` and accumulates `acc = acc + a[i, p] * b[p, j]` (product
/// rounded, then sum rounded) over `p = 0, 1, …, k-1`, exactly the reference's order. The
/// kernel keeps a tile of `TILE_ROWS` rows by `NR` vectors of columns (8 rows by 2 vectors
/// under [`Step::SPLAT_EACH`]) in registers over the whole `p` loop (or a block of it, with
/// [`Step::BLOCK_P`]): lanes are distinct `j`s, never distinct `p`s. Rows left over run in
/// tiles of `MR`, 2 and 1 rows.
#[cfg(feature = "simd")]
pub(crate) fn matmul(a: &[f32], b: &[f32], out: &mut [f32], m: usize, k: usize, n: usize) {
    matmul_with::<Separate>(a, b, out, m, k, n);
}

/// `out = a · b` under the `fma` arithmetic profile (lengths checked by the caller).
///
/// # Arithmetic order
/// As [`matmul`]'s, each step `acc = fma(a[i, p], b[p, j], acc)` rounded once ([`Fused`]): the
/// order and bits of `tapeplan_core::ops::matmul::kernel_fma`.
#[cfg(all(feature = "simd", feature = "arith-fma"))]
pub(crate) fn matmul_fma(a: &[f32], b: &[f32], out: &mut [f32], m: usize, k: usize, n: usize) {
    matmul_with::<Fused>(a, b, out, m, k, n);
}

/// `out = aᵀ · b` for row-major `a: [k, m]`, `b: [k, n]`, `out: [m, n]` (`matmul_tn`; lengths
/// checked by the caller), under the profile's step `S` ([`Separate`], or [`Fused`] for `fma`).
///
/// # Arithmetic order
/// [`matmul`]'s over `aᵀ`: each `out[i, j]` starts at `+0.0` and accumulates over
/// `p = 0, 1, …, k-1` in increasing order (`tapeplan_core::ops::matmul_tn::kernel`'s bits).
/// The register tiles of [`matmul`] read `aᵀ` in place: a tile's `R` rows `i..i + R` of `aᵀ`
/// at step `p` are the contiguous elements `a[p, i..i + R]` (no packed panel; `R` is 8 under
/// [`Step::SPLAT_EACH`], see [`block`]).
#[cfg(feature = "simd")]
pub(crate) fn matmul_tn<S: Step>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) {
    if empty(out, m, k, n) {
        return;
    }
    let g = Block {
        m,
        k,
        n,
        lda: m,
        ldb: n,
        ldo: n,
    };
    block::<S, false, true>(a, b, out, g);
}

/// `out = a · bᵀ` for row-major `a: [m, k]`, `b: [n, k]`, `out: [m, n]` (`matmul_nt`; lengths
/// checked by the caller), under the profile's step `S`.
///
/// # Arithmetic order
/// [`matmul`]'s over `bᵀ`: each `out[i, j]` starts at `+0.0` and accumulates over
/// `p = 0, 1, …, k-1` in increasing order (`tapeplan_core::ops::matmul_nt::kernel`'s bits).
/// `bᵀ` is not contiguous across `j`: blocks of at most 64 columns by [`PACK_ELEMS`]` / 64`
/// `p` are packed into a panel on the stack, `[p, j]` row-major, and the register tiles of
/// [`matmul`] run over it; the accumulators of a later block of `p` start from the earlier
/// blocks' sums (stored in `out` as `f32`, exactly the accumulator), so each output's sum is the
/// one sequence over increasing `p`.
#[cfg(feature = "simd")]
pub(crate) fn matmul_nt<S: Step>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) {
    if empty(out, m, k, n) {
        return;
    }
    // One step `p` (`k = 1`, as in W3's batch-of-one gradients): `b: [n, 1]` is its own
    // transpose `[1, n]`, contiguous, and runs as [`matmul`]'s tiles without a panel.
    if k == 1 {
        return matmul_with::<S>(a, b, out, m, k, n);
    }
    // One or two rows against a small `bᵀ` (W3's batch of one): straight from `b`'s 8 × 8
    // blocks transposed in registers, without a panel.
    if nt_few_rows::<S>(a, b, out, m, k, n) {
        return;
    }
    // A whole `bᵀ` that fits [`SMALL_PACK_ELEMS`] takes the smaller panel: the panel is zeroed
    // on every call, which costs more than the product on tiny steps (W3).
    if k.saturating_mul(n) <= SMALL_PACK_ELEMS {
        nt_packed::<S, SMALL_PACK_ELEMS>(a, b, out, m, k, n);
    } else {
        nt_packed::<S, PACK_ELEMS>(a, b, out, m, k, n);
    }
}

/// [`matmul_nt`] for `m` of at most two rows, eight lanes, `k` and `n` multiples of eight and
/// `k · n` within [`SMALL_PACK_ELEMS`] (W3's `ḡ · W2ᵀ`, `[1, 16] x [16, 16]ᵀ`): each `8 × 8`
/// block of `b` (eight `j`s by eight `p`s) transposed in registers, its columns multiplied in
/// increasing `p`, no panel to zero, fill and reload; `false` (nothing written) otherwise.
///
/// # Arithmetic order
/// [`matmul_nt`]'s: each `out[i, j]` starts at `+0.0` and accumulates over `p = 0, 1, …, k-1`.
#[cfg(feature = "simd")]
fn nt_few_rows<S: Step>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) -> bool {
    const T: usize = 8;
    if L != T
        || m > 2
        || !k.is_multiple_of(T)
        || !n.is_multiple_of(T)
        || k * n > SMALL_PACK_ELEMS
        || a.len() < m * k
        || b.len() < n * k
        || out.len() < m * n
    {
        return false;
    }
    for j0 in (0..n).step_by(T) {
        let mut acc = [V::splat(0.0); 2];
        for p0 in (0..k).step_by(T) {
            let rows: [[f32; T]; T] = core::array::from_fn(|r| {
                let at = (j0 + r) * k + p0;
                b.get(at..at + T)
                    .and_then(|s| <[f32; T]>::try_from(s).ok())
                    .unwrap_or([0.0; T])
            });
            for (c, col) in transpose8(rows).iter().enumerate() {
                let y = V::new(core::array::from_fn(|l| col.get(l).copied().unwrap_or(0.0)));
                for (r, acc_r) in acc.iter_mut().enumerate().take(m) {
                    let x = V::splat(a.get(r * k + p0 + c).copied().unwrap_or(0.0));
                    *acc_r = S::v(*acc_r, x, y);
                }
            }
        }
        for (r, acc_r) in acc.iter().enumerate().take(m) {
            let at = r * n + j0;
            if let Some(o) = out.get_mut(at..at + T) {
                for (d, v) in o.iter_mut().zip(acc_r.to_array()) {
                    *d = v;
                }
            }
        }
    }
    true
}

/// [`matmul_nt`] over a panel of `P` elements (at least 64).
#[cfg(feature = "simd")]
fn nt_packed<S: Step, const P: usize>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) {
    let nb = n.min(64);
    let kb = (P / nb).min(k);
    let mut panel = [0.0f32; P];
    let mut j0 = 0;
    while j0 < n {
        let nc = nb.min(n - j0);
        let mut p0 = 0;
        while p0 < k {
            let kc = kb.min(k - p0);
            let (Some(rows), Some(src)) = (panel.get_mut(..kc * nc), b.get(j0 * k + p0..)) else {
                return;
            };
            pack_transposed(src, k, rows, kc, nc);
            let g = Block {
                m,
                k: kc,
                n: nc,
                lda: k,
                ldb: nc,
                ldo: n,
            };
            let (Some(asl), Some(os)) = (a.get(p0..), out.get_mut(j0..)) else {
                return;
            };
            block_from::<S>(p0, asl, &panel, os, g);
            p0 += kc;
        }
        j0 += nc;
    }
}

/// `panel[pp, jj] = src[jj * k + pp]` for `pp < kc`, `jj < nc` (a `[kc, nc]` panel of `bᵀ` from
/// rows `k` apart): `8 × 8` blocks transposed in registers ([`transpose8`]: whole rows of
/// eight read, whole panel rows written), the ragged edges element by element, a panel row at
/// a time (contiguous stores, strided loads: the other order compiles to scatters). A copy:
/// exact in any order. Element by element everywhere, the packing of W3's `[16, 16]` weight
/// took as long as its product.
#[cfg(feature = "simd")]
fn pack_transposed(src: &[f32], k: usize, panel: &mut [f32], kc: usize, nc: usize) {
    pack_transposed_into(src, k, panel, kc, nc, nc);
}

/// [`pack_transposed`] into a panel whose rows are `ldp` (at least `nc`) elements apart: the
/// panel's `[p, j]` at `panel[p · ldp + j]` is `src[j · k + p]`, for `p < kc`, `j < nc`
/// (elements `nc .. ldp` of each row left as they were).
#[cfg(feature = "simd")]
pub(crate) fn pack_transposed_into(
    src: &[f32],
    k: usize,
    panel: &mut [f32],
    kc: usize,
    nc: usize,
    ldp: usize,
) {
    const T: usize = 8;
    let (kt, nt) = (kc - kc % T, nc - nc % T);
    for jj0 in (0..nt).step_by(T) {
        for pp0 in (0..kt).step_by(T) {
            let mut rows = [[0.0f32; T]; T];
            for (r, dst) in rows.iter_mut().enumerate() {
                let at = (jj0 + r) * k + pp0;
                if let Some(row) = src.get(at..at + T) {
                    dst.copy_from_slice(row);
                }
            }
            for (c, col) in transpose8(rows).iter().enumerate() {
                let at = (pp0 + c) * ldp + jj0;
                if let Some(dst) = panel.get_mut(at..at + T) {
                    dst.copy_from_slice(col);
                }
            }
        }
    }
    for (pp, row) in panel.chunks_mut(ldp.max(1)).take(kc).enumerate() {
        let from = if pp < kt { nt } else { 0 };
        for (jj, d) in row.iter_mut().enumerate().take(nc).skip(from) {
            if let Some(&v) = src.get(jj * k + pp) {
                *d = v;
            }
        }
    }
}

/// True when the product `[m, k] x [k, n]` has nothing to multiply: no output (`m` or `n`
/// zero), or an empty sum (`k` zero: every output `+0.0`, written here).
#[cfg(feature = "simd")]
#[inline(always)]
fn empty(out: &mut [f32], m: usize, k: usize, n: usize) -> bool {
    if k == 0 && m != 0 && n != 0 {
        out.fill(0.0);
    }
    n == 0 || m == 0 || k == 0
}

/// `out = a · b`, or with `accumulate` `out = out + a · b` continuing the sums stored in `out`,
/// for contiguous row-major `a: [m, k]`, `b: [k, n]`, `out: [m, n]` (`(m, k, n)`), under the
/// step `S`, in one block of `p` (the caller keeps `b` within the L1 cache: see
/// `conv_im2col`). Nothing is written when a slice is shorter than its shape.
///
/// # Arithmetic order
/// [`matmul`]'s: each `out[i, j]` starts at `+0.0` (or, with `accumulate`, at its stored value:
/// the `f32` accumulator of an earlier block) and accumulates over `p = 0, 1, …, k-1`.
#[cfg(feature = "simd")]
pub(crate) fn product_into<S: Step>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    (m, k, n): (usize, usize, usize),
    accumulate: bool,
) {
    if a.len() < m * k || b.len() < k * n || out.len() < m * n {
        return;
    }
    if k == 0 {
        if !accumulate {
            out.fill(0.0);
        }
        return;
    }
    let g = Block {
        m,
        k,
        n,
        lda: k,
        ldb: n,
        ldo: n,
    };
    if accumulate {
        block::<S, true, false>(a, b, out, g);
    } else {
        block::<S, false, false>(a, b, out, g);
    }
}

/// [`block`] over the block of `p` starting at `p0`: the accumulators start from `+0.0` for the
/// first block, from the sums in `out` for a later one.
#[cfg(feature = "simd")]
#[inline(always)]
fn block_from<S: Step>(p0: usize, a: &[f32], b: &[f32], out: &mut [f32], g: Block) {
    if p0 == 0 {
        block::<S, false, false>(a, b, out, g);
    } else {
        block::<S, true, false>(a, b, out, g);
    }
}

/// The stack panel of [`matmul_nt`], in `f32` elements: 1024 (4 KiB). The
/// runtime is heap-free; the SIMD catalog runs on hosts and in browsers, and a Cortex-M build
/// (the scalar catalog) runs the reference kernels and has no panel.
#[cfg(feature = "simd")]
pub const PACK_ELEMS: usize = 1024;

/// The smaller panel of [`matmul_nt`], in `f32` elements: 256 (1 KiB), for
/// products whose whole transposed operand fits it (one block: a panel's zeroing is then the
/// size of the work, not 4 KiB).
#[cfg(feature = "simd")]
pub const SMALL_PACK_ELEMS: usize = 256;

/// A register-tiled product's geometry: `[m, k] x [k, n] -> [m, n]`, each operand row-major
/// with its own row stride in elements (`lda`, `ldb`, `ldo`: a block of a larger matrix, or a
/// packed panel).
#[cfg(feature = "simd")]
#[derive(Clone, Copy)]
struct Block {
    m: usize,
    k: usize,
    n: usize,
    lda: usize,
    ldb: usize,
    ldo: usize,
}

/// The elements of `b` one block of steps `p` of [`matmul_with`] reads, at most: 16 KiB, half
/// the L1 data cache of recent x86 cores (32 to 48 KiB). A whole 32 KiB block of W2's forward
/// product (`kc = 64` rows of 512 bytes: one tile's 64 lines then fall into 8 of the 64 sets of
/// an 8-way cache, filling them) ran slower on an AVX2 EPYC: separate 230 -> 205 µs, `fma`
/// 195 -> 183 µs at 16 KiB (`example product_cost`, 2026-12-05; 8 KiB: 217 and 194 µs).
#[cfg(feature = "simd")]
pub const B_BLOCK_ELEMS: usize = 4096;

/// The register-tiled product with the step `S` (see [`matmul`]).
///
/// With [`Step::BLOCK_P`] (a hardware fused multiply-add, and the separate step; neither with
/// AVX-512, see [`AVX512`]), when `b` exceeds [`B_BLOCK_ELEMS`] and several tiles of rows read
/// it, the steps `p` run in blocks (at least 32 steps each) whose `[kc, n]` rows of `b` stay in
/// the L1 cache while every tile of rows passes over them: unblocked, W2's forward product (`[64, 784] x [784, 128]`) read
/// all of `b` (392 KiB) from L2 once per tile of rows, and its `fma` tiles waited on it (92
/// against 84 µs blocked on an AVX-512 Xeon; under `separate` there 128 against 132 µs, but
/// on an AVX2 EPYC 273 against 231 µs blocked, `example product_cost`, 2026-12-04: the
/// separate step is blocked too). A later block's accumulators start from the sums the earlier
/// blocks stored in `out` (`f32`, exactly the accumulator), so each output is the one sum over
/// increasing `p`, as unblocked.
#[cfg(feature = "simd")]
#[inline(always)]
fn matmul_with<S: Step>(a: &[f32], b: &[f32], out: &mut [f32], m: usize, k: usize, n: usize) {
    if empty(out, m, k, n) {
        return;
    }
    let g = Block {
        m,
        k,
        n,
        lda: k,
        ldb: n,
        ldo: n,
    };
    let kc = (B_BLOCK_ELEMS / n).max(32);
    if !S::BLOCK_P || m < 2 * MR || kc >= k {
        return block::<S, false, false>(a, b, out, g);
    }
    let mut p0 = 0;
    while p0 < k {
        let kb = kc.min(k - p0);
        let (Some(ab), Some(bb)) = (a.get(p0..), b.get(p0 * n..)) else {
            return;
        };
        block_from::<S>(p0, ab, bb, out, Block { k: kb, ..g });
        p0 += kb;
    }
}

/// Every row of `g`: tiles of [`TILE_ROWS`] rows (8 rows by 2 vectors under
/// [`Step::SPLAT_EACH`]), then of `MR`, 2 and 1. With `LOAD`, each accumulator starts
/// from `out`'s element (a later block of `p` continuing the sums), else from `+0.0`. With
/// `AT`, `a` is stored transposed: `a[r, p]` of the block is `a[p * lda + r]`.
#[cfg(feature = "simd")]
#[inline(always)]
fn block<S: Step, const LOAD: bool, const AT: bool>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    g: Block,
) {
    if g.k == 0 {
        return;
    }
    // Under [`Step::SPLAT_EACH`]: tiles of 8 rows by 2 vectors. A step loads two vectors of
    // `b`, not four, for its sixteen products. Over `aᵀ` its eight broadcasts come from one line
    // of `a` (`a[p, i..i + 8]`): W2's `xᵀ·ḡ`, `[784, 64] x [64, 128]`, Zen 4: 128 -> 117 µs
    // (`example product_cost`, 2026-12-05). Over `a` in place, with the steps `p` unblocked
    // ([`AVX512`]), half as many tiles of rows stream `b` from L2: W2's forward product
    // `[64, 784] x [784, 128]` 122-125 -> 117-120 µs, peers A/B of the W2 step 0.978 (6
    // launches × 7 rounds; `fma`, whose tiles these are not, 1.000). Blocked, the same tiles
    // had been slower there (129-130 -> 131-132 µs).
    let mut done = if S::SPLAT_EACH {
        rows::<S, 8, 2, LOAD, AT>(a, b, out, g, 0)
    } else {
        rows::<S, TILE_ROWS, { width::NR }, LOAD, AT>(a, b, out, g, 0)
    };
    for step in [MR, 2, 1] {
        if done >= g.m {
            break;
        }
        done += match step {
            MR => rows::<S, MR, { width::NR }, LOAD, AT>(a, b, out, g, done),
            2 => rows::<S, 2, { width::NR }, LOAD, AT>(a, b, out, g, done),
            _ => rows::<S, 1, { width::NR }, LOAD, AT>(a, b, out, g, done),
        };
    }
}

/// Rows per register tile of the products: six with eight lanes (AVX2: twelve accumulators,
/// two vectors of `b` and a broadcast in its sixteen registers; eight sums in flight left the
/// multiply-adds waiting on each other's latency, and each step's loads are shared by more
/// products: W2's forward product 233-245 -> 222 µs, `xᵀ·ḡ` 224 -> 202-206 µs under
/// `separate`, `example product_cost`, 2026-12-04), else [`MR`].
#[cfg(feature = "simd")]
const TILE_ROWS: usize = if L == 8 { 6 } else { MR };

/// Runs as many whole blocks of `R` rows from row `from` as fit; answers the rows done.
#[cfg(feature = "simd")]
fn rows<S: Step, const R: usize, const C: usize, const LOAD: bool, const AT: bool>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    g: Block,
    from: usize,
) -> usize {
    let mut i = from;
    while i + R <= g.m {
        let a_at = if AT { i } else { i * g.lda };
        let (Some(ab), Some(ob)) = (a.get(a_at..), out.get_mut(i * g.ldo..)) else {
            break;
        };
        row_block::<S, R, C, LOAD, AT>(ab, b, ob, g);
        i += R;
    }
    i - from
}

#[cfg(feature = "simd")]
#[inline(always)]
fn row_block<S: Step, const R: usize, const C: usize, const LOAD: bool, const AT: bool>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    g: Block,
) {
    let n = g.n;
    let mut j = 0;
    while j + C * L <= n {
        if S::SPLAT_EACH {
            wide_tile::<S, R, C, LOAD, AT>(a, b, out, j, g);
        } else {
            tile::<S, R, C, LOAD, AT>(a, b, out, j, g);
        }
        j += C * L;
    }
    if C > 2 && j + 2 * L <= n {
        tile::<S, R, 2, LOAD, AT>(a, b, out, j, g);
        j += 2 * L;
    }
    while j + L <= n {
        tile::<S, R, 1, LOAD, AT>(a, b, out, j, g);
        j += L;
    }
    if j < n {
        tile_partial::<S, R, LOAD, AT>(a, b, out, j, n - j, g);
    }
}

/// The first `k` elements of each of `R` rows `lda` apart; with `AT` (`a` stored transposed,
/// read a step `p` at a time instead) none.
#[cfg(feature = "simd")]
#[inline(always)]
fn a_rows<const R: usize, const AT: bool>(a: &[f32], g: Block) -> [&[f32]; R] {
    core::array::from_fn(|r| {
        if AT {
            &[]
        } else {
            a.get(r * g.lda..r * g.lda + g.k).unwrap_or(&[])
        }
    })
}

/// True when `a` holds every value a tile of `R` rows reads: `R` rows of `k` (see [`a_rows`]),
/// or with `AT` the first `R` elements of `k` rows `lda` apart.
#[cfg(feature = "simd")]
#[inline(always)]
fn a_fits<const R: usize, const AT: bool>(a: &[f32], a_rows: &[&[f32]; R], g: Block) -> bool {
    if AT {
        a.len() >= (g.k - 1) * g.lda + R
    } else {
        a_rows.iter().all(|r| r.len() == g.k)
    }
}

/// [`tile`] over `C` whole vectors of columns under [`Step::SPLAT_EACH`], in a function of its
/// own: inlined into the loops of [`rows`] and [`row_block`], the loop over `p` kept `b`'s
/// stride and bounds on the stack and read them back at every step (W2's forward product under `separate` with AVX-512 and
/// [`splat_each`]: 141 against 128 µs, `example product_cost`, 2026-12-05; both `fma`
/// products unchanged). The call is once per `k` steps of a whole tile; narrower tiles (a
/// product's last columns, small products) stay inlined (out of line, W2's `h·W2` took 3.5
/// against 2.6 µs).
#[cfg(feature = "simd")]
#[inline(never)]
fn wide_tile<S: Step, const R: usize, const C: usize, const LOAD: bool, const AT: bool>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    j: usize,
    g: Block,
) {
    tile::<S, R, C, LOAD, AT>(a, b, out, j, g);
}

/// Columns `j..j + C·L` of rows `0..R` of the block.
#[cfg(feature = "simd")]
#[inline(always)]
fn tile<S: Step, const R: usize, const C: usize, const LOAD: bool, const AT: bool>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    j: usize,
    g: Block,
) {
    let (k, ldb, ldo) = (g.k, g.ldb, g.ldo);
    let a_rows = a_rows::<R, AT>(a, g);
    // Checked once, so the loop's own checks fold away.
    if !a_fits::<R, AT>(a, &a_rows, g) || j + C * L > g.n || b.len() < (k - 1) * ldb + g.n {
        return;
    }
    let mut acc = [[V::splat(0.0); C]; R];
    if LOAD {
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let at = r * ldo + j;
            let Some(os) = out.get(at..at + C * L) else {
                return;
            };
            let (oc, _) = os.as_chunks::<L>();
            for (s, o) in acc_r.iter_mut().zip(oc) {
                *s = V::new(*o);
            }
        }
    }
    for p in 0..k {
        let at = p * ldb + j;
        let Some(bs) = b.get(at..at + C * L) else {
            return;
        };
        let (bc, _) = bs.as_chunks::<L>();
        let bv: [V; C] = core::array::from_fn(|c| bc.get(c).map_or(V::splat(0.0), |x| V::new(*x)));
        if AT {
            // `aᵀ`'s rows `0..R` at step `p`: `a[p, 0..R]`, contiguous.
            let at = p * g.lda;
            let Some(xs) = a.get(at..at + R) else {
                return;
            };
            for (acc_r, x_ref) in acc.iter_mut().zip(xs) {
                let x = V::splat(*x_ref);
                for (s, &y) in acc_r.iter_mut().zip(&bv) {
                    let x = if S::SPLAT_EACH && C > 1 {
                        splat_each(x_ref)
                    } else {
                        x
                    };
                    *s = S::v(*s, x, y);
                }
            }
        } else {
            for (acc_r, a_r) in acc.iter_mut().zip(&a_rows) {
                // An unconditional load (`a_fits` rules the `else` out): the broadcast then
                // reads memory on a load port. With a default for a missing element the value
                // came through a register, and its broadcast was a shuffle on the port one of
                // the two multiply-add units shares (W2's forward product: `fma` 83.5 -> 77.5
                // µs, `separate` 127 -> 107 µs).
                let Some(x_ref) = a_r.get(p) else {
                    return;
                };
                let x = V::splat(*x_ref);
                for (s, &y) in acc_r.iter_mut().zip(&bv) {
                    let x = if S::SPLAT_EACH && C > 1 {
                        splat_each(x_ref)
                    } else {
                        x
                    };
                    *s = S::v(*s, x, y);
                }
            }
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        let at = r * ldo + j;
        let Some(os) = out.get_mut(at..at + C * L) else {
            return;
        };
        let (oc, _) = os.as_chunks_mut::<L>();
        for (o, s) in oc.iter_mut().zip(acc_r) {
            *o = s.to_array();
        }
    }
}

/// A whole vector from `b[at..]` of which the first `w` lanes are used: lanes past `w` read
/// the values after them (any values: lanes are independent and those are never stored); only
/// near the end of `b` are the `w` values copied into zeros.
#[cfg(feature = "simd")]
#[inline(always)]
fn row_vector(b: &[f32], at: usize, w: usize) -> V {
    match b
        .get(at..at + L)
        .and_then(|s| <&[f32; L]>::try_from(s).ok())
    {
        Some(v) => V::new(*v),
        None => partial_vector(b.get(at..).unwrap_or(&[]), w),
    }
}

/// The first `w` (at most `L`) values of `src` in the first lanes, zeros after (fewer when
/// `src` is shorter). Element by element: `copy_from_slice` of a length known only at run time
/// is a call to `memcpy`, which on W3's one-column products (`w = 1` at every step `p`) cost
/// more than the product.
#[cfg(feature = "simd")]
#[inline(always)]
fn partial_vector(src: &[f32], w: usize) -> V {
    let mut lanes = [0.0f32; L];
    for (d, &s) in lanes.iter_mut().zip(src.iter().take(w)) {
        *d = s;
    }
    V::new(lanes)
}

/// The last `w < L` columns `j..j + w` of rows `0..R` of the block: one vector per row with
/// the unused lanes computed on zeros and never stored.
#[cfg(feature = "simd")]
#[inline(always)]
fn tile_partial<S: Step, const R: usize, const LOAD: bool, const AT: bool>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    j: usize,
    w: usize,
    g: Block,
) {
    let (ldb, ldo) = (g.ldb, g.ldo);
    let mut acc = [V::splat(0.0); R];
    if LOAD {
        for (r, s) in acc.iter_mut().enumerate() {
            *s = partial_vector(out.get(r * ldo + j..).unwrap_or(&[]), w);
        }
    }
    let a_rows = a_rows::<R, AT>(a, g);
    if !a_fits::<R, AT>(a, &a_rows, g) {
        return;
    }
    // The steps whose whole vector of `b` lies within `b` (all but the last one or two rows
    // of a narrow `b`) load it directly, in a function over the accumulators by value; the
    // others through [`row_vector`]. One loop over every step, `row_vector`'s fallback inside,
    // kept every accumulator in memory, stored at every step: W2's `h · W2` (`[64, 128] x
    // [128, 10]`) 6.2 -> 2.9 µs under `fma` (`example product_cost`, Zen 4, 2026-12-05).
    let whole = match b.len().checked_sub(j + L) {
        Some(room) if ldb > 0 => (room / ldb + 1).min(g.k),
        Some(_) => g.k,
        None => 0,
    };
    let Some(mut acc) = partial_steps::<S, R, AT>(acc, a, &a_rows, b, (j, whole), g) else {
        return;
    };
    for p in whole..g.k {
        let y = row_vector(b, p * ldb + j, w);
        if !partial_step::<S, R, AT>(&mut acc, a, &a_rows, y, p, g) {
            return;
        }
    }
    for (r, &s) in acc.iter().enumerate() {
        put_lanes(out.get_mut(r * ldo + j..).unwrap_or(&mut []), s, w);
    }
}

/// Steps `0..whole` of [`tile_partial`], whose vectors of `b` (from column `j`) lie within
/// `b`: the accumulators after them, `None` when a slice ends first (never: see the caller).
#[cfg(feature = "simd")]
#[inline(always)]
fn partial_steps<S: Step, const R: usize, const AT: bool>(
    mut acc: [V; R],
    a: &[f32],
    a_rows: &[&[f32]; R],
    b: &[f32],
    (j, whole): (usize, usize),
    g: Block,
) -> Option<[V; R]> {
    for p in 0..whole {
        let at = p * g.ldb + j;
        let y = V::new(*<&[f32; L]>::try_from(b.get(at..at + L)?).ok()?);
        if !partial_step::<S, R, AT>(&mut acc, a, a_rows, y, p, g) {
            return None;
        }
    }
    Some(acc)
}

/// `dst[l] = v[l]` for the lanes `l < w` (at most `L`), `dst`'s other values kept: where `dst`
/// holds a whole vector, one read-modify-write (a masked store under AVX-512), else lane by
/// lane. Lane by lane everywhere, the copy of a row's last `w` sums compiled to a call to
/// `memcpy` (a copy of a length known at run time), about a sixth of W2's `[128, 10]` weight
/// gradient (3.4 -> 2.8 µs, and `h · W2` 2.9 -> 2.5 µs, under `fma`).
#[cfg(feature = "simd")]
#[inline(always)]
fn put_lanes(dst: &mut [f32], v: V, w: usize) {
    if let Some(d) = dst
        .get_mut(..L)
        .and_then(|d| <&mut [f32; L]>::try_from(d).ok())
    {
        let lane = V::new(core::array::from_fn(|l| l as f32));
        *d = lane
            .simd_lt(V::splat(w as f32))
            .select(v, V::new(*d))
            .to_array();
    } else {
        for (d, x) in dst.iter_mut().zip(v.to_array()).take(w) {
            *d = x;
        }
    }
}

/// One step `p` of [`tile_partial`]: each accumulator takes `a[r, p] · y`; `false` when `a`
/// ends first (never, after `a_fits`).
#[cfg(feature = "simd")]
#[inline(always)]
fn partial_step<S: Step, const R: usize, const AT: bool>(
    acc: &mut [V; R],
    a: &[f32],
    a_rows: &[&[f32]; R],
    y: V,
    p: usize,
    g: Block,
) -> bool {
    if AT {
        let at = p * g.lda;
        let Some(xs) = a.get(at..at + R) else {
            return false;
        };
        for (s, &x) in acc.iter_mut().zip(xs) {
            *s = S::v(*s, V::splat(x), y);
        }
    } else {
        for (s, a_r) in acc.iter_mut().zip(a_rows) {
            // Unconditional, as in [`tile`].
            let Some(&x) = a_r.get(p) else {
                return false;
            };
            *s = S::v(*s, V::splat(x), y);
        }
    }
    true
}

/// `sgd_matmul` in place: `w[i, j] ← sub(w[i, j], mul(g, lr))` with
/// `g = Σ_p a[p, i] · b[p, j]`, for row-major `w: [m, n]`, `a: [k, m]`, `b: [k, n]` (lengths
/// checked here: nothing is written if a buffer is short).
///
/// # Arithmetic order
/// `tapeplan_core::ops::sgd_matmul::kernel`'s: each `g` starts at `+0.0` and takes the step `S`
/// (the plan's arithmetic profile) over `p = 0, 1, …, k − 1` in increasing order; then the
/// update is the reference's own `mul::scalar` (for a finite nonzero rate, the plain product:
/// the same bits) and `sub::scalar`, lane by lane. Lanes are distinct `j`s and a register tile
/// holds eight rows `i` (then four, then one: columns of `a`, contiguous in each row `p` of
/// `a`), never distinct `p`s. The last columns of a row run as one vector whose unused lanes
/// are computed on zeros and never stored.
#[cfg(feature = "simd")]
pub(crate) fn sgd_matmul<S: Step>(
    w: &mut [f32],
    a: &[f32],
    b: &[f32],
    (k, m, n): (usize, usize, usize),
    lr: f32,
) {
    if w.len() < m * n || a.len() < k * m || b.len() < k * n {
        return;
    }
    let mut i = 0;
    // Eight sums in flight, as the additions' latency wants: tiles of eight rows by one vector
    // of columns under AVX-512 (32 registers), else four rows by two vectors (16 registers:
    // eight accumulators, two vectors of `b`, a broadcast; six loads per eight products where
    // eight rows by one vector needed nine, W1's update bound by them). Six rows by two
    // vectors, as the products' tiles, made W1's step 8 % slower (its 64 rows leave a tile of
    // four) and W2's 2 % faster (peers A/B, 2026-12-04).
    const ROWS: usize = if L >= 16 { 2 * MR } else { MR };
    while i + ROWS <= m {
        sgd_rows::<S, ROWS>(w, a, b, i, (k, m, n), lr);
        i += ROWS;
    }
    while i + MR <= m {
        sgd_rows::<S, MR>(w, a, b, i, (k, m, n), lr);
        i += MR;
    }
    while i < m {
        sgd_rows::<S, 1>(w, a, b, i, (k, m, n), lr);
        i += 1;
    }
}

/// Rows `i..i + R` of [`sgd_matmul`]: two vectors of columns a tile where they fit (not under
/// AVX-512, whose row tiles are eight high), then one vector, then the last partial one.
#[cfg(feature = "simd")]
#[inline(always)]
fn sgd_rows<S: Step, const R: usize>(
    w: &mut [f32],
    a: &[f32],
    b: &[f32],
    i: usize,
    (k, m, n): (usize, usize, usize),
    lr: f32,
) {
    // A finite nonzero rate (every real one): `g · lr` is never `0 · inf`, so the plain
    // product is `mul::scalar`'s (as `ops::MulByFinite`).
    let plain = lr.is_finite() && lr != 0.0;
    let mut j = 0;
    if L < 16 {
        while j + 2 * L <= n {
            sgd_tile::<S, R, 2>(w, a, b, (i, j), (k, m, n), lr, plain);
            j += 2 * L;
        }
    }
    while j + L <= n {
        sgd_tile::<S, R, 1>(w, a, b, (i, j), (k, m, n), lr, plain);
        j += L;
    }
    if j < n {
        sgd_partial::<S, R>(w, a, b, (i, j), (k, m, n), lr, plain);
    }
}

/// Rows `i..i + R` by `C` whole vectors of columns from `j` of [`sgd_matmul`].
#[cfg(feature = "simd")]
#[inline(always)]
fn sgd_tile<S: Step, const R: usize, const C: usize>(
    w: &mut [f32],
    a: &[f32],
    b: &[f32],
    (i, j): (usize, usize),
    (k, m, n): (usize, usize, usize),
    lr: f32,
    plain: bool,
) {
    let mut acc = [[V::splat(0.0); C]; R];
    if m == 0 || n == 0 {
        return;
    }
    // Rows of `a` and `b` as chunks, so the ranges read in each (`i..i + R`, `j..j + C·L`)
    // are the same at every `p` and checked once (W1's update spent a fifth of its time
    // checking them at every step).
    for (ar, br) in a.chunks_exact(m).zip(b.chunks_exact(n)).take(k) {
        let (Some(xs), Some(ys)) = (
            ar.get(i..i + R).and_then(|x| <&[f32; R]>::try_from(x).ok()),
            br.get(j..j + C * L),
        ) else {
            return;
        };
        let y: [V; C] = core::array::from_fn(|c| {
            ys.get(c * L..c * L + L)
                .and_then(|v| <&[f32; L]>::try_from(v).ok())
                .map_or(V::splat(0.0), |v| V::new(*v))
        });
        for (s, &x) in acc.iter_mut().zip(xs) {
            let x = V::splat(x);
            for (s, &y) in s.iter_mut().zip(&y) {
                *s = S::v(*s, x, y);
            }
        }
    }
    for (r, s) in acc.iter().enumerate() {
        for (c, s) in s.iter().enumerate() {
            let at = (i + r) * n + j + c * L;
            let Some(dst) = w
                .get_mut(at..at + L)
                .and_then(|d| <&mut [f32; L]>::try_from(d).ok())
            else {
                continue;
            };
            // `w - g · lr` lane by lane (the same two roundings as the scalar form), with one
            // load and one store.
            if plain {
                *dst = (V::new(*dst) - *s * V::splat(lr)).to_array();
            } else {
                update_scalar(dst, s.as_array(), lr);
            }
        }
    }
}

/// The last `n - j` (fewer than `L`) columns of rows `i..i + R` of [`sgd_matmul`]: one vector
/// whose unused lanes are computed on zeros and never stored.
#[cfg(feature = "simd")]
#[inline(always)]
fn sgd_partial<S: Step, const R: usize>(
    w: &mut [f32],
    a: &[f32],
    b: &[f32],
    (i, j): (usize, usize),
    (k, m, n): (usize, usize, usize),
    lr: f32,
    plain: bool,
) {
    let width = (n - j).min(L);
    let mut acc = [V::splat(0.0); R];
    for p in 0..k {
        let y = row_vector(b, p * n + j, width);
        let Some(xs) = a.get(p * m + i..p * m + i + R) else {
            return;
        };
        for (s, &x) in acc.iter_mut().zip(xs) {
            *s = S::v(*s, V::splat(x), y);
        }
    }
    for (r, s) in acc.iter().enumerate() {
        let at = (i + r) * n + j;
        if let (Some(dst), Some(g)) = (w.get_mut(at..at + width), s.as_array().get(..width)) {
            if plain {
                for (o, &g) in dst.iter_mut().zip(g) {
                    *o = tapeplan_core::ops::sub::scalar(*o, g * lr);
                }
            } else {
                update_scalar(dst, g, lr);
            }
        }
    }
}

/// `w ← sub(w, mul(g, lr))` element by element: the reference's own scalars (any rate).
#[cfg(feature = "simd")]
#[inline(always)]
fn update_scalar(dst: &mut [f32], g: &[f32], lr: f32) {
    use tapeplan_core::ops::{mul, sub};
    for (o, &g) in dst.iter_mut().zip(g) {
        *o = sub::scalar(*o, mul::scalar(g, lr));
    }
}

// ---------------------------------------------------------------------------------------------
// Convolution.

/// `y = conv(x, w)` over row-major buffers of geometry `g` (lengths checked by the caller).
///
/// # Arithmetic order
/// The reference's (`tapeplan_core::ops::conv::kernel`): each output starts at `+0.0` and
/// accumulates `acc = acc + x * w` (product rounded, then sum rounded, never fused) over its
/// group's input channels in increasing order, then the kernel taps `(kh, kw)` row-major,
/// skipping taps that read padding. Lanes are distinct output columns `ow`, and a register tile
/// holds four output channels of one group by two vectors of columns (one channel by four
/// vectors when the group has fewer than four channels left, as in a depthwise convolution):
/// never distinct channels or taps of one output. Columns whose every tap reads inside the
/// input run a tile at a time, the last tile overlapping the one before it when the interior is
/// not a multiple of the tile (recomputing an output gives the same bits), single vectors
/// (the last one overlapping likewise) when the interior is narrower than a tile; border
/// columns, and interiors narrower than a vector, run one output at a time in the same order.
#[cfg(feature = "simd")]
pub(crate) fn conv(x: &[f32], w: &[f32], out: &mut [f32], g: &tapeplan_core::ops::conv::Geometry) {
    let [ah, aw] = g.axes;
    let cout_g = g.c_out_group();
    let (_, hw_out, _) = g.planes();
    if aw.kernel == 0 || cout_g == 0 {
        out.fill(0.0);
        return;
    }
    // The interior columns: every tap `kw` reads inside the row.
    let ow_a = aw.valid(0).0;
    let ow_b = aw.valid(aw.kernel - 1).1.max(ow_a);
    let interior = ow_b - ow_a >= L;
    for n in 0..g.batch {
        for group in 0..g.groups {
            let mut col = 0;
            while col < cout_g {
                let co = group * cout_g + col;
                let r = if cout_g - col >= 4 { 4 } else { 1 };
                let t = Tile::new(g, x, w, n, co, group, r);
                for oh in 0..ah.output {
                    let row_at = |c: usize| (n * g.c_out + c) * hw_out + oh * aw.output;
                    let mut one = |ow: usize| {
                        for k in 0..r {
                            if let Some(o) = out.get_mut(row_at(co + k) + ow) {
                                *o = t.one(k, oh, ow);
                            }
                        }
                    };
                    if !interior {
                        (0..aw.output).for_each(&mut one);
                        continue;
                    }
                    (0..ow_a).for_each(&mut one);
                    (ow_b..aw.output).for_each(&mut one);
                    let mut store = |ow: usize, acc: &[V]| {
                        for (k, v) in acc.iter().enumerate() {
                            let c = co + k % r;
                            let at = row_at(c) + ow + (k / r) * L;
                            if let Some(dst) = out.get_mut(at..at + L) {
                                dst.copy_from_slice(v.as_array());
                            }
                        }
                    };
                    // Whole tiles, the last one overlapping the one before it when the
                    // interior is not a multiple of the tile; single vectors when no whole
                    // tile fits.
                    let full = if r == 4 { 2 * L } else { 4 * L };
                    let mut ow = ow_a;
                    while ow_b - ow_a >= full && ow < ow_b {
                        let at = ow.min(ow_b - full);
                        if r == 4 {
                            store(at, &t.vectors::<4, 2, 8>(oh, at));
                        } else {
                            store(at, &t.vectors::<1, 4, 4>(oh, at));
                        }
                        ow += full;
                    }
                    while ow < ow_b {
                        // The last vector may overlap the one before it.
                        let at = ow.min(ow_b - L);
                        if r == 4 {
                            store(at, &t.vectors::<4, 1, 4>(oh, at));
                        } else {
                            store(at, &t.vectors::<1, 1, 1>(oh, at));
                        }
                        ow += L;
                    }
                }
                col += r;
            }
        }
    }
}

/// One batch element and a tile of `r` output channels from `co`, of one group: the input
/// channels of the group and the tile's weights.
#[cfg(feature = "simd")]
struct Tile<'a> {
    g: &'a tapeplan_core::ops::conv::Geometry,
    /// `x[n, group's channels]`.
    x: &'a [f32],
    /// `w[co .. co + r]`.
    w: &'a [f32],
    /// Elements per weight channel: `C_in/groups · K_h · K_w`.
    w_stride: usize,
}

#[cfg(feature = "simd")]
impl<'a> Tile<'a> {
    fn new(
        g: &'a tapeplan_core::ops::conv::Geometry,
        x: &'a [f32],
        w: &'a [f32],
        n: usize,
        co: usize,
        group: usize,
        r: usize,
    ) -> Self {
        let (hw_in, _, taps) = g.planes();
        let cin_g = g.c_in_group();
        let x_at = (n * g.c_in + group * cin_g) * hw_in;
        let w_stride = cin_g * taps;
        Tile {
            g,
            x: x.get(x_at..x_at + cin_g * hw_in).unwrap_or(&[]),
            w: w.get(co * w_stride..(co + r) * w_stride).unwrap_or(&[]),
            w_stride,
        }
    }

    /// Row `ih` of input channel `cil` of the group (empty past the buffer).
    #[inline(always)]
    fn x_row(&self, cil: usize, ih: usize) -> &'a [f32] {
        let [ah, aw] = self.g.axes;
        let at = (cil * ah.input + ih) * aw.input;
        self.x.get(at..at + aw.input).unwrap_or(&[])
    }

    /// The input row tap row `kh` of output row `oh` reads, or `None` in the padding.
    #[inline(always)]
    fn ih(&self, oh: usize, kh: usize) -> Option<usize> {
        let ah = self.g.axes[0];
        let pos = oh * ah.stride + kh * ah.dilation;
        pos.checked_sub(ah.pad).filter(|&ih| ih < ah.input)
    }

    /// Output `y[n, co + k, oh, ow]` alone, in the reference's order.
    fn one(&self, k: usize, oh: usize, ow: usize) -> f32 {
        let [ah, aw] = self.g.axes;
        let mut acc = 0.0f32;
        for cil in 0..self.g.c_in_group() {
            for kh in 0..ah.kernel {
                let Some(ih) = self.ih(oh, kh) else {
                    continue;
                };
                let xrow = self.x_row(cil, ih);
                let wrow = k * self.w_stride + (cil * ah.kernel + kh) * aw.kernel;
                for kw in 0..aw.kernel {
                    let pos = ow * aw.stride + kw * aw.dilation;
                    let Some(iw) = pos.checked_sub(aw.pad).filter(|&iw| iw < aw.input) else {
                        continue;
                    };
                    let xv = xrow.get(iw).copied().unwrap_or(0.0);
                    acc += xv * self.w.get(wrow + kw).copied().unwrap_or(0.0);
                }
            }
        }
        acc
    }

    /// Outputs `y[n, co + k, oh, ow + c·L ..][..L]` for `k < R`, `c < C`, as `acc[c·R + k]`
    /// (`A = R·C`), every tap of those columns inside the row.
    #[inline(always)]
    fn vectors<const R: usize, const C: usize, const A: usize>(
        &self,
        oh: usize,
        ow: usize,
    ) -> [V; A] {
        let [ah, aw] = self.g.axes;
        let mut acc = [V::splat(0.0); A];
        for cil in 0..self.g.c_in_group() {
            for kh in 0..ah.kernel {
                let Some(ih) = self.ih(oh, kh) else {
                    continue;
                };
                let xrow = self.x_row(cil, ih);
                let wrow = (cil * ah.kernel + kh) * aw.kernel;
                for kw in 0..aw.kernel {
                    let at = ow * aw.stride + kw * aw.dilation - aw.pad;
                    // With stride 1, one check for the tile's columns.
                    let xs = if aw.stride == 1 {
                        xrow.get(at..at + C * L).unwrap_or(&[])
                    } else {
                        &[]
                    };
                    let (xc, _) = xs.as_chunks::<L>();
                    let xv: [V; C] = core::array::from_fn(|c| {
                        let at = at + c * L * aw.stride;
                        if aw.stride == 1 {
                            xc.get(c).map_or(V::splat(0.0), |s| V::new(*s))
                        } else {
                            V::new(core::array::from_fn(|l| {
                                xrow.get(at + l * aw.stride).copied().unwrap_or(0.0)
                            }))
                        }
                    });
                    let wv: [V; R] = core::array::from_fn(|k| {
                        V::splat(
                            self.w
                                .get(k * self.w_stride + wrow + kw)
                                .copied()
                                .unwrap_or(0.0),
                        )
                    });
                    for (c, &xc) in xv.iter().enumerate() {
                        for (k, &wk) in wv.iter().enumerate() {
                            if let Some(a) = acc.get_mut(c * R + k) {
                                *a += xc * wk;
                            }
                        }
                    }
                }
            }
        }
        acc
    }
}
