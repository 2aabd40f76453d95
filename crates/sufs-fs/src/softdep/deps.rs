//! The dependency structures of soft updates (the paper's Table 1, FreeBSD's softdep.h): each
//! starts with a `WorkList` header, its kind and its `DepState`.

use crate::fixed_hash::HashMap;

pub type Epoch = u64;

bitflags::bitflags! {
    /// The state bits of a dependency (FreeBSD's `wk_state`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct DepState: u16 {
        /// Recorded against the buffer that holds the change.
        const ATTACHED = 1;
        /// What it waits for outside its own block is on disk (a bitmap bit; for an entry, the
        /// inode it names).
        const DEPCOMPLETE = 1 << 1;
        /// Its own block is on disk (a new block's first contents; an entry's block carrying it).
        const COMPLETE = 1 << 2;
        /// An entry that changes an existing one (rename over a name): rolled back to the old inode.
        const DIRCHG = 1 << 3;
        /// mkdir: the new directory's first block is not yet on disk and pointed to.
        const MKDIR_BODY = 1 << 4;
        /// mkdir: the parent's raised link count is not yet on disk.
        const MKDIR_PARENT = 1 << 5;
        /// A new entry whose name an old entry of the same directory still has on disk (a
        /// rename's hidden old name): it waits for that one's removal, or a lookup after a
        /// crash would find the old entry first.
        const NAMESAKE = 1 << 6;
        const ALLCOMPLETE = Self::ATTACHED.bits() | Self::DEPCOMPLETE.bits() | Self::COMPLETE.bits();
    }
}

/// The kinds of Table 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepKind {
    BmSafeMap,
    InodeDep,
    NewBlk,
    AllocDirect,
    IndirDep,
    AllocIndir,
    PageDep,
    DirAdd,
    Mkdir,
    DirRem,
    FreeBlks,
    FreeFrag,
    FreeFile,
}

/// The header every dependency starts with (FreeBSD's `struct worklist`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkList {
    pub kind: DepKind,
    pub state: DepState,
}

impl WorkList {
    pub(crate) fn new(kind: DepKind, state: DepState) -> WorkList {
        WorkList { kind, state }
    }
}

/// Where a pointer lives in a dinode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PtrSlot {
    Direct(usize),
    Indirect(usize),
    /// A block of the extended-attribute area (`extb[i]`; FreeBSD's extupdt list).
    Ext(usize),
}

/// A newly allocated block: DEPCOMPLETE once its bitmap bit is on disk, COMPLETE once its first
/// contents are.
#[derive(Debug, Clone, Copy)]
pub struct NewBlk {
    pub wk: WorkList,
    /// When it was made: a run extended in place is new again, and a write whose copy was made
    /// before that does not carry its contents.
    pub epoch: Epoch,
    /// The indirect block and slot whose `AllocIndir` points to it, so that freeing the block
    /// finds that dependency without a scan of every indirect block's.
    pub indir: Option<(u64, usize)>,
}

/// A new block pointer in a dinode (FreeBSD's `struct allocdirect`): the slot now points to
/// `bno`, a run of `new_size` bytes, where the disk may still hold `old_bno`, a run of
/// `old_size` bytes (0 and 0 for a slot that held nothing). A direct block may first be a run of
/// fragments that is later extended in place (`old_bno == bno`) or moved to a larger run, and
/// eventually to a full block; until the new run is safe, an inode write rolls the slot back to
/// the old run and, for a fragment, the size back to it. Sizes are in bytes, as FreeBSD keeps
/// them; with one fragment a block they are 0 or a full block.
#[derive(Debug, Clone)]
pub struct AllocDirect {
    #[allow(dead_code)] // the header every dependency carries (its kind and state), shown by Debug
    pub wk: WorkList,
    /// Which allocdirect this is: the epoch it was made in (two for one slot may name one run,
    /// when the second extends the first's in place).
    pub seq: Epoch,
    pub slot: PtrSlot,
    /// First logical block the pointer maps (for the size roll-back of a directory).
    pub lbn: u64,
    /// The new run (`ad_newblkno`).
    pub bno: u64,
    /// The run the disk may hold (`ad_oldblkno`): 0 for a new pointer.
    pub old_bno: u64,
    pub new_size: u32,
    pub old_size: u32,
    /// The old run, when the block moved: freed once an inode write carrying the new run is on
    /// disk (`ad_freefrag`).
    pub freefrag: Option<FreeFrag>,
    /// A new directory's first block (it holds ".."): pointed to on disk only once the parent's
    /// raised link count is on disk (MKDIR_PARENT on the body too): the parent, until its
    /// `BodyParent` op completes.
    pub parent: Option<u32>,
}

impl AllocDirect {
    /// Rolled back, the slot holds a fragment (not nothing, not a full block): the on-disk inode
    /// may claim nothing past it.
    pub(crate) fn old_is_fragment(&self, bsize: u32) -> bool {
        self.old_size != 0 && self.old_size != bsize
    }
}

/// freefrag: a run of fragments a moved block no longer uses, returned to the free map once no
/// inode write can name it (FreeBSD's `struct freefrag`). `frags` counts fragments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreeFrag {
    pub ino: u32,
    pub bno: u64,
    pub frags: u32,
}

/// A new block pointer in an indirect block.
#[derive(Debug, Clone, Copy)]
pub struct AllocIndir {
    #[allow(dead_code)] // the header every dependency carries (its kind and state), shown by Debug
    pub wk: WorkList,
    pub idx: usize,
    pub bno: u64,
}

/// An indirect block with new pointers not yet safe to write.
#[derive(Debug)]
pub struct IndirDep {
    #[allow(dead_code)] // the header every dependency carries (its kind and state), shown by Debug
    pub wk: WorkList,
    pub allocindirs: HashMap<usize, AllocIndir>,
    /// The block as last handed to the device: every pointer in it complete. Present while the
    /// disk holds a rolled-back version.
    pub safe_copy: Option<Box<[u8]>>,
}

/// An entry of a `PageDep` (directory block, offset, the epoch the entry was made in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirAddRef {
    pub dirblk: u64,
    pub off: usize,
    pub epoch: Epoch,
}

/// mkdir's extra requirements of its entry: MKDIR_BODY (on the new directory's inodedep) or
/// MKDIR_PARENT (on the parent's).
#[derive(Debug, Clone, Copy)]
pub struct Mkdir {
    pub wk: WorkList,
    pub diradd: DirAddRef,
}

/// What waits on an inode's write (an inodedep's pending ops).
#[derive(Debug, Clone, Copy)]
pub enum PendingOp {
    /// The entry naming the inode: DEPCOMPLETE once the inode is written after it was made.
    DirAdd(DirAddRef),
    Mkdir(Mkdir),
    /// On a parent: the first block of its new subdirectory `child` (whose ".." names it) may be
    /// pointed to once the parent's raised link count, made before `epoch`, is written. Kept
    /// here, rather than compared with the parent's last write, so that the parent's record
    /// cannot be dropped as idle before it is met (a record made again after that knows no
    /// earlier write, and the child's pointer would wait for a write that may never come).
    BodyParent {
        child: u32,
        epoch: Epoch,
    },
}

impl PendingOp {
    /// Its entry's directory block moved from `old` to `new` (a directory's run of fragments).
    pub(crate) fn moved(&mut self, old: u64, new: u64) {
        let r = match self {
            PendingOp::DirAdd(r) => r,
            PendingOp::Mkdir(m) => &mut m.diradd,
            PendingOp::BodyParent { .. } => return,
        };
        if r.dirblk == old {
            r.dirblk = new;
        }
    }

    /// The entry the op belongs to (none for `BodyParent`).
    pub(crate) fn diradd(&self) -> Option<DirAddRef> {
        match self {
            PendingOp::DirAdd(r) => Some(*r),
            PendingOp::Mkdir(m) => Some(m.diradd),
            PendingOp::BodyParent { .. } => None,
        }
    }
}

#[derive(Debug)]
pub struct InodeDep {
    /// DEPCOMPLETE: the inode's bitmap bit is on disk (not yet only for a newly allocated one).
    pub wk: WorkList,
    pub is_dir: bool,
    /// Capture epoch of the last write of its block that carried this dinode as it was in memory.
    pub disk_epoch: Epoch,
    /// Pending ops: entries and mkdir requirements waiting for this inode to be written.
    pub pending: Vec<PendingOp>,
    /// Buf wait: work that runs once the inode's block has been written after the epoch.
    pub bufwait: Vec<(Epoch, Task)>,
    /// Inode wait: such work recorded before the dinode was copied into its buffer.
    pub inowait: Vec<Task>,
    /// Buffer update: new pointers in the dinode as its buffer holds it.
    pub inoupdt: Vec<AllocDirect>,
    /// Incore update: new pointers only in the in-memory dinode so far.
    pub newinoupdt: Vec<AllocDirect>,
    /// The extended-attribute area the disk holds (`extsize`, `extb`) while a new one's blocks
    /// (`PtrSlot::Ext` allocdirects) are not ready: an inode write rolls the whole area back to
    /// it, as FreeBSD rolls `di_extb` back to `ad_oldblkno`.
    pub ext_old: Option<(u32, [u64; crate::format::NXADDR])>,
    /// Ext wait: the old area's blocks, freed once the inode is on disk with its new area
    /// (FreeBSD hangs them on the allocdirect as its freefrag).
    pub extwait: Vec<Task>,
    /// fsyncs in progress that hold this record (`Softdep::hold_for_fsync`): they ask
    /// `written_since` of it, so it stays, idle or not, until the last of them ends.
    pub fsyncs: u32,
    /// What the table counted for it at its last count (`InodeTable`), and whether it changed
    /// since.
    pub(crate) counted: usize,
    pub(crate) touched: bool,
}

impl InodeDep {
    pub(crate) fn new(state: DepState, is_dir: bool) -> InodeDep {
        InodeDep {
            wk: WorkList::new(DepKind::InodeDep, state),
            is_dir,
            disk_epoch: 0,
            pending: Vec::new(),
            bufwait: Vec::new(),
            inowait: Vec::new(),
            inoupdt: Vec::new(),
            newinoupdt: Vec::new(),
            ext_old: None,
            extwait: Vec::new(),
            fsyncs: 0,
            counted: 0,
            touched: false,
        }
    }

    pub(crate) fn bitmap_done(&self) -> bool {
        self.wk.state.contains(DepState::DEPCOMPLETE)
    }

    pub(crate) fn allocdirects(&self) -> impl Iterator<Item = &AllocDirect> {
        self.inoupdt.iter().chain(&self.newinoupdt)
    }

    /// True while a new extended-attribute area is not on disk.
    pub(crate) fn ext_pending(&self) -> bool {
        self.allocdirects().any(|a| matches!(a.slot, PtrSlot::Ext(_)))
    }

    /// What it counts against soft updates' memory bound: itself, each pending op and each
    /// waiting task, and each new pointer holding a fragment to free.
    pub(crate) fn records(&self) -> usize {
        let attached = self.allocdirects().filter(|a| a.freefrag.is_some()).count();
        1 + self.pending.len() + self.bufwait.len() + self.inowait.len() + self.extwait.len() + attached
    }

    /// Nothing to track: allocated on disk, no new pointers, no work waiting on it.
    pub(crate) fn idle(&self) -> bool {
        self.bitmap_done() && self.records_nothing()
    }

    /// Idle and held by no fsync: the record may go (FreeBSD's `free_inodedep`); a later
    /// dependency makes a new one.
    pub(crate) fn removable(&self) -> bool {
        self.idle() && self.fsyncs == 0
    }

    /// No new pointers and no work waiting on it (its bit may still be on its way to disk).
    pub(crate) fn records_nothing(&self) -> bool {
        self.inoupdt.is_empty()
            && self.newinoupdt.is_empty()
            && self.pending.is_empty()
            && self.bufwait.is_empty()
            && self.inowait.is_empty()
            && self.extwait.is_empty()
    }
}

/// freeblks: blocks that return to the free map once the pointers to them are nullified on
/// disk; `then` runs after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeBlks {
    pub ino: u32,
    pub blocks: Vec<u64>,
    pub then: Vec<Task>,
}

/// freefile: an inode that returns to the free map once its cleared dinode is on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeFile {
    pub ino: u32,
    pub is_dir: bool,
}

/// A work item: what the work list holds once the writes it waited for are done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Task {
    /// dirrem: the name is gone on disk; drop one link of the inode.
    DropLink(u32),
    /// dirrem of rmdir (or a directory replaced by rename): the child's name is gone on disk;
    /// free the child, and once its block pointers are nullified on disk, the parent (if any)
    /// loses the link of "..".
    RmdirChild {
        child: u32,
        parent: Option<u32>,
    },
    FreeBlks(FreeBlks),
    /// freefrag: the old run of a moved block may go to the free map.
    FreeFrag(FreeFrag),
    FreeFile(FreeFile),
    /// A name hidden from lookups but kept on disk (rename's old name, until the new name is on
    /// disk: rule 3; a removed directory's name, until the names it still holds may go) is now
    /// removed, once `wait` allows; `tasks` follow that removal to disk.
    RemoveOldName {
        dir: u32,
        wait: NameWait,
        bno: u64,
        lbn: u64,
        off: usize,
        tasks: Vec<Task>,
    },
    /// The hidden name `seq` of `name` in `dir` is gone on disk: the new entries of that name
    /// that waited for it and no other may be written (their NAMESAKE is cleared).
    NamesakeGone {
        dir: u32,
        name: Vec<u8>,
        seq: u64,
    },
}

/// What a hidden name's removal waits for besides its own trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameWait {
    /// A rename's new name is in this directory: its path must be reachable on disk.
    NewPath(u32),
    /// The name is of this removed directory: the hidden names it holds must go first (their
    /// files are reachable elsewhere on disk only once those names may go).
    Emptied(u32),
}

impl Task {
    pub fn kind(&self) -> DepKind {
        match self {
            Task::FreeBlks(_) => DepKind::FreeBlks,
            Task::FreeFrag(_) => DepKind::FreeFrag,
            Task::FreeFile(_) => DepKind::FreeFile,
            _ => DepKind::DirRem,
        }
    }
}

/// A new (or changed, DIRCHG) directory entry.
#[derive(Debug)]
pub struct DirAdd {
    pub wk: WorkList,
    pub off: usize,
    pub ino: u32,
    /// What the entry held on disk before (0 for a new entry).
    pub old_ino: u32,
    pub old_dtype: u8,
    pub epoch: Epoch,
    /// mkdir: the parent, whose raised link count must be on disk (MKDIR_PARENT).
    pub parent: Option<u32>,
    /// Work items that run once the entry is on disk (a replaced inode's dirrem).
    pub on_complete: Vec<Task>,
}

impl DirAdd {
    /// Safe to write: the inode is on disk and no mkdir requirement is left.
    pub(crate) fn ready(&self) -> bool {
        self.wk.state.contains(DepState::DEPCOMPLETE)
            && !self.wk.state.intersects(DepState::MKDIR_BODY | DepState::MKDIR_PARENT | DepState::NAMESAKE)
    }
}

/// A directory block's `DirAdd`s by offset. A hash map (FreeBSD's `pd_diraddhd` is a hash
/// table too): a sorted tree split a node, with an allocation, every few creates, a fifth of
/// soft updates' part of a create. Every walk over them goes in the order of their offsets
/// (`in_order`, `into_in_order`), so what a write rolls back and which work is queued first are
/// what a sorted map gave.
#[derive(Debug, Default)]
pub struct DirAdds {
    map: HashMap<usize, DirAdd>,
}

impl DirAdds {
    /// Records `da` at its offset; the one it replaces, if any.
    pub fn insert(&mut self, da: DirAdd) -> Option<DirAdd> {
        self.map.insert(da.off, da)
    }

    pub fn get(&self, off: &usize) -> Option<&DirAdd> {
        self.map.get(off)
    }

    pub fn get_mut(&mut self, off: &usize) -> Option<&mut DirAdd> {
        self.map.get_mut(off)
    }

    pub fn remove(&mut self, off: &usize) -> Option<DirAdd> {
        self.map.remove(off)
    }

    pub fn contains_key(&self, off: &usize) -> bool {
        self.map.contains_key(off)
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The entries by offset, lowest first.
    pub fn in_order(&self) -> Vec<&DirAdd> {
        let mut v: Vec<&DirAdd> = self.map.values().collect();
        v.sort_unstable_by_key(|da| da.off);
        v
    }

    /// The entries, taken, by offset, lowest first.
    pub fn into_in_order(self) -> Vec<DirAdd> {
        let mut v: Vec<DirAdd> = self.map.into_values().collect();
        v.sort_unstable_by_key(|da| da.off);
        v
    }
}

/// The entries (`DirAdd`s) not yet on disk that name one inode, counted by the directory block
/// holding them, so that fsync finds an inode's pending names without a scan of every
/// directory block's dependencies. Nearly always one block, kept inline: a sorted tree of
/// (inode, block) split a node, with an allocation, every few creates.
///
/// Invariant: `one` counts at least one entry while any is pending, and each block is counted
/// once, in `one` or in `rest`, with a count above zero.
#[derive(Debug, Default)]
pub struct PendingNames {
    one: (u64, u32),
    rest: Vec<(u64, u32)>,
}

impl PendingNames {
    /// One more entry in block `blk`.
    pub fn add(&mut self, blk: u64) {
        self.add_n(blk, 1);
    }

    fn add_n(&mut self, blk: u64, n: u32) {
        assert!(n > 0, "no entry added in block {blk}");
        if self.one.1 == 0 {
            debug_assert!(self.rest.is_empty(), "pending names past an empty first block");
            self.one = (blk, n);
        } else if self.one.0 == blk {
            self.one.1 += n;
        } else if let Some(e) = self.rest.iter_mut().find(|e| e.0 == blk) {
            e.1 += n;
        } else {
            self.rest.push((blk, n));
        }
    }

    /// One entry of block `blk` fewer (it must count one); true if none is left at all.
    pub fn remove(&mut self, blk: u64) -> bool {
        self.take(blk, Some(1));
        self.is_empty()
    }

    /// Takes `n` (all, if None) of block `blk`'s entries off its count; how many it took.
    fn take(&mut self, blk: u64, n: Option<u32>) -> u32 {
        let e = if self.one.0 == blk && self.one.1 > 0 {
            &mut self.one
        } else {
            self.rest.iter_mut().find(|e| e.0 == blk).unwrap_or_else(|| panic!("no pending entry in block {blk}"))
        };
        let took = n.unwrap_or(e.1);
        assert!(took <= e.1, "{took} entries taken off block {blk}'s {}", e.1);
        e.1 -= took;
        if e.1 == 0 {
            if self.one.1 == 0 {
                self.one = self.rest.pop().unwrap_or_default();
            } else {
                self.rest.retain(|e| e.1 > 0);
            }
        }
        took
    }

    /// The entries in block `old` are in block `new` now (a directory's run moved).
    pub fn moved(&mut self, old: u64, new: u64) {
        if old != new && self.blocks().any(|b| b == old) {
            let n = self.take(old, None);
            self.add_n(new, n);
        }
    }

    /// The blocks holding the entries.
    pub fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        std::iter::once(self.one).filter(|e| e.1 > 0).chain(self.rest.iter().copied()).map(|e| e.0)
    }

    pub fn is_empty(&self) -> bool {
        self.one.1 == 0
    }
}

/// A removed entry: its work items run once a write after the removal is on disk, made while
/// the disk's inode names the block (FreeBSD's newdirblk: in a directory block whose pointer is
/// not on disk yet, a moved run's say, the disk still holds the name in the old run).
#[derive(Debug)]
pub struct DirRem {
    #[allow(dead_code)] // the header every dependency carries (its kind and state), shown by Debug
    pub wk: WorkList,
    pub epoch: Epoch,
    pub tasks: Vec<Task>,
}

#[derive(Debug)]
pub struct PageDep {
    #[allow(dead_code)] // the header every dependency carries (its kind and state), shown by Debug
    pub wk: WorkList,
    /// The block's new entries not yet on disk, by offset (at most one at each: FreeBSD hashes
    /// a pagedep's diradds by offset, `pd_diraddhd`; a list searched for each new entry cost a
    /// directory of 100,000 names an eighth of each create).
    pub diradds: DirAdds,
    pub dirrems: Vec<DirRem>,
}

impl Default for PageDep {
    fn default() -> PageDep {
        PageDep {
            wk: WorkList::new(DepKind::PageDep, DepState::ATTACHED),
            diradds: Default::default(),
            dirrems: Vec::new(),
        }
    }
}

/// A new block and the epoch its `NewBlk` was made in.
pub type NewBlkRef = (u64, Epoch);

/// A cylinder group's bitmap block: the new inodes and blocks waiting for it to reach disk.
#[derive(Debug)]
pub struct BmSafeMap {
    #[allow(dead_code)] // the header every dependency carries (its kind and state), shown by Debug
    pub wk: WorkList,
    pub inodedeps: Vec<u32>,
    /// New blocks with the epoch of their `NewBlk` (a run extended in place is new again).
    pub newblks: Vec<NewBlkRef>,
}

impl Default for BmSafeMap {
    fn default() -> BmSafeMap {
        BmSafeMap {
            wk: WorkList::new(DepKind::BmSafeMap, DepState::ATTACHED),
            inodedeps: Vec::new(),
            newblks: Vec::new(),
        }
    }
}

/// What a write in flight carried, to be retired when it completes.
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    pub(crate) epoch: Epoch,
    pub(crate) rolled_back: bool,
    pub(crate) inodes_written: Vec<u32>,
    /// The new pointers the copy carries: (inode, the allocdirect's `seq`, its block).
    pub(crate) direct_done: Vec<(u32, Epoch, u64)>,
    pub(crate) indir_done: Vec<u64>,
    /// Entries the copy carries: (offset, the diradd's epoch). An entry removed and made again
    /// at the same offset while the write is in flight has a later epoch: not carried.
    pub(crate) diradds_done: Vec<(usize, Epoch)>,
    /// A group header: the inodes and blocks its bitmaps carried (allocations made while the
    /// write is in flight are not in the copy, and stay waiting).
    pub(crate) bmsafe: Option<(Vec<u32>, Vec<NewBlkRef>)>,
    /// The block was new (a `NewBlk`, made in this epoch) when its copy was made: this write
    /// carries its first contents (a run extended in place after the copy is new again).
    pub(crate) first_contents: Option<Epoch>,
    /// A directory block the disk's inode did not name yet when its copy was made (a new,
    /// moved or extended run): the removals it carries are not yet removals on disk.
    pub(crate) unreachable: bool,
}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct SoftdepStats {
    pub rollbacks: u64,
    pub tasks_run: u64,
    pub max_deps: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(off: usize, ino: u32) -> DirAdd {
        let wk = WorkList::new(DepKind::DirAdd, DepState::ATTACHED);
        DirAdd { wk, off, ino, old_ino: 0, old_dtype: 0, epoch: ino as Epoch, parent: None, on_complete: Vec::new() }
    }

    #[test]
    fn pending_names_count_entries_by_block() {
        let mut p = PendingNames::default();
        assert!(p.is_empty());
        p.add(10);
        p.add(10);
        p.add(20);
        p.add(30);
        assert_eq!(p.blocks().collect::<Vec<_>>(), [10, 20, 30]);
        assert!(!p.remove(10), "one of block 10's two entries gone");
        assert!(!p.remove(10));
        assert_eq!(p.blocks().collect::<Vec<_>>(), [30, 20], "the first block taken by another");
        // A run moved onto a block already counted adds to its count.
        p.moved(20, 30);
        assert_eq!(p.blocks().collect::<Vec<_>>(), [30]);
        p.moved(99, 40);
        assert_eq!(p.blocks().collect::<Vec<_>>(), [30], "no entry in a block moved from elsewhere");
        assert!(!p.remove(30));
        assert!(p.remove(30), "the last entry gone");
        assert_eq!(p.blocks().count(), 0);
        p.add(50);
        assert_eq!(p.blocks().collect::<Vec<_>>(), [50], "counted again from nothing");
    }

    #[test]
    #[should_panic(expected = "no pending entry in block 7")]
    fn a_name_removed_from_a_block_holding_none_stops() {
        let mut p = PendingNames::default();
        p.add(5);
        p.remove(7);
    }

    /// Entries made at offsets in any order are walked lowest offset first, taken or not; one
    /// made again at an offset replaces the first and gives it back.
    #[test]
    fn a_blocks_entries_are_walked_by_offset() {
        let mut d = DirAdds::default();
        let offs = [4096usize, 12, 0, 700, 24, 32_000, 512];
        for (i, &off) in offs.iter().enumerate() {
            assert!(d.insert(entry(off, i as u32 + 10)).is_none());
        }
        let mut sorted = offs.to_vec();
        sorted.sort_unstable();
        assert_eq!(d.in_order().iter().map(|e| e.off).collect::<Vec<_>>(), sorted);
        assert_eq!(d.insert(entry(700, 99)).map(|e| e.ino), Some(13), "the entry replaced");
        assert_eq!(d.remove(&12).map(|e| e.ino), Some(11));
        assert!(!d.contains_key(&12) && d.get(&700).is_some_and(|e| e.ino == 99));
        sorted.retain(|&o| o != 12);
        assert_eq!(d.len(), sorted.len());
        assert_eq!(d.into_in_order().iter().map(|e| e.off).collect::<Vec<_>>(), sorted);
    }
}
