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

use thiserror::Error;

use crate::dev::{BlockDevice, DevError};
use crate::format::*;

mod findings;
mod pass1;
mod pass1b;
mod pass2;
mod pass3;
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
