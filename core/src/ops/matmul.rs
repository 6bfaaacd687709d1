//! `matmul`: the matrix product `[m, k] x [k, n] -> [m, n]`.
//!
//! Rule: `Ā += ḡ · Bᵀ`, `B̄ += Aᵀ · ḡ` (spoken as `matmul` and `transpose`).

use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// The shape rule: `[m, k] x [k, n] -> [m, n]`.
///
/// # Errors
/// [`OpError::NotMatrix`] for an argument of rank other than 2; [`OpError::ShapeMismatch`]
/// when the inner extents differ.
#[inline(always)]
pub fn infer(op: Opcode, _attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let (a, b) = (super::nth(args, 0), super::nth(args, 1));
    for s in [a, b] {
        if s.rank() != 2 {
            return Err(OpError::NotMatrix { op, shape: s });
        }
    }
    let [m, k, _, _] = a.dims();
    let [k2, n, _, _] = b.dims();
    if k != k2 {
        return Err(OpError::ShapeMismatch { op, lhs: a, rhs: b });
    }
    Ok(Shape::new(&[m, n])?)
}

/// The reference kernel. Row-major `a: [m, k]`, `b: [k, n]`, `out: [m, n]`.
///
/// # Arithmetic order (the definition of the bits)
/// Each output element is accumulated on its own, starting from `+0.0`, over `p = 0, 1, …, k-1`
/// in increasing order: `acc = acc + a[i, p] * b[p, j]`, a rounded product then a rounded sum
/// (never a fused multiply-add). A vectorized kernel vectorizes across `j` (independent outputs)
/// and keeps this order for each output.
///
/// Stops early (writes nothing further) if a buffer is shorter than its shape needs; the
/// dispatcher [`super::eval`] checks lengths first.
pub fn kernel<E: Element>(a: &[E], b: &[E], out: &mut [E], m: usize, k: usize, n: usize) {
    if a.len() < m * k || b.len() < k * n || out.len() < m * n {
        return;
    }
    for i in 0..m {
        let row = &mut out[i * n..(i + 1) * n];
        for o in row.iter_mut() {
            *o = E::ZERO;
        }
        for p in 0..k {
            let x = a[i * k + p];
            let brow = &b[p * n..(p + 1) * n];
            for (o, &y) in row.iter_mut().zip(brow) {
                *o = *o + x * y;
            }
        }
    }
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    let [m, kk, _, _] = k.shape(0).dims();
    let n = k.shape(1).dim(1).unwrap_or(0);
    kernel(k.arg(0), k.arg(1), k.out, m, kk, n);
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let g = v.cotangent;
    let (a, b) = (v.args[0], v.args[1]);
    let da = want(v.wants[0], || {
        let bt = r.transpose(b)?;
        r.matmul(g, &bt)
    })?;
    let db = want(v.wants[1], || {
        let at = r.transpose(a)?;
        r.matmul(&at, g)
    })?;
    Ok([da, db, None])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal() {
        // [[1, 2], [3, 4]] x [[5, 6], [7, 8]] = [[19, 22], [43, 50]]
        let mut out = [0.0f32; 4];
        kernel(&[1., 2., 3., 4.], &[5., 6., 7., 8.], &mut out, 2, 2, 2);
        assert_eq!(out, [19., 22., 43., 50.]);
    }

    #[test]
    fn order_is_increasing_k_from_zero() {
        // 1e8 + 1 - 1e8 in f32, left to right: (0 + 1e8) + 1 = 1e8, then - 1e8 = 0.
        let mut out = [9.0f32];
        kernel(&[1e8, 1.0, -1e8], &[1.0, 1.0, 1.0], &mut out, 1, 3, 1);
        assert_eq!(out, [0.0]);
    }

    #[test]
    fn shape_rule() {
        let a = Shape::matrix(2, 3);
        let (op, none) = (Opcode::MatMul, Attr::None);
        assert_eq!(
            infer(op, none, &[a, Shape::matrix(3, 4)]),
            Ok(Shape::matrix(2, 4))
        );
        assert!(infer(op, none, &[a, Shape::matrix(2, 4)]).is_err());
        assert!(infer(op, none, &[Shape::vector(3), a]).is_err());
    }
}
