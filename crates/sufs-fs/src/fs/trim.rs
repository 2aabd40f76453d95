//! FITRIM (fstrim(8)): the free data blocks handed to the device to forget (`BlockDevice::
//! discard`: holes punched in an image file, a discard on a block device). The free blocks are
//! the groups' block bitmaps as the mount holds them, read under the mount's lock, so nothing
//! allocates one meanwhile. A block is free there only once nothing on disk points to it (soft
//! updates free it after the cleared pointers are written; sync writes them first), so a crash
//! after a trim leaves no file reading a trimmed block; under `async`, which orders nothing, it
//! may (the ordering promises nothing after a crash anyway). Metadata (headers, inode tables)
//! is never free in the bitmaps; blocks a snapshot claimed are its own, in use.

use super::*;

/// `_IOWR('X', 121, struct fstrim_range)`: three u64s, start and length in bytes and the
/// shortest run worth trimming; the length comes back as the bytes trimmed.
pub const FITRIM: u32 = 0xc018_5879;

impl Fs {
    /// Trims the free data blocks within bytes `start..start + len`, in runs of at least
    /// `minlen` bytes; returns the bytes trimmed. EINVAL for a range starting past the end or
    /// shorter than a block, EOPNOTSUPP where the device cannot discard, EROFS read-only.
    pub fn trim(&mut self, start: u64, len: u64, minlen: u64) -> FsResult<u64> {
        self.check_live()?;
        self.check_writable()?;
        // The device's unit: a fragment (the groups' maps are of fragments).
        let unit = self.sb.addr_unit() as u64;
        let first = start.div_ceil(unit);
        let end = (start.saturating_add(len) / unit).min(self.sb.num_blocks);
        if first >= self.sb.num_blocks || len < self.sb.block_size as u64 {
            return Err(FsError::Invalid("trim range past the end or shorter than a block"));
        }
        let min_run = minlen.div_ceil(unit).max(1);
        let runs = self.free_runs(first, end, min_run)?;
        let units: u64 = runs.iter().map(|r| r.1).sum();
        if runs.is_empty() {
            return Ok(0);
        }
        if !self.cache.device().discard(&runs)? {
            return Err(FsError::NotSupported);
        }
        Ok(units * unit)
    }

    /// The runs (first fragment, count) of free data fragments in `first..end` of
    /// `min_run` units or more, from the groups' maps in the cache.
    fn free_runs(&mut self, first: u64, end: u64, min_run: u64) -> FsResult<Vec<(u64, u64)>> {
        let mut runs = Vec::new();
        let mut run: Option<(u64, u64)> = None;
        let mut close = |run: &mut Option<(u64, u64)>| {
            if let Some(r) = run.take().filter(|r| r.1 >= min_run) {
                runs.push(r);
            }
        };
        let mut cg = self.sb.cg_of_block(first);
        while cg < self.sb.ngroups && self.sb.cg_start(cg) < end {
            let base = self.sb.cg_start(cg);
            let n = self.sb.cg_blocks(cg) as u64;
            let free = self.group_free_map(cg)?;
            for b in first.max(base)..end.min(base + n) {
                if !free[(b - base) as usize] {
                    close(&mut run);
                    continue;
                }
                assert!(self.sb.is_data_block(b), "trim: block {b} of group {cg} is metadata, free in the map");
                match &mut run {
                    Some((s, k)) if *s + *k == b => *k += 1,
                    _ => {
                        close(&mut run);
                        run = Some((b, 1));
                    }
                }
            }
            cg += 1;
        }
        close(&mut run);
        Ok(runs)
    }

    /// Whether each fragment of group `cg` is free (`cg_blksfree`, a bit set is free),
    /// decoded and checked.
    fn group_free_map(&mut self, cg: u32) -> FsResult<Vec<bool>> {
        let n = self.sb.cg_blocks(cg);
        let g = self.alloc.group_ufs2(&mut self.cache, &self.sb, cg)?;
        Ok((0..n).map(|f| g.frag_free(f)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;

    fn mounted(dev: &Arc<MemDevice>) -> Fs {
        let o = MountOptions { ordering: Ordering::Softdep, cache_blocks: 256, readonly: false };
        Fs::mount(dev.clone(), o, Arc::new(crate::clock::SimClock::new())).unwrap()
    }

    /// Only free data blocks are forgotten: a file's blocks, written and kept, read back whole
    /// after a trim and a remount; those of a file removed (its frees completed) read as zeros;
    /// the image checks clean.
    #[test]
    fn trim_forgets_free_blocks_only() {
        let dev = Arc::new(MemDevice::new(4096, 8192));
        mkfs(dev.clone(), &MkfsOptions::default(), (1_700_000_000, 0)).unwrap();
        let mut fs = mounted(&dev);
        let keep: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8 + 1).collect();
        let (k, _) = fs.create(ROOT_INO, b"keep", 0o644, 0, 0).unwrap();
        fs.write(k, 0, &keep).unwrap();
        let (g, _) = fs.create(ROOT_INO, b"gone", 0o644, 0, 0).unwrap();
        fs.write(g, 0, &vec![0xAB; 400_000]).unwrap();
        fs.sync_all().unwrap();
        let mut d = fs.iget(g).unwrap();
        let gone_blocks: Vec<u64> = (0..NDADDR as u64).map(|l| fs.bmap(g, &mut d, l, false).unwrap().0).collect();
        assert!(gone_blocks.iter().all(|&b| b != 0));
        fs.unlink(ROOT_INO, b"gone").unwrap();
        fs.sync_all().unwrap();
        fs.sync_all().unwrap();
        let free = fs.statfs().bfree;
        let trimmed = fs.trim(0, u64::MAX, 0).unwrap();
        assert_eq!(trimmed, free * 4096, "every free block");
        let mut buf = vec![0u8; 4096];
        for b in gone_blocks {
            dev.read_block(b, &mut buf).unwrap();
            assert!(buf.iter().all(|&x| x == 0), "block {b} of the removed file forgotten");
        }
        assert!(matches!(fs.trim(8192 * 4096, 4096, 0), Err(FsError::Invalid(_))));
        assert_eq!(fs.trim(0, u64::MAX, u64::MAX / 2).unwrap(), 0, "no run that long");
        fs.unmount().unwrap();
        let mut fs = mounted(&dev);
        let (k2, _) = fs.lookup(ROOT_INO, b"keep").unwrap();
        assert_eq!(fs.read(k2, 0, keep.len()).unwrap(), keep);
        fs.unmount().unwrap();
        let report = crate::fsck::check(dev.as_ref()).unwrap();
        assert!(report.findings.is_empty(), "{:?}", report.findings);
    }
}
