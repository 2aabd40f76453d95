//! fsck: the checker and repairer, FreeBSD's fsck_ffs for UFS2 (`ufs2`, one file per pass). It
//! reads the image straight from a device, never through `Fs` or the buffer cache, so that it
//! can be the oracle of the crash tester: every problem is a typed `Finding` with a `Class`.
//! Allowed findings are the ones soft updates (and synchronous FFS) may leave after a crash
//! (soft updates §4): leaked blocks and inodes, link counts too high, stale block counts and
//! summaries, and the two windows of a directory renamed to another parent, which FFS cannot
//! make atomic (a directory with exactly two names; a ".." still naming the old parent).
//! Violations are the ones an ordered file system must never leave.
//!
//! This file holds the class and the library's short forms over a `BlockDevice`: `check`
//! (fsck -n), `repair` (fsck -y) and `preen` (fsck -p).

use crate::dev::BlockDevice;

pub mod ufs2;

pub use ufs2::{Finding, Outcome, RepairMode, Report};

/// Whether a finding may be left by a crash of a correctly ordered file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Allowed,
    Violation,
}

/// Why fsck could not run at all (no UFS2 superblock, an unreadable device).
pub type FsckError = crate::format::ufs2::Ufs2Error;

/// The bytes of `dev` the checker may read: its addresses times their unit.
pub fn dev_len(dev: &(dyn BlockDevice + 'static)) -> u64 {
    dev.num_blocks() * dev.addr_unit() as u64
}

/// Checks the file system on `dev`; changes nothing (fsck -n).
pub fn check(dev: &(dyn BlockDevice + 'static)) -> Result<Report, FsckError> {
    ufs2::check(dev, dev_len(dev), &ufs2::Options::default())
}

/// Checks and repairs everything repair knows (fsck -y), or writes nothing and says why.
pub fn repair(dev: &(dyn BlockDevice + 'static)) -> Result<Outcome, FsckError> {
    ufs2::repair(dev, dev_len(dev), &ufs2::Options::default(), RepairMode::Yes)
}

/// Preen (fsck -p) for the soft updates paper's "only leaks" crash states: repairs when every
/// finding is of the `Allowed` class, and otherwise writes nothing (`Outcome::refused`). Always
/// scans; `sufs fsck -p` skips an image marked clean first, as fsck_ffs -p does.
pub fn preen(dev: &(dyn BlockDevice + 'static)) -> Result<Outcome, FsckError> {
    ufs2::repair(dev, dev_len(dev), &ufs2::Options::default(), RepairMode::Preen)
}
