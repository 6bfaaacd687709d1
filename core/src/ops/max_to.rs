//! `max_to`: the maximum of `x` down to a target shape that broadcasts back (a max-reduction
//! over the axes the target keeps at extent 1).
//!
//! Rule (ties split evenly, as `jnp.max` and `torch.amax` do):
//! `m = equal(x, broadcast(y, shape(x)))`, `n = sum_to(m, shape(y))`,
//! `x̄ += broadcast(ḡ / (n + equal(n, 0)), shape(x)) * m`: the elements equal to their group's
//! maximum share its cotangent equally (each gets `ḡ / n`), so the gradient of a group sums to
//! `ḡ` (up to the rounding of `ḡ / n`), whatever the ties. Without a tie `n = 1` and `ḡ / 1` is
//! `ḡ`: the same bits as the rule before (every maximum received the whole cotangent, so the
//! gradient of `max_to([3, 0, 3, 3])` summed to 3). A group whose maximum is NaN has no element
//! equal to it (`n = 0`, divided as 1): its gradient is zero. (`max_pool` keeps its own rule:
//! the first maximum of each window takes the whole cotangent, as PyTorch's max pool with
//! indices does.)

use crate::Element;

use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::Recordable;
use crate::Shape;

/// The shape rule: `sum_to`'s.
pub(crate) use super::sum_to::infer;

/// The reference kernel.
///
/// # Arithmetic order
/// Every output starts at `-inf`; the input is walked in increasing row-major index order and an
/// output takes a value when the value is NaN or greater than what it holds, unless it already
/// holds NaN. So NaN propagates, and among equal values (`-0` and `+0` included) the first wins.
pub fn kernel<E: Element>(x: &[E], x_shape: Shape, out: &mut [E], out_shape: Shape) {
    for o in out.iter_mut() {
        *o = E::NEG_INFINITY;
    }
    for (i, &v) in x.iter().enumerate() {
        if let Some(o) = out.get_mut(out_shape.broadcast_source_index(&x_shape, i)) {
            if !o.is_nan() && (v.is_nan() || v > *o) {
                *o = v;
            }
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
    let d = want(v.wants[0], || {
        let x = v.args[0];
        let (s, t) = (r.shape_of(x), r.shape_of(v.out));
        let y = r.broadcast(v.out, s)?;
        let mask = r.equal(x, &y)?;
        let n = r.sum_to(&mask, t)?;
        let zero = r.fill(0.0, t)?;
        let none = r.equal(&n, &zero)?;
        let n = r.add(&n, &none)?;
        let share = r.div(v.cotangent, &n)?;
        let g = r.broadcast(&share, s)?;
        r.mul(&g, &mask)
    })?;
    Ok([d, None, None])
}

#[cfg(test)]
mod tests {
    use crate::Shape;

    #[test]
    fn literal() {
        let xs = Shape::matrix(2, 3);
        let mut rows = [0.0f32; 2];
        super::kernel(
            &[1., 5., 3., -4., -2., -9.],
            xs,
            &mut rows,
            Shape::matrix(2, 1),
        );
        assert_eq!(rows, [5., -2.]);
        let mut first_zero = [0.0f32];
        super::kernel(
            &[-0.0, 0.0],
            Shape::vector(2),
            &mut first_zero,
            Shape::SCALAR,
        );
        assert_eq!(first_zero[0].to_bits(), 0x8000_0000);
        let mut nan = [0.0f32];
        super::kernel(
            &[1.0, f32::NAN, 2.0],
            Shape::vector(3),
            &mut nan,
            Shape::SCALAR,
        );
        assert!(nan[0].is_nan());
    }
}
