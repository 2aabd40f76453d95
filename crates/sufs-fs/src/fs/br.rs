//! The Block Register (Depoutovitch & Warkentin §2-3): other components reserve blocks of the file
//! system's free space, query where they are, grow and shrink the reservation and free it. As in
//! the paper's ext4 prototype, a reservation is a regular file, here `/.br/NAME`, flagged immutable
//! and unmovable (`DI_IMMUTABLE | DI_UNMOVABLE`): the file system never moves its blocks nor
//! hands them out, and through the file interface its writes, truncation, links, rename and unlink
//! are refused with EPERM. Its blocks are allocated as fallocate's unwritten extents are: the file
//! system never writes them (the owner writes them on the device, by the physical numbers
//! `brquery` answers), and reads through the file interface go to the device, not the cache.
//!
//! Ordering: a reservation's block pointers go through the same dependencies as a file's (soft
//! updates roll a pointer back until the block's bitmap bit is on disk; `sync` writes bitmaps
//! first), and each call returns only once its change is durable (an fsync of the reservation or
//! of `/.br`), so an owner may use the blocks as soon as brreserve or brexpand returns and a crash
//! never gives them to anybody else.
//!
//! On a UFS2 image whose blocks hold fragments a reservation takes whole blocks only (every
//! fragment of each block, block-aligned; never a tail in fragments), so the groups' fragment
//! maps, `cg_frsum`, cluster maps and counts move as for any whole block a file holds, and no
//! fragment of a reserved block is free for another file's tail. Addresses are the file system's
//! (fragment numbers on UFS2, as FreeBSD's block pointers): a run's blocks are `fs_frag`
//! addresses apart, and counts are of blocks.

use serde::Serialize;

use super::{Fs, FsError, FsResult, Slot};
use crate::dev::WriteKind;
use crate::format::*;
use crate::softdep::Task;

/// The directory that holds the reservations, in the root.
pub const BR_DIR: &[u8] = b".br";

/// The flags that make a file a reservation.
pub const BR_FLAGS: u32 = DI_IMMUTABLE | DI_UNMOVABLE;

/// One physically contiguous run of a reservation: logical blocks `offset..offset + len` are the
/// device's blocks `start..start + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct BrRun {
    pub offset: u64,
    pub start: u64,
    pub len: u64,
}

impl BrRun {
    /// The addresses of the run's blocks: `start`, then one block (`frag` addresses, the
    /// superblock's `frag()`) apart.
    pub fn blocks(&self, frag: u64) -> impl Iterator<Item = u64> {
        let start = self.start;
        (0..self.len).map(move |i| start + i * frag)
    }
}

/// A reservation as `brlist` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Reservation {
    pub name: String,
    pub ino: u32,
    /// Blocks reserved (holes left by brtruncate excluded).
    pub blocks: u64,
    /// Logical length in blocks (where the next brexpand appends).
    pub length: u64,
}

/// True if a dinode is a reservation.
pub fn is_reservation(d: &Dinode) -> bool {
    d.flags & BR_FLAGS == BR_FLAGS
}

impl Fs {
    /// The inode of `/.br`, made (root-only, immutable so it cannot be renamed) if `create`.
    fn br_dir(&mut self, create: bool) -> FsResult<u32> {
        self.special_dir(BR_DIR, create)
    }

    /// The reservation `name`: its directory, inode and dinode.
    fn br_get(&mut self, name: &[u8]) -> FsResult<(u32, u32, Dinode)> {
        Self::br_check_name(name)?;
        let dir = self.br_dir(false)?;
        let (ino, _) = self.lookup(dir, name)?;
        let d = self.iget(ino)?;
        if !is_reservation(&d) {
            return Err(FsError::Invalid("not a Block Register reservation"));
        }
        Ok((dir, ino, d))
    }

    fn br_check_name(name: &[u8]) -> FsResult<()> {
        Self::check_name(name)?;
        if name == b"." || name == b".." {
            return Err(FsError::Invalid("bad reservation name"));
        }
        Ok(())
    }

    /// brreserve: a new reservation `name` of `nblocks` blocks, placed near physical block `hint`
    /// if given (the paper's proposed proximity allocation). All or nothing: on ENOSPC nothing is
    /// left behind.
    pub fn brreserve(&mut self, name: &[u8], nblocks: u64, hint: Option<u64>) -> FsResult<Reservation> {
        self.check_writable()?;
        Self::br_check_name(name)?;
        self.br_check_hint(hint)?;
        let dir = self.br_dir(true)?;
        let (ino, _) = self.create_node(dir, name, S_IFREG | 0o600, 0, 0, |_, _, d| {
            d.flags |= BR_FLAGS;
            Ok(())
        })?;
        let mut d = self.iget(ino)?;
        if let Err(e) = self.br_grow(ino, &mut d, nblocks, hint) {
            // Nothing was promised: the empty reservation goes again.
            self.br_remove(dir, name, ino)?;
            self.balance()?;
            return Err(e);
        }
        self.balance()?;
        self.fsync(ino)?;
        self.br_info(name, ino)
    }

    /// brexpand: `nblocks` more blocks at the end of the reservation, near `hint` if given
    /// (else after its last block). All or nothing.
    pub fn brexpand(&mut self, name: &[u8], nblocks: u64, hint: Option<u64>) -> FsResult<Reservation> {
        self.check_writable()?;
        self.br_check_hint(hint)?;
        let (_, ino, mut d) = self.br_get(name)?;
        self.br_grow(ino, &mut d, nblocks, hint)?;
        self.balance()?;
        self.fsync(ino)?;
        self.br_info(name, ino)
    }

    /// brquery: the physical runs of logical blocks `offset..offset + count` (holes skipped).
    pub fn brquery(&mut self, name: &[u8], offset: u64, count: u64) -> FsResult<Vec<BrRun>> {
        let (_, ino, mut d) = self.br_get(name)?;
        let bs = self.sb.block_size as u64;
        let frag = self.sb.frag();
        let end = offset.saturating_add(count).min(d.size / bs);
        let mut runs: Vec<BrRun> = Vec::new();
        for lbn in offset..end {
            let (b, _) = self.bmap(ino, &mut d, lbn, false)?;
            if b == 0 {
                continue;
            }
            match runs.last_mut() {
                Some(r) if r.offset + r.len == lbn && r.start + r.len * frag == b => r.len += 1,
                _ => runs.push(BrRun { offset: lbn, start: b, len: 1 }),
            }
        }
        Ok(runs)
    }

    /// brtruncate: returns physical block `bno` of the reservation to the file system. The last
    /// block shortens the reservation; any other leaves a hole (its logical place stays).
    pub fn brtruncate(&mut self, name: &[u8], bno: u64) -> FsResult<Reservation> {
        self.check_writable()?;
        let (_, ino, mut d) = self.br_get(name)?;
        let bs = self.sb.block_size as u64;
        let len = d.size / bs;
        let mut at = None;
        for lbn in (0..len).rev() {
            if self.bmap(ino, &mut d, lbn, false)?.0 == bno {
                at = Some(lbn);
                break;
            }
        }
        let lbn = at.ok_or(FsError::Invalid("block not in the reservation"))?;
        if lbn + 1 == len {
            // The tail: the reservation shrinks to its last block still held.
            let mut keep = lbn;
            while keep > 0 && self.bmap(ino, &mut d, keep - 1, false)?.0 == 0 {
                keep -= 1;
            }
            d.size = keep * bs;
            self.touch_c(&mut d);
            let size = d.size;
            self.truncate_blocks(ino, &mut d, keep, size, vec![])?;
        } else {
            self.br_punch(ino, &mut d, lbn, bno)?;
        }
        self.balance()?;
        self.fsync(ino)?;
        self.br_info(name, ino)
    }

    /// brfree: removes the reservation; every block returns to the file system (with soft
    /// updates, once the removed name is on disk, as for any unlinked file). Returns the number
    /// of blocks it held (indirect blocks included).
    pub fn brfree(&mut self, name: &[u8]) -> FsResult<u64> {
        self.check_writable()?;
        let (dir, ino, d) = self.br_get(name)?;
        let held = self.br_whole_blocks(ino, d.blocks)?;
        self.br_remove(dir, name, ino)?;
        self.balance()?;
        self.fsync(dir)?;
        Ok(held)
    }

    /// Every reservation, by name.
    pub fn brlist(&mut self) -> FsResult<Vec<Reservation>> {
        let mut out = Vec::new();
        for e in self.special_dir_entries(BR_DIR)? {
            if self.iget(e.ino).is_ok_and(|d| is_reservation(&d)) {
                out.push(self.br_info(&e.name, e.ino)?);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The physical block of logical block `lbn` of any file (0 for a hole), as FIBMAP answers:
    /// what direct I/O to an allocated file writes.
    pub fn fibmap(&mut self, ino: u32, lbn: u64) -> FsResult<u64> {
        let mut d = self.iget(ino)?;
        Ok(self.bmap(ino, &mut d, lbn, false)?.0)
    }

    /// The reservation's counts: data blocks (its block count less the indirect blocks). Only
    /// the indirect blocks above the first level are read (with 4 KiB blocks, one per GiB of
    /// reservation), not every pointer: the volume layer's refill asks for this after each
    /// brexpand, and walking every block made each refill cost one read per 2 MiB of store.
    fn br_info(&mut self, name: &[u8], ino: u32) -> FsResult<Reservation> {
        let d = self.iget(ino)?;
        let bs = self.sb.block_size as u64;
        let length = d.size / bs;
        let mut indirect = 0;
        for (level, &top) in d.ib.iter().enumerate() {
            indirect += self.br_count_indirect(top, level)?;
        }
        let held = self.br_whole_blocks(ino, d.blocks)?;
        let blocks = held.checked_sub(indirect).ok_or_else(|| {
            FsError::Corrupt(format!("reservation inode {ino}: {held} blocks but {indirect} indirect"))
        })?;
        Ok(Reservation { name: String::from_utf8_lossy(name).into_owned(), ino, blocks, length })
    }

    /// A reservation's count of addresses held (`di_blocks` in fragments on UFS2) as whole
    /// blocks: it holds no fragment run, so anything else is damage.
    fn br_whole_blocks(&self, ino: u32, held: u64) -> FsResult<u64> {
        let frag = self.sb.frag();
        if !held.is_multiple_of(frag) {
            return Err(FsError::Corrupt(format!("reservation inode {ino} holds {held} fragments, not whole blocks")));
        }
        Ok(held / frag)
    }

    /// Indirect blocks in the tree under `ptr`, an indirect block of `level` (0: it points to data).
    fn br_count_indirect(&mut self, ptr: u64, level: usize) -> FsResult<u64> {
        if ptr == 0 {
            return Ok(0);
        }
        if level == 0 {
            return Ok(1);
        }
        self.checked_ptr(ptr)?;
        let n_ptrs = self.sb.ptrs_per_block() as usize;
        let block = self.cache.read(ptr)?;
        let children: Vec<u64> = (0..n_ptrs).map(|i| ind_get(block, i)).filter(|&c| c != 0).collect();
        let mut n = 1;
        for c in children {
            n += self.br_count_indirect(c, level - 1)?;
        }
        Ok(n)
    }

    fn br_check_hint(&self, hint: Option<u64>) -> FsResult<()> {
        match hint {
            Some(h) if h >= self.sb.num_blocks => Err(FsError::Invalid("placement hint beyond the end of the volume")),
            _ => Ok(()),
        }
    }

    /// Allocates `n` blocks after the reservation's end, without contents. On failure the blocks
    /// this call took are returned and the inode is as before.
    fn br_grow(&mut self, ino: u32, d: &mut Dinode, n: u64, hint: Option<u64>) -> FsResult<()> {
        let bs = self.sb.block_size as u64;
        if !d.size.is_multiple_of(bs) {
            // Its last block would be a tail in fragments, which a reservation never holds.
            return Err(FsError::Corrupt(format!("reservation inode {ino}: size {} is not whole blocks", d.size)));
        }
        let start = d.size / bs;
        let end = start.checked_add(n).ok_or(FsError::TooBig)?;
        if end.saturating_mul(bs) > self.sb.max_file_size() {
            return Err(FsError::TooBig);
        }
        let before = d.clone();
        self.br_hint = hint;
        let mut r = Ok(());
        for lbn in start..end {
            match self.br_map_block(ino, d, lbn) {
                Ok((b, fresh)) => {
                    let whole = b.is_multiple_of(self.sb.frag());
                    assert!(!fresh || whole, "reservation inode {ino}: new block {b} is not a whole block");
                    if fresh {
                        // An unwritten block: no buffer, and no contents to wait for.
                        self.forget_block(b)?;
                        if let Some(sd) = self.sd() {
                            sd.unwritten_block(b);
                        }
                    }
                }
                Err(e) => {
                    r = Err(e);
                    break;
                }
            }
        }
        self.br_hint = None;
        if let Err(e) = r {
            d.size = before.size;
            let size = d.size;
            self.truncate_blocks(ino, d, start, size, vec![])?;
            return Err(e);
        }
        d.size = end * bs;
        self.touch_mc(d);
        self.iput(ino, d)?;
        Ok(())
    }

    /// Logical block `lbn` of a reservation, allocated if it is a hole: always a whole block. On
    /// an image with fragments a direct block is allocated as the run of a file reaching that
    /// block's end (`bmap` would start a new last block as a tail of one fragment).
    fn br_map_block(&mut self, ino: u32, d: &mut Dinode, lbn: u64) -> FsResult<(u64, bool)> {
        if self.has_frags() && lbn < NDADDR as u64 {
            let bs = self.sb.block_size as u64;
            return self.bmap_run(ino, d, lbn, (lbn + 1) * bs);
        }
        self.bmap(ino, d, lbn, true)
    }

    /// Returns block `bno` at logical block `lbn` (not the last) and leaves a hole: the pointer
    /// is cleared first and the block freed once that is on disk (synchronously, as FFS's
    /// partial truncation through indirect blocks is).
    fn br_punch(&mut self, ino: u32, d: &mut Dinode, lbn: u64, bno: u64) -> FsResult<()> {
        let holder = if lbn < NDADDR as u64 {
            d.db[lbn as usize] = 0;
            None
        } else {
            let (ind, idx) = self.br_slot(d, lbn)?;
            ind_set(self.cache.modify(ind)?, idx, 0);
            Some(ind)
        };
        d.blocks = d.blocks.saturating_sub(self.sb.frag());
        self.touch_c(d);
        let ib = self.iput(ino, d)?;
        let mut dirtied: Vec<u64> = holder.into_iter().collect();
        dirtied.push(ib);
        let mut then = Vec::new();
        // Whether a pointer is on disk decides when its block may be reused: a write in flight
        // may be putting it there.
        self.land_flight()?;
        if let Some(sd) = self.hooks.softdep.as_mut() {
            then = sd.cancel_blocks(ino, &[bno]);
            self.write_bufs(&dirtied, WriteKind::Sync)?;
        } else {
            self.order_write(&dirtied)?;
        }
        self.forget_block(bno)?;
        self.free_block(bno)?;
        for t in then {
            self.run_task(t)?;
        }
        Ok(())
    }

    /// The indirect block and index holding the pointer of logical block `lbn` (past the direct
    /// blocks), which must be mapped.
    pub(super) fn br_slot(&mut self, d: &Dinode, lbn: u64) -> FsResult<(u64, usize)> {
        let p = self.sb.ptrs_per_block();
        let mut rel = lbn - NDADDR as u64;
        let mut level = 0usize;
        let mut span = p;
        while rel >= span {
            rel -= span;
            level += 1;
            if level >= NIADDR {
                return Err(FsError::TooBig);
            }
            span *= p;
        }
        let mut ptr = d.ib[level];
        let mut span = span / p;
        loop {
            if ptr == 0 {
                return Err(FsError::Corrupt(format!("reservation block {lbn} lost its indirect block")));
            }
            self.checked_ptr(ptr)?;
            let idx = (rel / span) as usize;
            rel %= span;
            if span == 1 {
                return Ok((ptr, idx));
            }
            ptr = ind_get(self.cache.read(ptr)?, idx);
            span /= p;
        }
    }

    /// Removes the name of reservation `ino` in `dir` (the file interface's unlink refuses it);
    /// the inode and its blocks go as an unlinked file's do.
    fn br_remove(&mut self, dir: u32, name: &[u8], ino: u32) -> FsResult<()> {
        let mut dd = self.dir_inode(dir)?;
        let slot: Slot = self.find_entry(dir, &mut dd, name)?.ok_or(FsError::NotFound)?;
        if slot.ino != ino {
            return Err(FsError::Corrupt(format!("reservation {:?} changed inode", String::from_utf8_lossy(name))));
        }
        self.touch_mc(&mut dd);
        self.iput(dir, &dd)?;
        self.unlink_name(dir, &slot, name, vec![Task::DropLink(ino)])?;
        Ok(())
    }

    /// Reads a reservation through the file interface: from the device, never the cache, whose
    /// copy would go stale as the owner writes the blocks directly.
    pub(super) fn br_read(&mut self, ino: u32, d: &mut Dinode, off: u64, len: usize) -> FsResult<Vec<u8>> {
        self.read_blocks(d.size, off, len, |fs, lbn, buf| {
            match fs.bmap(ino, d, lbn, false)?.0 {
                0 => buf.fill(0),
                b => fs.cache.device().read_block(b, buf)?,
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::{BlockDevice, MemDevice, WriteReq};
    use crate::fs::{mkfs, MkfsOptions, MountOptions, Ordering, RenameFlags, SetAttr};
    use std::sync::Arc;

    fn mounted(ordering: Ordering) -> (Arc<MemDevice>, Fs) {
        let dev = Arc::new(MemDevice::new(4096, 16384));
        mkfs(dev.clone(), &MkfsOptions { ..Default::default() }, (1, 0)).unwrap();
        let opts = MountOptions { ordering, cache_blocks: 256, readonly: false };
        let fs = Fs::mount(dev.clone(), opts, Arc::new(SimClock::new())).unwrap();
        (dev, fs)
    }

    fn remount(dev: &Arc<MemDevice>, fs: &mut Fs) -> Fs {
        fs.unmount().unwrap();
        Fs::mount(dev.clone(), MountOptions::default(), Arc::new(SimClock::new())).unwrap()
    }

    fn blocks_of(runs: &[BrRun]) -> Vec<u64> {
        runs.iter().flat_map(|r| r.start..r.start + r.len).collect()
    }

    #[test]
    fn reserve_query_expand_truncate_free() {
        for ordering in [Ordering::Softdep, Ordering::Sync, Ordering::Async] {
            let (dev, mut fs) = mounted(ordering);
            let free0 = fs.statfs().bfree;
            let r = fs.brreserve(b"store", 100, None).unwrap();
            assert_eq!((r.blocks, r.length), (100, 100));
            assert_eq!(fs.statfs().bfree, free0 - 100 - 1 - 1, "100 blocks, an indirect block, /.br");
            let runs = fs.brquery(b"store", 0, 1000).unwrap();
            let all = blocks_of(&runs);
            assert_eq!(all.len(), 100);
            // A query of a window answers that window only.
            assert_eq!(blocks_of(&fs.brquery(b"store", 10, 5).unwrap()), all[10..15]);
            // Expand with a hint far away: the new blocks go there.
            let far = fs.sb.cg_data_start(fs.sb.ngroups - 1) + 100;
            let r = fs.brexpand(b"store", 20, Some(far)).unwrap();
            assert_eq!((r.blocks, r.length), (120, 120));
            let tail = blocks_of(&fs.brquery(b"store", 100, 20).unwrap());
            assert!(tail[0] >= far && tail[0] < far + 64, "hinted block {} near {far}", tail[0]);
            // Punch a middle block, then the last.
            let r = fs.brtruncate(b"store", all[50]).unwrap();
            assert_eq!((r.blocks, r.length), (119, 120));
            assert!(!blocks_of(&fs.brquery(b"store", 0, 200).unwrap()).contains(&all[50]));
            let r = fs.brtruncate(b"store", tail[19]).unwrap();
            assert_eq!((r.blocks, r.length), (118, 119));
            assert!(matches!(fs.brtruncate(b"store", 3), Err(FsError::Invalid(_))));
            // It persists.
            let mut fs = remount(&dev, &mut fs);
            assert_eq!(
                fs.brlist().unwrap(),
                vec![Reservation { name: "store".into(), ino: r.ino, blocks: 118, length: 119 }]
            );
            let q = blocks_of(&fs.brquery(b"store", 0, 200).unwrap());
            assert_eq!(q.len(), 118);
            assert_eq!(fs.brfree(b"store").unwrap(), 118 + 1);
            fs.sync_all().unwrap();
            assert_eq!(fs.statfs().bfree, free0 - 1, "all back but /.br");
            assert!(fs.brlist().unwrap().is_empty());
            fs.unmount().unwrap();
            let report = crate::fsck::check(dev.as_ref()).unwrap();
            assert!(report.is_clean(), "{ordering}: {:?}", report.findings);
        }
    }

    /// A newfs'd UFS2 image of 4 KiB blocks of `fsize`-byte fragments, mounted.
    fn mounted_ufs2(fsize: usize, ordering: Ordering) -> (Arc<MemDevice>, Fs) {
        let dev = crate::format::ufs2::newfs::mem_image(8 << 20, fsize);
        let opts = MountOptions { ordering, cache_blocks: 256, readonly: false };
        let fs = Fs::mount(dev.clone(), opts, Arc::new(SimClock::new())).unwrap();
        (dev, fs)
    }

    fn ufs2_findings(dev: &MemDevice) -> Vec<String> {
        let len = dev.num_blocks() * dev.addr_unit() as u64;
        let r = crate::fsck::ufs2::check(dev as &dyn BlockDevice, len, &Default::default()).unwrap();
        r.findings.iter().map(|f| f.to_string()).collect()
    }

    /// On UFS2 with fragments a reservation holds whole, block-aligned blocks; the fragment maps
    /// and summaries stay exact (the UFS2 checker's pass 5), files filling the disk never get a
    /// reserved block's fragments (no duplicate), and freeing gives every fragment back.
    #[test]
    fn whole_blocks_on_ufs2_with_fragments() {
        for fsize in [512, 1024, 2048] {
            for ordering in [Ordering::Softdep, Ordering::Sync, Ordering::Async] {
                let what = format!("fsize {fsize}, {ordering}");
                let (dev, mut fs) = mounted_ufs2(fsize, ordering);
                let frag = fs.sb.frag();
                assert_eq!(frag, 4096 / fsize as u64);
                // A file with a tail in fragments first, so partly used blocks exist.
                let (f, _) = fs.create(ROOT_INO, b"tail", 0o644, 0, 0).unwrap();
                fs.write(f, 0, &[1u8; 5000]).unwrap();
                let free0 = fs.statfs().bfree;
                let r = fs.brreserve(b"store", 30, None).unwrap();
                assert_eq!((r.blocks, r.length), (30, 30), "{what}");
                let runs = fs.brquery(b"store", 0, 100).unwrap();
                let all: Vec<u64> = runs.iter().flat_map(|r| r.blocks(frag)).collect();
                assert_eq!(all.len(), 30, "{what}");
                assert!(all.iter().all(|b| b % frag == 0), "{what}: block-aligned {all:?}");
                // 30 blocks, an indirect block (past 12 direct ones) and /.br's first fragment.
                fs.sync_all().unwrap();
                assert_eq!(fs.statfs().bfree, free0 - 31 * frag - 1, "{what}");
                let far = fs.sb.cg_data_start(fs.sb.ngroups - 1) + 40 * frag + 1;
                let r = fs.brexpand(b"store", 5, Some(far)).unwrap();
                assert_eq!((r.blocks, r.length), (35, 35), "{what}");
                let tail: Vec<u64> = fs.brquery(b"store", 30, 5).unwrap().iter().flat_map(|r| r.blocks(frag)).collect();
                assert_eq!(tail[0], far - 1, "{what}: the hinted block");
                let r = fs.brtruncate(b"store", all[5]).unwrap();
                assert_eq!((r.blocks, r.length), (34, 35), "{what}");
                assert!(matches!(fs.brtruncate(b"store", all[6] + 1), Err(FsError::Invalid(_))), "{what}");
                let r = fs.brtruncate(b"store", tail[4]).unwrap();
                assert_eq!((r.blocks, r.length), (33, 34), "{what}");
                // Fill the disk with files of every tail length: ENOSPC, and no fragment of a
                // reserved block is a file's (the checker finds no duplicate).
                let mut n = 0u32;
                'fill: loop {
                    let name = format!("f{n}");
                    let (ino, _) = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap();
                    let len = 1 + (n as usize * 7919) % 60000;
                    match fs.write(ino, 0, &vec![2u8; len]) {
                        Ok(_) => n += 1,
                        Err(FsError::NoSpace) => break 'fill,
                        Err(e) => panic!("{what}: {e}"),
                    }
                }
                let kept: Vec<u64> =
                    fs.brquery(b"store", 0, 100).unwrap().iter().flat_map(|r| r.blocks(frag)).collect();
                assert_eq!(kept.len(), 33, "{what}");
                let mut fs = remount(&dev, &mut fs);
                assert_eq!(
                    fs.brquery(b"store", 0, 100).unwrap().iter().flat_map(|r| r.blocks(frag)).collect::<Vec<_>>(),
                    kept
                );
                fs.unmount().unwrap();
                assert_eq!(ufs2_findings(&dev), Vec::<String>::new(), "{what}");
                let mut fs = Fs::mount(dev.clone(), MountOptions::default(), Arc::new(SimClock::new())).unwrap();
                let before = fs.statfs().bfree;
                assert_eq!(fs.brfree(b"store").unwrap(), 33 + 1, "{what}");
                fs.sync_all().unwrap();
                assert_eq!(fs.statfs().bfree, before + 34 * frag, "{what}");
                fs.unmount().unwrap();
                assert_eq!(ufs2_findings(&dev), Vec::<String>::new(), "{what}");
            }
        }
    }

    #[test]
    fn file_interface_refuses_changes() {
        let (dev, mut fs) = mounted(Ordering::Softdep);
        fs.brreserve(b"r", 4, None).unwrap();
        let dir = fs.lookup(ROOT_INO, BR_DIR).unwrap().0;
        let (ino, d) = fs.lookup(dir, b"r").unwrap();
        assert_eq!(d.size, 4 * 4096);
        assert!(matches!(fs.write(ino, 0, b"x"), Err(FsError::Perm)));
        let trunc = SetAttr { size: Some(0), ..Default::default() };
        assert!(matches!(fs.setattr(ino, &trunc), Err(FsError::Perm)));
        assert!(matches!(fs.unlink(dir, b"r"), Err(FsError::Perm)));
        assert!(matches!(fs.rename(dir, b"r", ROOT_INO, b"x", RenameFlags::default()), Err(FsError::Perm)));
        assert!(matches!(fs.rename(ROOT_INO, BR_DIR, ROOT_INO, b"y", RenameFlags::default()), Err(FsError::Perm)));
        assert!(matches!(fs.link(ino, ROOT_INO, b"z"), Err(FsError::Perm)));
        fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        assert!(matches!(fs.brexpand(b"../f", 1, None), Err(FsError::Invalid(_))));
        assert!(matches!(fs.brreserve(b"r", 1, None), Err(FsError::Exists)));
        assert!(matches!(fs.brquery(b"nope", 0, 1), Err(FsError::NotFound)));
        assert!(matches!(fs.brreserve(b"big", u64::MAX / 2, None), Err(FsError::TooBig)));
        assert!(matches!(fs.brreserve(b"h", 1, Some(u64::MAX)), Err(FsError::Invalid(_))));
        // Reads see what the owner wrote on the device.
        let b = fs.brquery(b"r", 2, 1).unwrap()[0].start;
        fs.read(ino, 2 * 4096, 10).unwrap();
        dev.write_batch(&[WriteReq { bno: b, data: &[7u8; 4096] }], WriteKind::Sync).unwrap();
        assert_eq!(fs.read(ino, 2 * 4096, 10).unwrap(), vec![7u8; 10]);
    }

    #[test]
    fn enospc_leaves_nothing_behind() {
        let (dev, mut fs) = mounted(Ordering::Softdep);
        let free0 = fs.statfs().bfree;
        assert!(matches!(fs.brreserve(b"all", free0 + 10, None), Err(FsError::NoSpace)));
        fs.sync_all().unwrap();
        assert!(fs.brlist().unwrap().is_empty());
        assert_eq!(fs.statfs().bfree, free0 - 1);
        fs.brreserve(b"small", 8, None).unwrap();
        assert!(matches!(fs.brexpand(b"small", free0, None), Err(FsError::NoSpace)));
        fs.sync_all().unwrap();
        assert_eq!(fs.brlist().unwrap()[0].blocks, 8);
        fs.unmount().unwrap();
        let report = crate::fsck::check(dev.as_ref()).unwrap();
        assert!(report.is_clean(), "{:?}", report.findings);
    }

    #[test]
    fn reservation_blocks_are_never_written_by_the_fs() {
        let (dev, mut fs) = mounted(Ordering::Softdep);
        let r = fs.brreserve(b"r", 300, None).unwrap();
        let blocks = blocks_of(&fs.brquery(b"r", 0, r.length).unwrap());
        for &b in &blocks {
            dev.write_batch(&[WriteReq { bno: b, data: &[0xab; 4096] }], WriteKind::Sync).unwrap();
        }
        fs.unmount().unwrap();
        let mut buf = vec![0u8; 4096];
        for &b in &blocks {
            dev.read_block(b, &mut buf).unwrap();
            assert!(buf.iter().all(|&x| x == 0xab), "block {b} overwritten");
        }
    }

    #[test]
    fn fsck_knows_reservations() {
        use crate::fsck::{self, Class, Finding};
        let (dev, mut fs) = mounted(Ordering::Softdep);
        fs.brreserve(b"a", 20, None).unwrap();
        fs.brreserve(b"b", 5, None).unwrap();
        let (f, _) = fs.create(ROOT_INO, b"plain", 0o644, 0, 0).unwrap();
        let dir = fs.lookup(ROOT_INO, BR_DIR).unwrap().0;
        let (a, _) = fs.lookup(dir, b"a").unwrap();
        fs.unmount().unwrap();
        let r = fsck::check(dev.as_ref()).unwrap();
        assert!(r.is_clean(), "{:?}", r.findings);
        assert_eq!((r.reservations, r.reserved_blocks), (2, 26), "25 blocks and an indirect block");
        // A file outside /.br flagged as a reservation: a violation; repair clears its flags.
        let sb = fs.sb.clone();
        let set_flags = |ino: u32, flags: u32| {
            let (bno, off) = sb.inode_location(ino);
            let mut buf = vec![0u8; 4096];
            dev.read_block(bno, &mut buf).unwrap();
            let mut d = sb.decode_dinode(&buf[off..off + DINODE_SIZE]);
            d.flags = flags;
            sb.encode_dinode(&d, &mut buf[off..off + DINODE_SIZE]);
            dev.write_batch(&[WriteReq { bno, data: &buf }], WriteKind::Sync).unwrap();
        };
        set_flags(f, BR_FLAGS);
        let r = fsck::check(dev.as_ref()).unwrap();
        assert!(r.findings.iter().any(|x| matches!(x, Finding::BadReservation { ino, .. } if *ino == f)), "{r:?}");
        assert_eq!(r.findings[0].class(), Class::Violation);
        // Unmovable but not immutable: also a violation.
        set_flags(a, DI_UNMOVABLE);
        let r = fsck::check(dev.as_ref()).unwrap();
        assert_eq!(r.findings.iter().filter(|x| matches!(x, Finding::BadReservation { .. })).count(), 2, "{r:?}");
        let out = fsck::repair(dev.as_ref()).unwrap();
        assert!(out.refused.is_none(), "{out:?}");
        let r = fsck::check(dev.as_ref()).unwrap();
        assert!(r.is_clean(), "{:?}", r.findings);
        assert_eq!(r.reservations, 1);
    }
}
