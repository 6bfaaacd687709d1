//! The group walk `cumprod_exclusive` and `affine_scan` share: a tensor's elements grouped by
//! the axes of a mask (two elements are in one group when they agree on every other axis),
//! each group ordered by increasing flat index (row-major over the masked axes).

use crate::{Attr, Shape};

/// `(axes, reverse)` of a `Scan` attribute (nothing for another kind, which
/// [`super::infer`] has rejected before any caller gets here).
pub(crate) fn scan_of(attr: Attr) -> (u8, bool) {
    match attr {
        Attr::Scan { axes, reverse } => (axes, reverse),
        _ => (0, false),
    }
}

/// The element before flat index `i` in its group (after it, when `reverse`), or `None` for
/// the group's first (last). Never further than the tensor: every step stays inside it.
pub(crate) fn neighbour(i: usize, s: Shape, axes: u8, reverse: bool) -> Option<usize> {
    let d = s.dims();
    let (mut rem, mut stride, mut adjust) = (i, 1usize, 0usize);
    for a in (0..s.rank()).rev() {
        let n = d[a].max(1);
        let ia = rem % n;
        rem /= n;
        if axes & (1 << a) != 0 {
            if !reverse && ia > 0 {
                return Some(i - stride + adjust);
            }
            if reverse && ia + 1 < n {
                return Some(i + stride - adjust);
            }
            adjust += (n - 1) * stride;
        }
        stride *= n;
    }
    None
}

/// Writes `out` group by group: each element in walk order (increasing flat index, decreasing
/// with `reverse`) becomes `first` for its group's first and `step(p, out[p])` otherwise, `p` its
/// predecessor in the walk (already written). Nothing past `n` elements is touched.
pub(crate) fn walk<E: Copy>(
    n: usize,
    shape: Shape,
    axes: u8,
    reverse: bool,
    out: &mut [E],
    first: E,
    step: impl Fn(usize, E) -> Option<E>,
) {
    let one = |i: usize, out: &mut [E]| {
        let v = match neighbour(i, shape, axes, reverse) {
            Some(p) => match out.get(p).and_then(|&z| step(p, z)) {
                Some(v) => v,
                None => return,
            },
            None => first,
        };
        if let Some(o) = out.get_mut(i) {
            *o = v;
        }
    };
    if reverse {
        (0..n).rev().for_each(|i| one(i, out));
    } else {
        (0..n).for_each(|i| one(i, out));
    }
}

/// The shape rule of the scans: the mask names axes below `x`'s rank.
pub(crate) fn check_axes(axes: u8, x: Shape) -> bool {
    u32::from(axes) >> x.rank() == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn groups_over_axes_0_and_2() {
        // [2, 2, 3], axes {0, 2}: the group of (*, 1, *) is 3, 4, 5, 9, 10, 11.
        let s = Shape::new(&[2, 2, 3]).unwrap();
        let mut order = vec![3];
        while let Some(n) = neighbour(*order.last().unwrap(), s, 0b101, true) {
            order.push(n);
        }
        assert_eq!(order, [3, 4, 5, 9, 10, 11]);
        let mut back = vec![11];
        while let Some(p) = neighbour(*back.last().unwrap(), s, 0b101, false) {
            back.push(p);
        }
        assert_eq!(back, [11, 10, 9, 5, 4, 3]);
        assert!(check_axes(0b111, s) && !check_axes(0b1000, s));
    }
}
