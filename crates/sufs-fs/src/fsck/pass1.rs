//! Pass 1, fsck_ffs's `pass1.c`: inodes and their blocks. First every group header, which must
//! decode and agree with the superblock (a header that does not is reported, and rebuilt by
//! repair from the computed maps); each group's superblock copy, header and inode table are
//! owned from the start. Then every inode of every inode table: an inode in use must have a
//! known type, a reservation's flags only as an immutable regular file, times whose nanoseconds
//! are under a second, and a size its type allows; its block map is walked, every pointer
//! claiming its block (`claim`, pass 1b: a pointer outside the data area or to a block already
//! owned is cleared), which gives its true block count and, for a directory, the map of its
//! blocks that pass 2 reads.

use super::{Finding, Ino, Loc, Result, Scan};
use crate::format::*;

/// Inode blocks pass 1 reads at a time (1 MiB with 4 KiB blocks).
const SCAN_RUN: u32 = 256;

/// `0..n` in runs of at most `max`: (first, length) of each.
fn runs(n: u32, max: u32) -> impl Iterator<Item = (u32, u32)> {
    (0..n).step_by(max as usize).map(move |first| (first, max.min(n - first)))
}

impl Scan<'_> {
    /// Pass 1: the group headers, then the inodes.
    pub(super) fn pass1(&mut self) -> Result<()> {
        self.check_groups()?;
        self.check_inodes()
    }

    /// Each group header decodes and agrees with the superblock (fsck_ffs's `check_cgmagic`);
    /// the group's superblock copy, header and inode table are owned.
    fn check_groups(&mut self) -> Result<()> {
        let sb = self.sb.clone();
        for cg in 0..sb.ngroups {
            let buf = self.read(sb.cg_header_block(cg))?;
            let h = match CgHeader::decode(&buf, cg) {
                Ok(h) if h.nblocks == sb.cg_blocks(cg) && h.ninodes == sb.inodes_per_group => Some(h),
                Ok(mut h) if let Some(extra) = crate::fs::growfs::grown_tail(&sb, cg, &h, &buf) => {
                    self.findings.push(Finding::GrowInterrupted { cg, extra });
                    // Checked as the superblock sizes the group: the extra blocks are free.
                    h.nblocks -= extra;
                    h.free_blocks -= extra;
                    Some(h)
                }
                Ok(h) => {
                    self.findings.push(Finding::BadCgHeader {
                        cg,
                        what: format!(
                            "{} blocks and {} inodes, the superblock says {} and {}",
                            h.nblocks,
                            h.ninodes,
                            sb.cg_blocks(cg),
                            sb.inodes_per_group
                        ),
                    });
                    None
                }
                Err(e) => {
                    self.findings.push(Finding::BadCgHeader { cg, what: e.to_string() });
                    None
                }
            };
            let map = &buf[CgHeader::inode_map_offset()..];
            let used = crate::alloc::last_set(map, sb.inodes_per_group as usize).map_or(0, |i| i as u32 + 1);
            self.map_used.push(used.next_multiple_of(sb.inodes_per_block()));
            self.cgs.push(h);
            for b in sb.cg_start(cg)..sb.cg_data_start(cg) {
                self.owned.set(b);
            }
        }
        Ok(())
    }

    /// The inodes of every group's initialized inode blocks, in large sequential reads; those
    /// in use are checked. A live inode past the header's count is damage (the count too low).
    fn check_inodes(&mut self) -> Result<()> {
        let sb = self.sb.clone();
        let ipb = sb.inodes_per_block();
        let mut buf = Vec::new();
        let bar = crate::progress::Bar::new("fsck", sb.ngroups as u64).with_message("groups' inodes");
        for cg in 0..sb.ngroups {
            bar.inc(1);
            let (stored, scan) = self.inode_range(cg);
            self.initialized.push(stored);
            self.scanned.push(scan);
            let mut last_live = None;
            for (first, n) in runs(scan / ipb, SCAN_RUN) {
                buf.resize(n as usize * self.bs, 0);
                self.dev.read_run(sb.cg_itable_block(cg) + first as u64, &mut buf)?;
                for (k, raw) in buf.chunks_exact(DINODE_SIZE).enumerate() {
                    let ino = cg * sb.inodes_per_group + first * ipb + k as u32;
                    let d = Dinode::decode(raw);
                    if ino >= FIRST_INO && !d.is_free() {
                        last_live = Some(ino % sb.inodes_per_group);
                        self.check_inode(ino, &d)?;
                    }
                }
            }
            let need = last_live.map_or(0, |i| (i + 1).next_multiple_of(ipb));
            if let Some(n) = stored.filter(|&n| n < need) {
                let actual = need as u64;
                self.findings.push(Finding::CgCountWrong { cg, what: "initialized inodes", stored: n as u64, actual });
            }
        }
        Ok(())
    }

    /// Which inodes of group `cg` pass 1 reads (fsck_ffs's `inosused`): the header's count of
    /// initialized inodes, and every inode up to the last one the inode map shows in use (so
    /// that a count too low loses no file); when preening after soft updates, whose maps are
    /// never behind the inodes, only up to that last one. A header that does not decode leaves
    /// the whole table to be read; a count that is not a whole number of blocks within the table
    /// is reported and the map alone decides. Returns the valid count and the inodes to read.
    fn inode_range(&mut self, cg: u32) -> (Option<u32>, u32) {
        let sb = &self.sb;
        let ipg = sb.inodes_per_group;
        let Some(h) = &self.cgs[cg as usize] else {
            return (None, ipg);
        };
        let used = self.map_used[cg as usize];
        let stored = sb.initialized_inodes(h.initialized);
        if stored.is_none() {
            let what = format!("{} initialized inodes: not a whole number of inode blocks of the table", h.initialized);
            self.findings.push(Finding::BadCgHeader { cg, what });
        }
        let trust_map = self.preen && sb.flags & SB_SOFTDEP != 0;
        match stored {
            Some(n) if !trust_map => (stored, n.max(used)),
            _ => (stored, used),
        }
    }

    /// An inode in use (fsck_ffs's `checkinode`): a known type, a reservation's flags, its
    /// blocks (claimed), its times, its size, its block count.
    fn check_inode(&mut self, ino: u32, d: &Dinode) -> Result<()> {
        let mut info = Ino { mode: d.mode, flags: d.flags, nlink: d.nlink, size: d.size, ..Default::default() };
        if d.flags & DI_UNMOVABLE != 0 && (d.flags & DI_IMMUTABLE == 0 || d.file_type() != S_IFREG) {
            let what = format!(
                "flagged unmovable (flags {:#x}, mode {:#o}) but not an immutable regular file",
                d.flags, d.mode
            );
            self.findings.push(Finding::BadReservation { ino, what });
            self.fixes.clear_br_flags.insert(ino);
        }
        if !matches!(d.file_type(), S_IFREG | S_IFDIR | S_IFLNK | S_IFIFO | S_IFCHR | S_IFBLK | S_IFSOCK) {
            self.findings.push(Finding::BadInode { ino, what: format!("unknown file type in mode {:#o}", d.mode) });
            info.bad = true;
            self.fixes.clear_inodes.insert(ino);
            self.inodes.insert(ino, info);
            return Ok(());
        }
        if d.has_blocks() {
            self.walk_inode(ino, d, &mut info)?;
        }
        self.check_ext_area(ino, d, &mut info)?;
        if let Some(&ns) = [d.atime_ns, d.mtime_ns, d.ctime_ns, d.btime_ns].iter().find(|&&n| n >= NSEC_PER_SEC) {
            // Any seconds value is a time; nanoseconds past a second are not.
            self.findings.push(Finding::BadInode { ino, what: format!("a time with {ns} nanoseconds") });
            self.fixes.fix_nsec.insert(ino);
        }
        self.check_size(ino, d, &mut info)?;
        if info.reach != d.blocks {
            self.findings.push(Finding::BlockCountWrong { ino, stored: d.blocks, actual: info.reach });
        }
        if info.kept != d.blocks {
            self.fixes.set_blocks.insert(ino, info.kept);
        }
        self.inodes.insert(ino, info);
        Ok(())
    }

    /// The size against what the type allows: a directory of size 0 gets back the extent its
    /// blocks show (or is cleared), a symbolic link past the longest target is cut at its
    /// first NUL, a size past the largest file is cut to the blocks, a directory's is rounded
    /// up to whole blocks.
    fn check_size(&mut self, ino: u32, d: &Dinode, info: &mut Ino) -> Result<()> {
        let bs = self.bs as u64;
        if d.is_dir() && d.size == 0 {
            // sufs never leaves a directory of size 0 with blocks (rmdir clears the size with
            // the pointers, mkdir writes both before the name): if its blocks hold a directory,
            // the size is what was lost, and is given back, so the tree below keeps its names.
            let n = self.dir_extent(ino, info)?;
            if n > 0 {
                info.size = n * bs;
                self.findings.push(Finding::BadInode {
                    ino,
                    what: format!("directory of size 0 whose first {n} blocks hold its entries"),
                });
                self.fixes.set_size.insert(ino, n * bs);
            } else {
                // Cleared; whether that is a violation depends on its names (pass 4).
                info.bad = true;
                info.zero_dir = true;
                self.fixes.clear_inodes.insert(ino);
            }
        } else if d.is_symlink() && d.size > MAX_SYMLINK as u64 {
            self.findings.push(Finding::BadInode {
                ino,
                what: format!("symbolic link of size {} (the longest is {MAX_SYMLINK})", d.size),
            });
            // The target as stored: up to its first NUL.
            let mut len = 0;
            if self.sb.is_data_block(d.db[0]) {
                let buf = self.read(d.db[0])?;
                let max = MAX_SYMLINK.min(self.bs);
                len = buf[..max].iter().position(|&c| c == 0).unwrap_or(max) as u64;
            }
            if len == 0 {
                info.bad = true;
                self.fixes.clear_inodes.insert(ino);
            } else {
                self.fixes.set_size.insert(ino, len);
            }
        } else if d.size > self.sb.max_file_size() {
            self.findings.push(Finding::BadInode {
                ino,
                what: format!("size {} beyond the largest file ({})", d.size, self.sb.max_file_size()),
            });
            let extent = info.max_lbn.map_or(0, |l| (l + 1) * bs);
            self.fixes.set_size.insert(ino, extent);
        } else if d.is_dir() && !d.size.is_multiple_of(bs) {
            self.findings.push(Finding::BadInode {
                ino,
                what: format!("directory size {} not a multiple of the block size", d.size),
            });
            self.fixes.set_size.insert(ino, d.size.div_ceil(bs) * bs);
        }
        Ok(())
    }

    /// How many blocks from the first of directory `ino` hold directory chunks that parse (the
    /// first one starting with "." naming `ino`).
    fn dir_extent(&self, ino: u32, info: &Ino) -> Result<u64> {
        let mut n = 0;
        for &(lbn, bno, _) in &info.dir_map {
            if lbn != n {
                break;
            }
            let buf = self.read(bno)?;
            let parses = buf.chunks(DIRBLKSIZ).all(|c| dir_iter(c).all(|r| r.is_ok()));
            let dot =
                lbn > 0 || matches!(dir_iter(&buf[..DIRBLKSIZ]).next(), Some(Ok(e)) if e.ino == ino && e.name == b".");
            if !parses || !dot {
                break;
            }
            n += 1;
        }
        Ok(n)
    }

    /// Claims a data block at logical block `lbn`; a directory's go in its block map.
    fn claim_data(&mut self, info: &mut Ino, ino: u32, bno: u64, loc: Loc, lbn: u64) {
        if bno == BLK_NOCOPY && info.flags & DI_SNAPSHOT != 0 {
            return; // a snapshot's "not in use at snapshot time": no block
        }
        if self.claim(info, ino, bno, loc) {
            info.max_lbn = Some(info.max_lbn.map_or(lbn, |m| m.max(lbn)));
            if info.is_dir() {
                info.dir_map.push((lbn, bno, loc));
            }
        }
    }

    /// The extended-attribute area (any type of inode may have one): its size within two
    /// blocks, a pointer in the data area for each block of it and none past it, blocks no one
    /// else owns, records that decode. Anything else is a finding, and repair drops the area
    /// (its blocks, left unowned, go back to the free map in pass 5).
    fn check_ext_area(&mut self, ino: u32, d: &Dinode, info: &mut Ino) -> Result<()> {
        if d.extsize == 0 && d.extb == [0; NXADDR] {
            return Ok(());
        }
        let size = d.extsize as usize;
        let n = size.div_ceil(self.bs);
        let blocks = &d.extb[..n.min(NXADDR)];
        let in_range = d.ext_blocks().filter(|&b| self.sb.is_data_block(b)).count() as u64;
        let finding = if size > NXADDR * self.bs || (0..NXADDR).any(|i| (i < n) != (d.extb[i] != 0)) {
            Finding::BadInode { ino, what: format!("attribute area of {size} bytes in blocks {:?}", d.extb) }
        } else if let Some(&bno) = blocks.iter().find(|&&b| !self.sb.is_data_block(b)) {
            Finding::BadPointer { ino, bno }
        } else if let Some((_, &bno)) =
            blocks.iter().enumerate().find(|&(i, &b)| self.owned.get(b) || blocks[..i].contains(&b))
        {
            Finding::DuplicateBlock { ino, bno }
        } else {
            let mut area = Vec::with_capacity(size);
            for (i, &b) in blocks.iter().enumerate() {
                area.extend_from_slice(&self.read(b)?[..self.bs.min(size - i * self.bs)]);
            }
            match decode_ext_area(&area) {
                Ok(_) => {
                    for &b in blocks {
                        self.owned.set(b);
                    }
                    info.reach += n as u64;
                    info.kept += n as u64;
                    return Ok(());
                }
                Err(e) => Finding::BadInode { ino, what: e.to_string() },
            }
        };
        self.findings.push(finding);
        info.reach += in_range;
        self.fixes.clear_ext.insert(ino);
        Ok(())
    }

    /// Walks the block map of inode `ino`: direct blocks, then each indirect tree.
    fn walk_inode(&mut self, ino: u32, d: &Dinode, info: &mut Ino) -> Result<()> {
        for (i, &b) in d.db.iter().enumerate() {
            self.claim_data(info, ino, b, Loc::Inode { ino, slot: i }, i as u64);
        }
        let p = self.sb.ptrs_per_block();
        let mut base = NDADDR as u64;
        let mut span = p;
        for (level, &b) in d.ib.iter().enumerate() {
            let loc = Loc::Inode { ino, slot: NDADDR + level };
            if self.claim(info, ino, b, loc) {
                self.walk_ind(info, ino, b, level, base, span / p)?;
            }
            base += span;
            span = span.saturating_mul(p);
        }
        Ok(())
    }

    /// Walks indirect block `bno` of `level` (0 = single) whose first pointer maps logical
    /// block `base`, each pointer covering `per` data blocks.
    fn walk_ind(&mut self, info: &mut Ino, ino: u32, bno: u64, level: usize, base: u64, per: u64) -> Result<()> {
        let buf = self.read(bno)?;
        let p = self.sb.ptrs_per_block();
        for idx in 0..p as usize {
            let c = ind_get(&buf, idx);
            if c == 0 {
                continue;
            }
            let lbn = base + idx as u64 * per;
            let loc = Loc::Ind { bno, idx };
            if level == 0 {
                self.claim_data(info, ino, c, loc, lbn);
            } else if self.claim(info, ino, c, loc) {
                self.walk_ind(info, ino, c, level - 1, lbn, per / p)?;
            }
        }
        Ok(())
    }
}
