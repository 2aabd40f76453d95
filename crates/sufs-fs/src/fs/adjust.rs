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

use serde::Serialize;

use super::{Fs, FsError, FsResult};
use crate::dev::BlockDevice;
use crate::fixed_hash::{HashMap, HashSet};
use crate::format::*;
use crate::fsck::Finding;

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

/// What background fsck found on a snapshot and asks the live file system to give back: blocks
/// and inodes lost at snapshot time, and link counts too high.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Adjust {
    /// Blocks marked used that nothing owned.
    pub blocks: Vec<u64>,
    /// Inodes in use that no entry named: freed with their blocks.
    pub unreferenced: Vec<InodeRef>,
    /// Inodes marked used whose dinode was free: their bitmap bits are cleared.
    pub leaked_inodes: Vec<InodeRef>,
    pub links: Vec<LinkAdjust>,
}

/// At most this many refusals are described in a reply (all are counted).
pub const MAX_REFUSALS_LISTED: usize = 32;

/// What an adjust did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct AdjustDone {
    pub blocks_freed: u64,
    pub inodes_freed: u64,
    pub links_lowered: u64,
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

impl Adjust {
    /// The adjust for fsck's findings on the frozen file system `frozen` (read for the
    /// generations of the inodes found); the findings it cannot act on are returned apart.
    pub fn from_findings<'a>(
        findings: &'a [Finding],
        frozen: &dyn BlockDevice,
    ) -> FsResult<(Adjust, Vec<&'a Finding>)> {
        let bs = frozen.block_size();
        let mut buf = vec![0u8; bs];
        frozen.read_block(0, &mut buf)?;
        let sb = Superblock::decode(&buf)?;
        let mut generation = |ino: u32| -> FsResult<u32> {
            if !sb.is_valid_inode(ino) {
                return Err(FsError::Stale(ino as u64));
            }
            let (b, off) = sb.inode_location(ino);
            frozen.read_block(b, &mut buf)?;
            Ok(Dinode::decode(&buf[off..off + DINODE_SIZE]).generation)
        };
        let mut a = Adjust::default();
        let mut other = Vec::new();
        for f in findings {
            match *f {
                Finding::LeakedBlock { bno } => a.blocks.push(bno),
                Finding::UnreferencedInode { ino, .. } => {
                    a.unreferenced.push(InodeRef { ino, generation: generation(ino)? })
                }
                Finding::LeakedInode { ino } => a.leaked_inodes.push(InodeRef { ino, generation: generation(ino)? }),
                Finding::LinkCountTooHigh { ino, stored, actual } => {
                    a.links.push(LinkAdjust { ino, generation: generation(ino)?, delta: stored - actual })
                }
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
    /// Block -> the inode whose map points to it.
    blocks: HashMap<u64, u32>,
    /// Inode -> its names: the entries naming it in every directory, "." included, ".." not
    /// (those are its subdirectories' links, in `subdirs`).
    names: HashMap<u32, u32>,
    /// Directory asked about -> per subdirectory, (its entries in the directory, whether its
    /// ".." names the directory). The two agree but after a crash in a rename across
    /// directories (a moved directory named in both parents, its ".." in either).
    subdirs: HashMap<u32, HashMap<u32, (u32, bool)>>,
}

impl Owners {
    /// The links inode `ino` must keep: its names, and for a directory one per subdirectory
    /// that either names it in ".." (fsck counts that link) or is named in it (the live file
    /// system drops the directory's link when that name goes: rmdir, a rename away, a rename
    /// over it, whatever the subdirectory's ".." says).
    fn needed(&self, ino: u32) -> u32 {
        let own = self.names.get(&ino).copied().unwrap_or(0);
        let subdirs =
            self.subdirs.get(&ino).map_or(0, |m| m.values().map(|&(named, dotdot)| named.max(dotdot as u32)).sum());
        own + subdirs
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
        let blocks = self.adjust_block_candidates(&a.blocks, &mut done)?;
        let inos: HashSet<u32> = a.unreferenced.iter().map(|r| r.ino).chain(a.links.iter().map(|l| l.ino)).collect();
        let owners =
            if blocks.is_empty() && inos.is_empty() { Owners::default() } else { self.live_owners(&blocks, &inos)? };
        let names = |ino: u32| owners.needed(ino);
        for l in &a.links {
            let Some(mut d) = self.adjust_inode(l.ino, l.generation, false, &mut done)? else { continue };
            let target = d.nlink.checked_sub(l.delta).filter(|_| l.delta > 0);
            match target {
                Some(t) if t >= names(l.ino) => {
                    d.nlink = t;
                    self.touch_c(&mut d);
                    done.links_lowered += 1;
                    if d.nlink == 0 && !self.incore.open.contains_key(&l.ino) {
                        self.release_inode(l.ino, d, vec![])?;
                        done.inodes_freed += 1;
                    } else {
                        if d.nlink == 0 {
                            self.incore.orphans.insert(l.ino);
                        }
                        self.iput(l.ino, &d)?;
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
        for b in blocks {
            match owners.blocks.get(&b) {
                Some(owner) => done.refuse(format!("block {b}: owned by inode {owner}")),
                None => {
                    self.forget_block(b)?;
                    self.free_block(b)?;
                    done.blocks_freed += 1;
                }
            }
        }
        self.balance()?;
        self.sync_all()?;
        Ok(done)
    }

    /// The blocks asked for that are data blocks still marked used, once each; the rest refused.
    fn adjust_block_candidates(&mut self, asked: &[u64], done: &mut AdjustDone) -> FsResult<Vec<u64>> {
        let bmoff = CgHeader::block_map_offset(self.sb.inodes_per_group);
        let mut seen = HashSet::default();
        let mut out = Vec::new();
        for &b in asked {
            if !self.sb.is_data_block(b) {
                done.refuse(format!("block {b}: not a data block"));
                continue;
            }
            if !seen.insert(b) {
                done.refuse(format!("block {b}: asked twice"));
                continue;
            }
            let cg = self.sb.cg_of_block(b);
            let map = &self.cache.read(self.sb.cg_header_block(cg))?[bmoff..];
            if bit_get(map, (b - self.sb.cg_start(cg)) as usize) {
                out.push(b);
            } else {
                done.refuse(format!("block {b}: free"));
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
        } else if unreferenced && self.incore.open.contains_key(&ino) {
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
        let map = &self.cache.read(self.sb.cg_header_block(cg))?[CgHeader::inode_map_offset()..];
        let used = bit_get(map, (r.ino % self.sb.inodes_per_group) as usize);
        let d = self.iget_raw(r.ino)?;
        let why = if !used {
            "free in the bitmap".to_string()
        } else if !d.is_free() {
            "in use".to_string()
        } else if d.generation != r.generation {
            format!("generation {} is not the snapshot's {}", d.generation, r.generation)
        } else if self.incore.open.contains_key(&r.ino) {
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
        let buf = self.cache.read(self.sb.cg_header_block(cg))?;
        let counted = cg_get_ndirs(buf);
        let map = buf[CgHeader::inode_map_offset()..].to_vec();
        let mut dirs = 0u32;
        for i in 0..self.alloc.initialized(cg) {
            let ino = cg * self.sb.inodes_per_group + i;
            if bit_get(&map, i as usize) && self.sb.is_valid_inode(ino) && self.iget_raw(ino)?.is_dir() {
                dirs += 1;
            }
        }
        Ok(counted.saturating_sub(dirs))
    }

    /// One pass over every inode in use: which of `blocks` some inode's map points to (data,
    /// indirect and attribute blocks; a reservation's and a snapshot's too), and how many
    /// entries of all directories name each of `inos`.
    fn live_owners(&mut self, blocks: &[u64], inos: &HashSet<u32>) -> FsResult<Owners> {
        let wanted: HashSet<u64> = blocks.iter().copied().collect();
        let mut owners = Owners::default();
        let imoff = CgHeader::inode_map_offset();
        for cg in 0..self.sb.ngroups {
            let map = self.cache.read(self.sb.cg_header_block(cg))?[imoff..].to_vec();
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
                let mut data = Vec::new();
                self.each_pointer(&d, &mut |b, is_data| {
                    if wanted.contains(&b) {
                        owners.blocks.insert(b, ino);
                    }
                    if is_data && d.is_dir() {
                        data.push(b);
                    }
                })?;
                if inos.is_empty() {
                    continue;
                }
                for b in data {
                    let buf = self.cache.read(b)?;
                    for e in dir_iter(buf) {
                        let e = e.map_err(|e| FsError::Corrupt(format!("directory {ino}, block {b}: {e}")))?;
                        if e.ino == 0 {
                            continue;
                        }
                        if e.name == b".." {
                            if inos.contains(&e.ino) && e.ino != ino {
                                owners.subdirs.entry(e.ino).or_default().entry(ino).or_default().1 = true;
                            }
                        } else if inos.contains(&e.ino) {
                            *owners.names.entry(e.ino).or_insert(0) += 1;
                        }
                        if inos.contains(&ino) && e.dtype == DT_DIR && e.name != b"." && e.name != b".." {
                            owners.subdirs.entry(ino).or_default().entry(e.ino).or_default().0 += 1;
                        }
                    }
                }
            }
        }
        Ok(owners)
    }

    /// Calls `f` with every block an inode's maps point to and whether it is a data block (not
    /// an indirect or attribute block). A hole and a snapshot's markers (`BLK_NOCOPY`, on UFS2
    /// `BLK_SNAP` too) are no blocks.
    fn each_pointer(&mut self, d: &Dinode, f: &mut impl FnMut(u64, bool)) -> FsResult<()> {
        let limit = if self.sb.ufs2().is_some() { BLK_SNAP } else { BLK_NOCOPY };
        let real = |b: u64| b > limit;
        d.db.iter().copied().filter(|&b| real(b)).for_each(|b| f(b, true));
        d.extb.iter().copied().filter(|&b| real(b)).for_each(|b| f(b, false));
        for (top_level, &top) in d.ib.iter().enumerate() {
            let mut frontier = vec![top];
            for _ in (0..=top_level).rev() {
                let mut next = Vec::new();
                for &b in frontier.iter().filter(|&&b| real(b)) {
                    self.checked_ptr(b)?;
                    f(b, false);
                    let buf = self.cache.read(b)?;
                    next.extend((0..self.sb.ptrs_per_block() as usize).map(|i| ind_get(buf, i)).filter(|&c| real(c)));
                }
                frontier = next;
            }
            frontier.into_iter().for_each(|b| f(b, true));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::{MemDevice, WriteKind, WriteReq};
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

    /// Marks free block `b` used in its group's bitmap on the unmounted image: a leak.
    fn leak(dev: &MemDevice, sb: &Superblock, b: u64) {
        let cg = sb.cg_of_block(b);
        let mut buf = vec![0u8; sb.block_size as usize];
        dev.read_block(sb.cg_header_block(cg), &mut buf).unwrap();
        let bm = CgHeader::block_map_offset(sb.inodes_per_group);
        assert!(!bit_get(&buf[bm..], (b - sb.cg_start(cg)) as usize));
        bit_set(&mut buf[bm..], (b - sb.cg_start(cg)) as usize, true);
        let f = cg_get_free_blocks(&buf) - 1;
        cg_set_free_blocks(&mut buf, f);
        CgHeader::seal(&mut buf);
        dev.write_batch(&[WriteReq { bno: sb.cg_header_block(cg), data: &buf }], WriteKind::Sync).unwrap();
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
        fs.unmount().unwrap();
        // A block nobody owns, marked used: the one honest item.
        let sb = fs.sb.clone();
        let leaked = sb.cg_start(sb.ngroups - 1) + sb.cg_blocks(sb.ngroups - 1) as u64 - 1;
        leak(&dev, &sb, leaked);
        let mut fs = mount(&dev);
        let ld = fs.iget(live).unwrap();
        let gen = |fs: &mut Fs, ino| fs.iget(ino).unwrap().generation;
        let a = Adjust {
            blocks: vec![ld.db[0], ld.db[5], snap.ib[0], leaked],
            unreferenced: vec![
                InodeRef { ino: live, generation: ld.generation },
                InodeRef { ino: old, generation: od.generation },
            ],
            leaked_inodes: vec![InodeRef { ino: linked, generation: gen(&mut fs, linked) }],
            links: vec![
                LinkAdjust { ino: linked, generation: gen(&mut fs, linked), delta: 1 },
                LinkAdjust { ino: reused, generation: od.generation, delta: 1 },
            ],
        };
        let before: Vec<Vec<u8>> = [&b"live"[..], b"linked", b"reused"].iter().map(|n| contents(&mut fs, n)).collect();
        let done = fs.fsck_adjust(&a).unwrap();
        assert_eq!((done.blocks_freed, done.inodes_freed, done.links_lowered), (1, 0, 0), "{done:?}");
        assert_eq!(done.refused, 8, "{done:?}");
        let has = |what: &str| done.refusals.iter().any(|r| r.contains(what));
        assert!(has(&format!("block {}: owned by inode {live}", ld.db[0])), "{done:?}");
        assert!(has(&format!("block {}: owned by inode {sino}", snap.ib[0])), "{done:?}");
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
    fn background_fsck(fs: Fs) -> (Fs, Vec<Finding>, AdjustDone) {
        let shared: SharedFs = Arc::new(std::sync::Mutex::new(fs));
        lock(&shared).snapshot_create(b"fsck").unwrap();
        let frozen = crate::fs::snapshot::FrozenDevice::new(shared.clone(), b"fsck").unwrap();
        let report = crate::fsck::check(&frozen).unwrap();
        assert_eq!(report.violations(), 0, "{:?}", report.findings);
        let (a, _) = Adjust::from_findings(&report.findings, &frozen).unwrap();
        drop(frozen);
        let mut fs = Arc::into_inner(shared).unwrap().into_inner().unwrap();
        fs.snapshot_delete(b"fsck").unwrap();
        let done = fs.fsck_adjust(&a).unwrap();
        (fs, report.findings, done)
    }

    /// The crash of a rename across directories (`a/d` to `b/d`) that left the moved directory
    /// named in both parents with its ".." still naming the old one: the new parent's raised
    /// link count and the new name reached the disk, the ".." and the old name's removal did
    /// not. fsck counts ".." where it points, so `b` looks one too high; but the live file
    /// system drops `b`'s link when `d`'s name in it goes (here a rename away), so the adjust
    /// must leave it: lowered, `b` ends one too low, which no crash may leave.
    #[test]
    fn adjust_keeps_the_link_of_a_moved_directorys_second_name() {
        let (dev, mut fs) = fresh();
        let (a, _) = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap();
        let (b, _) = fs.mkdir(ROOT_INO, b"b", 0o755, 0, 0).unwrap();
        let (d, _) = fs.mkdir(a, b"d", 0o755, 0, 0).unwrap();
        fs.sync_all().unwrap();
        fs.rename(a, b"d", b, b"d", Default::default()).unwrap();
        // The inodes (d's and b's raised counts), then b's block with the new name: d's
        // block (its "..") and a's (the old name) stay unwritten.
        let inode_blocks = [fs.sb.inode_location(d).0, fs.sb.inode_location(b).0];
        fs.write_bufs(&inode_blocks, WriteKind::Sync).unwrap();
        let b_block = fs.iget(b).unwrap().db[0];
        assert!(![fs.iget(d).unwrap().db[0], fs.iget(a).unwrap().db[0]].contains(&b_block));
        fs.write_bufs(&[b_block], WriteKind::Sync).unwrap();
        fs.shutdown(crate::fs::shutdown::Shutdown::Nologflush);
        drop(fs);
        let crashed = crate::fsck::check(dev.as_ref()).unwrap();
        assert!(crashed.findings.contains(&Finding::LinkCountTooHigh { ino: b, stored: 3, actual: 2 }), "{crashed:?}");
        assert!(crashed
            .findings
            .iter()
            .any(|f| matches!(f, Finding::DirMultiplyLinked { ino, names: 2, .. } if *ino == d)));
        let (mut fs, _, done) = background_fsck(mount(&dev));
        assert_eq!(done.links_lowered, 0, "{done:?}");
        assert!(done.refusals.iter().any(|r| r.starts_with(&format!("inode {b}: link count 3"))), "{done:?}");
        // The live file system moves d away by its name in b: b loses that link.
        fs.rename(b, b"d", ROOT_INO, b"e", Default::default()).unwrap();
        fs.unmount().unwrap();
        let r = crate::fsck::check(dev.as_ref()).unwrap();
        assert_eq!(r.violations(), 0, "{:?}", r.findings);
        assert!(!r.findings.iter().any(|f| matches!(f, Finding::LinkCountTooHigh { ino, .. } if *ino == b)), "{r:?}");
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
        assert!(findings.contains(&Finding::LeakedInode { ino: d }), "{findings:?}");
        assert_eq!(done.inodes_freed, 1, "{done:?}");
        fs.unmount().unwrap();
        let r = crate::fsck::check(dev.as_ref()).unwrap();
        assert!(r.is_clean(), "{:?}", r.findings);
    }
}
