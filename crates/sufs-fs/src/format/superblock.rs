//! The superblock the file system works with: FreeBSD's UFS2 superblock (`struct fs`,
//! `ufs2::Superblock`) and sufs's view of it (`layout.rs` maps one onto the other), whose
//! geometry answers in fragments, as UFS2 addresses its blocks.

use super::*;

/// sufs's view of a UFS2 superblock (FreeBSD's `struct fs`, kept whole in `ufs2`). Its
/// summary counts are exact only when `SB_CLEAN` is set; after a crash the mount recomputes
/// them from the cylinder groups (as FFS does with soft updates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// `fs_bsize`.
    pub block_size: u32,
    /// `fs_size`, in fragments.
    pub num_blocks: u64,
    /// `fs_fpg`, in fragments.
    pub blocks_per_group: u32,
    /// `fs_ipg`.
    pub inodes_per_group: u32,
    /// `fs_ncg`.
    pub ngroups: u32,
    /// `fs_cstotal`, free blocks counted in fragments.
    pub free_blocks: u64,
    pub free_inodes: u64,
    pub ndirs: u64,
    /// `SB_*`, from `fs_clean` and `fs_flags`.
    pub flags: u32,
    /// `fs_mtime`.
    pub mount_time: i64,
    /// `fs_time`.
    pub write_time: i64,
    /// The reserve only root may allocate from, in percent of the data blocks (`fs_minfree`);
    /// None (a value past `MAX_MINFREE`) is `DEFAULT_MINFREE`.
    pub minfree: Option<u8>,
    /// The ordering a mount uses when none is given (`ORDER_*`, from `FS_DOSOFTDEP`).
    pub default_ordering: u8,
    /// The volume label (`fs_volname`, `sufs tunefs --label`): at most `MAX_LABEL` bytes, no
    /// NUL; empty when unset.
    pub label: Vec<u8>,
    /// `fs_snapinum`.
    pub snapshots: [u32; MAX_SNAPSHOTS],
    /// The image's own UFS2 superblock (`layout.rs`).
    pub ufs2: Box<super::ufs2::Superblock>,
}

/// `default_ordering`: not set, a mount without `--ordering` runs soft updates.
pub const ORDER_DEFAULT: u8 = 0;
/// `default_ordering`: soft updates.
pub const ORDER_SOFTDEP: u8 = 1;
/// `default_ordering`: synchronous metadata writes.
pub const ORDER_SYNC: u8 = 2;
/// `default_ordering`: no ordering.
pub const ORDER_ASYNC: u8 = 3;
/// The longest volume label, in bytes.
pub const MAX_LABEL: usize = 32;

/// FFS's default minfree: 8% of the data blocks are for root.
pub const DEFAULT_MINFREE: u8 = 8;
/// The largest minfree mkfs takes.
pub const MAX_MINFREE: u8 = 99;

impl Superblock {
    pub fn inodes_per_block(&self) -> u32 {
        self.block_size / DINODE_SIZE as u32
    }
    pub fn inode_table_blocks(&self) -> u32 {
        self.inodes_per_group.div_ceil(self.inodes_per_block())
    }
    pub fn total_inodes(&self) -> u64 {
        self.ngroups as u64 * self.inodes_per_group as u64
    }
    /// The first fragment of group `cg` (`cgbase`).
    pub fn cg_start(&self, cg: u32) -> u64 {
        self.ufs2.cgbase(cg) as u64
    }
    /// Blocks in group `cg` (the last one may be short).
    pub fn cg_blocks(&self, cg: u32) -> u32 {
        let start = self.cg_start(cg);
        (self.num_blocks - start).min(self.blocks_per_group as u64) as u32
    }
    /// The group's header block (`cgtod`).
    pub fn cg_header_block(&self, cg: u32) -> u64 {
        self.ufs2.cgtod(cg) as u64
    }
    /// Whether `bno` is a group's header block (its bitmaps): where the write path seals the
    /// group's check hash.
    pub fn is_cg_header(&self, bno: u64) -> bool {
        bno < self.num_blocks && bno == self.cg_header_block(self.cg_of_block(bno))
    }
    /// The group's first inode block (`cgimin`).
    pub fn cg_itable_block(&self, cg: u32) -> u64 {
        self.ufs2.cgimin(cg) as u64
    }
    /// The `k`th block of group `cg`'s inode table (`k * fs_frag` fragments on).
    pub fn cg_itable_nth(&self, cg: u32, k: u64) -> u64 {
        self.cg_itable_block(cg) + k * self.frag()
    }
    /// First data block of the group (`cgdmin`): everything before it is metadata.
    pub fn cg_data_start(&self, cg: u32) -> u64 {
        self.ufs2.cgdmin(cg) as u64
    }
    pub fn cg_of_block(&self, bno: u64) -> u32 {
        self.ufs2.dtog(bno as i64) as u32
    }
    pub fn cg_of_inode(&self, ino: u32) -> u32 {
        ino / self.inodes_per_group
    }
    /// The block of the inode table holding `ino`, and the byte offset of its dinode in it.
    pub fn inode_location(&self, ino: u32) -> (u64, usize) {
        let cg = self.cg_of_inode(ino);
        let idx = ino % self.inodes_per_group;
        let ipb = self.inodes_per_block();
        (self.cg_itable_nth(cg, (idx / ipb) as u64), (idx % ipb) as usize * DINODE_SIZE)
    }
    /// True if `bno` is a data block (may be pointed to by an inode): inside the file system,
    /// not a group's superblock copy, header or inode table, not group 0's boot area nor the
    /// summary area.
    pub fn is_data_block(&self, bno: u64) -> bool {
        let u = &*self.ufs2;
        if bno >= u.fs_size as u64 {
            return false;
        }
        let cg = u.dtog(bno as i64) as u32;
        let (start, data) = (self.cg_start(cg), self.cg_data_start(cg));
        let meta = if cg == 0 { start..data } else { u.cgsblock(cg) as u64..data };
        let cs_frags = (u.fs_cssize as u64).div_ceil(u.fs_fsize as u64);
        let cs = u.fs_csaddr as u64..u.fs_csaddr as u64 + cs_frags;
        !meta.contains(&bno) && !cs.contains(&bno)
    }
    pub fn is_valid_inode(&self, ino: u32) -> bool {
        ino >= FIRST_INO && (ino as u64) < self.total_inodes()
    }
    pub fn ptrs_per_block(&self) -> u64 {
        self.block_size as u64 / 8
    }
    /// Fragments outside the groups' metadata (`fs_dsize`).
    pub fn data_blocks(&self) -> u64 {
        self.ufs2.fs_dsize as u64
    }
    /// The minfree reserve in percent.
    pub fn minfree_percent(&self) -> u8 {
        self.minfree.unwrap_or(DEFAULT_MINFREE)
    }
    /// The blocks only root may allocate (FFS's `fs_dsize * fs_minfree / 100`).
    pub fn reserved_blocks(&self) -> u64 {
        self.data_blocks() * self.minfree_percent() as u64 / 100
    }
    /// Largest file size the block map can address (`fs_maxfilesize`).
    pub fn max_file_size(&self) -> u64 {
        self.ufs2.fs_maxfilesize
    }
}
