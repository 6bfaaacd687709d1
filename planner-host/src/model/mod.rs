//! Stage 1, model building: the layer stack, its losses and dropout ([`mlp`]), optimizers as
//! recorded spec ([`optim`]), the plan's names and what is training state ([`names`]), and the job description: a training job recorded and planned
//! ([`job`]) and a whole training run named by a few keys ([`run`]).

pub mod graph;
pub mod hvp;
pub mod job;
pub mod mlp;
pub mod names;
pub mod nn;
pub mod onnx;
pub mod optim;
pub mod run;

pub use graph::{
    Forward, ForwardCx, InputSpec, Mode, Model, ModelError, ParamKind, ParamSpec, RngLeaves,
};
pub use job::{
    advance_model_state, glob_match, trainable_subset, Forward1, JobBuilder, JobError, JobOptions,
    LossRecorder, TrainingJob, ENTRY_EVAL_LOSS, ENTRY_FORWARD_1,
};
pub use mlp::{
    glorot_uniform, loss_of, mean_squared_error, record_inputs, record_loss, softmax_cross_entropy,
    Activation, Dense, Dropout, Loss, Mlp, MlpModel, TrainInputs,
};
pub use run::{RunConfig, RunConfigError};
