//! Hostile bytes: nothing panics, reads or writes outside the arena, or loops for long.

use crate::common;

use common::*;
use proptest::prelude::*;
use tapeplan_core::format::HEADER_BYTES;
use tapeplan_runtime::{DecodeError, ParseError, Plan};

fn plans() -> Vec<Vec<u8>> {
    let mut v = vec![mlp_plan()];
    // A plan with every opcode class, for more interesting mutations.
    let mut b = mlp_builder();
    let t = b.tensor(72, &[2, 4], tapeplan_core::format::TensorKind::Scratch);
    let r = b.tensor(80, &[4], tapeplan_core::format::TensorKind::Scratch);
    let m = b.tensor(84, &[4, 2], tapeplan_core::format::TensorKind::Scratch);
    b.arena_elems = 92;
    b.instr(tapeplan_core::Opcode::Relu, t, &[mlp::Y], 0);
    b.instr(tapeplan_core::Opcode::SumTo, r, &[t], 0);
    b.instr(tapeplan_core::Opcode::Transpose, m, &[t], 0);
    let e = b.entry("extra", 0, 10);
    let _ = e;
    b.bind("x", tapeplan_core::format::BindingKind::Input, 2, mlp::X);
    b.bind("r", tapeplan_core::format::BindingKind::Output, 2, r);
    b.bind("m", tapeplan_core::format::BindingKind::Output, 2, m);
    b.bind(
        "w",
        tapeplan_core::format::BindingKind::Update,
        2,
        mlp::W_NEW,
    );
    v.push(b.build());
    for p in &v {
        Plan::parse(p).unwrap();
        run_everything(p);
    }
    v
}

#[test]
fn truncated_at_every_length() {
    for p in plans() {
        for n in 0..p.len() {
            let e = Plan::parse(&p[..n]).unwrap_err();
            assert_eq!(
                e,
                ParseError::Decode(DecodeError::Truncated {
                    needed_bytes: if n < HEADER_BYTES {
                        HEADER_BYTES
                    } else {
                        p.len()
                    },
                    found_bytes: n
                })
            );
            // Still truncated with the header's total_bytes and CRC fixed up to match.
            if n >= HEADER_BYTES {
                let fixed = with_header(p[..n].to_vec(), |h| h.total_bytes = n as u32);
                assert!(Plan::parse(&fixed).is_err(), "accepted truncation at {n}");
            }
        }
    }
}

#[test]
fn every_byte_flipped() {
    for p in plans() {
        for i in 0..p.len() {
            for mask in [0xFFu8, 0x01, 0x80, 0x10] {
                let mut b = p.clone();
                b[i] ^= mask;
                // The checksum (or the header before it) stops every single-byte change.
                assert!(Plan::parse(&b).is_err(), "byte {i} ^ {mask:#x} accepted");
                // With the CRC recomputed, validation decides; if it accepts, running is safe.
                recrc(&mut b);
                if let Ok(plan) = Plan::parse(&b) {
                    assert!(plan.arena_elems() > 0);
                }
                run_everything(&b);
            }
        }
    }
}

#[test]
fn every_field_set_to_extremes() {
    // Every aligned u32 / u16 word set to awkward values, CRC recomputed.
    for p in plans() {
        for i in (0..p.len()).step_by(2) {
            for v in [
                0u32,
                1,
                2,
                3,
                4,
                0xFF,
                0xFFFF,
                0x7FFF_FFFF,
                0xFFFF_FFFC,
                u32::MAX,
            ] {
                let mut b = p.clone();
                let end = (i + 4).min(b.len());
                b[i..end].copy_from_slice(&v.to_le_bytes()[..end - i]);
                recrc(&mut b);
                run_everything(&b);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_damage_with_crc_recomputed(
        which in 0usize..2,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
    ) {
        let mut b = plans().swap_remove(which);
        for (at, v) in edits {
            let n = b.len();
            b[at % n] = v;
        }
        recrc(&mut b);
        run_everything(&b);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut b = bytes;
        if b.len() >= HEADER_BYTES {
            b[..4].copy_from_slice(b"TPLN");
            b[4..6].copy_from_slice(&tapeplan_core::format::VERSION.to_le_bytes());
            b[6..8].copy_from_slice(&(HEADER_BYTES as u16).to_le_bytes());
            let n = b.len() as u32;
            b[8..12].copy_from_slice(&n.to_le_bytes());
            recrc(&mut b);
        }
        run_everything(&b);
    }
}
