//! Raw bytes as a plan: parse with the default limits, bind, run every entry through `run` and
//! through a decoded program. The input's last 64 bytes double as the entries' input values,
//! so a plan file is a seed as it is (`cargo xtask fuzz` writes the planner's plans into the
//! corpus).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let values = &data[data.len().saturating_sub(64)..];
    tapeplan_fuzz::exercise(data, values);
});
