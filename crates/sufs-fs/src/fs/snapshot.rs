//! FFS snapshots (soft updates §6), as FreeBSD makes them (`ffs_snapshot.c`): a snapshot is a
//! file, `/.snap/NAME`, flagged `DI_SNAPSHOT`, as large as the file system, whose logical block
//! `x` stands for the file system's block of fragments `x * fs_frag ..` as it was when the
//! snapshot was taken. Its block map says, for each block: 0, not copied (the block is unchanged
//! since, read it in place); `BLK_NOCOPY`, the block was free then (never copied, reads as
//! zeros); `BLK_SNAP`, the block belongs to a snapshot (likewise); anything else, the block
//! holding the old contents (a copy, or the block itself, claimed when its file let it go).
//!
//! Invariants: while a snapshot is active (listed in the superblock, oldest first, at most 20),
//! (1) a block it marks not copied is never written: `cow` copies the old contents into a new
//! block of every snapshot that still needs them, and makes the copy and the pointer to it
//! durable before the overwrite is written; (2) a block it marks not copied is never handed out
//! again: `free_block` gives a freed block to the first snapshot that has not copied it.
//! The superblock, the summary area, every group and the inode blocks holding snapshot inodes
//! are copied when the snapshot is taken (`snapufs2`), and in those copies the snapshots are
//! expunged (their inodes become empty files, their blocks free), so the frozen file system
//! passes fsck as it stands and deleting any snapshot frees its space. The records here are kept
//! by logical block (`Fs::snap_lbn` of an address).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use serde::Serialize;

use super::{Fs, FsError, FsResult};
use crate::dev::{BlockDevice, DevError, DevResult, DevStats, WriteKind, WriteReq};
use crate::format::*;
use crate::fs::{lock, SharedFs};
use crate::softdep::Task;

/// The directory of the snapshots, in the root.
pub const SNAP_DIR: &[u8] = b".snap";

/// An active snapshot: its inode and which blocks it has not copied yet (map entry 0), so that
/// the write path asks no block of the snapshot's map.
pub struct Active {
    pub ino: u32,
    need: Vec<u64>,
}

impl Active {
    fn new(ino: u32, nblocks: u64) -> Active {
        Active { ino, need: vec![0; nblocks.div_ceil(64) as usize] }
    }
    pub fn needs(&self, b: u64) -> bool {
        self.need.get((b / 64) as usize).is_some_and(|w| (w >> (b % 64)) & 1 == 1)
    }
    fn set_need(&mut self, b: u64, v: bool) {
        if let Some(w) = self.need.get_mut((b / 64) as usize) {
            if v {
                *w |= 1 << (b % 64);
            } else {
                *w &= !(1 << (b % 64));
            }
        }
    }
    /// Blocks still shared with the live file system.
    pub fn not_copied(&self) -> u64 {
        self.need.iter().map(|w| w.count_ones() as u64).sum()
    }
}

/// The file system's snapshots: the active ones, oldest first (the superblock's list), and what
/// they cost so far.
#[derive(Default)]
pub struct Snapshots {
    pub(super) active: Vec<Active>,
    /// Blocks copied before an overwrite.
    pub(super) cow: u64,
    /// Freed blocks claimed.
    pub(super) claimed: u64,
}

/// The frozen file system's groups (`cgs`, encoded) at a snapshot's creation: `free_then`
/// marks, by logical block, the blocks wholly free at creation; `csums` and `total` are the
/// frozen summary area's and `fs_cstotal`.
#[derive(Default)]
pub(super) struct FrozenGroups {
    pub(super) free_then: Vec<u64>,
    pub(super) cgs: Vec<Vec<u8>>,
    pub(super) csums: Vec<crate::format::ufs2::Csum>,
    pub(super) total: crate::format::ufs2::CsumTotal,
}

impl FrozenGroups {
    pub(super) fn new(nblocks: u64) -> FrozenGroups {
        FrozenGroups { free_then: vec![0; nblocks.div_ceil(64) as usize], ..Default::default() }
    }
    pub(super) fn set_free_then(&mut self, x: u64) {
        self.free_then[(x / 64) as usize] |= 1 << (x % 64);
    }
    fn was_free(&self, x: u64) -> bool {
        self.free_then.get((x / 64) as usize).is_some_and(|w| (w >> (x % 64)) & 1 == 1)
    }
}

/// A snapshot as `snapshot list` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SnapInfo {
    pub name: String,
    pub ino: u32,
    /// Creation time (seconds since the epoch).
    pub created: i64,
    /// Blocks the snapshot owns: its map's indirect blocks, copies and claimed blocks (whole
    /// blocks).
    pub blocks: u64,
    /// Blocks still shared with the live file system (not copied).
    pub shared: u64,
}

/// A level-0 indirect block of a snapshot's map and the first file-system block it maps.
type Leaf = (u64, u64);

/// Whether a map value is a marker, not an address: `BLK_NOCOPY` or `BLK_SNAP`.
fn snap_marker(v: u64) -> bool {
    v == BLK_NOCOPY || v == BLK_SNAP
}

impl Fs {
    /// Logical blocks of a snapshot file: the file system's size in blocks (FreeBSD's
    /// `howmany(fs_size, fs_frag)`).
    pub(super) fn snap_nblocks(&self) -> u64 {
        self.sb.num_blocks.div_ceil(self.sb.frag())
    }

    /// The logical block of a snapshot that stands for address `b`.
    fn snap_lbn(&self, b: u64) -> u64 {
        b / self.sb.frag()
    }

    /// Reactivates the snapshots listed in the superblock (at mount).
    pub(super) fn snap_activate(&mut self) -> FsResult<()> {
        self.snapshots.active.clear();
        let list: Vec<u32> = self.sb.snapshots.iter().copied().filter(|&i| i != 0).collect();
        for ino in list {
            let d = self.iget(ino)?;
            let n = self.snap_nblocks();
            // The block hints list follows the map (`snap_hint_list`).
            let room = self.snap_list_room() * self.sb.block_size as u64;
            let map = n * self.sb.block_size as u64;
            if d.flags & DI_SNAPSHOT == 0 || d.size < map || d.size > map + room {
                return Err(FsError::Corrupt(format!("superblock lists inode {ino}, which is not a snapshot")));
            }
            let mut a = Active::new(ino, n);
            for (x, &v) in d.db.iter().enumerate().take(n.min(NDADDR as u64) as usize) {
                a.set_need(x as u64, v == 0);
            }
            for (base, leaf) in self.snap_leaves(&d)? {
                let buf = self.cache.read(leaf)?;
                for i in 0..self.sb.ptrs_per_block() as usize {
                    let x = base + i as u64;
                    if x < n && ind_get(buf, i) == 0 {
                        a.set_need(x, true);
                    }
                }
            }
            self.snapshots.active.push(a);
        }
        Ok(())
    }

    /// The inode of `/.snap`, made (root-only, immutable) if `create`.
    fn snap_dir(&mut self, create: bool) -> FsResult<u32> {
        self.special_dir(SNAP_DIR, create)
    }

    fn snap_check_name(name: &[u8]) -> FsResult<()> {
        Self::check_name(name)?;
        if name == b"." || name == b".." || name.contains(&b'/') || name.is_empty() {
            return Err(FsError::Invalid("bad snapshot name"));
        }
        Ok(())
    }

    /// The leaves of a snapshot's map (level-0 indirect blocks), in logical order.
    fn snap_leaves(&mut self, d: &Dinode) -> FsResult<Vec<Leaf>> {
        let p = self.sb.ptrs_per_block();
        let mut out = Vec::new();
        let mut base = NDADDR as u64;
        let mut span = p;
        for level in 0..NIADDR {
            if d.ib[level] != 0 {
                let mut frontier = vec![(base, d.ib[level])];
                let mut per = span / p;
                for _ in 0..level {
                    let mut next = Vec::new();
                    for (b0, blk) in frontier {
                        self.checked_ptr(blk)?;
                        let buf = self.cache.read(blk)?;
                        for i in 0..p as usize {
                            let c = ind_get(buf, i);
                            if c != 0 {
                                next.push((b0 + i as u64 * per, c));
                            }
                        }
                    }
                    frontier = next;
                    per /= p;
                }
                for &(_, blk) in &frontier {
                    self.checked_ptr(blk)?;
                }
                out.extend(frontier);
            }
            base += span;
            span = span.saturating_mul(p);
        }
        Ok(out)
    }

    /// Every block a snapshot owns: its map's indirect blocks and the blocks its map points to.
    fn snap_owned(&mut self, d: &Dinode, out: &mut HashSet<u64>) -> FsResult<()> {
        out.extend(d.db.iter().copied().filter(|&v| v != 0 && !snap_marker(v)));
        let mut data = Vec::new();
        let mut levels: [Vec<u64>; NIADDR] = Default::default();
        // The tree's indirect blocks, level by level (data pointers may be sentinels).
        let dd = Dinode { db: [0; NDADDR], ..d.clone() };
        self.file_blocks(&dd, &mut data, &mut levels)?;
        out.extend(levels.iter().flatten().copied());
        out.extend(data.into_iter().filter(|&v| v != 0 && !snap_marker(v)));
        Ok(())
    }

    /// Builds a snapshot's map tree covering `n` logical blocks: every indirect block allocated,
    /// every data pointer 0. The new blocks are appended to `mine`.
    fn snap_build_tree(&mut self, d: &mut Dinode, n: u64, pref: u64, mine: &mut Vec<u64>) -> FsResult<()> {
        let p = self.sb.ptrs_per_block();
        let mut base = NDADDR as u64;
        let mut span = p;
        for level in 0..NIADDR {
            if n > base {
                let count = (n - base).min(span);
                d.ib[level] = self.snap_build(level, count, pref, mine)?;
            }
            base += span;
            span = span.saturating_mul(p);
        }
        Ok(())
    }

    fn snap_build(&mut self, level: usize, count: u64, pref: u64, mine: &mut Vec<u64>) -> FsResult<u64> {
        let next = mine.last().map_or(pref, |l| l + self.sb.frag());
        let b = self.alloc.alloc_block(&mut self.cache, &self.sb, next)?;
        self.cache.create(b);
        mine.push(b);
        if level == 0 {
            return Ok(b);
        }
        let per = self.sb.ptrs_per_block().pow(level as u32);
        for i in 0..count.div_ceil(per) {
            let c = self.snap_build(level - 1, (count - i * per).min(per), pref, mine)?;
            ind_set(self.cache.modify(b)?, i as usize, c);
        }
        Ok(b)
    }

    /// Sets the map entry of block `x` (past the direct ones, which never change after
    /// creation); returns the leaf block changed.
    fn snap_set(&mut self, d: &Dinode, x: u64, v: u64) -> FsResult<u64> {
        if x < NDADDR as u64 {
            return Err(FsError::Corrupt(format!("snapshot map entry {x} is fixed at creation")));
        }
        let (leaf, idx) = self.br_slot(d, x)?;
        ind_set(self.cache.modify(leaf)?, idx, v);
        Ok(leaf)
    }

    fn snap_get(&mut self, d: &Dinode, x: u64) -> FsResult<u64> {
        if x < NDADDR as u64 {
            return Ok(d.db[x as usize]);
        }
        let (leaf, idx) = self.br_slot(d, x)?;
        Ok(ind_get(self.cache.read(leaf)?, idx))
    }

    /// Takes a snapshot named `name` (`/.snap/NAME`, the directory made if need be). Writers
    /// are held off by the caller's lock (the mount's, as for any operation); everything is
    /// first written as for an unmount. A snapshot that does not fit is refused before anything
    /// is made (`NoSnapshotRoom`); one that fails on the way is undone (`snap_abandon`).
    pub fn snapshot_create(&mut self, name: &[u8]) -> FsResult<SnapInfo> {
        self.check_writable()?;
        Self::snap_check_name(name)?;
        let slot = self.sb.snapshots.iter().position(|&i| i == 0).ok_or(FsError::Invalid("at most 20 snapshots"))?;
        self.sync_all()?;
        // Every block of a snapshot is a whole block: free fragments do not count.
        let (needed, free) = (self.snap_room(), self.alloc.free_whole_blocks());
        if needed > free {
            log::warn!("snapshot {}: refused: {needed} blocks needed, {free} free", String::from_utf8_lossy(name));
            return Err(FsError::NoSnapshotRoom { needed, free });
        }
        let dir = self.snap_dir(true)?;
        self.sync_all()?;
        let made = self.create_node(dir, name, S_IFREG | 0o400, 0, 0, |_, _, d| {
            d.flags |= DI_SNAPSHOT;
            Ok(())
        });
        let ino = match made {
            // The new name and inode go to the disk first, as FreeBSD syncs the snapshot file
            // before it suspends: the first copies read blocks from the disk.
            Ok((ino, _)) => {
                self.sync_all()?;
                ino
            }
            Err(e) => return Err(e),
        };
        let mut mine = Vec::new();
        match self.snap_make(ino, slot, &mut mine) {
            Ok(()) => self.snap_info(name, ino),
            Err(e) => {
                log::warn!("snapshot {}: {e}: undone", String::from_utf8_lossy(name));
                if let Err(u) = self.snap_abandon(dir, name, ino, &mine) {
                    log::error!("snapshot {}: cannot undo: {u}", String::from_utf8_lossy(name));
                }
                Err(e)
            }
        }
    }

    /// Blocks a new snapshot takes at once, at most: its map's indirect blocks, the eager
    /// copies (`snap_eager_copies`) and a block for `/.snap`.
    fn snap_room(&self) -> u64 {
        let (n, p) = (self.snap_nblocks() + self.snap_list_room(), self.sb.ptrs_per_block());
        let mut map = 0;
        let (mut base, mut span) = (NDADDR as u64, p);
        for level in 0..NIADDR {
            if n > base {
                let count = (n - base).min(span);
                // A tree of `level` over `count` entries: ceil(count / p^k) blocks at height k.
                let mut per = p;
                for _ in 0..=level {
                    map += count.div_ceil(per);
                    per = per.saturating_mul(p);
                }
            }
            base += span;
            span = span.saturating_mul(p);
        }
        let u = self.sb.ufs2();
        let summary = (u.fs_cssize as u64).div_ceil(u.fs_bsize as u64) + 1;
        let eager = 1 + self.sb.ngroups as u64 + self.snapshots.active.len() as u64 + 1 + NDADDR as u64 + summary;
        map + eager + 1 + self.snap_list_room()
    }

    /// The snapshot's blocks and map, made for its inode `ino` (empty, named, on disk), then
    /// the inode and the superblock listing it in `slot`. The blocks allocated are in `mine`.
    fn snap_make(&mut self, ino: u32, slot: usize, mine: &mut Vec<u64>) -> FsResult<()> {
        let n = self.snap_nblocks();
        let mut d = self.iget(ino)?;
        let pref = self.ino_pref(ino);
        self.snap_build_tree(&mut d, n + self.snap_list_room(), pref, mine)?;
        let snap_inos: Vec<u32> = self.snapshots.active.iter().map(|s| s.ino).chain([ino]).collect();
        let copies = self.snap_eager_copies(&snap_inos, pref, mine)?;
        let (list, list_bytes) = self.snap_hint_list(&copies, pref, mine)?;
        // Blocks of snapshots: never copied, and free in the frozen file system.
        let mut owned: HashSet<u64> = mine.iter().copied().collect();
        for k in 0..self.snapshots.active.len() {
            let od = self.iget(self.snapshots.active[k].ino)?;
            self.snap_owned(&od, &mut owned)?;
        }
        let frozen = self.snap_frozen_groups(&owned)?;
        self.snap_fill_copies(&copies, &frozen, &snap_inos)?;
        let active = self.snap_write_map(ino, &mut d, &copies, &owned, &frozen)?;
        for (i, &b) in list.iter().enumerate() {
            self.snap_set(&d, n + i as u64, b)?;
        }
        // On disk in order: the bitmaps, the copies and the map; then the inode pointing at them;
        // then the superblock listing it.
        let mut first: Vec<u64> = (0..self.sb.ngroups).map(|cg| self.sb.cg_header_block(cg)).collect();
        first.extend(mine.iter());
        first.sort_unstable();
        for chunk in first.chunks(1024) {
            self.write_bufs(chunk, WriteKind::Sync)?;
        }
        d.size = n * self.sb.block_size as u64 + list_bytes;
        d.blocks = mine.len() as u64 * self.sb.frag();
        let ib = self.iput(ino, &d)?;
        self.write_bufs(&[ib], WriteKind::Sync)?;
        self.sync_all()?;
        self.sb.snapshots[slot] = ino;
        self.snapshots.active.push(active);
        self.write_superblock()
    }

    /// Logical blocks past the map that FreeBSD's block hints list may take, at most: one entry
    /// for the count and one for each first copy.
    fn snap_list_room(&self) -> u64 {
        let u = self.sb.ufs2();
        let bs = u.fs_bsize as u64;
        let cs = (u.fs_cssize as u64).div_ceil(bs) + 1;
        let most = 1 + 1 + self.sb.ngroups as u64 + MAX_SNAPSHOTS as u64 + 1 + NDADDR as u64 + 1 + cs;
        (most * 8).div_ceil(bs)
    }

    /// FreeBSD's block hints list (`i_snapblklist`, which `ffs_snapshot_mount` reads
    /// past the map, at `lblktosize(numblks)`): its length counting itself, then the logical
    /// blocks the snapshot holds a first copy of, ascending; FreeBSD's copy-on-write skips
    /// them. Its blocks are allocated here (in `mine`) and filled; returns them and its bytes.
    fn snap_hint_list(&mut self, copies: &[(u64, u64)], pref: u64, mine: &mut Vec<u64>) -> FsResult<(Vec<u64>, u64)> {
        let mut entries: Vec<u64> = copies.iter().map(|&(x, _)| x).collect();
        entries.sort_unstable();
        entries.insert(0, entries.len() as u64 + 1);
        let bs = self.sb.block_size as usize;
        let bytes: Vec<u8> = entries.iter().flat_map(|e| e.to_le_bytes()).collect();
        let nblocks = bytes.len().div_ceil(bs) as u64;
        assert!(nblocks <= self.snap_list_room(), "a hints list of {} entries in {nblocks} blocks", entries.len());
        let mut blocks = Vec::new();
        for chunk in bytes.chunks(bs) {
            let next = mine.last().map_or(pref, |l| l + self.sb.frag());
            let b = self.alloc.alloc_block(&mut self.cache, &self.sb, next)?;
            self.cache.create(b)[..chunk.len()].copy_from_slice(chunk);
            mine.push(b);
            blocks.push(b);
        }
        Ok((blocks, bytes.len() as u64))
    }

    /// Undoes a snapshot `snap_make` failed to make: once its inode points to its blocks it goes
    /// as a snapshot is deleted; before, the blocks it took (`mine`, pointed to by nothing) are
    /// freed and the empty file removed.
    fn snap_abandon(&mut self, dir: u32, name: &[u8], ino: u32, mine: &[u64]) -> FsResult<()> {
        let mut d = self.iget(ino)?;
        if d.has_blocks() {
            self.snapshot_delete(name)?;
            return Ok(());
        }
        for &b in mine {
            self.forget_block(b)?;
            self.alloc.free_block(&mut self.cache, &self.sb, b)?;
        }
        d.flags &= !DI_SNAPSHOT;
        self.snap_unlink(dir, name, ino, &d)?;
        self.balance()?;
        self.sync_all()
    }

    /// Removes the name of a snapshot's inode `ino`, now an ordinary file (`d`), from `/.snap`
    /// (`dir`): it goes as a removed file does.
    fn snap_unlink(&mut self, dir: u32, name: &[u8], ino: u32, d: &Dinode) -> FsResult<()> {
        assert!(d.flags & DI_SNAPSHOT == 0, "snapshot {ino} unlinked while still flagged");
        self.iput(ino, d)?;
        let mut dd = self.dir_inode(dir)?;
        let slot = self.find_entry(dir, &mut dd, name)?.ok_or(FsError::NotFound)?;
        self.touch_mc(&mut dd);
        self.iput(dir, &dd)?;
        self.unlink_name(dir, &slot, name, vec![Task::DropLink(ino)])?;
        Ok(())
    }

    /// What a new snapshot copies at once, as (logical block, its copy): the superblock, the
    /// groups, the inode blocks of the snapshots (`snap_inos`, expunged in the copy), the direct
    /// slots (which never change later) and the summary area (all written past the cache, or by
    /// their logical block), those in use; the copies are allocated here.
    fn snap_eager_copies(&mut self, snap_inos: &[u32], pref: u64, mine: &mut Vec<u64>) -> FsResult<Vec<(u64, u64)>> {
        let n = self.snap_nblocks();
        let frag = self.sb.frag();
        let mut eager: BTreeSet<u64> = [0].into();
        eager.extend((0..self.sb.ngroups).map(|cg| self.sb.cg_header_block(cg) / frag));
        eager.extend(snap_inos.iter().map(|&i| self.sb.inode_location(i).0 / frag));
        eager.extend(0..(NDADDR as u64).min(n));
        let u = self.sb.ufs2();
        let bs = u.fs_bsize as u64;
        eager.insert(u.fs_sblockloc as u64 / bs);
        let cs = u.fsb_offset(u.fs_csaddr);
        eager.extend(cs / bs..(cs + u.fs_cssize as u64).div_ceil(bs));
        let mut copies: Vec<(u64, u64)> = Vec::new();
        for &x in &eager {
            if !self.snap_wholly_free(x)? {
                let next = mine.last().map_or(pref, |l| l + frag);
                let c = self.alloc.alloc_block(&mut self.cache, &self.sb, next)?;
                self.cache.create(c);
                mine.push(c);
                copies.push((x, c));
            }
        }
        Ok(copies)
    }

    /// Expunges the snapshots `snap_inos` from `data`, a copy of the inode block at address
    /// `x`: each appears in the frozen file system as an empty file.
    pub(super) fn snap_expunge_inodes(&self, x: u64, data: &mut [u8], snap_inos: &[u32]) {
        for &i in snap_inos {
            let (b, off) = self.sb.inode_location(i);
            if b == x {
                let mut sd = self.sb.decode_dinode(&data[off..off + DINODE_SIZE]);
                sd.size = 0;
                sd.blocks = 0;
                sd.db = [0; NDADDR];
                sd.ib = [0; NIADDR];
                sd.flags &= !DI_SNAPSHOT;
                self.sb.encode_dinode(&sd, &mut data[off..off + DINODE_SIZE]);
            }
        }
    }

    /// The snapshot's map: for each block of the file system its copy, `BLK_NOCOPY` (free
    /// then), `BLK_SNAP` (a snapshot's own), or 0 (still shared: copied before it is overwritten), in the
    /// snapshot inode's direct slots and leaves; returns the live record of what is not copied.
    fn snap_write_map(
        &mut self,
        ino: u32,
        d: &mut Dinode,
        copies: &[(u64, u64)],
        owned: &HashSet<u64>,
        frozen: &FrozenGroups,
    ) -> FsResult<Active> {
        let n = self.snap_nblocks();
        let frag = self.sb.frag();
        let copy_of: std::collections::HashMap<u64, u64> = copies.iter().copied().collect();
        let mut active = Active::new(ino, n);
        let entry = |x: u64| -> u64 {
            if let Some(&c) = copy_of.get(&x) {
                c
            } else if owned.contains(&(x * frag)) {
                BLK_SNAP
            } else if frozen.was_free(x) {
                BLK_NOCOPY
            } else {
                0
            }
        };
        for x in 0..(NDADDR as u64).min(n) {
            d.db[x as usize] = entry(x);
        }
        let leaves = self.snap_leaves(d)?;
        let p = self.sb.ptrs_per_block();
        let mut values = vec![0u64; p as usize];
        for &(base, leaf) in &leaves {
            for (i, v) in values.iter_mut().enumerate() {
                let x = base + i as u64;
                *v = if x < n { entry(x) } else { 0 };
                if x < n && *v == 0 {
                    active.set_need(x, true);
                }
            }
            let buf = self.cache.modify(leaf)?;
            for (i, &v) in values.iter().enumerate() {
                ind_set(buf, i, v);
            }
        }
        Ok(active)
    }

    fn snap_info(&mut self, name: &[u8], ino: u32) -> FsResult<SnapInfo> {
        let d = self.iget(ino)?;
        let shared = self.snapshots.active.iter().find(|s| s.ino == ino).map_or(0, |s| s.not_copied());
        Ok(SnapInfo {
            name: String::from_utf8_lossy(name).into_owned(),
            ino,
            created: d.btime,
            blocks: d.blocks / self.sb.frag(),
            shared,
        })
    }

    /// The snapshot `name`: its inode and dinode.
    fn snap_get_named(&mut self, name: &[u8]) -> FsResult<(u32, u32, Dinode)> {
        Self::snap_check_name(name)?;
        let dir = self.snap_dir(false)?;
        let (ino, d) = self.lookup(dir, name)?;
        if d.flags & DI_SNAPSHOT == 0 {
            return Err(FsError::Invalid("not a snapshot"));
        }
        Ok((dir, ino, d))
    }

    /// The snapshots, oldest first.
    pub fn snapshot_list(&mut self) -> FsResult<Vec<SnapInfo>> {
        let names: std::collections::HashMap<u32, Vec<u8>> =
            self.special_dir_entries(SNAP_DIR)?.into_iter().map(|e| (e.ino, e.name)).collect();
        let list: Vec<u32> = self.sb.snapshots.iter().copied().filter(|&i| i != 0).collect();
        let mut out = Vec::new();
        for ino in list {
            let name = names.get(&ino).cloned().unwrap_or_else(|| format!("#{ino}").into_bytes());
            out.push(self.snap_info(&name, ino)?);
        }
        Ok(out)
    }

    /// Deletes a snapshot: it leaves the list at once; its blocks go as a removed file's do,
    /// each claimed by the first remaining snapshot that has not copied it, or freed; `/.snap`
    /// stays (FreeBSD's newfs makes it and nothing removes it). Returns the blocks it held.
    pub fn snapshot_delete(&mut self, name: &[u8]) -> FsResult<u64> {
        self.check_writable()?;
        let (dir, ino, mut d) = self.snap_get_named(name)?;
        self.snapshots.active.retain(|s| s.ino != ino);
        let list: Vec<u32> = self.sb.snapshots.iter().copied().filter(|&i| i != 0 && i != ino).collect();
        self.sb.snapshots = [0; MAX_SNAPSHOTS];
        self.sb.snapshots[..list.len()].copy_from_slice(&list);
        self.write_superblock()?;
        // The sentinels become holes, on disk before the inode stops being a snapshot: from then
        // on it is an ordinary file and goes as one.
        let leaves = self.snap_leaves(&d)?;
        let mut changed = Vec::new();
        let p = self.sb.ptrs_per_block() as usize;
        for &(_, leaf) in &leaves {
            let buf = self.cache.read(leaf)?;
            if (0..p).any(|i| snap_marker(ind_get(buf, i))) {
                let buf = self.cache.modify(leaf)?;
                for i in 0..p {
                    if snap_marker(ind_get(buf, i)) {
                        ind_set(buf, i, 0);
                    }
                }
                changed.push(leaf);
            }
        }
        for chunk in changed.chunks(1024) {
            self.write_bufs(chunk, WriteKind::Sync)?;
        }
        for k in 0..NDADDR {
            if snap_marker(d.db[k]) {
                d.db[k] = 0;
            }
        }
        d.flags &= !DI_SNAPSHOT;
        let held = d.blocks / self.sb.frag();
        self.snap_unlink(dir, name, ino, &d)?;
        self.balance()?;
        self.sync_all()?;
        Ok(held)
    }

    /// Copy-on-write, before `bnos` are written: each dirty block some snapshot has not copied
    /// is read from the disk (where it is still as it was) into a new block of every such
    /// snapshot; the copies with their bitmaps, then the map blocks pointing at them, are made
    /// durable before the caller writes the new contents.
    pub(super) fn snap_cow(&mut self, bnos: &[u64]) -> FsResult<()> {
        if self.snapshots.active.is_empty() {
            return Ok(());
        }
        let todo: Vec<u64> = bnos
            .iter()
            .copied()
            .filter(|&b| self.snap_needed(self.snap_lbn(b)) && self.cache.is_dirty(b))
            .map(|b| self.snap_lbn(b))
            .collect();
        self.snap_copy(todo)
    }

    /// Whether some snapshot still shares logical block `x` with the live file system.
    fn snap_needed(&self, x: u64) -> bool {
        self.snapshots.active.iter().any(|s| s.needs(x))
    }

    /// Copies logical blocks `todo` (their whole block, fragments and all, as FreeBSD copies
    /// them) from the disk into a new block of every snapshot that still shares them, and
    /// makes the copies, then the map blocks pointing at them, durable.
    fn snap_copy(&mut self, mut todo: Vec<u64>) -> FsResult<()> {
        if todo.is_empty() {
            return Ok(());
        }
        todo.sort_unstable();
        todo.dedup();
        let (bs, frag) = (self.sb.block_size as usize, self.sb.frag());
        let mut old = vec![0u8; bs];
        let mut first = BTreeSet::new();
        let mut leaves = BTreeSet::new();
        for x in todo {
            let b = x * frag;
            self.cache.device().read_block(b, &mut old)?;
            for k in 0..self.snapshots.active.len() {
                if !self.snapshots.active[k].needs(x) {
                    continue;
                }
                let ino = self.snapshots.active[k].ino;
                let c = self.alloc.alloc_block(&mut self.cache, &self.sb, b)?;
                self.cache.create(c).copy_from_slice(&old);
                let mut d = self.iget(ino)?;
                leaves.insert(self.snap_set(&d, x, c)?);
                d.blocks += frag;
                self.iput(ino, &d)?;
                self.snapshots.active[k].set_need(x, false);
                self.snapshots.cow += 1;
                first.insert(c);
                first.insert(self.sb.cg_header_block(self.sb.cg_of_block(c)));
            }
        }
        let first: Vec<u64> = first.into_iter().collect();
        self.land_flight()?;
        self.cache.write(&first, WriteKind::Sync, &mut self.hooks)?;
        let leaves: Vec<u64> = leaves.into_iter().collect();
        self.cache.write(&leaves, WriteKind::Sync, &mut self.hooks)?;
        Ok(())
    }

    /// Frees a block, unless a snapshot has not copied it: then the first such snapshot (oldest
    /// first) claims it as its copy.
    pub(super) fn free_block(&mut self, b: u64) -> FsResult<()> {
        let x = self.snap_lbn(b);
        if let Some(k) = self.snapshots.active.iter().position(|s| s.needs(x)) {
            assert_eq!(b % self.sb.frag(), 0, "block {b} claimed by a snapshot is not a whole block");
            let ino = self.snapshots.active[k].ino;
            let mut d = self.iget(ino)?;
            self.snap_set(&d, x, b)?;
            d.blocks += self.sb.frag();
            self.iput(ino, &d)?;
            self.snapshots.active[k].set_need(x, false);
            self.snapshots.claimed += 1;
            return Ok(());
        }
        Ok(self.alloc.free_block(&mut self.cache, &self.sb, b)?)
    }

    /// Frees a run of `frags` fragments at `bno` (a moved block's old run, soft updates'
    /// freefrag). A whole block goes through `free_block` (a snapshot may claim it); a shorter
    /// run goes to the allocator's fragment maps, its block first copied
    /// for the snapshots that still share it (`ffs_snapblkfree` copies what it cannot claim):
    /// otherwise runs freed one by one could leave a shared block free in the maps, handed out
    /// whole against invariant (2), e.g. as a snapshot's copy, which is written past `cow`.
    pub(super) fn free_frags(&mut self, bno: u64, frags: u32) -> FsResult<()> {
        if frags as u64 == self.sb.frag() {
            return self.free_block(bno);
        }
        let x = self.snap_lbn(bno);
        if self.snap_needed(x) {
            self.snap_copy(vec![x])?;
        }
        Ok(self.alloc.free_frags(&mut self.cache, &self.sb, bno, frags)?)
    }

    /// Logical block `x` (fragments `x * fs_frag ..`) of the file system as it was when
    /// snapshot `ino` was taken.
    pub fn snapshot_block(&mut self, ino: u32, x: u64, buf: &mut [u8]) -> FsResult<()> {
        let d = self.iget(ino)?;
        if d.flags & DI_SNAPSHOT == 0 {
            return Err(FsError::Invalid("not a snapshot"));
        }
        if x >= self.snap_nblocks() {
            return Err(FsError::Invalid("block beyond the end of the file system"));
        }
        self.snap_block(&d, x, buf)
    }

    fn snap_block(&mut self, d: &Dinode, x: u64, buf: &mut [u8]) -> FsResult<()> {
        match self.snap_get(d, x)? {
            v if snap_marker(v) => buf.fill(0),
            0 => self.cache.device().read_block(x * self.sb.frag(), buf)?,
            v => {
                self.checked_ptr(v)?;
                self.cache.device().read_block(v, buf)?
            }
        }
        Ok(())
    }

    /// Reads a snapshot file through the file interface: the frozen file system's bytes.
    pub(super) fn snap_read(&mut self, d: &Dinode, off: u64, len: usize) -> FsResult<Vec<u8>> {
        self.read_blocks(d.size, off, len, |fs, x, buf| fs.snap_block(d, x, buf))
    }

    /// The inode of snapshot `name`.
    pub fn snapshot_ino(&mut self, name: &[u8]) -> FsResult<u32> {
        Ok(self.snap_get_named(name)?.1)
    }

    /// Copy-on-write counters: blocks copied before an overwrite, blocks claimed when freed.
    pub fn snapshot_counters(&self) -> (u64, u64) {
        (self.snapshots.cow, self.snapshots.claimed)
    }
}

/// The frozen file system of a snapshot as a read-only device, read through the file system
/// that holds it (in this process), addressed in fragments, as the image is
/// (`FileDevice::open_frags`).
pub struct FrozenDevice {
    fs: SharedFs,
    ino: u32,
    bs: usize,
    unit: usize,
    n: u64,
}

impl FrozenDevice {
    pub fn new(fs: SharedFs, name: &[u8]) -> FsResult<FrozenDevice> {
        let mut g = lock(&fs);
        let ino = g.snapshot_ino(name)?;
        let (bs, unit, n) = (g.sb.block_size as usize, g.sb.addr_unit() as usize, g.sb.num_blocks);
        drop(g);
        Ok(FrozenDevice { fs, ino, bs, unit, n })
    }

    /// Logical block `x` of the snapshot (zeros past its end).
    fn logical(&self, x: u64, buf: &mut [u8]) -> DevResult<()> {
        if x * (self.bs / self.unit) as u64 >= self.n {
            buf.fill(0);
            return Ok(());
        }
        lock(&self.fs).snapshot_block(self.ino, x, buf).map_err(|e| match e {
            FsError::Io(d) => d,
            other => DevError::Open(other.to_string()),
        })
    }
}

impl BlockDevice for FrozenDevice {
    fn block_size(&self) -> usize {
        self.bs
    }
    fn addr_unit(&self) -> usize {
        self.unit
    }
    fn num_blocks(&self) -> u64 {
        self.n
    }
    /// The block at address `bno`: with fragments it may end in the next logical block.
    fn read_block(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        let frag = (self.bs / self.unit) as u64;
        let (x, skip) = (bno / frag, (bno % frag) as usize * self.unit);
        if skip == 0 {
            return self.logical(x, buf);
        }
        let mut block = vec![0u8; self.bs];
        self.logical(x, &mut block)?;
        buf[..self.bs - skip].copy_from_slice(&block[skip..]);
        self.logical(x + 1, &mut block)?;
        buf[self.bs - skip..].copy_from_slice(&block[..skip]);
        Ok(())
    }
    fn write_batch(&self, reqs: &[WriteReq], _kind: WriteKind) -> DevResult<()> {
        Err(DevError::Io {
            bno: reqs.first().map_or(0, |r| r.bno),
            source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, "a snapshot is read-only"),
        })
    }
    fn stats(&self) -> DevStats {
        DevStats::default()
    }
}

/// Writes a frozen file system (any device reading as one: a `FrozenDevice`, or a snapshot file
/// of a mounted file system) to a new image `out`, sparse. Returns the blocks written.
/// A device addressed in fragments is written a block at a time.
pub fn export(src: &dyn BlockDevice, out: &std::path::Path) -> Result<u64, DevError> {
    let (bs, unit) = (src.block_size(), src.addr_unit());
    let frag = (bs / unit) as u64;
    let n = (src.num_blocks() * unit as u64).div_ceil(bs as u64);
    crate::dev::write_sparse_image(out, n, bs, |b, buf| src.read_block(b * frag, buf), |_| true)
}

/// A shared file system for a `FrozenDevice` over an unmounted image.
pub fn shared(fs: Fs) -> SharedFs {
    Arc::new(std::sync::Mutex::new(fs))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::MemDevice;
    use crate::fs::{mkfs, MkfsOptions, MountOptions, Ordering, SetAttr};
    use std::collections::BTreeMap;

    fn mount(dev: &Arc<MemDevice>, ordering: Ordering) -> Fs {
        let opts = MountOptions { ordering, cache_blocks: 256, readonly: false };
        Fs::mount(dev.clone(), opts, Arc::new(SimClock::new())).unwrap()
    }

    /// Every file and directory under the root but `/.snap`: path -> contents (None: directory).
    pub fn tree(fs: &mut Fs) -> BTreeMap<String, Option<Vec<u8>>> {
        let mut out = BTreeMap::new();
        let mut stack = vec![(ROOT_INO, String::new())];
        while let Some((dir, path)) = stack.pop() {
            for e in fs.readdir(dir, 0, usize::MAX).unwrap() {
                let name = String::from_utf8_lossy(&e.name).into_owned();
                if name == "." || name == ".." || (dir == ROOT_INO && name == ".snap") {
                    continue;
                }
                let p = format!("{path}/{name}");
                let d = fs.iget(e.ino).unwrap();
                if d.is_dir() {
                    out.insert(p.clone(), None);
                    stack.push((e.ino, p));
                } else {
                    out.insert(p, Some(fs.read(e.ino, 0, d.size as usize).unwrap()));
                }
            }
        }
        out
    }

    fn fill(fs: &mut Fs, seed: u8) {
        let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        for i in 0..20u8 {
            let (f, _) = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
            let len = 1000 + i as usize * 4000;
            fs.write(f, 0, &vec![seed.wrapping_add(i); len]).unwrap();
        }
        let (big, _) = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap();
        fs.write(big, 0, &vec![seed; 600 * 4096]).unwrap();
    }

    fn export_to_mem(fs: Fs, name: &[u8]) -> (Fs, Arc<MemDevice>) {
        let shared = shared(fs);
        let frozen = FrozenDevice::new(shared.clone(), name).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("frozen.img");
        export(&frozen, &out).unwrap();
        let bytes = std::fs::read(&out).unwrap();
        let mem = Arc::new(MemDevice::new(4096, frozen.num_blocks()));
        let reqs: Vec<WriteReq> =
            bytes.chunks(4096).enumerate().map(|(i, c)| WriteReq { bno: i as u64, data: c }).collect();
        mem.write_batch(&reqs, WriteKind::Sync).unwrap();
        drop(frozen);
        let fs = Arc::try_unwrap(shared).ok().unwrap().into_inner().unwrap();
        (fs, mem)
    }

    #[test]
    fn snapshot_keeps_the_frozen_tree_through_overwrites_frees_and_remount() {
        for ordering in [Ordering::Softdep, Ordering::Sync, Ordering::Async] {
            let dev = Arc::new(MemDevice::new(4096, 16384));
            mkfs(dev.clone(), &MkfsOptions { ..Default::default() }, (1, 0)).unwrap();
            let mut fs = mount(&dev, ordering);
            fill(&mut fs, 1);
            fs.sync_all().unwrap();
            let free0 = fs.statfs().bfree;
            let before = tree(&mut fs);
            let info = fs.snapshot_create(b"s1").unwrap();
            assert!(info.shared > 600, "{info:?}");
            assert!(matches!(fs.snapshot_create(b"s1"), Err(FsError::Exists)));
            // Change everything: overwrite, truncate, remove, create.
            let (d, _) = fs.lookup(ROOT_INO, b"d").unwrap();
            let (big, _) = fs.lookup(ROOT_INO, b"big").unwrap();
            fs.write(big, 4096 * 10, &vec![9u8; 4096 * 50]).unwrap();
            fs.setattr(big, &SetAttr { size: Some(4096 * 100), ..Default::default() }).unwrap();
            for i in 0..10 {
                fs.unlink(d, format!("f{i}").as_bytes()).unwrap();
            }
            let (f, _) = fs.create(ROOT_INO, b"new", 0o644, 0, 0).unwrap();
            fs.write(f, 0, &vec![7u8; 40_000]).unwrap();
            // The snapshot file refuses writes.
            let sdir = fs.lookup(ROOT_INO, SNAP_DIR).unwrap().0;
            let (sino, _) = fs.lookup(sdir, b"s1").unwrap();
            assert!(matches!(fs.write(sino, 0, b"x"), Err(FsError::Perm)));
            assert!(matches!(fs.unlink(sdir, b"s1"), Err(FsError::Perm)));
            fs.sync_all().unwrap();
            let (cow, claimed) = fs.snapshot_counters();
            assert!(cow > 0 && claimed > 0, "{ordering}: cow {cow} claimed {claimed}");
            let after = tree(&mut fs);
            // Across a remount the snapshot is active again.
            fs.unmount().unwrap();
            let r = crate::fsck::check(dev.as_ref()).unwrap();
            assert!(r.is_clean(), "{ordering}: {:?}", r.findings);
            let mut fs = mount(&dev, ordering);
            assert_eq!(fs.snapshot_list().unwrap().len(), 1);
            fs.write(f, 0, &vec![8u8; 40_000]).unwrap();
            let (big2, _) = fs.lookup(ROOT_INO, b"big").unwrap();
            fs.write(big2, 0, &vec![8u8; 4096 * 5]).unwrap();
            fs.sync_all().unwrap();
            let (fs, frozen) = export_to_mem(fs, b"s1");
            let r = crate::fsck::check(frozen.as_ref()).unwrap();
            assert!(r.is_clean(), "{ordering}: frozen: {:?}", r.findings);
            let mut ffs = Fs::mount(
                frozen.clone(),
                MountOptions { readonly: true, ..Default::default() },
                Arc::new(SimClock::new()),
            )
            .unwrap();
            assert_eq!(tree(&mut ffs), before, "{ordering}: frozen tree");
            let mut fs = fs;
            assert_ne!(tree(&mut fs), before);
            assert_eq!(tree(&mut fs).get("/d"), after.get("/d"));
            // Deleting the snapshot gives every block back.
            let held = fs.snapshot_delete(b"s1").unwrap();
            assert!(held > 0);
            fs.sync_all().unwrap();
            assert!(fs.snapshot_list().unwrap().is_empty());
            fs.unlink(ROOT_INO, b"new").unwrap();
            fs.write(big2, 0, &vec![1u8; 4096 * 5]).unwrap();
            fs.sync_all().unwrap();
            let free1 = fs.statfs().bfree;
            fs.unmount().unwrap();
            let r = crate::fsck::check(dev.as_ref()).unwrap();
            assert!(r.is_clean(), "{ordering}: after delete: {:?}", r.findings);
            assert!(free1 > free0, "{ordering}: {free1} > {free0} (big shrank, files went, /.snap stays)");
        }
    }

    #[test]
    fn several_snapshots_claim_and_hand_over_blocks() {
        let dev = Arc::new(MemDevice::new(4096, 16384));
        mkfs(dev.clone(), &MkfsOptions { ..Default::default() }, (1, 0)).unwrap();
        let mut fs = mount(&dev, Ordering::Softdep);
        fill(&mut fs, 3);
        let base_tree = tree(&mut fs);
        fs.snapshot_create(b"a").unwrap();
        let (big, _) = fs.lookup(ROOT_INO, b"big").unwrap();
        fs.write(big, 0, &vec![4u8; 4096 * 20]).unwrap();
        let mid_tree = tree(&mut fs);
        fs.snapshot_create(b"b").unwrap();
        fs.snapshot_create(b"c").unwrap();
        // Removing the big file: its blocks are claimed, mostly by "a" (the oldest).
        fs.unlink(ROOT_INO, b"big").unwrap();
        fs.sync_all().unwrap();
        let list = fs.snapshot_list().unwrap();
        assert_eq!(list.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
        // Deleting "a" hands its claimed blocks to "b", which still shows the big file.
        fs.snapshot_delete(b"a").unwrap();
        fs.sync_all().unwrap();
        let (fs, frozen_b) = export_to_mem(fs, b"b");
        let mut fb = Fs::mount(
            frozen_b.clone(),
            MountOptions { readonly: true, ..Default::default() },
            Arc::new(SimClock::new()),
        )
        .unwrap();
        assert_eq!(tree(&mut fb), mid_tree);
        assert_ne!(mid_tree, base_tree);
        let r = crate::fsck::check(frozen_b.as_ref()).unwrap();
        assert!(r.is_clean(), "{:?}", r.findings);
        let mut fs = fs;
        fs.snapshot_delete(b"c").unwrap();
        fs.snapshot_delete(b"b").unwrap();
        fs.sync_all().unwrap();
        let free = fs.statfs().bfree;
        fs.unmount().unwrap();
        let r = crate::fsck::check(dev.as_ref()).unwrap();
        assert!(r.is_clean(), "{:?}", r.findings);
        // Everything but /.snap's block and the small files is free again.
        let sb = Superblock::probe(|off, b| crate::dev::read_bytes(&*dev, off, b)).unwrap();
        assert_eq!(sb.snapshots, [0; MAX_SNAPSHOTS]);
        assert_eq!(sb.free_blocks, free);
    }
}
