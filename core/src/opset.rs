//! Opcode sets known at compile time: the selective build.
//!
//! A firmware knows its plan when it is built, so it need not link the kernels of opcodes the
//! plan never uses. A type implementing [`Ops`] names an [`OpSet`] as a constant; the dispatch
//! functions generic over it ([`crate::ops::infer_in`], [`crate::ops::eval_in`],
//! [`crate::ops::unary_fn_in`], [`crate::ops::binary_fn_in`],
//! [`crate::format::decode_attr_in`]) test each table row's opcode against that constant, so the
//! compiler drops the kernels, shape rules and attribute decoders of every opcode outside it,
//! and refuses such an opcode with [`crate::OpError::Unsupported`] naming it. [`BuildOps`] is the
//! whole vocabulary of the build (what the functions without `_in` use): hosts keep every
//! opcode.
//!
//! ```
//! use tapeplan_core::{op_set, OpSet, Opcode, Ops};
//!
//! // What `tapeplan emit --op-set` writes for a plan of an MLP trained with SGD.
//! op_set!(pub struct MlpOps = [Add, MatMul, Tanh, Sub, Mul]);
//! assert!(MlpOps::SET.contains(Opcode::MatMul));
//! assert!(!MlpOps::SET.contains(Opcode::Conv));
//! assert_eq!(MlpOps::SET.len(), 5);
//! ```

use crate::{AttrKind, Opcode};

/// A set of opcodes, one bit per opcode byte (every byte of the table is below 128).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct OpSet {
    bits: u128,
}

impl OpSet {
    /// No opcode.
    pub const EMPTY: OpSet = OpSet { bits: 0 };

    /// Every opcode of the table.
    pub const ALL: OpSet = {
        let mut s = OpSet::EMPTY;
        let mut i = 0;
        while i < Opcode::ALL.len() {
            s = s.with(Opcode::ALL[i]);
            i += 1;
        }
        s
    };

    /// The core set ([`Opcode::in_core_set`]): what every build dispatches.
    pub const CORE: OpSet = {
        let mut s = OpSet::EMPTY;
        let mut i = 0;
        while i < Opcode::ALL.len() {
            if Opcode::ALL[i].in_core_set() {
                s = s.with(Opcode::ALL[i]);
            }
            i += 1;
        }
        s
    };

    /// This build's vocabulary: [`OpSet::ALL`] with the `all-ops` feature, else
    /// [`OpSet::CORE`] (what [`crate::ops::in_vocabulary`] answers).
    pub const BUILD: OpSet = if cfg!(feature = "all-ops") {
        OpSet::ALL
    } else {
        OpSet::CORE
    };

    /// This set with `op` added.
    #[must_use]
    pub const fn with(self, op: Opcode) -> OpSet {
        OpSet {
            bits: self.bits | 1u128 << (op as u8 & 127),
        }
    }

    /// True when `op` is in the set.
    pub const fn contains(self, op: Opcode) -> bool {
        self.bits >> (op as u8 & 127) & 1 != 0
    }

    /// The opcodes in both sets.
    #[must_use]
    pub const fn intersection(self, other: OpSet) -> OpSet {
        OpSet {
            bits: self.bits & other.bits,
        }
    }

    /// The opcodes in either set.
    #[must_use]
    pub const fn union(self, other: OpSet) -> OpSet {
        OpSet {
            bits: self.bits | other.bits,
        }
    }

    /// The number of opcodes in the set.
    pub const fn len(self) -> usize {
        self.bits.count_ones() as usize
    }

    /// True for the empty set.
    pub const fn is_empty(self) -> bool {
        self.bits == 0
    }

    /// True when some opcode of the set takes an attribute of `kind`: the attribute decoders
    /// a build of this set needs.
    pub const fn takes(self, kind: AttrKind) -> bool {
        let mut i = 0;
        while i < Opcode::ALL.len() {
            let op = Opcode::ALL[i];
            if self.contains(op) && op.attr_kind() as u8 == kind as u8 {
                return true;
            }
            i += 1;
        }
        false
    }

    /// The set's opcodes as [`op_set!`](crate::op_set) takes them: their [`Opcode`] variant names,
    /// comma-separated, in table order (`Add, MatMul, Conv`).
    pub fn variants(self) -> impl core::fmt::Display {
        struct Variants(OpSet);
        impl core::fmt::Display for Variants {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                for (i, op) in self.0.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{op:?}")?;
                }
                Ok(())
            }
        }
        Variants(self)
    }

    /// The set's opcodes, in table order.
    pub fn iter(self) -> impl Iterator<Item = Opcode> {
        Opcode::ALL
            .iter()
            .copied()
            .filter(move |&op| self.contains(op))
    }
}

impl FromIterator<Opcode> for OpSet {
    fn from_iter<I: IntoIterator<Item = Opcode>>(iter: I) -> OpSet {
        iter.into_iter().fold(OpSet::EMPTY, OpSet::with)
    }
}

impl core::fmt::Debug for OpSet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl core::fmt::Display for OpSet {
    /// The opcodes' text names (`docs/plan-format.md`), comma-separated, in table order.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, op) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(op.name())?;
        }
        Ok(())
    }
}

/// An opcode set fixed at compile time: the type parameter of the selective build's dispatch
/// (`docs/selective-build.md`). Implement it with [`op_set!`](crate::op_set).
pub trait Ops {
    /// The opcodes a build over this type dispatches (intersected with the build's
    /// vocabulary, [`OpSet::BUILD`]).
    const SET: OpSet;

    /// The CRC-32 (the plan header's `crc32`) of the one plan a build over this type runs,
    /// when that plan was validated in full on the host as the build was made: a firmware
    /// whose build script plans the run and compiles the plan's bytes into the image
    /// (`firmware-demo/build.rs`). The runtime's `Plan::parse_selective` over such a type then
    /// checks the header (magic, version, sizes, the CRC-32 of the bytes, profiles, caps) and
    /// that the plan's CRC-32 is this one, and skips the per-record validation, whose code
    /// (about 7 KiB on a Cortex-M4F) is then not linked: a plan changed since (a corrupt
    /// flash image, another plan) is refused, and none other runs. `None` (the default):
    /// every plan is validated in full. Only for a plan whose storage is as trusted as the
    /// code's (CRC-32 detects corruption, not forgery): `docs/threat-model.md`.
    const PREVALIDATED_CRC32: Option<u32> = None;
}

/// The whole vocabulary of this build ([`OpSet::BUILD`]): what every function without the
/// `_in` suffix dispatches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BuildOps;

impl Ops for BuildOps {
    const SET: OpSet = OpSet::BUILD;
}

/// Defines a unit type implementing [`Ops`] for the listed [`Opcode`] variants:
/// `op_set!(pub struct PlanOps = [Add, MatMul, Conv]);` (what `tapeplan emit --op-set` and
/// [`OpSet::variants`] write). A name outside the table does not compile. With
/// `; prevalidated_crc32 = 0x…` after the list, the type also names the one plan the build
/// runs, validated on the host ([`Ops::PREVALIDATED_CRC32`]).
#[macro_export]
macro_rules! op_set {
    (@define $(#[$meta:meta])* $vis:vis $name:ident [$($op:ident),*] $crc:expr) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        $vis struct $name;

        impl $crate::Ops for $name {
            const SET: $crate::OpSet = $crate::OpSet::EMPTY
                $( .with($crate::Opcode::$op) )*;
            const PREVALIDATED_CRC32: ::core::option::Option<u32> = $crc;
        }
    };
    ($(#[$meta:meta])* $vis:vis struct $name:ident = [$($op:ident),* $(,)?]) => {
        $crate::op_set!(@define $(#[$meta])* $vis $name [$($op),*] ::core::option::Option::None);
    };
    ($(#[$meta:meta])* $vis:vis struct $name:ident = [$($op:ident),* $(,)?];
     prevalidated_crc32 = $crc:expr) => {
        $crate::op_set!(
            @define $(#[$meta])* $vis $name [$($op),*] ::core::option::Option::Some($crc)
        );
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_follow_the_table() {
        for &op in Opcode::ALL {
            assert!(OpSet::ALL.contains(op), "{op}");
            assert_eq!(OpSet::CORE.contains(op), op.in_core_set(), "{op}");
            assert_eq!(
                OpSet::BUILD.contains(op),
                crate::ops::in_vocabulary(op),
                "{op}"
            );
            let one = OpSet::EMPTY.with(op);
            assert_eq!(one.len(), 1);
            assert_eq!(one.iter().collect::<OpSet>(), one);
            assert!(one.takes(op.attr_kind()), "{op}");
        }
        // Counted by hand from the table: 57 rows, 28 of them `core`.
        assert_eq!(OpSet::ALL.len(), 57);
        assert_eq!(OpSet::CORE.len(), 28);
        let mlp = OpSet::EMPTY.with(Opcode::MatMul).with(Opcode::Add);
        assert!(mlp.takes(AttrKind::None) && !mlp.takes(AttrKind::Conv));
        assert!(OpSet::EMPTY.with(Opcode::Conv).takes(AttrKind::Conv));
        assert!(OpSet::EMPTY.is_empty() && !mlp.is_empty());
    }
}
