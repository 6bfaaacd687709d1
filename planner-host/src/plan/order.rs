//! Pass: order. The order of an entry's instructions in its schedule.

use tapeplan_core::{Opcode, Tape};

/// The schedule's order: a topological order of the live non-leaf nodes. The tape's own order
/// is topological (a node is recorded after its arguments) and keeps each parameter's update
/// after every other read of it, because updates are recorded last.
pub fn order(tape: &Tape, live: &[bool]) -> Vec<usize> {
    (0..tape.len())
        .filter(|&i| live[i] && !matches!(tape.nodes()[i].op, Opcode::Input | Opcode::Parameter))
        .collect()
}

/// The live leaves (inputs and parameters), in tape order.
pub fn leaves(tape: &Tape, live: &[bool]) -> Vec<usize> {
    (0..tape.len())
        .filter(|&i| live[i] && matches!(tape.nodes()[i].op, Opcode::Input | Opcode::Parameter))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::prune::prune;
    use tapeplan_core::{Recordable, Shape};

    #[test]
    fn orders_live_non_leaves_in_tape_order() {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::vector(2));
        let w = tape.parameter("w", Shape::vector(2));
        let (a, dead, b) = {
            let mut t = tape.trace();
            let a = t.add(&x, &w).unwrap();
            let dead = t.neg(&x).unwrap();
            let b = t.mul(&a, &a).unwrap();
            (a, dead, b)
        };
        let live = prune(&tape, &[b.index()]);
        let o = order(&tape, &live);
        // Leaves are not instructions; the dead node is not live.
        assert_eq!(o, vec![a.index(), b.index()]);
        assert!(!o.contains(&dead.index()));
        assert_eq!(leaves(&tape, &live), vec![x.index(), w.index()]);
        // Every argument of a scheduled node is a leaf or scheduled before it.
        for (pos, &n) in o.iter().enumerate() {
            for &arg in tape.nodes()[n].arg_indices() {
                let arg = arg as usize;
                assert!(arg == x.index() || arg == w.index() || o[..pos].contains(&arg));
            }
        }
    }
}
