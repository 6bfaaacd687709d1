//! Real plans from the planner, mutated record-aware: the input picks a seed plan (first byte),
//! gives 64 bytes of input values, then 4-byte edit commands (`tapeplan_fuzz::mutate`); the
//! header's length and CRC are recomputed, so what is tested is the validator and the executor.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let seeds = tapeplan_fuzz::seeds();
    let seed = &seeds[usize::from(pick) % seeds.len()];
    let plan = if pick & 0x80 == 0 {
        &seed.fused
    } else {
        &seed.unfused
    };
    let (values, edits) = rest.split_at(rest.len().min(64));
    let bytes = tapeplan_fuzz::mutate(plan, edits);
    tapeplan_fuzz::exercise(&bytes, values);
});
