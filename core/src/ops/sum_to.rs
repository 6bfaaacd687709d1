//! `sum_to`: sums `x` down to a target shape that broadcasts back to `x`'s shape (NumPy's
//! `sum_to_size`; a full sum is `sum_to(x, [])`).
//!
//! Rule: `x̄ += broadcast(ḡ, shape(x))`.

use super::{target_of, want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// The shape rule of `sum_to` and `max_to`: the target must broadcast back to `x`'s shape.
///
/// # Errors
/// [`OpError::BadTarget`] otherwise.
#[inline(always)]
pub fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let (x, target) = (super::nth(args, 0), target_of(op, attr)?);
    if !target.broadcasts_to(&x) {
        return Err(OpError::BadTarget {
            op,
            from: x,
            to: target,
        });
    }
    Ok(target)
}

/// The reference kernel.
///
/// # Arithmetic order (the definition of the bits)
/// Every output element starts at `+0.0`; then the input is walked once in increasing row-major
/// index order and each element is added (`acc = acc + x[i]`) to the output it maps to. So each
/// output accumulates its inputs in increasing index order, sequentially. A vectorized kernel
/// may vectorize across outputs (e.g. across the columns of a `[batch, n] -> [n]` reduction),
/// never across one output's inputs.
pub fn kernel<E: Element>(x: &[E], x_shape: Shape, out: &mut [E], out_shape: Shape) {
    fold_to(x, x_shape, out, out_shape, E::ZERO, |acc, v| acc + v);
}

/// The walk of the reductions to a target (`sum_to`, `prod_to`): every output starts at
/// `init`; the input is walked once in increasing row-major index order and each element is
/// folded (`acc = f(acc, x[i])`) into the output it maps to.
#[inline(always)]
pub(crate) fn fold_to<E: Copy>(
    x: &[E],
    x_shape: Shape,
    out: &mut [E],
    out_shape: Shape,
    init: E,
    f: impl Fn(E, E) -> E,
) {
    for o in out.iter_mut() {
        *o = init;
    }
    for (i, &v) in x.iter().enumerate() {
        if let Some(o) = out.get_mut(out_shape.broadcast_source_index(&x_shape, i)) {
            *o = f(*o, v);
        }
    }
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    kernel(k.arg(0), k.shape(0), k.out, k.out_shape);
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let s = r.shape_of(v.args[0]);
    Ok([
        want(v.wants[0], || r.broadcast(v.cotangent, s))?,
        None,
        None,
    ])
}

#[cfg(test)]
mod tests {
    use crate::Shape;

    #[test]
    fn literal() {
        let xs = Shape::matrix(2, 3);
        let x = [1., 2., 3., 4., 5., 6.];
        let mut cols = [0.0f32; 3];
        super::kernel(&x, xs, &mut cols, Shape::vector(3));
        assert_eq!(cols, [5., 7., 9.]);
        let mut rows = [0.0f32; 2];
        super::kernel(&x, xs, &mut rows, Shape::matrix(2, 1));
        assert_eq!(rows, [6., 15.]);
        let mut all = [0.0f32];
        super::kernel(&x, xs, &mut all, Shape::SCALAR);
        assert_eq!(all, [21.]);
    }
}
