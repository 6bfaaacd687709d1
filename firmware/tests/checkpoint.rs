//! The flash checkpoint store on the host, over a RAM NOR flash that can lose power after any
//! number of programmed words or erases: after a cut at every position of a save, a fresh
//! store loads the previous checkpoint or the new one, bit for bit, and the next save works.
//! Also: empty flash, a checkpoint of another plan, damaged flash.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{PowerCut, RamFlash, PAGE_BYTES};
use tapeplan_firmware::checkpoint::{CheckpointStore, StoreError};
use tapeplan_planner::model::RunConfig;
use tapeplan_runtime::{save_checkpoint, CheckpointError, Plan, Session};

/// The big plan's flash: 20 pages of 4 KiB.
const FLASH_BYTES: usize = PAGE_BYTES * 20;
/// The power-cut test's flash: 12 pages of 1 KiB, for a small plan (4 chunks a checkpoint), so
/// the map collects pages from the third save on and a debug build cuts every position fast.
const SMALL_PAGE_BYTES: usize = 1024;
const SMALL_FLASH_BYTES: usize = SMALL_PAGE_BYTES * 12;

/// An Adam plan of the digits MLP: parameters, two moments each and a step counter in the
/// persistent region (about 29 KiB: 8 chunks of a 4 KiB page).
fn plan_bytes(layers: &str) -> Vec<u8> {
    let cfg = RunConfig::parse(&format!(
        "model={layers} activation=tanh loss=ce batch=4 lr=0.01 optimizer=adam seed=1 \
         split_seed=0 samples=16 epochs=1"
    ))
    .unwrap();
    cfg.job().unwrap().schedule.to_bytes()
}

/// Persistent region `k`: distinct bits per element and per `k`, NaN payloads and signed
/// zeros among them.
fn state(elems: usize, k: u32) -> Vec<f32> {
    (0..elems as u32)
        .map(|i| match i % 7 {
            0 => {
                f32::from_bits(0x7fc0_0000 | i.wrapping_mul(2654435761).wrapping_add(k) & 0x3f_ffff)
            }
            1 => f32::from_bits(0x8000_0000 * (k & 1)),
            _ => f32::from_bits(i.wrapping_mul(0x9e37_79b9) ^ k.wrapping_mul(0x85eb_ca6b)),
        })
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Saves `values` as the session's persistent region into `flash`; answers the flash and the
/// save's result.
fn save<const PAGE: usize>(
    plan: &Plan<'_>,
    flash: RamFlash<PAGE>,
    values: &[f32],
) -> (RamFlash<PAGE>, Result<u32, StoreError<PowerCut>>) {
    let mut arena = vec![0.0f32; plan.arena_elems()];
    let mut s = Session::bind(plan, &mut arena).unwrap();
    s.persistent_mut().copy_from_slice(values);
    let mut work = [0u8; PAGE];
    let range = 0..flash.bytes.len() as u32;
    let mut store = CheckpointStore::new(flash, range, &mut work).unwrap();
    let r = store.save(&s);
    (store.into_flash(), r)
}

/// What a load found: the sequence and the restored region, none, or the error.
type Loaded = Result<Option<(u32, Vec<f32>)>, StoreError<PowerCut>>;

/// Loads from `flash` (power on); answers the sequence and the restored region, or the error.
fn load(plan: &Plan<'_>, bytes: Vec<u8>) -> (Vec<u8>, Loaded) {
    load_paged::<PAGE_BYTES>(plan, bytes)
}

fn load_paged<const PAGE: usize>(plan: &Plan<'_>, bytes: Vec<u8>) -> (Vec<u8>, Loaded) {
    let mut arena = vec![0.0f32; plan.arena_elems()];
    let mut s = Session::bind(plan, &mut arena).unwrap();
    let before = s.persistent().to_vec();
    let mut work = [0u8; PAGE];
    let range = 0..bytes.len() as u32;
    let mut store =
        CheckpointStore::new(RamFlash::<PAGE>::new(bytes, None), range, &mut work).unwrap();
    let r = store.load(&mut s);
    let flash = store.into_flash().bytes;
    match r {
        Ok(Some(seq)) => (flash, Ok(Some((seq, s.persistent().to_vec())))),
        Ok(None) => {
            assert_eq!(bits(s.persistent()), bits(&before), "arena written on none");
            (flash, Ok(None))
        }
        Err(e) => {
            assert_eq!(
                bits(s.persistent()),
                bits(&before),
                "arena written on error"
            );
            (flash, Err(e))
        }
    }
}

fn erased() -> Vec<u8> {
    vec![0xff; FLASH_BYTES]
}

#[test]
fn empty_flash_loads_none_and_a_save_loads_back_bit_for_bit_in_the_host_format() {
    let pb = plan_bytes("64,32,10");
    let plan = Plan::parse(&pb).unwrap();
    let elems = plan.persistent_elems();
    assert!(
        elems * 4 > 6 * PAGE_BYTES,
        "the region spans several chunks: {elems}"
    );
    let (bytes, r) = load(&plan, erased());
    assert!(matches!(r, Ok(None)), "{r:?}");
    let mut work = [0u8; PAGE_BYTES];
    let store = CheckpointStore::new(
        RamFlash::<PAGE_BYTES>::new(erased(), None),
        0..8192,
        &mut work,
    )
    .unwrap();
    // A 4 KiB page less two 4-byte state words and the 8-byte item header, less the 4-byte key.
    assert_eq!(store.chunk_bytes(), 4096 - 8 - 8 - 4);

    let v1 = state(elems, 1);
    let (flash, r) = save(&plan, RamFlash::<PAGE_BYTES>::new(bytes, None), &v1);
    assert_eq!(r.unwrap(), 1);
    let (bytes, r) = load(&plan, flash.bytes);
    let (seq, got) = r.unwrap().unwrap();
    assert_eq!(seq, 1);
    assert_eq!(bits(&got), bits(&v1));

    // The content is the host's checkpoint: the region saved by the runtime's
    // `save_checkpoint` with that sequence gives the same blob either way.
    let mut arena = vec![0.0f32; plan.arena_elems()];
    let mut s = Session::bind(&plan, &mut arena).unwrap();
    s.persistent_mut().copy_from_slice(&got);
    let mut a = vec![0u8; 32 + 4 * elems];
    save_checkpoint(&s, seq, &mut a).unwrap();
    s.persistent_mut().copy_from_slice(&v1);
    let mut b = vec![0u8; 32 + 4 * elems];
    save_checkpoint(&s, seq, &mut b).unwrap();
    assert_eq!(a, b);

    // Ten more saves: the map moves items between pages (wear levelling) and the newest wins.
    let mut bytes = bytes;
    for k in 2..=11 {
        let v = state(elems, k);
        let (flash, r) = save(&plan, RamFlash::<PAGE_BYTES>::new(bytes, None), &v);
        assert_eq!(r.unwrap(), k);
        let (b, r) = load(&plan, flash.bytes);
        let (seq, got) = r.unwrap().unwrap();
        assert_eq!((seq, bits(&got)), (k, bits(&v)));
        bytes = b;
    }
}

#[test]
fn a_power_cut_at_every_word_and_erase_of_a_save_loads_the_old_or_the_new_checkpoint() {
    let pb = plan_bytes("64,4,10");
    let plan = Plan::parse(&pb).unwrap();
    let elems = plan.persistent_elems();
    assert!(elems * 4 > 3 * SMALL_PAGE_BYTES, "several chunks: {elems}");
    let mut bytes = vec![0xff; SMALL_FLASH_BYTES];
    let mut cuts_total = 0;
    let mut saw = [0usize; 2];
    let mut erases = Vec::new();
    // Saves 1..=5 from the flash state the previous complete saves left: the first save, the
    // second (into the other slot), and three that overwrite a slot and make the map collect
    // pages. Each is cut at every one of its operations.
    for k in 1..=5u32 {
        let old = (k > 1).then(|| state(elems, k - 1));
        let new = state(elems, k);
        let mut n = 0;
        loop {
            let (flash, r) = save(
                &plan,
                RamFlash::<SMALL_PAGE_BYTES>::new(bytes.clone(), Some(n)),
                &new,
            );
            if let Ok(seq) = r {
                assert_eq!(seq, k);
                erases.push(flash.erases);
                bytes = flash.bytes;
                break;
            }
            assert!(matches!(r, Err(StoreError::Flash(PowerCut))), "{r:?}");
            cuts_total += 1;
            // Power on: the old checkpoint or the new one, bit for bit, never an error.
            let (after, r) = load_paged::<SMALL_PAGE_BYTES>(&plan, flash.bytes);
            match r {
                Ok(Some((seq, got))) if seq == k => {
                    assert_eq!(bits(&got), bits(&new), "save {k} cut at {n}");
                    saw[1] += 1;
                }
                Ok(Some((seq, got))) => {
                    assert_eq!(seq, k - 1, "save {k} cut at {n}");
                    assert_eq!(
                        bits(&got),
                        bits(old.as_ref().unwrap()),
                        "save {k} cut at {n}"
                    );
                    saw[0] += 1;
                }
                Ok(None) => {
                    assert_eq!(k, 1, "save {k} cut at {n} lost the previous checkpoint");
                    saw[0] += 1;
                }
                Err(e) => panic!("save {k} cut at {n}: load failed: {e}"),
            }
            // And the store works on: the save redone completes and loads.
            if n % 7 == 0 {
                let (flash, r) = save(&plan, RamFlash::<SMALL_PAGE_BYTES>::new(after, None), &new);
                let seq = r.unwrap_or_else(|e| panic!("save {k} cut at {n}: redo: {e}"));
                let (_, r) = load_paged::<SMALL_PAGE_BYTES>(&plan, flash.bytes);
                let (s2, got) = r.unwrap().unwrap();
                assert_eq!((s2, bits(&got)), (seq, bits(&new)));
            }
            n += 1;
        }
        eprintln!("save {k}: {n} operations, each cut");
    }
    eprintln!(
        "{cuts_total} cuts: {} loaded the old checkpoint, {} the new",
        saw[0], saw[1]
    );
    // The later saves made the map erase pages (collect them), so cuts hit erases too.
    eprintln!("pages erased by saves 1..=5: {erases:?}");
    assert!(erases[2..].iter().any(|&e| e > 0), "{erases:?}");
    // The new checkpoint becomes visible with the last word of its commit record, the save's
    // last operation: every cut before it loads the old one.
    assert_eq!(saw, [cuts_total, 0]);
}

#[test]
fn a_checkpoint_of_another_plan_is_refused_naming_both_plans() {
    let pa = plan_bytes("64,32,10");
    let pb = plan_bytes("64,16,10");
    let a = Plan::parse(&pa).unwrap();
    let b = Plan::parse(&pb).unwrap();
    let (flash, r) = save(
        &a,
        RamFlash::<PAGE_BYTES>::new(erased(), None),
        &state(a.persistent_elems(), 1),
    );
    r.unwrap();
    let (_, r) = load(&b, flash.bytes);
    match r {
        Err(StoreError::Rejected(CheckpointError::WrongPlan {
            checkpoint_plan_id,
            plan_id,
        })) => {
            assert_eq!((checkpoint_plan_id, plan_id), (a.plan_id(), b.plan_id()));
            let text = StoreError::<PowerCut>::Rejected(CheckpointError::WrongPlan {
                checkpoint_plan_id,
                plan_id,
            })
            .to_string();
            assert!(text.contains(&format!("{:08x}", a.plan_id())), "{text}");
        }
        other => panic!("expected WrongPlan, got {other:?}"),
    }
}

#[test]
fn damaged_flash_falls_back_to_the_other_slot_or_is_refused() {
    let pb = plan_bytes("64,32,10");
    let plan = Plan::parse(&pb).unwrap();
    let elems = plan.persistent_elems();
    let (flash, r) = save(
        &plan,
        RamFlash::<PAGE_BYTES>::new(erased(), None),
        &state(elems, 1),
    );
    r.unwrap();
    let one = flash.bytes.clone();
    let (flash, r) = save(&plan, flash, &state(elems, 2));
    r.unwrap();
    let two = flash.bytes;

    // Clearing bits (what a NOR flash can lose) in every data word, one at a time over a
    // stride: the load gives checkpoint 2 or 1 bit for bit, or refuses; never another state.
    let mut outcomes = [0usize; 3];
    let changed: Vec<usize> = (0..FLASH_BYTES)
        .filter(|&i| two[i] != 0xff && two[i] != 0)
        .step_by(293)
        .collect();
    assert!(changed.len() > 100);
    for &i in &changed {
        let mut bad = two.clone();
        bad[i] &= bad[i] - 1; // clears the lowest set bit
        let (_, r) = load(&plan, bad);
        match r {
            Ok(Some((2, got))) => {
                assert_eq!(bits(&got), bits(&state(elems, 2)));
                outcomes[0] += 1;
            }
            Ok(Some((1, got))) => {
                assert_eq!(bits(&got), bits(&state(elems, 1)));
                outcomes[1] += 1;
            }
            Ok(other) => panic!("byte {i}: loaded {:?}", other.map(|o| o.0)),
            Err(_) => outcomes[2] += 1,
        }
    }
    eprintln!(
        "{} damaged bytes: {} loaded checkpoint 2, {} fell back to 1, {} refused",
        changed.len(),
        outcomes[0],
        outcomes[1],
        outcomes[2]
    );
    assert!(outcomes[1] > 0, "no fallback seen");

    // A flash whose first save was cut after its header item was written but with the other
    // slot garbage: a half-written region of foreign bytes in the range is refused or ignored,
    // never loaded as a checkpoint.
    let mut foreign = one;
    for (i, b) in foreign[PAGE_BYTES * 10..PAGE_BYTES * 12]
        .iter_mut()
        .enumerate()
    {
        *b = (i * 31 % 251) as u8;
    }
    let (_, r) = load(&plan, foreign);
    match r {
        Ok(Some((1, got))) => assert_eq!(bits(&got), bits(&state(elems, 1))),
        Ok(Some((s, _))) => panic!("loaded sequence {s}"),
        Ok(None) | Err(_) => {}
    }
}

/// `n` bytes of a xorshift stream from `seed`.
fn random_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

#[test]
fn a_flash_range_of_random_bytes_loads_nothing_and_never_panics() {
    let pb = plan_bytes("64,4,10");
    let plan = Plan::parse(&pb).unwrap();
    let elems = plan.persistent_elems();
    let mut arena = vec![0.0f32; plan.arena_elems()];
    let mut s = Session::bind(&plan, &mut arena).unwrap();
    let v = state(elems, 1);
    let mut outcomes = [0usize; 4];
    let mut reprogrammed = 0;
    for seed in 1..=16u64 {
        // Programming a word that is not erased clears bits, as on a NOR flash (the map
        // repairs what it takes for interrupted writes, on a load too).
        let mut flash =
            RamFlash::<SMALL_PAGE_BYTES>::new(random_bytes(seed, SMALL_FLASH_BYTES), None);
        flash.and_writes = true;
        let mut work = [0u8; SMALL_PAGE_BYTES];
        let range = 0..SMALL_FLASH_BYTES as u32;
        let mut store = CheckpointStore::new(flash, range, &mut work).unwrap();
        s.persistent_mut().fill(0.0);
        match store.load(&mut s) {
            Ok(None) => outcomes[0] += 1,
            Err(_) => outcomes[1] += 1,
            Ok(Some(k)) => panic!("seed {seed}: random bytes loaded as checkpoint {k}"),
        }
        assert!(
            s.persistent().iter().all(|&x| x.to_bits() == 0),
            "seed {seed}"
        );
        // A save over the noise: refused, or it loads back bit for bit.
        s.persistent_mut().copy_from_slice(&v);
        if let Ok(seq) = store.save(&s) {
            outcomes[2] += 1;
            s.persistent_mut().fill(0.0);
            match store.load(&mut s) {
                Ok(Some(k)) => {
                    assert_eq!((k, bits(s.persistent())), (seq, bits(&v)), "seed {seed}");
                    outcomes[3] += 1;
                }
                other => panic!("seed {seed}: saved {seq}, then loaded {other:?}"),
            }
        }
        reprogrammed += store.into_flash().reprogrammed;
    }
    eprintln!(
        "16 random flash ranges: {} loaded none, {} refused; {} saves over them succeeded, {} loaded back; {reprogrammed} words programmed that were not erased",
        outcomes[0], outcomes[1], outcomes[2], outcomes[3]
    );
}

#[test]
fn ranges_that_cannot_hold_a_checkpoint_or_suit_the_map_are_refused() {
    let pb = plan_bytes("64,32,10");
    let plan = Plan::parse(&pb).unwrap();
    let elems = plan.persistent_elems();
    // Two pages of 4 KiB for a region of about 29 KiB: full, and the flash still loads none.
    let (flash, r) = save(
        &plan,
        RamFlash::<PAGE_BYTES>::new(vec![0xff; 2 * PAGE_BYTES], None),
        &state(elems, 1),
    );
    assert!(matches!(r, Err(StoreError::Full)), "{r:?}");
    let (_, r) = load(&plan, flash.bytes);
    assert!(matches!(r, Ok(None)), "{r:?}");
    // One page, a range not on page boundaries, an empty range.
    let mut work = [0u8; PAGE_BYTES];
    for range in [0..PAGE_BYTES as u32, 0..PAGE_BYTES as u32 * 2 + 1, 0..0] {
        let flash = RamFlash::<PAGE_BYTES>::new(vec![0xff; 4 * PAGE_BYTES], None);
        let r = CheckpointStore::new(flash, range.clone(), &mut work);
        assert!(
            matches!(r, Err(StoreError::Config(_))),
            "{range:?}: {:?}",
            r.err()
        );
    }
    // Pages too small for the 32-byte header item: named as the page's fault, not the work
    // buffer's.
    let mut work = [0u8; 4096];
    let flash = RamFlash::<32>::new(vec![0xff; 32 * 8], None);
    let e = CheckpointStore::new(flash, 0..256, &mut work)
        .err()
        .unwrap();
    assert!(
        matches!(e, StoreError::PageTooSmall { page_bytes: 32, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("page of 32 bytes"), "{e}");
    // A work buffer too small, with pages that are not.
    let mut small = [0u8; 16];
    let flash = RamFlash::<PAGE_BYTES>::new(vec![0xff; 4 * PAGE_BYTES], None);
    let e = CheckpointStore::new(flash, 0..4 * PAGE_BYTES as u32, &mut small)
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            StoreError::WorkTooSmall {
                found_bytes: 16,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn saves_of_two_plans_in_one_store_never_load_one_as_the_other() {
    let (pa, pb) = (plan_bytes("64,32,10"), plan_bytes("64,16,10"));
    let (a, b) = (Plan::parse(&pa).unwrap(), Plan::parse(&pb).unwrap());
    let mut bytes = erased();
    // A, A, B, A, B, B: after each save, the plan just saved loads what it saved; the other
    // plan loads one of its own saves bit for bit, or none, or is refused.
    let mut saved: [Vec<Vec<u32>>; 2] = [Vec::new(), Vec::new()];
    for (k, which) in [0, 0, 1, 0, 1, 1].into_iter().enumerate() {
        let plan = [&a, &b][which];
        let v = state(plan.persistent_elems(), k as u32 + 1);
        let (flash, r) = save(plan, RamFlash::<PAGE_BYTES>::new(bytes, None), &v);
        r.unwrap();
        saved[which].push(bits(&v));
        let (after, r) = load(plan, flash.bytes);
        assert_eq!(bits(&r.unwrap().unwrap().1), bits(&v), "save {k}");
        let other = [&a, &b][1 - which];
        let (after, r) = load(other, after);
        match r {
            Ok(Some((_, got))) => assert!(saved[1 - which].contains(&bits(&got)), "save {k}"),
            Ok(None) | Err(StoreError::Rejected(_)) => {}
            Err(e) => panic!("save {k}: {e}"),
        }
        bytes = after;
    }
}
