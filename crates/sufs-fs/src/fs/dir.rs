//! Directories: finding, adding and removing entries (with the dirhash index of large
//! directories), the ordering of a new or removed entry, and listing.

use super::*;

impl Fs {
    pub(super) fn check_name(name: &[u8]) -> FsResult<()> {
        if name.len() > MAXNAMLEN {
            return Err(FsError::NameTooLong);
        }
        if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
            return Err(FsError::Invalid("bad file name"));
        }
        Ok(())
    }

    pub(super) fn dir_inode(&mut self, ino: u32) -> FsResult<Dinode> {
        let d = self.iget(ino)?;
        if !d.is_dir() {
            return Err(FsError::NotDir);
        }
        Ok(d)
    }

    /// The blocks directory `dir`'s size spans, checked where the size is used: every walk of
    /// a directory runs to its size, so a damaged one (2^40 bytes with one block) would walk
    /// 2^28 holes under the lock on each lookup. A directory's size is at most the largest
    /// file the block map addresses, and spans no more blocks than the directory holds
    /// (`blocks`, which counts each of its data blocks; soft updates roll a directory's size
    /// back with its new block's pointer, never its block count), which in turn are no more
    /// than the file system's data blocks. Past that, the request fails with EIO and the image
    /// is marked for fsck (which cuts the size back to the blocks).
    pub(super) fn dir_blocks(&mut self, dir: u32, d: &Dinode) -> FsResult<u64> {
        let nblocks = d.size.div_ceil(self.sb.block_size as u64);
        let units = d.size.div_ceil(self.sb.addr_unit() as u64);
        if d.size > self.sb.max_file_size() || units > d.blocks || d.blocks > self.sb.data_blocks() {
            return Err(self.damaged(format!(
                "directory {dir} has size {} ({nblocks} blocks) but holds {} blocks",
                d.size, d.blocks
            )));
        }
        Ok(nblocks)
    }

    /// The bytes of directory block `lbn` that hold entries: the whole block but for the
    /// last, which ends at the directory's size (a UFS2 directory's last block may be a
    /// fragment, followed on disk by other files' fragments).
    pub(super) fn dir_block_len(&self, d: &Dinode, lbn: u64) -> usize {
        let bs = self.sb.block_size as u64;
        let len = d.size.saturating_sub(lbn * bs).min(bs) as usize;
        // A size that is not a whole number of chunks is damage fsck finds; the partial
        // chunk is not read.
        len / DIRBLKSIZ * DIRBLKSIZ
    }

    /// `dir_block_len` of directory `dir`'s block `lbn`, from its inode: the bytes of the
    /// block that hold entries (a whole block but for a UFS2 directory's last one).
    pub(super) fn dir_len_at(&mut self, dir: u32, lbn: u64) -> FsResult<usize> {
        let d = self.iget(dir)?;
        Ok(self.dir_block_len(&d, lbn))
    }

    /// Builds the name index of a large directory if it has none; whether it has one.
    pub(super) fn dirhash_ensure(&mut self, dir: u32, d: &mut Dinode) -> FsResult<bool> {
        let nblocks = self.dir_blocks(dir, d)?;
        if self.dirhash.contains_key(&dir) {
            return Ok(true);
        }
        // Directories grow a chunk at a time (`grow_last_block`).
        if !dirhash_wanted(d.size) {
            return Ok(false);
        }
        // Hidden entries stay out: one may share its name with a live entry (a file moved out
        // and back, say), and whichever came last in the blocks would have taken the name.
        let mut h = DirHash::new(self.sb.block_size as usize);
        for lbn in 0..nblocks {
            let (bno, _) = self.bmap(dir, d, lbn, false)?;
            if bno == 0 {
                h.add_block(lbn, None)?;
            } else {
                let len = self.dir_block_len(d, lbn);
                let size = d.size;
                self.read_run(bno, size, lbn)?;
                let hidden = &self.renames.hidden;
                h.add_block_except(lbn, Some(&self.cache.read(bno)?[..len]), |off| hidden.contains(&(bno, off)))?;
            }
        }
        self.dirhash.insert(dir, h);
        Ok(true)
    }

    /// Finds `name` in directory `dir`.
    pub(super) fn find_entry(&mut self, dir: u32, d: &mut Dinode, name: &[u8]) -> FsResult<Option<Slot>> {
        if self.dirhash_ensure(dir, d)? {
            let Some((lbn, off)) = self.dirhash[&dir].get(name) else { return Ok(None) };
            let (bno, _) = self.bmap(dir, d, lbn, false)?;
            let size = d.size;
            let buf = self.read_run(bno, size, lbn)?;
            let e = dir_entry_at(buf, off)?;
            assert!(e.ino != 0 && e.name == name, "dirhash of directory {dir} is stale");
            return Ok(Some(Slot { bno, lbn, off, ino: e.ino }));
        }
        self.scan_dir(dir, d, |e| e.name == name)
    }

    /// The first live entry of `dir` (hidden old names of renames excluded) that `pred` accepts.
    pub(super) fn scan_dir(
        &mut self,
        dir: u32,
        d: &mut Dinode,
        pred: impl Fn(&DirRef) -> bool,
    ) -> FsResult<Option<Slot>> {
        for lbn in 0..self.dir_blocks(dir, d)? {
            let (bno, _) = self.bmap(dir, d, lbn, false)?;
            if bno == 0 {
                continue;
            }
            let len = self.dir_block_len(d, lbn);
            let size = d.size;
            self.read_run(bno, size, lbn)?;
            let buf = self.cache.read(bno)?;
            for e in dir_iter(&buf[..len]) {
                let e = e?;
                if e.ino != 0 && !self.renames.hidden.contains(&(bno, e.offset)) && pred(&e) {
                    return Ok(Some(Slot { bno, lbn, off: e.offset, ino: e.ino }));
                }
            }
        }
        Ok(None)
    }

    /// Removes the entry `slot` (named `name`) from directory `dir`.
    pub(super) fn remove_entry(&mut self, dir: u32, slot: &Slot, name: &[u8]) -> FsResult<()> {
        let len = self.dir_len_at(dir, slot.lbn)?;
        let buf = &mut self.cache.modify(slot.bno)?[..len];
        let freed = dir_remove(buf, slot.off)? as u32;
        if let Some(h) = self.dirhash.get_mut(&dir) {
            // The freed bytes joined one record; the chunk's others are as they were.
            let slack = h.slack_at(slot.lbn, slot.off).max(freed);
            debug_assert_eq!(Ok(slack), chunk_slack(buf, slot.off), "directory {dir}: chunk slack after a removal");
            h.removed(name, slot.lbn, slot.off, slack);
        }
        Ok(())
    }

    /// Link drops that `tasks` will make, counted now so users see final link counts at once.
    pub(super) fn note_pending(&mut self, tasks: &[Task]) {
        if self.hooks.softdep.is_none() {
            return;
        }
        let Some(sd) = self.sd() else { return };
        for t in tasks {
            match t {
                Task::DropLink(i) => sd.add_pending_unlink(*i),
                Task::RmdirChild { child, parent } => {
                    sd.add_pending_unlink(*child);
                    sd.add_pending_unlink(*child);
                    if let Some(p) = parent {
                        sd.add_pending_unlink(*p);
                    }
                }
                _ => {}
            }
        }
    }

    /// A name was added (or, with `old`, changed) at `off` of directory block `bno`: ordered
    /// after the inode it names (and for mkdir after the parent's raised count and the new
    /// directory's first block). `tasks` run once the name is on disk.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn entry_added(
        &mut self,
        dir: u32,
        bno: u64,
        off: usize,
        ino: u32,
        old: Option<(u32, u8)>,
        parent: Option<u32>,
        mkdir: bool,
        tasks: Vec<Task>,
    ) -> FsResult<()> {
        if self.hooks.softdep.is_some() {
            // A changed entry, or one whose earlier version is not on disk yet, keeps what the
            // disk holds for its roll-back: a write in flight may be putting it there.
            if self.cache.in_flight(bno)
                && (old.is_some() || self.hooks.softdep.as_ref().is_some_and(|s| s.diradd_at(bno, off)))
            {
                self.land_flight()?;
            }
            self.note_pending(&tasks);
            self.sd().expect("softdep").dir_add(dir, bno, off, ino, old, parent, mkdir, tasks);
            if dir_entry_at(self.cache.read(bno)?, off)?.dtype == DT_DIR {
                self.sd().expect("softdep").names_dir(ino);
                if !mkdir {
                    // An existing directory's new name: a path through it may not be on disk.
                    self.renames.paths.dir_renamed();
                }
            }
            // The inodes the entry waits for must be written again for it to complete.
            for i in std::iter::once(ino).chain(parent) {
                let (ib, _) = self.sb.inode_location(i);
                self.cache.modify(ib)?;
            }
            return Ok(());
        }
        self.order_write(&[bno])?;
        for t in tasks {
            self.run_task(t)?;
        }
        Ok(())
    }

    /// Removes the entry `slot` of `dir`; `tasks` (the link drops) run once the removal is on
    /// disk (soft updates' dirrem) or, ordered by a synchronous write, at once. True if they
    /// ran at once (a name that never reached the disk, or a removal written already).
    pub(super) fn unlink_name(&mut self, dir: u32, slot: &Slot, name: &[u8], tasks: Vec<Task>) -> FsResult<bool> {
        log::trace!("unlink {:?} from directory {dir} at {slot:?}: then {tasks:?}", String::from_utf8_lossy(name));
        // Whether the name is on disk decides what its removal waits for: a write in flight
        // may be putting it there, while its add is pending (and, without soft updates'
        // records to tell, always). A name on disk before the flight was prepared stays in the
        // flight's copy, and its removal, made after that copy, waits for a later write of the
        // block (its dirrem's epoch is past the write's: `entries_written`).
        if self.cache.in_flight(slot.bno) && self.name_add_pending(slot) {
            self.land_flight()?;
        }
        self.remove_entry(dir, slot, name)?;
        if self.hooks.softdep.is_some() {
            // Users see the link counts the queued drops will leave (each drop takes its note).
            self.note_pending(&tasks);
            // A name that never reached the disk is gone now: its drops run at once, and a file
            // removed before the syncer wrote it costs no write (its dirty blocks go).
            let Some(now) = self.sd().expect("softdep").dir_remove(slot.bno, slot.off, tasks) else {
                return Ok(false);
            };
            for t in now {
                self.run_task(t)?;
            }
            return Ok(true);
        }
        self.order_write(&[slot.bno])?;
        for t in tasks {
            self.run_task(t)?;
        }
        Ok(true)
    }

    /// True if the entry at `slot` may not be on disk yet: soft updates hold its add
    /// (`diradd`); without soft updates, always (nothing records it).
    pub(super) fn name_add_pending(&self, slot: &Slot) -> bool {
        self.hooks.softdep.as_ref().is_none_or(|sd| sd.diradd_at(slot.bno, slot.off))
    }

    /// The inode of a root directory the file system keeps for itself (`/.br`, `/.snap`): made,
    /// root-only and immutable so that it cannot be renamed, if `create`.
    pub(crate) fn special_dir(&mut self, name: &[u8], create: bool) -> FsResult<u32> {
        match self.lookup(ROOT_INO, name) {
            Ok((ino, d)) if d.is_dir() => Ok(ino),
            Ok(_) => Err(FsError::Corrupt(format!("/{} is not a directory", String::from_utf8_lossy(name)))),
            Err(FsError::NotFound) if create => {
                let (ino, _) = self.mkdir(ROOT_INO, name, 0o700, 0, 0)?;
                let mut d = self.iget(ino)?;
                d.flags |= DI_IMMUTABLE;
                self.iput(ino, &d)?;
                Ok(ino)
            }
            Err(e) => Err(e),
        }
    }

    /// The entries (without "." and "..") of a root directory the file system keeps for itself;
    /// none if it was never made.
    pub(crate) fn special_dir_entries(&mut self, name: &[u8]) -> FsResult<Vec<DirListEntry>> {
        let dir = match self.special_dir(name, false) {
            Ok(d) => d,
            Err(FsError::NotFound) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        let mut cookie = 0;
        loop {
            let batch = self.readdir(dir, cookie, 256)?;
            let Some(last) = batch.last() else { break };
            cookie = last.next;
            out.extend(batch.into_iter().filter(|e| e.name != b"." && e.name != b".."));
        }
        Ok(out)
    }

    /// Adds an entry to `dir`, growing it by a block if no block has room. The directory inode
    /// `d` is updated in memory (size, times) and written back. Returns the block holding the
    /// new entry.
    pub(super) fn add_entry(
        &mut self,
        dir: u32,
        d: &mut Dinode,
        name: &[u8],
        ino: u32,
        dtype: u8,
    ) -> FsResult<(u64, usize)> {
        let bs = self.sb.block_size as u64;
        let nblocks = self.dir_blocks(dir, d)?;
        let indexed = self.dirhash_ensure(dir, d)?;
        // The index names the one chunk to look in; without it every block is scanned.
        let (candidates, chunk) = if indexed {
            match self.dirhash[&dir].chunk_with_room(dirent_size(name.len())) {
                Some((lbn, c)) => (lbn..lbn + 1, Some(c)),
                None => (nblocks..nblocks, None),
            }
        } else {
            (0..nblocks, None)
        };
        for lbn in candidates.clone() {
            if let Some(r) = self.add_in_block(dir, d, lbn, chunk, name, ino, dtype)? {
                return Ok(r);
            }
        }
        if indexed && !candidates.is_empty() {
            // The index claimed room its chunk does not have: only a damaged image does that
            // (a block shared with another directory changed under it). The index goes, and
            // every block is scanned, as without one.
            log::warn!("dirhash of directory {dir} claims room it does not have: index dropped");
            self.dirhash.remove(&dir);
            for lbn in 0..nblocks {
                if let Some(r) = self.add_in_block(dir, d, lbn, None, name, ino, dtype)? {
                    return Ok(r);
                }
            }
        }
        if let Some(r) = self.grow_last_block(dir, d, nblocks, name, ino, dtype)? {
            return Ok(r);
        }
        // A new block: initialised and (Sync) on disk before the inode points to it. With
        // fragments, a direct one is a chunk in a fragment, grown as the directory grows.
        let mut nd = d.clone();
        let chunk = self.has_frags() && nblocks < NDADDR as u64;
        let new_size = if chunk { nblocks * bs + DIRBLKSIZ as u64 } else { (nblocks + 1) * bs };
        let got =
            if chunk { self.bmap_run(dir, &mut nd, nblocks, new_size) } else { self.bmap(dir, &mut nd, nblocks, true) };
        let bno = match got {
            Ok((bno, _)) => bno,
            Err(FsError::NoSpace) => {
                // Indirect blocks made for the new block, which got none, are freed again and
                // the inode written as it was: dropped with `nd`, a pointer's dependency would
                // never complete and the block would leak.
                self.punch_blocks(dir, &mut nd, nblocks, nblocks + 1)?;
                return Err(FsError::NoSpace);
            }
            Err(e) => return Err(e),
        };
        let run = self.run_len(new_size, nblocks);
        // The whole run formatted, so that the directory grows into it without a write.
        dir_init_block(self.cache.create_frags(bno, run));
        let past_direct = nblocks >= NDADDR as u64;
        if past_direct && self.ordering == Ordering::Softdep {
            // Empty: the entry's dependency is set up once it is in, after this returns.
            self.dir_block_pointer_to_disk(&nd, nblocks, bno)?;
        }
        let buf = &mut self.cache.modify(bno)?[..(new_size - nblocks * bs) as usize];
        let off = dir_insert(buf, 0, ino, dtype, name)?;
        if let Some(h) = self.dirhash.get_mut(&dir) {
            h.set_chunks(nblocks, buf)?;
            h.inserted(name, nblocks, off, chunk_slack(buf, off)?);
        }
        self.order_write(&[bno])?;
        if past_direct && self.ordering == Ordering::Sync {
            self.dir_block_pointer_to_disk(&nd, nblocks, bno)?;
        }
        *d = nd;
        d.size = new_size;
        self.touch_mc(d);
        let ib = self.iput(dir, d)?;
        // The new name is reachable only once the directory's inode (size, pointer) is on disk:
        // written now, as FFS's direnter does, so that a rename's old name never goes first.
        self.order_write(&[ib])?;
        Ok((bno, off))
    }

    /// Puts a new directory block `bno` past the direct blocks (logical block `lbn` of `nd`),
    /// and its pointer in its indirect blocks, on disk before the directory's size covers it:
    /// else a crash may leave the larger size with the pointer not yet written, a hole in the
    /// directory that fsck can only cut off, with the names after it (fstests' generic/705
    /// under `sync`; the crash tester's `big-dir` under soft updates). FFS's `ufs_direnter`
    /// fsyncs a directory it grows into an indirect block for the same reason. Under `sync` the
    /// block is on disk already; under soft updates the pointer is rolled back until its block
    /// and bitmap are on disk, so those go first (the block still empty: its first entry's
    /// dependency is set up after it is in), then the indirect blocks from the one holding the
    /// pointer up, each after the one it points to.
    fn dir_block_pointer_to_disk(&mut self, nd: &Dinode, lbn: u64, bno: u64) -> FsResult<()> {
        debug_assert!(lbn >= NDADDR as u64 && self.ordering != Ordering::Async);
        if self.ordering == Ordering::Softdep {
            let mut first = self.dirty_cg_headers();
            first.push(bno);
            self.write_bufs(&first, WriteKind::Sync)?;
        }
        let path = self.indirect_path(nd, lbn)?;
        for &b in path.iter().rev() {
            self.write_bufs(&[b], WriteKind::Sync)?;
        }
        Ok(())
    }

    /// Adds the entry in directory block `lbn` if it has room (in `chunk` alone, the one the
    /// index names, when given); writes the directory inode back. None if there is no room
    /// (or no block).
    #[allow(clippy::too_many_arguments)]
    fn add_in_block(
        &mut self,
        dir: u32,
        d: &mut Dinode,
        lbn: u64,
        chunk: Option<usize>,
        name: &[u8],
        ino: u32,
        dtype: u8,
    ) -> FsResult<Option<(u64, usize)>> {
        let (bno, _) = self.bmap(dir, d, lbn, false)?;
        if bno == 0 {
            return Ok(None);
        }
        let len = self.dir_block_len(d, lbn);
        let (lo, hi) = chunk.map_or((0, len), |c| (c, c + DIRBLKSIZ));
        if hi > len {
            // An index naming a chunk past the block's end: stale, as `add_entry` finds.
            return Ok(None);
        }
        let size = d.size;
        let Some(at) = dir_find_space(&self.read_run(bno, size, lbn)?[lo..hi], name.len())? else {
            return Ok(None);
        };
        self.modify_run(bno, size, lbn)?;
        let buf = &mut self.cache.modify(bno)?[..len];
        let off = lo + dir_insert(&mut buf[lo..hi], at, ino, dtype, name)?;
        if let Some(h) = self.dirhash.get_mut(&dir) {
            h.inserted(name, lbn, off, chunk_slack(buf, off)?);
        }
        self.touch_mc(d);
        self.iput(dir, d)?;
        Ok(Some((bno, off)))
    }

    /// Adds the entry in a new chunk at the end of the directory's last block, when that block
    /// ends before a whole block: a UFS2 directory grows a chunk (`DIRBLKSIZ`) at a time, as
    /// FreeBSD's `ufs_direnter` grows it. No crash may show a directory whose size covers bytes
    /// that are not entries. Every run of fragments a directory gets (at mkdir, a new block, a
    /// grown or moved run) is formatted whole as empty chunks, and with soft updates the run's
    /// `AllocDirect` keeps the inode's pointer and size back until those contents are on disk
    /// (a grown or moved run is new again): a chunk empty in memory past the size is empty on
    /// disk before the size can cover it, and the new chunk costs no write, as in FreeBSD's
    /// `ufs_direnter`. The entry follows the rules of any new name (its block not reachable
    /// until the pointer is on disk, `roll_back_entries`). Under `sync` the chunk is written
    /// first; a run that another writer left unformatted past the size is formatted and
    /// written first under soft updates too. None if the last block is whole.
    fn grow_last_block(
        &mut self,
        dir: u32,
        d: &mut Dinode,
        nblocks: u64,
        name: &[u8],
        ino: u32,
        dtype: u8,
    ) -> FsResult<Option<(u64, usize)>> {
        let Some(lbn) = nblocks.checked_sub(1) else { return Ok(None) };
        let len = self.dir_block_len(d, lbn);
        if len + DIRBLKSIZ > self.sb.block_size as usize {
            return Ok(None);
        }
        let (bno, _) = self.bmap(dir, d, lbn, false)?;
        if bno == 0 {
            return Ok(None);
        }
        // In fragments, the run grows first to hold the new chunk (in place, or moved).
        let grown = d.size + DIRBLKSIZ as u64;
        let old_run = self.run_len(d.size, lbn);
        let run = self.run_len(grown, lbn);
        let bno = if self.has_frags() && lbn < NDADDR as u64 { self.bmap_run(dir, d, lbn, grown)?.0 } else { bno };
        let buf = self.cache.modify_frags(bno, run)?;
        // New fragments wait for their contents like any new run; otherwise the chunk is ready
        // if a run formatted whole left it empty.
        let fresh = run > old_run;
        let ready = !fresh && dir_chunk_empty(&buf[len..len + DIRBLKSIZ]);
        if !ready {
            dir_init_block(&mut buf[len..]);
        }
        if self.chunk_written_first(fresh, ready) {
            self.write_bufs(&[bno], WriteKind::Sync)?;
        }
        d.size += DIRBLKSIZ as u64;
        let buf = &mut self.cache.modify_frags(bno, run)?[..len + DIRBLKSIZ];
        let off = dir_insert(buf, len, ino, dtype, name)?;
        if let Some(h) = self.dirhash.get_mut(&dir) {
            h.inserted(name, lbn, off, chunk_slack(buf, off)?);
        }
        self.touch_mc(d);
        let ib = self.iput(dir, d)?;
        // The new name is reachable only once the larger size is on disk: written now, as for
        // a new block (a rename's old name must not go first).
        self.order_write(&[ib])?;
        Ok(Some((bno, off)))
    }

    /// Whether a directory's new chunk (in new fragments: `fresh`; left empty by a run
    /// formatted whole: `ready`) is written, alone, before its entry is made and the size
    /// covers it. Under `sync` always; under soft updates only for a chunk of a run another
    /// writer left unformatted (the disk may hold anything there, and no dependency waits for
    /// it); new fragments wait for their contents through their `AllocDirect`.
    fn chunk_written_first(&self, fresh: bool, ready: bool) -> bool {
        match self.ordering {
            Ordering::Sync => true,
            Ordering::Softdep => !fresh && !ready,
            Ordering::Async => false,
        }
    }

    pub(super) fn dir_is_empty(&mut self, ino: u32, d: &mut Dinode) -> FsResult<bool> {
        Ok(self.scan_dir(ino, d, |e| e.name != b"." && e.name != b"..")?.is_none())
    }

    /// Gives a new directory its first block with "." and "..".
    pub(super) fn init_dir_block(&mut self, ino: u32, d: &mut Dinode, parent: u32) -> FsResult<u64> {
        // With fragments a directory starts as one chunk in one fragment, as FreeBSD's mkdir
        // makes it.
        let size = if self.has_frags() { DIRBLKSIZ as u64 } else { self.sb.block_size as u64 };
        let (bno, _) = if self.has_frags() { self.bmap_run(ino, d, 0, size)? } else { self.bmap(ino, d, 0, true)? };
        let run = self.run_len(size, 0);
        // The whole run formatted, as FreeBSD's ufs_mkdir does with soft updates: the directory
        // grows into it without a write (`grow_last_block`).
        let buf = self.cache.create_frags(bno, run);
        dir_init_block(buf);
        let buf = &mut buf[..size as usize];
        let at = dir_insert(buf, 0, ino, DT_DIR, b".")?;
        let at = dir_find_space(buf, 2)?.unwrap_or(at);
        dir_insert(buf, at, parent, DT_DIR, b"..")?;
        d.size = size;
        Ok(bno)
    }

    /// Sets the ".." entry of directory `ino` to `parent`; returns its block, its offset and
    /// the directory it named before, which holds the link that ".." gave (after a crash in a
    /// rename across directories, not always the directory a name of `ino` was in).
    pub(super) fn set_dotdot(&mut self, ino: u32, parent: u32) -> FsResult<(u64, usize, u32)> {
        let mut d = self.dir_inode(ino)?;
        let slot = self
            .find_entry(ino, &mut d, b"..")?
            .ok_or_else(|| FsError::Corrupt(format!("directory {ino} has no ..")))?;
        dirent_set_ino(self.cache.modify(slot.bno)?, slot.off, parent);
        self.renames.paths.dir_moved();
        Ok((slot.bno, slot.off, slot.ino))
    }

    /// What follows the removal of a name of directory `child` (`d`, empty) from `dir` to disk
    /// (rmdir, or a rename over it). Its last name: the directory goes (`RmdirChild`), and the
    /// link its ".." gives goes from the directory ".." names, as fsck counts it. A crash in a
    /// rename across directories may leave a directory named twice (in one directory or two)
    /// with its ".." naming neither's holder but its old parent (allowed, for a full fsck to
    /// repair): each name but the last then drops only its own link, as a file's hard link
    /// does, and the old parent loses the link of ".." when the last goes. (Dropping the link
    /// of the directory holding each name instead lowered a parent once per name and never the
    /// one ".." names, which an adjust or a later removal then took below its links.)
    pub(super) fn dir_name_gone_task(&mut self, child: u32, d: &mut Dinode, dir: u32) -> FsResult<Task> {
        // Its names and "." (an empty directory's count holds nothing else once the pending
        // drops of removed subdirectories' ".." are taken off).
        if self.eff(child, d.clone()).nlink > 2 {
            return Ok(Task::DropLink(child));
        }
        let parent = self.find_entry(child, d, b"..")?.map_or(dir, |s| s.ino);
        Ok(Task::RmdirChild { child, parent: Some(parent) })
    }

    // ---------------------------------------------------------------- operations

    /// Lists `dir` from cookie `offset` (0 = start); at most `max` entries.
    pub fn readdir(&mut self, dir: u32, offset: u64, max: usize) -> FsResult<Vec<DirListEntry>> {
        let mut d = self.dir_inode(dir)?;
        let bs = self.sb.block_size as u64;
        let mut out = Vec::new();
        let first_lbn = offset.saturating_sub(1) / bs;
        for lbn in first_lbn..self.dir_blocks(dir, &d)? {
            let (bno, _) = self.bmap(dir, &mut d, lbn, false)?;
            if bno == 0 {
                continue;
            }
            let len = self.dir_block_len(&d, lbn);
            self.read_run(bno, d.size, lbn)?;
            let buf = self.cache.read(bno)?;
            for e in dir_iter(&buf[..len]) {
                let e = e?;
                let pos = lbn * bs + e.offset as u64;
                if e.ino == 0 || pos < offset || self.renames.hidden.contains(&(bno, e.offset)) {
                    continue;
                }
                if out.len() >= max {
                    self.accessed(dir, &mut d)?;
                    return Ok(out);
                }
                out.push(DirListEntry { ino: e.ino, dtype: e.dtype, name: e.name.to_vec(), next: pos + 1 });
            }
        }
        self.accessed(dir, &mut d)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::{read_bytes, write_bytes, MemDevice};
    use crate::fs::MountOptions;

    fn mount(dev: Arc<MemDevice>) -> Fs {
        let opts = MountOptions { ordering: Ordering::Softdep, cache_blocks: 256, readonly: false };
        Fs::mount(dev, opts, Arc::new(SimClock::new())).unwrap()
    }

    /// The UFS2 checker's findings on `dev`.
    fn ufs2_findings(dev: &MemDevice) -> Vec<String> {
        let len = dev.num_blocks() * dev.addr_unit() as u64;
        let r = crate::fsck::ufs2::check(dev as &dyn BlockDevice, len, &Default::default()).unwrap();
        r.findings.iter().map(|f| f.to_string()).collect()
    }

    /// An unlink stamps the file's change time whether its link drop runs at once (a name that
    /// never reached the disk) or waits for the removal's write (one that did), and the count
    /// users see drops at once either way; the last link of a file never written frees it.
    #[test]
    fn an_unlink_stamps_the_change_time_whether_its_drop_waits_or_not() {
        let dev = crate::format::ufs2::newfs::mem_image(8 << 20, 4096);
        let clock = Arc::new(SimClock::new());
        let opts = MountOptions { ordering: Ordering::Softdep, cache_blocks: 256, readonly: false };
        let mut fs = Fs::mount(dev.clone(), opts, clock.clone()).unwrap();
        let (dir, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        let (on_disk, _) = fs.create(dir, b"on-disk", 0o644, 0, 0).unwrap();
        fs.link(on_disk, dir, b"on-disk-2").unwrap();
        fs.sync_all().unwrap();
        let (in_memory, _) = fs.create(dir, b"in-memory", 0o644, 0, 0).unwrap();
        fs.link(in_memory, dir, b"in-memory-2").unwrap();
        let (lone, _) = fs.create(dir, b"lone", 0o644, 0, 0).unwrap();
        for (k, (ino, name)) in [(on_disk, "on-disk-2"), (in_memory, "in-memory-2")].into_iter().enumerate() {
            clock.advance(5_000_000_000);
            let mut dd = fs.dir_inode(dir).unwrap();
            let slot = fs.find_entry(dir, &mut dd, name.as_bytes()).unwrap().unwrap();
            let waits = !fs.name_add_pending(&slot);
            assert_eq!(waits, k == 0, "{name}: its name on disk {}", k == 0);
            fs.unlink(dir, name.as_bytes()).unwrap();
            let d = fs.getattr(ino).unwrap();
            assert_eq!((d.ctime, d.ctime_ns), fs.now(), "{name}: the change time is the unlink's");
            assert_eq!(d.nlink, 1, "{name}: one link left, as users see it");
        }
        fs.unlink(dir, b"lone").unwrap();
        assert!(matches!(fs.getattr(lone), Err(FsError::Stale(_))), "a file never written is freed at once");
        fs.unmount().unwrap();
        assert!(ufs2_findings(&dev).is_empty(), "{:?}", ufs2_findings(&dev));
        let mut fs = mount(dev.clone());
        for name in ["on-disk", "in-memory"] {
            let (_, d) = fs.lookup(dir, name.as_bytes()).unwrap();
            assert_eq!(d.nlink, 1, "{name}: one link on disk after the remount");
            assert!(fs.lookup(dir, format!("{name}-2").as_bytes()).is_err());
        }
        assert!(fs.lookup(dir, b"lone").is_err());
    }

    /// Files `from..to` made in directory `dir`.
    fn create_files(fs: &mut Fs, dir: u32, files: std::ops::Range<usize>) {
        for i in files {
            fs.create(dir, format!("file-number-{i:04}").as_bytes(), 0o644, 0, 0).unwrap();
        }
    }

    /// The runs of fragments a UFS2 directory gets are formatted whole: every chunk of its last
    /// run past the size is an empty chunk on disk, and the image checks clean.
    #[test]
    fn ufs2_directory_runs_are_formatted_whole() {
        let dev = crate::format::ufs2::newfs::mem_image(8 << 20, 1024);
        let mut fs = mount(dev.clone());
        let (dir, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        create_files(&mut fs, dir, 0..80);
        let d = fs.iget(dir).unwrap();
        assert_eq!(d.size, 2560, "five chunks, two of them grown in place, in three fragments");
        fs.sync_all().unwrap();
        fs.unmount().unwrap();
        let mut run = vec![0u8; 3072];
        read_bytes(&*dev, d.db[0] * 1024, &mut run).unwrap();
        assert!(dir_chunk_empty(&run[2560..]), "the run's tail is not an empty chunk");
        assert_eq!(ufs2_findings(&dev), Vec::<String>::new());
    }

    /// With soft updates a UFS2 directory grows without a synchronous write: a chunk in its
    /// last run, the run extended in place, and the run moved (a file's fragment made right
    /// after it each time it fills its fragments) all wait on dependencies, not on writes. The
    /// image then checks clean and every name is found after a remount.
    #[test]
    fn ufs2_directory_grows_and_moves_without_sync_writes() {
        let dev = crate::format::ufs2::newfs::mem_image(8 << 20, 1024);
        let mut fs = mount(dev.clone());
        let (dir, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        let before = dev.stats().sync_writes;
        let (mut moves, mut run) = (0, fs.iget(dir).unwrap().db[0]);
        for i in 0..120 {
            let (f, _) = fs.create(dir, format!("file-number-{i:04}").as_bytes(), 0o644, 0, 0).unwrap();
            if i % 8 == 0 {
                // A fragment of data near the directory's run, in the way of its growth.
                fs.write(f, 0, &[7; 100]).unwrap();
            }
            let now = fs.iget(dir).unwrap().db[0];
            moves += (now != run) as u32;
            run = now;
        }
        assert!(moves >= 2, "the directory's run moved {moves} times");
        assert_eq!(dev.stats().sync_writes, before, "synchronous writes while the directory grew");
        unmount_clean_with_files(fs, dev, dir, 120);
    }

    /// `fs`, synced and unmounted, leaves an image that checks clean, whose directory `dir`
    /// holds files `0..n` after a remount.
    fn unmount_clean_with_files(mut fs: Fs, dev: Arc<MemDevice>, dir: u32, n: usize) {
        fs.sync_all().unwrap();
        fs.unmount().unwrap();
        assert_eq!(ufs2_findings(&dev), Vec::<String>::new());
        let mut fs = mount(dev);
        for i in 0..n {
            fs.lookup(dir, format!("file-number-{i:04}").as_bytes()).unwrap();
        }
    }

    /// A directory whose last run an older writer left unformatted past its size (zeros) grows
    /// into it with the chunks written first, synchronously, once for the whole run.
    #[test]
    fn ufs2_directory_grows_into_an_unformatted_tail() {
        let dev = crate::format::ufs2::newfs::mem_image(8 << 20, 1024);
        let mut fs = mount(dev.clone());
        let (dir, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        let d = fs.iget(dir).unwrap();
        assert_eq!(d.size, DIRBLKSIZ as u64);
        fs.sync_all().unwrap();
        fs.unmount().unwrap();
        let tail = d.db[0] * 1024 + DIRBLKSIZ as u64;
        write_bytes(&*dev, tail, &[0; DIRBLKSIZ], WriteKind::Sync).unwrap();

        let mut fs = mount(dev.clone());
        let before = dev.stats().sync_writes;
        create_files(&mut fs, dir, 0..30);
        assert_eq!(fs.iget(dir).unwrap().size, 2 * DIRBLKSIZ as u64);
        assert_eq!(dev.stats().sync_writes, before + 1, "the formatted chunk written first, once");
        let mut chunk = [0u8; DIRBLKSIZ];
        read_bytes(&*dev, tail, &mut chunk).unwrap();
        assert!(dir_chunk_empty(&chunk), "the chunk is not on disk before the entry");
        unmount_clean_with_files(fs, dev, dir, 30);
    }

    /// `n` files made in a new directory `name` of `fs`, then a lookup in it with its index
    /// dropped; the directory and its size.
    fn fill_dir(fs: &mut Fs, name: &[u8], n: usize) -> (u32, u64) {
        let (dir, _) = fs.mkdir(ROOT_INO, name, 0o755, 0, 0).unwrap();
        for i in 0..n {
            fs.create(dir, format!("file-number-{i:04}").as_bytes(), 0o644, 0, 0).unwrap();
        }
        fs.dirhash.remove(&dir);
        fs.lookup(dir, b"file-number-0000").unwrap();
        (dir, fs.iget(dir).unwrap().size)
    }

    /// A UFS2 directory is indexed from FreeBSD's 2,560 bytes, inside its first block.
    #[test]
    fn dirhash_from_a_size_on_ufs2() {
        let mut fs = mount(crate::format::ufs2::newfs::mem_image(8 << 20, 1024));
        let (dir, size) = fill_dir(&mut fs, b"big", 100);
        assert!((crate::dirhash::DIRHASH_MIN_SIZE..4096).contains(&size), "UFS2 directory of {size} bytes");
        assert!(fs.dirhash.contains_key(&dir), "UFS2 directory of {size} bytes not indexed");
        let (dir, size) = fill_dir(&mut fs, b"small", 20);
        assert!(size < crate::dirhash::DIRHASH_MIN_SIZE && !fs.dirhash.contains_key(&dir), "{size}");
    }
}
