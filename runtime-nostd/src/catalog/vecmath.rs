//! Lane-wise ports of the `libm` 0.2.16 functions behind the `precise` math profile: `expf`,
//! `expm1f` (under `tanhf`), `tanhf`, `logf` and `log1pf`, and the `sigmoid` and `softplus`
//! reference kernels built from them. Each gives **the same bits as the scalar `libm` function
//! for every `f32` input** (NaN in gives NaN out: here the input NaN itself), so the `simd`
//! catalog runs them on vectors without changing a digest.
//!
//! # How
//! Each function is the scalar code's arithmetic, operation for operation and in the same
//! order (IEEE `+ − × ÷` on `f32` lanes, rounded one at a time: no fused multiply-add, no
//! reassociation), with its branches made branch-free: every branch's arithmetic runs on all
//! lanes, and a lane keeps the result of the branch the scalar code would have taken for it
//! (`select` by a mask built from the same thresholds). Where two branches differ only in a
//! constant, the port uses one expression with the constant blended, and says why the bits are
//! the same (for example `k = 0` makes `x - k·ln2_hi` exactly `x`). Lanes that a branch does not
//! own compute values that are thrown away (an infinity or NaN there never reaches a kept lane).
//! The thresholds of the scalar code compare the bit pattern of `|x|` as an integer; for
//! non-NaN inputs that order is the order of the floats, so the port compares floats
//! (`|x| > f32::from_bits(…)`), and NaN lanes are sent to their result first.
//!
//! `scalbnf(y, k)` (in `expf`) is `y · 2^k` as libm computes it: one multiplication when `2^k`
//! is a normal number, else a pre-scale by `2^127` (`k > 127`) or `2^−102` (`k < −126`) first,
//! then the rest: two multiplications in the same order (both by powers of two, so only the
//! last can round).
//!
//! # Attribution and license
//! The algorithms and constants are those of `libm` 0.2.16 (MIT or Apache-2.0, the Rust port of
//! musl), which took them from FreeBSD's msun (`e_expf.c`, `s_expm1f.c`, `s_tanhf.c` via musl,
//! `e_logf.c`, `s_log1pf.c`): "Copyright (C) 1993 by Sun Microsystems, Inc. All rights
//! reserved. Developed at SunPro, a Sun Microsystems, Inc. business. Permission to use, copy,
//! modify, and distribute this software is freely granted, provided that this notice is
//! preserved." The float conversion is by Ian Lance Taylor, Cygnus Support. This module is a
//! re-expression of that arithmetic on vectors, not a copy of the code.
#![allow(clippy::excessive_precision, clippy::unreadable_literal)]

/// The functions below, over the vector type `V` and its integer lanes `I` of the expanding
/// module: once over the catalog's vectors (`L` lanes, [`one`]) and once over twice as many
/// lanes ([`two`]: `lanes::V2`, two vectors per operation where the target has no wider
/// register), whose operations interleave two independent dependency chains (`tanhf` is
/// latency-bound on one vector: two divisions in a chain). Every lane computes the same
/// operations either way, so the bits do not depend on the width.
macro_rules! lane_math {
    () => {
        #[inline(always)]
        fn splat(x: f32) -> V {
            V::splat(x)
        }

        /// The float whose bits are `b` (the scalar code's thresholds, written as it writes them).
        #[inline(always)]
        fn bits(b: u32) -> V {
            V::splat(f32::from_bits(b))
        }

        /// `i` (small integers) as floats: exact.
        #[inline(always)]
        fn to_f(i: I) -> V {
            i.round_float()
        }

        /// The lanes' bit patterns as signed integers.
        #[inline(always)]
        fn to_i(x: V) -> I {
            x.to_bits().cast_signed()
        }

        /// Floats from bit patterns.
        #[inline(always)]
        fn from_i(i: I) -> V {
            V::from_bits(i.cast_unsigned())
        }

        /// `2^n` for `-126 <= n <= 127` (other lanes: garbage, to be thrown away).
        #[inline(always)]
        fn pow2(n: I) -> V {
            from_i((n + I::splat(0x7f)) << 23u32)
        }

        /// `±0.5` or `±1.0` with the sign of `x`: `c` with `x`'s sign bit.
        #[inline(always)]
        fn with_sign_of(c: f32, x: V) -> V {
            (x & splat(-0.0)) | splat(c)
        }

        // ---------------------------------------------------------------------------------------------
        // expf (FreeBSD e_expf.c)

        const EXP_LN2_HI: f32 = 6.9314575195e-01; // 0x3f317200
        const EXP_LN2_LO: f32 = 1.4286067653e-06; // 0x35bfbe8e
        const INV_LN2: f32 = 1.4426950216e+00; // 0x3fb8aa3b
        const EXP_P1: f32 = 1.6666625440e-1;
        const EXP_P2: f32 = -2.7667332906e-3;

        /// `libm::expf`, lane by lane.
        #[inline(always)]
        pub(crate) fn expf(x: V) -> V {
            let a = x.abs();
            // Argument reduction: `k` is 0 for `|x| <= ln2/2`, `±1` up to `1.5·ln2`, else
            // `trunc(x/ln2 ± 0.5)` (`as i32`, toward zero).
            let kr = (splat(INV_LN2) * x + with_sign_of(0.5, x)).trunc_int();
            let kf = a.simd_gt(bits(0x3f851592)).select(
                to_f(kr),
                a.simd_gt(bits(0x3eb17218))
                    .select(with_sign_of(1.0, x), splat(0.0)),
            );
            // With `k = 0` (`+0.0`) these are the scalar's `hi = x, lo = 0` exactly: `x - 0·c = x`,
            // `0·c = +0`, `x - 0 = x`.
            let hi = x - kf * splat(EXP_LN2_HI);
            let lo = kf * splat(EXP_LN2_LO);
            let r = hi - lo;
            let xx = r * r;
            let c = r - xx * (splat(EXP_P1) + xx * splat(EXP_P2));
            let y = splat(1.0) + (r * c / (splat(2.0) - c) - lo + hi);
            // `scalbnf(y, k)`; `k = 0` gives `y · 1 · 1 = y`.
            let k = kf.trunc_int();
            let big = k.simd_gt(I::splat(127));
            let small = k.simd_lt(I::splat(-126));
            let pre = big.select(
                bits(0x7f00_0000),
                small.select(bits(0x0c80_0000), splat(1.0)),
            );
            let n = big.select(k - I::splat(127), small.select(k + I::splat(102), k));
            let scaled = y * pre * pow2(n);
            // The cases the scalar code returns early, last so they win.
            let tiny = a.simd_le(bits(0x3900_0000));
            let out = tiny.select(splat(1.0) + x, scaled);
            let out = x
                .simd_le(-f32::from_bits(0x42cff1b5))
                .select(splat(0.0), out);
            let out = x
                .simd_ge(f32::from_bits(0x42b17218))
                .select(splat(f32::INFINITY), out);
            x.is_nan().select(x, out)
        }

        // ---------------------------------------------------------------------------------------------
        // expm1f (FreeBSD s_expm1f.c)

        const LN2_HI: f32 = 6.9313812256e-01; // 0x3f317180
        const LN2_LO: f32 = 9.0580006145e-06; // 0x3717f7d1
        const Q1: f32 = -3.3333212137e-2;
        const Q2: f32 = 1.5807170421e-3;

        /// `libm::expm1f` (private to `libm`, under `tanhf`), lane by lane.
        #[inline(always)]
        fn expm1f(x: V) -> V {
            let xin = x;
            let a = x.abs();
            // `k`: 0 for `|x| <= ln2/2`, `±1` below `1.5·ln2`, else `trunc(x/ln2 ± 0.5)`. The scalar
            // code's `k = ±1` branch (`hi = x ∓ ln2_hi`, `lo = ±ln2_lo`) is the general one with
            // `t = ±1` exactly; with `k = 0` (`+0.0`) `hi = x`, `lo = +0`, `c = (x - x) - 0 = +0`, the
            // scalar's `c = 0`.
            let kr = (splat(INV_LN2) * x + with_sign_of(0.5, x)).trunc_int();
            let kf = a.simd_gt(bits(0x3eb17218)).select(
                a.simd_lt(bits(0x3f851592))
                    .select(with_sign_of(1.0, x), to_f(kr)),
                splat(0.0),
            );
            let hi = x - kf * splat(LN2_HI);
            let lo = kf * splat(LN2_LO);
            let x = hi - lo;
            let c = (hi - x) - lo;
            let hfx = splat(0.5) * x;
            let hxs = x * hfx;
            let r1 = splat(1.0) + hxs * (splat(Q1) + hxs * splat(Q2));
            let t = splat(3.0) - r1 * hfx;
            let e = hxs * ((r1 - t) / (splat(6.0) - x * t));
            let k0 = x - (x * e - hxs);
            let e = x * (e - c) - c;
            let e = e - hxs;
            let km1 = splat(0.5) * (x - e) - splat(0.5);
            let k1 = x.simd_lt(splat(-0.25)).select(
                splat(-2.0) * (e - (x + splat(0.5))),
                splat(1.0) + splat(2.0) * (x - e),
            );
            let k = kf.trunc_int();
            let twopk = pow2(k);
            let y = x - e + splat(1.0);
            let far = kf
                .simd_eq(splat(128.0))
                .select(y * splat(2.0) * bits(0x7f00_0000), y * twopk)
                - splat(1.0);
            let uf = pow2(-k);
            let near = kf.simd_lt(splat(23.0)).select(
                (x - e + (splat(1.0) - uf)) * twopk,
                (x - (e + uf) + splat(1.0)) * twopk,
            );
            let out = (kf.simd_lt(splat(0.0)) | kf.simd_gt(splat(56.0))).select(far, near);
            let out = kf.simd_eq(splat(1.0)).select(k1, out);
            let out = kf.simd_eq(splat(-1.0)).select(km1, out);
            let out = kf.simd_eq(splat(0.0)).select(k0, out);
            // Early returns: `|x| < 2^-25` gives `x`; `|x| >= 27·ln2`: `-1` for negative `x`, `+inf`
            // above `log(FLT_MAX)` (`x · 2^127` overflows), NaN itself.
            let out = a.simd_lt(bits(0x3300_0000)).select(xin, out);
            let huge = a.simd_ge(bits(0x4195b844));
            let out = (huge & xin.simd_lt(splat(0.0))).select(splat(-1.0), out);
            let out = xin
                .simd_gt(f32::from_bits(0x42b17217))
                .select(splat(f32::INFINITY), out);
            xin.is_nan().select(xin, out)
        }

        // ---------------------------------------------------------------------------------------------
        // tanhf (musl s_tanhf.c)

        /// `libm::tanhf`, lane by lane.
        #[inline(always)]
        pub(crate) fn tanhf(x: V) -> V {
            let a = x.abs();
            let above_quarter = a.simd_gt(bits(0x3e82c578));
            // One `expm1f` per lane: of `2|x|` above `log(5/3)/2`, else of `-2|x|`.
            let t = expm1f(above_quarter.select(splat(2.0) * a, splat(-2.0) * a));
            // One division for the three branches, `n / (t + 2)`: `n = 2` above `log(3)/2` (then
            // `1 - 2/(t + 2)`), `t` above `log(5/3)/2` (`t/(t + 2)`), else `-t` (`-t/(t + 2)`), each
            // lane the scalar's own operations (the divider's latency bounded a step of W1).
            let above_half = a.simd_gt(bits(0x3f0c9f54));
            let n = above_half.select(splat(2.0), above_quarter.select(t, -t));
            let q = n / (t + splat(2.0));
            let tt = above_half.select(splat(1.0) - q, q);
            // `|x| > 10`: `1 + 0/|x| = 1`; subnormal or zero: `|x|`.
            let tt = a.simd_gt(splat(10.0)).select(splat(1.0), tt);
            let tt = a.simd_lt(bits(0x0080_0000)).select(a, tt);
            // `-tt` for negative `x` (`tt` is never negative: a sign-bit operation).
            let out = tt ^ (x & splat(-0.0));
            x.is_nan().select(x, out)
        }

        // ---------------------------------------------------------------------------------------------
        // logf (FreeBSD e_logf.c) and log1pf (s_log1pf.c)

        const LG1: f32 = 0.66666662693;
        const LG2: f32 = 0.40000972152;
        const LG3: f32 = 0.28498786688;
        const LG4: f32 = 0.24279078841;

        /// The shared tail of `logf` and `log1pf`: `(s, hfsq, f)` terms of `log(1 + f)` for `f` in
        /// `[sqrt(2)/2 - 1, sqrt(2) - 1]`: answers `(s·(hfsq + R), hfsq)`.
        #[inline(always)]
        fn log_poly(f: V) -> (V, V) {
            let s = f / (splat(2.0) + f);
            let z = s * s;
            let w = z * z;
            let t1 = w * (splat(LG2) + w * splat(LG4));
            let t2 = z * (splat(LG1) + w * splat(LG3));
            let r = t2 + t1;
            let hfsq = splat(0.5) * f * f;
            (s * (hfsq + r), hfsq)
        }

        /// `libm::logf`, lane by lane.
        #[inline(always)]
        pub(crate) fn logf(x: V) -> V {
            // Subnormals are scaled by `2^25` first (and `k` starts at -25).
            let sub = x.simd_lt(bits(0x0080_0000));
            let xs = sub.select(x * bits(0x4c00_0000), x);
            let k0 = sub.select(I::splat(-25), I::splat(0));
            // Reduce into `[sqrt(2)/2, sqrt(2)]`.
            let ix = to_i(xs) + I::splat(0x3f80_0000 - 0x3f35_04f3);
            let k = k0 + ((ix >> 23u32) - I::splat(0x7f));
            let f = from_i((ix & I::splat(0x007f_ffff)) + I::splat(0x3f35_04f3)) - splat(1.0);
            let (sr, hfsq) = log_poly(f);
            let dk = to_f(k);
            let out = sr + dk * splat(LN2_LO) - hfsq + f + dk * splat(LN2_HI);
            // Early returns: `1` gives `+0`; `±0` gives `-1/(x·x) = -inf`; negative gives NaN;
            // `+inf` and NaN give `x`.
            let out = x.simd_eq(splat(1.0)).select(splat(0.0), out);
            let out = x.simd_lt(splat(0.0)).select(splat(f32::NAN), out);
            let out = x.simd_eq(splat(0.0)).select(splat(f32::NEG_INFINITY), out);
            let out = x.simd_eq(splat(f32::INFINITY)).select(x, out);
            x.is_nan().select(x, out)
        }

        /// `libm::log1pf`, lane by lane.
        #[inline(always)]
        pub(crate) fn log1pf(x: V) -> V {
            // `k = 0` (`f = x`, `c = 0`) for `sqrt(2)/2 - 1 <= x < sqrt(2) - 1`; else `u = 1 + x`
            // reduced into `[sqrt(2)/2, sqrt(2)]` with the correction `c ≈ log(1 + x) - log(u)`.
            let direct =
                x.simd_ge(-f32::from_bits(0xbe95f619 & 0x7fff_ffff)) & x.simd_lt(bits(0x3ed413d0));
            let u = splat(1.0) + x;
            let iu = to_i(u) + I::splat(0x3f80_0000 - 0x3f35_04f3);
            let k = (iu >> 23u32) - I::splat(0x7f);
            let kf = to_f(k);
            let c = kf
                .simd_ge(splat(2.0))
                .select(splat(1.0) - (u - x), x - (u - splat(1.0)))
                / u;
            let c = kf.simd_lt(splat(25.0)).select(c, splat(0.0));
            let fu = from_i((iu & I::splat(0x007f_ffff)) + I::splat(0x3f35_04f3)) - splat(1.0);
            // With `k = 0` and `c = 0` the sum below is the scalar's `k = 0` sum exactly.
            let f = direct.select(x, fu);
            let c = direct.select(splat(0.0), c);
            let dk = direct.select(splat(0.0), kf);
            let (sr, hfsq) = log_poly(f);
            let out = sr + (dk * splat(LN2_LO) + c) - hfsq + f + dk * splat(LN2_HI);
            // Early returns: `|x| < 2^-24` gives `x`; `-1` gives `-inf`; below `-1` NaN; `+inf` and NaN
            // give `x`.
            let out = x.abs().simd_lt(bits(0x3380_0000)).select(x, out);
            let out = x.simd_lt(splat(-1.0)).select(splat(f32::NAN), out);
            let out = x.simd_eq(splat(-1.0)).select(splat(f32::NEG_INFINITY), out);
            let out = x.simd_eq(splat(f32::INFINITY)).select(x, out);
            x.is_nan().select(x, out)
        }

        // ---------------------------------------------------------------------------------------------
        // The reference kernels built from them.

        /// `tapeplan_core::ops::sigmoid::scalar`: `1 / (1 + expf(-x))`, lane by lane.
        #[inline(always)]
        pub(crate) fn sigmoid(x: V) -> V {
            splat(1.0) / (splat(1.0) + expf(-x))
        }

        /// `tapeplan_core::ops::softplus::scalar`: `x` above the threshold, else
        /// `log1pf(expf(x))`, lane by lane.
        #[inline(always)]
        pub(crate) fn softplus(x: V) -> V {
            let t = splat(tapeplan_core::ops::softplus::THRESHOLD);
            x.simd_gt(t).select(x, log1pf(expf(x)))
        }
    };
}

/// Over the catalog's vectors (`lanes::V`).
pub(crate) mod one {
    #![allow(dead_code)]
    use super::super::lanes::{I, V};
    lane_math!();
}

/// Over twice as many lanes (`lanes::V2`).
pub(crate) mod two {
    #![allow(dead_code)]
    use super::super::lanes::{I2 as I, V2 as V};
    lane_math!();
}

pub(crate) use one::{expf, logf, sigmoid, softplus, tanhf};
