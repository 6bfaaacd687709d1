//! The small cases of the design's seed documents, with their literal values.

use tapeplan_core::{describe, Recordable, Run, Shape, Tape, Tensor};

fn grad_of(
    tape: &Tape,
    x: tapeplan_core::NodeId,
    f: tapeplan_core::NodeId,
    at: &[f32],
) -> Vec<f32> {
    let mut run = Run::new(tape);
    run.set(
        x,
        Tensor::new(Shape::vector(at.len()), at.to_vec()).unwrap(),
    )
    .unwrap();
    let adj = run.backward(f, Tensor::scalar(1.0), &[x]).unwrap();
    adj.get(x).unwrap().data.clone()
}

#[test]
fn two_square_branches_give_4x_and_detach_gives_2x() {
    // sum(x*x + x*x) at x = (3, -1.5): gradient 4x = (12, -6).
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::vector(2));
    let f = {
        let mut t = tape.trace();
        let a = t.mul(&x, &x).unwrap();
        let b = t.mul(&x, &x).unwrap();
        let z = t.add(&a, &b).unwrap();
        t.sum_all(&z).unwrap()
    };
    assert_eq!(grad_of(&tape, x, f, &[3.0, -1.5]), [12.0, -6.0]);
    // Both products name node 0 twice.
    assert_eq!(tape.nodes()[1].arg_indices(), [0, 0]);

    // With the second product detached: 2x = (6, -3), and the forward edge stays visible.
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::vector(2));
    let f = {
        let mut t = tape.trace();
        let a = t.mul(&x, &x).unwrap();
        let b = t.mul(&x, &x).unwrap();
        let b = t.detach(&b).unwrap();
        let z = t.add(&a, &b).unwrap();
        t.sum_all(&z).unwrap()
    };
    assert_eq!(grad_of(&tape, x, f, &[3.0, -1.5]), [6.0, -3.0]);
    let ops: Vec<&str> = tape.nodes().iter().map(|n| n.op.name()).collect();
    assert_eq!(ops, ["input", "mul", "mul", "detach", "add", "sum_to"]);
    assert_eq!(tape.nodes()[3].arg_indices(), [2]);
    assert_eq!(tape.nodes()[4].arg_indices(), [1, 3]);
    let listing = describe(&tape, &[]);
    assert!(listing.contains("   3  detach         2"), "{listing}");
    assert!(
        listing.ends_with("tape: 6 nodes, 0 parameters, 1 input\n"),
        "{listing}"
    );
}

#[test]
fn cube_gradient_is_3x_squared_in_both_readings() {
    let mut tape = Tape::new();
    let x = tape.parameter("x", Shape::vector(3));
    let f = {
        let mut t = tape.trace();
        let xx = t.mul(&x, &x).unwrap();
        let xxx = t.mul(&xx, &x).unwrap();
        t.sum_all(&xxx).unwrap()
    };
    let at = [0.5, -0.25, 1.5];
    let oracle = grad_of(&tape, x, f, &at);
    assert_eq!(oracle, [0.75, 0.1875, 6.75]);
    let g = tape.differentiate(f, &[x]).unwrap();
    let dx = *g.get(x).unwrap();
    let mut run = Run::new(&tape);
    run.set(x, Tensor::new(Shape::vector(3), at.to_vec()).unwrap())
        .unwrap();
    run.forward_until(dx).unwrap();
    assert_eq!(run.value(dx).unwrap().data, oracle);
}

#[test]
fn a_dead_branch_never_poisons_a_gradient() {
    // f = sum(x) + sum(detach(log(x - x))). The log node depends on x and is an ancestor of f,
    // but the detach means it is never reached: its rule (g / (x - x) = 0 / 0 if it were run
    // with a zero cotangent) is never evaluated, and the gradient stays (1, 1).
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::vector(2));
    let z = tape.input("z", Shape::vector(2));
    let (f, log_node) = {
        let mut t = tape.trace();
        let zero = t.sub(&x, &x).unwrap();
        let bad = t.log(&zero).unwrap(); // -inf
        let cut = t.detach(&bad).unwrap();
        let sb = t.sum_all(&cut).unwrap();
        let sx = t.sum_all(&x).unwrap();
        let sz = t.sum_all(&z).unwrap();
        let a = t.add(&sx, &sb).unwrap();
        (t.add(&a, &sz).unwrap(), bad)
    };
    let mut run = Run::new(&tape);
    run.set(x, Tensor::new(Shape::vector(2), vec![1.0, 2.0]).unwrap())
        .unwrap();
    run.set(z, Tensor::new(Shape::vector(2), vec![1.0, 1.0]).unwrap())
        .unwrap();
    let adj = run.backward(f, Tensor::scalar(1.0), &[x]).unwrap();
    assert_eq!(run.value(f).unwrap().data[0], f32::NEG_INFINITY);
    assert_eq!(adj.get(x).unwrap().data, [1.0, 1.0]);
    assert!(!adj.reached(log_node), "behind a detach: not reached");
    assert!(!adj.reached(z), "z is not differentiated: not reached");
    // The recorded reading agrees, bit for bit.
    let g = tape.differentiate(f, &[x]).unwrap();
    let dx = *g.get(x).unwrap();
    let mut run = Run::new(&tape);
    run.set(x, Tensor::new(Shape::vector(2), vec![1.0, 2.0]).unwrap())
        .unwrap();
    run.set(z, Tensor::new(Shape::vector(2), vec![1.0, 1.0]).unwrap())
        .unwrap();
    run.forward_until(dx).unwrap();
    assert_eq!(run.value(dx).unwrap().data, [1.0, 1.0]);
}

#[test]
fn backward_validation_answers_errors() {
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::vector(2));
    let f = tape.trace().sum_all(&x).unwrap();
    let mut run = Run::new(&tape);
    run.set(x, Tensor::new(Shape::vector(2), vec![1.0, 2.0]).unwrap())
        .unwrap();
    let wrong_seed = Tensor::new(Shape::vector(2), vec![1.0, 1.0]).unwrap();
    assert!(matches!(
        run.backward(f, wrong_seed, &[x]),
        Err(tapeplan_core::TapeError::SeedShape { .. })
    ));
    let mut other_tape = Tape::new();
    let y = other_tape.input("y", Shape::vector(1));
    assert!(matches!(
        run.backward(y, Tensor::scalar(1.0), &[x]),
        Err(tapeplan_core::TapeError::ForeignHandle { .. })
    ));
    // Recording with incompatible shapes is an error value.
    let v3 = tape.input("v", Shape::vector(3));
    assert!(tape.trace().add(&x, &v3).is_err());
}
