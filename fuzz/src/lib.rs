//! What the fuzz targets share: real plans from the planner (the seeds), a record-aware
//! mutation that keeps the header's length and checksum right (so the validator, not the CRC,
//! is what gets tested), and [`exercise`], which parses, binds and runs every entry of a plan
//! while asserting the runtime's promises (`docs/threat-model.md`).

use std::sync::OnceLock;

use tapeplan_core::format::{plan_crc, Header, CRC_OFFSET, HEADER_BYTES};
use tapeplan_planner::model::optim::{Optimizer, Sgd};
use tapeplan_planner::model::{Activation, JobOptions, Loss, Mlp, TrainingJob};
use tapeplan_planner::plan::{FusionPolicy, PlanOptions};
use tapeplan_planner::Schedule;
use tapeplan_runtime::{BindingKind, Decoded, EntryId, ExecError, Plan, Session, MAX_BOUND_INPUTS};

/// The most arena a fuzzed plan may ask for (elements); bigger plans are parsed but not run,
/// so the fuzzer's memory stays small. The work cap bounds their time, not their memory.
pub const MAX_ARENA_ELEMS: usize = 1 << 20;

/// The most instructions decoded into a [`tapeplan_runtime::Program`] per entry.
const MAX_PROGRAM_INSTRS: usize = 4096;

/// One seed plan, and the same model planned without fusion (for the differential target).
pub struct Seed {
    /// What the plan is, for messages.
    pub name: &'static str,
    /// The fused plan's bytes.
    pub fused: Vec<u8>,
    /// The unfused plan's bytes (same model, same bits expected).
    pub unfused: Vec<u8>,
    /// The fused plan before serialization, for the host interpreter's reference kernels
    /// ([`Schedule::run_host`]).
    pub schedule: Schedule,
}

fn job(
    mlp: &[usize],
    act: Activation,
    loss: Loss,
    opt: Optimizer,
    batch: usize,
    options: JobOptions,
) -> Schedule {
    let mlp = Mlp {
        sizes: mlp.to_vec(),
        activation: act,
    };
    TrainingJob::build_with(mlp, loss, opt, batch, options)
        .expect("seed models plan")
        .schedule
}

/// The seed plans: the digits MLP (SGD, unguarded), a guarded Adam + dropout MLP, and a
/// mean-squared-error regression (W3's shape, batch 1), each fused and unfused.
pub fn seeds() -> &'static [Seed] {
    static SEEDS: OnceLock<Vec<Seed>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let adam = Optimizer::Adam {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            decoupled_weight_decay: 0.0,
        };
        let models: [(
            &'static str,
            &[usize],
            Activation,
            Loss,
            Optimizer,
            usize,
            bool,
            f32,
        ); 3] = [
            (
                "digits sgd",
                &[16, 8, 4],
                Activation::Tanh,
                Loss::SoftmaxCrossEntropy,
                Sgd { lr: 0.1 }.into(),
                4,
                false,
                0.0,
            ),
            (
                "adam dropout guarded",
                &[6, 5, 3],
                Activation::Relu,
                Loss::SoftmaxCrossEntropy,
                adam,
                3,
                true,
                0.25,
            ),
            (
                "w3 mse",
                &[2, 16, 16, 1],
                Activation::Tanh,
                Loss::MeanSquaredError,
                Sgd { lr: 0.01 }.into(),
                1,
                true,
                0.0,
            ),
        ];
        models
            .into_iter()
            .map(|(name, sizes, act, loss, opt, batch, guarded, dropout)| {
                let options = |fuse| JobOptions {
                    guarded,
                    dropout,
                    seed: 7,
                    planning: PlanOptions {
                        fusion: FusionPolicy::all_or_off(fuse),
                        ..PlanOptions::default()
                    },
                    ..JobOptions::default()
                };
                let schedule = job(sizes, act, loss, opt, batch, options(true));
                Seed {
                    name,
                    fused: schedule.to_bytes(),
                    unfused: job(sizes, act, loss, opt, batch, options(false)).to_bytes(),
                    schedule,
                }
            })
            .collect()
    })
}

/// Stores the header's `total_bytes` and CRC-32 for `bytes` as they now are.
pub fn reseal(bytes: &mut [u8]) {
    if bytes.len() < HEADER_BYTES {
        return;
    }
    let mut h = Header::decode(bytes);
    h.total_bytes = bytes.len() as u32;
    h.encode(bytes);
    if let Some(c) = plan_crc(bytes) {
        bytes[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&c.to_le_bytes());
    }
}

/// Applies `edits` to a copy of `plan`, then reseals it. The edits are 4-byte commands: a
/// 16-bit position (modulo the length), an operation (`set`, `xor`, `add`, `truncate` at the
/// position, `u32` word set at a 4-aligned position) and a value. Positions land in records
/// and the attribute section as often as the bytes say, and the checksum never stops them.
pub fn mutate(plan: &[u8], edits: &[u8]) -> Vec<u8> {
    let mut b = plan.to_vec();
    for e in edits.chunks_exact(4) {
        if b.is_empty() {
            break;
        }
        let at = usize::from(u16::from_le_bytes([e[0], e[1]])) % b.len();
        let v = e[3];
        match e[2] % 6 {
            0 | 1 => b[at] = v,
            2 => b[at] ^= v,
            3 => b[at] = b[at].wrapping_add(v),
            4 => {
                let w = at & !3;
                if w + 4 <= b.len() {
                    let word = match v % 6 {
                        0 => 0,
                        1 => u32::MAX,
                        2 => 1 << 28,
                        3 => 0x7fc0_0000,
                        4 => u32::from(v),
                        _ => 0x8000_0000,
                    };
                    b[w..w + 4].copy_from_slice(&word.to_le_bytes());
                }
            }
            _ => b.truncate(at.max(HEADER_BYTES.min(b.len()))),
        }
    }
    reseal(&mut b);
    b
}

/// Input values from the fuzzer's bytes, repeated to fill `n` elements; `f32` bit patterns
/// (NaN, infinities, subnormals and out-of-range labels included) as the bytes give them.
pub fn values(data: &[u8], n: usize) -> Vec<f32> {
    if data.len() < 4 {
        return vec![0.0; n];
    }
    data.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .cycle()
        .take(n)
        .collect()
}

/// What one run of one entry left: the entry's outputs and the persistent region, as bits
/// (NaNs as one class: payloads may differ between readings, `docs/plan-format.md`).
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    /// `Ok`, or the error's text.
    pub result: Result<(), String>,
    /// Every output's bits, in binding order.
    pub outputs: Vec<Vec<u32>>,
    /// The persistent region's bits.
    pub persistent: Vec<u32>,
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|x| if x.is_nan() { 0x7fc0_0000 } else { x.to_bits() })
        .collect()
}

/// Sets every input of `entry` from `data`.
fn set_inputs(session: &mut Session<'_, '_>, plan: &Plan<'_>, entry: EntryId, data: &[u8]) {
    for b in plan.bindings() {
        if b.kind == BindingKind::Input && b.entry == Some(entry) {
            let v = values(data, b.elems);
            session
                .set_input(entry, b.name, &v)
                .expect("an input binding of a validated plan takes its element count");
        }
    }
}

/// How [`run_entry`] runs an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `Session::run`, reading the plan's records.
    Run,
    /// A decoded program, `Session::run_program`, the inputs copied into the arena.
    Program,
    /// A program from `Session::decode_with_inputs` (the first `MAX_BOUND_INPUTS` inputs;
    /// the rest copied in), `Session::run_program_with_inputs`, the arena's ranges of the bound
    /// inputs filled with NaN first: a kernel reading them there instead of the caller's
    /// values would show.
    ProgramWithInputs,
}

impl Mode {
    /// One of the three, from two bits of fuzzer data.
    pub fn from_bits(bits: u8) -> Mode {
        match bits % 3 {
            0 => Mode::Run,
            1 => Mode::Program,
            _ => Mode::ProgramWithInputs,
        }
    }
}

/// Runs `entry` (through `run`, a decoded program, or a decoded program reading its inputs
/// from the caller's memory) after setting its inputs, asserting that a refused guarded step
/// commits nothing.
pub fn run_entry(
    session: &mut Session<'_, '_>,
    plan: &Plan<'_>,
    entry: EntryId,
    data: &[u8],
    mode: Mode,
) -> Outcome {
    set_inputs(session, plan, entry, data);
    let before = session.persistent().to_vec();
    let mut buf = vec![Decoded::EMPTY; MAX_PROGRAM_INSTRS];
    let result = match mode {
        Mode::Run => session.run(entry),
        Mode::Program => match session.decode(entry, &mut buf) {
            Ok(p) => session.run_program(&p),
            Err(e) => Err(e),
        },
        Mode::ProgramWithInputs => {
            let inputs: Vec<_> = plan
                .bindings()
                .filter(|b| b.kind == BindingKind::Input && b.entry == Some(entry))
                .take(MAX_BOUND_INPUTS)
                .collect();
            let names: Vec<&str> = inputs.iter().map(|b| b.name).collect();
            let values: Vec<Vec<f32>> = inputs
                .iter()
                .map(|b| session.read_binding(b).to_vec())
                .collect();
            for b in &inputs {
                let nan = vec![f32::NAN; b.elems];
                session.write_binding(b, &nan).expect("an input binding");
            }
            let slices: Vec<&[f32]> = values.iter().map(Vec::as_slice).collect();
            match session.decode_with_inputs(entry, &mut buf, &names) {
                Ok(p) => session.run_program_with_inputs(&p, &slices),
                Err(e) => Err(e),
            }
        }
    };
    if let Err(ExecError::NonFinite { .. }) = result {
        assert_eq!(
            bits(&before),
            bits(session.persistent()),
            "a refused guarded entry changed the persistent region"
        );
    }
    let outputs = plan
        .bindings()
        .filter(|b| b.kind == BindingKind::Output && b.entry == Some(entry))
        .map(|b| bits(session.output(entry, b.name).unwrap_or(&[])))
        .collect();
    Outcome {
        result: result.map_err(|e| e.to_string()),
        outputs,
        persistent: bits(session.persistent()),
    }
}

/// Parses `bytes` with the default limits and, if the plan is valid and its arena small
/// enough, binds a zeroed arena and runs every entry three ways (`run`, a decoded program, a
/// decoded program reading its inputs from the caller's memory; on three arenas), asserting
/// that all give the same bits and that refused steps commit nothing.
pub fn exercise(bytes: &[u8], data: &[u8]) {
    let Ok(plan) = Plan::parse(bytes) else {
        return;
    };
    if plan.arena_elems() > MAX_ARENA_ELEMS {
        return;
    }
    let mut arena_a = vec![0.0f32; plan.arena_elems()];
    let mut arena_b = vec![0.0f32; plan.arena_elems()];
    let mut arena_c = vec![0.0f32; plan.arena_elems()];
    let (Ok(mut a), Ok(mut b), Ok(mut c)) = (
        Session::bind_zeroed(&plan, &mut arena_a),
        Session::bind_zeroed(&plan, &mut arena_b),
        Session::bind_zeroed(&plan, &mut arena_c),
    ) else {
        return;
    };
    for entry in plan.entries() {
        let ra = run_entry(&mut a, &plan, entry, data, Mode::Run);
        let rb = run_entry(&mut b, &plan, entry, data, Mode::Program);
        let rc = run_entry(&mut c, &plan, entry, data, Mode::ProgramWithInputs);
        assert_eq!(ra, rb, "run and run_program disagree on entry {entry:?}");
        assert_eq!(
            rb, rc,
            "run_program and run_program_with_inputs disagree on entry {entry:?}"
        );
    }
}

/// The runtime (built with the `simd` catalog) against the host interpreter's reference
/// kernels ([`Schedule::run_host`]) on the seed's fused plan: `init`, two `train_step`s and
/// `forward`, each started from the same arena; every output, and every update of a step the
/// runtime accepted, agrees bit for bit (NaNs as one class).
pub fn catalog_agrees_with_reference(seed: &Seed, data: &[u8]) {
    let plan = Plan::parse(&seed.fused).expect("seed plans are valid");
    let mut arena = vec![0.0f32; plan.arena_elems()];
    for name in ["init", "train_step", "train_step", "forward"] {
        let Some(entry) = plan.entry(name) else {
            continue;
        };
        {
            let mut s = Session::bind(&plan, &mut arena).expect("the arena fits");
            set_inputs(&mut s, &plan, entry, data);
        }
        let mut host = arena.clone();
        let result = Session::bind(&plan, &mut arena)
            .expect("the arena fits")
            .run(entry);
        seed.schedule
            .run_host(name, &mut host)
            .expect("the reference kernels run a valid plan");
        for b in plan.bindings().filter(|b| b.entry == Some(entry)) {
            let compare = match b.kind {
                BindingKind::Output => true,
                BindingKind::Update => result.is_ok(),
                _ => false,
            };
            if compare {
                assert_eq!(
                    bits(&arena[b.range()]),
                    bits(&host[b.range()]),
                    "{}: {name}: {} differs between the catalog and the reference kernels",
                    seed.name,
                    b.name
                );
            }
        }
        if result.is_err() {
            // A refused step committed nothing; the host interpreter's arena did: continue
            // from the runtime's.
            continue;
        }
    }
}
