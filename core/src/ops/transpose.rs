//! `transpose`: `[m, n] -> [n, m]`, a pure permutation of the elements (exact).
//!
//! Rule: `x̄ += ḡᵀ`.

use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// The shape rule.
///
/// # Errors
/// [`OpError::NotMatrix`] for a non-matrix.
#[inline(always)]
pub fn infer(op: Opcode, _attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let x = super::nth(args, 0);
    if x.rank() != 2 {
        return Err(OpError::NotMatrix { op, shape: x });
    }
    let [m, n, _, _] = x.dims();
    Ok(Shape::new(&[n, m])?)
}

/// `out[j, i] = x[i, j]` for `x: [m, n]`. Writes nothing if a buffer is too short.
pub fn kernel<E: Element>(x: &[E], out: &mut [E], m: usize, n: usize) {
    if x.len() < m * n || out.len() < m * n {
        return;
    }
    for i in 0..m {
        for j in 0..n {
            out[j * m + i] = x[i * n + j];
        }
    }
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    let [m, n, _, _] = k.shape(0).dims();
    kernel(k.arg(0), k.out, m, n);
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    Ok([want(v.wants[0], || r.transpose(v.cotangent))?, None, None])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        let mut out = [0.0f32; 6];
        super::kernel(&[1., 2., 3., 4., 5., 6.], &mut out, 2, 3);
        assert_eq!(out, [1., 4., 2., 5., 3., 6.]);
    }
}
