//! File tails in fragments (FFS §2.3; FreeBSD's `ffs_balloc_ufs2`, `ffs_realloccg`,
//! `ffs_truncate`): on a UFS2 image whose blocks hold several fragments, a file's last block,
//! when it is one of the direct blocks, is a run of just the fragments its bytes need
//! (`run_len`, FreeBSD's `blksize`); every other block is whole. A directory's and a long
//! symbolic link's last block likewise.
//!
//! A run grows with its file: in place when the fragments after it are free
//! (`ffs_fragextend`), else moved to a larger run (its bytes copied in the cache) and the old
//! run freed once no inode on disk can name it: with soft updates the allocdirect's freefrag,
//! under `sync` ordering after the new run and then the inode are written. Before a file grows
//! into a later block, its last block becomes whole. A truncation within the last direct block
//! frees the fragments past the new end once the inode without them is on disk.
//!
//! Invariant (fsck_ffs's pass 1 checks it): a file's last direct block holds exactly
//! `run_len(size, lbn)` bytes of fragments, and `blocks` counts the fragments held. On images
//! of one fragment a block every run is a whole block and nothing here changes what the file
//! system does.

use super::*;

impl Fs {
    /// Whether this image keeps file tails in fragments (UFS2, more than one fragment a block).
    pub(super) fn has_frags(&self) -> bool {
        self.sb.frag() > 1
    }

    /// `n` bytes rounded up to whole fragments (FreeBSD's `fragroundup`).
    fn frag_roundup(&self, n: u64) -> usize {
        let f = self.sb.addr_unit() as u64;
        (n.div_ceil(f) * f) as usize
    }

    /// Fragments in a run of `len` bytes.
    pub(super) fn frags_in(&self, len: usize) -> u32 {
        (len / self.sb.addr_unit() as usize) as u32
    }

    /// The bytes of the run a file (or directory, or symbolic link) of `size` bytes holds at
    /// logical block `lbn` (FreeBSD's `blksize`): a whole block, but for the last block when it
    /// is a direct one on an image with fragments, which ends at the fragment holding the last
    /// byte.
    pub(super) fn run_len(&self, size: u64, lbn: u64) -> usize {
        let bs = self.sb.block_size as u64;
        if !self.has_frags() || lbn >= NDADDR as u64 || size >= (lbn + 1) * bs || size <= lbn * bs {
            return bs as usize;
        }
        self.frag_roundup(size - lbn * bs)
    }

    /// The run holding `len` bytes (at most a block) of an extended-attribute area's block:
    /// the area's last block is in fragments too (`sblksize` of `di_extsize`).
    pub(super) fn ext_run_len(&self, len: usize) -> usize {
        if self.has_frags() {
            self.frag_roundup(len as u64).max(self.sb.addr_unit() as usize)
        } else {
            self.sb.block_size as usize
        }
    }

    /// Block `lbn` of a file of `size` bytes, at `bno`: its run's bytes, read on a miss.
    pub(super) fn read_run(&mut self, bno: u64, size: u64, lbn: u64) -> FsResult<&[u8]> {
        let len = self.run_len(size, lbn);
        Ok(self.cache.read_frags(bno, len)?)
    }

    /// Block `lbn` of a file of `size` bytes, at `bno`, to modify: its run's bytes.
    pub(super) fn modify_run(&mut self, bno: u64, size: u64, lbn: u64) -> FsResult<&mut [u8]> {
        let len = self.run_len(size, lbn);
        Ok(self.cache.modify_frags(bno, len)?)
    }

    /// A run of `frags` fragments (a whole block when it is the block's count) as close to
    /// `pref` as possible, checked as `alloc_block` checks its blocks.
    pub(super) fn alloc_run(&mut self, frags: u32, pref: u64) -> FsResult<u64> {
        if frags as u64 == self.sb.frag() {
            return self.alloc_block(pref);
        }
        self.check_reserve(frags as u64)?;
        let bno = match self.alloc.alloc_frags(&mut self.cache, &self.sb, frags, pref) {
            Err(AllocError::NoSpace) if self.reclaim()? => {
                self.alloc.alloc_frags(&mut self.cache, &self.sb, frags, pref)?
            }
            r => r?,
        };
        if !self.sb.is_data_block(bno) {
            return Err(self.damaged(format!("fragment map shows metadata fragment {bno} free")));
        }
        Ok(bno)
    }

    /// `bmap` with allocation of direct block `lbn` on an image with fragments, for a file
    /// whose size will be at least `end`: the run is allocated, or grown, to what `end` needs
    /// (`ffs_balloc_ufs2`'s direct blocks). A new run's buffer is made zeroed; a grown one
    /// keeps its bytes. Returns the run's address and whether it is new.
    pub(super) fn bmap_run(&mut self, ino: u32, d: &mut Dinode, lbn: u64, end: u64) -> FsResult<(u64, bool)> {
        debug_assert!(self.has_frags() && lbn < NDADDR as u64);
        let bs = self.sb.block_size as u64;
        self.fill_last_block(ino, d, lbn)?;
        let want = self.run_len(end.max(d.size).max(lbn * bs + 1), lbn);
        let cur = self.checked_ptr(d.db[lbn as usize])?;
        if cur != 0 {
            let have = self.run_len(d.size, lbn);
            if want <= have {
                return Ok((cur, false));
            }
            return Ok((self.grow_run(ino, d, lbn, have, want)?, false));
        }
        let pref = match lbn.checked_sub(1).map(|p| d.db[p as usize]) {
            Some(prev) if prev != 0 => prev + self.sb.frag(),
            _ => self.ino_pref(ino),
        };
        let pref = self.br_hint.take().unwrap_or(pref);
        let frags = self.frags_in(want);
        let b = self.alloc_run(frags, pref)?;
        self.cache.create_frags(b, want);
        d.db[lbn as usize] = b;
        d.blocks += frags as u64;
        let is_dir = d.is_dir();
        if let Some(sd) = self.sd() {
            sd.alloc_direct_frags(ino, is_dir, lbn, (b, want as u32), (0, 0));
        }
        Ok((b, true))
    }

    /// Before a file grows into block `lbn`, its last block, if it is an earlier direct block
    /// held in fragments, becomes a whole block, and the size reaches that block's end
    /// (`ffs_balloc_ufs2`: "if the last block was a fragment, extend it to a full block before
    /// allocating further"). Nothing on an image without fragments.
    pub(super) fn fill_last_block(&mut self, ino: u32, d: &mut Dinode, lbn: u64) -> FsResult<()> {
        let bs = self.sb.block_size as u64;
        if !self.has_frags() || d.size == 0 {
            return Ok(());
        }
        let last = (d.size - 1) / bs;
        if last >= lbn || last >= NDADDR as u64 || d.db[last as usize] == 0 {
            return Ok(());
        }
        let have = self.run_len(d.size, last);
        if have < bs as usize {
            self.grow_run(ino, d, last, have, bs as usize)?;
        }
        d.size = d.size.max((last + 1) * bs);
        Ok(())
    }

    /// Before the size grows to `size` within the file's last direct block, held in fragments,
    /// the run grows to cover the new end (`ffs_truncate` allocates the new last byte with
    /// `UFS_BALLOC`): a run's length is what the size says it is, and a shorter one would be
    /// taken at the wrong length by every later access. The new bytes read as zeros.
    pub(super) fn extend_last_run(&mut self, ino: u32, d: &mut Dinode, size: u64) -> FsResult<()> {
        let bs = self.sb.block_size as u64;
        if !self.has_frags() || d.size == 0 || size <= d.size {
            return Ok(());
        }
        let lbn = (d.size - 1) / bs;
        if lbn != (size - 1) / bs || lbn >= NDADDR as u64 || d.db[lbn as usize] == 0 {
            return Ok(());
        }
        let (have, want) = (self.run_len(d.size, lbn), self.run_len(size, lbn));
        if want > have {
            self.grow_run(ino, d, lbn, have, want)?;
        }
        Ok(())
    }

    /// Grows the run of direct block `lbn` from `have` to `want` bytes (`ffs_realloccg`): in
    /// place when the fragments after it are free, else into a new run where the bytes move;
    /// the old run is freed once no inode on disk can name it. Returns the run's address.
    fn grow_run(&mut self, ino: u32, d: &mut Dinode, lbn: u64, have: usize, want: usize) -> FsResult<u64> {
        let old = d.db[lbn as usize];
        let (ofr, nfr) = (self.frags_in(have), self.frags_in(want));
        assert!(old != 0 && ofr < nfr, "inode {ino} block {lbn}: run at {old} grown from {have} to {want} bytes");
        let is_dir = d.is_dir();
        if self.cache.in_flight(old) {
            // Its buffer changes length: the write of the old one lands first.
            self.land_flight()?;
        }
        if self.alloc.extend_frags(&mut self.cache, &self.sb, old, ofr, nfr)? {
            self.cache.resize_frags(old, have, want)?;
            d.blocks += (nfr - ofr) as u64;
            if let Some(sd) = self.sd() {
                sd.alloc_direct_frags(ino, is_dir, lbn, (old, want as u32), (old, have as u32));
            }
            return Ok(old);
        }
        if is_dir {
            self.settle_dir_block(old)?;
            // A full sync ran the task list: the directory's link count may have dropped (a
            // subdirectory's ".." gone), which the caller's copy does not hold yet.
            let now = self.iget(ino)?;
            (d.nlink, d.ctime, d.ctime_ns) = (now.nlink, now.ctime, now.ctime_ns);
        }
        let new = self.alloc_run(nfr, old)?;
        self.cache.move_frags(old, have, new, want)?;
        d.db[lbn as usize] = new;
        d.blocks += (nfr - ofr) as u64;
        if let Some(sd) = self.sd() {
            sd.alloc_direct_frags(ino, is_dir, lbn, (new, want as u32), (old, have as u32));
            if is_dir {
                sd.dir_block_moved(old, new);
            }
            return Ok(new);
        }
        if self.ordering == Ordering::Sync {
            // The moved bytes, then the inode naming them, then the old run may go.
            self.write_bufs(&[new], WriteKind::Sync)?;
            let ib = self.iput(ino, d)?;
            self.write_bufs(&[ib], WriteKind::Sync)?;
        }
        self.free_frags(old, ofr)?;
        Ok(new)
    }

    /// A directory block about to move has none of rename's state on its address: its hidden
    /// old names and their removals, and the new entries waiting for hidden namesakes, are
    /// kept by block address, so everything is written first. (Moving the hidden names alone
    /// left their removals, queued elsewhere, naming the old address: a user's renames in a
    /// growing directory then wedged soft updates for everyone.) Soft updates' own entries and
    /// removals move with the run (`Softdep::dir_block_moved`), as FreeBSD's pagedep follows
    /// its block, without a write.
    fn settle_dir_block(&mut self, bno: u64) -> FsResult<()> {
        if self.renames_hold_dir_block(bno) {
            self.sync_all()?;
        }
        if self.renames_hold_dir_block(bno) {
            return Err(self.damaged(format!("directory block {bno} keeps dependencies after a full sync")));
        }
        Ok(())
    }

    /// True if rename's state waiting in memory names directory block `bno` by its address.
    fn renames_hold_dir_block(&self, bno: u64) -> bool {
        self.renames.hidden.in_block(bno)
            || self.renames.namesakes.waits_in(bno)
            || self
                .renames
                .deferred_old_names
                .iter()
                .any(|t| matches!(t, Task::RemoveOldName { bno: b, .. } if *b == bno))
    }

    /// A truncation from `old_size` to `d.size` within the file's last direct block, held in
    /// fragments: the run gives up the fragments past `fragroundup(size)`, which are freed once
    /// the inode without them is on disk (`ffs_truncate`'s partial last block). With soft
    /// updates, the file's pending pointer changes are written first, as FreeBSD's partial
    /// truncation syncs the file: a roll-back could otherwise name the freed fragments.
    pub(super) fn shrink_last_run(&mut self, ino: u32, d: &mut Dinode, old_size: u64) -> FsResult<()> {
        let bs = self.sb.block_size as u64;
        let size = d.size;
        if !self.has_frags() || size == 0 || size >= old_size {
            return Ok(());
        }
        let lbn = (size - 1) / bs;
        if lbn >= NDADDR as u64 || d.db[lbn as usize] == 0 {
            return Ok(());
        }
        let (have, want) = (self.run_len(old_size, lbn), self.run_len(size, lbn));
        if want >= have {
            return Ok(());
        }
        if self.hooks.softdep.as_ref().is_some_and(|sd| !sd.inode_settled(ino)) {
            self.iput(ino, d)?;
            self.fsync(ino)?;
            // The fsync ran the task list: a link drop may have changed the dinode since.
            *d = self.iget(ino)?;
        }
        let bno = d.db[lbn as usize];
        let (kept, gone) = (self.frags_in(want), self.frags_in(have - want));
        let Some(blocks) = d.blocks.checked_sub(gone as u64) else {
            // A block count read from disk below what the run holds: damage, found before any
            // change is made.
            let held = d.blocks;
            return Err(self.damaged(format!("inode {ino}: block count {held} below its last run's {gone} fragments")));
        };
        if self.cache.in_flight(bno) {
            self.land_flight()?;
        }
        self.cache.resize_frags(bno, have, want)?;
        let tail = (bno + kept as u64, gone);
        d.blocks = blocks;
        if let Some(sd) = self.hooks.softdep.as_mut() {
            // Freed once the dinode, copied into its buffer next, is on disk.
            let f = FreeFrag { ino, bno: tail.0, frags: tail.1 };
            sd.free_blocks(ino, Vec::new(), vec![Task::FreeFrag(f)]);
            self.iput(ino, d)?;
            return Ok(());
        }
        let ib = self.iput(ino, d)?;
        self.order_write(&[ib])?;
        self.free_frags(tail.0, tail.1)
    }
}
