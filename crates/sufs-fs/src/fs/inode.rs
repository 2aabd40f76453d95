//! Inodes: reading and writing dinodes through the cache (iget/iput), times, allocation with
//! generations, freeing at the last link or the last close, and open-file holds.

use super::*;

/// Inode blocks a group's table is initialized by at a time, ahead of the allocator (FreeBSD's
/// newfs initializes two blocks per group; here the allocator does it from the first inode).
const INIT_AHEAD: u32 = 2;

/// The in-core inode state beside the cache's dinodes (FreeBSD keeps it in `struct inode`):
/// who holds an inode open, which inodes lost their last name while open, where generations
/// come from, and the link drops that removed directories still wait for.
pub(super) struct InCore {
    /// The inodes held or named (`InCoreInode`): one record each for both, so that a lookup,
    /// which takes a hold and notes the name's directory, finds one entry. Gone when neither
    /// is left.
    inodes: HashMap<u32, InCoreInode>,
    /// Inodes whose last link went while they were held (`hold`): freed at the last `unhold`
    /// or at unmount, as FFS frees an unlinked open file at its last close.
    pub(super) orphans: crate::fixed_hash::HashSet<u32>,
    /// Files made with no name (`tmpfile`, open(2)'s `O_TMPFILE` without `O_EXCL`) that `link`
    /// may still give one, as Linux's `I_LINKABLE`: an orphan from the start, until linked.
    pub(super) linkable: crate::fixed_hash::HashSet<u32>,
    /// Where the first generation of an inode never used comes from (`next_generation`).
    pub(super) next_gen: u32,
    /// Removed directories still counted by subdirectories' pending ".." drops: the parent
    /// whose link goes when each is finally freed.
    pub(super) parent_drop: HashMap<u32, u32>,
    /// Directories whose last name is gone but which other pending link drops still hold.
    pub(super) removed_dirs: crate::fixed_hash::HashSet<u32>,
}

/// What the mount keeps of an inode beside its dinode and soft updates' records (a part of
/// FreeBSD's in-core `struct inode`). A map of a hundred thousand files misses the processor's
/// cache at each entry it touches: what a lookup changes is in one.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct InCoreInode {
    /// References an unlink must not free the inode under (`Fs::hold`): open handles, the
    /// kernel's lookup counts. An unlinked inode is freed when the last goes.
    holds: u32,
    /// With soft updates, a directory holding a name of the file, looked up or named in this
    /// mount (the latest), 0 if none: fsync walks its path to the root, so that a renamed
    /// ancestor's new name is made durable too.
    name_dir: u32,
}

impl InCore {
    pub(super) fn new() -> InCore {
        InCore {
            inodes: HashMap::new(),
            orphans: crate::fixed_hash::HashSet::default(),
            linkable: crate::fixed_hash::HashSet::default(),
            next_gen: 1,
            parent_drop: HashMap::new(),
            removed_dirs: crate::fixed_hash::HashSet::default(),
        }
    }

    /// True while something holds `ino` (`hold`).
    pub(super) fn held(&self, ino: u32) -> bool {
        self.inodes.get(&ino).is_some_and(|i| i.holds > 0)
    }

    fn hold(&mut self, ino: u32, n: u32) {
        let i = self.inodes.entry(ino).or_default();
        // Four billion holds at once cannot come from the kernel's lookups and opens; were they
        // to, the inode would only stay until unmount (never a panic of the mount).
        i.holds = i.holds.saturating_add(n);
    }

    /// Drops `n` holds on `ino` (no more than it has): true if they were its last.
    fn unhold(&mut self, ino: u32, n: u32) -> bool {
        let Some(i) = self.inodes.get_mut(&ino) else { return false };
        if i.holds == 0 {
            return false;
        }
        i.holds = i.holds.saturating_sub(n);
        let last = i.holds == 0;
        self.tidy(ino);
        last
    }

    /// Every hold dropped at once (unmount), the names' directories kept.
    pub(super) fn drop_holds(&mut self) {
        self.inodes.retain(|_, i| {
            i.holds = 0;
            i.name_dir != 0
        });
    }

    /// The directory `set_name_dir` last noted for `ino`.
    pub(super) fn name_dir(&self, ino: u32) -> Option<u32> {
        self.inodes.get(&ino).map(|i| i.name_dir).filter(|&d| d != 0)
    }

    pub(super) fn set_name_dir(&mut self, ino: u32, dir: u32) {
        assert!(dir >= ROOT_INO, "inode {ino} named in directory {dir}");
        self.inodes.entry(ino).or_default().name_dir = dir;
    }

    /// `ino` is freed: its name's directory goes with it (else a million files looked up and
    /// removed would leave a million records behind).
    fn drop_name_dir(&mut self, ino: u32) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.name_dir = 0;
            self.tidy(ino);
        }
    }

    /// Drops `ino`'s record once it keeps nothing.
    fn tidy(&mut self, ino: u32) {
        if self.inodes.get(&ino).is_some_and(|i| *i == InCoreInode::default()) {
            self.inodes.remove(&ino);
        }
    }
}

/// How far ahead of the clock an inode's change time may be and still be kept by a change
/// (`Fs::ctime_after`): a second, many ticks of the kernel's clock.
const CTIME_SKEW_NS: i128 = 1_000_000_000;

impl Fs {
    pub(super) fn check_ino(&self, ino: u32) -> FsResult<()> {
        if self.sb.is_valid_inode(ino) {
            Ok(())
        } else {
            Err(FsError::Stale(ino as u64))
        }
    }

    /// Reads an inode, allocated or not.
    pub(super) fn iget_raw(&mut self, ino: u32) -> FsResult<Dinode> {
        let copy = |b: &[u8]| <[u8; DINODE_SIZE]>::try_from(b).expect("a dinode's bytes");
        match self.dinode_bytes(ino, copy)? {
            Some(raw) => Ok(self.sb.decode_dinode(&raw)),
            None => Ok(Dinode::default()),
        }
    }

    /// `f` of the 256 bytes of `ino` in its inode block, or `None` past its group's initialized
    /// inode blocks (a free inode, whatever the block holds).
    fn dinode_bytes<T>(&mut self, ino: u32, f: impl FnOnce(&[u8]) -> T) -> FsResult<Option<T>> {
        // Every operation reads an inode: after a shutdown, this is where each one fails.
        self.check_live()?;
        self.check_ino(ino)?;
        if ino % self.sb.inodes_per_group >= self.alloc.initialized(self.sb.cg_of_inode(ino)) {
            return Ok(None);
        }
        let (bno, off) = self.sb.inode_location(ino);
        Ok(Some(f(&self.read_inode_block(bno)?[off..off + DINODE_SIZE])))
    }

    /// Reads an allocated inode.
    pub fn iget(&mut self, ino: u32) -> FsResult<Dinode> {
        let d = self.iget_raw(ino)?;
        if d.is_free() {
            return Err(FsError::Stale(ino as u64));
        }
        Ok(d)
    }

    /// Copies dinode `d` of `ino` into its buffer, with the link count the buffer holds: only
    /// the operations that add or remove links change it (`iput_links`). A copy taken before
    /// the task list ran (an fsync or a full sync inside an operation lets link drops run)
    /// would otherwise put an old count back, and a clean unmount would leave a file with no
    /// name allocated, or a count too high. Such a copy is a bug (a debug build stops on it);
    /// the count on the buffer is kept.
    pub(super) fn iput(&mut self, ino: u32, d: &Dinode) -> FsResult<u64> {
        // A free dinode (a new inode, or a freed one) or one going (no link left) has no count
        // to keep.
        if d.is_free() || d.nlink == 0 {
            return self.iput_links(ino, d);
        }
        match self.links_on_buffer(ino)? {
            Some(links) if links != d.nlink => {
                debug_assert!(false, "inode {ino}: a copy with link count {} written over {links}", d.nlink);
                log::error!("inode {ino}: a copy with link count {} written over {links}: {links} kept", d.nlink);
                let kept = Dinode { nlink: links, ..d.clone() };
                self.iput_links(ino, &kept)
            }
            _ => self.iput_links(ino, d),
        }
    }

    /// The link count the buffer of `ino` holds, or `None` for a free dinode: `iget_raw`'s
    /// answer for these two fields, without decoding the other 252 bytes.
    fn links_on_buffer(&mut self, ino: u32) -> FsResult<Option<u32>> {
        let fields = self.dinode_bytes(ino, Dinode::mode_and_nlink)?;
        Ok(fields.and_then(|(mode, nlink)| (mode != 0).then_some(nlink)))
    }

    /// The mode and flags of `ino` (0 and 0 if it is free), read without decoding its dinode.
    pub(super) fn mode_and_flags(&mut self, ino: u32) -> FsResult<(u16, u32)> {
        Ok(self.dinode_bytes(ino, Dinode::mode_and_flags)?.unwrap_or((0, 0)))
    }

    /// `iput` for an operation that changes the link count of `ino` (link, rename, mkdir's
    /// parent, a link drop): `d`'s count is written as it is.
    pub(super) fn iput_links(&mut self, ino: u32, d: &Dinode) -> FsResult<u64> {
        let (bno, off) = self.sb.inode_location(ino);
        let buf = self.cache.modify(bno)?;
        self.sb.encode_dinode(d, &mut buf[off..off + DINODE_SIZE]);
        if let Some(sd) = self.hooks.softdep.as_mut() {
            debug_assert!(sd.pointers_agree(ino, d), "inode {ino}: copied without a pointer soft updates track");
            sd.inode_update(ino);
        }
        Ok(bno)
    }

    /// Runs `op` on the in-memory dinode `d` of `ino` and, when it fails after changing `d`,
    /// still writes `d` back before returning the error. An operation that fails part-way
    /// (ENOSPC after a run moved or blocks were punched, an I/O error) leaves pointers in `d`
    /// that soft updates' dependencies and the free maps already describe: dropped, a
    /// dependency would wait for an inode write that never carries it (soft updates wedged
    /// for every user), or freed blocks would stay named by the inode.
    pub(super) fn keep_on_error<T>(
        &mut self,
        ino: u32,
        d: &mut Dinode,
        op: impl FnOnce(&mut Fs, &mut Dinode) -> FsResult<T>,
    ) -> FsResult<T> {
        let before = d.clone();
        let r = op(self, d);
        if r.is_err() && *d != before {
            self.iput(ino, d)?;
        }
        r
    }

    /// The time stamped on inodes now (the mount's clock: `RealClock`).
    pub fn now(&self) -> (i64, u32) {
        self.clock.wall()
    }

    pub(super) fn touch_mc(&self, d: &mut Dinode) {
        let (s, ns) = self.now();
        d.mtime = s;
        d.mtime_ns = ns;
        (d.ctime, d.ctime_ns) = Self::ctime_after((s, ns), d);
    }

    pub(super) fn touch_c(&self, d: &mut Dinode) {
        (d.ctime, d.ctime_ns) = Self::ctime_after(self.now(), d);
    }

    /// The change time to stamp at `now`: `now`, or `d`'s own when that is ahead of it by less
    /// than `CTIME_SKEW_NS`. Under the writeback cache the kernel's stamps become the file's
    /// (SETATTR's ctime), and Linux (6.13 on) raises its tick clock to the latest fine-grained
    /// stamp any file system handed out: up to a tick ahead of the clock sufs reads, so that a
    /// change made after them would go back before them. A change time further ahead (the
    /// clock set back) gives way to the clock.
    fn ctime_after(now: (i64, u32), d: &Dinode) -> (i64, u32) {
        let ns = |(s, n): (i64, u32)| s as i128 * 1_000_000_000 + n as i128;
        let ahead = ns((d.ctime, d.ctime_ns)) - ns(now);
        if ahead > 0 && ahead < CTIME_SKEW_NS {
            (d.ctime, d.ctime_ns)
        } else {
            now
        }
    }

    pub(super) fn check_writable(&self) -> FsResult<()> {
        if self.readonly {
            Err(FsError::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// Allocates and initialises an inode near `parent`.
    pub(super) fn new_inode(&mut self, parent: u32, mode: u16, uid: u32, gid: u32) -> FsResult<(u32, Dinode)> {
        let is_dir = mode & S_IFMT == S_IFDIR;
        let ahead = if is_dir { None } else { self.take_ahead(parent)? };
        let (ino, old) = match ahead {
            Some((ino, old)) => {
                // Its bit's record has been kept since it was allocated ahead.
                self.sd().expect("soft updates").adopt_inode(ino);
                (ino, old)
            }
            None => {
                let (ino, old) = self.alloc_inode(parent, is_dir)?;
                if let Some(sd) = self.sd() {
                    sd.new_inode(ino, is_dir);
                }
                (ino, old)
            }
        };
        if !is_dir {
            // The file is made whatever comes of it: a failure here (a damaged map, say) is
            // the next allocation's to meet and report.
            if let Err(e) = self.fill_ahead(self.sb.cg_of_inode(ino)) {
                log::warn!("inodes allocated ahead for group {}: {e}", self.sb.cg_of_inode(ino));
            }
        }
        let (s, ns) = self.now();
        let d = Dinode::new(mode, 0, uid, gid, (s, ns), self.next_generation(old.generation));
        Ok((ino, d))
    }

    /// The generation of an inode being allocated, whose last one was `old`: one more, as
    /// FreeBSD's `ffs_valloc` does, so that a file handle (inode number and generation) of a
    /// freed file never opens the inode's next file; the cleared dinode keeps the generation
    /// on disk until then (`release_inode`). An inode never used (0), or one whose count wraps,
    /// takes the next number of the mount's sequence, which starts from the clock: a file made
    /// in a mount that crashed before its inode reached the disk gets another generation when
    /// a later mount reuses the inode.
    pub(super) fn next_generation(&mut self, old: u32) -> u32 {
        match old.wrapping_add(1) {
            0 | 1 => {
                // An odd step goes through every 32-bit value before it repeats.
                self.incore.next_gen = self.incore.next_gen.wrapping_add(0x9E37_79B9);
                self.incore.next_gen.max(1)
            }
            g => g,
        }
    }

    /// An inode from the bitmaps, checked before it is handed out as `alloc_block` checks
    /// blocks: a reserved number, an inode in use on disk or in the cache, or one whose freeing
    /// soft updates still track, is kept allocated and the search goes on.
    pub(super) fn alloc_inode(&mut self, parent: u32, is_dir: bool) -> FsResult<(u32, Dinode)> {
        for _ in 0..MAX_BAD_ALLOCS {
            let ino = match self.alloc.alloc_inode(&mut self.cache, &self.sb, parent, is_dir, self.spread_dirs) {
                Err(AllocError::NoSpace) if self.release_ahead()? > 0 || self.reclaim()? => {
                    self.alloc.alloc_inode(&mut self.cache, &self.sb, parent, is_dir, self.spread_dirs)?
                }
                r => r?,
            };
            if ino < FIRST_INO {
                self.damaged(format!("inode bitmap shows reserved inode {ino} free"));
                continue;
            }
            self.init_inode_blocks(ino)?;
            let old = self.iget_raw(ino)?;
            if !old.is_free() {
                self.damaged(format!("inode bitmap shows inode {ino} free while it is in use"));
            } else if self.incore.held(ino) || self.hooks.softdep.as_ref().is_some_and(|s| s.inode_busy(ino)) {
                self.damaged(format!("inode bitmap shows inode {ino} free before its freeing completed"));
            } else {
                return Ok((ino, old));
            }
        }
        Err(self.damaged(format!("{MAX_BAD_ALLOCS} inodes in a row were wrongly free in the bitmaps")))
    }

    /// Makes sure the block of inode `ino` and the block after it are initialized (UFS2's lazy
    /// inode initialization, FreeBSD's ffs_nodealloccg): the next `INIT_AHEAD` blocks of the
    /// group's inode table are zeroed in the cache, ordered before the group header that counts
    /// them (soft updates roll the count back in the header's copy until they are on disk;
    /// `sync` writes them at once; `async` orders nothing), and the count is raised.
    pub(super) fn init_inode_blocks(&mut self, ino: u32) -> FsResult<()> {
        let (ipb, ipg) = (self.sb.inodes_per_block(), self.sb.inodes_per_group);
        let cg = self.sb.cg_of_inode(ino);
        let have = self.alloc.initialized(cg);
        let need = ((ino % ipg) / ipb * ipb + 2 * ipb).min(ipg);
        if have >= need {
            return Ok(());
        }
        let upto = need.max(have + INIT_AHEAD * ipb).min(ipg);
        // Inode blocks are a block apart: `fs_frag` addresses on a UFS2 image with fragments.
        let bnos: Vec<u64> = ((have / ipb) as u64..(upto / ipb) as u64).map(|k| self.sb.cg_itable_nth(cg, k)).collect();
        for &b in &bnos {
            self.cache.create(b);
        }
        match self.ordering {
            Ordering::Sync => {
                // Not `write_bufs`, which writes the dirty headers first: the header that
                // counts these blocks goes after them.
                self.land_flight()?;
                self.snap_cow(&bnos)?;
                self.cache.write(&bnos, WriteKind::Sync, &mut self.hooks)?;
            }
            Ordering::Softdep => self.sd().expect("soft updates").init_inode_blocks(cg, &bnos),
            Ordering::Async => {}
        }
        self.alloc.set_initialized(&mut self.cache, &self.sb, cg, upto)?;
        Ok(())
    }

    // ---------------------------------------------------------------- block map

    /// Frees an inode whose last link and last open handle are gone: its blocks, then (once the
    /// cleared inode is ordered to disk) its bitmap bit.
    /// `then` runs once the blocks are free.
    pub(super) fn release_inode(&mut self, ino: u32, mut d: Dinode, then: Vec<Task>) -> FsResult<()> {
        // Whether the inode is on disk decides what its freeing waits for.
        self.land_flight()?;
        let is_dir = d.is_dir();
        self.incore.drop_name_dir(ino);
        self.incore.linkable.remove(&ino);
        let mut then = then;
        if is_dir {
            self.dirhash.remove(&ino);
            then.extend(self.incore.parent_drop.remove(&ino).map(Task::DropLink));
            self.incore.removed_dirs.remove(&ino);
        }
        self.release_ext(ino, &mut d)?;
        // A file that holds no block (most of a mail spool's or a build's removed files, all of
        // an empty file's) has nothing to truncate: the cleared dinode below is the one write,
        // and `then` waits for it in `free_file` as it would in the truncation's `free_blocks`.
        let holds_nothing = d.blocks == 0 && d.db.iter().chain(&d.ib).all(|&b| b == 0);
        if d.has_blocks() && !(holds_nothing && then.is_empty()) {
            // Size goes with the pointers, so no crash shows a directory with a hole.
            let old_size = std::mem::take(&mut d.size);
            self.truncate_blocks(ino, &mut d, 0, old_size, std::mem::take(&mut then))?;
        }
        let cleared = Dinode { generation: d.generation, ..Default::default() };
        if let Some(sd) = self.hooks.softdep.as_mut() {
            // freefile: the inode returns to the map once its cleared dinode is on disk.
            sd.free_file(ino, is_dir, then);
            self.iput(ino, &cleared)?;
            return Ok(());
        }
        let ib = self.iput(ino, &cleared)?;
        self.order_write(&[ib])?;
        self.alloc.free_inode(&mut self.cache, &self.sb, ino, is_dir)?;
        for t in then {
            self.run_task(t)?;
        }
        Ok(())
    }

    /// Drops one link; frees the inode when no link and no open handle remain.
    pub(super) fn drop_link(&mut self, ino: u32) -> FsResult<()> {
        let mut d = self.iget(ino)?;
        d.nlink = d.nlink.saturating_sub(1);
        if d.is_dir() && d.nlink == 1 {
            if self.incore.removed_dirs.remove(&ino) {
                d.nlink = 0; // a removed directory's "." goes with its last link
            } else if !self.incore.parent_drop.contains_key(&ino) {
                // No name and no subdirectory's ".." holds it: its last name went while the
                // ".." of a directory named elsewhere still counted here (a crash in a rename
                // across directories leaves that), and that ".." has gone now. Its "." goes,
                // and the link its own ".." gives once it is freed.
                if let Some(p) = self.find_entry(ino, &mut d, b"..")?.map(|s| s.ino) {
                    self.note_pending(&[Task::DropLink(p)]);
                    self.incore.parent_drop.insert(ino, p);
                }
                d.nlink = 0;
            }
        }
        self.touch_c(&mut d);
        if d.nlink == 0 {
            if !self.incore.held(ino) {
                return self.release_inode(ino, d, vec![]);
            }
            self.incore.orphans.insert(ino);
        }
        self.iput_links(ino, &d)?;
        Ok(())
    }

    // ---------------------------------------------------------------- directories

    /// The link count users see: soft updates count a link as gone as soon as its name is.
    pub(super) fn eff(&self, ino: u32, mut d: Dinode) -> Dinode {
        if let Some(sd) = self.hooks.softdep.as_ref() {
            d.nlink = d.nlink.saturating_sub(sd.pending_unlinks_of(ino));
        }
        d
    }

    pub fn getattr(&mut self, ino: u32) -> FsResult<Dinode> {
        let d = self.iget(ino)?;
        Ok(self.eff(ino, d))
    }

    /// Opens a handle (for writing, if `write`): an immutable file, a snapshot or a read-only
    /// mount refuse writers here, at open, as Linux does. (The FUSE mount opens files without
    /// a message where the kernel can: there `write` and `setattr` refuse them, with EPERM.)
    pub fn open(&mut self, ino: u32, write: bool) -> FsResult<Dinode> {
        let d = self.iget(ino)?;
        if write {
            self.check_writable()?;
            if d.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0 {
                return Err(FsError::Perm);
            }
        }
        self.hold(ino, 1);
        Ok(d)
    }

    /// Takes `n` references on an inode that an unlink must not free while they last: an open
    /// handle, or the kernel's knowledge of the inode through a mount (a FUSE lookup count).
    pub fn hold(&mut self, ino: u32, n: u32) {
        self.incore.hold(ino, n);
    }

    /// Closes a handle; the last close of an unlinked inode frees it.
    pub fn release(&mut self, ino: u32) -> FsResult<()> {
        self.unhold(ino, 1)
    }

    /// Drops `n` references taken by `hold`; when none is left, an unlinked inode is freed.
    pub fn unhold(&mut self, ino: u32, n: u32) -> FsResult<()> {
        if self.shut_down {
            return Ok(()); // nothing is freed any more
        }
        if self.incore.unhold(ino, n) {
            // Only an inode whose last link this mount removed is freed: one found with no
            // links on disk is damage, left for fsck (lookup refuses it).
            if !self.incore.orphans.remove(&ino) {
                return Ok(());
            }
            if let Ok(d) = self.iget(ino) {
                if d.nlink == 0 && !self.readonly {
                    self.release_inode(ino, d, vec![])?;
                    self.balance()?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::Ordering;

    /// A change stamps the clock's time, but never goes back before a change time the kernel
    /// gave (SETATTR's, under the writeback cache) up to a second ahead of the clock; one
    /// further ahead (the clock set back) gives way to the clock.
    #[test]
    fn a_change_time_does_not_go_back_before_the_kernels() {
        let clock = Arc::new(crate::clock::SimClock::new());
        let mut fs = crate::fs::mem_mount_on(4096, Ordering::Softdep, clock.clone());
        clock.advance(1_000_000_000);
        let (ino, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        let now = fs.now();
        let later = |ns: u32| (now.0, now.1 + ns);
        let chmod = |fs: &mut Fs, mode| fs.setattr(ino, &SetAttr { mode: Some(mode), ..Default::default() }).unwrap();
        fs.setattr(ino, &SetAttr { ctime: Some(later(4_000_000)), ..Default::default() }).unwrap();
        let d = chmod(&mut fs, 0o600);
        assert_eq!((d.ctime, d.ctime_ns), later(4_000_000), "the kernel's stamp, a tick ahead, kept");
        fs.setattr(ino, &SetAttr { ctime: Some((now.0 + 5, now.1)), ..Default::default() }).unwrap();
        let d = chmod(&mut fs, 0o640);
        assert_eq!((d.ctime, d.ctime_ns), now, "five seconds ahead: the clock's");
        clock.advance(1_000);
        fs.link(ino, ROOT_INO, b"g").unwrap();
        let d = fs.getattr(ino).unwrap();
        assert_eq!((d.ctime, d.ctime_ns), fs.now(), "the clock moved on: its time");
    }

    #[test]
    fn an_inode_record_lasts_while_it_is_held_or_named() {
        let mut c = InCore::new();
        c.hold(10, 2);
        c.set_name_dir(10, ROOT_INO);
        assert!(c.held(10));
        assert!(!c.unhold(10, 1), "one hold of two dropped");
        assert!(c.unhold(10, 1), "the last hold dropped");
        assert!(!c.held(10));
        assert_eq!(c.name_dir(10), Some(ROOT_INO), "the name's directory outlasts the holds");
        assert!(!c.unhold(10, 1), "an inode no one holds has no hold to drop");
        c.drop_name_dir(10);
        assert!(c.inodes.is_empty(), "a record keeping nothing is gone");
        // Held, never named: gone with its last hold. Named, never held: gone when freed.
        c.hold(11, 1);
        assert!(c.unhold(11, 5));
        c.set_name_dir(12, 7);
        c.hold(13, 1);
        c.set_name_dir(13, 7);
        c.drop_holds();
        assert_eq!((c.held(13), c.name_dir(13), c.name_dir(12)), (false, Some(7), Some(7)));
        c.drop_name_dir(12);
        c.drop_name_dir(13);
        assert!(c.inodes.is_empty());
    }

    /// A copy of a dinode taken before a link was added and written back after it keeps the
    /// count the buffer holds (a debug build stops on such a copy); a free dinode has none.
    #[test]
    #[cfg_attr(debug_assertions, should_panic(expected = "a copy with link count 1 written over 2"))]
    fn a_stale_copy_keeps_the_link_count_on_its_buffer() {
        let mut fs = crate::fs::mem_mount(8192, Ordering::Softdep);
        let (ino, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        assert_eq!(fs.links_on_buffer(ino).unwrap(), Some(1));
        assert_eq!(fs.links_on_buffer(ino + 1).unwrap(), None, "the next inode is free");
        let stale = fs.iget(ino).unwrap();
        fs.link(ino, ROOT_INO, b"g").unwrap();
        assert_eq!(fs.links_on_buffer(ino).unwrap(), Some(2));
        fs.iput(ino, &Dinode { size: 5, ..stale }).unwrap();
        let d = fs.iget(ino).unwrap();
        assert_eq!((d.nlink, d.size), (2, 5), "the count kept, the rest written");
    }
}
