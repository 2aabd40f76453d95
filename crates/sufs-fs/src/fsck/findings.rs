//! The findings: every problem fsck reports is a value, with the numbers that locate it and a
//! `Class` that says whether a crash of a correctly ordered file system may leave it (soft updates
//! §4: leaks, link counts too high, stale counts; FFS's two windows of a directory rename).
//! fsck_ffs prints each problem where it meets it (`pwarn`, `pfatal`) and asks `reply()` at once;
//! here the passes only record findings (and the fix each calls for, `repair::Fixes`), the caller
//! judges them, and `repair` applies the fixes apart.

use std::fmt;

/// Whether a finding may be left by a crash of a correctly ordered file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Allowed,
    Violation,
}

/// One problem found, with the numbers that locate it. `at` fields are byte offsets in the
/// directory block holding the entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The primary superblock is damaged or disagrees with the group headers: the geometry was
    /// taken from elsewhere (a copy, or the group headers), and repair rewrites the primary.
    BadSuperblock {
        what: String,
    },
    /// The last group's header says `extra` blocks more than the superblock gives it, all free:
    /// a growfs interrupted before it wrote the superblock (`fs::growfs`). Repair sets the
    /// header back to the superblock's size.
    GrowInterrupted {
        cg: u32,
        extra: u32,
    },
    /// A group header that does not decode, or whose size disagrees with the superblock.
    BadCgHeader {
        cg: u32,
        what: String,
    },
    /// A group header count that disagrees with its own bitmaps or inodes.
    CgCountWrong {
        cg: u32,
        what: &'static str,
        stored: u64,
        actual: u64,
    },
    /// A superblock summary count that is not the sum over the groups.
    SummaryWrong {
        what: &'static str,
        stored: u64,
        actual: u64,
    },
    /// The superblock's snapshot list names an inode that is not a snapshot of this file system
    /// (not in use, not flagged as one, not its size) or names one twice: mount would refuse it.
    BadSnapshotList {
        slot: usize,
        ino: u32,
        what: &'static str,
    },
    /// The root inode is free or not a directory.
    BadRoot {
        mode: u16,
    },
    BadInode {
        ino: u32,
        what: String,
    },
    /// A block pointer outside the data area.
    BadPointer {
        ino: u32,
        bno: u64,
    },
    /// A block claimed by a second owner (another inode, or a second pointer of the same one).
    DuplicateBlock {
        ino: u32,
        bno: u64,
    },
    BlockCountWrong {
        ino: u32,
        stored: u64,
        actual: u64,
    },
    /// A directory chunk that does not parse, a misplaced "." or "..", or a hole.
    DirCorrupt {
        dir: u32,
        lbn: u64,
        at: usize,
        what: String,
    },
    /// An entry naming an inode out of range or free.
    DanglingEntry {
        dir: u32,
        name: String,
        ino: u32,
        lbn: u64,
        at: usize,
    },
    EntryTypeWrong {
        dir: u32,
        name: String,
        ino: u32,
        stored: u8,
        actual: u8,
    },
    /// The first entry of a directory is not "." naming itself (`stored` 0: missing).
    BadDot {
        dir: u32,
        stored: u32,
    },
    /// The second entry is not ".." naming the parent (`stored` 0: missing). `stored_dir`: the
    /// stored ".." names an allocated directory (a directory moved to another parent whose ".."
    /// is not yet rewritten; allowed).
    BadDotDot {
        dir: u32,
        stored: u32,
        expected: u32,
        stored_dir: bool,
    },
    /// A directory named by a second entry (besides "." and ".."); `names` is how many entries
    /// name it. Two names is the window of a directory rename (the new name is written before
    /// the old one is removed; allowed). More is allowed only if `counted`: the stored link
    /// count covers every name, as when a directory is renamed again before its first rename's
    /// old name has left the disk (each rename raises the count before its new name is written
    /// and lowers it after its old name is gone). `unreachable`: no path from the root names
    /// the directory, so every name it has is inside an unreferenced tree, and the finding is
    /// part of that tree's leak (allowed, as the tree's `UnreferencedInode` is).
    DirMultiplyLinked {
        ino: u32,
        dir: u32,
        name: String,
        names: u32,
        counted: bool,
        unreachable: bool,
    },
    /// An inode in use that no directory entry names.
    UnreferencedInode {
        ino: u32,
        mode: u16,
        size: u64,
    },
    LinkCountTooLow {
        ino: u32,
        stored: u32,
        actual: u32,
    },
    LinkCountTooHigh {
        ino: u32,
        stored: u32,
        actual: u32,
    },
    /// Marked used in the bitmap, owned by nothing.
    LeakedBlock {
        bno: u64,
    },
    /// Owned (or metadata) but clear in the bitmap.
    BlockUsedButFree {
        bno: u64,
    },
    /// Marked used in the bitmap but the dinode is free.
    LeakedInode {
        ino: u32,
    },
    /// An allocated dinode whose bitmap bit is clear.
    InodeUsedButFree {
        ino: u32,
    },
    /// A Block Register reservation that breaks its rules: flagged unmovable but not immutable
    /// or not a regular file, or named outside `/.br`.
    BadReservation {
        ino: u32,
        what: String,
    },
}

impl Finding {
    pub fn class(&self) -> Class {
        use Finding::*;
        match self {
            LeakedBlock { .. }
            | LeakedInode { .. }
            | UnreferencedInode { .. }
            | LinkCountTooHigh { .. }
            | BlockCountWrong { .. }
            | SummaryWrong { .. }
            | GrowInterrupted { .. } => Class::Allowed,
            // The two windows of a directory rename to another parent, which FFS cannot make
            // atomic: the link counts are raised first, so neither leaves a count too low.
            DirMultiplyLinked { names: 2, .. }
            | DirMultiplyLinked { counted: true, .. }
            | BadDotDot { stored_dir: true, .. } => Class::Allowed,
            // A removed directory whose old name is still in another removed directory: soft
            // updates may write the removal of the second directory's name before the block that
            // drops the first one's. Both are leaked, as FreeBSD's fsck treats unreferenced
            // directories under soft updates; a live directory lost this way is a lost name,
            // which the crash tester's promises catch.
            DirMultiplyLinked { unreachable: true, .. } => Class::Allowed,
            BadSuperblock { .. }
            | BadCgHeader { .. }
            | CgCountWrong { .. }
            | BadInode { .. }
            | BadPointer { .. }
            | DuplicateBlock { .. }
            | BlockUsedButFree { .. }
            | InodeUsedButFree { .. }
            | DirCorrupt { .. }
            | DanglingEntry { .. }
            | EntryTypeWrong { .. }
            | BadDot { .. }
            | BadDotDot { .. }
            | DirMultiplyLinked { .. }
            | BadReservation { .. }
            | LinkCountTooLow { .. }
            | BadSnapshotList { .. }
            | BadRoot { .. } => Class::Violation,
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Finding::*;
        match self {
            BadSuperblock { what } => write!(f, "superblock: {what}"),
            BadCgHeader { cg, what } => write!(f, "cylinder group {cg}: bad header: {what}"),
            GrowInterrupted { cg, extra } => write!(
                f,
                "cylinder group {cg}: the header holds {extra} free blocks past the superblock's end (an interrupted growfs)"
            ),
            CgCountWrong { cg, what, stored, actual } => {
                write!(f, "cylinder group {cg}: {what} count {stored}, should be {actual}")
            }
            SummaryWrong { what, stored, actual } => write!(f, "superblock: {what} count {stored}, should be {actual}"),
            BadRoot { mode } => write!(f, "root inode is not a directory (mode {mode:#o})"),
            BadSnapshotList { slot, ino, what } => {
                write!(f, "superblock: snapshot list entry {slot} (inode {ino}): {what}")
            }
            BadInode { ino, what } => write!(f, "inode {ino}: {what}"),
            BadPointer { ino, bno } => {
                write!(f, "inode {ino}: block pointer {bno} outside the data area")
            }
            DuplicateBlock { ino, bno } => {
                write!(f, "inode {ino}: block {bno} already owned (duplicate)")
            }
            BlockCountWrong { ino, stored, actual } => {
                write!(f, "inode {ino}: block count {stored}, should be {actual}")
            }
            DirCorrupt { dir, lbn, at, what } => write!(f, "directory {dir}: block {lbn} offset {at}: corrupt: {what}"),
            DanglingEntry { dir, name, ino, lbn, at } => {
                write!(f, "directory {dir}: entry {name:?} (block {lbn} offset {at}) names free or invalid inode {ino}")
            }
            EntryTypeWrong { dir, name, ino, stored, actual } => {
                write!(f, "directory {dir}: entry {name:?} for inode {ino} has type {stored}, should be {actual}")
            }
            BadDot { dir, stored: 0 } => write!(f, "directory {dir}: missing \".\""),
            BadDot { dir, stored } => {
                write!(f, "directory {dir}: \".\" names inode {stored}, not itself")
            }
            BadDotDot { dir, stored: 0, expected, .. } => {
                write!(f, "directory {dir}: missing \"..\" (parent {expected})")
            }
            BadDotDot { dir, stored, expected, stored_dir: true } => {
                write!(f, "directory {dir}: \"..\" names directory {stored}, parent is {expected}")
            }
            BadDotDot { dir, stored, expected, stored_dir: false } => {
                write!(f, "directory {dir}: \"..\" names inode {stored} (not a directory), parent is {expected}")
            }
            DirMultiplyLinked { ino, dir, name, names, unreachable, .. } => {
                let tree = if *unreachable { ", none reachable from the root" } else { "" };
                write!(f, "directory {ino} has a second name {name:?} in directory {dir} ({names} names in all{tree})")
            }
            UnreferencedInode { ino, mode, size } => {
                write!(f, "inode {ino} (mode {mode:#o}, size {size}) is in use but no entry names it")
            }
            LinkCountTooLow { ino, stored, actual } => {
                write!(f, "inode {ino}: link count {stored}, but {actual} entries name it (too low)")
            }
            LinkCountTooHigh { ino, stored, actual } => {
                write!(f, "inode {ino}: link count {stored}, but {actual} entries name it")
            }
            LeakedBlock { bno } => write!(f, "block {bno} marked used but owned by nothing"),
            BlockUsedButFree { bno } => write!(f, "block {bno} in use but free in the bitmap"),
            LeakedInode { ino } => write!(f, "inode {ino} marked used but free"),
            InodeUsedButFree { ino } => write!(f, "inode {ino} in use but free in the bitmap"),
            BadReservation { ino, what } => write!(f, "reservation inode {ino}: {what}"),
        }
    }
}
