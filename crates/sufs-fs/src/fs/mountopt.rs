//! What the file system does for the mount options that are its business (mount(8)'s `-o`,
//! parsed by the mount, `sufs_mount::options`): access times, synchronous mounts and
//! remounting between read-only and read-write.
//!
//! Access times follow Linux's `atime_needs_update`: `relatime` (the mount's default) changes
//! atime on a read or a listing when atime is not after mtime or ctime, or is a day old;
//! `strictatime` on every access; `noatime` never; `nodiratime` never for directories. An atime
//! change is an inode change like any other, but nothing waits for it: the inode block is
//! dirtied and goes out with the delayed writes, under every ordering (soft updates need no
//! dependency: no pointer, link count or bitmap changes). A read-only mount changes nothing.
//! `Fs::mount` starts with `noatime`, so that in-process users (the crash tester, the
//! benchmarks) read without writing; `sufs mount` selects `relatime` unless told otherwise.
//!
//! `sync` and `dirsync`: a change returns once it is durable, through `Fs::fsync` of what it
//! changed (with soft updates, the inode, its data and the names leading to it, in the paper's
//! order; under `sync` and `async` ordering, everything). `dirsync` does it for the changes of
//! names (create, mkdir, mknod, symlink, link, unlink, rmdir, rename), `sync` also for writes
//! and attribute changes.

use serde::{Deserialize, Serialize};

use super::{Fs, FsError, FsResult, Ordering};
use crate::alloc::Alloc;
use crate::format::*;

/// When reads change atime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AtimeMode {
    Noatime,
    #[default]
    Relatime,
    Strictatime,
}

/// The access-time rule of a mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AtimePolicy {
    pub mode: AtimeMode,
    /// Directories' atime never changes.
    pub nodiratime: bool,
}

/// relatime's "once a day" (Linux's rule).
const RELATIME_AGE: i64 = 24 * 60 * 60;

impl AtimePolicy {
    pub const NOATIME: AtimePolicy = AtimePolicy { mode: AtimeMode::Noatime, nodiratime: false };

    /// Whether an access at `now` changes `d`'s atime.
    pub fn needs_update(&self, d: &Dinode, now: (i64, u32)) -> bool {
        let atime = (d.atime, d.atime_ns);
        if atime == now || (self.nodiratime && d.is_dir()) {
            return false;
        }
        match self.mode {
            AtimeMode::Noatime => false,
            AtimeMode::Strictatime => true,
            AtimeMode::Relatime => {
                atime <= (d.mtime, d.mtime_ns)
                    || atime <= (d.ctime, d.ctime_ns)
                    || now.0.saturating_sub(d.atime) >= RELATIME_AGE
            }
        }
    }
}

/// Which changes are made durable before they return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SyncMode {
    /// Every change (`sync`).
    pub sync: bool,
    /// Changes of names (`dirsync`).
    pub dirsync: bool,
}

/// What a change touched, for `Fs::settle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A file's data (write).
    Data,
    /// An inode's attributes (setattr, truncate).
    Attr,
    /// A directory's names.
    Names,
}

/// A remount's changes (`None`: as it was), and its answer: the state after it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remount {
    pub readonly: Option<bool>,
    pub atime: Option<AtimeMode>,
    pub nodiratime: Option<bool>,
    pub sync: Option<bool>,
    pub dirsync: Option<bool>,
    /// The ordering cannot change on a remount; naming the current one is allowed (mount(8)
    /// repeats an fstab line's options on a remount).
    pub ordering: Option<Ordering>,
}

/// A mount's options that the file system itself applies, changed by a remount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Live {
    pub atime: AtimePolicy,
    pub sync: SyncMode,
    /// A read-only mount may become read-write (its device was opened for writing).
    pub can_write: bool,
}

impl Live {
    pub fn new(readonly: bool) -> Live {
        Live { atime: AtimePolicy::NOATIME, sync: SyncMode::default(), can_write: !readonly }
    }
}

impl Fs {
    pub fn set_atime_policy(&mut self, p: AtimePolicy) {
        self.live.atime = p;
    }

    pub fn atime_policy(&self) -> AtimePolicy {
        self.live.atime
    }

    pub fn set_sync_mode(&mut self, m: SyncMode) {
        self.live.sync = m;
    }

    pub fn sync_mode(&self) -> SyncMode {
        self.live.sync
    }

    pub fn is_readonly(&self) -> bool {
        self.readonly
    }

    /// Lets a read-only mount become read-write on a remount: its device takes writes.
    pub fn allow_remount_rw(&mut self, yes: bool) {
        self.live.can_write = (yes || !self.readonly) && self.sb.writable().is_ok();
    }

    /// An access to `ino` (a read, a listing, a readlink): its atime changes if the rule says
    /// so. `d` is the inode as the caller has it, unchanged since it was read.
    pub(crate) fn accessed(&mut self, ino: u32, d: &mut Dinode) -> FsResult<()> {
        // Reservations and snapshots are not changed by reads (their inodes are the Block
        // Register's and the snapshot's business), nor files flagged noatime (chattr +A).
        if self.readonly || d.flags & (DI_IMMUTABLE | DI_SNAPSHOT | DI_NOATIME) != 0 {
            return Ok(());
        }
        let now = self.now();
        if self.live.atime.needs_update(d, now) {
            (d.atime, d.atime_ns) = now;
            self.iput(ino, d)?;
        }
        Ok(())
    }

    /// On a `sync` or `dirsync` mount, makes a change durable before it returns: `fsync` of
    /// each inode in `inos` (an inode gone meanwhile is skipped). Elsewhere only of each inode
    /// flagged `DI_SYNC` (`chattr +S`: the `sync` mount option for a subset of the files).
    pub fn settle(&mut self, change: Change, inos: &[u32]) -> FsResult<()> {
        self.settle_in(None, change, inos)
    }

    /// `settle` of a change of names in directory `dir`: a directory flagged `DI_SYNC` makes
    /// its entries' changes durable (Linux's `IS_DIRSYNC`), so each of `inos` is fsync'ed.
    pub fn settle_in(&mut self, dir: Option<u32>, change: Change, inos: &[u32]) -> FsResult<()> {
        let s = self.live.sync;
        let all = s.sync || (s.dirsync && change == Change::Names) || dir.is_some_and(|d| self.flagged_sync(d));
        for &ino in inos {
            if !all && !self.flagged_sync(ino) {
                continue;
            }
            match self.fsync(ino) {
                Ok(()) | Err(FsError::Stale(_)) | Err(FsError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Whether `ino` is flagged `DI_SYNC` (false for an inode gone meanwhile).
    fn flagged_sync(&mut self, ino: u32) -> bool {
        self.mode_and_flags(ino).is_ok_and(|(mode, flags)| mode != 0 && flags & DI_SYNC != 0)
    }

    /// Applies a remount and answers the state after it. Read-write to read-only writes
    /// everything and marks the image clean (unless files unlinked while open are still held:
    /// their inodes stay for the next mount to free); read-only to read-write needs a device
    /// opened for writing and an image that is clean, or unclean after soft updates, and marks
    /// the image in use; a UFS2 image mounted read-only from the start has its groups loaded
    /// for the allocator then. As FreeBSD's `ffs_mount` upgrades an unclean soft-updates file system
    /// (with a warning) and refuses any other unclean one: after soft updates a crash leaves
    /// only leaks and link counts too high, which stay until fsck and harm nothing meanwhile
    /// (the mount gate reasons the same for a new mount, `Recovery::Background`). An image a
    /// mount found damaged (`SB_NEEDS_FSCK`), or left unclean by `sync` or `async`, is refused.
    pub fn remount(&mut self, r: &Remount) -> FsResult<Remount> {
        if r.ordering.is_some_and(|o| o != self.ordering) {
            return Err(FsError::Invalid("the ordering cannot change on a remount"));
        }
        match r.readonly {
            Some(true) if !self.readonly => {
                self.sync_all()?;
                if self.incore.orphans.is_empty() {
                    self.sb.flags |= SB_CLEAN;
                }
                self.write_superblock()?;
                self.readonly = true;
                self.live.can_write = true;
            }
            Some(false) if self.readonly => {
                if !self.live.can_write {
                    return Err(FsError::Invalid(
                        "mounted from a device opened read-only: unmount and mount it read-write",
                    ));
                }
                let unclean = self.sb.flags & SB_CLEAN == 0;
                if self.sb.flags & SB_NEEDS_FSCK != 0 || (unclean && self.sb.flags & SB_SOFTDEP == 0) {
                    return Err(FsError::Invalid(
                        "the image was not unmounted cleanly or needs fsck: unmount, check it and mount it read-write",
                    ));
                }
                if unclean {
                    log::warn!(
                        "remounted read-write although not unmounted cleanly: its last mount had soft updates, \
                         so what is left to repair is leaks (run sufs fsck to reclaim them)"
                    );
                }
                super::prepare_writable(&mut self.sb)?;
                if self.alloc.counts_only() {
                    // A mount read-only from the start took only its UFS2 groups' counts (and
                    // has written none of them since); a writer needs every group checked
                    // whole, as a read-write mount checks them.
                    self.alloc = Alloc::load(&mut self.cache, &self.sb, true)?;
                }
                self.readonly = false;
                if let Err(e) = self.mark_in_use() {
                    self.readonly = true;
                    return Err(e);
                }
            }
            _ => {}
        }
        let a = &mut self.live.atime;
        a.mode = r.atime.unwrap_or(a.mode);
        a.nodiratime = r.nodiratime.unwrap_or(a.nodiratime);
        let s = &mut self.live.sync;
        s.sync = r.sync.unwrap_or(s.sync);
        s.dirsync = r.dirsync.unwrap_or(s.dirsync);
        Ok(self.mount_state())
    }

    /// The mount's current state, in a remount's terms.
    pub fn mount_state(&self) -> Remount {
        Remount {
            readonly: Some(self.readonly),
            atime: Some(self.live.atime.mode),
            nodiratime: Some(self.live.atime.nodiratime),
            sync: Some(self.live.sync.sync),
            dirsync: Some(self.live.sync.dirsync),
            ordering: Some(self.ordering),
        }
    }

    /// Marks the superblock of a read-write mount: in use (not clean), with its ordering, so
    /// that a crash is recovered by what this ordering promises.
    pub(crate) fn mark_in_use(&mut self) -> FsResult<()> {
        self.sb.flags &= !(SB_CLEAN | SB_SOFTDEP);
        if self.ordering == Ordering::Softdep {
            self.sb.flags |= SB_SOFTDEP;
        }
        self.sb.mount_time = self.clock.wall().0;
        self.write_superblock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inode(atime: i64, mtime: i64, ctime: i64, dir: bool) -> Dinode {
        let mode = if dir { S_IFDIR | 0o755 } else { S_IFREG | 0o644 };
        let mut d = Dinode::new(mode, 1, 0, 0, (0, 0), 1);
        (d.atime, d.mtime, d.ctime) = (atime, mtime, ctime);
        d
    }

    #[test]
    fn relatime_updates_after_a_change_or_once_a_day() {
        let p = AtimePolicy::default();
        assert_eq!(p.mode, AtimeMode::Relatime);
        // atime not after mtime or ctime: the first read after a change updates it.
        assert!(p.needs_update(&inode(100, 100, 50, false), (200, 0)));
        assert!(p.needs_update(&inode(100, 50, 150, false), (200, 0)));
        // read since the last change, less than a day ago: no update.
        assert!(!p.needs_update(&inode(150, 100, 100, false), (150 + RELATIME_AGE - 1, 0)));
        assert!(p.needs_update(&inode(150, 100, 100, false), (150 + RELATIME_AGE, 0)));
        // nanoseconds count.
        let mut d = inode(100, 100, 100, false);
        d.mtime_ns = 1;
        assert!(p.needs_update(&d, (101, 0)));
        d.atime_ns = 2;
        assert!(!p.needs_update(&d, (101, 0)));
        // an atime equal to now is left alone.
        assert!(!p.needs_update(&inode(100, 100, 100, false), (100, 0)));
    }

    #[test]
    fn strict_no_and_nodiratime() {
        let strict = AtimePolicy { mode: AtimeMode::Strictatime, nodiratime: false };
        assert!(strict.needs_update(&inode(150, 100, 100, false), (151, 0)));
        assert!(strict.needs_update(&inode(150, 100, 100, true), (151, 0)));
        let nodir = AtimePolicy { nodiratime: true, ..strict };
        assert!(!nodir.needs_update(&inode(150, 100, 100, true), (151, 0)));
        assert!(nodir.needs_update(&inode(150, 100, 100, false), (151, 0)));
        assert!(!AtimePolicy::NOATIME.needs_update(&inode(0, 100, 100, false), (1000, 0)));
        let rel_nodir = AtimePolicy { mode: AtimeMode::Relatime, nodiratime: true };
        assert!(!rel_nodir.needs_update(&inode(0, 100, 100, true), (1000, 0)));
    }
}
