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
    let mut last = i;
    while src.get(last).is_some_and(|x| src.fuse_next(x))
        && src.get(last.saturating_add(1)).is_some()
    {
        last = last.saturating_add(1);
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
                    chain_step::<O>(m, math, a, b, dst, k)?;
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
                    chain_step::<O>(m, math, a, b, dst, k)?;
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

/// One member of a fused chain over one tile: `dst` from arguments `a` and `b` (`None` for a
/// range that would straddle the destination, which validation rules out; unused ones are
/// ignored). `fill` writes the attribute's bits; the catalog's elementwise kernel when it has
/// one; otherwise the reference kernel, from copies where an argument is the destination.
fn chain_step<O: Ops>(
    m: &Member,
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
