//! Feature `checkpoint`: the training state in a RAM-backed NOR flash that survives a
//! software reset, and a reset injected in the middle of a checkpoint write.
//!
//! QEMU's `mps2-an386` has no flash controller, so the "flash" is a region of RAM in
//! `.uninit` ([`crate::rt::take_noinit`]): the reset handler neither zeroes nor loads it, and
//! QEMU keeps RAM across a system reset (`SYSRESETREQ`), which `cargo xtask firmware` checks
//! by this run resuming at all. On the first boot the region is erased (all `0xff`); the
//! firmware trains with [`tapeplan_firmware::train_resumable`], saving a checkpoint after every
//! epoch; in save [`RESET_AT_SAVE`], after [`RESET_AT_WORD`] programmed words, it resets the
//! core (`SCB::sys_reset`). The second boot loads the newest complete checkpoint, resumes, and
//! ends with the uninterrupted run's `digest` line.

use core::sync::atomic::{AtomicU32, Ordering};

use embedded_storage::nor_flash::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};
use tapeplan_firmware::checkpoint::CheckpointStore;
use tapeplan_firmware::Checkpoints;
use tapeplan_runtime::{Ops, Session};

/// The flash page (erase unit), in bytes; also the store's work buffer.
pub const PAGE_BYTES: usize = 1024;
/// The flash: 32 pages (two checkpoints of the demo's 9.6 KiB region and spare pages).
pub const FLASH_BYTES: usize = 32 * PAGE_BYTES;
/// The marker word before the flash in `.uninit` plus the flash.
pub const NOINIT_BYTES: usize = 4 + FLASH_BYTES;
/// The save (1-based: the checkpoint after epoch `RESET_AT_SAVE`) interrupted by the reset.
pub const RESET_AT_SAVE: u32 = 2;
/// The programmed words of that save after which the core is reset.
pub const RESET_AT_WORD: u32 = 1000;

/// The marker: the flash was erased on a cold boot, no reset injected yet.
pub const MARK_FRESH: u32 = 0x434b_5031;
/// The marker: the reset was injected; the boot after it resumes.
const MARK_RESET: u32 = 0x434b_5032;

/// Saves begun since boot.
static SAVES: AtomicU32 = AtomicU32::new(0);
/// Words programmed in the current save.
static WORDS: AtomicU32 = AtomicU32::new(0);

/// Flash errors: none in RAM; an access outside the region.
#[derive(Debug, Clone, Copy)]
pub struct OutOfBounds;

impl NorFlashError for OutOfBounds {
    fn kind(&self) -> NorFlashErrorKind {
        NorFlashErrorKind::OutOfBounds
    }
}

/// The RAM NOR flash: 4-byte words, 1 KiB pages; programming clears bits (AND), as NOR does.
pub struct RamFlash {
    marker: &'static mut [u8],
    mem: &'static mut [u8],
    inject: bool,
}

impl RamFlash {
    /// The flash over the `.uninit` region; answers it and whether this boot follows the
    /// injected reset.
    pub fn new(noinit: &'static mut [u8; NOINIT_BYTES]) -> (RamFlash, bool) {
        let (marker, mem) = noinit.split_at_mut(4);
        let mark = u32::from_le_bytes([marker[0], marker[1], marker[2], marker[3]]);
        let resumed = mark == MARK_RESET;
        if mark != MARK_FRESH && !resumed {
            // A cold boot: whatever RAM held is not a flash image.
            mem.fill(0xff);
            marker.copy_from_slice(&MARK_FRESH.to_le_bytes());
        }
        let inject = !resumed;
        (
            RamFlash {
                marker,
                mem,
                inject,
            },
            resumed,
        )
    }

    fn range(&mut self, offset: u32, len: usize) -> Result<&mut [u8], OutOfBounds> {
        let at = offset as usize;
        self.mem
            .get_mut(at..at.checked_add(len).ok_or(OutOfBounds)?)
            .ok_or(OutOfBounds)
    }
}

impl ErrorType for RamFlash {
    type Error = OutOfBounds;
}

impl ReadNorFlash for RamFlash {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), OutOfBounds> {
        bytes.copy_from_slice(self.range(offset, bytes.len())?);
        Ok(())
    }

    fn capacity(&self) -> usize {
        FLASH_BYTES
    }
}

impl NorFlash for RamFlash {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = PAGE_BYTES;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), OutOfBounds> {
        let len = (to as usize)
            .checked_sub(from as usize)
            .ok_or(OutOfBounds)?;
        self.range(from, len)?.fill(0xff);
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), OutOfBounds> {
        let inject = self.inject && SAVES.load(Ordering::Relaxed) == RESET_AT_SAVE;
        for (i, w) in bytes.chunks(4).enumerate() {
            if inject && WORDS.load(Ordering::Relaxed) == RESET_AT_WORD {
                self.marker.copy_from_slice(&MARK_RESET.to_le_bytes());
                defmt::info!(
                    "reset injected in save {=u32} after {=u32} words",
                    RESET_AT_SAVE,
                    RESET_AT_WORD
                );
                cortex_m::peripheral::SCB::sys_reset();
            }
            let dst = self.range(offset + (i * 4) as u32, w.len())?;
            for (d, s) in dst.iter_mut().zip(w) {
                *d &= *s;
            }
            WORDS.store(WORDS.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// The store, counting saves for the injection.
pub struct Counted<'s, 'w>(pub &'s mut CheckpointStore<'w, RamFlash>);

impl Checkpoints for Counted<'_, '_> {
    fn resume<O: Ops>(
        &mut self,
        session: &mut Session<'_, '_, O>,
    ) -> Result<Option<u32>, &'static str> {
        Checkpoints::resume(self.0, session)
    }

    fn save<O: Ops>(
        &mut self,
        session: &Session<'_, '_, O>,
        epochs_done: u32,
    ) -> Result<(), &'static str> {
        SAVES.store(SAVES.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        WORDS.store(0, Ordering::Relaxed);
        Checkpoints::save(self.0, session, epochs_done)
    }
}
