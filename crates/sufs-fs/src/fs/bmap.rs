//! The block map: a file's logical blocks to disk blocks (direct pointers, indirect blocks), block
//! allocation with its ordering, and truncation through the indirect tree.

use super::*;

impl Fs {
    /// Physical block of logical block `lbn` (0 for a hole). With `alloc`, missing blocks
    /// (and the indirect blocks leading to them) are allocated; a new data block's buffer is
    /// created zeroed. `d` is the in-memory inode; the caller writes it back.
    pub(super) fn bmap(&mut self, ino: u32, d: &mut Dinode, lbn: u64, alloc: bool) -> FsResult<(u64, bool)> {
        let p = self.sb.ptrs_per_block();
        if alloc && self.has_frags() {
            if lbn < NDADDR as u64 {
                let bs = self.sb.block_size as u64;
                return self.bmap_run(ino, d, lbn, d.size.max(lbn * bs + 1));
            }
            self.fill_last_block(ino, d, lbn)?;
        }
        if lbn < NDADDR as u64 {
            return self.bmap_direct(ino, d, lbn as usize, alloc);
        }
        let (level, level_base, mut rel, span) = self.indirect_level(lbn)?;
        // Top pointer lives in the inode.
        let mut ptr = d.ib[level];
        let mut fresh = false;
        if ptr == 0 {
            if !alloc {
                return Ok((0, false));
            }
            ptr = self.alloc_indirect(ino, self.ino_pref(ino))?;
            d.ib[level] = ptr;
            d.blocks += self.sb.frag();
            let is_dir = d.is_dir();
            if let Some(sd) = self.sd() {
                sd.alloc_direct(ino, is_dir, PtrSlot::Indirect(level), level_base, ptr);
            }
        }
        self.checked_ptr(ptr)?;
        let mut span = span / p; // blocks covered by each pointer of the top indirect block
        loop {
            let idx = (rel / span) as usize;
            rel %= span;
            let child = ind_get(self.read_indirect(ptr)?, idx);
            if child != 0 {
                self.checked_ptr(child)?;
                if span == 1 {
                    return Ok((child, false));
                }
                ptr = child;
                span /= p;
                continue;
            }
            if !alloc {
                return Ok((0, false));
            }
            let pref = if idx > 0 { ind_get(self.cache.read(ptr)?, idx - 1) + 1 } else { ptr + 1 };
            let nb = if span == 1 {
                let pref = self.br_hint.take().unwrap_or(pref);
                let b = self.alloc_block(pref)?;
                self.cache.create(b);
                fresh = true;
                b
            } else {
                self.alloc_indirect(ino, pref)?
            };
            ind_set(self.cache.modify(ptr)?, idx, nb);
            let is_dir = d.is_dir();
            if let Some(sd) = self.sd() {
                sd.alloc_indir(ptr, idx, nb, is_dir);
            }
            d.blocks += self.sb.frag();
            if span == 1 {
                return Ok((nb, fresh));
            }
            ptr = nb;
            span /= p;
        }
    }

    /// `bmap` of a direct block (`lbn` < NDADDR).
    fn bmap_direct(&mut self, ino: u32, d: &mut Dinode, lbn: usize, alloc: bool) -> FsResult<(u64, bool)> {
        let cur = d.db[lbn];
        if cur != 0 || !alloc {
            return Ok((self.checked_ptr(cur)?, false));
        }
        let pref = if lbn > 0 && d.db[lbn - 1] != 0 { d.db[lbn - 1] + 1 } else { self.ino_pref(ino) };
        let pref = self.br_hint.take().unwrap_or(pref);
        let b = self.alloc_block(pref)?;
        self.cache.create(b);
        d.db[lbn] = b;
        d.blocks += 1;
        let is_dir = d.is_dir();
        if let Some(sd) = self.sd() {
            sd.alloc_direct(ino, is_dir, PtrSlot::Direct(lbn), lbn as u64, b);
        }
        Ok((b, true))
    }

    /// Where logical block `lbn` (past the direct ones) lives: the indirect level (0 single,
    /// 1 double, 2 triple), the first logical block of that level, `lbn`'s place within it, and
    /// the blocks the level's top indirect block covers.
    fn indirect_level(&self, lbn: u64) -> FsResult<(usize, u64, u64, u64)> {
        let p = self.sb.ptrs_per_block();
        let mut rel = lbn - NDADDR as u64;
        let mut level = 0usize;
        let mut span = p;
        let mut level_base = NDADDR as u64;
        while rel >= span {
            rel -= span;
            level_base += span;
            level += 1;
            if level >= NIADDR {
                return Err(FsError::TooBig);
            }
            span *= p;
        }
        Ok((level, level_base, rel, span))
    }

    /// The indirect blocks on the way from the dinode `d` to its logical block `lbn` (past the
    /// direct blocks), top first, as far as they exist.
    pub(super) fn indirect_path(&mut self, d: &Dinode, lbn: u64) -> FsResult<Vec<u64>> {
        let p = self.sb.ptrs_per_block();
        let (level, _, mut rel, span) = self.indirect_level(lbn)?;
        let mut span = span / p; // blocks covered by each pointer of the top indirect block
        let mut ptr = d.ib[level];
        let mut path = Vec::new();
        while ptr != 0 {
            path.push(self.checked_ptr(ptr)?);
            if span == 1 {
                break;
            }
            let idx = (rel / span) as usize;
            rel %= span;
            ptr = ind_get(self.read_indirect(ptr)?, idx);
            span /= p;
        }
        Ok(path)
    }

    /// A new indirect block: zeroed, and in `Sync` mode on disk before any pointer to it.
    pub(super) fn alloc_indirect(&mut self, _ino: u32, pref: u64) -> FsResult<u64> {
        let b = self.alloc_block(pref)?;
        self.cache.create(b);
        self.order_write(&[b])?;
        Ok(b)
    }

    pub(super) fn checked_ptr(&mut self, b: u64) -> FsResult<u64> {
        if b != 0 && !self.sb.is_data_block(b) {
            return Err(self.damaged(format!("block pointer {b} outside the data area")));
        }
        Ok(b)
    }

    /// The blocks that inodes and indirect blocks read from disk point at must be in use in
    /// the bitmaps: a wrong bitmap is caught here, before an allocation could hand such a block
    /// out again. Each block is checked once, when it comes into the cache (`ptrs` are its
    /// pointers); a wrong bit is set and the superblock asks for fsck.
    pub(super) fn claim_pointers(&mut self, what: u64, ptrs: &[u64]) -> FsResult<()> {
        let mut wrong = 0;
        for &b in ptrs {
            if b != 0 && self.alloc.ensure_block_used(&mut self.cache, &self.sb, b)? {
                wrong += 1;
            }
        }
        if wrong > 0 {
            self.damaged(format!("{wrong} blocks that block {what} points at were free in the bitmaps"));
        }
        Ok(())
    }

    /// Reads an inode-table block, checking its inodes' pointers when it comes from disk.
    pub(super) fn read_inode_block(&mut self, bno: u64) -> FsResult<&[u8]> {
        if !self.cache.is_cached(bno) {
            let buf = self.cache.read(bno)?;
            let sb = &self.sb;
            let ptrs: Vec<u64> = buf
                .chunks_exact(DINODE_SIZE)
                .map(|raw| sb.decode_dinode(raw))
                .filter(|d| !d.is_free())
                .flat_map(|d| {
                    let map = if d.has_blocks() { d.db.into_iter().chain(d.ib).collect() } else { Vec::new() };
                    map.into_iter().chain(d.extb)
                })
                .collect();
            self.claim_pointers(bno, &ptrs)?;
            self.drop_pointers_past_size(bno)?;
        }
        Ok(self.cache.read(bno)?)
    }

    /// UFS2 holds no block past a file's size (fsck_ffs calls such an inode unknown and clears
    /// it): an inode read from disk with a direct pointer or an indirect level its size does not
    /// reach is damage. The pointers are cleared in the cached block (on a writable mount), so
    /// that no later write builds on them (their blocks are leaked until fsck), and the
    /// superblock asks for fsck.
    fn drop_pointers_past_size(&mut self, bno: u64) -> FsResult<()> {
        let u = self.sb.ufs2();
        let (bs, nindir) = (u.fs_bsize as u64, u.nindir() as u64);
        // The direct pointers and indirect levels a size reaches (fsck_ffs's pass 1).
        let reach = |size: u64| {
            let ndb = size.div_ceil(bs);
            let (mut n, mut levels) = (ndb.saturating_sub(NDADDR as u64), 0);
            while n > 0 {
                levels += 1;
                n /= nindir;
            }
            (ndb.min(NDADDR as u64) as usize, levels.min(NIADDR))
        };
        let past = |d: &Dinode| {
            let (ndb, levels) = reach(d.size);
            (!d.is_free() && d.has_blocks())
                && (d.db[ndb..].iter().any(|&p| p != 0) || d.ib[levels..].iter().any(|&p| p != 0))
        };
        let bad: Vec<usize> = self
            .cache
            .read(bno)?
            .chunks_exact(DINODE_SIZE)
            .enumerate()
            .filter(|(_, raw)| past(&self.sb.decode_dinode(raw)))
            .map(|(k, _)| k)
            .collect();
        let cg = self.sb.cg_of_block(bno);
        let first = cg * self.sb.inodes_per_group
            + ((bno - self.sb.cg_itable_block(cg)) / self.sb.frag()) as u32 * self.sb.inodes_per_block();
        for &k in &bad {
            self.damaged(format!("inode {}: block pointers past its size", first + k as u32));
        }
        if !self.live.can_write {
            return Ok(());
        }
        for k in bad {
            let raw = &mut self.cache.modify(bno)?[k * DINODE_SIZE..(k + 1) * DINODE_SIZE];
            let mut d = self.sb.decode_dinode(raw);
            let (ndb, levels) = reach(d.size);
            d.db[ndb..].fill(0);
            d.ib[levels..].fill(0);
            self.sb.encode_dinode(&d, raw);
        }
        Ok(())
    }

    /// Reads an indirect block, checking its pointers when it comes from disk.
    pub(super) fn read_indirect(&mut self, bno: u64) -> FsResult<&[u8]> {
        if !self.cache.is_cached(bno) {
            let buf = self.cache.read(bno)?;
            let ptrs: Vec<u64> = (0..self.sb.ptrs_per_block() as usize).map(|i| ind_get(buf, i)).collect();
            self.claim_pointers(bno, &ptrs)?;
        }
        Ok(self.cache.read(bno)?)
    }

    pub(super) fn ino_pref(&self, ino: u32) -> u64 {
        self.sb.cg_data_start(self.sb.cg_of_inode(ino))
    }

    /// Frees every block at logical block `from` and beyond. Pointers are nullified in the inode
    /// and indirect blocks; in `Sync` mode those are written before the blocks return to the
    /// free map. The inode itself is written back.
    /// The tasks in `then` run once the blocks are free (with soft updates: once the nullified
    /// pointers are on disk, the paper's freeblks). `old_size` is the size the blocks were
    /// held with (a last direct block in fragments is freed as its run).
    pub(super) fn truncate_blocks(
        &mut self,
        ino: u32,
        d: &mut Dinode,
        from: u64,
        old_size: u64,
        then: Vec<Task>,
    ) -> FsResult<()> {
        let p = self.sb.ptrs_per_block();
        let mut freed = Vec::new();
        let mut dirtied = Vec::new();
        let tail = self.take_direct(d, from, NDADDR as u64, old_size, &mut freed);
        let mut base = NDADDR as u64;
        let mut span = p;
        for level in 0..NIADDR {
            let top = d.ib[level];
            if top != 0 && from < base + span {
                let keep_from = from.saturating_sub(base);
                if keep_from == 0 {
                    self.collect_tree(top, level, &mut freed)?;
                    d.ib[level] = 0;
                } else if self.trunc_tree(top, level, span / p, keep_from, &mut freed, &mut dirtied)? {
                    freed.push(top);
                    d.ib[level] = 0;
                }
            }
            base += span;
            span = span.saturating_mul(p);
        }
        self.release_blocks(ino, d, freed, tail, dirtied, then)
    }

    /// Clears direct pointers `from..to` of `d`, listing whole blocks in `freed`; returns the
    /// run of fragments among them, if one is (the last block of a file of `size` bytes).
    fn take_direct(
        &mut self,
        d: &mut Dinode,
        from: u64,
        to: u64,
        size: u64,
        freed: &mut Vec<u64>,
    ) -> Option<(u64, u32)> {
        let mut tail = None;
        let bs = self.sb.block_size as usize;
        for i in from.min(NDADDR as u64)..to.min(NDADDR as u64) {
            let b = std::mem::take(&mut d.db[i as usize]);
            if b == 0 {
                continue;
            }
            let len = self.run_len(size, i);
            if len < bs {
                tail = Some((b, self.frags_in(len)));
            } else {
                freed.push(b);
            }
        }
        tail
    }

    /// The common end of truncation and hole punching: `freed` are blocks whose pointers were
    /// nullified in `d` (direct and top indirect ones) and in the indirect blocks `dirtied`,
    /// `tail` a run of fragments (address, count) whose direct pointer was.
    /// The inode is written back; the blocks return to the free map once no pointer to them
    /// can be on disk (with soft updates, the paper's freeblks once the inode is written; with
    /// indirect blocks changed, after synchronous writes of them, as in the paper), and then
    /// the tasks in `then` run.
    pub(super) fn release_blocks(
        &mut self,
        ino: u32,
        d: &mut Dinode,
        freed: Vec<u64>,
        tail: Option<(u64, u32)>,
        mut dirtied: Vec<u64>,
        then: Vec<Task>,
    ) -> FsResult<()> {
        let held = freed.len() as u64 * self.sb.frag() + tail.map_or(0, |t| t.1 as u64);
        d.blocks = d.blocks.saturating_sub(held);
        let mut then = then;
        if !freed.is_empty() || tail.is_some() {
            // Whether a pointer is on disk decides when its block may be reused, and a freed
            // block's old write must reach the device first: a write in flight lands.
            self.land_flight()?;
        }
        if let Some((b, frags)) = tail {
            // Freed with the blocks (first: `then` may drop the last link of its inode).
            then.insert(0, Task::FreeFrag(FreeFrag { ino, bno: b, frags }));
        }
        if let Some(sd) = self.hooks.softdep.as_mut() {
            let cancelled: Vec<u64> = freed.iter().copied().chain(tail.map(|t| t.0)).collect();
            let orphans = sd.cancel_blocks(ino, &cancelled);
            then.extend(orphans);
            if let Some((b, _)) = tail {
                self.cache.forget(b);
            }
            if dirtied.is_empty() {
                // Only the inode points at the blocks: they are freed once it is on disk.
                for &b in &freed {
                    self.cache.forget(b);
                }
                sd.free_blocks(ino, freed, then);
                self.iput(ino, d)?;
                return Ok(());
            }
        }
        let ib = self.iput(ino, d)?;
        if self.hooks.softdep.is_some() {
            // Partial truncation through indirect blocks: synchronous writes, as in the paper.
            dirtied.push(ib);
            self.write_bufs(&dirtied, WriteKind::Sync)?;
        } else {
            dirtied.push(ib);
            // The nullified pointers go first; only then may the blocks be reused.
            self.order_write(&dirtied)?;
        }
        for b in freed {
            self.forget_block(b)?;
            self.free_block(b)?;
        }
        if let Some((b, _)) = tail {
            self.forget_block(b)?;
        }
        for t in then {
            self.run_task(t)?;
        }
        Ok(())
    }

    /// Frees the blocks of logical blocks `from..to` (a punched hole), and the indirect blocks
    /// left with no pointer; the size does not change. Freed through `release_blocks`, as a
    /// truncation's.
    pub(super) fn punch_blocks(&mut self, ino: u32, d: &mut Dinode, from: u64, to: u64) -> FsResult<()> {
        let p = self.sb.ptrs_per_block();
        let mut freed = Vec::new();
        let mut dirtied = Vec::new();
        let size = d.size;
        let tail = self.take_direct(d, from, to, size, &mut freed);
        let mut base = NDADDR as u64;
        let mut span = p;
        for level in 0..NIADDR {
            let top = d.ib[level];
            if top != 0 && from < base + span && to > base {
                let (lo, hi) = (from.saturating_sub(base), (to - base).min(span));
                if self.punch_tree(top, level, span / p, lo, hi, &mut freed, &mut dirtied)? {
                    freed.push(top);
                    d.ib[level] = 0;
                }
            }
            base += span;
            span = span.saturating_mul(p);
        }
        if freed.is_empty() && tail.is_none() {
            return Ok(());
        }
        self.release_blocks(ino, d, freed, tail, dirtied, vec![])
    }

    /// Frees relative blocks `lo..hi` of the tree under indirect block `bno`, whose pointers
    /// each cover `span` data blocks. Returns true if the tree is left with no pointer (the
    /// caller frees `bno` itself); otherwise a changed `bno` is listed in `dirtied`.
    #[allow(clippy::too_many_arguments)]
    fn punch_tree(
        &mut self,
        bno: u64,
        level: usize,
        span: u64,
        lo: u64,
        hi: u64,
        freed: &mut Vec<u64>,
        dirtied: &mut Vec<u64>,
    ) -> FsResult<bool> {
        self.checked_ptr(bno)?;
        let n = self.sb.ptrs_per_block() as usize;
        let ptrs: Vec<u64> = {
            let buf = self.read_indirect(bno)?;
            (0..n).map(|i| ind_get(buf, i)).collect()
        };
        let mut changed = false;
        let mut empty = true;
        for (i, &c) in ptrs.iter().enumerate() {
            let start = i as u64 * span;
            if c == 0 {
                continue;
            }
            if start + span <= lo || start >= hi {
                empty = false;
                continue;
            }
            let whole = lo <= start && start + span <= hi;
            let gone = if whole {
                if level == 0 {
                    freed.push(self.checked_ptr(c)?);
                } else {
                    self.collect_tree(c, level - 1, freed)?;
                }
                true
            } else {
                let (l, h) = (lo.saturating_sub(start), (hi - start).min(span));
                let p = self.sb.ptrs_per_block();
                let gone = self.punch_tree(c, level - 1, span / p, l, h, freed, dirtied)?;
                if gone {
                    freed.push(c);
                }
                gone
            };
            if gone {
                ind_set(self.cache.modify(bno)?, i, 0);
                changed = true;
            } else {
                empty = false;
            }
        }
        if changed && !empty {
            dirtied.push(bno);
        }
        Ok(empty)
    }

    /// The first logical block in `from..to` that holds data (`data`) or is a hole (`!data`),
    /// walking the block map and stepping over whole missing indirect trees.
    pub(super) fn find_block(&mut self, d: &Dinode, from: u64, to: u64, data: bool) -> FsResult<Option<u64>> {
        for lbn in from..to.min(NDADDR as u64) {
            if (self.checked_ptr(d.db[lbn as usize])? != 0) == data {
                return Ok(Some(lbn));
            }
        }
        let p = self.sb.ptrs_per_block();
        let mut base = NDADDR as u64;
        let mut span = p;
        for level in 0..NIADDR {
            if base >= to {
                break;
            }
            if from < base + span {
                let top = d.ib[level];
                let found = if top == 0 {
                    (!data).then(|| from.max(base))
                } else {
                    self.find_in_tree(top, level, base, span / p, from, to, data)?
                };
                if found.is_some() {
                    return Ok(found.filter(|&l| l < to));
                }
            }
            base += span;
            span = span.saturating_mul(p);
        }
        Ok(None)
    }

    /// `find_block` in the tree under indirect block `bno`, whose first logical block is
    /// `base` and whose pointers each cover `span` blocks.
    #[allow(clippy::too_many_arguments)]
    fn find_in_tree(
        &mut self,
        bno: u64,
        level: usize,
        base: u64,
        span: u64,
        from: u64,
        to: u64,
        data: bool,
    ) -> FsResult<Option<u64>> {
        self.checked_ptr(bno)?;
        let first = (from.saturating_sub(base) / span) as usize;
        for i in first..self.sb.ptrs_per_block() as usize {
            let start = base + i as u64 * span;
            if start >= to {
                break;
            }
            let c = ind_get(self.read_indirect(bno)?, i);
            self.checked_ptr(c)?;
            let found = if c == 0 {
                (!data).then(|| from.max(start))
            } else if level == 0 {
                data.then(|| from.max(start))
            } else {
                self.find_in_tree(c, level - 1, start, span / self.sb.ptrs_per_block(), from, to, data)?
            };
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// Every block of the tree under indirect block `bno` of `level` (0 = single), itself included.
    pub(super) fn collect_tree(&mut self, bno: u64, level: usize, out: &mut Vec<u64>) -> FsResult<()> {
        self.checked_ptr(bno)?;
        let ptrs: Vec<u64> = {
            let buf = self.cache.read(bno)?;
            (0..self.sb.ptrs_per_block() as usize).map(|i| ind_get(buf, i)).filter(|&c| c != 0).collect()
        };
        for c in ptrs {
            if level == 0 {
                out.push(self.checked_ptr(c)?);
            } else {
                self.collect_tree(c, level - 1, out)?;
            }
        }
        out.push(bno);
        Ok(())
    }

    /// Frees the part of an indirect tree from relative block `keep_from` on; `span` is the
    /// number of data blocks each pointer of `bno` covers. Returns true if the tree is now empty.
    pub(super) fn trunc_tree(
        &mut self,
        bno: u64,
        level: usize,
        span: u64,
        keep_from: u64,
        freed: &mut Vec<u64>,
        dirtied: &mut Vec<u64>,
    ) -> FsResult<bool> {
        self.punch_tree(bno, level, span, keep_from, u64::MAX, freed, dirtied)
    }

    /// Bytes `off..off + len` (up to `size`) of a file whose logical block `x` `block` reads into
    /// a buffer: for files the cache must not serve (reservations, snapshots).
    pub(crate) fn read_blocks(
        &mut self,
        size: u64,
        off: u64,
        len: usize,
        mut block: impl FnMut(&mut Fs, u64, &mut [u8]) -> FsResult<()>,
    ) -> FsResult<Vec<u8>> {
        let bs = self.sb.block_size as u64;
        let end = size.min(off.saturating_add(len as u64));
        let mut out = Vec::with_capacity(end.saturating_sub(off) as usize);
        let mut buf = vec![0u8; bs as usize];
        let mut pos = off;
        while pos < end {
            let boff = (pos % bs) as usize;
            let n = ((bs - boff as u64).min(end - pos)) as usize;
            block(self, pos / bs, &mut buf)?;
            out.extend_from_slice(&buf[boff..boff + n]);
            pos += n as u64;
        }
        Ok(out)
    }

    /// The data blocks of a file and its indirect blocks by level (0: those pointing at data).
    ///
    /// A Block Register reservation's data blocks are never written by the file system (its
    /// owner writes them on the device), so they are not listed and its last level of indirect
    /// blocks is not read: a brexpand's fsync costs no read per 2 MiB of reservation.
    pub(super) fn file_blocks(
        &mut self,
        d: &Dinode,
        data: &mut Vec<u64>,
        levels: &mut [Vec<u64>; NIADDR],
    ) -> FsResult<()> {
        let with_data = !br::is_reservation(d);
        if with_data {
            data.extend(d.db.iter().copied().filter(|&b| b != 0));
        }
        for (top_level, &top) in d.ib.iter().enumerate() {
            let mut frontier = vec![top];
            for level in (0..=top_level).rev() {
                let mut next = Vec::new();
                for &b in frontier.iter().filter(|&&b| b != 0) {
                    self.checked_ptr(b)?;
                    levels[level].push(b);
                    if level == 0 && !with_data {
                        continue;
                    }
                    let buf = self.cache.read(b)?;
                    next.extend((0..self.sb.ptrs_per_block() as usize).map(|i| ind_get(buf, i)).filter(|&c| c != 0));
                }
                frontier = next;
            }
            data.extend(frontier);
        }
        Ok(())
    }
}
