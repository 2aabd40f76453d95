//! Repair, what fsck_ffs writes after its passes: pass 4's `adjust` and `clri` (a link count
//! set to the names counted; an unreferenced inode cleared, or with `-y` a file reconnected to
//! lost+found, made as pass3.c's `allocdir` makes it: one fragment, "." and ".."
//! in its first chunk; grown as dir.c's `expanddir` grows it, its last fragments moved to a
//! whole block, then a new block at a time through the direct blocks and the single indirect
//! block; a file is cleared only when even that finds no room), then pass 5's rewrite of every group whose maps or summaries differ
//! from what pass 1 found (inode and fragment maps, `cg_cs`, `cg_frsum`, the cluster map and
//! summary, sealed with their check hashes), the summary area at `fs_csaddr`, `fs_cstotal`, and
//! last `ckfini`'s clean flag once a check of the result finds nothing.
//!
//! With `-y` also what no soft-updates crash leaves, as fsck_ffs answers yes to each question:
//! damaged inodes cleared (`clri`), check hashes corrected, corrupt directory chunks salvaged,
//! "." and ".." fixed, bad entries removed or their types fixed, loops and unreferenced
//! directories reconnected, a bad root made again, undecodable groups rebuilt.
//!
//! Repair starts only when every finding is one it knows how to repair (`repairs`), and with
//! `-p` (preen) only when every finding is of the `Allowed` class, what a soft-updates crash may
//! leave; otherwise nothing is written. Preen clears an unreferenced file rather than
//! reconnecting it: after a soft-updates crash it is a file whose last name was removed, or a
//! create whose name never reached the disk, neither of which anyone could see.

use super::pass1::{walk, Event, Step};
use super::*;
use std::collections::BTreeSet;

use crate::format::{dirent_put, dirent_size, DIRBLKSIZ, DT_DIR};

/// Whether entry `e`'s name is `name` (a finding's name, read lossily as UTF-8).
fn named(e: &Direct<'_>, name: &str) -> bool {
    String::from_utf8_lossy(e.name) == name
}

/// Removes the entry at byte `at` of a block of directory `dir`.
fn remove_at(dir: u32, data: &mut [u8], at: usize) -> Result<(), Ufs2Error> {
    crate::format::dir_remove(data, at).map(|_| ()).map_err(|e| Ufs2Error::Geometry(format!("directory I={dir}: {e}")))
}

/// A device written by byte offset.
pub trait WriteAt {
    fn write_all_at(&self, buf: &[u8], off: u64) -> std::io::Result<()>;
}

impl WriteAt for std::fs::File {
    fn write_all_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, off)
    }
}

impl WriteAt for dyn crate::dev::BlockDevice {
    fn write_all_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
        crate::dev::write_bytes(self, off, buf, crate::dev::WriteKind::Sync).map_err(std::io::Error::other)
    }
}

/// How far repair goes: fsck_ffs's `-y`, or `-p` (only what a soft-updates crash may leave).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairMode {
    Yes,
    Preen,
}

/// What a repair did.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The check before any write.
    pub before: Report,
    /// Why nothing was written (findings repair does not know, or not `Allowed` in preen).
    pub refused: Option<String>,
    /// What was written, a line each, in fsck_ffs's words.
    pub done: Vec<String>,
    /// The check after the writes (`None` when refused).
    pub after: Option<Report>,
}

/// Whether `f` is a finding repair knows how to repair.
fn repairs(f: &Finding) -> bool {
    use Finding::*;
    matches!(
        f,
        SuperblockCheckHash { .. }
            | CgCheckHash { .. }
            | BlockCount { .. }
            | UnrefFile { .. }
            | UnrefDir { .. }
            | SizeBeyondAllocated { .. }
            | ExtraDirLink { .. }
            | BadDotDot { .. }
            | LinkCount { .. }
            | InodesMarkedFree { .. }
            | InodesMarkedUsed { .. }
            | FragsMarkedFree { .. }
            | FragsMarkedUsed { .. }
            | CgCount { .. }
            | Frsum { .. }
            | ClusterMap { .. }
            | ClusterSum { .. }
            | Rotor { .. }
            | CsArea { .. }
            | CsTotal { .. }
            | GrowInterrupted { .. }
            | BadReservation { .. }
            | DirHole { .. }
            | DirLength { .. }
            | Unallocated { .. }
            | InodeCheckHash { .. }
            | PartiallyAllocated { .. }
            | UnknownType { .. }
            | BadInode { .. }
            | BadBlock { .. }
            | DupBlock { .. }
            | Excessive { .. }
            | BadExtAttr { .. }
            | DirCorrupt { .. }
            | MissingDot { .. }
            | BadDot { .. }
            | MissingDotDot { .. }
            | ExtraDot { .. }
            | InoOutOfRange { .. }
            | BadType { .. }
            | DirLoop { .. }
            | BadCg { .. }
            | BadRoot { .. }
            | PastInitedIblk { .. }
    )
}

/// The inode `-y` clears for `f` (fsck_ffs's `clri` after "CLEAR?"): one holding a pointer out
/// of range or claimed twice (every owner of a duplicate, as pass1b.c asks of each: which
/// pointer the damage made is not known), one of an unknown type, one whose fields are
/// inconsistent, a free inode that is not zero, a directory of no length that an entry names.
fn clears(f: &Finding) -> Option<u32> {
    use Finding::*;
    match *f {
        BadInode { ino, .. }
        | BadBlock { ino, .. }
        | DupBlock { ino, .. }
        | Excessive { ino, .. }
        | UnknownType { ino, .. }
        | PartiallyAllocated { ino }
        | DirLength { ino, size: 0 } => Some(ino),
        _ => None,
    }
}

/// Whether `f` is found by pass 3 or 4 (or pass 2's count of a directory's names).
fn of_pass3_or_4(f: &Finding) -> bool {
    use Finding::*;
    matches!(
        f,
        UnrefFile { .. } | UnrefDir { .. } | DirLoop { .. } | LinkCount { .. } | ExtraDirLink { .. } | BadDotDot { .. }
    )
}

/// The duplicates (inode, fragment) an inode keeps: every other owner of the fragment is
/// cleared for another reason (`others`: a bad pointer, a bad type), the likelier holder of
/// the pointer the damage made. fsck_ffs's pass1b clears every owner; this keeps a file the
/// damage did not touch.
fn spared_dups(findings: &[Finding], others: &BTreeSet<u32>) -> BTreeSet<(u32, i64)> {
    let mut owners: std::collections::BTreeMap<i64, Vec<u32>> = Default::default();
    for f in findings {
        if let Finding::DupBlock { ino, fsb } = *f {
            owners.entry(fsb).or_default().push(ino);
        }
    }
    let mut spared = BTreeSet::new();
    for (fsb, inos) in owners {
        let left: Vec<u32> = inos.iter().copied().filter(|i| !others.contains(i)).collect();
        if left.len() == 1 && inos.len() > 1 {
            spared.insert((left[0], fsb));
        }
    }
    spared
}

/// The inode whose dinode a repair of `f` rewrites, if any: skipped when that inode is cleared
/// in the same round.
fn rewrites(f: &Finding) -> Option<u32> {
    use Finding::*;
    match *f {
        BlockCount { ino, .. }
        | DirHole { ino, .. }
        | DirLength { ino, .. }
        | BadReservation { ino, .. }
        | SizeBeyondAllocated { ino, .. }
        | LinkCount { ino, .. }
        | UnrefFile { ino, .. }
        | UnrefDir { ino, .. }
        | InodeCheckHash { ino, .. }
        | BadExtAttr { ino, .. } => Some(ino),
        _ => None,
    }
}

/// Groups that do not decode are rebuilt only while they are at most half of them: past that
/// the superblock that describes them is more likely wrong than they are (a copy, `-b`, is the
/// way then), and rebuilding every group from it would free what every file holds.
fn too_many_bad_groups(findings: &[Finding], ncg: u32) -> bool {
    let bad = findings.iter().filter(|f| matches!(f, Finding::BadCg { .. })).count();
    bad > 0 && 2 * bad > ncg as usize
}

/// Checks the file system on `dev` and repairs it as `mode` allows, or writes nothing and says
/// why. With `-b` (a group's superblock copy) and `-y`, the copy is written at the standard
/// place first, as fsck_ffs does at its end ("UPDATE STANDARD SUPERBLOCK"), and the file system
/// is then checked and repaired from it (its counts are newfs's: pass 5 sets them); `-p` with
/// `-b` writes nothing.
pub fn repair<D: ReadAt + WriteAt + ?Sized>(
    dev: &D,
    dev_len: u64,
    opts: &Options,
    mode: RepairMode,
) -> Result<Outcome, Ufs2Error> {
    if let (Some(at), RepairMode::Yes) = (opts.alternate, mode) {
        let (ck, before) = run(dev, dev_len, opts)?;
        let mut sb = ck.sb.clone();
        (sb.fs_sblockloc, sb.fs_sblockactualloc) = (SBLOCK_UFS2 as i64, SBLOCK_UFS2 as i64);
        sb.fs_clean = 0;
        dev.write_all_at(&sb.encode(), SBLOCK_UFS2)?;
        let mut out = repair(dev, dev_len, &Options::default(), mode)?;
        out.done.insert(0, format!("UPDATE STANDARD SUPERBLOCK FROM THE COPY AT SECTOR {at} (DONE)"));
        out.before = before;
        return Ok(out);
    }
    let (mut ck, before) = run(dev, dev_len, opts)?;
    let mut out = Outcome { before, ..Outcome::default() };
    let refuse = |why: String| Outcome { refused: Some(why), ..out.clone() };
    if opts.alternate.is_some() {
        return Ok(refuse("preen from a superblock copy (-b): run sufs fsck -y -b".into()));
    }
    let unknown: Vec<String> = out.before.findings.iter().filter(|f| !repairs(f)).map(|f| f.to_string()).collect();
    if !unknown.is_empty() {
        return Ok(refuse(format!("no repair for: {}", unknown.join("; "))));
    }
    if too_many_bad_groups(&out.before.findings, ck.sb.fs_ncg) {
        return Ok(refuse("most cylinder groups are bad: check the superblock (sufs fsck -y -b)".into()));
    }
    if mode == RepairMode::Preen {
        let v: Vec<String> =
            out.before.findings.iter().filter(|f| f.class() == Class::Violation).map(|f| f.to_string()).collect();
        if !v.is_empty() {
            return Ok(refuse(format!("not what a soft-updates crash leaves: {}", v.join("; "))));
        }
    }
    // A repair can leave work for another round (a cleared directory's parent counted its
    // ".."): rounds go on while they change something they know how to change.
    for _ in 0..MAX_ROUNDS {
        let before = out.done.len();
        // Inodes past a group's `cg_initediblk` were not read: nothing else is repaired until
        // they are, or entries naming them would be removed as naming free inodes.
        if !ck.raise_initediblk(&mut out.done)? {
            ck.repair_inodes(mode, &mut out.done)?;
            ck.rewrite_groups(&mut out.done)?;
        }
        let (next, after) = run(dev, dev_len, opts)?;
        let settled = after.findings.is_empty() || out.done.len() == before || !after.findings.iter().all(repairs);
        out.after = Some(after);
        if settled {
            break;
        }
        ck = next;
    }
    if out.after.as_ref().is_some_and(|a| a.findings.is_empty()) {
        ck.mark_clean(&mut out.done)?;
    }
    Ok(out)
}

/// Rounds of repair and check before repair stops with what is left.
const MAX_ROUNDS: usize = 16;

impl<D: ReadAt + WriteAt + ?Sized> Check<'_, D> {
    fn write(&self, off: u64, b: &[u8]) -> Result<(), Ufs2Error> {
        Ok(self.dev.write_all_at(b, off)?)
    }

    fn put_dinode(&self, ino: u32, d: &Dinode) -> Result<(), Ufs2Error> {
        self.write(self.sb.ino_offset(ino), &d.encode_for(&self.sb))
    }

    /// Pass 4's repairs, and pass 1's block counts: each inode rewritten once. With `-y` first
    /// the inodes cleared, the root made again, the corrupt directory chunks salvaged; then
    /// the rest, skipping what a cleared inode made moot.
    fn repair_inodes(&mut self, mode: RepairMode, done: &mut Vec<String>) -> Result<(), Ufs2Error> {
        let findings = self.findings.clone();
        let cleared = self.clear_damaged(&findings, done)?;
        let edited = self.fix_directories(&findings, done)?;
        // What passes 3 and 4 found is stale once an inode is cleared or a directory's
        // entries change: their repairs (which reconnect or clear) wait for the next round.
        let stale = !cleared.is_empty() || edited;
        let mut looped = false;
        for f in &findings {
            if rewrites(f).is_some_and(|ino| cleared.contains(&ino)) || (stale && of_pass3_or_4(f)) {
                continue;
            }
            match *f {
                Finding::BlockCount { ino, actual, .. } => {
                    let mut d = self.dinode(ino)?;
                    d.di_blocks = actual;
                    self.put_dinode(ino, &d)?;
                    done.push(format!("{f} (FIXED)"));
                }
                Finding::DirHole { ino, lbn } => {
                    // fsck_ffs's "CONTAINS EMPTY BLOCKS ... ADJUST LENGTH": the directory ends
                    // before its first hole (a block past it is the next round's to find).
                    let mut d = self.dinode(ino)?;
                    let size = d.di_size.min(self.sb.lblktosize(lbn));
                    d.di_size = size;
                    self.put_dinode(ino, &d)?;
                    self.inode_mut(ino).size = size;
                    done.push(format!("{f} (ADJUSTED LENGTH TO {size})"));
                }
                Finding::DirLength { ino, .. } => {
                    // fsck_ffs's "LENGTH ... NOT MULTIPLE OF 512 ... ADJUST": rounded up to a
                    // whole chunk (a size past the blocks is `SizeBeyondAllocated`'s to cut).
                    let mut d = self.dinode(ino)?;
                    let chunk = DIRBLKSIZ as u64;
                    let size = d.di_size.checked_next_multiple_of(chunk).unwrap_or(u64::MAX / chunk * chunk);
                    d.di_size = size;
                    self.put_dinode(ino, &d)?;
                    self.inode_mut(ino).size = size;
                    done.push(format!("{f} (ADJUSTED TO {size})"));
                }
                // fsck_ffs's pass 2: an entry naming a free inode is removed.
                Finding::Unallocated { dir, ino, .. } if self.remove_entry(dir, ino)? => {
                    done.push(format!("{f} (REMOVED)"));
                }
                Finding::BadReservation { ino, .. } => {
                    let mut d = self.dinode(ino)?;
                    d.di_spare[0] &= !crate::format::DI_UNMOVABLE;
                    d.di_flags &= !crate::format::layout::SF_IMMUTABLE;
                    self.put_dinode(ino, &d)?;
                    done.push(format!("{f} (FLAGS CLEARED)"));
                }
                Finding::SizeBeyondAllocated { ino, should, .. } => {
                    // fsck_ffs's pass 1: the size ends with the last block the file holds. An
                    // indirect block past that size holds no data (the last data block is
                    // before it): it goes too, or the inode would hold a pointer past its size.
                    let mut d = self.dinode(ino)?;
                    self.drop_indirects_past(ino, &mut d, should)?;
                    d.di_size = should;
                    self.put_dinode(ino, &d)?;
                    self.inode_mut(ino).size = should;
                    done.push(format!("{f} (ADJUSTED)"));
                }
                Finding::ExtraDirLink { ino, dir, .. } => {
                    // fsck_ffs's pass 2 removes the extra name. A rename's window leaves two,
                    // and the one to keep is in the directory its ".." names: the other goes
                    // (the counts are set right in the next round).
                    let dotdot = self.inodes.get(ino).dotdot;
                    let first = self.inodes.get(ino).parent;
                    let drop_in = if dotdot == dir && first != dir { first } else { dir };
                    if self.remove_entry(drop_in, ino)? {
                        done.push(format!("{f} (REMOVED THE NAME IN I={drop_in})"));
                    }
                }
                // fsck_ffs's pass 3: ".." names the directory that names it (after a rename's
                // extra name is gone, which may settle it).
                Finding::BadDotDot { dir, parent, .. }
                    if !findings.iter().any(|g| matches!(g, Finding::ExtraDirLink { ino, .. } if *ino == dir))
                        && self.set_dotdot(dir, parent)? =>
                {
                    done.push(format!("{f} (FIXED)"));
                }
                Finding::LinkCount { ino, actual, .. } => {
                    let mut d = self.dinode(ino)?;
                    assert!(actual > 0 && actual <= i16::MAX as u32, "I={ino}: a link count of {actual} names");
                    d.di_nlink = actual as i16;
                    self.put_dinode(ino, &d)?;
                    self.inode_mut(ino).nlink = actual as i16;
                    done.push(format!("{f} (ADJUSTED)"));
                }
                Finding::UnrefFile { ino, .. } => {
                    let d = self.dinode(ino)?;
                    // pass4.c's `adjust` asks RECONNECT of every file, empty ones too.
                    let mut sorry = "";
                    if mode == RepairMode::Yes {
                        match self.reconnect(ino, &d, done)? {
                            Ok(lf) => {
                                done.push(format!("{f} (RECONNECTED to lost+found I={lf})"));
                                continue;
                            }
                            Err(why) => sorry = why,
                        }
                    }
                    self.clri(ino, &d)?;
                    done.push(format!("{f} ({sorry}CLEARED)"));
                }
                Finding::UnrefDir { ino, .. } => {
                    // A directory whose first block never reached the disk (fsck_ffs's "ZERO
                    // LENGTH DIR"), a new one whose name did not, or a removed one whose
                    // entries a rename moved out before its removal reached the disk: cleared,
                    // as fsck_ffs's preen clears what soft updates left unreferenced. Names it
                    // held are counted again in the next round: a file named nowhere else is
                    // then unreferenced, and reconnected (-y) or cleared (-p) as any other.
                    // With -y one holding entries is reconnected, as pass3.c's `linkup` does.
                    let empty = self.dir_is_empty(ino)?;
                    let d = self.dinode(ino)?;
                    let mut sorry = "";
                    if mode == RepairMode::Yes && !empty {
                        match self.reconnect(ino, &d, done)? {
                            Ok(lf) => {
                                done.push(format!("{f} (RECONNECTED to lost+found I={lf})"));
                                continue;
                            }
                            Err(why) => sorry = why,
                        }
                    }
                    self.clri(ino, &d)?;
                    let what = if empty { "CLEARED" } else { "CLEARED; ITS NAMES COUNTED AGAIN" };
                    done.push(format!("{f} ({sorry}{what})"));
                }
                Finding::InodeCheckHash { ino, .. } => {
                    // inode.c's "INODE CHECK-HASH FAILED ... CORRECT": the hash of the bytes
                    // as they are (`put_dinode` computes it).
                    let d = self.dinode(ino)?;
                    self.put_dinode(ino, &d)?;
                    done.push(format!("{f} (CORRECTED)"));
                }
                Finding::BadExtAttr { ino, .. } => {
                    // The area dropped, the file kept (its blocks are freed and its block
                    // count set in the next round).
                    let mut d = self.dinode(ino)?;
                    d.di_extsize = 0;
                    d.di_extb.fill(0);
                    self.put_dinode(ino, &d)?;
                    done.push(format!("{f} (EXTATTR AREA CLEARED)"));
                }
                Finding::DirLoop { ino }
                    if !looped && !findings.iter().any(|g| matches!(g, Finding::ExtraDirLink { .. })) =>
                {
                    // pass3.c: a directory of a loop no path reaches, moved to lost+found (its
                    // name in the loop removed); one a round, which may open the whole loop.
                    looped = true;
                    let parent = self.inodes.get(ino).parent;
                    if self.remove_entry(parent, ino)? {
                        let d = self.dinode(ino)?;
                        match self.reconnect(ino, &d, done)? {
                            Ok(lf) => done.push(format!("{f} (RECONNECTED to lost+found I={lf})")),
                            Err(why) => done.push(format!("{f} ({why}NAME IN I={parent} REMOVED)")),
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `-y`'s `clri` of every inode `clears` names, then the root made again if it is bad
    /// (pass3.c's "ROOT INODE UNALLOCATED. ALLOCATE?", "NOT DIRECTORY. REALLOCATE?": every
    /// directory is then unreferenced, and reconnected to lost+found in the next rounds).
    /// Answers the inodes cleared.
    fn clear_damaged(&mut self, findings: &[Finding], done: &mut Vec<String>) -> Result<BTreeSet<u32>, Ufs2Error> {
        let mut cleared = BTreeSet::new();
        let others: BTreeSet<u32> =
            findings.iter().filter(|f| !matches!(f, Finding::DupBlock { .. })).filter_map(clears).collect();
        let spared = spared_dups(findings, &others);
        for f in findings {
            if matches!(f, Finding::DupBlock { ino, fsb } if spared.contains(&(*ino, *fsb))) {
                continue;
            }
            if let Some(ino) = clears(f).filter(|&ino| cleared.insert(ino)) {
                self.clear_inode(ino)?;
                done.push(format!("{f} (CLEARED)"));
            }
        }
        let bad_root = findings.iter().find(|f| matches!(f, Finding::BadRoot { .. }));
        if let Some(f) = bad_root.filter(|_| self.inodes.get_mut(UFS_ROOTINO).is_some()) {
            if self.inodes.get(UFS_ROOTINO).state != State::Free {
                self.clear_inode(UFS_ROOTINO)?;
                cleared.insert(UFS_ROOTINO);
            }
            let what = if self.allocdir(UFS_ROOTINO, UFS_ROOTINO)? { "ALLOCATED" } else { "CANNOT ALLOCATE" };
            done.push(format!("{f} ({what})"));
        }
        Ok(cleared)
    }

    /// `clri` of an inode pass 1 found damaged (or not zero though free): zeroed, and no
    /// longer a directory for this round's edits. Its fragments stay claimed this round,
    /// since which of them are its own is not known (a duplicate's other owner, pointers
    /// pass 1 did not walk): the next round's pass 5 frees what nothing holds.
    fn clear_inode(&mut self, ino: u32) -> Result<(), Ufs2Error> {
        let t = self.inodes.get_mut(ino).unwrap_or_else(|| panic!("I={ino}: clearing an inode pass 1 did not read"));
        *t = InoInfo::default();
        self.write(self.sb.ino_offset(ino), &[0u8; UFS2_DINODE_SIZE])?;
        self.dir_blocks.remove(&ino);
        self.room_from.remove(&ino);
        Ok(())
    }

    /// `-y`'s directory repairs (pass2.c, dir.c): corrupt chunks salvaged first; in
    /// directories without one, "." and ".." made right, extra ones removed, entries naming
    /// inode 1 or 0 removed, wrong types fixed. True if an entry was removed or moved.
    fn fix_directories(&mut self, findings: &[Finding], done: &mut Vec<String>) -> Result<bool, Ufs2Error> {
        use Finding::*;
        let (mut corrupt, mut edited) = (BTreeSet::new(), false);
        for f in findings {
            if let DirCorrupt { dir, offset, .. } = *f {
                corrupt.insert(dir);
                if self.salvage(dir, offset)? {
                    done.push(format!("{f} (SALVAGED)"));
                    edited = true;
                }
            }
        }
        let mut dots = BTreeSet::new();
        for f in findings {
            if let MissingDot { dir } | BadDot { dir, .. } | MissingDotDot { dir } = *f {
                if !corrupt.contains(&dir) && dots.insert(dir) && self.fix_dots(dir, done)? {
                    done.push(format!("{f} (FIXED)"));
                    edited = true;
                }
            }
        }
        for f in findings {
            // (repaired, fsck_ffs's word, whether an entry went)
            let (did, word, removed) = match f {
                ExtraDot { dir, name } if !corrupt.contains(dir) && !dots.contains(dir) => {
                    (self.remove_extra_dot(*dir, name)?, "REMOVED", true)
                }
                InoOutOfRange { dir, name, ino } if !corrupt.contains(dir) => {
                    let pick = |e: &Direct<'_>| e.d_ino == *ino && e.name != b"." && e.name != b".." && named(e, name);
                    (self.edit_entry(*dir, pick, |data, at| remove_at(*dir, data, at))?, "REMOVED", true)
                }
                BadType { dir, name, ino, actual, .. } if !corrupt.contains(dir) => {
                    let pick = |e: &Direct<'_>| e.d_ino == *ino && named(e, name);
                    let set = |data: &mut [u8], at: usize| {
                        crate::format::dirent_set_type(data, at, *actual);
                        Ok(())
                    };
                    (self.edit_entry(*dir, pick, set)?, "FIXED", false)
                }
                _ => continue,
            };
            if did {
                done.push(format!("{f} ({word})"));
                edited |= removed;
            }
        }
        Ok(edited)
    }

    /// dir.c's salvage of a chunk `dircheck` refuses ("DIRECTORY CORRUPTED ... SALVAGE"): the
    /// bad entry at byte `offset` of directory `dir` and the rest of its chunk become free
    /// space of the entry before it, or an empty record at the chunk's start. False: the
    /// chunk is not in a block pass 1 found in range.
    fn salvage(&mut self, dir: u32, offset: u64) -> Result<bool, Ufs2Error> {
        let (bsize, fsize) = (self.sb.fs_bsize as u64, self.sb.fs_fsize as u64);
        let lbn = (offset / bsize) as i64;
        let Some(&(_, fsb, frags)) = self.dir_blocks.get(&dir).and_then(|v| v.iter().find(|b| b.0 == lbn)) else {
            return Ok(false);
        };
        let in_block = (offset % bsize) as usize;
        let chunk_at = in_block - in_block % DIRBLKSIZ;
        if (chunk_at + DIRBLKSIZ) as u64 > frags as u64 * fsize {
            return Ok(false);
        }
        let mut data = self.read(fsb, chunk_at + DIRBLKSIZ)?;
        let chunk = &mut data[chunk_at..];
        let bad = in_block - chunk_at;
        // The entries before the bad one passed `dircheck`: their record lengths lead to it.
        let (mut at, mut prev) = (0, None);
        while at < bad {
            let reclen = u16::from_le_bytes([chunk[at + 4], chunk[at + 5]]) as usize;
            if reclen == 0 {
                break;
            }
            prev = Some(at);
            at += reclen;
        }
        match prev {
            Some(p) if at == bad => chunk[p + 4..p + 6].copy_from_slice(&((DIRBLKSIZ - p) as u16).to_le_bytes()),
            _ => {
                chunk.fill(0);
                chunk[4..6].copy_from_slice(&(DIRBLKSIZ as u16).to_le_bytes());
            }
        }
        assert!(DirIter::new(chunk, 0, DIRBLKSIZ as u64, self.sb.maxino()).all(|e| e.is_ok()), "I={dir}: salvaged");
        let bytes = chunk.to_vec();
        self.write(self.sb.fsb_offset(fsb) + chunk_at as u64, &bytes)?;
        Ok(true)
    }

    /// pass2.c's "MISSING '.'", "BAD INODE NUMBER FOR '.'", "MISSING '..'" ... FIX: directory
    /// `dir`'s first chunk written again with "." and ".." first (".." naming the directory
    /// that names it, else the root, for pass 3 to reconnect), then its other entries packed;
    /// an entry that no longer fits is dropped (its inode is then unreferenced and
    /// reconnected). False: the directory has no first block.
    fn fix_dots(&mut self, dir: u32, done: &mut Vec<String>) -> Result<bool, Ufs2Error> {
        let t = *self.inodes.get(dir);
        let first = self.dir_blocks.get(&dir).and_then(|v| v.first()).copied();
        let Some((0, fsb, _)) = first.filter(|_| t.size >= DIRBLKSIZ as u64) else {
            return Ok(false);
        };
        let parent = match (t.parent, t.dotdot) {
            _ if dir == UFS_ROOTINO => UFS_ROOTINO,
            (0, dd) if dd != 0 && self.is_dir(dd) => dd,
            (0, _) => UFS_ROOTINO,
            (p, _) => p,
        };
        let old = self.read(fsb, DIRBLKSIZ)?;
        let mut entries = vec![(parent, DT_DIR, b"..".to_vec())];
        entries.extend(
            DirIter::new(&old, 0, t.size, self.sb.maxino())
                .map_while(Result::ok)
                .filter(|e| e.d_ino != 0 && e.name != b"." && e.name != b"..")
                .map(|e| (e.d_ino, e.d_type, e.name.to_vec())),
        );
        let mut chunk = vec![0u8; DIRBLKSIZ];
        dirent_put(&mut chunk, 0, dir, 12, DT_DIR, b".");
        let (mut at, mut last) = (12, 0);
        for (ino, dtype, name) in entries {
            let n = dirent_size(name.len());
            if at + n > DIRBLKSIZ {
                done.push(format!(
                    "ENTRY {} I={ino} IN I={dir}: NO ROOM AFTER '.' AND '..' (REMOVED)",
                    name.escape_ascii()
                ));
                continue;
            }
            dirent_put(&mut chunk, at, ino, n, dtype, &name);
            (last, at) = (at, at + n);
        }
        chunk[last + 4..last + 6].copy_from_slice(&((DIRBLKSIZ - last) as u16).to_le_bytes());
        self.write(self.sb.fsb_offset(fsb), &chunk)?;
        self.inode_mut(dir).dotdot = parent;
        Ok(true)
    }

    /// pass2.c's "EXTRA '.' ENTRY" / "EXTRA '..' ENTRY" ... FIX: the entry named `name` that
    /// is not the first two of the directory removed.
    fn remove_extra_dot(&mut self, dir: u32, name: &str) -> Result<bool, Ufs2Error> {
        let Some(&(0, fsb, _)) = self.dir_blocks.get(&dir).and_then(|v| v.first()) else {
            return Ok(false);
        };
        let head = self.read(fsb, 8)?;
        let second = u16::from_le_bytes([head[4], head[5]]) as u64;
        let pick = |e: &Direct<'_>| e.name == name.as_bytes() && e.offset != 0 && e.offset != second;
        self.edit_entry(dir, pick, |data, at| remove_at(dir, data, at))
    }

    /// Inodes in use past a group's `cg_initediblk` (its inode map says so): the count raised
    /// to cover them, a whole block of inodes at a time, for the next round's pass 1 to read
    /// them (an inode there that was never initialized is found and cleared then). True if a
    /// group was written.
    fn raise_initediblk(&mut self, done: &mut Vec<String>) -> Result<bool, Ufs2Error> {
        let sb = self.sb.clone();
        let mut wrote = false;
        for f in self.findings.clone() {
            let Finding::PastInitedIblk { cg, .. } = f else { continue };
            let Some(mut g) = self.cgs[cg as usize].clone() else { continue };
            let map = Bitmap::from_bytes(g.inode_map(), sb.fs_ipg as usize);
            let Some(last) = map.iter_ones().last() else { continue };
            let inited = (last as u32 + 1).next_multiple_of(sb.inopb()).min(sb.fs_ipg);
            assert!(inited > g.hdr.cg_initediblk, "CG {cg}: cg_initediblk {} not raised", g.hdr.cg_initediblk);
            g.hdr.cg_initediblk = inited;
            self.write(sb.fsb_offset(sb.cgtod(cg)), &g.encode(&sb))?;
            self.cgs[cg as usize] = Some(g);
            done.push(format!("{f} (RAISED TO {inited})"));
            wrote = true;
        }
        Ok(wrote)
    }

    /// `clri`: inode `ino` (`d` as on disk) zeroed and its fragments unclaimed, for pass 5 to
    /// free in the maps.
    fn clri(&mut self, ino: u32, d: &Dinode) -> Result<(), Ufs2Error> {
        assert_eq!(self.inodes.get(ino).state, State::InUse, "I={ino}: clearing an inode not in use");
        let mut held = Vec::new();
        walk(&self.sb, self.dev, d, &mut |ev| {
            if let Event::Held(h) = ev {
                held.push(h);
            }
            Step::Go
        })?;
        for h in held {
            for fr in h.fsb..h.fsb + h.frags {
                // A duplicate (kept by this inode, its other owner cleared) stays claimed for
                // the next round to free.
                assert!(self.claimed.get(fr), "I={ino}: fragment {fr} not claimed");
                if !self.dups.contains(&fr) {
                    self.claimed.clear(fr);
                }
            }
        }
        self.write(self.sb.ino_offset(ino), &[0u8; UFS2_DINODE_SIZE])?;
        *self.inode_mut(ino) = InoInfo::default();
        Ok(())
    }

    /// Clears the indirect pointers of `d` (inode `ino`) that a size of `size` does not reach,
    /// their blocks unclaimed for pass 5 to free: they map no data.
    fn drop_indirects_past(&mut self, ino: u32, d: &mut Dinode, size: u64) -> Result<(), Ufs2Error> {
        let nindir = self.sb.nindir() as u64;
        let (mut n, mut levels) = (size.div_ceil(self.sb.fs_bsize as u64).saturating_sub(UFS_NDADDR as u64), 0);
        while n > 0 {
            levels += 1;
            n /= nindir;
        }
        for level in levels + 1..=UFS_NIADDR {
            if d.di_ib[level - 1] == 0 {
                continue;
            }
            let mut only = d.clone();
            only.di_db = [0; UFS_NDADDR];
            only.di_ib = [0; UFS_NIADDR];
            only.di_ib[level - 1] = d.di_ib[level - 1];
            let mut held = Vec::new();
            walk(&self.sb, self.dev, &only, &mut |ev| {
                if let Event::Held(h) = ev {
                    held.push(h);
                }
                Step::Go
            })?;
            for h in held {
                assert!(h.level > 0, "I={ino}: data block {} past the last allocated one", h.lbn);
                for fr in h.fsb..h.fsb + h.frags {
                    self.claimed.clear(fr);
                }
            }
            d.di_ib[level - 1] = 0;
        }
        Ok(())
    }

    /// `linkup`: file `ino` named "#ino" in lost+found (made if missing, grown if full), its
    /// link count set to that one name. `Err`: fsck_ffs's words for why it could not be (no
    /// lost+found and no room to make one, or no room in it even grown); the caller clears
    /// the file.
    fn reconnect(
        &mut self,
        ino: u32,
        d: &Dinode,
        done: &mut Vec<String>,
    ) -> Result<Result<u32, &'static str>, Ufs2Error> {
        let lf = match self.lookup(UFS_ROOTINO, b"lost+found")? {
            Some(lf) if self.is_dir(lf) => lf,
            Some(_) => return Ok(Err("SORRY. lost+found IS NOT A DIRECTORY; ")),
            None => match self.make_lost_found(done)? {
                Some(lf) => {
                    done.push(format!("NO lost+found DIRECTORY (CREATED I={lf})"));
                    lf
                }
                None => return Ok(Err("SORRY. CANNOT CREATE lost+found DIRECTORY; ")),
            },
        };
        let dtype = self.inodes.get(ino).dtype;
        if !self.make_entry(lf, "/lost+found", format!("#{ino}").as_bytes(), ino, dtype, done)? {
            return Ok(Err("SORRY. NO SPACE IN lost+found DIRECTORY; "));
        }
        if dtype == DT_DIR {
            // A directory's ".." names lost+found now (the link counts are the next round's).
            self.set_dotdot(ino, lf)?;
            return Ok(Ok(lf));
        }
        let mut d = d.clone();
        d.di_nlink = 1;
        self.put_dinode(ino, &d)?;
        let t = self.inode_mut(ino);
        (t.nlink, t.counted) = (1, 1);
        Ok(Ok(lf))
    }

    /// The inode `name` names in directory `dir`, if any.
    fn lookup(&self, dir: u32, name: &[u8]) -> Result<Option<u32>, Ufs2Error> {
        self.find_entry(dir, |n| n == name)
    }

    /// The inode of the first live entry of directory `dir` whose name `want` accepts.
    fn find_entry(&self, dir: u32, want: impl Fn(&[u8]) -> bool) -> Result<Option<u32>, Ufs2Error> {
        let size = self.inodes.get(dir).size;
        let bsize = self.sb.fs_bsize as u64;
        for &(lbn, fsb, frags) in self.dir_blocks.get(&dir).map_or(&[][..], |v| &v[..]) {
            let base = lbn as u64 * bsize;
            let len = (frags * self.sb.fs_fsize as i64) as u64;
            let data = self.read(fsb, len.min(size.saturating_sub(base)) as usize)?;
            for e in DirIter::new(&data, base, size, self.sb.maxino()).flatten() {
                if e.d_ino != 0 && want(e.name) {
                    return Ok(Some(e.d_ino));
                }
            }
        }
        Ok(None)
    }

    /// Each block of directory `dir` up to its size: (byte offset of the block, its bytes,
    /// its fragment address).
    fn dir_data(&self, dir: u32) -> Result<Vec<(u64, Vec<u8>, i64)>, Ufs2Error> {
        let size = self.inodes.get(dir).size;
        let bsize = self.sb.fs_bsize as u64;
        let mut out = Vec::new();
        for &(lbn, fsb, frags) in self.dir_blocks.get(&dir).map_or(&[][..], |v| &v[..]) {
            let base = lbn as u64 * bsize;
            let len = ((frags * self.sb.fs_fsize as i64) as u64).min(size.saturating_sub(base));
            out.push((base, self.read(fsb, len as usize)?, fsb));
        }
        Ok(out)
    }

    /// Removes the first entry of directory `dir` (not "." or "..") naming `ino`, as fsck_ffs's
    /// pass 2 removes an extra link. False if there is none.
    fn remove_entry(&mut self, dir: u32, ino: u32) -> Result<bool, Ufs2Error> {
        let pick = |e: &Direct<'_>| e.d_ino == ino && e.name != b"." && e.name != b"..";
        self.edit_entry(dir, pick, |data, at| remove_at(dir, data, at))
    }

    /// Sets the ".." entry of directory `dir` to `parent`. False if it has none.
    fn set_dotdot(&mut self, dir: u32, parent: u32) -> Result<bool, Ufs2Error> {
        let done = self.edit_entry(
            dir,
            |e| e.name == b"..",
            |data, at| {
                crate::format::dirent_set_ino(data, at, parent);
                Ok(())
            },
        )?;
        if done {
            self.inode_mut(dir).dotdot = parent;
        }
        Ok(done)
    }

    /// Changes the first entry of directory `dir` that `pick` accepts with `edit` (given its
    /// block's bytes and the entry's offset in them) and writes the block back. False if no
    /// entry was picked.
    fn edit_entry(
        &mut self,
        dir: u32,
        pick: impl Fn(&Direct<'_>) -> bool,
        edit: impl FnOnce(&mut [u8], usize) -> Result<(), Ufs2Error>,
    ) -> Result<bool, Ufs2Error> {
        let size = self.inodes.get(dir).size;
        for (base, mut data, fsb) in self.dir_data(dir)? {
            let hit = DirIter::new(&data, base, size, self.sb.maxino())
                .flatten()
                .find(|e| pick(e))
                .map(|e| (e.offset - base) as usize);
            if let Some(at) = hit {
                edit(&mut data, at)?;
                self.write(self.sb.fsb_offset(fsb), &data)?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether directory `dir` holds no entry but "." and "..".
    fn dir_is_empty(&self, dir: u32) -> Result<bool, Ufs2Error> {
        Ok(self.find_entry(dir, |n| n != b"." && n != b"..")?.is_none())
    }

    /// fsck_ffs's `makeentry`: an entry for `ino` in directory `dir` (`path` for messages),
    /// in the first room of its blocks, else in the room `expanddir` makes. False: no room,
    /// and the directory could not grow.
    fn make_entry(
        &mut self,
        dir: u32,
        path: &str,
        name: &[u8],
        ino: u32,
        dtype: u8,
        done: &mut Vec<String>,
    ) -> Result<bool, Ufs2Error> {
        if self.add_entry(dir, name, ino, dtype)? {
            return Ok(true);
        }
        if !self.expand_dir(dir)? {
            done.push(format!("NO SPACE LEFT IN {path} (EXPANSION FAILED)"));
            return Ok(false);
        }
        done.push(format!("NO SPACE LEFT IN {path} (EXPANDED)"));
        let added = self.add_entry(dir, name, ino, dtype)?;
        assert!(added, "directory I={dir}: no room for an entry in the block it grew by");
        Ok(true)
    }

    /// An entry for `ino` in the first room of directory `dir`'s blocks (an empty record, or
    /// the slack after an entry), from the first block that may have room; only the chunk it
    /// is in is written. False: no room.
    fn add_entry(&mut self, dir: u32, name: &[u8], ino: u32, dtype: u8) -> Result<bool, Ufs2Error> {
        let size = self.inodes.get(dir).size;
        let bsize = self.sb.fs_bsize as u64;
        let need = dirent_size(name.len());
        let blocks = self.dir_blocks.get(&dir).cloned().unwrap_or_default();
        let from = self.room_from.get(&dir).copied().unwrap_or(0);
        for (k, &(lbn, fsb, frags)) in blocks.iter().enumerate().skip(from) {
            let base = lbn as u64 * bsize;
            let len = ((frags * self.sb.fs_fsize as i64) as u64).min(size.saturating_sub(base)) as usize;
            let mut data = self.read(fsb, len)?;
            let mut slot = None;
            for e in DirIter::new(&data, base, size, self.sb.maxino()) {
                let Ok(e) = e else { break };
                let (at, reclen) = ((e.offset - base) as usize, e.d_reclen as usize);
                if e.d_ino == 0 && reclen >= need {
                    slot = Some((at, None, reclen));
                    break;
                }
                let used = dirent_size(e.name.len());
                if e.d_ino != 0 && reclen - used >= need {
                    slot = Some((at + used, Some((at, used)), reclen - used));
                    break;
                }
            }
            let Some((at, shrink, reclen)) = slot else {
                self.room_from.insert(dir, k + 1);
                continue;
            };
            self.room_from.insert(dir, k);
            if let Some((prev, used)) = shrink {
                data[prev + 4..prev + 6].copy_from_slice(&(used as u16).to_le_bytes());
            }
            let chunk = at - at % DIRBLKSIZ;
            assert!(at + reclen <= chunk + DIRBLKSIZ, "an entry crossing its chunk");
            data[at..at + reclen].fill(0);
            dirent_put(&mut data, at, ino, reclen, dtype, name);
            self.write(self.sb.fsb_offset(fsb) + chunk as u64, &data[chunk..chunk + DIRBLKSIZ])?;
            self.inode_mut(ino).counted += 1;
            return Ok(true);
        }
        Ok(false)
    }

    /// dir.c's `expanddir`: directory `dir` grown by one block of empty chunks. A last block
    /// of fragments is moved to a whole block (its fragments freed); otherwise a new block is
    /// mapped by the next direct pointer or, past those, by the single indirect block
    /// (allocated with it). Blocks come from what pass 1 found free, near the directory's
    /// group, and are claimed for pass 5's rewrite. False: the directory is at the single
    /// indirect block's end, or no whole block is free; nothing is changed then.
    fn expand_dir(&mut self, dir: u32) -> Result<bool, Ufs2Error> {
        let sb = self.sb.clone();
        let (bsize, fsize, frag) = (sb.fs_bsize as u64, sb.fs_fsize as u64, sb.fs_frag as i64);
        let mut d = self.dinode(dir)?;
        let size = d.di_size;
        let lastlbn = sb.lblkno(size);
        if d.di_mode & IFMT != IFDIR || size == 0 || lastlbn >= UFS_NDADDR as i64 + sb.nindir() {
            return Ok(false);
        }
        let cg = sb.ino_to_cg(dir);
        let lastsize = sb.sblksize(size, lastlbn);
        let mut block = vec![0u8; bsize as usize];
        let (keep, ind) = if lastsize > 0 && lastsize < bsize {
            // The directory's bytes in its last fragments; chunks past them are emptied.
            (size - sb.lblktosize(lastlbn), None)
        } else if lastlbn < UFS_NDADDR as i64 {
            if d.di_db[lastlbn as usize] != 0 {
                return Ok(false); // a pointer past the size: pass 1 reports it
            }
            (0, None)
        } else {
            let idx = (lastlbn - UFS_NDADDR as i64) as usize;
            let have = d.di_ib[0];
            if have != 0 && self.read(have, bsize as usize)?[8 * idx..8 * idx + 8] != [0; 8] {
                return Ok(false); // a pointer past the size: pass 1 reports it
            }
            (0, Some((have, idx)))
        };
        // The data block, and with the first block past the direct ones the indirect block:
        // both or neither.
        let want = if matches!(ind, Some((0, _))) { 2 } else { 1 };
        let got: Vec<i64> = (0..want).map_while(|_| self.alloc_block(cg)).collect();
        if got.len() < want {
            for &b in &got {
                self.claimed.clear_range(b as usize, (b + frag) as usize);
            }
            return Ok(false);
        }
        let (newblk, indirblk) = (got[0], got.get(1).copied());
        let old = (keep > 0).then(|| (d.di_db[lastlbn as usize], sb.numfrags(lastsize)));
        if let Some((oldblk, _)) = old {
            block[..keep as usize].copy_from_slice(&self.read(oldblk, keep as usize)?);
        }
        for chunk in (keep as usize..block.len()).step_by(DIRBLKSIZ) {
            block[chunk + 4..chunk + 6].copy_from_slice(&(DIRBLKSIZ as u16).to_le_bytes());
        }
        self.write(sb.fsb_offset(newblk), &block)?;
        let mut grown = bsize - old.map_or(0, |(_, n)| n as u64 * fsize);
        match ind {
            None => d.di_db[lastlbn as usize] = newblk,
            Some((have, idx)) => {
                let ib = indirblk.unwrap_or(have);
                let mut ptrs =
                    if indirblk.is_some() { vec![0u8; bsize as usize] } else { self.read(ib, bsize as usize)? };
                ptrs[8 * idx..8 * idx + 8].copy_from_slice(&newblk.to_le_bytes());
                self.write(sb.fsb_offset(ib), &ptrs)?;
                if indirblk.is_some() {
                    d.di_ib[0] = ib;
                    grown += bsize;
                }
            }
        }
        let new_size = sb.lblktosize(lastlbn + 1);
        d.di_size = new_size;
        d.di_blocks += grown / DEV_BSIZE as u64;
        self.put_dinode(dir, &d)?;
        if let Some((oldblk, n)) = old {
            assert!((oldblk..oldblk + n).all(|f| self.claimed.get(f)), "I={dir}: its fragments not claimed");
            self.claimed.clear_range(oldblk as usize, (oldblk + n) as usize);
        }
        self.inode_mut(dir).size = new_size;
        // The grown block in place of the fragments it replaces, or last; the room is there.
        let blocks = self.dir_blocks.entry(dir).or_default();
        let k = match blocks.iter().position(|&(lbn, _, _)| lbn == lastlbn) {
            Some(k) => {
                blocks[k] = (lastlbn, newblk, frag);
                k
            }
            None => {
                blocks.push((lastlbn, newblk, frag));
                blocks.len() - 1
            }
        };
        self.room_from.insert(dir, k);
        Ok(true)
    }

    /// fsck_ffs's `allocblk` of a whole block: the first block, from group `cg` on, whose
    /// fragments are all free in what pass 1 found (and pass 4 freed), claimed. `None`: there
    /// is none.
    fn alloc_block(&mut self, cg: u32) -> Option<i64> {
        let sb = &self.sb;
        let frag = sb.fs_frag as i64;
        let free = |b: i64| b + frag <= sb.fs_size && (b..b + frag).all(|f| !self.is_meta(f) && !self.claimed.get(f));
        let b = (0..sb.fs_ncg)
            .map(|k| (cg + k) % sb.fs_ncg)
            .flat_map(|c| (sb.cgdmin(c)..(sb.cgbase(c) + sb.fs_fpg as i64).min(sb.fs_size)).step_by(frag as usize))
            .find(|&b| b % frag == 0 && free(b))?;
        self.claimed.set_range(b as usize, (b + frag) as usize);
        Some(b)
    }

    /// pass3.c's `allocdir`: directory `ino` (free, read by pass 1) made of one free
    /// fragment (free in what pass 1 found) holding "." and ".." (naming `parent`) and empty
    /// chunks, with two links; it is not named anywhere yet. False: no free fragment.
    fn allocdir(&mut self, ino: u32, parent: u32) -> Result<bool, Ufs2Error> {
        assert_eq!(self.inodes.get(ino).state, State::Free, "I={ino}: a directory made over an inode in use");
        let sb = &self.sb;
        let free = |f: i64| !self.is_meta(f) && !self.claimed.get(f);
        let Some(frag) = (0..sb.fs_ncg)
            .flat_map(|c| sb.cgdmin(c)..(sb.cgbase(c) + sb.fs_fpg as i64).min(sb.fs_size))
            .find(|&f| free(f))
        else {
            return Ok(false);
        };
        let fsize = sb.fs_fsize as usize;
        let mut block = vec![0u8; fsize];
        dirent_put(&mut block, 0, ino, 12, DT_DIR, b".");
        dirent_put(&mut block, 12, parent, DIRBLKSIZ - 12, DT_DIR, b"..");
        for chunk in (DIRBLKSIZ..fsize).step_by(DIRBLKSIZ) {
            block[chunk + 4..chunk + 6].copy_from_slice(&(DIRBLKSIZ as u16).to_le_bytes());
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let mut d = Dinode::zeroed();
        d.di_mode = IFDIR | if ino == UFS_ROOTINO { 0o755 } else { 0o700 };
        d.di_nlink = 2;
        d.di_size = fsize as u64;
        d.di_blocks = (fsize / DEV_BSIZE as usize) as u64;
        d.di_blksize = sb.fs_bsize as u32;
        (d.di_atime, d.di_mtime, d.di_ctime, d.di_birthtime) = (now, now, now, now);
        d.di_db[0] = frag;
        self.write(self.sb.fsb_offset(frag), &block)?;
        self.put_dinode(ino, &d)?;
        self.claimed.set(frag);
        let root = ino == UFS_ROOTINO;
        *self.inode_mut(ino) = InoInfo {
            state: State::InUse,
            dtype: DT_DIR,
            nlink: 2,
            mode: d.di_mode,
            size: fsize as u64,
            counted: if root { 2 } else { 1 },
            parent,
            dotdot: parent,
            names: u32::from(root),
            unmovable: false,
            immutable: false,
        };
        self.dir_blocks.insert(ino, vec![(0, frag, 1)]);
        Ok(true)
    }

    /// pass3.c's lost+found, by `allocdir`: a free inode below its group's `cg_initediblk` and
    /// one free fragment (both free in what pass 1 found), a directory of one fragment holding
    /// "." and ".." and empty chunks, named in the root (grown if it is full). `None`: no
    /// inode, fragment or room.
    fn make_lost_found(&mut self, done: &mut Vec<String>) -> Result<Option<u32>, Ufs2Error> {
        // Room in the root first (grown if need be, which may take the free block the
        // directory would have had), so that nothing else is written if there is none.
        let need = dirent_size(b"lost+found".len());
        if !self.has_room(UFS_ROOTINO, need)? {
            if !self.expand_dir(UFS_ROOTINO)? {
                done.push("NO SPACE LEFT IN / (EXPANSION FAILED)".into());
                return Ok(None);
            }
            done.push("NO SPACE LEFT IN / (EXPANDED)".into());
        }
        let sb = &self.sb;
        let inited = |ino: u32| {
            let c = sb.ino_to_cg(ino) as usize;
            self.cgs[c].as_ref().is_some_and(|g| ino % sb.fs_ipg < g.hdr.cg_initediblk)
        };
        let Some(ino) = (UFS_ROOTINO + 1..sb.maxino()).find(|&i| self.inodes.get(i).state == State::Free && inited(i))
        else {
            return Ok(None);
        };
        if !self.allocdir(ino, UFS_ROOTINO)? {
            return Ok(None);
        }
        let added = self.add_entry(UFS_ROOTINO, b"lost+found", ino, DT_DIR)?;
        assert!(added, "room in the root was found before");
        let mut root = self.dinode(UFS_ROOTINO)?;
        root.di_nlink += 1;
        self.put_dinode(UFS_ROOTINO, &root)?;
        let r = self.inode_mut(UFS_ROOTINO);
        (r.nlink, r.counted) = (root.di_nlink, r.counted + 1);
        Ok(Some(ino))
    }

    /// Whether directory `dir` has room for an entry of `need` bytes without growing.
    fn has_room(&self, dir: u32, need: usize) -> Result<bool, Ufs2Error> {
        let size = self.inodes.get(dir).size;
        let bsize = self.sb.fs_bsize as u64;
        for &(lbn, fsb, frags) in self.dir_blocks.get(&dir).map_or(&[][..], |v| &v[..]) {
            let base = lbn as u64 * bsize;
            let len = ((frags * self.sb.fs_fsize as i64) as u64).min(size.saturating_sub(base)) as usize;
            let data = self.read(fsb, len)?;
            let room = DirIter::new(&data, base, size, self.sb.maxino()).map_while(Result::ok).any(|e| {
                let used = if e.d_ino == 0 { 0 } else { dirent_size(e.name.len()) };
                e.d_reclen as usize - used >= need
            });
            if room {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Pass 5's rewrite: each group's maps from what pass 1 found (and pass 4 changed), its
    /// header's counts and summaries from those maps, written when its bytes differ; then the
    /// summary area and `fs_cstotal`.
    fn rewrite_groups(&mut self, done: &mut Vec<String>) -> Result<(), Ufs2Error> {
        let sb = self.sb.clone();
        let (ipg, frag, fpg) = (sb.fs_ipg, sb.fs_frag as i64, sb.fs_fpg as i64);
        let mut cs_area = self.read(sb.fs_csaddr, sb.fs_cssize as usize)?;
        let mut total = CsumTotal { cs_numclusters: sb.fs_cstotal.cs_numclusters, ..CsumTotal::default() };
        for c in 0..sb.fs_ncg {
            let base = sb.cgbase(c);
            let ndblk = (sb.fs_size - base).min(fpg);
            let mut g = match self.cgs[c as usize].clone() {
                Some(g) => g,
                None => {
                    // pass5.c's rebuild of a group that does not decode: newfs's empty group,
                    // every inode counted initialized (pass 1 read them all), its maps and
                    // counts set below from what the passes found.
                    let mut g = crate::format::ufs2::newfs::initcg(&sb, c, sb.fs_time);
                    g.hdr.cg_initediblk = ipg;
                    done.push(format!("CG {c}: BAD CYLINDER GROUP (REBUILT)"));
                    g
                }
            };
            let mut ndir = 0;
            for i in 0..ipg {
                let ino = c * ipg + i;
                g.set_inode_used(i, ino < UFS_ROOTINO || self.inodes.get(ino).state != State::Free);
                if self.is_dir(ino) {
                    ndir += 1;
                }
            }
            for f in 0..ndblk {
                g.set_frag_free(f as u32, !self.is_meta(base + f) && !self.claimed.get(base + f));
            }
            if sb.fs_contigsumsize > 0 {
                for b in 0..(ndblk / frag) as u32 {
                    let free = g.block_free(b);
                    g.set_cluster_free(b, free);
                }
            }
            let m = g.map_counts();
            g.hdr.cg_cs = Csum {
                cs_ndir: ndir,
                cs_nbfree: m.nbfree as i32,
                cs_nifree: m.nifree as i32,
                cs_nffree: m.nffree as i32,
            };
            g.hdr.cg_frsum = m.frsum;
            if sb.fs_contigsumsize > 0 {
                g.set_clustersum_all(&m.clustersum);
            }
            for (rotor, limit) in
                [(&mut g.hdr.cg_rotor, ndblk as u32), (&mut g.hdr.cg_frotor, ndblk as u32), (&mut g.hdr.cg_irotor, ipg)]
            {
                if *rotor >= limit {
                    *rotor = 0;
                }
            }
            let bytes = g.encode(&sb);
            let at = sb.fsb_offset(sb.cgtod(c));
            if self.read(sb.cgtod(c), bytes.len())? != bytes {
                self.write(at, &bytes)?;
                done.push(format!("CG {c}: REWRITTEN (maps, counts and summaries)"));
            }
            let cs = g.hdr.cg_cs;
            cs.put(&mut cs_area, c as usize * Csum::SIZE);
            total.cs_ndir += cs.cs_ndir as i64;
            total.cs_nbfree += cs.cs_nbfree as i64;
            total.cs_nifree += cs.cs_nifree as i64;
            total.cs_nffree += cs.cs_nffree as i64;
            self.cgs[c as usize] = Some(g);
        }
        if self.read(sb.fs_csaddr, cs_area.len())? != cs_area {
            self.write(sb.fsb_offset(sb.fs_csaddr), &cs_area)?;
            done.push("SUMMARY AREA REWRITTEN".into());
        }
        total.cs_spare = sb.fs_cstotal.cs_spare;
        self.sb.fs_cstotal = total;
        self.put_superblock("FREE BLK COUNT(S) IN SUPERBLK FIXED", done)
    }

    /// `ckfini`: the file system marked clean, `FS_NEEDSFSCK` and `FS_UNCLEAN` cleared.
    fn mark_clean(&mut self, done: &mut Vec<String>) -> Result<(), Ufs2Error> {
        self.sb.fs_clean = 1;
        self.sb.fs_flags &= !(FS_NEEDSFSCK | FS_UNCLEAN);
        self.sb.fs_fmod = 0;
        self.put_superblock("MARKED CLEAN", done)
    }

    /// The superblock written at its place, with its check hash, if its bytes changed.
    fn put_superblock(&self, what: &str, done: &mut Vec<String>) -> Result<(), Ufs2Error> {
        let bytes = self.sb.encode();
        let mut now = vec![0u8; bytes.len()];
        self.dev.read_exact_at(&mut now, self.sblock_at)?;
        if now != bytes {
            self.write(self.sblock_at, &bytes)?;
            done.push(format!("SUPERBLOCK: {what}"));
        }
        Ok(())
    }
}
