//! `transpose`: `[m, n] -> [n, m]`, and the last two axes of a batch of matrices
//! `[b, m, n] -> [b, n, m]`: a pure permutation of the elements (exact).
//!
//! Rule: `x̄ += ḡᵀ`.

use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// The shape rule: the last two extents swapped (rank 2 or 3).
///
/// # Errors
/// [`OpError::NotMatrix`] for a rank other than 2 or 3.
#[inline(always)]
pub fn infer(op: Opcode, _attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let x = super::nth(args, 0);
    match x.dims() {
        [m, n, _, _] if x.rank() == 2 => Ok(Shape::new(&[n, m])?),
        [b, m, n, _] if x.rank() == 3 => Ok(Shape::new(&[b, n, m])?),
        _ => Err(OpError::NotMatrix { op, shape: x }),
    }
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

/// Through [`kernel`], once per batch index (a matrix is one batch).
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    let [batch, m, n] = super::matmul::batched(k.shape(0));
    let x = k.arg(0);
    for (i, out) in k
        .out
        .chunks_exact_mut((m * n).max(1))
        .take(batch)
        .enumerate()
    {
        if let Some(x) = x.get(i * m * n..(i + 1) * m * n) {
            kernel(x, out, m, n);
        }
    }
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
        // A batch of two [2, 3] matrices, each transposed.
        let s = crate::Shape::new(&[2, 2, 3]).unwrap();
        let op = crate::Opcode::Transpose;
        assert_eq!(
            super::infer(op, crate::Attr::None, &[s]),
            Ok(crate::Shape::new(&[2, 3, 2]).unwrap())
        );
        let mut out = [0.0f32; 12];
        crate::ops::eval(
            op,
            crate::Attr::None,
            crate::MathProfile::Precise,
            &[&[0., 1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11.]],
            &[s],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [0., 3., 1., 4., 2., 5., 6., 9., 7., 10., 8., 11.]);
    }
}
