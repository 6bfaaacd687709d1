//! Inputs and the bit comparison for the transcendental kernels' sweeps: the catalog's kernels
//! (lane-wise ports of `libm` with feature `simd`) against the reference kernels (`libm`'s
//! scalar functions) under the `precise` math profile. Shared by `tests/transcendentals.rs`
//! (a strided subset plus the branch edges), `examples/mathcheck.rs` (all 2^32 inputs) and the
//! wasm crate's test (the subset under `simd128`).
#![allow(dead_code, missing_docs)]

use tapeplan_core::ops::Attr;
use tapeplan_core::{MathProfile, Opcode, Shape};

/// The opcodes whose `precise` kernels call `libm` transcendentals.
pub const FUNCTIONS: [Opcode; 5] = [
    Opcode::Tanh,
    Opcode::Exp,
    Opcode::Log,
    Opcode::Sigmoid,
    Opcode::Softplus,
];

/// The bit patterns (of `|x|`) at which `libm`'s `expf`, `expm1f`, `tanhf`, `logf` and `log1pf`
/// change branch, and other values where a port could slip (`1`, the threshold of `softplus`,
/// the largest finite float, the smallest subnormal, infinity).
pub const EDGES: &[u32] = &[
    // expf
    0x42ae_ac50,
    0x42b1_7218,
    0x42cf_f1b5,
    0x3eb1_7218,
    0x3f85_1592,
    0x3900_0000,
    // expm1f
    0x4195_b844,
    0x42b1_7217,
    0x3300_0000,
    // tanhf
    0x3f0c_9f54,
    0x4120_0000,
    0x3e82_c578,
    0x0080_0000,
    // logf, log1pf
    0x3f80_0000,
    0x3f35_04f3,
    0x3ed4_13d0,
    0x3e95_f619,
    0x3380_0000,
    0x3fb5_04f3,
    // softplus's threshold (20), others
    0x41a0_0000,
    0x7f7f_ffff,
    0x0000_0001,
    0x0000_0000,
    0x7f80_0000,
    0x3e80_0000,
];

/// Each edge and its 8 neighbours either side, both signs; and the points where the
/// reductions' `k = trunc(x/ln2 ± 1/2)` changes (`x = (n + 1/2)·ln2`, and half of that for
/// `tanh`'s `expm1f(2x)`), 4 neighbours either side, over the whole range of `k`.
pub fn edge_inputs() -> Vec<f32> {
    let mut out = Vec::new();
    for &e in EDGES {
        for d in -8i64..=8 {
            let b = i64::from(e) + d;
            if let Ok(b) = u32::try_from(b) {
                if b <= 0x7f80_0000 {
                    out.push(f32::from_bits(b));
                    out.push(-f32::from_bits(b));
                }
            }
        }
    }
    for n in -160i32..=160 {
        for scale in [1.0f64, 0.5] {
            let x0 = ((f64::from(n) + 0.5) * core::f64::consts::LN_2 * scale) as f32;
            for d in -4i32..=4 {
                let b = x0.to_bits().wrapping_add_signed(d);
                out.push(f32::from_bits(b));
            }
        }
    }
    out.extend([
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffc0_1234),
    ]);
    out
}

/// The same result for bitwise purposes: identical bits, or both NaN.
pub fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Runs `op` over `x` through the catalog and through the reference kernel (`precise`) into
/// `got` and `want` (resized), and answers the first input whose results differ.
pub fn first_mismatch(
    op: Opcode,
    x: &[f32],
    got: &mut Vec<f32>,
    want: &mut Vec<f32>,
) -> Option<(f32, f32, f32)> {
    let shape = Shape::new(&[x.len()]).ok()?;
    got.clear();
    got.resize(x.len(), 0.0);
    want.clear();
    want.resize(x.len(), 0.0);
    let attr = Attr::NONE;
    let math = MathProfile::Precise;
    tapeplan_runtime::catalog::eval(op, attr, math, &[x], &[shape], got).ok()?;
    tapeplan_core::ops::eval(op, attr, math, &[x], &[shape], want).ok()?;
    x.iter()
        .zip(got.iter().zip(want.iter()))
        .find(|(_, (g, w))| !same(**g, **w))
        .map(|(&x, (&g, &w))| (x, g, w))
}

/// A mismatch `(x, catalog, reference)` of `op`, for a failure message.
pub fn describe(op: Opcode, (x, g, w): (f32, f32, f32)) -> String {
    format!(
        "{op} ({}) of {x:e} ({:#010x}): catalog {g:e} ({:#010x}), reference {w:e} ({:#010x})",
        tapeplan_runtime::catalog::CATALOG,
        x.to_bits(),
        g.to_bits(),
        w.to_bits()
    )
}
