//! Repair, apart from checking: the passes record, beside each finding, the fix it calls for
//! (`Fixes`: fsck_ffs's `reply("CLEAR")`, `reply("FIX")`, `reply("RECONNECT")` decisions, taken
//! without asking), and `Scan::apply` makes them all in one write set: inode fields and
//! pointers, directory entries, cleared inodes, a new root, reconnections to lost+found (fsck_ffs
//! pass 3's `linkup`), then the group headers and the superblock rebuilt from the computed maps
//! (fsck_ffs pass 5's rewrite). Nothing is written before the round's last change is made, and
//! then every changed block at once; `run` scans again and repeats until a scan is clean.

use std::collections::{BTreeMap, BTreeSet};

use super::{FsckError, Loc, Result, Scan};
use crate::dev::{BlockDevice, WriteKind, WriteReq};
use crate::format::*;

/// A change to a directory block.
pub(super) enum DirFix {
    Remove {
        bno: u64,
        at: usize,
    },
    SetIno {
        bno: u64,
        at: usize,
        ino: u32,
    },
    SetType {
        bno: u64,
        at: usize,
        dtype: u8,
    },
    /// Chunk 0 of a directory's first block rebuilt with "." and ".." and the live entries
    /// that still fit.
    RebuildHead {
        bno: u64,
        dir: u32,
        parent: u32,
    },
    ResetChunk {
        bno: u64,
        chunk: usize,
    },
}

/// The fixes one scan calls for; `Scan::apply` makes them.
#[derive(Default)]
pub(super) struct Fixes {
    pub(super) ptr_clears: Vec<Loc>,
    pub(super) clear_inodes: BTreeSet<u32>,
    /// Inodes whose reservation flags go (they break a reservation's rules).
    pub(super) clear_br_flags: BTreeSet<u32>,
    pub(super) set_nlink: BTreeMap<u32, u32>,
    pub(super) set_blocks: BTreeMap<u32, u64>,
    pub(super) set_size: BTreeMap<u32, u64>,
    /// Inodes with a time whose nanoseconds are out of range (set to 0).
    pub(super) fix_nsec: BTreeSet<u32>,
    /// Inodes whose extended-attribute area is damaged: it goes (size and pointers 0).
    pub(super) clear_ext: BTreeSet<u32>,
    pub(super) dir: Vec<DirFix>,
    pub(super) reconnect: Vec<u32>,
    pub(super) make_root: bool,
    /// Snapshot list entries that go.
    pub(super) drop_snapshots: BTreeSet<usize>,
}

/// The directory unreferenced inodes are reconnected to, and its blocks as they fill.
struct Target {
    ino: u32,
    blocks: Vec<u64>,
    /// The first of `blocks` that may have room: entries are only added, so a block found
    /// full stays full for the round and is not searched again.
    room_from: usize,
}

impl Scan<'_> {
    /// Applies the fixes of this scan; returns true if any block was written. What it did
    /// beyond the findings' own fixes (an inode cleared for want of room) goes in `notes`.
    pub(super) fn apply(mut self, notes: &mut Vec<String>) -> Result<bool> {
        let sb = self.sb.clone();
        let fixes = std::mem::take(&mut self.fixes);
        let mut ws = WriteSet::new(self.dev, self.bs);
        fix_inodes(&mut ws, &sb, &fixes)?;
        fix_dirs(&mut ws, &fixes.dir)?;
        // Modes as this round leaves them (for the bitmaps and counts).
        let mut modes: BTreeMap<u32, u16> = self.inodes.iter().map(|(&n, i)| (n, i.mode)).collect();
        for &ino in &fixes.clear_inodes {
            // The generation stays, as when the file system frees an inode: a file handle of
            // the cleared file must not open the inode's next file.
            ws.inode(&sb, ino, |d| *d = Dinode { generation: d.generation, ..Dinode::default() })?;
            modes.remove(&ino);
        }
        let mut alloc_from = 0u64;
        if fixes.make_root {
            self.make_root(&mut ws, &mut alloc_from)?;
            modes.insert(ROOT_INO, S_IFDIR | 0o755);
        }
        if let Some(target) = self.target {
            self.reconnect(&mut ws, &fixes, target, &mut alloc_from, &mut modes, notes)?;
        }
        self.rewrite_maps(&mut ws, &modes, &fixes.drop_snapshots)?;
        ws.flush()
    }

    /// A new, empty root directory (its "..", itself), in a free block.
    fn make_root(&mut self, ws: &mut WriteSet, alloc_from: &mut u64) -> Result<()> {
        let b = self.alloc_block(alloc_from)?;
        let buf = ws.get(b)?;
        dir_init_block(buf);
        rebuild_head(&mut buf[..DIRBLKSIZ], ROOT_INO, ROOT_INO);
        ws.inode(&self.sb, ROOT_INO, |d| {
            *d = Dinode {
                mode: S_IFDIR | 0o755,
                nlink: 2,
                size: self.bs as u64,
                blocks: 1,
                generation: 1,
                ..Default::default()
            };
            d.db[0] = b;
        })
    }

    /// fsck_ffs's `linkup`: names each unreferenced inode to reconnect `#INO` in `target`
    /// (lost+found, or the root without one; lost+found itself as "lost+found"), raising its
    /// link count, and for a directory its ".." and the target's count. The target grows as
    /// fsck_ffs's `expanddir` grows it, a block at a time through its direct blocks and its
    /// single indirect block; an inode that finds no room even so (no free block, or the
    /// target at its limit) is cleared, as fsck_ffs's `adjust` clears a file `linkup` could
    /// not place, and said so in `notes` (its blocks, then unowned, are freed by the next
    /// round). Leaving it would leave the image unrepaired round after round.
    fn reconnect(
        &mut self,
        ws: &mut WriteSet,
        fixes: &Fixes,
        target: u32,
        alloc_from: &mut u64,
        modes: &mut BTreeMap<u32, u16>,
        notes: &mut Vec<String>,
    ) -> Result<()> {
        let blocks: Vec<u64> = self
            .inodes
            .get(&target)
            .map_or(Vec::new(), |i| i.dir_map.iter().filter(|e| e.0 < i.dir_limit).map(|e| e.1).collect());
        let mut target_dir = Target { ino: target, blocks, room_from: 0 };
        for &ino in &fixes.reconnect {
            if fixes.clear_inodes.contains(&ino) {
                continue;
            }
            let Some(info) = self.inodes.get(&ino) else {
                continue;
            };
            let (mode, links, dotdot) = (info.mode, info.links, info.dotdot);
            let name = if ino == LOST_FOUND_INO && target == ROOT_INO {
                b"lost+found".to_vec()
            } else {
                format!("#{ino}").into_bytes()
            };
            if !self.link_into(ws, &mut target_dir, ino, dtype_of_mode(mode), &name, alloc_from)? {
                let kind = if mode & S_IFMT == S_IFDIR { "DIR" } else { "FILE" };
                let dir = if target == ROOT_INO { "/" } else { "lost+found" };
                notes.push(format!("UNREF {kind} I={ino}: SORRY. NO SPACE IN {dir} DIRECTORY (CLEARED)"));
                ws.inode(&self.sb, ino, |d| *d = Dinode { generation: d.generation, ..Dinode::default() })?;
                let was = modes.remove(&ino);
                assert!(was.is_some(), "I={ino}: reconnecting an inode not in use");
                continue;
            }
            ws.inode(&self.sb, ino, |d| d.nlink = links.saturating_add(1))?;
            if mode & S_IFMT == S_IFDIR {
                if let Some((bno, at, _)) = dotdot {
                    dirent_set_ino(ws.get(bno)?, at, target);
                }
                ws.inode(&self.sb, target, |d| d.nlink = d.nlink.saturating_add(1))?;
            }
        }
        Ok(())
    }

    /// fsck_ffs's `makeentry`: adds the entry `name` for `ino` to the target directory, in the
    /// first block with room, else (`expanddir`) in a new block that grows the target by one
    /// block, mapped by its next direct pointer or past those by its single indirect block
    /// (allocated with the first block it maps). Returns false if there was no room and no
    /// block to grow by (nothing is changed then).
    fn link_into(
        &mut self,
        ws: &mut WriteSet,
        target: &mut Target,
        ino: u32,
        dtype: u8,
        name: &[u8],
        alloc_from: &mut u64,
    ) -> Result<bool> {
        while let Some(&b) = target.blocks.get(target.room_from) {
            let buf = ws.get(b)?;
            if let Ok(Some(at)) = dir_find_space(buf, name.len()) {
                if dir_insert(buf, at, ino, dtype, name).is_ok() {
                    return Ok(true);
                }
            }
            target.room_from += 1;
        }
        let bs = self.bs as u64;
        let td = ws.dinode(&self.sb, target.ino)?;
        let n = td.size / bs;
        let nindir = self.sb.ptrs_per_block();
        if n >= NDADDR as u64 + nindir {
            return Ok(false);
        }
        let slot = n as usize;
        let ind = if slot < NDADDR {
            if td.db[slot] != 0 {
                return Ok(false); // a block past the size: pass 1 claims it, the next round fixes it
            }
            None
        } else if td.ib[0] == 0 {
            Some((0, slot - NDADDR))
        } else {
            if ind_get(ws.get(td.ib[0])?, slot - NDADDR) != 0 {
                return Ok(false);
            }
            Some((td.ib[0], slot - NDADDR))
        };
        // Both blocks first (an indirect block with its first data block), so that a failure
        // leaves nothing changed.
        let from = *alloc_from;
        let Some(b) = self.try_alloc_block(alloc_from) else {
            return Ok(false);
        };
        let new_ind = match ind {
            Some((0, _)) => match self.try_alloc_block(alloc_from) {
                Some(ib) => Some(ib),
                None => {
                    self.owned.clear(b);
                    *alloc_from = from;
                    return Ok(false);
                }
            },
            _ => None,
        };
        let buf = ws.get(b)?;
        dir_init_block(buf);
        let inserted = dir_insert(buf, 0, ino, dtype, name);
        assert!(inserted.is_ok(), "an entry of {} bytes does not fit an empty block", name.len());
        if let Some(ib) = new_ind {
            ws.get(ib)?.fill(0);
        }
        if let Some((old, idx)) = ind {
            let ib = new_ind.unwrap_or(old);
            ind_set(ws.get(ib)?, idx, b);
        }
        ws.inode(&self.sb, target.ino, |d| {
            match (ind, new_ind) {
                (None, _) => d.db[slot] = b,
                (Some(_), Some(ib)) => {
                    d.ib[0] = ib;
                    d.blocks += 1;
                }
                (Some(_), None) => {}
            }
            d.size = (n + 1) * bs;
            d.blocks += 1;
        })?;
        target.blocks.push(b);
        Ok(true)
    }

    /// Group headers rebuilt from the computed maps (and `modes`, the inodes this round leaves
    /// in use), and the superblock from their sums, marked clean, without the snapshot list
    /// entries in `drop_snapshots`.
    fn rewrite_maps(
        &self,
        ws: &mut WriteSet,
        modes: &BTreeMap<u32, u16>,
        drop_snapshots: &BTreeSet<usize>,
    ) -> Result<()> {
        let sb = &self.sb;
        let (mut tfb, mut tfi, mut tnd) = (0u64, 0u64, 0u64);
        for cg in 0..sb.ngroups {
            let (buf, h) = self.cg_header(cg, modes);
            tfb += h.free_blocks as u64;
            tfi += h.free_inodes as u64;
            tnd += h.ndirs as u64;
            if buf != self.read(sb.cg_header_block(cg))? {
                ws.get(sb.cg_header_block(cg))?.copy_from_slice(&buf);
            }
        }
        let mut nsb = sb.clone();
        nsb.free_blocks = tfb;
        nsb.free_inodes = tfi;
        nsb.ndirs = tnd;
        nsb.flags |= SB_CLEAN;
        if !self.preen {
            // Only a full repair vouches for the whole image; if this round leaves something,
            // `mark_needs_fsck` sets the flag again.
            nsb.flags &= !SB_NEEDS_FSCK;
        }
        if !drop_snapshots.is_empty() {
            let keep: Vec<u32> = (0..MAX_SNAPSHOTS)
                .filter(|i| !drop_snapshots.contains(i))
                .map(|i| sb.snapshots[i])
                .filter(|&i| i != 0)
                .collect();
            nsb.snapshots = [0; MAX_SNAPSHOTS];
            nsb.snapshots[..keep.len()].copy_from_slice(&keep);
        }
        // A superblock replaced (from a copy or the group headers) is written on a clean block.
        let mut b0 = if self.replace_primary { vec![0u8; self.bs] } else { self.sb_block.clone() };
        nsb.encode(&mut b0);
        if b0 != self.sb_block {
            ws.get(0)?.copy_from_slice(&b0);
        }
        Ok(())
    }

    /// Group `cg`'s header block as the computed maps give it (the rotors kept), and the header.
    fn cg_header(&self, cg: u32, modes: &BTreeMap<u32, u16>) -> (Vec<u8>, CgHeader) {
        let sb = &self.sb;
        let ipg = sb.inodes_per_group;
        let mut buf = vec![0u8; self.bs];
        let start = sb.cg_start(cg);
        let nblocks = sb.cg_blocks(cg);
        let boff = CgHeader::block_map_offset(ipg);
        let mut free_b = 0u32;
        for idx in 0..nblocks {
            if self.owned.get(start + idx as u64) {
                bit_set(&mut buf[boff..], idx as usize, true);
            } else {
                free_b += 1;
            }
        }
        let (mut free_i, mut dirs, mut used) = (0u32, 0u32, 0u32);
        for idx in 0..ipg {
            let ino = cg * ipg + idx;
            let mode = modes.get(&ino);
            if ino < FIRST_INO || mode.is_some() {
                bit_set(&mut buf[CgHeader::inode_map_offset()..], idx as usize, true);
                used = idx + 1;
            } else {
                free_i += 1;
            }
            if mode.is_some_and(|m| m & S_IFMT == S_IFDIR) {
                dirs += 1;
            }
        }
        // The blocks of every inode left in use are initialized; a valid count above that
        // stays (its blocks were initialized by the allocator). A version 1 header keeps 0.
        let initialized = if sb.lazy_inodes() {
            let stored = self.initialized[cg as usize].unwrap_or(0);
            stored.max(used.next_multiple_of(sb.inodes_per_block()))
        } else {
            0
        };
        let meta = (sb.cg_data_start(cg) - start) as u32;
        let (brot, irot) = match &self.cgs[cg as usize] {
            Some(h) => (h.block_rotor, h.inode_rotor),
            None => (meta, 0),
        };
        let h = CgHeader {
            cg,
            nblocks,
            ninodes: ipg,
            free_blocks: free_b,
            free_inodes: free_i,
            ndirs: dirs,
            block_rotor: brot,
            inode_rotor: irot,
            initialized,
        };
        h.encode(&mut buf);
        CgHeader::seal(&mut buf);
        (buf, h)
    }

    /// Marks the image as needing a full fsck (something is left that repair could not fix).
    /// Returns true if the superblock changed.
    pub(super) fn mark_needs_fsck(&self) -> Result<bool> {
        let mut nsb = self.sb.clone();
        nsb.flags = (nsb.flags | SB_NEEDS_FSCK) & !SB_CLEAN;
        let mut b0 = if self.replace_primary { vec![0u8; self.bs] } else { self.sb_block.clone() };
        nsb.encode(&mut b0);
        if b0 == self.sb_block {
            return Ok(false);
        }
        self.dev.write_batch(&[WriteReq { bno: 0, data: &b0 }], WriteKind::Sync)?;
        Ok(true)
    }

    /// A free data block (owned by nothing), marked owned.
    fn alloc_block(&mut self, from: &mut u64) -> Result<u64> {
        self.try_alloc_block(from).ok_or_else(|| FsckError::Geometry("no free block left to repair with".into()))
    }

    /// A free data block (owned by nothing) at or after `from`, marked owned; `None` if there
    /// is none.
    fn try_alloc_block(&mut self, from: &mut u64) -> Option<u64> {
        let b = (*from..self.sb.num_blocks).find(|&b| self.sb.is_data_block(b) && !self.owned.get(b))?;
        self.owned.set(b);
        *from = b + 1;
        Some(b)
    }
}

/// The fixes to inodes: pointers cleared, reservation flags dropped, sizes, times, block and
/// link counts.
fn fix_inodes(ws: &mut WriteSet, sb: &Superblock, fixes: &Fixes) -> Result<()> {
    for loc in &fixes.ptr_clears {
        match *loc {
            Loc::Inode { ino, slot } => ws.inode(sb, ino, |d| {
                if slot < NDADDR {
                    d.db[slot] = 0;
                } else {
                    d.ib[slot - NDADDR] = 0;
                }
            })?,
            Loc::Ind { bno, idx } => ind_set(ws.get(bno)?, idx, 0),
        }
    }
    for &ino in &fixes.clear_br_flags {
        ws.inode(sb, ino, |d| d.flags &= !(DI_IMMUTABLE | DI_UNMOVABLE))?;
    }
    for (&ino, &size) in &fixes.set_size {
        ws.inode(sb, ino, |d| d.size = size)?;
    }
    for &ino in &fixes.clear_ext {
        ws.inode(sb, ino, |d| (d.extsize, d.extb) = (0, [0; NXADDR]))?;
    }
    for &ino in &fixes.fix_nsec {
        ws.inode(sb, ino, |d| {
            for ns in [&mut d.atime_ns, &mut d.mtime_ns, &mut d.ctime_ns, &mut d.btime_ns] {
                if *ns >= NSEC_PER_SEC {
                    *ns = 0;
                }
            }
        })?;
    }
    for (&ino, &blocks) in &fixes.set_blocks {
        ws.inode(sb, ino, |d| d.blocks = blocks)?;
    }
    for (&ino, &nlink) in &fixes.set_nlink {
        ws.inode(sb, ino, |d| d.nlink = nlink)?;
    }
    Ok(())
}

/// Directory entries: in-place changes, then removals, then rebuilt chunks (which keep what the
/// earlier fixes left).
fn fix_dirs(ws: &mut WriteSet, dir: &[DirFix]) -> Result<()> {
    for f in dir {
        match *f {
            DirFix::SetIno { bno, at, ino } => dirent_set_ino(ws.get(bno)?, at, ino),
            DirFix::SetType { bno, at, dtype } => dirent_set_type(ws.get(bno)?, at, dtype),
            _ => {}
        }
    }
    for f in dir {
        if let DirFix::Remove { bno, at } = *f {
            // A failure leaves the entry; the next round finds it again.
            let _ = dir_remove(ws.get(bno)?, at);
        }
    }
    for f in dir {
        match *f {
            DirFix::RebuildHead { bno, dir, parent } => rebuild_head(&mut ws.get(bno)?[..DIRBLKSIZ], dir, parent),
            DirFix::ResetChunk { bno, chunk } => dir_init_block(&mut ws.get(bno)?[chunk..chunk + DIRBLKSIZ]),
            _ => {}
        }
    }
    Ok(())
}

/// Rebuilds the first chunk of a directory: "." and "..", then the live entries that were there
/// and still fit (the others become unreferenced and are reconnected by the next round).
fn rebuild_head(chunk: &mut [u8], dir: u32, parent: u32) {
    let live: Vec<(u32, u8, Vec<u8>)> = dir_iter(chunk)
        .map_while(|r| r.ok())
        .filter(|e| e.ino != 0 && e.name != b"." && e.name != b"..")
        .map(|e| (e.ino, e.dtype, e.name.to_vec()))
        .collect();
    dir_init_block(chunk);
    let _ = dir_insert(chunk, 0, dir, DT_DIR, b".");
    if let Ok(Some(at)) = dir_find_space(chunk, 2) {
        let _ = dir_insert(chunk, at, parent, DT_DIR, b"..");
    }
    for (ino, dtype, name) in live {
        if let Ok(Some(at)) = dir_find_space(chunk, name.len()) {
            let _ = dir_insert(chunk, at, ino, dtype, &name);
        }
    }
}

/// The blocks a repair round changes, read once and written together at the end.
struct WriteSet<'a> {
    dev: &'a dyn BlockDevice,
    bs: usize,
    blocks: BTreeMap<u64, (Vec<u8>, Vec<u8>)>,
}

impl<'a> WriteSet<'a> {
    fn new(dev: &'a dyn BlockDevice, bs: usize) -> Self {
        WriteSet { dev, bs, blocks: BTreeMap::new() }
    }

    fn get(&mut self, bno: u64) -> Result<&mut [u8]> {
        if !self.blocks.contains_key(&bno) {
            let mut b = vec![0u8; self.bs];
            self.dev.read_block(bno, &mut b)?;
            self.blocks.insert(bno, (b.clone(), b));
        }
        Ok(&mut self.blocks.get_mut(&bno).expect("just inserted").1)
    }

    fn dinode(&mut self, sb: &Superblock, ino: u32) -> Result<Dinode> {
        let (bno, off) = sb.inode_location(ino);
        Ok(Dinode::decode(&self.get(bno)?[off..off + DINODE_SIZE]))
    }

    fn inode(&mut self, sb: &Superblock, ino: u32, f: impl FnOnce(&mut Dinode)) -> Result<()> {
        let (bno, off) = sb.inode_location(ino);
        let buf = self.get(bno)?;
        let mut d = Dinode::decode(&buf[off..off + DINODE_SIZE]);
        f(&mut d);
        d.encode(&mut buf[off..off + DINODE_SIZE]);
        Ok(())
    }

    /// Writes every changed block; returns true if there was any.
    fn flush(self) -> Result<bool> {
        let changed: Vec<WriteReq> = self
            .blocks
            .iter()
            .filter(|(_, (orig, cur))| orig != cur)
            .map(|(&bno, (_, cur))| WriteReq { bno, data: cur })
            .collect();
        for chunk in changed.chunks(256) {
            self.dev.write_batch(chunk, WriteKind::Sync)?;
        }
        Ok(!changed.is_empty())
    }
}
