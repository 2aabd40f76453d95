//! fsck: the checker and repairer (FFS's fsck_ffs passes; soft updates §4 says which
//! inconsistencies a crash may leave). It reads the image straight from a `BlockDevice`, never
//! through `Fs` or the buffer cache, so that it can be the oracle of the crash tester: every
//! problem is a typed `Finding` with a `Class`. Allowed findings are the ones soft updates (and
//! synchronous FFS) may leave after a crash: leaked blocks and inodes, link counts too high, stale
//! block counts and summaries, and the two windows of a directory renamed to another parent, which
//! FFS cannot make atomic (a directory with exactly two names; a ".." still naming a directory,
//! the old parent). Violations are the ones an ordered file system must never leave.
//!
//! The passes, one file each as fsck_ffs has them, run in this order by `Scan::run_with`
//! (`scan`, which also holds the state they share):
//! - `setup` (fsck_ffs's `setup.c`), before the scan: the superblock it works from, the primary
//!   or the geometry of a copy or of the group headers when the primary is damaged or disagrees.
//! - `pass1`: the group headers, then every inode of every inode table, its block map walked
//!   into the ownership bitset; `pass1b`: a block claimed twice (decided as pass 1 claims).
//! - `pass2`: directories from the root, breadth first, each once: entries, ".", "..", types.
//! - `pass3`: lost+found, and the trees no path from the root reaches (walked as pass 2 walks).
//! - pass 2's second half (`pass2_names`): each directory's one name, its "." and "..".
//! - `pass4`: link counts and unreferenced inodes.
//! - `pass5`: the computed maps and counts against the bitmaps, group headers and superblock.
//!
//! The passes only read: each problem becomes a `Finding` (`findings`), and the fix it calls
//! for goes in `repair::Fixes`, which `repair` applies apart.
//!
//! `repair` (fsck -y) applies the fixes of one scan through a write set, scans again, and repeats
//! until a scan is clean (a fix may expose a consequence, e.g. a cleared pointer leaves a leaked
//! block, which the next round frees). Every round is bounded, and so is the number of rounds;
//! what the last scan still finds is reported as `remaining`. `preen` (fsck -p) does the same
//! only when every finding is `Allowed`: otherwise it writes nothing.

use thiserror::Error;

use crate::dev::{BlockDevice, DevError};
use crate::format::*;

mod findings;
mod pass1;
mod pass1b;
mod pass2;
mod pass3;
mod pass4;
mod pass5;
mod repair;
mod scan;
mod setup;
pub mod ufs2;

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
    /// What a repair did beyond the findings' own fixes, a line each in fsck_ffs's words: an
    /// unreferenced inode cleared because lost+found could not grow to hold its name.
    pub notes: Vec<String>,
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
    let mut notes = Vec::new();
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
        let wrote = scan.apply(&mut notes)?;
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
    report.notes = notes;
    report.remaining = last.findings;
    report.files = last.files;
    report.dirs = last.dirs;
    report.used_blocks = last.used_blocks;
    report.used_inodes = last.used_inodes;
    Ok(report)
}

#[cfg(test)]
mod tests;
