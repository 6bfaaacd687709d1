//! Arithmetic profiles: how the matrix product forms each multiply-accumulate step. A plan
//! records its profile (header flag bit 1, see `docs/plan-format.md` and
//! `docs/arith-profiles.md`), and every reader of the plan (the oracle, the planner's constant
//! folding, the host interpreter, the runtime's reference path and catalog) computes under it,
//! so each profile is defined bit for bit and verified against the oracle.
//!
//! - [`ArithProfile::Separate`] (the default): `acc = acc + a · b`, a rounded product then a
//!   rounded sum (two roundings), the bits every plan had before profiles existed.
//! - [`ArithProfile::Fma`]: `acc = fma(a, b, acc)`, IEEE-754's `fusedMultiplyAdd` (the exact
//!   `a · b + acc`, rounded once to nearest-even), over the same `p` order. Its bits are those of
//!   `libm::fmaf` (the reference kernel's definition); a catalog kernel may use a hardware fused
//!   multiply-add (x86 FMA3, AVX-512F), which IEEE-754 requires to give the same result, and a
//!   test checks it does.
//!
//! Only `matmul` changes (the convolutions and every other kernel are the same in both).
//!
//! Builds choose whether they carry the `fma` kernels with the feature `arith-fma` (on by
//! default; a firmware for a device without a fused multiply-add may leave it out):
//! [`ArithProfile::in_build`].

use core::fmt;

/// How the matrix product forms each multiply-accumulate (see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ArithProfile {
    /// A rounded product, then a rounded sum: the default.
    #[default]
    Separate = 0,
    /// One fused multiply-add (one rounding) per step.
    Fma = 1,
}

impl ArithProfile {
    /// Both profiles, separate first.
    pub const ALL: [ArithProfile; 2] = [ArithProfile::Separate, ArithProfile::Fma];

    /// The profile's name: `separate` or `fma` (the CLI's `--arith` values).
    pub const fn name(self) -> &'static str {
        match self {
            ArithProfile::Separate => "separate",
            ArithProfile::Fma => "fma",
        }
    }

    /// The profile named `name` (`separate` or `fma`).
    pub fn from_name(name: &str) -> Option<ArithProfile> {
        ArithProfile::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The profile a plan header's flags word records: bit 1
    /// ([`crate::format::FLAG_ARITH_FMA`]). Other bits are the caller's to reject.
    pub const fn from_flags(flags: u32) -> ArithProfile {
        if flags & crate::format::FLAG_ARITH_FMA != 0 {
            ArithProfile::Fma
        } else {
            ArithProfile::Separate
        }
    }

    /// The header flag bits that record this profile.
    pub const fn flags(self) -> u32 {
        match self {
            ArithProfile::Separate => 0,
            ArithProfile::Fma => crate::format::FLAG_ARITH_FMA,
        }
    }

    /// True when this build carries the profile's kernels (`separate` always; `fma` with the
    /// feature `arith-fma`); a kernel asked to run under another profile answers
    /// [`crate::OpError::ArithProfile`].
    pub const fn in_build(self) -> bool {
        match self {
            ArithProfile::Separate => true,
            ArithProfile::Fma => cfg!(feature = "arith-fma"),
        }
    }
}

impl fmt::Display for ArithProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
