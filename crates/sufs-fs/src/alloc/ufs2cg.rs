//! The allocator's work on the groups (FreeBSD's `ffs_alloc.c` around `ffs_alloccg`). The
//! group is chosen from the in-memory summaries (`mod.rs`); the call then decodes the
//! group's block from the cache, lets `CgAlloc` (FFS's allocator for one group, in fragments)
//! change it, and puts it back in the buffer, whose check hash the write hooks reseal on its way
//! to the disk. `fs_cstotal` moves in `Alloc::ufs2`, from which the superblock is written.
//!
//! Every group is checked whole once, at a read-write mount (`CgAlloc::new`): a group whose
//! header disagrees with its maps is refused until fsck. After that each change keeps the
//! group consistent (`CgAlloc::resume`; debug builds check it after every change).

use super::*;
use crate::format::ufs2::{Cg, CgAlloc, CgAllocError};

impl Alloc {
    /// The counts of the image's groups, each group decoded and checked (magic, index,
    /// counts, check hash) as FreeBSD's `ffs_getcg` does, and when `writable` checked whole as
    /// the allocator needs it. `fs_cstotal` is taken from the groups (the superblock's may be
    /// stale after a crash).
    pub fn load(cache: &mut Cache, sb: &Superblock, writable: bool) -> Result<Alloc, AllocError> {
        let u = sb.ufs2();
        let mut fs = Box::new(u.clone());
        let t = &mut fs.fs_cstotal;
        (t.cs_nbfree, t.cs_nffree, t.cs_nifree, t.cs_ndir) = (0, 0, 0, 0);
        let mut sums = Vec::with_capacity(sb.ngroups as usize);
        for cg in 0..sb.ngroups {
            let mut g = Self::decode_cg(cache, sb, &fs, cg, true)?;
            if writable {
                CgAlloc::new(&mut fs, &mut g).map_err(|e| bad_cg(cg, format!("{e} (run sufs fsck)")))?;
            }
            let cs = g.hdr.cg_cs;
            fs.fs_cstotal.cs_nbfree += cs.cs_nbfree as i64;
            fs.fs_cstotal.cs_nffree += cs.cs_nffree as i64;
            fs.fs_cstotal.cs_nifree += cs.cs_nifree as i64;
            fs.fs_cstotal.cs_ndir += cs.cs_ndir as i64;
            let initialized = g.hdr.cg_initediblk.min(u.fs_ipg);
            let mut s = CgSum { initialized: initialized - initialized % sb.inodes_per_block(), ..CgSum::default() };
            s.take_counts(&g, u);
            sums.push(s);
        }
        let hints = vec![Default::default(); sums.len()];
        Ok(Alloc { sums, frees: 0, counts_only: !writable, ufs2: fs, spare: Vec::new(), group_bufs: 0, hints })
    }

    /// The UFS2 superblock as the allocator keeps it: `fs_cstotal` is the groups' totals now.
    pub fn ufs2_super(&self) -> &ufs2::Superblock {
        &self.ufs2
    }

    /// Each group's counts as the summary area at `fs_csaddr` holds them (`fs_cs(fs, cg)`).
    pub fn ufs2_csums(&self) -> Vec<ufs2::Csum> {
        let frag = self.ufs2.fs_frag as u32;
        self.sums
            .iter()
            .map(|s| ufs2::Csum {
                cs_ndir: s.ndirs as i32,
                cs_nbfree: s.nbfree as i32,
                cs_nifree: s.free_inodes as i32,
                cs_nffree: (s.free_blocks - s.nbfree * frag) as i32,
            })
            .collect()
    }

    /// Group `cg`'s block, decoded from the cache (the check hash checked when `check_hash`:
    /// once, as it comes from disk).
    pub(super) fn decode_cg(
        cache: &mut Cache,
        sb: &Superblock,
        u: &ufs2::Superblock,
        cg: u32,
        check_hash: bool,
    ) -> Result<Cg, AllocError> {
        let buf = cache.read(sb.cg_header_block(cg))?;
        Cg::decode(buf, u, cg, check_hash).map_err(|e| bad_cg(cg, e.to_string()))
    }

    /// Group `cg` as the cache holds it, decoded into the spare buffer (`give_back` returns
    /// it): a new buffer of `fs_cgsize` bytes for every allocation cost the request threads a
    /// heap grown and its pages faulted in each time.
    fn take_cg(&mut self, cache: &mut Cache, sb: &Superblock, cg: u32) -> Result<Cg, AllocError> {
        let spare = std::mem::take(&mut self.spare);
        if spare.capacity() < self.ufs2.fs_cgsize as usize {
            self.group_bufs += 1;
        }
        let buf = cache.read(sb.cg_header_block(cg))?;
        Cg::decode_in(buf, &self.ufs2, cg, false, spare).map_err(|e| bad_cg(cg, e.to_string()))
    }

    fn give_back(&mut self, g: Cg) {
        self.spare = g.into_buf();
    }

    /// Runs `f` on group `cg`'s allocator; when it succeeds, the group goes back into its
    /// buffer (dirtied) and its summary is taken again. A refusal changes nothing.
    pub(super) fn with_cg<T>(
        &mut self,
        cache: &mut Cache,
        sb: &Superblock,
        cg: u32,
        f: impl FnOnce(&mut CgAlloc) -> Result<T, CgAllocError>,
    ) -> Result<T, AllocError> {
        let mut g = self.take_cg(cache, sb, cg)?;
        let r = self.change_cg(cache, sb, cg, &mut g, f);
        self.give_back(g);
        r
    }

    fn change_cg<T>(
        &mut self,
        cache: &mut Cache,
        sb: &Superblock,
        cg: u32,
        g: &mut Cg,
        f: impl FnOnce(&mut CgAlloc) -> Result<T, CgAllocError>,
    ) -> Result<T, AllocError> {
        let u = &mut *self.ufs2;
        let total = u.fs_cstotal;
        let hints = &mut self.hints[cg as usize];
        let before = *hints;
        let r = f(&mut CgAlloc::resume(u, g).with_hints(hints));
        let Ok(v) = r else {
            // (what its searches learned was of a map that stays as it was)
            *hints = before;
            u.fs_cstotal = total;
            return Err(r.err().map(cg_error).expect("an error"));
        };
        // Unsealed: the write hooks reseal the check hash as the block goes to the disk.
        g.encode_into(cache.modify(sb.cg_header_block(cg))?, u);
        self.sums[cg as usize].take_counts(g, u);
        Ok(v)
    }

    /// A whole block (`fs_frag` fragments) as close after `pref` as possible: in `pref`'s
    /// group first, then the next groups with a free block.
    pub(super) fn alloc_block_ufs2(
        &mut self,
        cache: &mut Cache,
        sb: &Superblock,
        pref: u64,
    ) -> Result<u64, AllocError> {
        self.alloc_in_groups(cache, sb, pref, |s| s.nbfree > 0, |a, p| a.alloc_block(p))
    }

    /// A run of `n` fragments (1 to `fs_frag - 1`) in one block, as close to `pref` as
    /// possible (`ffs_alloc` of a short size): in `pref`'s group first, then the next groups
    /// with room (`ffs_hashalloc`'s quadratic rehash is not kept: groups in order).
    pub(super) fn alloc_frags_ufs2(
        &mut self,
        cache: &mut Cache,
        sb: &Superblock,
        n: u32,
        pref: u64,
    ) -> Result<u64, AllocError> {
        self.alloc_in_groups(cache, sb, pref, |s| s.free_blocks >= n, |a, p| a.alloc_frags(n, p))
    }

    /// Runs `alloc` on `pref`'s group (with `pref`), then on each next group whose summary
    /// `room` accepts, until one allocates.
    fn alloc_in_groups(
        &mut self,
        cache: &mut Cache,
        sb: &Superblock,
        pref: u64,
        room: impl Fn(&CgSum) -> bool,
        alloc: impl Fn(&mut CgAlloc, Option<i64>) -> Result<i64, CgAllocError>,
    ) -> Result<u64, AllocError> {
        let n = sb.ngroups;
        let pref = if sb.is_data_block(pref) { Some(pref) } else { None };
        let start = pref.map_or(0, |p| sb.cg_of_block(p));
        for i in 0..n {
            let cg = (start + i) % n;
            if !room(&self.sums[cg as usize]) {
                continue;
            }
            let p = pref.filter(|_| cg == start).map(|p| p as i64);
            match self.with_cg(cache, sb, cg, |a| alloc(a, p)) {
                Err(AllocError::NoSpace) => continue,
                r => return r.map(|f| f as u64),
            }
        }
        Err(AllocError::NoSpace)
    }

    /// Frees `frags` fragments from `bno` (a whole block: `fs_frag`).
    pub(super) fn free_frags_ufs2(
        &mut self,
        cache: &mut Cache,
        sb: &Superblock,
        bno: u64,
        frags: u32,
    ) -> Result<(), AllocError> {
        if !sb.is_data_block(bno) {
            return Err(AllocError::BadFree { what: "block", n: bno });
        }
        self.with_cg(cache, sb, sb.cg_of_block(bno), |a| a.free(bno as i64, frags))?;
        self.frees += 1;
        Ok(())
    }

    /// An inode of group `cg` (`ffs_nodealloccg`), or None if the group has none free. The
    /// group's `cg_initediblk` may move on to cover it; the caller initializes the blocks
    /// (`set_initialized`), which the summary's `initialized` still leaves out.
    pub(super) fn alloc_inode_ufs2(
        &mut self,
        cache: &mut Cache,
        sb: &Superblock,
        cg: u32,
        is_dir: bool,
    ) -> Result<Option<u32>, AllocError> {
        let initialized = self.sums[cg as usize].initialized;
        match self.with_cg(cache, sb, cg, |a| a.alloc_inode(None, is_dir)) {
            Ok(ia) => {
                self.sums[cg as usize].initialized = initialized;
                Ok(Some(ia.ino))
            }
            Err(AllocError::NoSpace) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(super) fn free_inode_ufs2(
        &mut self,
        cache: &mut Cache,
        sb: &Superblock,
        ino: u32,
        is_dir: bool,
    ) -> Result<(), AllocError> {
        let initialized = self.sums[sb.cg_of_inode(ino) as usize].initialized;
        self.with_cg(cache, sb, sb.cg_of_inode(ino), |a| a.free_inode(ino, is_dir))?;
        self.sums[sb.cg_of_inode(ino) as usize].initialized = initialized;
        Ok(())
    }

    /// Raises group `cg`'s `cg_initediblk` to `n` (the caller has zeroed the inode blocks up
    /// to it).
    pub(super) fn set_initialized_ufs2(
        &mut self,
        cache: &mut Cache,
        sb: &Superblock,
        cg: u32,
        n: u32,
    ) -> Result<(), AllocError> {
        let mut g = self.take_cg(cache, sb, cg)?;
        assert!(n >= g.hdr.cg_initediblk, "group {cg}: cg_initediblk {} lowered to {n}", g.hdr.cg_initediblk);
        g.hdr.cg_initediblk = n;
        let r = cache.modify(sb.cg_header_block(cg)).map(|b| g.encode_into(b, &self.ufs2));
        self.give_back(g);
        r?;
        self.sums[cg as usize].initialized = n;
        Ok(())
    }

    /// Whether the fragment at `bno`, which something the mount read points at, is free in
    /// its group's map (the map is wrong). The map is not changed here: the mount asks for
    /// fsck, and the block, held in the cache, is never handed out while it is there.
    /// Group `cg` of a UFS2 image as the cache holds it (its maps, for FITRIM).
    pub(crate) fn group_ufs2(&mut self, cache: &mut Cache, sb: &Superblock, cg: u32) -> Result<Cg, AllocError> {
        let u = &*self.ufs2;
        Self::decode_cg(cache, sb, u, cg, false)
    }

    pub(super) fn frag_free_ufs2(&mut self, cache: &mut Cache, sb: &Superblock, bno: u64) -> Result<bool, AllocError> {
        let cg = sb.cg_of_block(bno);
        let g = self.take_cg(cache, sb, cg)?;
        let free = g.frag_free((bno - sb.cg_start(cg)) as u32);
        self.give_back(g);
        Ok(free)
    }
}

impl CgSum {
    /// The counts of a UFS2 group (free space in fragments), `initialized` left as it is.
    fn take_counts(&mut self, g: &Cg, u: &ufs2::Superblock) {
        let cs = g.hdr.cg_cs;
        self.nbfree = cs.cs_nbfree as u32;
        self.free_blocks = cs.cs_nbfree as u32 * u.fs_frag as u32 + cs.cs_nffree as u32;
        self.free_inodes = cs.cs_nifree as u32;
        self.ndirs = cs.cs_ndir as u32;
    }
}

fn bad_cg(cg: u32, what: String) -> AllocError {
    FormatError::BadCg { cg, what }.into()
}

/// The allocator's refusal as the file system's error.
fn cg_error(e: CgAllocError) -> AllocError {
    match e {
        CgAllocError::NoSpace { .. } => AllocError::NoSpace,
        CgAllocError::DoubleFree { fsb } => AllocError::DoubleFree { what: "fragment", n: fsb as u64 },
        CgAllocError::InodeDoubleFree { ino } => AllocError::DoubleFree { what: "inode", n: ino as u64 },
        CgAllocError::BadAddress { fsb, .. } => AllocError::BadFree { what: "fragment", n: fsb as u64 },
        CgAllocError::NotAllocated { fsb, .. } => AllocError::BadFree { what: "fragment", n: fsb as u64 },
        CgAllocError::BadInode { ino, .. } => AllocError::BadFree { what: "inode", n: ino as u64 },
        CgAllocError::Inconsistent { cg, what } => bad_cg(cg, what),
    }
}
