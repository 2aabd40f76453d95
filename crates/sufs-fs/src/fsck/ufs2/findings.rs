//! What the UFS2 checker finds: every problem a value, printed in fsck_ffs's words (its
//! `pwarn`/`pfatal` lines, with the numbers that locate the problem), and classed as sufs's own
//! findings are (`fsck::Class`): `Allowed` for what a soft-updates crash may leave on a
//! FreeBSD file system (a leaked inode or fragment, a link count too high, stale block counts and
//! summaries, the rename window of a directory), `Violation` for what an ordered file system
//! never leaves.

use std::fmt;

use crate::fsck::Class;

/// One problem found in a UFS2 image. Fragment numbers are file-system fragment addresses
/// (`fsb`), inode numbers FreeBSD's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Setup: the superblock's check hash disagrees with its bytes.
    SuperblockCheckHash {
        stored: u32,
        computed: u32,
    },
    /// Setup, with `-b`: the standard superblock does not decode.
    BadPrimary {
        what: String,
    },
    /// A cylinder group block whose check hash disagrees with its bytes.
    CgCheckHash {
        cg: u32,
        stored: u32,
        computed: u32,
    },
    /// A cylinder group block that does not decode (magic, index, counts, map offsets): its
    /// maps are not compared.
    BadCg {
        cg: u32,
        what: String,
    },
    /// The last group's header says `ndblk` fragments where the superblock gives it `fs_ndblk`,
    /// the fragments past that free: a growfs that wrote the header and not yet the superblock
    /// (allowed; repair cuts the header back).
    GrowInterrupted {
        cg: u32,
        ndblk: u32,
        fs_ndblk: u32,
    },
    /// An inode whose check hash disagrees with its 256 bytes.
    InodeCheckHash {
        ino: u32,
        stored: u32,
        computed: u32,
    },
    /// A free inode (mode 0) with a size or block pointers.
    PartiallyAllocated {
        ino: u32,
    },
    UnknownType {
        ino: u32,
        mode: u16,
    },
    /// Anything else wrong with one inode's fields (size against pointers, a short symbolic
    /// link's blocks, a device's pointers, the extended-attribute area's size).
    BadInode {
        ino: u32,
        what: String,
    },
    /// A block pointer outside the data space, into metadata, or a fragment run crossing its
    /// block (fsck_ffs's `chkrange`).
    BadBlock {
        ino: u32,
        fsb: i64,
        frags: i64,
    },
    /// A fragment already claimed: by another inode, or by another pointer of this one.
    DupBlock {
        ino: u32,
        fsb: i64,
    },
    /// More than `MAXBAD` bad or `MAXDUP` duplicate pointers: the rest of the inode was not walked.
    Excessive {
        ino: u32,
        what: &'static str,
    },
    /// `di_blocks` (512-byte sectors) is not what the inode holds.
    BlockCount {
        ino: u32,
        stored: u64,
        actual: u64,
    },
    /// A file whose size ends past its last allocated block: UFS has no file ending in a hole
    /// (fsck_ffs's pass 1). Past the direct blocks soft updates may leave it (it rolls back
    /// indirect blocks' pointers, not sizes: fsck_ffs warns); within them it rolls the size back
    /// too, so there it is a violation (fsck_ffs's "UNEXPECTED SOFT UPDATE INCONSISTENCY").
    SizeBeyondAllocated {
        ino: u32,
        size: u64,
        should: u64,
        indirect: bool,
    },
    /// The extended-attribute area does not decode.
    BadExtAttr {
        ino: u32,
        what: String,
    },
    /// A directory whose size is 0 or not a multiple of `DIRBLKSIZ`.
    DirLength {
        ino: u32,
        size: u64,
    },
    /// A directory with a hole inside its size.
    DirHole {
        ino: u32,
        lbn: i64,
    },
    /// A directory chunk `dircheck` refuses; the rest of the chunk is skipped.
    DirCorrupt {
        dir: u32,
        offset: u64,
        what: String,
    },
    MissingDot {
        dir: u32,
    },
    BadDot {
        dir: u32,
        stored: u32,
    },
    MissingDotDot {
        dir: u32,
    },
    /// ".." does not name the directory's parent. `stored_dir`: it names another directory
    /// (the window of a rename to another parent; allowed).
    BadDotDot {
        dir: u32,
        stored: u32,
        parent: u32,
        stored_dir: bool,
    },
    /// A "." or ".." entry not at its place.
    ExtraDot {
        dir: u32,
        name: String,
    },
    /// An entry naming inode 0 or 1 (but a whiteout).
    InoOutOfRange {
        dir: u32,
        name: String,
        ino: u32,
    },
    /// An entry naming a free inode.
    Unallocated {
        dir: u32,
        name: String,
        ino: u32,
    },
    /// An entry whose `d_type` is not its inode's type.
    BadType {
        dir: u32,
        name: String,
        ino: u32,
        stored: u8,
        actual: u8,
    },
    /// A directory named by more than one entry (besides "." and ".."); `names`: how many. Two
    /// is the window of a rename (allowed); more only if `counted`, the stored link count
    /// covering every entry that names it, as when a directory is renamed again before its
    /// first rename's old name has left the disk (each rename raises the count before its new
    /// name is written and lowers it after its old name is gone).
    ExtraDirLink {
        ino: u32,
        dir: u32,
        name: String,
        names: u32,
        counted: bool,
    },
    /// An inode with sufs's unmovable flag (a Block Register reservation's) that is not a
    /// regular, immutable file named in `/.br` alone. Repair clears both flags.
    BadReservation {
        ino: u32,
        why: String,
    },
    /// The root inode is free or not a directory: passes 3 and 4 are not run.
    BadRoot {
        mode: u16,
    },
    /// A directory no entry names (its tree is leaked).
    UnrefDir {
        ino: u32,
        size: u64,
    },
    /// Directories naming each other in a loop that no path from the root reaches.
    DirLoop {
        ino: u32,
    },
    /// An inode in use that no entry names.
    UnrefFile {
        ino: u32,
        mode: u16,
        size: u64,
    },
    LinkCount {
        ino: u32,
        dir: bool,
        stored: i64,
        actual: u32,
    },
    /// Pass 5: inodes `first..=last` in use but clear in their group's map.
    InodesMarkedFree {
        first: u32,
        last: u32,
    },
    /// Inodes set in the map that are free.
    InodesMarkedUsed {
        first: u32,
        last: u32,
    },
    /// Fragments held (or metadata) but free in the map.
    FragsMarkedFree {
        first: i64,
        last: i64,
    },
    /// Fragments set used in the map that nothing holds.
    FragsMarkedUsed {
        first: i64,
        last: i64,
    },
    /// A count of a group's header (`cg_cs`) that its own maps (or, for `ndir`, its inodes)
    /// do not give.
    CgCount {
        cg: u32,
        what: &'static str,
        stored: i64,
        actual: i64,
    },
    /// `cg_frsum[len]` is not the number of free runs of `len` fragments in partly used blocks.
    Frsum {
        cg: u32,
        len: usize,
        stored: u32,
        actual: u32,
    },
    /// Blocks `first..=last` of a group whose cluster-map bit is not "the whole block is free".
    ClusterMap {
        cg: u32,
        first: u32,
        last: u32,
    },
    /// `cg_clustersum[len]` is not the number of free block runs of that length.
    ClusterSum {
        cg: u32,
        len: usize,
        stored: u32,
        actual: u32,
    },
    /// Inodes in use at or past `cg_initediblk`.
    PastInitedIblk {
        cg: u32,
        ino: u32,
        initediblk: u32,
    },
    /// An allocation rotor outside its group.
    Rotor {
        cg: u32,
        what: &'static str,
        value: u32,
    },
    /// The summary area (`fs_csp` at `fs_csaddr`) disagrees with a group's header.
    CsArea {
        cg: u32,
        what: &'static str,
        stored: i64,
        actual: i64,
    },
    /// `fs_cstotal` is not the sum of the groups.
    CsTotal {
        what: &'static str,
        stored: i64,
        actual: i64,
    },
}

impl Finding {
    pub fn class(&self) -> Class {
        use Finding::*;
        match self {
            InodesMarkedUsed { .. }
            | FragsMarkedUsed { .. }
            | UnrefFile { .. }
            | UnrefDir { .. }
            | BlockCount { .. }
            | SizeBeyondAllocated { indirect: true, .. }
            | CsArea { .. }
            | CsTotal { .. }
            | GrowInterrupted { .. }
            | BadDotDot { stored_dir: true, .. }
            | ExtraDirLink { names: 2, .. }
            | ExtraDirLink { counted: true, .. } => Class::Allowed,
            // A directory made and not yet named, or removed and not yet freed: the group's
            // count was raised with the inode's bit, before the inode reached the disk.
            CgCount { what: "ndir", stored, actual, .. } if stored > actual => Class::Allowed,
            LinkCount { stored, actual, .. } if *stored > *actual as i64 => Class::Allowed,
            _ => Class::Violation,
        }
    }
}

fn name(n: &str) -> &str {
    if n.is_empty() {
        "?"
    } else {
        n
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Finding::*;
        match self {
            SuperblockCheckHash { stored, computed } => {
                write!(f, "SUPERBLOCK CHECK HASH FAILED: fs_ckhash {stored:#x}, computed {computed:#x}")
            }
            BadPrimary { what } => write!(f, "STANDARD SUPERBLOCK BAD: {what}"),
            CgCheckHash { cg, stored, computed } => {
                write!(f, "CG {cg}: CHECK HASH FAILED (stored {stored:#x}, computed {computed:#x})")
            }
            BadCg { cg, what } => write!(f, "CG {cg}: BAD CYLINDER GROUP: {what}"),
            GrowInterrupted { cg, ndblk, fs_ndblk } => write!(
                f,
                "CG {cg}: {ndblk} FRAGMENTS WHERE THE SUPERBLOCK GIVES {fs_ndblk}, THE REST FREE (AN INTERRUPTED GROWFS)"
            ),
            InodeCheckHash { ino, stored, computed } => {
                write!(f, "INODE CHECK-HASH FAILED I={ino} (stored {stored:#x}, computed {computed:#x})")
            }
            PartiallyAllocated { ino } => write!(f, "PARTIALLY ALLOCATED INODE I={ino}"),
            UnknownType { ino, mode } => write!(f, "UNKNOWN FILE TYPE I={ino} MODE={mode:o}"),
            BadInode { ino, what } => write!(f, "BAD INODE I={ino}: {what}"),
            BadBlock { ino, fsb, frags } => write!(f, "{fsb} BAD I={ino} ({frags} FRAGS)"),
            DupBlock { ino, fsb } => write!(f, "{fsb} DUP I={ino}"),
            Excessive { ino, what } => write!(f, "EXCESSIVE {what} BLKS I={ino}"),
            BlockCount { ino, stored, actual } => {
                write!(f, "INCORRECT BLOCK COUNT I={ino} ({stored} should be {actual})")
            }
            SizeBeyondAllocated { ino, size, should, .. } => {
                write!(f, "INODE {ino}: FILE SIZE {size} BEYOND END OF ALLOCATED FILE, SIZE SHOULD BE {should}")
            }
            BadExtAttr { ino, what } => write!(f, "BAD EXTATTR AREA I={ino}: {what}"),
            DirLength { ino, size: 0 } => write!(f, "ZERO LENGTH DIRECTORY I={ino}"),
            DirLength { ino, size } => {
                write!(f, "DIRECTORY I={ino}: LENGTH {size} NOT MULTIPLE OF {}", crate::format::DIRBLKSIZ)
            }
            DirHole { ino, lbn } => write!(f, "DIRECTORY I={ino}: CONTAINS EMPTY BLOCKS (BLOCK {lbn})"),
            DirCorrupt { dir, offset, what } => write!(f, "DIRECTORY CORRUPTED I={dir} OFFSET {offset}: {what}"),
            MissingDot { dir } => write!(f, "MISSING '.' I={dir}"),
            BadDot { dir, stored } => write!(f, "BAD INODE NUMBER FOR '.' I={dir} (NAMES {stored})"),
            MissingDotDot { dir } => write!(f, "MISSING '..' I={dir}"),
            BadDotDot { dir, stored, parent, .. } => {
                write!(f, "BAD INODE NUMBER FOR '..' I={dir} (NAMES {stored}, PARENT {parent})")
            }
            ExtraDot { dir, name: n } => write!(f, "EXTRA '{n}' ENTRY I={dir}"),
            InoOutOfRange { dir, name: n, ino } => write!(f, "I OUT OF RANGE I={ino} NAME={} DIR={dir}", name(n)),
            Unallocated { dir, name: n, ino } => write!(f, "UNALLOCATED I={ino} NAME={} DIR={dir}", name(n)),
            BadType { dir, name: n, ino, stored, actual } => {
                write!(f, "BAD TYPE VALUE I={ino} NAME={} DIR={dir} ({stored} SHOULD BE {actual})", name(n))
            }
            ExtraDirLink { ino, dir, name: n, names, .. } => {
                write!(f, "I={ino} IS AN EXTRA HARD LINK TO DIRECTORY: NAME={} DIR={dir} ({names} NAMES)", name(n))
            }
            BadReservation { ino, why } => write!(f, "I={ino} FLAGGED AS A BLOCK REGISTER RESERVATION: {why}"),
            BadRoot { mode: 0 } => write!(f, "ROOT INODE UNALLOCATED"),
            BadRoot { mode } => write!(f, "ROOT INODE NOT DIRECTORY (MODE={mode:o})"),
            UnrefDir { ino, size } => write!(f, "UNREF DIR I={ino} SIZE={size}"),
            DirLoop { ino } => write!(f, "DIRECTORY I={ino} IS IN A LOOP THE ROOT DOES NOT REACH"),
            UnrefFile { ino, mode, size } => write!(f, "UNREF FILE I={ino} MODE={mode:o} SIZE={size}"),
            LinkCount { ino, dir, stored, actual } => {
                write!(f, "LINK COUNT {} I={ino} COUNT {stored} SHOULD BE {actual}", if *dir { "DIR" } else { "FILE" })
            }
            InodesMarkedFree { first, last } => write!(f, "ALLOCATED INODE(S) {first}-{last} MARKED FREE"),
            InodesMarkedUsed { first, last } => write!(f, "UNALLOCATED INODE(S) {first}-{last} MARKED USED"),
            FragsMarkedFree { first, last } => write!(f, "ALLOCATED FRAG(S) {first}-{last} MARKED FREE"),
            FragsMarkedUsed { first, last } => write!(f, "UNALLOCATED FRAG(S) {first}-{last} MARKED USED"),
            CgCount { cg, what, stored, actual } => {
                write!(f, "CG {cg}: SUMMARY INFORMATION BAD: {what} {stored} SHOULD BE {actual}")
            }
            Frsum { cg, len, stored, actual } => {
                write!(f, "CG {cg}: FRAG SUMMARY BAD: RUNS OF {len} FRAGS {stored} SHOULD BE {actual}")
            }
            ClusterMap { cg, first, last } => write!(f, "CG {cg}: CLUSTER MAP BAD FOR BLOCKS {first}-{last}"),
            ClusterSum { cg, len, stored, actual } => {
                write!(f, "CG {cg}: CLUSTER SUMMARY BAD: RUNS OF {len} BLOCKS {stored} SHOULD BE {actual}")
            }
            PastInitedIblk { cg, ino, initediblk } => {
                write!(f, "CG {cg}: INODE {ino} IN USE PAST THE {initediblk} INITIALIZED INODES")
            }
            Rotor { cg, what, value } => write!(f, "CG {cg}: {what} {value} OUT OF RANGE"),
            CsArea { cg, what, stored, actual } => {
                write!(f, "CG {cg}: SUMMARY AREA BAD: {what} {stored} SHOULD BE {actual}")
            }
            CsTotal { what, stored, actual } => {
                write!(f, "FREE BLK COUNT(S) WRONG IN SUPERBLK: {what} {stored} SHOULD BE {actual}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_what_a_soft_updates_crash_may_leave() {
        let high = Finding::LinkCount { ino: 5, dir: false, stored: 3, actual: 2 };
        let low = Finding::LinkCount { ino: 5, dir: false, stored: 1, actual: 2 };
        assert_eq!((high.class(), low.class()), (Class::Allowed, Class::Violation));
        assert_eq!(high.to_string(), "LINK COUNT FILE I=5 COUNT 3 SHOULD BE 2");
        let leak = Finding::FragsMarkedUsed { first: 10, last: 12 };
        let lost = Finding::FragsMarkedFree { first: 10, last: 12 };
        assert_eq!((leak.class(), lost.class()), (Class::Allowed, Class::Violation));
        let ndir = |stored| Finding::CgCount { cg: 0, what: "ndir", stored, actual: 3 };
        assert_eq!((ndir(4).class(), ndir(2).class()), (Class::Allowed, Class::Violation));
        let nbfree = Finding::CgCount { cg: 0, what: "nbfree", stored: 4, actual: 3 };
        assert_eq!(nbfree.class(), Class::Violation, "a header disagreeing with its own maps");
        let rename = |names| Finding::ExtraDirLink { ino: 9, dir: 2, name: "d".into(), names, counted: false };
        assert_eq!((rename(2).class(), rename(3).class()), (Class::Allowed, Class::Violation));
    }
}
