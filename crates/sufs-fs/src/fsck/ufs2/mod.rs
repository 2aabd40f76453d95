//! fsck for FreeBSD UFS2 images, one file per pass as FreeBSD's sbin/fsck_ffs has them, over
//! the UFS2 codec (`format::ufs2`). It only reads: every problem is a `Finding` with a `Class`
//! (what a soft-updates crash may leave, or not), printed in fsck_ffs's words. `repair` then
//! writes what fsck_ffs's `-y` and `-p` write for the findings it knows (see there), or nothing.
//!
//! - `setup` (setup.c): the superblock, by the standard search or a copy (`-b`), and the
//!   device's size against it.
//! - `pass1` (pass1.c, inode.c's `ckinode`/`chkrange`): every inode below each group's
//!   `cg_initediblk`, its fields, and every fragment it holds claimed in a bitmap over the file
//!   system; `pass1b`: the first owners of fragments claimed twice.
//! - `pass2` (pass2.c, dir.c's `dircheck`): every directory's chunks and entries.
//! - `pass3` (pass3.c): every directory reachable from the root; `pass4` (pass4.c): link
//!   counts and unreferenced inodes.
//! - `pass5` (pass5.c): each group's maps, counts, fragment and cluster summaries rebuilt from
//!   pass 1 and compared with the disk; the summary area and `fs_cstotal`.
//! - `repair` (pass4.c's `adjust`/`clri`, pass3.c's lost+found, pass5.c's rewrite, `ckfini`):
//!   the writes, after the check and only when every finding is one it repairs.
//!
//! Nothing read from the disk is trusted: the superblock has passed `Fs::validate` and fits
//! the device, every block number is range-checked before it is read, indirect blocks are read
//! only the first time a fragment is claimed (so a loop of pointers ends), and the number of
//! bad and duplicate pointers an inode may hold is bounded as fsck_ffs bounds it.

use crate::format::ufs2::*;

mod findings;
mod pass1;
mod pass1b;
mod pass2;
mod pass3;
mod pass4;
mod pass5;
mod repair;
mod setup;

#[cfg(test)]
mod lostfound_tests;

pub use findings::Finding;
pub use repair::{repair, Outcome, RepairMode, WriteAt};
pub use setup::probe;

use crate::fsck::Class;

/// How the checker runs.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Take the superblock from this `DEV_BSIZE` sector (fsck_ffs's `-b`: a group's copy is at
    /// `fsbtodb(cgsblock(c))`, sector 160 of group 1 for newfs's defaults).
    pub alternate: Option<u64>,
}

/// What a check found, and the counts fsck_ffs prints at the end.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
    /// The byte offset the superblock was read at.
    pub sblock_at: u64,
    pub files: u64,
    pub dirs: u64,
    /// Fragments in use (data, indirect and extended-attribute blocks, and metadata).
    pub used_frags: i64,
    pub free_frags: i64,
    /// Whole free blocks, and free fragments in partly used blocks (from the rebuilt maps).
    pub nbfree: i64,
    pub nffree: i64,
    /// Block Register reservations in `/.br`, and the blocks of `fs_bsize` they hold (indirect
    /// blocks included).
    pub reservations: u64,
    pub reserved_blocks: u64,
}

impl Report {
    pub fn violations(&self) -> usize {
        self.findings.iter().filter(|f| f.class() == Class::Violation).count()
    }
    pub fn allowed(&self) -> usize {
        self.findings.iter().filter(|f| f.class() == Class::Allowed).count()
    }
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}

/// What pass 1 learned of an inode, for the later passes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum State {
    /// Mode 0 (or past `cg_initediblk`).
    #[default]
    Free,
    /// In use, of a known type.
    InUse,
    /// In use but unusable (unknown type): entries naming it are not checked further.
    Bad,
}

#[derive(Debug, Clone, Copy, Default)]
struct InoInfo {
    state: State,
    /// `d_type` its mode gives.
    dtype: u8,
    nlink: i16,
    mode: u16,
    size: u64,
    /// Entries naming it, "." and ".." included.
    counted: u32,
    /// For a directory: the first directory naming it by a name not "." or ".." (0: none).
    parent: u32,
    /// For a directory: the inode its ".." names (0: none).
    dotdot: u32,
    /// For a directory: names besides "." and "..".
    names: u32,
    /// It carries sufs's unmovable flag (`di_spare[0]`): a Block Register reservation's, which
    /// must be a regular file in `/.br` that is also `SF_IMMUTABLE` (`reservations`).
    unmovable: bool,
    immutable: bool,
}

/// What pass 1 learned of every inode, kept per group for the inodes pass 1 read (those below
/// `cg_initediblk`, or all of a group whose block did not decode); every other inode is free.
/// A large file system initializes few inodes (newfs two blocks a group), so the table and
/// the passes that walk it cost what is in use, not `fs_ipg * fs_ncg`.
struct Inodes {
    ipg: u32,
    maxino: u32,
    /// Group `c`'s inodes `c * ipg ..` as far as pass 1 read them.
    groups: Vec<Vec<InoInfo>>,
}

/// An inode pass 1 did not read (or did not find in use).
const FREE: InoInfo = InoInfo {
    state: State::Free,
    dtype: 0,
    nlink: 0,
    mode: 0,
    size: 0,
    counted: 0,
    parent: 0,
    dotdot: 0,
    names: 0,
    unmovable: false,
    immutable: false,
};

impl Inodes {
    fn new(sb: &Superblock) -> Inodes {
        Inodes { ipg: sb.fs_ipg, maxino: sb.maxino(), groups: Vec::with_capacity(sb.fs_ncg as usize) }
    }

    /// Makes room for the next group's first `n` inodes, all free until pass 1 sets them.
    fn add_group(&mut self, n: u32) {
        assert!(n <= self.ipg, "{n} inodes in a group of {}", self.ipg);
        self.groups.push(vec![FREE; n as usize]);
    }

    /// The inodes of group `c` pass 1 read (fewer than `fs_ipg`: the rest are free).
    fn group(&self, c: u32) -> &[InoInfo] {
        self.groups.get(c as usize).map_or(&[][..], |g| &g[..])
    }

    fn get(&self, ino: u32) -> &InoInfo {
        assert!(ino < self.maxino, "inode {ino} past maxino {}", self.maxino);
        self.group(ino / self.ipg).get((ino % self.ipg) as usize).unwrap_or(&FREE)
    }

    /// Inode `ino`'s entry if pass 1 read it (an inode it did not read stays free).
    fn get_mut(&mut self, ino: u32) -> Option<&mut InoInfo> {
        assert!(ino < self.maxino, "inode {ino} past maxino {}", self.maxino);
        self.groups.get_mut((ino / self.ipg) as usize)?.get_mut((ino % self.ipg) as usize)
    }

    /// Every inode pass 1 read, in order, with its number.
    fn iter(&self) -> impl Iterator<Item = (u32, &InoInfo)> + '_ {
        let ipg = self.ipg;
        (self.groups.iter().enumerate())
            .flat_map(move |(c, g)| g.iter().enumerate().map(move |(i, t)| (c as u32 * ipg + i as u32, t)))
    }
}

/// A bit per fragment of the file system, or per inode or block of a group (bit `i` at bit
/// `i % 64` of word `i / 64`, which is a cylinder group map's bytes read as little-endian
/// words). Bits past the length it was made with are clear.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bitmap(Vec<u64>);

impl Bitmap {
    fn new(n: i64) -> Bitmap {
        Bitmap(vec![0; (n as usize).div_ceil(64)])
    }
    /// `n` bits, all set.
    fn ones(n: usize) -> Bitmap {
        let mut b = Bitmap::new(n as i64);
        b.set_range(0, n);
        b
    }
    /// The first `n` bits of a cylinder group map's bytes (bit `i` at bit `i % 8` of byte
    /// `i / 8`); bits past the bytes are clear.
    fn from_bytes(bytes: &[u8], n: usize) -> Bitmap {
        let mut b = Bitmap::new(n as i64);
        for (w, chunk) in b.0.iter_mut().zip(bytes.chunks(8)) {
            let mut le = [0u8; 8];
            le[..chunk.len()].copy_from_slice(chunk);
            *w = u64::from_le_bytes(le);
        }
        if !n.is_multiple_of(64) {
            if let Some(last) = b.0.last_mut() {
                *last &= (1u64 << (n % 64)) - 1;
            }
        }
        b
    }
    fn get(&self, i: i64) -> bool {
        self.0[i as usize / 64] & (1 << (i % 64)) != 0
    }
    fn set(&mut self, i: i64) {
        self.0[i as usize / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: i64) {
        self.0[i as usize / 64] &= !(1 << (i % 64));
    }
    /// Sets (`on`) or clears bits `lo..hi`, whole words at a time.
    fn fill(&mut self, lo: usize, hi: usize, on: bool) {
        let mut i = lo;
        while i < hi {
            let n = (64 - i % 64).min(hi - i);
            let mask = if n == 64 { !0 } else { ((1u64 << n) - 1) << (i % 64) };
            if on {
                self.0[i / 64] |= mask;
            } else {
                self.0[i / 64] &= !mask;
            }
            i += n;
        }
    }
    fn set_range(&mut self, lo: usize, hi: usize) {
        self.fill(lo, hi, true);
    }
    fn clear_range(&mut self, lo: usize, hi: usize) {
        self.fill(lo, hi, false);
    }
    /// The 64 bits from bit `i` (past the end: clear).
    fn word_at(&self, i: usize) -> u64 {
        let (w, s) = (i / 64, i % 64);
        let lo = self.0.get(w).copied().unwrap_or(0) >> s;
        let hi = if s == 0 { 0 } else { self.0.get(w + 1).copied().unwrap_or(0) << (64 - s) };
        lo | hi
    }
    /// Each word of `self` with the same word of `other` (a map of as many bits) by `f`.
    fn zip(&self, other: &Bitmap, f: impl Fn(u64, u64) -> u64) -> Bitmap {
        assert_eq!(self.0.len(), other.0.len(), "maps of different lengths");
        Bitmap(self.0.iter().zip(&other.0).map(|(&a, &b)| f(a, b)).collect())
    }
    fn count_ones(&self) -> u64 {
        self.0.iter().map(|w| w.count_ones() as u64).sum()
    }
    /// The set bits, in order, skipping clear words whole.
    fn iter_ones(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(k, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                (w != 0).then(|| {
                    let b = w.trailing_zeros() as usize;
                    w &= w - 1;
                    k * 64 + b
                })
            })
        })
    }
}

/// The state the passes share (fsck_ffs's globals: `sblock`, `blockmap`, `inoinfo`, `duplist`).
struct Check<'a, D: ReadAt + ?Sized> {
    dev: &'a D,
    sb: Superblock,
    /// The superblock is a group's copy (`-b`), whose counts newfs wrote and nothing updates.
    alternate: bool,
    /// The byte offset the superblock was read at (where `repair` writes it back).
    sblock_at: u64,
    /// Each group's block as read (`None`: it did not decode).
    cgs: Vec<Option<Cg>>,
    inodes: Inodes,
    /// Fragments claimed by inodes (metadata is not in it: pass 5's `free_map` adds it).
    claimed: Bitmap,
    /// Fragments claimed twice (pass 1b finds their first owners).
    dups: std::collections::BTreeSet<i64>,
    /// Inode and fragment of every duplicate already reported.
    dup_seen: std::collections::BTreeSet<(u32, i64)>,
    /// Each directory's data blocks: (logical block, fragment, fragments), in order; only
    /// blocks whose range is good.
    dir_blocks: std::collections::BTreeMap<u32, Vec<(i64, i64, i64)>>,
    /// Repair: per directory, the first of its `dir_blocks` that may have room for an entry
    /// (repair adds entries block by block, so one found full is not searched again).
    room_from: std::collections::BTreeMap<u32, usize>,
    /// Each directory's subdirectories by name (not "." or ".."), for pass 3.
    children: std::collections::BTreeMap<u32, Vec<u32>>,
    /// Entries naming a directory that already had a name: (directory, entry's directory, name).
    extra_links: Vec<(u32, u32, String)>,
    /// The root's `.br`, the Block Register's directory, if there is one.
    br_dir: Option<u32>,
    /// Each name of an inode with sufs's unmovable flag: (inode, directory).
    unmovable_names: Vec<(u32, u32)>,
    /// Each inode with sufs's unmovable flag: its `di_blocks` (sectors).
    unmovable_blocks: std::collections::BTreeMap<u32, u64>,
    findings: Vec<Finding>,
}

impl<D: ReadAt + ?Sized> Check<'_, D> {
    fn find(&mut self, f: Finding) {
        self.findings.push(f);
    }

    /// Whether fragment `f` is metadata: a group's superblock copy, group block or inodes,
    /// group 0's boot area, or the summary area.
    fn is_meta(&self, f: i64) -> bool {
        let sb = &self.sb;
        let c = sb.dtog(f) as u32;
        let lo = if c == 0 { sb.cgbase(0) } else { sb.cgsblock(c) };
        let cs_end = sb.fs_csaddr + howmany(sb.fs_cssize as i64, sb.fs_fsize as i64);
        (lo..sb.cgdmin(c)).contains(&f) || (sb.fs_csaddr..cs_end).contains(&f)
    }

    /// Inode `ino`'s entry, which pass 1 read (repair changes only inodes it read).
    fn inode_mut(&mut self, ino: u32) -> &mut InoInfo {
        self.inodes.get_mut(ino).unwrap_or_else(|| panic!("inode {ino}: not read by pass 1"))
    }

    /// Reads `len` bytes at fragment `fsb`, which the caller has range-checked.
    fn read(&self, fsb: i64, len: usize) -> Result<Vec<u8>, Ufs2Error> {
        let mut b = vec![0u8; len];
        self.dev.read_exact_at(&mut b, self.sb.fsb_offset(fsb))?;
        Ok(b)
    }

    /// Inode `ino`'s dinode, read again (pass 1b).
    fn dinode(&self, ino: u32) -> Result<Dinode, Ufs2Error> {
        let mut b = [0u8; UFS2_DINODE_SIZE];
        self.dev.read_exact_at(&mut b, self.sb.ino_offset(ino))?;
        Dinode::decode(&b)
    }

    fn is_dir(&self, ino: u32) -> bool {
        let t = self.inodes.get(ino);
        t.state == State::InUse && t.dtype == crate::format::DT_DIR
    }

    /// After pass 2, sufs's Block Register (which FreeBSD does not know: to it a reservation is
    /// an ordinary immutable file): every inode with sufs's unmovable flag is a regular file,
    /// `SF_IMMUTABLE`, named only in the root's `.br`, or a `BadReservation` (a violation:
    /// nothing sufs does leaves one, and the flag would keep its blocks from ever moving).
    /// Answers the good ones' count and the blocks they hold.
    fn reservations(&mut self) -> (u64, u64) {
        let mut bad = std::collections::BTreeMap::new();
        for &(ino, dir) in &self.unmovable_names {
            if Some(dir) != self.br_dir {
                bad.entry(ino).or_insert_with(|| format!("named in I={dir}, not in /.br"));
            }
        }
        let (mut n, mut sectors) = (0, 0);
        for (ino, blocks) in std::mem::take(&mut self.unmovable_blocks) {
            let t = *self.inodes.get(ino);
            let why = if t.dtype != crate::format::DT_REG {
                Some("not a regular file".to_string())
            } else if !t.immutable {
                Some("not immutable".to_string())
            } else {
                bad.remove(&ino)
            };
            match why {
                Some(why) => self.find(Finding::BadReservation { ino, why }),
                None if t.counted > 0 => (n, sectors) = (n + 1, sectors + blocks),
                None => {}
            }
        }
        (n, sectors * DEV_BSIZE as u64 / self.sb.fs_bsize as u64)
    }
}

/// `howmany`: `a / b` rounded up, for non-negative `a` and positive `b`.
fn howmany(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// The `d_type` of a mode's file type (0 for an unknown type).
fn dtype_of(mode: u16) -> u8 {
    use crate::format::*;
    match mode & IFMT {
        IFREG => DT_REG,
        IFDIR => DT_DIR,
        IFLNK => DT_LNK,
        IFCHR => DT_CHR,
        IFBLK => DT_BLK,
        IFIFO => DT_FIFO,
        IFSOCK => DT_SOCK,
        _ => DT_UNKNOWN,
    }
}

/// Merges the indices where `bad` holds into runs `(first, last)`.
fn runs(indices: impl Iterator<Item = (i64, bool)>) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    for (i, bad) in indices {
        if !bad {
            continue;
        }
        match out.last_mut() {
            Some((_, last)) if *last + 1 == i => *last = i,
            _ => out.push((i, i)),
        }
    }
    out
}

/// Checks the UFS2 file system on `dev` (`dev_len` bytes); changes nothing. An error means it
/// cannot be checked at all: no usable superblock, or an I/O error.
pub fn check<D: ReadAt + ?Sized>(dev: &D, dev_len: u64, opts: &Options) -> Result<Report, Ufs2Error> {
    Ok(run(dev, dev_len, opts)?.1)
}

/// Runs the passes; answers their shared state (for `repair`) and the report.
fn run<'a, D: ReadAt + ?Sized>(dev: &'a D, dev_len: u64, opts: &Options) -> Result<(Check<'a, D>, Report), Ufs2Error> {
    let (sblock_at, sb, mut findings) = setup::read_superblock(dev, dev_len, opts)?;
    let nfrags = sb.fs_size;
    let mut ck = Check {
        dev,
        alternate: opts.alternate.is_some(),
        sblock_at,
        cgs: Vec::new(),
        inodes: Inodes::new(&sb),
        claimed: Bitmap::new(nfrags),
        dups: Default::default(),
        dup_seen: Default::default(),
        dir_blocks: Default::default(),
        room_from: Default::default(),
        children: Default::default(),
        extra_links: Vec::new(),
        br_dir: None,
        unmovable_names: Vec::new(),
        unmovable_blocks: Default::default(),
        findings: std::mem::take(&mut findings),
        sb,
    };
    ck.pass1()?;
    if !ck.dups.is_empty() {
        ck.pass1b()?;
    }
    ck.pass2()?;
    let (reservations, reserved_blocks) = ck.reservations();
    if let Some(reached) = ck.pass3()? {
        ck.pass4(&reached);
    }
    let mut report = ck.pass5()?;
    (report.reservations, report.reserved_blocks) = (reservations, reserved_blocks);
    report.sblock_at = sblock_at;
    report.findings = ck.findings.clone();
    Ok((ck, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_neighbours() {
        let bad = [1, 2, 3, 7, 9, 10];
        let r = runs((0..12).map(|i| (i, bad.contains(&i))));
        assert_eq!(r, vec![(1, 3), (7, 7), (9, 10)]);
        assert!(runs((0..5).map(|i| (i, false))).is_empty());
    }

    #[test]
    fn bitmap_sets_and_reads_bits() {
        let mut b = Bitmap::new(130);
        b.set(0);
        b.set(64);
        b.set(129);
        assert!(b.get(0) && b.get(64) && b.get(129));
        assert!(!b.get(1) && !b.get(63) && !b.get(128));
    }
}
