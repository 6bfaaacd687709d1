//! The catalog's max pooling over windows that tile the input (`max_pool`, `max_pool_gather`,
//! `max_pool_scatter`: the `simd` build's plane-lane kernel) against the reference kernels,
//! bit for bit (NaN payloads included), over random tilings: 1-D and 2-D, plane counts that
//! are and are not multiples of eight, rows and columns past the last window, and values full
//! of ties (small integers, `+0` and `-0`, NaNs of two payloads, infinities), so a changed
//! first-maximum rule, a lost signed zero or a `g` written without the reference's `+0 + g`
//! shows.
//!
//! Runs against whichever catalog the build carries (`--features simd` for the kernel).

use proptest::prelude::*;
use tapeplan_core::ops::{eval as reference, Attr};
use tapeplan_core::{MathProfile, Opcode, PoolWindow, Shape};
use tapeplan_runtime::catalog;

/// A value with many ties: small integers, signed zeros, infinities, two NaN payloads.
fn tied() -> impl Strategy<Value = f32> + Clone {
    prop_oneof![
        4 => Just(0.0f32),
        4 => Just(-0.0f32),
        1 => Just(f32::INFINITY),
        1 => Just(f32::NEG_INFINITY),
        1 => Just(f32::from_bits(0x7fc0_0001)),
        1 => Just(f32::from_bits(0xffc0_0002)),
        8 => (-3i8..=3).prop_map(f32::from),
        8 => -4.0f32..4.0f32,
    ]
}

/// `(x dims, window)`: `[N, C, L]` with a 1-D window or `[N, C, H, W]` with a 2-D one, the
/// stride equal to the kernel and no padding, with up to two rows and columns past the last
/// window.
fn tiling() -> impl Strategy<Value = (Vec<usize>, PoolWindow)> {
    (
        1usize..=3,
        1usize..=11,
        any::<bool>(),
        (1u16..=3, 1u16..=4),
        (1usize..=4, 1usize..=5),
        (0usize..=2, 0usize..=2),
    )
        .prop_map(|(n, c, two_d, (kh, kw), (oh, ow), (eh, ew))| {
            let cols = ow * usize::from(kw) + ew;
            if two_d {
                let rows = oh * usize::from(kh) + eh;
                (
                    vec![n, c, rows, cols],
                    PoolWindow::new_2d([kh, kw], [kh, kw], [0; 4]),
                )
            } else {
                (vec![n, c, cols], PoolWindow::new_1d(kw, kw, [0, 0]))
            }
        })
}

fn shp(d: &[usize]) -> Shape {
    Shape::new(d).unwrap()
}

/// `op` through the catalog and through the reference, the same bits.
fn check(op: Opcode, attr: Attr, args: &[&[f32]], shapes: &[Shape]) -> Result<(), TestCaseError> {
    let out_shape = tapeplan_core::ops::infer(op, attr, shapes).unwrap();
    let mut want = vec![f32::from_bits(0x7f80_1234); out_shape.elems()];
    let mut got = want.clone();
    reference(op, attr, MathProfile::Precise, args, shapes, &mut want).unwrap();
    catalog::eval(op, attr, MathProfile::Precise, args, shapes, &mut got).unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    prop_assert_eq!(bits(&got), bits(&want), "{} over {:?}", op, shapes);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn tiled_max_pools_give_the_reference_bits(
        (dims, window, x, h, g) in tiling().prop_flat_map(|(dims, window)| {
            let x = shp(&dims);
            let pooled = tapeplan_core::ops::infer(Opcode::MaxPool, Attr::Pool(window), &[x])
                .unwrap();
            let v = |n: usize| proptest::collection::vec(tied(), n);
            (Just(dims), Just(window), v(x.elems()), v(x.elems()), v(pooled.elems()))
        }),
    ) {
        let x_shape = shp(&dims);
        let attr = Attr::Pool(window);
        let pooled = tapeplan_core::ops::infer(Opcode::MaxPool, attr, &[x_shape]).unwrap();
        check(Opcode::MaxPool, attr, &[&x], &[x_shape])?;
        check(Opcode::MaxPoolGather, attr, &[&x, &h], &[x_shape, x_shape])?;
        check(Opcode::MaxPoolScatter, attr, &[&x, &g], &[x_shape, pooled])?;
        // The kernel takes every tiling here (bands of at most 3 · 22 elements).
        for (op, shapes) in [
            (Opcode::MaxPool, vec![x_shape]),
            (Opcode::MaxPoolGather, vec![x_shape, x_shape]),
            (Opcode::MaxPoolScatter, vec![x_shape, pooled]),
        ] {
            prop_assert_eq!(
                catalog::has_kernel(op, attr, &shapes),
                cfg!(feature = "simd"),
                "{}", op
            );
        }
    }
}

/// The digits CNN's pools (workload C2: `MaxPool2d(2)` over `[32, 16, 8, 8]` and
/// `[32, 32, 4, 4]`) have the `simd` kernel; overlapping or padded windows, and bands past its
/// buffers, keep the reference.
#[test]
fn which_pools_have_the_simd_kernel() {
    let simd = cfg!(feature = "simd");
    let k2 = PoolWindow::new_2d([2, 2], [2, 2], [0; 4]);
    for (dims, window, taken) in [
        (vec![32, 16, 8, 8], k2, simd),
        (vec![32, 32, 4, 4], k2, simd),
        (vec![1, 3, 28, 28], k2, simd),
        // A band of 2 · 65 elements: past the 128 the kernel's buffers hold.
        (vec![1, 3, 4, 65], k2, false),
        (
            vec![2, 4, 8, 8],
            PoolWindow::new_2d([3, 3], [2, 2], [0; 4]),
            false,
        ),
        (
            vec![2, 4, 8, 8],
            PoolWindow::new_2d([2, 2], [2, 2], [1, 1, 1, 1]),
            false,
        ),
    ] {
        let x = shp(&dims);
        assert_eq!(
            catalog::has_kernel(Opcode::MaxPool, Attr::Pool(window), &[x]),
            taken,
            "{dims:?} {window:?}"
        );
    }
}
