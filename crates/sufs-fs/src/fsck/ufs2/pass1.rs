//! Pass 1, fsck_ffs's pass1.c with inode.c's `ckinode`, `iblock` and `chkrange`: every inode
//! below each group's `cg_initediblk` (all of a group whose header is unreadable) is read and
//! checked, and every fragment it holds is claimed in the file system's bitmap. A free inode
//! must be zero; an inode in use needs a known type and, if the file system keeps them, its
//! check hash. Its block pointers must lie in data space, out of the metadata; all but the last
//! direct block of the file are whole blocks, and the last is the fragments its size reaches,
//! inside one block (`sblksize`). Pointers past the size, for the direct blocks and for the
//! indirect levels, are refused (indirect blocks may map blocks past the end: FreeBSD's
//! truncate-up allocates the block holding the last byte). `di_blocks` must count every
//! fragment held, data, indirect and extended-attribute, in 512-byte sectors. A short symbolic
//! link holds no blocks and nothing after its target. A snapshot's map (`SF_SNAPSHOT`) holds
//! the markers `BLK_NOCOPY` and `BLK_SNAP`, which are skipped as fsck_ffs's `pass1check` skips
//! them, and holes anywhere: its size is the file system's.

use super::*;
use crate::format::DT_DIR;

/// fsck_ffs's `MAXBAD` and `MAXDUP`: an inode with more bad or duplicate pointers than this is
/// not walked further.
const MAXBAD: u32 = 10;
const MAXDUP: u32 = 10;

/// Blocks of inodes pass 1 reads at once (2 MiB with 32 KiB blocks): one read for the inodes
/// newfs initialized in a group, few for a full group.
const INODE_READ_BLOCKS: u32 = 64;

/// A run of fragments an inode holds: a data block (`level` 0; `lbn` -1 - i for block i of the
/// extended-attribute area) or an indirect block (`level` 1 to 3, `lbn` the first logical
/// block it maps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Held {
    pub fsb: i64,
    pub frags: i64,
    pub lbn: i64,
    pub level: u32,
}

/// What the walk of an inode's blocks meets.
pub(super) enum Event {
    /// A run in range, to be claimed.
    Held(Held),
    /// A run `chkrange` refuses: outside data space, into the summary area, or crossing its
    /// block. Never read.
    Bad(Held),
    /// A pointer the inode's size does not reach.
    PastSize(String),
}

/// What the walk does after an event: go on (and read an indirect block), skip it (do not read
/// it), or stop walking the inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Go,
    Skip,
    Stop,
}

/// fsck_ffs's `chkrange`: `frags` fragments at `fsb` lie in one block of data space, and not in
/// the summary area.
fn in_range(sb: &Superblock, fsb: i64, frags: i64) -> bool {
    let frag = sb.fs_frag as i64;
    let cs_end = sb.fs_csaddr + howmany(sb.fs_cssize as i64, sb.fs_fsize as i64);
    (1..=frag).contains(&frags)
        && sb.check_blkno(fsb, (frags * sb.fs_fsize as i64) as u64)
        && sb.fragnum(fsb) + frags <= frag
        && (fsb + frags <= sb.fs_csaddr || fsb >= cs_end)
}

fn leaf(sb: &Superblock, h: Held, f: &mut dyn FnMut(Event) -> Step) -> Step {
    if in_range(sb, h.fsb, h.frags) {
        f(Event::Held(h))
    } else {
        f(Event::Bad(h))
    }
}

/// The fragments of the last of `n` blocks of an area of `size` bytes (the tail of a file or of
/// its extended-attribute area), or of a whole block.
fn frags_of(sb: &Superblock, size: u64, i: u64, n: u64) -> i64 {
    if i + 1 == n && sb.blkoff(size) != 0 {
        sb.numfrags(sb.fragroundup(sb.blkoff(size)))
    } else {
        sb.fs_frag as i64
    }
}

/// Whether `p`, a data pointer of an inode that `snap` says is a snapshot, is a marker.
fn marker(snap: bool, p: i64) -> bool {
    snap && (p == BLK_NOCOPY || p == BLK_SNAP)
}

/// Walks every block `dip` holds (`ckinode`): the extended-attribute area, the direct blocks,
/// then the indirect trees, an indirect block read only when `f` answers `Go` for it. Short
/// symbolic links and devices hold none, a snapshot's markers neither. The depth is at most
/// three indirect levels.
pub(super) fn walk<D: ReadAt + ?Sized>(
    sb: &Superblock,
    dev: &D,
    dip: &Dinode,
    f: &mut dyn FnMut(Event) -> Step,
) -> Result<(), Ufs2Error> {
    let bsize = sb.fs_bsize as u64;
    let extsize = dip.di_extsize as u64;
    let nxb = extsize.div_ceil(bsize);
    for (i, &p) in dip.di_extb.iter().enumerate() {
        if p == 0 {
            continue;
        }
        let i = i as u64;
        if i >= nxb
            && f(Event::PastSize(format!("extended-attribute block {i} past di_extsize {extsize}"))) == Step::Stop
        {
            return Ok(());
        }
        let h = Held { fsb: p, frags: frags_of(sb, extsize, i, nxb), lbn: -1 - i as i64, level: 0 };
        if leaf(sb, h, f) == Step::Stop {
            return Ok(());
        }
    }
    let ft = dip.file_type();
    if ft == IFCHR || ft == IFBLK || dip.shortlink(sb).is_some() {
        return Ok(());
    }
    let size = dip.di_size;
    let ndb = size.div_ceil(bsize);
    let snap = dip.di_flags & SF_SNAPSHOT != 0;
    for (i, &p) in dip.di_db.iter().enumerate() {
        if p == 0 || marker(snap, p) {
            continue;
        }
        let i = i as u64;
        if i >= ndb && f(Event::PastSize(format!("direct block {i} past the size {size}"))) == Step::Stop {
            return Ok(());
        }
        let h = Held { fsb: p, frags: frags_of(sb, size, i, ndb), lbn: i as i64, level: 0 };
        if leaf(sb, h, f) == Step::Stop {
            return Ok(());
        }
    }
    // The indirect levels the size may use, counted as fsck_ffs's pass 1 counts them.
    let nindir = sb.nindir() as u64;
    let (mut n, mut levels) = (ndb.saturating_sub(UFS_NDADDR as u64), 0);
    while n > 0 {
        levels += 1;
        n /= nindir;
    }
    let mut first = UFS_NDADDR as i64;
    for level in 1..=UFS_NIADDR as u32 {
        let p = dip.di_ib[level as usize - 1];
        if p != 0 {
            if level > levels
                && f(Event::PastSize(format!("indirect block of level {level} past the size {size}"))) == Step::Stop
            {
                return Ok(());
            }
            if indirect(sb, dev, level, p, first, snap, f)? == Step::Stop {
                return Ok(());
            }
        }
        first += sb.nindir().pow(level);
    }
    Ok(())
}

/// `iblock`: an indirect block of `level` at `p` mapping logical blocks from `first` (of a
/// snapshot if `snap`).
fn indirect<D: ReadAt + ?Sized>(
    sb: &Superblock,
    dev: &D,
    level: u32,
    p: i64,
    first: i64,
    snap: bool,
    f: &mut dyn FnMut(Event) -> Step,
) -> Result<Step, Ufs2Error> {
    assert!((1..=UFS_NIADDR as u32).contains(&level), "indirect level {level}");
    let frag = sb.fs_frag as i64;
    match leaf(sb, Held { fsb: p, frags: frag, lbn: first, level }, f) {
        Step::Go => {}
        s => return Ok(s),
    }
    let mut b = vec![0u8; sb.fs_bsize as usize];
    dev.read_exact_at(&mut b, sb.fsb_offset(p))?;
    let each = sb.nindir().pow(level - 1);
    for (i, c) in b.chunks_exact(8).enumerate() {
        let q = i64::get(c, 0);
        if q == 0 || (level == 1 && marker(snap, q)) {
            continue;
        }
        let lbn = first + i as i64 * each;
        let s = if level == 1 {
            leaf(sb, Held { fsb: q, frags: frag, lbn, level: 0 }, f)
        } else {
            indirect(sb, dev, level - 1, q, lbn, snap, f)?
        };
        if s == Step::Stop {
            return Ok(Step::Stop);
        }
    }
    Ok(Step::Go)
}

impl<D: ReadAt + ?Sized> Check<'_, D> {
    /// Reads group `c`'s block: its check hash and its header, as `Cg::decode` checks them.
    fn read_cg(&mut self, c: u32) -> Result<Option<Cg>, Ufs2Error> {
        let b = self.read(self.sb.cgtod(c), self.sb.fs_cgsize as usize)?;
        if let Some(g) = self.grown_last_cg(c, &b) {
            return Ok(Some(g));
        }
        let g = match Cg::decode(&b, &self.sb, c, true) {
            Err(Ufs2Error::CheckHash { stored, computed, .. }) => {
                self.find(Finding::CgCheckHash { cg: c, stored, computed });
                Cg::decode(&b, &self.sb, c, false)
            }
            r => r,
        };
        Ok(match g {
            Ok(g) => Some(g),
            Err(e) => {
                self.find(Finding::BadCg { cg: c, what: e.to_string() });
                None
            }
        })
    }

    /// The last group's block as an interrupted growfs leaves it (the header written, the
    /// superblock not yet, `format::ufs2::growfs`): `cg_ndblk` more than the superblock gives
    /// the group, at most `fs_fpg`, every fragment past the superblock's end free, and counts
    /// that are the map's. Found as `GrowInterrupted` (allowed) and answered cut back to the
    /// superblock's size, as repair writes it; anything else is left to `Cg::decode` to refuse.
    fn grown_last_cg(&mut self, c: u32, b: &[u8]) -> Option<Cg> {
        let sb = &self.sb;
        let want = (sb.fs_size - sb.cgbase(c)).min(sb.fs_fpg as i64) as u32;
        let ndblk = Cg::peek_ndblk(b)?;
        if c + 1 != sb.fs_ncg || ndblk <= want || ndblk > sb.fs_fpg as u32 {
            return None;
        }
        let mut grown = sb.fs.clone();
        grown.fs_size = sb.cgbase(c) + ndblk as i64;
        let mut g = Cg::decode(b, &grown, c, true).ok()?;
        let m = g.map_counts();
        let cs = g.hdr.cg_cs;
        let consistent =
            (m.nbfree, m.nffree) == (cs.cs_nbfree as u32, cs.cs_nffree as u32) && m.frsum == g.hdr.cg_frsum;
        if !consistent || !(want..ndblk).all(|f| g.frag_free(f)) {
            return None;
        }
        g.resize(want);
        self.find(Finding::GrowInterrupted { cg: c, ndblk, fs_ndblk: want });
        Some(g)
    }

    pub(super) fn pass1(&mut self) -> Result<(), Ufs2Error> {
        let (ipg, inopb) = (self.sb.fs_ipg, self.sb.inopb());
        for c in 0..self.sb.fs_ncg {
            let g = self.read_cg(c)?;
            let n = g.as_ref().map_or(ipg, |g| g.hdr.cg_initediblk);
            self.cgs.push(g);
            self.inodes.add_group(n);
            let mut i = 0;
            while i < n {
                // `INODE_READ_BLOCKS` blocks of inodes a read: a group's inode blocks follow
                // each other from `cgimin`, and `ipg` is a multiple of `inopb`.
                let first = c * ipg + i;
                let cnt = (n - i).min(inopb * INODE_READ_BLOCKS);
                let b = self.read(self.sb.ino_to_fsba(first), cnt as usize * UFS2_DINODE_SIZE)?;
                for (k, raw) in b.chunks_exact(UFS2_DINODE_SIZE).enumerate() {
                    let ino = first + k as u32;
                    if ino >= UFS_ROOTINO {
                        self.inode(ino, &Dinode::decode(raw)?)?;
                    }
                }
                i += cnt;
            }
        }
        Ok(())
    }

    /// Checks inode `ino` and claims its blocks.
    fn inode(&mut self, ino: u32, dip: &Dinode) -> Result<(), Ufs2Error> {
        if dip.di_mode == 0 {
            let any = |p: &[i64]| p.iter().any(|&b| b != 0);
            if dip.di_size != 0 || dip.di_extsize != 0 || any(&dip.di_db) || any(&dip.di_ib) || any(&dip.di_extb) {
                self.find(Finding::PartiallyAllocated { ino });
            }
            return Ok(());
        }
        if self.sb.has_ckhash(CK_INODE) {
            let computed = dip.compute_ckhash();
            if computed != dip.di_ckhash {
                self.find(Finding::InodeCheckHash { ino, stored: dip.di_ckhash, computed });
            }
        }
        let dtype = dtype_of(dip.di_mode);
        let info = self.inodes.get_mut(ino).expect("pass 1 made room for the inodes of its group");
        (info.nlink, info.mode, info.size, info.dtype) = (dip.di_nlink, dip.di_mode, dip.di_size, dtype);
        info.unmovable = dip.di_spare[0] & crate::format::DI_UNMOVABLE != 0;
        info.immutable = dip.di_flags & crate::format::layout::SF_IMMUTABLE != 0;
        if info.unmovable {
            self.unmovable_blocks.insert(ino, dip.di_blocks);
        }
        if dtype == crate::format::DT_UNKNOWN {
            info.state = State::Bad;
            self.find(Finding::UnknownType { ino, mode: dip.di_mode });
            return Ok(());
        }
        info.state = State::InUse;
        self.pointer_rules(ino, dip);
        let is_dir = dtype == DT_DIR;
        // A directory of size 0 is fsck_ffs's "ZERO LENGTH DIR", cleared in pass 4: a crash
        // under soft updates leaves one whose first block never reached the disk, and no name
        // reaches it (pass 2 reports a name that does).
        if is_dir && !dip.di_size.is_multiple_of(crate::format::DIRBLKSIZ as u64) {
            self.find(Finding::DirLength { ino, size: dip.di_size });
        }

        let (mut held, mut bad, mut dup, mut lballoc) = (0i64, 0u32, 0u32, -1i64);
        let mut excessive = None;
        let mut found = Vec::new();
        let mut dir_blocks = Vec::new();
        let (sb, dev) = (&self.sb, self.dev);
        let (claimed, dups, dup_seen) = (&mut self.claimed, &mut self.dups, &mut self.dup_seen);
        walk(sb, dev, dip, &mut |ev| match ev {
            Event::PastSize(what) => {
                found.push(Finding::BadInode { ino, what });
                Step::Go
            }
            Event::Bad(h) => {
                found.push(Finding::BadBlock { ino, fsb: h.fsb, frags: h.frags });
                bad += 1;
                if bad > MAXBAD {
                    excessive = Some("BAD");
                    Step::Stop
                } else {
                    Step::Skip
                }
            }
            Event::Held(h) => {
                held += h.frags;
                let mut fresh = true;
                for f in h.fsb..h.fsb + h.frags {
                    if claimed.get(f) {
                        dups.insert(f);
                        fresh = false;
                    } else {
                        claimed.set(f);
                    }
                }
                if !fresh {
                    dup += 1;
                    if dup_seen.insert((ino, h.fsb)) {
                        found.push(Finding::DupBlock { ino, fsb: h.fsb });
                    }
                }
                if h.level == 0 && h.lbn >= 0 {
                    lballoc = lballoc.max(h.lbn);
                    if is_dir {
                        dir_blocks.push((h.lbn, h.fsb, h.frags));
                    }
                }
                if dup > MAXDUP {
                    excessive = Some("DUP");
                    Step::Stop
                } else if fresh {
                    Step::Go
                } else {
                    // A duplicate indirect block is not read: its pointers were claimed by
                    // its first owner (and a tree of pointers to one block ends here).
                    Step::Skip
                }
            }
        })?;
        self.findings.append(&mut found);
        if let Some(what) = excessive {
            self.find(Finding::Excessive { ino, what });
        }
        if bad == 0 && excessive.is_none() {
            let actual = held as u64 * (self.sb.fs_fsize / DEV_BSIZE) as u64;
            if dip.di_blocks != actual {
                self.find(Finding::BlockCount { ino, stored: dip.di_blocks, actual });
            }
            if dip.di_extsize > 0 {
                let area = FileReader::new(&self.sb, self.dev, dip, ino).read_ext();
                if let Err(e) = area.and_then(|a| decode_extattrs(&a, &self.sb)) {
                    self.find(Finding::BadExtAttr { ino, what: e.to_string() });
                }
            }
        }
        // No file ends in a hole. Soft updates rolls back the pointers of indirect blocks not
        // yet written, not the size: past the direct blocks a crash may leave one.
        let bsize = self.sb.fs_bsize as u64;
        let size = dip.di_size;
        let snap = dip.di_flags & SF_SNAPSHOT != 0;
        if !snap && size > 0 && dip.shortlink(&self.sb).is_none() && lballoc < self.sb.lblkno(size - 1) {
            let should = self.sb.lblktosize(lballoc + 1);
            let indirect = size > UFS_NDADDR as u64 * bsize;
            self.find(Finding::SizeBeyondAllocated { ino, size, should, indirect });
        }
        if is_dir {
            self.dir_blocks.insert(ino, dir_blocks);
        }
        Ok(())
    }

    /// The pointer fields of inodes that hold no blocks: a device keeps its number in
    /// `di_db[0]` and nothing else; a short symbolic link's target fills the pointers it
    /// reaches and no more (fsck_ffs fakes the block count for it to check just that).
    fn pointer_rules(&mut self, ino: u32, dip: &Dinode) {
        let ft = dip.file_type();
        let ptrs: Vec<i64> = dip.di_db.iter().chain(&dip.di_ib).copied().collect();
        let (from, what) = if ft == IFCHR || ft == IFBLK {
            (1, "a device with block pointers past its device number")
        } else if dip.shortlink(&self.sb).is_some() {
            (dip.di_size.div_ceil(8) as usize, "bytes after the short symbolic link's target")
        } else {
            return;
        };
        if ptrs[from..].iter().any(|&p| p != 0) {
            self.find(Finding::BadInode { ino, what: what.into() });
        }
    }
}
