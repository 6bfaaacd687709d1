//! Pass: liveness. Where each value of an entry is defined and last read, in schedule
//! positions.

use std::collections::BTreeMap;

use tapeplan_core::Tape;

/// Each value's interval: node → `(def, end)` in schedule positions.
pub type Intervals = BTreeMap<usize, (isize, isize)>;

/// For each node of the entry, `(def, end)` in schedule positions: `def` is −1 for leaves; `end`
/// is the last position that reads it, `len` for roots that outlive the entry, or `def` when
/// nothing reads it.
pub fn liveness(tape: &Tape, order: &[usize], leaves: &[usize], outlive: &[usize]) -> Intervals {
    let mut iv: Intervals = BTreeMap::new();
    for &l in leaves {
        iv.insert(l, (-1, -1));
    }
    for (pos, &n) in order.iter().enumerate() {
        let pos = pos as isize;
        iv.insert(n, (pos, pos));
        for &a in tape.nodes()[n].arg_indices() {
            if let Some(e) = iv.get_mut(&(a as usize)) {
                e.1 = e.1.max(pos);
            }
        }
    }
    for &r in outlive {
        if let Some(e) = iv.get_mut(&r) {
            e.1 = order.len() as isize;
        }
    }
    iv
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapeplan_core::{Recordable, Shape};

    #[test]
    fn intervals_run_from_definition_to_last_read() {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::vector(2));
        let unread = tape.input("unread", Shape::vector(2));
        let (a, b, c, d) = {
            let mut t = tape.trace();
            let a = t.neg(&x).unwrap(); // 0, read at 1 and 2
            let b = t.exp(&a).unwrap(); // 1, read at 2
            let c = t.add(&a, &b).unwrap(); // 2, the root
            let d = t.tanh(&x).unwrap(); // 3, read by nothing
            (a, b, c, d)
        };
        let order = [a, b, c, d].map(|n| n.index());
        let iv = liveness(&tape, &order, &[x.index(), unread.index()], &[c.index()]);
        assert_eq!(
            iv[&x.index()],
            (-1, 3),
            "a leaf is live from before the entry"
        );
        assert_eq!(iv[&unread.index()], (-1, -1));
        assert_eq!(iv[&a.index()], (0, 2));
        assert_eq!(iv[&b.index()], (1, 2));
        assert_eq!(iv[&c.index()], (2, 4), "a root outlives the entry");
        assert_eq!(
            iv[&d.index()],
            (3, 3),
            "an unread value dies where it is defined"
        );
    }
}
