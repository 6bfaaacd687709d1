//! The same model planned fused and unfused, run with the fuzzer's input values (NaNs,
//! infinities, subnormals, out-of-range labels) through `run`, a decoded program, or a decoded
//! program reading its inputs from the caller's memory:
//! every entry's outputs and the persistent region agree bit for bit (NaNs as one class),
//! and a refused guarded step commits nothing. Then the runtime's SIMD catalog (this crate
//! builds the runtime with `simd`) against the reference kernels of the host interpreter.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapeplan_runtime::{Plan, Session};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, values)) = data.split_first() else {
        return;
    };
    let seeds = tapeplan_fuzz::seeds();
    let seed = &seeds[usize::from(pick) % seeds.len()];
    let fused = Plan::parse(&seed.fused).expect("seed plans are valid");
    let unfused = Plan::parse(&seed.unfused).expect("seed plans are valid");
    let mut arena_f = vec![0.0f32; fused.arena_elems()];
    let mut arena_u = vec![0.0f32; unfused.arena_elems()];
    let mut f = Session::bind_zeroed(&fused, &mut arena_f).expect("the arena fits");
    let mut u = Session::bind_zeroed(&unfused, &mut arena_u).expect("the arena fits");
    // Entries by name, in the order a training loop runs them; two steps, so the second reads
    // what the first committed.
    for name in ["init", "train_step", "train_step", "forward"] {
        let (Some(ef), Some(eu)) = (fused.entry(name), unfused.entry(name)) else {
            continue;
        };
        let mode = |bits: u8| tapeplan_fuzz::Mode::from_bits(bits);
        let a = tapeplan_fuzz::run_entry(&mut f, &fused, ef, values, mode(pick));
        let b = tapeplan_fuzz::run_entry(&mut u, &unfused, eu, values, mode(pick / 3));
        assert_eq!(
            a.result.is_ok(),
            b.result.is_ok(),
            "{}: {name}: {:?} vs {:?}",
            seed.name,
            a.result,
            b.result
        );
        assert_eq!(
            a.outputs, b.outputs,
            "{}: {name}: outputs differ",
            seed.name
        );
        // The persistent layouts of the two plans are the planner's (the same parameter
        // order); compare each parameter by name.
        for p in fused
            .bindings()
            .filter(|b| b.kind == tapeplan_runtime::BindingKind::Parameter)
        {
            let pf: Vec<u32> = f
                .parameter(p.name)
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect();
            let pu: Vec<u32> = u
                .parameter(p.name)
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect();
            assert_eq!(
                pf, pu,
                "{}: {name}: parameter {} differs",
                seed.name, p.name
            );
        }
    }
    tapeplan_fuzz::catalog_agrees_with_reference(seed, values);
});
