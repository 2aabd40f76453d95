//! Pass 1b, fsck_ffs's `pass1b.c`: blocks claimed twice. fsck_ffs notes each duplicate in
//! pass 1, rescans every inode in pass 1b to find the block's first claimant too, and offers to
//! clear every inode holding one. sufs keeps the first claimant (in inode order, then pointer
//! order) and clears only the later pointer: the later file loses that block, no inode is
//! cleared. The first claimant needs no rescan, so pass 1b is this decision, taken by pass 1
//! as it claims each pointer (`claim`), with the check of the pointer's range (fsck_ffs's
//! `chkrange`).

use super::{Finding, Ino, Loc, Scan};

impl Scan<'_> {
    /// Claims a block for `ino`; returns true if the pointer owns it (and may be followed).
    pub(super) fn claim(&mut self, info: &mut Ino, ino: u32, bno: u64, loc: Loc) -> bool {
        if bno == 0 {
            return false;
        }
        if !self.sb.is_data_block(bno) {
            self.findings.push(Finding::BadPointer { ino, bno });
            self.fixes.ptr_clears.push(loc);
            return false;
        }
        info.reach += 1;
        if self.owned.get(bno) {
            self.findings.push(Finding::DuplicateBlock { ino, bno });
            self.fixes.ptr_clears.push(loc);
            return false;
        }
        self.owned.set(bno);
        info.kept += 1;
        true
    }
}
