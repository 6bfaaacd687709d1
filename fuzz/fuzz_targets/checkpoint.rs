//! Bytes as a checkpoint of a real plan: `Checkpoint::parse` then `restore` into a trained
//! session. A refused blob writes nothing; an accepted one leaves exactly its values. The
//! first byte picks the seed plan; the first byte's high bit starts from a genuine checkpoint
//! of that plan with the rest of the input XORed over it (a checkpoint cut or corrupted), so
//! both the framing and the plan checks are reached.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapeplan_runtime::{checkpoint_bytes, save_checkpoint, Checkpoint, Plan, Session};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let seeds = tapeplan_fuzz::seeds();
    let seed = &seeds[usize::from(pick) % seeds.len()];
    let plan = Plan::parse(&seed.fused).expect("seed plans are valid");
    let mut arena = vec![0.0f32; plan.arena_elems()];
    let mut session = Session::bind_zeroed(&plan, &mut arena).expect("the arena fits");
    for (i, p) in session.persistent_mut().iter_mut().enumerate() {
        *p = i as f32 * 0.25 - 1.0;
    }
    let blob: Vec<u8> = if pick & 0x80 != 0 {
        let mut genuine = vec![0u8; checkpoint_bytes(&plan)];
        let n = save_checkpoint(&session, 1, &mut genuine).expect("the buffer fits");
        genuine.truncate(n);
        let cut = rest
            .first()
            .map_or(n, |&c| n.saturating_sub(usize::from(c) % 9));
        genuine.truncate(cut);
        for (g, x) in genuine.iter_mut().zip(rest.iter().skip(1)) {
            *g ^= x;
        }
        genuine
    } else {
        rest.to_vec()
    };
    let before: Vec<u32> = session.persistent().iter().map(|x| x.to_bits()).collect();
    match Checkpoint::parse(&blob) {
        Ok(ckpt) => match ckpt.restore(&mut session) {
            Ok(()) => {
                let now: Vec<u32> = session.persistent().iter().map(|x| x.to_bits()).collect();
                let want: Vec<u32> = ckpt.values().map(f32::to_bits).collect();
                assert_eq!(
                    now, want,
                    "a restore left other values than the checkpoint's"
                );
            }
            Err(_) => {
                let now: Vec<u32> = session.persistent().iter().map(|x| x.to_bits()).collect();
                assert_eq!(now, before, "a refused restore wrote the arena");
            }
        },
        Err(_) => {
            let now: Vec<u32> = session.persistent().iter().map(|x| x.to_bits()).collect();
            assert_eq!(now, before);
        }
    }
});
