//! Model building: the layer stack, its losses and dropout, optimizers as recorded spec.

pub mod mlp;
pub mod optim;

pub use mlp::*;
