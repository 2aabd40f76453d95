//! The crash tester (DESIGN.md "Crash states are tested, not argued"; soft updates §4 and §5 say
//! which inconsistencies a crash may leave). A workload, a deterministic function of a seed, runs
//! in-process over a `RecordingDevice`; every state the medium could hold after a power loss is
//! rebuilt from the log: each prefix of completed batches, and sampled subsets of the batch in
//! flight (a device may reorder writes within a batch). Each state is judged by `fsck::check`
//! (every finding carries its class) and by the promises the workload recorded: a name that
//! existed before the workload stays until an operation removes or renames it; a renamed inode
//! that was durable under its old name keeps the old or the new name; an fsync'ed file keeps its
//! name and contents from the moment fsync returns.
//!
//! Invariant: a verdict depends only on the crash image and on the promises whose interval covers
//! the state, never on the ordering mode, so a new mode (soft updates) needs no change here.
//!
//! The parts: `promise` (what must hold, and the path helpers), `work` (a workload's view of the
//! file system: operations by path that record their promises), `workloads` (one file per family
//! of workloads), `recorder` (the recording device's log as batches and the crash images built
//! from it), `judge` (fsck and the promises on each crash state), `summary` (what the states
//! showed).

use std::sync::Arc;

use thiserror::Error;

use sufs_fs::dev::{read_bytes, write_bytes, BlockDevice, MemDevice, WriteKind};
use sufs_fs::format::ufs2::newfs::{newfs, NewfsOptions};
use sufs_fs::format::Superblock;
use sufs_fs::fs::{FsError, MountOptions, Ordering};
use sufs_fs::policy::UpdatePolicy;

mod concurrent;
mod judge;
mod promise;
mod recorder;
mod summary;
mod work;
mod workloads;

pub use concurrent::CONCURRENT;
pub use promise::{Promise, PromiseKind};
pub use recorder::{CrashImage, CrashState, Recording};
pub use summary::{Summary, Verdict};
pub use work::Work;

/// The workloads, in the order `all` runs them.
pub const WORKLOADS: [&str; 25] = [
    "create-many",
    "remove-tree",
    "mkdir-rmdir",
    "rename-storm",
    "grow-indirect",
    "truncate",
    "hard-links",
    "fsync",
    "mix",
    "br",
    "snapshot",
    "swap-fsync",
    "ancestor-rename",
    "rename-over",
    "link-fsync",
    "rename-back",
    "rename-whiteout",
    "xattr",
    "falloc",
    "lazy-inodes",
    "tmpfile",
    "grow-renames",
    "full-disk",
    "big-dir",
    "tails",
];

/// The block size of every recorded image.
pub const BS: usize = 4096;

#[derive(Debug, Error)]
pub enum CrashError {
    #[error("unknown workload {0:?}; the workloads are: {list}", list = WORKLOADS.join(", "))]
    UnknownWorkload(String),
    #[error("{what}: {source}")]
    Fs { what: String, source: FsError },
}

/// How the recorded workload ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum End {
    /// Unmount for odd seeds, stop without unmount for even ones.
    Auto,
    /// Unmount: the last batches are the final flush and the clean superblock.
    Unmount,
    /// Stop without unmount: whatever the cache still holds never reaches the medium.
    Crash,
}

#[derive(Debug, Clone)]
pub struct CrashOptions {
    /// Random subsets tried of each in-flight batch larger than 8 writes.
    pub subsets: usize,
    /// Operations in the workload.
    pub ops: usize,
    /// Buffer cache of the recorded mount, in blocks: small, so that evictions write mid-workload.
    pub cache_blocks: usize,
    /// Size of the image in 4 KiB blocks.
    pub blocks: u64,
    pub end: End,
    /// Run an update policy's sweeps during the workload (their times scaled to the workload:
    /// PU every second, AIPU every 100 ms for buffers a second old, metadata every second)
    /// instead of the plain sweep every 20 operations.
    pub update: Option<UpdatePolicy>,
    /// The fragment size of the UFS2 image (newfs's layout; the UFS2 checker judges it):
    /// blocks of `BS` bytes hold `BS / fsize` fragments, and the device is addressed in
    /// fragments (files' tails are fragment runs). `BS`: one fragment a block.
    pub fsize: usize,
}

impl CrashOptions {
    /// The recorded device's address unit: the fragment.
    fn unit(&self) -> usize {
        if self.fsize > 0 {
            self.fsize
        } else {
            BS
        }
    }

    /// A zeroed device of `blocks` blocks of `BS` bytes, addressed in `unit()`s.
    fn new_device(&self, blocks: u64) -> MemDevice {
        let unit = self.unit();
        MemDevice::new_frags(BS, unit, blocks * (BS / unit) as u64)
    }
}

impl Default for CrashOptions {
    fn default() -> Self {
        CrashOptions { subsets: 8, ops: 80, cache_blocks: 64, blocks: 8192, end: End::Auto, update: None, fsize: BS }
    }
}

/// Makes the file system a workload starts from on `dev`, with about `inodes` inodes: UFS2 as
/// newfs makes it, blocks of `BS` bytes of the device's fragments.
fn make_fs(dev: &Arc<MemDevice>, inodes: u64) -> Result<Superblock, FsError> {
    const EPOCH: i64 = 946_684_800;
    let size = dev.num_blocks() * dev.addr_unit() as u64;
    let o = NewfsOptions {
        bsize: Some(BS as i32),
        fsize: Some(dev.addr_unit() as i32),
        density: Some((size / inodes).clamp(BS as u64, 1 << 20) as i32),
        time: EPOCH,
        regression: true,
        ..NewfsOptions::default()
    };
    newfs(size, &o, |off, data| write_bytes(&**dev, off, data, WriteKind::Sync).map_err(std::io::Error::other))
        .map_err(|e| FsError::Invalid(Box::leak(format!("newfs: {e}").into_boxed_str())))?;
    Ok(Superblock::probe(|off, buf| read_bytes(&**dev, off, buf))?)
}

/// The workloads `all` leaves out on a UFS2 image, with why: what they exercise is not
/// written in UFS2's form yet (none now: snapshots are FreeBSD's there).
pub const NOT_ON_UFS2: [(&str, &str); 0] = [];

/// The workloads `all` leaves out under `opts`, with why.
pub fn left_out(opts: &CrashOptions) -> Vec<(&'static str, &'static str)> {
    let _ = opts;
    NOT_ON_UFS2.to_vec()
}

/// Runs `workload` over a recording device and returns its log: the concurrent workload through
/// its own recorder (`concurrent`), every other one through `recorder`.
pub fn record(ordering: Ordering, workload: &str, seed: u64, opts: &CrashOptions) -> Result<Recording, CrashError> {
    if workload == CONCURRENT {
        return concurrent::record(ordering, seed, opts);
    }
    recorder::record(ordering, workload, seed, opts)
}

/// The mount the judge and the workloads look at a crash image with: read-only, `sync`
/// ordering (nothing is written), a small cache.
fn readonly() -> MountOptions {
    MountOptions { ordering: Ordering::Sync, cache_blocks: 256, readonly: true }
}

/// Records `workload` under `ordering` and judges every crash state.
pub fn run(ordering: Ordering, workload: &str, seed: u64, opts: &CrashOptions) -> Result<Summary, CrashError> {
    record(ordering, workload, seed, opts)?.check(opts.subsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_workload() {
        assert!(matches!(
            run(Ordering::Sync, "nope", 1, &CrashOptions::default()),
            Err(CrashError::UnknownWorkload(_))
        ));
    }
}
