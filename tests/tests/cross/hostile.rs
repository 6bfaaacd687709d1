//! Hostile bytes against the runtime, starting from real planner-made plans: truncation at every
//! length, every single byte flipped (with the checksum left stale, and recomputed so that
//! validation, not the checksum, must stop it), bad magic, a future version, and structural
//! damage. Nothing may panic; a mutated plan that still validates must run inside its arena.

use tapeplan_core::format::{self, plan_crc, CRC_OFFSET, HEADER_BYTES, TENSOR_RECORD_BYTES};
use tapeplan_planner::model::optim::Sgd;
use tapeplan_planner::model::TrainingJob;
use tapeplan_planner::model::{Activation, Loss, Mlp};
use tapeplan_runtime::{DecodeError, ParseError, Plan, Session};

fn small_plan() -> Vec<u8> {
    TrainingJob::build(
        Mlp {
            sizes: vec![5, 4, 3],
            activation: Activation::Tanh,
        },
        Loss::SoftmaxCrossEntropy,
        Sgd { lr: 0.1 },
        2,
    )
    .unwrap()
    .schedule
    .to_bytes()
}

fn fix_crc(b: &mut [u8]) {
    if let Some(c) = plan_crc(b) {
        b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&c.to_le_bytes());
    }
}

/// Parses; if accepted, runs every entry over an arena of exactly the plan's size with arbitrary
/// inputs, checking only that nothing panics.
fn exercise(bytes: &[u8]) -> Result<(), ParseError> {
    let plan = Plan::parse(bytes)?;
    if plan.arena_elems() > 1 << 20 {
        // A mutated arena size only asks for more memory than needed; running it proves
        // nothing more and would allocate gigabytes here.
        return Ok(());
    }
    let mut arena = vec![0.5f32; plan.arena_elems()];
    let entries: Vec<_> = plan.entries().collect();
    let mut s = Session::bind(&plan, &mut arena).expect("arena of the plan's own size binds");
    for e in entries {
        let _ = s.run(e);
    }
    Ok(())
}

#[test]
fn the_unmodified_plan_is_accepted() {
    exercise(&small_plan()).unwrap();
}

#[test]
fn every_truncation_is_rejected() {
    let b = small_plan();
    for len in 0..b.len() {
        assert!(
            exercise(&b[..len]).is_err(),
            "truncated to {len} bytes was accepted"
        );
    }
}

#[test]
fn every_flipped_byte_is_rejected_by_the_checksum() {
    let b = small_plan();
    for i in 0..b.len() {
        for mask in [0x01u8, 0x80, 0xff] {
            let mut m = b.clone();
            m[i] ^= mask;
            assert!(exercise(&m).is_err(), "byte {i} ^ {mask:#x} was accepted");
        }
    }
}

#[test]
fn flipped_bytes_with_a_recomputed_checksum_never_panic() {
    let b = small_plan();
    let mut accepted = 0;
    for i in 0..b.len() {
        if (CRC_OFFSET..CRC_OFFSET + 4).contains(&i) {
            continue;
        }
        for mask in [0x01u8, 0x02, 0x10, 0x80, 0xff] {
            let mut m = b.clone();
            m[i] ^= mask;
            fix_crc(&mut m);
            if exercise(&m).is_ok() {
                accepted += 1;
            }
        }
    }
    // Some mutations are harmless (a fill value, a name byte); most are structural.
    println!("{accepted} mutated plans validated and ran inside their arena");
}

#[test]
fn structural_damage_is_caught_by_validation() {
    let b = small_plan();
    let h = format::Header::decode(&b);
    let tensors_at = HEADER_BYTES;
    let instrs_at = tensors_at + h.n_tensors as usize * TENSOR_RECORD_BYTES;
    let mutate = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut m = b.clone();
        f(&mut m);
        fix_crc(&mut m);
        Plan::parse(&m).err()
    };
    // Bad magic.
    assert!(matches!(
        mutate(&|m| m[0] = b'X'),
        Some(ParseError::Decode(DecodeError::BadMagic { .. }))
    ));
    // A future version.
    assert!(matches!(
        mutate(&|m| m[4..6].copy_from_slice(&(format::VERSION + 1).to_le_bytes())),
        Some(ParseError::Decode(DecodeError::FutureVersion { .. }))
    ));
    // A tensor offset past the arena.
    let e = mutate(&|m| {
        let at = tensors_at + (h.n_tensors as usize - 1) * TENSOR_RECORD_BYTES;
        m[at..at + 4].copy_from_slice(&(h.arena_elems + 4).to_le_bytes());
    });
    assert!(e.is_some(), "offset past the arena accepted");
    // An unknown opcode in the first instruction.
    let e = mutate(&|m| m[instrs_at] = 0xEE);
    assert!(
        matches!(
            e,
            Some(ParseError::Decode(DecodeError::UnknownOpcode { .. }))
        ),
        "{e:?}"
    );
    // A wrong arity.
    let e = mutate(&|m| m[instrs_at + 1] = m[instrs_at + 1].wrapping_add(1));
    assert!(e.is_some(), "wrong arity accepted");
    println!("{e:?}");
}

#[test]
fn an_arena_one_element_short_is_refused() {
    let b = small_plan();
    let plan = Plan::parse(&b).unwrap();
    let mut arena = vec![0.0f32; plan.arena_elems() - 1];
    assert!(Session::bind(&plan, &mut arena).is_err());
}

/// `Session::set_labels` (issue 16, hole 6): a direct runtime user is told about a label that
/// `one_hot` would silently turn into a row of zeros, and nothing is written; good labels land
/// as `set_input` would put them.
#[test]
fn bad_labels_are_refused_by_set_labels() {
    let bytes = small_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let mut arena = vec![0.0; plan.arena_elems()];
    let mut s = Session::bind_zeroed(&plan, &mut arena).unwrap();
    let step = plan.entry("train_step").unwrap();
    s.set_labels(step, "labels", &[2.0, 0.0]).unwrap();
    let written: Vec<f32> = s.input_mut(step, "labels").unwrap().to_vec();
    assert_eq!(written, [2.0, 0.0]);
    for bad in [-1.0, 3.0, 1e30, 0.5, f32::NAN, f32::INFINITY] {
        let err = s.set_labels(step, "labels", &[1.0, bad]).unwrap_err();
        assert_eq!(
            err,
            tapeplan_runtime::ExecError::BadLabel {
                index: 1,
                value_bits: bad.to_bits(),
                classes: 3
            },
            "{bad}"
        );
        assert!(err.to_string().contains("label 1"), "{err}");
        // Nothing was written: the last good labels stay.
        assert_eq!(s.input_mut(step, "labels").unwrap().to_vec(), [2.0, 0.0]);
    }
    // -0.0 is class 0; an input no one_hot reads is copied unchecked.
    s.set_labels(step, "labels", &[-0.0, 1.0]).unwrap();
    s.set_labels(step, "x", &[7.5; 10]).unwrap();
}
