//! fsck: the checker and repairer (FFS's fsck_ffs passes; soft updates §4 says which
//! inconsistencies a crash may leave). It reads the image straight from a `BlockDevice`, never
//! through `Fs` or the buffer cache, so that it can be the oracle of the crash tester: every
//! problem is a typed `Finding` with a `Class`. Allowed findings are the ones soft updates (and
//! synchronous FFS) may leave after a crash: leaked blocks and inodes, link counts too high, stale
//! block counts and summaries, and the two windows of a directory renamed to another parent, which
//! FFS cannot make atomic (a directory with exactly two names; a ".." still naming a directory,
//! the old parent). Violations are the ones an ordered file system must never leave.
//!
//! Passes: 1) superblock and group headers; 2) every inode of every inode table, walking block
//! maps into an ownership bitset; 3) directories from the root (breadth first, each visited once),
//! then directories no path reaches; 4) link counts and unreferenced inodes; 5) the computed maps
//! and counts against the bitmaps, group headers and superblock.
//!
//! `repair` (fsck -y) applies the fixes of one scan through a write set, scans again, and repeats
//! until a scan is clean (a fix may expose a consequence, e.g. a cleared pointer leaves a leaked
//! block, which the next round frees). Every round is bounded, and so is the number of rounds;
//! what the last scan still finds is reported as `remaining`. `preen` (fsck -p) does the same
//! only when every finding is `Allowed`: otherwise it writes nothing.
//!
//! Pass 0 picks the superblock: the primary, unless it does not decode or the group headers
//! disagree with it; then the first superblock copy mkfs wrote (at the start of a group), whose
//! geometry only is used, or the geometry the headers agree on. Repair rewrites the primary.

use std::collections::{BTreeSet, VecDeque};

use thiserror::Error;

use crate::dev::{BlockDevice, DevError};
use crate::format::*;

mod findings;
mod pass1;
mod pass1b;
mod repair;
mod scan;
mod setup;

pub use findings::{Class, Finding};
use repair::{DirFix, Fixes};
use scan::{name_str, Head, Ino, Loc, Namer, Rec, Scan};
use setup::{check_fits, read_primary, SbChoice};
pub use setup::{open_image, open_image_at};

/// What a check (or a repair) found. For `repair` and `preen`, `findings` are those of the first
/// scan (what was found), `remaining` those of the last (what is left), and the counts describe
/// the image as the run left it.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
    /// What the last scan found: for a check, the findings; after a repair, what it could not
    /// repair (empty when the image is left clean).
    pub remaining: Vec<Finding>,
    pub repaired: bool,
    /// Preen declined to touch the image, and why (a violation, or a mount that found damage):
    /// nothing was written, and it takes `fsck -y`.
    pub refused: Option<String>,
    /// Preen of an image marked clean: nothing was scanned.
    pub skipped_clean: bool,
    /// The block of the superblock copy whose geometry was used, if not the primary.
    pub alternate: Option<u64>,
    /// Inodes in use that are not directories.
    pub files: u64,
    pub dirs: u64,
    /// Blocks in use: metadata and every block an inode owns.
    pub used_blocks: u64,
    pub used_inodes: u64,
    /// Block Register reservations in `/.br`, and the blocks they own (indirect blocks included).
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

/// Operational errors: fsck cannot run at all.
#[derive(Debug, Error)]
pub enum FsckError {
    #[error("bad superblock: {0}")]
    Superblock(#[from] FormatError),
    #[error(transparent)]
    Dev(#[from] DevError),
    #[error("{0}")]
    Geometry(String),
}

type Result<T> = std::result::Result<T, FsckError>;

/// What a run may do to the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Report only (fsck -n).
    #[default]
    Check,
    /// fsck -p: repair only what soft updates may leave after a crash (the `Allowed` class);
    /// anything else leaves the image untouched and is refused.
    Preen,
    /// fsck -y: repair everything.
    Repair,
}

#[derive(Debug, Clone, Default)]
pub struct Options {
    pub mode: Mode,
    /// Scan under `Preen` even if the image is marked clean (fsck -f).
    pub force: bool,
    /// Take the geometry from the superblock copy at this block (fsck -b).
    pub superblock: Option<u64>,
}

/// Checks the file system on `dev`; changes nothing.
pub fn check(dev: &dyn BlockDevice) -> Result<Report> {
    run(dev, &Options::default())
}

/// Rounds of fixing and rescanning before repair gives up on an image.
const MAX_ROUNDS: usize = 16;

/// Checks and fixes everything found (fsck -y). Returns the findings of the first scan, with
/// `repaired` set if anything was written, and `remaining` what could not be fixed. A repair
/// that leaves nothing marks the image clean (SB_CLEAN) and clears SB_NEEDS_FSCK.
pub fn repair(dev: &dyn BlockDevice) -> Result<Report> {
    run(dev, &Options { mode: Mode::Repair, force: true, superblock: None })
}

/// Preen (fsck -p), for the soft updates paper's "only leaks" crash states: if every finding is
/// of the `Allowed` class, fixes them as `repair` does, but clears unreferenced files (a create
/// whose name never reached disk) instead of filling lost+found with them. Any violation, or
/// SB_NEEDS_FSCK, and it changes nothing (`refused`). Always scans; `run` with `Mode::Preen`
/// skips an image marked clean, as fsck_ffs -p does.
pub fn preen(dev: &dyn BlockDevice) -> Result<Report> {
    run(dev, &Options { mode: Mode::Preen, force: true, superblock: None })
}

/// Runs fsck with `opts` on `dev`.
pub fn run(dev: &dyn BlockDevice, opts: &Options) -> Result<Report> {
    let preen = opts.mode == Mode::Preen;
    if preen && !opts.force && opts.superblock.is_none() {
        if let Ok(sb) = read_primary(dev) {
            if sb.flags & SB_CLEAN != 0 && sb.flags & SB_NEEDS_FSCK == 0 {
                return Ok(Report { skipped_clean: true, ..Default::default() });
            }
        }
    }
    let choice = SbChoice::choose(dev, opts.superblock)?;
    let mut scan = Scan::run_with(dev, preen, &choice)?;
    let mut report = scan.report();
    report.alternate = choice.from;
    if opts.mode == Mode::Check {
        report.remaining = report.findings.clone();
        return Ok(report);
    }
    if preen {
        let why = if scan.sb.flags & SB_NEEDS_FSCK != 0 {
            Some("the file system was found damaged while mounted (SB_NEEDS_FSCK)".to_string())
        } else {
            let v = report.violations();
            (v > 0).then(|| format!("{v} findings that soft updates cannot leave"))
        };
        if why.is_some() {
            report.refused = why;
            report.remaining = report.findings.clone();
            return Ok(report);
        }
    }
    let mut changed = false;
    for _ in 0..MAX_ROUNDS {
        let flags = scan.sb.flags;
        if scan.findings.is_empty() && flags & SB_CLEAN != 0 && (preen || flags & SB_NEEDS_FSCK == 0) {
            break;
        }
        // Preen stops at the first violation a round exposes; it is left for fsck -y. A link
        // count too low is preen's own doing (a "..", set back to the parent, names it once
        // more) and is raised: raising a count loses nothing.
        let own = |f: &Finding| matches!(f, Finding::LinkCountTooLow { .. });
        if preen && scan.findings.iter().any(|f| f.class() == Class::Violation && !own(f)) {
            break;
        }
        let wrote = scan.apply()?;
        changed |= wrote;
        scan = Scan::run_with(dev, preen, &SbChoice::choose(dev, None)?)?;
        if !wrote {
            break;
        }
    }
    if !scan.findings.is_empty() && !preen {
        // Something is left: the next mount must know, and only a full fsck clears it.
        changed |= scan.mark_needs_fsck()?;
    }
    let last = scan.report();
    report.repaired = changed;
    report.remaining = last.findings;
    report.files = last.files;
    report.dirs = last.dirs;
    report.used_blocks = last.used_blocks;
    report.used_inodes = last.used_inodes;
    Ok(report)
}

impl Scan<'_> {
    // ------------------------------------------------------------------ pass 3: directories

    fn pass3_dirs(&mut self) -> Result<()> {
        let root_mode = self.inodes.get(&ROOT_INO).map_or(0, |i| i.mode);
        let root_ok = self.inodes.get(&ROOT_INO).is_some_and(|i| i.is_dir() && !i.bad);
        if root_ok {
            self.walk_tree(ROOT_INO)?;
        } else {
            self.findings.push(Finding::BadRoot { mode: root_mode });
            self.fixes.make_root = true;
        }
        let usable = |s: &Self, ino: u32| {
            s.inodes.get(&ino).is_some_and(|i| i.is_dir() && !i.bad && i.visited && i.dir_limit > 0)
                && !s.fixes.clear_inodes.contains(&ino)
        };
        self.target = if usable(self, LOST_FOUND_INO) {
            Some(LOST_FOUND_INO)
        } else if root_ok && usable(self, ROOT_INO) {
            Some(ROOT_INO)
        } else {
            None
        };
        // Directories no path reaches: find the top of each orphaned tree by following "..",
        // report it, and walk its tree so that what it holds counts as named.
        let dirs: Vec<u32> = self.inodes.iter().filter(|(_, i)| i.is_dir() && !i.bad).map(|(&n, _)| n).collect();
        for &d in &dirs {
            if let Some(info) = self.inodes.get_mut(&d) {
                info.unrooted = !info.visited;
            }
        }
        for &d in &dirs {
            if self.inodes.get(&d).is_none_or(|i| i.visited) {
                continue;
            }
            let mut top = d;
            let mut chain = BTreeSet::from([d]);
            while let Some(p) = self.dotdot_of(top)? {
                let up = self.inodes.get(&p).is_some_and(|i| i.is_dir() && !i.bad && !i.visited);
                if !up || !chain.insert(p) {
                    break;
                }
                top = p;
            }
            let Some(info) = self.inodes.get_mut(&top) else {
                continue;
            };
            info.orphan = true;
            self.findings.push(Finding::UnreferencedInode { ino: top, mode: info.mode, size: info.size });
            self.walk_tree(top)?;
            // Preen clears an empty one (an rmdir or a mkdir cut short); a tree with entries
            // goes to lost+found, whatever the mode, so that no name below it is lost.
            let empty = self.inodes.get(&top).is_some_and(|i| i.entries == 0);
            if self.preen && empty {
                self.fixes.clear_inodes.insert(top);
            } else if self.target.is_some() {
                self.fixes.reconnect.push(top);
            }
        }
        for &d in &dirs {
            self.resolve_dir(d);
        }
        Ok(())
    }

    /// The inode that the ".." of directory `dir` names, read from its first block.
    fn dotdot_of(&self, dir: u32) -> Result<Option<u32>> {
        let Some(&(0, bno, _)) = self.inodes.get(&dir).and_then(|i| i.dir_map.first()) else {
            return Ok(None);
        };
        let buf = self.read(bno)?;
        let mut it = dir_iter(&buf[..DIRBLKSIZ]);
        let _dot = it.next();
        Ok(match it.next() {
            Some(Ok(e)) if e.ino != 0 && e.name == b".." => Some(e.ino),
            _ => None,
        })
    }

    /// Breadth-first walk of the tree under directory `start`, each directory once.
    fn walk_tree(&mut self, start: u32) -> Result<()> {
        if let Some(i) = self.inodes.get_mut(&start) {
            i.visited = true;
        }
        let mut queue = VecDeque::from([start]);
        while let Some(dir) = queue.pop_front() {
            self.scan_dir(dir, &mut queue)?;
        }
        Ok(())
    }

    fn scan_dir(&mut self, dir: u32, queue: &mut VecDeque<u32>) -> Result<()> {
        let bs = self.bs as u64;
        let Some(info) = self.inodes.get(&dir) else {
            return Ok(());
        };
        let nblocks = info.size / bs;
        let map: Vec<(u64, u64)> = info.dir_map.iter().filter(|e| e.0 < nblocks).map(|e| (e.0, e.1)).collect();
        let mut hole = map.iter().enumerate().find(|(i, e)| e.0 != *i as u64).map(|(i, _)| i as u64);
        if hole.is_none() && (map.len() as u64) < nblocks {
            hole = Some(map.len() as u64);
        }
        if let Some(h) = hole {
            self.findings.push(Finding::DirCorrupt { dir, lbn: h, at: 0, what: "hole in directory".into() });
            if h == 0 {
                self.fixes.clear_inodes.insert(dir);
            } else {
                for e in info.dir_map.iter().filter(|e| e.0 >= h) {
                    self.fixes.ptr_clears.push(e.2);
                }
                self.fixes.set_size.insert(dir, h * bs);
            }
        }
        let limit = hole.unwrap_or(nblocks);
        let mut head = Head { bno: map.first().filter(|_| limit > 0).map(|e| e.1), ..Default::default() };
        let mut entries = 0;
        for (lbn, bno) in map.into_iter().filter(|e| e.0 < limit) {
            let buf = self.read(bno)?;
            for chunk in (0..self.bs).step_by(DIRBLKSIZ) {
                let first_chunk = lbn == 0 && chunk == 0;
                let mut recs = Vec::new();
                let mut bad = None;
                for r in dir_iter(&buf[chunk..chunk + DIRBLKSIZ]) {
                    match r {
                        Ok(e) => {
                            recs.push(Rec { at: chunk + e.offset, ino: e.ino, dtype: e.dtype, name: e.name.to_vec() })
                        }
                        Err(e) => {
                            bad = Some((chunk + e.offset, e.what));
                            break;
                        }
                    }
                }
                if let Some((at, what)) = bad {
                    self.findings.push(Finding::DirCorrupt { dir, lbn, at, what: what.into() });
                    if first_chunk {
                        head.corrupt = true;
                    } else {
                        self.fixes.dir.push(DirFix::ResetChunk { bno, chunk });
                    }
                    continue;
                }
                if first_chunk {
                    head.first_ino = recs.first().map_or(0, |r| r.ino);
                }
                for (k, r) in recs.iter().enumerate() {
                    if r.ino == 0 {
                        continue;
                    }
                    if first_chunk && k == 0 && r.name == b"." {
                        head.dot = true;
                        self.check_dot(dir, bno, r);
                    } else if first_chunk && k == 1 && r.name == b".." {
                        head.dotdot = true;
                        self.check_dotdot(dir, bno, r);
                    } else if r.name == b"." || r.name == b".." {
                        self.findings.push(Finding::DirCorrupt {
                            dir,
                            lbn,
                            at: r.at,
                            what: format!("misplaced {:?} entry", name_str(&r.name)),
                        });
                        self.fixes.dir.push(DirFix::Remove { bno, at: r.at });
                    } else {
                        entries += 1;
                        self.check_entry(dir, lbn, bno, r, queue);
                    }
                }
            }
        }
        if let Some(i) = self.inodes.get_mut(&dir) {
            i.dir_limit = limit;
            i.head = head;
            i.entries = entries;
        }
        Ok(())
    }

    fn check_dot(&mut self, dir: u32, bno: u64, r: &Rec) {
        if r.ino != dir {
            self.findings.push(Finding::BadDot { dir, stored: r.ino });
            self.fixes.dir.push(DirFix::SetIno { bno, at: r.at, ino: dir });
        } else if let Some(i) = self.inodes.get_mut(&dir) {
            i.links = i.links.saturating_add(1);
        }
        self.check_dir_type(dir, bno, r, dir);
    }

    fn check_dotdot(&mut self, dir: u32, bno: u64, r: &Rec) {
        if let Some(i) = self.inodes.get_mut(&dir) {
            i.dotdot = Some((bno, r.at, r.ino));
        }
        // Counted where it points on disk, so that link counts describe the image as it is.
        if let Some(t) = self.inodes.get_mut(&r.ino) {
            if t.is_dir() && !t.bad {
                t.links = t.links.saturating_add(1);
            }
        }
        self.check_dir_type(dir, bno, r, r.ino);
    }

    fn check_dir_type(&mut self, dir: u32, bno: u64, r: &Rec, ino: u32) {
        if r.dtype != DT_DIR {
            self.findings.push(Finding::EntryTypeWrong {
                dir,
                name: name_str(&r.name),
                ino,
                stored: r.dtype,
                actual: DT_DIR,
            });
            self.fixes.dir.push(DirFix::SetType { bno, at: r.at, dtype: DT_DIR });
        }
    }

    fn check_entry(&mut self, dir: u32, lbn: u64, bno: u64, r: &Rec, queue: &mut VecDeque<u32>) {
        let valid = self.sb.is_valid_inode(r.ino);
        let Some(t) = self.inodes.get_mut(&r.ino).filter(|_| valid) else {
            self.findings.push(Finding::DanglingEntry { dir, name: name_str(&r.name), ino: r.ino, lbn, at: r.at });
            self.fixes.dir.push(DirFix::Remove { bno, at: r.at });
            return;
        };
        t.links = t.links.saturating_add(1);
        if dir == ROOT_INO && r.name == crate::br::BR_DIR && t.is_dir() {
            self.br_dir = Some(r.ino);
        }
        if t.flags & DI_UNMOVABLE != 0 && !t.is_dir() {
            if self.br_dir == Some(dir) {
                self.reservations += 1;
                self.reserved_blocks += t.kept;
            } else {
                self.findings.push(Finding::BadReservation {
                    ino: r.ino,
                    what: format!("named {:?} in directory {dir}, outside /.br", name_str(&r.name)),
                });
                self.fixes.clear_br_flags.insert(r.ino);
            }
        }
        let t = self.inodes.get_mut(&r.ino).expect("looked up above");
        let want = dtype_of_mode(t.mode);
        let type_wrong = !t.bad && r.dtype != want;
        if t.is_dir() && !t.bad {
            t.namers.push(Namer { dir, bno, at: r.at, name: r.name.clone() });
            if !t.visited {
                t.visited = true;
                queue.push_back(r.ino);
            }
        }
        if type_wrong {
            self.findings.push(Finding::EntryTypeWrong {
                dir,
                name: name_str(&r.name),
                ino: r.ino,
                stored: r.dtype,
                actual: want,
            });
            self.fixes.dir.push(DirFix::SetType { bno, at: r.at, dtype: want });
        }
    }

    /// Once every tree is walked: a directory's name is the entry in the directory its ".."
    /// names (else the first found), any other name is a second one; then "." and "..".
    fn resolve_dir(&mut self, d: u32) {
        let target = self.target;
        let Some(info) = self.inodes.get_mut(&d) else {
            return;
        };
        if !info.visited {
            return;
        }
        let dotdot_ino = info.dotdot.map(|x| x.2);
        let primary = if d == ROOT_INO || info.orphan {
            None
        } else {
            Some(info.namers.iter().position(|n| Some(n.dir) == dotdot_ino).unwrap_or(0))
        };
        let parent =
            if d == ROOT_INO { Some(ROOT_INO) } else { primary.and_then(|p| info.namers.get(p)).map(|n| n.dir) };
        let namers = std::mem::take(&mut info.namers);
        let head = std::mem::take(&mut info.head);
        let dotdot = info.dotdot;
        let names = namers.len() as u32;
        let unreachable = info.unrooted;
        let counted = info.nlink >= info.links;
        for (k, n) in namers.into_iter().enumerate() {
            if Some(k) == primary {
                continue;
            }
            let name = name_str(&n.name);
            self.findings.push(Finding::DirMultiplyLinked { ino: d, dir: n.dir, name, names, counted, unreachable });
            self.fixes.dir.push(DirFix::Remove { bno: n.bno, at: n.at });
        }
        if let (Some(p), Some((bno, at, ino))) = (parent, dotdot) {
            if ino != p {
                let stored_dir = self.inodes.get(&ino).is_some_and(|i| i.is_dir() && !i.bad);
                self.findings.push(Finding::BadDotDot { dir: d, stored: ino, expected: p, stored_dir });
                self.fixes.dir.push(DirFix::SetIno { bno, at, ino: p });
            }
        }
        let Some(bno) = head.bno else {
            return;
        };
        let head_parent = parent.or(target).unwrap_or(d);
        if !head.corrupt && !head.dot {
            let stored = if head.first_ino == d { 0 } else { head.first_ino };
            self.findings.push(Finding::BadDot { dir: d, stored });
        }
        if !head.corrupt && !head.dotdot {
            self.findings.push(Finding::BadDotDot { dir: d, stored: 0, expected: head_parent, stored_dir: false });
        }
        if head.corrupt || !head.dot || !head.dotdot {
            self.fixes.dir.push(DirFix::RebuildHead { bno, dir: d, parent: head_parent });
        }
    }

    // ------------------------------------------------------------------ pass 4: link counts

    fn pass4_links(&mut self) {
        let mut found = Vec::new();
        for (&ino, info) in &self.inodes {
            if info.zero_dir && ino != ROOT_INO {
                // Unnamed and empty: an rmdir's window. Named, or holding blocks: damage.
                if info.links == 0 && info.kept == 0 {
                    found.push(Finding::UnreferencedInode { ino, mode: info.mode, size: info.size });
                } else {
                    let what =
                        format!("directory of size 0 ({} names, {} blocks, none a directory's)", info.links, info.kept);
                    found.push(Finding::BadInode { ino, what });
                }
                continue;
            }
            if info.bad || info.orphan || self.fixes.clear_inodes.contains(&ino) {
                continue;
            }
            if info.links == 0 && !info.is_dir() {
                found.push(Finding::UnreferencedInode { ino, mode: info.mode, size: info.size });
                // A reservation without a name was being freed (brfree): its blocks go.
                let reservation = info.flags & DI_UNMOVABLE != 0;
                if self.preen || reservation || (info.size == 0 && info.kept == 0) {
                    self.fixes.clear_inodes.insert(ino);
                } else if self.target.is_some() {
                    self.fixes.reconnect.push(ino);
                }
                continue;
            }
            if info.nlink < info.links {
                found.push(Finding::LinkCountTooLow { ino, stored: info.nlink, actual: info.links });
            } else if info.nlink > info.links {
                found.push(Finding::LinkCountTooHigh { ino, stored: info.nlink, actual: info.links });
            }
            if info.nlink != info.links {
                self.fixes.set_nlink.insert(ino, info.links);
            }
        }
        self.findings.extend(found);
    }

    // ------------------------------------------------------------------ pass 5: maps, counts

    fn pass5_maps(&mut self) {
        let sb = self.sb.clone();
        let ipg = sb.inodes_per_group;
        let mut found = Vec::new();
        let mut free_blocks = 0u64;
        let mut free_inodes = 0u64;
        for cg in 0..sb.ngroups {
            let start = sb.cg_start(cg);
            let nblocks = sb.cg_blocks(cg);
            let used_b = (0..nblocks as u64).filter(|&i| self.owned.get(start + i)).count() as u64;
            free_blocks += nblocks as u64 - used_b;
            let first = cg * ipg;
            let used_i =
                (0..ipg).filter(|&i| first + i < FIRST_INO || self.inodes.contains_key(&(first + i))).count() as u64;
            free_inodes += (ipg as u64) - used_i;
            let Some(h) = &self.cgs[cg as usize] else {
                continue;
            };
            let buf = &self.cg_bufs[cg as usize];
            let imap = &buf[CgHeader::inode_map_offset()..];
            let bmap = &buf[CgHeader::block_map_offset(ipg)..];
            let (mut free_i, mut leaked_i, mut dirs) = (0u64, 0u64, 0u64);
            for idx in 0..ipg {
                let ino = first + idx;
                let bit = bit_get(imap, idx as usize);
                let info = self.inodes.get(&ino);
                let used = ino < FIRST_INO || info.is_some();
                if !bit {
                    free_i += 1;
                }
                if info.is_some_and(|i| i.is_dir()) {
                    dirs += 1;
                }
                match (bit, used) {
                    (true, false) => {
                        leaked_i += 1;
                        found.push(Finding::LeakedInode { ino });
                    }
                    (false, true) => found.push(Finding::InodeUsedButFree { ino }),
                    _ => {}
                }
            }
            let mut free_b = 0u64;
            for idx in 0..nblocks as u64 {
                let bno = start + idx;
                let bit = bit_get(bmap, idx as usize);
                if !bit {
                    free_b += 1;
                }
                match (bit, self.owned.get(bno)) {
                    (true, false) => found.push(Finding::LeakedBlock { bno }),
                    (false, true) => found.push(Finding::BlockUsedButFree { bno }),
                    _ => {}
                }
            }
            if h.free_blocks as u64 != free_b {
                found.push(Finding::CgCountWrong {
                    cg,
                    what: "free blocks",
                    stored: h.free_blocks as u64,
                    actual: free_b,
                });
            }
            if h.free_inodes as u64 != free_i {
                found.push(Finding::CgCountWrong {
                    cg,
                    what: "free inodes",
                    stored: h.free_inodes as u64,
                    actual: free_i,
                });
            }
            // A leaked inode may have been a directory whose count is still in the header (a
            // crash between the inode and the bitmap writes): that discrepancy is the leak's.
            let nd = h.ndirs as u64;
            if nd < dirs || nd > dirs + leaked_i {
                found.push(Finding::CgCountWrong { cg, what: "directories", stored: nd, actual: dirs });
            }
        }
        let size = sb.num_blocks * sb.block_size as u64;
        for (slot, &ino) in sb.snapshots.iter().enumerate().filter(|(_, &i)| i != 0) {
            let what = match self.inodes.get(&ino) {
                _ if sb.snapshots[..slot].contains(&ino) => Some("listed twice"),
                None => Some("not an inode in use"),
                Some(i) if i.flags & DI_SNAPSHOT == 0 => Some("not flagged as a snapshot"),
                Some(i) if i.size != size => Some("not the size of the file system"),
                Some(_) => None,
            };
            if let Some(what) = what {
                found.push(Finding::BadSnapshotList { slot, ino, what });
                self.fixes.drop_snapshots.insert(slot);
            }
        }
        let ndirs = self.inodes.values().filter(|i| i.is_dir()).count() as u64;
        for (what, stored, actual) in [
            ("free blocks", sb.free_blocks, free_blocks),
            ("free inodes", sb.free_inodes, free_inodes),
            ("directories", sb.ndirs, ndirs),
        ] {
            if stored != actual {
                found.push(Finding::SummaryWrong { what, stored, actual });
            }
        }
        self.findings.extend(found);
    }
}

#[cfg(test)]
mod tests;
