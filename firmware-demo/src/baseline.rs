//! A stand-in for [`tapeplan_firmware::train`] built only with the `size-baseline` feature, to
//! measure what the runtime costs in flash: it does everything the trainer does (the same
//! transcript lines, defmt logs, shuffles, input filling, digests, and keeps the plan, data
//! and initial parameters linked) except decoding, validating and running the plan. `cargo
//! xtask firmware` reports the runtime's code as the difference between the two builds.
//! Its transcript is not a valid run (its "losses" are not computed).

use embedded_hal::delay::DelayNs;
use tapeplan_firmware::{Clock, Failure, Rows, Summary};
use tapeplan_runtime::protocol::{epoch_shuffle, Fnv1a64};

use crate::gen;
use crate::rows;
use crate::uart::Uart;
use crate::Transcript;

/// As [`tapeplan_firmware::train`], without the runtime.
///
/// # Errors
/// Link errors.
pub fn train<C: Clock, D: DelayNs>(
    out: &mut Transcript<'_>,
    clock: &C,
    delay: &mut D,
    arena: &mut [f32],
    order: &mut [u16; gen::SAMPLES],
    pause_ms: u32,
) -> Result<Summary, Failure<<Uart as embedded_io::ErrorType>::Error>> {
    let link = Failure::Link;
    out.header().map_err(link)?;
    out.config(gen::RUN).map_err(link)?;
    out.target(format_args!("{} size-baseline", gen::TARGET_LINE))
        .map_err(link)?;
    let mut plan = Fnv1a64::new();
    plan.bytes(gen::PLAN);
    out.plan(plan.finish() as u32, arena.len()).map_err(link)?;
    let data = rows::ROWS.digest();
    out.data(data, gen::SAMPLES).map_err(link)?;
    let mut init = Fnv1a64::new();
    for b in gen::INIT.chunks_exact(4) {
        init.f32s(&[f32::from_le_bytes([b[0], b[1], b[2], b[3]])]);
    }
    out.bind(plan.finish() as u32, data, init.finish(), gen::MATH)
        .map_err(link)?;
    defmt::info!(
        "plan {=u32:#010x}: arena {=usize} B, {=usize} instructions; {=usize} rows, data digest {=u64:#018x} (host {=u64:#018x})",
        gen::PLAN_ID,
        arena.len() * 4,
        gen::PLAN.len(),
        gen::SAMPLES,
        data,
        gen::DATA_DIGEST
    );
    for (d, b) in arena.iter_mut().zip(gen::INIT.chunks_exact(4)) {
        *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    let (x, rest) = arena.split_at_mut(gen::BATCH * gen::D_IN);
    let mut summary = Summary {
        steps: 0,
        step_ticks_total: 0,
        step_ticks_min: u64::MAX,
        step_ticks_max: 0,
        last_mean_loss: f32::NAN,
    };
    for epoch in 0..gen::EPOCHS {
        for (i, o) in order.iter_mut().enumerate() {
            *o = i as u16;
        }
        epoch_shuffle(gen::SEED, epoch, order);
        let mut sum = 0.0f32;
        for batch in order.chunks_exact(gen::BATCH) {
            for (dst, &row) in x.chunks_exact_mut(gen::D_IN).zip(batch) {
                rows::ROWS.load(usize::from(row), dst);
            }
            for (d, &row) in rest.iter_mut().zip(batch) {
                *d = rows::ROWS.label(usize::from(row));
            }
            let t0 = clock.now_ticks();
            let loss = x[0] + rest[0];
            let ticks = clock.now_ticks().wrapping_sub(t0);
            sum += loss;
            summary.steps += 1;
            summary.step_ticks_total += ticks;
            summary.step_ticks_min = summary.step_ticks_min.min(ticks);
            summary.step_ticks_max = summary.step_ticks_max.max(ticks);
            out.loss(summary.steps, loss).map_err(link)?;
            let mut state = Fnv1a64::new();
            state.f32s(rest);
            out.state(summary.steps, state.finish()).map_err(link)?;
        }
        let mean = sum / (gen::SAMPLES / gen::BATCH) as f32;
        summary.last_mean_loss = mean;
        defmt::info!(
            "epoch {=usize}/{=usize}: mean loss {=f32} ({=u32:#010x})",
            epoch + 1,
            gen::EPOCHS,
            mean,
            mean.to_bits()
        );
        out.epoch(epoch + 1, mean).map_err(link)?;
        delay.delay_ms(pause_ms);
    }
    let mut at = 0;
    for &(name, elems) in gen::INIT_PARAMS {
        let values = rest.get(at..at + elems).unwrap_or(&[]);
        out.param(name, values).map_err(link)?;
        at += elems;
    }
    let digest = out.digest().map_err(link)?;
    defmt::info!(
        "trained {=usize} steps; parameter digest {=u64:#018x}",
        summary.steps,
        digest
    );
    Ok(summary)
}
