//! The `fma` arithmetic profile's two implementations of one operation: `libm::fmaf` (software,
//! the reference kernel's definition of the bits, what wasm, SSE2-only builds and Cortex-M run)
//! against the x86 hardware instruction (`vfmadd`, what the catalog's matrix product runs with
//! the `fma` target feature), bit for bit (NaNs compared as one class: payloads may differ), on
//! random bit patterns, on near-cancellations, and on every triple of a list of edge cases
//! (signed zeros, subnormals, infinities, NaNs, overflow, exact cancellations, ties).
//!
//! The hardware side is `wide`'s `mul_add`, the call the catalog makes, which is `vfmadd`
//! (`_mm_fmadd_ps`, `_mm256_fmadd_ps`, `_mm512_fmadd_ps`) when the build has the `fma` target
//! feature; the comparison compiles in such builds with `simd`: `cargo xtask simd` runs this
//! file with `-C target-cpu=native` (AVX-512F implies FMA); by hand, `RUSTFLAGS="-C
//! target-cpu=native" cargo test -p tapeplan-runtime --features simd --test runtime -- fma::`.

/// The edge cases every triple of which is checked.
#[cfg_attr(
    not(all(feature = "simd", target_arch = "x86_64", target_feature = "fma")),
    allow(dead_code)
)]
fn edges() -> Vec<f32> {
    let mut v = vec![
        0.0,
        f32::from_bits(1),           // the least subnormal
        f32::from_bits(0x007f_ffff), // the greatest subnormal
        f32::MIN_POSITIVE,
        f32::EPSILON / 2.0, // 2^-24: 1 + it is a tie
        0.5,
        1.0,
        1.0 + f32::EPSILON, // 1 + ulp
        1.0 - f32::EPSILON / 2.0,
        1.0 + f32::EPSILON * 2048.0, // 1 + 2^-12: its square needs 25 bits
        3.0,
        1.0 / 3.0,
        16_777_216.0, // 2^24
        16_777_217.0, // rounds to 2^24 (a tie, to even)
        2f32.powi(64),
        2f32.powi(-64),
        2f32.powi(127),
        f32::MAX,
        f32::INFINITY,
        f32::NAN,
    ];
    let negated: Vec<f32> = v.iter().map(|x| -x).collect();
    v.extend(negated);
    v
}

/// `fma(a, b, c)` in software.
fn software(a: f32, b: f32, c: f32) -> f32 {
    libm::fmaf(a, b, c)
}

#[cfg_attr(
    not(all(feature = "simd", target_arch = "x86_64", target_feature = "fma")),
    allow(dead_code)
)]
fn class(x: f32) -> u32 {
    if x.is_nan() {
        0x7fc0_0000
    } else {
        x.to_bits()
    }
}

/// The pinned `fma` product (`tests/fma_case`): this build's catalog and the reference kernel
/// give the digest every target must give (the wasm tests assert the same constant), and the
/// `separate` product differs.
#[test]
fn pinned_fma_product() {
    use crate::fma_case::{digest, products, FMA_DIGEST};
    use tapeplan_core::ArithProfile;
    let (catalog, reference) = products(ArithProfile::Fma);
    assert_eq!(
        digest(&catalog),
        digest(&reference),
        "catalog {}",
        tapeplan_runtime::catalog::CATALOG
    );
    assert_eq!(
        digest(&reference),
        FMA_DIGEST,
        "{:#018x}",
        digest(&reference)
    );
    let (separate, _) = products(ArithProfile::Separate);
    assert_ne!(digest(&separate), FMA_DIGEST);
}

/// Literal values of the cases that tell a fused multiply-add from a separate one: these hold
/// for `libm::fmaf` in every build.
#[test]
fn software_fmaf_rounds_once() {
    let x = 1.0 + f32::EPSILON * 2048.0; // 1 + 2^-12
                                         // x·x − 1 = 2^-11 + 2^-24 exactly (separately: 2^-11).
    assert_eq!(software(x, x, -1.0), 2f32.powi(-11) + 2f32.powi(-24));
    // MAX·2 − MAX = MAX exactly; the separate product overflows to +inf first.
    assert_eq!(software(f32::MAX, 2.0, -f32::MAX), f32::MAX);
    // Exact cancellation gives +0 (round to nearest), and −0 only for −0 + −0.
    assert_eq!(software(2.0, 3.0, -6.0).to_bits(), 0.0f32.to_bits());
    assert_eq!(software(-0.0, 1.0, -0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(software(0.0, -1.0, 0.0).to_bits(), 0.0f32.to_bits());
    // inf · 0 is NaN whatever c is; inf − inf is NaN.
    assert!(software(f32::INFINITY, 0.0, 1.0).is_nan());
    assert!(software(f32::INFINITY, 1.0, f32::NEG_INFINITY).is_nan());
    // A product below the least subnormal still moves a tie: 2^-149 · 2^-1 + 0 rounds to +0,
    // and the exact sum decides (2^-149 + 2^-150 is a tie, to even: 2^-148).
    let tiny = f32::from_bits(1);
    assert_eq!(software(tiny, 0.5, 0.0).to_bits(), 0);
    assert_eq!(software(tiny, 0.5, tiny).to_bits(), 2);
}

#[cfg(all(feature = "simd", target_arch = "x86_64", target_feature = "fma"))]
#[allow(clippy::disallowed_methods)] // wide's mul_add: fused under this module's cfg
mod hardware {
    use super::*;
    use proptest::prelude::Rng as _;
    use proptest::test_runner::{RngAlgorithm, TestRng};

    /// `vfmadd` on one lane: `wide`'s `f32x4::mul_add`, which is `_mm_fmadd_ps` with the `fma`
    /// target feature (the instruction the catalog's matrix product runs at 128 bits).
    fn scalar(a: f32, b: f32, c: f32) -> f32 {
        let v = |x| wide::f32x4::new([x, 0.0, 0.0, 0.0]);
        v(a).mul_add(v(b), v(c)).to_array()[0]
    }

    /// `vfmadd` on the widest vector the build has: `_mm512_fmadd_ps` with AVX-512F, else
    /// `_mm256_fmadd_ps` (`wide`'s `mul_add` on `f32x16`, `f32x8`), as the catalog runs it.
    #[cfg(target_feature = "avx512f")]
    type Wide = wide::f32x16;
    #[cfg(not(target_feature = "avx512f"))]
    type Wide = wide::f32x8;
    const W: usize = core::mem::size_of::<Wide>() / 4;

    fn vector(a: [f32; W], b: [f32; W], c: [f32; W]) -> [f32; W] {
        Wide::new(a).mul_add(Wide::new(b), Wide::new(c)).to_array()
    }

    fn check(a: f32, b: f32, c: f32) {
        let (s, h) = (software(a, b, c), scalar(a, b, c));
        assert_eq!(
            class(s),
            class(h),
            "fma({a:e} [{:#010x}], {b:e} [{:#010x}], {c:e} [{:#010x}]): libm {s:e}, vfmadd {h:e}",
            a.to_bits(),
            b.to_bits(),
            c.to_bits()
        );
    }

    #[test]
    fn every_triple_of_edge_cases() {
        let e = edges();
        let mut n = 0usize;
        for &a in &e {
            for &b in &e {
                for &c in &e {
                    check(a, b, c);
                    n += 1;
                }
            }
        }
        assert_eq!(n, e.len().pow(3));
    }

    #[test]
    fn random_bit_patterns() {
        let mut rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        for _ in 0..300_000 {
            let [a, b, c] = [0; 3].map(|_| f32::from_bits(rng.next_u32()));
            check(a, b, c);
        }
    }

    /// Ordinary `a`, `b` and a `c` within a few ulps of `−a·b` (or of a product scaled down
    /// into the subnormals): the cancellations where one rounding and two differ most.
    #[test]
    fn near_cancellations() {
        let mut rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        let unit = |r: &mut TestRng| (r.next_u32() >> 8) as f32 / (1u32 << 24) as f32;
        for i in 0..300_000u32 {
            let scale = if i % 4 == 0 { 2f32.powi(-70) } else { 1.0 };
            let a = (unit(&mut rng) * 8.0 - 4.0) * scale;
            let b = unit(&mut rng) * 8.0 - 4.0;
            let nudge = (rng.next_u32() % 9) as i32 - 4;
            let p = -(a * b);
            let c = f32::from_bits(p.to_bits().wrapping_add_signed(nudge));
            check(a, b, c);
        }
    }

    /// The widest vector form gives each lane `libm::fmaf`'s bits (lanes independent).
    #[test]
    fn vector_lanes_equal_scalar() {
        let e = edges();
        let mut rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        for _ in 0..100_000 {
            let pick = |r: &mut TestRng| -> [f32; W] {
                core::array::from_fn(|_| {
                    let k = r.next_u32() as usize;
                    if k.is_multiple_of(3) {
                        e[k / 3 % e.len()]
                    } else {
                        f32::from_bits(r.next_u32())
                    }
                })
            };
            let (a, b, c) = (pick(&mut rng), pick(&mut rng), pick(&mut rng));
            let v = vector(a, b, c);
            for l in 0..W {
                assert_eq!(class(v[l]), class(software(a[l], b[l], c[l])));
            }
        }
    }

    #[test]
    fn the_catalog_says_it_uses_the_instruction() {
        const { assert!(tapeplan_runtime::catalog::FMA_HARDWARE) };
    }
}

#[cfg(not(all(feature = "simd", target_arch = "x86_64", target_feature = "fma")))]
#[test]
fn the_catalog_says_it_uses_software() {
    const { assert!(!tapeplan_runtime::catalog::FMA_HARDWARE) };
}
