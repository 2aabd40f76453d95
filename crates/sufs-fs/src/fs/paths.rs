//! Walks up the tree by "..": whether a directory's path to the root is on disk yet (rule 3 of
//! the soft updates paper for the whole of a rename's new path), whether one directory holds
//! another, and a directory's ancestors (fsync's path to the root).
//!
//! A chain of directories is as deep as users make it, so no walk stops at a constant: a walk
//! that stopped early and answered "pending" kept a rename's old name on disk for ever, and
//! sync, snapshots and the unmount failed for every user. A path to the root cannot be longer
//! than the file system has inodes; a walk past that many steps has met a loop of ".." entries,
//! which is damage (the request fails with EIO and the image is marked for fsck), never an
//! answer. A rename's old name waiting for its new path is tried again after writes complete:
//! what a walk found is kept (`PathMemo`), so that a retry costs a look-up while nothing the
//! answer rests on has changed, and a walk of a deep chain is paid once per change a user
//! makes, not once per write.

use super::*;
use crate::fixed_hash::HashSet;

/// What a walk up from a directory found.
#[derive(Debug, Clone, Copy)]
enum Walked {
    /// The first directory met (itself or an ancestor) named by an entry not yet on disk. Still
    /// the answer while that name is pending and no directory has changed parent.
    Blocked(u32),
    /// Every name up to the root was on disk when `PathMemo::renamed` had this value. Still the
    /// answer while no existing directory has taken a new name and none has changed parent.
    Durable(u64),
}

/// The walks' results (see the module's comment), with the counts of the changes that void
/// them. Its size is bounded by the number of directories, and it is emptied when a directory
/// changes parent and whenever soft updates are idle.
#[derive(Debug, Default)]
pub(super) struct PathMemo {
    /// Directories that changed parent (a ".." set) or were freed (their number may come back
    /// anywhere): every path may have changed.
    moved: u64,
    /// Existing directories that took a new entry (renamed, exchanged, or named by a moved
    /// directory's ".."): a path that was on disk may not be.
    renamed: u64,
    /// `moved` when `found` was last emptied.
    found_at: u64,
    found: HashMap<u32, Walked>,
    /// Steps walked up the tree so far, by every walk here: what they cost.
    steps: u64,
}

impl PathMemo {
    /// A directory changed parent or was freed.
    pub(super) fn dir_moved(&mut self) {
        self.moved += 1;
    }

    /// An existing directory took a new entry not yet on disk.
    pub(super) fn dir_renamed(&mut self) {
        self.renamed += 1;
    }

    pub(super) fn clear(&mut self) {
        self.found.clear();
        self.found_at = self.moved;
    }
}

impl Fs {
    /// Steps walked up the tree by ".." so far (a rename's new path, ancestry, fsync's paths).
    pub fn path_walk_steps(&self) -> u64 {
        self.renames.paths.steps
    }

    /// The parent of directory `dir`, by its "..".
    fn parent_dir(&mut self, dir: u32) -> FsResult<u32> {
        self.renames.paths.steps += 1;
        let mut d = self.dir_inode(dir)?;
        let e = self.find_entry(dir, &mut d, b"..")?;
        e.map(|e| e.ino).ok_or_else(|| FsError::Corrupt(format!("directory {dir} has no \"..\"")))
    }

    /// A walk up from `from` took more steps than there are inodes: the ".." entries loop.
    fn path_loops(&mut self, from: u32) -> FsError {
        self.damaged(format!("the \"..\" entries up from directory {from} loop and never reach the root"))
    }

    /// A rename's new name in `newdir` is on disk; true if it is not reachable there yet. A
    /// directory that has since been removed holds no name of the renamed inode any more (it was
    /// moved again or unlinked), so its old name may go: freed, or still held by an open handle
    /// or the kernel, without a name, its "." and ".." gone with its blocks.
    pub(super) fn new_path_pending(&mut self, newdir: u32) -> FsResult<bool> {
        if self.incore.orphans.contains(&newdir) {
            return Ok(false);
        }
        match self.path_pending(newdir) {
            Err(FsError::NotDir | FsError::NotFound | FsError::Stale(_)) => Ok(false),
            r => r,
        }
    }

    /// With soft updates, true if `dir` or one of its ancestors is named by an entry not yet on
    /// disk: a rename's new name there would not be reachable after a crash, so the old name
    /// stays on disk until the path is (rule 3 for the whole path, not only the last name).
    /// The walk goes up to the root however deep `dir` is, unless no directory at all has a name
    /// pending, or what an earlier walk found still holds.
    pub(super) fn path_pending(&mut self, start: u32) -> FsResult<bool> {
        let Some(sd) = self.hooks.softdep.as_ref() else { return Ok(false) };
        if !sd.dir_name_pending() {
            return Ok(false);
        }
        self.dir_inode(start)?;
        let memo = &mut self.renames.paths;
        if memo.found_at != memo.moved {
            memo.clear();
        }
        let limit = self.sb.total_inodes();
        let mut walked = Vec::new();
        let mut dir = start;
        let found = loop {
            if dir == ROOT_INO {
                break Walked::Durable(self.renames.paths.renamed);
            }
            let sd = self.hooks.softdep.as_ref().expect("softdep");
            // A directory with a hidden name (renamed, or removed while it holds hidden names)
            // stays reachable on disk by that name until its other name may replace it.
            if sd.has_pending_name(dir) {
                break Walked::Blocked(dir);
            }
            match self.renames.paths.found.get(&dir) {
                Some(&Walked::Blocked(b)) if sd.has_pending_name(b) => break Walked::Blocked(b),
                Some(&Walked::Durable(at)) if at == self.renames.paths.renamed => break Walked::Durable(at),
                _ => {}
            }
            walked.push(dir);
            if walked.len() as u64 > limit {
                return Err(self.path_loops(start));
            }
            dir = self.parent_dir(dir)?;
        };
        let memo = &mut self.renames.paths.found;
        for d in walked {
            memo.insert(d, found);
        }
        Ok(matches!(found, Walked::Blocked(_)))
    }

    /// True if `anc` is `ino` or one of its ancestors.
    pub(super) fn is_ancestor(&mut self, anc: u32, ino: u32) -> FsResult<bool> {
        let mut dir = ino;
        for _ in 0..=self.sb.total_inodes() {
            if dir == anc {
                return Ok(true);
            }
            if dir == ROOT_INO {
                return Ok(false);
            }
            dir = self.parent_dir(dir)?;
        }
        Err(self.path_loops(ino))
    }

    /// `dir` and its ancestors up to the root (not included), by "..": as far as the path can be
    /// followed (a directory removed meanwhile ends it), and up to the first directory already
    /// in `walked` (whose path up an earlier walk took); each is added to `walked`. Walks from
    /// many directories of one tree thus cost its size, not its depth times their number.
    pub(super) fn ancestors(&mut self, dir: Option<u32>, walked: &mut HashSet<u32>) -> FsResult<Vec<u32>> {
        let mut out = Vec::new();
        let Some(start) = dir else { return Ok(out) };
        let mut dir = start;
        while dir != ROOT_INO {
            if !walked.insert(dir) {
                // Met again: walked before this walk, or a loop within it.
                if out.contains(&dir) {
                    return Err(self.path_loops(start));
                }
                break;
            }
            out.push(dir);
            self.renames.paths.steps += 1;
            let Ok(mut d) = self.dir_inode(dir) else { break };
            match self.find_entry(dir, &mut d, b"..")? {
                Some(e) => dir = e.ino,
                None => break,
            }
        }
        Ok(out)
    }
}
