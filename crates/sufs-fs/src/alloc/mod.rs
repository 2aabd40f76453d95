//! FFS allocation over the cylinder group bitmaps: directories are spread over groups with many
//! free inodes and few directories, a file's inode goes in its directory's group, and a file's
//! blocks follow the previous block (or start in the inode's group). The bitmaps live in the
//! cached group header blocks; `Alloc` keeps an in-memory summary of each group's counts so that
//! choosing a group reads no block.
//!
//! Invariant: the summary equals the counts in the header buffers, and each count equals the
//! number of clear (free) bits in its bitmap.

mod ufs2cg;

use crate::cache::Cache;
use crate::dev::DevError;
use crate::format::*;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgSum {
    /// Free space: blocks on sufs's own format, fragments on UFS2.
    pub free_blocks: u32,
    /// UFS2's wholly free blocks (`cs_nbfree`); unused on sufs's own format, where every free
    /// unit is a block (`free_blocks`).
    pub nbfree: u32,
    pub free_inodes: u32,
    pub ndirs: u32,
    /// Inodes whose blocks are initialized (the header's `initialized`, all of them in an old
    /// image): no inode at or past it is read or handed out before its block is initialized.
    pub initialized: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    #[error("no space left on device")]
    NoSpace,
    #[error(transparent)]
    Dev(#[from] DevError),
    #[error("cannot allocate or free on a UFS2 image mounted read-only")]
    Ufs2ReadOnly,
    #[error("corrupt cylinder group: {0}")]
    Corrupt(#[from] FormatError),
    #[error("freeing {what} {n} that is already free")]
    DoubleFree { what: &'static str, n: u64 },
    #[error("freeing {what} {n} that is not a {what} the allocator hands out")]
    BadFree { what: &'static str, n: u64 },
}

pub struct Alloc {
    pub sums: Vec<CgSum>,
    /// What `load` found wrong in the groups and set right in memory (a metadata block or a
    /// reserved inode shown free, a free count that disagrees with its bitmap); the mount
    /// reports it and asks for fsck.
    pub damage: Vec<String>,
    /// Blocks freed since the mount: a reader that planned a device read under the lock and
    /// read without it knows by this that no block it read can have changed hands meanwhile.
    frees: u64,
    /// A UFS2 image mounted read-only: the counts come from its groups' summaries and nothing
    /// is allocated, freed or checked against its maps.
    counts_only: bool,
    /// A UFS2 image's superblock, whose totals (`fs_cstotal`) move with its groups' counts
    /// (`ufs2.rs`); None on sufs's own format.
    ufs2: Option<Box<ufs2::Superblock>>,
}

impl Alloc {
    /// Reads and checks every group header (on UFS2, whole when `writable`).
    pub fn load(cache: &mut Cache, sb: &Superblock, writable: bool) -> Result<Alloc, AllocError> {
        if let Some(u) = sb.ufs2() {
            return Self::load_ufs2(cache, sb, u, writable);
        }
        let mut sums = Vec::with_capacity(sb.ngroups as usize);
        let mut damage = Vec::new();
        for cg in 0..sb.ngroups {
            let buf = cache.read(sb.cg_header_block(cg))?;
            let h = CgHeader::decode(buf, cg)?;
            if h.nblocks != sb.cg_blocks(cg) || h.ninodes != sb.inodes_per_group {
                return Err(FormatError::BadCg { cg, what: "size disagrees with the superblock".into() }.into());
            }
            if h.free_blocks > h.nblocks || h.free_inodes > h.ninodes {
                return Err(FormatError::BadCg { cg, what: "free counts larger than the group".into() }.into());
            }
            let (free_blocks, free_inodes) = Self::check_maps(cache, sb, cg, &h, &mut damage)?;
            let initialized = Self::check_initialized(cache, sb, cg, &h, &mut damage)?;
            sums.push(CgSum { free_blocks, nbfree: 0, free_inodes, ndirs: h.ndirs, initialized });
        }
        Ok(Alloc { sums, damage, frees: 0, counts_only: false, ufs2: None })
    }

    /// The bitmaps must show the group's metadata blocks (and in group 0 the reserved inodes)
    /// in use, and its free counts must be the bitmaps' (both live in the one header block, so
    /// no crash can part them). Sets them right in memory, noting what was wrong; returns the
    /// free counts.
    fn check_maps(
        cache: &mut Cache,
        sb: &Superblock,
        cg: u32,
        h: &CgHeader,
        damage: &mut Vec<String>,
    ) -> Result<(u32, u32), AllocError> {
        let meta = (sb.cg_data_start(cg) - sb.cg_start(cg)) as usize;
        let reserved = if cg == 0 { FIRST_INO as usize } else { 0 };
        let boff = CgHeader::block_map_offset(sb.inodes_per_group);
        let ioff = CgHeader::inode_map_offset();
        let count = |buf: &[u8], off: usize, n: usize| count_clear(&buf[off..], n) as u32;
        let buf = cache.read(sb.cg_header_block(cg))?;
        let meta_ok = (0..meta).all(|i| bit_get(&buf[boff..], i));
        let ino_ok = (0..reserved).all(|i| bit_get(&buf[ioff..], i));
        let mut fb = count(buf, boff, h.nblocks as usize);
        let mut fi = count(buf, ioff, h.ninodes as usize);
        if meta_ok && ino_ok && fb == h.free_blocks && fi == h.free_inodes {
            return Ok((fb, fi));
        }
        let buf = cache.modify(sb.cg_header_block(cg))?;
        if !meta_ok {
            damage.push(format!("group {cg}: block bitmap shows metadata blocks free"));
            (0..meta).for_each(|i| bit_set(&mut buf[boff..], i, true));
            fb = count(buf, boff, h.nblocks as usize);
        }
        if !ino_ok {
            damage.push(format!("group {cg}: inode bitmap shows reserved inodes free"));
            (0..reserved).for_each(|i| bit_set(&mut buf[ioff..], i, true));
            fi = count(buf, ioff, h.ninodes as usize);
        }
        if fb != h.free_blocks || fi != h.free_inodes {
            damage.push(format!(
                "group {cg}: free counts {} blocks, {} inodes; the bitmaps {fb}, {fi}",
                h.free_blocks, h.free_inodes
            ));
        }
        cg_set_free_blocks(buf, fb);
        cg_set_free_inodes(buf, fi);
        Ok((fb, fi))
    }

    /// The header's count of initialized inodes must be a whole number of inode blocks within
    /// the table; one that is not is damage, and is taken as the blocks up to the last inode the
    /// bitmap shows in use (in memory and in the header buffer). Returns the count.
    fn check_initialized(
        cache: &mut Cache,
        sb: &Superblock,
        cg: u32,
        h: &CgHeader,
        damage: &mut Vec<String>,
    ) -> Result<u32, AllocError> {
        if let Some(n) = sb.initialized_inodes(h.initialized) {
            return Ok(n);
        }
        let buf = cache.modify(sb.cg_header_block(cg))?;
        let map = &buf[CgHeader::inode_map_offset()..];
        let used = last_set(map, sb.inodes_per_group as usize).map_or(0, |i| i as u32 + 1);
        let n = used.next_multiple_of(sb.inodes_per_block());
        damage.push(format!("group {cg}: {} initialized inodes (taken as {n})", h.initialized));
        cg_set_initialized(buf, n);
        Ok(n)
    }

    /// Inodes of group `cg` whose blocks are initialized.
    pub fn initialized(&self, cg: u32) -> u32 {
        self.sums[cg as usize].initialized
    }

    /// Whether this allocator only counts (a UFS2 image mounted read-only): it allocates and
    /// frees nothing until loaded again writable.
    pub fn counts_only(&self) -> bool {
        self.counts_only
    }

    /// Directories group `cg` counts (its header's count, as the allocator keeps it).
    pub fn group_ndirs(&self, cg: u32) -> u32 {
        self.sums[cg as usize].ndirs
    }

    /// Group `cg`'s inode map as it stands: bit `i` (`bit_get`) set for inode `cg * ipg + i`
    /// in use. Read by background fsck's adjust, on either format.
    pub fn inode_map(&mut self, cache: &mut Cache, sb: &Superblock, cg: u32) -> Result<Vec<u8>, AllocError> {
        if let Some(u) = self.ufs2.as_deref() {
            return Ok(Self::decode_cg(cache, sb, u, cg, false)?.inode_map().to_vec());
        }
        let buf = cache.read(sb.cg_header_block(cg))?;
        Ok(buf[CgHeader::inode_map_offset()..CgHeader::block_map_offset(sb.inodes_per_group)].to_vec())
    }

    /// Whether data unit `bno` (a block; on UFS2 a fragment) is marked in use in its group's map.
    pub fn unit_used(&mut self, cache: &mut Cache, sb: &Superblock, bno: u64) -> Result<bool, AllocError> {
        if self.ufs2.is_some() {
            return Ok(!self.frag_free_ufs2(cache, sb, bno)?);
        }
        let cg = sb.cg_of_block(bno);
        let idx = (bno - sb.cg_start(cg)) as usize;
        Ok(bit_get(&cache.read(sb.cg_header_block(cg))?[CgHeader::block_map_offset(sb.inodes_per_group)..], idx))
    }

    /// Records that group `cg`'s inode blocks up to inode `n` are initialized (their zeroed
    /// buffers are already in the cache: the caller orders their writes before the header's).
    pub fn set_initialized(&mut self, cache: &mut Cache, sb: &Superblock, cg: u32, n: u32) -> Result<(), AllocError> {
        if self.counts_only {
            return Err(AllocError::Ufs2ReadOnly);
        }
        let s = &mut self.sums[cg as usize];
        assert!(n > s.initialized && n <= sb.inodes_per_group, "group {cg}: {} initialized, then {n}", s.initialized);
        assert!(n.is_multiple_of(sb.inodes_per_block()), "a whole number of inode blocks");
        if self.ufs2.is_some() {
            return self.set_initialized_ufs2(cache, sb, cg, n);
        }
        s.initialized = n;
        cg_set_initialized(cache.modify(sb.cg_header_block(cg))?, n);
        Ok(())
    }

    /// Blocks freed since the mount.
    pub fn frees(&self) -> u64 {
        self.frees
    }

    /// Free space in the format's unit: blocks on sufs's own format, fragments on UFS2.
    pub fn free_blocks(&self) -> u64 {
        self.sums.iter().map(|s| s.free_blocks as u64).sum()
    }

    /// Wholly free blocks, what `alloc_block` can still hand out: UFS2's `cs_nbfree` summed
    /// (free fragments of a partly used block count for nothing), every free block on sufs's
    /// own format.
    pub fn free_whole_blocks(&self) -> u64 {
        if self.ufs2.is_some() {
            self.sums.iter().map(|s| s.nbfree as u64).sum()
        } else {
            self.free_blocks()
        }
    }
    pub fn free_inodes(&self) -> u64 {
        self.sums.iter().map(|s| s.free_inodes as u64).sum()
    }
    pub fn ndirs(&self) -> u64 {
        self.sums.iter().map(|s| s.ndirs as u64).sum()
    }

    /// Chooses a group for a new inode (FFS's dirpref for directories when `spread`, the
    /// parent's group otherwise) and allocates an inode in it. Returns the inode number.
    pub fn alloc_inode(
        &mut self,
        cache: &mut Cache,
        sb: &Superblock,
        parent: u32,
        is_dir: bool,
        spread: bool,
    ) -> Result<u32, AllocError> {
        if self.counts_only {
            return Err(AllocError::Ufs2ReadOnly);
        }
        let n = sb.ngroups;
        let total_free = self.free_inodes();
        if total_free == 0 {
            return Err(AllocError::NoSpace);
        }
        let start = if is_dir && spread {
            let avg = total_free / n as u64;
            (0..n)
                .filter(|&g| self.sums[g as usize].free_inodes as u64 >= avg.max(1))
                .min_by_key(|&g| (self.sums[g as usize].ndirs, std::cmp::Reverse(self.sums[g as usize].free_blocks)))
                .unwrap_or(0)
        } else {
            sb.cg_of_inode(parent).min(n - 1)
        };
        for i in 0..n {
            let cg = (start + i) % n;
            if self.sums[cg as usize].free_inodes == 0 {
                continue;
            }
            if self.ufs2.is_some() {
                match self.alloc_inode_ufs2(cache, sb, cg, is_dir)? {
                    Some(ino) => return Ok(ino),
                    None => continue,
                }
            }
            let buf = cache.modify(sb.cg_header_block(cg))?;
            let (brot, irot) = cg_get_rotors(buf);
            let map = &mut buf[CgHeader::inode_map_offset()..];
            // Initialized inodes first, then the first block past them (FreeBSD's
            // ffs_nodealloccg): the table is initialized in order as it fills.
            let ipg = sb.inodes_per_group as usize;
            let reach = (self.sums[cg as usize].initialized + sb.inodes_per_block()).min(sb.inodes_per_group);
            let found = find_clear(map, reach as usize, irot as usize).or_else(|| find_clear(map, ipg, irot as usize));
            let Some(idx) = found else {
                // The count said there was room: the header lies.
                return Err(FormatError::BadCg { cg, what: "free inode count exceeds the bitmap".into() }.into());
            };
            bit_set(map, idx, true);
            let fi = cg_get_free_inodes(buf) - 1;
            cg_set_free_inodes(buf, fi);
            cg_set_rotors(buf, brot, idx as u32);
            let s = &mut self.sums[cg as usize];
            s.free_inodes -= 1;
            if is_dir {
                s.ndirs += 1;
                let nd = cg_get_ndirs(buf) + 1;
                cg_set_ndirs(buf, nd);
            }
            return Ok(cg * sb.inodes_per_group + idx as u32);
        }
        Err(AllocError::NoSpace)
    }

    pub fn free_inode(&mut self, cache: &mut Cache, sb: &Superblock, ino: u32, is_dir: bool) -> Result<(), AllocError> {
        if self.counts_only {
            return Err(AllocError::Ufs2ReadOnly);
        }
        if !sb.is_valid_inode(ino) {
            return Err(AllocError::BadFree { what: "inode", n: ino as u64 });
        }
        if self.ufs2.is_some() {
            return self.free_inode_ufs2(cache, sb, ino, is_dir);
        }
        let cg = sb.cg_of_inode(ino);
        let idx = (ino % sb.inodes_per_group) as usize;
        let buf = cache.modify(sb.cg_header_block(cg))?;
        let map = &mut buf[CgHeader::inode_map_offset()..];
        if !bit_get(map, idx) {
            return Err(AllocError::DoubleFree { what: "inode", n: ino as u64 });
        }
        bit_set(map, idx, false);
        let fi = cg_get_free_inodes(buf) + 1;
        cg_set_free_inodes(buf, fi);
        let s = &mut self.sums[cg as usize];
        s.free_inodes += 1;
        if is_dir {
            let nd = cg_get_ndirs(buf).saturating_sub(1);
            cg_set_ndirs(buf, nd);
            s.ndirs = s.ndirs.saturating_sub(1);
        }
        Ok(())
    }

    /// Allocates a data block as close after `pref` as possible (in its group first).
    pub fn alloc_block(&mut self, cache: &mut Cache, sb: &Superblock, pref: u64) -> Result<u64, AllocError> {
        if self.counts_only {
            return Err(AllocError::Ufs2ReadOnly);
        }
        if self.ufs2.is_some() {
            return self.alloc_block_ufs2(cache, sb, pref);
        }
        let n = sb.ngroups;
        let pref = if pref < sb.num_blocks { pref } else { 0 };
        let start = sb.cg_of_block(pref);
        for i in 0..n {
            let cg = (start + i) % n;
            if self.sums[cg as usize].free_blocks == 0 {
                continue;
            }
            let base = sb.cg_start(cg);
            let hint = if cg == start { (pref - base) as usize } else { 0 };
            let buf = cache.modify(sb.cg_header_block(cg))?;
            let (brot, irot) = cg_get_rotors(buf);
            let hint = if hint == 0 { brot as usize } else { hint };
            let map = &mut buf[CgHeader::block_map_offset(sb.inodes_per_group)..];
            let Some(idx) = find_clear(map, sb.cg_blocks(cg) as usize, hint) else {
                return Err(FormatError::BadCg { cg, what: "free block count exceeds the bitmap".into() }.into());
            };
            bit_set(map, idx, true);
            let fb = cg_get_free_blocks(buf) - 1;
            cg_set_free_blocks(buf, fb);
            cg_set_rotors(buf, idx as u32, irot);
            self.sums[cg as usize].free_blocks -= 1;
            let bno = base + idx as u64;
            // A damaged bitmap may show a metadata block free: the caller checks (and keeps the
            // bit, which is right for a metadata block).
            return Ok(bno);
        }
        Err(AllocError::NoSpace)
    }

    /// Makes sure data block `bno`, which something the mount read points at, is marked in
    /// use; returns whether its bit had to be set (the bitmap was wrong).
    pub fn ensure_block_used(&mut self, cache: &mut Cache, sb: &Superblock, bno: u64) -> Result<bool, AllocError> {
        if self.counts_only || !sb.is_data_block(bno) {
            return Ok(false);
        }
        if self.ufs2.is_some() {
            return self.frag_free_ufs2(cache, sb, bno);
        }
        let cg = sb.cg_of_block(bno);
        let idx = (bno - sb.cg_start(cg)) as usize;
        if bit_get(&cache.read(sb.cg_header_block(cg))?[CgHeader::block_map_offset(sb.inodes_per_group)..], idx) {
            return Ok(false);
        }
        let buf = cache.modify(sb.cg_header_block(cg))?;
        bit_set(&mut buf[CgHeader::block_map_offset(sb.inodes_per_group)..], idx, true);
        let fb = cg_get_free_blocks(buf).saturating_sub(1);
        cg_set_free_blocks(buf, fb);
        let s = &mut self.sums[cg as usize];
        s.free_blocks = s.free_blocks.saturating_sub(1);
        Ok(true)
    }

    /// Allocates a run of `frags` fragments within one block, as close to `pref` as possible
    /// (UFS2: a file's last direct block); a whole block when `frags` is the block's count.
    pub fn alloc_frags(
        &mut self,
        cache: &mut Cache,
        sb: &Superblock,
        frags: u32,
        pref: u64,
    ) -> Result<u64, AllocError> {
        if self.counts_only {
            return Err(AllocError::Ufs2ReadOnly);
        }
        if frags as u64 == sb.frag() {
            return self.alloc_block(cache, sb, pref);
        }
        if self.ufs2.is_none() || frags == 0 || frags as u64 > sb.frag() {
            return Err(AllocError::BadFree { what: "fragment run", n: pref });
        }
        self.alloc_frags_ufs2(cache, sb, frags, pref)
    }

    /// Grows the allocated run of `old` fragments at `bno` to `new` (at most a block) in place,
    /// if the fragments after it in its block are free: false, nothing changed, if not.
    pub fn extend_frags(
        &mut self,
        cache: &mut Cache,
        sb: &Superblock,
        bno: u64,
        old: u32,
        new: u32,
    ) -> Result<bool, AllocError> {
        if self.counts_only {
            return Err(AllocError::Ufs2ReadOnly);
        }
        if self.ufs2.is_none() {
            return Ok(false);
        }
        if !sb.is_data_block(bno) {
            return Err(AllocError::BadFree { what: "fragment run", n: bno });
        }
        // `ffs_fragextend`, in the run's group.
        self.with_cg(cache, sb, sb.cg_of_block(bno), |a| a.extend_frags(bno as i64, old, new))
    }

    /// Frees a run of `frags` fragments (fewer than a block) at `bno`: UFS2 only, whose blocks
    /// hold fragments.
    pub fn free_frags(&mut self, cache: &mut Cache, sb: &Superblock, bno: u64, frags: u32) -> Result<(), AllocError> {
        if self.counts_only {
            return Err(AllocError::Ufs2ReadOnly);
        }
        if self.ufs2.is_none() || frags == 0 || frags as u64 >= sb.frag() {
            return Err(AllocError::BadFree { what: "fragment run", n: bno });
        }
        self.free_frags_ufs2(cache, sb, bno, frags)
    }

    pub fn free_block(&mut self, cache: &mut Cache, sb: &Superblock, bno: u64) -> Result<(), AllocError> {
        if self.counts_only {
            return Err(AllocError::Ufs2ReadOnly);
        }
        if self.ufs2.is_some() {
            return self.free_frags_ufs2(cache, sb, bno, sb.frag() as u32);
        }
        if !sb.is_data_block(bno) {
            return Err(AllocError::BadFree { what: "block", n: bno });
        }
        let cg = sb.cg_of_block(bno);
        let idx = (bno - sb.cg_start(cg)) as usize;
        let buf = cache.modify(sb.cg_header_block(cg))?;
        let map = &mut buf[CgHeader::block_map_offset(sb.inodes_per_group)..];
        if !bit_get(map, idx) {
            return Err(AllocError::DoubleFree { what: "block", n: bno });
        }
        bit_set(map, idx, false);
        self.frees += 1;
        let fb = cg_get_free_blocks(buf) + 1;
        cg_set_free_blocks(buf, fb);
        self.sums[cg as usize].free_blocks += 1;
        Ok(())
    }
}

/// Clear bits among the first `nbits` bits of `map`.
pub fn count_clear(map: &[u8], nbits: usize) -> usize {
    let full = nbits / 8;
    let set: usize = map[..full].iter().map(|b| b.count_ones() as usize).sum();
    let tail = (full * 8..nbits).filter(|&i| bit_get(map, i)).count();
    nbits - set - tail
}

/// The last set bit among the first `nbits` bits of `map`.
pub fn last_set(map: &[u8], nbits: usize) -> Option<usize> {
    let full = nbits / 8;
    if let Some(i) = (full * 8..nbits).rev().find(|&i| bit_get(map, i)) {
        return Some(i);
    }
    let byte = map[..full].iter().rposition(|&b| b != 0)?;
    Some(byte * 8 + 7 - map[byte].leading_zeros() as usize)
}

/// First clear bit at or after `from` (wrapping), among the first `nbits` bits.
pub fn find_clear(map: &[u8], nbits: usize, from: usize) -> Option<usize> {
    let from = if from >= nbits { 0 } else { from };
    let scan = |lo: usize, hi: usize| -> Option<usize> {
        let mut i = lo;
        while i < hi {
            if i.is_multiple_of(8) && i + 8 <= hi && map[i / 8] == 0xff {
                i += 8;
                continue;
            }
            if !bit_get(map, i) {
                return Some(i);
            }
            i += 1;
        }
        None
    };
    scan(from, nbits).or_else(|| scan(0, from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_clear_wraps_and_skips_full_bytes() {
        let mut map = vec![0xffu8; 4];
        assert_eq!(find_clear(&map, 32, 0), None);
        bit_set(&mut map, 3, false);
        bit_set(&mut map, 20, false);
        assert_eq!(find_clear(&map, 32, 0), Some(3));
        assert_eq!(find_clear(&map, 32, 4), Some(20));
        assert_eq!(find_clear(&map, 32, 21), Some(3));
        assert_eq!(find_clear(&map, 20, 4), Some(3));
    }
}
