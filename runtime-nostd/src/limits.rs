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
    /// a matrix product `[m, k] x [k, n]` counts `m·k·n`, a pooling instruction the elements
    /// it reads and writes times its kernel's taps, every other instruction the elements it
    /// reads and writes). A device with a watchdog sets this so a plan that would run too
    /// long is refused before it runs. `u64::MAX` (the default) is no cap.
    pub max_work_per_entry: u64,
}

impl Limits {
    /// The spec's caps (`docs/plan-format.md`, "Validation", rule 1): 4096 tensors,
    /// 8192 instructions, 16 entries, 512 bindings.
    pub const DEFAULT: Limits = Limits {
        max_tensors: 4096,
        max_instrs: 8192,
        max_entries: 16,
        max_bindings: 512,
        max_work_per_entry: u64::MAX,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}
