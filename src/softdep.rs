//! Soft updates (McKusick & Ganger 1999, §2-4): metadata writes are delayed, and every pointer or
//! directory entry whose prerequisites are not yet on disk is rolled back in the copy of its
//! block that goes to the device, then rolled forward (the buffer keeps the current value and
//! stays dirty). Dependencies are tracked per pointer and per entry, so blocks may be written in
//! any order.
//!
//! The paper's structures (Table 1), keyed as the cache sees blocks:
//! - `BmSafeMap` per cylinder group: the new inodes and blocks whose bitmap bits must reach disk
//!   before anything points to them (their DEPCOMPLETE);
//! - `InodeDep` per inode: whether its bitmap bit is on disk (until then the whole dinode is
//!   written as free), the epoch of the last write that carried it, and its `AllocDirect`s (new
//!   block pointers in the dinode, each waiting for the block's bitmap bit and first contents:
//!   its COMPLETE);
//! - `AllocIndir` per pointer in an indirect block (the safe copy is the rolled-back copy);
//! - `PageDep` per directory block: its `DirAdd`s (a new entry, rolled back to 0, or for a
//!   DIRCHG to the old inode, until the inode is on disk, and for a mkdir until the new directory's
//!   first block and the parent's raised link count are) and its `DirRem`s (a removed entry: once
//!   the removal is on disk, the link count is dropped);
//! - `FreeBlks` / `FreeFile`: blocks and inodes that return to the free maps only once the
//!   nullified pointers or the cleared inode are on disk.
//!
//! Work that a completed write makes possible goes on the task list (`tasks`), which the file
//! system runs outside the I/O path. Ordering uses epochs: every dependency and every block
//! write takes the next number, so "written after the dependency was made" is a comparison.
//!
//! Invariant: a copy given to the device never holds a pointer to a block or inode whose bitmap
//! bit is not on disk, a pointer to a new block whose contents are not on disk, nor an entry for
//! an inode whose initialised (or re-linked) dinode is not on disk.

use std::collections::{HashMap, HashSet};

use crate::format::*;

pub type Epoch = u64;

/// Where a pointer lives in a dinode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PtrSlot {
    Direct(usize),
    Indirect(usize),
}

/// A new block: its bitmap bit on disk (DEPCOMPLETE) and its first contents on disk (COMPLETE).
#[derive(Debug, Default, Clone, Copy)]
struct NewBlk {
    bitmap_done: bool,
    written: bool,
}

/// A new block pointer in a dinode.
#[derive(Debug, Clone, Copy)]
pub struct AllocDirect {
    pub slot: PtrSlot,
    /// First logical block the pointer maps (for the size roll-back of a directory).
    pub lbn: u64,
    pub bno: u64,
    /// mkdir (MKDIR_PARENT): the new directory's first block holds "..", so it is pointed to
    /// only once the parent's raised link count (written after this epoch) is on disk.
    pub parent: Option<(u32, Epoch)>,
}

/// A new block pointer in an indirect block.
#[derive(Debug, Clone, Copy)]
pub struct AllocIndir {
    pub idx: usize,
    pub bno: u64,
}

#[derive(Debug, Default)]
pub struct InodeDep {
    /// The inode's bitmap bit is on disk (false only for a newly allocated inode).
    pub bitmap_done: bool,
    /// Capture epoch of the last write of its block that carried this dinode as it was in memory.
    pub disk_epoch: Epoch,
    pub allocdirects: Vec<AllocDirect>,
    pub is_dir: bool,
}

/// Work that waits for writes and then runs in the file system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Task {
    /// dirrem: the name is gone on disk; drop one link of the inode.
    DropLink(u32),
    /// dirrem of rmdir (or a directory replaced by rename): the child's name is gone on disk;
    /// free the child, and once its block pointers are nullified on disk, the parent (if any)
    /// loses the link of "..".
    RmdirChild { child: u32, parent: Option<u32> },
    /// freeblks: the nullified pointers are on disk; the blocks return to the free map, then
    /// the tasks in `then` run.
    FreeBlks { blocks: Vec<u64>, then: Vec<Task> },
    /// freefile: the cleared dinode is on disk; the inode returns to the free map.
    FreeFile { ino: u32, is_dir: bool },
    /// rename's old name, hidden from lookups until the new name is on disk (rule 3: the new
    /// name before the old one goes), is now removed; `tasks` follow that removal to disk.
    RemoveOldName { dir: u32, bno: u64, lbn: u64, off: usize, tasks: Vec<Task> },
}

/// A new (or changed, DIRCHG) directory entry.
#[derive(Debug)]
pub struct DirAdd {
    pub off: usize,
    pub ino: u32,
    /// What the entry held on disk before (0 for a new entry).
    pub old_ino: u32,
    pub old_dtype: u8,
    pub epoch: Epoch,
    /// mkdir (MKDIR_PARENT): the parent's raised link count must be on disk too.
    pub parent: Option<u32>,
    /// mkdir (MKDIR_BODY): the new directory's first block must be on disk and pointed to.
    pub mkdir: bool,
    /// Tasks that run once the entry is on disk (a replaced inode's dirrem).
    pub on_complete: Vec<Task>,
}

#[derive(Debug)]
pub struct DirRem {
    pub epoch: Epoch,
    pub tasks: Vec<Task>,
}

#[derive(Debug, Default)]
pub struct PageDep {
    pub diradds: Vec<DirAdd>,
    pub dirrems: Vec<DirRem>,
}

/// A cylinder group's bitmap block: the new inodes and blocks waiting for it to reach disk.
#[derive(Debug, Default)]
pub struct BmSafeMap {
    pub inodedeps: Vec<u32>,
    pub newblks: Vec<u64>,
}

/// A task waiting for a write, after `epoch`, of each block in `remaining`.
#[derive(Debug)]
struct Waiting {
    remaining: HashSet<u64>,
    epoch: Epoch,
    task: Task,
}

/// What a write in flight carried, to be retired when it completes.
#[derive(Debug, Default)]
struct Inflight {
    epoch: Epoch,
    rolled_back: bool,
    inodes_written: Vec<u32>,
    direct_done: Vec<(u32, u64)>,
    indir_done: Vec<u64>,
    diradds_done: Vec<usize>,
}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct SoftdepStats {
    pub rollbacks: u64,
    pub tasks_run: u64,
    pub max_deps: usize,
}

pub struct Softdep {
    sb: Superblock,
    epoch: Epoch,
    pub inodedeps: HashMap<u32, InodeDep>,
    newblks: HashMap<u64, NewBlk>,
    allocindirs: HashMap<u64, HashMap<usize, AllocIndir>>,
    pagedeps: HashMap<u64, PageDep>,
    bmsafemap: HashMap<u32, BmSafeMap>,
    waiting: HashMap<u64, Waiting>,
    waiting_on: HashMap<u64, Vec<u64>>,
    next_wait: u64,
    inflight: HashMap<u64, Inflight>,
    /// The task list: work made possible by completed writes.
    pub tasks: Vec<Task>,
    /// Link drops queued behind their dirrems, per inode: users see `nlink` minus these
    /// (the paper's effnlink), so rmdir and stat see the final counts at once.
    pub pending_unlinks: HashMap<u32, u32>,
    pub stats: SoftdepStats,
    writes_seen: u64,
    /// Entries (DirAdds) not yet on disk, per inode they name.
    pending_names: HashMap<u32, u32>,
    /// The directory each block with entries belongs to (for fsync's walk up to the root).
    block_dir: HashMap<u64, u32>,
}

impl Softdep {
    pub fn new(sb: &Superblock) -> Softdep {
        Softdep {
            sb: sb.clone(),
            epoch: 1,
            inodedeps: HashMap::new(),
            newblks: HashMap::new(),
            allocindirs: HashMap::new(),
            pagedeps: HashMap::new(),
            bmsafemap: HashMap::new(),
            waiting: HashMap::new(),
            waiting_on: HashMap::new(),
            next_wait: 0,
            inflight: HashMap::new(),
            tasks: Vec::new(),
            pending_unlinks: HashMap::new(),
            stats: SoftdepStats::default(),
            writes_seen: 0,
            pending_names: HashMap::new(),
            block_dir: HashMap::new(),
        }
    }

    fn tick(&mut self) -> Epoch {
        self.epoch += 1;
        self.epoch
    }

    /// Dependency structures alive (the quantity the memory bound limits); a scan, so callers
    /// check it now and then.
    pub fn count(&mut self) -> usize {
        let n = self.count_now();
        self.stats.max_deps = self.stats.max_deps.max(n);
        n
    }

    fn count_now(&self) -> usize {
        self.inodedeps.len()
            + self.newblks.len()
            + self.allocindirs.values().map(HashMap::len).sum::<usize>()
            + self.pagedeps.values().map(|p| p.diradds.len() + p.dirrems.len()).sum::<usize>()
            + self.waiting.len()
    }

    /// Nothing is pending: every change is on disk and every task has run.
    pub fn is_idle(&self) -> bool {
        self.tasks.is_empty()
            && self.waiting.is_empty()
            && self.pagedeps.is_empty()
            && self.allocindirs.is_empty()
            && self.newblks.is_empty()
            && self.inodedeps.values().all(|d| d.bitmap_done && d.allocdirects.is_empty())
    }

    fn inodedep(&mut self, ino: u32) -> &mut InodeDep {
        self.inodedeps.entry(ino).or_insert_with(|| InodeDep { bitmap_done: true, ..Default::default() })
    }

    // ------------------------------------------------------------ recording dependencies

    /// A newly allocated inode: written as free until its bitmap bit is on disk.
    pub fn new_inode(&mut self, ino: u32, is_dir: bool) {
        let cg = self.sb.cg_of_inode(ino);
        self.inodedeps.insert(ino, InodeDep { bitmap_done: false, disk_epoch: 0, allocdirects: Vec::new(), is_dir });
        self.bmsafemap.entry(cg).or_default().inodedeps.push(ino);
    }

    /// A newly allocated block pointed to from a dinode.
    pub fn alloc_direct(&mut self, ino: u32, is_dir: bool, slot: PtrSlot, lbn: u64, bno: u64) {
        self.new_block(bno);
        let d = self.inodedep(ino);
        d.is_dir |= is_dir;
        d.allocdirects.retain(|a| a.slot != slot);
        d.allocdirects.push(AllocDirect { slot, lbn, bno, parent: None });
    }

    /// mkdir: the new directory `ino`'s first block may be pointed to on disk only after the
    /// parent's raised link count is (the paper's rule for ".." in §2).
    pub fn mkdir_parent(&mut self, ino: u32, parent: u32) {
        let epoch = self.tick();
        self.inodedep(parent);
        if let Some(a) = self.inodedep(ino).allocdirects.iter_mut().find(|a| a.lbn == 0) {
            a.parent = Some((parent, epoch));
        }
    }

    fn allocdirect_ready(&self, a: &AllocDirect) -> bool {
        self.newblk_ready(a.bno)
            && a.parent.is_none_or(|(p, e)| self.inodedeps.get(&p).is_none_or(|pd| pd.disk_epoch > e))
    }

    /// A newly allocated block pointed to from an indirect block.
    pub fn alloc_indir(&mut self, indir: u64, idx: usize, bno: u64) {
        self.new_block(bno);
        self.allocindirs.entry(indir).or_default().insert(idx, AllocIndir { idx, bno });
    }

    /// A new block allocated without contents (a Block Register reservation, like fallocate's
    /// unwritten extents): the file system never writes it, so its pointer waits only for the
    /// bitmap bit.
    pub fn unwritten_block(&mut self, bno: u64) {
        if let Some(n) = self.newblks.get_mut(&bno) {
            n.written = true;
        }
    }

    fn new_block(&mut self, bno: u64) {
        let cg = self.sb.cg_of_block(bno);
        self.newblks.insert(bno, NewBlk::default());
        self.bmsafemap.entry(cg).or_default().newblks.push(bno);
    }

    /// A new entry at `off` of directory block `dirblk` naming `ino` (DIRCHG when `old` is the
    /// inode the entry named before).
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
        self.inodedep(ino);
        if let Some(p) = parent {
            self.inodedep(p);
        }
        let pd = self.pagedeps.entry(dirblk).or_default();
        // A change of an entry that is itself still pending keeps the on-disk original.
        let (old_ino, old_dtype, mut carried) = match pd.diradds.iter().position(|d| d.off == off) {
            Some(i) => {
                let prev = pd.diradds.remove(i);
                Self::name_done(&mut self.pending_names, prev.ino);
                (prev.old_ino, prev.old_dtype, prev.on_complete)
            }
            None => old.map(|(i, t)| (i, t, Vec::new())).unwrap_or((0, DT_UNKNOWN, Vec::new())),
        };
        carried.extend(on_complete);
        *self.pending_names.entry(ino).or_insert(0) += 1;
        let pd = self.pagedeps.entry(dirblk).or_default();
        pd.diradds.push(DirAdd { off, ino, old_ino, old_dtype, epoch, parent, mkdir, on_complete: carried });
    }

    /// The entry at `off` of `dirblk` was removed; `tasks` run once the removal is on disk.
    pub fn dir_remove(&mut self, dirblk: u64, off: usize, mut tasks: Vec<Task>) {
        let epoch = self.tick();
        let pd = self.pagedeps.entry(dirblk).or_default();
        if let Some(i) = pd.diradds.iter().position(|d| d.off == off) {
            // The entry never reached disk as it was (or the old one still is there): what was
            // to follow its completion now follows the removal.
            let da = pd.diradds.remove(i);
            Self::name_done(&mut self.pending_names, da.ino);
            tasks.extend(da.on_complete);
        }
        pd.dirrems.push(DirRem { epoch, tasks });
    }

    /// `task` runs once each of `blocks` has been written after now.
    pub fn after_writes(&mut self, blocks: &[u64], task: Task) {
        let epoch = self.tick();
        let id = self.next_wait;
        self.next_wait += 1;
        for &b in blocks {
            self.waiting_on.entry(b).or_default().push(id);
        }
        self.waiting.insert(id, Waiting { remaining: blocks.iter().copied().collect(), epoch, task });
    }

    /// Blocks being freed: their pending allocation dependencies are cancelled (their pointers
    /// have been nullified in memory). Tasks that waited on a freed directory block's writes
    /// are returned: they may run once the blocks are unreachable on disk.
    pub fn cancel_blocks(&mut self, ino: u32, freed: &[u64]) -> Vec<Task> {
        let mut orphans = Vec::new();
        if freed.is_empty() {
            return orphans;
        }
        let set: HashSet<u64> = freed.iter().copied().collect();
        if let Some(d) = self.inodedeps.get_mut(&ino) {
            d.allocdirects.retain(|a| !set.contains(&a.bno));
        }
        for b in freed {
            self.allocindirs.remove(b);
            self.newblks.remove(b);
            if let Some(pd) = self.pagedeps.remove(b) {
                for d in &pd.diradds {
                    Self::name_done(&mut self.pending_names, d.ino);
                }
                orphans.extend(pd.diradds.into_iter().flat_map(|d| d.on_complete));
                orphans.extend(pd.dirrems.into_iter().flat_map(|r| r.tasks));
            }
        }
        self.allocindirs.retain(|_, v| {
            v.retain(|_, a| !set.contains(&a.bno));
            !v.is_empty()
        });
        orphans
    }

    /// The inode is being freed: its dependency record goes.
    pub fn forget_inode(&mut self, ino: u32) {
        self.inodedeps.remove(&ino);
    }

    fn name_done(names: &mut HashMap<u32, u32>, ino: u32) {
        if let Some(n) = names.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                names.remove(&ino);
            }
        }
    }

    /// Directory blocks holding entries naming `ino` that are not on disk yet, with their
    /// directories.
    pub fn pending_name_blocks(&self, ino: u32) -> Vec<(u64, u32)> {
        if !self.pending_names.contains_key(&ino) {
            return Vec::new();
        }
        self.pagedeps
            .iter()
            .filter(|(_, pd)| pd.diradds.iter().any(|d| d.ino == ino))
            .filter_map(|(&b, _)| self.block_dir.get(&b).map(|&d| (b, d)))
            .collect()
    }

    /// True if the inode's own dependencies (bitmap bit, new block pointers) are all on disk.
    pub fn inode_settled(&self, ino: u32) -> bool {
        self.inodedeps.get(&ino).is_none_or(|d| d.bitmap_done && d.allocdirects.is_empty())
    }

    /// The current epoch, after making sure `inos` are tracked (fsync's starting point).
    pub fn track(&mut self, inos: &[u32]) -> Epoch {
        for &i in inos {
            self.inodedep(i);
        }
        self.tick()
    }

    /// True if the inode was written, as it is in memory, after `epoch`.
    pub fn written_since(&self, ino: u32, epoch: Epoch) -> bool {
        self.inodedeps.get(&ino).is_some_and(|d| d.disk_epoch > epoch)
    }

    /// True if an indirect block still has new pointers not on disk.
    pub fn indir_pending(&self, bno: u64) -> bool {
        self.allocindirs.contains_key(&bno)
    }

    /// True if an entry naming `ino` is not on disk yet.
    pub fn has_pending_name(&self, ino: u32) -> bool {
        self.pending_names.contains_key(&ino)
    }

    pub fn add_pending_unlink(&mut self, ino: u32) {
        *self.pending_unlinks.entry(ino).or_insert(0) += 1;
    }

    pub fn take_pending_unlink(&mut self, ino: u32) {
        if let Some(n) = self.pending_unlinks.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                self.pending_unlinks.remove(&ino);
            }
        }
    }

    /// Blocks and inodes that will return to the free maps once writes complete (statfs counts
    /// them as free, as FreeBSD's pending counts do).
    pub fn pending_frees(&self) -> (u64, u64) {
        let mut blocks = 0;
        let mut inodes = 0;
        for t in self.waiting.values().map(|w| &w.task).chain(self.tasks.iter()) {
            match t {
                Task::FreeBlks { blocks: b, .. } => blocks += b.len() as u64,
                Task::FreeFile { .. } => inodes += 1,
                _ => {}
            }
        }
        (blocks, inodes)
    }

    /// Takes the tasks that only return blocks and inodes to the free maps.
    pub fn take_free_tasks(&mut self) -> Vec<Task> {
        let (free, rest): (Vec<Task>, Vec<Task>) = std::mem::take(&mut self.tasks)
            .into_iter()
            .partition(|t| matches!(t, Task::FreeBlks { .. } | Task::FreeFile { .. }));
        self.tasks = rest;
        free
    }

    pub fn pending_unlinks_of(&self, ino: u32) -> u32 {
        self.pending_unlinks.get(&ino).copied().unwrap_or(0)
    }

    // ------------------------------------------------------------ readiness

    fn newblk_ready(&self, bno: u64) -> bool {
        self.newblks.get(&bno).is_none_or(|n| n.bitmap_done && n.written)
    }

    fn diradd_ready(&self, da: &DirAdd) -> bool {
        let Some(id) = self.inodedeps.get(&da.ino) else { return true };
        if !id.bitmap_done || id.disk_epoch <= da.epoch {
            return false;
        }
        if let Some(p) = da.parent {
            if self.inodedeps.get(&p).is_some_and(|pd| pd.disk_epoch <= da.epoch) {
                return false;
            }
        }
        !(da.mkdir && id.allocdirects.iter().any(|a| a.lbn == 0))
    }

    fn is_inode_block(&self, bno: u64) -> bool {
        let cg = self.sb.cg_of_block(bno);
        bno >= self.sb.cg_itable_block(cg) && bno < self.sb.cg_data_start(cg)
    }

    // ------------------------------------------------------------ the write hooks

    /// Rolls back, in the copy about to be written, everything whose prerequisites are not on
    /// disk, and notes what the write will carry.
    pub fn before_write(&mut self, bno: u64, copy: &mut [u8]) {
        let epoch = self.tick();
        let mut inf = Inflight { epoch, ..Default::default() };
        let bs = self.sb.block_size as u64;
        if self.is_inode_block(bno) {
            let cg = self.sb.cg_of_block(bno);
            let ipb = self.sb.inodes_per_block();
            let first = cg * self.sb.inodes_per_group + (bno - self.sb.cg_itable_block(cg)) as u32 * ipb;
            for ino in first..first + ipb {
                let Some(id) = self.inodedeps.get(&ino) else { continue };
                let off = (ino - first) as usize * DINODE_SIZE;
                let raw = &mut copy[off..off + DINODE_SIZE];
                if !id.bitmap_done {
                    // Not allocated on disk yet: the dinode goes out as a free one.
                    raw.fill(0);
                    inf.rolled_back = true;
                    continue;
                }
                let mut d: Option<Dinode> = None;
                for a in &id.allocdirects {
                    if self.allocdirect_ready(a) {
                        inf.direct_done.push((ino, a.bno));
                        continue;
                    }
                    let dd = d.get_or_insert_with(|| Dinode::decode(raw));
                    match a.slot {
                        PtrSlot::Direct(i) if dd.db[i] == a.bno => dd.db[i] = 0,
                        PtrSlot::Indirect(l) if dd.ib[l] == a.bno => dd.ib[l] = 0,
                        _ => continue,
                    }
                    if id.is_dir {
                        dd.size = dd.size.min(a.lbn * bs);
                    }
                    inf.rolled_back = true;
                }
                if let Some(dd) = d {
                    dd.encode(raw);
                }
                inf.inodes_written.push(ino);
            }
        }
        if let Some(list) = self.allocindirs.get(&bno) {
            for a in list.values() {
                if self.newblk_ready(a.bno) {
                    inf.indir_done.push(a.bno);
                } else if ind_get(copy, a.idx) == a.bno {
                    ind_set(copy, a.idx, 0);
                    inf.rolled_back = true;
                }
            }
        }
        if let Some(pd) = self.pagedeps.get(&bno) {
            // A new directory block is not reachable until the pointer to it is on disk: its
            // entries wait for that too (FreeBSD's newdirblk), or a rename's old name could go
            // while the new one is still unreachable.
            let reachable = !self.newblks.contains_key(&bno);
            for da in &pd.diradds {
                if reachable && self.diradd_ready(da) {
                    inf.diradds_done.push(da.off);
                } else {
                    dirent_set_ino(copy, da.off, da.old_ino);
                    if da.old_ino != 0 {
                        dirent_set_type(copy, da.off, da.old_dtype);
                    }
                    inf.rolled_back = true;
                }
            }
        }
        if inf.rolled_back {
            self.stats.rollbacks += 1;
        }
        self.inflight.insert(bno, inf);
    }

    /// The write of `bno` is durable: satisfied dependencies retire and the work they held back
    /// goes on the task list. Returns true if the copy was rolled back (the buffer stays dirty).
    pub fn after_write(&mut self, bno: u64) -> bool {
        let inf = self.inflight.remove(&bno).unwrap_or_default();
        // A group header: its new inodes and blocks are now allocated on disk.
        if bno % self.sb.blocks_per_group as u64 == 1 {
            if let Some(BmSafeMap { inodedeps, newblks }) = self.bmsafemap.remove(&self.sb.cg_of_block(bno)) {
                for i in inodedeps {
                    if let Some(d) = self.inodedeps.get_mut(&i) {
                        d.bitmap_done = true;
                    }
                }
                for b in newblks {
                    if let Some(n) = self.newblks.get_mut(&b) {
                        n.bitmap_done = true;
                    }
                }
            }
        }
        // A new block's first contents.
        if let Some(n) = self.newblks.get_mut(&bno) {
            n.written = true;
        }
        for ino in inf.inodes_written {
            if let Some(d) = self.inodedeps.get_mut(&ino) {
                d.disk_epoch = d.disk_epoch.max(inf.epoch);
            }
        }
        for (ino, b) in inf.direct_done {
            if let Some(d) = self.inodedeps.get_mut(&ino) {
                d.allocdirects.retain(|a| a.bno != b);
            }
            self.newblks.remove(&b);
        }
        if !inf.indir_done.is_empty() {
            if let Some(v) = self.allocindirs.get_mut(&bno) {
                let done: HashSet<u64> = inf.indir_done.iter().copied().collect();
                v.retain(|_, a| !done.contains(&a.bno));
                if v.is_empty() {
                    self.allocindirs.remove(&bno);
                }
            }
            for b in &inf.indir_done {
                self.newblks.remove(b);
            }
        }
        if let Some(pd) = self.pagedeps.get_mut(&bno) {
            for off in &inf.diradds_done {
                if let Some(i) = pd.diradds.iter().position(|d| d.off == *off) {
                    let da = pd.diradds.remove(i);
                    Self::name_done(&mut self.pending_names, da.ino);
                    self.tasks.extend(da.on_complete);
                }
            }
            let (done, keep): (Vec<DirRem>, Vec<DirRem>) =
                std::mem::take(&mut pd.dirrems).into_iter().partition(|r| r.epoch < inf.epoch);
            pd.dirrems = keep;
            for r in done {
                self.tasks.extend(r.tasks);
            }
            if pd.diradds.is_empty() && pd.dirrems.is_empty() {
                self.pagedeps.remove(&bno);
                self.block_dir.remove(&bno);
            }
        }
        if let Some(ids) = self.waiting_on.remove(&bno) {
            let mut still = Vec::new();
            for id in ids {
                let Some(w) = self.waiting.get_mut(&id) else { continue };
                if w.epoch >= inf.epoch {
                    still.push(id);
                    continue;
                }
                w.remaining.remove(&bno);
                if w.remaining.is_empty() {
                    let w = self.waiting.remove(&id).expect("present");
                    self.tasks.push(w.task);
                }
            }
            if !still.is_empty() {
                self.waiting_on.insert(bno, still);
            }
        }
        // Inode records with nothing left to track go (checked now and then: it is a scan).
        self.writes_seen += 1;
        if self.inodedeps.len() > 4096 && self.writes_seen.is_multiple_of(1024) {
            let referenced: HashSet<u32> = self
                .pagedeps
                .values()
                .flat_map(|p| p.diradds.iter().flat_map(|d| std::iter::once(d.ino).chain(d.parent)))
                .collect();
            self.inodedeps.retain(|ino, d| !(d.bitmap_done && d.allocdirects.is_empty()) || referenced.contains(ino));
        }
        inf.rolled_back
    }
}
