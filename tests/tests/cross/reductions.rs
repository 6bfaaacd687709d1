//! Reductions and indexing, with their numerics held to the field's bug reports (issue 12): the
//! gradient of a maximum with ties; gather's invalid indices and duplicate indices.

use tapeplan_core::{NodeId, Recordable, Run, Shape, Tape, Tensor, Trace};
use tapeplan_planner::{plan, EntrySpec, Root};
use tapeplan_runtime::{Plan as RtPlan, Session};

/// `sum(body(x) * w)`'s gradient with respect to `x`, from the oracle and from the runtime.
pub(crate) fn gradient(
    shape: Shape,
    x: &[f32],
    w: &[f32],
    body: impl Fn(&mut Trace<'_>, &NodeId) -> NodeId,
) -> (Vec<f32>, Vec<f32>) {
    gradient_with(shape, x, w, (Shape::SCALAR, &[0.0]), |t, x, _| body(t, x))
}

/// [`gradient`] with a second, undifferentiated input `d` (data such as indices).
pub(crate) fn gradient_with(
    shape: Shape,
    x: &[f32],
    w: &[f32],
    d: (Shape, &[f32]),
    body: impl Fn(&mut Trace<'_>, &NodeId, &NodeId) -> NodeId,
) -> (Vec<f32>, Vec<f32>) {
    let mut tape = Tape::new();
    let xn = tape.input("x", shape);
    let dn = tape.input("d", d.0);
    let (y, ys) = {
        let mut t = tape.trace();
        let y = body(&mut t, &xn, &dn);
        let s = t.shape_of(&y);
        (y, s)
    };
    let wn = tape.input("w", ys);
    let f = {
        let mut t = tape.trace();
        let p = t.mul(&y, &wn).unwrap();
        t.sum_all(&p).unwrap()
    };
    let g = *tape.differentiate(f, &[xn]).unwrap().get(xn).unwrap();
    let mut run = Run::new(&tape);
    run.set(xn, Tensor::new(shape, x.to_vec()).unwrap())
        .unwrap();
    run.set(wn, Tensor::new(ys, w.to_vec()).unwrap()).unwrap();
    run.set(dn, Tensor::new(d.0, d.1.to_vec()).unwrap())
        .unwrap();
    run.forward().unwrap();
    let oracle = run.value(g).unwrap().data.clone();
    let runtime = run_planned(&tape, g, &[("x", x), ("d", d.1), ("w", w)]);
    (oracle, runtime)
}

/// Issue 12's first numerics case: `max_to` of `[3, 0, 3, 3]` gave each tied element the whole
/// cotangent (the gradient summed to 3). Ties now split it evenly (`jnp.max`, `torch.amax`).
#[test]
fn the_gradient_of_a_maximum_with_ties_is_split_evenly() {
    let (oracle, runtime) = gradient(Shape::vector(4), &[3., 0., 3., 3.], &[1.], |t, x| {
        t.max_to(x, Shape::SCALAR).unwrap()
    });
    let third = 1.0f32 / 3.0;
    assert_eq!(oracle, [third, 0., third, third]);
    assert_eq!(runtime, oracle);
    let sum: f32 = oracle.iter().sum();
    assert!((sum - 1.0).abs() <= f32::EPSILON, "{sum}");
    // Per row of a matrix, with the cotangent 6 and 4: a two-way tie, a four-way tie (-0 and
    // +0 tie too), no tie.
    let x = [1., 5., 5., 2., -0.0, 0.0, -0.0, 0.0, 7., 1., 2., 3.];
    let (oracle, runtime) = gradient(Shape::matrix(3, 4), &x, &[6., 4., 2.], |t, x| {
        t.max_to(x, Shape::matrix(3, 1)).unwrap()
    });
    assert_eq!(oracle, [0., 3., 3., 0., 1., 1., 1., 1., 2., 0., 0., 0.]);
    assert_eq!(runtime, oracle);
    // A NaN maximum: no element equals it, the gradient is zero (not NaN).
    let (oracle, runtime) = gradient(Shape::vector(3), &[1., f32::NAN, 2.], &[1.], |t, x| {
        t.max_to(x, Shape::SCALAR).unwrap()
    });
    assert_eq!(oracle, [0., 0., 0.]);
    assert_eq!(runtime, oracle);
}

/// An embedding lookup with duplicate, negative and invalid ids: the forward gives zero rows for
/// the invalid ones, the gradient accumulates the duplicates (in increasing position order) and
/// gives the invalid ones nothing, in the oracle and the runtime alike.
#[test]
fn gather_duplicates_accumulate_and_invalid_indices_read_zeros() {
    let table = [0., 1., 10., 11., 20., 21.];
    let ids = [1., 1., 0., 7., -1., 0.5, f32::NAN, -4.];
    let w = [
        1., 2., 10., 20., 100., 200., 5., 5., 7., 7., 3., 3., 9., 9., 8., 8.,
    ];
    let (oracle, runtime) = gradient_with(
        Shape::matrix(3, 2),
        &table,
        &w,
        (Shape::vector(8), &ids),
        |t, x, d| t.embedding(x, d).unwrap(),
    );
    assert_eq!(oracle, [100., 200., 11., 22., 7., 7.]);
    assert_eq!(runtime, oracle);
    // The forward through the oracle: rows 1, 1, 0, zeros, row 2, zeros, zeros, zeros.
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::matrix(3, 2));
    let d = tape.input("d", Shape::vector(8));
    let y = tape.trace().embedding(&x, &d).unwrap();
    let mut run = Run::new(&tape);
    run.set(x, Tensor::new(Shape::matrix(3, 2), table.to_vec()).unwrap())
        .unwrap();
    run.set(d, Tensor::new(Shape::vector(8), ids.to_vec()).unwrap())
        .unwrap();
    run.forward().unwrap();
    assert_eq!(
        run.value(y).unwrap().data,
        [10., 11., 10., 11., 0., 1., 0., 0., 20., 21., 0., 0., 0., 0., 0., 0.]
    );
}

/// Reductions over an axis set: axes {0, 2} of a rank-3 tensor, keep-dims and not, values
/// against loops written here, gradients through the oracle and the runtime.
#[test]
fn reductions_over_axes_0_and_2_of_a_rank_3_tensor() {
    let s = Shape::new(&[2, 3, 4]).unwrap();
    let x: Vec<f32> = (0..24).map(|k| ((k * 7) % 11) as f32 - 5.0).collect();
    let at = |a: usize, b: usize, c: usize| x[a * 12 + b * 4 + c];
    let group = |b: usize| (0..2).flat_map(move |a| (0..4).map(move |c| (a, b, c)));
    let sums: Vec<f32> = (0..3)
        .map(|b| group(b).map(|(a, b, c)| at(a, b, c)).sum())
        .collect();
    let maxes: Vec<f32> = (0..3)
        .map(|b| {
            group(b)
                .map(|(a, b, c)| at(a, b, c))
                .fold(f32::MIN, f32::max)
        })
        .collect();
    let mut tape = Tape::new();
    let xn = tape.input("x", s);
    let (sk, sd, m, k) = {
        let mut t = tape.trace();
        let sk = t.sum_axes(&xn, &[0, 2], true).unwrap();
        let sd = t.sum_axes(&xn, &[2, 0], false).unwrap();
        let m = t.mean_axes(&xn, &[0, 2], false).unwrap();
        let k = t.max_axes(&xn, &[0, 2], true).unwrap();
        assert!(t.sum_axes(&xn, &[0, 0], true).is_err());
        assert!(t.sum_axes(&xn, &[3], true).is_err());
        (sk, sd, m, k)
    };
    assert_eq!(tape.shape(sk).unwrap(), Shape::new(&[1, 3, 1]).unwrap());
    assert_eq!(tape.shape(sd).unwrap(), Shape::vector(3));
    assert_eq!(tape.shape(k).unwrap(), Shape::new(&[1, 3, 1]).unwrap());
    let mut run = Run::new(&tape);
    run.set(xn, Tensor::new(s, x.clone()).unwrap()).unwrap();
    run.forward().unwrap();
    assert_eq!(run.value(sk).unwrap().data, sums);
    assert_eq!(run.value(sd).unwrap().data, sums);
    let means: Vec<f32> = sums.iter().map(|v| v / 8.0).collect();
    assert_eq!(run.value(m).unwrap().data, means);
    assert_eq!(run.value(k).unwrap().data, maxes);

    // Gradients: the mean gives each element 1/8 of its group's cotangent; the maximum splits
    // its group's cotangent among the tied maxima.
    let w = [8., 16., 24.];
    let (oracle, runtime) = gradient(s, &x, &w, |t, x| t.mean_axes(x, &[0, 2], false).unwrap());
    let expected: Vec<f32> = (0..24).map(|k| w[(k % 12) / 4] / 8.0).collect();
    assert_eq!(oracle, expected);
    assert_eq!(runtime, oracle);
    let (oracle, runtime) = gradient(s, &x, &w, |t, x| t.max_axes(x, &[0, 2], false).unwrap());
    for b in 0..3 {
        let ties = group(b)
            .filter(|&(a, b, c)| at(a, b, c) == maxes[b])
            .count();
        for (a, bb, c) in group(b) {
            let e = if at(a, bb, c) == maxes[b] {
                w[b] / ties as f32
            } else {
                0.0
            };
            assert_eq!(oracle[a * 12 + bb * 4 + c], e, "({a}, {bb}, {c})");
        }
    }
    assert_eq!(runtime, oracle);
}

/// The product's gradient and Hessian-vector product with one zero and with two zeros in a
/// group, by hand (no division by `x` anywhere), through the oracle and the runtime.
#[test]
fn the_product_is_differentiated_right_with_one_and_two_zeros() {
    let s = Shape::vector(4);
    let prod = |t: &mut Trace<'_>, x: &NodeId| t.prod_to(x, Shape::SCALAR).unwrap();
    // One zero: only the zero's gradient is nonzero, the product of the others.
    let (oracle, runtime) = gradient(s, &[2., 0., 3., 4.], &[1.], prod);
    assert_eq!(oracle, [0., 24., 0., 0.]);
    assert_eq!(runtime, oracle);
    // Two zeros: every gradient is zero.
    let (oracle, runtime) = gradient(s, &[2., 0., 3., 0.], &[1.], prod);
    assert_eq!(oracle, [0., 0., 0., 0.]);
    assert_eq!(runtime, oracle);
    // No zero: the gradient is the product of the others.
    let (oracle, _) = gradient(s, &[2., 5., 3., 4.], &[1.], prod);
    assert_eq!(oracle, [60., 24., 40., 30.]);

    // Second order: H[j][k] = product of the elements other than j and k (0 on the diagonal).
    // At [2, 0, 3, 4] with v = [1, 10, 100, 1000]: Hv = [12·10, 12 + 8·100 + 6·1000, 8·10,
    // 6·10]. At [2, 0, 3, 0]: only H[1][3] = H[3][1] = 6: Hv = [0, 6000, 0, 60].
    let v = [1., 10., 100., 1000.];
    for (x, expected) in [
        ([2., 0., 3., 4.], [120., 6812., 80., 60.]),
        ([2., 0., 3., 0.], [0., 6000., 0., 60.]),
    ] {
        let (oracle, runtime) = hvp(s, &x, &v, prod);
        assert_eq!(oracle, expected, "{x:?}");
        assert_eq!(runtime, oracle, "{x:?}");
    }
}

/// `H(x) · v` of `sum(body(x))`: the recorded gradient differentiated again along `v`, from the
/// oracle and the runtime.
fn hvp(
    shape: Shape,
    x: &[f32],
    v: &[f32],
    body: impl Fn(&mut Trace<'_>, &NodeId) -> NodeId,
) -> (Vec<f32>, Vec<f32>) {
    let mut tape = Tape::new();
    let xn = tape.input("x", shape);
    let f = {
        let mut t = tape.trace();
        let y = body(&mut t, &xn);
        t.sum_all(&y).unwrap()
    };
    let g = *tape.differentiate(f, &[xn]).unwrap().get(xn).unwrap();
    let vn = tape.input("v", shape);
    let h = *tape.vjp(g, vn, &[xn]).unwrap().get(xn).unwrap();
    let mut run = Run::new(&tape);
    run.set(xn, Tensor::new(shape, x.to_vec()).unwrap())
        .unwrap();
    run.set(vn, Tensor::new(shape, v.to_vec()).unwrap())
        .unwrap();
    run.forward().unwrap();
    let oracle = run.value(h).unwrap().data.clone();
    (oracle, run_planned(&tape, h, &[("x", x), ("v", v)]))
}

/// `node` planned as the output of one entry and run by the runtime over the named inputs (an
/// input the plan does not read is skipped).
fn run_planned(tape: &Tape, node: NodeId, inputs: &[(&str, &[f32])]) -> Vec<f32> {
    let p = plan(
        tape,
        &[EntrySpec {
            name: "e".into(),
            roots: vec![Root::Output {
                name: "out".into(),
                node,
            }],
            guarded: false,
        }],
    )
    .unwrap();
    let bytes = p.to_bytes();
    let rt = RtPlan::parse(&bytes).unwrap();
    let e = rt.entry("e").unwrap();
    let mut arena = vec![f32::NAN; rt.arena_elems()];
    let mut s = Session::bind(&rt, &mut arena).unwrap();
    for (name, v) in inputs {
        if rt.input(e, name).is_some() {
            s.set_input(e, name, v).unwrap();
        }
    }
    s.run(e).unwrap();
    s.output(e, "out").unwrap().to_vec()
}
