//! A RAM NOR flash that loses power after a given number of operations, for the checkpoint
//! tests.
#![allow(dead_code, clippy::indexing_slicing)]

use embedded_storage::nor_flash::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};

/// The flash word, in bytes.
pub const WORD_BYTES: usize = 4;
/// The default page, in bytes.
pub const PAGE_BYTES: usize = 4096;

/// The power failed: this operation and every later one did not happen (or half happened).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerCut;

impl NorFlashError for PowerCut {
    fn kind(&self) -> NorFlashErrorKind {
        NorFlashErrorKind::Other
    }
}

/// A RAM NOR flash: writes only clear bits (a word is programmed once between erases, checked),
/// and after `budget` operations (one word programmed, or one page erased) the power is cut:
/// a write stops after the words the budget allowed; an interrupted erase leaves the first
/// half of its page erased and the rest as it was.
pub struct RamFlash<const PAGE: usize = PAGE_BYTES> {
    pub bytes: Vec<u8>,
    budget: Option<usize>,
    pub ops: usize,
    /// Pages erased (completely).
    pub erases: usize,
    /// Programming a word that is not erased clears the bits it clears (what a NOR flash
    /// does) instead of failing the test.
    pub and_writes: bool,
    /// Words programmed that were not erased (with `and_writes`).
    pub reprogrammed: usize,
}

impl<const PAGE: usize> RamFlash<PAGE> {
    pub fn new(bytes: Vec<u8>, budget: Option<usize>) -> Self {
        RamFlash {
            bytes,
            budget,
            ops: 0,
            erases: 0,
            and_writes: false,
            reprogrammed: 0,
        }
    }

    /// Takes one operation from the budget; `false` when the power is gone.
    fn tick(&mut self) -> bool {
        if self.budget.is_some_and(|b| self.ops >= b) {
            return false;
        }
        self.ops += 1;
        true
    }
}

impl<const PAGE: usize> ErrorType for RamFlash<PAGE> {
    type Error = PowerCut;
}

impl<const PAGE: usize> ReadNorFlash for RamFlash<PAGE> {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), PowerCut> {
        if self.budget.is_some_and(|b| self.ops >= b) {
            return Err(PowerCut);
        }
        let at = offset as usize;
        bytes.copy_from_slice(&self.bytes[at..at + bytes.len()]);
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.bytes.len()
    }
}

impl<const PAGE: usize> NorFlash for RamFlash<PAGE> {
    const WRITE_SIZE: usize = WORD_BYTES;
    const ERASE_SIZE: usize = PAGE;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), PowerCut> {
        for page in (from as usize..to as usize).step_by(PAGE) {
            if !self.tick() {
                self.bytes[page..page + PAGE / 2].fill(0xff);
                return Err(PowerCut);
            }
            self.bytes[page..page + PAGE].fill(0xff);
            self.erases += 1;
        }
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), PowerCut> {
        let at = offset as usize;
        assert_eq!(at % WORD_BYTES, 0, "unaligned write at {at}");
        for (i, w) in bytes.chunks(WORD_BYTES).enumerate() {
            if !self.tick() {
                return Err(PowerCut);
            }
            let dst = &mut self.bytes[at + i * WORD_BYTES..at + i * WORD_BYTES + w.len()];
            if self.and_writes {
                self.reprogrammed += usize::from(dst.iter().any(|&b| b != 0xff));
                for (d, s) in dst.iter_mut().zip(w) {
                    *d &= s;
                }
                continue;
            }
            assert!(
                dst.iter().all(|&b| b == 0xff),
                "word at {} programmed twice",
                at + i * WORD_BYTES
            );
            dst.copy_from_slice(w);
        }
        Ok(())
    }
}

/// A run description's plan, initial model tensors (little-endian `f32`, concatenated) and
/// their names and element counts, as the planner makes them for a device.
pub fn run_parts(
    cfg: &tapeplan_planner::model::RunConfig,
) -> (Vec<u8>, Vec<u8>, Vec<(&'static str, usize)>) {
    let job = cfg.job().unwrap();
    let plan = job.schedule.to_bytes();
    let init: Vec<u8> = cfg
        .initial_parameters(&job)
        .unwrap()
        .iter()
        .flatten()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let params: Vec<(&'static str, usize)> = job
        .parameter_shapes()
        .into_iter()
        .map(|(n, s)| (&*Box::leak(n.into_boxed_str()), s.elems()))
        .collect();
    (plan, init, params)
}
