//! The write hooks: `before_write` rolls back, in the copy going to the device, every pointer and
//! entry whose prerequisites are not on disk (FreeBSD's initiate_write); `after_write` retires
//! what the write made durable and puts the work it allows on the work list (handle_written_*).

use crate::cache::Outgoing;
use crate::fixed_hash::HashSet;

use super::*;

impl Softdep {
    // ------------------------------------------------------------ the write hooks

    /// Rolls back, in the copy about to be written, everything whose prerequisites are not on
    /// disk, and notes what the write will carry. `copy` shares the buffer's bytes: a roll-back
    /// is a patch of the bytes it changes (a group header's fields and inode map, a dinode, an
    /// entry's inode number, a pointer), put together with the block by the write's issuer;
    /// only an indirect block rolled back is copied whole here (its safe copy). File data goes
    /// as it is.
    pub fn before_write(&mut self, bno: u64, copy: &mut Outgoing) {
        let epoch = self.tick();
        let mut inf = Inflight { epoch, ..Default::default() };
        if self.sb.is_cg_header(bno) {
            let cg = self.sb.cg_of_block(bno);
            inf.bmsafe = self.bmsafemap.get(&cg).map(|m| (m.inodedeps.clone(), m.newblks.clone()));
            if let Some(durable) = self.durable_initialized(cg) {
                self.roll_back_inits(cg, durable, copy, &mut inf);
            }
        }
        inf.first_contents = self.newblks.get(&bno).map(|n| n.epoch);
        // The others change only where something is rolled back (`Outgoing::edit`): a block
        // whose every dependency is satisfied goes as the buffer holds it.
        if self.is_inode_block(bno) {
            self.roll_back_inodes(bno, copy, &mut inf);
        }
        if self.indirdeps.contains_key(&bno) {
            self.roll_back_indir(bno, copy, &mut inf);
        }
        if self.pagedeps.contains_key(&bno) {
            self.roll_back_entries(bno, copy, &mut inf);
        }
        if inf.rolled_back {
            self.stats.rollbacks += 1;
        }
        // The rolled-back contents are a copy's: the buffer itself keeps every change, so there
        // is nothing to roll forward but the records, in `after_write`.
        let twice = self.inflight.insert(bno, inf);
        assert!(twice.is_none(), "block {bno} prepared for a write while its last write is in flight");
    }

    /// The write of `bno` failed: what `before_write` noted for it is forgotten, nothing retires.
    pub fn write_failed(&mut self, bno: u64) {
        let inf = self.inflight.remove(&bno);
        assert!(inf.is_some(), "a failed write of block {bno} that was never prepared");
    }

    /// The write of `bno` is durable: satisfied dependencies retire (their state reaches
    /// COMPLETE or DEPCOMPLETE) and the work they held back goes on the work list. Returns true
    /// if the copy was rolled back (the buffer stays dirty).
    pub fn after_write(&mut self, bno: u64) -> bool {
        // Each write completes once, after its before_write (a write that failed never comes here).
        let inf = self.inflight.remove(&bno).unwrap_or_else(|| panic!("block {bno} written without its before_write"));
        // A group header: the new inodes and blocks its copy carried are now allocated on disk.
        if let Some((inos, blks)) = inf.bmsafe {
            self.bitmaps_written(bno, inos, blks);
        }
        // An initialized inode block's zeros (a write prepared after its initialization).
        if let Some(pending) = self.inits.get_mut(&self.sb.cg_of_block(bno)) {
            if pending.get(&bno).is_some_and(|&e| e < inf.epoch) {
                pending.remove(&bno);
                if pending.is_empty() {
                    self.inits.remove(&self.sb.cg_of_block(bno));
                }
            }
        }
        // A new block's first contents.
        if let Some(made) = inf.first_contents {
            if let Some(n) = self.newblks.get_mut(&bno).filter(|n| n.epoch == made) {
                n.wk.state |= DepState::COMPLETE;
            }
        }
        for (ino, seq, b) in inf.direct_done {
            let (mut done, mut named) = (None, false);
            if let Some(d) = self.inodedeps.get_mut(&ino) {
                done = match d.inoupdt.iter().position(|a| a.seq == seq) {
                    Some(i) => Some(d.inoupdt.swap_remove(i)),
                    None => d.newinoupdt.iter().position(|a| a.seq == seq).map(|i| d.newinoupdt.swap_remove(i)),
                };
                // A later change extending the run in place still waits for its new fragments.
                named = d.allocdirects().any(|a| a.bno == b);
            }
            if !named {
                self.newblks.remove(&b);
            }
            // The inode on disk names the new run: the old one goes (freefrag).
            if let Some(f) = done.and_then(|a| a.freefrag) {
                self.freefrag_now(f);
            }
        }
        for &ino in &inf.inodes_written {
            self.inode_written(ino, inf.epoch);
        }
        if !inf.indir_done.is_empty() {
            self.indir_written(bno, &inf.indir_done);
        }
        if let Some(pd) = self.pagedeps.remove(&bno) {
            // Removals carried by a copy of a block the disk's inode did not name are not on
            // disk: none of them completes (the buffer stayed dirty for them).
            let removals_before = if inf.unreachable { 0 } else { inf.epoch };
            self.entries_written(bno, pd, inf.diradds_done, removals_before);
        }
        // The records this write left with nothing to track go now (FreeBSD frees an inodedep
        // once its inode block's write completes it): the table keeps only live records, and
        // the next write of the block looks at those alone.
        for ino in inf.inodes_written {
            if self.inodedeps.get(&ino).is_some_and(InodeDep::removable) {
                self.inodedeps.remove(&ino);
            }
        }
        // Records left idle by other ways were noted when they changed and go at the next
        // count (`InodeTable::recount`; the operations' `balance` counts at least every 4,096).
        self.writes_seen += 1;
        inf.rolled_back
    }

    /// A group header's copy while some of its initialized inode blocks are not on disk: it
    /// counts only the `durable` inodes before the first of them, and the inodes allocated past
    /// that go out free (their bits clear, the counts with them) and stay waiting in the
    /// bmsafemap, so that no header on disk claims an inode block the disk does not hold zeroed:
    /// `cg_initediblk` back to `durable`, the inodes past it free in `cg_inosused` and in
    /// `cg_cs` (the copy stays a consistent group, its check hash resealed as it goes to disk).
    /// Patches of the header and the inode map, not a copy of the block.
    fn roll_back_inits(&self, cg: u32, durable: u32, copy: &mut Outgoing, inf: &mut Inflight) {
        let first = cg * self.sb.inodes_per_group;
        let is_dir = |idx| self.inodedeps.get(&(first + idx)).is_some_and(|d| d.is_dir);
        let fs = self.sb.ufs2();
        let mut hdr = copy.read(ufs2::Cg::HEADER).into_owned();
        let map = copy.edit(ufs2::Cg::inode_map_range(&hdr, fs));
        ufs2::Cg::roll_back_inode_map(&mut hdr, map, fs, cg, durable, is_dir);
        copy.edit(ufs2::Cg::HEADER).copy_from_slice(&hdr);
        if let Some((inos, _)) = inf.bmsafe.as_mut() {
            inos.retain(|&i| i % self.sb.inodes_per_group < durable);
        }
        inf.rolled_back = true;
    }

    /// An inode block's copy (FreeBSD's initiate_write_inodeblock): a dinode not yet allocated
    /// on disk goes out free, and each new block pointer whose block is not ready is rolled back
    /// (`roll_back_pointers`).
    fn roll_back_inodes(&self, bno: u64, copy: &mut Outgoing, inf: &mut Inflight) {
        let cg = self.sb.cg_of_block(bno);
        let ipb = self.sb.inodes_per_block();
        let nth = (bno - self.sb.cg_itable_block(cg)) / self.sb.frag();
        let first = cg * self.sb.inodes_per_group + nth as u32 * ipb;
        for ino in first..first + ipb {
            let Some(id) = self.inodedeps.get(&ino) else { continue };
            let off = (ino - first) as usize * DINODE_SIZE;
            let at = off..off + DINODE_SIZE;
            let raw = copy.read(at.clone());
            if !id.bitmap_done() {
                // Not allocated on disk yet: the dinode goes out as a free one.
                drop(raw);
                copy.edit(at).fill(0);
                inf.rolled_back = true;
                continue;
            }
            let mut d: Option<Dinode> = None;
            let rolled = inf.rolled_back;
            inf.rolled_back = false;
            // The extended-attribute area goes as a whole: new, once all its blocks are ready,
            // else the area the disk holds.
            let ext_ready = id.allocdirects().all(|a| !matches!(a.slot, PtrSlot::Ext(_)) || self.allocdirect_ready(a));
            if !ext_ready {
                let (size, extb) = id.ext_old.expect("a pending attribute area records the one on disk");
                let dd = d.get_or_insert_with(|| self.sb.decode_dinode(&raw));
                (dd.extsize, dd.extb) = (size, extb);
                inf.rolled_back = true;
            }
            if ext_ready {
                let ext = id.allocdirects().filter(|a| matches!(a.slot, PtrSlot::Ext(_)));
                inf.direct_done.extend(ext.map(|a| (ino, a.seq, a.bno)));
            }
            if id.allocdirects().any(|a| !matches!(a.slot, PtrSlot::Ext(_))) {
                let dd = d.get_or_insert_with(|| self.sb.decode_dinode(&raw));
                self.roll_back_pointers(ino, id, dd, inf);
            }
            // Written back only if something was rolled back: the buffer's bytes are the copy's.
            drop(raw);
            if let Some(dd) = d.filter(|_| inf.rolled_back) {
                self.sb.encode_dinode(&dd, copy.edit(at));
            }
            inf.rolled_back |= rolled;
            inf.inodes_written.push(ino);
        }
    }

    /// One dinode's direct and indirect pointers (initiate_write_inodeblock_ufs2): each whose
    /// new run is not ready goes back to the old run (0 for a new pointer; a directory's size
    /// then stops before it, and every later pointer is cleared). At the first direct block
    /// rolled back to a fragment, the size goes back to that fragment's end and every later
    /// pointer is cleared: the inode on disk never claims more than the last fragment written,
    /// nor a fragment that is not its last block. On UFS2, a file whose last blocks were rolled
    /// back to nothing ends at the last block it holds. The pointers the copy carries are
    /// noted, to retire with the write.
    fn roll_back_pointers(&self, ino: u32, id: &InodeDep, dd: &mut Dinode, inf: &mut Inflight) {
        let bs = self.sb.block_size;
        let order = |a: &AllocDirect| match a.slot {
            PtrSlot::Direct(i) => i,
            PtrSlot::Indirect(l) => NDADDR + l,
            PtrSlot::Ext(_) => unreachable!("the attribute area is rolled back as a whole"),
        };
        // In FreeBSD's order (direct blocks by offset, then indirect ones); the changes in the
        // buffer before those only in memory.
        let mut ads: Vec<(&AllocDirect, bool)> = id.inoupdt.iter().map(|a| (a, true)).collect();
        ads.extend(id.newinoupdt.iter().map(|a| (a, false)));
        ads.retain(|(a, _)| !matches!(a.slot, PtrSlot::Ext(_)));
        ads.sort_by_key(|(a, _)| order(a));
        let (mut cut, mut last_undone) = (None, None);
        for &(a, buffered) in &ads {
            if !buffered && a.old_bno != 0 {
                // A change of a run not yet in the buffer: the copy holds what came before.
                continue;
            }
            let held = match a.slot {
                PtrSlot::Direct(i) => dd.db[i] == a.bno,
                PtrSlot::Indirect(l) => dd.ib[l] == a.bno,
                PtrSlot::Ext(_) => unreachable!(),
            };
            if self.allocdirect_ready(a) {
                // Carried, so retired with this write, only if this copy holds it (a moved
                // run's freefrag goes with it). A ready pointer the copy does not hold yet (a
                // change still only in memory) waits for the write that carries it: until then
                // it is not on disk, and a cut before it must still find it pending.
                if held {
                    inf.direct_done.push((ino, a.seq, a.bno));
                }
                continue;
            }
            if !held {
                continue;
            }
            inf.rolled_back = true;
            match a.slot {
                PtrSlot::Direct(i) => {
                    dd.db[i] = a.old_bno;
                    last_undone = Some(i);
                }
                PtrSlot::Indirect(l) => dd.ib[l] = a.old_bno,
                PtrSlot::Ext(_) => unreachable!(),
            }
            if a.old_bno == 0 && id.is_dir {
                // A directory ends before a new block not yet written (it has no holes), and
                // every pointer past it is newer: none goes to disk with this copy, or a ready
                // indirect block would lie past the size (fsck's BAD INODE).
                dd.size = dd.size.min(a.lbn * bs as u64);
                cut = Some(order(a));
                break;
            }
            if let PtrSlot::Direct(i) = a.slot {
                if a.old_is_fragment(bs) {
                    dd.size = dd.size.min(i as u64 * bs as u64 + a.old_size as u64);
                    cut = Some(i);
                    break;
                }
            }
        }
        let pending = |s: PtrSlot| ads.iter().any(|(a, _)| a.slot == s);
        if let Some(k) = cut {
            // Every pointer past the cut (a fragment rolled back, or a directory's new block)
            // is new: none of them is on disk.
            for j in (k + 1).min(NDADDR)..NDADDR {
                assert!(
                    dd.db[j] == 0 || pending(PtrSlot::Direct(j)),
                    "inode {ino}: block {j} past a rolled-back block has no dependency"
                );
                dd.db[j] = 0;
            }
            for l in (k + 1).saturating_sub(NDADDR)..NIADDR {
                assert!(
                    dd.ib[l] == 0 || pending(PtrSlot::Indirect(l)),
                    "inode {ino}: indirect {l} past a rolled-back block has no dependency"
                );
                dd.ib[l] = 0;
            }
        } else if let Some(last) = last_undone.filter(|&l| dd.size <= (l as u64 + 1) * bs as u64) {
            // The last block was rolled back to nothing: the file ends at the last one it holds
            // (a full block, as no fragment was rolled back), so that no file on disk ends in a
            // hole (initiate_write_inodeblock_ufs2 does this with any fragment size).
            let held = (0..=last).rev().find(|&j| dd.db[j] != 0).map_or(0, |j| j as u64 + 1);
            dd.size = dd.size.min(held * bs as u64);
        }
    }

    /// An indirect block's copy (initiate_write_indirdep): each new pointer whose block is not
    /// ready is cleared, and the copy kept as the block's safe copy.
    fn roll_back_indir(&mut self, bno: u64, copy: &mut Outgoing, inf: &mut Inflight) {
        let id = &self.indirdeps[&bno];
        let mut rolled = false;
        for a in id.allocindirs.values() {
            let at = 8 * a.idx..8 * a.idx + 8;
            if self.newblk_ready(a.bno) {
                inf.indir_done.push(a.bno);
            } else if ind_get(&copy.read(at.clone()), 0) == a.bno {
                ind_set(copy.edit(at), 0, 0);
                rolled = true;
            }
        }
        // The safe copy is the whole block: made here, and the write carries it.
        let safe = rolled.then(|| copy.whole().to_vec().into_boxed_slice());
        self.indirdeps.get_mut(&bno).expect("present").safe_copy = safe;
        inf.rolled_back |= rolled;
    }

    /// A directory block's copy (initiate_write_filepage): each new entry whose inode is not
    /// ready, or whose block is not yet reachable, goes back to what it named before; removals
    /// in a block not yet reachable keep the buffer dirty, to be written again once it is.
    fn roll_back_entries(&self, bno: u64, copy: &mut Outgoing, inf: &mut Inflight) {
        let pd = &self.pagedeps[&bno];
        // A new directory block is not reachable until the pointer to it is on disk: its
        // entries wait for that too (FreeBSD's newdirblk), or a rename's old name could go
        // while the new one is still unreachable. So do its removals: a moved run's old run,
        // which the disk's inode still names, holds the removed names.
        let reachable = self.dir_block_reachable(bno);
        inf.unreachable = !reachable;
        if !reachable && !pd.dirrems.is_empty() {
            inf.rolled_back = true;
        }
        for da in pd.diradds.in_order() {
            if reachable && da.ready() {
                inf.diradds_done.push((da.off, da.epoch));
            } else {
                // An entry's inode number and type: its first 8 bytes (d_ino, d_reclen, d_type,
                // d_namlen), the name untouched.
                let entry = copy.edit(da.off..da.off + 8);
                dirent_set_ino(entry, 0, da.old_ino);
                if da.wk.state.contains(DepState::DIRCHG) {
                    dirent_set_type(entry, 0, da.old_dtype);
                }
                inf.rolled_back = true;
            }
        }
    }

    /// A group header is on disk (handle_written_bmsafemap): the new inodes and blocks its copy
    /// carried are allocated on disk.
    fn bitmaps_written(&mut self, bno: u64, inos: Vec<u32>, blks: Vec<NewBlkRef>) {
        let cg = self.sb.cg_of_block(bno);
        for &i in &inos {
            if let Some(d) = self.inodedeps.get_mut(&i) {
                d.wk.state |= DepState::DEPCOMPLETE;
            }
        }
        for &(b, made) in &blks {
            // A run extended in place after the copy was made waits for its new bits.
            if let Some(n) = self.newblks.get_mut(&b).filter(|n| n.epoch == made) {
                n.wk.state |= DepState::DEPCOMPLETE;
            }
        }
        if let Some(m) = self.bmsafemap.get_mut(&cg) {
            let (inos, blks): (HashSet<u32>, HashSet<NewBlkRef>) =
                (inos.into_iter().collect(), blks.into_iter().collect());
            m.inodedeps.retain(|i| !inos.contains(i));
            m.newblks.retain(|b| !blks.contains(b));
            if m.inodedeps.is_empty() && m.newblks.is_empty() {
                self.bmsafemap.remove(&cg);
            }
        }
    }

    /// An indirect block is on disk (handle_written_indirdep): the pointers it carried, to
    /// blocks in `done`, retire.
    fn indir_written(&mut self, bno: u64, done: &[u64]) {
        if let Some(id) = self.indirdeps.get_mut(&bno) {
            let set: HashSet<u64> = done.iter().copied().collect();
            id.allocindirs.retain(|_, a| !set.contains(&a.bno));
            if id.allocindirs.is_empty() {
                self.indirdeps.remove(&bno);
            }
        }
        for b in done {
            self.newblks.remove(b);
        }
    }

    /// A directory block is on disk (handle_written_filepage): the entries it carried (`written`:
    /// offset and epoch) complete and their work goes on the work list, as does the work of the
    /// removals made before the copy (epoch older than `epoch`; 0 when the copy was of a block
    /// the disk's inode did not name: no removal is on disk).
    fn entries_written(&mut self, bno: u64, mut pd: PageDep, mut written: Vec<(usize, Epoch)>, epoch: Epoch) {
        written.sort_unstable();
        let done: Vec<DirAdd> = written
            .iter()
            .filter_map(|&(off, epoch)| match pd.diradds.get(&off) {
                Some(d) if d.epoch == epoch => pd.diradds.remove(&off),
                _ => None,
            })
            .collect();
        for mut da in done {
            da.wk.state |= DepState::COMPLETE;
            assert!(da.ready() && da.wk.state.contains(DepState::ALLCOMPLETE), "diradd written too early: {da:?}");
            self.forget_diradd(bno, &da);
            self.tasks.extend(da.on_complete);
        }
        let (done, keep): (Vec<DirRem>, Vec<DirRem>) =
            std::mem::take(&mut pd.dirrems).into_iter().partition(|r| r.epoch < epoch);
        pd.dirrems = keep;
        for r in done {
            self.tasks.extend(r.tasks);
        }
        if pd.diradds.is_empty() && pd.dirrems.is_empty() {
            self.block_dir.remove(&bno);
        } else {
            self.pagedeps.insert(bno, pd);
        }
    }

    /// The dinode of `ino`, as it was in memory, is on disk as of `epoch`: the entries and
    /// mkdir requirements pending on it complete, and its buf wait work goes on the work list.
    fn inode_written(&mut self, ino: u32, epoch: Epoch) {
        let Some(d) = self.inodedeps.get_mut(&ino) else { return };
        d.disk_epoch = d.disk_epoch.max(epoch);
        if !d.ext_pending() && d.ext_old.take().is_some() {
            // The new attribute area is on disk (its allocdirects retired with this write):
            // the old area's blocks are unreachable there.
            self.tasks.append(&mut d.extwait);
        }
        let (ready, waiting): (Vec<_>, Vec<_>) =
            std::mem::take(&mut d.bufwait).into_iter().partition(|(e, _)| *e < epoch);
        d.bufwait = waiting;
        let body_on_disk = !d.allocdirects().any(|a| a.lbn == 0);
        let mut keep = Vec::new();
        let mut done = Vec::new();
        let mut bodies = Vec::new();
        for op in std::mem::take(&mut d.pending) {
            let clear = match op {
                PendingOp::BodyParent { child, epoch: e } if e < epoch => {
                    bodies.push(child);
                    continue;
                }
                PendingOp::DirAdd(r) if r.epoch < epoch => DepState::DEPCOMPLETE,
                PendingOp::Mkdir(m) if m.wk.state == DepState::MKDIR_PARENT && m.diradd.epoch < epoch => {
                    DepState::MKDIR_PARENT
                }
                PendingOp::Mkdir(m) if m.wk.state == DepState::MKDIR_BODY && body_on_disk => DepState::MKDIR_BODY,
                _ => {
                    keep.push(op);
                    continue;
                }
            };
            done.push((op.diradd().expect("an entry's op"), clear));
        }
        d.pending = keep;
        for child in bodies {
            if let Some(c) = self.inodedeps.get_mut(&child) {
                for a in c.inoupdt.iter_mut().chain(c.newinoupdt.iter_mut()) {
                    if a.lbn == 0 && a.parent == Some(ino) {
                        a.parent = None;
                    }
                }
            }
        }
        for (_, t) in ready {
            self.put_on_work_list(t);
        }
        for (r, what) in done {
            let Some(da) = self
                .pagedeps
                .get_mut(&r.dirblk)
                .and_then(|pd| pd.diradds.get_mut(&r.off).filter(|da| da.epoch == r.epoch))
            else {
                continue;
            };
            if what == DepState::DEPCOMPLETE {
                da.wk.state |= DepState::DEPCOMPLETE;
            } else {
                da.wk.state.remove(what);
            }
        }
    }
}
