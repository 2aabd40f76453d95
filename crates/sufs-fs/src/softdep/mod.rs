//! Soft updates (McKusick & Ganger 1999, §2-4): metadata writes are delayed, and every pointer or
//! directory entry whose prerequisites are not yet on disk is rolled back in the copy of its
//! block that goes to the device, then rolled forward (the buffer keeps the current value and
//! stays dirty). Dependencies are tracked per pointer and per entry, so blocks may be written in
//! any order.
//!
//! The paper's structures (Table 1), each starting with a `WorkList` header (its kind and its
//! `DepState`: ATTACHED, DEPCOMPLETE, COMPLETE, and DIRCHG, MKDIR_BODY, MKDIR_PARENT, and
//! NAMESAKE, this implementation's own):
//! - `BmSafeMap` per cylinder group: the new inodes and blocks whose bitmap bits must reach disk
//!   before anything points to them (when its header block is written, they become DEPCOMPLETE);
//! - `InodeDep` per inode, with the paper's lists: pending ops (entries and mkdirs waiting for
//!   this inode to be written), buf wait (work that runs once its block is written: freeblks,
//!   freefile), inode wait (such work recorded before the dinode was copied into its buffer),
//!   buffer update (`AllocDirect`s whose pointers are in the buffer) and incore update (those
//!   whose pointers are only in the in-memory dinode so far);
//! - `NewBlk` per new block: DEPCOMPLETE when its bitmap bit is on disk, COMPLETE when its
//!   first contents are;
//! - `AllocDirect` per new pointer in a dinode, `AllocIndir` per new pointer in an indirect block,
//!   gathered by `IndirDep` (one per indirect block, with its safe copy: the block as the disk
//!   may hold it, only complete pointers in it);
//! - `PageDep` per directory block: its `DirAdd`s (a new entry, rolled back to 0, or for a
//!   DIRCHG to the old inode, until the inode is on disk; for a mkdir also until its `Mkdir`
//!   records complete: MKDIR_BODY, the new directory's first block on disk and pointed to, and
//!   MKDIR_PARENT, the parent's raised link count on disk; for a file's entry named like a
//!   rename's old name still hidden on disk in the same directory, NAMESAKE, until that old
//!   entry's removal is on disk) and its `DirRem`s (a removed entry: once the removal is on
//!   disk, its work items run);
//! - `FreeBlks` / `FreeFile`: blocks and an inode that return to the free maps once the
//!   nullified pointers or the cleared dinode are on disk;
//! - `FreeFrag`: the old run of fragments of a direct block that moved (an
//!   `AllocDirect` records the old and the new run and size), returned to the free map once an
//!   inode write carrying the new run is on disk; until the new run is safe, an inode write
//!   rolls the pointer back to the old run and the size back to the old fragment's end. With
//!   one fragment a block the old size is 0 or a full block.
//!
//! Work that a completed write makes possible goes on the work list (`tasks`), which the file
//! system runs outside the I/O path. "Written after the dependency was made" is decided by
//! epochs: every dependency and every block write takes the next number.
//!
//! Invariant: a copy given to the device never holds a pointer to a block or inode whose bitmap
//! bit is not on disk, a pointer to a new block whose contents are not on disk, nor an entry for
//! an inode whose initialised (or re-linked) dinode is not on disk.

mod deps;
mod hooks;
mod table;

pub use deps::*;

use crate::fixed_hash::{HashMap, HashMapExt, HashSet, HashSetExt};

use crate::format::*;

pub struct Softdep {
    sb: Superblock,
    epoch: Epoch,
    inodedeps: table::InodeTable,
    newblks: HashMap<u64, NewBlk>,
    indirdeps: HashMap<u64, IndirDep>,
    pagedeps: HashMap<u64, PageDep>,
    bmsafemap: HashMap<u32, BmSafeMap>,
    inflight: HashMap<u64, Inflight>,
    /// The work list: work items made possible by completed writes.
    pub tasks: Vec<Task>,
    /// Records kept outside for these structures' sake, counted with them by the memory bound
    /// (rename's namesake order, `fs/hidden.rs`), as the file system last told.
    pub outside_records: usize,
    /// Link drops queued behind their dirrems, per inode: users see `nlink` minus these
    /// (the paper's effnlink), so rmdir and stat see the final counts at once.
    pub pending_unlinks: HashMap<u32, u32>,
    pub stats: SoftdepStats,
    writes_seen: u64,
    /// Entries (DirAdds) not yet on disk, per inode they name, by the blocks holding them: so
    /// that fsync finds an inode's pending names without a scan of every directory block's
    /// dependencies (a scan per inode of a chain of new directories made fsync quadratic in the
    /// chain's depth).
    pending_names: HashMap<u32, PendingNames>,
    /// The directories among those (`names_dir`): with none, no path to the root has a name
    /// pending, and a walk up the tree can be spared.
    dir_names: HashSet<u32>,
    /// The directory each block with entries belongs to (for fsync's walk up to the root).
    block_dir: HashMap<u64, u32>,
    /// A directory's blocks under its indirect blocks, and those indirect blocks below the
    /// top one: the indirect block pointing to each. A directory block's entries are on disk
    /// only once every pointer on the way to it is: its own in the indirect block, and the
    /// indirect block's in the inode (or in the indirect block above). Kept until the whole
    /// way is on disk (`dir_block_reachable`; pruned with the count the memory bound takes),
    /// or the block is freed.
    dir_parent: HashMap<u64, u64>,
    /// Inode blocks initialized (zeroed in the cache) but not yet written, per group, with the
    /// epoch of their initialization: the group header's copy counts no inode from the first
    /// of them on (UFS2's barrier write of a newly initialized inode block, as a roll-back).
    inits: HashMap<u32, std::collections::BTreeMap<u64, Epoch>>,
    /// The old runs of moved blocks (freefrags) not yet handed to the work list, by address:
    /// each is handed over exactly once.
    freefrags: HashSet<u64>,
}

impl Softdep {
    pub fn new(sb: &Superblock) -> Softdep {
        Softdep {
            sb: sb.clone(),
            epoch: 1,
            inodedeps: table::InodeTable::new(),
            newblks: HashMap::new(),
            indirdeps: HashMap::new(),
            pagedeps: HashMap::new(),
            bmsafemap: HashMap::new(),
            inflight: HashMap::new(),
            tasks: Vec::new(),
            outside_records: 0,
            pending_unlinks: HashMap::new(),
            stats: SoftdepStats::default(),
            writes_seen: 0,
            pending_names: HashMap::new(),
            dir_names: HashSet::new(),
            block_dir: HashMap::new(),
            dir_parent: HashMap::new(),
            inits: HashMap::new(),
            freefrags: HashSet::new(),
        }
    }

    fn tick(&mut self) -> Epoch {
        self.epoch += 1;
        self.epoch
    }

    /// Dependency structures alive (the quantity the memory bound limits): the inode records'
    /// part kept as they change (`InodeTable`), the rest a scan of the smaller maps, so callers
    /// still check it only now and then.
    pub fn count(&mut self) -> usize {
        // The inode records changed since the last count are counted again, and those with
        // nothing left to track go (the table keeps the sum).
        let inodes = self.inodedeps.recount();
        self.prune_dir_parents();
        let n = inodes + self.count_others();
        debug_assert_eq!(n, self.count_now(), "the count kept counts what a scan of everything counts");
        debug_assert!(self.inodedeps.values().all(|d| !d.removable()), "an idle inode record stayed");
        self.stats.max_deps = self.stats.max_deps.max(n);
        n
    }

    fn count_now(&self) -> usize {
        self.inodedeps.values().map(InodeDep::records).sum::<usize>() + self.count_others()
    }

    /// The records outside the inode table.
    fn count_others(&self) -> usize {
        self.newblks.len()
            + self.indirdeps.values().map(|i| 1 + i.allocindirs.len()).sum::<usize>()
            + self.pagedeps.values().map(|p| p.diradds.len() + p.dirrems.len()).sum::<usize>()
            + self.dir_parent.len()
            + self.outside_records
    }

    /// Nothing is pending: every change is on disk and every work item has run.
    pub fn is_idle(&self) -> bool {
        self.tasks.is_empty()
            && self.inits.is_empty()
            && self.pagedeps.is_empty()
            && self.indirdeps.is_empty()
            && self.newblks.is_empty()
            && self.inodedeps.values().all(InodeDep::idle)
    }

    fn inodedep(&mut self, ino: u32) -> &mut InodeDep {
        self.inodedeps.get_or_insert_with(ino, || InodeDep::new(DepState::ATTACHED | DepState::DEPCOMPLETE, false))
    }

    // ------------------------------------------------------------ recording dependencies

    /// Whether the inode's freeing is still under way (writes it waits for): its bitmap bit may
    /// not be clear yet, and an allocator that finds it clear is reading a damaged bitmap.
    pub fn inode_busy(&self, ino: u32) -> bool {
        self.inodedeps.get(&ino).is_some_and(|d| !d.bufwait.is_empty() || !d.inowait.is_empty())
    }

    /// Inode blocks `bnos` of group `cg` were initialized (zeroed in the cache) and the
    /// header's count is about to cover them: the header's copies count only up to the first of
    /// them not yet written (`roll_back_inits`).
    pub fn init_inode_blocks(&mut self, cg: u32, bnos: &[u64]) {
        let epoch = self.tick();
        let pending = self.inits.entry(cg).or_default();
        for &b in bnos {
            assert!(self.sb.cg_of_block(b) == cg, "inode block {b} initialized for group {cg}");
            let twice = pending.insert(b, epoch);
            assert!(twice.is_none(), "inode block {b} initialized twice");
        }
    }

    /// Whether inode block `bno` was initialized and not yet written since.
    pub fn init_pending(&self, bno: u64) -> bool {
        self.inits.get(&self.sb.cg_of_block(bno)).is_some_and(|p| p.contains_key(&bno))
    }

    /// The inodes of group `cg` the disk holds initialized, if some initialized block is not
    /// written yet: those before the first such block.
    fn durable_initialized(&self, cg: u32) -> Option<u32> {
        let first = *self.inits.get(&cg)?.keys().next()?;
        Some(((first - self.sb.cg_itable_block(cg)) / self.sb.frag()) as u32 * self.sb.inodes_per_block())
    }

    /// A newly allocated inode: written as free until its bitmap bit is on disk.
    pub fn new_inode(&mut self, ino: u32, is_dir: bool) {
        let cg = self.sb.cg_of_inode(ino);
        let mut d = InodeDep::new(DepState::ATTACHED, is_dir);
        if let Some(old) = self.inodedeps.get(&ino) {
            assert!(old.bufwait.is_empty() && old.inowait.is_empty(), "inode {ino} reallocated before it was freed");
            // An fsync of the freed file still running holds the record it asks about.
            d.fsyncs = old.fsyncs;
        }
        self.inodedeps.insert(ino, d);
        self.bmsafemap.entry(cg).or_default().inodedeps.push(ino);
    }

    /// Whether the bitmap bit of allocated inode `ino` is on disk (no record: nothing pending).
    pub fn bitmap_on_disk(&self, ino: u32) -> bool {
        self.inodedeps.get(&ino).is_none_or(InodeDep::bitmap_done)
    }

    /// An inode allocated ahead (`new_inode` then) becomes a file's: its record, if its bit is
    /// still on its way to disk, is the one a new inode gets; nothing else was ever recorded.
    pub fn adopt_inode(&mut self, ino: u32) {
        let d = self.inodedep(ino);
        assert!(!d.is_dir && d.records_nothing(), "inode {ino} allocated ahead has work recorded: {d:?}");
    }

    /// An inode allocated ahead and never used goes back to the free map: its records go (its
    /// dinode is free on disk, so its bit may clear in any order with it).
    pub fn forget_ahead(&mut self, ino: u32) {
        if let Some(d) = self.inodedeps.remove(&ino) {
            assert!(d.records_nothing(), "inode {ino} allocated ahead has work recorded: {d:?}");
            if d.fsyncs > 0 {
                // An fsync of the file this inode was before still holds its record.
                let mut held = InodeDep::new(DepState::ATTACHED | DepState::DEPCOMPLETE, false);
                held.fsyncs = d.fsyncs;
                self.inodedeps.insert(ino, held);
            }
        }
        let cg = self.sb.cg_of_inode(ino);
        if let Some(m) = self.bmsafemap.get_mut(&cg) {
            m.inodedeps.retain(|&i| i != ino);
            if m.inodedeps.is_empty() && m.newblks.is_empty() {
                self.bmsafemap.remove(&cg);
            }
        }
    }

    /// A newly allocated block pointed to from the in-memory dinode (incore update, until the
    /// dinode is copied into its buffer).
    pub fn alloc_direct(&mut self, ino: u32, is_dir: bool, slot: PtrSlot, lbn: u64, bno: u64) {
        let a = self.new_allocdirect(ino, slot, lbn, (bno, self.sb.block_size), (0, 0));
        self.replace_allocdirect(ino, is_dir, a);
    }

    /// Direct block `lbn` of `ino` is now the run `new` (address, bytes) where the in-memory
    /// dinode held the run `old` ((0, 0): nothing): a run of fragments allocated, extended in
    /// place (`old.0 == new.0`) or moved (FreeBSD's softdep_setup_allocdirect, called by
    /// ffs_alloc and ffs_realloccg). The new run waits for its bitmap bits and contents (an
    /// extension's new fragments are new); a moved run's old fragments return to the free map
    /// once an inode write carrying the new run is on disk (freefrag). A change of a slot whose
    /// earlier change is still only in memory merges with it (`merge_allocdirect`).
    pub fn alloc_direct_frags(&mut self, ino: u32, is_dir: bool, lbn: u64, new: (u64, u32), old: (u64, u32)) {
        assert!(
            (lbn as usize) < NDADDR,
            "inode {ino}: a run of fragments at logical block {lbn}, past the direct blocks"
        );
        self.check_run(new);
        if old.0 == 0 {
            assert!(old.1 == 0, "inode {ino} block {lbn}: an old size {} with no old run", old.1);
            let a = self.new_allocdirect(ino, PtrSlot::Direct(lbn as usize), lbn, new, old);
            return self.replace_allocdirect(ino, is_dir, a);
        }
        self.check_run(old);
        assert!(old.1 <= new.1, "inode {ino} block {lbn}: a run shrinks from {} to {} bytes", old.1, new.1);
        assert!(
            old.0 != new.0 || old.1 < new.1,
            "inode {ino} block {lbn}: extended in place to no more than its {} bytes",
            old.1
        );
        let mut a = self.new_allocdirect(ino, PtrSlot::Direct(lbn as usize), lbn, new, old);
        let d = self.inodedep(ino);
        d.is_dir |= is_dir;
        let mut now = None;
        if let Some(i) = d.newinoupdt.iter().position(|p| p.slot == a.slot) {
            // Its earlier change never reached the buffer, let alone the disk.
            let prior = d.newinoupdt.swap_remove(i);
            now = Self::merge_allocdirect(&mut a, prior);
        }
        d.newinoupdt.push(a);
        if let Some(f) = now {
            self.freefrag_now(f);
        }
    }

    /// An allocdirect for `slot` from `old` to `new` (address, bytes), with its `NewBlk` and, for
    /// a moved run, its freefrag.
    fn new_allocdirect(&mut self, ino: u32, slot: PtrSlot, lbn: u64, new: (u64, u32), old: (u64, u32)) -> AllocDirect {
        self.new_block(new.0);
        let freefrag =
            (old.0 != 0 && old.0 != new.0).then(|| FreeFrag { ino, bno: old.0, frags: old.1 / self.sb.addr_unit() });
        if let Some(f) = freefrag {
            assert!(self.freefrags.insert(f.bno), "inode {ino}: run {} freed twice (a freefrag is pending)", f.bno);
        }
        let wk = WorkList::new(DepKind::AllocDirect, DepState::ATTACHED);
        let seq = self.tick();
        AllocDirect {
            wk,
            seq,
            slot,
            lbn,
            bno: new.0,
            old_bno: old.0,
            new_size: new.1,
            old_size: old.1,
            freefrag,
            parent: None,
        }
    }

    /// A run of `bytes` at `bno`: whole fragments of one block.
    fn check_run(&self, (bno, bytes): (u64, u32)) {
        let (unit, frag) = (self.sb.addr_unit(), self.sb.frag());
        assert!(
            bno != 0 && bytes > 0 && bytes <= self.sb.block_size && bytes % unit == 0,
            "a run of {bytes} bytes at {bno}"
        );
        assert!(bno % frag + (bytes / unit) as u64 <= frag, "a run of {bytes} bytes at {bno} crosses its block");
    }

    /// A new pointer (no old run) replaces whatever change of its slot is pending, as sufs always
    /// did; the replaced change's old run, if it moved, is freed once the inode is written.
    fn replace_allocdirect(&mut self, ino: u32, is_dir: bool, a: AllocDirect) {
        let d = self.inodedep(ino);
        d.is_dir |= is_dir;
        let replaced: Vec<AllocDirect> = d
            .inoupdt
            .extract_if(.., |p| p.slot == a.slot)
            .chain(d.newinoupdt.extract_if(.., |p| p.slot == a.slot))
            .collect();
        d.inowait.extend(replaced.into_iter().filter_map(|p| p.freefrag).map(Task::FreeFrag));
        d.newinoupdt.push(a);
    }

    /// FreeBSD's allocdirect_merge: `new` changes the run that `prior`, never on disk, made. It
    /// takes `prior`'s old run and size (what the disk holds) and, when `prior` had a run to free
    /// or none before it, `prior`'s freefrag: its own (the run `prior` allocated) is returned, to
    /// be freed now. When `prior` extended its run in place, the disk claims that run's first
    /// fragments: `new` keeps its freefrag, freed once `new` is on disk.
    fn merge_allocdirect(new: &mut AllocDirect, mut prior: AllocDirect) -> Option<FreeFrag> {
        assert!(
            new.old_bno == prior.bno && new.old_size == prior.new_size && matches!(new.slot, PtrSlot::Direct(_)),
            "merging a change from {} ({} bytes) into one to {} ({} bytes)",
            new.old_bno,
            new.old_size,
            prior.bno,
            prior.new_size
        );
        new.old_bno = prior.old_bno;
        new.old_size = prior.old_size;
        if prior.freefrag.is_some() || prior.old_bno == 0 {
            std::mem::swap(&mut new.freefrag, &mut prior.freefrag);
        }
        // A new directory's first block keeps waiting for its parent.
        new.parent = new.parent.or(prior.parent);
        assert!(
            new.freefrag.is_none_or(|f| f.bno == new.old_bno && new.old_bno != new.bno),
            "a merged change frees a run the disk does not hold: {new:?}"
        );
        prior.freefrag
    }

    /// A freefrag whose run no inode write can name any more goes on the work list.
    fn freefrag_now(&mut self, f: FreeFrag) {
        if let Some(d) = self.inodedeps.get(&f.ino) {
            assert!(
                d.allocdirects().all(|a| a.old_bno != f.bno && a.bno != f.bno),
                "inode {}: run {} freed while an inode write may still name it",
                f.ino,
                f.bno
            );
        }
        self.put_on_work_list(Task::FreeFrag(f));
    }

    /// Work made possible goes on the work list; a freefrag goes there exactly once.
    fn put_on_work_list(&mut self, t: Task) {
        if let Task::FreeFrag(f) = &t {
            assert!(self.freefrags.remove(&f.bno), "run {} of inode {} freed twice", f.bno, f.ino);
            // Never written through this inode again: its new-block record goes too.
            self.newblks.remove(&f.bno);
        }
        self.tasks.push(t);
    }

    /// The extended-attribute area on disk while a new one is pending (None: the in-memory
    /// one is, or will be once written as it is).
    pub fn ext_on_disk(&self, ino: u32) -> Option<(u32, [u64; NXADDR])> {
        self.inodedeps.get(&ino).filter(|d| d.ext_pending()).and_then(|d| d.ext_old)
    }

    /// A new extended-attribute area (FreeBSD's softdep_setup_allocext): its blocks `blocks`
    /// (`extb[i]`), new, are pointed to on disk only once each is allocated and written there;
    /// until then an inode write carries `on_disk`, the area the disk holds.
    pub fn alloc_ext(&mut self, ino: u32, blocks: &[u64], on_disk: (u32, [u64; NXADDR])) {
        for (i, &b) in blocks.iter().enumerate() {
            self.alloc_direct(ino, false, PtrSlot::Ext(i), u64::MAX, b);
        }
        if !blocks.is_empty() {
            self.inodedep(ino).ext_old = Some(on_disk);
        }
    }

    /// The old extended-attribute area's blocks (their pending allocations already cancelled)
    /// return to the free map once the disk no longer points at them: once the new area is on
    /// disk, or, with no new area pending, once the inode is written. `then` runs after (the
    /// area's last run, in fragments: its freefrag).
    pub fn free_ext_blocks(&mut self, ino: u32, blocks: Vec<u64>, then: Vec<Task>) {
        let d = self.inodedep(ino);
        let task = Task::FreeBlks(FreeBlks { ino, blocks, then });
        if d.ext_pending() {
            d.extwait.push(task);
        } else {
            d.ext_old = None;
            let earlier = std::mem::take(&mut d.extwait);
            d.inowait.extend(earlier);
            d.inowait.push(task);
        }
    }

    /// mkdir: the new directory `ino`'s first block may be pointed to on disk only after the
    /// parent's raised link count is (the paper's rule for ".." in §2).
    pub fn mkdir_parent(&mut self, ino: u32, parent: u32) {
        let epoch = self.tick();
        let d = self.inodedep(ino);
        if let Some(a) = d.inoupdt.iter_mut().chain(d.newinoupdt.iter_mut()).find(|a| a.lbn == 0) {
            a.parent = Some(parent);
            self.inodedep(parent).pending.push(PendingOp::BodyParent { child: ino, epoch });
        }
    }

    /// The dinode was copied into its buffer (FreeBSD's softdep_update_inodeblock): its incore
    /// updates are now buffer updates, and work waiting for that copy now waits for the buffer.
    pub fn inode_update(&mut self, ino: u32) {
        let Some(d) = self.inodedeps.get(&ino) else { return };
        if d.newinoupdt.is_empty() && d.inowait.is_empty() {
            return;
        }
        let epoch = self.tick();
        let ib = self.sb.inode_location(ino).0;
        let in_flight = |seq: Epoch| {
            self.inflight.get(&ib).is_some_and(|f| f.direct_done.iter().any(|&(i, s, _)| i == ino && s == seq))
        };
        let d = self.inodedeps.get(&ino).expect("present");
        // The changes of slots with an earlier change in the buffer, and whether a write in
        // flight carries that earlier one to disk.
        let flying: Vec<bool> = d
            .newinoupdt
            .iter()
            .map(|a| d.inoupdt.iter().find(|p| p.slot == a.slot).is_some_and(|p| in_flight(p.seq)))
            .collect();
        let d = self.inodedeps.get_mut(&ino).expect("present");
        let mut now = Vec::new();
        for (mut a, flying) in std::mem::take(&mut d.newinoupdt).into_iter().zip(flying) {
            if let Some(i) = d.inoupdt.iter().position(|p| p.slot == a.slot) {
                let prior = d.inoupdt.swap_remove(i);
                if a.old_bno != 0 && !flying {
                    // FreeBSD's merge_inode_lists: the earlier change never reached the disk.
                    now.extend(Self::merge_allocdirect(&mut a, prior));
                } else if let Some(f) = prior.freefrag {
                    // The disk may hold the earlier change's new run (a write in flight), or
                    // the new pointer replaces it: its old run goes once this copy is on disk.
                    d.bufwait.push((epoch, Task::FreeFrag(f)));
                }
            }
            d.inoupdt.push(a);
        }
        d.bufwait.extend(std::mem::take(&mut d.inowait).into_iter().map(|t| (epoch, t)));
        for f in now {
            self.freefrag_now(f);
        }
    }

    fn allocdirect_ready(&self, a: &AllocDirect) -> bool {
        self.newblk_ready(a.bno) && a.parent.is_none()
    }

    /// A newly allocated block pointed to from an indirect block (of a directory: `is_dir`).
    pub fn alloc_indir(&mut self, indir: u64, idx: usize, bno: u64, is_dir: bool) {
        self.new_block(bno);
        if is_dir {
            // A block freed is forgotten here (`cancel_blocks`); one found still under another
            // indirect block was handed out while in use (a damaged map): the new place wins.
            if let Some(before) = self.dir_parent.insert(bno, indir) {
                debug_assert!(false, "directory block {bno} already under indirect block {before}");
                log::error!("directory block {bno} allocated under {indir} while still under {before}");
            }
        }
        let id = self.indirdeps.entry(indir).or_insert_with(|| IndirDep {
            wk: WorkList::new(DepKind::IndirDep, DepState::ATTACHED),
            allocindirs: HashMap::new(),
            safe_copy: None,
        });
        id.allocindirs.insert(idx, AllocIndir { wk: WorkList::new(DepKind::AllocIndir, DepState::ATTACHED), idx, bno });
        if let Some(n) = self.newblks.get_mut(&bno) {
            n.indir = Some((indir, idx));
        }
    }

    /// A new block allocated without contents (a Block Register reservation, like fallocate's
    /// unwritten extents): the file system never writes it, so its pointer waits only for the
    /// bitmap bit.
    pub fn unwritten_block(&mut self, bno: u64) {
        if let Some(n) = self.newblks.get_mut(&bno) {
            n.wk.state |= DepState::COMPLETE;
        }
    }

    /// A new block, or a run extended in place (new again: its new fragments' bits and contents).
    fn new_block(&mut self, bno: u64) {
        let cg = self.sb.cg_of_block(bno);
        let epoch = self.tick();
        let wk = WorkList::new(DepKind::NewBlk, DepState::ATTACHED);
        self.newblks.insert(bno, NewBlk { wk, epoch, indir: None });
        self.bmsafemap.entry(cg).or_default().newblks.push((bno, epoch));
    }

    /// A new entry at `off` of directory block `dirblk` naming `ino` (DIRCHG when `old` is the
    /// inode the entry named before); for a mkdir, `parent` (MKDIR_PARENT) and `mkdir`
    /// (MKDIR_BODY).
    #[allow(clippy::too_many_arguments)]
    pub fn dir_add(
        &mut self,
        dir: u32,
        dirblk: u64,
        off: usize,
        ino: u32,
        old: Option<(u32, u8)>,
        parent: Option<u32>,
        mkdir: bool,
        on_complete: Vec<Task>,
    ) {
        let epoch = self.tick();
        self.block_dir.insert(dirblk, dir);
        // A change of an entry that is itself still pending keeps the on-disk original.
        let prev = self.take_diradd(dirblk, off);
        let namesake = prev.as_ref().is_some_and(|p| p.wk.state.contains(DepState::NAMESAKE));
        let (old_ino, old_dtype, mut carried) = match prev {
            Some(prev) => (prev.old_ino, prev.old_dtype, prev.on_complete),
            None => old.map(|(i, t)| (i, t, Vec::new())).unwrap_or((0, DT_UNKNOWN, Vec::new())),
        };
        carried.extend(on_complete);
        self.pending_names.entry(ino).or_default().add(dirblk);
        let r = DirAddRef { dirblk, off, epoch };
        let mut state = DepState::ATTACHED;
        if old_ino != 0 {
            state |= DepState::DIRCHG;
        }
        if namesake {
            state |= DepState::NAMESAKE;
        }
        let d = self.inodedep(ino);
        d.pending.push(PendingOp::DirAdd(r));
        // A directory's entry, made by its mkdir or by a rename while its first block's pointer
        // is not yet on disk, waits for that block and pointer (MKDIR_BODY): otherwise a
        // renamed new directory could be named on disk with size 0 and no block.
        if (mkdir || d.is_dir) && d.allocdirects().any(|a| a.lbn == 0) {
            state |= DepState::MKDIR_BODY;
            d.pending
                .push(PendingOp::Mkdir(Mkdir { wk: WorkList::new(DepKind::Mkdir, DepState::MKDIR_BODY), diradd: r }));
        }
        if let Some(p) = parent {
            state |= DepState::MKDIR_PARENT;
            let mk = Mkdir { wk: WorkList::new(DepKind::Mkdir, DepState::MKDIR_PARENT), diradd: r };
            self.inodedep(p).pending.push(PendingOp::Mkdir(mk));
        }
        let wk = WorkList::new(DepKind::DirAdd, state);
        let pd = self.pagedeps.entry(dirblk).or_default();
        let da = DirAdd { wk, off, ino, old_ino, old_dtype, epoch, parent, on_complete: carried };
        let twice = pd.diradds.insert(da).is_some();
        assert!(!twice, "two diradds at {off} of block {dirblk}");
    }

    /// Removes the pending entry at `off` of `dirblk`, if any, with the pending ops that name it.
    /// True if the entry at `off` of `dirblk` is a new or changed one not yet on disk.
    pub fn diradd_at(&self, dirblk: u64, off: usize) -> bool {
        self.pagedeps.get(&dirblk).is_some_and(|pd| pd.diradds.contains_key(&off))
    }

    fn take_diradd(&mut self, dirblk: u64, off: usize) -> Option<DirAdd> {
        let pd = self.pagedeps.get_mut(&dirblk)?;
        let da = pd.diradds.remove(&off)?;
        self.forget_diradd(dirblk, &da);
        Some(da)
    }

    /// A DirAdd leaves its page: its name is no longer pending and no inode waits for it.
    fn forget_diradd(&mut self, dirblk: u64, da: &DirAdd) {
        let names = self.pending_names.get_mut(&da.ino).expect("a pending entry's inode is indexed");
        if names.remove(dirblk) {
            self.pending_names.remove(&da.ino);
            self.dir_names.remove(&da.ino);
        }
        let r = DirAddRef { dirblk, off: da.off, epoch: da.epoch };
        for ino in std::iter::once(da.ino).chain(da.parent) {
            if let Some(d) = self.inodedeps.get_mut(&ino) {
                d.pending.retain(|op| op.diradd() != Some(r));
            }
        }
    }

    /// The new entry at `off` of `dirblk` waits for its hidden namesake's removal (NAMESAKE).
    pub fn wait_for_namesake(&mut self, dirblk: u64, off: usize) {
        if let Some(da) = self.pagedeps.get_mut(&dirblk).and_then(|pd| pd.diradds.get_mut(&off)) {
            da.wk.state |= DepState::NAMESAKE;
        }
    }

    /// The hidden namesake of the entry at `off` of `dirblk` is gone on disk; true if the entry
    /// was waiting for it (and may now be written).
    pub fn namesake_gone(&mut self, dirblk: u64, off: usize) -> bool {
        let pd = self.pagedeps.get_mut(&dirblk);
        match pd.and_then(|pd| pd.diradds.get_mut(&off)) {
            Some(da) if da.wk.state.contains(DepState::NAMESAKE) => {
                da.wk.state.remove(DepState::NAMESAKE);
                true
            }
            _ => false,
        }
    }

    /// Takes out of the pending entry at `off` of `dirblk` the work `pick` chooses (a rename's
    /// old-name removal, when the rename is undone before its new name reached the disk).
    pub fn take_on_complete(&mut self, dirblk: u64, off: usize, pick: impl Fn(&Task) -> bool) -> Option<Task> {
        let pd = self.pagedeps.get_mut(&dirblk)?;
        let da = pd.diradds.get_mut(&off)?;
        let i = da.on_complete.iter().position(pick)?;
        Some(da.on_complete.remove(i))
    }

    /// A directory's run of fragments moved from `old` to `new` (its bytes with it): the
    /// entries and removals pending in the old run are now pending in the new one, as FreeBSD's
    /// pagedep, kept by directory and logical block, follows its block when `ffs_realloccg`
    /// moves it. The new run is a `NewBlk` until the inode write naming it is on disk, so none
    /// of them completes before then (`roll_back_entries`): until that write, the disk holds
    /// the old run, with what its last write put there.
    pub fn dir_block_moved(&mut self, old: u64, new: u64) {
        assert!(!self.inflight.contains_key(&old), "directory run {old} moved while its write is in flight");
        assert!(self.newblks.contains_key(&new), "directory run moved from {old} to {new}, which is not new");
        assert!(
            !self.pagedeps.contains_key(&new) && !self.block_dir.contains_key(&new),
            "directory run moved from {old} to {new}, which has dependencies of its own"
        );
        let Some(pd) = self.pagedeps.remove(&old) else { return };
        if let Some(dir) = self.block_dir.remove(&old) {
            self.block_dir.insert(new, dir);
        }
        for da in pd.diradds.in_order() {
            if let Some(names) = self.pending_names.get_mut(&da.ino) {
                names.moved(old, new);
            }
            for ino in std::iter::once(da.ino).chain(da.parent) {
                if let Some(d) = self.inodedeps.get_mut(&ino) {
                    d.pending.iter_mut().for_each(|op| op.moved(old, new));
                }
            }
        }
        self.pagedeps.insert(new, pd);
    }

    /// True if directory block `bno` has entries not yet on disk.
    pub fn dir_block_pending(&self, bno: u64) -> bool {
        self.block_dir.contains_key(&bno)
    }

    /// The entry at `off` of `dirblk` was removed; `tasks` run once the removal is on disk. A
    /// new entry that never reached the disk (nothing under it there, no mkdir, no work of its
    /// own) is gone at once, as FreeBSD's `newdirrem` marks such a dirrem COMPLETE: when its
    /// removal's work is link drops only, they come back, to run now.
    pub fn dir_remove(&mut self, dirblk: u64, off: usize, mut tasks: Vec<Task>) -> Option<Vec<Task>> {
        let epoch = self.tick();
        if let Some(da) = self.take_diradd(dirblk, off) {
            let never_on_disk = da.old_ino == 0
                && da.parent.is_none()
                && da.on_complete.is_empty()
                && !da.wk.state.intersects(DepState::DIRCHG | DepState::MKDIR_BODY | DepState::MKDIR_PARENT);
            // A hidden name never on disk has left it already (NamesakeGone runs now).
            let now = |t: &Task| matches!(t, Task::DropLink(_) | Task::NamesakeGone { .. });
            if never_on_disk && tasks.iter().all(now) {
                if self.pagedeps.get(&dirblk).is_some_and(|pd| pd.diradds.is_empty() && pd.dirrems.is_empty()) {
                    self.pagedeps.remove(&dirblk);
                    self.block_dir.remove(&dirblk);
                }
                return Some(tasks);
            }
            // The entry never reached disk as it was (or the old one still is there): what was
            // to follow its completion now follows the removal.
            tasks.extend(da.on_complete);
        }
        let wk = WorkList::new(DepKind::DirRem, DepState::ATTACHED);
        self.pagedeps.entry(dirblk).or_default().dirrems.push(DirRem { wk, epoch, tasks });
        None
    }

    /// freeblks: `blocks` (no longer pointed to by the in-memory dinode of `ino`) return to the
    /// free map once that dinode is on disk; `then` runs after. Recorded before the dinode is
    /// copied into its buffer (inode wait).
    pub fn free_blocks(&mut self, ino: u32, blocks: Vec<u64>, then: Vec<Task>) {
        self.inodedep(ino).inowait.push(Task::FreeBlks(FreeBlks { ino, blocks, then }));
    }

    /// freefile: the inode returns to the free map once its cleared dinode is on disk, and
    /// `then` runs. Recorded before the cleared dinode is copied into its buffer.
    pub fn free_file(&mut self, ino: u32, is_dir: bool, then: Vec<Task>) {
        let d = self.inodedep(ino);
        // Its pointers are gone with it: nothing of the old file is to be rolled back, and the
        // old attribute blocks and moved runs go once the cleared dinode is on disk.
        let moved: Vec<Task> =
            d.inoupdt.drain(..).chain(d.newinoupdt.drain(..)).filter_map(|a| a.freefrag).map(Task::FreeFrag).collect();
        d.inowait.extend(moved);
        d.ext_old = None;
        let extwait = std::mem::take(&mut d.extwait);
        d.inowait.extend(extwait);
        d.inowait.push(Task::FreeFile(FreeFile { ino, is_dir }));
        d.inowait.extend(then);
    }

    /// Blocks being freed: their pending allocation dependencies are cancelled (their pointers
    /// have been nullified in memory). Work items that waited on a freed directory block's
    /// writes are returned: they may run once the blocks are unreachable on disk.
    pub fn cancel_blocks(&mut self, ino: u32, freed: &[u64]) -> Vec<Task> {
        let mut orphans = Vec::new();
        if freed.is_empty() {
            return orphans;
        }
        let set: HashSet<u64> = freed.iter().copied().collect();
        if let Some(d) = self.inodedeps.get_mut(&ino) {
            let gone: Vec<AllocDirect> = d
                .inoupdt
                .extract_if(.., |a| set.contains(&a.bno))
                .chain(d.newinoupdt.extract_if(.., |a| set.contains(&a.bno)))
                .collect();
            // A moved run's old fragments are still named on disk: they go once the inode,
            // without them, is written (FreeBSD's cancel_allocdirect hands the freefrag on).
            d.inowait.extend(gone.into_iter().filter_map(|a| a.freefrag).map(Task::FreeFrag));
        }
        for b in freed {
            self.indirdeps.remove(b);
            self.dir_parent.remove(b);
            // A block an indirect block points to has its `NewBlk` until the pointer is on
            // disk, and that records where the pointer is.
            if let Some(NewBlk { indir: Some((ib, idx)), .. }) = self.newblks.remove(b) {
                if let Some(id) = self.indirdeps.get_mut(&ib) {
                    if id.allocindirs.get(&idx).is_some_and(|a| a.bno == *b) {
                        id.allocindirs.remove(&idx);
                    }
                    if id.allocindirs.is_empty() {
                        self.indirdeps.remove(&ib);
                    }
                }
            }
            self.block_dir.remove(b);
            if let Some(pd) = self.pagedeps.remove(b) {
                for da in pd.diradds.into_in_order() {
                    self.forget_diradd(*b, &da);
                    orphans.extend(da.on_complete);
                }
                orphans.extend(pd.dirrems.into_iter().flat_map(|r| r.tasks));
            }
        }
        orphans
    }

    /// Directory blocks holding entries naming `ino` that are not on disk yet, with their
    /// directories.
    pub fn pending_name_blocks(&self, ino: u32) -> Vec<(u64, u32)> {
        let Some(names) = self.pending_names.get(&ino) else { return Vec::new() };
        let mut v: Vec<(u64, u32)> = names.blocks().filter_map(|b| self.block_dir.get(&b).map(|&d| (b, d))).collect();
        v.sort_unstable();
        v
    }

    /// Whether the dinode `d` of `ino`, about to be copied into its buffer, names every run
    /// its pending in-memory changes (newinoupdt) allocated: a change the dinode does not
    /// carry would wait for an inode write that never comes.
    pub fn pointers_agree(&self, ino: u32, d: &Dinode) -> bool {
        let Some(dep) = self.inodedeps.get(&ino) else { return true };
        dep.newinoupdt.iter().all(|a| match a.slot {
            PtrSlot::Direct(i) => d.db[i] == a.bno,
            PtrSlot::Indirect(l) => d.ib[l] == a.bno,
            PtrSlot::Ext(i) => d.extb[i] == a.bno,
        })
    }

    /// True if the inode's own dependencies (bitmap bit, new block pointers) are all on disk.
    pub fn inode_settled(&self, ino: u32) -> bool {
        self.inodedeps.get(&ino).is_none_or(|d| d.bitmap_done() && d.inoupdt.is_empty() && d.newinoupdt.is_empty())
    }

    /// The current epoch, after making sure `inos` are tracked (fsync's starting point).
    pub fn track(&mut self, inos: &[u32]) -> Epoch {
        for &i in inos {
            self.inodedep(i);
        }
        self.tick()
    }

    /// An fsync holds the record of `ino` (made if missing) until `release_for_fsync`: an idle
    /// record goes at its inode's write, and `written_since` must find it.
    pub fn hold_for_fsync(&mut self, ino: u32) {
        let d = self.inodedep(ino);
        d.fsyncs += 1;
    }

    /// An fsync that held the record of `ino` ends; the record goes if it is idle now.
    pub fn release_for_fsync(&mut self, ino: u32) {
        let Some(d) = self.inodedeps.get_mut(&ino) else {
            // No path removes a held record: a bug, not damage; the hold is gone with it.
            debug_assert!(false, "inode {ino}: a record held by an fsync went");
            return;
        };
        assert!(d.fsyncs > 0, "inode {ino}: released by an fsync that did not hold it");
        d.fsyncs -= 1;
        if d.removable() {
            self.inodedeps.remove(&ino);
        }
    }

    /// True if the inode was written, as it is in memory, after `epoch` (its record held by the
    /// asking fsync: `hold_for_fsync`).
    pub fn written_since(&self, ino: u32, epoch: Epoch) -> bool {
        self.inodedeps.get(&ino).is_some_and(|d| d.disk_epoch > epoch)
    }

    /// True if an indirect block still has new pointers not on disk.
    pub fn indir_pending(&self, bno: u64) -> bool {
        self.indirdeps.contains_key(&bno)
    }

    /// The entries naming `ino` that are not on disk yet: (block, offset, state) of each.
    pub fn pending_entries_naming(&self, ino: u32) -> Vec<(u64, usize, DepState)> {
        let mut out = Vec::new();
        for (&b, pd) in &self.pagedeps {
            out.extend(pd.diradds.in_order().into_iter().filter(|d| d.ino == ino).map(|d| (b, d.off, d.wk.state)));
        }
        out
    }

    /// What keeps soft updates from being idle (`is_idle`), for diagnostics: the pending work
    /// of each kind, and the records of the first few busy inodes.
    pub fn busy_summary(&self) -> String {
        let busy: Vec<u32> = self.inodedeps.iter().filter(|(_, d)| !d.idle()).map(|(i, _)| *i).take(4).collect();
        let inodes: Vec<String> = busy.iter().map(|i| format!("{i}: {}", self.inodedep_summary(*i))).collect();
        format!(
            "tasks {}, inits {}, pagedeps {:?}, indirdeps {}, newblks {:?}, busy inodes {inodes:?}",
            self.tasks.len(),
            self.inits.len(),
            self.pagedeps.iter().take(2).collect::<Vec<_>>(),
            self.indirdeps.len(),
            self.newblks.keys().take(8).collect::<Vec<_>>(),
        )
    }

    /// What the inode's record holds, for diagnostics.
    pub fn inodedep_summary(&self, ino: u32) -> String {
        match self.inodedeps.get(&ino) {
            None => "no inodedep".into(),
            Some(d) => format!(
                "state {:?}, pending {:?}, inoupdt {:?}, newinoupdt {:?}, bufwait {}, inowait {}",
                d.wk.state,
                d.pending,
                d.inoupdt,
                d.newinoupdt,
                d.bufwait.len(),
                d.inowait.len()
            ),
        }
    }

    /// True if an entry naming `ino` is not on disk yet.
    pub fn has_pending_name(&self, ino: u32) -> bool {
        self.pending_names.contains_key(&ino)
    }

    /// The entry just made (`dir_add`) naming `ino` names a directory.
    pub fn names_dir(&mut self, ino: u32) {
        assert!(self.pending_names.contains_key(&ino), "directory {ino} noted as named by no pending entry");
        self.dir_names.insert(ino);
    }

    /// True if some directory is named by an entry not yet on disk (`names_dir`).
    pub fn dir_name_pending(&self) -> bool {
        !self.dir_names.is_empty()
    }

    pub fn add_pending_unlink(&mut self, ino: u32) {
        *self.pending_unlinks.entry(ino).or_insert(0) += 1;
    }

    pub fn take_pending_unlink(&mut self, ino: u32) {
        let n = self.pending_unlinks.get_mut(&ino);
        let n = n.unwrap_or_else(|| panic!("a link drop of inode {ino} that was never counted as pending"));
        *n -= 1;
        if *n == 0 {
            self.pending_unlinks.remove(&ino);
        }
    }

    /// Fragments and inodes that will return to the free maps once writes complete (statfs
    /// counts them as free, as FreeBSD's `fs_pendingblocks` does). The unit is that of block
    /// numbers (a fragment): a freeblks' whole block counts
    /// as its `frag()` fragments, a moved run's old fragments as their number. What a freeblks
    /// runs after its blocks (a truncated file's tail, as a freefrag) counts too.
    pub fn pending_frees(&self) -> (u64, u64) {
        let mut blocks = 0;
        let mut inodes = 0;
        let waiting =
            self.inodedeps.values().flat_map(|d| d.bufwait.iter().map(|(_, t)| t).chain(&d.inowait).chain(&d.extwait));
        let mut todo: Vec<&Task> = waiting.chain(self.tasks.iter()).collect();
        while let Some(t) = todo.pop() {
            match t {
                Task::FreeBlks(f) => {
                    blocks += f.blocks.len() as u64 * self.sb.frag();
                    todo.extend(&f.then);
                }
                Task::FreeFrag(f) => blocks += f.frags as u64,
                Task::FreeFile(_) => inodes += 1,
                _ => {}
            }
        }
        let attached = self.inodedeps.values().flat_map(|d| d.allocdirects().filter_map(|a| a.freefrag));
        (blocks + attached.map(|f| f.frags as u64).sum::<u64>(), inodes)
    }

    /// Takes the work items that only return blocks and inodes to the free maps.
    pub fn take_free_tasks(&mut self) -> Vec<Task> {
        let (free, rest): (Vec<Task>, Vec<Task>) = std::mem::take(&mut self.tasks)
            .into_iter()
            .partition(|t| matches!(t.kind(), DepKind::FreeBlks | DepKind::FreeFrag | DepKind::FreeFile));
        self.tasks = rest;
        free
    }

    /// Block writes completed so far.
    pub fn writes_completed(&self) -> u64 {
        self.writes_seen
    }

    /// The removed entries not yet on disk that drop a link of an inode once they are (a
    /// rename's old name, an unlinked name): their directory blocks and those inodes.
    pub fn removals_on_disk(&self) -> Vec<(u64, u32)> {
        let mut out = Vec::new();
        for (&b, pd) in &self.pagedeps {
            for t in pd.dirrems.iter().flat_map(|r| &r.tasks) {
                if let Task::DropLink(i) = t {
                    out.push((b, *i));
                }
            }
        }
        out
    }

    pub fn pending_unlinks_of(&self, ino: u32) -> u32 {
        self.pending_unlinks.get(&ino).copied().unwrap_or(0)
    }

    // ------------------------------------------------------------ readiness

    /// True if every pointer on the way from the inode to block `bno` is on disk: its own
    /// (no `NewBlk`) and, for a directory's block under an indirect block, each indirect
    /// block's above it (FreeBSD syncs a directory that grows into its indirect blocks; here
    /// its entries wait, rolled back, until the way to them is on disk).
    fn dir_block_reachable(&self, bno: u64) -> bool {
        let mut b = bno;
        for _ in 0..=NIADDR + 1 {
            if self.newblks.contains_key(&b) {
                return false;
            }
            match self.dir_parent.get(&b) {
                Some(&up) => b = up,
                None => return true,
            }
        }
        // More indirect blocks above it than UFS2 has levels: a loop, which only blocks handed
        // out while in use can make. Its entries go as the block's own pointer allows (waiting
        // for the loop would keep them, and every fsync of their files, waiting for ever).
        debug_assert!(false, "directory block {bno}: more indirect blocks above it than UFS2 has levels");
        log::error!("directory block {bno}: its indirect blocks loop");
        true
    }

    /// The directory blocks whose way from the inode is all on disk stay so (a directory's
    /// blocks never move once under an indirect block): their records go.
    fn prune_dir_parents(&mut self) {
        let settled: Vec<u64> = self.dir_parent.keys().copied().filter(|&b| self.dir_block_reachable(b)).collect();
        for b in settled {
            self.dir_parent.remove(&b);
        }
    }

    fn newblk_ready(&self, bno: u64) -> bool {
        self.newblks.get(&bno).is_none_or(|n| n.wk.state.contains(DepState::ALLCOMPLETE))
    }

    fn is_inode_block(&self, bno: u64) -> bool {
        let cg = self.sb.cg_of_block(bno);
        bno >= self.sb.cg_itable_block(cg) && bno < self.sb.cg_data_start(cg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (Superblock, Softdep) {
        // A UFS2 file system of 4 KiB blocks of one fragment.
        let dev = crate::format::ufs2::newfs::mem_image(32 << 20, 4096);
        let sb = Superblock::probe(|off, b| crate::dev::read_bytes(&*dev, off, b)).unwrap();
        let sd = Softdep::new(&sb);
        (sb, sd)
    }

    /// Hands a copy of `buf` to the device as the cache does; returns the copy and whether the
    /// buffer stays dirty.
    fn write(sd: &mut Softdep, bno: u64, buf: &[u8]) -> (Vec<u8>, bool) {
        let (_, bytes, again) = write_shared(sd, bno, &buf.into());
        (bytes, again)
    }

    /// `write` of a buffer's bytes, which the write shares as the cache's does; also returns
    /// the bytes the write changed in patches (`Some(0)`: the buffer's bytes went as they are;
    /// None: the block was copied whole).
    fn write_shared(sd: &mut Softdep, bno: u64, buf: &std::sync::Arc<[u8]>) -> (Option<usize>, Vec<u8>, bool) {
        let mut copy = crate::cache::Outgoing::new(std::sync::Arc::clone(buf));
        sd.before_write(bno, &mut copy);
        let again = sd.after_write(bno);
        assert_eq!(copy.shares(buf), copy.patched() == Some(0));
        (copy.patched(), copy.to_vec(), again)
    }

    fn dirent_ino(block: &[u8], off: usize) -> u32 {
        dir_iter(block).map(|e| e.unwrap()).find(|e| e.offset == off).map_or(0, |e| e.ino)
    }

    fn diradd_state(sd: &Softdep, dirblk: u64) -> DepState {
        sd.pagedeps[&dirblk].diradds.in_order()[0].wk.state
    }

    /// A new file, inode 40 named "f" at offset 0 of a root directory block, recorded as a
    /// create records it (`then` runs once the entry is on disk). Returns the inode, the
    /// directory block and its bytes, the inode's block, its offset there and the block's bytes.
    fn new_file_entry(sb: &Superblock, sd: &mut Softdep, then: Vec<Task>) -> (u32, u64, Vec<u8>, u64, usize, Vec<u8>) {
        let ino = 40;
        let dirblk = sb.cg_data_start(0) + 10;
        let mut dir = vec![0u8; 4096];
        dir_init_block(&mut dir);
        dirent_put(&mut dir, 0, ino, 512, DT_REG, b"f");
        sd.new_inode(ino, false);
        sd.dir_add(ROOT_INO, dirblk, 0, ino, None, None, false, then);
        let (ib, ioff) = sb.inode_location(ino);
        let mut itable = vec![0u8; 4096];
        sb.encode_dinode(&Dinode::new(S_IFREG | 0o644, 1, 0, 0, (1, 0), 1), &mut itable[ioff..ioff + DINODE_SIZE]);
        (ino, dirblk, dir, ib, ioff, itable)
    }

    /// A record its inode's write leaves with nothing to track goes with that write (FreeBSD's
    /// `free_inodedep`), so the next write of the block looks at live records only; one an fsync
    /// holds stays, for `written_since`, until the fsync lets it go.
    #[test]
    fn an_idle_record_goes_with_its_inodes_write_unless_an_fsync_holds_it() {
        let (sb, mut sd) = setup();
        let (ino, dirblk, dir, ib, _, itable) = new_file_entry(&sb, &mut sd, vec![]);
        let held = ino + 1;
        assert_eq!(sb.inode_location(held).0, ib, "both in one inode block");
        sd.new_inode(held, false);
        write(&mut sd, sb.cg_header_block(0), &[0u8; 4096]);
        sd.hold_for_fsync(held);
        let start = sd.track(&[held]);
        let (_, again) = write(&mut sd, ib, &itable);
        assert!(!again);
        assert!(!sd.inodedeps.contains_key(&ino), "idle after its write: gone with it");
        assert!(sd.written_since(held, start), "held by an fsync: still there, written");
        sd.release_for_fsync(held);
        assert!(!sd.inodedeps.contains_key(&held), "idle and let go: gone");
        write(&mut sd, dirblk, &dir);
        assert!(sd.is_idle() && sd.inodedeps.is_empty());
    }

    /// An inode freed and allocated again while an fsync holds its record (another request
    /// removed the file and made one, or took it ahead and gave it back): the new record keeps
    /// the hold the fsync gives back.
    #[test]
    fn a_record_made_again_for_a_new_inode_keeps_an_fsyncs_hold() {
        let (_, mut sd) = setup();
        sd.hold_for_fsync(40);
        sd.new_inode(40, false);
        assert_eq!(sd.inodedeps[&40].fsyncs, 1);
        sd.release_for_fsync(40);
        assert_eq!(sd.inodedeps[&40].fsyncs, 0);

        sd.hold_for_fsync(41);
        sd.new_inode(41, false);
        sd.forget_ahead(41);
        assert_eq!(sd.inodedeps[&41].fsyncs, 1, "given back unused, still held");
        sd.release_for_fsync(41);
        assert!(!sd.inodedeps.contains_key(&41));
    }

    #[test]
    fn a_new_entry_waits_for_the_bitmap_then_the_inode() {
        let (sb, mut sd) = setup();
        let (ino, dirblk, dir, ib, ioff, itable) = new_file_entry(&sb, &mut sd, vec![Task::DropLink(7)]);
        assert_eq!(diradd_state(&sd, dirblk), DepState::ATTACHED);

        // Nothing is safe yet: the entry goes out as 0, the dinode as a free one.
        let (copy, again) = write(&mut sd, dirblk, &dir);
        assert!(again && dirent_ino(&copy, 0) == 0);
        let (copy, again) = write(&mut sd, ib, &itable);
        assert!(again && copy[ioff..ioff + DINODE_SIZE].iter().all(|&b| b == 0));

        // The bitmap, then the dinode: the entry's inode is on disk (DEPCOMPLETE).
        write(&mut sd, sb.cg_header_block(0), &[0u8; 4096]);
        assert!(sd.inodedeps[&ino].wk.state.contains(DepState::DEPCOMPLETE));
        let (copy, again) = write(&mut sd, ib, &itable);
        assert!(!again && copy == itable);
        assert!(diradd_state(&sd, dirblk).contains(DepState::DEPCOMPLETE));

        // The entry is written as it is, and retires; its work item goes on the work list.
        let (copy, again) = write(&mut sd, dirblk, &dir);
        assert!(!again && dirent_ino(&copy, 0) == ino);
        assert_eq!(sd.tasks, vec![Task::DropLink(7)]);
        sd.tasks.clear();
        assert!(sd.is_idle());
    }

    /// A block's write changes only what is rolled back in it, in patches of those bytes (an
    /// entry's first 8, a dinode), never a copy of the block; the buffer keeps every change.
    #[test]
    fn only_what_is_rolled_back_is_patched() {
        let (sb, mut sd) = setup();
        let (ino, dirblk, dir, ib, ioff, itable) = new_file_entry(&sb, &mut sd, vec![]);
        let (dir, itable): (std::sync::Arc<[u8]>, std::sync::Arc<[u8]>) = (dir.into(), itable.into());

        // The entry and the dinode are rolled back, in patches.
        let (patched, bytes, _) = write_shared(&mut sd, dirblk, &dir);
        assert_eq!(patched, Some(8), "the entry's inode number and type, not the block");
        assert!(dirent_ino(&bytes, 0) == 0 && dirent_ino(&dir, 0) == ino);
        let (patched, bytes, _) = write_shared(&mut sd, ib, &itable);
        assert_eq!(patched, Some(DINODE_SIZE), "the dinode, not the block");
        assert!(bytes[ioff..ioff + DINODE_SIZE].iter().all(|&b| b == 0));
        assert_eq!(bytes[..ioff], itable[..ioff]);
        assert_eq!(bytes[ioff + DINODE_SIZE..], itable[ioff + DINODE_SIZE..]);
        assert!(itable[ioff..ioff + DINODE_SIZE].iter().any(|&b| b != 0), "the buffer keeps the dinode");

        // Once the bitmap is on disk nothing is rolled back: the buffers' bytes go as they are.
        write(&mut sd, sb.cg_header_block(0), &[0u8; 4096]);
        let (patched, bytes, _) = write_shared(&mut sd, ib, &itable);
        assert!(patched == Some(0) && bytes == itable[..]);
        let (patched, bytes, _) = write_shared(&mut sd, dirblk, &dir);
        assert!(patched == Some(0) && dirent_ino(&bytes, 0) == ino);
        sd.tasks.clear();
        assert!(sd.is_idle());
    }

    /// mkdir of `ino` in `parent` as `Fs::mkdir` records it: its first block (returned, with the
    /// parent's directory block holding the entry), the parent's raised count, the entry.
    fn mkdir_recorded(sb: &Superblock, sd: &mut Softdep, ino: u32, parent: u32) -> (u64, u64) {
        let (body, dirblk) = (sb.cg_data_start(0) + 20, sb.cg_data_start(0) + 10);
        sd.new_inode(ino, true);
        sd.alloc_direct(ino, true, PtrSlot::Direct(0), 0, body);
        sd.mkdir_parent(ino, parent);
        sd.inode_update(ino);
        sd.dir_add(parent, dirblk, 0, ino, None, Some(parent), true, vec![]);
        (body, dirblk)
    }

    /// Records with nothing to track are dropped (the memory bound's count does it). The
    /// parent's record must neither go before its raised link count is written (the body
    /// pointer would then go out first) nor, dropped after it and made again, hold the body
    /// pointer back for a write of the parent that may never come (the directory's entry then
    /// never reached the disk: a concurrent load found a directory made at its start still
    /// unwritten at its end).
    #[test]
    fn mkdir_body_waits_for_the_parent_across_dropped_records() {
        let (sb, mut sd) = setup();
        let (ino, parent) = (40, ROOT_INO);
        let (body, dirblk) = mkdir_recorded(&sb, &mut sd, ino, parent);
        let (ib, ioff) = sb.inode_location(ino);
        let (pb, poff) = sb.inode_location(parent);
        assert_ne!(ib, pb, "the dinodes in two blocks");
        let mut itable = vec![0u8; 4096];
        let mut d = Dinode::new(S_IFDIR | 0o755, 2, 0, 0, (1, 0), 1);
        d.db[0] = body;
        d.size = 4096;
        sb.encode_dinode(&d, &mut itable[ioff..ioff + DINODE_SIZE]);
        let mut ptable = vec![0u8; 4096];
        sb.encode_dinode(&Dinode::new(S_IFDIR | 0o755, 4, 0, 0, (1, 0), 1), &mut ptable[poff..poff + DINODE_SIZE]);
        write(&mut sd, sb.cg_header_block(0), &[0u8; 4096]);
        write(&mut sd, body, &[0u8; 4096]);

        // Dropping idle records now keeps the parent's: its raised count is not on disk, and
        // the body pointer still waits for it.
        sd.count();
        let (copy, again) = write(&mut sd, ib, &itable);
        assert!(again && sb.decode_dinode(&copy[ioff..ioff + DINODE_SIZE]).db[0] == 0);

        // The parent's count is written; its record, idle now, goes and is made again.
        write(&mut sd, pb, &ptable);
        sd.count();
        sd.track(&[parent]);
        // The body pointer goes out, and the entry's MKDIR_BODY is met.
        let (copy, again) = write(&mut sd, ib, &itable);
        assert!(!again && sb.decode_dinode(&copy[ioff..ioff + DINODE_SIZE]).db[0] == body);
        assert!(!diradd_state(&sd, dirblk).contains(DepState::MKDIR_BODY));
    }

    #[test]
    fn mkdir_waits_for_its_body_and_its_parents_link_count() {
        let (sb, mut sd) = setup();
        let (ino, parent) = (40, 35);
        let (body, dirblk) = mkdir_recorded(&sb, &mut sd, ino, parent);
        let st = diradd_state(&sd, dirblk);
        assert!(st.contains(DepState::MKDIR_BODY | DepState::MKDIR_PARENT) && !st.contains(DepState::DEPCOMPLETE));
        let (ib, ioff) = sb.inode_location(ino);
        assert_eq!(ib, sb.inode_location(parent).0, "both dinodes in one block");
        let mut itable = vec![0u8; 4096];
        let mut d = Dinode::new(S_IFDIR | 0o755, 2, 0, 0, (1, 0), 1);
        d.db[0] = body;
        d.size = 4096;
        sb.encode_dinode(&d, &mut itable[ioff..ioff + DINODE_SIZE]);

        write(&mut sd, sb.cg_header_block(0), &[0u8; 4096]);
        write(&mut sd, body, &[0u8; 4096]);
        // The first write of the block carries the parent's count: the body pointer (it holds
        // "..") still waits for that, so it is rolled back, and so is the directory's size.
        let (copy, again) = write(&mut sd, ib, &itable);
        let on_disk = sb.decode_dinode(&copy[ioff..ioff + DINODE_SIZE]);
        assert!(again && on_disk.db[0] == 0 && on_disk.size == 0);
        let st = diradd_state(&sd, dirblk);
        assert!(st.contains(DepState::DEPCOMPLETE | DepState::MKDIR_BODY) && !st.contains(DepState::MKDIR_PARENT));
        // The second carries the body pointer: MKDIR_BODY is met, the entry may go.
        let (copy, again) = write(&mut sd, ib, &itable);
        assert!(!again && sb.decode_dinode(&copy[ioff..ioff + DINODE_SIZE]).db[0] == body);
        assert!(diradd_state(&sd, dirblk).contains(DepState::ALLCOMPLETE - DepState::COMPLETE));
        assert!(diradd_state(&sd, dirblk).intersection(DepState::MKDIR_BODY | DepState::MKDIR_PARENT).is_empty());
        let mut dir = vec![0u8; 4096];
        dir_init_block(&mut dir);
        dirent_put(&mut dir, 0, ino, 512, DT_DIR, b"d");
        let (copy, again) = write(&mut sd, dirblk, &dir);
        assert!(!again && dirent_ino(&copy, 0) == ino);
        assert!(sd.is_idle());
    }

    #[test]
    fn freed_blocks_and_inode_wait_for_the_cleared_dinode() {
        let (sb, mut sd) = setup();
        let ino = 40;
        let (ib, _) = sb.inode_location(ino);
        sd.free_blocks(ino, vec![900, 901], vec![Task::DropLink(2)]);
        sd.free_file(ino, false, vec![]);
        assert_eq!(sd.pending_frees(), (2, 1));
        // Not yet copied into the buffer: a write of the block now does not carry them.
        write(&mut sd, ib, &[0u8; 4096]);
        assert!(sd.tasks.is_empty());
        sd.inode_update(ino);
        assert!(sd.inodedeps[&ino].inowait.is_empty() && sd.inodedeps[&ino].bufwait.len() == 2);
        write(&mut sd, ib, &[0u8; 4096]);
        let free = sd.take_free_tasks();
        assert!(sd.tasks.is_empty() && sd.is_idle());
        let want = Task::FreeBlks(FreeBlks { ino, blocks: vec![900, 901], then: vec![Task::DropLink(2)] });
        assert_eq!(free, vec![want, Task::FreeFile(FreeFile { ino, is_dir: false })]);
    }

    #[test]
    fn an_indirect_block_goes_out_as_its_safe_copy() {
        let (sb, mut sd) = setup();
        let (indir, child) = (sb.cg_data_start(0) + 30, sb.cg_data_start(0) + 31);
        sd.alloc_indir(indir, 3, child, false);
        let mut blk = vec![0u8; 4096];
        ind_set(&mut blk, 3, child);
        let (copy, again) = write(&mut sd, indir, &blk);
        assert!(again && ind_get(&copy, 3) == 0);
        assert_eq!(sd.indirdeps[&indir].safe_copy.as_deref(), Some(&copy[..]));
        write(&mut sd, sb.cg_header_block(0), &[0u8; 4096]);
        write(&mut sd, child, &[0u8; 4096]);
        let (copy, again) = write(&mut sd, indir, &blk);
        assert!(!again && ind_get(&copy, 3) == child && !sd.indir_pending(indir));
        assert!(sd.is_idle());
    }

    /// Freeing blocks that indirect blocks point to (a truncation before the pointers reached
    /// the disk) cancels their `AllocIndir`s at once, and an indirect block left with none goes.
    #[test]
    fn freeing_indirectly_pointed_blocks_cancels_their_dependencies() {
        let (_, mut sd) = setup();
        sd.alloc_indir(500, 0, 600, false);
        sd.alloc_indir(500, 1, 601, false);
        sd.alloc_indir(700, 3, 800, false);
        sd.cancel_blocks(40, &[600]);
        assert_eq!(sd.indirdeps[&500].allocindirs.len(), 1);
        sd.cancel_blocks(40, &[601, 800]);
        assert!(sd.indirdeps.is_empty() && sd.newblks.is_empty(), "{:?}", sd.indirdeps);
        assert!(sd.is_idle());
    }

    /// A UFS2 geometry of 4 KiB blocks and 1 KiB fragments (block numbers are fragment
    /// addresses), with a data block of group 0 (a multiple of 4 fragments) and an inode whose
    /// bitmap bit is on disk, as its dinode block and offset.
    fn setup_frags() -> (Superblock, Softdep, u64, u32, u64, usize) {
        let o = crate::format::ufs2::newfs::NewfsOptions { bsize: Some(4096), fsize: Some(1024), ..Default::default() };
        let sb = Superblock::from_ufs2(crate::format::ufs2::newfs::geometry(64 << 20, &o).unwrap().sb);
        assert_eq!((sb.frag(), sb.addr_unit(), sb.block_size), (4, 1024, 4096));
        let mut sd = Softdep::new(&sb);
        let data = sb.cg_data_start(0).next_multiple_of(4) + 64;
        let ino = 40;
        sd.track(&[ino]);
        let (ib, ioff) = sb.inode_location(ino);
        assert_eq!(ib % 4, 0, "an inode block is a whole block");
        (sb, sd, data, ino, ib, ioff)
    }

    /// An inode block holding `ino`'s dinode with these direct pointers and size.
    fn frag_itable(sb: &Superblock, ioff: usize, db: &[u64], size: u64) -> Vec<u8> {
        let mut d = Dinode::new(S_IFREG | 0o644, 1, 0, 0, (1, 0), 1);
        d.db[..db.len()].copy_from_slice(db);
        d.size = size;
        let mut itable = vec![0u8; 4096];
        sb.encode_dinode(&d, &mut itable[ioff..ioff + DINODE_SIZE]);
        itable
    }

    fn dinode_at(sb: &Superblock, copy: &[u8], ioff: usize) -> Dinode {
        sb.decode_dinode(&copy[ioff..ioff + DINODE_SIZE])
    }

    /// The group header and the run's contents are on disk: the run is ready.
    fn make_ready(sb: &Superblock, sd: &mut Softdep, run: u64) {
        write(sd, sb.cg_header_block(sb.cg_of_block(run)), &[0u8; 4096]);
        write(sd, run, &[0u8; 4096]);
    }

    /// A tail of one fragment extended in place to two: until the second fragment's bit and
    /// contents are on disk, the inode goes out with the pointer it had and the size of one
    /// fragment; then with the new size.
    #[test]
    fn a_fragment_extended_in_place_rolls_back_its_size() {
        let (sb, mut sd, x, ino, ib, ioff) = setup_frags();
        sd.alloc_direct_frags(ino, false, 0, (x, 2048), (x, 1024));
        sd.inode_update(ino);
        let itable = frag_itable(&sb, ioff, &[x], 1500);
        let (copy, again) = write(&mut sd, ib, &itable);
        let on_disk = dinode_at(&sb, &copy, ioff);
        assert!(again && on_disk.db[0] == x && on_disk.size == 1024, "{on_disk:?}");
        assert!(sd.tasks.is_empty(), "nothing to free: the run stays where it was");
        make_ready(&sb, &mut sd, x);
        let (copy, again) = write(&mut sd, ib, &itable);
        assert!(!again && copy == itable);
        assert!(sd.is_idle() && sd.tasks.is_empty());
    }

    /// A tail fragment moved to a full block, and a block allocated after it: until the moved
    /// run is ready, the inode goes out with the old run and the old fragment's size, and the
    /// later pointer cleared in the copy, even though its block is ready (nor does it retire).
    #[test]
    fn a_moved_fragment_rolls_back_to_the_old_run_and_size_and_clears_later_pointers() {
        let (sb, mut sd, a, ino, ib, ioff) = setup_frags();
        let (w, y, z) = (a + 4, a + 8, a + 12);
        sd.alloc_direct_frags(ino, false, 1, (y, 4096), (w, 1024));
        sd.alloc_direct(ino, false, PtrSlot::Direct(2), 2, z);
        sd.inode_update(ino);
        let itable = frag_itable(&sb, ioff, &[a, y, z], 2 * 4096 + 100);
        // The later block is ready; the moved one waits for its contents.
        write(&mut sd, sb.cg_header_block(0), &[0u8; 4096]);
        write(&mut sd, z, &[0u8; 4096]);
        let (copy, again) = write(&mut sd, ib, &itable);
        let on_disk = dinode_at(&sb, &copy, ioff);
        assert!(again, "the buffer stays dirty");
        assert_eq!((on_disk.db[0], on_disk.db[1], on_disk.db[2], on_disk.size), (a, w, 0, 4096 + 1024));
        assert_eq!(sd.inodedeps[&ino].inoupdt.len(), 2, "the cleared pointer did not retire");
        write(&mut sd, y, &[0u8; 4096]);
        let (copy, again) = write(&mut sd, ib, &itable);
        assert!(!again && copy == itable);
        assert_eq!(sd.take_free_tasks(), vec![Task::FreeFrag(FreeFrag { ino, bno: w, frags: 1 })]);
        assert!(sd.is_idle());
    }

    /// statfs's pending frees are fragments: a freed whole block counts all of its own (it
    /// counted one, so a large file unlinked on UFS2 showed an eighth of its space coming back
    /// until its freeblks ran), a moved run's old fragments their number.
    #[test]
    fn pending_frees_count_fragments() {
        let (_sb, mut sd, w, ino, _ib, _ioff) = setup_frags();
        sd.free_blocks(ino, vec![w + 8, w + 12], vec![]);
        assert_eq!(sd.pending_frees(), (2 * 4, 0));
        sd.alloc_direct_frags(ino, false, 0, (w + 4, 3072), (w + 1, 2048));
        sd.free_file(ino, false, vec![]);
        assert_eq!(sd.pending_frees(), (2 * 4 + 2, 1));
    }

    /// statfs's pending frees are in the unit of block numbers: on UFS2 with four fragments a
    /// block, a freeblks of two whole blocks and one of their inode's freefile count as eight
    /// fragments and one inode (counted as two, a closed unnamed file's space seemed to stay in
    /// use until its dinode was written).
    #[test]
    fn pending_frees_count_a_freed_block_as_its_fragments() {
        let (sb, mut sd, w, ino, _, _) = setup_frags();
        sd.free_blocks(ino, vec![w, w + 4], vec![]);
        sd.free_file(ino, false, vec![]);
        assert_eq!(sd.pending_frees(), (2 * sb.frag(), 1));
    }

    /// A truncated file's tail, freed after its whole blocks (a freefrag in the freeblks'
    /// `then`), is pending with them.
    #[test]
    fn pending_frees_count_the_tail_a_freeblks_frees_after_its_blocks() {
        let (sb, mut sd, w, ino, _, _) = setup_frags();
        let tail = Task::FreeFrag(FreeFrag { ino, bno: w + 8, frags: 3 });
        sd.free_blocks(ino, vec![w, w + 4], vec![tail, Task::DropLink(2)]);
        assert_eq!(sd.pending_frees(), (2 * sb.frag() + 3, 0));
    }

    /// freefrag: the old run of a moved tail returns to the free map only once an inode write
    /// carrying the new run is on disk: not when the change is made, not when the dinode is
    /// copied into its buffer, not with a write that rolled the pointer back, not while the
    /// write that carries it is in flight.
    #[test]
    fn freefrag_frees_the_old_run_only_after_the_inode_write_naming_the_new_one() {
        let (sb, mut sd, w, ino, ib, ioff) = setup_frags();
        let y = w + 4;
        sd.alloc_direct_frags(ino, false, 0, (y, 3072), (w + 1, 2048));
        assert_eq!(sd.pending_frees(), (2, 0), "statfs counts the old run as free");
        sd.inode_update(ino);
        let itable = frag_itable(&sb, ioff, &[y], 2500);
        let (copy, _) = write(&mut sd, ib, &itable);
        assert_eq!(dinode_at(&sb, &copy, ioff).db[0], w + 1);
        assert!(sd.tasks.is_empty(), "the disk still names the old run");
        make_ready(&sb, &mut sd, y);
        assert!(sd.tasks.is_empty());
        let mut copy = crate::cache::Outgoing::new(itable.as_slice().into());
        sd.before_write(ib, &mut copy);
        assert!(copy.to_vec() == itable && sd.tasks.is_empty(), "in flight: not yet durable");
        assert!(!sd.after_write(ib));
        assert_eq!(sd.take_free_tasks(), vec![Task::FreeFrag(FreeFrag { ino, bno: w + 1, frags: 2 })]);
        assert!(sd.freefrags.is_empty() && sd.is_idle() && sd.pending_frees() == (0, 0));
    }

    /// Two changes of one slot before either is on disk merge (allocdirect_merge): a new tail
    /// extended in place then moved is one new run (the run it left, never on disk, is freed at
    /// once); a tail on disk moved then extended in place keeps the disk's run and size to roll
    /// back to, and frees that run once the last change is on disk.
    #[test]
    fn pending_changes_of_one_block_merge() {
        let (sb, mut sd, x, ino, ib, ioff) = setup_frags();
        let y = x + 4;
        // New one fragment, extended to two (both only in memory), then moved to three.
        sd.alloc_direct_frags(ino, false, 0, (x, 1024), (0, 0));
        sd.inode_update(ino);
        sd.alloc_direct_frags(ino, false, 0, (x, 2048), (x, 1024));
        sd.alloc_direct_frags(ino, false, 0, (y, 3072), (x, 2048));
        assert!(sd.tasks.is_empty(), "the first fragment is in the buffer: kept until the copy is");
        sd.inode_update(ino);
        assert_eq!(sd.take_free_tasks(), vec![Task::FreeFrag(FreeFrag { ino, bno: x, frags: 2 })]);
        let a = &sd.inodedeps[&ino].inoupdt;
        assert_eq!(a.len(), 1);
        assert_eq!((a[0].bno, a[0].new_size, a[0].old_bno, a[0].old_size, a[0].freefrag), (y, 3072, 0, 0, None));
        let itable = frag_itable(&sb, ioff, &[y], 3000);
        let (copy, _) = write(&mut sd, ib, &itable);
        let on_disk = dinode_at(&sb, &copy, ioff);
        assert_eq!((on_disk.db[0], on_disk.size), (0, 0), "a new file's only block rolled back: it ends at 0");
        make_ready(&sb, &mut sd, y);
        let (copy, _) = write(&mut sd, ib, &itable);
        assert!(copy == itable && sd.is_idle() && sd.tasks.is_empty());

        // Another file's tail on disk, one fragment at w, moved to two at z, then extended in
        // place to three: the disk's run w is what both roll back to, freed after the last.
        let (ino, (_, ioff)) = (ino + 1, sb.inode_location(ino + 1));
        let (w, z) = (y + 4, y + 8);
        sd.alloc_direct_frags(ino, false, 0, (z, 2048), (w, 1024));
        sd.inode_update(ino);
        sd.alloc_direct_frags(ino, false, 0, (z, 3072), (z, 2048));
        sd.inode_update(ino);
        assert!(sd.tasks.is_empty());
        let a = &sd.inodedeps[&ino].inoupdt;
        assert_eq!(a.len(), 1);
        assert_eq!((a[0].old_bno, a[0].old_size), (w, 1024));
        assert_eq!(a[0].freefrag, Some(FreeFrag { ino, bno: w, frags: 1 }));
        let itable = frag_itable(&sb, ioff, &[z], 2500);
        let (copy, _) = write(&mut sd, ib, &itable);
        let on_disk = dinode_at(&sb, &copy, ioff);
        assert_eq!((on_disk.db[0], on_disk.size), (w, 1024));
        make_ready(&sb, &mut sd, z);
        let (copy, _) = write(&mut sd, ib, &itable);
        assert!(copy == itable);
        assert_eq!(sd.take_free_tasks(), vec![Task::FreeFrag(FreeFrag { ino, bno: w, frags: 1 })]);
        assert!(sd.is_idle());
    }

    /// A directory's run moved (a removal pending in the old run, another made in the new
    /// one): the removals follow the run, and neither completes with a write of the new run
    /// while the disk's inode names the old one, which still holds both names; that write
    /// leaves the buffer dirty. Once the inode naming the new run is on disk, the next write
    /// of the run completes them.
    #[test]
    fn removals_in_a_moved_directory_run_wait_for_the_inode_naming_it() {
        let (sb, mut sd, x, dir, ib, ioff) = setup_frags();
        let y = x + 4;
        sd.dir_remove(x, 24, vec![Task::DropLink(50)]);
        sd.alloc_direct_frags(dir, true, 0, (y, 2048), (x, 1024));
        sd.dir_block_moved(x, y);
        assert!(!sd.pagedeps.contains_key(&x), "the old run keeps its removal");
        sd.dir_remove(y, 60, vec![Task::DropLink(51)]);
        let run = vec![0u8; 2048];
        write(&mut sd, sb.cg_header_block(0), &[0u8; 4096]);
        let (_, again) = write(&mut sd, y, &run);
        assert!(again, "a run the disk does not name yet stays dirty for its removals");
        assert!(sd.tasks.is_empty(), "a removal completed while the disk's inode names the old run");
        sd.inode_update(dir);
        let itable = frag_itable(&sb, ioff, &[y], 1536);
        let (copy, again) = write(&mut sd, ib, &itable);
        assert!(!again && dinode_at(&sb, &copy, ioff).db[0] == y);
        assert!(!sd.tasks.iter().any(|t| matches!(t, Task::DropLink(_))));
        let (_, again) = write(&mut sd, y, &run);
        assert!(!again);
        let drops: Vec<&Task> = sd.tasks.iter().filter(|t| matches!(t, Task::DropLink(_))).collect();
        assert_eq!(drops, [&Task::DropLink(50), &Task::DropLink(51)]);
    }

    /// A run extended in place while its group header's write is in flight: that write's copy
    /// holds the first fragment's bit, not the new one's, so the extension waits for the next.
    #[test]
    fn an_extension_made_while_its_header_is_in_flight_waits_for_the_next_header() {
        let (sb, mut sd, x, ino, ib, ioff) = setup_frags();
        sd.alloc_direct_frags(ino, false, 0, (x, 1024), (0, 0));
        sd.inode_update(ino);
        write(&mut sd, x, &[0u8; 4096]);
        let hb = sb.cg_header_block(0);
        let mut header = crate::cache::Outgoing::new(vec![0u8; 4096].into());
        sd.before_write(hb, &mut header);
        sd.alloc_direct_frags(ino, false, 0, (x, 2048), (x, 1024));
        sd.inode_update(ino);
        sd.after_write(hb);
        write(&mut sd, x, &[0u8; 4096]);
        let itable = frag_itable(&sb, ioff, &[x], 2048);
        let (copy, again) = write(&mut sd, ib, &itable);
        assert!(again && dinode_at(&sb, &copy, ioff).size == 0, "{:?}", dinode_at(&sb, &copy, ioff));
        write(&mut sd, hb, &[0u8; 4096]);
        let (copy, again) = write(&mut sd, ib, &itable);
        assert!(!again && copy == itable && sd.is_idle());
    }
}
