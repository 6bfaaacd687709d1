//! The transcendental kernels of the catalog (`tanh`, `exp`, `log`, `sigmoid`, `softplus`;
//! with feature `simd`, lane-wise ports of `libm`) give the reference kernels' bits (`libm`'s
//! scalar functions) on every `f32` bit pattern `i · STRIDE`, on every branch edge of the
//! `libm` code and its neighbours, and on the points where the range reductions change `k`.
//! All 2^32 inputs: `cargo xtask mathcheck`.

use crate::sweep;

use tapeplan_core::Opcode;

/// Every 97th bit pattern in release builds; a sparser sweep in debug builds (unoptimized
/// vector code is slow), which `cargo xtask mathcheck` and the release run cover.
const STRIDE: u64 = if cfg!(debug_assertions) { 9_973 } else { 97 };

/// Inputs per call: long enough that most of them run in whole vectors.
const CHUNK: usize = 1 << 16;

fn strided(op: Opcode) {
    let (mut got, mut want) = (Vec::new(), Vec::new());
    let mut x = Vec::with_capacity(CHUNK);
    let mut b = 0u64;
    while b <= u64::from(u32::MAX) {
        x.clear();
        while x.len() < CHUNK && b <= u64::from(u32::MAX) {
            x.push(f32::from_bits(b as u32));
            b += STRIDE;
        }
        if let Some(m) = sweep::first_mismatch(op, &x, &mut got, &mut want) {
            panic!("{}", sweep::describe(op, m));
        }
    }
}

#[test]
fn edges_match_libm() {
    let x = sweep::edge_inputs();
    assert!(x.len() > 6_000, "{} edge inputs", x.len());
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for op in sweep::FUNCTIONS {
        // Every offset, so each input lands in every lane position and in the scalar tail.
        for skip in 0..17 {
            let x = &x[skip..];
            if let Some(m) = sweep::first_mismatch(op, x, &mut got, &mut want) {
                panic!("{}", sweep::describe(op, m));
            }
        }
    }
}

macro_rules! strided_tests {
    ($($name:ident => $op:ident;)*) => {$(
        #[test]
        fn $name() {
            strided(Opcode::$op);
        }
    )*};
}

strided_tests! {
    tanh_strided_matches_libm => Tanh;
    exp_strided_matches_libm => Exp;
    log_strided_matches_libm => Log;
    sigmoid_strided_matches_libm => Sigmoid;
    softplus_strided_matches_libm => Softplus;
}

/// Values computed independently (f64 `libm` and by hand), so a kernel that matched a wrong
/// reference would still fail here.
#[test]
fn known_values() {
    let run = |op: Opcode, x: f32| {
        let mut out = [0.0f32];
        let s = tapeplan_core::Shape::SCALAR;
        tapeplan_runtime::catalog::eval(
            op,
            tapeplan_core::ops::Attr::NONE,
            tapeplan_core::MathProfile::Precise,
            &[&[x]],
            &[s],
            &mut out,
        )
        .unwrap();
        out[0]
    };
    let close = |got: f32, want: f64| {
        let tol = want.abs() * 2.0 * f64::from(f32::EPSILON);
        assert!((f64::from(got) - want).abs() <= tol, "{got} vs {want}");
    };
    close(run(Opcode::Exp, 1.0), core::f64::consts::E);
    close(run(Opcode::Log, 10.0), core::f64::consts::LN_10);
    close(run(Opcode::Tanh, 0.5), 0.462_117_157_260_009_8);
    close(run(Opcode::Sigmoid, 0.0), 0.5);
    close(run(Opcode::Softplus, 0.0), core::f64::consts::LN_2);
    assert_eq!(run(Opcode::Exp, f32::NEG_INFINITY), 0.0);
    assert_eq!(run(Opcode::Log, 0.0), f32::NEG_INFINITY);
    assert!(run(Opcode::Log, -1.0).is_nan());
    assert_eq!(run(Opcode::Tanh, -20.0), -1.0);
    assert_eq!(run(Opcode::Softplus, 30.0), 30.0);
}
