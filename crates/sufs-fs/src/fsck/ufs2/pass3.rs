//! Pass 3, fsck_ffs's pass3.c: connectivity. Every directory must be reachable from the root by
//! the names pass 2 found. An unreachable directory no entry names is the top of a leaked tree
//! (`UNREF DIR`: a soft-updates crash may leave one, an rmdir whose inode was not yet freed);
//! unreachable directories naming each other in a loop are reported once per directory on the
//! loop. A reachable directory's ".." must name its parent, or at least a directory (the window
//! of a rename to another parent).

use super::*;

impl<D: ReadAt + ?Sized> Check<'_, D> {
    /// Answers which inodes the root reaches, or `None` when the root is unusable (and passes 3
    /// and 4 mean nothing).
    pub(super) fn pass3(&mut self) -> Result<Option<Vec<bool>>, Ufs2Error> {
        if !self.is_dir(UFS_ROOTINO) {
            let mode = self.inodes.get(UFS_ROOTINO).mode;
            self.find(Finding::BadRoot { mode });
            return Ok(None);
        }
        let mut reached = vec![false; self.sb.maxino() as usize];
        reached[UFS_ROOTINO as usize] = true;
        let mut todo = vec![UFS_ROOTINO];
        while let Some(d) = todo.pop() {
            for &c in self.children.get(&d).map_or(&[][..], |v| &v[..]) {
                if !reached[c as usize] {
                    reached[c as usize] = true;
                    todo.push(c);
                }
            }
        }
        let ndirs = self.dir_blocks.len();
        let dirs: Vec<u32> = (self.inodes.iter())
            .filter(|&(ino, _)| ino >= UFS_ROOTINO && self.is_dir(ino))
            .map(|(ino, _)| ino)
            .collect();
        for ino in dirs {
            let t = *self.inodes.get(ino);
            if reached[ino as usize] {
                let parent = t.parent;
                if t.dotdot != 0 && t.dotdot != parent {
                    let stored_dir = self.is_dir(t.dotdot);
                    self.find(Finding::BadDotDot { dir: ino, stored: t.dotdot, parent, stored_dir });
                }
                continue;
            }
            if t.parent == 0 {
                self.find(Finding::UnrefDir { ino, size: t.size });
                continue;
            }
            // Up the first names: to a top no entry names (the leaked tree's, reported there),
            // or back here (a loop).
            let mut x = t.parent;
            for _ in 0..=ndirs {
                if x == ino {
                    self.find(Finding::DirLoop { ino });
                    break;
                }
                if x == 0 || reached[x as usize] {
                    break;
                }
                x = self.inodes.get(x).parent;
            }
        }
        Ok(Some(reached))
    }
}
