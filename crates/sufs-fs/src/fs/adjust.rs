//! Background fsck's adjust (soft updates §6.1; FreeBSD's fsck sysctls `freeblks`, `freefiles`,
//! `adjrefcnt`): what a check of a snapshot found lost is given back to the live file system.
//!
//! The request comes over the control channel some time after the snapshot, from a process the
//! mount does not trust to be right: a block or inode may have been freed and reused since, or
//! the request may simply be wrong. So nothing is taken on its word. Invariant: an adjust frees
//! only what the live file system owns nowhere, and lowers a link count never below the names
//! the inode has. The mount first writes everything and drains soft updates (`sync_all`: no
//! `NewBlk`, `FreeBlks` or other dependency is left, so nothing is owned by work in flight), then
//! scans every inode in use once (`live_owners`) for the blocks and names the request concerns;
//! what does not pass is refused, counted and logged. The scan reads the metadata the way fsck's
//! first two passes do and holds the mount's lock meanwhile; it runs only for a request that
//! has something to free, which is once after a crash.
//!
//! The check is the UFS2 checker's (`fsck::ufs2`, fsck_ffs's passes) and what it finds lost
//! is fragments: a leaked run is given back as runs within one block each (`FragRun`),
//! freed through the group's allocator (maps, `cg_frsum`, cluster map and summaries kept), and
//! a run is refused if any fragment of it is free or inside a run a live inode points to.

use serde::Serialize;

use super::{Fs, FsError, FsResult};
use crate::dev::BlockDevice;
use crate::fixed_hash::{HashMap, HashSet};
use crate::format::*;

/// An inode as the snapshot showed it: its number and generation. A live inode of another
/// generation is another file (the one fsck saw was freed and the number reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct InodeRef {
    pub ino: u32,
    pub generation: u32,
}

/// A link count too high: by `delta` in the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LinkAdjust {
    pub ino: u32,
    pub generation: u32,
    pub delta: u32,
}

/// A block count (`blocks`, in the file system's units: fragments on UFS2) off by `delta` in
/// the snapshot: soft updates rolls back a new block's pointer in the inode it writes, not the
/// count (fsck_ffs's "INCORRECT BLOCK COUNT"; FreeBSD's background fsck sends `adjblkcnt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CountAdjust {
    pub ino: u32,
    pub generation: u32,
    pub delta: i64,
}

/// A run of fragments marked used that nothing owned (UFS2): `frags` fragments from fragment
/// address `fsb`, all in one block (`frags` up to the block's fragment count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FragRun {
    pub fsb: u64,
    pub frags: u32,
}

/// What background fsck found on a snapshot and asks the live file system to give back:
/// fragment runs and inodes lost at snapshot time, link counts too high and block counts off.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Adjust {
    /// Fragment runs marked used that nothing owned.
    #[serde(default)]
    pub frags: Vec<FragRun>,
    /// Inodes in use that no entry named: freed with their blocks.
    pub unreferenced: Vec<InodeRef>,
    /// Inodes marked used whose dinode was free: their bitmap bits are cleared.
    pub leaked_inodes: Vec<InodeRef>,
    pub links: Vec<LinkAdjust>,
    /// Block counts off.
    #[serde(default)]
    pub counts: Vec<CountAdjust>,
}

/// At most this many refusals are described in a reply (all are counted).
pub const MAX_REFUSALS_LISTED: usize = 32;

/// What an adjust did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct AdjustDone {
    pub blocks_freed: u64,
    /// Fragments freed (the leaked runs' fragments, whole blocks' included).
    #[serde(default)]
    pub frags_freed: u64,
    pub inodes_freed: u64,
    pub links_lowered: u64,
    /// Block counts set to what the inode holds.
    #[serde(default)]
    pub counts_fixed: u64,
    /// Items refused: not (or no longer) lost in the live file system.
    pub refused: u64,
    /// Why, for the first `MAX_REFUSALS_LISTED` of them.
    pub refusals: Vec<String>,
}

impl AdjustDone {
    fn refuse(&mut self, why: String) {
        log::warn!("fsck adjust refused: {why}");
        self.refused += 1;
        if self.refusals.len() < MAX_REFUSALS_LISTED {
            self.refusals.push(why);
        }
    }
}

/// The generations of the inodes of the frozen file system on `frozen`.
struct Generations<'d> {
    frozen: &'d dyn BlockDevice,
    sb: Superblock,
    buf: Vec<u8>,
}

impl<'d> Generations<'d> {
    fn new(frozen: &'d dyn BlockDevice) -> FsResult<Generations<'d>> {
        let sb = Superblock::probe(|off, buf| crate::dev::read_bytes(frozen, off, buf))?;
        Ok(Generations { frozen, sb, buf: vec![0u8; frozen.block_size()] })
    }

    fn of(&mut self, ino: u32) -> FsResult<u32> {
        if !self.sb.is_valid_inode(ino) {
            return Err(FsError::Stale(ino as u64));
        }
        let (b, off) = self.sb.inode_location(ino);
        self.frozen.read_block(b, &mut self.buf)?;
        Ok(self.sb.decode_dinode(&self.buf[off..off + DINODE_SIZE]).generation)
    }
}

impl Adjust {
    /// The adjust for the UFS2 checker's allowed findings on the frozen UFS2 file system
    /// `frozen`, as FreeBSD's background fsck sends them (`freefiles`, `freeblks`,
    /// `adjrefcnt`): a leaked fragment run, cut at block boundaries; a leaked inode; an
    /// unreferenced file or directory (the mount refuses the directory: a full fsck
    /// reconnects it); a link count too high. Returned apart: the findings the adjust does not
    /// act on; a block count off (`adjblkcnt`) is. Of those, the summaries (`CsArea`, `CsTotal`, a group's directory count over
    /// with a leaked directory inode) need nothing sent: the mount keeps its summaries from
    /// its groups and writes them, and frees a leaked directory inode with its count; the rest
    /// (sizes past the last block, a rename's extra name) are left for a full fsck.
    pub fn from_ufs2_findings<'a>(
        findings: &'a [crate::fsck::ufs2::Finding],
        frozen: &dyn BlockDevice,
    ) -> FsResult<(Adjust, Vec<&'a crate::fsck::ufs2::Finding>)> {
        use crate::fsck::ufs2::Finding as U;
        let mut gens = Generations::new(frozen)?;
        let frag = gens.sb.frag();
        // The checker counts `DEV_BSIZE` sectors, the file system fragments.
        let sectors = (gens.sb.addr_unit() / 512).max(1) as u64;
        let mut a = Adjust::default();
        let mut other = Vec::new();
        for f in findings {
            match *f {
                U::FragsMarkedUsed { first, last } if first >= 0 && last >= first => {
                    let (mut at, end) = (first as u64, last as u64 + 1);
                    while at < end {
                        let next = ((at / frag + 1) * frag).min(end);
                        a.frags.push(FragRun { fsb: at, frags: (next - at) as u32 });
                        at = next;
                    }
                }
                U::InodesMarkedUsed { first, last } => {
                    for ino in first..=last {
                        a.leaked_inodes.push(InodeRef { ino, generation: gens.of(ino)? });
                    }
                }
                U::UnrefFile { ino, .. } | U::UnrefDir { ino, .. } => {
                    a.unreferenced.push(InodeRef { ino, generation: gens.of(ino)? })
                }
                U::LinkCount { ino, stored, actual, .. } if stored > actual as i64 => {
                    let delta = u32::try_from(stored - actual as i64).unwrap_or(u32::MAX);
                    a.links.push(LinkAdjust { ino, generation: gens.of(ino)?, delta })
                }
                U::BlockCount { ino, stored, actual } if (stored.abs_diff(actual)) % sectors == 0 => {
                    let delta = (actual as i64 - stored as i64) / sectors as i64;
                    a.counts.push(CountAdjust { ino, generation: gens.of(ino)?, delta })
                }
                U::CsArea { .. } | U::CsTotal { .. } => {}
                U::CgCount { what: "ndir", stored, actual, .. } if stored > actual => {}
                _ => other.push(f),
            }
        }
        Ok((a, other))
    }

    pub fn is_empty(&self) -> bool {
        *self == Adjust::default()
    }
}

/// What the live file system holds of the blocks and inodes an adjust asks about.
#[derive(Default)]
struct Owners {
    /// The runs live inodes point to in the blocks of the fragment runs asked about,
    /// as (first fragment, fragments, inode).
    runs: Vec<(u64, u32, u32)>,
    /// Inode -> its names: the entries naming it in every directory, "." included, ".." not
    /// (those are its subdirectories' links, in `subdirs`).
    names: HashMap<u32, u32>,
    /// Directory asked about -> the subdirectories whose ".." names it (wherever they are
    /// named: after a crash in a rename across directories, not always in it).
    subdirs: HashMap<u32, HashSet<u32>>,
}

impl Owners {
    /// The links inode `ino` must keep: its names, and for a directory one per subdirectory
    /// whose ".." names it. As fsck, the live file system counts a subdirectory's link where
    /// its ".." points: its last name's removal, a rename away or over it drops the link of
    /// the directory ".." names, not of the one holding the name (a crash in a rename across
    /// directories may leave a directory named where its ".." does not point).
    fn needed(&self, ino: u32) -> u32 {
        let own = self.names.get(&ino).copied().unwrap_or(0);
        own + self.subdirs.get(&ino).map_or(0, |m| m.len() as u32)
    }
}

impl Fs {
    /// Applies background fsck's findings to the live file system, each checked against the
    /// live state first (module comment); returns what was done and what was refused.
    pub fn fsck_adjust(&mut self, a: &Adjust) -> FsResult<AdjustDone> {
        self.check_writable()?;
        // With everything on disk and the work list run, no dependency owns a block or inode.
        self.sync_all()?;
        if let Some(sd) = self.hooks.softdep.as_ref() {
            assert!(sd.is_idle(), "fsck adjust: soft updates not idle after sync_all");
        }
        let mut done = AdjustDone::default();
        let runs = self.adjust_run_candidates(&a.frags, &mut done)?;
        let inos: HashSet<u32> = a.unreferenced.iter().map(|r| r.ino).chain(a.links.iter().map(|l| l.ino)).collect();
        let owners =
            if runs.is_empty() && inos.is_empty() { Owners::default() } else { self.live_owners(&runs, &inos)? };
        let names = |ino: u32| owners.needed(ino);
        for l in &a.links {
            let Some(mut d) = self.adjust_inode(l.ino, l.generation, false, &mut done)? else { continue };
            let target = d.nlink.checked_sub(l.delta).filter(|_| l.delta > 0);
            match target {
                Some(t) if t >= names(l.ino) => {
                    d.nlink = t;
                    self.touch_c(&mut d);
                    done.links_lowered += 1;
                    if d.nlink == 0 && !self.incore.held(l.ino) {
                        self.release_inode(l.ino, d, vec![])?;
                        done.inodes_freed += 1;
                    } else {
                        if d.nlink == 0 {
                            self.incore.orphans.insert(l.ino);
                        }
                        self.iput_links(l.ino, &d)?;
                    }
                }
                _ => done.refuse(format!(
                    "inode {}: link count {} lowered by {} would fall below its {} links",
                    l.ino,
                    d.nlink,
                    l.delta,
                    names(l.ino)
                )),
            }
        }
        for c in &a.counts {
            let Some(mut d) = self.adjust_inode(c.ino, c.generation, false, &mut done)? else { continue };
            // Set only while the count is still off by the snapshot's amount: then it becomes
            // exactly what the inode's maps hold now.
            let mut held = 0u64;
            self.each_pointer(&d, &mut |_, n| held += n as u64)?;
            if d.blocks.checked_add_signed(c.delta) == Some(held) && c.delta != 0 {
                d.blocks = held;
                self.iput(c.ino, &d)?;
                done.counts_fixed += 1;
            } else {
                done.refuse(format!(
                    "inode {}: block count {} changed by {} is not the {held} it holds",
                    c.ino, d.blocks, c.delta
                ));
            }
        }
        for r in &a.unreferenced {
            let Some(d) = self.adjust_inode(r.ino, r.generation, true, &mut done)? else { continue };
            if names(r.ino) > 0 {
                done.refuse(format!("inode {}: named {} times", r.ino, names(r.ino)));
                continue;
            }
            self.release_inode(r.ino, d, vec![])?;
            done.inodes_freed += 1;
        }
        // A leaked inode's dinode is free, so it does not say whether it was a directory; its
        // group's directory count says so when it counts more directories than the group holds.
        let mut dirs_over: HashMap<u32, u32> = HashMap::default();
        for r in &a.leaked_inodes {
            if self.adjust_leaked_inode(r, &mut done)? {
                let cg = self.sb.cg_of_inode(r.ino);
                let over = match dirs_over.get_mut(&cg) {
                    Some(n) => n,
                    None => {
                        let n = self.cg_dirs_over(cg)?;
                        dirs_over.entry(cg).or_insert(n)
                    }
                };
                let was_dir = *over > 0;
                *over = over.saturating_sub(1);
                self.alloc.free_inode(&mut self.cache, &self.sb, r.ino, was_dir)?;
                done.inodes_freed += 1;
            }
        }
        for r in runs {
            let end = r.fsb + r.frags as u64;
            match owners.runs.iter().find(|&&(p, n, _)| p < end && r.fsb < p + n as u64) {
                Some(&(p, n, owner)) => done.refuse(format!(
                    "fragments {}-{}: fragments {p}-{} owned by inode {owner}",
                    r.fsb,
                    end - 1,
                    p + n as u64 - 1
                )),
                None => {
                    self.forget_block(r.fsb)?;
                    // Through the snapshots (a whole block may be claimed) and the group's
                    // allocator: maps, fragment and cluster summaries and counts kept.
                    self.free_frags(r.fsb, r.frags)?;
                    done.frags_freed += r.frags as u64;
                    if r.frags as u64 == self.sb.frag() {
                        done.blocks_freed += 1;
                    }
                }
            }
        }
        self.balance()?;
        self.sync_all()?;
        Ok(done)
    }

    /// The fragment runs asked for that lie in one block of the data space, each
    /// fragment still marked used and asked for once; the rest refused.
    fn adjust_run_candidates(&mut self, asked: &[FragRun], done: &mut AdjustDone) -> FsResult<Vec<FragRun>> {
        let frag = self.sb.frag();
        let mut seen = HashSet::default();
        let mut out = Vec::new();
        for &r in asked {
            let (first, n) = (r.fsb, r.frags as u64);
            let last = first + n.saturating_sub(1);
            if n == 0 || first / frag != last / frag {
                done.refuse(format!("fragments {first}+{n}: not a run within one block"));
                continue;
            }
            if !(first..=last).all(|f| self.sb.is_data_block(f)) {
                done.refuse(format!("fragments {first}-{last}: not data"));
                continue;
            }
            if !(first..=last).all(|f| seen.insert(f)) {
                done.refuse(format!("fragments {first}-{last}: asked twice"));
                continue;
            }
            let mut free = None;
            for f in first..=last {
                if !self.alloc.unit_used(&mut self.cache, &self.sb, f)? {
                    free = Some(f);
                    break;
                }
            }
            match free {
                Some(f) => done.refuse(format!("fragments {first}-{last}: fragment {f} free")),
                None => out.push(r),
            }
        }
        Ok(out)
    }

    /// The live dinode of an inode an adjust would free or change, if it is still the file fsck
    /// saw (same generation, in use) and nothing else holds it: no open handle or kernel
    /// reference, no pending removal. `unreferenced`: also refused if a directory (left to a
    /// full fsck, which reconnects it), a snapshot or the root.
    fn adjust_inode(
        &mut self,
        ino: u32,
        generation: u32,
        unreferenced: bool,
        done: &mut AdjustDone,
    ) -> FsResult<Option<Dinode>> {
        if !self.sb.is_valid_inode(ino) || ino <= ROOT_INO {
            done.refuse(format!("inode {ino}: not a file's inode"));
            return Ok(None);
        }
        let d = self.iget_raw(ino)?;
        let why = if d.is_free() {
            Some("free".to_string())
        } else if d.generation != generation {
            Some(format!("generation {} is not the snapshot's {generation}", d.generation))
        } else if unreferenced && (d.is_dir() || d.flags & DI_SNAPSHOT != 0) {
            Some("a directory or snapshot".to_string())
        } else if unreferenced && self.incore.held(ino) {
            Some("open".to_string())
        } else if self.incore.orphans.contains(&ino)
            || self.incore.removed_dirs.contains(&ino)
            || self.incore.parent_drop.contains_key(&ino)
        {
            Some("being removed".to_string())
        } else {
            None
        };
        match why {
            Some(why) => {
                done.refuse(format!("inode {ino}: {why}"));
                Ok(None)
            }
            None => Ok(Some(d)),
        }
    }

    /// Whether inode `r` is still leaked: marked used, its dinode free and of the snapshot's
    /// generation, and held by nobody.
    fn adjust_leaked_inode(&mut self, r: &InodeRef, done: &mut AdjustDone) -> FsResult<bool> {
        if !self.sb.is_valid_inode(r.ino) || r.ino <= ROOT_INO {
            done.refuse(format!("inode {}: not a file's inode", r.ino));
            return Ok(false);
        }
        let cg = self.sb.cg_of_inode(r.ino);
        let map = self.alloc.inode_map(&mut self.cache, &self.sb, cg)?;
        let used = bit_get(&map, (r.ino % self.sb.inodes_per_group) as usize);
        let d = self.iget_raw(r.ino)?;
        let why = if !used {
            "free in the bitmap".to_string()
        } else if !d.is_free() {
            "in use".to_string()
        } else if d.generation != r.generation {
            format!("generation {} is not the snapshot's {}", d.generation, r.generation)
        } else if self.incore.held(r.ino) {
            "held".to_string()
        } else {
            return Ok(true);
        };
        done.refuse(format!("inode {}: {why}", r.ino));
        Ok(false)
    }

    /// How many directories group `cg`'s header counts beyond the directories in use in it:
    /// the directories among its leaked inodes (a mkdir's inode whose bitmap bit and count
    /// reached the disk before its dinode did). Freeing one of those lowers the count too, or
    /// the header keeps a directory no inode is (fsck: "directories count 1, should be 0").
    fn cg_dirs_over(&mut self, cg: u32) -> FsResult<u32> {
        let counted = self.alloc.group_ndirs(cg);
        let map = self.alloc.inode_map(&mut self.cache, &self.sb, cg)?;
        let mut dirs = 0u32;
        for i in 0..self.alloc.initialized(cg) {
            let ino = cg * self.sb.inodes_per_group + i;
            if bit_get(&map, i as usize) && self.sb.is_valid_inode(ino) && self.iget_raw(ino)?.is_dir() {
                dirs += 1;
            }
        }
        Ok(counted.saturating_sub(dirs))
    }

    /// One pass over every inode in use: which runs its maps point to (data, indirect and
    /// attribute blocks; a reservation's and a snapshot's too) in the blocks of `runs`, and how
    /// many entries of all directories name each of `inos`.
    fn live_owners(&mut self, runs: &[FragRun], inos: &HashSet<u32>) -> FsResult<Owners> {
        let frag = self.sb.frag();
        let run_blocks: HashSet<u64> = runs.iter().map(|r| r.fsb / frag).collect();
        let mut owners = Owners::default();
        for cg in 0..self.sb.ngroups {
            let map = self.alloc.inode_map(&mut self.cache, &self.sb, cg)?;
            for i in 0..self.alloc.initialized(cg) {
                let ino = cg * self.sb.inodes_per_group + i;
                // Inodes 0 and 1 are reserved (marked used, never a file).
                if !bit_get(&map, i as usize) || !self.sb.is_valid_inode(ino) {
                    continue;
                }
                let d = self.iget_raw(ino)?;
                if d.is_free() {
                    continue;
                }
                self.each_pointer(&d, &mut |b, n| {
                    if run_blocks.contains(&(b / frag)) {
                        owners.runs.push((b, n, ino));
                    }
                })?;
                if inos.is_empty() || !d.is_dir() {
                    continue;
                }
                // Each block as far as it holds entries: a UFS2 directory's last block may be
                // a run of fragments, and its last fragment hold fewer chunks than it has room.
                let mut dd = d.clone();
                for lbn in 0..self.dir_blocks(ino, &dd)? {
                    let (b, _) = self.bmap(ino, &mut dd, lbn, false)?;
                    if b == 0 {
                        continue;
                    }
                    let len = self.dir_block_len(&dd, lbn);
                    self.read_run(b, dd.size, lbn)?;
                    let buf = &self.cache.read(b)?[..len];
                    for e in dir_iter(buf) {
                        let e = e.map_err(|e| FsError::Corrupt(format!("directory {ino}, block {b}: {e}")))?;
                        if e.ino == 0 {
                            continue;
                        }
                        if e.name == b".." {
                            if inos.contains(&e.ino) && e.ino != ino {
                                owners.subdirs.entry(e.ino).or_default().insert(ino);
                            }
                        } else if inos.contains(&e.ino) {
                            *owners.names.entry(e.ino).or_insert(0) += 1;
                        }
                    }
                }
            }
        }
        Ok(owners)
    }

    /// Calls `f` with every block an inode's maps point to (data, indirect and attribute
    /// blocks) and the fragments its run holds (a tail's: `run_len`; else a whole block). A
    /// hole and a snapshot's markers (`BLK_NOCOPY`, `BLK_SNAP`) are no blocks.
    fn each_pointer(&mut self, d: &Dinode, f: &mut impl FnMut(u64, u32)) -> FsResult<()> {
        let limit = BLK_SNAP;
        let real = |b: u64| b > limit;
        let (bs, whole) = (self.sb.block_size as u64, self.sb.frag() as u32);
        // A short symbolic link's target and a device's number live where the pointers are.
        let (db, ib) = if d.has_blocks() { (d.db, d.ib) } else { ([0; NDADDR], [0; NIADDR]) };
        for (lbn, &b) in db.iter().enumerate().filter(|&(_, &b)| real(b)) {
            f(b, self.frags_in(self.run_len(d.size, lbn as u64)));
        }
        for (i, &b) in d.extb.iter().enumerate().filter(|&(_, &b)| real(b)) {
            let left = (d.extsize as u64).saturating_sub(i as u64 * bs);
            let n = if left == 0 || left >= bs { whole } else { self.frags_in(self.ext_run_len(left as usize)) };
            f(b, n);
        }
        for (top_level, &top) in ib.iter().enumerate() {
            let mut frontier = vec![top];
            for _ in (0..=top_level).rev() {
                let mut next = Vec::new();
                for &b in frontier.iter().filter(|&&b| real(b)) {
                    self.checked_ptr(b)?;
                    f(b, whole);
                    let buf = self.cache.read(b)?;
                    next.extend((0..self.sb.ptrs_per_block() as usize).map(|i| ind_get(buf, i)).filter(|&c| real(c)));
                }
                frontier = next;
            }
            frontier.into_iter().for_each(|b| f(b, whole));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::{MemDevice, WriteKind};
    use crate::fs::{lock, mkfs, MkfsOptions, MountOptions, Ordering, SharedFs};
    use std::sync::Arc;

    fn mount(dev: &Arc<MemDevice>) -> Fs {
        let opts = MountOptions { ordering: Ordering::Softdep, cache_blocks: 256, readonly: false };
        Fs::mount(dev.clone(), opts, Arc::new(SimClock::new())).unwrap()
    }

    /// A new file system on a small memory device, mounted.
    fn fresh() -> (Arc<MemDevice>, Fs) {
        let dev = Arc::new(MemDevice::new(4096, 8192));
        mkfs(dev.clone(), &MkfsOptions::default(), (1, 0)).unwrap();
        let fs = mount(&dev);
        (dev, fs)
    }

    fn contents(fs: &mut Fs, name: &[u8]) -> Vec<u8> {
        let (ino, d) = fs.lookup(ROOT_INO, name).unwrap();
        fs.read(ino, 0, d.size as usize).unwrap()
    }

    /// Marks a free fragment used in its group's maps and writes it, owned by nothing: a leak.
    fn leak(fs: &mut Fs) -> u64 {
        let leaked = fs.alloc.alloc_frags(&mut fs.cache, &fs.sb, 1, 0).unwrap();
        fs.sync_all().unwrap();
        leaked
    }

    /// An adjust naming what the live file system still owns (a live file's blocks and inode, a
    /// snapshot's map block, a link count below the names, an inode freed and reused since) is
    /// refused item by item; the honest part of it (a block really leaked) is done; the files
    /// are intact across a remount and fsck finds nothing.
    #[test]
    fn adjust_refuses_what_the_live_file_system_owns() {
        let (dev, mut fs) = fresh();
        let (live, _) = fs.create(ROOT_INO, b"live", 0o644, 0, 0).unwrap();
        fs.write(live, 0, &[7u8; 40_000]).unwrap();
        let (linked, _) = fs.create(ROOT_INO, b"linked", 0o644, 0, 0).unwrap();
        fs.write(linked, 0, b"two names").unwrap();
        fs.link(linked, ROOT_INO, b"other").unwrap();
        // An inode freed and reused: the snapshot saw the old file, the live one is new.
        let (old, od) = fs.create(ROOT_INO, b"old", 0o644, 0, 0).unwrap();
        fs.unlink(ROOT_INO, b"old").unwrap();
        fs.sync_all().unwrap();
        let (reused, rd) = fs.create(ROOT_INO, b"reused", 0o644, 0, 0).unwrap();
        assert_eq!(reused, old, "the allocator hands the freed inode out again");
        assert_ne!(rd.generation, od.generation);
        fs.write(reused, 0, b"new file").unwrap();
        fs.snapshot_create(b"s").unwrap();
        let sino = fs.snapshot_ino(b"s").unwrap();
        let snap = fs.iget(sino).unwrap();
        // A fragment nobody owns, marked used: the one honest item.
        let leaked = leak(&mut fs);
        fs.unmount().unwrap();
        let mut fs = mount(&dev);
        let ld = fs.iget(live).unwrap();
        let gen = |fs: &mut Fs, ino| fs.iget(ino).unwrap().generation;
        let a = Adjust {
            frags: [ld.db[0], ld.db[5], snap.ib[0], leaked].map(|fsb| FragRun { fsb, frags: 1 }).to_vec(),
            unreferenced: vec![
                InodeRef { ino: live, generation: ld.generation },
                InodeRef { ino: old, generation: od.generation },
            ],
            leaked_inodes: vec![InodeRef { ino: linked, generation: gen(&mut fs, linked) }],
            links: vec![
                LinkAdjust { ino: linked, generation: gen(&mut fs, linked), delta: 1 },
                LinkAdjust { ino: reused, generation: od.generation, delta: 1 },
            ],
            ..Default::default()
        };
        let before: Vec<Vec<u8>> = [&b"live"[..], b"linked", b"reused"].iter().map(|n| contents(&mut fs, n)).collect();
        let done = fs.fsck_adjust(&a).unwrap();
        assert_eq!(
            (done.frags_freed, done.blocks_freed, done.inodes_freed, done.links_lowered),
            (1, 1, 0, 0),
            "{done:?}"
        );
        assert_eq!(done.refused, 8, "{done:?}");
        let has = |what: &str| done.refusals.iter().any(|r| r.contains(what));
        let owned = |fsb: u64, ino: u32| format!("fragments {fsb}-{fsb}: fragments {fsb}-{fsb} owned by inode {ino}");
        assert!(has(&owned(ld.db[0], live)), "{done:?}");
        assert!(has(&owned(snap.ib[0], sino)), "{done:?}");
        assert!(has(&format!("inode {live}: named 1 times")), "{done:?}");
        assert!(has(&format!("inode {old}: generation")), "{done:?}");
        assert!(has(&format!("inode {linked}: in use")), "{done:?}");
        assert!(has(&format!("inode {linked}: link count 2 lowered by 1 would fall below its 2 links")), "{done:?}");
        assert_eq!(fs.iget(linked).unwrap().nlink, 2);
        // New writes go to the blocks freed: none of them is the live file's.
        let (fresh, _) = fs.create(ROOT_INO, b"fresh", 0o644, 0, 0).unwrap();
        fs.write(fresh, 0, &[9u8; 200_000]).unwrap();
        fs.snapshot_delete(b"s").unwrap();
        fs.unmount().unwrap();
        let r = crate::fsck::check(dev.as_ref()).unwrap();
        assert!(r.is_clean(), "{:?}", r.findings);
        let mut fs = mount(&dev);
        let after: Vec<Vec<u8>> = [&b"live"[..], b"linked", b"reused"].iter().map(|n| contents(&mut fs, n)).collect();
        assert_eq!(after, before);
        assert_eq!(contents(&mut fs, b"other"), b"two names");
        fs.unmount().unwrap();
    }

    /// Background fsck as `sufs fsck --background` runs it in a mount's process: a snapshot of
    /// the live file system checked, its findings turned into an adjust, the snapshot deleted,
    /// the adjust applied. Returns the file system, the findings and what the adjust did.
    fn background_fsck(fs: Fs) -> (Fs, Vec<crate::fsck::Finding>, AdjustDone) {
        let shared: SharedFs = Arc::new(std::sync::Mutex::new(fs));
        lock(&shared).snapshot_create(b"fsck").unwrap();
        let frozen = crate::fs::snapshot::FrozenDevice::new(shared.clone(), b"fsck").unwrap();
        let report = crate::fsck::check(&frozen).unwrap();
        assert_eq!(report.violations(), 0, "{:?}", report.findings);
        let (a, _) = Adjust::from_ufs2_findings(&report.findings, &frozen).unwrap();
        drop(frozen);
        let mut fs = Arc::into_inner(shared).unwrap().into_inner().unwrap();
        fs.snapshot_delete(b"fsck").unwrap();
        let done = fs.fsck_adjust(&a).unwrap();
        (fs, report.findings, done)
    }

    /// The crash of a rename across directories (`a/d` to `b/d`) that left the moved directory
    /// named in both parents with its ".." still naming the old one: the new parent's raised
    /// link count and the new name reached the disk, the ".." and the old name's removal did
    /// not. fsck counts ".." where it points, so `b` is one too high; the live file system
    /// counts it there too (a rename away of `d`'s name in `b` drops the link of `a`, which
    /// ".." names), so the adjust lowers `b`, and after the rename neither `a` nor `b` is off.
    #[test]
    fn adjust_lowers_the_parent_a_moved_directorys_dotdot_does_not_name() {
        let (dev, mut fs) = fresh();
        let (a, b, d) = super::live_tests::crash_in_a_rename_across_directories(&mut fs);
        drop(fs);
        let crashed = crate::fsck::check(dev.as_ref()).unwrap();
        use crate::fsck::Finding;
        let too_high = Finding::LinkCount { ino: b, dir: true, stored: 3, actual: 2 };
        assert!(crashed.findings.contains(&too_high), "{crashed:?}");
        assert!(crashed.findings.iter().any(|f| matches!(f, Finding::ExtraDirLink { ino, names: 2, .. } if *ino == d)));
        let (mut fs, _, done) = background_fsck(mount(&dev));
        assert_eq!((done.links_lowered, done.refused), (1, 0), "{done:?}");
        // The live file system moves d away by its name in b: a, which its ".." named, loses
        // that link.
        fs.rename(b, b"d", ROOT_INO, b"e", Default::default()).unwrap();
        fs.unmount().unwrap();
        let r = crate::fsck::check(dev.as_ref()).unwrap();
        assert_eq!(r.violations(), 0, "{:?}", r.findings);
        let off = |f: &Finding| matches!(f, Finding::LinkCount { ino, .. } if *ino == a || *ino == b);
        assert!(!r.findings.iter().any(off), "{r:?}");
    }

    /// On UFS2 with 1 KiB fragments: a fragment marked used that nothing owns, in the block
    /// that holds a live file's two-fragment tail. The checker finds the run; its
    /// adjust frees exactly it through the group's allocator (the maps, fragment summary and
    /// counts the checker then finds exact); a run asked for over the live tail is refused.
    #[test]
    fn adjust_frees_a_leaked_fragment_run_beside_a_live_tail() {
        use crate::fsck::ufs2::{check, Finding as U};
        let dev = crate::fs::snapufs2::tests::image(1024);
        let mut fs = mount(&dev);
        let (a, _) = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap();
        fs.write(a, 0, &[3u8; 1500]).unwrap();
        fs.sync_all().unwrap();
        let tail = fs.iget(a).unwrap().db[0];
        let leaked = fs.alloc.alloc_frags(&mut fs.cache, &fs.sb, 1, tail).unwrap();
        assert_eq!(leaked / fs.sb.frag(), tail / fs.sb.frag(), "the leaked run shares the tail's block");
        fs.sync_all().unwrap();
        let len = dev.num_blocks() * dev.addr_unit() as u64;
        let r = check(dev.as_ref() as &dyn BlockDevice, len, &Default::default()).unwrap();
        let run = U::FragsMarkedUsed { first: leaked as i64, last: leaked as i64 };
        assert!(r.findings.contains(&run), "{:?}", r.findings);
        assert_eq!(r.violations(), 0, "{:?}", r.findings);
        let (mut adj, other) = Adjust::from_ufs2_findings(&r.findings, dev.as_ref()).unwrap();
        assert!(other.is_empty(), "{other:?}");
        assert_eq!(adj.frags, vec![FragRun { fsb: leaked, frags: 1 }]);
        adj.frags.push(FragRun { fsb: tail, frags: 2 });
        let done = fs.fsck_adjust(&adj).unwrap();
        assert_eq!((done.frags_freed, done.blocks_freed, done.refused), (1, 0, 1), "{done:?}");
        let owned = format!("fragments {}-{}: fragments {}-{} owned by inode {a}", tail, tail + 1, tail, tail + 1);
        assert!(done.refusals.contains(&owned), "{done:?}");
        fs.unmount().unwrap();
        let r = check(dev.as_ref() as &dyn BlockDevice, len, &Default::default()).unwrap();
        assert!(r.findings.is_empty(), "{:?}", r.findings);
        let mut fs = mount(&dev);
        assert_eq!(contents(&mut fs, b"a"), vec![3u8; 1500]);
        fs.unmount().unwrap();
    }

    /// A mkdir's inode whose group header (its bitmap bit and the group's directory count)
    /// reached the disk and whose dinode did not: a leaked inode, and a directory count one
    /// over, which fsck allows as part of the leak. The adjust that frees the inode lowers the
    /// count with it, or the header keeps a directory no inode is.
    #[test]
    fn adjust_frees_a_leaked_directory_with_its_count() {
        let (dev, mut fs) = fresh();
        fs.sync_all().unwrap();
        let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        // The inode block first (its table initialized; the dinode goes zeroed, its bitmap bit
        // not yet on disk), then the group header.
        let cg = fs.sb.cg_of_inode(d);
        fs.write_bufs(&[fs.sb.inode_location(d).0], WriteKind::Sync).unwrap();
        fs.write_bufs(&[fs.sb.cg_header_block(cg)], WriteKind::Sync).unwrap();
        fs.shutdown(crate::fs::shutdown::Shutdown::Nologflush);
        drop(fs);
        let (mut fs, findings, done) = background_fsck(mount(&dev));
        assert!(findings.contains(&crate::fsck::Finding::InodesMarkedUsed { first: d, last: d }), "{findings:?}");
        assert_eq!(done.inodes_freed, 1, "{done:?}");
        fs.unmount().unwrap();
        let r = crate::fsck::check(dev.as_ref()).unwrap();
        assert!(r.is_clean(), "{:?}", r.findings);
    }

    /// On UFS2 a short symbolic link keeps its target in the block pointers and a device its
    /// number: the walk of the live inodes that finds a leaked run's owners skips both. (It
    /// read a link's target "xxxx/xxx" as a block pointer, called the file system damaged and
    /// failed background fsck after fstests' generic/051.)
    #[test]
    fn a_leaked_run_is_freed_beside_short_links_and_devices_on_ufs2() {
        let dev = crate::format::ufs2::newfs::mem_image(8 << 20, 1024);
        let mut fs = mount(&dev);
        let target = b"xxxx/".repeat(20);
        fs.symlink(ROOT_INO, b"link", &target, 0, 0).unwrap();
        fs.mknod(ROOT_INO, b"tty", libc::S_IFCHR | 0o600, 0, 0, u32::MAX).unwrap();
        let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        fs.write(f, 0, &[3u8; 1500]).unwrap();
        // A fragment marked used that no inode names: a leak.
        let leaked = fs.alloc.alloc_frags(&mut fs.cache, &fs.sb, 1, 0).unwrap();
        fs.sync_all().unwrap();
        let a = Adjust { frags: vec![FragRun { fsb: leaked, frags: 1 }], ..Default::default() };
        let done = fs.fsck_adjust(&a).unwrap();
        assert_eq!((done.frags_freed, done.refused), (1, 0), "{done:?}");
        let (link, _) = fs.lookup(ROOT_INO, b"link").unwrap();
        assert_eq!(fs.readlink(link).unwrap(), target);
        fs.unmount().unwrap();
        let len = dev.num_blocks() * dev.addr_unit() as u64;
        let r = crate::fsck::ufs2::check(dev.as_ref() as &dyn BlockDevice, len, &Default::default()).unwrap();
        assert!(r.findings.is_empty(), "{:?}", r.findings);
    }
}

#[cfg(test)]
#[path = "adjust_live_tests.rs"]
mod live_tests;
