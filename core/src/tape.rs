//! The tape: a grow-only list of nodes, its record payload [`Trace`], and [`describe`].

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use crate::ops::{self, Attr, OpError};
use crate::{Opcode, Recordable, Shape, MAX_ARITY};

/// A handle to a node: its index in its tape, and that tape's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    index: u32,
    tape: u32,
}

impl NodeId {
    /// The node's index in its tape (node identifiers are array indices).
    pub fn index(self) -> usize {
        self.index as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.index)
    }
}

/// One recorded operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The instruction.
    pub op: Opcode,
    /// Its attribute.
    pub attr: Attr,
    /// Its arguments by position, `op.arity()` of them used (`x * x` names `x` twice).
    pub args: [u32; MAX_ARITY],
    /// The output shape.
    pub shape: Shape,
    /// A name, for leaves (inputs and parameters).
    pub name: Option<String>,
}

impl Node {
    /// The argument indices actually used.
    pub fn arg_indices(&self) -> &[u32] {
        &self.args[..self.op.arity()]
    }
}

/// Errors of recording and of the two readings.
#[derive(Clone, Debug, PartialEq)]
pub enum TapeError {
    /// A handle whose index is not in the tape.
    UnknownNode {
        /// The index.
        index: usize,
    },
    /// A handle from another tape.
    ForeignHandle {
        /// The index the handle names.
        index: usize,
    },
    /// An operation's shape rule failed.
    Op(OpError),
    /// A value was needed but not set (an input or parameter leaf of a run).
    MissingValue {
        /// The node.
        index: usize,
    },
    /// A value of the wrong shape was given for a node.
    ValueShape {
        /// The node.
        index: usize,
        /// Its shape.
        expected: Shape,
        /// The value's shape.
        found: Shape,
    },
    /// A seed whose shape is not the root's.
    SeedShape {
        /// The root's shape.
        expected: Shape,
        /// The seed's shape.
        found: Shape,
    },
    /// A rule answered a contribution whose shape is not its argument's.
    ContributionShape {
        /// The node whose rule answered it.
        node: usize,
        /// The argument position.
        arg: usize,
        /// The argument's shape.
        expected: Shape,
        /// The contribution's shape.
        found: Shape,
    },
}

impl fmt::Display for TapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TapeError::UnknownNode { index } => write!(f, "node {index} is not in the tape"),
            TapeError::ForeignHandle { index } => {
                write!(f, "node handle {index} belongs to another tape")
            }
            TapeError::Op(e) => write!(f, "{e}"),
            TapeError::MissingValue { index } => write!(f, "node {index} has no value set"),
            TapeError::ValueShape {
                index,
                expected,
                found,
            } => write!(f, "node {index} has shape {expected}, value has shape {found}"),
            TapeError::SeedShape { expected, found } => {
                write!(f, "seed has shape {found}, the root has shape {expected}")
            }
            TapeError::ContributionShape {
                node,
                arg,
                expected,
                found,
            } => write!(
                f,
                "rule of node {node} gave argument {arg} a contribution of shape {found}, expected {expected}"
            ),
        }
    }
}

impl core::error::Error for TapeError {}

impl From<OpError> for TapeError {
    fn from(e: OpError) -> Self {
        TapeError::Op(e)
    }
}

/// A grow-only list of nodes. Each recorded operation appends exactly one node and returns its
/// [`NodeId`]; nothing is ever removed or changed.
#[derive(Clone, Debug)]
pub struct Tape {
    id: u32,
    nodes: Vec<Node>,
}

#[cfg(target_has_atomic = "32")]
fn next_tape_id() -> u32 {
    use core::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(not(target_has_atomic = "32"))]
fn next_tape_id() -> u32 {
    0
}

impl Default for Tape {
    fn default() -> Self {
        Tape::new()
    }
}

impl Tape {
    /// An empty tape with a fresh identity.
    pub fn new() -> Tape {
        Tape {
            id: next_tape_id(),
            nodes: Vec::new(),
        }
    }

    /// The nodes, in recording order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when nothing has been recorded.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The handle of node `index` of this tape.
    ///
    /// # Errors
    /// [`TapeError::UnknownNode`] past the end.
    pub fn id(&self, index: usize) -> Result<NodeId, TapeError> {
        if index < self.nodes.len() {
            Ok(NodeId {
                index: index as u32,
                tape: self.id,
            })
        } else {
            Err(TapeError::UnknownNode { index })
        }
    }

    /// Checks that a handle belongs to this tape and names a recorded node.
    ///
    /// # Errors
    /// [`TapeError::ForeignHandle`] or [`TapeError::UnknownNode`].
    pub fn check(&self, id: NodeId) -> Result<usize, TapeError> {
        if id.tape != self.id {
            return Err(TapeError::ForeignHandle { index: id.index() });
        }
        if id.index() >= self.nodes.len() {
            return Err(TapeError::UnknownNode { index: id.index() });
        }
        Ok(id.index())
    }

    /// The node a handle names.
    ///
    /// # Errors
    /// As [`Tape::check`].
    pub fn node(&self, id: NodeId) -> Result<&Node, TapeError> {
        let i = self.check(id)?;
        Ok(&self.nodes[i])
    }

    /// The shape of a node.
    ///
    /// # Errors
    /// As [`Tape::check`].
    pub fn shape(&self, id: NodeId) -> Result<Shape, TapeError> {
        Ok(self.node(id)?.shape)
    }

    fn append(&mut self, node: Node) -> NodeId {
        let index = self.nodes.len() as u32;
        self.nodes.push(node);
        NodeId {
            index,
            tape: self.id,
        }
    }

    /// Records an input leaf: a value the caller sets before each run.
    pub fn input(&mut self, name: &str, shape: Shape) -> NodeId {
        self.leaf(Opcode::Input, name, shape)
    }

    /// Records a parameter leaf: a trainable value.
    pub fn parameter(&mut self, name: &str, shape: Shape) -> NodeId {
        self.leaf(Opcode::Parameter, name, shape)
    }

    fn leaf(&mut self, op: Opcode, name: &str, shape: Shape) -> NodeId {
        self.append(Node {
            op,
            attr: Attr::target(shape),
            args: [u32::MAX; MAX_ARITY],
            shape,
            name: Some(String::from(name)),
        })
    }

    /// Records one instruction over recorded arguments; the output shape comes from the shape
    /// rule ([`ops::infer`]).
    ///
    /// # Errors
    /// A foreign or unknown handle, or the shape rule's error.
    pub fn push(&mut self, op: Opcode, attr: Attr, args: &[NodeId]) -> Result<NodeId, TapeError> {
        if matches!(op, Opcode::Input | Opcode::Parameter) {
            return Err(TapeError::Op(OpError::Leaf { op }));
        }
        let mut shapes = [Shape::SCALAR; MAX_ARITY];
        let mut idx = [u32::MAX; MAX_ARITY];
        if args.len() > MAX_ARITY {
            return Err(TapeError::Op(OpError::Arity {
                op,
                expected: op.arity(),
                found: args.len(),
            }));
        }
        for (k, a) in args.iter().enumerate() {
            let i = self.check(*a)?;
            shapes[k] = self.nodes[i].shape;
            idx[k] = i as u32;
        }
        let shape = ops::infer(op, attr, &shapes[..args.len()])?;
        Ok(self.append(Node {
            op,
            attr,
            args: idx,
            shape,
            name: None,
        }))
    }

    /// The record payload over this tape: speaking the vocabulary through it appends nodes.
    pub fn trace(&mut self) -> Trace<'_> {
        Trace { tape: self }
    }

    /// Reverse mode as extra graph: walks the tape back from `root` with the cotangent `seed`
    /// (a recorded node of the root's shape) and appends the gradient as ordinary nodes, through
    /// the same rules as the oracle. Answers the adjoint of every node reached, keyed by node;
    /// `wrt` names the leaves (or any nodes) to differentiate with respect to, which fixes the
    /// ancestor mask.
    ///
    /// # Errors
    /// Foreign or unknown handles, a seed of the wrong shape, a contribution of the wrong shape.
    pub fn vjp(
        &mut self,
        root: NodeId,
        seed: NodeId,
        wrt: &[NodeId],
    ) -> Result<Adjoints<NodeId>, TapeError> {
        self.vjp_seeds(&[(root, seed)], wrt)
    }

    /// [`Tape::vjp`] from several roots at once, each with its seed: one reverse scan whose
    /// roots start from their seeds (a root named twice from the sum of its seeds).
    fn vjp_seeds(
        &mut self,
        seeds: &[(NodeId, NodeId)],
        wrt: &[NodeId],
    ) -> Result<Adjoints<NodeId>, TapeError> {
        let mut seeds_i = Vec::with_capacity(seeds.len());
        for (root, seed) in seeds {
            self.check(*seed)?;
            seeds_i.push((self.check(*root)?, *seed));
        }
        let mut wrt_i = Vec::with_capacity(wrt.len());
        for w in wrt {
            wrt_i.push(self.check(*w)?);
        }
        let end = seeds_i.iter().map(|(root, _)| root + 1).max().unwrap_or(0);
        // The walk reads the nodes as they were before it started appending.
        let nodes: Vec<Node> = self.nodes[..end].to_vec();
        let values: Vec<Option<NodeId>> = (0..nodes.len())
            .map(|i| {
                Some(NodeId {
                    index: i as u32,
                    tape: self.id,
                })
            })
            .collect();
        let mut trace = self.trace();
        crate::autodiff::reverse_scan_seeds(&nodes, &values, &mut trace, seeds_i, &wrt_i)
    }

    /// Forward mode as extra graph, derived from the reverse rules: appends nodes computing the
    /// tangent of `root` when each input `x` of `tangents` moves along its direction `dx` (a
    /// recorded node of `x`'s shape), that is the Jacobian-vector product `J·dx` summed over the
    /// inputs. Answers `None` when `root` does not depend differentiably on any of them (its
    /// tangent is zero: "not reached", as in [`Adjoints`]).
    ///
    /// There is no forward-mode rule. The vjp is linear in its seed, so the gradient recorded
    /// from a seed `u` (a recorded `fill` of zeros: a leaf of the recorded vjp, whose value the
    /// answer does not depend on) is `g(u) = Jᵀu`, ordinary graph; differentiating it again with
    /// respect to `u`, with the seed `dx` at each `g_x`, gives `d⟨g(u), dx⟩/du = J·dx`. Both
    /// walks are [`Tape::vjp`]'s (one rule body, one accumulation, the ancestor mask), so the
    /// answer is made of ordinary nodes that the oracle runs and the planner plans like any
    /// others. This is the transpose (or double-vjp) trick: the adjoint of the linear map
    /// `u ↦ Jᵀu` is `v ↦ J·v`. The answer reads the first walk's slopes (`1 - y²`, `bᵀ`, …) but
    /// none of its nodes that carry `u`; those stay on the tape, unread, and a plan prunes them.
    /// One call records one root's tangent; the tangents of several nodes take one call each.
    ///
    /// # Shapes
    /// `dx` has `x`'s shape; the answer has `root`'s shape.
    ///
    /// # Errors
    /// Foreign or unknown handles, a direction whose shape is not its input's
    /// ([`TapeError::SeedShape`]).
    ///
    /// ```
    /// use tapeplan_core::{Recordable, Run, Shape, Tape, Tensor};
    ///
    /// // f = x · x at x = 3 along dx = 0.5: the tangent is 2x · dx = 3.
    /// let mut tape = Tape::new();
    /// let x = tape.input("x", Shape::SCALAR);
    /// let f = tape.trace().mul(&x, &x)?;
    /// let dx = tape.input("dx", Shape::SCALAR);
    /// let df = tape.jvp(f, &[(x, dx)])?.unwrap();
    /// let mut run = Run::new(&tape);
    /// run.set(x, Tensor::scalar(3.0))?;
    /// run.set(dx, Tensor::scalar(0.5))?;
    /// run.forward_until(df)?;
    /// assert_eq!(run.value(df).unwrap().data, [3.0]);
    /// // A stop-gradient: not reached, a zero tangent.
    /// let d = tape.trace().detach(&x)?;
    /// assert_eq!(tape.jvp(d, &[(x, dx)])?, None);
    /// # Ok::<(), tapeplan_core::TapeError>(())
    /// ```
    pub fn jvp(
        &mut self,
        root: NodeId,
        tangents: &[(NodeId, NodeId)],
    ) -> Result<Option<NodeId>, TapeError> {
        let root_shape = self.shape(root)?;
        let mut inputs = Vec::with_capacity(tangents.len());
        for (x, dx) in tangents {
            let (expected, found) = (self.shape(*x)?, self.shape(*dx)?);
            if expected != found {
                return Err(TapeError::SeedShape { expected, found });
            }
            inputs.push(*x);
        }
        // The transpose: g(u) = Jᵀu for a symbolic seed u.
        let u = self.trace().fill(0.0, root_shape)?;
        let g = self.vjp(root, u, &inputs)?;
        // Its transpose again: the reverse scan of g from every reached g_x with the seed dx.
        let seeds: Vec<(NodeId, NodeId)> = tangents
            .iter()
            .filter_map(|(x, dx)| g.get(*x).map(|gx| (*gx, *dx)))
            .collect();
        if seeds.is_empty() {
            return Ok(None);
        }
        Ok(self.vjp_seeds(&seeds, &[u])?.get(u).copied())
    }

    /// [`Tape::vjp`] of a scalar root with the seed 1 (a recorded `fill`).
    ///
    /// # Errors
    /// As [`Tape::vjp`]; a non-scalar root gives [`TapeError::SeedShape`].
    pub fn differentiate(
        &mut self,
        root: NodeId,
        wrt: &[NodeId],
    ) -> Result<Adjoints<NodeId>, TapeError> {
        self.check(root)?;
        let seed = self.trace().fill(1.0, Shape::SCALAR)?;
        self.vjp(root, seed, wrt)
    }
}

use crate::Adjoints;

/// The record payload: values are node handles, and every operation appends a node.
pub struct Trace<'t> {
    tape: &'t mut Tape,
}

impl Trace<'_> {
    /// The tape being recorded into.
    pub fn tape(&self) -> &Tape {
        self.tape
    }
}

impl Recordable for Trace<'_> {
    type Value = NodeId;
    type Error = TapeError;

    fn shape_of(&self, value: &NodeId) -> Shape {
        self.tape.shape(*value).unwrap_or(Shape::SCALAR)
    }

    fn apply(&mut self, op: Opcode, attr: Attr, args: &[&NodeId]) -> Result<NodeId, TapeError> {
        let mut ids = [NodeId { index: 0, tape: 0 }; MAX_ARITY];
        if args.len() > MAX_ARITY {
            return Err(TapeError::Op(OpError::Arity {
                op,
                expected: op.arity(),
                found: args.len(),
            }));
        }
        for (slot, a) in ids.iter_mut().zip(args) {
            *slot = **a;
        }
        self.tape.push(op, attr, &ids[..args.len()])
    }
}

/// The node listing of a tape: one line per node (index, opcode, arguments by position,
/// attributes, shape), then a summary line. `marks` inserts a caption before the given node
/// index (e.g. where a recorded gradient starts).
pub fn describe(tape: &Tape, marks: &[(usize, &str)]) -> String {
    let mut out = String::new();
    let (mut params, mut inputs) = (0usize, 0usize);
    for (i, n) in tape.nodes.iter().enumerate() {
        for (at, caption) in marks {
            if *at == i {
                let _ = writeln!(out, "{caption}");
            }
        }
        let mut args = String::new();
        for (k, a) in n.arg_indices().iter().enumerate() {
            if k > 0 {
                args.push_str(", ");
            }
            let _ = write!(args, "{a}");
        }
        match n.op {
            Opcode::Input | Opcode::Parameter => {
                if n.op == Opcode::Input {
                    inputs += 1;
                } else {
                    params += 1;
                }
                if let Some(name) = &n.name {
                    let _ = write!(args, "{name}");
                }
            }
            Opcode::Fill => {
                let _ = write!(args, "value={}", n.attr.scalar());
            }
            Opcode::Pow => {
                let _ = write!(args, "  p={}", n.attr.scalar());
            }
            Opcode::SgdMatMul => {
                let _ = write!(args, "  lr={}", n.attr.scalar());
            }
            Opcode::Slice | Opcode::Pad => {
                if let Attr::Window { axis, start, .. } = n.attr {
                    let _ = write!(args, "  axis={axis} start={start}");
                }
            }
            Opcode::Concat | Opcode::Gather | Opcode::ScatterAdd | Opcode::ArgMax => {
                if let Attr::Axis(axis) | Attr::AxisTo(axis, _) = n.attr {
                    let _ = write!(args, "  axis={axis}");
                }
            }
            Opcode::Conv | Opcode::ConvTranspose | Opcode::ConvWeightGrad => {
                if let Attr::Conv(c) = n.attr {
                    let _ = write!(args, "  {c}");
                }
            }
            Opcode::Broadcast
            | Opcode::SumTo
            | Opcode::MaxTo
            | Opcode::ProdTo
            | Opcode::Reshape
            | Opcode::LogSumExp => {
                let _ = write!(args, "  shape={}", n.shape);
            }
            Opcode::MaxPool
            | Opcode::MaxPoolScatter
            | Opcode::MaxPoolGather
            | Opcode::AvgPool
            | Opcode::AvgPoolBackward => {
                if let Attr::Pool(w) | Attr::PoolTo(w, _) = n.attr {
                    let _ = write!(
                        args,
                        "  kernel={:?} strides={:?} pads={:?}",
                        w.kernel, w.strides, w.pads
                    );
                }
            }
            Opcode::OneHot => {
                let _ = write!(args, "  classes={}", n.shape.dim(1).unwrap_or(0));
            }
            _ => {}
        }
        let _ = writeln!(out, "{i:>4}  {:<14} {:<18} {}", n.op.name(), args, n.shape);
    }
    let plural = |n: usize, w: &str| {
        if n == 1 {
            alloc::format!("{n} {w}")
        } else {
            alloc::format!("{n} {w}s")
        }
    };
    let _ = writeln!(
        out,
        "tape: {} nodes, {}, {}",
        tape.nodes.len(),
        plural(params, "parameter"),
        plural(inputs, "input")
    );
    out
}
