#![no_std]
//! placeholder
