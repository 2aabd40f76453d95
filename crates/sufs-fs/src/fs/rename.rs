//! Rename, RENAME_EXCHANGE and RENAME_WHITEOUT, with rule 3 under soft updates: the old name
//! stays on disk, hidden (`hidden.rs`), until the new one is reachable there.

use super::hidden::Place;
use super::*;
use crate::fixed_hash::{HashSet, HashSetExt};

/// Renames between their call and the disk (rule 3): the old names still in their blocks, the
/// removals waiting for the new name's path to be reachable on disk, and the new entries that
/// wait for a namesake's removal.
/// What a rename does with the entry it replaces (`Fs::rename_victim`).
enum Replace {
    /// No entry had the new name.
    Nothing,
    /// This entry and its inode, checked: the new name takes its place.
    Victim(Slot, Box<Dinode>),
    /// The rename is done already (after an rmdir of the victim).
    Renamed,
}

pub(super) struct Renames {
    /// Old names of renames, still in their blocks (so on disk) until the new name is on disk,
    /// but gone for users: (block, offset) -> (directory, logical block, name).
    pub(super) hidden: HiddenNames,
    /// Renames' old-name removals whose new name is on disk but in a directory not yet
    /// reachable on disk (rule 3 for the whole path): retried after later writes complete.
    pub(super) deferred_old_names: Vec<Task>,
    /// The soft updates write count and hidden names removed when the deferred removals were
    /// last tried (only a write or another removal can let one go).
    pub(super) deferred_tried_at: (u64, u64),
    /// Hidden names removed so far.
    pub(super) hidden_removed: u64,
    /// New entries (not of directories) named like hidden names of their directory still on
    /// disk, waiting there for those to leave it (NAMESAKE), in sequence (`hidden.rs`).
    pub(super) namesakes: Namesakes,
    /// What walks up the tree found for the deferred removals (`paths.rs`).
    pub(super) paths: super::paths::PathMemo,
}

impl Renames {
    pub(super) fn new() -> Renames {
        Renames {
            hidden: HiddenNames::new(),
            deferred_old_names: Vec::new(),
            deferred_tried_at: (0, 0),
            hidden_removed: 0,
            namesakes: Namesakes::new(),
            paths: Default::default(),
        }
    }
}

impl Fs {
    /// Hides the entry `slot` of `dir` from users while it stays in its block (so on disk).
    /// It keeps a place in its namesakes' order until its removal is on disk (`Namesakes`).
    pub(super) fn hide_name(&mut self, dir: u32, slot: &Slot, name: &[u8]) {
        let seq = self.renames.namesakes.hidden(dir, name);
        self.note_namesake_records();
        let h = HiddenName { dir, lbn: slot.lbn, name: name.to_vec(), ino: slot.ino, seq };
        self.renames.hidden.insert((slot.bno, slot.off), h);
        if let Some(h) = self.dirhash.get_mut(&dir) {
            h.hide(name, slot.lbn, slot.off);
        }
    }

    /// With soft updates a rename's old name stays in its block, hidden, until the new name is
    /// reachable on disk. A new entry of the same name in that directory may land after it, and
    /// a lookup after a crash would find the old entry first: the new name would be lost behind
    /// it. A new entry of a file waits on disk for the hidden one's removal
    /// (`wait_for_namesake`); a directory's cannot (what is later moved under it would wait
    /// for its path, and the hidden name's removal may wait for that), so before a directory
    /// takes such a name, the hidden one leaves the disk here: the renamed inode's names are
    /// written as fsync writes them, which lets its removal run, and the removal's block is
    /// written. If something else holds it (a removed directory whose name waits for the hidden
    /// names it holds), everything is written. Call it before reading the inodes the operation
    /// changes.
    pub(super) fn retire_hidden_name(&mut self, dir: u32, name: &[u8]) -> FsResult<()> {
        let find = |fs: &Fs| fs.renames.hidden.named(dir, name).next().map(|(k, _)| k);
        while let Some(key) = find(self) {
            log::debug!(
                "new name {:?} in directory {dir}: its hidden namesake goes first",
                String::from_utf8_lossy(name)
            );
            self.retire_hidden(key)?;
        }
        Ok(())
    }

    /// The hidden entry at `key` (block, offset) leaves the disk now: the names of the inode it
    /// names are written as fsync writes them (which lets its removal run), then the removal's
    /// block; everything, if that is not enough.
    pub(super) fn retire_hidden(&mut self, key: (u64, usize)) -> FsResult<()> {
        let Some(ino) = self.renames.hidden.get(&key).map(|h| h.ino) else {
            return Ok(());
        };
        match self.fsync(ino) {
            // The removals fsync let run freed the inode (a removed directory whose hidden
            // name waited for the names it held): its name is gone, as wanted.
            Err(FsError::Stale(_)) if !self.renames.hidden.contains(&key) => {}
            r => r?,
        }
        self.run_tasks()?;
        if self.renames.hidden.contains(&key) {
            self.sync_all()?;
            if self.renames.hidden.contains(&key) {
                return Err(FsError::Corrupt(format!("a hidden name at {key:?} outlived a full sync")));
            }
            return Ok(());
        }
        self.write_bufs(&[key.0], WriteKind::Sync)
    }

    /// The old names of the directories `of` still on disk: hidden ones (their places), and the
    /// blocks whose removals of such names are not written yet.
    fn old_names_of(&self, of: &HashSet<u32>) -> (Vec<Place>, Vec<u64>) {
        let hidden = self.renames.hidden.iter().filter(|(_, h)| of.contains(&h.ino)).map(|(k, _)| k).collect();
        let mut blocks = Vec::new();
        for (b, ino) in self.hooks.softdep.as_ref().map(|s| s.removals_on_disk()).unwrap_or_default() {
            if of.contains(&ino) && !blocks.contains(&b) {
                blocks.push(b);
            }
        }
        (hidden, blocks)
    }

    /// Before a directory moves into `newdir` under soft updates, the old names still on disk
    /// of `newdir` and of its ancestors leave it: hidden ones as `retire_hidden` retires them,
    /// removed ones by writing their blocks. Otherwise the move may close a loop of names on
    /// disk: the moved directory's tree may hold such an old name (as of the tree's earlier
    /// place), and the new name leads back into it. The root reaches that loop by other names,
    /// but fsck_ffs's pass 2 keeps the first name it meets of each directory (in disk block
    /// order) and removes the others, and may keep the loop's: its directories are cut off
    /// from the root.
    ///
    /// Enough: the names on disk, and the old ones still there, form no loop before the move.
    /// A path on disk from the moved directory back to `newdir` would end with an old name of
    /// `newdir` or of an ancestor of it (then the current names lead down to `newdir`), and
    /// there is none; or it is all current names, and `newdir` would be inside the moved
    /// directory, which rename refuses. Answers whether there was anything to retire.
    pub(super) fn retire_old_names_above(&mut self, newdirs: &[u32]) -> FsResult<bool> {
        let mut above = HashSet::new();
        for &d in newdirs {
            self.ancestors(Some(d), &mut above)?;
        }
        let (hidden, blocks) = self.old_names_of(&above);
        if hidden.is_empty() && blocks.is_empty() {
            return Ok(false);
        }
        log::debug!("a directory moves into {newdirs:?}: their old names leave the disk first");
        for key in hidden {
            self.retire_hidden(key)?;
        }
        // Retiring may have run more removals.
        let (_, blocks) = self.old_names_of(&above);
        self.write_bufs(&blocks, WriteKind::Sync)?;
        self.run_tasks()?;
        let mut left = self.old_names_of(&above);
        if !left.0.is_empty() || !left.1.is_empty() {
            // A removal in a run the disk's inode does not name yet (new, extended or moved)
            // completes only with a write made once that inode is on disk: everything goes.
            self.sync_all()?;
            left = self.old_names_of(&above);
        }
        let (hidden, blocks) = left;
        if !hidden.is_empty() || !blocks.is_empty() {
            return Err(FsError::Corrupt(format!(
                "old names of directories outlived their retirement: hidden at {hidden:?}, removed in {blocks:?}"
            )));
        }
        Ok(true)
    }

    /// The new entry at `off` of directory block `bno`, naming file `ino`, waits on disk until
    /// the hidden entries of the same name in `dir` still on disk now have left it, if there
    /// are any (see `retire_hidden_name`; `Namesakes` keeps the order, `Task::NamesakeGone`
    /// releases it).
    pub(super) fn wait_for_namesake(&mut self, dir: u32, name: &[u8], bno: u64, off: usize, ino: u32) {
        if self.hooks.softdep.is_none() {
            return;
        }
        self.incore.set_name_dir(ino, dir);
        if self.renames.namesakes.wait(dir, name, (bno, off), ino) {
            self.note_namesake_records();
            if let Some(sd) = self.sd() {
                sd.wait_for_namesake(bno, off);
            }
        }
    }

    /// The hidden name `seq` of `name` in `dir` has left the disk (its removal was written, or
    /// never needed to be) or names its inode again: the entries that waited for it and for no
    /// other may be written now.
    pub(super) fn namesake_gone(&mut self, dir: u32, name: &[u8], seq: u64) -> FsResult<()> {
        let released = self.renames.namesakes.gone(dir, name, seq);
        self.note_namesake_records();
        for (bno, off) in released {
            if self.sd().is_some_and(|sd| sd.namesake_gone(bno, off)) {
                // Its block may be clean (the entry rolled back): it must be written again.
                self.cache.modify(bno)?;
            }
        }
        Ok(())
    }

    /// Soft updates' memory bound counts the namesake records too (`Namesakes::len`).
    fn note_namesake_records(&mut self) {
        let n = self.renames.namesakes.len();
        if let Some(sd) = self.sd() {
            sd.outside_records = n;
        }
    }

    pub fn rename(&mut self, dir: u32, name: &[u8], newdir: u32, newname: &[u8], flags: RenameFlags) -> FsResult<()> {
        // A rename decides by what is on disk (hidden names, a rename undone before it got
        // there, whether an entry has reached the disk): a write in flight that carries a block
        // it looks at lands first.
        if self.has_flight() && self.rename_meets_flight(dir, name, newdir, newname) {
            self.land_flight()?;
        }
        self.check_rename_entries(dir, newdir, newname, flags.exchange)?;
        self.retry_nospace(|fs| fs.rename_once(dir, name, newdir, newname, flags))
    }

    /// True if a rename of `name` in `dir` to `newname` in `newdir` would land the flight in
    /// the air (`rename`): a caller sharing the file system waits for that flight's write
    /// without the lock first (`lock_landing_if`).
    pub fn rename_lands_flight(&mut self, dir: u32, name: &[u8], newdir: u32, newname: &[u8]) -> bool {
        self.has_flight() && self.rename_meets_flight(dir, name, newdir, newname)
    }

    /// True if the flight in progress carries a block a rename looks at: the inode blocks of
    /// both directories, of the source and of what it replaces, and the blocks of every
    /// directory among them (their entries, hidden names and ".."). A directory too large to
    /// look through, or a lookup that fails, counts as true: the flight lands.
    fn rename_meets_flight(&mut self, dir: u32, name: &[u8], newdir: u32, newname: &[u8]) -> bool {
        const LOOK_THROUGH: u64 = 64;
        let mut blocks = Vec::new();
        let mut look = |fs: &mut Fs| -> FsResult<bool> {
            let mut inos = vec![dir, newdir];
            for (d, n) in [(dir, name), (newdir, newname)] {
                let mut di = fs.dir_inode(d)?;
                inos.extend(fs.find_entry(d, &mut di, n)?.map(|s| s.ino));
            }
            for x in inos {
                blocks.push(fs.sb.inode_location(x).0);
                let d = fs.iget(x)?;
                if d.is_dir() {
                    if d.size / fs.sb.block_size as u64 > LOOK_THROUGH {
                        return Ok(true);
                    }
                    let mut levels: [Vec<u64>; NIADDR] = Default::default();
                    fs.file_blocks(&d, &mut blocks, &mut levels)?;
                    blocks.extend(levels.into_iter().flatten());
                }
            }
            Ok(false)
        };
        let meets = look(self).unwrap_or(true);
        meets || blocks.iter().any(|&b| self.cache.in_flight(b))
    }

    pub(super) fn rename_once(
        &mut self,
        dir: u32,
        name: &[u8],
        newdir: u32,
        newname: &[u8],
        flags: RenameFlags,
    ) -> FsResult<()> {
        self.check_writable()?;
        Self::check_name(newname)?;
        if flags.noreplace && flags.exchange {
            return Err(FsError::Invalid("RENAME_NOREPLACE with RENAME_EXCHANGE"));
        }
        if name == b"." || name == b".." || newname == b"." || newname == b".." {
            return Err(FsError::Invalid("rename of . or .."));
        }
        let mut sd = self.dir_inode(dir)?;
        let src = self.find_entry(dir, &mut sd, name)?.ok_or(FsError::NotFound)?;
        let si = self.iget(src.ino)?;
        if !flags.exchange && !si.is_dir() && si.flags & DI_KEEP_NAMES == 0 {
            if let Some((key, old)) = self.undone_rename(newdir, newname, &src)? {
                return self.rename_back(dir, name, src, si, newdir, key, old);
            }
        }
        let namesake = |fs: &Fs, d: u32, n: &[u8]| fs.renames.hidden.named(d, n).next().is_some();
        if (si.is_dir() || flags.exchange) && namesake(self, newdir, newname) {
            // A directory taking a hidden name: that name leaves the disk first. So in an
            // exchange, where either entry may come to name a directory in place.
            self.retire_hidden_name(newdir, newname)?;
            return self.rename(dir, name, newdir, newname, flags);
        }
        if flags.exchange && namesake(self, dir, name) {
            self.retire_hidden_name(dir, name)?;
            return self.rename(dir, name, newdir, newname, flags);
        }
        let mut nd = self.dir_inode(newdir)?;
        let dst = self.find_entry(newdir, &mut nd, newname)?;
        if si.flags & DI_KEEP_NAMES != 0 {
            return Err(FsError::Perm);
        }
        if self.hooks.softdep.is_some() && dir != newdir {
            // A directory changing parent (either of an exchange): no old name of its new
            // parent or of an ancestor of that may be on disk (`retire_old_names_above`).
            let dst_dir = match (flags.exchange, dst) {
                (true, Some(t)) => self.iget(t.ino)?.is_dir(),
                _ => false,
            };
            let into: Vec<u32> = [(si.is_dir(), newdir), (dst_dir, dir)].iter().filter(|m| m.0).map(|m| m.1).collect();
            if !into.is_empty() && self.retire_old_names_above(&into)? {
                return self.rename(dir, name, newdir, newname, flags);
            }
        }
        if flags.exchange {
            let dst = dst.ok_or(FsError::NotFound)?;
            return self.exchange(dir, src, newdir, dst);
        }
        if let Some(t) = dst {
            if flags.noreplace {
                return Err(FsError::Exists);
            }
            if t.ino == src.ino {
                return Ok(()); // two names of one inode: POSIX says do nothing
            }
        }
        let moving_dir = si.is_dir();
        if moving_dir && dir != newdir && self.is_ancestor(src.ino, newdir)? {
            return Err(FsError::Invalid("rename of a directory into itself"));
        }
        let victim = match self.rename_victim(dst, &si, (dir, name), (newdir, newname, &nd), flags)? {
            Replace::Nothing => None,
            Replace::Victim(t, ti) => Some((t, *ti)),
            Replace::Renamed => return Ok(()),
        };
        if moving_dir && dir != newdir && nd.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        self.rename_commit((dir, name, src, si), (newdir, newname), victim)
    }

    /// The entry a rename replaces (`dst`), checked: a directory over a non-empty one, a file
    /// over a directory and such are refused. A directory replacing one that still holds hidden
    /// names is renamed here, after an rmdir of the victim (`Replace::Renamed`).
    fn rename_victim(
        &mut self,
        dst: Option<Slot>,
        si: &Dinode,
        (dir, name): (u32, &[u8]),
        (newdir, newname, nd): (u32, &[u8], &Dinode),
        flags: RenameFlags,
    ) -> FsResult<Replace> {
        let moving_dir = si.is_dir();
        let Some(t) = dst else { return Ok(Replace::Nothing) };
        {
            let mut ti = self.iget(t.ino)?;
            if ti.flags & DI_KEEP_NAMES != 0 {
                return Err(FsError::Perm);
            }
            if moving_dir && ti.is_dir() && self.renames.hidden.in_dir(t.ino) {
                // The directory replaced still holds renames' old names on disk: its name cannot
                // be overwritten in place before those go. It is removed as by rmdir (its name
                // stays on disk, hidden, until then) and the source takes a new entry once that
                // hidden namesake has left the disk (retire_hidden_name); the checks that could
                // fail that come first, so a failed rename removes nothing.
                if (dir != newdir && nd.nlink >= LINK_MAX) || si.nlink >= LINK_MAX {
                    return Err(FsError::TooManyLinks);
                }
                if self.alloc.free_blocks() == 0 {
                    return Err(FsError::NoSpace);
                }
                self.rmdir(newdir, newname)?;
                self.rename(dir, name, newdir, newname, flags)?;
                return Ok(Replace::Renamed);
            }
            match (moving_dir, ti.is_dir()) {
                (true, false) => return Err(FsError::NotDir),
                (false, true) => return Err(FsError::IsDir),
                (true, true) if !self.dir_is_empty(t.ino, &mut ti)? => {
                    return Err(FsError::NotEmpty);
                }
                _ => {}
            }
            Ok(Replace::Victim(t, Box::new(ti)))
        }
    }

    /// Steps 1-5 of a rename whose checks passed: the source's count up, a moved directory's new
    /// parent's, the new name (over `victim`, if any), the old name hidden or removed, a moved
    /// directory's "..".
    // Long: the five steps of FFS's rename order, numbered, in the order their writes must go.
    fn rename_commit(
        &mut self,
        (dir, name, src, si): (u32, &[u8], Slot, Dinode),
        (newdir, newname): (u32, &[u8]),
        victim: Option<(Slot, Dinode)>,
    ) -> FsResult<()> {
        let moving_dir = si.is_dir();
        // 1. The source's count goes up while it has two names.
        let mut si = si;
        if si.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        si.nlink += 1;
        self.touch_c(&mut si);
        let ib = self.iput_links(src.ino, &si)?;
        self.order_write(&[ib])?;
        // 2. A moved directory's new parent gains a link before ".." names it. Over a directory
        //    victim too: the victim's ".." names newdir until the victim is freed (step 7), so for
        //    a while both count; step 7 takes the extra link back.
        if moving_dir && dir != newdir {
            let mut nd2 = self.iget(newdir)?;
            nd2.nlink += 1;
            let b = self.iput_links(newdir, &nd2)?;
            self.order_write(&[b])?;
        }
        // 3. The new name; a replaced inode loses its link once the new name is on disk. With
        // soft updates the old name stays in its block, hidden, until then (step 4).
        let across = moving_dir && dir != newdir;
        let softdep = self.hooks.softdep.is_some();
        let old_name_task = softdep.then(|| Task::RemoveOldName {
            dir,
            wait: NameWait::NewPath(newdir),
            bno: src.bno,
            lbn: src.lbn,
            off: src.off,
            tasks: vec![Task::DropLink(src.ino)],
        });
        match victim {
            Some((t, ti)) => self.rename_over(newdir, src.ino, &si, (t, ti), old_name_task)?,
            None => {
                let mut nd2 = self.iget(newdir)?;
                match self.add_entry(newdir, &mut nd2, newname, src.ino, dtype_of_mode(si.mode)) {
                    Ok((b, off)) => {
                        let tasks = match old_name_task {
                            Some(t) if dir == newdir => vec![self.old_name_moved(t)?],
                            t => t.into_iter().collect(),
                        };
                        self.entry_added(newdir, b, off, src.ino, None, None, false, tasks)?;
                        if !moving_dir {
                            self.wait_for_namesake(newdir, newname, b, off, src.ino);
                        }
                    }
                    Err(e) => {
                        si.nlink -= 1;
                        self.iput_links(src.ino, &si)?;
                        if across {
                            let mut nd3 = self.iget(newdir)?;
                            nd3.nlink -= 1;
                            self.iput_links(newdir, &nd3)?;
                        }
                        return Err(e);
                    }
                }
            }
        }
        // 4. The old name goes (found again: the new entry may share its block); the source's
        // temporary count drops once that is on disk.
        let mut sd = self.iget(dir)?;
        let old =
            self.find_entry(dir, &mut sd, name)?.ok_or_else(|| FsError::Corrupt("renamed entry vanished".into()))?;
        self.touch_mc(&mut sd);
        self.iput(dir, &sd)?;
        if softdep {
            // Rule 3: the old name leaves the disk only after the new one is there; for users
            // it is gone now.
            self.hide_name(dir, &old, name);
            self.note_pending(&[Task::DropLink(src.ino)]);
        } else {
            self.unlink_name(dir, &old, name, vec![Task::DropLink(src.ino)])?;
        }
        // 5. A moved directory's ".." names its new parent; the old parent (the directory ".."
        // named, which a crash in an earlier rename may have left elsewhere than `dir`) loses a
        // link once that is on disk.
        if across {
            let (b, off, was) = self.set_dotdot(src.ino, newdir)?;
            self.entry_added(src.ino, b, off, newdir, Some((was, DT_DIR)), None, false, vec![Task::DropLink(was)])?;
        }
        self.balance()
    }

    /// The old name's removal `t`, made before the new entry was added to the same directory,
    /// at the old name's block as it is now: the new entry may have grown the directory past
    /// its last fragments, which then moved to a run with room (`grow_run`), the old name with
    /// them.
    fn old_name_moved(&mut self, t: Task) -> FsResult<Task> {
        let Task::RemoveOldName { dir, wait, bno, lbn, off, tasks } = t else {
            unreachable!("old_name_moved is given a rename's old-name removal");
        };
        let mut d = self.iget(dir)?;
        let (now, _) = self.bmap(dir, &mut d, lbn, false)?;
        assert!(now != 0, "directory {dir} block {lbn} holding a renamed name is allocated");
        if now != bno {
            log::debug!("directory {dir} block {lbn} moved from {bno} to {now} under a rename's old name");
        }
        Ok(Task::RemoveOldName { dir, wait, bno: now, lbn, off, tasks })
    }

    /// Step 3 of a rename over an existing entry `t` (inode `ti`): the entry names the source
    /// now; the replaced inode loses its link once that is on disk, and the old name's removal
    /// (`old_name_task`, under soft updates) waits for it too.
    fn rename_over(
        &mut self,
        newdir: u32,
        ino: u32,
        si: &Dinode,
        (t, mut ti): (Slot, Dinode),
        old_name_task: Option<Task>,
    ) -> FsResult<()> {
        // The replaced inode changes now, whenever its link drop reaches the disk.
        self.touch_c(&mut ti);
        self.iput(t.ino, &ti)?;
        let victim_task = if ti.is_dir() {
            // Its ".." names newdir until it is freed; step 2 counted a moved
            // directory's new "..", so newdir's extra link goes once the victim does (the
            // directory ".." names, if a crash left it elsewhere).
            self.dir_name_gone_task(t.ino, &mut ti.clone(), newdir)?
        } else {
            Task::DropLink(t.ino)
        };
        let buf = self.cache.modify(t.bno)?;
        dirent_set_ino(buf, t.off, ino);
        dirent_set_type(buf, t.off, dtype_of_mode(si.mode));
        let mut nd2 = self.iget(newdir)?;
        self.touch_mc(&mut nd2);
        self.iput(newdir, &nd2)?;
        let old = Some((t.ino, dtype_of_mode(ti.mode)));
        let tasks = std::iter::once(victim_task).chain(old_name_task).collect();
        self.entry_added(newdir, t.bno, t.off, ino, old, None, false, tasks)?;
        self.note_name_dir(newdir, ino, si);
        // A wait of the replaced entry for its hidden namesakes is now the source's.
        self.renames.namesakes.set_ino((t.bno, t.off), ino);
        Ok(())
    }

    /// With soft updates, a rename that undoes an earlier one before either reached the disk
    /// (`a` to `b`, then `b` back to `a`, as fstests' readdir-while-renames does): `newname` is
    /// a hidden old name of the same inode whose removal still waits on the entry `src`, not yet
    /// on disk. Returns that hidden entry's place and its removal, taken out of `src`'s work.
    pub(super) fn undone_rename(
        &mut self,
        newdir: u32,
        newname: &[u8],
        src: &Slot,
    ) -> FsResult<Option<((u64, usize), Task)>> {
        if self.hooks.softdep.is_none() {
            return Ok(None);
        }
        let found = self.renames.hidden.named(newdir, newname).find(|(_, h)| h.ino == src.ino);
        let Some((key, h)) = found else { return Ok(None) };
        if self.renames.namesakes.waited_for(newdir, newname, h.seq) {
            return Ok(None);
        }
        let mut nd = self.dir_inode(newdir)?;
        if self.find_entry(newdir, &mut nd, newname)?.is_some() {
            return Ok(None);
        }
        let pick = |t: &Task| matches!(t, Task::RemoveOldName { bno, off, .. } if (*bno, *off) == key);
        let old = self.sd().and_then(|sd| sd.take_on_complete(src.bno, src.off, pick));
        Ok(old.map(|t| (key, t)))
    }

    /// Undoes a rename (see `undone_rename`): the hidden old entry at `key`, still in its
    /// place in its block, names the inode again, and the entry `src` goes as if never made. A
    /// reader of the directory finds the entry where it was; neither rename costs a write.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rename_back(
        &mut self,
        dir: u32,
        name: &[u8],
        src: Slot,
        mut si: Dinode,
        newdir: u32,
        key: (u64, usize),
        old: Task,
    ) -> FsResult<()> {
        let Task::RemoveOldName { tasks, .. } = old else {
            unreachable!("undone_rename picks a RemoveOldName");
        };
        let h = self
            .renames
            .hidden
            .remove(&key)
            .ok_or_else(|| FsError::Corrupt(format!("hidden name at {key:?} vanished")))?;
        assert_eq!((h.dir, h.ino), (newdir, src.ino), "an undone rename revives its own old name");
        self.renames.hidden_removed += 1;
        // Live again, it is no namesake to wait for (none waits for it: `undone_rename`).
        self.namesake_gone(h.dir, &h.name, h.seq)?;
        if let Some(dh) = self.dirhash.get_mut(&newdir) {
            dh.unhide(&h.name, h.lbn, key.1);
        }
        log::trace!("rename of {} back to {:?} in {newdir}: old entry at {key:?} revived", src.ino, h.name);
        // The old name's link drop now follows the removal of `src` (unlink_name notes it).
        if let Some(sd) = self.sd() {
            sd.take_pending_unlink(src.ino);
        }
        for p in if dir == newdir { vec![dir] } else { vec![dir, newdir] } {
            let mut d = self.iget(p)?;
            self.touch_mc(&mut d);
            self.iput(p, &d)?;
        }
        self.touch_c(&mut si);
        self.iput(src.ino, &si)?;
        self.unlink_name(dir, &src, name, tasks)?;
        self.note_name_dir(newdir, src.ino, &si);
        self.balance()
    }

    /// RENAME_EXCHANGE: the two names swap inodes.
    pub(super) fn exchange(&mut self, dir: u32, a: Slot, newdir: u32, b: Slot) -> FsResult<()> {
        if a.ino == b.ino {
            return Ok(());
        }
        let ai = self.iget(a.ino)?;
        let bi = self.iget(b.ino)?;
        if bi.flags & DI_KEEP_NAMES != 0 {
            return Err(FsError::Perm);
        }
        if dir != newdir {
            if ai.is_dir() && self.is_ancestor(a.ino, newdir)? {
                return Err(FsError::Invalid("exchange would move a directory into itself"));
            }
            if bi.is_dir() && self.is_ancestor(b.ino, dir)? {
                return Err(FsError::Invalid("exchange would move a directory into itself"));
            }
        }
        // Each directory that changes parent is a move: its new parent gains a link first, for
        // the new "..". Two directories swapped across parents too: neither ".." waits for the
        // other, so for a while both may name one parent on disk.
        let moves: Vec<(u32, u32, u32)> = if dir == newdir {
            vec![]
        } else {
            [(ai.is_dir(), a.ino, dir, newdir), (bi.is_dir(), b.ino, newdir, dir)]
                .into_iter()
                .filter(|m| m.0)
                .map(|(_, ino, from, to)| (ino, from, to))
                .collect()
        };
        for &(_, _, to) in &moves {
            if self.iget(to)?.nlink >= LINK_MAX {
                return Err(FsError::TooManyLinks);
            }
        }
        // Both counts up while each inode may have two names on disk.
        for (ino, mut d) in [(a.ino, ai.clone()), (b.ino, bi.clone())] {
            d.nlink += 1;
            self.touch_c(&mut d);
            let ib = self.iput_links(ino, &d)?;
            self.order_write(&[ib])?;
        }
        for &(_, _, to) in &moves {
            let mut g = self.iget(to)?;
            g.nlink += 1;
            let gb = self.iput_links(to, &g)?;
            self.order_write(&[gb])?;
        }
        // Each entry now names the other inode; the inode it named loses its extra link once
        // that is on disk.
        for (slot, in_dir, ino, mode, was, was_mode) in
            [(a, dir, b.ino, bi.mode, a.ino, ai.mode), (b, newdir, a.ino, ai.mode, b.ino, bi.mode)]
        {
            let buf = self.cache.modify(slot.bno)?;
            dirent_set_ino(buf, slot.off, ino);
            dirent_set_type(buf, slot.off, dtype_of_mode(mode));
            let old = Some((was, dtype_of_mode(was_mode)));
            self.entry_added(in_dir, slot.bno, slot.off, ino, old, None, false, vec![Task::DropLink(was)])?;
        }
        // A moved directory's ".." follows, and its old parent (the directory ".." named) loses
        // the link once that is on disk.
        for (ino, _, to) in moves {
            let (x, off, was) = self.set_dotdot(ino, to)?;
            self.entry_added(ino, x, off, to, Some((was, DT_DIR)), None, false, vec![Task::DropLink(was)])?;
        }
        for p in [dir, newdir] {
            let mut d = self.iget(p)?;
            self.touch_mc(&mut d);
            self.iput(p, &d)?;
        }
        self.balance()
    }

    /// RENAME_WHITEOUT (overlayfs): `name` is renamed to `newname` as by `rename`, and a
    /// whiteout, a character device 0/0 owned by `owner` (uid, gid), takes its place in `dir`. It is
    /// the rename followed by a mknod, each ordered as on its own: under soft updates the
    /// whiteout's entry waits on disk for the removal of the old name, which waits for the new
    /// name (rule 3), so a crash may leave the file under its new name with no whiteout yet,
    /// never a whiteout beside the file's old name. What the whiteout needs (an inode, and a
    /// block for its entry beside one for the new name) is there before anything changes, so
    /// that a failed whiteout never leaves a plain rename behind.
    pub fn rename_whiteout(
        &mut self,
        dir: u32,
        name: &[u8],
        newdir: u32,
        newname: &[u8],
        noreplace: bool,
        owner: (u32, u32),
    ) -> FsResult<(u32, Dinode)> {
        self.check_writable()?;
        self.check_rename_entries(dir, newdir, newname, false)?;
        self.land_flight()?;
        let room = |fs: &Fs| fs.alloc.free_inodes() >= 1 && fs.alloc.free_blocks() >= 2;
        if !room(self) && self.frees_pending() {
            self.sync_all()?;
        }
        if !room(self) {
            return Err(FsError::NoSpace);
        }
        self.rename(dir, name, newdir, newname, RenameFlags { noreplace, exchange: false })?;
        self.mknod(dir, name, S_IFCHR as u32, owner.0, owner.1, 0)
    }
}
