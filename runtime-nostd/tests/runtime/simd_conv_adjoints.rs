//! The catalog's convolution adjoints (`conv_transpose`, `conv_weight_grad`) against their
//! reference kernels, bit for bit (NaNs compared as one class), over random geometries: 1-D and
//! 2-D, strides, dilations, asymmetric padding, groups (depthwise included), batches above one,
//! widths that meet every lane count and register tile, and special values (signed zeros,
//! subnormals, infinities, NaNs, rounding ties), so a padding tap multiplied by zero instead of
//! skipped (`0 · ∞`), a changed order of additions or a fused multiply-add shows.
//!
//! Runs against whichever catalog the build carries: `cargo test -p tapeplan-runtime` tests the
//! scalar catalog (the reference itself), `--features simd` the vectorized one (with
//! `RUSTFLAGS="-C target-cpu=native"` its AVX-512 or AVX2 form).

use proptest::prelude::*;
use tapeplan_core::ops::{eval as reference, Attr};
use tapeplan_core::{ConvAttr, MathProfile, Opcode, Shape};
use tapeplan_runtime::catalog;

use crate::simd_catalog::conv_geometry;

fn shp(d: &[usize]) -> Shape {
    Shape::new(d).unwrap()
}

/// Bit patterns, every NaN as one class.
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|x| if x.is_nan() { 0x7fc0_0000 } else { x.to_bits() })
        .collect()
}

/// One awkward float: mostly special values, some ordinary ones.
fn special() -> impl Strategy<Value = f32> + Clone {
    prop_oneof![
        3 => Just(0.0f32),
        3 => Just(-0.0f32),
        2 => Just(f32::MIN_POSITIVE / 8.0),
        1 => Just(f32::from_bits(1)),
        2 => Just(f32::INFINITY),
        2 => Just(f32::NEG_INFINITY),
        1 => Just(f32::NAN),
        2 => Just(1.0f32),
        2 => Just(f32::EPSILON / 2.0),
        1 => Just(f32::MAX),
        20 => -4.0f32..4.0f32,
    ]
}

/// A forward convolution: `x`, `w` and `y` dims and the attribute.
type Geo = (Vec<usize>, Vec<usize>, Vec<usize>, ConvAttr);

/// One spatial axis: kernel, stride, dilation, padding before and after, extra input length.
fn axis() -> impl Strategy<Value = (usize, u32, u32, u32, u32, usize)> {
    (
        1usize..=4,
        1u32..=3,
        1u32..=3,
        0u32..=3,
        0u32..=3,
        0usize..=5,
    )
}

/// A forward convolution `(x dims, w dims, y dims, attribute)` with a non-empty output: batch
/// 1 or 2; groups 1 to 3 with 1 to 6 input and output channels per group, or 9 to 12 output
/// channels per group (a whole tile of 8 lanes, then one spanning two groups), or depthwise (1
/// input and output channel per group, up to 20 groups so that channels fill a vector); widths
/// up to 77 so that every lane count (4, 8, 16) meets every register tile, partial vectors and
/// none.
fn geometry() -> impl Strategy<Value = Geo> {
    let channels = prop_oneof![
        3 => (1usize..=3, 1usize..=6, 1usize..=6),
        1 => (1usize..=20).prop_map(|g| (g, 1, 1)),
        1 => (1usize..=2, 1usize..=2, 9usize..=12),
    ];
    (
        1usize..=2,
        1usize..=2,
        channels,
        [axis(), axis()],
        0usize..=72,
    )
        .prop_map(|(r, n, (groups, cin_g, cout_g), axes, wide)| {
            let (x, w, a, e) = conv_geometry(r, n, (groups, cin_g, cout_g), axes, wide);
            let mut y = vec![n, groups * cout_g];
            y.extend_from_slice(&e);
            (x, w, y, a)
        })
}

/// The two adjoint instructions of one forward convolution: `(opcode, attribute, argument
/// dims)` for `conv_transpose(gy, w)` (extent: `x`'s) and `conv_weight_grad(x, gy)` (extent:
/// `w`'s).
fn adjoints(
    x: &[usize],
    w: &[usize],
    y: &[usize],
    a: ConvAttr,
) -> [(Opcode, Attr, [Vec<usize>; 2]); 2] {
    [
        (
            Opcode::ConvTranspose,
            Attr::Conv(a.with_extent(&x[2..])),
            [y.to_vec(), w.to_vec()],
        ),
        (
            Opcode::ConvWeightGrad,
            Attr::Conv(a.with_extent(&w[2..])),
            [x.to_vec(), y.to_vec()],
        ),
    ]
}

/// Runs `op` through the catalog and the reference over output buffers prefilled with a
/// sentinel, and compares the bits.
fn check(
    op: Opcode,
    attr: Attr,
    args: &[&[f32]],
    dims: &[Vec<usize>],
) -> Result<(), TestCaseError> {
    let shapes: Vec<Shape> = dims.iter().map(|d| shp(d)).collect();
    let n = tapeplan_core::ops::infer(op, attr, &shapes)
        .unwrap()
        .elems();
    let mut want = vec![f32::from_bits(0x7f80_0001); n];
    let mut got = vec![f32::from_bits(0x7f80_0001); n];
    let r = reference(op, attr, MathProfile::Precise, args, &shapes, &mut want);
    let c = catalog::eval(op, attr, MathProfile::Precise, args, &shapes, &mut got);
    prop_assert_eq!(r, c);
    prop_assert_eq!(
        bits(&got),
        bits(&want),
        "{} over {:?} ({}, {:?})",
        op,
        dims,
        catalog::CATALOG,
        attr
    );
    Ok(())
}

/// A narrow convolution (the catalog's channel-lane kernels, `conv_narrow`): batch 1 to 3,
/// 1-D or 2-D, the last axis 1 to 24 samples wide before the kernel's reach, strides,
/// dilations and padding as [`axis`]; groups 1 to 3 of 1 to 7 input channels and 3 to 21
/// output channels (channel counts that are and are not multiples of 4, 8 and 16, partial
/// tiles, fewer than a vector), one input channel and 33 to 40 output channels (`conv`'s
/// single-input-channel path; `conv_weight_grad`'s register tiles of two vectors, then one),
/// or depthwise (1 and 1, which the channel lanes refuse).
fn narrow_geometry() -> impl Strategy<Value = Geo> {
    let channels = prop_oneof![
        4 => (1usize..=3, 1usize..=7, 3usize..=21),
        1 => (1usize..=2, 3usize..=21, 3usize..=21),
        1 => (1usize..=2, Just(1usize), 33usize..=40),
        1 => (1usize..=20).prop_map(|g| (g, 1, 1)),
    ];
    (
        1usize..=2,
        1usize..=3,
        channels,
        [axis(), axis()],
        0usize..=18,
    )
        .prop_map(|(r, n, (groups, cin_g, cout_g), axes, wide)| {
            let (x, w, a, e) = conv_geometry(r, n, (groups, cin_g, cout_g), axes, wide);
            let mut y = vec![n, groups * cout_g];
            y.extend_from_slice(&e);
            (x, w, y, a)
        })
}

/// A geometry and values for `x`, `w` and `gy` drawn by `v`.
fn case<S: Strategy<Value = f32> + Clone>(v: S) -> impl Strategy<Value = (Geo, [Vec<f32>; 3])> {
    case_of(geometry(), v)
}

/// A geometry drawn by `geo` and values for `x`, `w` and `gy` drawn by `v`.
fn case_of<S: Strategy<Value = f32> + Clone>(
    geo: impl Strategy<Value = Geo>,
    v: S,
) -> impl Strategy<Value = (Geo, [Vec<f32>; 3])> {
    geo.prop_flat_map(move |(x, w, y, a)| {
        let len = |d: &[usize]| d.iter().product::<usize>();
        let vals = [
            prop::collection::vec(v.clone(), len(&x)),
            prop::collection::vec(v.clone(), len(&w)),
            prop::collection::vec(v.clone(), len(&y)),
        ];
        (Just((x, w, y, a)), vals)
    })
}

fn check_both((x, w, y, a): Geo, [xv, wv, gv]: [Vec<f32>; 3]) -> Result<(), TestCaseError> {
    let [(t_op, t_attr, t_dims), (u_op, u_attr, u_dims)] = adjoints(&x, &w, &y, a);
    check(t_op, t_attr, &[&gv, &wv], &t_dims)?;
    check(u_op, u_attr, &[&xv, &gv], &u_dims)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn conv_adjoints_match_reference((geo, vals) in case(special())) {
        check_both(geo, vals)?;
    }

    #[test]
    fn conv_adjoints_ordinary_values_match_reference((geo, vals) in case(-2.0f32..2.0)) {
        // Sums of ordinary values: any change of order or a fused multiply-add shows.
        check_both(geo, vals)?;
    }

    #[test]
    fn narrow_convs_match_reference((geo, vals) in case_of(narrow_geometry(), special())) {
        check_all(geo, vals)?;
    }

    #[test]
    fn narrow_convs_ordinary_values_match_reference(
        (geo, vals) in case_of(narrow_geometry(), -2.0f32..2.0)
    ) {
        check_all(geo, vals)?;
    }
}

/// A convolution the catalog runs as products over gathered columns (`conv_im2col`): at least
/// 16 terms per sum (2 to 8 input channels per group times the taps) and at least 4 output
/// rows, 1-D or 2-D with strides, dilations and padding as [`axis`], batch 1 to 3 and widths
/// up to 40, so that the columns span several blocks of the gathered matrix and several batch
/// elements per block; the smaller ones take the other kernels, which is checked too.
fn im2col_geometry() -> impl Strategy<Value = Geo> {
    (
        1usize..=2,
        1usize..=3,
        (1usize..=2, 2usize..=8, 4usize..=20),
        [axis(), axis()],
        0usize..=36,
    )
        .prop_map(|(r, n, (groups, cin_g, cout_g), axes, wide)| {
            let (x, w, a, e) = conv_geometry(r, n, (groups, cin_g, cout_g), axes, wide);
            let mut y = vec![n, groups * cout_g];
            y.extend_from_slice(&e);
            (x, w, y, a)
        })
}

/// A finite float: signed zeros, subnormals, the largest, ties and ordinary values (the factor
/// the products multiply the padding's `+0.0` by must be finite for them to run).
fn finite() -> impl Strategy<Value = f32> + Clone {
    prop_oneof![
        2 => Just(0.0f32),
        2 => Just(-0.0f32),
        1 => Just(f32::from_bits(1)),
        1 => Just(f32::MAX),
        1 => Just(f32::EPSILON / 2.0),
        20 => -4.0f32..4.0f32,
    ]
}

/// [`im2col_geometry`] with the factors finite and the other operands special: `x` and the
/// transposed convolution's `gy` from [`special`] (infinities, NaNs next to the padding), `w`
/// and the weight gradient's `gy` from [`finite`].
fn im2col_case() -> impl Strategy<Value = (Geo, [Vec<f32>; 4])> {
    im2col_geometry().prop_flat_map(|(x, w, y, a)| {
        let len = |d: &[usize]| d.iter().product::<usize>();
        let vals = (
            prop::collection::vec(special(), len(&x)),
            prop::collection::vec(finite(), len(&w)),
            prop::collection::vec(special(), len(&y)),
            prop::collection::vec(finite(), len(&y)),
        )
            .prop_map(|(x, w, gs, gf)| [x, w, gs, gf]);
        (Just((x, w, y, a)), vals)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn im2col_convs_match_reference(((x, w, y, a), [xv, wv, gs, gf]) in im2col_case()) {
        let attr = Attr::Conv(a.with_extent(&y[2..]));
        check(Opcode::Conv, attr, &[&xv, &wv], &[x.clone(), w.clone()])?;
        let [(t_op, t_attr, t_dims), (u_op, u_attr, u_dims)] = adjoints(&x, &w, &y, a);
        check(t_op, t_attr, &[&gs, &wv], &t_dims)?;
        check(u_op, u_attr, &[&xv, &gf], &u_dims)?;
    }

    #[test]
    fn im2col_convs_ordinary_values_match_reference(
        (geo, vals) in case_of(im2col_geometry(), -2.0f32..2.0)
    ) {
        check_all(geo, vals)?;
    }
}

/// Literal cases of the products over gathered columns (16 input channels, so that they run):
/// a weight or a cotangent that is not finite makes them give way to the kernels that skip
/// the padding's taps, which the reference does; multiplied by the padding's zero it would
/// write NaN. Checked against the reference bit for bit, and the border values literally.
#[test]
fn im2col_gives_way_when_a_padding_factor_is_not_finite() {
    let a = ConvAttr::d1(1, 1, 1, 1, 1);
    let (x, w, y) = (vec![1, 16, 8], vec![4, 16, 3], vec![1, 4, 8]);
    let xv: Vec<f32> = (0..128).map(|i| (i % 8 + 1) as f32).collect();
    let mut wv = vec![1.0f32; 4 * 16 * 3];
    wv[0] = f32::INFINITY; // co 0, ci 0, tap 0: reads the padding for output 0
    let conv = Attr::Conv(a.with_extent(&y[2..]));
    check(Opcode::Conv, conv, &[&xv, &wv], &[x.clone(), w.clone()]).unwrap();
    let mut out = vec![0.0f32; 32];
    let shapes = [shp(&x), shp(&w)];
    catalog::eval(
        Opcode::Conv,
        conv,
        MathProfile::Precise,
        &[&xv, &wv],
        &shapes,
        &mut out,
    )
    .unwrap();
    // Output 0 of channel 0: tap 0 skipped, the others finite; output 1: ∞ · x[0].
    assert!(
        out[0].is_finite() && out[1] == f32::INFINITY,
        "{:?}",
        &out[..2]
    );
    let mut gv = vec![1.0f32; 32];
    gv[0] = f32::INFINITY;
    let [(t_op, t_attr, t_dims), (u_op, u_attr, u_dims)] = adjoints(&x, &w, &y, a);
    check(t_op, t_attr, &[&gv, &wv], &t_dims).unwrap();
    check(u_op, u_attr, &[&xv, &gv], &u_dims).unwrap();
    let mut u = vec![0.0f32; 4 * 16 * 3];
    let shapes = [shp(&u_dims[0]), shp(&u_dims[1])];
    catalog::eval(
        u_op,
        u_attr,
        MathProfile::Precise,
        &[&xv, &gv],
        &shapes,
        &mut u,
    )
    .unwrap();
    // Channel 0, input channel 0, tap 0: Σ_{o ≥ 1} x[o − 1] · g[o] = 1 + … + 7 = 28.
    assert_eq!(u[0], 28.0);
}

/// The forward convolution and both adjoints of one geometry against their references.
fn check_all((x, w, y, a): Geo, [xv, wv, gv]: [Vec<f32>; 3]) -> Result<(), TestCaseError> {
    let attr = Attr::Conv(a.with_extent(&y[2..]));
    check(Opcode::Conv, attr, &[&xv, &wv], &[x.clone(), w.clone()])?;
    check_both((x, w, y, a), [xv, wv, gv])
}

/// The MNIST-1D CNN's layers (issue 15's workload C1: 25 channels, kernels 5, 3, 3, stride 2,
/// padding 1, signals 40 → 19 → 10 → 5) have catalog kernels for the convolution and its
/// input gradient in the `simd` build (the narrow ones: channel lanes).
#[test]
fn narrow_cnn_layers_have_simd_kernels() {
    for (c_in, k, width) in [(1, 5, 40), (25, 3, 19), (25, 3, 10)] {
        let a = ConvAttr::d1(2, 1, 1, 1, 1);
        let (x, w) = (vec![100, c_in, width], vec![25, c_in, k]);
        let e = tapeplan_core::ops::conv::output_extent(&a, shp(&x), shp(&w)).unwrap();
        let y = vec![100, 25, e[0]];
        let fwd = [shp(&x), shp(&w)];
        let conv = Attr::Conv(a.with_extent(&e[..1]));
        assert_eq!(
            catalog::has_kernel(Opcode::Conv, conv, &fwd),
            cfg!(feature = "simd"),
            "conv {x:?}"
        );
        let [(op, attr, dims), _] = adjoints(&x, &w, &y, a);
        let shapes = [shp(&dims[0]), shp(&dims[1])];
        // The first layer's (never asked for) has the column lanes: 20 columns per stride
        // class; the others have the channel lanes.
        assert_eq!(
            catalog::has_kernel(op, attr, &shapes),
            cfg!(feature = "simd"),
            "{op} {x:?}"
        );
    }
}

/// The typical layers (a 3×3 convolution, a depthwise one, a strided and dilated one) have
/// catalog kernels for both adjoints in the `simd` build and run their reference kernels in
/// the scalar one; a kernel wider than the catalog's tables takes the reference everywhere.
#[test]
fn conv_adjoints_have_simd_kernels() {
    for (groups, stride, dilation, k) in [(1, 1, 1, 3), (16, 1, 1, 3), (1, 2, 2, 3), (1, 1, 1, 17)]
    {
        let a = ConvAttr::d2([stride; 2], [dilation; 2], [1, 1], [1, 1], groups);
        let (x, w) = (vec![2, 16, 40, 40], vec![16, 16 / groups as usize, k, k]);
        let e = tapeplan_core::ops::conv::output_extent(&a, shp(&x), shp(&w)).unwrap();
        let y = vec![2, 16, e[0], e[1]];
        for (op, attr, dims) in adjoints(&x, &w, &y, a) {
            let shapes = [shp(&dims[0]), shp(&dims[1])];
            assert_eq!(
                catalog::has_kernel(op, attr, &shapes),
                cfg!(feature = "simd") && k <= 16,
                "{op} groups {groups} stride {stride} dilation {dilation} kernel {k}"
            );
        }
    }
}

/// A literal case the property tests could miss by chance: an infinite cotangent next to the
/// padding. The reference skips the padding tap; a kernel that multiplied the padding's zero by
/// it would write NaN into the weight gradient's border taps.
#[test]
fn padding_taps_are_skipped_not_multiplied_by_zero() {
    let a = ConvAttr::d1(1, 1, 1, 1, 1);
    let (x, w, y) = (vec![1, 1, 8], vec![4, 1, 3], vec![1, 4, 8]);
    let xv: Vec<f32> = (1..=8).map(|i| i as f32).collect();
    let mut gv = vec![1.0f32; 32];
    gv[0] = f32::INFINITY; // channel 0, output 0: its tap 0 reads the padding
    let [_, (op, attr, dims)] = adjoints(&x, &w, &y, a);
    let shapes = [shp(&dims[0]), shp(&dims[1])];
    let mut u = vec![0.0f32; 12];
    catalog::eval(op, attr, MathProfile::Precise, &[&xv, &gv], &shapes, &mut u).unwrap();
    // Channel 0, tap 0: Σ_{o ≥ 1} x[o − 1] · g[o] = 1 + … + 7 = 28 (the ∞ at o = 0 skipped);
    // tap 1: ∞ · x[0] + … = ∞; tap 2: ∞ · x[1] + … = ∞. Channel 1, tap 0: 28 again.
    assert_eq!(u[..4], [28.0, f32::INFINITY, f32::INFINITY, 28.0]);
}

/// The MNIST-1D CNN's three layers at batch 100 (workload C1: 25 channels, kernels 5, 3, 3,
/// stride 2, padding 1, signals 40 → 19 → 10 → 5): `conv` and both adjoints against their
/// references, bit for bit, over ordinary values (long sums: a changed order shows). The weight
/// gradient runs over several batch chunks here (`conv_wgrad`: 13, 25 and 51 elements a chunk
/// with 8 or 16 lanes, 15, 29 and 58 with 4), the last one partial.
#[test]
fn c1_layers_match_reference() {
    let mut seed = 0x2545_f491_u32;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        (seed >> 8) as f32 / (1u32 << 23) as f32 * 4.0 - 2.0
    };
    for (c_in, k, width) in [(1, 5, 40), (25, 3, 19), (25, 3, 10)] {
        let a = ConvAttr::d1(2, 1, 1, 1, 1);
        let (x, w) = (vec![100, c_in, width], vec![25, c_in, k]);
        let e = tapeplan_core::ops::conv::output_extent(&a, shp(&x), shp(&w)).unwrap();
        let y = vec![100, 25, e[0]];
        let len = |d: &[usize]| d.iter().product::<usize>();
        let vals = [len(&x), len(&w), len(&y)].map(|n| (0..n).map(|_| next()).collect::<Vec<_>>());
        check_all((x, w, y, a), vals).unwrap();
    }
}

/// `conv_transpose` over gathered columns in passes of the batch (a residue class per stride
/// value, every class within a pass of at most 4 096 elements of `z`; the property tests' batches
/// of 1 to 3 take one pass): C1's second and third layers at its batch of 100 (passes of 8 and
/// 16 batch elements, the last one shorter) and a 2-D layer of stride 2 (four classes, passes
/// of 3 of its 11 batch elements), against the reference bit for bit, with values whose sums
/// show any other order.
#[test]
fn conv_transpose_in_passes_of_the_batch() {
    let cases = [
        (
            ConvAttr::d1(2, 1, 1, 1, 1),
            vec![100, 25, 19],
            vec![25, 25, 3],
        ),
        (
            ConvAttr::d1(2, 1, 1, 1, 1),
            vec![100, 25, 10],
            vec![25, 25, 3],
        ),
        (
            ConvAttr::d2([2, 2], [1, 1], [1, 1], [1, 1], 1),
            vec![11, 16, 9, 9],
            vec![16, 16, 3, 3],
        ),
    ];
    for (a, x, w) in cases {
        let e = tapeplan_core::ops::conv::output_extent(&a, shp(&x), shp(&w)).unwrap();
        let mut y = vec![x[0], w[0]];
        y.extend_from_slice(&e[..x.len() - 2]);
        let len = |d: &[usize]| d.iter().product::<usize>();
        let val = |i: usize, s: u32| {
            let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(s);
            ((h >> 8) as f32 / 8_388_608.0 - 1.0) * [1.0, 1e-3, 1e3][(h >> 4) as usize % 3]
        };
        let xv: Vec<f32> = (0..len(&x)).map(|i| val(i, 1)).collect();
        let wv: Vec<f32> = (0..len(&w)).map(|i| val(i, 2)).collect();
        let gv: Vec<f32> = (0..len(&y)).map(|i| val(i, 3)).collect();
        let [(op, attr, dims), _] = adjoints(&x, &w, &y, a);
        let shapes = [shp(&dims[0]), shp(&dims[1])];
        assert_eq!(
            catalog::has_kernel(op, attr, &shapes),
            cfg!(feature = "simd"),
            "{x:?}"
        );
        check_both((x, w, y, a), [xv, wv, gv]).unwrap();
    }
}
