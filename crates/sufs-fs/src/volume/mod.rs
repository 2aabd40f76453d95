//! A volume snapshot layer under the file system (Block Register paper §4): `VolumeDevice` sits
//! between the file system and the real device and keeps the whole volume as it was when the
//! snapshot was taken, by copy-on-write of chunks (one block each) into an exception store, as
//! device-mapper's dm-snapshot does. The store is persistent, in dm-snapshot's persistent layout
//! (a header block, then exception areas: a metadata block of `(origin, store index)` entries
//! followed by the data blocks they name), so a snapshot survives a restart. Two stores:
//! - `reserved`: the blocks after the file system, set aside at mkfs (`--snapshot-reserve`), the
//!   LVM way; when they are used up the snapshot is invalidated, as LVM does, and says so;
//! - `br`: a Block Register reservation (`/.br/volume-snapshot`) in the file system on this very
//!   volume. A pool of store blocks with a low watermark is refilled by `refill` (a background
//!   thread, `Refiller`), which calls brexpand near the last copied block; never from inside a
//!   file-system operation or the I/O path. The store's own writes go to the device directly
//!   (they bypass copy-on-write), and its block map (brquery's runs) is cached and searched by
//!   binary search after a most-recently-used run.
//!
//! A block the br store gains after the snapshot may have been in use at snapshot time (a file
//! removed since): before the store uses it, its old contents are copied like any other chunk.
//!
//! Start-up (§4): `open` first opens the file system read-only to query the reservation, then
//! activates copy-on-write; the caller then mounts the file system read-write on it.
//!
//! Invariant: an origin block is written only after its old contents and the exception naming
//! them are on disk (data, then the area block, then the origin write, each a barrier).
//!
//! The parts: `store` (where the store's blocks are, the exception table in memory, the
//! snapshot-time bitmap, finding a store on a device), `device` (`VolumeDevice`: open, create,
//! delete, copy-on-write under the file system's writes, invalidation), `refill` (the br store's
//! pool and its `Refiller` thread), `views` (the snapshot read-only, `export`, and the prefix of
//! a device mkfs works on).

use serde::Serialize;
use thiserror::Error;

use crate::dev::DevError;
use crate::format::FormatError;
use crate::fs::FsError;

mod device;
mod refill;
mod store;
#[cfg(test)]
mod tests;
mod views;

pub use device::VolumeDevice;
pub use refill::Refiller;
pub use views::{export, PrefixDevice, SnapshotDevice};

/// The Block Register reservation that holds a `br` store.
pub const BR_STORE: &str = "volume-snapshot";

#[derive(Debug, Error)]
pub enum VolumeError {
    #[error(transparent)]
    Dev(#[from] DevError),
    #[error("file system: {0}")]
    Fs(#[from] FsError),
    #[error("{0}")]
    Format(#[from] FormatError),
    #[error("no volume snapshot on this volume")]
    NoSnapshot,
    #[error("a volume snapshot already exists ({0} store); delete it first")]
    Exists(StoreKind),
    #[error("no reserved area after the file system: make it with `sufs mkfs --snapshot-reserve SIZE`")]
    NoReservedArea,
    #[error("the snapshot is invalid: {0}")]
    Invalid(String),
}

pub type VolResult<T> = Result<T, VolumeError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// A fixed area after the file system (LVM's way).
    Reserved,
    /// A Block Register reservation in the file system itself.
    Br,
}

impl std::fmt::Display for StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StoreKind::Reserved => "reserved",
            StoreKind::Br => "br",
        })
    }
}

/// Tuning of the br store's pool.
#[derive(Debug, Clone, Copy)]
pub struct PoolOptions {
    /// Blocks reserved when the snapshot is created.
    pub initial: u64,
    /// The refill runs when fewer free store blocks than this remain.
    pub low_watermark: u64,
    /// Blocks each refill asks brexpand for.
    pub grow: u64,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions { initial: 4096, low_watermark: 1024, grow: 4096 }
    }
}

impl PoolOptions {
    /// The most blocks a br store's pool takes at a time (its first reservation, its low
    /// watermark, each refill) on the file system of `sb`: an eighth of its blocks (at least
    /// one). The defaults count blocks, so on UFS2's 32 KiB blocks 4096 of them are 128 MiB: on
    /// a small file system the first reservation would ask for more than it holds, and a pool
    /// kept that full could never reach its watermark.
    pub fn cap(sb: &crate::format::Superblock) -> u64 {
        (sb.num_blocks / sb.frag() / 8).max(1)
    }
}

/// Counters of a volume.
#[derive(Debug, Clone, Default, Serialize)]
pub struct VolumeStats {
    pub kind: Option<StoreKind>,
    pub valid: bool,
    pub exceptions: u64,
    /// Store blocks in use (header, area blocks, data) and available in all.
    pub store_used: u64,
    pub store_size: u64,
    pub refills: u64,
    /// Blocks the br store gained that were in use at snapshot time, copied before reuse.
    pub preserved: u64,
    /// Writes to chunks free at snapshot time, not copied.
    pub skipped_free: u64,
}
