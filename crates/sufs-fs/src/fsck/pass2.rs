//! Pass 2, fsck_ffs's `pass2.c`: directories. The tree under the root is walked breadth first,
//! each directory once (`walk_tree`), reading its blocks up to its size: a hole, a chunk that
//! does not parse, "." and ".." out of place, an entry naming a free or out-of-range inode, a
//! type that is not its inode's, a reservation named outside `/.br` are reported. Every entry
//! counts as a link of the inode it names (".." where it points on disk), for pass 4. A root
//! that is not a usable directory is reported and made anew by repair.
//!
//! Pass 2's second half (`pass2_names`), as fsck_ffs's "now that the parents of all directories
//! have been found": each directory gets one name, the entry in the directory its ".." names
//! (else the first found); any other name is an extraneous link; then its "." and ".." are
//! checked against the parent. It runs after pass 3, because the trees pass 3 walks from the
//! orphaned directories name directories too.

use std::collections::VecDeque;

use super::{name_str, DirFix, Finding, Head, Namer, Rec, Result, Scan};
use crate::format::*;

impl Scan<'_> {
    /// Pass 2: the tree under the root, if the root is a usable directory.
    pub(super) fn pass2(&mut self) -> Result<()> {
        let root_mode = self.inodes.get(&ROOT_INO).map_or(0, |i| i.mode);
        let root_ok = self.inodes.get(&ROOT_INO).is_some_and(|i| i.is_dir() && !i.bad);
        if root_ok {
            self.walk_tree(ROOT_INO)?;
        } else {
            self.findings.push(Finding::BadRoot { mode: root_mode });
            self.fixes.make_root = true;
        }
        Ok(())
    }

    /// Breadth-first walk of the tree under directory `start`, each directory once.
    pub(super) fn walk_tree(&mut self, start: u32) -> Result<()> {
        if let Some(i) = self.inodes.get_mut(&start) {
            i.visited = true;
        }
        let mut queue = VecDeque::from([start]);
        while let Some(dir) = queue.pop_front() {
            self.scan_dir(dir, &mut queue)?;
        }
        Ok(())
    }

    /// Directory `dir`'s entries, block by block up to its first hole (fsck_ffs's `dirscan`
    /// with `pass2check`), and what its first chunk holds.
    fn scan_dir(&mut self, dir: u32, queue: &mut VecDeque<u32>) -> Result<()> {
        let Some((map, limit)) = self.dir_blocks(dir) else {
            return Ok(());
        };
        let mut head = Head { bno: map.first().filter(|_| limit > 0).map(|e| e.1), ..Default::default() };
        let mut entries = 0;
        for (lbn, bno) in map.into_iter().filter(|e| e.0 < limit) {
            let buf = self.read(bno)?;
            for chunk in (0..self.bs).step_by(DIRBLKSIZ) {
                entries += self.scan_chunk(dir, (lbn, bno), &buf, chunk, &mut head, queue);
            }
        }
        if let Some(i) = self.inodes.get_mut(&dir) {
            i.dir_limit = limit;
            i.head = head;
            i.entries = entries;
        }
        Ok(())
    }

    /// The blocks of directory `dir` within its size, as (logical, physical), and how many of
    /// them are read: those before the first hole. A hole is reported; at block 0 the
    /// directory is cleared, later it is cut there.
    fn dir_blocks(&mut self, dir: u32) -> Option<(Vec<(u64, u64)>, u64)> {
        let bs = self.bs as u64;
        let info = self.inodes.get(&dir)?;
        let nblocks = info.size / bs;
        let map: Vec<(u64, u64)> = info.dir_map.iter().filter(|e| e.0 < nblocks).map(|e| (e.0, e.1)).collect();
        let mut hole = map.iter().enumerate().find(|(i, e)| e.0 != *i as u64).map(|(i, _)| i as u64);
        if hole.is_none() && (map.len() as u64) < nblocks {
            hole = Some(map.len() as u64);
        }
        if let Some(h) = hole {
            self.findings.push(Finding::DirCorrupt { dir, lbn: h, at: 0, what: "hole in directory".into() });
            if h == 0 {
                self.fixes.clear_inodes.insert(dir);
            } else {
                for e in info.dir_map.iter().filter(|e| e.0 >= h) {
                    self.fixes.ptr_clears.push(e.2);
                }
                self.fixes.set_size.insert(dir, h * bs);
            }
        }
        Some((map, hole.unwrap_or(nblocks)))
    }

    /// The 512-byte chunk at `chunk` of directory block `(lbn, bno)`, read into `buf`. One that
    /// does not parse is reported (the first, holding "." and "..", is rebuilt by pass 2's
    /// second half; another is emptied). "." and ".." are checked as the first two entries of
    /// the first chunk, misplaced anywhere else. Returns how many other live entries it holds.
    fn scan_chunk(
        &mut self,
        dir: u32,
        (lbn, bno): (u64, u64),
        buf: &[u8],
        chunk: usize,
        head: &mut Head,
        queue: &mut VecDeque<u32>,
    ) -> u32 {
        let first_chunk = lbn == 0 && chunk == 0;
        let mut recs = Vec::new();
        let mut bad = None;
        for r in dir_iter(&buf[chunk..chunk + DIRBLKSIZ]) {
            match r {
                Ok(e) => recs.push(Rec { at: chunk + e.offset, ino: e.ino, dtype: e.dtype, name: e.name.to_vec() }),
                Err(e) => {
                    bad = Some((chunk + e.offset, e.what));
                    break;
                }
            }
        }
        if let Some((at, what)) = bad {
            self.findings.push(Finding::DirCorrupt { dir, lbn, at, what: what.into() });
            if first_chunk {
                head.corrupt = true;
            } else {
                self.fixes.dir.push(DirFix::ResetChunk { bno, chunk });
            }
            return 0;
        }
        if first_chunk {
            head.first_ino = recs.first().map_or(0, |r| r.ino);
        }
        let mut entries = 0;
        for (k, r) in recs.iter().enumerate() {
            if r.ino == 0 {
                continue;
            }
            if first_chunk && k == 0 && r.name == b"." {
                head.dot = true;
                self.check_dot(dir, bno, r);
            } else if first_chunk && k == 1 && r.name == b".." {
                head.dotdot = true;
                self.check_dotdot(dir, bno, r);
            } else if r.name == b"." || r.name == b".." {
                self.findings.push(Finding::DirCorrupt {
                    dir,
                    lbn,
                    at: r.at,
                    what: format!("misplaced {:?} entry", name_str(&r.name)),
                });
                self.fixes.dir.push(DirFix::Remove { bno, at: r.at });
            } else {
                entries += 1;
                self.check_entry(dir, lbn, bno, r, queue);
            }
        }
        entries
    }

    /// "." names the directory itself, and counts as one of its links.
    fn check_dot(&mut self, dir: u32, bno: u64, r: &Rec) {
        if r.ino != dir {
            self.findings.push(Finding::BadDot { dir, stored: r.ino });
            self.fixes.dir.push(DirFix::SetIno { bno, at: r.at, ino: dir });
        } else if let Some(i) = self.inodes.get_mut(&dir) {
            i.links = i.links.saturating_add(1);
        }
        self.check_dir_type(dir, bno, r, dir);
    }

    /// ".." is noted (pass 2's second half checks it against the parent) and counted where it
    /// points.
    fn check_dotdot(&mut self, dir: u32, bno: u64, r: &Rec) {
        if let Some(i) = self.inodes.get_mut(&dir) {
            i.dotdot = Some((bno, r.at, r.ino));
        }
        // Counted where it points on disk, so that link counts describe the image as it is.
        if let Some(t) = self.inodes.get_mut(&r.ino) {
            if t.is_dir() && !t.bad {
                t.links = t.links.saturating_add(1);
            }
        }
        self.check_dir_type(dir, bno, r, r.ino);
    }

    /// "." and ".." have the type of a directory.
    fn check_dir_type(&mut self, dir: u32, bno: u64, r: &Rec, ino: u32) {
        if r.dtype != DT_DIR {
            self.findings.push(Finding::EntryTypeWrong {
                dir,
                name: name_str(&r.name),
                ino,
                stored: r.dtype,
                actual: DT_DIR,
            });
            self.fixes.dir.push(DirFix::SetType { bno, at: r.at, dtype: DT_DIR });
        }
    }

    /// Any other live entry (fsck_ffs's `pass2check`): it names an inode in use, with that
    /// inode's type; it counts as a link; a directory it names is queued for the walk (once)
    /// and remembers the name; a reservation is named in `/.br` only.
    fn check_entry(&mut self, dir: u32, lbn: u64, bno: u64, r: &Rec, queue: &mut VecDeque<u32>) {
        let valid = self.sb.is_valid_inode(r.ino);
        let Some(t) = self.inodes.get_mut(&r.ino).filter(|_| valid) else {
            self.findings.push(Finding::DanglingEntry { dir, name: name_str(&r.name), ino: r.ino, lbn, at: r.at });
            self.fixes.dir.push(DirFix::Remove { bno, at: r.at });
            return;
        };
        t.links = t.links.saturating_add(1);
        if dir == ROOT_INO && r.name == crate::br::BR_DIR && t.is_dir() {
            self.br_dir = Some(r.ino);
        }
        if t.flags & DI_UNMOVABLE != 0 && !t.is_dir() {
            if self.br_dir == Some(dir) {
                self.reservations += 1;
                self.reserved_blocks += t.kept;
            } else {
                self.findings.push(Finding::BadReservation {
                    ino: r.ino,
                    what: format!("named {:?} in directory {dir}, outside /.br", name_str(&r.name)),
                });
                self.fixes.clear_br_flags.insert(r.ino);
            }
        }
        let t = self.inodes.get_mut(&r.ino).expect("looked up above");
        let want = dtype_of_mode(t.mode);
        let type_wrong = !t.bad && r.dtype != want;
        if t.is_dir() && !t.bad {
            t.namers.push(Namer { dir, bno, at: r.at, name: r.name.clone() });
            if !t.visited {
                t.visited = true;
                queue.push_back(r.ino);
            }
        }
        if type_wrong {
            self.findings.push(Finding::EntryTypeWrong {
                dir,
                name: name_str(&r.name),
                ino: r.ino,
                stored: r.dtype,
                actual: want,
            });
            self.fixes.dir.push(DirFix::SetType { bno, at: r.at, dtype: want });
        }
    }

    /// Pass 2's second half: every directory reached by a walk gets its name, ".", "..".
    pub(super) fn pass2_names(&mut self) {
        let dirs: Vec<u32> = self.inodes.iter().filter(|(_, i)| i.is_dir() && !i.bad).map(|(&n, _)| n).collect();
        for d in dirs {
            self.resolve_dir(d);
        }
    }

    /// Once every tree is walked: a directory's name is the entry in the directory its ".."
    /// names (else the first found), any other name is a second one; then "." and "..".
    fn resolve_dir(&mut self, d: u32) {
        let target = self.target;
        let Some(info) = self.inodes.get_mut(&d) else {
            return;
        };
        if !info.visited {
            return;
        }
        let dotdot_ino = info.dotdot.map(|x| x.2);
        let primary = if d == ROOT_INO || info.orphan {
            None
        } else {
            Some(info.namers.iter().position(|n| Some(n.dir) == dotdot_ino).unwrap_or(0))
        };
        let parent =
            if d == ROOT_INO { Some(ROOT_INO) } else { primary.and_then(|p| info.namers.get(p)).map(|n| n.dir) };
        let namers = std::mem::take(&mut info.namers);
        let head = std::mem::take(&mut info.head);
        let dotdot = info.dotdot;
        let names = namers.len() as u32;
        let unreachable = info.unrooted;
        let counted = info.nlink >= info.links;
        for (k, n) in namers.into_iter().enumerate() {
            if Some(k) == primary {
                continue;
            }
            let name = name_str(&n.name);
            self.findings.push(Finding::DirMultiplyLinked { ino: d, dir: n.dir, name, names, counted, unreachable });
            self.fixes.dir.push(DirFix::Remove { bno: n.bno, at: n.at });
        }
        if let (Some(p), Some((bno, at, ino))) = (parent, dotdot) {
            if ino != p {
                let stored_dir = self.inodes.get(&ino).is_some_and(|i| i.is_dir() && !i.bad);
                self.findings.push(Finding::BadDotDot { dir: d, stored: ino, expected: p, stored_dir });
                self.fixes.dir.push(DirFix::SetIno { bno, at, ino: p });
            }
        }
        let Some(bno) = head.bno else {
            return;
        };
        let head_parent = parent.or(target).unwrap_or(d);
        if !head.corrupt && !head.dot {
            let stored = if head.first_ino == d { 0 } else { head.first_ino };
            self.findings.push(Finding::BadDot { dir: d, stored });
        }
        if !head.corrupt && !head.dotdot {
            self.findings.push(Finding::BadDotDot { dir: d, stored: 0, expected: head_parent, stored_dir: false });
        }
        if head.corrupt || !head.dot || !head.dotdot {
            self.fixes.dir.push(DirFix::RebuildHead { bno, dir: d, parent: head_parent });
        }
    }
}
