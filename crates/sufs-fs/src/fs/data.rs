//! File data: read, write (with the Block Register's placement), truncate and setattr.

use super::*;

/// A read planned under the lock (`Fs::read_plan`): what could be copied is in `out`, and
/// `runs` says what is still to come from the device.
struct ReadPlan {
    out: Vec<u8>,
    runs: Vec<ReadRun>,
    /// The allocator's count of freed blocks when the plan was made.
    frees: u64,
}

impl ReadPlan {
    /// Reads the planned runs from the device (no lock needed).
    fn fetch(&mut self, dev: &dyn BlockDevice) -> FsResult<()> {
        let mut run = Vec::new();
        for r in &self.runs {
            run.resize(r.nblk * dev.block_size(), 0);
            dev.read_run(r.bno, &mut run)?;
            self.out[r.at..r.at + r.len].copy_from_slice(&run[r.skip..r.skip + r.len]);
        }
        Ok(())
    }
}

/// `nblk` blocks from `bno` on, of which `len` bytes from `skip` on go to `out[at..]`.
struct ReadRun {
    at: usize,
    bno: u64,
    nblk: usize,
    skip: usize,
    len: usize,
}

impl Fs {
    /// Reads up to `len` bytes at `off` (fewer at the end of the file). Blocks not cached are
    /// read from the device here, with the caller holding the file system.
    pub fn read(&mut self, ino: u32, off: u64, len: usize) -> FsResult<Vec<u8>> {
        let mut plan = self.read_plan(ino, off, len)?;
        let mut run = Vec::new();
        for r in std::mem::take(&mut plan.runs) {
            if r.nblk == 1 {
                // A single block is kept in the cache (a small file read again, a partial write).
                let b = self.cache.read(r.bno)?;
                plan.out[r.at..r.at + r.len].copy_from_slice(&b[r.skip..r.skip + r.len]);
            } else {
                self.cache.read_past(r.bno, r.nblk, &mut run)?;
                plan.out[r.at..r.at + r.len].copy_from_slice(&run[r.skip..r.skip + r.len]);
            }
        }
        Ok(plan.out)
    }

    /// `read` on a shared file system, its device reads outside the lock: the lock is held to
    /// plan the read (the block map walked, cached blocks and holes copied, the atime set),
    /// released while the blocks not cached come from the device (into the reply, not the
    /// cache), and taken again to check that no block was freed meanwhile. If one was, it may
    /// have been handed out again and rewritten, so the read is done again under the lock. A
    /// write to the same range meanwhile may or may not be seen, as with any concurrent read.
    pub fn read_shared(fs: &SharedFs, ino: u32, off: u64, len: usize) -> FsResult<Vec<u8>> {
        let (mut plan, dev) = {
            let mut g = lock(fs);
            (g.read_plan(ino, off, len)?, g.cache.device().clone())
        };
        if plan.runs.is_empty() {
            return Ok(plan.out);
        }
        plan.fetch(dev.as_ref())?;
        lock(fs).read_finish(plan, ino, off, len)
    }

    /// The last step of `read_shared`, under the lock again.
    fn read_finish(&mut self, plan: ReadPlan, ino: u32, off: u64, len: usize) -> FsResult<Vec<u8>> {
        if self.alloc.frees() != plan.frees {
            self.cache.count_read_redone();
            return self.read(ino, off, len);
        }
        self.cache.count_misses(plan.runs.iter().map(|r| r.nblk as u64).sum());
        Ok(plan.out)
    }

    /// Plans a read under the lock: the bytes of cached blocks and holes in `out`, the runs of
    /// blocks to read from the device listed (the blocks of the request that follow one
    /// another on disk, none of them cached, form one run: a sequential read's requests are up
    /// to 1 MiB). The atime is set here. Reservations and snapshots are read here whole.
    fn read_plan(&mut self, ino: u32, off: u64, len: usize) -> FsResult<ReadPlan> {
        let frees = self.alloc.frees();
        let mut d = self.iget(ino)?;
        if d.is_dir() {
            return Err(FsError::IsDir);
        }
        // A size past the largest file the block map addresses is damage (2^50 with two
        // blocks): served as it is, a reader would get zeros for ever. A snapshot's size is the
        // file system's, checked when the mount takes it up.
        if d.size > self.sb.max_file_size() && d.flags & DI_SNAPSHOT == 0 {
            return Err(self.damaged(format!(
                "inode {ino} has size {} past the largest file ({})",
                d.size,
                self.sb.max_file_size()
            )));
        }
        let out = if off >= d.size {
            Vec::new()
        } else if d.flags & DI_UNMOVABLE != 0 {
            // A reservation's blocks belong to its owner, who writes them on the device.
            return Ok(ReadPlan { out: self.br_read(ino, &mut d, off, len)?, runs: Vec::new(), frees });
        } else if d.flags & DI_SNAPSHOT != 0 {
            // A snapshot reads as the frozen file system.
            return Ok(ReadPlan { out: self.snap_read(&d, off, len)?, runs: Vec::new(), frees });
        } else {
            let end = d.size.min(off.saturating_add(len as u64));
            vec![0u8; (end - off) as usize]
        };
        let mut plan = ReadPlan { out, runs: Vec::new(), frees };
        let bs = self.sb.block_size as u64;
        let end = off + plan.out.len() as u64;
        let mut pos = off;
        while pos < end {
            let lbn = pos / bs;
            let skip = (pos % bs) as usize;
            let (bno, _) = self.bmap(ino, &mut d, lbn, false)?;
            let mut nblk = 1;
            if bno != 0 && !self.cache.is_cached(bno) {
                while (lbn + nblk) * bs < end && nblk < MAX_READ_RUN {
                    let (next, _) = self.bmap(ino, &mut d, lbn + nblk, false)?;
                    if next != bno + nblk || self.cache.is_cached(next) {
                        break;
                    }
                    nblk += 1;
                }
            }
            let n = (((lbn + nblk) * bs).min(end) - pos) as usize;
            let at = (pos - off) as usize;
            // A last block in fragments is read as its run, into the cache: a whole block
            // there would hold the next file's fragments.
            let run = nblk == 1 && self.run_len(d.size, lbn) < bs as usize;
            if bno != 0 && (run || self.cache.is_cached(bno)) {
                plan.out[at..at + n].copy_from_slice(&self.read_run(bno, d.size, lbn)?[skip..skip + n]);
            } else if bno != 0 {
                plan.runs.push(ReadRun { at, bno, nblk: nblk as usize, skip, len: n });
            }
            pos += n as u64;
        }
        self.accessed(ino, &mut d)?;
        Ok(plan)
    }

    /// Writes `data` at `off`. A write that runs out of space part way is tried again whole
    /// after the frees soft updates hold have completed (`retry_nospace`): the same bytes at the
    /// same offset.
    pub fn write(&mut self, ino: u32, off: u64, data: &[u8]) -> FsResult<usize> {
        self.write_by(ino, off, data, Writer::Own)
    }

    /// `write` for `writer`, which says what the write does beside the data (`Writer`).
    pub fn write_by(&mut self, ino: u32, off: u64, data: &[u8], writer: Writer) -> FsResult<usize> {
        self.retry_nospace(|fs| fs.write_once(ino, off, data, writer))
    }

    pub(super) fn write_once(&mut self, ino: u32, off: u64, data: &[u8], writer: Writer) -> FsResult<usize> {
        self.check_writable()?;
        let mut d = self.iget(ino)?;
        if d.is_dir() {
            return Err(FsError::IsDir);
        }
        if d.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0 {
            return Err(FsError::Perm);
        }
        if d.flags & DI_APPEND != 0 && off < d.size {
            self.check_append_only(ino, &mut d, off, data)?;
        }
        let r = self.keep_on_error(ino, &mut d, |fs, d| fs.write_inner(ino, d, off, data));
        let n = match r {
            Ok(n) => n,
            Err(FsError::NoSpace) if d.size > 0 => 0,
            Err(e) => return Err(e),
        };
        if writer != Writer::KernelTimes {
            self.touch_mc(&mut d);
        }
        if writer == Writer::Own {
            // The library's writes clear set-user-ID, as POSIX allows.
            d.mode &= !(libc::S_ISUID as u16);
        }
        self.iput(ino, &d)?;
        self.balance()?;
        if n == 0 && !data.is_empty() {
            return Err(FsError::NoSpace);
        }
        Ok(n)
    }

    /// Fills the file system with a new file `name` in the root (tests): written in chunks
    /// until one finds no space. Returns its inode.
    #[cfg(test)]
    pub(super) fn fill_disk(&mut self, name: &[u8]) -> u32 {
        let (f, _) = self.create(ROOT_INO, name, 0o644, 0, 0).expect("the file that fills the disk");
        let chunk = vec![1u8; 64 * 4096];
        let mut off = 0;
        while let Ok(n) = self.write(f, off, &chunk) {
            off += n as u64;
        }
        f
    }

    /// A write below the end of an append-only file (`d.size`), which takes writes at its end
    /// only: allowed where it leaves the file as it was, i.e. where its bytes equal the
    /// file's, or fall into a hole (EPERM otherwise). The kernel's writeback cache sends whole
    /// pages, so an append to a file whose end is inside a page comes as a write from that
    /// page's start; and its writes of one append, sent at once, may arrive out of order, the
    /// later one first leaving a hole before it.
    fn check_append_only(&mut self, ino: u32, d: &mut Dinode, off: u64, data: &[u8]) -> FsResult<()> {
        let bs = self.sb.block_size as u64;
        let end = d.size.min(off + data.len() as u64);
        let mut pos = off;
        while pos < end {
            let (lbn, skip) = (pos / bs, (pos % bs) as usize);
            let n = ((lbn + 1) * bs).min(end) - pos;
            let (bno, _) = self.bmap(ino, d, lbn, false)?;
            let at = (pos - off) as usize;
            let size = d.size;
            if bno != 0 && self.read_run(bno, size, lbn)?[skip..skip + n as usize] != data[at..at + n as usize] {
                return Err(FsError::Perm);
            }
            pos += n;
        }
        Ok(())
    }

    /// Writes data into the file's blocks, allocating as needed; updates `d` in memory (size,
    /// block pointers, block count). On ENOSPC part-way, returns what was written.
    pub(super) fn write_inner(&mut self, ino: u32, d: &mut Dinode, off: u64, data: &[u8]) -> FsResult<usize> {
        let end = off.checked_add(data.len() as u64).ok_or(FsError::TooBig)?;
        if end > self.sb.max_file_size() {
            return Err(FsError::TooBig);
        }
        let bs = self.sb.block_size as u64;
        let mut pos = off;
        while pos < end {
            let lbn = pos / bs;
            let boff = (pos % bs) as usize;
            let n = ((bs - boff as u64).min(end - pos)) as usize;
            let direct_run = self.has_frags() && lbn < NDADDR as u64;
            let got =
                if direct_run { self.bmap_run(ino, d, lbn, pos + n as u64) } else { self.bmap(ino, d, lbn, true) };
            let (bno, fresh) = match got {
                Ok(x) => x,
                Err(FsError::NoSpace) if direct_run => {
                    // No indirect block was made for a direct run, and a run that could not
                    // grow keeps what it held.
                    if pos > off {
                        break;
                    }
                    return Err(FsError::NoSpace);
                }
                Err(FsError::NoSpace) => {
                    // The indirect blocks made for this block, which got none, are freed
                    // again (each is empty), the inode written with its pointers as they were:
                    // kept, they would be space held past the file's end, and with an empty
                    // file (which is not written back below) a pointer no inode on disk ever
                    // carries, whose dependency would never complete.
                    self.punch_blocks(ino, d, lbn, lbn + 1)?;
                    if pos > off {
                        break;
                    }
                    return Err(FsError::NoSpace);
                }
                Err(e) => return Err(e),
            };
            let src = &data[(pos - off) as usize..(pos - off) as usize + n];
            let len = self.run_len(d.size.max(pos + n as u64), lbn);
            // A new run is in the cache already, zeroed and dirty (`bmap`, `bmap_run`).
            let buf = if fresh {
                self.cache.fresh_frags(bno, len)
            } else if n == len {
                self.cache.create_frags(bno, len)
            } else {
                self.cache.modify_frags(bno, len)?
            };
            buf[boff..boff + n].copy_from_slice(src);
            self.cache.set_data(bno);
            if self.async_full_blocks && boff + n == bs as usize {
                self.write_bufs(&[bno], WriteKind::Async)?;
            }
            pos += n as u64;
            if pos > d.size {
                d.size = pos;
            }
            if self.cache.over_capacity() {
                self.make_room()?;
            }
        }
        Ok((pos - off) as usize)
    }

    pub fn setattr(&mut self, ino: u32, a: &SetAttr) -> FsResult<Dinode> {
        self.check_writable()?;
        let mut d = self.iget(ino)?;
        let immutable = d.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0;
        self.check_setattr(&d, a)?;
        if let Some(size) = a.size {
            if d.is_dir() {
                return Err(FsError::IsDir);
            }
            if !d.is_reg() {
                return Err(FsError::Invalid("truncate of a non-regular file"));
            }
            if immutable {
                return Err(FsError::Perm);
            }
            self.keep_on_error(ino, &mut d, |fs, d| fs.truncate(ino, d, size))?;
            self.touch_mc(&mut d);
        }
        if let Some(m) = a.mode {
            d.mode = (d.mode & S_IFMT) | (m as u16 & 0o7777);
            self.touch_c(&mut d);
        }
        if let Some(u) = a.uid {
            d.uid = u;
            self.touch_c(&mut d);
        }
        if let Some(g) = a.gid {
            d.gid = g;
            self.touch_c(&mut d);
        }
        if let Some((s, ns)) = a.atime {
            d.atime = s;
            d.atime_ns = ns;
            self.touch_c(&mut d);
        }
        if let Some((s, ns)) = a.mtime {
            d.mtime = s;
            d.mtime_ns = ns;
            self.touch_c(&mut d);
        }
        if let Some((s, ns)) = a.ctime {
            d.ctime = s;
            d.ctime_ns = ns;
        }
        self.iput(ino, &d)?;
        self.balance()?;
        // As it is now: the tasks `balance` ran may have dropped a link.
        self.getattr(ino)
    }

    /// Sets the size of a regular file: shrinking frees the blocks past the end and zeroes the
    /// tail of the last block, so a later extension reads zeros.
    pub(super) fn truncate(&mut self, ino: u32, d: &mut Dinode, size: u64) -> FsResult<()> {
        if size > self.sb.max_file_size() {
            return Err(FsError::TooBig);
        }
        let bs = self.sb.block_size as u64;
        if size < d.size {
            // The block that will hold the new last byte is allocated first, while the
            // file goes on past it (a whole block), as `ffs_truncate` allocates it before it cuts:
            // no inode on disk, in any order of the writes, has the new size past a hole.
            let last = size.checked_sub(1).map(|b| b / bs);
            if let Some(lbn) = last.filter(|_| d.is_reg()) {
                if self.bmap(ino, d, lbn, false)?.0 == 0 {
                    self.write_inner(ino, d, size - 1, &[0])?;
                }
            }
            if !size.is_multiple_of(bs) {
                let (bno, _) = self.bmap(ino, d, size / bs, false)?;
                if bno != 0 {
                    let old = d.size;
                    self.modify_run(bno, old, size / bs)?[(size % bs) as usize..].fill(0);
                    self.cache.set_data(bno);
                }
            }
            let old = d.size;
            d.size = size;
            self.truncate_blocks(ino, d, size.div_ceil(bs), old, vec![])?;
            // The last direct block, in fragments, gives up those past the new end.
            self.shrink_last_run(ino, d, old)?;
            self.keep_end_allocated(ino, d)?;
        } else {
            // The last block, if in fragments, becomes whole: it is no longer the last. That
            // stays so if what follows fails (the size then ends at that block's end, as
            // FreeBSD's ffs_balloc leaves it).
            if size > d.size {
                self.fill_last_block(ino, d, (size - 1) / bs)?;
                self.extend_last_run(ino, d, size)?;
            }
            let grown = d.size;
            d.size = size;
            if let Err(e) = self.keep_end_allocated(ino, d) {
                d.size = grown;
                return Err(e);
            }
        }
        Ok(())
    }

    /// UFS2's rule: no file ends in a hole, the block holding its last byte is allocated
    /// (FreeBSD's `ffs_truncate` allocates it; fsck_ffs's pass 1 calls a hole there "FILE SIZE
    /// BEYOND END OF ALLOCATED FILE", fatal within the direct blocks). Allocates it, zeroed (in
    /// the direct blocks, the fragments the size reaches), where a truncate or a punched hole
    /// left it a hole.
    pub(super) fn keep_end_allocated(&mut self, ino: u32, d: &mut Dinode) -> FsResult<()> {
        let bs = self.sb.block_size as u64;
        if !d.is_reg() || d.size == 0 {
            return Ok(());
        }
        let (bno, _) = self.bmap(ino, d, (d.size - 1) / bs, false)?;
        if bno == 0 {
            self.write_inner(ino, d, d.size - 1, &[0])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::MemDevice;
    use crate::fs::falloc::{FallocMode, FallocOp};
    use crate::fs::{mkfs, MkfsOptions, MountOptions};

    /// A 2048-block file system without a reserve, filled by a file "fill" but for `free`
    /// blocks (its first ones, punched), everything written.
    fn full_but(ordering: Ordering, free: u64, before: impl FnOnce(&mut Fs)) -> (Arc<MemDevice>, Fs) {
        let dev = Arc::new(MemDevice::new(4096, 2048));
        mkfs(dev.clone(), &MkfsOptions { minfree: Some(0), ..Default::default() }, (1, 0)).unwrap();
        let d: Arc<dyn BlockDevice> = dev.clone();
        let opts = MountOptions { ordering, cache_blocks: 256, readonly: false };
        let mut fs = Fs::mount(d, opts, Arc::new(SimClock::new())).unwrap();
        before(&mut fs);
        let fill = fs.fill_disk(b"fill");
        let punch = FallocMode { op: FallocOp::PunchHole, keep_size: true };
        fs.fallocate(fill, 0, free * 4096, punch).unwrap();
        fs.sync_all().unwrap();
        assert_eq!(fs.statfs().bfree, free, "{ordering:?}");
        (dev, fs)
    }

    /// A soft updates mount of the UFS2 image `dev`, on a clock of its own.
    fn mount_ufs2(dev: &Arc<MemDevice>) -> Fs {
        let opts = MountOptions { ordering: Ordering::Softdep, cache_blocks: 256, readonly: false };
        Fs::mount(dev.clone(), opts, Arc::new(SimClock::new())).unwrap()
    }

    /// Sync, unmount, and fsck finds nothing.
    fn unmount_clean(dev: &MemDevice, mut fs: Fs, what: &str) {
        fs.sync_all().unwrap();
        fs.unmount().unwrap();
        let r = crate::fsck::check(dev).unwrap();
        let found: Vec<String> = r.findings.iter().map(|f| f.to_string()).collect();
        assert!(found.is_empty(), "{what}: {found:?}");
    }

    /// A truncation within a file's last fragment run first writes the file's new pointers and
    /// names (an fsync inside the operation), which lets the task list run: the link drop that
    /// an unlink of the file's other name, in the same directory block, queued runs then. The truncation's copy of the dinode, taken
    /// before, must not put the old count back: the file keeps its one name and a count of one,
    /// and a clean unmount leaves nothing for fsck (it found a count of 2 for one name before).
    #[test]
    fn a_truncation_that_syncs_the_file_keeps_a_link_dropped_meanwhile() {
        // 32 KiB blocks of 4 KiB fragments, as `sufs mkfs` makes them.
        let dev = crate::format::ufs2::newfs::mem_image_of(8 << 20, 32768, 4096);
        let mut fs = mount_ufs2(&dev);
        let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        fs.write(f, 0, &[7; 12_000]).unwrap();
        // "f" on disk: its removal waits for its block's write to drop the link; "g" is new in
        // that block, which the fsync writes for it.
        fs.sync_all().unwrap();
        fs.link(f, ROOT_INO, b"g").unwrap();
        fs.unlink(ROOT_INO, b"f").unwrap();
        assert_eq!(fs.iget(f).unwrap().nlink, 2, "the drop waits for the directory's write");
        // The run grows (new pointers, so the truncation syncs the file), then shrinks.
        fs.write(f, 12_000, &[8; 4_000]).unwrap();
        let d = fs.setattr(f, &SetAttr { size: Some(3_000), ..Default::default() }).unwrap();
        assert_eq!((d.nlink, d.size), (1, 3_000), "the truncation's reply");
        assert_eq!(fs.iget(f).unwrap().nlink, 1, "the count on the dinode");
        assert_eq!(fs.lookup(ROOT_INO, b"g").unwrap().0, f);
        unmount_clean_ufs2(&dev, fs, "a truncation that synced the file");
    }

    /// A write into an empty file that gets its indirect block and then finds no data block
    /// (the disk full) leaves nothing behind: the indirect block is given back, no dependency
    /// waits on a pointer no inode carries, and sync, unmount and fsck find everything in order.
    /// Written at the first block past the direct ones and at the first of the double
    /// indirect tree, with one block free and (for the double) two.
    #[test]
    fn a_write_that_gets_its_indirect_block_and_no_data_block_leaves_nothing() {
        let p = 4096 / 8;
        for ordering in [Ordering::Softdep, Ordering::Sync, Ordering::Async] {
            for (lbn, free) in [(NDADDR as u64, 1), (NDADDR as u64 + p, 1), (NDADDR as u64 + p, 2)] {
                let what = format!("{ordering:?} {lbn} {free}");
                let mut f = 0;
                let (dev, mut fs) =
                    full_but(ordering, free, |fs| f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().0);
                let r = fs.write(f, lbn * 4096, &[2u8; 4096]);
                assert!(matches!(r, Err(FsError::NoSpace)), "{what}: {r:?}");
                let d = fs.getattr(f).unwrap();
                assert_eq!((d.size, d.blocks, d.ib), (0, 0, [0; NIADDR]), "{what}");
                fs.sync_all().unwrap();
                assert_eq!(fs.statfs().bfree, free, "{what}: the indirect blocks came back");
                unmount_clean(&dev, fs, &what);
            }
        }
    }

    /// A new name in a directory of twelve full blocks, on a disk with one block free: the
    /// directory's indirect block takes it and its thirteenth block finds none. The create
    /// fails with ENOSPC and leaves nothing behind, as a write does.
    #[test]
    fn a_name_whose_directory_gets_its_indirect_block_and_no_block_leaves_nothing() {
        let name = |i: usize| format!("{i:0>200}").into_bytes();
        for ordering in [Ordering::Softdep, Ordering::Sync, Ordering::Async] {
            let (mut dir, mut i) = (0, 0);
            let (dev, mut fs) = full_but(ordering, 1, |fs| {
                dir = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().0;
                while fs.getattr(dir).unwrap().size < NDADDR as u64 * 4096 {
                    fs.create(dir, &name(i), 0o644, 0, 0).unwrap();
                    i += 1;
                }
            });
            let r = loop {
                match fs.create(dir, &name(i), 0o644, 0, 0) {
                    Ok(_) => i += 1,
                    Err(e) => break e,
                }
            };
            assert!(matches!(r, FsError::NoSpace), "{ordering:?}: {r:?}");
            let d = fs.getattr(dir).unwrap();
            assert_eq!((d.size, d.ib), (NDADDR as u64 * 4096, [0; NIADDR]), "{ordering:?}");
            fs.sync_all().unwrap();
            assert_eq!(fs.statfs().bfree, 1, "{ordering:?}: the indirect block came back");
            unmount_clean(&dev, fs, &format!("{ordering:?}"));
        }
    }

    /// A UFS2 image of 4 KiB blocks of 1 KiB fragments with nothing free but one whole block:
    /// a file "f" of eleven blocks and a tail of two fragments, every loose fragment taken by
    /// small files (so that f's tail cannot grow in place), and a filler file "fill" of which
    /// one block was punched out.
    fn ufs2_full_but_a_block(ordering: Ordering) -> (Arc<MemDevice>, Fs, u32, Vec<u8>) {
        let dev = crate::format::ufs2::newfs::mem_image(4 << 20, 1024);
        let opts = MountOptions { ordering, cache_blocks: 256, readonly: false };
        let mut fs = Fs::mount(dev.clone(), opts, Arc::new(SimClock::new())).unwrap();
        let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        let data: Vec<u8> = (0..11 * 4096 + 1500).map(|i| (i % 251) as u8).collect();
        fs.write(f, 0, &data).unwrap();
        let fill = fs.fill_disk(b"fill");
        for i in 0.. {
            let Ok((g, _)) = fs.create(ROOT_INO, format!("g{i}").as_bytes(), 0o644, 0, 0) else { break };
            if fs.write(g, 0, b"x").is_err() {
                break;
            }
        }
        let punch = FallocMode { op: FallocOp::PunchHole, keep_size: true };
        fs.fallocate(fill, 20 * 4096, 4096, punch).unwrap();
        fs.sync_all().unwrap();
        assert_eq!(fs.statfs().bfree, 4, "{ordering:?}: one block of four fragments free");
        (dev, fs, f, data)
    }

    /// Sync, unmount, and UFS2's checker finds nothing.
    fn unmount_clean_ufs2(dev: &MemDevice, mut fs: Fs, what: &str) {
        fs.sync_all().unwrap_or_else(|e| panic!("{what}: sync: {e}"));
        fs.unmount().unwrap();
        let len = dev.num_blocks() * dev.addr_unit() as u64;
        let r = crate::fsck::ufs2::check(dev as &dyn BlockDevice, len, &Default::default()).unwrap();
        let found: Vec<String> = r.findings.iter().map(|f| f.to_string()).collect();
        assert!(found.is_empty(), "{what}: {found:?}");
    }

    /// Growing a file whose tail is in fragments past its direct blocks on a full disk: the
    /// tail moves to a whole block (the one free), then the block for the new last byte finds
    /// no space. The operation fails with ENOSPC, but the moved tail is kept in the inode, as
    /// FreeBSD's ffs_balloc keeps it: dropped, its dependency never drained and every later
    /// write of the mount failed (found by fstests' generic/051 on UFS2). Truncate up,
    /// fallocate and zero range take that path; the file's bytes are unchanged, sync and the
    /// checker find nothing.
    #[test]
    fn growing_past_the_direct_blocks_on_a_full_disk_keeps_the_moved_tail() {
        type Grow = fn(&mut Fs, u32) -> FsResult<Dinode>;
        let grow: [(&str, Grow); 3] = [
            ("truncate", |fs, f| fs.setattr(f, &SetAttr { size: Some(30 * 4096), ..Default::default() })),
            ("fallocate", |fs, f| {
                fs.fallocate(f, 0, 30 * 4096, FallocMode { op: FallocOp::Allocate, keep_size: false })
            }),
            ("zero range", |fs, f| {
                fs.fallocate(f, 29 * 4096, 4096, FallocMode { op: FallocOp::ZeroRange, keep_size: false })
            }),
        ];
        for ordering in [Ordering::Softdep, Ordering::Sync, Ordering::Async] {
            for (how, op) in grow {
                let what = format!("{ordering:?} {how}");
                let (dev, mut fs, f, data) = ufs2_full_but_a_block(ordering);
                let r = op(&mut fs, f);
                assert!(matches!(r, Err(FsError::NoSpace)), "{what}: {r:?}");
                let d = fs.getattr(f).unwrap();
                assert!(d.size == 12 * 4096 || d.size == data.len() as u64, "{what}: size {}", d.size);
                let got = fs.read(f, 0, data.len()).unwrap();
                assert!(got == data, "{what}: the file's bytes changed");
                fs.sync_all().unwrap_or_else(|e| panic!("{what}: sync after the failed growth: {e}"));
                unmount_clean_ufs2(&dev, fs, &what);
            }
        }
    }

    /// A hole punched over the last blocks of a UFS2 file past its direct blocks, on a disk
    /// with no block free: the last block stays allocated, zeroed (UFS2 wants a file's last
    /// block allocated), the blocks before it are freed, and nothing waits on a block the
    /// disk does not have.
    #[test]
    fn a_hole_punched_at_the_end_of_a_file_on_a_full_disk_needs_no_block() {
        for ordering in [Ordering::Softdep, Ordering::Sync, Ordering::Async] {
            let what = format!("{ordering:?}");
            let (dev, mut fs, _, _) = ufs2_full_but_a_block(ordering);
            let (fill, _) = fs.lookup(ROOT_INO, b"fill").unwrap();
            let (h, _) = fs.create(ROOT_INO, b"h", 0o644, 0, 0).unwrap();
            assert!(fs.write(h, 0, &[5u8; 8192]).is_ok(), "{what}");
            fs.sync_all().unwrap();
            assert_eq!(fs.statfs().bfree, 0, "{what}");
            let size = fs.getattr(fill).unwrap().size;
            let last = (size - 1) / 4096;
            let punch = FallocMode { op: FallocOp::PunchHole, keep_size: true };
            fs.fallocate(fill, (last - 2) * 4096, size - (last - 2) * 4096, punch)
                .unwrap_or_else(|e| panic!("{what}: punch: {e}"));
            let d = fs.getattr(fill).unwrap();
            assert_eq!(d.size, size, "{what}");
            let tail = fs.read(fill, (last - 2) * 4096, (size - (last - 2) * 4096) as usize).unwrap();
            assert!(tail.iter().all(|&b| b == 0), "{what}: the punched range reads as zeros");
            fs.sync_all().unwrap();
            assert_eq!(fs.statfs().bfree, 2 * 4, "{what}: two blocks freed, the last kept");
            unmount_clean_ufs2(&dev, fs, &what);
        }
    }

    /// No UFS2 file ends in a hole, within its direct blocks too (FreeBSD's fsck_ffs stops a
    /// boot's check on one: "FILE SIZE ... BEYOND END OF ALLOCATED FILE", an unexpected soft
    /// updates inconsistency): a truncate up, a truncate down into a hole and a hole punched
    /// over a file's end leave the block holding its last byte allocated (its tail's fragments
    /// in the last direct block), the bytes read the same, and the checker finds nothing.
    #[test]
    fn ufs2_files_ending_within_their_direct_blocks_end_in_an_allocated_block() {
        type Op = fn(&mut Fs, u32);
        fn set(fs: &mut Fs, f: u32, size: u64) {
            fs.setattr(f, &SetAttr { size: Some(size), ..Default::default() }).unwrap();
        }
        let cases: [(&str, Op); 4] = [
            ("truncate up an empty file", |fs, f| set(fs, f, 100_000)),
            ("truncate up past a tail", |fs, f| {
                fs.write(f, 0, &[7; 1000]).unwrap();
                set(fs, f, 30_003);
            }),
            ("truncate down into a hole", |fs, f| {
                fs.write(f, 0, &[7; 1000]).unwrap();
                fs.write(f, 40_000, &[8; 1000]).unwrap();
                set(fs, f, 20_100);
            }),
            ("punch over the end", |fs, f| {
                fs.write(f, 0, &[7; 30_000]).unwrap();
                let punch = FallocMode { op: FallocOp::PunchHole, keep_size: true };
                fs.fallocate(f, 8192, 30_000 - 8192, punch).unwrap();
            }),
        ];
        for fsize in [1024, 4096] {
            for ordering in [Ordering::Softdep, Ordering::Sync] {
                for (how, op) in cases {
                    let what = format!("{ordering:?}, fragments of {fsize}: {how}");
                    let dev = crate::format::ufs2::newfs::mem_image(4 << 20, fsize);
                    let opts = MountOptions { ordering, cache_blocks: 256, readonly: false };
                    let mut fs = Fs::mount(dev.clone(), opts, Arc::new(SimClock::new())).unwrap();
                    let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
                    op(&mut fs, f);
                    let mut d = fs.getattr(f).unwrap();
                    let last = (d.size - 1) / 4096;
                    let (bno, _) = fs.bmap(f, &mut d, last, false).unwrap();
                    assert_ne!(bno, 0, "{what}: the last block (of a {}-byte file) is a hole", d.size);
                    let before = fs.read(f, 0, d.size as usize).unwrap();
                    unmount_clean_ufs2(&dev, fs, &what);
                    let opts = MountOptions { ordering, cache_blocks: 256, readonly: false };
                    let mut fs = Fs::mount(dev.clone(), opts, Arc::new(SimClock::new())).unwrap();
                    assert!(fs.read(f, 0, d.size as usize).unwrap() == before, "{what}: bytes changed");
                }
            }
        }
    }

    /// A write into runs it allocates (a file's tail in fragments, whole direct blocks, and
    /// blocks under an indirect one) fills the zeroed buffers the allocation made, without
    /// zeroing them a second time; the bytes, and the zeros of a partly written run, are on
    /// disk after a remount, and the checker finds nothing.
    #[test]
    fn a_write_fills_new_runs_without_zeroing_them_again() {
        let dev = crate::format::ufs2::newfs::mem_image(8 << 20, 4096);
        let mut fs = mount_ufs2(&dev);
        let (small, _) = fs.create(ROOT_INO, b"small", 0o644, 0, 0).unwrap();
        let (large, _) = fs.create(ROOT_INO, b"large", 0o644, 0, 0).unwrap();
        let tail: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let body: Vec<u8> = (0..(14 * 32768 + 100) as u32).map(|i| (i % 253) as u8).collect();
        let zeroed = fs.cache.stats().zeroed;
        fs.write(small, 0, &tail).unwrap();
        // Past the twelve direct blocks: the last two and the tail go under the indirect block.
        fs.write(large, 0, &body).unwrap();
        assert_eq!(fs.cache.stats().zeroed, zeroed, "new runs zeroed again by the write");
        unmount_clean_ufs2(&dev, fs, "new runs");
        let mut fs = mount_ufs2(&dev);
        assert!(fs.read(small, 0, 8192).unwrap() == tail, "the tail's bytes");
        assert!(fs.read(large, 0, body.len() + 10).unwrap() == body, "the body's bytes");
        // The runs' bytes past the data are the allocation's zeros: seen once the files grow
        // over them.
        for (f, data, end) in [(small, &tail, 8192), (large, &body, 15 * 32768)] {
            fs.setattr(f, &SetAttr { size: Some(end as u64), ..Default::default() }).unwrap();
            let got = fs.read(f, 0, end).unwrap();
            assert!(got[..data.len()] == data[..], "inode {f}: the data kept");
            assert!(got[data.len()..].iter().all(|&b| b == 0), "inode {f}: zeros past the data");
        }
    }

    /// A short UFS2 symbolic link (its target in its block pointers) given extended attributes
    /// holds blocks for them alone: its target is still read from the inode, never its text
    /// taken for block pointers ("block pointer outside the data area", fstests' generic/062),
    /// through a remount and with the attributes removed again; the checker finds nothing.
    #[test]
    fn a_short_ufs2_symlink_with_attributes_keeps_its_target() {
        use crate::fs::xattr::XattrMode;
        let dev = crate::format::ufs2::newfs::mem_image(4 << 20, 1024);
        let mut fs = mount_ufs2(&dev);
        let (l, _) = fs.symlink(ROOT_INO, b"l", b"/tmp/some/where", 0, 0).unwrap();
        fs.setxattr(l, b"trusted.a", b"hello", XattrMode::Any, 0).unwrap();
        fs.setxattr(l, b"trusted.b", &[b'x'; 3000], XattrMode::Any, 0).unwrap();
        assert!(fs.getattr(l).unwrap().blocks > 0, "the attributes hold blocks");
        assert_eq!(fs.readlink(l).unwrap(), b"/tmp/some/where");
        fs.sync_all().unwrap();
        fs.unmount().unwrap();
        let mut fs = mount_ufs2(&dev);
        assert_eq!(fs.readlink(l).unwrap(), b"/tmp/some/where");
        fs.removexattr(l, b"trusted.b", 0).unwrap();
        fs.removexattr(l, b"trusted.a", 0).unwrap();
        assert_eq!(fs.readlink(l).unwrap(), b"/tmp/some/where");
        unmount_clean_ufs2(&dev, fs, "short link with attributes");
    }

    /// A UFS2 directory records its depth below the root (FreeBSD 14's `di_dirdepth`): without
    /// it FreeBSD's fsck_ffs takes the file system for one that does not track depths and asks
    /// to convert it.
    #[test]
    fn ufs2_directories_record_their_depth() {
        let dev = crate::format::ufs2::newfs::mem_image(4 << 20, 1024);
        let mut fs = mount_ufs2(&dev);
        let (a, _) = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap();
        let (b, _) = fs.mkdir(a, b"b", 0o755, 0, 0).unwrap();
        let (c, _) = fs.mkdir(b, b"c", 0o755, 0, 0).unwrap();
        fs.unmount().unwrap();
        let mut fs = mount_ufs2(&dev);
        let depth = |fs: &mut Fs, i| fs.getattr(i).unwrap().ufs2.freelink;
        assert_eq!([ROOT_INO, a, b, c].map(|i| depth(&mut fs, i)), [0, 1, 2, 3]);
    }

    /// A read planned under the lock whose blocks are freed, handed to another file and
    /// written before its device read (which runs without the lock) is done again under the
    /// lock: it never returns another file's data.
    #[test]
    fn a_read_outside_the_lock_never_returns_a_block_that_changed_hands() {
        for ordering in [Ordering::Softdep, Ordering::Sync] {
            let dev = Arc::new(MemDevice::new(4096, 4096));
            mkfs(dev.clone(), &MkfsOptions::default(), (1, 0)).unwrap();
            let mount = |dev: &Arc<MemDevice>| {
                let d: Arc<dyn BlockDevice> = dev.clone();
                Fs::mount(d, MountOptions { ordering, cache_blocks: 256, readonly: false }, Arc::new(SimClock::new()))
                    .unwrap()
            };
            let mut fs = mount(&dev);
            let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
            fs.write(f, 0, &[7u8; 3 * 4096]).unwrap();
            fs.unmount().unwrap();
            let mut fs = mount(&dev);
            let (f, _) = fs.lookup(ROOT_INO, b"f").unwrap();
            let plan = fs.read_plan(f, 0, 3 * 4096).unwrap();
            assert_eq!(plan.runs.len(), 1, "{ordering:?}: the file's blocks are not cached: one run");
            // Meanwhile: the file is emptied, its blocks freed and taken by another file.
            fs.setattr(f, &SetAttr { size: Some(0), ..Default::default() }).unwrap();
            fs.sync_all().unwrap();
            let (g, _) = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap();
            fs.write(g, 0, &[0xee; 64 * 4096]).unwrap();
            fs.sync_all().unwrap();
            let mut plan = plan;
            let d: Arc<dyn BlockDevice> = dev.clone();
            plan.fetch(d.as_ref()).unwrap();
            assert!(plan.out.contains(&0xee), "{ordering:?}: the test reuses the freed blocks");
            let got = fs.read_finish(plan, f, 0, 3 * 4096).unwrap();
            assert!(got.is_empty(), "{ordering:?}: the read done again sees the emptied file");
            assert_eq!(fs.stats().cache.reads_redone, 1);
            // Without frees in between, the device's bytes are the answer.
            fs.write(f, 0, &[9u8; 2 * 4096]).unwrap();
            fs.unmount().unwrap();
            let mut fs = mount(&dev);
            let (f, _) = fs.lookup(ROOT_INO, b"f").unwrap();
            let mut plan = fs.read_plan(f, 100, 8000).unwrap();
            plan.fetch(d.as_ref()).unwrap();
            assert_eq!(fs.read_finish(plan, f, 100, 8000).unwrap(), vec![9u8; 8000]);
            assert_eq!(fs.stats().cache.reads_redone, 0);
        }
    }
}
