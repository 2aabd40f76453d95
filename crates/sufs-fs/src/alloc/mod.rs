//! FFS allocation over the cylinder groups' maps: directories are spread over groups with many
//! free inodes and few directories, a file's inode goes in its directory's group, and a file's
//! blocks follow the previous block (or start in the inode's group). The maps live in the
//! cached group blocks (`ufs2cg.rs` changes them); `Alloc` keeps an in-memory summary of each
//! group's counts so that choosing a group reads no block.
//!
//! Invariant: the summary equals the counts in the group blocks' buffers.

mod ufs2cg;

use crate::cache::Cache;
use crate::dev::DevError;
use crate::format::*;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgSum {
    /// Free space, in fragments.
    pub free_blocks: u32,
    /// Wholly free blocks (`cs_nbfree`).
    pub nbfree: u32,
    pub free_inodes: u32,
    pub ndirs: u32,
    /// Inodes whose blocks are initialized (the group's `cg_initediblk`): no inode at or past
    /// it is read or handed out before its block is initialized.
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
    /// Blocks freed since the mount: a reader that planned a device read under the lock and
    /// read without it knows by this that no block it read can have changed hands meanwhile.
    frees: u64,
    /// A UFS2 image mounted read-only: the counts come from its groups' summaries and nothing
    /// is allocated, freed or checked against its maps.
    counts_only: bool,
    /// The image's superblock, whose totals (`fs_cstotal`) move with its groups' counts
    /// (`ufs2cg.rs`).
    ufs2: Box<ufs2::Superblock>,
    /// Each group's `SearchHints` (where its allocator's searches may start), in memory only.
    hints: Vec<crate::format::ufs2::SearchHints>,
}

impl Alloc {
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
    /// in use. Read by background fsck's adjust.
    pub fn inode_map(&mut self, cache: &mut Cache, sb: &Superblock, cg: u32) -> Result<Vec<u8>, AllocError> {
        Ok(Self::decode_cg(cache, sb, &self.ufs2, cg, false)?.inode_map().to_vec())
    }

    /// Whether the fragment `bno` is marked in use in its group's map.
    pub fn unit_used(&mut self, cache: &mut Cache, sb: &Superblock, bno: u64) -> Result<bool, AllocError> {
        Ok(!self.frag_free_ufs2(cache, sb, bno)?)
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
        self.set_initialized_ufs2(cache, sb, cg, n)
    }

    /// Blocks freed since the mount.
    pub fn frees(&self) -> u64 {
        self.frees
    }

    /// Free space, in fragments.
    pub fn free_blocks(&self) -> u64 {
        self.sums.iter().map(|s| s.free_blocks as u64).sum()
    }

    /// Wholly free blocks, what `alloc_block` can still hand out: `cs_nbfree` summed (free
    /// fragments of a partly used block count for nothing).
    pub fn free_whole_blocks(&self) -> u64 {
        self.sums.iter().map(|s| s.nbfree as u64).sum()
    }
    /// Free inodes of group `cg`.
    pub fn free_inodes_in(&self, cg: u32) -> u64 {
        self.sums[cg as usize].free_inodes as u64
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
            if let Some(ino) = self.alloc_inode_ufs2(cache, sb, cg, is_dir)? {
                return Ok(ino);
            }
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
        self.free_inode_ufs2(cache, sb, ino, is_dir)
    }

    /// Allocates a data block as close after `pref` as possible (in its group first).
    pub fn alloc_block(&mut self, cache: &mut Cache, sb: &Superblock, pref: u64) -> Result<u64, AllocError> {
        if self.counts_only {
            return Err(AllocError::Ufs2ReadOnly);
        }
        self.alloc_block_ufs2(cache, sb, pref)
    }

    /// Whether data block `bno`, which something the mount read points at, is free in its
    /// group's map (the map is wrong; see `frag_free_ufs2`).
    pub fn ensure_block_used(&mut self, cache: &mut Cache, sb: &Superblock, bno: u64) -> Result<bool, AllocError> {
        if self.counts_only || !sb.is_data_block(bno) {
            return Ok(false);
        }
        self.frag_free_ufs2(cache, sb, bno)
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
        if frags == 0 || frags as u64 > sb.frag() {
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
        if !sb.is_data_block(bno) {
            return Err(AllocError::BadFree { what: "fragment run", n: bno });
        }
        // `ffs_fragextend`, in the run's group.
        self.with_cg(cache, sb, sb.cg_of_block(bno), |a| a.extend_frags(bno as i64, old, new))
    }

    /// Frees a run of `frags` fragments (fewer than a block) at `bno`.
    pub fn free_frags(&mut self, cache: &mut Cache, sb: &Superblock, bno: u64, frags: u32) -> Result<(), AllocError> {
        if self.counts_only {
            return Err(AllocError::Ufs2ReadOnly);
        }
        if frags == 0 || frags as u64 >= sb.frag() {
            return Err(AllocError::BadFree { what: "fragment run", n: bno });
        }
        self.free_frags_ufs2(cache, sb, bno, frags)
    }

    pub fn free_block(&mut self, cache: &mut Cache, sb: &Superblock, bno: u64) -> Result<(), AllocError> {
        if self.counts_only {
            return Err(AllocError::Ufs2ReadOnly);
        }
        self.free_frags_ufs2(cache, sb, bno, sb.frag() as u32)
    }
}
