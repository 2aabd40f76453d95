//! Pass 1b, fsck_ffs's pass1b.c: pass 1 met each duplicate at its second claim; this pass walks
//! every inode in use again to name the other owners of those fragments, each once. An
//! indirect block is read once per inode here (a tree of pointers to one block ends).

use std::collections::BTreeSet;

use super::pass1::{walk, Event, Step};
use super::*;

impl<D: ReadAt + ?Sized> Check<'_, D> {
    pub(super) fn pass1b(&mut self) -> Result<(), Ufs2Error> {
        let in_use: Vec<u32> = (self.inodes.iter())
            .filter(|&(ino, t)| ino >= UFS_ROOTINO && t.state == State::InUse)
            .map(|(ino, _)| ino)
            .collect();
        for ino in in_use {
            let dip = self.dinode(ino)?;
            let mut found = Vec::new();
            let mut read = BTreeSet::new();
            let (sb, dev, dups, seen) = (&self.sb, self.dev, &self.dups, &mut self.dup_seen);
            walk(sb, dev, &dip, &mut |ev| match ev {
                Event::Held(h) => {
                    if dups.range(h.fsb..h.fsb + h.frags).next().is_some() && seen.insert((ino, h.fsb)) {
                        found.push(Finding::DupBlock { ino, fsb: h.fsb });
                    }
                    if read.insert(h.fsb) {
                        Step::Go
                    } else {
                        Step::Skip
                    }
                }
                Event::Bad(_) => Step::Skip,
                Event::PastSize(_) => Step::Go,
            })?;
            self.findings.append(&mut found);
        }
        Ok(())
    }
}
