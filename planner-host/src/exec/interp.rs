//! A host interpreter of the planner's [`Schedule`], before serialization: every instruction
//! through the reference kernels over a `Vec` arena, each argument copied out first.
//! Slow and simple on purpose: it is the check that serialization, decoding and the runtime's
//! executor (in-place paths, slicing) change nothing.

use std::collections::BTreeMap;

use tapeplan_core::format::TensorKind;
use tapeplan_core::ops;

use crate::plan::Schedule;

impl Schedule {
    /// Runs entry `entry` over `arena` (at least `arena_elems` long; inputs and parameters already
    /// in place at their tensors' offsets), under the plan's math and arithmetic profiles.
    ///
    /// # Errors
    /// A kernel's shape error, or `None` entry / short arena as [`ops::OpError::BufferLength`].
    pub fn run_host(&self, entry: &str, arena: &mut [f32]) -> Result<(), ops::OpError> {
        let e = self.entry(entry).ok_or(ops::OpError::Leaf {
            op: tapeplan_core::Opcode::Input,
        })?;
        // Registers (values of fused chains) live beside the arena, whole, by tensor index:
        // this interpreter runs chains one instruction at a time, the runtime a tile at a time.
        let mut registers: BTreeMap<u32, Vec<f32>> = BTreeMap::new();
        for i in &e.instrs {
            let n = i.op.arity();
            let mut shapes = Vec::with_capacity(n);
            let mut args: Vec<Vec<f32>> = Vec::with_capacity(n);
            for &a in &i.args[..n] {
                let t = self.tensors[a as usize];
                shapes.push(t.shape);
                args.push(if t.kind == TensorKind::Register {
                    registers.get(&a).cloned().unwrap_or_default()
                } else {
                    arena[t.offset_elems..t.offset_elems + t.shape.elems()].to_vec()
                });
            }
            let out = self.tensors[i.out as usize];
            let arg_refs: Vec<&[f32]> = args.iter().map(Vec::as_slice).collect();
            let len = out.shape.elems();
            let mut register = vec![0.0; len];
            let dst = if out.kind == TensorKind::Register {
                &mut register[..]
            } else {
                arena
                    .get_mut(out.offset_elems..out.offset_elems + len)
                    .ok_or(ops::OpError::BufferLength {
                        op: i.op,
                        expected_elems: out.offset_elems + len,
                        found_elems: 0,
                    })?
            };
            ops::eval_arith(i.op, i.attr, self.math, self.arith, &arg_refs, &shapes, dst)?;
            if out.kind == TensorKind::Register {
                registers.insert(i.out, register);
            }
        }
        Ok(())
    }
}
