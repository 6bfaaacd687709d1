//! The exhibit of Plate 1: a second derivative is reverse mode of a recorded gradient.
//!
//! f = sum(x·x·x) at x = (0.5, -0.25, 1.5): gradient 3x² = (0.75, 0.1875, 6.75); along
//! v = (0.25, 1, -0.5) the Hessian-vector product is 6x·v = (0.75, -1.5, -4.5). Both come from
//! recorded nodes, evaluated by the tape interpreter, and are checked against the oracle.
//!
//! Run with `cargo run -p tapeplan-core --example hvp`.

use tapeplan_core::{describe, Recordable, Run, Shape, Tape, TapeError, Tensor};

fn main() -> Result<(), TapeError> {
    let x_vals = vec![0.5, -0.25, 1.5];
    let v_vals = vec![0.25, 1.0, -0.5];
    let mut tape = Tape::new();
    let x = tape.parameter("x", Shape::vector(3));
    let f = {
        let mut t = tape.trace();
        let xx = t.mul(&x, &x)?;
        let xxx = t.mul(&xx, &x)?;
        t.sum_all(&xxx)?
    };
    let first = tape.len();
    let g = *tape.differentiate(f, &[x])?.get(x).expect("x is reached");
    let second = tape.len();
    let v = tape.input("v", Shape::vector(3));
    let hv = *tape.vjp(g, v, &[x])?.get(x).expect("x is reached");

    let mut run = Run::new(&tape);
    run.set(x, Tensor::new(Shape::vector(3), x_vals.clone())?)?;
    run.set(v, Tensor::new(Shape::vector(3), v_vals.clone())?)?;
    run.forward()?;
    let grad = run.value(g).expect("computed").data.clone();
    let hvp = run.value(hv).expect("computed").data.clone();

    println!("x                 = {x_vals:?}");
    println!("gradient  3 x^2   = {grad:?}");
    println!("direction v       = {v_vals:?}");
    println!("H v       6 x . v = {hvp:?}");
    println!();
    print!(
        "{}",
        describe(
            &tape,
            &[
                (first, "the first derivative, recorded over f"),
                (second, "the second derivative, recorded over the first"),
            ]
        )
    );

    assert_eq!(grad, [0.75, 0.1875, 6.75]);
    assert_eq!(hvp, [0.75, -1.5, -4.5]);
    // The oracle: the engine reverse scan over the recorded first-order graph.
    let oracle = run.backward(g, Tensor::new(Shape::vector(3), v_vals)?, &[x])?;
    assert_eq!(oracle.get(x).expect("reached").data, hvp);
    println!("recorded second derivative == oracle reverse scan, bit for bit");
    Ok(())
}
