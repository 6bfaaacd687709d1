//! The options the commands share: the model to plan, and `train`'s outputs.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use tapeplan_planner::model::job::JobBuilder;
use tapeplan_planner::model::onnx::OnnxModel;
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::run::RunOptimizer;
use tapeplan_planner::model::{
    trainable_subset, Activation, JobOptions, Loss, Mlp, Model, TrainingJob,
};
use tapeplan_planner::plan::{FusionPolicy, PlanOptions};

/// `tapeplan train`'s state files and outputs.
#[derive(Args, Clone)]
pub struct TrainOutputs {
    /// Write the whole training state to this checkpoint after every epoch (atomically:
    /// FILE.tmp, then renamed over FILE), and the loss curve so far to FILE.losses.csv (which
    /// --resume FILE reads back, so a resumed run plots the whole curve).
    #[arg(long, value_name = "FILE")]
    pub checkpoint: Option<PathBuf>,
    /// Restore the training state from this checkpoint of the same plan and go on from the
    /// epoch it reached (give the same --seed and data for a bit-identical continuation).
    #[arg(long, value_name = "FILE")]
    pub resume: Option<PathBuf>,
    /// Write the trained parameters as safetensors (PyTorch nn.Sequential names).
    #[arg(long, value_name = "FILE")]
    pub save_params: Option<PathBuf>,
    /// Write the test split and the runtime's logits on it as safetensors (x, labels,
    /// logits), for scripts/check_export.py.
    #[arg(long, value_name = "FILE")]
    pub save_test_logits: Option<PathBuf>,
    /// Where to draw the loss curve (SVG). Default: the plan's path with `.loss.svg`.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ActivationArg {
    Tanh,
    Relu,
}

/// The math profile (`tapeplan_core::MathProfile`).
#[derive(Clone, Copy, ValueEnum)]
pub enum MathArg {
    /// libm's functions (faithfully rounded): the default.
    Precise,
    /// micromath's approximations (about 1e-3 relative error; less code, not necessarily faster: see docs/math-profiles.md).
    Fast,
}

/// The arithmetic profile (`tapeplan_core::ArithProfile`).
#[derive(Clone, Copy, ValueEnum)]
pub enum ArithArg {
    /// A rounded product then a rounded sum per multiply-accumulate step: the default.
    Separate,
    /// One fused multiply-add (one rounding) per step: the hardware instruction where the runtime's build has it, libm's fmaf elsewhere (see docs/arith-profiles.md).
    Fma,
}

impl From<ArithArg> for tapeplan_core::ArithProfile {
    fn from(a: ArithArg) -> Self {
        match a {
            ArithArg::Separate => tapeplan_core::ArithProfile::Separate,
            ArithArg::Fma => tapeplan_core::ArithProfile::Fma,
        }
    }
}

impl From<MathArg> for tapeplan_core::MathProfile {
    fn from(m: MathArg) -> Self {
        match m {
            MathArg::Precise => tapeplan_core::MathProfile::Precise,
            MathArg::Fast => tapeplan_core::MathProfile::Fast,
        }
    }
}

/// Which elementwise chains to fuse (`tapeplan_planner::FusionPolicy`).
#[derive(Clone, Copy, ValueEnum)]
pub enum FusionArg {
    /// None (as --no-fusion): every value in the arena.
    Off,
    /// Every chain: the smallest arena.
    All,
    /// Per chain, for a host with the kernel catalog: fused where not slower, or where unfusing would grow the arena (the default).
    Auto,
    /// Per chain, for a device without the kernel catalog (the firmware): fused only where unfusing would grow the arena.
    Device,
    /// Per chain, for a host, time first: fused only where not slower, even where unfusing grows the arena.
    Speed,
}

impl From<FusionArg> for FusionPolicy {
    fn from(f: FusionArg) -> Self {
        match f {
            FusionArg::Off => FusionPolicy::Off,
            FusionArg::All => FusionPolicy::All,
            FusionArg::Auto => FusionPolicy::Auto,
            FusionArg::Device => FusionPolicy::Device,
            FusionArg::Speed => FusionPolicy::Speed,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FrozenBnArg {
    Train,
    Eval,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum LossArg {
    /// Softmax cross-entropy over integer labels.
    Ce,
    /// Mean squared error.
    Mse,
    /// Binary cross-entropy on logits (PyTorch's `BCEWithLogitsLoss`), float targets.
    Bce,
    /// Mean absolute error (PyTorch's `L1Loss`).
    L1,
}

#[derive(Args, Clone)]
pub struct ModelArgs {
    /// An ONNX model to train instead of --layers (its forward graph, opset 13 and later): its
    /// initializers are the initial parameters (written beside the plan as
    /// PLAN.init.safetensors), its named batch dimension takes --batch. See docs/onnx.md.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["layers", "activation", "dropout"])]
    pub onnx: Option<PathBuf>,
    /// Train only the parameters whose names match one of these patterns (`*` and `?`, e.g.
    /// `fc.*` for an ONNX model, `w2` or `?2` for --layers); the others are frozen: no
    /// gradient is recorded for them, and the memory report compares the arena with full update.
    #[arg(long, value_name = "PATTERN")]
    pub trainable: Vec<String>,
    /// Freeze the parameters whose names match one of these patterns (no gradient, no
    /// update).
    #[arg(long, value_name = "PATTERN")]
    pub frozen: Vec<String>,
    /// How an ONNX model's BatchNormalization with a frozen scale and bias trains: `train`
    /// normalizes with the batch's statistics and updates the running ones (PyTorch's
    /// `module.train()`, ONNX Runtime's training); `eval` normalizes with its running
    /// statistics and leaves them unchanged (PyTorch's `backbone.eval()`, the usual way to
    /// fine-tune a frozen backbone).
    #[arg(long, value_enum, default_value_t = FrozenBnArg::Train, requires = "onnx")]
    pub frozen_bn: FrozenBnArg,
    /// Layer widths, input first, output last.
    #[arg(long, value_delimiter = ',', default_value = "64,32,10")]
    pub layers: Vec<usize>,
    /// Hidden activation.
    #[arg(long, value_enum, default_value_t = ActivationArg::Tanh)]
    pub activation: ActivationArg,
    /// Loss.
    #[arg(long, value_enum, default_value_t = LossArg::Ce)]
    pub loss: LossArg,
    /// Batch size of both entries.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 0.1)]
    pub lr: f32,
    /// Optimizer, recorded into the plan as update nodes (PyTorch's documented rules: SGD,
    /// SGD with momentum, Nesterov momentum, Adam, AdamW).
    #[arg(long, value_enum, default_value_t = OptimizerArg::Sgd)]
    pub optimizer: OptimizerArg,
    /// Momentum for `--optimizer momentum|nesterov`.
    #[arg(long, default_value_t = 0.9)]
    pub momentum: f32,
    /// AdamW's decoupled weight decay.
    #[arg(long, default_value_t = 0.01)]
    pub weight_decay: f32,
    /// Dropout probability after each hidden activation during training (0: none); inference
    /// (the `forward` entry) never drops.
    #[arg(long, default_value_t = 0.0)]
    pub dropout: f32,
    /// The dropout generator's key (stored in the plan's persistent state).
    #[arg(long, default_value_t = 1)]
    pub dropout_seed: u64,
    /// Write updates in place as they are computed (smallest arena) instead of committing a
    /// step only when its loss and every update are finite.
    #[arg(long)]
    pub no_guard: bool,
    /// Plan without fusing elementwise chains (every value in the arena; same bits): --fusion off.
    #[arg(long, conflicts_with = "fusion")]
    pub no_fusion: bool,
    /// Which elementwise chains to fuse (same bits whatever is chosen; the arena is never larger than unfused, and auto/device never larger than all).
    #[arg(long, value_enum)]
    pub fusion: Option<FusionArg>,
    /// Plan SGD's updates unfused: every weight gradient in a buffer, then the update (by
    /// default, with --no-guard, each update is fused into its weight gradient's product,
    /// `sgd_matmul`, where that makes the arena smaller; same bits).
    #[arg(long)]
    pub no_sgd_fusion: bool,
    /// Plan every `transpose` into the arena (by default a transpose read only by matrix
    /// products is folded into them, `matmul_tn` / `matmul_nt`, unless that makes the arena
    /// larger; same bits).
    #[arg(long)]
    pub no_fold_transposes: bool,
    /// Keep the arena within BYTES by recomputing forward values in the backward pass
    /// (rematerialization; the same bits, more work: `plan` prints how much). Refused, with the
    /// smallest arena found, when no recomputation brings it there.
    #[arg(long, value_name = "BYTES")]
    pub arena_budget: Option<usize>,
    /// Math profile of the transcendental kernels (exp, log, tanh, sigmoid, softplus, pow),
    /// recorded in the plan and followed by the oracle and every runtime: `precise` (libm) or
    /// `fast` (micromath's approximations). sqrt stays correctly rounded in both.
    #[arg(long, value_enum, default_value_t = MathArg::Precise)]
    pub math: MathArg,
    /// Arithmetic profile of the matrix products, recorded in the plan and followed by the
    /// oracle and every runtime: `separate` (a rounded product, then a rounded sum) or `fma`
    /// (one fused multiply-add per step, the same bits on every target; fast where the device
    /// has FMA hardware, slower where it has not).
    #[arg(long, value_enum, default_value_t = ArithArg::Separate)]
    pub arith: ArithArg,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum OptimizerArg {
    Sgd,
    Momentum,
    Nesterov,
    Adam,
    Adamw,
}

impl ModelArgs {
    /// Records and plans the job these options describe.
    pub fn job(&self) -> Result<TrainingJob> {
        self.check_batch_and_lr()?;
        if self.onnx.is_none() && self.frozen_bn != FrozenBnArg::Train {
            bail!("--frozen-bn applies to an ONNX model's BatchNormalization (--onnx)");
        }
        if let Some(model) = self.onnx_model()? {
            return self.onnx_job(&model);
        }
        if self.layers.len() < 2 || self.layers.contains(&0) {
            bail!("--layers needs at least two non-zero widths, e.g. 64,32,10");
        }
        if !(0.0..1.0).contains(&self.dropout) {
            bail!("--dropout must be in [0, 1)");
        }
        let elems: Option<usize> = self
            .layers
            .windows(2)
            .try_fold(0usize, |acc, w| acc.checked_add(w[0].checked_mul(w[1])?));
        if elems.is_none_or(|e| e > 1 << 26) || self.batch > 1 << 20 {
            bail!("the model is too large for one plan (over 2^26 weights or a batch over 2^20)");
        }
        let mlp = Mlp {
            sizes: self.layers.clone(),
            activation: match self.activation {
                ActivationArg::Tanh => Activation::Tanh,
                ActivationArg::Relu => Activation::Relu,
            },
        };
        let loss = self.loss();
        let optimizer = self.optimizer();
        if self.trainable.is_empty() && self.frozen.is_empty() {
            return Ok(TrainingJob::build_with(
                mlp,
                loss,
                optimizer,
                self.batch,
                self.job_options(),
            )?);
        }
        // A trainable subset goes through the general job, with the entries of the path above
        // (no `forward_1`, `eval_loss`), so `train` and the devices run it the same way.
        let model = mlp.model(self.dropout, 0);
        let options = JobOptions {
            eval_entries: Some(false),
            ..self.job_options()
        };
        self.subset(TrainingJob::for_model(&model).options(options))
            .loss(loss)
            .optimizer(optimizer)
            .batch(self.batch)
            .build()
            .map_err(Into::into)
    }

    /// `builder` with --trainable and --frozen.
    fn subset<'m>(&self, mut builder: JobBuilder<'m>) -> JobBuilder<'m> {
        if !self.trainable.is_empty() {
            builder = builder.trainable(self.trainable.clone());
        }
        if !self.frozen.is_empty() {
            builder = builder.frozen(self.frozen.clone());
        }
        builder
    }

    /// `--batch` at least 1, `--lr` positive and finite.
    fn check_batch_and_lr(&self) -> Result<()> {
        if self.batch == 0 {
            bail!("--batch must be at least 1");
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            bail!("--lr must be a positive, finite number");
        }
        Ok(())
    }

    /// The loss.
    pub fn loss(&self) -> Loss {
        match self.loss {
            LossArg::Ce => Loss::SoftmaxCrossEntropy,
            LossArg::Mse => Loss::MeanSquaredError,
            LossArg::Bce => Loss::BceWithLogits,
            LossArg::L1 => Loss::L1,
        }
    }

    /// The fusion policy: `--fusion`, `off` with `--no-fusion`, `auto` when neither is given.
    pub fn fusion_policy(&self) -> FusionPolicy {
        match (self.no_fusion, self.fusion) {
            (true, _) => FusionPolicy::Off,
            (false, f) => f.map_or(FusionPolicy::Auto, Into::into),
        }
    }

    /// The job options: the guard, dropout, planning.
    fn job_options(&self) -> JobOptions {
        JobOptions {
            guarded: !self.no_guard,
            dropout: self.dropout,
            seed: self.dropout_seed,
            planning: PlanOptions {
                fusion: self.fusion_policy(),
                fuse_sgd: !self.no_sgd_fusion,
                fold_transposes: !self.no_fold_transposes,
                math: self.math.into(),
                arith: self.arith.into(),
                ..PlanOptions::default()
            },
            arena_budget_bytes: self.arena_budget,
            ..Default::default()
        }
    }

    /// The ONNX model of --onnx, read and translated.
    ///
    /// # Errors
    /// An unreadable file; a graph the translation refuses (an unsupported operator names the
    /// node, the operator and what is supported).
    pub fn onnx_model(&self) -> Result<Option<OnnxModel>> {
        let Some(path) = &self.onnx else {
            return Ok(None);
        };
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let mut model =
            OnnxModel::from_bytes(&bytes).with_context(|| format!("{}", path.display()))?;
        if self.frozen_bn == FrozenBnArg::Eval {
            let flags = trainable_subset(&model.parameters()?, &self.trainable, &self.frozen)?;
            if model.eval_frozen_batch_norm(&flags)?.is_empty() {
                bail!(
                    "--frozen-bn eval: no BatchNormalization of {} has both its scale and bias frozen (freeze them with --frozen or leave them out of --trainable)",
                    path.display()
                );
            }
        }
        Ok(Some(model))
    }

    /// Records and plans the job of an ONNX model with these options.
    ///
    /// # Errors
    /// Bad options, a batch the model cannot take, patterns that match nothing, planning.
    pub fn onnx_job(&self, model: &OnnxModel) -> Result<TrainingJob> {
        self.check_batch_and_lr()?;
        if self.batch > 1 << 20 {
            bail!("--batch over 2^20 is too large for one plan");
        }
        let builder = TrainingJob::for_model(model)
            .loss(self.loss())
            .optimizer(self.optimizer())
            .batch(self.batch)
            .options(self.job_options());
        Ok(self.subset(builder).build()?)
    }

    /// The optimizer.
    pub fn optimizer(&self) -> Optimizer {
        match self.optimizer {
            OptimizerArg::Sgd => RunOptimizer::Sgd,
            OptimizerArg::Momentum => RunOptimizer::Momentum(self.momentum),
            OptimizerArg::Nesterov => RunOptimizer::Nesterov(self.momentum),
            OptimizerArg::Adam => RunOptimizer::Adam,
            OptimizerArg::Adamw => RunOptimizer::AdamW(self.weight_decay),
        }
        .with_lr(self.lr)
    }

    /// The hidden activation's name.
    pub fn activation_name(&self) -> &'static str {
        match self.activation {
            ActivationArg::Tanh => "tanh",
            ActivationArg::Relu => "relu",
        }
    }
}
