//! The reverse scan, written once over any [`Recordable`] payload. Over [`crate::Compute`] it is
//! the oracle ([`crate::Run::backward`]); over [`crate::Trace`] it records the gradient
//! ([`crate::Tape::vjp`]). Both walk the same nodes in the same order, apply the same rules under
//! the same ancestor mask and accumulate in the same one place, so they reach the same bits.

use alloc::vec;
use alloc::vec::Vec;

use crate::ops::VjpArgs;
use crate::tape::{Node, NodeId, TapeError};
use crate::{Recordable, MAX_ARITY};

/// The adjoints a reverse scan reached, keyed by node. A node that was never reached answers
/// `None`, which is different from a node reached with a zero cotangent.
#[derive(Clone, Debug, PartialEq)]
pub struct Adjoints<V> {
    entries: Vec<Option<V>>,
}

impl<V> Adjoints<V> {
    /// The adjoint of `id`, or `None` when the scan never reached it.
    pub fn get(&self, id: NodeId) -> Option<&V> {
        self.entries.get(id.index()).and_then(Option::as_ref)
    }

    /// The adjoint of `id`, or `zero()` when the scan never reached it (a dense answer, filled
    /// only when asked).
    pub fn get_or(&self, id: NodeId, zero: impl FnOnce() -> V) -> V
    where
        V: Clone,
    {
        self.get(id).cloned().unwrap_or_else(zero)
    }

    /// True when the scan reached `id`.
    pub fn reached(&self, id: NodeId) -> bool {
        self.get(id).is_some()
    }
}

/// The ancestor mask: nodes `0..=max(roots)` that are ancestors of one of `roots` (or a root
/// itself) and depend differentiably on one of `wrt` (through no `detach` or piecewise-constant
/// op). Only these nodes' rules are applied, and only they receive contributions.
pub(crate) fn active_mask(nodes: &[Node], roots: &[usize], wrt: &[usize]) -> Vec<bool> {
    let n = roots.iter().max().map_or(0, |r| r + 1);
    let mut depends = vec![false; n];
    for &w in wrt {
        if w < n {
            depends[w] = true;
        }
    }
    for i in 0..n {
        // A stop-gradient or piecewise-constant op's output does not depend differentiably on
        // its arguments: its rule contributes nothing, so nothing upstream of it needs a rule.
        if !depends[i] && !nodes[i].op.zero_derivative() {
            depends[i] = nodes[i]
                .arg_indices()
                .iter()
                .any(|&a| depends.get(a as usize).copied().unwrap_or(false));
        }
    }
    let mut ancestor = vec![false; n];
    for &root in roots {
        ancestor[root] = true;
    }
    for i in (0..n).rev() {
        if ancestor[i] {
            for &a in nodes[i].arg_indices() {
                if let Some(x) = ancestor.get_mut(a as usize) {
                    *x = true;
                }
            }
        }
    }
    (0..n).map(|i| depends[i] && ancestor[i]).collect()
}

/// Walks `nodes[..=root]` in reverse with cotangent `seed` at `root`: [`reverse_scan_seeds`]
/// with one seed.
pub(crate) fn reverse_scan<R>(
    nodes: &[Node],
    values: &[Option<R::Value>],
    r: &mut R,
    root: usize,
    seed: R::Value,
    wrt: &[usize],
) -> Result<Adjoints<R::Value>, R::Error>
where
    R: Recordable,
    R::Error: From<TapeError>,
{
    reverse_scan_seeds(nodes, values, r, vec![(root, seed)], wrt)
}

/// Walks `nodes[..=max root]` in reverse with a cotangent seed at each root of `seeds` (a root
/// named twice starts from the sum of its seeds, added in the order given).
///
/// `values[i]` is node `i`'s value in the payload's reading (every node the walk reaches must
/// have one). Accumulation happens here and only
/// here: contributions are added in reverse node order, then argument order, as
/// `adjoint = add(adjoint, contribution)`; the first contribution is taken as is.
pub(crate) fn reverse_scan_seeds<R>(
    nodes: &[Node],
    values: &[Option<R::Value>],
    r: &mut R,
    seeds: Vec<(usize, R::Value)>,
    wrt: &[usize],
) -> Result<Adjoints<R::Value>, R::Error>
where
    R: Recordable,
    R::Error: From<TapeError>,
{
    let roots: Vec<usize> = seeds.iter().map(|(root, _)| *root).collect();
    let Some(&root) = roots.iter().max() else {
        return Ok(Adjoints {
            entries: Vec::new(),
        });
    };
    let active = active_mask(nodes, &roots, wrt);
    let mut adj: Vec<Option<R::Value>> = vec![None; root + 1];
    for (root, seed) in seeds {
        let root_shape = nodes[root].shape;
        let seed_shape = r.shape_of(&seed);
        if seed_shape != root_shape {
            return Err(TapeError::SeedShape {
                expected: root_shape,
                found: seed_shape,
            }
            .into());
        }
        if active[root] {
            adj[root] = Some(match adj[root].take() {
                None => seed,
                Some(prev) => r.add(&prev, &seed)?,
            });
        }
    }
    for i in (0..=root).rev() {
        if !active[i] {
            continue;
        }
        let node = &nodes[i];
        let arity = node.op.arity();
        if arity == 0 {
            continue;
        }
        // Not reached: the rule is never evaluated.
        let Some(g) = adj[i].clone() else { continue };
        let mut wants = [false; MAX_ARITY];
        for (k, &a) in node.arg_indices().iter().enumerate() {
            wants[k] = active[a as usize];
        }
        if !wants.iter().any(|&w| w) {
            continue;
        }
        let value = |j: usize| {
            values
                .get(j)
                .and_then(Option::as_ref)
                .ok_or(TapeError::MissingValue { index: j })
        };
        let out = value(i)?;
        let first = value(node.args[0] as usize)?;
        let mut arg_vals: [&R::Value; MAX_ARITY] = [first; MAX_ARITY];
        for (slot, &a) in arg_vals.iter_mut().zip(node.arg_indices()).skip(1) {
            *slot = value(a as usize)?;
        }
        let contributions = node.op.vjp(
            r,
            &VjpArgs {
                args: &arg_vals[..arity],
                out,
                cotangent: &g,
                wants,
                attr: node.attr,
            },
        )?;
        for (k, c) in contributions.into_iter().enumerate() {
            let Some(c) = c else { continue };
            if k >= arity || !wants[k] {
                continue;
            }
            let a = node.args[k] as usize;
            let expected = nodes[a].shape;
            let found = r.shape_of(&c);
            if found != expected {
                return Err(TapeError::ContributionShape {
                    node: i,
                    arg: k,
                    expected,
                    found,
                }
                .into());
            }
            adj[a] = Some(match adj[a].take() {
                None => c,
                Some(prev) => r.add(&prev, &c)?,
            });
        }
    }
    Ok(Adjoints { entries: adj })
}
