//! `matmul_tn`: the matrix product `aᵀ · b`, `[k, m] x [k, n] -> [m, n]` (the weight gradient `xᵀ · ḡ`), bit for bit `matmul(transpose(a), b)` without the transpose
//! in the arena (issues 14 and 15: the planner's `transpose_fold` folds a `transpose` read only
//! by products into them). Batched at rank 3 as `matmul`: `[b, k, m] x [b, k, n] -> [b, m, n]`.
//!
//! It earns an instruction (rather than a catalog entry) because the composition it replaces
//! needs the transposed operand's whole buffer in the arena. Its bits are `matmul`'s over the
//! transposed operand ([`super::matmul::kernel_transposed`]): a transpose is exact, so the
//! order of every sum is the same.
//!
//! Rule: `Ā += b · ḡᵀ` (a `matmul_nt`), `B̄ += a · ḡ` (a `matmul`).

use super::matmul::{eval_transposed, infer_transposed, Transposed};
use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// Which operand is read transposed.
const T: Transposed = Transposed { a: true, b: false };

/// The shape rule: `a: [k, m]`, `b: [k, n]` give `[m, n]`; `a: [b, k, m]`, `b: [b, k, n]` give `[b, m, n]`.
///
/// # Errors
/// [`OpError::NotMatrix`] for an argument of rank other than 2 or 3;
/// [`OpError::ShapeMismatch`] for arguments of two ranks, or when the inner (or the batch)
/// extents differ.
#[inline(always)]
pub fn infer(op: Opcode, _attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    infer_transposed(op, args, T)
}

/// The reference kernel: row-major `a: [k, m]`, `b: [k, n]`, `out: [m, n]`; `fma` selects the `fma` arithmetic profile's step.
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
    let da = want(v.wants[0], || r.matmul_nt(b, g))?;
    let db = want(v.wants[1], || r.matmul(a, g))?;
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
        let op = Opcode::MatMulTn;
        let none = Attr::NONE;
        assert_eq!(
            infer(op, none, &[Shape::matrix(3, 2), Shape::matrix(3, 4)]),
            Ok(Shape::matrix(2, 4))
        );
        assert!(infer(op, none, &[Shape::matrix(2, 3), Shape::matrix(3, 4)]).is_err());
        let (a3, b3) = (
            Shape::new(&[5, 3, 2]).unwrap(),
            Shape::new(&[5, 3, 4]).unwrap(),
        );
        assert_eq!(
            infer(op, none, &[a3, b3]),
            Ok(Shape::new(&[5, 2, 4]).unwrap())
        );
        assert!(infer(op, none, &[a3, Shape::new(&[4, 3, 4]).unwrap()]).is_err());
        assert!(infer(op, none, &[a3, Shape::matrix(3, 4)]).is_err());
        assert!(infer(op, none, &[Shape::vector(3), Shape::matrix(3, 3)]).is_err());
    }
}
