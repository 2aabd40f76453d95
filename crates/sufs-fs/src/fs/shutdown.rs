//! A forced shutdown (Linux's FS_IOC_SHUTDOWN, xfs's "going down"): the file system stops
//! writing to its device at once, as a crash would, after writing everything first if asked;
//! from then on every request fails with EIO, and the unmount writes nothing, so the image
//! keeps its crash state (not marked clean) and the next mount follows the rules for an
//! unclean image (soft updates: mount at once, check in the background).
//!
//! Invariant: once `shut_down` is set, no block reaches the device: the buffer cache refuses
//! every write before its hooks run (`Cache::shut_down`), and the superblock, the one block
//! written around the cache, is not written either.

use super::{Fs, FsError, FsResult};

/// `FS_IOC_SHUTDOWN`, `_IOR('X', 125, __u32)`: the flags are read from the caller's memory.
pub const FS_IOC_SHUTDOWN: u32 = 0x8004_587D;

/// What is written before the file system stops (the ioctl's `FS_GOING_DOWN_*` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Shutdown {
    /// `FS_GOING_DOWN_FULLSYNC` (0): every delayed write first, then stop.
    Fullsync,
    /// `FS_GOING_DOWN_METAFLUSH` (1): the metadata first. sufs has no log, and its metadata
    /// waits for the data blocks it names, so this writes everything too.
    Metaflush,
    /// `FS_GOING_DOWN_NOLOGFLUSH` (2): stop now; what was not yet written is lost, as in a crash.
    Nologflush,
}

impl Shutdown {
    /// The mode of the ioctl's flags value, if it is one of the three.
    pub fn from_flags(flags: u32) -> Option<Shutdown> {
        match flags {
            0 => Some(Shutdown::Fullsync),
            1 => Some(Shutdown::Metaflush),
            2 => Some(Shutdown::Nologflush),
            _ => None,
        }
    }

    fn flushes(self) -> bool {
        self != Shutdown::Nologflush
    }
}

impl Fs {
    /// Shuts the file system down. A flush that fails is logged and the shutdown goes on: the
    /// caller asked for the device to be left alone. Shutting down twice is no error.
    pub fn shutdown(&mut self, mode: Shutdown) {
        if self.shut_down {
            return;
        }
        // A batch in flight was handed to the device before the shutdown: it goes as it is.
        if let Err(e) = self.land_flight() {
            log::error!("shutdown: the batch in flight: {e}");
        }
        if mode.flushes() {
            // Everything, and the superblock's summary counts with it (still marked in use).
            if let Err(e) = self.sync_all().and_then(|()| self.write_superblock()) {
                log::error!("shutdown: writing everything first: {e}");
            }
        }
        self.shut_down = true;
        self.cache.shut_down();
        log::warn!("shut down ({mode:?}): nothing more is written; every request fails with EIO until unmount");
    }

    pub fn is_shut_down(&self) -> bool {
        self.shut_down
    }

    /// Fails once the file system has been shut down.
    pub(super) fn check_live(&self) -> FsResult<()> {
        if self.shut_down {
            Err(FsError::ShutDown)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::{BlockDevice, MemDevice};
    use crate::format::ROOT_INO;
    use crate::fs::{mkfs, MkfsOptions, MountOptions, Ordering};
    use std::sync::Arc;

    #[test]
    fn ioctl_flags_map_to_modes() {
        assert_eq!(Shutdown::from_flags(0), Some(Shutdown::Fullsync));
        assert_eq!(Shutdown::from_flags(1), Some(Shutdown::Metaflush));
        assert_eq!(Shutdown::from_flags(2), Some(Shutdown::Nologflush));
        assert_eq!(Shutdown::from_flags(3), None);
        // _IOR('X', 125, __u32)
        assert_eq!(FS_IOC_SHUTDOWN, (2 << 30) | (4 << 16) | ((b'X' as u32) << 8) | 125);
    }

    /// After a shutdown nothing reaches the device, whatever is asked: operations, a sync, the
    /// unmount. With a flush first, what was done before is on the device.
    #[test]
    fn nothing_is_written_after_a_shutdown() {
        for mode in [Shutdown::Fullsync, Shutdown::Metaflush, Shutdown::Nologflush] {
            let dev = Arc::new(MemDevice::new(4096, 4096));
            mkfs(dev.clone(), &MkfsOptions::default(), (1, 0)).unwrap();
            let d: Arc<dyn BlockDevice> = dev.clone();
            let opts = MountOptions { ordering: Ordering::Softdep, cache_blocks: 256, readonly: false };
            let mut fs = Fs::mount(d, opts.clone(), Arc::new(SimClock::new())).unwrap();
            let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
            fs.write(f, 0, b"before").unwrap();
            let before = dev.stats().writes();
            fs.shutdown(mode);
            let after = dev.stats().writes();
            assert_eq!(after > before, mode.flushes(), "{mode:?}");
            assert!(matches!(fs.lookup(ROOT_INO, b"f"), Err(FsError::ShutDown)));
            assert!(matches!(fs.create(ROOT_INO, b"g", 0o644, 0, 0), Err(FsError::ShutDown)));
            assert!(matches!(fs.write(f, 0, b"x"), Err(FsError::ShutDown)));
            assert!(matches!(fs.sync_all(), Err(FsError::ShutDown)));
            fs.unmount().unwrap();
            assert_eq!(dev.stats().writes(), after, "{mode:?}: written after the shutdown");
            // The image is left as in use (not clean), and holds the file only if the shutdown
            // flushed.
            let sb = crate::format::Superblock::probe(|off, b| crate::dev::read_bytes(&*dev, off, b)).unwrap();
            assert_eq!(sb.flags & crate::format::SB_CLEAN, 0);
            let d: Arc<dyn BlockDevice> = dev.clone();
            let mut fs = Fs::mount(d, opts, Arc::new(SimClock::new())).unwrap();
            match fs.lookup(ROOT_INO, b"f") {
                Ok((f, _)) => {
                    assert!(mode.flushes(), "{mode:?}");
                    assert_eq!(fs.read(f, 0, 100).unwrap(), b"before");
                }
                Err(e) => assert!(!mode.flushes() && matches!(e, FsError::NotFound), "{mode:?}: {e}"),
            }
        }
    }

    /// A directory removed while the kernel still holds it (a lookup count, a working
    /// directory) stays allocated without a name, its ".." naming the parent, until it is
    /// forgotten; a shutdown (or a crash) leaves it so. The parent's link for that ".." goes only
    /// once the directory is freed: a full-sync shutdown's image, with the directory still
    /// held, holds no link count too low. (Once its link went at the rmdir's removal, and fsck
    /// counted the orphan's ".": generic/051.)
    #[test]
    fn a_held_removed_directory_keeps_its_parents_link() {
        for ordering in [Ordering::Softdep, Ordering::Sync] {
            let dev = Arc::new(MemDevice::new(4096, 4096));
            mkfs(dev.clone(), &MkfsOptions::default(), (1, 0)).unwrap();
            let d: Arc<dyn BlockDevice> = dev.clone();
            let opts = MountOptions { ordering, cache_blocks: 256, readonly: false };
            let mut fs = Fs::mount(d, opts, Arc::new(SimClock::new())).unwrap();
            let (p, _) = fs.mkdir(ROOT_INO, b"p", 0o755, 0, 0).unwrap();
            let (c, _) = fs.mkdir(p, b"c", 0o755, 0, 0).unwrap();
            fs.mkdir(p, b"other", 0o755, 0, 0).unwrap();
            fs.sync_all().unwrap();
            fs.hold(c, 1);
            fs.rmdir(p, b"c").unwrap();
            assert_eq!(fs.getattr(p).unwrap().nlink, 3, "{ordering:?}: users see the link gone");
            fs.sync_all().unwrap();
            fs.shutdown(Shutdown::Fullsync);
            fs.unmount().unwrap();
            let r = crate::fsck::check(dev.as_ref()).unwrap();
            let bad: Vec<String> = r
                .findings
                .iter()
                .filter(|f| f.class() == crate::fsck::Class::Violation)
                .map(|f| f.to_string())
                .collect();
            assert!(bad.is_empty(), "{ordering:?}: {bad:?}");
            // Forgotten before the unmount instead, it is freed and the parent's link goes.
            let d: Arc<dyn BlockDevice> = dev.clone();
            let opts = MountOptions { ordering, cache_blocks: 256, readonly: false };
            let mut fs = Fs::mount(d, opts, Arc::new(SimClock::new())).unwrap();
            let (p, _) = fs.lookup(ROOT_INO, b"p").unwrap();
            let (o, _) = fs.lookup(p, b"other").unwrap();
            fs.hold(o, 1);
            fs.rmdir(p, b"other").unwrap();
            fs.sync_all().unwrap();
            fs.unhold(o, 1).unwrap();
            fs.unmount().unwrap();
            let r = crate::fsck::check(dev.as_ref()).unwrap();
            let wrong: Vec<String> = r
                .findings
                .iter()
                .filter(|f| {
                    !matches!(f, crate::fsck::Finding::UnrefFile { .. } | crate::fsck::Finding::UnrefDir { .. })
                })
                .map(|f| f.to_string())
                .collect();
            assert!(wrong.is_empty(), "{ordering:?}: {wrong:?}");
        }
    }
}
