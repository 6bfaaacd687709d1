//! Input and output: data, safetensors exchange and checkpoints, plots, plan listings.

pub mod data;
pub mod exchange;
pub mod inspect;
pub mod plot;
