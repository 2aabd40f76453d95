//! FFS's minfree: a share of the data blocks (8% unless mkfs said otherwise, superblock
//! `minfree`) that only root may allocate from, as `ffs_alloc` refuses an unprivileged caller
//! once `freespace(fs, fs_minfree)` would go negative. It keeps the allocator away from a
//! full disk for users, and root room to clean up. `statfs` reports it as `bfree - bavail`.
//!
//! The caller's privilege is what `as_user` says for the duration of one operation; everything
//! else (the library, the control channel, the syncer, fsck) runs as root.

use super::*;

impl Fs {
    /// Runs `op` on behalf of user `uid`: a user other than root may not allocate from the
    /// reserve while it runs (ENOSPC instead).
    pub fn as_user<T>(&mut self, uid: u32, op: impl FnOnce(&mut Fs) -> FsResult<T>) -> FsResult<T> {
        let was = std::mem::replace(&mut self.privileged, uid == 0);
        let r = op(self);
        self.privileged = was;
        r
    }

    /// The blocks held back for root.
    pub fn reserved_blocks(&self) -> u64 {
        self.sb.reserved_blocks()
    }

    /// Free blocks the caller may allocate: all of them for root, those past the reserve for
    /// anyone else.
    pub(super) fn blocks_available(&self) -> u64 {
        let free = self.alloc.free_blocks();
        if self.privileged {
            free
        } else {
            free.saturating_sub(self.reserved_blocks())
        }
    }

    /// Whether unlinked inodes are still held (open, or known to the kernel until its FORGET):
    /// their blocks are freed once let go. Through FUSE the FORGET of a file just removed may
    /// still be queued behind the next request, so a mount's ENOSPC is worth a second try.
    pub fn frees_held(&self) -> bool {
        !self.incore.orphans.is_empty()
    }

    /// Refuses an allocation of `n` blocks that would take an unprivileged caller into the
    /// reserve. Frees soft updates still hold are let complete first (`reclaim`), as an
    /// allocation that finds the bitmaps full does.
    pub(super) fn check_reserve(&mut self, n: u64) -> FsResult<()> {
        if self.privileged || self.blocks_available() >= n {
            return Ok(());
        }
        if self.reclaim()? && self.blocks_available() >= n {
            return Ok(());
        }
        Err(FsError::NoSpace)
    }
}
