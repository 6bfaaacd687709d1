//! Forward mode: the tangent of a tape along a direction, two ways, with no rule of its own.
//!
//! - Computing: the reference kernels are generic over their element
//!   (`tapeplan_core::Element`), so a tape run over the dual number
//!   [`tapeplan_tests::dual::Dual`] (a value and a tangent) computes every node's tangent:
//!   `(a, a')·(b, b') = (ab, a'b + ab')` already is the product rule.
//! - Recording: [`Tape::jvp`] derives the tangent from the reverse rules. The vjp is linear in
//!   its seed, so the gradient recorded from a symbolic seed `u` is `g(u) = Jᵀu`; differentiating
//!   `⟨g(u), v⟩` with respect to `u` (a second recorded reverse pass) gives `J·v`. The answer is
//!   ordinary nodes (printed below), which the oracle `Run` evaluates (and the planner plans and
//!   the runtime runs: `tests/tests/cross/forward_mode.rs`).
//!
//! A new opcode needs nothing here: its reverse rule is its forward mode too.
//!
//! The two readings agree bit for bit on the scalar case below, node by node (asserted). On the
//! vector case, `softplus` rounds differently in the two readings (the dual differentiates the
//! kernel's `ln_1p(e^x)`, the rule is `t·sigmoid(x)`: see `ROUNDS_APART` in the test), so the
//! nodes from it on agree within a relative 1e-6 (stated and asserted).
//!
//! The directional derivative `∇f · v` is the tangent of the output, checked against reverse
//! mode (`Run::backward`, the oracle): for the scalar input the two reach the same bits
//! (asserted); for the vector input reverse mode forms `Σ gᵢ vᵢ` in another order than the tangent
//! accumulates it, so they agree within a relative 1e-5 (stated and asserted below).
//!
//! Forward over reverse: a recorded gradient is ordinary graph, so its tangent is the
//! Hessian-vector product; on Plate 1 it has the same bits as reverse over reverse (asserted).
//!
//! Run with `cargo run -p tapeplan-tests --example forward_mode`.

use tapeplan_core::{
    describe, NodeId, Recordable, Run, RunAs, Shape, Tape, TapeError, Tensor, TensorOf,
};
use tapeplan_tests::dual::{pairs, tangents, Dual};

/// Bit patterns, every NaN as one class.
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|x| if x.is_nan() { 0x7fc0_0000 } else { x.to_bits() })
        .collect()
}

/// The two readings of the tangents of `f` at `x = at` along `v`, checked against each other
/// node by node (bitwise, or within the relative `tolerance` from node `apart_from` on); answers
/// the tangent of `f` and the reverse-mode `grad · v`.
fn directional(
    tape: &Tape,
    x: NodeId,
    f: NodeId,
    at: &[f32],
    v: &[f32],
    (apart_from, tolerance): (usize, f32),
) -> Result<(f32, f32), TapeError> {
    let shape = tape.shape(x)?;
    // 1. Computing: one run over dual numbers.
    let mut dual: RunAs<Dual> = RunAs::new(tape);
    dual.set(x, TensorOf::new(shape, pairs(at, v))?)?;
    dual.forward_until(f)?;

    // 2. Recording: the tangent as ordinary nodes, run by the oracle; printed for `f`, then
    //    recorded for every node to compare them all.
    let mut rec = tape.clone();
    let dx = rec.input("dx", shape);
    let start = rec.len();
    let tangent_of_f = rec.jvp(f, &[(x, dx)])?;
    println!(
        "{}",
        describe(
            &rec,
            &[
                (0, "the function, and the direction dx"),
                (
                    start,
                    "the tangent of f: the vjp from a seed u (a fill), then its vjp along dx w.r.t. u"
                ),
            ]
        )
    );
    let mut recorded = Vec::new();
    for i in 0..=f.index() {
        recorded.push(rec.jvp(tape.id(i)?, &[(x, dx)])?);
    }
    let mut oracle = Run::new(&rec);
    oracle.set(x, Tensor::new(shape, at.to_vec())?)?;
    oracle.set(dx, Tensor::new(shape, v.to_vec())?)?;
    oracle.forward()?;

    // Every node: dual tangent == recorded tangent.
    for (i, t) in recorded.iter().enumerate() {
        let id = tape.id(i)?;
        let dt = tangents(&dual.value(id).expect("computed").data);
        let rt = match t {
            Some(t) => oracle.value(*t).expect("computed").data.clone(),
            None => vec![0.0; dt.len()],
        };
        if i < apart_from {
            assert_eq!(bits(&dt), bits(&rt), "node {i}: tangent");
        } else {
            for (d, r) in dt.iter().zip(&rt) {
                assert!((d - r).abs() <= tolerance * d.abs().max(r.abs()).max(1.0));
            }
        }
    }
    let fwd = dual.value(f).expect("computed").data[0];
    let recorded = oracle
        .value(tangent_of_f.expect("f depends on x"))
        .expect("computed");
    assert_eq!(bits(&[fwd.t]), bits(&recorded.data), "tangent of f");
    if apart_from > f.index() {
        println!("dual tangents == recorded tangents run by the oracle: every node, bit for bit");
    } else {
        println!(
            "dual tangents == recorded tangents run by the oracle: bit for bit before node \
             {apart_from}, within {tolerance:e} from it on"
        );
    }

    // Reverse mode: the oracle, then grad · v.
    let mut rev = Run::new(tape);
    rev.set(x, Tensor::new(shape, at.to_vec())?)?;
    let g = rev.backward(f, Tensor::scalar(1.0), &[x])?;
    let dot = g
        .get(x)
        .expect("reached")
        .data
        .iter()
        .zip(v)
        .map(|(a, b)| a * b)
        .fold(0.0, |s, p| s + p);
    // The value part is the f32 forward, bit for bit.
    rev.forward_until(f)?;
    assert_eq!(
        fwd.v.to_bits(),
        rev.value(f).expect("computed").data[0].to_bits()
    );
    Ok((fwd.t, dot))
}

fn main() -> Result<(), TapeError> {
    // 1. A scalar input: f = tanh(x)·x³ at x = 0.75, direction 1.
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::SCALAR);
    let f = {
        let mut t = tape.trace();
        let xx = t.mul(&x, &x)?;
        let xxx = t.mul(&xx, &x)?;
        let th = t.tanh(&x)?;
        t.mul(&th, &xxx)?
    };
    println!("scalar  f = tanh(x)·x³ at 0.75, direction 1");
    let (fwd, rev) = directional(&tape, x, f, &[0.75], &[1.0], (usize::MAX, 0.0))?;
    println!("scalar  forward tangent {fwd:e}, reverse gradient {rev:e}");
    assert_eq!(fwd.to_bits(), rev.to_bits(), "scalar case: same bits");
    println!("        same bits\n");

    // 2. A small network: f = sum(sqrt(log(exp(softplus(tanh(x·W)))))), x a vector,
    //    direction v.
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::matrix(1, 4));
    let (s, f) = {
        let mut t = tape.trace();
        let w = t.fill(0.5, Shape::matrix(4, 3))?;
        let h = t.matmul(&x, &w)?;
        let a = t.tanh(&h)?;
        let s = t.softplus(&a)?;
        let e = t.exp(&s)?;
        let l = t.log(&e)?;
        let r = t.sqrt(&l)?;
        (s, t.sum_all(&r)?)
    };
    let at = [0.3, -0.7, 1.1, 0.2];
    let v = [1.0, 0.5, -0.25, 2.0];
    println!("vector  f = sum(sqrt(log(exp(softplus(tanh(x·W)))))), x = {at:?}, v = {v:?}");
    let (fwd, rev) = directional(&tape, x, f, &at, &v, (s.index(), 1e-6))?;
    let rel = ((fwd - rev) / rev).abs();
    println!("vector  ∇f·v: forward {fwd:e}, reverse {rev:e}, relative difference {rel:e}");
    assert!(rel <= 1e-5, "vector case: within 1e-5 relative");
    println!("        within the stated 1e-5 (reverse sums gᵢvᵢ in another order)\n");

    // 3. Forward over reverse: a recorded gradient is ordinary graph, so its tangent along v is
    //    the Hessian-vector product. Plate 1: f = sum(x³), ∇f = 3x², H v = 6x·v.
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::vector(3));
    let f = {
        let mut t = tape.trace();
        let xx = t.mul(&x, &x)?;
        let xxx = t.mul(&xx, &x)?;
        t.sum_all(&xxx)?
    };
    let g = *tape.differentiate(f, &[x])?.get(x).expect("x is reached");
    let (xs, vs) = (vec![0.5, -0.25, 1.5], vec![0.25, 1.0, -0.5]);
    let s = Shape::vector(3);
    let before = tape.len();
    let dx = tape.input("dx", s);
    let hv = tape.jvp(g, &[(x, dx)])?.expect("the gradient depends on x");
    let mut run = Run::new(&tape);
    run.set(x, Tensor::new(s, xs.clone())?)?;
    run.set(dx, Tensor::new(s, vs.clone())?)?;
    run.forward()?;
    let fwd = run.value(hv).expect("computed").data.clone();
    let mut dual: RunAs<Dual> = RunAs::new(&tape);
    dual.set(x, TensorOf::new(s, pairs(&xs, &vs))?)?;
    dual.forward_until(g)?;
    let dt = tangents(&dual.value(g).expect("computed").data);
    let rr = run.backward(g, Tensor::new(s, vs)?, &[x])?;
    let rr = &rr.get(x).expect("reached").data;
    println!("f = sum(x·x·x) at x = (0.5, -0.25, 1.5), direction v = (0.25, 1, -0.5): H v = 6x·v");
    println!(
        "forward over reverse, recorded  H v = {fwd:?} (the gradient's jvp, {} more nodes)",
        tape.len() - before
    );
    println!("forward over reverse, computed  H v = {dt:?} (the gradient over dual numbers)");
    println!("reverse over reverse            H v = {rr:?}");
    assert_eq!(bits(&fwd), bits(rr), "Plate 1's H v: same bits");
    assert_eq!(bits(&fwd), bits(&dt), "Plate 1's H v: same bits");
    println!("        same bits");
    Ok(())
}
