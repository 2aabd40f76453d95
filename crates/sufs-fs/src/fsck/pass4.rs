//! Pass 4, fsck_ffs's `pass4.c`: link counts. Each inode in use against the entries that name
//! it (counted by passes 2 and 3): a file no entry names is unreferenced (an empty one, a
//! reservation being freed, or any under preen is cleared; the others are reconnected to
//! lost+found by repair); a count too low is a violation, one too high allowed (soft updates
//! lowers a count only after the name is gone); either is set to the entries found. A
//! directory of size 0 that pass 1 could not give a size back is judged here by its names: none
//! and no blocks is an rmdir's window (unreferenced), otherwise damage. fsck_ffs's `adjust` and
//! `clri` are repair's.

use super::{Finding, Scan};
use crate::format::*;

impl Scan<'_> {
    /// Pass 4: each inode in use against the entries naming it.
    pub(super) fn pass4(&mut self) {
        let mut found = Vec::new();
        for (&ino, info) in &self.inodes {
            if info.zero_dir && ino != ROOT_INO {
                // Unnamed: an rmdir's window, or (holding blocks) a directory soft updates had
                // not made reachable yet: its first block's pointer and its size rolled back
                // while later blocks' pointers were on disk, and no entry naming it (the
                // entry waits for that first block: MKDIR_BODY). Nothing named is lost: a leak.
                // Named: damage.
                if info.links == 0 {
                    found.push(Finding::UnreferencedInode { ino, mode: info.mode, size: info.size });
                } else {
                    let what =
                        format!("directory of size 0 ({} names, {} blocks, none a directory's)", info.links, info.kept);
                    found.push(Finding::BadInode { ino, what });
                }
                continue;
            }
            if info.bad || info.orphan || self.fixes.clear_inodes.contains(&ino) {
                continue;
            }
            if info.links == 0 && !info.is_dir() {
                found.push(Finding::UnreferencedInode { ino, mode: info.mode, size: info.size });
                // A reservation without a name was being freed (brfree): its blocks go.
                let reservation = info.flags & DI_UNMOVABLE != 0;
                if self.preen || reservation || (info.size == 0 && info.kept == 0) {
                    self.fixes.clear_inodes.insert(ino);
                } else if self.target.is_some() {
                    self.fixes.reconnect.push(ino);
                }
                continue;
            }
            if info.nlink < info.links {
                found.push(Finding::LinkCountTooLow { ino, stored: info.nlink, actual: info.links });
            } else if info.nlink > info.links {
                found.push(Finding::LinkCountTooHigh { ino, stored: info.nlink, actual: info.links });
            }
            if info.nlink != info.links {
                self.fixes.set_nlink.insert(ino, info.links);
            }
        }
        self.findings.extend(found);
    }
}
