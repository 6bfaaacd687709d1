//! One `fma`-profile matrix product whose bits are pinned, for the cross-target check: the host
//! runtime tests (`tests/runtime/fma.rs`, scalar, SSE2 and native catalogs) and the wasm tests
//! (`wasm/tests/fma.rs`, scalar and `simd128`) include this file by path and assert the same
//! digest, computed by each build's catalog and by the reference kernel (`libm::fmaf`).

use tapeplan_core::ops::Attr;
use tapeplan_core::{ArithProfile, MathProfile, Opcode, Shape};

/// `[M, K] x [K, N]`: rows for full and partial register tiles, a width with a partial vector.
pub const M: usize = 7;
/// The inner extent: long enough for rounding differences to pile up.
pub const K: usize = 45;
/// Columns: two 16-lane vectors and a few more.
pub const N: usize = 37;

/// The FNV-1a 64 digest of the `fma` product's bit patterns (NaNs as `0x7fc0_0000`), as the
/// reference kernel computes it on x86_64 (`cargo test -p tapeplan-runtime --test runtime --
/// fma::pinned`). A build that rounds any step differently changes it.
pub const FMA_DIGEST: u64 = 0x19a3_df23_2854_4ae8;

/// Deterministic operands: ordinary values of mixed signs and magnitudes, with signed zeros,
/// subnormals, exact cancellations and ties among them (no NaN or infinity: they would hide the
/// other lanes of a column).
pub fn operands() -> (Vec<f32>, Vec<f32>) {
    let mut s: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut value = move |i: usize| -> f32 {
        let r = next();
        match r % 23 {
            0 => 0.0,
            1 => -0.0,
            2 => f32::from_bits(1 + (r >> 40) as u32 % 1000), // subnormal
            3 => 1.0 + f32::EPSILON * 2048.0,                 // 1 + 2^-12: square needs 25 bits
            4 => -(1.0 + f32::EPSILON * 2048.0),
            5 => 16_777_216.0,
            6 => (i % 5) as f32 - 2.0,
            _ => ((r >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0,
        }
    };
    let a = (0..M * K).map(&mut value).collect();
    let b = (0..K * N).map(&mut value).collect();
    (a, b)
}

/// The FNV-1a 64 digest of bit patterns, NaNs as one class.
pub fn digest(v: &[f32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in v {
        let bits = if x.is_nan() { 0x7fc0_0000 } else { x.to_bits() };
        for byte in bits.to_le_bytes() {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The product under `arith`: by the build's catalog, and by the reference kernel.
pub fn products(arith: ArithProfile) -> (Vec<f32>, Vec<f32>) {
    let (a, b) = operands();
    let shapes = [Shape::new(&[M, K]).unwrap(), Shape::new(&[K, N]).unwrap()];
    let (mut catalog, mut reference) = (vec![0.0f32; M * N], vec![0.0f32; M * N]);
    let math = MathProfile::Precise;
    tapeplan_runtime::catalog::eval_arith(
        Opcode::MatMul,
        Attr::NONE,
        math,
        arith,
        &[&a, &b],
        &shapes,
        &mut catalog,
    )
    .unwrap();
    tapeplan_core::ops::eval_arith(
        Opcode::MatMul,
        Attr::NONE,
        math,
        arith,
        &[&a, &b],
        &shapes,
        &mut reference,
    )
    .unwrap();
    (catalog, reference)
}
