//! Pass: prune. Only the ancestors of an entry's roots are planned.

use tapeplan_core::Tape;

/// The nodes `roots` depend on (themselves included), as a mask over the tape.
pub fn prune(tape: &Tape, roots: &[usize]) -> Vec<bool> {
    let mut live = vec![false; tape.len()];
    let mut stack: Vec<usize> = roots.to_vec();
    while let Some(i) = stack.pop() {
        if live[i] {
            continue;
        }
        live[i] = true;
        stack.extend(tape.nodes()[i].arg_indices().iter().map(|&a| a as usize));
    }
    live
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapeplan_core::{Recordable, Shape};

    #[test]
    fn keeps_exactly_the_ancestors_of_the_roots() {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::vector(3));
        let w = tape.parameter("w", Shape::vector(3));
        let (y, dead, z) = {
            let mut t = tape.trace();
            let y = t.mul(&x, &w).unwrap();
            let dead = t.tanh(&w).unwrap();
            let z = t.exp(&y).unwrap();
            (y, dead, z)
        };
        let live = prune(&tape, &[z.index()]);
        assert_eq!(live.len(), tape.len());
        for n in [x, w, y, z] {
            assert!(live[n.index()], "{n:?} is an ancestor of z");
        }
        assert!(!live[dead.index()], "tanh(w) feeds no root");
        // A root of its own is kept, with its arguments.
        let live = prune(&tape, &[dead.index()]);
        assert!(live[dead.index()] && live[w.index()]);
        assert!(!live[x.index()] && !live[z.index()]);
        assert!(prune(&tape, &[]).iter().all(|l| !l));
    }
}
