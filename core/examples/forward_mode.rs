//! Forward mode: a pair `(value, tangent)` replayed over the same spec, two ways.
//!
//! There is no second list of derivative rules. The pair arithmetic is the forward-mode body:
//! `(a, a')·(b, b') = (ab, a'b + ab')` already is the product rule.
//!
//! - Computing the pairs: the reference kernels are generic over their element
//!   (`tapeplan_core::Element`), so a tape run over the number [`dual::Dual`] computes pairs.
//! - Recording the pairs: the payload [`dual::Pairs`] speaks the same pair arithmetic through any
//!   payload's operations. Over `Trace` it records the tangent computation as ordinary nodes on
//!   a new tape (printed below), which the oracle `Run` evaluates (and the planner plans and the
//!   runtime runs: `tests/tests/cross/forward_mode.rs`).
//!
//! Both live in `examples/dual/mod.rs`, outside the crate. The two readings agree bit for bit
//! on every node (asserted): the recorded arithmetic follows the order the kernels apply to the
//! element, `matmul`'s per-step product rule included. Every opcode of the table is covered
//! (see `dual/mod.rs` for the few whose order needed care: `matmul`, `max_to`, `sigmoid`,
//! `softplus`, the masks' NaN pass-through, `detach`, `pow` with exponent 0).
//!
//! The directional derivative `∇f · v` is the tangent of the output, checked against reverse
//! mode (`Run::backward`, the oracle): for the scalar input the two reach the same bits
//! (asserted); for the vector input reverse mode forms `Σ gᵢ vᵢ` in another order than the pairs
//! accumulate it, so they agree within a relative 1e-5 (stated and asserted below).
//!
//! Forward over reverse: a recorded gradient is ordinary graph, so replaying it over pairs gives
//! the Hessian-vector product as its tangent; on Plate 1 it has the same bits as reverse over
//! reverse (asserted).
//!
//! Run with `cargo run -p tapeplan-core --example forward_mode`.

mod dual;

use dual::{record_pairs, replay, Dual, Pair, Pairs};
use tapeplan_core::{
    describe, Compute, NodeId, Recordable, Run, RunAs, Shape, Tape, TapeError, Tensor, TensorOf,
};

/// Bit patterns, every NaN as one class.
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|x| if x.is_nan() { 0x7fc0_0000 } else { x.to_bits() })
        .collect()
}

/// The three readings of the pairs of `f` at `x = at` along `v`, checked against each other
/// node by node; answers the tangent of `f` and the reverse-mode `grad · v`.
fn directional(
    tape: &Tape,
    x: NodeId,
    f: NodeId,
    at: &[f32],
    v: &[f32],
) -> Result<(f32, f32), TapeError> {
    let shape = tape.shape(x)?;
    // 1. Computing the pairs through the element seam: one run over Dual.
    let mut run: RunAs<Dual> = RunAs::new(tape);
    let pairs = at.iter().zip(v).map(|(&a, &b)| Dual::new(a, b)).collect();
    run.set(x, TensorOf::new(shape, pairs)?)?;
    run.forward_until(f)?;

    // 2. The pair payload over Compute: the same arithmetic spoken through tensor operations.
    let seed = Pair {
        v: Tensor::new(shape, at.to_vec())?,
        t: Tensor::new(shape, v.to_vec())?,
    };
    let computed = replay(
        tape,
        f,
        &mut Pairs {
            inner: Compute::default(),
        },
        |_, _, _| Ok(seed.clone()),
    )?;

    // 3. Recording the pairs: the tangent computation as ordinary nodes, run by the oracle.
    let rec = record_pairs(tape, f, |_| true)?;
    let mut oracle = Run::new(&rec.tape);
    let leaf = rec
        .pair(x)
        .ok_or(TapeError::UnknownNode { index: x.index() })?;
    oracle.set(leaf.v, seed.v.clone())?;
    oracle.set(leaf.t, seed.t.clone())?;
    oracle.forward()?;
    println!(
        "{}",
        describe(
            &rec.tape,
            &[
                (0, "the leaves: x and its direction dx"),
                (rec.replay_start, "the spec replayed over pairs"),
            ]
        )
    );

    // Every node: element seam == pair payload over Compute == recorded pairs, bit for bit.
    for (i, (p, node)) in computed.iter().zip(tape.nodes()).enumerate() {
        let id = tape.id(i)?;
        let seam = run.value(id).expect("computed");
        let seam_v: Vec<f32> = seam.data.iter().map(|d| d.v).collect();
        let seam_t: Vec<f32> = seam.data.iter().map(|d| d.t).collect();
        assert_eq!(
            bits(&seam_v),
            bits(&p.v.data),
            "node {i} ({}): value",
            node.op
        );
        assert_eq!(
            bits(&seam_t),
            bits(&p.t.data),
            "node {i} ({}): tangent",
            node.op
        );
        let r = rec.pair(id).expect("replayed");
        let rv = &oracle.value(r.v).expect("computed").data;
        let rt = &oracle.value(r.t).expect("computed").data;
        assert_eq!(
            bits(&seam_v),
            bits(rv),
            "node {i} ({}): recorded value",
            node.op
        );
        assert_eq!(
            bits(&seam_t),
            bits(rt),
            "node {i} ({}): recorded tangent",
            node.op
        );
    }
    println!(
        "computed pairs (element seam) == pair payload over Compute == recorded pairs run by \
         the oracle: every node, bit for bit"
    );
    let fwd = run.value(f).expect("computed").data[0];

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
    let (fwd, rev) = directional(&tape, x, f, &[0.75], &[1.0])?;
    println!("scalar  forward tangent {fwd:e}, reverse gradient {rev:e}");
    assert_eq!(fwd.to_bits(), rev.to_bits(), "scalar case: same bits");
    println!("        same bits\n");

    // 2. A small network: f = sum(sqrt(log(exp(softplus(tanh(x·W)))))), x a vector,
    //    direction v.
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::matrix(1, 4));
    let f = {
        let mut t = tape.trace();
        let w = t.fill(0.5, Shape::matrix(4, 3))?;
        let h = t.matmul(&x, &w)?;
        let a = t.tanh(&h)?;
        let s = t.softplus(&a)?;
        let e = t.exp(&s)?;
        let l = t.log(&e)?;
        let r = t.sqrt(&l)?;
        t.sum_all(&r)?
    };
    let at = [0.3, -0.7, 1.1, 0.2];
    let v = [1.0, 0.5, -0.25, 2.0];
    println!("vector  f = sum(sqrt(log(exp(softplus(tanh(x·W)))))), x = {at:?}, v = {v:?}");
    let (fwd, rev) = directional(&tape, x, f, &at, &v)?;
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
    let rec = record_pairs(&tape, g, |_| true)?;
    let leaf = rec.pair(x).expect("a leaf");
    let hv = rec.pair(g).expect("replayed").t;
    let mut run = Run::new(&rec.tape);
    run.set(leaf.v, Tensor::new(s, xs.clone())?)?;
    run.set(leaf.t, Tensor::new(s, vs.clone())?)?;
    run.forward()?;
    let fwd = run.value(hv).expect("computed").data.clone();
    let mut rev = Run::new(&tape);
    rev.set(x, Tensor::new(s, xs)?)?;
    let rr = rev.backward(g, Tensor::new(s, vs)?, &[x])?;
    let rr = &rr.get(x).expect("reached").data;
    println!(
        "\nf = sum(x·x·x) at x = (0.5, -0.25, 1.5), direction v = (0.25, 1, -0.5): H v = 6x·v"
    );
    println!(
        "forward over reverse  H v = {fwd:?} (the gradient's tangent, {} nodes)",
        rec.tape.len()
    );
    println!("reverse over reverse  H v = {rr:?}");
    assert_eq!(bits(&fwd), bits(rr), "Plate 1's H v: same bits");
    println!("        same bits");
    Ok(())
}
