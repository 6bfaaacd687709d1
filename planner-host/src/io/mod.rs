//! Stage 4, input and output: data sets ([`data`]), safetensors exchange and checkpoint files
//! ([`exchange`]), loss curves ([`plot`]), and the host-side listing of plan bytes
//! ([`inspect`]); CSV tables for any plan ([`table`]: targets, class names,
//! standardization); a plan as a Rust module for firmware ([`rust_module`]).

pub mod data;
pub mod exchange;
pub mod inspect;
pub mod plot;
pub mod rust_module;
pub mod table;
