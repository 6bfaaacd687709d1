//! Every catalog kernel against its reference kernel, bit for bit (NaNs compared as one class),
//! over random shapes (empty, scalar, lengths that are not multiples of the lane count) and
//! special values (signed zeros, subnormals, infinities, NaNs, rounding ties, equal pairs).
//!
//! Runs against whichever catalog the build carries: `cargo test -p tapeplan-runtime` tests the
//! scalar catalog, `--features simd` the vectorized one (with `RUSTFLAGS="-C target-cpu=native"`
//! its AVX-512 or AVX2 form).

use crate::common;

use common::{bits, Builder};
use proptest::prelude::*;
use tapeplan_core::format::{BindingKind, TensorKind};
use tapeplan_core::ops::{eval_arith as reference, Attr};
use tapeplan_core::{ArithProfile, MathProfile, Opcode, Shape};
use tapeplan_runtime::catalog;
use tapeplan_runtime::{Plan, Session};

/// One awkward float: mostly special values, some ordinary ones.
fn special() -> impl Strategy<Value = f32> {
    prop_oneof![
        3 => Just(0.0f32),
        3 => Just(-0.0f32),
        2 => Just(f32::MIN_POSITIVE / 8.0),
        2 => Just(-f32::MIN_POSITIVE / 3.0),
        1 => Just(f32::from_bits(1)),
        1 => Just(f32::MIN_POSITIVE),
        2 => Just(f32::INFINITY),
        2 => Just(f32::NEG_INFINITY),
        2 => Just(f32::NAN),
        1 => Just(-f32::NAN),
        // ties: 1 + 2^-24 and friends round to even
        2 => Just(1.0f32),
        2 => Just(f32::EPSILON / 2.0),
        1 => Just(-1.0f32),
        1 => Just(3.0f32 * f32::EPSILON / 2.0),
        1 => Just(f32::MAX),
        1 => Just(16_777_216.0f32),
        12 => -4.0f32..4.0f32,
        2 => any::<f32>(),
    ]
}

fn values(n: usize) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(special(), n)
}

/// A shape of rank 0..=3 (scalar and empty included), at most a few hundred elements, the
/// last extent often not a multiple of any lane count.
fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        Just(vec![]),
        (0usize..=70).prop_map(|a| vec![a]),
        (0usize..=9, 0usize..=40).prop_map(|(a, b)| vec![a, b]),
        (0usize..=3, 0usize..=4, 0usize..=19).prop_map(|(a, b, c)| vec![a, b, c]),
    ]
}

fn shp(d: &[usize]) -> Shape {
    Shape::new(d).unwrap()
}

/// Runs `op` through the catalog and the reference under each math profile (and, for
/// `matmul`, each arithmetic profile), over fresh output buffers prefilled with a sentinel, and
/// compares the bits.
fn check(op: Opcode, attr: Attr, args: &[&[f32]], shapes: &[Shape]) -> Result<(), TestCaseError> {
    let out_shape = tapeplan_core::ops::infer(op, attr, shapes).unwrap();
    let n = out_shape.elems();
    // `matmul` under both arithmetic profiles (the math profile does not reach it: `fma` once).
    let (p, s, f) = (
        MathProfile::Precise,
        ArithProfile::Separate,
        ArithProfile::Fma,
    );
    let mut profiles = vec![(p, s), (MathProfile::Fast, s)];
    if matches!(op, Opcode::MatMul | Opcode::MatMulTn | Opcode::MatMulNt) {
        profiles.push((p, f));
    }
    {
        for (math, arith) in profiles {
            let mut want = vec![f32::from_bits(0x7f80_0001); n];
            let mut got = vec![f32::from_bits(0x7f80_0001); n];
            let r = reference(op, attr, math, arith, args, shapes, &mut want);
            let c = catalog::eval_arith(op, attr, math, arith, args, shapes, &mut got);
            prop_assert_eq!(r, c);
            prop_assert_eq!(
                bits(&got),
                bits(&want),
                "{} over {:?} ({}, {}, {}, hardware fma {})",
                op,
                shapes,
                catalog::CATALOG,
                math,
                arith,
                catalog::FMA_HARDWARE
            );
        }
    }
    Ok(())
}

const UNARY: &[Opcode] = &[
    Opcode::Neg,
    Opcode::Abs,
    Opcode::Relu,
    Opcode::Heaviside,
    Opcode::Sign,
    Opcode::Detach,
    Opcode::Sqrt,
    Opcode::Tanh,
    Opcode::Exp,
    Opcode::Log,
    Opcode::Sigmoid,
    Opcode::Softplus,
    Opcode::Pow,
];

const BINARY: &[Opcode] = &[
    Opcode::Add,
    Opcode::Sub,
    Opcode::Mul,
    Opcode::Div,
    Opcode::Equal,
    Opcode::Greater,
    Opcode::GreaterEqual,
    Opcode::Maximum,
    Opcode::Minimum,
];

/// Every elementwise opcode the catalog has a kernel of its own for has a property test here
/// (an opcode without one runs its reference kernel: nothing to compare).
#[test]
fn every_elementwise_catalog_kernel_is_covered() {
    let has_kernel = |op: Opcode| {
        let attr = if op == Opcode::Pow {
            Attr::Pow(2.0)
        } else {
            Attr::NONE
        };
        let s = Shape::new(&[3]).unwrap();
        catalog::has_kernel(op, attr, &[s, s][..op.arity()])
    };
    for &op in Opcode::ALL {
        if op.class() == tapeplan_core::OpClass::Elementwise && has_kernel(op) {
            assert!(
                UNARY.contains(&op) || BINARY.contains(&op),
                "{op} has a catalog kernel but no catalog property test"
            );
        }
    }
    // Every one listed does have a kernel (so the check above is not vacuous).
    for &op in UNARY.iter().chain(BINARY) {
        assert!(
            has_kernel(op),
            "{op} is listed but the catalog has no kernel for it"
        );
    }
}

/// Pairs with many ties (`b` a copy of `a` in places) for the comparisons and min/max.
fn pair(n: usize) -> impl Strategy<Value = (Vec<f32>, Vec<f32>)> {
    (
        values(n),
        values(n),
        prop::collection::vec(any::<bool>(), n),
    )
        .prop_map(|(a, b, tie)| {
            let b = b
                .iter()
                .zip(&a)
                .zip(&tie)
                .map(|((&b, &a), &t)| if t { a } else { b })
                .collect();
            (a, b)
        })
}

fn unary_case() -> impl Strategy<Value = (Opcode, Vec<usize>, Vec<f32>, f32)> {
    (0..UNARY.len(), shape(), special()).prop_flat_map(|(i, d, p)| {
        let n: usize = d.iter().product();
        (Just(UNARY[i]), Just(d), values(n), Just(p))
    })
}

fn binary_case() -> impl Strategy<Value = (Opcode, Vec<usize>, (Vec<f32>, Vec<f32>))> {
    (0..BINARY.len(), shape()).prop_flat_map(|(i, d)| {
        let n: usize = d.iter().product();
        (Just(BINARY[i]), Just(d), pair(n))
    })
}

/// A big shape and a small one that broadcasts to it: a suffix of the big extents, each
/// independently replaced by 1 (so every pattern appears: rows, columns, scalar, identity and
/// the irregular ones the reference handles).
fn broadcast_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    prop::collection::vec(0usize..=9, 0..=4).prop_flat_map(|big| {
        let r = big.len();
        (Just(big), 0..=r, prop::collection::vec(any::<bool>(), r)).prop_map(|(big, keep, ones)| {
            let small: Vec<usize> = big[big.len() - keep..]
                .iter()
                .zip(&ones)
                .map(|(&d, &one)| if one { 1 } else { d })
                .collect();
            (big, small)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn unary_matches_reference((op, d, x, p) in unary_case()) {
        let attr = if op == Opcode::Pow { Attr::Pow(p) } else { Attr::NONE };
        check(op, attr, &[&x], &[shp(&d)])?;
    }

    #[test]
    fn binary_matches_reference((op, d, (a, b)) in binary_case()) {
        let s = shp(&d);
        check(op, Attr::NONE, &[&a, &b], &[s, s])?;
        check(op, Attr::NONE, &[&a, &a], &[s, s])?;
    }

    #[test]
    fn select_matches_reference(
        (d, c, (a, b)) in shape().prop_flat_map(|d| {
            let n: usize = d.iter().product();
            (Just(d), values(n), pair(n))
        })
    ) {
        let s = shp(&d);
        check(Opcode::Select, Attr::NONE, &[&c, &a, &b], &[s, s, s])?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn matmul_matches_reference(
        (m, k, n, a, b) in (0usize..=21, 0usize..=37, 0usize..=70).prop_flat_map(|(m, k, n)| {
            (Just(m), Just(k), Just(n), values(m * k), values(k * n))
        })
    ) {
        check(Opcode::MatMul, Attr::NONE, &[&a, &b], &[shp(&[m, k]), shp(&[k, n])])?;
    }

    #[test]
    fn matmul_ordinary_values_match_reference(
        (m, k, n, a, b) in (1usize..=13, 1usize..=200, 1usize..=140).prop_flat_map(|(m, k, n)| {
            (Just(m), Just(k), Just(n),
             prop::collection::vec(-2.0f32..2.0, m * k), prop::collection::vec(-2.0f32..2.0, k * n))
        })
    ) {
        // Long sums of ordinary values: any change of order or a fused multiply-add shows.
        check(Opcode::MatMul, Attr::NONE, &[&a, &b], &[shp(&[m, k]), shp(&[k, n])])?;
    }

    #[test]
    fn batched_matmul_matches_reference(
        (bt, m, k, n, a, b) in (0usize..=4, 0usize..=9, 0usize..=21, 0usize..=40)
            .prop_flat_map(|(bt, m, k, n)| {
                (Just(bt), Just(m), Just(k), Just(n), values(bt * m * k), values(bt * k * n))
            })
    ) {
        check(Opcode::MatMul, Attr::NONE, &[&a, &b], &[shp(&[bt, m, k]), shp(&[bt, k, n])])?;
    }
}

/// `sgd_matmul` in place through the catalog (when it has the kernel) and the reference kernel,
/// from the same weight, under both arithmetic profiles, compared bit for bit.
fn check_sgd_matmul(
    (k, m, n): (usize, usize, usize),
    w: &[f32],
    a: &[f32],
    b: &[f32],
    lr: f32,
) -> Result<(), TestCaseError> {
    for arith in [ArithProfile::Separate, ArithProfile::Fma] {
        let mut want = w.to_vec();
        tapeplan_core::ops::sgd_matmul::kernel(
            &mut want,
            a,
            b,
            (k, m, n),
            lr,
            arith == ArithProfile::Fma,
        );
        let mut got = w.to_vec();
        let ran = catalog::sgd_matmul(&mut got, a, b, (k, m, n), lr, arith);
        prop_assert_eq!(ran, cfg!(feature = "simd"), "the catalog's kernel ran");
        if !ran {
            continue;
        }
        prop_assert_eq!(
            bits(&got),
            bits(&want),
            "sgd_matmul k {} m {} n {} lr {} ({}, {}, hardware fma {})",
            k,
            m,
            n,
            lr,
            catalog::CATALOG,
            arith,
            catalog::FMA_HARDWARE
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn sgd_matmul_matches_reference(
        (k, m, n, w, a, b, lr) in (0usize..=21, 0usize..=13, 0usize..=40).prop_flat_map(|(k, m, n)| {
            (Just(k), Just(m), Just(n), values(m * n), values(k * m), values(k * n), special())
        })
    ) {
        check_sgd_matmul((k, m, n), &w, &a, &b, lr)?;
    }

    #[test]
    fn sgd_matmul_ordinary_values_match_reference(
        (k, m, n, w, a, b) in (1usize..=70, 1usize..=13, 1usize..=70).prop_flat_map(|(k, m, n)| {
            (Just(k), Just(m), Just(n),
             prop::collection::vec(-2.0f32..2.0, m * n),
             prop::collection::vec(-2.0f32..2.0, k * m),
             prop::collection::vec(-2.0f32..2.0, k * n))
        }),
        lr in prop_oneof![Just(0.1f32), Just(0.0f32), Just(-0.0f32), 1e-4f32..1.0]
    ) {
        // Long sums of ordinary values: any change of order or a fused multiply-add shows.
        check_sgd_matmul((k, m, n), &w, &a, &b, lr)?;
    }
}

/// The weight updates of W1 (`[64, 32]` and `[32, 10]` over a batch of 32) and W3 (batch 1)
/// through the catalog's tiles (eight rows, then four, then one, by one vector; whole vectors
/// and partial ones), bit for bit.
#[test]
fn sgd_matmul_benchmark_shapes_match_reference() {
    let val = |i: usize, s: usize| ((i * 2_654_435_761 + s) % 4001) as f32 / 1000.0 - 2.0;
    for (k, m, n) in [
        (32, 64, 32),
        (32, 32, 10),
        (1, 2, 16),
        (1, 16, 16),
        (1, 16, 1),
        (5, 24, 7),
    ] {
        let w: Vec<f32> = (0..m * n).map(|i| val(i, 1)).collect();
        let a: Vec<f32> = (0..k * m).map(|i| val(i, 2)).collect();
        let b: Vec<f32> = (0..k * n).map(|i| val(i, 3)).collect();
        check_sgd_matmul((k, m, n), &w, &a, &b, 0.1).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn transpose_matches_reference(
        (m, n, x) in (0usize..=40, 0usize..=40).prop_flat_map(|(m, n)| (Just(m), Just(n), values(m * n)))
    ) {
        check(Opcode::Transpose, Attr::NONE, &[&x], &[shp(&[m, n])])?;
    }

    #[test]
    fn batched_transpose_matches_reference(
        (b, m, n, x) in (0usize..=4, 0usize..=20, 0usize..=20)
            .prop_flat_map(|(b, m, n)| (Just(b), Just(m), Just(n), values(b * m * n)))
    ) {
        check(Opcode::Transpose, Attr::NONE, &[&x], &[shp(&[b, m, n])])?;
    }

    #[test]
    fn broadcast_matches_reference(
        ((big, small), x) in broadcast_pair().prop_flat_map(|(big, small)| {
            let n: usize = small.iter().product();
            (Just((big, small)), values(n))
        })
    ) {
        check(Opcode::Broadcast, Attr::target(shp(&big)), &[&x], &[shp(&small)])?;
    }

    /// Column sums as wide as a bias gradient (`[batch, features]` to `[features]` or
    /// `[1, features]`): every register tile of the catalog's column sums (one to four
    /// vectors, then scalar columns) for every lane count.
    #[test]
    fn column_sums_match_reference(
        ((rows, cols, row_shaped), x) in (0usize..=40, 1usize..=70, any::<bool>())
            .prop_flat_map(|(r, c, k)| (Just((r, c, k)), values(r * c)))
    ) {
        let small = if row_shaped { vec![1, cols] } else { vec![cols] };
        check(Opcode::SumTo, Attr::target(shp(&small)), &[&x], &[shp(&[rows, cols])])?;
    }

    /// Row sums and maxima as a softmax takes them (`[batch, classes]` to `[batch, 1]`): whole
    /// blocks of eight rows (transposed eight columns at a time, then column by column) and the
    /// rows left over.
    #[test]
    fn row_reductions_match_reference(
        ((rows, cols), x) in (0usize..=40, 1usize..=30)
            .prop_flat_map(|(r, c)| (Just((r, c)), values(r * c)))
    ) {
        let (big, small) = (shp(&[rows, cols]), shp(&[rows, 1]));
        check(Opcode::SumTo, Attr::target(small), &[&x], &[big])?;
        check(Opcode::MaxTo, Attr::target(small), &[&x], &[big])?;
    }

    #[test]
    fn sum_to_and_max_to_match_reference(
        ((big, small), x) in broadcast_pair().prop_flat_map(|(big, small)| {
            let n: usize = big.iter().product();
            (Just((big, small)), values(n))
        })
    ) {
        check(Opcode::SumTo, Attr::target(shp(&small)), &[&x], &[shp(&big)])?;
        check(Opcode::MaxTo, Attr::target(shp(&small)), &[&x], &[shp(&big)])?;
    }

    #[test]
    fn reshape_and_fill_match_reference(d in shape(), v in special()) {
        let n: usize = d.iter().product();
        let x: Vec<f32> = (0..n).map(|i| i as f32 - 3.5).collect();
        check(Opcode::Reshape, Attr::target(shp(&[n])), &[&x], &[shp(&d)])?;
        check(Opcode::Fill, Attr::fill(v, shp(&d)), &[], &[])?;
    }
}

/// The executor's in-place paths: an elementwise instruction whose output overwrites its first,
/// second or both arguments, run through a `Session` (under each math profile), against the
/// reference out of place.
fn in_place(op: Opcode, attr: u32, a: &[f32], b: &[f32]) -> Result<(), TestCaseError> {
    let n = a.len() as u32;
    let binary = op.arity() == 2;
    let arena = 2 * n.max(1) + 4;
    for (math, which) in MathProfile::ALL
        .into_iter()
        .flat_map(|m| (0..if binary { 3 } else { 1 }).map(move |w| (m, w)))
    {
        let mut bl = Builder::new(arena, 0);
        bl.flags = math.flags();
        let ta = bl.tensor(0, &[n], TensorKind::Scratch);
        let tb = bl.tensor(n.max(1) + 4 - (n.max(1) + 4) % 4, &[n], TensorKind::Scratch);
        let (args, over): (Vec<u32>, u32) = match (binary, which) {
            (false, _) => (vec![ta], ta),
            (true, 0) => (vec![ta, tb], ta),
            (true, 1) => (vec![tb, ta], ta),
            _ => (vec![ta, ta], ta),
        };
        let offset = if over == ta { 0 } else { n };
        let out = bl.tensor(offset, &[n], TensorKind::Scratch);
        bl.instr(op, out, &args, attr);
        let e = bl.entry("run", 0, 1);
        bl.bind("a", BindingKind::Input, e, ta);
        if binary && which < 2 {
            bl.bind("b", BindingKind::Input, e, tb);
        }
        bl.bind("out", BindingKind::Output, e, out);
        let bytes = bl.build();
        let plan = Plan::parse(&bytes).expect("valid in-place plan");
        let mut mem = vec![0.0f32; plan.arena_elems()];
        let mut s = Session::bind(&plan, &mut mem).unwrap();
        let e = plan.entry("run").unwrap();
        s.set_input(e, "a", a).unwrap();
        if binary && which < 2 {
            s.set_input(e, "b", b).unwrap();
        }
        s.run(e).unwrap();
        let sh = shp(&[a.len()]);
        let ref_args: Vec<&[f32]> = args.iter().map(|&t| if t == ta { a } else { b }).collect();
        let shapes = vec![sh; ref_args.len()];
        let mut want = vec![0.0; a.len()];
        tapeplan_core::ops::eval(
            op,
            tapeplan_core::format::decode_attr(op, attr, &[], sh).unwrap(),
            math,
            &ref_args,
            &shapes,
            &mut want,
        )
        .unwrap();
        prop_assert_eq!(
            bits(s.output(e, "out").unwrap()),
            bits(&want),
            "{} in place, case {}, {}",
            op,
            which,
            math
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn in_place_elementwise_matches_reference(
        (i, (a, b), p) in (0..UNARY.len() + BINARY.len(), 0usize..=70)
            .prop_flat_map(|(i, n)| (Just(i), pair(n), special()))
    ) {
        let op = UNARY.get(i).copied().unwrap_or_else(|| BINARY[i - UNARY.len()]);
        let attr = if op == Opcode::Pow { p.to_bits() } else { 0 };
        in_place(op, attr, &a, &b)?;
    }
}

#[test]
fn catalog_names_itself() {
    let (c, lanes) = (catalog::CATALOG, std::hint::black_box(catalog::LANES));
    if cfg!(feature = "simd") {
        assert!(c.starts_with("simd"), "{c}");
        assert!(lanes >= 4, "{lanes}");
    } else {
        assert_eq!(c, "scalar");
        assert_eq!(lanes, 1);
    }
}

/// `matmul_tn` (`a: [k, m]`) and `matmul_nt` (`b: [n, k]`) over `[m, k] x [k, n]`'s operands,
/// batched when `bt` is some.
fn check_transposed(
    bt: Option<usize>,
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    b: &[f32],
) -> Result<(), TestCaseError> {
    let s = |d: [usize; 2]| match bt {
        Some(bt) => shp(&[bt, d[0], d[1]]),
        None => shp(&d),
    };
    check(
        Opcode::MatMulTn,
        Attr::NONE,
        &[a, b],
        &[s([k, m]), s([k, n])],
    )?;
    check(
        Opcode::MatMulNt,
        Attr::NONE,
        &[a, b],
        &[s([m, k]), s([n, k])],
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn transposed_products_match_reference(
        (m, k, n, a, b) in (0usize..=21, 0usize..=37, 0usize..=70).prop_flat_map(|(m, k, n)| {
            (Just(m), Just(k), Just(n), values(m * k), values(k * n))
        })
    ) {
        check_transposed(None, (m, k, n), &a, &b)?;
    }

    #[test]
    fn transposed_products_ordinary_values_match_reference(
        (m, k, n, a, b) in (1usize..=13, 1usize..=600, 1usize..=140).prop_flat_map(|(m, k, n)| {
            (Just(m), Just(k), Just(n),
             prop::collection::vec(-2.0f32..2.0, m * k), prop::collection::vec(-2.0f32..2.0, k * n))
        })
    ) {
        // Long sums (past the 256 `p` of one packed block of `matmul_tn`, and the `1024 / n`
        // of `matmul_nt`'s), columns past one 64-column panel: a change of order shows.
        check_transposed(None, (m, k, n), &a, &b)?;
    }

    #[test]
    fn batched_transposed_products_match_reference(
        (bt, m, k, n, a, b) in (0usize..=4, 0usize..=9, 0usize..=21, 0usize..=40)
            .prop_flat_map(|(bt, m, k, n)| {
                (Just(bt), Just(m), Just(k), Just(n), values(bt * m * k), values(bt * k * n))
            })
    ) {
        check_transposed(Some(bt), (m, k, n), &a, &b)?;
    }
}

/// The odd extents 1, 3, 17, 33 (and the training shapes of W1 and W2) in every combination,
/// ordinary values: each transposed product's catalog kernel gives the reference bits.
#[test]
fn transposed_products_odd_shapes() {
    let dims = [1usize, 3, 17, 33, 65];
    let mut shapes: Vec<(usize, usize, usize)> = Vec::new();
    for &m in &dims {
        for &k in &dims {
            for &n in &dims {
                shapes.push((m, k, n));
            }
        }
    }
    shapes.extend([
        (784, 64, 128),
        (32, 10, 32),
        (64, 10, 128),
        (3, 300, 5),
        (5, 257, 3),
    ]);
    for (m, k, n) in shapes {
        let val = |i: usize, s: u32| {
            ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(s) >> 8) as f32 / 8_388_608.0 - 1.0
        };
        let a: Vec<f32> = (0..m * k).map(|i| val(i, 1)).collect();
        let b: Vec<f32> = (0..k * n).map(|i| val(i, 7)).collect();
        check_transposed(None, (m, k, n), &a, &b).unwrap();
    }
    if cfg!(feature = "simd") {
        for op in [Opcode::MatMulTn, Opcode::MatMulNt] {
            assert!(
                catalog::has_kernel(op, Attr::NONE, &[shp(&[8, 8]), shp(&[8, 8])]),
                "{op}"
            );
        }
    }
}

/// Every product (`matmul`, `matmul_tn`, `matmul_nt`) at the edges of the catalog's blocking,
/// under both arithmetic profiles, bit for bit: `k` of 1, around `matmul_nt`'s packed blocks of
/// `p` (1024 / 64 = 16, and 256) and W2's 784; `m` around the register tile's rows (4: 1, 3, 5,
/// 9; 8, the fewest rows whose product runs in blocks of `p` of at least 32, `lanes::
/// B_BLOCK_ELEMS / n`, when `k · n` exceeds it, under a profile that blocks: `fma` with
/// hardware FMA and `separate`, not with AVX-512; 12, 15, 17 around the 8-row tiles of
/// `separate` with AVX-512, followed by tiles of 4, 2 and 1 rows) and W2's products
/// themselves; `n` around the
/// lane counts and tile widths (4, 8, 16 lanes; 2 or 4 vectors: 1, 3, 15, 17, 33, 63, 65, 129),
/// and `matmul_nt`'s one or two rows by whole `8 × 8` blocks of `b` (`m` 1, 2; `k`, `n` 8, 16,
/// 32: W3's `[1, 16] x [16, 16]ᵀ`). Each operand is ordinary values with every special value
/// (`special()`'s list: signed zeros, subnormals, infinities, NaNs, ties) placed at a few
/// positions, and once ordinary throughout (long sums where any change of order shows).
#[test]
fn products_at_blocking_edges() {
    let specials = [
        0.0f32,
        -0.0,
        f32::MIN_POSITIVE / 8.0,
        -f32::MIN_POSITIVE / 3.0,
        f32::from_bits(1),
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::EPSILON / 2.0,
        f32::MAX,
    ];
    let val = |i: usize, s: u32| {
        ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(s) >> 8) as f32 / 8_388_608.0 - 1.0
    };
    // Operand `len` long: ordinary values, and with `spiced` a special value at every 97th
    // position (from an offset that moves with the seed).
    let operand = |len: usize, s: u32, spiced: bool| -> Vec<f32> {
        (0..len)
            .map(|i| {
                let at = i + s as usize;
                if spiced && at.is_multiple_of(97) {
                    specials[(at / 97) % specials.len()]
                } else {
                    val(i, s)
                }
            })
            .collect()
    };
    let mut shapes = Vec::new();
    for k in [1usize, 8, 15, 16, 17, 32, 255, 256, 257, 784] {
        for m in [1usize, 2, 3, 5, 8, 9, 12, 15, 17] {
            for n in [1usize, 3, 8, 15, 16, 17, 32, 33, 63, 65, 129] {
                shapes.push((m, k, n));
            }
        }
    }
    // W2's products (`matmul`'s `[m, k] x [k, n]`; the transposed ones over the same extents).
    let w2 = [(64, 784, 128), (784, 64, 128), (128, 64, 10), (64, 10, 128)];
    for (m, k, n) in shapes.into_iter().chain(w2) {
        for spiced in [false, true] {
            let (a, b) = (operand(m * k, 1, spiced), operand(k * n, 7, spiced));
            check(
                Opcode::MatMul,
                Attr::NONE,
                &[&a, &b],
                &[shp(&[m, k]), shp(&[k, n])],
            )
            .unwrap();
            check_transposed(None, (m, k, n), &a, &b).unwrap();
        }
    }
}

/// The shapes an MLP's training step uses have catalog kernels (a regression that silently
/// sends them to the reference kernels shows here, not only in the benchmarks).
#[test]
fn training_shapes_have_catalog_kernels() {
    let (b, n) = (32, 10);
    let m = shp(&[b, n]);
    let t = Attr::target;
    let cases: &[(Opcode, Attr, &[Shape])] = &[
        (Opcode::Broadcast, t(m), &[shp(&[n])]),
        (Opcode::Broadcast, t(m), &[shp(&[b, 1])]),
        (Opcode::Broadcast, t(m), &[shp(&[])]),
        (Opcode::SumTo, t(shp(&[n])), &[m]),
        (Opcode::SumTo, t(shp(&[b, 1])), &[m]),
        (Opcode::SumTo, t(shp(&[])), &[m]),
        (Opcode::MaxTo, t(shp(&[b, 1])), &[m]),
        (Opcode::MatMul, Attr::NONE, &[shp(&[b, 64]), shp(&[64, n])]),
        (Opcode::Transpose, Attr::NONE, &[m]),
        (Opcode::Fill, Attr::NONE, &[]),
        (Opcode::Select, Attr::NONE, &[m, m, m]),
        (Opcode::OneHot, t(m), &[shp(&[b])]),
    ];
    for (op, attr, shapes) in cases {
        let attr = if *op == Opcode::Fill {
            Attr::fill(0.5, m)
        } else {
            *attr
        };
        assert!(
            catalog::has_kernel(*op, attr, shapes),
            "{op} over {shapes:?} has no catalog kernel"
        );
    }
    for &op in UNARY.iter().chain(BINARY) {
        let shapes = vec![m; op.arity()];
        let attr = if op == Opcode::Pow {
            Attr::Pow(2.0)
        } else {
            Attr::NONE
        };
        assert!(catalog::has_kernel(op, attr, &shapes), "{op}");
    }
}

/// `one_hot` from the catalog against its reference path, bit for bit: labels of every kind,
/// good and bad (fractions, negatives, `-0.0`, NaN, infinities, out of range, 2^24), over 1, 2,
/// 10 and 11 classes.
#[test]
fn one_hot_matches_reference() {
    let labels = [
        0.0f32,
        9.0,
        3.0,
        -0.0,
        2.5,
        -1.0,
        10.0,
        f32::NAN,
        f32::INFINITY,
        16_777_216.0,
        1.0,
    ];
    let x = shp(&[labels.len()]);
    for classes in [1usize, 2, 10, 11] {
        let to = Attr::target(shp(&[labels.len(), classes]));
        assert!(catalog::has_kernel(Opcode::OneHot, to, &[x]));
        check(Opcode::OneHot, to, &[&labels], &[x]).unwrap();
    }
}

/// One spatial axis: kernel, stride, dilation, padding before and after, extra input length.
fn axis() -> impl Strategy<Value = (usize, u32, u32, u32, u32, usize)> {
    (
        1usize..=4,
        1u32..=3,
        1u32..=3,
        0u32..=3,
        0u32..=3,
        0usize..=6,
    )
}

/// A convolution: `(x dims, w dims, attribute)` with a non-empty output; widths up to 78 so
/// that every lane count (4, 8, 16) meets every register tile (up to four vectors of columns),
/// partial vectors and none;
/// 1 to 6 output channels per group (tiles of four and single channels).
fn conv_case() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, tapeplan_core::ConvAttr)> {
    (
        1usize..=2,
        (1usize..=2, 1usize..=3, 1usize..=2, 1usize..=6),
        [axis(), axis()],
        0usize..=72,
    )
        .prop_map(|(r, (n, groups, cin_g, cout_g), axes, wide)| {
            let (x, w, a, e) = conv_geometry(r, n, (groups, cin_g, cout_g), axes, wide);
            (x, w, a.with_extent(&e))
        })
}

/// The `x` and `w` dims, the attribute (extents not set) and the output's spatial extents of a
/// rank-`r` convolution: batch `n`; `groups` groups of `cin_g` input and `cout_g` output
/// channels; per axis `(kernel, stride, dilation, pad before, pad after, extra input length)`,
/// the last axis `wide` longer. The input covers the dilated kernel, so the output is not empty.
pub(crate) fn conv_geometry(
    r: usize,
    n: usize,
    (groups, cin_g, cout_g): (usize, usize, usize),
    axes: [(usize, u32, u32, u32, u32, usize); 2],
    wide: usize,
) -> (Vec<usize>, Vec<usize>, tapeplan_core::ConvAttr, Vec<usize>) {
    let mut x = vec![n, groups * cin_g];
    let mut w = vec![groups * cout_g, cin_g];
    let mut a = tapeplan_core::ConvAttr::d1(1, 0, 0, 1, groups as u32);
    a.spatial = r as u8;
    for (i, (k, s, d, pb, pe, extra)) in axes.into_iter().take(r).enumerate() {
        let reach = (k - 1) * d as usize + 1;
        let pads = (pb + pe) as usize;
        let extra = if i + 1 == r { extra + wide } else { extra };
        x.push(reach.saturating_sub(pads) + extra);
        w.push(k);
        (a.stride[i], a.dilation[i], a.pad_begin[i], a.pad_end[i]) = (s, d, pb, pe);
    }
    let e = tapeplan_core::ops::conv::output_extent(&a, shp(&x), shp(&w)).unwrap();
    (x, w, a, e[..r].to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn conv_matches_reference(
        (xd, wd, a, xv, wv) in conv_case().prop_flat_map(|(xd, wd, a)| {
            let (nx, nw): (usize, usize) = (xd.iter().product(), wd.iter().product());
            (Just(xd), Just(wd), Just(a), values(nx), values(nw))
        })
    ) {
        check(Opcode::Conv, Attr::Conv(a), &[&xv, &wv], &[shp(&xd), shp(&wd)])?;
    }

    #[test]
    fn conv_ordinary_values_match_reference(
        (xd, wd, a, xv, wv) in conv_case().prop_flat_map(|(xd, wd, a)| {
            let (nx, nw): (usize, usize) = (xd.iter().product(), wd.iter().product());
            (Just(xd), Just(wd), Just(a),
             prop::collection::vec(-2.0f32..2.0, nx), prop::collection::vec(-2.0f32..2.0, nw))
        })
    ) {
        // Sums of ordinary values: any change of order or a fused multiply-add shows.
        check(Opcode::Conv, Attr::Conv(a), &[&xv, &wv], &[shp(&xd), shp(&wd)])?;
    }
}

/// A typical convolution has a catalog kernel in the `simd` build (and runs its reference
/// kernel in the scalar one).
#[test]
fn conv_has_a_simd_kernel() {
    let a = tapeplan_core::ConvAttr::d2([1, 1], [1, 1], [1, 1], [1, 1], 1).with_extent(&[32, 32]);
    let shapes = [shp(&[1, 16, 32, 32]), shp(&[16, 16, 3, 3])];
    assert_eq!(
        catalog::has_kernel(Opcode::Conv, Attr::Conv(a), &shapes),
        cfg!(feature = "simd")
    );
}

/// `sum_to`'s block sums (four outputs per vector, `4 × 4` blocks transposed in registers) on
/// the bias gradients of C1 (`[100, 25, 19]`, `[100, 25, 10]`, `[100, 25, 5]` to `[25, 1]`)
/// and a few odd extents, and its column sums on those of W1 and W2 (`[32, 32]`, `[32, 10]`,
/// `[64, 128]`) and wider and odd ones, with values
/// of mixed sign and magnitude so that any other order of the additions shows in the bits.
#[test]
fn sum_to_block_and_column_sums_match_reference() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        let m = ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5;
        m * [1.0, 1e-3, 1e3, 7.0][(state >> 20) as usize % 4]
    };
    let blocks: [(&[usize], &[usize]); 6] = [
        (&[100, 25, 19], &[25, 1]),
        (&[100, 25, 10], &[25, 1]),
        (&[100, 25, 5], &[25, 1]),
        (&[3, 4, 4], &[4, 1]),
        (&[2, 9, 7], &[9, 1]),
        (&[2, 8, 3], &[8, 1]),
    ];
    let columns: [(&[usize], &[usize]); 6] = [
        (&[32, 32], &[32]),
        (&[32, 10], &[10]),
        (&[64, 128], &[128]),
        (&[7, 37], &[37]),
        (&[3, 100], &[1, 100]),
        (&[1, 80], &[80]),
    ];
    for (big, small) in blocks.iter().chain(&columns) {
        let x: Vec<f32> = (0..big.iter().product::<usize>()).map(|_| next()).collect();
        check(Opcode::SumTo, Attr::target(shp(small)), &[&x], &[shp(big)]).unwrap();
    }
}
