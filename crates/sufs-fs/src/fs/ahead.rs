//! Inodes allocated ahead (soft updates only). A new inode may reach the disk only after its
//! bitmap bit has (FreeBSD's rule: the group header before the dinode, else the allocator of a
//! mount after a crash could hand out an inode in use), so an fsync of a new file was three
//! ordered writes, each behind a device flush: the group header and the data, then the inode,
//! then the entry naming it. Here a few inodes of a group are allocated before any file needs
//! them, so that their bits go to disk with the group's next header write; a file made later
//! takes one whose bit is already there, and its fsync writes the inode with the header and the
//! data (its new pointers rolled back) and then again with the entry: two flushes, not three.
//!
//! An inode allocated ahead and never used is, on disk, a leaked inode (bit set, dinode free):
//! the damage soft updates may leave after a crash anyway, which fsck reclaims. `sync_all`
//! (sync, unmount, a snapshot, a remount read-only) gives them all back first, so that a synced
//! image holds none; statfs counts them free.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// Inodes kept allocated ahead in a group once it has some.
pub const AHEAD: usize = 8;
/// Inodes allocated ahead in all groups together, at most (a crash leaks no more).
pub const AHEAD_MAX: usize = 64;

/// The inodes allocated ahead, by group: allocated in the maps (their bits set, the counts
/// lowered), their dinodes free, each with soft updates' record of its bit (`new_inode`).
#[derive(Debug, Default)]
pub(super) struct Ahead {
    by_cg: BTreeMap<u32, BTreeSet<u32>>,
    total: usize,
}

impl Ahead {
    pub(super) fn len(&self) -> usize {
        self.total
    }

    fn insert(&mut self, cg: u32, ino: u32) {
        assert!(self.by_cg.entry(cg).or_default().insert(ino), "inode {ino} allocated ahead twice");
        self.total += 1;
        assert!(self.total <= AHEAD_MAX, "{} inodes allocated ahead", self.total);
    }

    fn remove(&mut self, cg: u32, ino: u32) {
        let set = self.by_cg.get_mut(&cg).expect("the group has inodes ahead");
        assert!(set.remove(&ino), "inode {ino} was not allocated ahead");
        if set.is_empty() {
            self.by_cg.remove(&cg);
        }
        self.total -= 1;
    }

    fn in_cg(&self, cg: u32) -> usize {
        self.by_cg.get(&cg).map_or(0, BTreeSet::len)
    }
}

impl Fs {
    /// An inode allocated ahead in the group of `parent`, for a new file (not a directory,
    /// whose placement is dirpref's): the first whose bit is on disk, else the first. None if
    /// the group has none.
    pub(super) fn take_ahead(&mut self, parent: u32) -> FsResult<Option<(u32, Dinode)>> {
        let cg = self.sb.cg_of_inode(parent);
        let Some(set) = self.ahead.by_cg.get(&cg) else { return Ok(None) };
        let sd = self.hooks.softdep.as_ref().expect("inodes are allocated ahead only with soft updates");
        let first = *set.iter().next().expect("no empty group is kept");
        let ino = set.iter().copied().find(|&i| sd.bitmap_on_disk(i)).unwrap_or(first);
        self.ahead.remove(cg, ino);
        let old = self.iget_raw(ino)?;
        if !old.is_free() {
            // Nothing writes a dinode allocated ahead: the cache or the disk is damaged.
            return Err(self.damaged(format!("inode {ino}, allocated ahead, is in use")));
        }
        Ok(Some((ino, old)))
    }

    /// Tops up the inodes allocated ahead in group `cg` (a new file's), under soft updates: to
    /// `AHEAD` once fewer than half are left, while the group has plenty free and the total
    /// stays within `AHEAD_MAX`.
    pub(super) fn fill_ahead(&mut self, cg: u32) -> FsResult<()> {
        if self.ordering != Ordering::Softdep || self.readonly || self.ahead.in_cg(cg) >= AHEAD / 2 {
            return Ok(());
        }
        let want = (AHEAD - self.ahead.in_cg(cg)).min(AHEAD_MAX - self.ahead.len());
        // The group's last inodes are left to the files that need them.
        if self.alloc.free_inodes_in(cg) < (4 * AHEAD) as u64 {
            return Ok(());
        }
        let in_cg = cg * self.sb.inodes_per_group;
        for _ in 0..want {
            let (ino, _) = self.alloc_inode(in_cg, false)?;
            assert_eq!(self.sb.cg_of_inode(ino), cg, "inode {ino} allocated ahead outside group {cg}");
            self.sd().expect("soft updates").new_inode(ino, false);
            self.ahead.insert(cg, ino);
        }
        Ok(())
    }

    /// Gives every inode allocated ahead back to the free maps (their dinodes are free on disk
    /// and in the cache: the bits may clear in any order with them). Returns how many.
    pub(super) fn release_ahead(&mut self) -> FsResult<usize> {
        let n = self.ahead.len();
        for (_, set) in std::mem::take(&mut self.ahead.by_cg) {
            for ino in set {
                self.sd().expect("soft updates").forget_ahead(ino);
                self.alloc.free_inode(&mut self.cache, &self.sb, ino, false)?;
            }
        }
        self.ahead.total = 0;
        Ok(n)
    }

    /// Inodes allocated ahead now (statfs counts them free).
    pub fn inodes_ahead(&self) -> usize {
        self.ahead.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::MemDevice;
    use crate::fs::{mkfs, MkfsOptions, MountOptions};
    use crate::fsck::Class;

    fn mounted(dev: &Arc<MemDevice>) -> Fs {
        let d: Arc<dyn BlockDevice> = dev.clone();
        let opts = MountOptions { ordering: Ordering::Softdep, cache_blocks: 256, readonly: false };
        Fs::mount(d, opts, Arc::new(SimClock::new())).unwrap()
    }

    fn new_image(blocks: u64, inodes: Option<u64>) -> Arc<MemDevice> {
        let dev = Arc::new(MemDevice::new(4096, blocks));
        mkfs(dev.clone(), &MkfsOptions { inodes, ..MkfsOptions::default() }, (1, 0)).unwrap();
        dev
    }

    /// Creates `name` with 16 KiB in it and fsyncs it: the device batches the fsync took.
    fn deliver(fs: &mut Fs, dev: &MemDevice, name: &str) -> u64 {
        let (f, _) = fs.create(ROOT_INO, name.as_bytes(), 0o600, 0, 0).unwrap();
        fs.write(f, 0, &[name.len() as u8; 16384]).unwrap();
        let before = dev.stats().batches;
        fs.fsync(f).unwrap();
        dev.stats().batches - before
    }

    /// The first new file's fsync is three ordered writes (its inode's bit is new); the files
    /// after it take inodes allocated ahead, whose bits that fsync wrote, and theirs are two.
    /// Statfs counts the inodes ahead free, and after the unmount none is left allocated.
    #[test]
    fn an_fsync_of_a_file_made_with_an_inode_allocated_ahead_is_two_ordered_writes() {
        let dev = new_image(4096, None);
        let mut fs = mounted(&dev);
        let free = fs.statfs().ffree;
        assert_eq!(deliver(&mut fs, &dev, "m0"), 3, "a new inode's bit first, then the inode, then the entry");
        assert!(fs.inodes_ahead() > 0, "the first file's group has inodes allocated ahead");
        for i in 1..20 {
            assert_eq!(deliver(&mut fs, &dev, &format!("m{i}")), 2, "message {i}");
        }
        assert_eq!(fs.statfs().ffree, free - 20, "the inodes allocated ahead count free");
        fs.unmount().unwrap();
        let report = crate::fsck::check(dev.as_ref()).unwrap();
        assert!(report.findings.is_empty(), "{:?}", report.findings);
        let mut fs = mounted(&dev);
        for i in 0..20 {
            let (f, _) = fs.lookup(ROOT_INO, format!("m{i}").as_bytes()).unwrap();
            assert_eq!(fs.read(f, 0, 20000).unwrap(), vec![format!("m{i}").len() as u8; 16384]);
        }
        assert_eq!(fs.statfs().ffree, free - 20);
    }

    /// A crash right after such an fsync: the file and its data are there, and what is wrong is
    /// only what soft updates may leave (the inodes allocated ahead and unused are leaked).
    #[test]
    fn a_crash_after_the_fsync_leaves_the_file_and_only_leaks() {
        let dev = new_image(4096, None);
        let mut fs = mounted(&dev);
        deliver(&mut fs, &dev, "m0");
        assert_eq!(deliver(&mut fs, &dev, "m1"), 2);
        let crashed = Arc::new(MemDevice::from_blocks(4096, dev.blocks()));
        drop(fs);
        let report = crate::fsck::check(crashed.as_ref()).unwrap();
        assert!(report.findings.iter().all(|f| f.class() == Class::Allowed), "{:?}", report.findings);
        assert!(
            report.findings.iter().any(|f| matches!(f, crate::fsck::Finding::InodesMarkedUsed { .. })),
            "the inodes allocated ahead are leaked: {:?}",
            report.findings
        );
        assert!(crate::fsck::preen(crashed.as_ref()).unwrap().refused.is_none());
        assert!(crate::fsck::check(crashed.as_ref()).unwrap().findings.is_empty());
        let mut fs = mounted(&crashed);
        let (f, _) = fs.lookup(ROOT_INO, b"m1").unwrap();
        assert_eq!(fs.read(f, 0, 20000).unwrap(), vec![2u8; 16384]);
    }

    /// Every free inode can still be had: when the maps run out, the inodes allocated ahead go
    /// back, and the last ones are taken (directories, which never take them, included).
    #[test]
    fn the_inodes_allocated_ahead_never_make_the_file_system_run_out() {
        let dev = new_image(4096, Some(256));
        let mut fs = mounted(&dev);
        let free = fs.statfs().ffree;
        let mut made = 0;
        loop {
            let name = format!("f{made}");
            let r = if made % 2 == 0 {
                fs.create(ROOT_INO, name.as_bytes(), 0o600, 0, 0).map(|_| ())
            } else {
                fs.mkdir(ROOT_INO, name.as_bytes(), 0o700, 0, 0).map(|_| ())
            };
            match r {
                Ok(()) => made += 1,
                Err(FsError::NoSpace) => break,
                Err(e) => panic!("{e}"),
            }
            assert!(made <= free, "more files than free inodes");
        }
        assert_eq!(made, free, "every free inode was used");
        assert_eq!(fs.inodes_ahead(), 0);
        fs.unmount().unwrap();
        assert!(crate::fsck::check(dev.as_ref()).unwrap().findings.is_empty());
    }
}
