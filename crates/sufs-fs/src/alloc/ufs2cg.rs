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

/// The allocator of a group over its block in the cache (`with_cg`).
type InPlace<'a, 'b> = CgAlloc<'a, &'b mut [u8]>;

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
        Ok(Alloc { sums, frees: 0, counts_only: !writable, ufs2: fs, hints })
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

    /// Runs `f` on group `cg`'s allocator, over the group's block in the cache itself (no copy
    /// of the group is made: a copy in and out for each allocation was a tenth of the lock's
    /// held time in a copy of a tree); when it succeeds, the header goes back into the block
    /// and the group's summary is taken again. A refusal changes nothing: the allocator refuses
    /// before it changes a map (debug builds check it), and its header and totals are put back.
    pub(super) fn with_cg<T>(
        &mut self,
        cache: &mut Cache,
        sb: &Superblock,
        cg: u32,
        f: impl FnOnce(&mut InPlace) -> Result<T, CgAllocError>,
    ) -> Result<T, AllocError> {
        let u = &mut *self.ufs2;
        let buf = cache.modify(sb.cg_header_block(cg))?;
        let mut g = Cg::in_place(buf, u, cg).map_err(|e| bad_cg(cg, e.to_string()))?;
        #[cfg(debug_assertions)]
        let before = g.clone_bytes();
        let (total, hints) = (u.fs_cstotal, &mut self.hints[cg as usize]);
        let hinted = *hints;
        let r = f(&mut CgAlloc::resume(u, &mut g).with_hints(hints));
        let Ok(v) = r else {
            // (what its searches learned was of a map that stays as it was)
            *hints = hinted;
            u.fs_cstotal = total;
            #[cfg(debug_assertions)]
            assert!(g.clone_bytes() == before, "group {cg}: a refused change changed its block");
            return Err(r.err().map(cg_error).expect("an error"));
        };
        // Unsealed: the write hooks reseal the check hash as the block goes to the disk.
        g.put_header();
        self.sums[cg as usize].take_counts(&g, u);
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
        alloc: impl Fn(&mut InPlace, Option<i64>) -> Result<i64, CgAllocError>,
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
        let buf = cache.modify(sb.cg_header_block(cg))?;
        let mut g = Cg::in_place(buf, &self.ufs2, cg).map_err(|e| bad_cg(cg, e.to_string()))?;
        assert!(n >= g.hdr.cg_initediblk, "group {cg}: cg_initediblk {} lowered to {n}", g.hdr.cg_initediblk);
        g.hdr.cg_initediblk = n;
        g.put_header();
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
        let g = Cg::view(cache.read(sb.cg_header_block(cg))?, &self.ufs2, cg).map_err(|e| bad_cg(cg, e.to_string()))?;
        Ok(g.frag_free((bno - sb.cg_start(cg)) as u32))
    }
}

impl CgSum {
    /// The counts of a UFS2 group (free space in fragments), `initialized` left as it is.
    fn take_counts<B: AsRef<[u8]>>(&mut self, g: &Cg<B>, u: &ufs2::Superblock) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SimClock;
    use crate::dev::MemDevice;
    use crate::fs::{mkfs, MkfsOptions};
    use std::sync::Arc;

    /// A change the allocator of a group is asked for.
    #[derive(Debug, Clone, Copy)]
    enum Op {
        Block(Option<i64>),
        Frags(u32, Option<i64>),
        Extend(i64, u32, u32),
        Free(i64, u32),
        Inode(bool),
        FreeInode(u32, bool),
    }

    fn apply<B: AsRef<[u8]> + AsMut<[u8]>>(a: &mut CgAlloc<B>, op: Op) -> Result<i64, CgAllocError> {
        match op {
            Op::Block(p) => a.alloc_block(p),
            Op::Frags(n, p) => a.alloc_frags(n, p),
            Op::Extend(f, old, new) => a.extend_frags(f, old, new).map(i64::from),
            Op::Free(f, n) => a.free(f, n).map(|_| 0),
            Op::Inode(dir) => a.alloc_inode(None, dir).map(|ia| ia.ino as i64),
            Op::FreeInode(ino, dir) => a.free_inode(ino, dir).map(|_| 0),
        }
    }

    /// The allocator changes a group in its block in the cache as it changed a decoded copy of
    /// it that was then encoded back: 3,000 random allocations, extensions and frees over every
    /// group, each made both ways, give the same answers, the same block and the same totals. A
    /// tenth of what is freed stays on the test's lists, so that later frees and extensions of it
    /// are refused (and full groups refuse allocations): a refusal leaves the block as it was.
    #[test]
    fn a_group_changed_in_its_cache_block_is_the_group_changed_on_a_decoded_copy() {
        let dev = Arc::new(MemDevice::new(4096, 8192));
        mkfs(dev.clone(), &MkfsOptions::default(), (1, 0)).unwrap();
        let sb = Superblock::probe(|off, buf| crate::dev::read_bytes(&*dev, off, buf)).unwrap();
        let mut cache = Cache::new(dev, 4096, Arc::new(SimClock::new()));
        let mut alloc = Alloc::load(&mut cache, &sb, true).unwrap();
        let mut su = alloc.ufs2_super().clone();
        let mut copies: Vec<Cg> =
            (0..sb.ngroups).map(|cg| Alloc::decode_cg(&mut cache, &sb, &su, cg, false).unwrap()).collect();
        let frag = su.fs_frag as u32;
        let mut runs: Vec<(i64, u32)> = Vec::new();
        let mut inodes: Vec<(u32, bool)> = Vec::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n.max(1)
        };
        let (mut refused, mut done) = (0, 0);
        for _ in 0..3000 {
            let cg = rand(sb.ngroups as u64) as u32;
            let pref = (rand(2) == 0).then(|| su.cgbase(cg) + rand(su.fs_fpg as u64) as i64);
            let pick = rand(8);
            let op = match pick {
                0 => Op::Block(pref),
                1 | 2 => Op::Frags(1 + rand(frag as u64 - 1) as u32, pref),
                3 if runs.iter().any(|r| r.1 < frag) => {
                    let short: Vec<_> = runs.iter().filter(|r| r.1 < frag).collect();
                    let &(f, n) = short[rand(short.len() as u64) as usize];
                    Op::Extend(f, n, n + 1 + rand((frag - n) as u64) as u32)
                }
                4 | 5 if !runs.is_empty() => {
                    let i = rand(runs.len() as u64) as usize;
                    let (f, n) = if rand(10) == 0 { runs[i] } else { runs.swap_remove(i) };
                    Op::Free(f, n)
                }
                6 => Op::Inode(rand(4) == 0),
                _ if !inodes.is_empty() => {
                    let i = rand(inodes.len() as u64) as usize;
                    let (ino, dir) = if rand(10) == 0 { inodes[i] } else { inodes.swap_remove(i) };
                    Op::FreeInode(ino, dir)
                }
                _ => Op::Inode(false),
            };
            let cg = match op {
                Op::Extend(f, ..) | Op::Free(f, _) => sb.cg_of_block(f as u64),
                Op::FreeInode(ino, _) => sb.cg_of_inode(ino),
                _ => cg,
            };
            let block = sb.cg_header_block(cg);
            let before = cache.read(block).unwrap().to_vec();
            let got = alloc.with_cg(&mut cache, &sb, cg, |a| apply(a, op));
            let (mut copy, mut su2) = (copies[cg as usize].clone(), su.clone());
            let want = apply(&mut CgAlloc::resume(&mut su2, &mut copy), op);
            assert_eq!(got.is_ok(), want.is_ok(), "{op:?}: {got:?} in place, {want:?} on a copy");
            let now = cache.read(block).unwrap().to_vec();
            let Ok(v) = want else {
                assert!(now == before, "{op:?}: refused, but the block changed");
                refused += 1;
                continue;
            };
            assert_eq!(got.unwrap(), v, "{op:?}");
            let mut encoded = now.clone();
            copy.encode_into(&mut encoded, &su2);
            assert!(now == encoded, "{op:?}: the block is not the copy's encoding");
            (copies[cg as usize], su) = (copy, su2);
            assert_eq!(alloc.ufs2_super().fs_cstotal, su.fs_cstotal, "{op:?}");
            done += 1;
            match op {
                Op::Block(_) => runs.push((v, frag)),
                Op::Frags(n, _) => runs.push((v, n)),
                Op::Extend(f, old, new) if v == 1 => {
                    let r = runs.iter_mut().find(|r| **r == (f, old)).expect("the run extended");
                    r.1 = new;
                }
                Op::Inode(dir) => inodes.push((v as u32, dir)),
                _ => {}
            }
        }
        assert!(refused > 50 && done > 2000, "{refused} refused, {done} done");
    }
}
