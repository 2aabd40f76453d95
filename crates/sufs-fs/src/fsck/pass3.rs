//! Pass 3, fsck_ffs's `pass3.c`: connectivity. Picks where unreferenced inodes go: lost+found
//! if it is a usable directory, else the root. Each directory that no walk from the root
//! reached belongs to an orphaned tree: its top is found by following ".." up while it names an
//! unreached directory, reported as unreferenced, and its tree walked as pass 2 walks the root's,
//! so that what it holds counts as named. Repair reconnects the top to lost+found as `#INO`
//! (fsck_ffs's `linkup`), or under preen clears it if it is empty (an rmdir or a mkdir cut short).

use std::collections::BTreeSet;

use super::{Finding, Result, Scan};
use crate::format::*;

impl Scan<'_> {
    /// Pass 3: the reconnection target, then the orphaned trees.
    pub(super) fn pass3(&mut self) -> Result<()> {
        self.target = self.lost_found();
        // Directories no path reaches: find the top of each orphaned tree by following "..",
        // report it, and walk its tree so that what it holds counts as named.
        let dirs: Vec<u32> = self.inodes.iter().filter(|(_, i)| i.is_dir() && !i.bad).map(|(&n, _)| n).collect();
        for &d in &dirs {
            if let Some(info) = self.inodes.get_mut(&d) {
                info.unrooted = !info.visited;
            }
        }
        for &d in &dirs {
            if self.inodes.get(&d).is_none_or(|i| i.visited) {
                continue;
            }
            let top = self.orphan_top(d)?;
            let Some(info) = self.inodes.get_mut(&top) else {
                continue;
            };
            info.orphan = true;
            self.findings.push(Finding::UnreferencedInode { ino: top, mode: info.mode, size: info.size });
            self.walk_tree(top)?;
            // Preen clears an empty one (an rmdir or a mkdir cut short); a tree with entries
            // goes to lost+found, whatever the mode, so that no name below it is lost.
            let empty = self.inodes.get(&top).is_some_and(|i| i.entries == 0);
            if self.preen && empty {
                self.fixes.clear_inodes.insert(top);
            } else if self.target.is_some() {
                self.fixes.reconnect.push(top);
            }
        }
        Ok(())
    }

    /// Where unreferenced inodes are reconnected: lost+found if it is a directory the walk
    /// reached, with a block, and not to be cleared; else the root if it is one; else nowhere.
    fn lost_found(&self) -> Option<u32> {
        let root_ok = self.inodes.get(&ROOT_INO).is_some_and(|i| i.is_dir() && !i.bad);
        let usable = |s: &Self, ino: u32| {
            s.inodes.get(&ino).is_some_and(|i| i.is_dir() && !i.bad && i.visited && i.dir_limit > 0)
                && !s.fixes.clear_inodes.contains(&ino)
        };
        if usable(self, LOST_FOUND_INO) {
            Some(LOST_FOUND_INO)
        } else if root_ok && usable(self, ROOT_INO) {
            Some(ROOT_INO)
        } else {
            None
        }
    }

    /// The top of the orphaned tree holding directory `d`: ".." followed up while it names a
    /// directory no walk reached, and no loop.
    fn orphan_top(&self, d: u32) -> Result<u32> {
        let mut top = d;
        let mut chain = BTreeSet::from([d]);
        while let Some(p) = self.dotdot_of(top)? {
            let up = self.inodes.get(&p).is_some_and(|i| i.is_dir() && !i.bad && !i.visited);
            if !up || !chain.insert(p) {
                break;
            }
            top = p;
        }
        Ok(top)
    }

    /// The inode that the ".." of directory `dir` names, read from its first block.
    fn dotdot_of(&self, dir: u32) -> Result<Option<u32>> {
        let Some(&(0, bno, _)) = self.inodes.get(&dir).and_then(|i| i.dir_map.first()) else {
            return Ok(None);
        };
        let buf = self.read(bno)?;
        let mut it = dir_iter(&buf[..DIRBLKSIZ]);
        let _dot = it.next();
        Ok(match it.next() {
            Some(Ok(e)) if e.ino != 0 && e.name == b".." => Some(e.ino),
            _ => None,
        })
    }
}
