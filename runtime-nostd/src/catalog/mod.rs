//! The kernel catalog: faster kernels that reproduce the reference kernels' bits exactly.
//!
//! The reference kernels in `tapeplan_core::ops` define every instruction's result (their doc
//! comments state the arithmetic order). A catalog entry is a faster way to the same bits:
//!
//! - **Elementwise** instructions run as monomorphic loops (the reference dispatches through a
//!   function pointer per element); with feature `simd`, the lane-wise ones (`add`, `sub`,
//!   `mul`, `div`, `neg`, `abs`, `relu`, `heaviside`, `sign`, `detach`, `sqrt`, the masks, `maximum`,
//!   `minimum`, `select`) run on vectors of `f32` lanes. Each output element is computed from the
//!   same-index argument elements alone, so the lane width cannot change a bit. Under the
//!   `precise` profile, `tanh`, `exp`, `log`, `sigmoid` and `softplus` also run on vectors with
//!   `simd`: `vecmath`'s lane-wise ports of `libm`'s `tanhf`, `expf`, `logf` and `log1pf`
//!   (the same bits as `libm` for every `f32` input; `cargo xtask mathcheck` checks all 2^32).
//!   `pow`, and every transcendental under `fast` (micromath's approximations), call the
//!   reference's own scalar function, element by element.
//! - **`matmul`**: each output `out[i, j]` starts at `+0.0` and accumulates
//!   `acc = acc + a[i, p] * b[p, j]` (a rounded product, then a rounded sum; never fused) over
//!   `p = 0, 1, …, k-1` in increasing order, exactly the reference's per-element order. With
//!   `simd`, a register tile of `MR` rows (six with eight lanes; eight rows by two vectors
//!   under `separate` with AVX-512) by `NR` vectors of columns keeps its accumulators in
//!   registers across the `p` loop (or a block of it, continued from `out`): vectorized across
//!   independent outputs (`j`), never across `p`. A batched product (rank 3) runs the same kernel once per batch index. Under
//!   the `fma` arithmetic profile the step is `acc = fma(a[i, p], b[p, j], acc)`, rounded once:
//!   the hardware instruction where the build has it ([`FMA_HARDWARE`]), `libm::fmaf` lane by
//!   lane elsewhere; the same tiles and order. **`matmul_tn`** (`aᵀ · b`, a weight gradient's
//!   contraction over the batch) runs the same tiles reading `a` in place: a tile's rows of
//!   `aᵀ` at step `p` are contiguous in `a`'s row `p`. **`matmul_nt`** (`a · bᵀ`) packs blocks
//!   of `bᵀ` into a stack panel (at most 4 KiB) and continues each block's sums from `out`.
//! - **`broadcast`**, **`sum_to`**, **`max_to`** over the common shapes (see `Pattern`): a row
//!   vector repeated down a matrix, a column repeated across it, a matrix summed to its row or its
//!   column, everything to a scalar. Sums keep the reference's order: every output starts at
//!   `+0.0` and adds its inputs in increasing flat-index order; column sums vectorize across the
//!   columns (independent outputs), row sums interleave rows.
//! - **`conv`** (with `simd`): each output starts at `+0.0` and accumulates `acc = acc + x * w`
//!   over its group's input channels in increasing order, then the kernel taps row-major,
//!   skipping padding, exactly the reference's order; lanes are distinct output columns, and a
//!   tile of up to four output channels shares each input load (one channel by four vectors in
//!   a depthwise convolution). Without `simd` the reference kernel runs (it already accumulates
//!   whole output rows a tap at a time).
//! - **`conv_transpose`** (the input gradient, with `simd`): each input-gradient element starts
//!   at `+0.0` and accumulates over its group's output channels, then the taps row-major,
//!   skipping taps off the stride or past the edge, the reference's order; lanes are
//!   input-gradient columns of one residue class modulo the stride (any stride and dilation),
//!   a tile of up to four input channels shares each cotangent load.
//! - **`conv_weight_grad`** (the weight gradient, with `simd`): each weight-gradient element
//!   starts at `+0.0` and accumulates over the batch, then the output positions row-major,
//!   skipping padding, the reference's order; lanes are output channels (4, 8 under AVX-512),
//!   a register tile holds up to nine taps, the cotangent gathered once per position and shared
//!   by them; a tile whose channels span groups (depthwise) gathers the input per lane. Small
//!   output planes with at least four output channels per group (the 1-D CNNs' layers) run
//!   `conv_wgrad.rs` instead: the cotangent transposed once per batch element into a stack
//!   buffer `[position][co]` (contiguous lane loads), the sums kept in a second one across the
//!   batch, a register tile of up to five taps by two vectors of channels (each buffer at most
//!   32 KiB).
//! - The column-lane kernels take rows of at least `MIN_SIMD_COLUMNS` (16) columns and kernels
//!   of at most 16 taps per axis (`conv_weight_grad`: any width). Narrower `conv` and
//!   `conv_transpose` rows (the 1-D CNNs' 19, 10, 5 samples) run the channel-lane kernels of
//!   `conv_narrow.rs` instead: lanes are destination channels (`co`, resp. `ci`; two vectors
//!   of them per tile when a group has more than one vector's worth), a tile of their weights
//!   packed on the stack (at most 32 KiB), four positions of a row per register tile, the same
//!   order per output; they take rows of at most 64 columns and at least four
//!   destination channels per group (depthwise layers run the reference). A `conv` with one
//!   input channel per group (a first layer) takes them whatever its width when they fit
//!   (C1's first layer, 19 columns: 0.60 → 0.16 ns per multiply-accumulate). The executor
//!   reaches all three through `windowed` (kernels in `conv_adjoint.rs`, `conv_narrow.rs`).
//! - Before all of those, all three convolutions run as the register-tiled products over
//!   columns gathered onto the stack (im2col, `conv_im2col.rs`) when a sum has at least 16
//!   terms, a group at least four output rows, and the factor the gathered padding's `+0.0`
//!   meets is finite (the weights, or the weight gradient's cotangent): adding `+0 · f` to an
//!   accumulator that started at `+0.0` keeps its bits, so the reference's order of the taps
//!   it does not skip is kept, one output per lane (`conv_transpose` one product per residue
//!   class of the stride). `conv_speed`, AVX2, C1's middle layers: 0.083–0.130 → 0.050–0.092
//!   ns per multiply-accumulate.
//! - **`max_pool`**, **`max_pool_gather`**, **`max_pool_scatter`** (with `simd`) over windows
//!   that tile the input (stride equal to the kernel, no padding reached: PyTorch's
//!   `MaxPool2d(k)`): lanes are eight planes, each band of a plane transposed onto the stack,
//!   each window's taps in row-major order under the reference's first-maximum rule lane by
//!   lane (`max_pool_tiles.rs`); exact selections, and `+0 + g` for the scatter. Bands of at
//!   most 128 elements; other windows run the reference. Also through `windowed`.
//! - **`broadcast`**, **`sum_to`**, **`max_to`** also take a block broadcast on both sides
//!   (`[kept, 1]` against `[lead, kept, trail]`: a convolution's per-channel bias); each sum
//!   over `l`, then `t`, the reference's increasing flat-index order.
//! - **`transpose`** (a permutation, exact whatever the order) in cache-sized blocks, and
//!   **`fill`**.
//!
//! Anything else, or any other shape, runs the reference kernel. [`eval`] has the same contract
//! as `tapeplan_core::ops::eval`, so tests compare the two bit for bit.
//!
//! Index arithmetic in this module is bounded by the lengths of slices checked on entry (an
//! index never exceeds a buffer's length, which fits in `usize`), so it cannot overflow.
#![allow(clippy::arithmetic_side_effects)]

use tapeplan_core::ops::matmul::Transposed;
use tapeplan_core::ops::{exp, log, pow, sigmoid, softplus, tanh, Attr, OpError};
use tapeplan_core::{ArithProfile, MathProfile, OpSet, Opcode, Ops, Shape, MAX_RANK};

pub(crate) mod lanes;
use lanes::UnOp;

#[cfg(feature = "catalog")]
pub(crate) mod adam;
#[cfg(feature = "simd")]
mod conv_adjoint;
#[cfg(feature = "simd")]
mod conv_im2col;
#[cfg(feature = "simd")]
mod conv_narrow;
#[cfg(feature = "simd")]
mod conv_wgrad;
#[cfg(feature = "simd")]
mod max_pool_tiles;
#[cfg(feature = "simd")]
mod vecmath;

/// Which catalog this build carries: `"scalar"`, or `"simd-avx512"`, `"simd-avx2"`,
/// `"simd-sse2"`, `"simd128"`, `"simd-portable"` (the `simd` feature on a target without vector
/// units: `wide`'s array fallback). Chosen at compile time by the target features.
pub const CATALOG: &str = lanes::CATALOG;

/// The `f32` lanes of one vector in this build's catalog (1 for the scalar catalog).
pub const LANES: usize = lanes::LANES;

/// True when this build's `fma` matrix product ([`ArithProfile::Fma`]) runs on a hardware fused
/// multiply-add (x86_64 with the `fma` target feature, implied by AVX-512F, and `simd`);
/// otherwise each step is `libm::fmaf` in software, with the same bits.
pub const FMA_HARDWARE: bool = lanes::FMA_HARDWARE;

/// An argument of an elementwise kernel: its own buffer, or the output buffer itself (the
/// in-place case, when the plan lets the output overwrite an argument that dies there).
///
/// Its tag is a whole word (`repr(u64)`): with the default byte-sized tag the executor's
/// `Option<Src>` went through the stack as a 4-byte store of the tag that an 8-byte load read
/// back at once, a load the store could not forward (perf on W3's step: 42 % of
/// `run_program`'s own samples sat on the instruction after it).
#[derive(Clone, Copy, Debug)]
#[repr(u64)]
pub(crate) enum Src<'s> {
    /// The output buffer (read before each element is written).
    Out,
    /// A buffer disjoint from the output, of the output's length.
    Buf(&'s [f32]),
    /// Every element this one value: a fused chain's register that holds a `fill` or a
    /// broadcast scalar, read as a vector of copies of its bits instead of from a tile.
    Splat(f32),
}

/// A tensor's extents as the executor decodes them: rank, dims (zero past the rank) and
/// element count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dims {
    pub rank: usize,
    pub dims: [usize; MAX_RANK],
    pub elems: usize,
}

impl Dims {
    /// No extents (a placeholder).
    pub(crate) const EMPTY: Dims = Dims {
        rank: 0,
        dims: [0; MAX_RANK],
        elems: 0,
    };

    pub(crate) fn of(s: Shape) -> Dims {
        Dims {
            rank: s.rank(),
            dims: s.dims(),
            elems: s.elems(),
        }
    }

    /// The extent of `axis` counted from the right once `self` is padded to `rank` with
    /// leading 1s (`None` past `rank`).
    fn aligned(&self, rank: usize, axis: usize) -> Option<usize> {
        if axis >= rank {
            return None;
        }
        let off = rank.checked_sub(self.rank)?;
        if axis < off {
            Some(1)
        } else {
            self.dims.get(axis - off).copied()
        }
    }
}

/// How a `small` shape relates to a `big` one it broadcasts to, flattened to two dimensions:
/// the shapes the fast paths of `broadcast`, `sum_to` and `max_to` cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// The same elements (only extents of 1 differ).
    Same,
    /// `big` is `[rows, cols]` and `small` is its row `[cols]`: the leading axes broadcast.
    Rows { rows: usize, cols: usize },
    /// `big` is `[rows, cols]` and `small` is its column `[rows, 1]`: the trailing axes
    /// broadcast.
    Cols { rows: usize, cols: usize },
    /// `big` is `[lead, kept, trail]` and `small` is `[kept, 1]`: axes broadcast on both
    /// sides of the kept ones (a convolution's per-channel bias over `[batch, channels,
    /// positions]`).
    Block {
        lead: usize,
        kept: usize,
        trail: usize,
    },
    /// None of these: the reference kernel handles it.
    Other,
}

/// Classifies `small` against `big` (the caller has checked `small.broadcasts_to(big)`): align
/// the extents from the right, drop the extents of 1 in `big`, and mark each remaining axis as
/// broadcast (`small` has 1) or kept. Broadcast axes all before kept ones: [`Pattern::Rows`];
/// all after: [`Pattern::Cols`]; both: [`Pattern::Block`]; none: [`Pattern::Same`].
pub(crate) fn pattern(small: &Dims, big: &Dims) -> Pattern {
    let rank = big.rank;
    if small.rank > rank {
        return Pattern::Other;
    }
    let (mut lead, mut kept, mut trail) = (1usize, 1usize, 1usize);
    let (mut has_lead, mut has_kept, mut has_trail) = (false, false, false);
    for axis in 0..rank {
        let (Some(b), Some(s)) = (big.aligned(rank, axis), small.aligned(rank, axis)) else {
            return Pattern::Other;
        };
        if b == 1 {
            continue;
        }
        if s == b {
            if has_trail {
                return Pattern::Other;
            }
            has_kept = true;
            kept *= b;
        } else if s != 1 {
            return Pattern::Other;
        } else if has_kept {
            has_trail = true;
            trail *= b;
        } else {
            has_lead = true;
            lead *= b;
        }
    }
    match (has_lead, has_trail) {
        (false, false) => Pattern::Same,
        (true, false) => Pattern::Rows {
            rows: lead,
            cols: kept,
        },
        (false, true) => Pattern::Cols {
            rows: kept,
            cols: trail,
        },
        (true, true) => Pattern::Block { lead, kept, trail },
    }
}

// ---------------------------------------------------------------------------------------------
// Elementwise.

macro_rules! unary_ops {
    ($($name:ident => $f:path $(, $v:path, $v2:path)?;)*) => {$(
        // A build with one math profile leaves the other's unused.
        #[allow(dead_code)]
        #[derive(Clone, Copy)]
        struct $name;
        impl UnOp for $name {
            $(
                #[cfg(feature = "simd")]
                const VECTOR: bool = {
                    let _ = $v;
                    true
                };
            )?
            #[inline(always)]
            fn s(self, x: f32) -> f32 {
                $f(x)
            }
            $(
                #[cfg(feature = "simd")]
                #[inline(always)]
                fn v(self, x: lanes::V) -> lanes::V {
                    $v(x)
                }
                #[cfg(feature = "simd")]
                const WIDE: bool = true;
                #[cfg(feature = "simd")]
                #[inline(always)]
                fn v2(self, x: lanes::V2) -> lanes::V2 {
                    $v2(x)
                }
            )?
        }
    )*};
}

// The `precise` transcendentals run lane-wise ports of `libm` with `simd` (`vecmath`: the same
// bits for every input); the `fast` ones run micromath's scalar code element by element.
unary_ops! {
    Tanh => tanh::scalar, vecmath::tanhf, vecmath::two::tanhf;
    Exp => exp::scalar, vecmath::expf, vecmath::two::expf;
    Log => log::scalar, vecmath::logf, vecmath::two::logf;
    Sigmoid => sigmoid::scalar, vecmath::sigmoid, vecmath::two::sigmoid;
    Softplus => softplus::scalar, vecmath::softplus, vecmath::two::softplus;
    TanhFast => tanh::scalar_fast;
    ExpFast => exp::scalar_fast;
    LogFast => log::scalar_fast;
    SigmoidFast => sigmoid::scalar_fast;
    SoftplusFast => softplus::scalar_fast;
}

/// `pow` with its exponent.
#[allow(dead_code)]
#[derive(Clone, Copy)]
struct Pow(f32);
impl UnOp for Pow {
    #[inline(always)]
    fn s(self, x: f32) -> f32 {
        pow::scalar(x, self.0)
    }
}

/// `pow` with its exponent, `fast` profile.
#[allow(dead_code)]
#[derive(Clone, Copy)]
struct PowFast(f32);
impl UnOp for PowFast {
    #[inline(always)]
    fn s(self, x: f32) -> f32 {
        pow::scalar_fast(x, self.0)
    }
}

/// True when the selective build's op set `O` (the calling function's type parameter; see
/// `tapeplan_core::Ops`) carries the opcode: a constant, so an arm of another opcode is not
/// linked.
macro_rules! on {
    ($v:ident) => {
        const { OpSet::BUILD.intersection(O::SET).contains(Opcode::$v) }
    };
}

/// What runs an elementwise op once [`with_elementwise`] has chosen its lane operation: over
/// buffers ([`elementwise`]), or over one chunk of lanes held in registers
/// (`lanes::OnChunk` with `simd`, the small fused chains of [`crate::fused`]).
pub(crate) trait OnElementwise {
    type Out;
    fn unary<U: lanes::UnOp>(self, op: U) -> Self::Out;
    fn binary<B: lanes::BinOp>(self, op: B) -> Self::Out;
    /// `mul` (over buffers, [`lanes::mul`] picks its form by the operands; the bits are
    /// [`lanes::ops::Mul`]'s).
    fn mul(self) -> Self::Out;
}

/// The catalog's table of elementwise ops: runs `k` with the lane operation of `op` under the
/// math profile `math` (`scalar` is the attribute's scalar, [`Attr::scalar`]: `pow`'s
/// exponent); `None` (nothing run) for an opcode or profile this build and op set `O` leave
/// out.
#[inline(always)]
pub(crate) fn with_elementwise<O: Ops, K: OnElementwise>(
    op: Opcode,
    scalar: f32,
    math: MathProfile,
    k: K,
) -> Option<K::Out> {
    use lanes::ops::*;
    // The `precise` or `fast` form by the plan's profile; `None` for one this build leaves out.
    macro_rules! by_math {
        ($precise:expr, $fast:expr) => {
            match math {
                #[cfg(feature = "math-precise")]
                MathProfile::Precise => $precise,
                #[cfg(feature = "math-fast")]
                MathProfile::Fast => $fast,
                #[allow(unreachable_patterns)]
                _ => return None,
            }
        };
    }
    // Unused in a build without either math profile (which runs no plan at all).
    #[cfg_attr(
        not(any(feature = "math-precise", feature = "math-fast")),
        allow(unused_variables)
    )]
    let p = scalar;
    Some(match op {
        Opcode::Add if on!(Add) => k.binary(Add),
        Opcode::Sub if on!(Sub) => k.binary(Sub),
        Opcode::Mul if on!(Mul) => k.mul(),
        Opcode::Div if on!(Div) => k.binary(Div),
        Opcode::Equal if on!(Equal) => k.binary(Equal),
        Opcode::Greater if on!(Greater) => k.binary(Greater),
        Opcode::GreaterEqual if on!(GreaterEqual) => k.binary(GreaterEqual),
        Opcode::Maximum if on!(Maximum) => k.binary(Maximum),
        Opcode::Minimum if on!(Minimum) => k.binary(Minimum),
        Opcode::Neg if on!(Neg) => k.unary(Neg),
        Opcode::Abs if on!(Abs) => k.unary(Abs),
        Opcode::Relu if on!(Relu) => k.unary(Relu),
        Opcode::Heaviside if on!(Heaviside) => k.unary(Heaviside),
        Opcode::Sign if on!(Sign) => k.unary(Sign),
        Opcode::Detach if on!(Detach) => k.unary(Detach),
        Opcode::Sqrt if on!(Sqrt) => k.unary(Sqrt),
        Opcode::Tanh if on!(Tanh) => by_math!(k.unary(Tanh), k.unary(TanhFast)),
        Opcode::Exp if on!(Exp) => by_math!(k.unary(Exp), k.unary(ExpFast)),
        Opcode::Log if on!(Log) => by_math!(k.unary(Log), k.unary(LogFast)),
        Opcode::Sigmoid if on!(Sigmoid) => by_math!(k.unary(Sigmoid), k.unary(SigmoidFast)),
        Opcode::Softplus if on!(Softplus) => by_math!(k.unary(Softplus), k.unary(SoftplusFast)),
        Opcode::Pow if on!(Pow) => by_math!(k.unary(Pow(p)), k.unary(PowFast(p))),
        _ => return None,
    })
}

/// [`with_elementwise`] over buffers: the arguments as [`Src`]s, the output.
struct OnBuffers<'s, 'o> {
    a: Src<'s>,
    b: Src<'s>,
    out: &'o mut [f32],
}

impl OnElementwise for OnBuffers<'_, '_> {
    type Out = ();
    #[inline(always)]
    fn unary<U: lanes::UnOp>(self, op: U) {
        lanes::unary(op, self.a, self.out);
    }
    #[inline(always)]
    fn binary<B: lanes::BinOp>(self, op: B) {
        lanes::binary(op, self.a, self.b, self.out);
    }
    #[inline(always)]
    fn mul(self) {
        lanes::mul(self.a, self.b, self.out);
    }
}

/// Runs an elementwise instruction (`op`'s class is elementwise) over `out` under the math
/// profile `math`, its arguments given as [`Src`]s; `scalar` is the attribute's scalar
/// ([`Attr::scalar`]: `pow`'s exponent). Answers `false` (having written nothing) for an opcode
/// it does not know.
pub(crate) fn elementwise<O: Ops>(
    op: Opcode,
    scalar: f32,
    math: MathProfile,
    a: Src<'_>,
    b: Src<'_>,
    out: &mut [f32],
) -> bool {
    with_elementwise::<O, _>(op, scalar, math, OnBuffers { a, b, out }).is_some()
}

/// Whether [`elementwise`] runs `op` under `math` in this build and op set `O` (it then runs it
/// for any [`Src`]s of the output's length). Asked of [`with_elementwise`], the table
/// [`elementwise`] runs, so the answer cannot drift from what it runs.
#[cfg(feature = "catalog")]
pub(crate) fn runs_elementwise<O: Ops>(op: Opcode, math: MathProfile) -> bool {
    /// Runs nothing: asks only whether the table has the op.
    struct Ask;
    impl OnElementwise for Ask {
        type Out = ();
        fn unary<U: lanes::UnOp>(self, _: U) {}
        fn binary<B: lanes::BinOp>(self, _: B) {}
        fn mul(self) {}
    }
    with_elementwise::<O, _>(op, 1.0, math, Ask).is_some()
}

/// How many of `entry`'s Adam (and AdamW) updates run in one pass: the three fused chains a
/// plan records for each tensor's update (first moment, second moment, parameter) run element
/// by element with the values in registers, the same bits as chain by chain (see the source of
/// `catalog::adam`). An update runs so when its chains have the form the planner's Adam or
/// AdamW records, at least 64 elements, and ranges one pass may read and write; anything else
/// runs chain by chain. 0 for an unknown entry or a plan without such chains, and in a build
/// without feature `catalog` (whose chains all run chain by chain).
pub fn one_pass_adam_updates(plan: &crate::Plan<'_>, entry: crate::EntryId) -> usize {
    #[cfg(feature = "catalog")]
    return crate::fused::one_pass_adam_updates(plan, entry);
    #[cfg(not(feature = "catalog"))]
    {
        let _ = (plan, entry);
        0
    }
}

/// `sgd_matmul` over its weight `w` in place from the catalog (the executor's path for the
/// instruction): answers `true` having updated `w`, `false` having written nothing when this
/// build has no such kernel (without `simd`, or for a profile it leaves out), and the reference
/// kernel must run instead. The bits are `tapeplan_core::ops::sgd_matmul::kernel`'s under the
/// arithmetic profile `arith`; `kmn` is `(k, m, n)`.
///
/// # Shapes
/// Row-major `w: [m, n]`, `a: [k, m]`, `b: [k, n]`; a shorter buffer gets nothing written
/// (with `true`, as the reference kernel does).
pub fn sgd_matmul(
    w: &mut [f32],
    a: &[f32],
    b: &[f32],
    kmn: (usize, usize, usize),
    lr: f32,
    arith: ArithProfile,
) -> bool {
    #[cfg(feature = "simd")]
    {
        match arith {
            ArithProfile::Separate => lanes::sgd_matmul::<lanes::Separate>(w, a, b, kmn, lr),
            #[cfg(feature = "arith-fma")]
            ArithProfile::Fma => lanes::sgd_matmul::<lanes::Fused>(w, a, b, kmn, lr),
            #[allow(unreachable_patterns)]
            _ => return false,
        }
        true
    }
    #[cfg(not(feature = "simd"))]
    {
        let _ = (w, a, b, kmn, lr, arith);
        false
    }
}

// ---------------------------------------------------------------------------------------------
// Structural.

/// `[batch, rows, cols]` of a matrix (one batch) or of a batch of matrices (rank 3); `[0, 0, 0]`
/// for another rank (which the shape rule refuses).
fn batched(d: &Dims) -> [usize; 3] {
    match d.rank {
        2 => [1, d.dims[0], d.dims[1]],
        3 => [d.dims[0], d.dims[1], d.dims[2]],
        _ => [0, 0, 0],
    }
}

/// Runs a structural instruction or `fill` from the catalog when it has a kernel for `op` at
/// these shapes, and answers `true`; otherwise answers `false` having written nothing. `args`
/// are disjoint from `out`; lengths equal the dims' element counts (the caller checked).
pub(crate) fn structural<O: Ops>(
    op: Opcode,
    scalar: f32,
    arith: ArithProfile,
    args: &[&[f32]],
    arg_dims: &[&Dims],
    out_dims: &Dims,
    out: &mut [f32],
) -> bool {
    match (op, args, arg_dims) {
        (Opcode::Fill, _, _) if on!(Fill) => {
            out.fill(scalar);
            true
        }
        (Opcode::MatMul, [a, b], [da, db]) if on!(MatMul) => {
            product(
                a,
                b,
                (da, db),
                out,
                NOT_TRANSPOSED,
                |arith, a, b, o, m, k, n| {
                    match arith {
                        ArithProfile::Separate => lanes::matmul(a, b, o, m, k, n),
                        #[cfg(feature = "arith-fma")]
                        ArithProfile::Fma => lanes::matmul_fma(a, b, o, m, k, n),
                        // Not in this build: the reference path reports it.
                        #[allow(unreachable_patterns)]
                        _ => return false,
                    }
                    true
                },
                arith,
            )
        }
        #[cfg(feature = "simd")]
        (Opcode::MatMulTn, [a, b], [da, db]) if on!(MatMulTn) => {
            let t = Transposed { a: true, b: false };
            product(a, b, (da, db), out, t, by_arith!(matmul_tn), arith)
        }
        #[cfg(feature = "simd")]
        (Opcode::MatMulNt, [a, b], [da, db]) if on!(MatMulNt) => {
            let t = Transposed { a: false, b: true };
            product(a, b, (da, db), out, t, by_arith!(matmul_nt), arith)
        }
        (Opcode::Transpose, [x], [dx]) if on!(Transpose) => {
            let [batch, m, n] = batched(dx);
            if x.len() != out.len() || x.len() != batch * m * n {
                return false;
            }
            let r = m * n;
            for i in 0..batch {
                if let (Some(x), Some(o)) =
                    (x.get(i * r..(i + 1) * r), out.get_mut(i * r..(i + 1) * r))
                {
                    transpose(x, o, m, n);
                }
            }
            true
        }
        (Opcode::Reshape, [x], _) if on!(Reshape) => {
            if x.len() != out.len() {
                return false;
            }
            out.copy_from_slice(x);
            true
        }
        (Opcode::Select, [c, a, b], _) if on!(Select) => {
            if c.len() != out.len() || a.len() != out.len() || b.len() != out.len() {
                return false;
            }
            lanes::select(c, a, b, out);
            true
        }
        (Opcode::Broadcast, [x], [dx]) if on!(Broadcast) => broadcast(x, dx, out, out_dims),
        (Opcode::SumTo, [x], [dx]) if on!(SumTo) => sum_to(x, dx, out, out_dims),
        (Opcode::MaxTo, [x], [dx]) if on!(MaxTo) => max_to(x, dx, out, out_dims),
        // The reference kernel itself, from the decoded operands: the reference path read the
        // plan's records and built shapes again on every step (W1's labels, `[32] -> [32, 10]`:
        // about 3 % of its step, perf).
        (Opcode::OneHot, [labels], _) if on!(OneHot) => {
            let classes = out_dims.dims.get(1).copied().unwrap_or(0);
            if out_dims.rank != 2 || labels.len().checked_mul(classes) != Some(out.len()) {
                return false;
            }
            tapeplan_core::ops::one_hot::kernel(labels, out, classes);
            true
        }
        _ => false,
    }
}

/// The kernel `lanes::$f::<S>` (generic over the step, `lanes::Step`) of the arithmetic profile
/// asked, as [`product`] takes it: `false` for a profile this build leaves out.
#[cfg(feature = "simd")]
macro_rules! by_arith {
    ($f:ident) => {
        |arith, a, b, o, m, k, n| {
            match arith {
                ArithProfile::Separate => lanes::$f::<lanes::Separate>(a, b, o, m, k, n),
                #[cfg(feature = "arith-fma")]
                ArithProfile::Fma => lanes::$f::<lanes::Fused>(a, b, o, m, k, n),
                #[allow(unreachable_patterns)]
                _ => return false,
            }
            true
        }
    };
}
#[cfg(feature = "simd")]
use by_arith;

/// `matmul` reads neither operand transposed.
const NOT_TRANSPOSED: Transposed = Transposed { a: false, b: false };

/// A matrix product (`matmul`, `matmul_tn`, `matmul_nt`: operands stored transposed as `t`
/// says) run by `kernel(arith, a, b, out, m, k, n)` once per batch index; `false`, having
/// written nothing, when the shapes or lengths do not fit (the reference then runs) or the
/// kernel has no such profile.
#[inline(always)]
fn product(
    a: &[f32],
    b: &[f32],
    (da, db): (&Dims, &Dims),
    out: &mut [f32],
    t: Transposed,
    kernel: impl Fn(ArithProfile, &[f32], &[f32], &mut [f32], usize, usize, usize) -> bool,
    arith: ArithProfile,
) -> bool {
    let ([batch, a0, a1], [batch_b, b0, b1]) = (batched(da), batched(db));
    let (m, k) = if t.a { (a1, a0) } else { (a0, a1) };
    let (k_b, n) = if t.b { (b1, b0) } else { (b0, b1) };
    if da.rank != db.rank || batch != batch_b || k_b != k {
        return false;
    }
    let (ra, rb, ro) = (m * k, k * n, m * n);
    if a.len() != batch * ra || b.len() != batch * rb || out.len() != batch * ro {
        return false;
    }
    for i in 0..batch {
        if let (Some(a), Some(b), Some(o)) = (
            a.get(i * ra..(i + 1) * ra),
            b.get(i * rb..(i + 1) * rb),
            out.get_mut(i * ro..(i + 1) * ro),
        ) {
            if !kernel(arith, a, b, o, m, k, n) {
                return false;
            }
        }
    }
    true
}

/// `out[j, i] = x[i, j]` for `x: [m, n]`: 8×8 tiles through a local block (whole rows read,
/// whole rows written), the ragged edges element by element.
fn transpose(x: &[f32], out: &mut [f32], m: usize, n: usize) {
    const T: usize = 8;
    if m == 1 || n == 1 {
        out.copy_from_slice(x);
        return;
    }
    let (mt, nt) = (m - m % T, n - n % T);
    for i0 in (0..mt).step_by(T) {
        for j0 in (0..nt).step_by(T) {
            let mut rows = [[0.0f32; T]; T];
            for (r, dst) in (i0..i0 + T).zip(&mut rows) {
                let Some(row) = x.get(r * n + j0..r * n + j0 + T) else {
                    return;
                };
                dst.copy_from_slice(row);
            }
            let t = lanes::transpose8(rows);
            for (c, tc) in (j0..j0 + T).zip(&t) {
                if let Some(dst) = out.get_mut(c * m + i0..c * m + i0 + T) {
                    dst.copy_from_slice(tc);
                }
            }
        }
    }
    // The ragged edges: rows past `mt` (all columns), then columns past `nt` (rows below `mt`).
    let mut edge = |i: usize, j: usize| {
        if let (Some(&v), Some(o)) = (x.get(i * n + j), out.get_mut(j * m + i)) {
            *o = v;
        }
    };
    for i in mt..m {
        for j in 0..n {
            edge(i, j);
        }
    }
    for i in 0..mt {
        for j in nt..n {
            edge(i, j);
        }
    }
}

fn broadcast(x: &[f32], dx: &Dims, out: &mut [f32], dout: &Dims) -> bool {
    match pattern(dx, dout) {
        Pattern::Same if x.len() == out.len() => out.copy_from_slice(x),
        Pattern::Rows { rows, cols } if x.len() == cols && out.len() == rows * cols => {
            for row in out.chunks_exact_mut(cols) {
                row.copy_from_slice(x);
            }
        }
        Pattern::Cols { rows, cols } if x.len() == rows && out.len() == rows * cols => {
            for (row, &v) in out.chunks_exact_mut(cols).zip(x) {
                row.fill(v);
            }
        }
        Pattern::Block { lead, kept, trail }
            if x.len() == kept && out.len() == lead * kept * trail =>
        {
            for block in out.chunks_exact_mut((kept * trail).max(1)) {
                for (row, &v) in block.chunks_exact_mut(trail.max(1)).zip(x) {
                    row.fill(v);
                }
            }
        }
        _ => return false,
    }
    true
}

fn sum_to(x: &[f32], dx: &Dims, out: &mut [f32], dout: &Dims) -> bool {
    match pattern(dout, dx) {
        Pattern::Same if x.len() == out.len() => {
            // Each output has one input: `+0.0 + x` (which turns `-0.0` into `+0.0`), one pass.
            lanes::binary(lanes::ops::Add, Src::Splat(0.0), Src::Buf(x), out);
        }
        Pattern::Rows { rows, cols: 1 } if out.len() == 1 && x.len() == rows => {
            // Everything to one output: one sequential chain from `+0.0`.
            if let Some(o) = out.first_mut() {
                *o = x.iter().fold(0.0, |acc, &v| acc + v);
            }
        }
        Pattern::Rows { rows, cols } if out.len() == cols && x.len() == rows * cols => {
            // Column sums: every output adds its rows in increasing order; vectorized across
            // the columns.
            #[cfg(feature = "simd")]
            lanes::column_sums(x, out);
            #[cfg(not(feature = "simd"))]
            {
                let out = zeroed(out);
                for row in x.chunks_exact(cols) {
                    lanes::binary(lanes::ops::Add, Src::Out, Src::Buf(row), out);
                }
            }
        }
        Pattern::Cols { rows, cols } if out.len() == rows && x.len() == rows * cols => {
            row_reduce(x, zeroed(out), cols, SumStep);
        }
        Pattern::Block { lead, kept, trail }
            if out.len() == kept && x.len() == lead * kept * trail =>
        {
            // Each output `out[k]` adds `x[l, k, t]` in increasing flat-index order: over `l`,
            // then `t`; each block `x[l]` continues every output's chain.
            let out = zeroed(out);
            #[cfg(feature = "simd")]
            let done = block_sums(x, out, kept, trail);
            #[cfg(not(feature = "simd"))]
            let done = 0;
            for block in x.chunks_exact((kept * trail).max(1)) {
                let rows = block.get(done * trail..).unwrap_or(&[]);
                row_reduce(rows, out.get_mut(done..).unwrap_or(&mut []), trail, SumStep);
            }
        }
        _ => return false,
    }
    true
}

/// `sum_to`'s block sums (`x` is `[lead, kept, trail]`, `out[k]` adds `x[l, k, t]` over `l`,
/// then `t`, each a chain from the value `out[k]` holds) for the first outputs, four at a time:
/// the four chains live in the lanes of one vector for the whole of `x` while each `4 × 4`
/// block of `x[l, k .. k + 4, t .. t + 4]` is transposed in registers (`wide::f32x4::transpose`)
/// so that a vector holds one `t` of four outputs; the same additions in the same order as
/// `row_reduce`'s. Returns how many outputs it summed (a multiple of four); the caller sums the
/// rest. C1's bias gradients (`[100, 25, 19]` and smaller) took 5 % of its step as scalar
/// chains.
#[cfg(feature = "simd")]
fn block_sums(x: &[f32], out: &mut [f32], kept: usize, trail: usize) -> usize {
    use wide::f32x4;
    const B: usize = 4;
    let period = kept * trail;
    if trail == 0 || period == 0 {
        return 0;
    }
    let quads = out.len().min(kept) / B;
    for (q, o) in out.chunks_exact_mut(B).take(quads).enumerate() {
        let mut acc = f32x4::new(<[f32; B]>::try_from(&*o).unwrap_or([0.0; B]));
        for block in x.chunks_exact(period) {
            // Rows `k = 4q .. 4q + 4` of this block, `trail` values each.
            let rows = block.get(q * B * trail..(q + 1) * B * trail).unwrap_or(&[]);
            let row = |i: usize| rows.get(i * trail..(i + 1) * trail).unwrap_or(&[]);
            let r = [row(0), row(1), row(2), row(3)];
            let mut t0 = 0;
            while t0 + B <= trail {
                let four = |i: usize| {
                    let s = r.get(i).and_then(|r| r.get(t0..t0 + B)).unwrap_or(&[]);
                    f32x4::new(<[f32; B]>::try_from(s).unwrap_or([0.0; B]))
                };
                let t = f32x4::transpose([four(0), four(1), four(2), four(3)]);
                for v in t {
                    acc += v;
                }
                t0 += B;
            }
            for t in t0..trail {
                let at = |i: usize| r.get(i).and_then(|r| r.get(t)).copied().unwrap_or(0.0);
                acc += f32x4::new([at(0), at(1), at(2), at(3)]);
            }
        }
        o.copy_from_slice(acc.as_array());
    }
    quads * B
}

/// `max_to`'s update: the output takes `v` when `v` is NaN or greater than what it holds,
/// unless it already holds NaN (the reference's rule).
#[inline(always)]
fn max_step(o: f32, v: f32) -> f32 {
    if !o.is_nan() && (v.is_nan() || v > o) {
        v
    } else {
        o
    }
}

fn max_to(x: &[f32], dx: &Dims, out: &mut [f32], dout: &Dims) -> bool {
    match pattern(dout, dx) {
        Pattern::Same if x.len() == out.len() => {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = max_step(f32::NEG_INFINITY, v);
            }
        }
        Pattern::Rows { rows, cols } if out.len() == cols && x.len() == rows * cols => {
            out.fill(f32::NEG_INFINITY);
            for row in x.chunks_exact(cols) {
                for (o, &v) in out.iter_mut().zip(row) {
                    *o = max_step(*o, v);
                }
            }
        }
        Pattern::Cols { rows, cols } if out.len() == rows && x.len() == rows * cols => {
            out.fill(f32::NEG_INFINITY);
            row_reduce(x, out, cols, MaxStep);
        }
        Pattern::Block { lead, kept, trail }
            if out.len() == kept && x.len() == lead * kept * trail =>
        {
            out.fill(f32::NEG_INFINITY);
            for block in x.chunks_exact((kept * trail).max(1)) {
                row_reduce(block, out, trail, MaxStep);
            }
        }
        _ => return false,
    }
    true
}

fn zeroed(out: &mut [f32]) -> &mut [f32] {
    out.fill(0.0);
    out
}

/// A row reduction's step (`sum_to`'s sum, `max_to`'s first-maximum rule): the scalar form
/// and, with `simd`, the lane-wise form, the same bits lane by lane.
trait Reduce: Copy {
    fn s(self, acc: f32, v: f32) -> f32;
    #[cfg(feature = "simd")]
    fn v(self, acc: wide::f32x8, v: wide::f32x8) -> wide::f32x8;
}

/// `acc + v`.
#[derive(Clone, Copy)]
struct SumStep;

impl Reduce for SumStep {
    #[inline(always)]
    fn s(self, acc: f32, v: f32) -> f32 {
        acc + v
    }
    #[cfg(feature = "simd")]
    #[inline(always)]
    fn v(self, acc: wide::f32x8, v: wide::f32x8) -> wide::f32x8 {
        acc + v
    }
}

/// [`max_step`].
#[derive(Clone, Copy)]
struct MaxStep;

impl Reduce for MaxStep {
    #[inline(always)]
    fn s(self, acc: f32, v: f32) -> f32 {
        max_step(acc, v)
    }
    #[cfg(feature = "simd")]
    #[inline(always)]
    fn v(self, acc: wide::f32x8, v: wide::f32x8) -> wide::f32x8 {
        // Ordered comparison: `simd_gt` is false when either side is NaN.
        (!acc.is_nan() & (v.is_nan() | v.simd_gt(acc))).select(v, acc)
    }
}

/// `out[r] = fold(out[r], x[r, 0], x[r, 1], …)` in increasing column order for
/// `x: [rows, cols]` (each chain continues from what `out[r]` holds), eight rows at a time so
/// the eight independent chains overlap: with `simd` as the lanes of one vector, each `8 × 8`
/// block of the eight rows transposed in registers (`lanes::transpose8`, an exact permutation)
/// so that a vector holds one column of the eight rows (W1's softmax row sums and maxima over
/// ten classes had been scalar chains), else as eight scalar chains.
#[inline(always)]
fn row_reduce<Rd: Reduce>(x: &[f32], out: &mut [f32], cols: usize, rd: Rd) {
    const R: usize = 8;
    if cols == 0 {
        return;
    }
    let mut blocks = out.chunks_exact_mut(R);
    let mut xs = x.chunks_exact(R * cols);
    for (o, xb) in (&mut blocks).zip(&mut xs) {
        #[cfg(feature = "simd")]
        {
            use wide::f32x8;
            let mut acc = f32x8::new(<[f32; R]>::try_from(&*o).unwrap_or([0.0; R]));
            let mut c = 0;
            while c + R <= cols {
                let rows: [[f32; R]; R] = core::array::from_fn(|r| {
                    xb.get(r * cols + c..r * cols + c + R)
                        .and_then(|s| <[f32; R]>::try_from(s).ok())
                        .unwrap_or([0.0; R])
                });
                for v in lanes::transpose8(rows) {
                    acc = rd.v(acc, f32x8::new(v));
                }
                c += R;
            }
            for c in c..cols {
                let v = core::array::from_fn(|r| xb.get(r * cols + c).copied().unwrap_or(0.0));
                acc = rd.v(acc, f32x8::new(v));
            }
            o.copy_from_slice(acc.as_array());
        }
        #[cfg(not(feature = "simd"))]
        {
            let mut acc = [0.0; R];
            acc.copy_from_slice(o);
            for c in 0..cols {
                for (r, a) in acc.iter_mut().enumerate() {
                    if let Some(&v) = xb.get(r * cols + c) {
                        *a = rd.s(*a, v);
                    }
                }
            }
            o.copy_from_slice(&acc);
        }
    }
    for (o, row) in blocks
        .into_remainder()
        .iter_mut()
        .zip(xs.remainder().chunks_exact(cols))
    {
        *o = row.iter().fold(*o, |a, &v| rd.s(a, v));
    }
}

/// The narrowest rows (output columns of `conv`, input-gradient columns per stride class of
/// `conv_transpose`) the column-lane convolution kernels take; narrower ones run the
/// channel-lane kernels of `conv_narrow` when `conv_narrow::fits`, else the reference. Their
/// border columns run one output at a time, which costs more than the vectors save on narrow
/// rows: `conv_speed`, SSE2, batch 32, 3×3 padding 1: 8 columns (the digits CNN's first layer)
/// 0.7× the reference's speed for `conv` and 0.5× for `conv_transpose`, 4 columns 0.5× and
/// 0.4×; 32 columns 2–4× faster (`docs/benchmarks.md`).
pub(crate) const MIN_SIMD_COLUMNS: usize = 16;

/// `conv` with the `simd` catalog's kernel (lanes across output columns, see `lanes::conv`);
/// `false` (nothing written) without `simd` or for shapes the rule refuses.
fn conv(attr: Attr, args: &[&[f32]], shapes: &[Shape], out: &mut [f32]) -> bool {
    let (&[x, w], &[xs, ws]) = (args, shapes) else {
        return false;
    };
    let a = tapeplan_core::ops::conv::conv_attr(attr);
    let Ok(g) = tapeplan_core::ops::conv::geometry(Opcode::Conv, &a, xs, ws, (xs, ws)) else {
        return false;
    };
    if x.len() != g.x_elems() || w.len() != g.w_elems() || out.len() != g.y_elems() {
        return false;
    }
    #[cfg(feature = "simd")]
    {
        // The products over gathered columns first (they refuse what they do not take).
        if conv_im2col::conv(x, w, out, &g) {
            return true;
        }
        if g.axes[1].output >= MIN_SIMD_COLUMNS
            && !(g.c_in_group() == 1 && conv_narrow::fits(&g, false))
        {
            lanes::conv(x, w, out, &g);
        } else if conv_narrow::fits(&g, false) {
            conv_narrow::run(x, w, out, &g, false);
        } else {
            return false;
        }
        true
    }
    #[cfg(not(feature = "simd"))]
    {
        false
    }
}

/// The instructions over windows from the executor (arguments as the executor decodes them):
/// `conv`, `conv_transpose`, `conv_weight_grad`, and `max_pool`, `max_pool_gather`,
/// `max_pool_scatter` over windows that tile the input (the plane-lane kernel of
/// `max_pool_tiles.rs`), with the `simd` catalog's kernels; `false` (nothing written) without
/// `simd`, for another opcode, an opcode the selective build leaves out, or shapes the kernels
/// do not take (the reference then runs).
pub(crate) fn windowed<O: Ops>(
    op: Opcode,
    attr: Attr,
    args: &[&[f32]],
    arg_dims: &[&Dims],
    out: &mut [f32],
) -> bool {
    let wanted = match op {
        Opcode::Conv => on!(Conv),
        Opcode::ConvTranspose => on!(ConvTranspose),
        Opcode::ConvWeightGrad => on!(ConvWeightGrad),
        Opcode::MaxPool => on!(MaxPool),
        Opcode::MaxPoolGather => on!(MaxPoolGather),
        Opcode::MaxPoolScatter => on!(MaxPoolScatter),
        _ => false,
    };
    if !wanted || !cfg!(feature = "simd") {
        return false;
    }
    let shape = |d: &&Dims| d.dims.get(..d.rank).and_then(|e| Shape::new(e).ok());
    let Some(a) = arg_dims.first().and_then(shape) else {
        return false;
    };
    if op == Opcode::MaxPool && arg_dims.len() == 1 {
        return pool_tiles(op, attr, args, a, out);
    }
    let (Some(b), 2) = (arg_dims.get(1).and_then(shape), arg_dims.len()) else {
        return false;
    };
    match op {
        Opcode::Conv => conv(attr, args, &[a, b], out),
        Opcode::ConvTranspose | Opcode::ConvWeightGrad => {
            conv_adjoint(op, attr, args, &[a, b], out)
        }
        _ => pool_tiles(op, attr, args, a, out),
    }
}

/// The max pools of [`windowed`] once `x`'s shape is known.
fn pool_tiles(op: Opcode, attr: Attr, args: &[&[f32]], x: Shape, out: &mut [f32]) -> bool {
    #[cfg(feature = "simd")]
    {
        tapeplan_core::ops::pool::tiling(op, attr, x)
            .is_some_and(|t| max_pool_tiles::run(op, &t, args, out))
    }
    #[cfg(not(feature = "simd"))]
    {
        let _ = (op, attr, args, x, out);
        false
    }
}

/// `conv_transpose` or `conv_weight_grad` (`op`) with the `simd` catalog's kernels (see
/// `conv_adjoint`); `false` (nothing written) without `simd`, for shapes the rule refuses, or for
/// a kernel wider than `conv_adjoint::MAX_KERNEL` on an axis.
fn conv_adjoint(
    op: Opcode,
    attr: Attr,
    args: &[&[f32]],
    shapes: &[Shape],
    out: &mut [f32],
) -> bool {
    let (&[a, b], &[sa, sb]) = (args, shapes) else {
        return false;
    };
    let ca = tapeplan_core::ops::conv::conv_attr(attr);
    let Ok((g, _)) = tapeplan_core::ops::conv::adjoint_geometry(op, &ca, sa, sb) else {
        return false;
    };
    let (want_a, want_out) = match op {
        Opcode::ConvTranspose => (g.y_elems(), g.x_elems()),
        Opcode::ConvWeightGrad => (g.x_elems(), g.w_elems()),
        _ => return false,
    };
    let want_b = if op == Opcode::ConvTranspose {
        g.w_elems()
    } else {
        g.y_elems()
    };
    if a.len() != want_a || b.len() != want_b || out.len() != want_out {
        return false;
    }
    #[cfg(feature = "simd")]
    {
        let transpose = op == Opcode::ConvTranspose;
        // The products over gathered columns first (they refuse what they do not take).
        let taken = if transpose {
            conv_im2col::conv_transpose(a, b, out, &g)
        } else {
            conv_im2col::conv_weight_grad(a, b, out, &g)
        };
        if taken {
            return true;
        }
        if !transpose && conv_wgrad::fits(&g) {
            conv_wgrad::run(a, b, out, &g);
        } else if conv_adjoint::fits(&g, transpose) {
            if transpose {
                conv_adjoint::conv_transpose(a, b, out, &g);
            } else {
                conv_adjoint::conv_weight_grad(a, b, out, &g);
            }
        } else if transpose && conv_narrow::fits(&g, true) {
            conv_narrow::run(a, b, out, &g, true);
        } else {
            return false;
        }
        true
    }
    #[cfg(not(feature = "simd"))]
    {
        false
    }
}

// ---------------------------------------------------------------------------------------------
// The checked entry point.

/// Runs `op` under the math profile `math` with the catalog's kernel where it has one, else
/// with the reference kernel: the same contract, shapes and bits as `tapeplan_core::ops::eval`.
///
/// # Shapes
/// `args[i].len() == arg_shapes[i].elems()`, `out.len() == infer(op, attr, arg_shapes).elems()`.
///
/// # Errors
/// As `tapeplan_core::ops::eval`: [`OpError`] when the shapes do not satisfy the shape rule or a
/// buffer's length does not match its shape.
pub fn eval(
    op: Opcode,
    attr: Attr,
    math: MathProfile,
    args: &[&[f32]],
    arg_shapes: &[Shape],
    out: &mut [f32],
) -> Result<(), OpError> {
    eval_arith(
        op,
        attr,
        math,
        ArithProfile::Separate,
        args,
        arg_shapes,
        out,
    )
}

/// [`eval`] under the arithmetic profile `arith` as well: the same contract and bits as
/// `tapeplan_core::ops::eval_arith`.
///
/// # Shapes
/// As [`eval`].
///
/// # Errors
/// As [`eval`]; `OpError::ArithProfile` for a profile this build leaves out.
pub fn eval_arith(
    op: Opcode,
    attr: Attr,
    math: MathProfile,
    arith: ArithProfile,
    args: &[&[f32]],
    arg_shapes: &[Shape],
    out: &mut [f32],
) -> Result<(), OpError> {
    if args.len() != arg_shapes.len() {
        return Err(OpError::Arity {
            op,
            expected: op.arity(),
            found: args.len(),
        });
    }
    let out_shape = tapeplan_core::ops::infer(op, attr, arg_shapes)?;
    let lengths_ok = args
        .iter()
        .zip(arg_shapes)
        .all(|(a, s)| a.len() == s.elems())
        && out.len() == out_shape.elems();
    if !lengths_ok || out.is_empty() {
        // The reference reports the error (or does nothing for an empty output).
        return tapeplan_core::ops::eval_arith(op, attr, math, arith, args, arg_shapes, out);
    }
    if op.class() == tapeplan_core::OpClass::Elementwise {
        let a = args.first().map_or(Src::Out, |a| Src::Buf(a));
        let b = args.get(1).map_or(Src::Out, |b| Src::Buf(b));
        if elementwise::<tapeplan_core::BuildOps>(op, attr.scalar(), math, a, b, out) {
            return Ok(());
        }
    } else if op == Opcode::Conv && cfg!(feature = "simd") {
        if conv(attr, args, arg_shapes, out) {
            return Ok(());
        }
    } else if matches!(op, Opcode::ConvTranspose | Opcode::ConvWeightGrad) && cfg!(feature = "simd")
    {
        if conv_adjoint(op, attr, args, arg_shapes, out) {
            return Ok(());
        }
    } else if matches!(
        op,
        Opcode::MaxPool | Opcode::MaxPoolGather | Opcode::MaxPoolScatter
    ) && cfg!(feature = "simd")
    {
        if let Some(&x) = arg_shapes.first() {
            if pool_tiles(op, attr, args, x, out) {
                return Ok(());
            }
        }
    } else {
        let mut dims = [Dims::of(Shape::SCALAR); tapeplan_core::MAX_ARITY];
        for (d, s) in dims.iter_mut().zip(arg_shapes) {
            *d = Dims::of(*s);
        }
        let n = arg_shapes.len().min(dims.len());
        let dims: [&Dims; tapeplan_core::MAX_ARITY] =
            core::array::from_fn(|i| dims.get(i).unwrap_or(&Dims::EMPTY));
        if arith.in_build()
            && structural::<tapeplan_core::BuildOps>(
                op,
                attr.scalar(),
                arith,
                args,
                dims.get(..n).unwrap_or(&[]),
                &Dims::of(out_shape),
                out,
            )
        {
            return Ok(());
        }
    }
    tapeplan_core::ops::eval_arith(op, attr, math, arith, args, arg_shapes, out)
}

/// True when the catalog has its own kernel for `op` over arguments of `arg_shapes` (else
/// [`eval`] runs the reference kernel). For tests and benchmarks. For an elementwise opcode the
/// catalog's own elementwise dispatch answers (run over empty buffers, it writes nothing).
pub fn has_kernel(op: Opcode, attr: Attr, arg_shapes: &[Shape]) -> bool {
    let Ok(out) = tapeplan_core::ops::infer(op, attr, arg_shapes) else {
        return false;
    };
    let d = |s: &Shape| Dims::of(*s);
    match op {
        Opcode::Broadcast => arg_shapes
            .first()
            .is_some_and(|x| pattern(&d(x), &d(&out)) != Pattern::Other),
        Opcode::SumTo | Opcode::MaxTo => arg_shapes
            .first()
            .is_some_and(|x| pattern(&d(&out), &d(x)) != Pattern::Other),
        Opcode::Fill
        | Opcode::MatMul
        | Opcode::Transpose
        | Opcode::Reshape
        | Opcode::Select
        | Opcode::OneHot => true,
        Opcode::MatMulTn | Opcode::MatMulNt => cfg!(feature = "simd"),
        Opcode::Conv => {
            cfg!(feature = "simd")
                && match arg_shapes {
                    [x, w] => tapeplan_core::ops::conv::geometry(
                        op,
                        &tapeplan_core::ops::conv::conv_attr(attr),
                        *x,
                        *w,
                        (*x, *w),
                    )
                    .is_ok_and(|g| {
                        g.axes[1].output >= MIN_SIMD_COLUMNS || {
                            #[cfg(feature = "simd")]
                            {
                                conv_narrow::fits(&g, false)
                            }
                            #[cfg(not(feature = "simd"))]
                            {
                                false
                            }
                        }
                    }),
                    _ => false,
                }
        }
        #[cfg(feature = "simd")]
        Opcode::ConvTranspose | Opcode::ConvWeightGrad => {
            let ca = tapeplan_core::ops::conv::conv_attr(attr);
            match (
                arg_shapes,
                tapeplan_core::ops::conv::adjoint_geometry(
                    op,
                    &ca,
                    arg_shapes.first().copied().unwrap_or(Shape::SCALAR),
                    arg_shapes.get(1).copied().unwrap_or(Shape::SCALAR),
                ),
            ) {
                ([_, _], Ok((g, _))) => {
                    let transpose = op == Opcode::ConvTranspose;
                    conv_adjoint::fits(&g, transpose)
                        || (transpose && conv_narrow::fits(&g, true))
                        || (!transpose && conv_wgrad::fits(&g))
                }
                _ => false,
            }
        }
        #[cfg(feature = "simd")]
        Opcode::MaxPool | Opcode::MaxPoolGather | Opcode::MaxPoolScatter => arg_shapes
            .first()
            .and_then(|&x| tapeplan_core::ops::pool::tiling(op, attr, x))
            .is_some_and(|t| max_pool_tiles::fits(&t)),
        _ if op.class() == tapeplan_core::OpClass::Elementwise => {
            let math = [MathProfile::Precise, MathProfile::Fast]
                .into_iter()
                .find(|m| m.in_build())
                .unwrap_or(MathProfile::Precise);
            elementwise::<tapeplan_core::BuildOps>(
                op,
                attr.scalar(),
                math,
                Src::Buf(&[]),
                Src::Buf(&[]),
                &mut [],
            )
        }
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn d(s: &[usize]) -> Dims {
        Dims::of(Shape::new(s).unwrap())
    }

    /// `mul` by a constant (`Src::Splat`, either side, over a buffer or in place) gives
    /// `mul::scalar`'s bits for every constant and operand: zeros, infinities and NaNs (the
    /// lane test for `0 · inf`), and finite nonzero constants (the plain product). NaNs compare
    /// as one class: Rust leaves a NaN result's sign and payload unspecified (Miri draws them).
    #[test]
    fn mul_by_a_constant_gives_the_scalar_bits() {
        use tapeplan_core::ops::mul;
        let class = |v: f32| if v.is_nan() { u32::MAX } else { v.to_bits() };
        let specials = [
            0.0f32,
            -0.0,
            1.0,
            -0.1,
            0.999,
            3.0e38,
            f32::MIN_POSITIVE,
            f32::from_bits(1),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::MAX,
            -2.5e-39,
        ];
        // Lanes past a whole vector too: the scalar tail.
        let mut x = [0.0f32; 37];
        for (v, &s) in x.iter_mut().zip(specials.iter().cycle()) {
            *v = s;
        }
        for &c in &specials {
            for splat_first in [false, true] {
                let want = x.map(|v| {
                    let p = if splat_first {
                        mul::scalar(c, v)
                    } else {
                        mul::scalar(v, c)
                    };
                    class(p)
                });
                let (a, b) = if splat_first {
                    (Src::Splat(c), Src::Buf(&x))
                } else {
                    (Src::Buf(&x), Src::Splat(c))
                };
                let mut out = [7.0f32; 37];
                lanes::mul(a, b, &mut out);
                assert_eq!(
                    out.map(class),
                    want,
                    "buffer, constant {c:?}, first {splat_first}"
                );
                let mut out = x;
                let (a, b) = if splat_first {
                    (Src::Splat(c), Src::Out)
                } else {
                    (Src::Out, Src::Splat(c))
                };
                lanes::mul(a, b, &mut out);
                assert_eq!(
                    out.map(class),
                    want,
                    "in place, constant {c:?}, first {splat_first}"
                );
            }
        }
    }

    #[test]
    fn patterns() {
        assert_eq!(
            pattern(&d(&[3]), &d(&[2, 3])),
            Pattern::Rows { rows: 2, cols: 3 }
        );
        assert_eq!(
            pattern(&d(&[1, 3]), &d(&[2, 3])),
            Pattern::Rows { rows: 2, cols: 3 }
        );
        assert_eq!(
            pattern(&d(&[2, 1]), &d(&[2, 3])),
            Pattern::Cols { rows: 2, cols: 3 }
        );
        assert_eq!(
            pattern(&d(&[]), &d(&[2, 3])),
            Pattern::Rows { rows: 6, cols: 1 }
        );
        assert_eq!(pattern(&d(&[2, 3]), &d(&[2, 3])), Pattern::Same);
        assert_eq!(pattern(&d(&[1, 1]), &d(&[1])), Pattern::Other);
        assert_eq!(pattern(&d(&[1]), &d(&[1, 1])), Pattern::Same);
        assert_eq!(pattern(&d(&[2, 1, 4]), &d(&[2, 3, 4])), Pattern::Other);
        assert_eq!(
            pattern(&d(&[1, 3, 1]), &d(&[2, 3, 4])),
            Pattern::Block {
                lead: 2,
                kept: 3,
                trail: 4
            }
        );
        assert_eq!(
            pattern(&d(&[3, 1]), &d(&[2, 1, 3, 4])),
            Pattern::Block {
                lead: 2,
                kept: 3,
                trail: 4
            }
        );
        assert_eq!(
            pattern(&d(&[2, 1, 4, 1]), &d(&[2, 3, 4, 5])),
            Pattern::Other
        );
        assert_eq!(
            pattern(&d(&[2, 3, 1]), &d(&[2, 3, 4])),
            Pattern::Cols { rows: 6, cols: 4 }
        );
        assert_eq!(
            pattern(&d(&[1, 3, 4]), &d(&[2, 3, 4])),
            Pattern::Rows { rows: 2, cols: 12 }
        );
        assert_eq!(
            pattern(&d(&[1, 1, 4]), &d(&[2, 3, 4])),
            Pattern::Rows { rows: 6, cols: 4 }
        );
    }
}
