//! Checkpoints: the whole training state of a session as a versioned, checksummed byte blob,
//! written into and read from buffers the caller owns (no allocation).
//!
//! The training state is the plan's persistent region `[0, persistent_elems)`: parameters,
//! optimizer state, generator state and step counter all live there, so saving it and the
//! plan's identity ([`Plan::plan_id`]) is enough for a restored run to continue bit for bit.
//! `docs/checkpoints.md` specifies the bytes and the two-slot scheme firmware uses to survive a
//! power cut during a write.
//!
//! | bytes | field | value |
//! |---|---|---|
//! | 0..4 | magic | `TPCK` |
//! | 4..6 | version | [`CHECKPOINT_VERSION`] (u16 LE) |
//! | 6..8 | header_bytes | 32 (u16 LE) |
//! | 8..12 | total_bytes | `32 + 4 · persistent_elems` (u32 LE) |
//! | 12..16 | crc32 | CRC-32 (ISO-HDLC) of every byte but these four (u32 LE) |
//! | 16..20 | plan_id | the plan's [`Plan::plan_id`] (u32 LE) |
//! | 20..24 | persistent_elems | the plan's [`Plan::persistent_elems`] (u32 LE) |
//! | 24..28 | sequence | caller-chosen save counter (u32 LE) |
//! | 28..32 | reserved | 0 |
//! | 32.. | payload | the persistent region, each `f32` as its 4 little-endian bytes |
//!
//! Reading is two-stage, like plans: [`Checkpoint::parse`] checks the blob on its own (magic,
//! version, lengths, CRC), then [`Checkpoint::restore`] checks it against the session's plan
//! (`plan_id`, `persistent_elems`) and only then writes the arena. Every check happens before
//! the first write, so a rejected checkpoint leaves the arena exactly as it was.

use core::fmt;

use tapeplan_core::format::CRC32;
use tapeplan_core::Ops;

use crate::plan::Plan;
use crate::session::Session;

/// The first four bytes of every checkpoint.
pub const CHECKPOINT_MAGIC: [u8; 4] = *b"TPCK";
/// The checkpoint format version this runtime writes and reads.
pub const CHECKPOINT_VERSION: u16 = 1;
/// The checkpoint header's size in bytes; the payload starts here.
pub const CHECKPOINT_HEADER_BYTES: usize = 32;
/// Where the CRC-32 sits in the header; the checksum covers every other byte.
pub const CHECKPOINT_CRC_OFFSET: usize = 12;

const HEADER_BYTES_U16: u16 = 32;
const _: () = assert!(HEADER_BYTES_U16 as usize == CHECKPOINT_HEADER_BYTES);

/// Why a checkpoint could not be written or was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointError {
    /// Saving: the output buffer is shorter than [`checkpoint_bytes`].
    BufferTooSmall {
        /// The bytes the checkpoint needs.
        needed_bytes: usize,
        /// The buffer's length.
        found_bytes: usize,
    },
    /// Saving: the persistent slice's length is not the plan's `persistent_elems`.
    PersistentLength {
        /// The plan's `persistent_elems`.
        expected_elems: usize,
        /// The slice's length.
        found_elems: usize,
    },
    /// The bytes end before the header, or before `total_bytes` says the checkpoint ends.
    Truncated {
        /// The bytes the checkpoint needs.
        needed_bytes: usize,
        /// The bytes given.
        found_bytes: usize,
    },
    /// More bytes were given than `total_bytes` says ([`Checkpoint::parse`] is exact; use
    /// [`Checkpoint::parse_prefix`] for a blob at the start of a larger slot).
    TrailingBytes {
        /// `total_bytes` from the header.
        expected_bytes: usize,
        /// The bytes given.
        found_bytes: usize,
    },
    /// The first four bytes are not `TPCK` (an erased flash slot reads `ff ff ff ff`).
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// A checkpoint version later than the one this runtime reads; it is not guessed at.
    FutureVersion {
        /// The version found.
        found: u16,
        /// The version this runtime reads.
        supported: u16,
    },
    /// Version 0, which never existed.
    UnknownVersion {
        /// The version found.
        found: u16,
    },
    /// `header_bytes` is not 32.
    BadHeaderBytes {
        /// The value found.
        found: u16,
    },
    /// `total_bytes` is not `32 + 4 · persistent_elems`.
    SizeMismatch {
        /// `persistent_elems` from the header.
        persistent_elems: u32,
        /// `total_bytes` from the header.
        total_bytes: u32,
    },
    /// The stored CRC-32 does not match the bytes.
    BadChecksum {
        /// The CRC stored in the header.
        stored: u32,
        /// The CRC of the bytes.
        computed: u32,
    },
    /// The reserved word is not 0.
    Reserved {
        /// The word found.
        found: u32,
    },
    /// The checkpoint was saved from another plan.
    WrongPlan {
        /// The checkpoint's `plan_id`.
        checkpoint_plan_id: u32,
        /// The session's plan's `plan_id`.
        plan_id: u32,
    },
    /// The checkpoint's persistent region has another size than the plan's.
    WrongPersistentElems {
        /// The checkpoint's `persistent_elems`.
        checkpoint_elems: usize,
        /// The plan's `persistent_elems`.
        plan_elems: usize,
    },
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use CheckpointError as E;
        match *self {
            E::BufferTooSmall {
                needed_bytes,
                found_bytes,
            } => write!(
                f,
                "checkpoint buffer of {found_bytes} bytes is smaller than the {needed_bytes} needed"
            ),
            E::PersistentLength {
                expected_elems,
                found_elems,
            } => write!(
                f,
                "persistent region of {found_elems} elements given where the plan has {expected_elems}"
            ),
            E::Truncated {
                needed_bytes,
                found_bytes,
            } => write!(
                f,
                "checkpoint truncated: {found_bytes} bytes where {needed_bytes} are needed"
            ),
            E::TrailingBytes {
                expected_bytes,
                found_bytes,
            } => write!(
                f,
                "{found_bytes} bytes given where the checkpoint says it has {expected_bytes}"
            ),
            E::BadMagic { found } => write!(f, "bad magic {found:02x?}, expected \"TPCK\""),
            E::FutureVersion { found, supported } => write!(
                f,
                "checkpoint version {found} is newer than the supported version {supported}"
            ),
            E::UnknownVersion { found } => write!(f, "unknown checkpoint version {found}"),
            E::BadHeaderBytes { found } => write!(f, "header_bytes is {found}, expected 32"),
            E::SizeMismatch {
                persistent_elems,
                total_bytes,
            } => write!(
                f,
                "total_bytes is {total_bytes} but {persistent_elems} persistent elements imply 32 + 4 * {persistent_elems}"
            ),
            E::BadChecksum { stored, computed } => write!(
                f,
                "checkpoint checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
            E::Reserved { found } => write!(f, "reserved word is {found:#x}, expected 0"),
            E::WrongPlan {
                checkpoint_plan_id,
                plan_id,
            } => write!(
                f,
                "checkpoint belongs to plan {checkpoint_plan_id:08x}, not to this plan {plan_id:08x}"
            ),
            E::WrongPersistentElems {
                checkpoint_elems,
                plan_elems,
            } => write!(
                f,
                "checkpoint holds {checkpoint_elems} persistent elements, the plan has {plan_elems}"
            ),
        }
    }
}

impl core::error::Error for CheckpointError {}

/// The size of a checkpoint of `plan`, in bytes: `32 + 4 · persistent_elems` (saturating, so
/// a size no buffer can hold never wraps to a small one).
pub fn checkpoint_bytes(plan: &Plan<'_>) -> usize {
    payload_bytes(plan.persistent_elems()).saturating_add(CHECKPOINT_HEADER_BYTES)
}

fn payload_bytes(persistent_elems: usize) -> usize {
    persistent_elems.saturating_mul(4)
}

/// CRC-32 of `bytes` without the four bytes at [`CHECKPOINT_CRC_OFFSET`]; `bytes` is at least
/// a header long.
fn checkpoint_crc(bytes: &[u8]) -> u32 {
    let mut d = CRC32.digest();
    d.update(bytes.get(..CHECKPOINT_CRC_OFFSET).unwrap_or(&[]));
    d.update(
        bytes
            .get(CHECKPOINT_CRC_OFFSET.saturating_add(4)..)
            .unwrap_or(&[]),
    );
    d.finalize()
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    let mut x = [0u8; 2];
    if let Some(s) = b.get(at..at.saturating_add(2)) {
        x.copy_from_slice(s);
    }
    u16::from_le_bytes(x)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    if let Some(s) = b.get(at..at.saturating_add(4)) {
        x.copy_from_slice(s);
    }
    u32::from_le_bytes(x)
}

fn put(b: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(s) = b.get_mut(at..at.saturating_add(bytes.len())) {
        s.copy_from_slice(bytes);
    }
}

/// Writes a checkpoint of `persistent` (a plan's whole persistent region) into
/// `out[..checkpoint_bytes(plan)]` and answers the bytes written; bytes of `out` past those
/// are not touched. `sequence` is stored as is: a save counter for the two-slot scheme of
/// `docs/checkpoints.md` (the `tapeplan` CLI stores the number of completed epochs).
///
/// Use [`save_checkpoint`] with a [`Session`]; this form serves callers that hold the region
/// without a session (the host's `RuntimeModel`).
///
/// # Shapes
/// `persistent: [persistent_elems]`.
///
/// # Errors
/// [`CheckpointError::PersistentLength`] when `persistent.len()` is not the plan's
/// `persistent_elems`; [`CheckpointError::BufferTooSmall`] when `out` is shorter than
/// [`checkpoint_bytes`]. Nothing is written on error.
pub fn write_checkpoint(
    plan: &Plan<'_>,
    persistent: &[f32],
    sequence: u32,
    out: &mut [u8],
) -> Result<usize, CheckpointError> {
    let elems = plan.persistent_elems();
    if persistent.len() != elems {
        return Err(CheckpointError::PersistentLength {
            expected_elems: elems,
            found_elems: persistent.len(),
        });
    }
    let total_bytes = checkpoint_bytes(plan);
    let too_small = CheckpointError::BufferTooSmall {
        needed_bytes: total_bytes,
        found_bytes: out.len(),
    };
    // A validated plan's persistent region fits a u32 count; its byte size may not.
    let (Ok(total_u32), Ok(elems_u32)) = (u32::try_from(total_bytes), u32::try_from(elems)) else {
        return Err(too_small);
    };
    let blob = out.get_mut(..total_bytes).ok_or(too_small)?;
    let (header, payload) = blob
        .split_at_mut_checked(CHECKPOINT_HEADER_BYTES)
        .ok_or(too_small)?;
    for (dst, v) in payload.chunks_exact_mut(4).zip(persistent) {
        dst.copy_from_slice(&v.to_bits().to_le_bytes());
    }
    put(header, 0, &CHECKPOINT_MAGIC);
    put(header, 4, &CHECKPOINT_VERSION.to_le_bytes());
    put(header, 6, &HEADER_BYTES_U16.to_le_bytes());
    put(header, 8, &total_u32.to_le_bytes());
    put(header, 12, &0u32.to_le_bytes());
    put(header, 16, &plan.plan_id().to_le_bytes());
    put(header, 20, &elems_u32.to_le_bytes());
    put(header, 24, &sequence.to_le_bytes());
    put(header, 28, &0u32.to_le_bytes());
    let crc = checkpoint_crc(blob);
    put(blob, CHECKPOINT_CRC_OFFSET, &crc.to_le_bytes());
    Ok(total_bytes)
}

/// Writes a checkpoint of the session's whole persistent region (parameters, optimizer
/// state, generator state, step counter) into `out` and answers the bytes written
/// ([`checkpoint_bytes`]). See [`write_checkpoint`] for `sequence`.
///
/// # Errors
/// [`CheckpointError::BufferTooSmall`] when `out` is shorter than [`checkpoint_bytes`];
/// nothing is written then.
pub fn save_checkpoint<O: Ops>(
    session: &Session<'_, '_, O>,
    sequence: u32,
    out: &mut [u8],
) -> Result<usize, CheckpointError> {
    write_checkpoint(session.plan(), session.persistent(), sequence, out)
}

/// Checks `bytes` as a checkpoint ([`Checkpoint::parse`]), then against the session's plan,
/// then copies its payload over the persistent region. Answers the checkpoint's `sequence`.
///
/// # Errors
/// Any [`CheckpointError`] of [`Checkpoint::parse`] or [`Checkpoint::restore`]; the arena is
/// untouched then.
pub fn restore_checkpoint<O: Ops>(
    session: &mut Session<'_, '_, O>,
    bytes: &[u8],
) -> Result<u32, CheckpointError> {
    let ckpt = Checkpoint::parse(bytes)?;
    ckpt.restore(session)?;
    Ok(ckpt.sequence())
}

/// A checked checkpoint: a zero-copy view of its bytes whose header, lengths and CRC are
/// known good. It says nothing yet about which plan it fits: [`Checkpoint::restore`] checks
/// that.
#[derive(Clone, Copy, Debug)]
pub struct Checkpoint<'a> {
    payload: &'a [u8],
    plan_id: u32,
    persistent_elems: u32,
    sequence: u32,
}

impl<'a> Checkpoint<'a> {
    /// Checks a checkpoint that is exactly `bytes`: magic, version, header size, lengths,
    /// CRC-32, reserved word, in that order.
    ///
    /// # Errors
    /// [`CheckpointError::Truncated`], [`CheckpointError::BadMagic`],
    /// [`CheckpointError::FutureVersion`], [`CheckpointError::UnknownVersion`],
    /// [`CheckpointError::BadHeaderBytes`], [`CheckpointError::SizeMismatch`],
    /// [`CheckpointError::TrailingBytes`], [`CheckpointError::BadChecksum`],
    /// [`CheckpointError::Reserved`].
    pub fn parse(bytes: &'a [u8]) -> Result<Checkpoint<'a>, CheckpointError> {
        let ckpt = Checkpoint::parse_prefix(bytes)?;
        let total = ckpt.total_bytes();
        if bytes.len() > total {
            return Err(CheckpointError::TrailingBytes {
                expected_bytes: total,
                found_bytes: bytes.len(),
            });
        }
        Ok(ckpt)
    }

    /// Checks a checkpoint at the start of `bytes`, ignoring whatever follows its
    /// `total_bytes` (a flash slot larger than the blob). Same checks as [`Checkpoint::parse`]
    /// otherwise.
    ///
    /// # Errors
    /// As [`Checkpoint::parse`], but never [`CheckpointError::TrailingBytes`].
    pub fn parse_prefix(bytes: &'a [u8]) -> Result<Checkpoint<'a>, CheckpointError> {
        let header = bytes
            .get(..CHECKPOINT_HEADER_BYTES)
            .ok_or(CheckpointError::Truncated {
                needed_bytes: CHECKPOINT_HEADER_BYTES,
                found_bytes: bytes.len(),
            })?;
        let mut magic = [0u8; 4];
        magic.copy_from_slice(header.get(..4).unwrap_or(&[0; 4]));
        if magic != CHECKPOINT_MAGIC {
            return Err(CheckpointError::BadMagic { found: magic });
        }
        let version = u16_at(header, 4);
        if version > CHECKPOINT_VERSION {
            return Err(CheckpointError::FutureVersion {
                found: version,
                supported: CHECKPOINT_VERSION,
            });
        }
        if version != CHECKPOINT_VERSION {
            return Err(CheckpointError::UnknownVersion { found: version });
        }
        let header_bytes = u16_at(header, 6);
        if usize::from(header_bytes) != CHECKPOINT_HEADER_BYTES {
            return Err(CheckpointError::BadHeaderBytes {
                found: header_bytes,
            });
        }
        let total_bytes = u32_at(header, 8);
        let stored = u32_at(header, 12);
        let plan_id = u32_at(header, 16);
        let persistent_elems = u32_at(header, 20);
        let sequence = u32_at(header, 24);
        let reserved = u32_at(header, 28);
        let implied = u64::from(persistent_elems)
            .checked_mul(4)
            .and_then(|p| p.checked_add(CHECKPOINT_HEADER_BYTES as u64));
        if implied != Some(u64::from(total_bytes)) {
            return Err(CheckpointError::SizeMismatch {
                persistent_elems,
                total_bytes,
            });
        }
        let total = usize::try_from(total_bytes).unwrap_or(usize::MAX);
        let blob = bytes.get(..total).ok_or(CheckpointError::Truncated {
            needed_bytes: total,
            found_bytes: bytes.len(),
        })?;
        let computed = checkpoint_crc(blob);
        if computed != stored {
            return Err(CheckpointError::BadChecksum { stored, computed });
        }
        if reserved != 0 {
            return Err(CheckpointError::Reserved { found: reserved });
        }
        Ok(Checkpoint {
            payload: blob.get(CHECKPOINT_HEADER_BYTES..).unwrap_or(&[]),
            plan_id,
            persistent_elems,
            sequence,
        })
    }

    /// The `plan_id` of the plan the checkpoint was saved from.
    pub fn plan_id(&self) -> u32 {
        self.plan_id
    }

    /// The size of the saved persistent region, in elements.
    pub fn persistent_elems(&self) -> usize {
        crate::plan::us(self.persistent_elems)
    }

    /// The save counter given to [`write_checkpoint`].
    pub fn sequence(&self) -> u32 {
        self.sequence
    }

    /// The checkpoint's size in bytes (`total_bytes`).
    pub fn total_bytes(&self) -> usize {
        self.payload.len().saturating_add(CHECKPOINT_HEADER_BYTES)
    }

    /// The saved persistent region, element by element (the exact bits that were saved).
    pub fn values(&self) -> impl ExactSizeIterator<Item = f32> + 'a {
        self.payload.chunks_exact(4).map(|c| {
            let mut x = [0u8; 4];
            x.copy_from_slice(c);
            f32::from_bits(u32::from_le_bytes(x))
        })
    }

    /// Checks that the checkpoint fits `plan`: same `plan_id`, same `persistent_elems`.
    ///
    /// # Errors
    /// [`CheckpointError::WrongPlan`], [`CheckpointError::WrongPersistentElems`].
    pub fn check_plan(&self, plan: &Plan<'_>) -> Result<(), CheckpointError> {
        if self.plan_id != plan.plan_id() {
            return Err(CheckpointError::WrongPlan {
                checkpoint_plan_id: self.plan_id,
                plan_id: plan.plan_id(),
            });
        }
        if self.persistent_elems() != plan.persistent_elems() {
            return Err(CheckpointError::WrongPersistentElems {
                checkpoint_elems: self.persistent_elems(),
                plan_elems: plan.persistent_elems(),
            });
        }
        Ok(())
    }

    /// Copies the saved persistent region over the session's, after
    /// [`Checkpoint::check_plan`]. Scratch is not touched (every entry rewrites what it reads
    /// there).
    ///
    /// # Errors
    /// As [`Checkpoint::check_plan`]; the arena is untouched then.
    pub fn restore<O: Ops>(&self, session: &mut Session<'_, '_, O>) -> Result<(), CheckpointError> {
        self.check_plan(session.plan())?;
        let dst = session.persistent_mut();
        if dst.len() != self.values().len() {
            // The session's region is the plan's, checked above; kept as a guard.
            return Err(CheckpointError::WrongPersistentElems {
                checkpoint_elems: self.persistent_elems(),
                plan_elems: dst.len(),
            });
        }
        for (d, v) in dst.iter_mut().zip(self.values()) {
            *d = v;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn crc_skips_its_own_field() {
        let mut a = [7u8; 40];
        let b = a;
        a[12..16].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(checkpoint_crc(&a), checkpoint_crc(&b));
        a[20] ^= 1;
        assert_ne!(checkpoint_crc(&a), checkpoint_crc(&b));
    }
}
