//! Pass 4, fsck_ffs's pass4.c: every inode in use against the entries pass 2 counted. One no
//! entry names is `UNREF FILE` (a leak a soft-updates crash may leave: a create whose name never
//! reached the disk); a link count above the names is allowed too (soft updates raises a count
//! before it writes the name, and lowers it after the name is gone); a count below them is a
//! violation, since removing one name could free an inode still named. The top of an
//! unreferenced directory tree was reported by pass 3 and is not counted again.

use super::*;

impl<D: ReadAt + ?Sized> Check<'_, D> {
    pub(super) fn pass4(&mut self, reached: &[bool]) {
        let mut found = Vec::new();
        for (ino, t) in self.inodes.iter() {
            if ino < UFS_ROOTINO || t.state != State::InUse {
                continue;
            }
            let dir = t.dtype == crate::format::DT_DIR;
            if dir && !reached[ino as usize] && t.parent == 0 {
                continue;
            }
            if t.counted == 0 {
                found.push(Finding::UnrefFile { ino, mode: t.mode, size: t.size });
            } else if t.nlink as i64 != t.counted as i64 {
                found.push(Finding::LinkCount { ino, dir, stored: t.nlink as i64, actual: t.counted });
            }
        }
        self.findings.append(&mut found);
    }
}
