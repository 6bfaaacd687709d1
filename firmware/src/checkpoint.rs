//! Checkpoints in flash that survive a power cut at any point of a save.
//!
//! A [`CheckpointStore`] keeps the plan's training state (the persistent region: parameters,
//! optimizer state, generator state, step counter) in a range of NOR flash, in exactly the
//! bytes of the host's checkpoint format (`TPCK` version 1, `docs/checkpoints.md`), so the host
//! reads what a device saved. The flash is driven by the
//! [`sequential-storage`](https://docs.rs/sequential-storage) crate's map (a power-fail-safe,
//! wear-levelled key-value log: every item is written with a CRC-checked header and data, an
//! interrupted write or erase is repaired by the next operation, and a key reads its last
//! complete value). Over that map this module keeps the documented A/B scheme:
//!
//! - Two slots, 0 and 1. Slot `s` is the item `s << 24` (the 32-byte checkpoint header, the
//!   *commit* record) and the items `s << 24 | (i + 1)` (the payload's chunk `i`).
//! - [`CheckpointStore::save`] writes the slot that does not hold the newest valid checkpoint:
//!   it first stores an empty commit record there (the slot is now invalid), then every
//!   payload chunk, then the header (with the CRC-32 over the whole blob and `sequence` = the
//!   newest + 1). The slot holding the newest checkpoint is never written during a save.
//! - [`CheckpointStore::load`] checks each slot's header, its plan, and the CRC-32 over header
//!   and payload as it streams through the chunks, and restores the newest valid slot
//!   (serial-number order of `sequence`). Nothing is written into the arena unless the slot
//!   checked out.
//!
//! A power cut at any write or erase of a save therefore leaves either the previous complete
//! checkpoint (the commit record of the new slot is still empty, or the map's log rolled back
//! to it) or the new complete one (the commit record is written); `load` never sees a mix. The
//! tests in `firmware/tests/checkpoint.rs` cut the power at every write and erase of a save.
//!
//! Chunks: sequential-storage caps an item at one flash page less its page and item headers
//! (and at 65 535 bytes), so the payload is split into chunks of
//! [`CheckpointStore::chunk_bytes`] bytes (a multiple of 4; also capped by the work buffer
//! given to [`CheckpointStore::new`]). RAM: only that work buffer; the payload is streamed
//! between the arena and the flash, never copied whole.
//!
//! sequential-storage is async-only; its futures complete without ever waiting on a blocking
//! flash, so this module drives them with `embassy_futures::block_on` over an adapter that
//! presents any blocking `embedded_storage::nor_flash::NorFlash` as its async counterpart.

use core::fmt;
use core::ops::Range;

use embassy_futures::block_on;
use embedded_storage::nor_flash::{ErrorType, NorFlash, ReadNorFlash};
use sequential_storage::cache::{Cache, Uncached};
use sequential_storage::map::{MapConfig, MapConfigError, MapStorage, SerializationError, Value};
use tapeplan_core::format::CRC32;
use tapeplan_core::Ops;
use tapeplan_runtime::{CheckpointError, Plan, Session};

/// The checkpoint header's size in bytes (the commit record).
const HEADER_BYTES: usize = 32;
/// The map's key bytes (a `u32`).
const KEY_BYTES: usize = 4;
/// sequential-storage's item header, in bytes, before rounding up to the flash word.
const ITEM_HEADER_BYTES: usize = 8;

/// A blocking NOR flash presented as `embedded-storage-async`'s, for sequential-storage.
struct Blocking<F>(F);

impl<F: ErrorType> embedded_storage_async::nor_flash::ErrorType for Blocking<F> {
    type Error = F::Error;
}

impl<F: ReadNorFlash> embedded_storage_async::nor_flash::ReadNorFlash for Blocking<F> {
    const READ_SIZE: usize = F::READ_SIZE;

    async fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        self.0.read(offset, bytes)
    }

    fn capacity(&self) -> usize {
        self.0.capacity()
    }
}

impl<F: NorFlash> embedded_storage_async::nor_flash::NorFlash for Blocking<F> {
    const WRITE_SIZE: usize = F::WRITE_SIZE;
    const ERASE_SIZE: usize = F::ERASE_SIZE;

    async fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        self.0.erase(from, to)
    }

    async fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        self.0.write(offset, bytes)
    }
}

/// Why a checkpoint could not be stored or loaded.
#[derive(Debug)]
pub enum StoreError<E> {
    /// The flash range does not suit the map: not page-aligned, fewer than 2 pages, pages too
    /// small, or words too large.
    Config(MapConfigError),
    /// The flash's pages are too small for a checkpoint's header item (32 bytes, its key and
    /// the map's page and item headers).
    PageTooSmall {
        /// The flash's page (`ERASE_SIZE`), in bytes.
        page_bytes: usize,
        /// The least page that holds the header item.
        needed_bytes: usize,
    },
    /// The work buffer is too small: found and needed bytes.
    WorkTooSmall {
        /// The work buffer's length.
        found_bytes: usize,
        /// The least it must hold.
        needed_bytes: usize,
    },
    /// The flash driver failed.
    Flash(E),
    /// The flash range cannot hold two checkpoints of this size (plus the map's spare page).
    Full,
    /// sequential-storage found the flash corrupted beyond its repair (not a power cut: a
    /// damaged part or foreign content in the range).
    Corrupted,
    /// No slot holds a valid checkpoint of this plan, and the newest committed slot is
    /// rejected for this reason (another plan's checkpoint: `WrongPlan`; damaged bytes:
    /// `BadChecksum`, ...).
    Rejected(CheckpointError),
    /// sequential-storage reported another error (a bug in it or here); its text.
    Storage(&'static str),
}

impl<E: fmt::Debug> fmt::Display for StoreError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Config(e) => write!(f, "flash range unusable for checkpoints: {e:?}"),
            StoreError::WorkTooSmall {
                found_bytes,
                needed_bytes,
            } => write!(
                f,
                "checkpoint work buffer of {found_bytes} bytes is smaller than the {needed_bytes} needed"
            ),
            StoreError::PageTooSmall {
                page_bytes,
                needed_bytes,
            } => write!(
                f,
                "a flash page of {page_bytes} bytes cannot hold a checkpoint's header item ({needed_bytes} bytes at least)"
            ),
            StoreError::Flash(e) => write!(f, "flash: {e:?}"),
            StoreError::Full => write!(f, "the flash range cannot hold two checkpoints"),
            StoreError::Corrupted => write!(f, "checkpoint flash corrupted beyond repair"),
            StoreError::Rejected(e) => write!(f, "no usable checkpoint: {e}"),
            StoreError::Storage(what) => write!(f, "sequential-storage: {what}"),
        }
    }
}

impl<E> StoreError<E> {
    /// What went wrong, without the details (for [`crate::train::Failure::Checkpoint`]).
    pub fn what(&self) -> &'static str {
        match self {
            StoreError::Config(_) => "flash range unusable",
            StoreError::PageTooSmall { .. } => "flash pages too small",
            StoreError::WorkTooSmall { .. } => "work buffer too small",
            StoreError::Flash(_) => "flash driver error",
            StoreError::Full => "flash range cannot hold two checkpoints",
            StoreError::Corrupted => "flash corrupted beyond repair",
            StoreError::Rejected(CheckpointError::WrongPlan { .. }) => {
                "the flash holds a checkpoint of another plan"
            }
            StoreError::Rejected(_) => "the flash holds a damaged checkpoint",
            StoreError::Storage(what) => what,
        }
    }
}

impl<E> From<sequential_storage::Error<E>> for StoreError<E> {
    fn from(e: sequential_storage::Error<E>) -> Self {
        use sequential_storage::Error as S;
        match e {
            S::Storage { value, .. } => StoreError::Flash(value),
            S::FullStorage | S::ItemTooBig => StoreError::Full,
            S::Corrupted { .. } => StoreError::Corrupted,
            S::LogicBug { .. } => StoreError::Storage("logic bug"),
            S::BufferTooBig => StoreError::Storage("buffer too big"),
            S::BufferTooSmall(_) => StoreError::Storage("buffer too small"),
            S::SerializationError(_) => StoreError::Storage("serialization error"),
            _ => StoreError::Storage("unknown error"),
        }
    }
}

/// A payload chunk: elements serialized straight into the map's buffer as IEEE-754 binary32
/// bits, little-endian (the checkpoint payload's bytes). Only ever stored; read back as bytes.
struct F32Chunk<'e>(&'e [f32]);

impl<'a> Value<'a> for F32Chunk<'_> {
    fn serialize_into(&self, buffer: &mut [u8]) -> Result<usize, SerializationError> {
        let n = self.0.len() * 4;
        let out = buffer
            .get_mut(..n)
            .ok_or(SerializationError::BufferTooSmall)?;
        for (b, v) in out.chunks_exact_mut(4).zip(self.0) {
            b.copy_from_slice(&v.to_bits().to_le_bytes());
        }
        Ok(n)
    }

    fn deserialize_from(_: &'a [u8]) -> Result<(Self, usize), SerializationError> {
        Err(SerializationError::InvalidFormat)
    }
}

/// A slot's committed header, checked on its own (not yet against the payload's CRC).
#[derive(Clone, Copy, Debug)]
struct Header {
    bytes: [u8; HEADER_BYTES],
    persistent_elems: usize,
    sequence: u32,
    crc: u32,
}

fn u32_at(b: &[u8; HEADER_BYTES], at: usize) -> u32 {
    let mut x = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        x.copy_from_slice(s);
    }
    u32::from_le_bytes(x)
}

/// The header of a checkpoint of `persistent_elems` elements, CRC field zero.
fn header_for(plan_id: u32, persistent_elems: usize, sequence: u32) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    let total = (HEADER_BYTES + persistent_elems * 4) as u32;
    h[0..4].copy_from_slice(b"TPCK");
    h[4..6].copy_from_slice(&1u16.to_le_bytes());
    h[6..8].copy_from_slice(&(HEADER_BYTES as u16).to_le_bytes());
    h[8..12].copy_from_slice(&total.to_le_bytes());
    h[16..20].copy_from_slice(&plan_id.to_le_bytes());
    h[20..24].copy_from_slice(&(persistent_elems as u32).to_le_bytes());
    h[24..28].copy_from_slice(&sequence.to_le_bytes());
    h
}

impl Header {
    /// Checks a commit record as `Checkpoint::parse_prefix` checks a header (magic, version,
    /// header size, size, reserved), then against the plan.
    fn check(bytes: &[u8], plan: &Plan<'_>) -> Result<Header, CheckpointError> {
        let mut h = [0u8; HEADER_BYTES];
        let Some(src) = bytes.get(..HEADER_BYTES) else {
            return Err(CheckpointError::Truncated {
                needed_bytes: HEADER_BYTES,
                found_bytes: bytes.len(),
            });
        };
        h.copy_from_slice(src);
        let mut magic = [0u8; 4];
        magic.copy_from_slice(&h[0..4]);
        if &magic != b"TPCK" {
            return Err(CheckpointError::BadMagic { found: magic });
        }
        let version = u16::from_le_bytes([h[4], h[5]]);
        if version > 1 {
            return Err(CheckpointError::FutureVersion {
                found: version,
                supported: 1,
            });
        }
        if version != 1 {
            return Err(CheckpointError::UnknownVersion { found: version });
        }
        let header_bytes = u16::from_le_bytes([h[6], h[7]]);
        if usize::from(header_bytes) != HEADER_BYTES {
            return Err(CheckpointError::BadHeaderBytes {
                found: header_bytes,
            });
        }
        let total_bytes = u32_at(&h, 8);
        let persistent_elems = u32_at(&h, 20);
        if u64::from(persistent_elems) * 4 + HEADER_BYTES as u64 != u64::from(total_bytes) {
            return Err(CheckpointError::SizeMismatch {
                persistent_elems,
                total_bytes,
            });
        }
        let reserved = u32_at(&h, 28);
        if reserved != 0 {
            return Err(CheckpointError::Reserved { found: reserved });
        }
        let plan_id = u32_at(&h, 16);
        if plan_id != plan.plan_id() {
            return Err(CheckpointError::WrongPlan {
                checkpoint_plan_id: plan_id,
                plan_id: plan.plan_id(),
            });
        }
        let elems = persistent_elems as usize;
        if elems != plan.persistent_elems() {
            return Err(CheckpointError::WrongPersistentElems {
                checkpoint_elems: elems,
                plan_elems: plan.persistent_elems(),
            });
        }
        Ok(Header {
            bytes: h,
            persistent_elems: elems,
            sequence: u32_at(&h, 24),
            crc: u32_at(&h, 12),
        })
    }
}

/// The newest valid slot and its header, `None` when no slot was committed, or the newest
/// committed slot's rejection.
type Newest = Result<Option<(u32, Header)>, CheckpointError>;

/// Whether `b` is newer than `a` in serial-number arithmetic (the counter may wrap).
fn newer(b: u32, a: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}

/// Two checkpoint slots in a range of NOR flash, over sequential-storage's map; see the
/// [module docs](self).
pub struct CheckpointStore<'w, F: NorFlash> {
    map: MapStorage<u32, Blocking<F>, Cache<Uncached, Uncached, Uncached, u32>>,
    work: &'w mut [u8],
    chunk_bytes: usize,
}

impl<'w, F: NorFlash> CheckpointStore<'w, F> {
    /// A store over `flash_range` (byte offsets in `flash`, page-aligned, at least 2 pages)
    /// with `work` as its only buffer.
    ///
    /// The payload chunk is the largest multiple of 4 bytes that fits both one flash item
    /// (`ERASE_SIZE` less the page's two state words, the item header rounded up to a word,
    /// and the 4-byte key; at most 65 535 bytes) and `work` less the key (rounded up to a
    /// word). The range should hold two checkpoints in chunks, each chunk's item overhead, and
    /// one spare page the map needs to move items.
    ///
    /// # Errors
    /// [`StoreError::Config`] when the range does not suit the map;
    /// [`StoreError::PageTooSmall`] when a flash page cannot hold the header item;
    /// [`StoreError::WorkTooSmall`] when `work` cannot hold a header item (32 bytes plus the
    /// key and word padding).
    pub fn new(
        flash: F,
        flash_range: Range<u32>,
        work: &'w mut [u8],
    ) -> Result<Self, StoreError<F::Error>> {
        let config = MapConfig::<Blocking<F>>::try_new(flash_range).map_err(StoreError::Config)?;
        let word = F::WRITE_SIZE.max(1);
        let round_up = |n: usize| n.div_ceil(word) * word;
        let page_item_bytes = F::ERASE_SIZE
            .saturating_sub(2 * word)
            .saturating_sub(round_up(ITEM_HEADER_BYTES))
            / word
            * word;
        let item_bytes = page_item_bytes.min(0xFFFF);
        let needed_bytes = round_up(KEY_BYTES + HEADER_BYTES);
        if item_bytes.saturating_sub(KEY_BYTES) / 4 * 4 < HEADER_BYTES {
            return Err(StoreError::PageTooSmall {
                page_bytes: F::ERASE_SIZE,
                needed_bytes: needed_bytes + 2 * word + round_up(ITEM_HEADER_BYTES),
            });
        }
        let work_item_bytes = work.len() / word * word;
        let chunk_bytes = item_bytes.min(work_item_bytes).saturating_sub(KEY_BYTES) / 4 * 4;
        if chunk_bytes < HEADER_BYTES || work.len() < needed_bytes {
            return Err(StoreError::WorkTooSmall {
                found_bytes: work.len(),
                needed_bytes,
            });
        }
        Ok(CheckpointStore {
            map: MapStorage::new(Blocking(flash), config, Cache::new_uncached()),
            work,
            chunk_bytes,
        })
    }

    /// The payload bytes each flash item holds (a multiple of 4).
    pub fn chunk_bytes(&self) -> usize {
        self.chunk_bytes
    }

    /// Gives the flash back.
    pub fn into_flash(self) -> F {
        self.map.destroy().0 .0
    }

    fn key(slot: u32, item: u32) -> u32 {
        slot << 24 | item
    }

    /// Slot `slot`'s committed header, checked against `plan`; `Ok(None)` when there is none
    /// (never written, or emptied by a save in progress).
    fn header(
        &mut self,
        slot: u32,
        plan: &Plan<'_>,
    ) -> Result<Option<Result<Header, CheckpointError>>, StoreError<F::Error>> {
        let got: Option<&[u8]> = block_on(self.map.fetch_item(self.work, &Self::key(slot, 0)))?;
        Ok(match got {
            None | Some([]) => None,
            Some(bytes) => Some(Header::check(bytes, plan)),
        })
    }

    /// Streams slot `slot`'s chunks through the CRC (and into `dst` when given). Answers the
    /// CRC-32 of the blob, or `None` when a chunk is missing or of the wrong length.
    fn stream(
        &mut self,
        slot: u32,
        header: &Header,
        mut dst: Option<&mut [f32]>,
    ) -> Result<Option<u32>, StoreError<F::Error>> {
        let mut d = CRC32.digest();
        d.update(&header.bytes[..12]);
        d.update(&header.bytes[16..]);
        let payload_bytes = header.persistent_elems * 4;
        let chunk_elems = self.chunk_bytes / 4;
        let mut at_bytes = 0;
        let mut item = 1u32;
        while at_bytes < payload_bytes {
            let want = self.chunk_bytes.min(payload_bytes - at_bytes);
            let got: Option<&[u8]> =
                block_on(self.map.fetch_item(self.work, &Self::key(slot, item)))?;
            let Some(bytes) = got.filter(|b| b.len() == want) else {
                return Ok(None);
            };
            d.update(bytes);
            if let Some(dst) = dst.as_deref_mut() {
                let first = (item as usize - 1) * chunk_elems;
                let out = dst.get_mut(first..first + want / 4).into_iter().flatten();
                for (v, b) in out.zip(bytes.chunks_exact(4)) {
                    *v = f32::from_bits(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                }
            }
            at_bytes += want;
            item += 1;
        }
        Ok(Some(d.finalize()))
    }

    /// Slot `slot` checked through: `None` when empty, else its header or why it is refused.
    fn check_slot(
        &mut self,
        slot: u32,
        plan: &Plan<'_>,
    ) -> Result<Option<Result<Header, CheckpointError>>, StoreError<F::Error>> {
        let Some(h) = self.header(slot, plan)? else {
            return Ok(None);
        };
        let h = match h {
            Ok(h) => h,
            Err(e) => return Ok(Some(Err(e))),
        };
        let computed = self.stream(slot, &h, None)?;
        Ok(Some(match computed {
            Some(c) if c == h.crc => Ok(h),
            Some(c) => Err(CheckpointError::BadChecksum {
                stored: h.crc,
                computed: c,
            }),
            None => Err(CheckpointError::Truncated {
                needed_bytes: HEADER_BYTES + h.persistent_elems * 4,
                found_bytes: HEADER_BYTES,
            }),
        }))
    }

    /// The newest valid slot of `plan` and its header; else the newest committed slot's
    /// rejection, if any slot was committed.
    fn newest(&mut self, plan: &Plan<'_>) -> Result<Newest, StoreError<F::Error>> {
        let mut best: Option<(u32, Header)> = None;
        let mut rejected: Option<CheckpointError> = None;
        for slot in 0..2 {
            match self.check_slot(slot, plan)? {
                None => {}
                Some(Ok(h)) if best.is_none_or(|(_, b)| newer(h.sequence, b.sequence)) => {
                    best = Some((slot, h));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => rejected = rejected.or(Some(e)),
            }
        }
        Ok(match (best, rejected) {
            (Some(b), _) => Ok(Some(b)),
            (None, Some(e)) => Err(e),
            (None, None) => Ok(None),
        })
    }

    /// The `sequence` of the newest valid checkpoint of `plan` in the store, without
    /// restoring it; `None` when there is none.
    ///
    /// # Errors
    /// As [`CheckpointStore::load`].
    pub fn newest_sequence(
        &mut self,
        plan: &Plan<'_>,
    ) -> Result<Option<u32>, StoreError<F::Error>> {
        match self.newest(plan)? {
            Ok(b) => Ok(b.map(|(_, h)| h.sequence)),
            Err(e) => Err(StoreError::Rejected(e)),
        }
    }

    /// Saves the session's persistent region as the newest checkpoint, in the slot that does
    /// not hold the current newest one, and answers its `sequence` (the newest's + 1, or 1).
    /// A power cut during the save leaves the previous newest checkpoint loadable.
    ///
    /// # Errors
    /// [`StoreError::Full`] when the range cannot hold two checkpoints (nothing of the
    /// previous one is lost); [`StoreError::Flash`] from the driver; [`StoreError::Corrupted`]
    /// when sequential-storage cannot repair the range.
    pub fn save<O: Ops>(
        &mut self,
        session: &Session<'_, '_, O>,
    ) -> Result<u32, StoreError<F::Error>> {
        let plan = session.plan();
        let (slot, sequence) = match self.newest(plan)? {
            Ok(Some((active, h))) => (1 - active, h.sequence.wrapping_add(1)),
            _ => (0, 1),
        };
        // Uncommit the slot first: from here until its header is written it is empty.
        block_on(
            self.map
                .store_item(self.work, &Self::key(slot, 0), &(&[][..])),
        )?;
        let persistent = session.persistent();
        let mut header = header_for(plan.plan_id(), persistent.len(), sequence);
        let mut d = CRC32.digest();
        d.update(&header[..12]);
        d.update(&header[16..]);
        let chunk_elems = self.chunk_bytes / 4;
        for (i, elems) in persistent.chunks(chunk_elems).enumerate() {
            for v in elems {
                d.update(&v.to_bits().to_le_bytes());
            }
            let key = Self::key(slot, i as u32 + 1);
            block_on(self.map.store_item(self.work, &key, &F32Chunk(elems)))?;
        }
        header[12..16].copy_from_slice(&d.finalize().to_le_bytes());
        block_on(
            self.map
                .store_item(self.work, &Self::key(slot, 0), &(&header[..])),
        )?;
        Ok(sequence)
    }

    /// Restores the newest valid checkpoint of the session's plan into its persistent region
    /// and answers its `sequence`; `Ok(None)` when the store holds none (empty flash, or only
    /// a save that never completed). Each slot's header, plan and CRC-32 are checked before a
    /// single element is written.
    ///
    /// # Errors
    /// [`StoreError::Rejected`] when no slot is valid for this plan but one was committed: a
    /// checkpoint of another plan (`WrongPlan`, `WrongPersistentElems`) or damaged flash
    /// (`BadChecksum`, `BadMagic`, ...); the arena is untouched then. [`StoreError::Flash`],
    /// [`StoreError::Corrupted`] as for [`CheckpointStore::save`].
    pub fn load<O: Ops>(
        &mut self,
        session: &mut Session<'_, '_, O>,
    ) -> Result<Option<u32>, StoreError<F::Error>> {
        let (slot, h) = match self.newest(session.plan())? {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(None),
            Err(e) => return Err(StoreError::Rejected(e)),
        };
        // Checked above; the flash is read again into the region, and checked again.
        match self.stream(slot, &h, Some(session.persistent_mut()))? {
            Some(c) if c == h.crc => Ok(Some(h.sequence)),
            Some(c) => Err(StoreError::Rejected(CheckpointError::BadChecksum {
                stored: h.crc,
                computed: c,
            })),
            None => Err(StoreError::Corrupted),
        }
    }
}

/// The store as [`train_resumable`](crate::train::train_resumable)'s checkpoints: one save
/// after every epoch, so a store that starts empty for the run holds `sequence` = epochs
/// completed, which is what `resume` answers.
impl<F: NorFlash> crate::train::Checkpoints for CheckpointStore<'_, F> {
    fn resume<O: Ops>(
        &mut self,
        session: &mut Session<'_, '_, O>,
    ) -> Result<Option<u32>, &'static str> {
        self.load(session).map_err(|e| e.what())
    }

    fn save<O: Ops>(
        &mut self,
        session: &Session<'_, '_, O>,
        epochs_done: u32,
    ) -> Result<(), &'static str> {
        let sequence = CheckpointStore::save(self, session).map_err(|e| e.what())?;
        if sequence != epochs_done {
            return Err(
                "the store's sequence is not the epochs completed (not empty at the start)",
            );
        }
        Ok(())
    }
}
