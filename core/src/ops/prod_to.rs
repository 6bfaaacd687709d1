//! `prod_to`: the product of `x` down to a target shape that broadcasts back (a product over
//! the axes the target keeps at extent 1; ONNX's `ReduceProd` with `keepdims = 1`, PyTorch's
//! `prod`).
//!
//! Rule, with no division (so right with one zero and with two zeros in a group):
//! `x̄ += broadcast(ḡ, shape(x)) * (cumprod_exclusive(x, forward) * cumprod_exclusive(x,
//! reverse))`, the two exclusive cumulative products ([`super::cumprod_exclusive`]) over the same
//! groups: element `i` gets the product of every other element of its group (the product of
//! those before it times the product of those after it). Their rules speak
//! [`super::affine_scan`], whose rule speaks itself: second order closes.
//!
//! An instruction: no composition reproduces a product's bits or survives its zeros and signs
//! (`exp(sum_to(log |x|))` rounds differently, and needs the sign and the zeros apart).
//!
//! A group is the set of elements of `x` that reduce to one output element; its order is
//! increasing flat index (row-major), the order every kernel of this family walks it in.

use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Element, Recordable, Shape};

/// The shape rule: `sum_to`'s.
pub(crate) use super::sum_to::infer;

/// The reference kernel.
///
/// # Arithmetic order
/// Every output starts at `1`; the input is walked once in increasing row-major index order
/// and each element multiplies (`acc = acc * x[i]`) the output it maps to. So each output is
/// the product of its group left to right.
pub fn kernel<E: Element>(x: &[E], x_shape: Shape, out: &mut [E], out_shape: Shape) {
    super::sum_to::fold_to(x, x_shape, out, out_shape, E::ONE, |acc, v| acc * v);
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    kernel(k.arg(0), k.shape(0), k.out, k.out_shape);
    Ok(())
}

/// The axes of `x` that reduce to `target` (right-aligned, NumPy's broadcasting): the leading
/// axes `target` lacks and those it keeps at extent 1, as a bit mask.
pub(crate) fn reduced_axes(x: Shape, target: Shape) -> u8 {
    let lead = x.rank().saturating_sub(target.rank());
    let mut mask = 0u8;
    for k in 0..x.rank() {
        let t = if k < lead {
            1
        } else {
            target.dim(k - lead).unwrap_or(1)
        };
        if t == 1 {
            mask |= 1 << k;
        }
    }
    mask
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let d = want(v.wants[0], || {
        let x = v.args[0];
        let (s, t) = (r.shape_of(x), r.shape_of(v.out));
        let axes = reduced_axes(s, t);
        let before = r.cumprod_exclusive(x, axes, false)?;
        let after = r.cumprod_exclusive(x, axes, true)?;
        let others = r.mul(&before, &after)?;
        let g = r.broadcast(v.cotangent, s)?;
        r.mul(&g, &others)
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
            &[1., 2., 3., -4., 0.5, 0.0],
            xs,
            &mut rows,
            Shape::matrix(2, 1),
        );
        assert_eq!(rows, [6., -0.0]);
        assert_eq!(rows[1].to_bits(), 0x8000_0000);
        let mut cols = [0.0f32; 3];
        super::kernel(
            &[1., 2., 3., -4., 0.5, 0.0],
            xs,
            &mut cols,
            Shape::vector(3),
        );
        assert_eq!(cols, [-4., 1., 0.]);
        assert_eq!(
            super::reduced_axes(
                Shape::new(&[2, 3, 4]).unwrap(),
                Shape::new(&[3, 1]).unwrap()
            ),
            0b101
        );
    }
}
