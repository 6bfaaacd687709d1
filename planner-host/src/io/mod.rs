//! Stage 4, input and output: data sets ([`data`]), safetensors exchange and checkpoint files
//! ([`exchange`]), loss curves ([`plot`]), and the host-side listing of plan bytes
//! ([`inspect`]); CSV tables for any plan ([`table`]: targets, class names,
//! standardization).

pub mod data;
pub mod exchange;
pub mod inspect;
pub mod plot;
pub mod table;
