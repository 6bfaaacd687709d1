//! `select`: `where(cond, a, b)`: `a` where `cond != 0` (NaN counts as true, as C's truth test
//! would not: we define it as `cond != 0.0`, which is true for NaN), else `b`. It earns an
//! instruction because `cond · a + (1 − cond) · b` is not bit-identical when the unselected side
//! is infinite or NaN (`0 · inf = NaN`).
//!
//! Rule: `cond̄`: none; `ā += select(cond, ḡ, 0)`, `b̄ += select(cond, 0, ḡ)`.

use crate::Element;

use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Opcode, Recordable, Shape};

/// The shape rule: three arguments of one shape.
#[inline(always)]
pub(crate) fn infer(op: Opcode, _attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    super::same_shapes(op, args)
}

/// `if cond != 0 { a } else { b }`.
pub fn scalar<E: Element>(cond: E, a: E, b: E) -> E {
    if cond != E::ZERO {
        a
    } else {
        b
    }
}

/// `out[i] = scalar(cond[i], a[i], b[i])`.
pub fn kernel<E: Element>(cond: &[E], a: &[E], b: &[E], out: &mut [E]) {
    for (((o, &c), &x), &y) in out.iter_mut().zip(cond).zip(a).zip(b) {
        *o = scalar(c, x, y);
    }
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    kernel(k.arg(0), k.arg(1), k.arg(2), k.out);
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let (c, g) = (v.args[0], v.cotangent);
    let s = r.shape_of(g);
    let da = want(v.wants[1], || {
        let zero = r.fill(0.0, s)?;
        r.select(c, g, &zero)
    })?;
    let db = want(v.wants[2], || {
        let zero = r.fill(0.0, s)?;
        r.select(c, &zero, g)
    })?;
    Ok([None, da, db])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        let mut out = [0.0f32; 3];
        super::kernel(
            &[1.0, 0.0, -0.0],
            &[1.0, f32::INFINITY, 3.0],
            &[9.0, 2.0, 4.0],
            &mut out,
        );
        assert_eq!(out, [1.0, 2.0, 4.0]);
    }
}
