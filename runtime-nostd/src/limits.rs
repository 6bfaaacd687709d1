//! Caps on a plan's sections, checked before anything else is decoded.

/// Caps on the number of records in each section of a plan. The format allows at most
/// [`Limits::DEFAULT`]; a caller may tighten the caps (e.g. to the size of a device's plans)
/// with [`crate::Plan::parse_with_limits`], and values above the defaults count as the defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The most tensor records.
    pub max_tensors: u32,
    /// The most instruction records.
    pub max_instrs: u32,
    /// The most entry records.
    pub max_entries: u32,
    /// The most binding records.
    pub max_bindings: u32,
    /// The most work one entry may do, in element operations ([`crate::Plan::entry_work`]:
    /// a matrix product `[m, k] x [k, n]` counts `m·k·n`, every other instruction the elements
    /// it reads and writes). `None` (the default) derives the cap from the plan itself:
    /// [`Limits::derived_work_cap`], so an untrusted plan cannot buy unbounded run time with few
    /// bytes and a small arena. A device with a watchdog sets `Some(cap)` so a plan that would
    /// run too long is refused before it runs; `Some(u64::MAX)` is no cap (trusted plans only).
    pub max_work_per_entry: Option<u64>,
}

impl Limits {
    /// The spec's caps (`docs/plan-format.md`, "Validation", rule 1): 16 384 tensors,
    /// 16 384 instructions, 16 entries, 4096 bindings.
    ///
    /// Where they come from: a MobileNetV2-style network (53 convolutions, each with batch
    /// normalization in training mode) planned for training with Adam has about 5 200 tensors,
    /// 6 800 instructions and 1 200 bindings, so the caps leave about three times that. They
    /// also bound validation's time on hostile bytes: the overlap sweep is at most
    /// `tensors²` short moves and the duplicate-name check `bindings²` name comparisons
    /// (about 2.7e8 and 1.7e7), each a fraction of a second on a host. Until 2026-12 they were
    /// 4096, 8192, 16 and 512; a plan within the old caps is valid under both.
    ///
    /// The validator's working memory grows with the tensors: [`crate::Plan::parse`] keeps
    /// one for [`crate::DEFAULT_SCRATCH_TENSORS`] (4096) on the stack; larger plans
    /// go through [`crate::Plan::parse_with_scratch`] (or, with feature `alloc`,
    /// `Plan::parse_alloc`).
    pub const DEFAULT: Limits = Limits {
        max_tensors: 16_384,
        max_instrs: 16_384,
        max_entries: 16,
        max_bindings: 4096,
        max_work_per_entry: None,
    };

    /// The element operations per plan byte per arena element that the derived work cap
    /// allows ([`Limits::derived_work_cap`]).
    ///
    /// Where the 64 comes from: every instruction but a matrix product reads and writes tensors
    /// that live in the arena (or, in a fused chain, register tiles of an arena tensor's
    /// shape), so its work is at most a few passes over the arena, and an instruction record
    /// and its output's tensor record take 48 bytes. A matrix product `[m, k] x [k, n]` does
    /// `m·k·n` element operations over an arena of at least `m·k + k·n + m·n` elements: at most
    /// `(m·k·n)^(1/3) / 3` per arena element, which 64 per plan byte covers for every product
    /// whose plan (header 52 bytes, three tensor records, one instruction, one entry) is a few
    /// hundred bytes and whose sides stay below about 40 000. A legitimate plan that needs more
    /// sets the cap itself.
    pub const WORK_PER_BYTE_PER_ARENA_ELEM: u64 = 64;

    /// The work cap a plan of `plan_bytes` bytes over an arena of `arena_elems` elements gets
    /// by default: `WORK_PER_BYTE_PER_ARENA_ELEM · plan_bytes · max(arena_elems, 1)`, saturating.
    /// Run time then grows with what the caller supplies (the plan's bytes and the arena's
    /// memory), never with what a few hostile bytes claim (a register tile of `2^28` elements
    /// in a chain over a 4-element arena).
    pub const fn derived_work_cap(plan_bytes: usize, arena_elems: usize) -> u64 {
        let arena = if arena_elems == 0 {
            1
        } else {
            arena_elems as u64
        };
        Limits::WORK_PER_BYTE_PER_ARENA_ELEM
            .saturating_mul(plan_bytes as u64)
            .saturating_mul(arena)
    }

    /// The work cap for a plan of `plan_bytes` bytes over `arena_elems` elements under these
    /// limits: `max_work_per_entry`, or the derived cap when it is `None`.
    pub const fn work_cap(&self, plan_bytes: usize, arena_elems: usize) -> u64 {
        match self.max_work_per_entry {
            Some(cap) => cap,
            None => Limits::derived_work_cap(plan_bytes, arena_elems),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}
