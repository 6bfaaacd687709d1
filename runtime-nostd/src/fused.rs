//! Fused chains: the executor of the format's `FUSE_NEXT` runs (see `docs/plan-format.md`,
//! "Fused chains"). A chain of elementwise (or `fill`, `broadcast`) instructions runs a tile at
//! a time, its intermediates in register slots instead of the arena; the bits are those of
//! running its members one after another.

use tapeplan_core::format::{MAX_CHAIN_INSTRS, MAX_REGISTERS};
use tapeplan_core::ops::{eval_in, Attr};
use tapeplan_core::{MathProfile, Opcode, Ops, Shape, MAX_ARITY};

use crate::catalog::{self, Dims, Src};
use crate::error::ExecError;
use crate::exec::{pick_range, Source};
use crate::plan::Plan;
use crate::program::{Decoded, Placed};

/// Elements per tile of a fused chain ([`run_chain`]); the session keeps `MAX_REGISTERS` tiles
/// (16 KiB on hosts, 256 bytes with `fusion` but without the catalog, nothing without `fusion`).
/// On wasm32 the tiles are 1024 elements with or without the catalog: the small module
/// (docs/selective-build.md, "The wasm module's size") runs without it, and its digits MLP's
/// train steps took 2.1x as long with 16-element tiles (0.90 against 0.42 ms, Node). The bits
/// do not depend on the tile.
pub(crate) const TILE_ELEMS: usize = match (
    cfg!(feature = "fusion"),
    cfg!(feature = "catalog") || cfg!(target_arch = "wasm32"),
) {
    (false, _) => 0,
    (true, true) => 1024,
    (true, false) => 16,
};

/// Whether [`run_chain`] decodes the members of a chain of several tiles once: with
/// 1024-element tiles (hosts, wasm, and firmware built with the catalog, whose register tiles
/// take 16 KiB already; the cache takes about 3 KiB of stack), not with 16-element ones (the
/// conditions of [`TILE_ELEMS`]'s 1024).
const CACHE_MEMBERS: bool =
    cfg!(feature = "fusion") && (cfg!(feature = "catalog") || cfg!(target_arch = "wasm32"));

/// Members [`run_chain`] decodes once per chain instead of once per tile: every member of the
/// longest chain where [`CACHE_MEMBERS`], none elsewhere.
const MEMBER_CACHE: usize = if CACHE_MEMBERS { MAX_CHAIN_INSTRS } else { 0 };

/// The register slots of fused chains, one tile each (empty without feature `fusion`).
pub(crate) type Registers = [[f32; TILE_ELEMS]; MAX_REGISTERS];

/// Where a chain member reads or writes: a register slot, or an arena offset.
#[derive(Clone, Copy, Debug)]
enum Loc {
    Register(usize),
    Arena(usize),
}

/// A chain member decoded once for the whole chain.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Member {
    op: Opcode,
    attr: Attr,
    arity: usize,
    elems: usize,
    out: Loc,
    args: [Loc; MAX_ARITY],
    /// For `broadcast`: its source's extents and the output's.
    from: Dims,
    to: Dims,
}

impl Member {
    /// A placeholder (a cache's empty slot): `fill` of nothing.
    const EMPTY: Member = Member {
        op: Opcode::Fill,
        attr: Attr::NONE,
        arity: 0,
        elems: 0,
        out: Loc::Register(0),
        args: [Loc::Register(0); MAX_ARITY],
        from: Dims::EMPTY,
        to: Dims::EMPTY,
    };

    /// From a decoded instruction (its tensors' offsets and kinds).
    pub(crate) fn of(d: &Decoded) -> Member {
        let loc = |f: &Placed| {
            if f.register {
                Loc::Register(f.offset)
            } else {
                Loc::Arena(f.offset)
            }
        };
        let mut args = [Loc::Register(0); MAX_ARITY];
        for (slot, a) in args.iter_mut().zip(&d.args) {
            if let Some(a) = a {
                *slot = loc(a);
            }
        }
        Member {
            op: d.op,
            attr: d.attr,
            arity: d.arity,
            elems: d.out.dims.elems,
            out: loc(&d.out),
            args,
            from: d.args[0].as_ref().map_or(Dims::EMPTY, |a| a.dims),
            to: d.out.dims,
        }
    }
}

/// The chain that starts at the entry's `i`-th instruction of `src` (which carries
/// `FUSE_NEXT`), run as one; answers the position after the chain. A lone instruction (the
/// flag on an entry's last instruction, which validation rules out) runs on its own. Out of
/// line: the run loop then holds only the per-instruction path.
#[inline(never)]
pub(crate) fn run_chain_at<O: Ops, S: Source + ?Sized>(
    plan: &Plan<'_>,
    arena: &mut [f32],
    regs: &mut Registers,
    src: &S,
    i: usize,
) -> Result<usize, ExecError> {
    let first = src.get(i).ok_or(ExecError::Inconsistent {
        instr: u32::try_from(i).unwrap_or(u32::MAX),
    })?;
    let last = chain_last(src, i);
    // Adam's three chains over one tensor, in one pass (`catalog::adam`).
    #[cfg(feature = "catalog")]
    if last > i {
        if let Some((at, next)) = adam_candidate(src, i, last) {
            src.before_chain(arena, last.saturating_add(1))?;
            src.before_chain(arena, at.c_first)?;
            let consts = at.consts_in(arena).ok_or(ExecError::Inconsistent {
                instr: u32::try_from(src.index(first)).unwrap_or(u32::MAX),
            })?;
            if catalog::adam::update(arena, &at.at, &consts) {
                return Ok(next);
            }
        }
    }
    if last > i {
        let k = src.index(first);
        let bad = ExecError::Inconsistent {
            instr: u32::try_from(k).unwrap_or(u32::MAX),
        };
        let count = last.saturating_sub(i).saturating_add(1);
        let member = |j: usize| src.member(src.get(i.saturating_add(j)).ok_or(bad)?);
        run_chain::<O>(arena, regs, plan.math(), k, count, member)?;
    } else {
        src.step::<O>(plan, arena, first)?;
    }
    Ok(last.saturating_add(1))
}

/// The position of the last member of the chain that starts at `i`: the first instruction from
/// `i` on without `FUSE_NEXT`, or the entry's last.
fn chain_last<S: Source + ?Sized>(src: &S, i: usize) -> usize {
    let mut last = i;
    while src.get(last).is_some_and(|x| src.fuse_next(x))
        && src.get(last.saturating_add(1)).is_some()
    {
        last = last.saturating_add(1);
    }
    last
}

/// [`adam_at`], asked only of a chain that starts with a `fill` and spans a few vectors (at
/// least [`ADAM_MIN_ELEMS`]): W3's one- to sixteen-element chains never ask, and firmware
/// (without the catalog) has no such pass.
#[cfg(feature = "catalog")]
fn adam_candidate<S: Source + ?Sized>(
    src: &S,
    i: usize,
    last: usize,
) -> Option<(AdamChains, usize)> {
    let first = src.member(src.get(i)?).ok()?;
    if first.op != Opcode::Fill || first.elems < ADAM_MIN_ELEMS {
        return None;
    }
    adam_at(src, i, last)
}

/// The fewest elements of a tensor whose Adam update [`run_chain_at`] runs in one pass: four
/// AVX-512 vectors. Below it the chains run as they are (the test costs a few member decodes).
#[cfg(feature = "catalog")]
pub(crate) const ADAM_MIN_ELEMS: usize = 64;

/// How many of `entry`'s Adam updates [`run_chain_at`] runs in one pass (`catalog::adam`);
/// 0 for an unknown entry.
#[cfg(feature = "catalog")]
pub(crate) fn one_pass_adam_updates(plan: &Plan<'_>, entry: crate::plan::EntryId) -> usize {
    let Some(range) = plan.entry_range(entry) else {
        return 0;
    };
    let src = crate::exec::Records { plan, range };
    let (mut i, mut count) = (0usize, 0usize);
    while let Some(instr) = src.get(i) {
        if src.fuse_next(instr) {
            let last = chain_last(&src, i);
            match adam_candidate(&src, i, last) {
                Some((_, next)) => {
                    count = count.saturating_add(1);
                    i = next;
                }
                None => i = last.saturating_add(1),
            }
        } else {
            i = i.saturating_add(1);
        }
    }
    count
}

/// A value computed by a chain, as [`adam_at`] reads it: a leaf (an arena range of the chain's
/// length, a `fill`'s constant, a broadcast arena scalar) or an operation on earlier values
/// (indices into [`Chain::nodes`]).
#[cfg(feature = "catalog")]
#[derive(Clone, Copy, Debug, PartialEq)]
enum Node {
    Arena(usize),
    Fill(f32),
    Scalar(usize),
    Unary(Opcode, usize),
    Binary(Opcode, usize, usize),
}

/// One chain read symbolically: its values and the one it writes to the arena.
#[cfg(feature = "catalog")]
struct Chain {
    nodes: [Node; MAX_CHAIN_INSTRS * 3],
    len: usize,
    /// The arena offset its last member writes, and that value's node.
    out: (usize, usize),
}

#[cfg(feature = "catalog")]
impl Chain {
    /// The chain of members `first..=last` of `src`, every member `n` elements of `fill`,
    /// scalar `broadcast`, `add`, `sub`, `mul`, `div` or `sqrt`, its last member (only)
    /// writing the arena; `None` for any other chain.
    fn read<S: Source + ?Sized>(src: &S, first: usize, last: usize, n: usize) -> Option<Chain> {
        let mut c = Chain {
            nodes: [Node::Fill(0.0); MAX_CHAIN_INSTRS * 3],
            len: 0,
            out: (0, 0),
        };
        let mut regs: [Option<usize>; MAX_REGISTERS] = [None; MAX_REGISTERS];
        if last < first || last.saturating_sub(first) >= MAX_CHAIN_INSTRS {
            return None;
        }
        for j in first..=last {
            let m = src.member(src.get(j)?).ok()?;
            if m.elems != n {
                return None;
            }
            let arg = |c: &mut Chain, l: Loc| match l {
                Loc::Register(x) => regs.get(x).copied().flatten(),
                Loc::Arena(o) => c.push(Node::Arena(o)),
            };
            let node = match m.op {
                Opcode::Fill => Node::Fill(m.attr.scalar()),
                Opcode::Broadcast if m.from.elems == 1 => match m.args[0] {
                    Loc::Arena(o) => Node::Scalar(o),
                    Loc::Register(_) => return None,
                },
                Opcode::Sqrt => Node::Unary(m.op, arg(&mut c, m.args[0])?),
                Opcode::Add | Opcode::Sub | Opcode::Mul | Opcode::Div => {
                    let a = arg(&mut c, m.args[0])?;
                    Node::Binary(m.op, a, arg(&mut c, m.args[1])?)
                }
                _ => return None,
            };
            let node = c.push(node)?;
            match m.out {
                Loc::Register(r) => *regs.get_mut(r)? = Some(node),
                Loc::Arena(o) if j == last => c.out = (o, node),
                Loc::Arena(_) => return None,
            }
        }
        matches!(src.get(last).map(|x| src.fuse_next(x)), Some(false)).then_some(c)
    }

    fn push(&mut self, node: Node) -> Option<usize> {
        let at = self.len;
        *self.nodes.get_mut(at)? = node;
        self.len = at.saturating_add(1);
        Some(at)
    }

    fn node(&self, i: usize) -> Option<Node> {
        self.nodes.get(i).copied()
    }

    /// The arguments of node `i` when it is the binary operation `op`.
    fn binary(&self, i: usize, op: Opcode) -> Option<(usize, usize)> {
        match self.node(i)? {
            Node::Binary(o, a, b) if o == op => Some((a, b)),
            _ => None,
        }
    }

    fn arena(&self, i: usize) -> Option<usize> {
        match self.node(i)? {
            Node::Arena(o) => Some(o),
            _ => None,
        }
    }

    fn fill(&self, i: usize) -> Option<f32> {
        match self.node(i)? {
            Node::Fill(v) => Some(v),
            _ => None,
        }
    }

    fn scalar(&self, i: usize) -> Option<usize> {
        match self.node(i)? {
            Node::Scalar(o) => Some(o),
            _ => None,
        }
    }

    /// `x · k`, `x` an arena range and `k` a `fill`: `(x, k)`.
    fn times_fill(&self, i: usize) -> Option<(usize, f32)> {
        let (x, k) = self.binary(i, Opcode::Mul)?;
        Some((self.arena(x)?, self.fill(k)?))
    }
}

/// Adam's three chains over one tensor as [`adam_at`] found them.
#[cfg(feature = "catalog")]
struct AdamChains {
    at: catalog::adam::AdamAt,
    /// The constants from the chains' `fill`s (`s1` and `s2` not yet read: see
    /// [`AdamChains::consts_in`]).
    consts: catalog::adam::AdamConsts,
    /// The arena offsets of the scalars `s1` and `s2`.
    s1: usize,
    s2: usize,
    /// The position of the third chain's first member.
    c_first: usize,
}

#[cfg(feature = "catalog")]
impl AdamChains {
    /// The constants, the scalars read from `arena` as the chains' broadcasts would read them.
    fn consts_in(&self, arena: &[f32]) -> Option<catalog::adam::AdamConsts> {
        Some(catalog::adam::AdamConsts {
            s1: *arena.get(self.s1)?,
            s2: *arena.get(self.s2)?,
            ..self.consts
        })
    }
}

/// Whether the chain `i..=last` and the two after it are Adam's or AdamW's update of one tensor
/// (the form `tapeplan_planner`'s Adam and AdamW record, operand order included; see
/// `catalog::adam`), with ranges that one pass may read and write (every pair equal or
/// disjoint; each written range meets no other range but the one it replaces, the scalars
/// none): the update and the
/// position after the third chain. `None` for anything else, which runs chain by chain.
#[cfg(feature = "catalog")]
fn adam_at<S: Source + ?Sized>(src: &S, i: usize, last: usize) -> Option<(AdamChains, usize)> {
    let n = src.member(src.get(i)?).ok()?.elems;
    let b_first = last.checked_add(1)?;
    let b_last = chain_last(src, b_first);
    let c_first = b_last.checked_add(1)?;
    let c_last = chain_last(src, c_first);
    if b_last == b_first || c_last == c_first {
        return None;
    }
    // m' = m · β₁ + g · c1
    let a = Chain::read(src, i, last, n)?;
    let (x, y) = a.binary(a.out.1, Opcode::Add)?;
    let ((m, beta1), (g, c1)) = (a.times_fill(x)?, a.times_fill(y)?);
    // v' = v · β₂ + (g · g) · c2
    let b = Chain::read(src, b_first, b_last, n)?;
    let (x, y) = b.binary(b.out.1, Opcode::Add)?;
    let (v, beta2) = b.times_fill(x)?;
    let (gg, k) = b.binary(y, Opcode::Mul)?;
    let (g1, g2) = b.binary(gg, Opcode::Mul)?;
    let c2 = b.fill(k)?;
    if b.arena(g1)? != g || b.arena(g2)? != g {
        return None;
    }
    // p' = p − s1 · (m' / (√v' / s2 + ε))
    let c = Chain::read(src, c_first, c_last, n)?;
    let (p, x) = c.binary(c.out.1, Opcode::Sub)?;
    // AdamW: `p · d` in place of `p`.
    let (p, decay) = match c.times_fill(p) {
        Some((p, d)) => (p, Some(d)),
        None => (c.arena(p)?, None),
    };
    let (s1, q) = c.binary(x, Opcode::Mul)?;
    let s1 = c.scalar(s1)?;
    let (m_out, d) = c.binary(q, Opcode::Div)?;
    let (r, eps) = c.binary(d, Opcode::Add)?;
    let eps = c.fill(eps)?;
    let (root, s2) = c.binary(r, Opcode::Div)?;
    let s2 = c.scalar(s2)?;
    let v_out = match c.node(root)? {
        Node::Unary(Opcode::Sqrt, x) => c.arena(x)?,
        _ => return None,
    };
    if c.arena(m_out)? != a.out.0 || v_out != b.out.0 {
        return None;
    }
    let at = catalog::adam::AdamAt {
        n,
        m,
        v,
        p,
        g,
        m_out: a.out.0,
        v_out: b.out.0,
        p_out: c.out.0,
    };
    // The ranges the chains read, `(offset, elems)`; each written range may equal the one it
    // replaces (`m`, `v`, `p`: the first three) and meets no other range, written or read.
    let reads = [(m, n), (v, n), (p, n), (g, n), (s1, 1), (s2, 1)];
    let written = [at.m_out, at.v_out, at.p_out];
    let meets = |(a, x): (usize, usize), (b, y): (usize, usize)| {
        a < b.saturating_add(y) && b < a.saturating_add(x)
    };
    for (k, &w) in written.iter().enumerate() {
        let read_clash = reads
            .iter()
            .enumerate()
            .any(|(r, &range)| !(r == k && range == (w, n)) && meets((w, n), range));
        let write_clash = written
            .iter()
            .enumerate()
            .any(|(j, &o)| j != k && meets((w, n), (o, n)));
        if read_clash || write_clash {
            return None;
        }
    }
    let consts = catalog::adam::AdamConsts {
        beta1,
        c1,
        beta2,
        c2,
        eps,
        s1: 0.0,
        s2: 0.0,
        decay,
    };
    let adam = AdamChains {
        at,
        consts,
        s1,
        s2,
        c_first,
    };
    Some((adam, c_last.checked_add(1)?))
}

/// Whether [`run_one_tile`] takes the chain `members`: at least two members, at most a tile of
/// elements, no `broadcast`, every member a `fill` or elementwise with its output and every
/// argument of the same length.
#[cfg(all(feature = "catalog", feature = "fusion"))]
fn fits_one_tile(members: &[Decoded]) -> bool {
    let n = members.first().map_or(0, |d| d.out.dims.elems);
    n != 0
        && n <= TILE_ELEMS
        && (2..=MAX_CHAIN_INSTRS).contains(&members.len())
        && members.iter().all(|d| {
            d.op != Opcode::Broadcast
                && (d.op == Opcode::Fill || d.elementwise)
                && d.out.dims.elems == n
                && d.args
                    .iter()
                    .take(d.arity)
                    .all(|a| a.is_some_and(|a| a.dims.elems == n))
        })
}

/// Marks, in decoded instructions, the first member of every chain that [`run_one_tile`] takes
/// with the chain's member count ([`Decoded::one_tile`]), so that the run loop hands such a
/// chain to it directly, and whether it runs as a lane chain ([`Decoded::lane_chain`], asked of
/// [`lane_chain`] with the op set `O` and the plan's math profile `math`). A chain that may be
/// Adam's update (it starts with a `fill` over [`ADAM_MIN_ELEMS`] or more elements) is left to
/// [`run_chain_at`], which tries [`catalog::adam::update`] first.
#[cfg(all(feature = "catalog", feature = "fusion"))]
pub(crate) fn mark_one_tile<O: Ops>(instrs: &mut [Decoded], math: MathProfile) {
    let mut i = 0usize;
    while i < instrs.len() {
        let mut last = i;
        while instrs.get(last).is_some_and(|d| d.fuse_next) && last.saturating_add(1) < instrs.len()
        {
            last = last.saturating_add(1);
        }
        let members = instrs.get(i..=last).unwrap_or_default();
        let adam = members
            .first()
            .is_some_and(|d| d.op == Opcode::Fill && d.out.dims.elems >= ADAM_MIN_ELEMS);
        let lanes = !adam && lane_chain::<O>(members, math);
        let count = if lanes || (!adam && fits_one_tile(members)) {
            u8::try_from(members.len()).unwrap_or(0)
        } else {
            0
        };
        if let Some(d) = instrs.get_mut(i) {
            d.one_tile = count;
            d.lane_chain = lanes;
        }
        i = last.saturating_add(1);
    }
}

/// Elements of the largest chain [`run_lane_chain`] runs: one chunk of [`catalog::lanes::L2`]
/// (16 with AVX2 or AVX-512, 8 with SSE2 or simd128). Larger chains run a member at a time,
/// each over the whole tile: example `chain_cost`, lane chain ÷ unfused with AVX2, 4 members:
/// 0.62 at 16 elements, 0.96 at 32 (two chunks), 1.59 at 64 (four).
#[cfg(all(feature = "catalog", feature = "fusion", feature = "simd"))]
const LANE_CHAIN_ELEMS: usize = catalog::lanes::L2;

/// Whether `run_lane_chain` takes the chain `members`: two members or more, of at most
/// `LANE_CHAIN_ELEMS` elements, every argument as long as its output, every member a `fill`,
/// a `broadcast` that only reshapes (a bias `[n]` read as a batch of one's `[1, n]`: a copy),
/// or an op the catalog's table runs ([`catalog::runs_elementwise`]) under `math`. Never
/// without `simd`.
#[cfg(all(feature = "catalog", feature = "fusion"))]
#[cfg_attr(not(feature = "simd"), allow(clippy::extra_unused_type_parameters))]
fn lane_chain<O: Ops>(members: &[Decoded], math: MathProfile) -> bool {
    #[cfg(feature = "simd")]
    {
        let n = members.first().map_or(0, |d| d.out.dims.elems);
        n != 0
            && n <= LANE_CHAIN_ELEMS
            && (2..=MAX_CHAIN_INSTRS).contains(&members.len())
            && members.iter().all(|d| {
                d.out.dims.elems == n
                    && d.args
                        .iter()
                        .take(d.arity)
                        .all(|a| a.is_some_and(|a| a.dims.elems == n))
                    && (matches!(d.op, Opcode::Fill | Opcode::Broadcast)
                        || (d.elementwise && catalog::runs_elementwise::<O>(d.op, math)))
            })
    }
    #[cfg(not(feature = "simd"))]
    {
        let _ = (members, math);
        false
    }
}

/// Runs a small fused chain ([`lane_chain`]) a chunk of [`catalog::lanes::L2`] lanes at a time:
/// for each chunk, every member in order computes its chunk from its arguments' (register
/// values held as vectors, arena ranges loaded), through the lane operations of the catalog's
/// kernels ([`catalog::lanes::OnChunk`]), so each element's bits are those of running the
/// members one after another; only a member whose output is in the arena stores. A chunk's
/// unused lanes (past the chain's end) compute on whatever they hold and are never stored.
/// Same-index elements only, so the order of chunks cannot show, as with [`run_chain`]'s tiles.
/// NaNs agree as one class only (DESIGN's rule): the buffer kernels run the elements past their
/// last whole vector in the scalar forms, a lane chain every element in the lane forms, and some
/// ops (`maximum`, `minimum`, `sigmoid` after them) answer a NaN of another sign or payload in
/// one form than in the other (tests `stand_in_attack::lane_attack_*` with `STRICT_NAN=1`).
/// On W3's 16-element chains a member cost about as much as an unfused instruction through
/// [`chain_step`]'s kernel calls; here it is one vector operation per chunk.
///
/// # Errors
/// [`ExecError::Inconsistent`] for a register slot or arena range out of range, or an op the
/// table does not run (which [`lane_chain`] ruled out).
#[cfg(all(feature = "catalog", feature = "fusion", feature = "simd"))]
fn run_lane_chain<O: Ops>(
    arena: &mut [f32],
    math: MathProfile,
    members: &[Decoded],
) -> Result<(), ExecError> {
    use catalog::lanes::{Chunk, OnChunk, CHUNK_VECS, L, L2, V};
    /// `w` (at most `L2`) values from `at` into `out`; `None` (nothing written) outside the
    /// arena. The lanes past `w` hold what follows in the arena where a whole chunk fits in it
    /// (read as vectors: building them from scalars stalled the vector loads that followed, a
    /// one-element chain cost more than unfused), else zeros; either way they are computed
    /// lane by lane and never stored, so they cannot change a stored lane's bits.
    #[inline(always)]
    fn load(arena: &[f32], at: usize, w: usize, out: &mut Chunk) -> Option<()> {
        let src = arena.get(at..at.checked_add(w)?)?;
        let window = arena.get(at..at.checked_add(L2)?);
        if let Some(full) = window.and_then(|s| <&[f32; L2]>::try_from(s).ok()) {
            for (o, v) in out.iter_mut().zip(full.as_chunks::<L>().0) {
                *o = V::new(*v);
            }
        } else {
            let mut buf = [0.0f32; L2];
            for (b, &x) in buf.iter_mut().zip(src) {
                *b = x;
            }
            for (o, v) in out.iter_mut().zip(buf.as_chunks::<L>().0) {
                *o = V::new(*v);
            }
        }
        Some(())
    }
    /// The first `dst.len()` (at most `L2`) values of `v` into `dst`.
    #[inline(always)]
    fn store(dst: &mut [f32], v: &Chunk) {
        if let Ok(full) = <&mut [f32; L2]>::try_from(&mut *dst) {
            for (d, v) in full.as_chunks_mut::<L>().0.iter_mut().zip(v) {
                *d = v.to_array();
            }
        } else {
            for (d, x) in dst.iter_mut().zip(v.iter().flat_map(|v| v.to_array())) {
                *d = x;
            }
        }
    }
    let n = members.first().map_or(0, |d| d.out.dims.elems);
    let mut c0 = 0usize;
    while c0 < n {
        let w = n.saturating_sub(c0).min(L2);
        let zero: Chunk = [V::splat(0.0); CHUNK_VECS];
        let mut regs = [zero; MAX_REGISTERS];
        let (mut a, mut b, mut v) = (zero, zero, zero);
        for d in members {
            let bad = ExecError::Inconsistent {
                instr: u32::try_from(d.k).unwrap_or(u32::MAX),
            };
            // An argument's chunk into `x`: its register's value, or loaded from the arena.
            let arg = |p: &Option<Placed>, x: &mut Chunk| -> Option<()> {
                let p = p.as_ref()?;
                if p.register {
                    *x = *regs.get(p.offset)?;
                    Some(())
                } else {
                    load(arena, p.offset.checked_add(c0)?, w, x)
                }
            };
            if d.op == Opcode::Fill {
                v = [V::splat(d.attr.scalar()); CHUNK_VECS];
            } else if d.op == Opcode::Broadcast {
                // Of as many elements as its output (`lane_chain`): a copy.
                arg(&d.args[0], &mut v).ok_or(bad)?;
            } else {
                let [a0, a1, _] = &d.args;
                arg(a0, &mut a).ok_or(bad)?;
                if d.arity == 2 {
                    arg(a1, &mut b).ok_or(bad)?;
                }
                let k = OnChunk {
                    a: &a,
                    b: &b,
                    out: &mut v,
                };
                catalog::with_elementwise::<O, _>(d.op, d.attr.scalar(), math, k).ok_or(bad)?;
            }
            if d.out.register {
                *regs.get_mut(d.out.offset).ok_or(bad)? = v;
            } else {
                let at = d.out.offset.checked_add(c0).ok_or(bad)?;
                let dst = arena
                    .get_mut(at..at.checked_add(w).ok_or(bad)?)
                    .ok_or(bad)?;
                store(dst, &v);
            }
        }
        c0 = c0.saturating_add(L2);
    }
    Ok(())
}

/// Runs a fused chain of decoded instructions that [`mark_one_tile`] marked (it fits one tile,
/// has no `broadcast` member, every argument is as long as its output), as [`run_chain`] would
/// (the same kernels in the same order, so the same bits), from the [`Decoded`] records
/// themselves: no [`Member`] built per member, no constants kept as splats (a `fill` writes its
/// register's tile, which its readers read like any other), no tile loop, no search for the
/// chain's end. W3's sixteen-element chains took twice as long per member in [`run_chain`] as
/// the same instructions unfused.
///
/// # Errors
/// What [`chain_step`] answers; [`ExecError::Inconsistent`] for a register slot out of range
/// or an arena range that straddles its member's output (validation rules both out).
#[cfg(all(feature = "catalog", feature = "fusion"))]
#[inline(never)]
pub(crate) fn run_one_tile<O: Ops>(
    arena: &mut [f32],
    regs: &mut Registers,
    math: MathProfile,
    members: &[Decoded],
) -> Result<(), ExecError> {
    // Marked by `mark_one_tile`, which asked `lane_chain` or `fits_one_tile` when the entry
    // was decoded.
    #[cfg(feature = "simd")]
    if members.first().is_some_and(|d| d.lane_chain) {
        return run_lane_chain::<O>(arena, math, members);
    }
    debug_assert!(fits_one_tile(members));
    let n = members.first().map_or(0, |d| d.out.dims.elems);
    for d in members {
        let bad = ExecError::Inconsistent {
            instr: u32::try_from(d.k).unwrap_or(u32::MAX),
        };
        let step = Step {
            op: d.op,
            attr: &d.attr,
            arity: d.arity,
        };
        let [a0, a1, _] = &d.args;
        if d.out.register {
            let r = d.out.offset;
            let (before, rest) = regs.split_at_mut(r.min(MAX_REGISTERS));
            let (dst, after) = rest.split_first_mut().ok_or(bad)?;
            let dst = dst.get_mut(..n).ok_or(bad)?;
            let src = |a: &Option<Placed>| -> Option<Src<'_>> {
                let a = a.as_ref()?;
                if !a.register {
                    return arena.get(a.offset..a.end).map(Src::Buf);
                }
                let x = a.offset;
                let tile = match x.checked_sub(r) {
                    Some(0) => return Some(Src::Out),
                    Some(past) => after.get(past.checked_sub(1)?)?,
                    None => before.get(x)?,
                };
                tile.get(..n).map(Src::Buf)
            };
            chain_step::<O>(step, math, src(a0), src(a1), dst, d.k)?;
        } else {
            let (o, end) = (d.out.offset, d.out.end);
            let (left, rest) = arena.split_at_mut_checked(o).ok_or(bad)?;
            let (dst, right) = rest.split_at_mut_checked(n).ok_or(bad)?;
            let src = |a: &Option<Placed>| -> Option<Src<'_>> {
                let a = a.as_ref()?;
                if a.register {
                    return regs.get(a.offset)?.get(..n).map(Src::Buf);
                }
                if a.offset == o {
                    return Some(Src::Out);
                }
                pick_range(left, right, end, a.offset, a.end).map(Src::Buf)
            };
            chain_step::<O>(step, math, src(a0), src(a1), dst, d.k)?;
        }
    }
    Ok(())
}

/// Runs a fused chain (instructions `first`, `first + 1`, … decoded as `members`) a tile at a
/// time: for each tile of [`TILE_ELEMS`] elements, every member in order computes its tile from
/// the same-index elements of its arguments (arena ranges or register slots), through the
/// catalog's elementwise kernel or the reference kernel. Members are elementwise (or `fill`), so
/// an element's value depends on the same-index argument elements alone and the bits are those
/// of running the members one after another over whole buffers; validation ruled out arena
/// ranges that meet without being equal, the one case where the order of tiles could show.
fn run_chain<O: Ops>(
    arena: &mut [f32],
    regs: &mut Registers,
    math: MathProfile,
    first: usize,
    count: usize,
    member: impl Fn(usize) -> Result<Member, ExecError>,
) -> Result<(), ExecError> {
    let bad = |k: usize| ExecError::Inconsistent {
        instr: u32::try_from(k).unwrap_or(u32::MAX),
    };
    if TILE_ELEMS == 0 || count > MAX_CHAIN_INSTRS {
        return Err(bad(first));
    }
    let n_elems = member(0)?.elems;
    // A chain of several host-sized tiles has its members decoded once for the whole chain:
    // decoding a member again for every tile (a `Member` built through the stack per member per
    // tile, 3 % of W2's step in `perf`, most of it one store that a load waited on) cost as
    // much as some of the members' work on a 1024-element tile. A one-tile chain (W3's) and
    // firmware's 16-element tiles decode as they go: filling the cache cost W3 more than it
    // saved, and firmware's stack stays as it was.
    if CACHE_MEMBERS && n_elems > TILE_ELEMS {
        let mut cache = [Member::EMPTY; MEMBER_CACHE];
        let filled = match cache.get_mut(..count) {
            Some(slots) => {
                for (i, slot) in slots.iter_mut().enumerate() {
                    *slot = member(i)?;
                }
                true
            }
            None => false,
        };
        if filled {
            let cached = |i: usize| cache.get(i).ok_or(bad(first));
            return run_tiles::<O, _>(arena, regs, math, (first, count, n_elems), cached);
        }
    }
    run_tiles::<O, _>(arena, regs, math, (first, count, n_elems), member)
}

/// [`run_chain`]'s tile loop: `member(i)` is the chain's `i`-th member, decoded or cached.
fn run_tiles<O: Ops, M: core::borrow::Borrow<Member>>(
    arena: &mut [f32],
    regs: &mut Registers,
    math: MathProfile,
    (first, count, n_elems): (usize, usize, usize),
    member: impl Fn(usize) -> Result<M, ExecError>,
) -> Result<(), ExecError> {
    let bad = |k: usize| ExecError::Inconsistent {
        instr: u32::try_from(k).unwrap_or(u32::MAX),
    };
    let mut start = 0usize;
    while start < n_elems {
        // (`TILE_ELEMS` is 0 without feature `fusion`, where no chain gets here.)
        #[allow(clippy::unnecessary_min_or_max)]
        let len = n_elems.saturating_sub(start).min(TILE_ELEMS);
        // The register slots whose tile is one value (a `fill`, or a broadcast of a scalar):
        // the value, kept instead of written out and read as `Src::Splat` (the same bits as
        // reading the tile: every element is that value). Only with the catalog, whose
        // elementwise kernels read splats; without it no slot ever holds one (less code).
        let splats = cfg!(feature = "catalog");
        let mut splat: [Option<f32>; MAX_REGISTERS] = [None; MAX_REGISTERS];
        for i in 0..count {
            let k = first.saturating_add(i);
            let held = member(i)?;
            let m: &Member = held.borrow();
            // A member the catalog's elementwise kernels do not run reads its registers as
            // tiles: write out the values it reads.
            // (Tested only for a member that reads a splat: the test dispatches into the
            // catalog, which on W3's one- to sixteen-element tiles cost more than the member.)
            let reads_splat = splats
                && m.args.iter().take(m.arity).any(
                    |a| matches!(*a, Loc::Register(x) if splat.get(x).is_some_and(Option::is_some)),
                );
            let splat_ok = || {
                m.op != Opcode::Broadcast
                    && (m.op == Opcode::Fill
                        || catalog::elementwise::<O>(
                            m.op,
                            m.attr.scalar(),
                            math,
                            Src::Out,
                            Src::Out,
                            &mut [],
                        ))
            };
            if reads_splat && !splat_ok() {
                for a in m.args.iter().take(m.arity) {
                    if let Loc::Register(x) = *a {
                        if let (Some(v), Some(t)) = (
                            splat.get_mut(x).and_then(Option::take),
                            regs.get_mut(x).and_then(|t| t.get_mut(..len)),
                        ) {
                            t.fill(v);
                        }
                    }
                }
            }
            // The destination tile, written in place: a register slot, or the arena range.
            // Arguments are then the destination itself (`Src::Out`: the same slot or the same
            // arena range), another slot, or an arena range disjoint from the destination.
            match m.out {
                Loc::Register(r) => {
                    if splats && m.op == Opcode::Fill {
                        *splat.get_mut(r).ok_or(bad(k))? = Some(m.attr.scalar());
                        continue;
                    }
                    if splats && m.op == Opcode::Broadcast && m.from.elems == 1 {
                        let Loc::Arena(o) = m.args[0] else {
                            return Err(bad(k));
                        };
                        *splat.get_mut(r).ok_or(bad(k))? = Some(*arena.get(o).ok_or(bad(k))?);
                        continue;
                    }
                    let (before, rest) = regs.split_at_mut(r.min(MAX_REGISTERS));
                    let (dst, after) = rest.split_first_mut().ok_or(bad(k))?;
                    let dst = dst.get_mut(..len).ok_or(bad(k))?;
                    let src = |a: Loc| -> Option<Src<'_>> {
                        match a {
                            Loc::Register(x)
                                if splats && splat.get(x).copied().flatten().is_some() =>
                            {
                                splat.get(x).copied().flatten().map(Src::Splat)
                            }
                            Loc::Register(x) if x == r => Some(Src::Out),
                            Loc::Register(x) if x < r => before.get(x)?.get(..len).map(Src::Buf),
                            Loc::Register(x) => after
                                .get(x.checked_sub(r)?.checked_sub(1)?)?
                                .get(..len)
                                .map(Src::Buf),
                            Loc::Arena(o) => {
                                let from = o.checked_add(start)?;
                                arena.get(from..from.checked_add(len)?).map(Src::Buf)
                            }
                        }
                    };
                    if m.op == Opcode::Broadcast {
                        let Loc::Arena(o) = m.args[0] else {
                            return Err(bad(k));
                        };
                        let from = o.checked_add(m.from.elems).ok_or(bad(k))?;
                        let x = arena.get(o..from).ok_or(bad(k))?;
                        broadcast_tile(x, &m.from, &m.to, start, dst);
                        if let (true, Some(s)) = (splats, splat.get_mut(r)) {
                            *s = None;
                        }
                        continue;
                    }
                    let [a, b, _] = m.args.map(src);
                    chain_step::<O>(Step::of(m), math, a, b, dst, k)?;
                    if let (true, Some(s)) = (splats, splat.get_mut(r)) {
                        *s = None;
                    }
                }
                Loc::Arena(o) => {
                    let at = o.checked_add(start).ok_or(bad(k))?;
                    let (left, rest) = arena.split_at_mut_checked(at).ok_or(bad(k))?;
                    let (dst, right) = rest.split_at_mut_checked(len).ok_or(bad(k))?;
                    // Where the destination tile ends: `right` starts there.
                    let skip = at.checked_add(len).ok_or(bad(k))?;
                    let src = |a: Loc| -> Option<Src<'_>> {
                        match a {
                            Loc::Register(x) => {
                                match splat.get(x).copied().flatten().filter(|_| splats) {
                                    Some(v) => Some(Src::Splat(v)),
                                    None => regs.get(x)?.get(..len).map(Src::Buf),
                                }
                            }
                            Loc::Arena(p) if p == o => Some(Src::Out),
                            Loc::Arena(p) => {
                                let from = p.checked_add(start)?;
                                pick_range(left, right, skip, from, from.checked_add(len)?)
                                    .map(Src::Buf)
                            }
                        }
                    };
                    if m.op == Opcode::Broadcast {
                        // The whole source, left or right of the destination (validation keeps
                        // it apart from every range the chain writes).
                        let Loc::Arena(p) = m.args[0] else {
                            return Err(bad(k));
                        };
                        let end = p.checked_add(m.from.elems).ok_or(bad(k))?;
                        let x = pick_range(left, right, skip, p, end).ok_or(bad(k))?;
                        broadcast_tile(x, &m.from, &m.to, start, dst);
                        continue;
                    }
                    let [a, b, _] = m.args.map(src);
                    chain_step::<O>(Step::of(m), math, a, b, dst, k)?;
                }
            }
        }
        start = start.saturating_add(len);
    }
    Ok(())
}

/// A `broadcast` member over one tile: `dst[i] = x[source(start + i)]`, NumPy broadcasting of
/// `x` (extents `from`) to `to`. A copy: any order gives the same bits. A scalar source fills;
/// a source that is the target's trailing extents (a row repeated) cycles; a column, or a block
/// of values broadcast on both sides (`catalog::Pattern::Cols`, `Block`), fills runs; anything
/// else maps each element through the broadcasting index rule.
fn broadcast_tile(x: &[f32], from: &Dims, to: &Dims, start: usize, dst: &mut [f32]) {
    if let [v] = x {
        dst.fill(*v);
        return;
    }
    let n = x.len();
    let trailing = from.rank <= to.rank
        && (0..from.rank).all(|i| {
            let j = to.rank.saturating_sub(from.rank).saturating_add(i);
            from.dims.get(i) == to.dims.get(j)
        });
    if trailing && n > 0 {
        // Runs of the source, the first from the tile's offset into it.
        let mut j = start.checked_rem(n).unwrap_or(0);
        let mut rest = dst;
        while !rest.is_empty() {
            let take = n.saturating_sub(j).min(rest.len()).max(1);
            let (head, tail) = rest.split_at_mut(take.min(rest.len()));
            if let Some(src) = x.get(j..j.saturating_add(head.len())) {
                head.copy_from_slice(src);
            }
            rest = tail;
            j = 0;
        }
        return;
    }
    // A column repeated across rows (`[m, 1]` to `[m, n]`), or a block of values each repeated
    // `trail` times, the block repeated (a per-channel bias `[c, 1]` over `[n, c, positions]`):
    // runs of one value, element `e` of the target taking `x[(e / trail) mod kept]`.
    let runs = match catalog::pattern(from, to) {
        catalog::Pattern::Cols { rows, cols } => Some((rows, cols)),
        catalog::Pattern::Block { kept, trail, .. } => Some((kept, trail)),
        _ => None,
    };
    if let Some((kept, trail)) = runs.filter(|&(kept, trail)| kept == n && trail > 0) {
        // The value and the offset into its run at the tile's start, then counters: the
        // runs are short (a convolution's positions, 5 to 19 in C1), and three divisions and
        // a `memset` call per run cost more than the copy.
        let mut k = start
            .checked_div(trail)
            .and_then(|r| r.checked_rem(kept))
            .unwrap_or(0);
        let mut off = start.checked_rem(trail).unwrap_or(0);
        // The target repeats every `kept · trail` elements: runs fill the tile's first period,
        // copies of what is filled the rest (C1's periods: 475, 250 and 125 elements in tiles
        // of 1024).
        let period = kept.saturating_mul(trail).min(dst.len());
        let (first, _) = dst.split_at_mut(period);
        let mut rest = first;
        while !rest.is_empty() {
            let take = trail.saturating_sub(off).min(rest.len()).max(1);
            let (head, tail) = rest.split_at_mut(take.min(rest.len()));
            if let Some(&v) = x.get(k) {
                for d in head.iter_mut() {
                    *d = v;
                }
            }
            rest = tail;
            off = 0;
            k = k.saturating_add(1);
            if k >= kept {
                k = 0;
            }
        }
        let mut filled = period;
        while filled > 0 && filled < dst.len() {
            let n = filled.min(dst.len().saturating_sub(filled));
            dst.copy_within(..n, filled);
            filled = filled.saturating_add(n);
        }
        return;
    }
    let (Ok(fs), Ok(ts)) = (
        Shape::new(from.dims.get(..from.rank).unwrap_or(&[])),
        Shape::new(to.dims.get(..to.rank).unwrap_or(&[])),
    ) else {
        return;
    };
    for (i, d) in dst.iter_mut().enumerate() {
        if let Some(v) = x.get(fs.broadcast_source_index(&ts, start.saturating_add(i))) {
            *d = *v;
        }
    }
}

/// What [`chain_step`] needs of a member: its operation, attribute and arity.
#[derive(Clone, Copy)]
struct Step<'m> {
    op: Opcode,
    attr: &'m Attr,
    arity: usize,
}

impl<'m> Step<'m> {
    fn of(m: &'m Member) -> Step<'m> {
        Step {
            op: m.op,
            attr: &m.attr,
            arity: m.arity,
        }
    }
}

/// One member of a fused chain over one tile: `dst` from arguments `a` and `b` (`None` for a
/// range that would straddle the destination, which validation rules out; unused ones are
/// ignored). `fill` writes the attribute's bits; the catalog's elementwise kernel when it has
/// one; otherwise the reference kernel, from copies where an argument is the destination.
/// Inlined with the catalog (the hosts' path); out of line without it, where code size counts
/// (the small wasm module, firmware).
#[cfg_attr(feature = "catalog", inline(always))]
fn chain_step<O: Ops>(
    m: Step<'_>,
    math: MathProfile,
    a: Option<Src<'_>>,
    b: Option<Src<'_>>,
    dst: &mut [f32],
    k: usize,
) -> Result<(), ExecError> {
    let instr = u32::try_from(k).unwrap_or(u32::MAX);
    let bad = ExecError::Inconsistent { instr };
    if m.op == Opcode::Fill {
        // The reference kernel's meaning: every element the attribute's bits.
        dst.fill(m.attr.scalar());
        return Ok(());
    }
    let a = a.ok_or(bad)?;
    let b = if m.arity == 2 {
        b.ok_or(bad)?
    } else {
        Src::Out
    };
    if cfg!(feature = "catalog")
        && catalog::elementwise::<O>(m.op, m.attr.scalar(), math, a, b, dst)
    {
        return Ok(());
    }
    let len = dst.len();
    // The destination's values are copied out only when an argument is the destination
    // (`Src::Out`): the reference kernel reads its arguments and writes `dst` separately.
    let mut copy = [0.0f32; TILE_ELEMS];
    let reads_dst = matches!(a, Src::Out) || (m.arity == 2 && matches!(b, Src::Out));
    let copy = copy.get_mut(..if reads_dst { len } else { 0 }).ok_or(bad)?;
    copy.copy_from_slice(dst.get(..copy.len()).ok_or(bad)?);
    let copy: &[f32] = copy;
    // (`run_chain` writes out a register's value before a member that gets here reads it.)
    if cfg!(feature = "catalog")
        && (matches!(a, Src::Splat(_)) || (m.arity == 2 && matches!(b, Src::Splat(_))))
    {
        return Err(bad);
    }
    let args: [&[f32]; 2] = [a, b].map(|s| match s {
        Src::Out => copy,
        Src::Buf(x) => x,
        Src::Splat(_) => &[],
    });
    let shape = Shape::new(&[len]).map_err(|e| ExecError::Kernel {
        instr,
        error: e.into(),
    })?;
    let shapes = [shape; 2];
    eval_in::<f32, O>(
        m.op,
        m.attr.with_target(shape),
        math,
        args.get(..m.arity).ok_or(bad)?,
        shapes.get(..m.arity).ok_or(bad)?,
        dst,
    )
    .map_err(|error| ExecError::Kernel { instr, error })
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
mod tests {
    extern crate std;
    use std::{vec, vec::Vec};

    use super::broadcast_tile;
    use crate::catalog::Dims;
    use tapeplan_core::Shape;

    /// The broadcast of a per-channel column (`[c, 1]` to `[n, c, positions]`, C1's bias) and of
    /// a column across rows (`[m, 1]` to `[m, k]`), tile by tile from every kind of start and
    /// for tiles shorter and longer than the pattern's period, against NumPy's index rule
    /// element by element.
    #[test]
    fn block_broadcast_tiles_match_the_index_rule() {
        let cases: [(&[usize], &[usize]); 5] = [
            (&[25, 1], &[100, 25, 19]),
            (&[25, 1], &[7, 25, 5]),
            (&[3, 1], &[4, 3, 1]),
            (&[32, 1], &[32, 10]),
            (&[5, 1], &[5, 7]),
        ];
        // Under Miri (CI's `miri` step interprets every unit test) the small cases only.
        let cases = if cfg!(miri) { &cases[1..] } else { &cases[..] };
        for &(from, to) in cases {
            let (fs, ts) = (Shape::new(from).unwrap(), Shape::new(to).unwrap());
            let x: Vec<f32> = (0..fs.elems()).map(|i| i as f32 + 0.5).collect();
            let want: Vec<f32> = (0..ts.elems())
                .map(|i| x[fs.broadcast_source_index(&ts, i)])
                .collect();
            for tile in [1, 7, 64, 475, 1024] {
                let mut got = vec![f32::NAN; ts.elems()];
                for (t, dst) in got.chunks_mut(tile).enumerate() {
                    broadcast_tile(&x, &Dims::of(fs), &Dims::of(ts), t * tile, dst);
                }
                assert_eq!(got, want, "{from:?} -> {to:?}, tiles of {tile}");
            }
        }
    }
}
