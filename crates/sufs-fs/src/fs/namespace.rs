//! Namespace operations: lookup, create, mknod, mkdir, symlink, link, unlink, rmdir.

use super::flags::Entries;
use super::*;

impl Fs {
    pub fn lookup(&mut self, dir: u32, name: &[u8]) -> FsResult<(u32, Dinode)> {
        if name.len() > MAXNAMLEN {
            return Err(FsError::NameTooLong);
        }
        let mut d = self.dir_inode(dir)?;
        match self.find_entry(dir, &mut d, name)? {
            Some(s) => {
                let d = match self.iget(s.ino) {
                    Ok(d) if d.nlink > 0 => d,
                    Ok(_) => return Err(self.damaged(format!("directory {dir} names inode {} with no links", s.ino))),
                    Err(_) => return Err(self.damaged(format!("directory {dir} names free inode {}", s.ino))),
                };
                self.note_name_dir(dir, s.ino, &d);
                Ok((s.ino, self.eff(s.ino, d)))
            }
            None => Err(FsError::NotFound),
        }
    }

    /// Creates a non-directory node (regular file, fifo, device, socket) named `name` in `dir`.
    pub fn mknod(
        &mut self,
        dir: u32,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
    ) -> FsResult<(u32, Dinode)> {
        self.check_entries(dir, Entries::Add)?;
        self.retry_nospace(|fs| fs.mknod_once(dir, name, mode, uid, gid, rdev))
    }

    pub(super) fn mknod_once(
        &mut self,
        dir: u32,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
    ) -> FsResult<(u32, Dinode)> {
        let ftype = (mode as u16) & S_IFMT;
        let ftype = if ftype == 0 { S_IFREG } else { ftype };
        if ftype == S_IFDIR || ftype == S_IFLNK {
            return Err(FsError::Invalid("mknod of a directory or symlink"));
        }
        let r = self.create_node(dir, name, ftype | (mode as u16 & 0o7777), uid, gid, |_, _, d| {
            d.rdev = rdev;
            Ok(())
        });
        self.balance()?;
        r
    }

    pub fn create(&mut self, dir: u32, name: &[u8], mode: u32, uid: u32, gid: u32) -> FsResult<(u32, Dinode)> {
        self.mknod(dir, name, S_IFREG as u32 | (mode & 0o7777), uid, gid, 0)
    }

    /// The common path of create, mknod and symlink: inode first, then the name.
    pub(super) fn create_node(
        &mut self,
        dir: u32,
        name: &[u8],
        mode: u16,
        uid: u32,
        gid: u32,
        init: impl FnOnce(&mut Fs, u32, &mut Dinode) -> FsResult<()>,
    ) -> FsResult<(u32, Dinode)> {
        self.check_writable()?;
        Self::check_name(name)?;
        let mut dd = self.dir_for_new_name(dir, name)?;
        let (ino, mut d) = self.new_inode(dir, mode, uid, gid)?;
        d.nlink = 1;
        if let Err(e) = init(self, ino, &mut d) {
            self.abandon_inode(ino, d)?;
            return Err(e);
        }
        let ib = self.iput(ino, &d)?;
        // The initialised inode (and its bitmap bit) before the name.
        self.order_write(&[ib])?;
        match self.add_entry(dir, &mut dd, name, ino, dtype_of_mode(mode)) {
            Ok((db, off)) => {
                self.entry_added(dir, db, off, ino, None, None, false, vec![])?;
                self.wait_for_namesake(dir, name, db, off, ino);
            }
            Err(e) => {
                self.abandon_inode(ino, d)?;
                return Err(e);
            }
        }
        Ok((ino, d))
    }

    /// Makes a regular file with no name near `dir` (open(2)'s `O_TMPFILE`), opened: `release`
    /// closes it. Its inode has no link and is an orphan from the start, so it is freed at its
    /// last close (or at unmount) as a file unlinked while open is; `linkable` (no `O_EXCL`)
    /// lets `link` give it a name meanwhile. Nothing is ordered: no name can reach the disk
    /// before the inode does, since none is made, and a crash before a `link` leaves an
    /// allocated inode no name reaches, which fsck reclaims (an allowed leak). The `link`
    /// orders its raised link count before the name, as for any file.
    pub fn tmpfile(&mut self, dir: u32, mode: u32, uid: u32, gid: u32, linkable: bool) -> FsResult<(u32, Dinode)> {
        self.check_entries(dir, Entries::Add)?;
        let (ino, d) = self.retry_nospace(|fs| {
            fs.check_writable()?;
            let dd = fs.dir_inode(dir)?;
            if fs.eff(dir, dd).nlink == 0 {
                return Err(FsError::NotFound);
            }
            let (ino, d) = fs.new_inode(dir, S_IFREG | (mode as u16 & 0o7777), uid, gid)?;
            assert_eq!(d.nlink, 0, "tmpfile: inode {ino} is made with no link");
            fs.iput(ino, &d)?;
            Ok((ino, d))
        })?;
        self.hold(ino, 1);
        let orphan = self.incore.orphans.insert(ino);
        assert!(orphan, "tmpfile: new inode {ino} was already an orphan");
        if linkable {
            self.incore.linkable.insert(ino);
        }
        self.balance()?;
        Ok((ino, d))
    }

    /// The directory a new name goes in: it must exist, not be removed, and not hold the name.
    pub(super) fn dir_for_new_name(&mut self, dir: u32, name: &[u8]) -> FsResult<Dinode> {
        let mut dd = self.dir_inode(dir)?;
        if self.eff(dir, dd.clone()).nlink == 0 {
            return Err(FsError::NotFound);
        }
        if self.find_entry(dir, &mut dd, name)?.is_some() {
            return Err(FsError::Exists);
        }
        Ok(dd)
    }

    /// A file `ino` has a name in `dir` (see `name_dir`); a directory's own ".." says where it is.
    pub(super) fn note_name_dir(&mut self, dir: u32, ino: u32, d: &Dinode) {
        if self.hooks.softdep.is_some() && !d.is_dir() {
            self.incore.set_name_dir(ino, dir);
        }
    }

    /// Undoes a half-made inode after a failure (e.g. ENOSPC for its directory entry).
    pub(super) fn abandon_inode(&mut self, ino: u32, mut d: Dinode) -> FsResult<()> {
        d.nlink = 0;
        self.release_inode(ino, d, vec![])
    }

    pub fn mkdir(&mut self, dir: u32, name: &[u8], mode: u32, uid: u32, gid: u32) -> FsResult<(u32, Dinode)> {
        self.check_entries(dir, Entries::Add)?;
        self.retry_nospace(|fs| fs.mkdir_once(dir, name, mode, uid, gid))
    }

    pub(super) fn mkdir_once(
        &mut self,
        dir: u32,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> FsResult<(u32, Dinode)> {
        self.check_writable()?;
        Self::check_name(name)?;
        self.retire_hidden_name(dir, name)?;
        let mut dd = self.dir_for_new_name(dir, name)?;
        if dd.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        // The parent's raised link count (for the new "..") goes first.
        dd.nlink += 1;
        let pb = self.iput_links(dir, &dd)?;
        self.order_write(&[pb])?;
        let (ino, mut d) = match self.new_inode(dir, S_IFDIR | (mode as u16 & 0o7777), uid, gid) {
            Ok(x) => x,
            Err(e) => {
                dd.nlink -= 1;
                self.iput_links(dir, &dd)?;
                return Err(e);
            }
        };
        d.nlink = 2;
        // FreeBSD 14's di_dirdepth (in di_freelink's place): one below the parent's, the root's
        // being 0. fsck_ffs takes a directory of depth 0 for one of a file system that does not
        // track depths, and asks to start tracking them.
        d.ufs2.freelink = dd.ufs2.freelink.saturating_add(1);
        let body = match self.init_dir_block(ino, &mut d, dir) {
            Ok(b) => b,
            Err(e) => {
                self.abandon_inode(ino, d)?;
                dd.nlink -= 1;
                self.iput_links(dir, &dd)?;
                return Err(e);
            }
        };
        if let Some(sd) = self.hooks.softdep.as_mut() {
            sd.mkdir_parent(ino, dir);
        }
        let ib = self.iput(ino, &d)?;
        // The new directory's block, then its inode, then its name.
        self.order_write(&[body])?;
        self.order_write(&[ib])?;
        match self.add_entry(dir, &mut dd, name, ino, DT_DIR) {
            Ok((db, off)) => self.entry_added(dir, db, off, ino, None, Some(dir), true, vec![])?,
            Err(e) => {
                self.abandon_inode(ino, d)?;
                let mut dd = self.iget(dir)?;
                dd.nlink -= 1;
                self.iput_links(dir, &dd)?;
                return Err(e);
            }
        }
        self.balance()?;
        Ok((ino, d))
    }

    pub fn symlink(&mut self, dir: u32, name: &[u8], target: &[u8], uid: u32, gid: u32) -> FsResult<(u32, Dinode)> {
        self.check_entries(dir, Entries::Add)?;
        self.retry_nospace(|fs| fs.symlink_once(dir, name, target, uid, gid))
    }

    pub(super) fn symlink_once(
        &mut self,
        dir: u32,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> FsResult<(u32, Dinode)> {
        if target.is_empty() || target.len() >= self.sb.block_size as usize || target.len() > MAX_SYMLINK {
            return Err(if target.is_empty() { FsError::NotFound } else { FsError::NameTooLong });
        }
        // A target shorter than `fs_maxsymlinklen` lives in the inode, as FreeBSD keeps it.
        let short = (target.len() as i64) < self.sb.ufs2().fs_maxsymlinklen as i64;
        let r = self.create_node(dir, name, S_IFLNK | 0o777, uid, gid, |fs, ino, d| {
            if short {
                d.set_short_target(target);
                return Ok(());
            }
            // The target goes through the ordinary block map, like file data.
            fs.write_inner(ino, d, 0, target)?;
            Ok(())
        });
        self.balance()?;
        r
    }

    pub fn readlink(&mut self, ino: u32) -> FsResult<Vec<u8>> {
        let mut d = self.iget(ino)?;
        if !d.is_symlink() {
            return Err(FsError::Invalid("not a symbolic link"));
        }
        if d.size == 0 || d.size > MAX_SYMLINK as u64 || d.size >= self.sb.block_size as u64 {
            return Err(self.damaged(format!("symlink {ino} has size {}", d.size)));
        }
        if d.short_symlink() {
            // A target shorter than `fs_maxsymlinklen` lives in the inode itself.
            let max = self.sb.ufs2().fs_maxsymlinklen.max(0) as u64;
            if d.size >= max {
                return Err(self.damaged(format!("symlink {ino} of {} bytes holds no block", d.size)));
            }
            // Read from the inode, it is an access all the same (a long link's `read` sets it).
            self.accessed(ino, &mut d)?;
            return Ok(d.short_target());
        }
        self.read(ino, 0, d.size as usize)
    }

    pub fn link(&mut self, ino: u32, newdir: u32, newname: &[u8]) -> FsResult<Dinode> {
        self.check_entries(newdir, Entries::Add)?;
        self.retry_nospace(|fs| fs.link_once(ino, newdir, newname))
    }

    pub(super) fn link_once(&mut self, ino: u32, newdir: u32, newname: &[u8]) -> FsResult<Dinode> {
        self.check_writable()?;
        Self::check_name(newname)?;
        let mut d = self.iget(ino)?;
        if d.is_dir() {
            return Err(FsError::Perm);
        }
        if d.flags & DI_KEEP_NAMES != 0 {
            return Err(FsError::Perm);
        }
        // A file with no name left gets none again (Linux: ENOENT), but for one made nameless
        // to be linked (`tmpfile`).
        let tmp = self.incore.linkable.contains(&ino);
        if self.eff(ino, d.clone()).nlink == 0 && !tmp {
            return Err(FsError::NotFound);
        }
        let mut dd = self.dir_for_new_name(newdir, newname)?;
        if d.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        // The raised count before the new name.
        d.nlink += 1;
        self.touch_c(&mut d);
        let ib = self.iput_links(ino, &d)?;
        self.order_write(&[ib])?;
        match self.add_entry(newdir, &mut dd, newname, ino, dtype_of_mode(d.mode)) {
            Ok((db, off)) => {
                self.entry_added(newdir, db, off, ino, None, None, false, vec![])?;
                self.wait_for_namesake(newdir, newname, db, off, ino);
                if tmp {
                    // Named now: an orphan no more, and linkable once only, as on Linux.
                    self.incore.linkable.remove(&ino);
                    let was = self.incore.orphans.remove(&ino);
                    assert!(was, "link: nameless inode {ino} was not an orphan");
                }
            }
            Err(e) => {
                d.nlink -= 1;
                self.iput_links(ino, &d)?;
                return Err(e);
            }
        }
        self.balance()?;
        // As it is now: the tasks `balance` ran may have dropped a link.
        self.getattr(ino)
    }

    pub fn unlink(&mut self, dir: u32, name: &[u8]) -> FsResult<()> {
        self.check_writable()?;
        let mut dd = self.dir_inode(dir)?;
        Self::check_entries_of(&dd, Entries::Remove)?;
        let slot = self.find_entry(dir, &mut dd, name)?.ok_or(FsError::NotFound)?;
        // The file's type and flags, without decoding its dinode: most unlinks decode it once,
        // in the link drop.
        match self.mode_and_flags(slot.ino)? {
            (0, _) => return Err(FsError::Stale(slot.ino as u64)),
            (mode, _) if mode & S_IFMT == S_IFDIR => return Err(FsError::IsDir),
            (_, flags) if flags & DI_KEEP_NAMES != 0 => return Err(FsError::Perm),
            _ => {}
        }
        // The name goes first; then the link count. The inode's change time is the unlink's:
        // a link drop that runs at once stamps it, and one that waits for the removal to reach
        // the disk (soft updates) finds it stamped here.
        self.touch_mc(&mut dd);
        self.iput(dir, &dd)?;
        if !self.unlink_name(dir, &slot, name, vec![Task::DropLink(slot.ino)])? {
            let mut d = self.iget(slot.ino)?;
            self.touch_c(&mut d);
            self.iput(slot.ino, &d)?;
        }
        self.balance()
    }

    /// True if an unlink of `name` in `dir` would land the flight in the air: its entry may not
    /// have reached the disk (`name_add_pending`): `unlink_name` lands the flight when it
    /// carries the entry's block, and under soft updates the removal then drops the link at
    /// once, which may free the file and so land the flight. A lookup that fails counts as
    /// true. A caller sharing the file system waits for the flight's write without the lock
    /// first when it does (`lock_landing_if`); any other unlink goes while the flight is in the
    /// air, its entry's block in it or not.
    pub fn unlink_lands_flight(&mut self, dir: u32, name: &[u8]) -> bool {
        self.entry_lands_flight(dir, name, |fs, slot| {
            fs.name_add_pending(slot) && (fs.hooks.softdep.is_some() || fs.cache.in_flight(slot.bno))
        })
    }

    /// True if an rmdir of `name` in `dir` would land the flight in the air: without soft
    /// updates (its drops run at once, freeing the directory's blocks), while the directory
    /// holds renames' hidden old names (their removal decides by what is on disk), or while its
    /// entry may not have reached the disk (as `unlink_lands_flight`). A lookup that fails
    /// counts as true.
    pub fn rmdir_lands_flight(&mut self, dir: u32, name: &[u8]) -> bool {
        self.entry_lands_flight(dir, name, |fs, slot| {
            fs.hooks.softdep.is_none() || fs.renames.hidden.in_dir(slot.ino) || fs.name_add_pending(slot)
        })
    }

    /// With a flight in the air, whether a removal of the entry `name` of `dir` lands it
    /// (`lands`); none in the air, or no such entry, false; a lookup that fails, true.
    fn entry_lands_flight(&mut self, dir: u32, name: &[u8], lands: impl Fn(&Fs, &Slot) -> bool) -> bool {
        if !self.has_flight() {
            return false;
        }
        let slot = self.dir_inode(dir).and_then(|mut dd| self.find_entry(dir, &mut dd, name));
        match slot {
            Ok(Some(slot)) => lands(self, &slot),
            Ok(None) => false,
            Err(_) => true,
        }
    }

    pub fn rmdir(&mut self, dir: u32, name: &[u8]) -> FsResult<()> {
        self.check_writable()?;
        if name == b"." {
            return Err(FsError::Invalid("rmdir of ."));
        }
        if name == b".." {
            return Err(FsError::NotEmpty);
        }
        let mut dd = self.dir_inode(dir)?;
        Self::check_entries_of(&dd, Entries::Remove)?;
        let slot = self.find_entry(dir, &mut dd, name)?.ok_or(FsError::NotFound)?;
        let mut d = self.iget(slot.ino)?;
        if !d.is_dir() {
            return Err(FsError::NotDir);
        }
        if slot.ino == ROOT_INO || d.flags & DI_KEEP_NAMES != 0 {
            return Err(FsError::Perm);
        }
        if !self.dir_is_empty(slot.ino, &mut d)? {
            return Err(FsError::NotEmpty);
        }
        self.touch_mc(&mut dd);
        self.iput(dir, &dd)?;
        // The name goes first; then the child (its ".." with it), then the parent's count.
        let task = self.dir_name_gone_task(slot.ino, &mut d, dir)?;
        if self.renames.hidden.in_dir(slot.ino) {
            // It still holds renames' old names on disk, whose new names are not yet reachable:
            // its own name stays on disk, hidden, until those may go (or the files would be
            // reachable by no name on disk).
            self.note_pending(std::slice::from_ref(&task));
            self.hide_name(dir, &slot, name);
            let wait = NameWait::Emptied(slot.ino);
            let (bno, lbn, off) = (slot.bno, slot.lbn, slot.off);
            self.run_task(Task::RemoveOldName { dir, wait, bno, lbn, off, tasks: vec![task] })?;
        } else {
            self.unlink_name(dir, &slot, name, vec![task])?;
        }
        self.balance()
    }
}
