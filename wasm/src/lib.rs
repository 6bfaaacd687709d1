//! tapeplan's runtime in the browser: a [`wasm_bindgen`](mod@wasm_bindgen) API over [`tapeplan_runtime`].
//!
//! A [`Trainer`] owns a plan's bytes (validated once, at load) and an arena of exactly the size
//! the plan asks for. From JavaScript:
//!
//! ```js
//! import init, { Trainer } from "./pkg/tapeplan_wasm.js";
//! await init();
//! const t = new Trainer(planBytes);            // Uint8Array; a bad plan throws an Error
//! t.loadParameter("w1", w1);                   // Float32Array, or t.loadParameters(all)
//! const loss = t.trainStep(x, labels);         // one `train_step`: x [batch, d_in], labels [batch]
//! const logits = t.forward(x);                 // the `forward` entry's output
//! t.digest();                                  // "e3b0…": FNV-1a 64 of the persistent region
//! ```
//!
//! Every method that can fail throws a JavaScript `Error` carrying the runtime's message; none
//! panics (a panic in wasm is a trap). The same methods are plain Rust methods returning
//! [`Error`], which is how the host unit tests drive them.
//!
//! The bits are the runtime's reference kernels', so a training run here equals the host
//! oracle's bit for bit: [`Trainer::digest`] after the demo's fixed run is compared with the
//! digest the host writes next to the plan.

#![forbid(unsafe_code)]

use std::fmt;

mod run;
pub use run::{target_width, EpochReport, Metrics, RunOptions, Table, TrainRun};

use tapeplan_runtime::protocol::{
    digest_f32, parameter_digest, ENTRY_FORWARD, ENTRY_TRAIN_STEP, INPUT_LABELS, INPUT_X, INPUT_Y,
    OUTPUT_LOSS,
};
use tapeplan_runtime::{Binding, BindingKind, EntryId, ExecError, ParseError, Plan, Session};
use wasm_bindgen::prelude::*;

self_cell::self_cell!(
    /// The plan's bytes and the validated view over them.
    struct Loaded {
        owner: Box<[u8]>,
        #[covariant]
        dependent: Plan,
    }
);

/// Why a [`Trainer`] call failed. In JavaScript it is thrown as an `Error` whose message is
/// this type's `Display`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The plan's bytes were rejected by the runtime's decoder and validator.
    Plan(ParseError),
    /// The runtime refused a call; `context` names the entry or binding involved.
    Run {
        /// What was being done: `parameter "w1"`, `input "x" of train_step`, ….
        context: String,
        /// The runtime's error.
        error: ExecError,
    },
    /// The plan has no entry of that name.
    NoEntry(String),
    /// An entry lacks a binding the convenience method needs.
    NoBinding {
        /// The entry.
        entry: String,
        /// What was looked for.
        wanted: &'static str,
    },
    /// An all-at-once load with the wrong number of elements.
    Length {
        /// What was loaded.
        what: &'static str,
        /// The element count expected.
        expected_elems: usize,
        /// The element count given.
        found_elems: usize,
    },
    /// A training run's data or options do not fit its plan ([`TrainRun`]).
    Data(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Plan(e) => write!(f, "plan rejected: {e}"),
            Error::Run { context, error } => write!(f, "{context}: {error}"),
            Error::Data(text) => f.write_str(text),
            Error::NoEntry(name) => write!(f, "the plan has no entry named \"{name}\""),
            Error::NoBinding { entry, wanted } => {
                write!(f, "entry \"{entry}\" has no {wanted}")
            }
            Error::Length {
                what,
                expected_elems,
                found_elems,
            } => write!(
                f,
                "{what}: {found_elems} elements given where the plan has {expected_elems}"
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<ParseError> for Error {
    fn from(e: ParseError) -> Self {
        Error::Plan(e)
    }
}

fn js(e: Error) -> JsError {
    JsError::new(&e.to_string())
}

/// A rendered digest: 16 lowercase hex digits.
fn hex(d: u64) -> String {
    format!("{d:016x}")
}

/// A shape's dimensions (`rank` of them).
fn dims(b: &Binding<'_>) -> Vec<u32> {
    b.shape.dims_u32()[..b.shape.rank()].to_vec()
}

/// A plan loaded into WebAssembly with its own arena: load parameters, set inputs, run
/// entries, read outputs, digest the parameters.
///
/// The arena's persistent region (`[0, persistentElems)`) holds the parameters across steps;
/// the rest is scratch that every run reuses, so set an entry's inputs right before running it
/// and read its outputs right after.
#[wasm_bindgen]
pub struct Trainer {
    plan: Loaded,
    arena: Vec<f32>,
    train: Option<EntryId>,
    forward: Option<EntryId>,
}

/// The Rust API (what the JavaScript methods call).
impl Trainer {
    /// Decodes and validates `bytes` (copied), and allocates a zeroed arena of the plan's size.
    ///
    /// # Errors
    /// [`Error::Plan`] naming the first rule of the plan format the bytes break.
    pub fn from_bytes(bytes: &[u8]) -> Result<Trainer, Error> {
        let plan = Loaded::try_new(bytes.to_vec().into_boxed_slice(), |b| Plan::parse_alloc(b))?;
        let p = plan.borrow_dependent();
        let arena = vec![0.0f32; p.arena_elems()];
        let train = p.entry(ENTRY_TRAIN_STEP);
        let forward = p.entry(ENTRY_FORWARD);
        Ok(Trainer {
            plan,
            arena,
            train,
            forward,
        })
    }

    fn plan(&self) -> &Plan<'_> {
        self.plan.borrow_dependent()
    }

    /// Runs `f` over a session bound to the arena.
    fn with_session<T>(
        &mut self,
        context: impl FnOnce() -> String,
        f: impl FnOnce(&mut Session<'_, '_>) -> Result<T, ExecError>,
    ) -> Result<T, Error> {
        let Trainer { plan, arena, .. } = self;
        Session::bind(plan.borrow_dependent(), arena)
            .and_then(|mut s| f(&mut s))
            .map_err(|error| Error::Run {
                context: context(),
                error,
            })
    }

    fn entry_id(&self, name: &str) -> Result<EntryId, Error> {
        self.plan()
            .entry(name)
            .ok_or_else(|| Error::NoEntry(name.into()))
    }

    fn binding(&self, entry: &str, kind: BindingKind, name: &str) -> Result<Binding<'_>, Error> {
        let plan = self.plan();
        let found = if kind == BindingKind::Parameter {
            plan.parameter(name)
        } else {
            let e = self.entry_id(entry)?;
            match kind {
                BindingKind::Input => plan.input(e, name),
                _ => plan.output(e, name),
            }
        };
        found.ok_or_else(|| Error::Run {
            context: binding_context(kind, name, entry),
            error: ExecError::UnknownName { kind },
        })
    }

    /// The parameters' names, in the plan's binding order.
    pub fn parameter_names(&self) -> Vec<String> {
        self.plan().parameters().map(|b| b.name.into()).collect()
    }

    /// The entries' names (`forward`, `train_step`, …).
    pub fn entry_names(&self) -> Vec<String> {
        let plan = self.plan();
        plan.entries()
            .filter_map(|e| plan.entry_name(e))
            .map(Into::into)
            .collect()
    }

    /// A parameter's shape.
    ///
    /// # Errors
    /// No such parameter.
    pub fn parameter_shape(&self, name: &str) -> Result<Vec<u32>, Error> {
        Ok(dims(&self.binding("", BindingKind::Parameter, name)?))
    }

    /// The input names of an entry.
    ///
    /// # Errors
    /// No such entry.
    pub fn input_names(&self, entry: &str) -> Result<Vec<String>, Error> {
        let e = self.entry_id(entry)?;
        Ok(self.plan().inputs(e).map(|b| b.name.into()).collect())
    }

    /// The output names of an entry.
    ///
    /// # Errors
    /// No such entry.
    pub fn output_names(&self, entry: &str) -> Result<Vec<String>, Error> {
        let e = self.entry_id(entry)?;
        Ok(self.plan().outputs(e).map(|b| b.name.into()).collect())
    }

    /// An input's shape.
    ///
    /// # Errors
    /// No such entry or input.
    pub fn input_shape(&self, entry: &str, name: &str) -> Result<Vec<u32>, Error> {
        Ok(dims(&self.binding(entry, BindingKind::Input, name)?))
    }

    /// An output's shape.
    ///
    /// # Errors
    /// No such entry or output.
    pub fn output_shape(&self, entry: &str, name: &str) -> Result<Vec<u32>, Error> {
        Ok(dims(&self.binding(entry, BindingKind::Output, name)?))
    }

    /// Copies one parameter's values (row-major) into the arena.
    ///
    /// # Errors
    /// No such parameter, or the wrong length.
    pub fn load_parameter(&mut self, name: &str, values: &[f32]) -> Result<(), Error> {
        self.with_session(
            || format!("parameter \"{name}\""),
            |s| s.load_parameter(name, values),
        )
    }

    /// A parameter's current values.
    ///
    /// # Errors
    /// No such parameter.
    pub fn parameter(&mut self, name: &str) -> Result<Vec<f32>, Error> {
        self.with_session(
            || format!("parameter \"{name}\""),
            |s| s.parameter(name).map(<[f32]>::to_vec),
        )
    }

    /// The number of parameter elements, all parameters together.
    pub fn parameter_elems(&self) -> usize {
        self.plan().parameters().map(|b| b.elems).sum()
    }

    /// Every parameter's values, concatenated in [`Trainer::parameter_names`] order.
    pub fn parameters(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.parameter_elems());
        for b in self.plan().parameters() {
            out.extend_from_slice(self.arena.get(b.range()).unwrap_or(&[]));
        }
        out
    }

    /// Loads every parameter from one concatenation in [`Trainer::parameter_names`] order.
    ///
    /// # Errors
    /// [`Error::Length`] unless `values` has [`Trainer::parameter_elems`] elements; nothing is
    /// loaded then.
    pub fn load_parameters(&mut self, values: &[f32]) -> Result<(), Error> {
        let expected_elems = self.parameter_elems();
        if values.len() != expected_elems {
            return Err(Error::Length {
                what: "parameters",
                expected_elems,
                found_elems: values.len(),
            });
        }
        let Trainer { plan, arena, .. } = self;
        let mut at = 0;
        for b in plan.borrow_dependent().parameters() {
            let (src, dst) = (values.get(at..at + b.elems), arena.get_mut(b.range()));
            if let (Some(src), Some(dst)) = (src, dst) {
                dst.copy_from_slice(src);
            }
            at += b.elems;
        }
        Ok(())
    }

    /// The persistent region `[0, persistent_elems)`: every parameter at its place in the
    /// arena, alignment padding included (a checkpoint).
    pub fn persistent(&self) -> &[f32] {
        let n = self.plan().persistent_elems();
        self.arena.get(..n).unwrap_or(&[])
    }

    /// Restores the persistent region from [`Trainer::persistent`]'s values.
    ///
    /// # Errors
    /// [`Error::Length`] unless `values` has `persistent_elems` elements.
    pub fn load_persistent(&mut self, values: &[f32]) -> Result<(), Error> {
        let expected_elems = self.plan().persistent_elems();
        match self.arena.get_mut(..expected_elems) {
            Some(dst) if values.len() == expected_elems => {
                dst.copy_from_slice(values);
                Ok(())
            }
            _ => Err(Error::Length {
                what: "persistent region",
                expected_elems,
                found_elems: values.len(),
            }),
        }
    }

    /// The parameter digest: [`digest_f32`] of the persistent region, as 16 hex digits. Every
    /// target computes the same one for the same bits.
    pub fn digest(&self) -> String {
        hex(digest_f32(self.persistent()))
    }

    /// The parameter digest as `tapeplan train` prints it (`parameter digest: 0x…`): `0x` and
    /// 16 hex digits of [`parameter_digest`] (every parameter in the plan's order, alignment
    /// padding left out; [`Trainer::digest`] covers the whole persistent region).
    pub fn parameter_digest(&self) -> String {
        format!(
            "0x{}",
            hex(parameter_digest(self.plan(), self.persistent()))
        )
    }

    /// Copies an input's values into the arena.
    ///
    /// # Errors
    /// No such entry or input, or the wrong length.
    pub fn set_input(&mut self, entry: &str, name: &str, values: &[f32]) -> Result<(), Error> {
        let e = self.entry_id(entry)?;
        self.with_session(
            || binding_context(BindingKind::Input, name, entry),
            |s| s.set_input(e, name, values),
        )
    }

    /// Runs an entry.
    ///
    /// # Errors
    /// No such entry, or a runtime error.
    pub fn run(&mut self, entry: &str) -> Result<(), Error> {
        let e = self.entry_id(entry)?;
        self.with_session(|| format!("running {entry}"), |s| s.run(e))
    }

    /// An output's values as the last run left them.
    ///
    /// # Errors
    /// No such entry or output.
    pub fn output(&mut self, entry: &str, name: &str) -> Result<Vec<f32>, Error> {
        let e = self.entry_id(entry)?;
        self.with_session(
            || binding_context(BindingKind::Output, name, entry),
            |s| s.output(e, name).map(<[f32]>::to_vec),
        )
    }

    /// One `train_step`: sets `x` and the target (the entry's `labels` input, or `y`), runs,
    /// answers the `loss` output.
    ///
    /// # Shapes
    /// `x: [batch, d_in]`; the target `[batch]` class indices as `f32`, or `[batch, d_out]`.
    ///
    /// # Errors
    /// No `train_step` entry, wrong lengths, or a runtime error.
    pub fn train_step(&mut self, x: &[f32], target: &[f32]) -> Result<f32, Error> {
        let e = self
            .train
            .ok_or_else(|| Error::NoEntry(ENTRY_TRAIN_STEP.into()))?;
        let target_name = if self.plan().input(e, INPUT_LABELS).is_some() {
            INPUT_LABELS
        } else {
            INPUT_Y
        };
        let ctx = |name: &str| binding_context(BindingKind::Input, name, ENTRY_TRAIN_STEP);
        self.with_session(|| ctx(INPUT_X), |s| s.set_input(e, INPUT_X, x))?;
        self.with_session(|| ctx(target_name), |s| s.set_input(e, target_name, target))?;
        self.with_session(
            || format!("running {ENTRY_TRAIN_STEP}"),
            |s| {
                s.run(e)?;
                Ok(s.output(e, OUTPUT_LOSS)?
                    .first()
                    .copied()
                    .unwrap_or(f32::NAN))
            },
        )
    }

    /// The `forward` entry's first output (the logits) for `x`.
    ///
    /// # Shapes
    /// `x: [batch, d_in]`; answers `[batch, d_out]`.
    ///
    /// # Errors
    /// No `forward` entry, or it has no input `x` or no output; the wrong length.
    pub fn forward(&mut self, x: &[f32]) -> Result<Vec<f32>, Error> {
        let e = self
            .forward
            .ok_or_else(|| Error::NoEntry(ENTRY_FORWARD.into()))?;
        let out = self
            .plan()
            .outputs(e)
            .next()
            .ok_or_else(|| Error::NoBinding {
                entry: ENTRY_FORWARD.into(),
                wanted: "output",
            })?;
        let range = out.range();
        self.with_session(
            || binding_context(BindingKind::Input, INPUT_X, ENTRY_FORWARD),
            |s| {
                s.set_input(e, INPUT_X, x)?;
                s.run(e)
            },
        )?;
        Ok(self.arena.get(range).unwrap_or(&[]).to_vec())
    }
}

fn binding_context(kind: BindingKind, name: &str, entry: &str) -> String {
    match kind {
        BindingKind::Parameter => format!("parameter \"{name}\""),
        BindingKind::Input => format!("input \"{name}\" of {entry}"),
        BindingKind::Output => format!("output \"{name}\" of {entry}"),
        _ => format!("\"{name}\" of {entry}"),
    }
}

/// The JavaScript API. Every fallible method throws an `Error` with [`Error`]'s message.
#[wasm_bindgen]
impl Trainer {
    /// Loads a plan: `new Trainer(bytes)` with a `Uint8Array`. Throws on bytes the runtime
    /// rejects.
    #[wasm_bindgen(constructor)]
    pub fn new(bytes: &[u8]) -> Result<Trainer, JsError> {
        Trainer::from_bytes(bytes).map_err(js)
    }

    /// The arena's size in `f32` elements.
    #[wasm_bindgen(getter, js_name = arenaElems)]
    pub fn arena_elems(&self) -> usize {
        self.plan().arena_elems()
    }

    /// The arena's size in bytes.
    #[wasm_bindgen(getter, js_name = arenaBytes)]
    pub fn arena_bytes(&self) -> usize {
        self.plan().arena_bytes()
    }

    /// The persistent region's size in `f32` elements.
    #[wasm_bindgen(getter, js_name = persistentElems)]
    pub fn persistent_elems(&self) -> usize {
        self.plan().persistent_elems()
    }

    /// The plan's identity (a hash of model and hyperparameters).
    #[wasm_bindgen(getter, js_name = planId)]
    pub fn plan_id(&self) -> u32 {
        self.plan().plan_id()
    }

    /// The number of parameter elements, all parameters together.
    #[wasm_bindgen(getter, js_name = parameterElems)]
    pub fn js_parameter_elems(&self) -> usize {
        self.parameter_elems()
    }

    /// The entries' names.
    #[wasm_bindgen(js_name = entryNames)]
    pub fn js_entry_names(&self) -> Vec<String> {
        self.entry_names()
    }

    /// The parameters' names, in binding order (the order of `parameters()`).
    #[wasm_bindgen(js_name = parameterNames)]
    pub fn js_parameter_names(&self) -> Vec<String> {
        self.parameter_names()
    }

    /// A parameter's shape (`Uint32Array`, one element per dimension).
    #[wasm_bindgen(js_name = parameterShape)]
    pub fn js_parameter_shape(&self, name: &str) -> Result<Vec<u32>, JsError> {
        self.parameter_shape(name).map_err(js)
    }

    /// An entry's input names.
    #[wasm_bindgen(js_name = inputNames)]
    pub fn js_input_names(&self, entry: &str) -> Result<Vec<String>, JsError> {
        self.input_names(entry).map_err(js)
    }

    /// An entry's output names.
    #[wasm_bindgen(js_name = outputNames)]
    pub fn js_output_names(&self, entry: &str) -> Result<Vec<String>, JsError> {
        self.output_names(entry).map_err(js)
    }

    /// An input's shape.
    #[wasm_bindgen(js_name = inputShape)]
    pub fn js_input_shape(&self, entry: &str, name: &str) -> Result<Vec<u32>, JsError> {
        self.input_shape(entry, name).map_err(js)
    }

    /// An output's shape.
    #[wasm_bindgen(js_name = outputShape)]
    pub fn js_output_shape(&self, entry: &str, name: &str) -> Result<Vec<u32>, JsError> {
        self.output_shape(entry, name).map_err(js)
    }

    /// Loads one parameter from a `Float32Array` (row-major).
    #[wasm_bindgen(js_name = loadParameter)]
    pub fn js_load_parameter(&mut self, name: &str, values: &[f32]) -> Result<(), JsError> {
        self.load_parameter(name, values).map_err(js)
    }

    /// One parameter's current values, as a new `Float32Array`.
    #[wasm_bindgen(js_name = parameter)]
    pub fn js_parameter(&mut self, name: &str) -> Result<Vec<f32>, JsError> {
        self.parameter(name).map_err(js)
    }

    /// Every parameter, concatenated in `parameterNames()` order.
    #[wasm_bindgen(js_name = parameters)]
    pub fn js_parameters(&self) -> Vec<f32> {
        self.parameters()
    }

    /// Loads every parameter from one concatenation in `parameterNames()` order.
    #[wasm_bindgen(js_name = loadParameters)]
    pub fn js_load_parameters(&mut self, values: &[f32]) -> Result<(), JsError> {
        self.load_parameters(values).map_err(js)
    }

    /// The persistent region (a checkpoint), as a new `Float32Array`.
    #[wasm_bindgen(js_name = persistent)]
    pub fn js_persistent(&self) -> Vec<f32> {
        self.persistent().to_vec()
    }

    /// Restores the persistent region from `persistent()`'s values.
    #[wasm_bindgen(js_name = loadPersistent)]
    pub fn js_load_persistent(&mut self, values: &[f32]) -> Result<(), JsError> {
        self.load_persistent(values).map_err(js)
    }

    /// The parameter digest: FNV-1a 64 of the persistent region's bits, 16 hex digits.
    #[wasm_bindgen(js_name = digest)]
    pub fn js_digest(&self) -> String {
        self.digest()
    }

    /// The parameter digest as `tapeplan train` prints it: `"0x"` and 16 hex digits.
    #[wasm_bindgen(js_name = parameterDigest)]
    pub fn js_parameter_digest(&self) -> String {
        self.parameter_digest()
    }

    /// Copies an input of an entry from a `Float32Array`.
    #[wasm_bindgen(js_name = setInput)]
    pub fn js_set_input(&mut self, entry: &str, name: &str, values: &[f32]) -> Result<(), JsError> {
        self.set_input(entry, name, values).map_err(js)
    }

    /// Runs an entry by name.
    #[wasm_bindgen(js_name = run)]
    pub fn js_run(&mut self, entry: &str) -> Result<(), JsError> {
        self.run(entry).map_err(js)
    }

    /// An output of an entry, as the last run left it, as a new `Float32Array`.
    #[wasm_bindgen(js_name = output)]
    pub fn js_output(&mut self, entry: &str, name: &str) -> Result<Vec<f32>, JsError> {
        self.output(entry, name).map_err(js)
    }

    /// One training step: `x` (`[batch, d_in]`) and the target (`[batch]` labels as floats, or
    /// `[batch, d_out]`); answers the loss.
    #[wasm_bindgen(js_name = trainStep)]
    pub fn js_train_step(&mut self, x: &[f32], target: &[f32]) -> Result<f32, JsError> {
        self.train_step(x, target).map_err(js)
    }

    /// The `forward` entry's logits for `x`, as a new `Float32Array` (`[batch, d_out]`).
    #[wasm_bindgen(js_name = forward)]
    pub fn js_forward(&mut self, x: &[f32]) -> Result<Vec<f32>, JsError> {
        self.forward(x).map_err(js)
    }
}

/// The digest every target computes ([`digest_f32`]) of any `Float32Array` (a loss trace, a
/// parameter), as 16 hex digits.
#[wasm_bindgen(js_name = digestF32)]
pub fn digest_f32_hex(values: &[f32]) -> String {
    hex(digest_f32(values))
}

/// The crate's version.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").into()
}

// Host unit tests drive the Rust API against the planner's oracle; the planner is host-only.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
