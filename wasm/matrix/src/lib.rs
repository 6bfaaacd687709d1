//! # tapeplan-wasm-matrix
//!
//! The cross-target matrix's WebAssembly cells (`cargo xtask matrix`,
//! `docs/cross-target-matrix.md`): `tests/matrix.rs` runs each case `cargo xtask matrix` wrote
//! (a run description's plan, rows, initial parameters and the host oracle's digest after every
//! step; the Hessian-vector product entry's plan and digests) through the firmware library, the
//! code a device runs, under `wasm-bindgen-test` in Node and headless Chromium, and compares
//! every step's digest. This library holds the case format's reader.
#![no_std]
#![forbid(unsafe_code)]

/// A case's description (`meta.txt`): `key value` lines.
#[derive(Clone, Copy, Debug)]
pub struct Meta<'a>(pub &'a str);

impl<'a> Meta<'a> {
    /// The value of `key`, the rest of its line.
    ///
    /// # Panics
    /// When the case has no such key (a case written by another `cargo xtask matrix`).
    pub fn get(&self, key: &str) -> &'a str {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("the case has no {key}"))
    }

    /// The value of `key` as a number.
    ///
    /// # Panics
    /// As [`Meta::get`], and when the value is not a number.
    pub fn num(&self, key: &str) -> u64 {
        self.get(key)
            .parse()
            .unwrap_or_else(|_| panic!("the case's {key} is not a number"))
    }
}

/// The `state` digests of a transcript, in order.
pub fn states(transcript: &str) -> impl Iterator<Item = u64> + '_ {
    transcript.lines().filter_map(|l| {
        let (_, hex) = l.strip_prefix("state ")?.split_once(' ')?;
        u64::from_str_radix(hex, 16).ok()
    })
}

/// Little-endian `u64`s.
pub fn u64s(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes.chunks_exact(8).map(|c| {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        u64::from_le_bytes(b)
    })
}
