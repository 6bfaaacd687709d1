//! Pass: roots. An entry's roots are checked and sorted into outputs and in-place updates.

use std::collections::BTreeMap;

use tapeplan_core::{Opcode, Tape};

use crate::plan::{check_name, EntrySpec, PlanningError, Root};

/// An entry's roots, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EntryRoots {
    /// Every root node (outputs and update values), in the spec's order.
    pub nodes: Vec<usize>,
    /// Each update's value node → its parameter node.
    pub update_of: BTreeMap<usize, usize>,
    /// The output bindings: name and node.
    pub outputs: Vec<(String, usize)>,
}

/// Checks `spec`'s roots against `tape`.
///
/// # Errors
/// [`PlanningError::Tape`] for a node not in the tape, [`PlanningError::BadName`] for an output
/// name the format cannot hold, [`PlanningError::BadRoot`] for an output that is a leaf, an update
/// of a non-parameter, an update value that is a leaf, of another shape, or given twice, a kept
/// node that is not a parameter.
pub fn entry_roots(tape: &Tape, spec: &EntrySpec) -> Result<EntryRoots, PlanningError> {
    let nodes = tape.nodes();
    let bad = |why: String| PlanningError::BadRoot {
        entry: spec.name.clone(),
        why,
    };
    let mut roots = EntryRoots::default();
    for r in &spec.roots {
        match r {
            Root::Output { name, node } => {
                check_name(name)?;
                let i = tape.check(*node)?;
                if matches!(nodes[i].op, Opcode::Parameter | Opcode::Input) {
                    return Err(bad(format!("output {name} is a leaf; read it directly")));
                }
                roots.nodes.push(i);
                roots.outputs.push((name.clone(), i));
            }
            Root::Update { param, value } => {
                let (p, v) = (tape.check(*param)?, tape.check(*value)?);
                if nodes[p].op != Opcode::Parameter {
                    return Err(bad(format!("update target {p} is not a parameter")));
                }
                if nodes[v].shape != nodes[p].shape || roots.update_of.insert(v, p).is_some() {
                    return Err(bad(format!("update value {v} does not fit parameter {p}")));
                }
                if matches!(nodes[v].op, Opcode::Parameter | Opcode::Input) {
                    return Err(bad(format!("update value {v} is a leaf")));
                }
                roots.nodes.push(v);
            }
            Root::Keep { param } => {
                let p = tape.check(*param)?;
                if nodes[p].op != Opcode::Parameter {
                    return Err(bad(format!("kept node {p} is not a parameter")));
                }
            }
        }
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapeplan_core::{NodeId, Recordable, Shape};

    fn spec(roots: Vec<Root>) -> EntrySpec {
        EntrySpec {
            name: "e".into(),
            roots,
            guarded: false,
        }
    }

    fn output(name: &str, node: NodeId) -> Root {
        Root::Output {
            name: name.into(),
            node,
        }
    }

    #[test]
    fn sorts_outputs_and_updates_and_refuses_bad_roots() {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::vector(2));
        let w = tape.parameter("w", Shape::vector(2));
        let (y, new_w, s) = {
            let mut t = tape.trace();
            let y = t.mul(&x, &w).unwrap();
            let new_w = t.sub(&w, &y).unwrap();
            let s = t.sum_all(&y).unwrap();
            (y, new_w, s)
        };
        let update = |param, value| Root::Update { param, value };
        let r = entry_roots(&tape, &spec(vec![output("y", y), update(w, new_w)])).unwrap();
        assert_eq!(r.nodes, vec![y.index(), new_w.index()]);
        assert_eq!(r.outputs, vec![("y".to_string(), y.index())]);
        assert_eq!(r.update_of.get(&new_w.index()), Some(&w.index()));

        for (roots, what) in [
            (vec![output("x", x)], "is a leaf"),
            (vec![update(y, new_w)], "not a parameter"),
            (vec![update(w, s)], "does not fit"),
            (vec![update(w, new_w), update(w, new_w)], "does not fit"),
        ] {
            let e = entry_roots(&tape, &spec(roots)).unwrap_err();
            assert!(
                matches!(e, PlanningError::BadRoot { .. }) && e.to_string().contains(what),
                "{e}"
            );
        }
        let e = entry_roots(&tape, &spec(vec![output("", y)])).unwrap_err();
        assert!(matches!(e, PlanningError::BadName(_)), "{e}");
    }
}
