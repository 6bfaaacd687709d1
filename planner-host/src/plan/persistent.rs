//! Pass: the persistent region. Every parameter any entry reaches (or keeps, [`Root::Keep`])
//! keeps one place at the start of the arena, across entries and steps.

use std::collections::BTreeMap;

use tapeplan_core::format::TensorKind;
use tapeplan_core::{NodeId, Opcode, Tape};

use crate::plan::prune::prune;
use crate::plan::{align, check_name, EntrySpec, PlanningError, Root, TensorInfo};

/// The persistent region of a schedule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Persistent {
    /// One persistent tensor per parameter, in tape order: the schedule's first tensors.
    pub tensors: Vec<TensorInfo>,
    /// Parameters: name, tensor, and the leaf in the tape.
    pub parameters: Vec<(String, u32, NodeId)>,
    /// Each parameter node → its tensor.
    pub param_tensor: BTreeMap<usize, u32>,
    /// The region is `[0, elems)` of the arena, each parameter aligned.
    pub elems: usize,
}

/// Places every parameter that a root of `entries` depends on, in tape order from offset 0,
/// each at an aligned offset. An unnamed parameter is named `p{index}`.
///
/// # Errors
/// [`PlanningError::Tape`] for a root not in the tape, [`PlanningError::BadName`] for a
/// parameter name the format cannot hold.
pub fn persistent_region(tape: &Tape, entries: &[EntrySpec]) -> Result<Persistent, PlanningError> {
    let mut all_roots = Vec::new();
    for e in entries {
        for r in &e.roots {
            match r {
                Root::Output { node, .. } => all_roots.push(tape.check(*node)?),
                Root::Update { param, value } => {
                    all_roots.push(tape.check(*param)?);
                    all_roots.push(tape.check(*value)?);
                }
                Root::Keep { param } => all_roots.push(tape.check(*param)?),
            }
        }
    }
    let reach = prune(tape, &all_roots);
    let mut region = Persistent::default();
    for (i, n) in tape.nodes().iter().enumerate() {
        if reach[i] && n.op == Opcode::Parameter {
            let name = n.name.clone().unwrap_or_else(|| format!("p{i}"));
            check_name(&name)?;
            let tensor = region.tensors.len() as u32;
            region.param_tensor.insert(i, tensor);
            region.parameters.push((name, tensor, tape.id(i)?));
            region.tensors.push(TensorInfo {
                offset_elems: region.elems,
                shape: n.shape,
                kind: TensorKind::Persistent,
            });
            region.elems += align(n.shape.elems());
        }
    }
    Ok(region)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapeplan_core::format::ALIGN_ELEMS;
    use tapeplan_core::{Recordable, Shape};

    #[test]
    fn reached_parameters_in_tape_order_aligned() {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::vector(3));
        let a = tape.parameter("a", Shape::vector(3));
        let unused = tape.parameter("unused", Shape::vector(7));
        let b = tape.parameter("b", Shape::matrix(1, 3));
        let (y, new_b) = {
            let mut t = tape.trace();
            let y = t.mul(&x, &a).unwrap();
            let new_b = t.neg(&b).unwrap();
            (y, new_b)
        };
        let entries = [
            EntrySpec {
                name: "f".into(),
                roots: vec![Root::Output {
                    name: "y".into(),
                    node: y,
                }],
                guarded: false,
            },
            EntrySpec {
                name: "g".into(),
                roots: vec![Root::Update {
                    param: b,
                    value: new_b,
                }],
                guarded: false,
            },
        ];
        let r = persistent_region(&tape, &entries).unwrap();
        let names: Vec<&str> = r.parameters.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(names, ["a", "b"], "`unused` feeds no root");
        assert!(!r.param_tensor.contains_key(&unused.index()));
        assert_eq!(r.tensors[0].offset_elems, 0);
        assert_eq!(r.tensors[1].offset_elems, align(3));
        assert_eq!(r.elems, 2 * align(3));
        assert!(r
            .tensors
            .iter()
            .all(|t| t.offset_elems % ALIGN_ELEMS == 0 && t.kind == TensorKind::Persistent));
        assert_eq!(r.param_tensor[&b.index()], 1);
    }
}
