//! Space management beyond write and truncate: fallocate(2) (preallocation, punching holes,
//! zeroing ranges), lseek's SEEK_DATA and SEEK_HOLE, and copy_file_range(2), over the block map.
//!
//! FFS has no unwritten extents: a block is either a hole (pointer 0) or holds data. So a
//! preallocated block is a zeroed block written through the cache, and soft updates order it
//! as any new data block: its pointer reaches the disk only after its zeros (`NewBlk`'s
//! `COMPLETE`), so after a crash it reads as zeros or is not there. Preallocating costs one
//! block write per block allocated, like writing zeros, and a preallocated block counts as data
//! for SEEK_DATA. Punched blocks are freed through the same dependencies as truncation's
//! (`release_blocks`). An allocation that runs out of space gives back what it took, so a
//! failed fallocate leaves the file as it was.

use super::*;

/// fallocate(2)'s mode bits.
pub const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
pub const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
pub const FALLOC_FL_ZERO_RANGE: i32 = 0x10;

/// What a fallocate does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallocOp {
    /// Blocks for every hole of the range (the default mode).
    Allocate,
    /// The range's blocks freed, partial blocks zeroed.
    PunchHole,
    /// The range reads as zeros, with its blocks allocated.
    ZeroRange,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FallocMode {
    pub op: FallocOp,
    /// The size does not change, even where the range ends past it.
    pub keep_size: bool,
}

impl FallocMode {
    /// Linux's mode bits: the default mode, KEEP_SIZE, PUNCH_HOLE with KEEP_SIZE (Linux requires
    /// it), ZERO_RANGE with or without KEEP_SIZE. Anything else is EOPNOTSUPP.
    pub fn from_linux(mode: i32) -> FsResult<FallocMode> {
        let keep_size = mode & FALLOC_FL_KEEP_SIZE != 0;
        let op = match mode & !FALLOC_FL_KEEP_SIZE {
            0 => FallocOp::Allocate,
            FALLOC_FL_PUNCH_HOLE if keep_size => FallocOp::PunchHole,
            FALLOC_FL_ZERO_RANGE => FallocOp::ZeroRange,
            _ => return Err(FsError::NotSupported),
        };
        Ok(FallocMode { op, keep_size })
    }
}

/// Bytes copy_file_range moves per read and write.
const COPY_CHUNK: u64 = 1 << 20;

impl Fs {
    /// fallocate(2) of `len` bytes at `off` of regular file `ino`.
    pub fn fallocate(&mut self, ino: u32, off: u64, len: u64, mode: FallocMode) -> FsResult<Dinode> {
        self.check_writable()?;
        if len == 0 {
            return Err(FsError::Invalid("fallocate of length 0"));
        }
        let end = off.checked_add(len).ok_or(FsError::TooBig)?;
        if end > self.sb.max_file_size() {
            return Err(FsError::TooBig);
        }
        let d = self.iget(ino)?;
        if d.is_dir() {
            return Err(FsError::IsDir);
        }
        if !d.is_reg() {
            return Err(FsError::Invalid("fallocate of a file that is not regular"));
        }
        if d.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0 || (d.flags & DI_APPEND != 0 && mode.op != FallocOp::Allocate) {
            return Err(FsError::Perm);
        }
        if mode.keep_size && mode.op != FallocOp::PunchHole && end > d.size {
            // UFS2 has no blocks past a file's size: fsck_ffs clears an inode that holds one.
            return Err(FsError::NotSupported);
        }
        if mode.op != FallocOp::PunchHole {
            // Before a growth on UFS2 (`grow_for_range`) takes a last block for nothing.
            self.room_for(&d, off, end)?;
        }
        match mode.op {
            FallocOp::Allocate => self.retry_nospace(|fs| fs.preallocate(ino, off, end, mode.keep_size))?,
            FallocOp::ZeroRange => self.retry_nospace(|fs| fs.zero_range(ino, off, end, mode.keep_size))?,
            FallocOp::PunchHole => self.punch_hole(ino, off, end)?,
        };
        self.balance()?;
        // As it is now: the tasks `balance` ran may have dropped a link.
        self.getattr(ino)
    }

    /// Allocates zeroed blocks for the holes of `off..end`; the size grows to `end` unless
    /// `keep_size`. Out of space part way, the blocks taken are freed again and the file is
    /// as it was.
    fn preallocate(&mut self, ino: u32, off: u64, end: u64, keep_size: bool) -> FsResult<Dinode> {
        let mut d = self.iget(ino)?;
        let size_before = d.size;
        let old = self.keep_on_error(ino, &mut d, |fs, d| fs.grow_for_range(ino, d, end, keep_size))?;
        let made = match self.allocate_holes(ino, &mut d, off, end) {
            Ok(m) => m,
            Err(e) => return Err(self.undo_grow(ino, &mut d, old, e)),
        };
        if !keep_size && end > d.size {
            d.size = end;
        }
        // (On UFS2 the growth may already have set the size, with the new last block.)
        if d.size != size_before {
            self.touch_mc(&mut d);
        } else if !made.is_empty() {
            self.touch_c(&mut d);
        }
        self.iput(ino, &d)?;
        Ok(d)
    }

    /// Allocates a zeroed block for every hole among the blocks `off..end` touches; returns
    /// the runs of logical blocks that were holes. Out of space (or on any error), the holes
    /// are punched again, which frees what was allocated in them and the indirect blocks made
    /// for them, and the inode is written back as it was.
    fn allocate_holes(&mut self, ino: u32, d: &mut Dinode, off: u64, end: u64) -> FsResult<Vec<(u64, u64)>> {
        let holes = self.room_for(d, off, end)?;
        for &(a, b) in &holes {
            for lbn in a..b {
                match self.bmap(ino, d, lbn, true) {
                    Ok((bno, _)) => self.cache.set_data(bno),
                    Err(e) => {
                        // Blocks kept from a failed call would be space lost to the user,
                        // past the size even: every hole is made a hole again.
                        for &(x, y) in &holes {
                            self.punch_blocks(ino, d, x, y)?;
                        }
                        self.iput(ino, d)?;
                        return Err(e);
                    }
                }
                if self.cache.over_capacity() {
                    self.make_room()?;
                }
            }
        }
        Ok(holes)
    }

    /// The runs of holes among the blocks `off..end` touches, or ENOSPC if their blocks (and an
    /// estimate of the indirect blocks they need) cannot fit even once what soft updates hold
    /// is freed: refused before anything is allocated, rather than blocks allocated, zeroed and
    /// given back. Counted as the free count is: whole blocks of `frag` fragments on UFS2.
    fn room_for(&mut self, d: &Dinode, off: u64, end: u64) -> FsResult<Vec<(u64, u64)>> {
        let bs = self.sb.block_size as u64;
        let holes = self.hole_runs(d, off / bs, end.div_ceil(bs))?;
        let need: u64 = holes.iter().map(|(a, b)| b - a).sum();
        // Indirect blocks: about one per `ptrs_per_block` data blocks, and a path down.
        let indirect = need / self.sb.ptrs_per_block() + NIADDR as u64;
        let units = (need + indirect) * self.sb.frag();
        if need > 0 && self.blocks_available() < units {
            let pending = if self.frees_pending() { self.pending_frees().0 } else { 0 };
            if self.blocks_available() + pending < units {
                return Err(FsError::NoSpace);
            }
        }
        Ok(holes)
    }

    /// The runs of holes among logical blocks `from..to`.
    fn hole_runs(&mut self, d: &Dinode, from: u64, to: u64) -> FsResult<Vec<(u64, u64)>> {
        let mut runs = Vec::new();
        let mut pos = from;
        while pos < to {
            let Some(h) = self.find_block(d, pos, to, false)? else { break };
            let e = self.find_block(d, h, to, true)?.unwrap_or(to);
            runs.push((h, e));
            pos = e;
        }
        Ok(runs)
    }

    /// ZERO_RANGE: the holes of the range get blocks first (which may fail, changing nothing),
    /// then every byte of the range is zeroed in place.
    fn zero_range(&mut self, ino: u32, off: u64, end: u64, keep_size: bool) -> FsResult<Dinode> {
        let mut d = self.iget(ino)?;
        let old = self.keep_on_error(ino, &mut d, |fs, d| fs.grow_for_range(ino, d, end, keep_size))?;
        if let Err(e) = self.allocate_holes(ino, &mut d, off, end) {
            return Err(self.undo_grow(ino, &mut d, old, e));
        }
        self.zero_bytes(ino, &mut d, off, end)?;
        if !keep_size && end > d.size {
            d.size = end;
        }
        self.touch_mc(&mut d);
        self.iput(ino, &d)?;
        Ok(d)
    }

    /// With fragments, a range past the size makes the size first (a truncation up, which
    /// makes the last block whole), so that the blocks allocated in it are sized to the file
    /// they belong to. Returns the size before.
    fn grow_for_range(&mut self, ino: u32, d: &mut Dinode, end: u64, keep_size: bool) -> FsResult<u64> {
        let old = d.size;
        if self.has_frags() && !keep_size && end > d.size {
            self.truncate(ino, d, end)?;
        }
        Ok(old)
    }

    /// A failed allocation after `grow_for_range` takes the size back to `old` (freeing what
    /// the growth took); returns the allocation's error.
    fn undo_grow(&mut self, ino: u32, d: &mut Dinode, old: u64, e: FsError) -> FsError {
        if d.size > old {
            if let Err(e2) = self.truncate(ino, d, old).and_then(|_| self.iput(ino, d).map(|_| ())) {
                return e2;
            }
        }
        e
    }

    /// Zeroes bytes `off..end` of the file's allocated blocks (holes stay holes).
    fn zero_bytes(&mut self, ino: u32, d: &mut Dinode, off: u64, end: u64) -> FsResult<()> {
        let bs = self.sb.block_size as u64;
        let mut pos = off;
        while pos < end {
            let lbn = pos / bs;
            let next = ((lbn + 1) * bs).min(end);
            let Some(l) = self.find_block(d, lbn, end.div_ceil(bs), true)? else { break };
            if l > lbn {
                pos = l * bs;
                continue;
            }
            let (bno, _) = self.bmap(ino, d, lbn, false)?;
            let (a, b) = ((pos - lbn * bs) as usize, (next - lbn * bs) as usize);
            let len = self.run_len(d.size, lbn);
            if a == 0 && b >= len {
                self.cache.create_frags(bno, len);
            } else if a < len {
                self.cache.modify_frags(bno, len)?[a..b.min(len)].fill(0);
            }
            self.cache.set_data(bno);
            if self.cache.over_capacity() {
                self.make_room()?;
            }
            pos = next;
        }
        Ok(())
    }

    /// PUNCH_HOLE (always with KEEP_SIZE): the blocks wholly inside `off..end` are freed, the
    /// partial ones at its ends zeroed where they are allocated.
    fn punch_hole(&mut self, ino: u32, off: u64, end: u64) -> FsResult<Dinode> {
        let mut d = self.iget(ino)?;
        self.keep_on_error(ino, &mut d, |fs, d| fs.punch_range(ino, d, off, end))?;
        self.touch_mc(&mut d);
        self.iput(ino, &d)?;
        Ok(d)
    }

    /// The work of `punch_hole` on the in-memory dinode. On UFS2 a file keeps its last block
    /// allocated (`keep_end_allocated`): that block is zeroed rather than freed, so that a
    /// punch never needs a new block (on a full disk it would find none).
    fn punch_range(&mut self, ino: u32, d: &mut Dinode, off: u64, end: u64) -> FsResult<()> {
        let bs = self.sb.block_size as u64;
        let (first, mut last) = (off.div_ceil(bs), end / bs);
        if d.size > 0 {
            last = last.min((d.size - 1) / bs);
        }
        if first < last {
            self.zero_bytes(ino, d, off, first * bs)?;
            self.zero_bytes(ino, d, last * bs, end)?;
            self.punch_blocks(ino, d, first, last)?;
        } else {
            self.zero_bytes(ino, d, off, end)?;
        }
        self.keep_end_allocated(ino, d)
    }

    /// lseek's SEEK_DATA (`data`) or SEEK_HOLE from `off`: the first offset at or past it in
    /// data or in a hole, where the end of the file counts as a hole. ENXIO at or past the end,
    /// and for SEEK_DATA with only holes left. Snapshots and reservations, read whole through
    /// their own paths, are all data.
    pub fn seek_data_hole(&mut self, ino: u32, off: u64, data: bool) -> FsResult<u64> {
        let d = self.iget(ino)?;
        if off >= d.size {
            return Err(FsError::NoSuchOffset);
        }
        if d.flags & (DI_SNAPSHOT | DI_UNMOVABLE) != 0 {
            return Ok(if data { off } else { d.size });
        }
        let bs = self.sb.block_size as u64;
        let found = self.find_block(&d, off / bs, d.size.div_ceil(bs), data)?;
        match found {
            Some(l) => Ok((l * bs).max(off).min(d.size)),
            None if data => Err(FsError::NoSuchOffset),
            None => Ok(d.size),
        }
    }

    /// copy_file_range(2) inside the file system: up to `len` bytes from `off_in` of `src` to
    /// `off_out` of `dst`, read and written through the cache (no block is shared). Returns
    /// the bytes copied: fewer at the end of the source, 0 past it. EINVAL for overlapping
    /// ranges of one file and for files that are not regular, EISDIR for directories.
    pub fn copy_range(&mut self, src: u32, off_in: u64, dst: u32, off_out: u64, len: u64) -> FsResult<u64> {
        let n = self.copy_check(src, off_in, dst, off_out, len)?;
        let mut done = 0;
        while done < n {
            let chunk = (n - done).min(COPY_CHUNK) as usize;
            let data = self.read(src, off_in + done, chunk)?;
            if data.is_empty() {
                break;
            }
            let w = match self.write(dst, off_out + done, &data) {
                Ok(w) => w as u64,
                // Some bytes copied, then a full disk: a short copy, as write(2) would be.
                Err(FsError::NoSpace) if done > 0 => break,
                Err(e) => return Err(e),
            };
            done += w;
            if w < data.len() as u64 {
                break;
            }
        }
        Ok(done)
    }

    /// copy_file_range's checks: the bytes it will copy (`len` shortened to the end of the
    /// source), or its error.
    pub fn copy_check(&mut self, src: u32, off_in: u64, dst: u32, off_out: u64, len: u64) -> FsResult<u64> {
        self.check_writable()?;
        let s = self.iget(src)?;
        let t = self.iget(dst)?;
        if s.is_dir() || t.is_dir() {
            return Err(FsError::IsDir);
        }
        if !s.is_reg() || !t.is_reg() {
            return Err(FsError::Invalid("copy_file_range of a file that is not regular"));
        }
        off_in.checked_add(len).ok_or(FsError::Invalid("copy_file_range past the largest offset"))?;
        // Shortened to the end of the source, as Linux does before its checks.
        let n = len.min(s.size.saturating_sub(off_in));
        let out_end = off_out.checked_add(n).ok_or(FsError::TooBig)?;
        if src == dst && n > 0 && out_end > off_in && off_out < off_in + n {
            return Err(FsError::Invalid("copy_file_range within one file over overlapping ranges"));
        }
        if out_end > self.sb.max_file_size() {
            return Err(FsError::TooBig);
        }
        if t.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0 || (t.flags & DI_APPEND != 0 && off_out < t.size) {
            return Err(FsError::Perm);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::MemDevice;
    use crate::fs::{mkfs, MkfsOptions, MountOptions};

    fn mounted(ordering: Ordering, blocks: u64) -> (Arc<MemDevice>, Fs) {
        let dev = Arc::new(MemDevice::new(4096, blocks));
        mkfs(dev.clone(), &MkfsOptions { minfree: Some(10), ..Default::default() }, (1, 0)).unwrap();
        let d: Arc<dyn BlockDevice> = dev.clone();
        let opts = MountOptions { ordering, cache_blocks: 512, readonly: false };
        (dev, Fs::mount(d, opts, Arc::new(SimClock::new())).unwrap())
    }

    fn clean(dev: &MemDevice) {
        let r = crate::fsck::check(dev).unwrap();
        assert!(r.findings.is_empty(), "{:?}", r.findings.iter().map(|f| f.to_string()).collect::<Vec<_>>());
    }

    /// A fallocate that cannot be satisfied changes nothing: not the size, not the blocks, not
    /// the free count, in every ordering; a hole punched through indirect blocks frees them.
    #[test]
    fn fallocate_out_of_space_leaves_the_file_and_punching_frees_indirect_blocks() {
        for ordering in [Ordering::Softdep, Ordering::Sync, Ordering::Async] {
            let (dev, mut fs) = mounted(ordering, 4096);
            let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
            fs.write(f, 0, &[5u8; 3 * 4096]).unwrap();
            fs.write(f, 600 * 4096, &[6u8; 4096]).unwrap();
            let before = fs.getattr(f).unwrap();
            let free = fs.statfs().bfree;
            let keep = FallocMode { op: FallocOp::Allocate, keep_size: true };
            let grow = FallocMode { op: FallocOp::Allocate, keep_size: false };
            // (Past the end of a file with its size kept UFS2 refuses: no block may lie there.)
            assert!(matches!(fs.fallocate(f, 4096, 1000 * 4096, keep), Err(FsError::NotSupported)));
            for mode in [grow, FallocMode { op: FallocOp::ZeroRange, keep_size: false }] {
                // More than is free: refused before anything is allocated.
                let len = (free + 40) * 4096;
                assert!(matches!(fs.fallocate(f, 4096, len, mode), Err(FsError::NoSpace)), "{ordering:?}");
                let d = fs.getattr(f).unwrap();
                assert_eq!((d.size, d.blocks, d.db, d.ib), (before.size, before.blocks, before.db, before.ib));
                assert_eq!(fs.read(f, 0, 3 * 4096).unwrap(), vec![5u8; 3 * 4096]);
            }
            fs.sync_all().unwrap();
            assert_eq!(fs.statfs().bfree, free, "{ordering:?}: every block taken came back");
            // Preallocation through the indirect blocks, then a punch over all of them.
            fs.fallocate(f, 0, before.size, keep).unwrap();
            assert_eq!(fs.getattr(f).unwrap().size, before.size);
            assert_eq!(fs.seek_data_hole(f, 3 * 4096, false).unwrap(), before.size, "preallocated: data");
            let punch = FallocMode { op: FallocOp::PunchHole, keep_size: true };
            fs.fallocate(f, 4096, 999 * 4096, punch).unwrap();
            let d = fs.getattr(f).unwrap();
            // Block 0 and the last block, which UFS2 keeps (zeroed) so that the size ends in
            // a block, with the two indirect blocks above it; the single indirect one went.
            assert_eq!((d.blocks, d.ib[0], d.ib[2]), (4, 0, 0), "{ordering:?}: block 0 and the last");
            assert_eq!(fs.seek_data_hole(f, 0, false).unwrap(), 4096);
            assert_eq!(fs.seek_data_hole(f, 4096, true).unwrap(), 600 * 4096);
            assert_eq!(fs.read(f, 600 * 4096, 4096).unwrap(), vec![0u8; 4096]);
            fs.unmount().unwrap();
            clean(&dev);
        }
    }

    /// An allocation that passes the free-space estimate and still runs out part way (the
    /// range crosses from the double into the triple indirect tree, which takes more indirect
    /// blocks than the estimate counts) takes back every block it got.
    #[test]
    fn a_preallocation_that_fails_part_way_gives_its_blocks_back() {
        for ordering in [Ordering::Softdep, Ordering::Sync, Ordering::Async] {
            let (dev, mut fs) = mounted(ordering, 4096);
            let f = fs.fill_disk(b"fill");
            // Eight data blocks free, nothing else.
            let punch = FallocMode { op: FallocOp::PunchHole, keep_size: true };
            for i in 0..8 {
                fs.fallocate(f, (20 + 2 * i) * 4096, 4096, punch).unwrap();
            }
            fs.sync_all().unwrap();
            assert_eq!(fs.statfs().bfree, 8, "{ordering:?}");
            let (g, _) = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap();
            let p = fs.sb.ptrs_per_block();
            let triple = (NDADDR as u64 + p + p * p) * 4096;
            let grow = FallocMode { op: FallocOp::Allocate, keep_size: false };
            // 4 data blocks, 5 indirect ones: the estimate says 7.
            let r = fs.fallocate(g, triple - 2 * 4096, 4 * 4096, grow);
            assert!(matches!(r, Err(FsError::NoSpace)), "{ordering:?}: {r:?}");
            let d = fs.getattr(g).unwrap();
            assert_eq!((d.size, d.blocks, d.ib), (0, 0, [0; NIADDR]), "{ordering:?}");
            fs.sync_all().unwrap();
            assert_eq!(fs.statfs().bfree, 8, "{ordering:?}");
            // What fits does: two blocks in the double indirect tree (and two indirect blocks).
            fs.fallocate(g, triple - 2 * 4096, 2 * 4096, grow).unwrap();
            assert_eq!(fs.getattr(g).unwrap().blocks, 4);
            fs.unmount().unwrap();
            clean(&dev);
        }
    }

    /// On UFS2 the free count is in fragments and each block takes `frag` of them: a
    /// preallocation of more than is free is refused before anything is allocated (the
    /// estimate once counted blocks against fragments, so it went on to allocate and zero
    /// blocks, and wrote them, only to give them back).
    #[test]
    fn ufs2_out_of_space_is_refused_by_the_estimate_in_fragments() {
        for ordering in [Ordering::Softdep, Ordering::Sync] {
            let dev = crate::format::ufs2::newfs::mem_image(8 << 20, 1024);
            let opts = MountOptions { ordering, cache_blocks: 256, readonly: false };
            let mut fs = Fs::mount(dev.clone(), opts, Arc::new(SimClock::new())).unwrap();
            assert_eq!((fs.sb.block_size, fs.sb.frag()), (4096, 4));
            let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
            fs.sync_all().unwrap();
            let free = fs.statfs().bfree;
            let writes = |dev: &MemDevice| dev.stats().sync_writes + dev.stats().async_writes;
            let before = writes(&dev);
            // Half as many blocks as there are free fragments: twice the space there is.
            let grow = FallocMode { op: FallocOp::Allocate, keep_size: false };
            let r = fs.fallocate(f, 0, free / 2 * 4096, grow);
            assert!(matches!(r, Err(FsError::NoSpace)), "{ordering:?}: {r:?}");
            assert_eq!(writes(&dev), before, "{ordering:?}: nothing allocated, nothing written");
            assert_eq!((fs.getattr(f).unwrap().blocks, fs.statfs().bfree), (0, free), "{ordering:?}");
        }
    }

    /// copy_file_range through the library; the minfree reserve for a user and for root.
    #[test]
    fn copies_and_the_reserve() {
        let (dev, mut fs) = mounted(Ordering::Softdep, 2048);
        let (a, _) = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap();
        let (b, _) = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        fs.write(a, 0, &data).unwrap();
        assert_eq!(fs.copy_range(a, 10, b, 0, 2_500_000).unwrap(), 2_500_000);
        assert_eq!(fs.read(b, 0, 2_500_000).unwrap(), data[10..2_500_010]);
        assert!(matches!(fs.copy_range(a, 0, a, 100, 200), Err(FsError::Invalid(_))));
        assert_eq!(fs.copy_range(a, 3_000_000, b, 0, 10).unwrap(), 0);
        // A user fills up to the reserve, root past it.
        let reserve = fs.reserved_blocks();
        assert_eq!(reserve, fs.sb.data_blocks() / 10);
        let (u, _) = fs.create(ROOT_INO, b"u", 0o644, 1000, 1000).unwrap();
        let big = vec![1u8; 4096 * 64];
        let mut off = 0;
        loop {
            match fs.as_user(1000, |fs| fs.write(u, off, &big)) {
                Ok(n) => off += n as u64,
                Err(FsError::NoSpace) => break,
                Err(e) => panic!("{e}"),
            }
        }
        let s = fs.statfs();
        assert_eq!((s.bavail, s.bfree), (0, reserve));
        assert!(matches!(
            fs.as_user(1000, |fs| fs.fallocate(u, off, 4096, FallocMode::from_linux(0)?)),
            Err(FsError::NoSpace)
        ));
        fs.write(u, off, &big).unwrap();
        assert_eq!(fs.statfs().bfree, reserve - 64);
        fs.unmount().unwrap();
        clean(&dev);
    }

    /// Who may set which flag, and what the flags refuse.
    #[test]
    fn flags_rules() {
        use crate::fs::flags::*;
        let (dev, mut fs) = mounted(Ordering::Softdep, 2048);
        let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 1000, 1000).unwrap();
        assert!(matches!(fs.set_flags(f, FS_IMMUTABLE_FL, 1000), Err(FsError::Perm)), "the owner, not root");
        assert!(matches!(fs.set_flags(f, FS_NODUMP_FL, 1001), Err(FsError::Perm)), "not the owner");
        fs.set_flags(f, FS_NODUMP_FL, 1000).unwrap();
        assert!(matches!(fs.set_flags(f, 0x4000_0000, 0), Err(FsError::NotSupported)));
        fs.set_flags(f, FS_APPEND_FL | FS_NODUMP_FL, 0).unwrap();
        assert!(matches!(fs.set_flags(f, FS_NODUMP_FL, 1000), Err(FsError::Perm)), "clearing append is root's");
        fs.write(f, 0, b"abc").unwrap();
        assert!(matches!(fs.write(f, 1, b"x"), Err(FsError::Perm)));
        fs.write(f, 3, b"def").unwrap();
        let now = SetAttr { atime: Some((5, 0)), times_now: true, ..Default::default() };
        fs.setattr(f, &now).unwrap();
        let set = SetAttr { atime: Some((5, 0)), ..Default::default() };
        assert!(matches!(fs.setattr(f, &set), Err(FsError::Perm)));
        assert!(matches!(fs.unlink(ROOT_INO, b"f"), Err(FsError::Perm)));
        // The file system's own flags are not the user's.
        let snap = fs.special_dir(crate::fs::snapshot::SNAP_DIR, true).unwrap();
        assert!(matches!(fs.set_flags(snap, 0, 0), Err(FsError::Perm)));
        fs.set_flags(f, 0, 0).unwrap();
        fs.unlink(ROOT_INO, b"f").unwrap();
        fs.unmount().unwrap();
        clean(&dev);
    }
}
