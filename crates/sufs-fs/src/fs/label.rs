//! The volume label of a mounted file system, as Linux's `FS_IOC_GETFSLABEL` and
//! `FS_IOC_SETFSLABEL` read and set it (`xfs_io -c label`, `btrfs filesystem label`); an
//! unmounted one's is `sufs tunefs --label`'s. The label is the superblock's field (docs/SPEC.md):
//! at most `MAX_LABEL` bytes less one, no NUL, so that `fs_volname` ends with a NUL as
//! FreeBSD's tunefs and newfs keep it (its readers copy it up to the NUL). The ioctls carry it in a buffer of `FSLABEL_MAX` bytes,
//! ended by a NUL; a new one is written with the superblock at once.

use super::*;

/// The ioctls' buffer: a label and its NUL (Linux's `FSLABEL_MAX`).
pub const FSLABEL_MAX: usize = 256;
/// `_IOR(0x94, 49, char[FSLABEL_MAX])`.
pub const FS_IOC_GETFSLABEL: u32 = 0x8100_9431;
/// `_IOW(0x94, 50, char[FSLABEL_MAX])`.
pub const FS_IOC_SETFSLABEL: u32 = 0x4100_9432;

impl Fs {
    /// The label as `FS_IOC_GETFSLABEL` answers it: its bytes, NUL-padded to `FSLABEL_MAX`.
    pub fn label_ioctl(&self) -> Vec<u8> {
        let mut out = self.sb.label.clone();
        assert!(out.len() <= MAX_LABEL, "superblock label of {} bytes", out.len());
        out.resize(FSLABEL_MAX, 0);
        out
    }

    /// Sets the label from `FS_IOC_SETFSLABEL`'s buffer: the bytes before its first NUL. A
    /// buffer with no NUL (a label of `FSLABEL_MAX` bytes or more) is EINVAL, as on every Linux
    /// file system; so is one longer than the superblock keeps (`MAX_LABEL`), with a log line
    /// saying so, since the caller sees only the errno: one fewer than `MAX_LABEL`
    /// (`fs_volname` keeps its NUL).
    pub fn set_label_ioctl(&mut self, buf: &[u8]) -> FsResult<()> {
        self.check_writable()?;
        let len = buf.iter().position(|&b| b == 0).ok_or(FsError::Invalid("label without its NUL"))?;
        let max = MAX_LABEL - 1;
        if len > max {
            log::warn!(
                "FS_IOC_SETFSLABEL: a label of {len} bytes refused (EINVAL): this file system keeps at most {max}"
            );
            return Err(FsError::Invalid("label longer than the superblock keeps"));
        }
        self.sb.label = buf[..len].to_vec();
        self.write_superblock()
    }

    /// Records where the file system is mounted in UFS2's `fs_fsmnt`, as FreeBSD's
    /// `ffs_mountfs` copies the mount point there (fsck_ffs prints it as "Last Mounted on",
    /// `sufs inspect IMG sb` as `fsmnt`), and writes the superblock. A path longer than the field is cut so
    /// that a NUL ends it, as `strlcpy` cuts it. Nothing on a read-only mount.
    pub fn set_last_mounted(&mut self, path: &[u8]) -> FsResult<()> {
        if self.check_writable().is_err() {
            return Ok(());
        }
        let u = &mut *self.sb.ufs2;
        let len = path.len().min(crate::format::ufs2::MAXMNTLEN - 1);
        u.fs_fsmnt = [0; crate::format::ufs2::MAXMNTLEN];
        u.fs_fsmnt[..len].copy_from_slice(&path[..len]);
        self.write_superblock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;

    fn fs() -> Fs {
        let dev = Arc::new(MemDevice::new(4096, 4096));
        mkfs(dev.clone(), &MkfsOptions::default(), (1_700_000_000, 0)).unwrap();
        let o = MountOptions { ordering: Ordering::Softdep, cache_blocks: 64, readonly: false };
        Fs::mount(dev, o, Arc::new(crate::clock::SimClock::new())).unwrap()
    }

    fn buf(label: &[u8]) -> Vec<u8> {
        let mut b = label.to_vec();
        b.resize(FSLABEL_MAX, 0);
        b
    }

    #[test]
    fn labels_up_to_the_superblocks_limit_and_no_longer() {
        let mut fs = fs();
        assert_eq!(fs.label_ioctl(), buf(b""));
        fs.set_label_ioctl(&buf(b"data")).unwrap();
        assert_eq!(fs.label_ioctl(), buf(b"data"));
        let max = vec![b'o'; MAX_LABEL - 1];
        fs.set_label_ioctl(&buf(&max)).unwrap();
        assert_eq!(fs.label_ioctl(), buf(&max));
        for bad in [buf(&[b'o'; MAX_LABEL]), vec![b'l'; FSLABEL_MAX]] {
            assert!(matches!(fs.set_label_ioctl(&bad), Err(FsError::Invalid(_))));
            assert_eq!(fs.label_ioctl(), buf(&max), "unchanged");
        }
        fs.set_label_ioctl(&buf(b"")).unwrap();
        assert_eq!(fs.label_ioctl(), buf(b""));
    }

    #[test]
    fn a_ufs2_label_leaves_fs_volname_its_nul() {
        let dev = crate::format::ufs2::newfs::mem_image_of(4 << 20, 4096, 4096);
        let o = MountOptions { ordering: Ordering::Softdep, cache_blocks: 64, readonly: false };
        let mut fs = Fs::mount(dev, o, Arc::new(crate::clock::SimClock::new())).unwrap();
        let max = vec![b'u'; MAX_LABEL - 1];
        fs.set_label_ioctl(&buf(&max)).unwrap();
        let volname = fs.sb.to_ufs2().fs_volname;
        assert_eq!((&volname[..MAX_LABEL - 1], volname[MAX_LABEL - 1]), (&max[..], 0));
        assert!(matches!(fs.set_label_ioctl(&buf(&[b'u'; MAX_LABEL])), Err(FsError::Invalid(_))));
        assert_eq!(fs.label_ioctl(), buf(&max), "unchanged");
    }
}
