//! Rounding-error reports: an `f32` tape interpreted again in `f64` through the same reference
//! kernels (the element seam), node by node.

use tapeplan_core::{ArithProfile, MathProfile, NodeId, RunAs, Tape, TapeError, TensorOf};

/// How far one node's `f32` value is from the same computation in `f64`.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeError {
    /// The node.
    pub node: NodeId,
    /// The largest `|f32 - f64|` over its elements.
    pub max_abs: f64,
    /// The largest `|f32 - f64| / |f64|` over its elements whose `f64` value is not zero.
    pub max_rel: f64,
}

/// Interprets `tape` up to `last` in `f32` and in `f64` from the same leaf values (exact in
/// both) and reports every node's rounding error, in tape order.
///
/// # Errors
/// A missing leaf, a shape error.
pub fn rounding_errors(
    tape: &Tape,
    leaves: &[(NodeId, TensorOf<f32>)],
    last: NodeId,
) -> Result<Vec<NodeError>, TapeError> {
    rounding_errors_with(
        tape,
        leaves,
        last,
        MathProfile::Precise,
        ArithProfile::Separate,
    )
}

/// [`rounding_errors`] with the `f32` run under the math profile `math` and the arithmetic
/// profile `arith` (the `f64` run follows `arith` too: `libm::fma` in double). The `f64` run is
/// exact in both math profiles (`f64` has no fast profile of its own), so under `fast` the
/// report shows each node's approximation error as well as its rounding.
///
/// # Errors
/// A missing leaf, a shape error.
pub fn rounding_errors_with(
    tape: &Tape,
    leaves: &[(NodeId, TensorOf<f32>)],
    last: NodeId,
    math: MathProfile,
    arith: ArithProfile,
) -> Result<Vec<NodeError>, TapeError> {
    let mut single: RunAs<f32> = RunAs::with_math(tape, math).with_arith(arith);
    let mut double: RunAs<f64> = RunAs::with_math(tape, math).with_arith(arith);
    for (id, v) in leaves {
        single.set(*id, v.clone())?;
        double.set(*id, v.convert())?;
    }
    single.forward_until(last)?;
    double.forward_until(last)?;
    let mut out = Vec::new();
    for i in 0..=last.index() {
        let id = tape.id(i)?;
        let (Some(a), Some(b)) = (single.value(id), double.value(id)) else {
            continue;
        };
        let (mut max_abs, mut max_rel) = (0.0f64, 0.0f64);
        for (&x, &y) in a.data.iter().zip(&b.data) {
            let d = (f64::from(x) - y).abs();
            if d.is_finite() {
                max_abs = max_abs.max(d);
                if y != 0.0 {
                    max_rel = max_rel.max(d / y.abs());
                }
            }
        }
        out.push(NodeError {
            node: id,
            max_abs,
            max_rel,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapeplan_core::{Recordable, Shape};

    #[test]
    fn exact_operations_have_no_error_and_inexact_ones_do() {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::vector(2));
        let (exact, inexact) = {
            let mut t = tape.trace();
            let e = t.add(&x, &x).unwrap(); // doubling is exact
            let third = t.fill(1.0 / 3.0, Shape::vector(2)).unwrap();
            let i = t.div(&x, &third).unwrap();
            (e, t.exp(&i).unwrap())
        };
        let leaves = [(
            x,
            TensorOf::new(Shape::vector(2), vec![0.1f32, 0.7]).unwrap(),
        )];
        let r = rounding_errors(&tape, &leaves, inexact).unwrap();
        let of = |n: NodeId| r.iter().find(|e| e.node == n).unwrap().clone();
        assert_eq!(of(exact).max_abs, 0.0);
        let e = of(inexact);
        assert!(e.max_rel > 0.0 && e.max_rel < 1e-6, "{e:?}");
    }
}
