//! This core's floating-point ceilings with AVX-512, for reading `example product_cost`'s and
//! Adam's figures against (docs/benchmarks.md, "Embedded broadcasts under `separate`"):
//!
//! - the multiply-add rate of sixteen independent 16-lane sums held in registers, with a
//!   multiply then an add (`separate`) and with one fused multiply-add (`fma`), in GFLOP/s
//!   (two per lane and step);
//! - the same as a 4 × 4-vector register tile of a product reading `b` and `a` from memory
//!   (`[64, 784] x [784, 128]`, blocks of 32 steps), with `a`'s element broadcast once per row
//!   (`vbroadcastss`, shared by the row's four products) or read by every product (a volatile
//!   read, which the multiply embeds as `{1to16}`);
//! - the divider: nanoseconds per 16-lane `vdivps` and `vsqrtps` over eight independent chains
//!   (Adam's update spends two divisions and a square root per element).
//!
//! ```sh
//! taskset -c 1 cargo run --release -p tapeplan-runtime --example fp_peak
//! ```
//!
//! Not part of the runtime: `core::arch` intrinsics, run only where the CPU reports AVX-512F and
//! FMA.
#![allow(unsafe_code)]

use std::time::Instant;

fn main() {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma") {
            // SAFETY: the features each function enables were detected above.
            unsafe { x86::run() };
            return;
        }
    }
    println!("fp_peak: needs x86_64 with AVX-512F and FMA");
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Instant;
    use core::arch::x86_64::*;

    /// Sums in flight in the register loops.
    const SUMS: usize = 16;

    /// Sixteen sums, each of its own product (eight values of `x` by two of `y`: 26 registers).
    #[target_feature(enable = "avx512f,fma")]
    unsafe fn registers<const FUSED: bool>(steps: usize) -> f32 {
        let mut ys = [_mm512_set1_ps(1e-7), _mm512_set1_ps(2e-7)];
        let xs: [__m512; 8] = core::array::from_fn(|i| _mm512_set1_ps(1e-7 * (i + 1) as f32));
        let mut acc = [_mm512_setzero_ps(); SUMS];
        for _ in 0..steps {
            // `y` through an empty instruction every step: the compiler cannot know its value,
            // so each of the sixteen products is computed in the loop, not hoisted out of it.
            for y in &mut ys {
                core::arch::asm!(
                    "/* {0} */",
                    inout(zmm_reg) * y,
                    options(pure, nomem, nostack)
                );
            }
            for (i, a) in acc.iter_mut().enumerate() {
                let (x, y) = (xs[i % 8], ys[i / 8]);
                *a = if FUSED {
                    _mm512_fmadd_ps(x, y, *a)
                } else {
                    _mm512_add_ps(*a, _mm512_mul_ps(x, y))
                };
            }
        }
        acc.iter().map(|&a| _mm512_reduce_add_ps(a)).sum()
    }

    /// One 4 × 4-vector tile over `k` steps of `a: [.., lda]`, `b: [.., ldb]` from column `j`.
    #[target_feature(enable = "avx512f,fma")]
    unsafe fn tile<const FUSED: bool, const EACH: bool>(
        a: &[f32],
        lda: usize,
        b: &[f32],
        ldb: usize,
        k: usize,
        out: &mut [f32],
        j: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 4]; 4];
        for p in 0..k {
            let bp = b.as_ptr().add(p * ldb + j);
            let bv: [__m512; 4] = core::array::from_fn(|c| _mm512_loadu_ps(bp.add(16 * c)));
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let xp = a.as_ptr().add(r * lda + p);
                let shared = _mm512_set1_ps(*xp);
                for (s, &y) in acc_r.iter_mut().zip(&bv) {
                    let x = if EACH {
                        _mm512_set1_ps(core::ptr::read_volatile(xp))
                    } else {
                        shared
                    };
                    *s = if FUSED {
                        _mm512_fmadd_ps(x, y, *s)
                    } else {
                        _mm512_add_ps(*s, _mm512_mul_ps(x, y))
                    };
                }
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            for (c, s) in acc_r.iter().enumerate() {
                _mm512_storeu_ps(out.as_mut_ptr().add(r * ldb + j + 16 * c), *s);
            }
        }
    }

    /// A timed product: `(a, b, out)` to seconds per call.
    type Product = fn(&[f32], &[f32], &mut [f32]) -> f64;

    /// W2's forward product through [`tile`], in blocks of 32 steps; answers seconds per call.
    fn product<const FUSED: bool, const EACH: bool>(a: &[f32], b: &[f32], out: &mut [f32]) -> f64 {
        let (m, k, n, kc) = (64, 784, 128, 32);
        let calls = 500;
        let t = Instant::now();
        for _ in 0..calls {
            for p0 in (0..k).step_by(kc) {
                let kb = kc.min(k - p0);
                for i in (0..m).step_by(4) {
                    for j in (0..n).step_by(64) {
                        // SAFETY: every row and column the tile reads or writes is within
                        // `a: [64, 784]`, `b: [784, 128]` and `out: [64, 128]`.
                        unsafe {
                            tile::<FUSED, EACH>(
                                &a[i * k + p0..],
                                k,
                                &b[p0 * n..],
                                n,
                                kb,
                                &mut out[i * n..],
                                j,
                            );
                        }
                    }
                }
            }
        }
        t.elapsed().as_secs_f64() / calls as f64
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn divider<const SQRT: bool>(steps: usize) -> f32 {
        let x = _mm512_set1_ps(1.5);
        let mut acc = [_mm512_set1_ps(1.25); 8];
        for _ in 0..steps {
            for a in &mut acc {
                *a = if SQRT {
                    _mm512_sqrt_ps(_mm512_add_ps(*a, x))
                } else {
                    _mm512_div_ps(x, *a)
                };
            }
        }
        acc.iter().map(|&a| _mm512_reduce_add_ps(a)).sum()
    }

    /// # Safety
    /// The CPU has AVX-512F and FMA.
    #[target_feature(enable = "avx512f,fma")]
    pub unsafe fn run() {
        let steps = 20_000_000;
        let flops = (steps * SUMS * 16 * 2) as f64;
        for (name, fused) in [("separate", false), ("fma", true)] {
            let t = Instant::now();
            let r = if fused {
                registers::<true>(steps)
            } else {
                registers::<false>(steps)
            };
            let s = t.elapsed().as_secs_f64();
            println!(
                "registers, {SUMS} sums  {name:<8} {:6.1} GFLOP/s  ({r:.1})",
                flops / s / 1e9
            );
        }
        let fill = |len: usize, seed: usize| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * seed) % 1000) as f32 / 1000.0 - 0.5)
                .collect()
        };
        let (a, b) = (fill(64 * 784, 7919), fill(784 * 128, 104_729));
        let mut out = vec![0.0f32; 64 * 128];
        let flops = 2.0 * 64.0 * 784.0 * 128.0;
        let runs: [(&str, Product); 4] = [
            ("separate, broadcast per row", product::<false, false>),
            ("separate, broadcast per product", product::<false, true>),
            ("fma, broadcast per row", product::<true, false>),
            ("fma, broadcast per product", product::<true, true>),
        ];
        for (name, f) in runs {
            f(&a, &b, &mut out);
            let s = f(&a, &b, &mut out);
            println!(
                "4x4 tile, [64,784]x[784,128]  {name:<32} {:7.1} µs {:6.1} GFLOP/s",
                s * 1e6,
                flops / s / 1e9
            );
        }
        let steps = 5_000_000;
        for (name, sqrt) in [("vdivps zmm", false), ("vsqrtps zmm", true)] {
            let t = Instant::now();
            let r = if sqrt {
                divider::<true>(steps)
            } else {
                divider::<false>(steps)
            };
            let s = t.elapsed().as_secs_f64();
            println!(
                "{name:<12} {:5.2} ns per instruction  ({r:.1})",
                s * 1e9 / (steps * 8) as f64
            );
        }
        println!("{}", out.iter().sum::<f32>());
    }
}
