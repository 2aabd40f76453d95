//! Pass 5, fsck_ffs's `pass5.c`: maps and summary counts. The ownership map computed by pass 1
//! and the inodes in use against each group's block and inode bitmaps (a bit set for nothing is
//! a leak, allowed; a bit clear for something in use is a violation) and against the header's
//! counts; the superblock's snapshot list against the snapshot inodes; the superblock's summary
//! counts against the sums. Repair rewrites every header and the superblock from the computed
//! maps (`Scan::apply`).

use super::scan::map_word;
use super::{Finding, Scan};
use crate::format::*;

impl Scan<'_> {
    /// Pass 5: every group, the snapshot list, the summary counts.
    pub(super) fn pass5(&mut self) {
        let sb = self.sb.clone();
        let mut found = Vec::new();
        let mut free_blocks = 0u64;
        let mut free_inodes = 0u64;
        for cg in 0..sb.ngroups {
            let (fb, fi) = self.check_group(cg, &mut found);
            free_blocks += fb;
            free_inodes += fi;
        }
        self.check_snapshot_list(&mut found);
        let ndirs = self.inodes.values().filter(|i| i.is_dir()).count() as u64;
        for (what, stored, actual) in [
            ("free blocks", sb.free_blocks, free_blocks),
            ("free inodes", sb.free_inodes, free_inodes),
            ("directories", sb.ndirs, ndirs),
        ] {
            if stored != actual {
                found.push(Finding::SummaryWrong { what, stored, actual });
            }
        }
        self.findings.extend(found);
    }

    /// Group `cg`'s bitmaps and counts (if its header decoded) against the computed ones.
    /// Returns the group's free blocks and inodes as computed.
    fn check_group(&self, cg: u32, found: &mut Vec<Finding>) -> (u64, u64) {
        let sb = &self.sb;
        let ipg = sb.inodes_per_group;
        let start = sb.cg_start(cg);
        let nblocks = sb.cg_blocks(cg);
        let used_b = self.owned_in(start, nblocks as u64);
        let first = cg * ipg;
        let reserved = FIRST_INO.saturating_sub(first).min(ipg) as u64;
        let used_i = reserved + self.inodes.range(first..first + ipg).count() as u64;
        let computed = (nblocks as u64 - used_b, (ipg as u64) - used_i);
        let Some(h) = &self.cgs[cg as usize] else {
            return computed;
        };
        let buf = match self.read(sb.cg_header_block(cg)) {
            Ok(buf) => buf,
            Err(e) => {
                found.push(Finding::BadCgHeader { cg, what: format!("read again: {e}") });
                return computed;
            }
        };
        let (free_i, leaked_i, dirs) = self.check_inode_map(cg, &buf[CgHeader::inode_map_offset()..], found);
        let free_b = self.check_block_map(cg, &buf[CgHeader::block_map_offset(ipg)..], found);
        if h.free_blocks as u64 != free_b {
            found.push(Finding::CgCountWrong { cg, what: "free blocks", stored: h.free_blocks as u64, actual: free_b });
        }
        if h.free_inodes as u64 != free_i {
            found.push(Finding::CgCountWrong { cg, what: "free inodes", stored: h.free_inodes as u64, actual: free_i });
        }
        // A leaked inode may have been a directory whose count is still in the header (a
        // crash between the inode and the bitmap writes): that discrepancy is the leak's.
        let nd = h.ndirs as u64;
        if nd < dirs || nd > dirs + leaked_i {
            found.push(Finding::CgCountWrong { cg, what: "directories", stored: nd, actual: dirs });
        }
        computed
    }

    /// Owned blocks among `start .. start + n`: whole words where `start` is word-aligned (as
    /// mkfs's groups, of a multiple of 64 blocks, are), else one bit at a time.
    fn owned_in(&self, start: u64, n: u64) -> u64 {
        if !start.is_multiple_of(64) {
            return (start..start + n).filter(|&b| self.owned.get(b)).count() as u64;
        }
        let words = n.div_ceil(64);
        (0..words)
            .map(|w| {
                let valid = (n - w * 64).min(64);
                let mask = if valid == 64 { u64::MAX } else { (1u64 << valid) - 1 };
                (self.owned.word(start / 64 + w) & mask).count_ones() as u64
            })
            .sum()
    }

    /// Group `cg`'s inode bitmap `imap` against the inodes in use: the set bits, then the
    /// inodes fsck found in the group (the findings in inode order). Returns the bits clear, the
    /// leaked inodes (bit set, inode free), and the directories in use.
    fn check_inode_map(&self, cg: u32, imap: &[u8], found: &mut Vec<Finding>) -> (u64, u64, u64) {
        let ipg = self.sb.inodes_per_group;
        let first = cg * ipg;
        let mut here: Vec<(u32, Finding)> = Vec::new();
        let mut set = 0u64;
        for w in 0..(ipg as usize).div_ceil(64) {
            let mut bits = map_word(imap, w, ipg as usize);
            set += bits.count_ones() as u64;
            while bits != 0 {
                let ino = first + (w * 64) as u32 + bits.trailing_zeros();
                bits &= bits - 1;
                if ino >= FIRST_INO && !self.inodes.contains_key(&ino) {
                    here.push((ino, Finding::LeakedInode { ino }));
                }
            }
        }
        let leaked_i = here.len() as u64;
        // Inodes 0 and 1 are always in use.
        for ino in (first..first + ipg).take_while(|&i| i < FIRST_INO) {
            if !bit_get(imap, (ino - first) as usize) {
                here.push((ino, Finding::InodeUsedButFree { ino }));
            }
        }
        let mut dirs = 0u64;
        for (&ino, info) in self.inodes.range(first..first + ipg) {
            dirs += info.is_dir() as u64;
            if !bit_get(imap, (ino - first) as usize) {
                here.push((ino, Finding::InodeUsedButFree { ino }));
            }
        }
        here.sort_by_key(|(ino, _)| *ino);
        found.extend(here.into_iter().map(|(_, f)| f));
        (ipg as u64 - set, leaked_i, dirs)
    }

    /// Group `cg`'s block bitmap `bmap` against the computed ownership, a word at a time where
    /// the group starts on a word (bit by bit only in a word that differs). Returns the bits
    /// clear.
    fn check_block_map(&self, cg: u32, bmap: &[u8], found: &mut Vec<Finding>) -> u64 {
        let start = self.sb.cg_start(cg);
        let n = self.sb.cg_blocks(cg) as usize;
        let mut free_b = 0u64;
        let differs = |idx: usize, bit: bool, found: &mut Vec<Finding>| {
            let bno = start + idx as u64;
            match (bit, self.owned.get(bno)) {
                (true, false) => found.push(Finding::LeakedBlock { bno }),
                (false, true) => found.push(Finding::BlockUsedButFree { bno }),
                _ => {}
            }
        };
        if !start.is_multiple_of(64) {
            for idx in 0..n {
                let bit = bit_get(bmap, idx);
                free_b += !bit as u64;
                differs(idx, bit, found);
            }
            return free_b;
        }
        for w in 0..n.div_ceil(64) {
            let disk = map_word(bmap, w, n);
            let valid = (n - w * 64).min(64);
            free_b += valid as u64 - disk.count_ones() as u64;
            let mask = if valid == 64 { u64::MAX } else { (1u64 << valid) - 1 };
            let mut diff = (disk ^ self.owned.word(start / 64 + w as u64)) & mask;
            while diff != 0 {
                let idx = w * 64 + diff.trailing_zeros() as usize;
                diff &= diff - 1;
                differs(idx, bit_get(bmap, idx), found);
            }
        }
        free_b
    }

    /// The superblock's snapshot list names each snapshot once, an inode in use flagged as a
    /// snapshot of the file system's size; an entry that does not is dropped by repair.
    fn check_snapshot_list(&mut self, found: &mut Vec<Finding>) {
        let sb = &self.sb;
        let size = sb.num_blocks * sb.block_size as u64;
        for (slot, &ino) in sb.snapshots.iter().enumerate().filter(|(_, &i)| i != 0) {
            let what = match self.inodes.get(&ino) {
                _ if sb.snapshots[..slot].contains(&ino) => Some("listed twice"),
                None => Some("not an inode in use"),
                Some(i) if i.flags & DI_SNAPSHOT == 0 => Some("not flagged as a snapshot"),
                Some(i) if i.size != size => Some("not the size of the file system"),
                Some(_) => None,
            };
            if let Some(what) = what {
                found.push(Finding::BadSnapshotList { slot, ino, what });
                self.fixes.drop_snapshots.insert(slot);
            }
        }
    }
}
