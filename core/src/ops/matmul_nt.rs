//! `matmul_nt`: the matrix product `a · bᵀ`, `[m, k] x [n, k] -> [m, n]` (the input gradient `ḡ · wᵀ`), bit for bit `matmul(a, transpose(b))` without the transpose
//! in the arena (issues 14 and 15: the planner's `transpose_fold` folds a `transpose` read only
//! by products into them). Batched at rank 3 as `matmul`: `[b, m, k] x [b, n, k] -> [b, m, n]`.
//!
//! It earns an instruction (rather than a catalog entry) because the composition it replaces
//! needs the transposed operand's whole buffer in the arena. Its bits are `matmul`'s over the
//! transposed operand ([`super::matmul::kernel_transposed`]): a transpose is exact, so the
//! order of every sum is the same.
//!
//! Rule: `Ā += ḡ · b` (a `matmul`), `B̄ += ḡᵀ · a` (a `matmul_tn`).

use super::matmul::{eval_transposed, infer_transposed, Transposed};
use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// Which operand is read transposed.
const T: Transposed = Transposed { a: false, b: true };

/// The shape rule: `a: [m, k]`, `b: [n, k]` give `[m, n]`; `a: [b, m, k]`, `b: [b, n, k]` give `[b, m, n]`.
///
/// # Errors
/// [`OpError::NotMatrix`] for an argument of rank other than 2 or 3;
/// [`OpError::ShapeMismatch`] for arguments of two ranks, or when the inner (or the batch)
/// extents differ.
#[inline(always)]
pub fn infer(op: Opcode, _attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    infer_transposed(op, args, T)
}

/// The reference kernel: row-major `a: [m, k]`, `b: [n, k]`, `out: [m, n]`; `fma` selects the `fma` arithmetic profile's step.
///
/// # Arithmetic order (the definition of the bits)
/// [`super::matmul::kernel_transposed`]'s: each `out[i, j]` starts from `+0.0` and accumulates
/// over `p = 0, 1, …, k-1` in increasing order (`matmul`'s [`super::matmul::kernel`], or
/// [`super::matmul::kernel_fma`] under `fma`, over the transposed operand).
///
/// Writes nothing if a buffer is shorter than its shape needs.
pub fn kernel<E: Element>(
    a: &[E],
    b: &[E],
    out: &mut [E],
    (m, k, n): (usize, usize, usize),
    fma: bool,
) {
    super::matmul::kernel_transposed(a, b, out, (m, k, n), T, fma);
}

/// Through [`kernel`], once per batch index (a matrix is one batch).
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    eval_transposed(k, T)
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let g = v.cotangent;
    let (a, b) = (v.args[0], v.args[1]);
    let da = want(v.wants[0], || r.matmul(g, b))?;
    let db = want(v.wants[1], || r.matmul_tn(g, a))?;
    Ok([da, db, None])
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn same_bits_as_matmul_of_the_transpose() {
        crate::ops::matmul::tests::assert_same_bits_as_matmul_of_the_transpose(T, kernel);
    }

    #[test]
    fn order_is_increasing_k_from_zero() {
        // 1e8 + 1 − 1e8 in f32, left to right: 0 (k = 3, m = n = 1: storage is the same
        // whichever operand is transposed).
        let mut out = [9.0f32];
        kernel(
            &[1e8, 1.0, -1e8],
            &[1.0, 1.0, 1.0],
            &mut out,
            (1, 3, 1),
            false,
        );
        assert_eq!(out, [0.0]);
    }

    #[test]
    fn shape_rule() {
        let op = Opcode::MatMulNt;
        let none = Attr::NONE;
        assert_eq!(
            infer(op, none, &[Shape::matrix(2, 3), Shape::matrix(4, 3)]),
            Ok(Shape::matrix(2, 4))
        );
        assert!(infer(op, none, &[Shape::matrix(2, 3), Shape::matrix(3, 4)]).is_err());
        let (a3, b3) = (
            Shape::new(&[5, 2, 3]).unwrap(),
            Shape::new(&[5, 4, 3]).unwrap(),
        );
        assert_eq!(
            infer(op, none, &[a3, b3]),
            Ok(Shape::new(&[5, 2, 4]).unwrap())
        );
        assert!(infer(op, none, &[a3, Shape::new(&[4, 4, 3]).unwrap()]).is_err());
        assert!(infer(op, none, &[a3, Shape::matrix(4, 3)]).is_err());
        assert!(infer(op, none, &[Shape::vector(3), Shape::matrix(3, 3)]).is_err());
    }
}
