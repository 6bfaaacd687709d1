//! The run protocol: what every target (the CLI's host runs, the browser package, the firmware)
//! and the verifier agree on, written once, `no_std` and allocation-free.
//!
//! - **Binding names** of a training plan: the entries [`ENTRY_FORWARD`], [`ENTRY_TRAIN_STEP`]
//!   and [`ENTRY_INIT`]; `train_step`'s inputs [`INPUT_X`] and [`INPUT_LABELS`] (classification)
//!   or [`INPUT_Y`] (regression), its output [`OUTPUT_LOSS`]; `forward`'s output
//!   [`OUTPUT_LOGITS`].
//! - **The generator**: [`SplitMix64`], the seeded stream behind initialization, data splits and
//!   the epoch shuffles.
//! - **The epoch order**: epoch `e` (0-based) of a run seeded with `seed` visits the rows
//!   `0..n` in the order of the Fisher–Yates shuffle ([`SplitMix64::shuffle`]) of the identity
//!   by `SplitMix64::new(`[`epoch_seed`]`(seed, e))`: [`epoch_shuffle`]. The rows of that order
//!   go in full batches of consecutive rows; the last `n % batch` rows of an epoch are not used.
//! - **The digests**: FNV-1a 64 ([`Fnv1a64`]) of a set of `f32`s ([`digest_f32`]: parameters, a
//!   persistent region, a loss trace) and of embedded data ([`data_digest`]).
//! - **The transcript**: the text a device sends back for `tapeplan verify`, written by
//!   [`TranscriptWriter`] over any [`LineSink`]; its format is below.
//!
//! 64-bit integer arithmetic only (and one exact `f32` conversion in [`SplitMix64::next_f32`]):
//! the same bits on every core.
//!
//! The small functions are `#[inline]`, so that a caller in another crate (the firmware's
//! trainer) can inline them before link-time optimization, as it did its own copies: without
//! it the Cortex-M4F firmware's LTO build stops inlining the validator into the trainer and
//! grows by about 1.4 KiB.
//!
//! # The transcript (format version 1)
//!
//! ASCII text, one record per line, fields separated by single spaces; a line ends with `\n`
//! (a `\r` before it is ignored). Numbers are decimal unless said otherwise; `hex8` is a `u32`
//! as exactly 8 lowercase or uppercase hex digits (an `f32`'s bits: `f32::to_bits`), `hex16` a
//! `u64` as 16. Blank lines and lines starting with `#` are ignored. The writer writes
//! lowercase hex.
//!
//! | line | meaning |
//! |---|---|
//! | `tapeplan-transcript 1` | first line ([`TRANSCRIPT_MAGIC`]): the format and its version (anything before it, such as a UART's boot noise, is skipped) |
//! | `config <key=value> …` | the run (the planner's `RunConfig::to_line`): exactly once, before `loss` |
//! | `target <text>` | what ran it (free text, e.g. `thumbv7em-none-eabihf mps2-an386`) |
//! | `plan <hex8> <arena_elems>` | the plan's id (its header's `plan_id`, the CRC-32 of its records) and arena size |
//! | `data <hex16> <rows>` | [`data_digest`] of the embedded pixel counts then labels, and the row count |
//! | `bind plan=<hex8> data=<hex16> init=<hex16> math=<profile>` | optional, once, before `loss`: the header's binding of the run to its inputs: the plan's checksum (its header's `crc32`), the [`data_digest`], the [`digest_f32`] of the initial model tensors (in the order of the `param` lines) and the math profile (`precise`, `fast`); a streaming verifier checks it before the first step |
//! | `loss <step> <hex8>` | the loss of step `step` (1-based), in step order, every step once |
//! | `state <step> <hex16>` | optional, after `loss <step>`: [`digest_f32`] of the model tensors (in the order of the `param` lines) after step `step`; either every step has one or none does |
//! | `epoch <epoch> <hex8>` | optional: epoch `epoch`'s (1-based) mean loss as the device computed it: `f32` sum of its steps' losses in order, divided by its step count as `f32` |
//! | `param <name> <start> <hex8> …` | final values of parameter `name`, elements `start, start+1, …` (any number per line, in order, every element once; the writer puts [`PARAMS_PER_LINE`] on a line) |
//! | `digest <hex16>` | [`digest_f32`] of every parameter, concatenated in the order the `param` lines give them |
//! | `info <text>` | free text (timings, sizes); ignored |
//! | `end ok` | last line: the device finished; `end error <text>` reports a failure |
//!
//! A transcript without its `end` line is truncated, and rejected. The host's parser and
//! verifier are `tapeplan_planner::verify`.
//!
//! ```
//! use tapeplan_runtime::protocol::TranscriptWriter;
//!
//! let mut text = String::new();
//! let mut t = TranscriptWriter::new(&mut text);
//! t.header()?;
//! t.loss(1, 2.5)?;
//! t.param("w", &[1.0, -0.0])?;
//! t.digest()?;
//! t.end_ok()?;
//! assert_eq!(
//!     text,
//!     "tapeplan-transcript 1\nloss 1 40200000\nparam w 0 3f800000 80000000\n\
//!      digest 0979a9ee2da1bb98\nend ok\n"
//! );
//! # Ok::<(), core::fmt::Error>(())
//! ```

use core::fmt;

/// The entry that runs inference: inputs [`INPUT_X`], output [`OUTPUT_LOGITS`].
pub const ENTRY_FORWARD: &str = "forward";
/// The entry that runs one training step: forward, recorded gradient and optimizer update.
pub const ENTRY_TRAIN_STEP: &str = "train_step";
/// The entry, when a plan has one, that gives the optimizer state its initial values; run it
/// once after binding.
pub const ENTRY_INIT: &str = "init";
/// The features input of `forward` and `train_step`, `[batch, d_in]`.
pub const INPUT_X: &str = "x";
/// `train_step`'s target of a classification loss: class indices as `f32`, `[batch]`.
pub const INPUT_LABELS: &str = "labels";
/// `train_step`'s target of a regression loss, `[batch, d_out]`.
pub const INPUT_Y: &str = "y";
/// `train_step`'s loss output, `[]` (one element).
pub const OUTPUT_LOSS: &str = "loss";
/// `forward`'s output, `[batch, d_out]`.
pub const OUTPUT_LOGITS: &str = "logits";

/// A SplitMix64 stream (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014; the generator of Java's `SplittableRandom`). Every draw is a pure
/// function of the seed and the number of draws before it, on every platform.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A stream from a seed.
    #[inline]
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform `f32` in `[0, 1)`: the top 24 bits over 2^24 (exact in `f32`).
    #[inline]
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// A uniform integer in `[0, n)` (Lemire's multiply-shift, without the rejection step: the
    /// bias is below 2^-32 for the sizes used here). `n == 0` answers 0.
    #[inline]
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() >> 32).wrapping_mul(n as u64) >> 32) as usize
    }

    /// Shuffles `items` in place with the Fisher–Yates algorithm (Knuth's Algorithm P), drawing
    /// `j` in `[0, i]` for `i` from the last index down to 1.
    #[inline]
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i.wrapping_add(1));
            items.swap(i, j);
        }
    }
}

/// The shuffle seed of epoch `epoch` (0-based) of a run seeded with `seed`: the first output of
/// `SplitMix64::new(seed ^ ((epoch + 1) << 32))`.
#[inline]
pub fn epoch_seed(seed: u64, epoch: usize) -> u64 {
    SplitMix64::new(seed ^ ((epoch as u64).wrapping_add(1) << 32)).next_u64()
}

/// Puts `rows` in epoch `epoch`'s (0-based) order of a run seeded with `seed`: shuffles it with
/// `SplitMix64::new(`[`epoch_seed`]`(seed, epoch))`. Give it the identity `0..n` (any integer
/// type) to get the order in which the epoch visits the rows.
#[inline]
pub fn epoch_shuffle<T>(seed: u64, epoch: usize, rows: &mut [T]) {
    SplitMix64::new(epoch_seed(seed, epoch)).shuffle(rows);
}

/// FNV-1a 64 (Fowler–Noll–Vo; offset basis `0xcbf29ce484222325`, prime `0x100000001b3`),
/// streamed: feed bytes and `f32`s in order, read the digest with [`Fnv1a64::finish`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fnv1a64(u64);

impl Default for Fnv1a64 {
    fn default() -> Self {
        Fnv1a64::new()
    }
}

impl Fnv1a64 {
    /// The offset basis: the digest of nothing.
    #[inline]
    pub const fn new() -> Fnv1a64 {
        Fnv1a64(0xcbf2_9ce4_8422_2325)
    }

    /// Feeds bytes.
    #[inline]
    pub fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// Feeds `f32`s as their little-endian bytes, every NaN first canonicalized to
    /// `0x7fc00000` (NaN payloads may legally differ between targets).
    #[inline]
    pub fn f32s(&mut self, values: &[f32]) {
        for v in values {
            let bits = if v.is_nan() { 0x7fc0_0000 } else { v.to_bits() };
            self.bytes(&bits.to_le_bytes());
        }
    }

    /// The digest so far.
    #[inline]
    pub const fn finish(&self) -> u64 {
        self.0
    }
}

/// The digest of a set of `f32` values (parameters, a persistent region, a loss trace), as every
/// target computes it: FNV-1a 64 ([`Fnv1a64::f32s`]) over each value's little-endian bytes, in
/// order, NaNs canonicalized.
#[inline]
pub fn digest_f32(values: &[f32]) -> u64 {
    let mut h = Fnv1a64::new();
    h.f32s(values);
    h.finish()
}

/// The parameter digest of a plan's run: [`digest_f32`] of every parameter binding of `plan`
/// (the optimizer's state included), concatenated in the plan's order, alignment padding left
/// out. It is the digest of a transcript's `param` lines; `tapeplan train` prints it
/// (`parameter digest: 0x…`) and the browser package's `parameterDigest()` answers it.
///
/// # Shapes
/// `persistent: [plan.persistent_elems()]` (a binding past its end digests as empty).
#[inline]
pub fn parameter_digest(plan: &crate::Plan<'_>, persistent: &[f32]) -> u64 {
    let mut h = Fnv1a64::new();
    for b in plan.parameters() {
        h.f32s(persistent.get(b.range()).unwrap_or(&[]));
    }
    h.finish()
}

/// Fills `out` with Glorot-uniform values (Glorot and Bengio, 2010) for a weight of `fan_in`
/// inputs and `fan_out` outputs: `(2 u - 1) a` with `u` = [`SplitMix64::next_f32`] and
/// `a = sqrt(6 / (fan_in + fan_out))`, all in `f32`, one draw per element in order. The
/// `--layers` MLP's seeded initialization is this, weight after weight, from one stream
/// (biases zero, no draws).
#[inline]
pub fn glorot_uniform_fill(rng: &mut SplitMix64, fan_in: usize, fan_out: usize, out: &mut [f32]) {
    let a = libm::sqrtf(6.0f32 / fan_in.wrapping_add(fan_out) as f32);
    for v in out {
        *v = (2.0 * rng.next_f32() - 1.0) * a;
    }
}

/// Fits feature standardization on a training split: for each feature `j`, the mean and the
/// population standard deviation (divisor `n`, as scikit-learn's `StandardScaler`) of column
/// `j` of `features`, summed in `f64` in row order and rounded to `f32`; a deviation that is 0
/// or not finite is 1. `tapeplan train --standardize` and the browser package fit with it, and
/// [`standardize_rows`] applies it.
///
/// # Shapes
/// `features: [n, n_features]`; `mean` and `std`: `[n_features]` (the shorter of the two
/// bounds the features fitted).
pub fn standardizer_fit(features: &[f32], n_features: usize, mean: &mut [f32], std: &mut [f32]) {
    let rows = features.len().checked_div(n_features).unwrap_or(0);
    let n = rows.max(1) as f64;
    for (j, (m_out, s_out)) in mean.iter_mut().zip(std.iter_mut()).enumerate() {
        let column = || {
            features
                .iter()
                .skip(j)
                .step_by(n_features.max(1))
                .take(rows)
        };
        let m = column().fold(0.0f64, |s, &x| s + f64::from(x)) / n;
        let sq = column().fold(0.0f64, |s, &x| {
            let d = f64::from(x) - m;
            s + d * d
        });
        let sd = libm::sqrt(sq / n) as f32;
        *m_out = m as f32;
        *s_out = if sd > 0.0 && sd.is_finite() { sd } else { 1.0 };
    }
}

/// Standardizes rows in place: `x ← (x - mean) / std` in `f32`, feature by feature.
///
/// # Shapes
/// `features: [n, mean.len()]`; `std: [mean.len()]`.
pub fn standardize_rows(features: &mut [f32], mean: &[f32], std: &[f32]) {
    for row in features.chunks_exact_mut(mean.len().max(1)) {
        for ((x, m), s) in row.iter_mut().zip(mean).zip(std) {
            *x = (*x - m) / s;
        }
    }
}

/// The digest a device reports for the data it embeds: FNV-1a 64 over `pixels`, then `labels`.
#[inline]
pub fn data_digest(pixels: &[u8], labels: &[u8]) -> u64 {
    let mut h = Fnv1a64::new();
    h.bytes(pixels);
    h.bytes(labels);
    h.finish()
}

/// The transcript's first line.
pub const TRANSCRIPT_MAGIC: &str = "tapeplan-transcript 1";

/// Parameter values per `param` line, as [`TranscriptWriter::param`] writes them.
pub const PARAMS_PER_LINE: usize = 8;

/// Where a transcript goes, one whole line at a time (so a link can send each line in one
/// write).
///
/// Every [`core::fmt::Write`] is one (a `String`, a `&mut String`, a formatter): it gets the
/// line, then `\n`. A device link buffers the line and writes it with its newline.
pub trait LineSink {
    /// What a failed write answers.
    type Error;

    /// Writes `line` and a line end (`\n`).
    ///
    /// # Errors
    /// The sink's.
    fn write_line(&mut self, line: fmt::Arguments<'_>) -> Result<(), Self::Error>;
}

impl<W: fmt::Write> LineSink for W {
    type Error = fmt::Error;

    fn write_line(&mut self, line: fmt::Arguments<'_>) -> Result<(), fmt::Error> {
        self.write_fmt(line)?;
        self.write_char('\n')
    }
}

/// ` <hex8>` per value: a `param` line's values.
struct HexWords<'a>(&'a [f32]);

impl fmt::Display for HexWords<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for v in self.0 {
            write!(f, " {:08x}", v.to_bits())?;
        }
        Ok(())
    }
}

/// Writes a transcript (see the [module docs](self) for the format), one method per record,
/// each one line to the sink. It keeps the [`digest_f32`] of the parameters it has written, for
/// [`TranscriptWriter::digest`].
#[derive(Debug)]
pub struct TranscriptWriter<S> {
    sink: S,
    params: Fnv1a64,
}

impl<S: LineSink> TranscriptWriter<S> {
    /// A transcript into `sink`.
    pub fn new(sink: S) -> Self {
        TranscriptWriter {
            sink,
            params: Fnv1a64::new(),
        }
    }

    /// The sink back.
    pub fn into_inner(self) -> S {
        self.sink
    }

    /// Writes one line as it is; the records below are all this and a format.
    ///
    /// # Errors
    /// The sink's.
    pub fn line(&mut self, line: fmt::Arguments<'_>) -> Result<(), S::Error> {
        self.sink.write_line(line)
    }

    /// `tapeplan-transcript 1`: the first line.
    ///
    /// # Errors
    /// The sink's.
    pub fn header(&mut self) -> Result<(), S::Error> {
        self.line(format_args!("{TRANSCRIPT_MAGIC}"))
    }

    /// `config <run>`: the run description's canonical line.
    ///
    /// # Errors
    /// The sink's.
    pub fn config(&mut self, run: &str) -> Result<(), S::Error> {
        self.line(format_args!("config {run}"))
    }

    /// `target <what>`: what ran it.
    ///
    /// # Errors
    /// The sink's.
    pub fn target(&mut self, what: impl fmt::Display) -> Result<(), S::Error> {
        self.line(format_args!("target {what}"))
    }

    /// `plan <hex8> <arena_elems>`: the plan's id and arena size.
    ///
    /// # Errors
    /// The sink's.
    pub fn plan(&mut self, plan_id: u32, arena_elems: usize) -> Result<(), S::Error> {
        self.line(format_args!("plan {plan_id:08x} {arena_elems}"))
    }

    /// `data <hex16> <rows>`: the embedded data's [`data_digest`] and row count.
    ///
    /// # Errors
    /// The sink's.
    pub fn data(&mut self, digest: u64, rows: usize) -> Result<(), S::Error> {
        self.line(format_args!("data {digest:016x} {rows}"))
    }

    /// `bind plan=<hex8> data=<hex16> init=<hex16> math=<profile>`: what the run is bound to
    /// (the plan's checksum, the data digest, the initial model tensors' digest, the math
    /// profile's name).
    ///
    /// # Errors
    /// The sink's.
    pub fn bind(
        &mut self,
        plan_crc32: u32,
        data_digest: u64,
        init_digest: u64,
        math: &str,
    ) -> Result<(), S::Error> {
        self.line(format_args!(
            "bind plan={plan_crc32:08x} data={data_digest:016x} init={init_digest:016x} math={math}"
        ))
    }

    /// `state <step> <hex16>`: the digest of the model tensors after step `step` (1-based).
    ///
    /// # Errors
    /// The sink's.
    pub fn state(&mut self, step: usize, digest: u64) -> Result<(), S::Error> {
        self.line(format_args!("state {step} {digest:016x}"))
    }

    /// `loss <step> <hex8>`: step `step`'s (1-based) loss bits.
    ///
    /// # Errors
    /// The sink's.
    pub fn loss(&mut self, step: usize, loss: f32) -> Result<(), S::Error> {
        self.line(format_args!("loss {step} {:08x}", loss.to_bits()))
    }

    /// `epoch <epoch> <hex8>`: epoch `epoch`'s (1-based) mean loss bits.
    ///
    /// # Errors
    /// The sink's.
    pub fn epoch(&mut self, epoch: usize, mean_loss: f32) -> Result<(), S::Error> {
        self.line(format_args!("epoch {epoch} {:08x}", mean_loss.to_bits()))
    }

    /// `param <name> <start> <hex8> …`: every value of parameter `name`, [`PARAMS_PER_LINE`] a
    /// line; the values join the parameter digest.
    ///
    /// # Errors
    /// The sink's.
    pub fn param(&mut self, name: &str, values: &[f32]) -> Result<(), S::Error> {
        let mut start = 0usize;
        for chunk in values.chunks(PARAMS_PER_LINE) {
            self.line(format_args!("param {name} {start}{}", HexWords(chunk)))?;
            self.params.f32s(chunk);
            start = start.wrapping_add(chunk.len());
        }
        Ok(())
    }

    /// `digest <hex16>`: the [`digest_f32`] of every value [`TranscriptWriter::param`] wrote,
    /// in order; answers it.
    ///
    /// # Errors
    /// The sink's.
    pub fn digest(&mut self) -> Result<u64, S::Error> {
        let digest = self.params.finish();
        self.line(format_args!("digest {digest:016x}"))?;
        Ok(digest)
    }

    /// `info <text>`: free text.
    ///
    /// # Errors
    /// The sink's.
    pub fn info(&mut self, text: impl fmt::Display) -> Result<(), S::Error> {
        self.line(format_args!("info {text}"))
    }

    /// `end ok`: the last line of a finished run.
    ///
    /// # Errors
    /// The sink's.
    pub fn end_ok(&mut self) -> Result<(), S::Error> {
        self.line(format_args!("end ok"))
    }

    /// `end error <what>`: the last line of a failed run.
    ///
    /// # Errors
    /// The sink's.
    pub fn end_error(&mut self, what: impl fmt::Display) -> Result<(), S::Error> {
        self.line(format_args!("end error {what}"))
    }
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::arithmetic_side_effects
)]
mod tests {
    //! The literals below are the outputs of the implementations this module replaced (the
    //! planner's `rng.rs` and `verify.rs`, the firmware's `rng.rs`, `tapeplan_core::format`'s
    //! digest and the planner's `oracle_transcript`), computed from them before they were
    //! deleted: they pin the protocol's bits.
    use super::*;

    #[test]
    fn splitmix64_matches_the_published_reference_stream() {
        // First outputs of SplitMix64 seeded with 1234567 (the reference implementation's
        // test vector).
        let mut r = SplitMix64::new(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
        let mut r = SplitMix64::new(7);
        let f = [r.next_f32(), r.next_f32(), r.next_f32()].map(f32::to_bits);
        assert_eq!(f, [0x3ec7_97c2, 0x3c89_8780, 0x3f66_9840]);
        let mut r = SplitMix64::new(7);
        assert_eq!([(); 5].map(|()| r.below(10)), [3, 0, 9, 5, 4]);
        assert_eq!(SplitMix64::new(7).below(0), 0);
    }

    #[test]
    fn epoch_seeds_are_pinned() {
        for (seed, epoch, expected) in [
            (42, 0, 0x4e08_d6bd_b050_7523),
            (42, 1, 0x2381_093e_64eb_6168),
            (42, 9, 0xd9c0_b7d7_dff7_8345),
            (42, 29, 0x621b_8b9a_47a4_c229),
            (0, 0, 0xc42c_5a1a_a382_0138),
            (u64::MAX, 3, 0xb36d_7ab4_458a_8de2),
        ] {
            assert_eq!(
                epoch_seed(seed, epoch),
                expected,
                "seed {seed} epoch {epoch}"
            );
        }
    }

    /// The rows `0..n` in epoch `epoch`'s order of a run seeded with 42.
    fn order(n: u16, epoch: usize) -> [u16; 1437] {
        let mut rows = [0u16; 1437];
        for (i, r) in rows.iter_mut().enumerate() {
            *r = i as u16;
        }
        epoch_shuffle(42, epoch, &mut rows[..usize::from(n)]);
        rows
    }

    fn le_bytes_digest(rows: &[u16]) -> u64 {
        let mut h = Fnv1a64::new();
        for r in rows {
            h.bytes(&r.to_le_bytes());
        }
        h.finish()
    }

    #[test]
    fn epoch_shuffles_are_pinned() {
        assert_eq!(
            order(16, 0)[..16],
            [4, 9, 7, 1, 0, 11, 3, 8, 13, 6, 12, 10, 2, 15, 5, 14]
        );
        assert_eq!(
            order(16, 1)[..16],
            [11, 14, 4, 3, 1, 7, 5, 2, 15, 0, 8, 9, 13, 12, 10, 6]
        );
        // The firmware's 256 rows and the browser's 1437: the first rows of the first and the
        // last epoch, and a digest of the whole order (its u16s' little-endian bytes).
        for (n, epoch, first, digest) in [
            (
                256,
                0,
                [115, 191, 14, 250, 227, 94, 180, 236],
                0xdcb9_ce28_cee5_5565,
            ),
            (
                256,
                29,
                [101, 239, 219, 212, 89, 50, 17, 99],
                0x9fd6_b632_9f87_5a15,
            ),
            (
                1437,
                0,
                [138, 1136, 1356, 504, 224, 708, 651, 756],
                0x7770_5404_08bf_ac36,
            ),
            (
                1437,
                29,
                [8, 1262, 342, 1366, 1234, 554, 28, 122],
                0xef42_e5eb_eba7_dc5e,
            ),
        ] {
            let rows = order(n, epoch);
            assert_eq!(rows[..8], first, "{n} rows, epoch {epoch}");
            assert_eq!(le_bytes_digest(&rows[..usize::from(n)]), digest);
        }
        // Same order for any index type.
        let mut wide = [0usize; 16];
        for (i, r) in wide.iter_mut().enumerate() {
            *r = i;
        }
        epoch_shuffle(42, 0, &mut wide);
        assert!(wide
            .iter()
            .zip(&order(16, 0))
            .all(|(&w, &n)| w == usize::from(n)));
    }

    #[test]
    fn digests_are_fnv1a_and_pinned() {
        assert_eq!(digest_f32(&[]), 0xcbf2_9ce4_8422_2325);
        // FNV-1a 64 of the bytes 00 00 80 3f (1.0f32).
        assert_eq!(digest_f32(&[1.0]), 0x4b72_477f_9c5c_2f98);
        assert_eq!(digest_f32(&[1.0, -0.0]), 0x0979_a9ee_2da1_bb98);
        assert_eq!(
            digest_f32(&[1.0, -0.0, f32::from_bits(0xffc0_0001), 3.5]),
            0xfb4e_6377_df83_6e25
        );
        // NaN payloads are one class; signed zeros are not.
        let (a, b) = (f32::from_bits(0x7fc0_0001), f32::from_bits(0xffc0_0000));
        assert_eq!(digest_f32(&[a]), digest_f32(&[b]));
        assert_ne!(digest_f32(&[0.0]), digest_f32(&[-0.0]));
        // FNV-1a 64 of "a" (the published test vector); pixels then labels.
        assert_eq!(data_digest(&[], &[]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(data_digest(b"a", &[]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(data_digest(b"ab", &[]), data_digest(b"a", b"b"));
        assert_eq!(data_digest(b"abc", &[1, 2]), 0x63a4_aa2d_7671_9574);
        // Streaming in pieces is the one-shot digest.
        let mut h = Fnv1a64::default();
        h.f32s(&[1.0]);
        h.f32s(&[-0.0]);
        assert_eq!(h.finish(), digest_f32(&[1.0, -0.0]));
    }

    #[test]
    // libm's `sqrtf` is inline assembly on x86_64, which Miri does not run.
    #[cfg_attr(miri, ignore)]
    fn glorot_and_standardization_are_pinned() {
        // SplitMix64(7)'s first draws are 0x3ec797c2, 0x3c898780, 0x3f669840 (above); with
        // fan_in 1 and fan_out 2, a = sqrt(2) rounded to f32, and each value (2u - 1) a in f32
        // (computed apart, in Python with struct's f32 rounding after every operation).
        let mut w = [0.0f32; 3];
        glorot_uniform_fill(&mut SplitMix64::new(7), 1, 2, &mut w);
        assert_eq!(w.map(f32::to_bits), [0xbe9f_8b2c, 0xbfae_f0fc, 0x3f91_1742]);
        // Columns [1, 3, 5] (mean 3, variance 8/3) and [2, 2, 2] (deviation 0, kept as 1).
        let mut x = [1.0f32, 2.0, 3.0, 2.0, 5.0, 2.0];
        let (mut mean, mut std) = ([0.0f32; 2], [0.0f32; 2]);
        standardizer_fit(&x, 2, &mut mean, &mut std);
        assert_eq!(mean, [3.0, 2.0]);
        assert_eq!(std.map(f32::to_bits), [0x3fd1_05ec, 0x3f80_0000]);
        standardize_rows(&mut x, &mean, &std);
        assert_eq!(x[0].to_bits(), 0xbf9c_c470);
        assert_eq!([x[1], x[2], x[3], x[4] + x[0]], [0.0; 4]);
        standardizer_fit(&[], 2, &mut mean, &mut std);
        assert_eq!((mean, std), ([0.0; 2], [1.0; 2]));
    }

    /// A fixed-capacity `fmt::Write` (the tests run without `alloc`).
    struct Text {
        buf: [u8; 1024],
        len: usize,
    }

    impl fmt::Write for Text {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let end = self.len + s.len();
            self.buf
                .get_mut(self.len..end)
                .ok_or(fmt::Error)?
                .copy_from_slice(s.as_bytes());
            self.len = end;
            Ok(())
        }
    }

    impl Text {
        fn as_str(&self) -> &str {
            core::str::from_utf8(&self.buf[..self.len]).unwrap()
        }
    }

    #[test]
    fn transcripts_are_byte_identical_to_the_planner_s() {
        // What `oracle_transcript`'s format strings wrote for these values.
        let expected = "tapeplan-transcript 1\n\
config model=64,8,10 activation=tanh loss=ce batch=4 lr=0.1 seed=42 split_seed=0 samples=16 epochs=2\n\
target host oracle\n\
plan 418a97ae 8188\n\
data d5a4bd8925521604 256\n\
loss 1 40140000\n\
loss 2 3a83126f\n\
loss 3 7fc00000\n\
epoch 1 80000000\n\
param w1 0 bff00000 bfc00000 bf900000 bf400000 bec00000 00000000 3ec00000 3f400000\n\
param w1 8 3f900000 3fc00000 3ff00000\n\
param b1 0 3f000000\n\
digest 042e21d47dca27a8\n\
info steps 3\n\
end ok\n";
        let mut t = TranscriptWriter::new(Text {
            buf: [0; 1024],
            len: 0,
        });
        t.header().unwrap();
        t.config(
            "model=64,8,10 activation=tanh loss=ce batch=4 lr=0.1 seed=42 split_seed=0 \
             samples=16 epochs=2",
        )
        .unwrap();
        t.target("host oracle").unwrap();
        t.plan(0x418a_97ae, 8188).unwrap();
        t.data(0xd5a4_bd89_2552_1604, 256).unwrap();
        for (step, loss) in [2.3125f32, 1.0e-3, f32::from_bits(0x7fc0_0000)]
            .into_iter()
            .enumerate()
        {
            t.loss(step + 1, loss).unwrap();
        }
        t.epoch(1, -0.0).unwrap();
        let mut w1 = [0.0f32; 11];
        for (i, w) in w1.iter_mut().enumerate() {
            *w = (i as f32 - 5.0) * 0.375;
        }
        t.param("w1", &w1).unwrap();
        t.param("b1", &[0.5]).unwrap();
        let mut all = [0.0f32; 12];
        all[..11].copy_from_slice(&w1);
        all[11] = 0.5;
        assert_eq!(t.digest().unwrap(), digest_f32(&all));
        t.info(format_args!("steps {}", 3)).unwrap();
        t.end_ok().unwrap();
        assert_eq!(t.into_inner().as_str(), expected);
    }

    #[test]
    fn bind_and_state_lines_have_fixed_width_fields() {
        let mut t = TranscriptWriter::new(Text {
            buf: [0; 1024],
            len: 0,
        });
        t.bind(0x0012_abcd, 0xd5a4_bd89_2552_1604, 0x42, "fast")
            .unwrap();
        t.state(7, digest_f32(&[1.0, -0.0])).unwrap();
        assert_eq!(
            t.into_inner().as_str(),
            "bind plan=0012abcd data=d5a4bd8925521604 init=0000000000000042 math=fast\n\
             state 7 0979a9ee2da1bb98\n"
        );
    }

    #[test]
    fn a_full_sink_is_an_error_and_end_error_carries_the_message() {
        let mut t = TranscriptWriter::new(Text {
            buf: [0; 1024],
            len: 1020,
        });
        assert_eq!(t.end_ok(), Err(fmt::Error));
        let mut t = TranscriptWriter::new(Text {
            buf: [0; 1024],
            len: 0,
        });
        t.end_error(format_args!("arena {}", "too small")).unwrap();
        assert_eq!(t.into_inner().as_str(), "end error arena too small\n");
    }

    #[test]
    fn binding_names_are_the_planner_s() {
        assert_eq!(
            [ENTRY_FORWARD, ENTRY_TRAIN_STEP, ENTRY_INIT],
            ["forward", "train_step", "init"]
        );
        assert_eq!(
            [INPUT_X, INPUT_LABELS, INPUT_Y, OUTPUT_LOSS, OUTPUT_LOGITS],
            ["x", "labels", "y", "loss", "logits"]
        );
    }
}
