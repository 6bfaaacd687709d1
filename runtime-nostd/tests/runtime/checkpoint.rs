//! Checkpoints: golden bytes, save → restore round trips, and every rejection leaves the
//! arena's bits exactly as they were.

use crate::common;

use common::*;
use tapeplan_core::format::{BindingKind, TensorKind, CRC32};
use tapeplan_runtime::{
    checkpoint_bytes, restore_checkpoint, save_checkpoint, write_checkpoint, Checkpoint,
    CheckpointError, Plan, Session, CHECKPOINT_HEADER_BYTES, CHECKPOINT_VERSION,
};

/// The mlp plan's session after a few training steps from awkward parameters.
fn trained_arena(plan: &Plan<'_>) -> Vec<f32> {
    let mut arena = vec![0.0f32; plan.arena_elems()];
    let mut s = Session::bind(plan, &mut arena).unwrap();
    s.load_parameter("w", &floats(1, 12)).unwrap();
    s.load_parameter("b", &floats(2, 4)).unwrap();
    let train = plan.entry("train_step").unwrap();
    for step in 0..3 {
        s.set_input(train, "x", &floats(10 + step, 6)).unwrap();
        s.run(train).unwrap();
    }
    arena
}

fn saved(plan: &Plan<'_>, arena: &mut [f32], sequence: u32) -> Vec<u8> {
    let s = Session::bind(plan, arena).unwrap();
    let mut buf = vec![0u8; checkpoint_bytes(plan)];
    assert_eq!(save_checkpoint(&s, sequence, &mut buf), Ok(buf.len()));
    buf
}

/// An arena whose every element is distinct and recognizable, to see any write.
fn sentinel_arena(n: usize) -> Vec<f32> {
    (0..n).map(|i| -1000.0 - i as f32).collect()
}

fn recrc_checkpoint(b: &mut [u8]) {
    let mut d = CRC32.digest();
    d.update(&b[..12]);
    d.update(&b[16..]);
    let crc = d.finalize();
    b[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// Restores `bytes` into a sentinel arena and checks that it failed with `expected` and
/// wrote nothing.
fn assert_rejected(plan: &Plan<'_>, bytes: &[u8], expected: impl Fn(&CheckpointError) -> bool) {
    let mut arena = sentinel_arena(plan.arena_elems() + 3);
    let before = bits(&arena);
    let mut s = Session::bind(plan, &mut arena).unwrap();
    let err = restore_checkpoint(&mut s, bytes).unwrap_err();
    assert!(expected(&err), "unexpected error: {err:?}");
    assert!(!err.to_string().is_empty());
    assert_eq!(
        bits(&arena),
        before,
        "a rejected checkpoint wrote the arena ({err})"
    );
}

#[test]
fn size_is_header_plus_four_bytes_per_persistent_element() {
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    assert_eq!(plan.persistent_elems(), 16);
    assert_eq!(checkpoint_bytes(&plan), 32 + 4 * 16);
    assert_eq!(CHECKPOINT_HEADER_BYTES, 32);
}

#[test]
fn golden_bytes() {
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let mut arena = vec![0.0f32; plan.arena_elems()];
    {
        let mut s = Session::bind(&plan, &mut arena).unwrap();
        let w: Vec<f32> = (0..12).map(|i| i as f32 * 0.5).collect();
        s.load_parameter("w", &w).unwrap();
        s.load_parameter("b", &[-0.0, 1.0, f32::MIN_POSITIVE, -2.5])
            .unwrap();
    }
    let ck = saved(&plan, &mut arena, 0x0102_0304);
    #[rustfmt::skip]
    let header: [u8; 32] = [
        b'T', b'P', b'C', b'K',   // magic
        1, 0,                     // version 1
        32, 0,                    // header_bytes
        96, 0, 0, 0,              // total_bytes = 32 + 4 * 16
        0, 0, 0, 0,               // crc32 (checked below)
        0x01, 0x00, 0xed, 0x5e,   // plan_id 0x5eed0001
        16, 0, 0, 0,              // persistent_elems
        4, 3, 2, 1,               // sequence
        0, 0, 0, 0,               // reserved
    ];
    assert_eq!(&ck[..12], &header[..12]);
    assert_eq!(&ck[16..32], &header[16..32]);
    let mut d = CRC32.digest();
    d.update(&ck[..12]);
    d.update(&ck[16..]);
    assert_eq!(
        u32::from_le_bytes(ck[12..16].try_into().unwrap()),
        d.finalize()
    );
    // A pinned CRC: any change to the bytes (or to the checksum's definition) shows here.
    assert_eq!(
        u32::from_le_bytes(ck[12..16].try_into().unwrap()),
        GOLDEN_CRC,
        "golden checkpoint CRC changed"
    );
    // Payload: w (elements 0..12) then b (12..16), each f32 as little-endian bits.
    assert_eq!(&ck[32..36], &0.0f32.to_le_bytes());
    assert_eq!(&ck[36..40], &0.5f32.to_le_bytes());
    assert_eq!(&ck[32 + 4 * 12..32 + 4 * 13], &[0, 0, 0, 0x80]); // -0.0
    assert_eq!(&ck[32 + 4 * 14..32 + 4 * 15], &[0, 0, 0x80, 0]); // MIN_POSITIVE
    let c = Checkpoint::parse(&ck).unwrap();
    assert_eq!(
        (
            c.plan_id(),
            c.persistent_elems(),
            c.sequence(),
            c.total_bytes()
        ),
        (0x5eed_0001, 16, 0x0102_0304, 96)
    );
}

/// Also computed independently: Python `zlib.crc32` over the same 92 bytes.
const GOLDEN_CRC: u32 = 0x3278_3ef5;

#[test]
fn save_restore_round_trip_into_a_fresh_arena_continues_bit_identically() {
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let mut a = trained_arena(&plan);
    let ck = saved(&plan, &mut a, 7);

    // A fresh arena, full of garbage, bound to a plan parsed again from the same bytes.
    let plan2 = Plan::parse(&bytes).unwrap();
    let mut b = vec![f32::NAN; plan2.arena_elems()];
    let mut s = Session::bind(&plan2, &mut b).unwrap();
    assert_eq!(restore_checkpoint(&mut s, &ck), Ok(7));
    let persistent = plan.persistent_elems();
    assert_eq!(bits(&b[..persistent]), bits(&a[..persistent]));
    assert_eq!(
        b[..persistent]
            .iter()
            .map(|x| x.to_bits())
            .collect::<Vec<_>>(),
        a[..persistent]
            .iter()
            .map(|x| x.to_bits())
            .collect::<Vec<_>>(),
        "exact bits, NaN payloads and signed zeros included"
    );

    // Both go on for three more steps: the same bits.
    let train = plan.entry("train_step").unwrap();
    for arena in [&mut a, &mut b] {
        let mut s = Session::bind(&plan, arena).unwrap();
        for step in 0..3 {
            s.set_input(train, "x", &floats(20 + step, 6)).unwrap();
            s.run(train).unwrap();
        }
    }
    assert_eq!(bits(&a[..persistent]), bits(&b[..persistent]));

    // Saving again gives the same bytes.
    let again = saved(&plan, &mut a, 7);
    assert_eq!(saved(&plan, &mut b, 7), again);
}

#[test]
fn save_writes_only_its_bytes_and_refuses_a_short_buffer() {
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let mut arena = trained_arena(&plan);
    let s = Session::bind(&plan, &mut arena).unwrap();
    let n = checkpoint_bytes(&plan);

    let mut short = vec![0xAAu8; n - 1];
    assert_eq!(
        save_checkpoint(&s, 0, &mut short),
        Err(CheckpointError::BufferTooSmall {
            needed_bytes: n,
            found_bytes: n - 1
        })
    );
    assert!(short.iter().all(|&b| b == 0xAA), "a refused save wrote");

    let mut long = vec![0xAAu8; n + 10];
    assert_eq!(save_checkpoint(&s, 0, &mut long), Ok(n));
    assert!(long[n..].iter().all(|&b| b == 0xAA));
    assert!(Checkpoint::parse(&long[..n]).is_ok());

    let mut buf = vec![0u8; n];
    assert_eq!(
        write_checkpoint(&plan, &[0.0; 3], 0, &mut buf),
        Err(CheckpointError::PersistentLength {
            expected_elems: 16,
            found_elems: 3
        })
    );
}

#[test]
fn truncation_at_every_length_is_rejected_and_writes_nothing() {
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let mut a = trained_arena(&plan);
    let ck = saved(&plan, &mut a, 1);
    for len in 0..ck.len() {
        assert_rejected(
            &plan,
            &ck[..len],
            |e| matches!(e, CheckpointError::Truncated { found_bytes, .. } if *found_bytes == len),
        );
        assert!(Checkpoint::parse_prefix(&ck[..len]).is_err());
    }
}

#[test]
fn every_flipped_bit_and_byte_is_rejected_and_writes_nothing() {
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let mut a = trained_arena(&plan);
    let ck = saved(&plan, &mut a, 1);
    for i in 0..ck.len() {
        for mask in [1u8, 2, 4, 8, 16, 32, 64, 128, 0xFF] {
            let mut bad = ck.clone();
            bad[i] ^= mask;
            assert_rejected(&plan, &bad, |_| true);
        }
    }
}

#[test]
fn trailing_bytes_are_rejected_but_a_slot_prefix_is_read() {
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let mut a = trained_arena(&plan);
    let ck = saved(&plan, &mut a, 9);
    let mut slot = ck.clone();
    slot.extend([0xFF; 40]); // the erased rest of a flash slot
    assert_rejected(&plan, &slot, |e| {
        *e == CheckpointError::TrailingBytes {
            expected_bytes: ck.len(),
            found_bytes: ck.len() + 40,
        }
    });
    let c = Checkpoint::parse_prefix(&slot).unwrap();
    assert_eq!((c.sequence(), c.total_bytes()), (9, ck.len()));
    let mut fresh = vec![0.0f32; plan.arena_elems()];
    let mut s = Session::bind(&plan, &mut fresh).unwrap();
    c.restore(&mut s).unwrap();
    assert_eq!(bits(&fresh[..16]), bits(&a[..16]));
}

#[test]
fn an_erased_slot_is_bad_magic() {
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let erased = vec![0xFFu8; checkpoint_bytes(&plan)];
    assert_rejected(&plan, &erased, |e| {
        *e == CheckpointError::BadMagic { found: [0xFF; 4] }
    });
}

#[test]
fn one_test_per_header_rejection() {
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let mut a = trained_arena(&plan);
    let ck = saved(&plan, &mut a, 1);
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = ck.clone();
        f(&mut b);
        recrc_checkpoint(&mut b);
        b
    };

    let future = with(&|b| b[4..6].copy_from_slice(&(CHECKPOINT_VERSION + 1).to_le_bytes()));
    assert_rejected(&plan, &future, |e| {
        *e == CheckpointError::FutureVersion {
            found: CHECKPOINT_VERSION + 1,
            supported: CHECKPOINT_VERSION,
        }
    });
    let zero = with(&|b| b[4..6].copy_from_slice(&0u16.to_le_bytes()));
    assert_rejected(&plan, &zero, |e| {
        *e == CheckpointError::UnknownVersion { found: 0 }
    });
    let header = with(&|b| b[6] = 48);
    assert_rejected(&plan, &header, |e| {
        *e == CheckpointError::BadHeaderBytes { found: 48 }
    });
    let size = with(&|b| b[20] = 15);
    assert_rejected(&plan, &size, |e| {
        *e == CheckpointError::SizeMismatch {
            persistent_elems: 15,
            total_bytes: 96,
        }
    });
    let huge = with(&|b| b[20..24].copy_from_slice(&u32::MAX.to_le_bytes()));
    assert_rejected(&plan, &huge, |e| {
        matches!(e, CheckpointError::SizeMismatch { .. })
    });
    let reserved = with(&|b| b[28] = 1);
    assert_rejected(&plan, &reserved, |e| {
        *e == CheckpointError::Reserved { found: 1 }
    });
    let mut crc = ck.clone();
    crc[40] ^= 0x10;
    assert_rejected(
        &plan,
        &crc,
        |e| matches!(e, CheckpointError::BadChecksum { stored, computed } if stored != computed),
    );
}

#[test]
fn a_checkpoint_of_another_plan_is_rejected_and_writes_nothing() {
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let mut a = trained_arena(&plan);
    let ck = saved(&plan, &mut a, 1);

    // The same layout under another identity (e.g. another learning rate).
    let mut other = mlp_builder();
    other.plan_id = 0x5eed_0002;
    let other_bytes = other.build();
    let other_plan = Plan::parse(&other_bytes).unwrap();
    assert_rejected(&other_plan, &ck, |e| {
        *e == CheckpointError::WrongPlan {
            checkpoint_plan_id: 0x5eed_0001,
            plan_id: 0x5eed_0002,
        }
    });

    // The same identity, another persistent region: a plan with one 8-element parameter.
    let mut small = Builder::new(12, 8);
    let p = small.tensor(0, &[8], TensorKind::Persistent);
    let y = small.tensor(8, &[4], TensorKind::Scratch);
    small.instr(tapeplan_core::Opcode::Fill, y, &[], 0);
    let fwd = small.entry("forward", 0, 1);
    small.param("p", p);
    small.bind("y", BindingKind::Output, fwd, y);
    let small_bytes = small.build();
    let small_plan = Plan::parse(&small_bytes).unwrap();
    assert_eq!(small_plan.plan_id(), plan.plan_id());
    let mut sa = vec![0.25f32; small_plan.arena_elems()];
    let small_ck = saved(&small_plan, &mut sa, 1);
    assert_rejected(&plan, &small_ck, |e| {
        *e == CheckpointError::WrongPersistentElems {
            checkpoint_elems: 8,
            plan_elems: 16,
        }
    });
}
