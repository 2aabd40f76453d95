//! fsync (soft updates' §4: the file, its names and their path to the root) and statfs.

use super::*;
use crate::fixed_hash::{HashSet, HashSetExt};
use crate::softdep::Epoch;

/// Rounds of writes an fsync makes before it writes everything.
const FSYNC_ROUNDS: usize = 16;

/// What runs between an interleaved fsync's batch preparation and its write.
pub type Between<'a> = dyn FnMut(&mut Fs) -> FsResult<()> + 'a;

impl Fs {
    pub fn statfs(&mut self) -> StatFs {
        let (pb, pi) = self.pending_frees();
        let bfree = self.alloc.free_blocks() + pb;
        StatFs {
            blocks: self.sb.data_blocks(),
            bfree,
            // The minfree reserve is root's: others see the space past it.
            bavail: bfree.saturating_sub(self.reserved_blocks()),
            files: self.sb.total_inodes() - FIRST_INO as u64,
            ffree: self.alloc.free_inodes() + pi + self.ahead.len() as u64,
            bsize: self.sb.block_size,
            frsize: self.sb.addr_unit(),
            namelen: MAXNAMLEN as u32,
        }
    }

    /// The fragments and inodes soft updates will free once writes
    /// complete: their pending frees, and the files whose last link's removal waits.
    pub(super) fn pending_frees(&mut self) -> (u64, u64) {
        let (mut pb, mut pi) = self.hooks.softdep.as_ref().map(|s| s.pending_frees()).unwrap_or((0, 0));
        // Inodes whose last link is gone but whose dirrem has not run yet will be freed too.
        let going: Vec<(u32, u32)> = self
            .hooks
            .softdep
            .as_ref()
            .map(|s| s.pending_unlinks.iter().map(|(&i, &n)| (i, n)).collect())
            .unwrap_or_default();
        for (ino, n) in going {
            if let Ok(d) = self.iget(ino) {
                if d.nlink <= n && !self.incore.held(ino) {
                    pb += d.blocks;
                    pi += 1;
                }
            }
        }
        (pb, pi)
    }

    /// Makes the file durable: its data, its inode, and every name on the way to it. Without
    /// soft updates, by writing all dirty buffers; with them, as §4 of the paper does: the
    /// bitmaps and data first, then the indirect blocks level by level, then the inodes, then
    /// the directory blocks whose entries name it (and, up to the root, those naming its
    /// directories), in batches, until none of it is pending.
    pub fn fsync(&mut self, ino: u32) -> FsResult<()> {
        self.fsync_with(ino, None)
    }

    /// `fsync`'s rounds; with `between`, each batch is a flight and `between` runs between its
    /// preparation and its write (`fsync_interleaved`).
    fn fsync_with(&mut self, ino: u32, mut between: Option<&mut Between<'_>>) -> FsResult<()> {
        // (a start only with soft updates: never under sync ordering, whose writes go in order)
        let mut held = HashSet::new();
        let Some(start) = self.fsync_start(ino, &mut held)? else { return self.sync_all() };
        let settled = self.fsync_rounds_here(ino, start, &mut held, &mut between);
        self.release_held(held);
        if settled? {
            return Ok(());
        }
        // Something keeps it busy (another inode in its block, say): write everything.
        log::debug!("fsync of inode {ino}: not settled after {FSYNC_ROUNDS} rounds, writing everything");
        self.sync_all()
    }

    /// `fsync_with`'s rounds in this thread: true once settled.
    fn fsync_rounds_here(
        &mut self,
        ino: u32,
        start: Epoch,
        held: &mut HashSet<u32>,
        between: &mut Option<&mut Between<'_>>,
    ) -> FsResult<bool> {
        for _ in 0..FSYNC_ROUNDS {
            let Some(batches) = self.fsync_round(ino, start, held)? else { return Ok(true) };
            for batch in batches {
                match between.as_mut() {
                    None => self.write_bufs(&batch, WriteKind::Sync)?,
                    Some(f) => {
                        if self.start_flight(&batch, WriteKind::Sync)?.is_some() {
                            f(self)?;
                            self.land_flight()?;
                        }
                    }
                }
            }
        }
        Ok(false)
    }

    /// Gives back an fsync's holds on soft updates' records (`Softdep::hold_for_fsync`).
    fn release_held(&mut self, held: HashSet<u32>) {
        if let Some(sd) = self.hooks.softdep.as_mut() {
            for x in held {
                sd.release_for_fsync(x);
            }
        }
    }

    /// `fsync` on a shared file system, its writes outside the lock (flights): other requests
    /// go on while its batches and their device flushes are written.
    pub fn fsync_shared(fs: &SharedFs, ino: u32) -> FsResult<()> {
        let mut held = HashSet::new();
        let start = {
            let mut g = lock(fs);
            match g.fsync_start(ino, &mut held)? {
                Some(start) => start,
                None => return g.sync_all(),
            }
        };
        // Counted among the fsyncs in progress for its rounds; the count is given back (which
        // takes the lock) once no lock of this thread is held, whatever way they end. So are
        // the holds on the records it asks about.
        let active = ActiveFsync::new(fs);
        let settled = Fs::fsync_rounds(fs, ino, start, &mut held);
        drop(active);
        lock(fs).release_held(held);
        if settled? {
            return Ok(());
        }
        log::debug!("fsync of inode {ino}: not settled after {FSYNC_ROUNDS} rounds, writing everything");
        lock(fs).sync_all()
    }

    /// `fsync_shared`'s rounds, each batch in a group's flight: true once the file, its inode
    /// and its names are on disk, false if `FSYNC_ROUNDS` did not settle them.
    fn fsync_rounds(fs: &SharedFs, ino: u32, start: Epoch, held: &mut HashSet<u32>) -> FsResult<bool> {
        for _ in 0..FSYNC_ROUNDS {
            let round = lock(fs).fsync_round(ino, start, held)?;
            let Some(batches) = round else { return Ok(true) };
            for batch in batches {
                Fs::write_grouped(fs, &batch)?;
            }
        }
        Ok(false)
    }

    /// `fsync_shared`'s order in one thread, for the crash tester: each batch is prepared as a
    /// flight, `between` runs (as other requests do while the mount's lock is released), and
    /// then the flight is issued and lands (unless `between` landed it).
    pub fn fsync_interleaved(&mut self, ino: u32, between: &mut Between<'_>) -> FsResult<()> {
        self.fsync_with(ino, Some(between))
    }

    /// Where an fsync of `ino` starts: the epoch its inodes are tracked from (None without soft
    /// updates: everything is written then). The record of `ino` is held (`held`) until the
    /// fsync ends.
    fn fsync_start(&mut self, ino: u32, held: &mut HashSet<u32>) -> FsResult<Option<Epoch>> {
        self.iget(ino)?;
        let Some(sd) = self.hooks.softdep.as_mut() else { return Ok(None) };
        sd.hold_for_fsync(ino);
        held.insert(ino);
        Ok(Some(sd.track(&[ino])))
    }

    /// One round of an fsync: the batches to write, in order (the group headers and data, the
    /// indirect blocks level by level, the inode blocks, the directory blocks of the names not
    /// on disk), or None once the file, its inode and its names are all on disk.
    fn fsync_round(&mut self, ino: u32, start: Epoch, held: &mut HashSet<u32>) -> FsResult<Option<Vec<Vec<u64>>>> {
        self.run_tasks()?;
        let (inos, name_blocks) = self.fsync_closure(ino)?;
        let mut data = Vec::new();
        let mut levels: [Vec<u64>; NIADDR] = Default::default();
        for &x in &inos {
            let d = self.iget(x)?;
            if d.has_blocks() {
                self.file_blocks(&d, &mut data, &mut levels)?;
            }
            data.extend(d.ext_blocks());
        }
        let inode_blocks: Vec<u64> = inos.iter().map(|&x| self.sb.inode_location(x).0).collect();
        let sd = self.sd().expect("softdep");
        sd.track(&inos);
        // Each record asked about below stays until the fsync ends (an idle one would go at
        // its inode's write).
        for &x in &inos {
            if held.insert(x) {
                sd.hold_for_fsync(x);
            }
        }
        let settled = {
            let sd = self.hooks.softdep.as_ref().expect("softdep");
            // Each inode on disk as it is now: written since fsync began, or in a clean block
            // (its block may stay dirty for a neighbour's sake).
            let on_disk = |x: u32| sd.written_since(x, start) || !self.cache.is_dirty(self.sb.inode_location(x).0);
            inos.iter().all(|&x| sd.inode_settled(x) && on_disk(x))
                && name_blocks.is_empty()
                && levels.iter().flatten().all(|&b| !sd.indir_pending(b))
        };
        let cache = &self.cache;
        let dirty = |v: &[u64]| v.iter().any(|&b| cache.is_dirty(b));
        if settled && !dirty(&data) && levels.iter().all(|l| !dirty(l)) {
            return Ok(None);
        }
        let mut first = self.dirty_cg_headers_of(&inos, data.iter().chain(levels.iter().flatten()));
        first.extend(data);
        // With every inode's bit on disk (none new, or new and allocated ahead: `ahead.rs`) the
        // inodes go with the headers and data, their new pointers rolled back, and so are on
        // disk allocated when the inode blocks go again with the entries naming them: one
        // ordered write less than the inodes and then the entries.
        let sd = self.hooks.softdep.as_ref().expect("softdep");
        let early = inos.iter().all(|&x| sd.bitmap_on_disk(x));
        if early {
            first.extend(&inode_blocks);
        }
        let mut batches = vec![first];
        batches.extend(levels);
        if early {
            let mut last = inode_blocks;
            last.extend(name_blocks);
            batches.push(last);
        } else {
            batches.push(inode_blocks);
            batches.push(name_blocks);
        }
        for b in &mut batches {
            b.sort_unstable();
            b.dedup();
        }
        Ok(Some(batches))
    }

    /// The dirty group headers (their bitmaps) of the groups holding `inos` and `blocks`: what
    /// an fsync of them needs on disk before their pointers and inodes may go. Other groups'
    /// headers are left to their own fsyncs and the syncer, out of the way of the fsyncs whose
    /// flights go beside this one's.
    fn dirty_cg_headers_of<'b>(&self, inos: &[u32], blocks: impl Iterator<Item = &'b u64>) -> Vec<u64> {
        let mut cgs: Vec<u32> = inos.iter().map(|&x| self.sb.cg_of_inode(x)).collect();
        cgs.extend(blocks.map(|&b| self.sb.cg_of_block(b)));
        cgs.sort_unstable();
        cgs.dedup();
        cgs.into_iter().map(|cg| self.sb.cg_header_block(cg)).filter(|&b| self.cache.is_dirty(b)).collect()
    }

    /// The inodes an fsync of `ino` must make durable, and the directory blocks of their names
    /// not on disk: the inode and the directories whose pending entries lead to it; and the
    /// inodes named by hidden namesakes that those entries wait for: such a name leaves once its
    /// inode's new name is on disk (the removal itself is in a block of a directory already
    /// here). One work list, not a recursion: a chain of names swapped through temporary names
    /// is as long as users make it, and is drained here a link a round.
    fn fsync_closure(&mut self, ino: u32) -> FsResult<(Vec<u32>, Vec<u64>)> {
        let mut inos = vec![ino];
        let mut listed = HashSet::from_iter([ino]);
        let mut name_blocks = Vec::new();
        // Directories whose path up was walked: a later walk stops at one. With no directory
        // named by an entry not on disk, no ancestor can join, and nothing is walked.
        let mut walked = HashSet::new();
        let dirs_named = self.hooks.softdep.as_ref().is_some_and(|s| s.dir_name_pending());
        let mut i = 0;
        while i < inos.len() {
            let x = inos[i];
            // The path to the root from the directory holding it (from a directory itself): an
            // ancestor named by an entry not yet on disk joins, so that its new name (a
            // rename's, say) is written with the rest.
            if dirs_named {
                let from = if self.iget(x)?.is_dir() { Some(x) } else { self.incore.name_dir(x) };
                for a in self.ancestors(from, &mut walked)? {
                    let named = self.hooks.softdep.as_ref().is_some_and(|s| s.has_pending_name(a));
                    if named && listed.insert(a) {
                        inos.push(a);
                    }
                }
            }
            let pending = self.hooks.softdep.as_ref().map(|s| s.pending_name_blocks(x)).unwrap_or_default();
            for (b, d) in pending {
                name_blocks.push(b);
                if listed.insert(d) {
                    inos.push(d);
                }
            }
            if !self.renames.namesakes.no_waiters() {
                for (dir, name, s) in self.renames.namesakes.waits_of(x) {
                    for (_, h) in self.renames.hidden.named(dir, &name).filter(|(_, h)| h.seq <= s) {
                        if listed.insert(h.ino) {
                            inos.push(h.ino);
                        }
                    }
                }
            }
            i += 1;
        }
        Ok((inos, name_blocks))
    }
}

/// An fsync in progress, counted in `Group::active` from its start to its end (whatever way it
/// ends), so that a group's leader knows whom to wait for. Taking and dropping it take the
/// lock: never while this thread holds it.
struct ActiveFsync<'a>(&'a SharedFs);

impl<'a> ActiveFsync<'a> {
    fn new(fs: &'a SharedFs) -> Self {
        lock(fs).group.active += 1;
        ActiveFsync(fs)
    }
}

impl Drop for ActiveFsync<'_> {
    fn drop(&mut self) {
        let mut g = lock(self.0);
        assert!(g.group.active > 0, "an fsync ends that began");
        g.group.active -= 1;
    }
}
