//! Inode flags as chattr(1) sees them: Linux's FS_IOC_GETFLAGS / FS_IOC_SETFLAGS bits mapped
//! to the UFS-style flags of the dinode (`DI_IMMUTABLE`, `DI_APPEND`, `DI_NODUMP`,
//! `DI_NOATIME`, `DI_SYNC`), and the rules they impose on names (as FreeBSD's `ufs_setattr`,
//! `ufs_remove` and `ufs_rename` apply `IMMUTABLE | APPEND | NOUNLINK`).
//!
//! Only root changes the immutable and append-only flags (they are UFS's system flags,
//! `SF_IMMUTABLE` and `SF_APPEND`; Linux asks `CAP_LINUX_IMMUTABLE`); the owner may change the
//! others. The flags the file system keeps for itself (snapshots, Block Register reservations
//! and their directories) are not changed through this interface.

use super::*;

/// Linux's `FS_IOC_GETFLAGS` and `FS_IOC_SETFLAGS` (`_IOR('f', 1, long)`, `_IOW('f', 2, long)`;
/// the kernel sends FUSE a 4-byte int either way).
pub const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
pub const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
/// Their 32-bit forms (`_IOR('f', 1, int)`), which the kernel may pass through as they are.
pub const FS_IOC32_GETFLAGS: u32 = 0x8004_6601;
pub const FS_IOC32_SETFLAGS: u32 = 0x4004_6602;

/// The bits of `FS_IOC_GETFLAGS` sufs keeps.
pub const FS_IMMUTABLE_FL: u32 = 0x10;
pub const FS_APPEND_FL: u32 = 0x20;
pub const FS_NODUMP_FL: u32 = 0x40;
pub const FS_NOATIME_FL: u32 = 0x80;
pub const FS_SYNC_FL: u32 = 0x8;

/// The XFS forms (`struct fsxattr`, 28 bytes, `fsx_xflags` first), which `xfs_io -c chattr`
/// and the kernel's fileattr interface use.
pub const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
pub const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
pub const FSXATTR_SIZE: usize = 28;
const FS_XFLAG_IMMUTABLE: u32 = 0x8;
const FS_XFLAG_SYNC: u32 = 0x20;
const FS_XFLAG_APPEND: u32 = 0x10;
const FS_XFLAG_NOATIME: u32 = 0x40;
const FS_XFLAG_NODUMP: u32 = 0x80;
/// Set by the kernel on files with extended attributes; not a flag one sets.
const FS_XFLAG_HASATTR: u32 = 0x8000_0000;

/// Linux flag, XFS flag.
const XMAP: [(u32, u32); 5] = [
    (FS_IMMUTABLE_FL, FS_XFLAG_IMMUTABLE),
    (FS_APPEND_FL, FS_XFLAG_APPEND),
    (FS_NODUMP_FL, FS_XFLAG_NODUMP),
    (FS_NOATIME_FL, FS_XFLAG_NOATIME),
    (FS_SYNC_FL, FS_XFLAG_SYNC),
];

/// Linux flags as `fsx_xflags`.
pub fn fsx_from_linux(fl: u32) -> u32 {
    XMAP.iter().filter(|&&(l, _)| fl & l != 0).fold(0, |acc, &(_, x)| acc | x)
}

/// `fsx_xflags` as Linux flags; None if a flag sufs does not keep is set.
pub fn linux_from_fsx(x: u32) -> Option<u32> {
    let x = x & !FS_XFLAG_HASATTR;
    let known = XMAP.iter().fold(0, |acc, &(_, x)| acc | x);
    (x & !known == 0).then(|| XMAP.iter().filter(|&&(_, f)| x & f != 0).fold(0, |acc, &(l, _)| acc | l))
}

/// Linux flag, dinode flag.
const MAP: [(u32, u32); 5] = [
    (FS_IMMUTABLE_FL, DI_IMMUTABLE),
    (FS_APPEND_FL, DI_APPEND),
    (FS_NODUMP_FL, DI_NODUMP),
    (FS_NOATIME_FL, DI_NOATIME),
    (FS_SYNC_FL, DI_SYNC),
];

/// The dinode flags a user sees and sets.
pub const USER_FLAGS: u32 = DI_IMMUTABLE | DI_APPEND | DI_NODUMP | DI_NOATIME | DI_SYNC;
/// Of those, the ones only root changes.
const ROOT_FLAGS: u32 = DI_IMMUTABLE | DI_APPEND;

/// Dinode flags as Linux flags.
pub fn to_linux(di: u32) -> u32 {
    MAP.iter().filter(|&&(_, d)| di & d != 0).fold(0, |acc, &(l, _)| acc | l)
}

/// Linux flags as dinode flags; None if a flag sufs does not keep is set.
pub fn from_linux(fl: u32) -> Option<u32> {
    let known = MAP.iter().fold(0, |acc, &(l, _)| acc | l);
    if fl & !known != 0 {
        return None;
    }
    Some(MAP.iter().filter(|&&(l, _)| fl & l != 0).fold(0, |acc, &(_, d)| acc | d))
}

/// What a change does to a directory's entries (`Fs::check_entries`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entries {
    Add,
    Remove,
}

impl Fs {
    /// The inode's flags as `FS_IOC_GETFLAGS` answers them.
    pub fn get_flags(&mut self, ino: u32) -> FsResult<u32> {
        Ok(to_linux(self.iget(ino)?.flags))
    }

    /// `FS_IOC_SETFLAGS` by user `uid`: the user flags become `linux`'s. EOPNOTSUPP for a flag
    /// sufs does not keep, EPERM for a user other than the owner or root, for anyone but root
    /// changing immutable or append-only, and for the file system's own special files.
    pub fn set_flags(&mut self, ino: u32, linux: u32, uid: u32) -> FsResult<Dinode> {
        self.check_writable()?;
        let want = from_linux(linux).ok_or(FsError::NotSupported)?;
        let mut d = self.iget(ino)?;
        if uid != 0 && uid != d.uid {
            return Err(FsError::Perm);
        }
        if d.flags & (DI_SNAPSHOT | DI_UNMOVABLE) != 0 || self.is_special_dir(ino)? {
            return Err(FsError::Perm);
        }
        let changed = (d.flags & USER_FLAGS) ^ want;
        if changed & ROOT_FLAGS != 0 && uid != 0 {
            return Err(FsError::Perm);
        }
        if changed == 0 {
            return Ok(self.eff(ino, d));
        }
        d.flags = (d.flags & !USER_FLAGS) | want;
        self.touch_c(&mut d);
        self.iput(ino, &d)?;
        self.balance()?;
        // As it is now: the tasks `balance` ran may have dropped a link.
        self.getattr(ino)
    }

    /// True for `/.br` and `/.snap`, whose immutability is the file system's own.
    fn is_special_dir(&mut self, ino: u32) -> FsResult<bool> {
        for name in [br::BR_DIR, snapshot::SNAP_DIR] {
            match self.lookup(ROOT_INO, name) {
                Ok((i, _)) if i == ino => return Ok(true),
                Ok(_) | Err(FsError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// A user's change to the entries of directory `dir`: an immutable directory takes none,
    /// an append-only one takes new entries only (EPERM). The file system's own entries in
    /// `/.br` and `/.snap` do not come this way.
    pub(super) fn check_entries(&mut self, dir: u32, change: Entries) -> FsResult<()> {
        match self.mode_and_flags(dir)? {
            (0, _) => Err(FsError::Stale(dir as u64)),
            (mode, flags) => Self::entries_allowed(mode, flags, change),
        }
    }

    /// `check_entries` of a directory's dinode `d` already read.
    pub(super) fn check_entries_of(d: &Dinode, change: Entries) -> FsResult<()> {
        Self::entries_allowed(d.mode, d.flags, change)
    }

    fn entries_allowed(mode: u16, flags: u32, change: Entries) -> FsResult<()> {
        let refused = match change {
            Entries::Add => DI_IMMUTABLE,
            Entries::Remove => DI_IMMUTABLE | DI_APPEND,
        };
        if mode & S_IFMT == S_IFDIR && flags & refused != 0 {
            return Err(FsError::Perm);
        }
        Ok(())
    }

    /// An open through OPEN: an append-only file opens for writing only with O_APPEND and
    /// never with O_TRUNC (EPERM), as Linux's `may_open`. (Opens the kernel makes without a
    /// message are held to the same by `write`, which takes only writes at the end.)
    pub fn check_open_append(&mut self, ino: u32, write: bool, append: bool, trunc: bool) -> FsResult<()> {
        let d = self.iget(ino)?;
        if d.flags & DI_APPEND != 0 && ((write && !append) || trunc) {
            return Err(FsError::Perm);
        }
        Ok(())
    }

    /// A setattr on an immutable inode changes nothing; on an append-only one only the times,
    /// and those only to the current time (as Linux's `notify_change`).
    pub(super) fn check_setattr(&self, d: &Dinode, a: &SetAttr) -> FsResult<()> {
        let any = a.size.is_some() || a.mode.is_some() || a.uid.is_some() || a.gid.is_some();
        let times = a.atime.is_some() || a.mtime.is_some();
        if d.flags & DI_IMMUTABLE != 0 && (any || times) {
            return Err(FsError::Perm);
        }
        // The kernel's flush, under its writeback cache, of an mtime it already sent: no change.
        let unchanged = a.ctime.is_some() && a.atime.is_none() && a.mtime == Some((d.mtime, d.mtime_ns));
        if d.flags & DI_APPEND != 0 && (any || (times && !a.times_now && !unchanged)) {
            return Err(FsError::Perm);
        }
        Ok(())
    }

    /// `check_entries` for a rename: its source directory loses an entry; its target gains
    /// one, and loses one where a name is replaced or exchanged.
    pub(super) fn check_rename_entries(
        &mut self,
        dir: u32,
        newdir: u32,
        newname: &[u8],
        exchange: bool,
    ) -> FsResult<()> {
        self.check_entries(dir, Entries::Remove)?;
        let replaces = exchange || self.lookup(newdir, newname).is_ok();
        self.check_entries(newdir, if replaces { Entries::Remove } else { Entries::Add })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An append-only directory takes new names and gives none up; an immutable one neither.
    #[test]
    fn flagged_directories_keep_their_entries() {
        let mut fs = crate::fs::mem_mount(8192, Ordering::Softdep);
        let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        fs.create(d, b"f", 0o644, 0, 0).unwrap();
        fs.mkdir(d, b"s", 0o755, 0, 0).unwrap();
        fs.set_flags(d, FS_APPEND_FL, 0).unwrap();
        assert!(matches!(fs.unlink(d, b"f"), Err(FsError::Perm)));
        assert!(matches!(fs.rmdir(d, b"s"), Err(FsError::Perm)));
        fs.create(d, b"g", 0o644, 0, 0).unwrap();
        fs.set_flags(d, FS_IMMUTABLE_FL, 0).unwrap();
        assert!(matches!(fs.create(d, b"h", 0o644, 0, 0), Err(FsError::Perm)));
        assert!(matches!(fs.unlink(d, b"g"), Err(FsError::Perm)));
        fs.set_flags(d, 0, 0).unwrap();
        fs.unlink(d, b"f").unwrap();
        fs.unlink(d, b"g").unwrap();
        fs.rmdir(d, b"s").unwrap();
        // A file is no directory: its flags do not stand in the way of the error that says so.
        let (f, _) = fs.create(d, b"f", 0o644, 0, 0).unwrap();
        fs.set_flags(f, FS_IMMUTABLE_FL, 0).unwrap();
        assert!(matches!(fs.unlink(f, b"x"), Err(FsError::NotDir)));
    }

    #[test]
    fn linux_flags_map_both_ways() {
        for di in 0..=USER_FLAGS {
            if di & !USER_FLAGS == 0 {
                assert_eq!(from_linux(to_linux(di)), Some(di));
            }
        }
        assert_eq!(to_linux(DI_IMMUTABLE | DI_SNAPSHOT | DI_UNMOVABLE), FS_IMMUTABLE_FL);
        assert_eq!(from_linux(FS_APPEND_FL | FS_NOATIME_FL), Some(DI_APPEND | DI_NOATIME));
        assert_eq!(from_linux(FS_SYNC_FL), Some(DI_SYNC));
        // FS_COMPR_FL, FS_DIRSYNC_FL: not kept.
        assert_eq!(from_linux(0x4 | FS_IMMUTABLE_FL), None);
        assert_eq!(from_linux(0x10000), None);
        for fl in [0, FS_IMMUTABLE_FL, FS_APPEND_FL | FS_NODUMP_FL | FS_NOATIME_FL | FS_SYNC_FL] {
            assert_eq!(linux_from_fsx(fsx_from_linux(fl) | FS_XFLAG_HASATTR), Some(fl));
        }
        assert_eq!(linux_from_fsx(0x1), None, "FS_XFLAG_REALTIME is not kept");
    }
}
