//! The superblock (block 0 of every cylinder group; group 0's is the primary): the geometry,
//! the summary counts, the flags and the snapshot list, at explicit offsets, sealed by a CRC32C
//! over the rest of its 256 bytes.

use super::*;

/// The superblock. Its summary counts are exact only when `SB_CLEAN` is set; after a crash the
/// mount recomputes them from the cylinder groups (as FFS does with soft updates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// `VERSION` (lazily initialized inode tables) or `VERSION_EAGER` (an image made before
    /// them: every inode block is initialized).
    pub version: u32,
    pub block_size: u32,
    pub num_blocks: u64,
    pub blocks_per_group: u32,
    pub inodes_per_group: u32,
    pub ngroups: u32,
    pub free_blocks: u64,
    pub free_inodes: u64,
    pub ndirs: u64,
    pub flags: u32,
    pub created: i64,
    pub mount_time: i64,
    pub write_time: i64,
    pub mount_count: u32,
    /// The reserve only root may allocate from, in percent of the data blocks; None (an image
    /// made before the field) is `DEFAULT_MINFREE`.
    pub minfree: Option<u8>,
    /// The ordering a mount uses when none is given (`ORDER_*`); `ORDER_DEFAULT` (an image made
    /// before the field, or never tuned) is soft updates.
    pub default_ordering: u8,
    /// The volume label (`sufs tunefs --label`): at most `MAX_LABEL` bytes, no NUL; empty
    /// when unset (an image made before the field).
    pub label: Vec<u8>,
    pub snapshots: [u32; MAX_SNAPSHOTS],
    /// A UFS2 image's own superblock (`layout.rs`): the geometry methods then answer in
    /// fragments, as UFS2 addresses its blocks. None on a sufs image.
    pub ufs2: Option<Box<super::ufs2::Superblock>>,
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

// Superblock field offsets.
const SB_MAGIC: usize = 0;
const SB_VERSION: usize = 8;
const SB_BSIZE: usize = 12;
const SB_NBLOCKS: usize = 16;
const SB_BPG: usize = 24;
const SB_IPG: usize = 28;
const SB_NGROUPS: usize = 32;
const SB_FLAGS: usize = 36;
const SB_FREE_BLOCKS: usize = 40;
const SB_FREE_INODES: usize = 48;
const SB_NDIRS: usize = 56;
const SB_CREATED: usize = 64;
const SB_MTIME: usize = 72;
const SB_WTIME: usize = 80;
const SB_MNTCOUNT: usize = 88;
const SB_MINFREE_SET: usize = 92; // u8: 1 if SB_MINFREE holds the reserve
const SB_MINFREE: usize = 93; // u8: percent
const SB_ORDERING: usize = 94; // u8: ORDER_*
const SB_LABEL: usize = 176; // MAX_LABEL bytes, NUL-padded
const SB_SNAPS: usize = 96; // 20 * u32 = 80 bytes
const SB_CRC: usize = 252;
pub const SB_SIZE: usize = 256;

impl Superblock {
    pub fn inodes_per_block(&self) -> u32 {
        self.block_size / DINODE_SIZE as u32
    }
    /// Whether the group headers count the initialized inodes (version 2); an older image's
    /// inode tables are all initialized.
    pub fn lazy_inodes(&self) -> bool {
        self.version >= VERSION
    }
    /// The inodes of group `cg` that are initialized, from the header's `initialized` field
    /// `stored` as read from disk: all of them in an old image; else `stored` if it is valid (a
    /// multiple of inodes per block, at most `inodes_per_group`), None if it is not.
    pub fn initialized_inodes(&self, stored: u32) -> Option<u32> {
        if !self.lazy_inodes() {
            return Some(self.inodes_per_group);
        }
        (stored <= self.inodes_per_group && stored.is_multiple_of(self.inodes_per_block())).then_some(stored)
    }
    pub fn inode_table_blocks(&self) -> u32 {
        self.inodes_per_group.div_ceil(self.inodes_per_block())
    }
    pub fn total_inodes(&self) -> u64 {
        self.ngroups as u64 * self.inodes_per_group as u64
    }
    pub fn cg_start(&self, cg: u32) -> u64 {
        match self.ufs2() {
            Some(u) => self.ufs2_cg(u, cg).0,
            None => cg as u64 * self.blocks_per_group as u64,
        }
    }
    /// Blocks in group `cg` (the last one may be short).
    pub fn cg_blocks(&self, cg: u32) -> u32 {
        let start = self.cg_start(cg);
        (self.num_blocks - start).min(self.blocks_per_group as u64) as u32
    }
    pub fn cg_header_block(&self, cg: u32) -> u64 {
        match self.ufs2() {
            Some(u) => self.ufs2_cg(u, cg).1,
            None => self.cg_start(cg) + 1,
        }
    }
    /// Whether `bno` is a group's header block (its bitmaps): where the write path seals a
    /// checksum or, on UFS2, the group's check hash.
    pub fn is_cg_header(&self, bno: u64) -> bool {
        match self.ufs2() {
            Some(_) => bno < self.num_blocks && bno == self.cg_header_block(self.cg_of_block(bno)),
            None => bno % self.blocks_per_group as u64 == 1,
        }
    }
    pub fn cg_itable_block(&self, cg: u32) -> u64 {
        match self.ufs2() {
            Some(u) => self.ufs2_cg(u, cg).2,
            None => self.cg_start(cg) + 2,
        }
    }
    /// The `k`th block of group `cg`'s inode table (on UFS2, `k * fs_frag` fragments on).
    pub fn cg_itable_nth(&self, cg: u32, k: u64) -> u64 {
        self.cg_itable_block(cg) + k * self.frag()
    }
    /// First data block of the group: everything before it is metadata.
    pub fn cg_data_start(&self, cg: u32) -> u64 {
        match self.ufs2() {
            Some(u) => self.ufs2_cg(u, cg).3,
            None => self.cg_itable_block(cg) + self.inode_table_blocks() as u64,
        }
    }
    pub fn cg_of_block(&self, bno: u64) -> u32 {
        match self.ufs2() {
            Some(u) => u.dtog(bno as i64) as u32,
            None => (bno / self.blocks_per_group as u64) as u32,
        }
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
    /// True if `bno` is a data block (may be pointed to by an inode).
    pub fn is_data_block(&self, bno: u64) -> bool {
        match self.ufs2() {
            Some(u) => self.ufs2_is_data(u, bno),
            None => bno < self.num_blocks && bno >= self.cg_data_start(self.cg_of_block(bno)),
        }
    }
    pub fn is_valid_inode(&self, ino: u32) -> bool {
        ino >= FIRST_INO && (ino as u64) < self.total_inodes()
    }
    pub fn ptrs_per_block(&self) -> u64 {
        self.block_size as u64 / 8
    }
    /// Blocks outside the groups' metadata (superblock copy, header, inode table).
    pub fn data_blocks(&self) -> u64 {
        if let Some(u) = self.ufs2() {
            return u.fs_dsize as u64;
        }
        self.num_blocks - (2 + self.inode_table_blocks() as u64) * self.ngroups as u64
    }
    /// The minfree reserve in percent.
    pub fn minfree_percent(&self) -> u8 {
        self.minfree.unwrap_or(DEFAULT_MINFREE)
    }
    /// The blocks only root may allocate (FFS's `fs_dsize * fs_minfree / 100`).
    pub fn reserved_blocks(&self) -> u64 {
        self.data_blocks() * self.minfree_percent() as u64 / 100
    }
    /// Largest file size the block map can address.
    pub fn max_file_size(&self) -> u64 {
        if let Some(u) = self.ufs2() {
            return u.fs_maxfilesize;
        }
        let p = self.ptrs_per_block();
        let blocks = NDADDR as u64 + p + p * p + p * p * p;
        blocks.saturating_mul(self.block_size as u64)
    }

    /// The inodes mkfs asks for by default on `num_blocks` blocks: one per 16 KiB, at least 16.
    fn default_inodes(block_size: u32, num_blocks: u64) -> u64 {
        (num_blocks * block_size as u64 / 16384).max(16)
    }

    /// The inodes per group mkfs gives `ngroups` groups over `num_blocks` blocks by default
    /// (fsck's last evidence when the primary and the group headers disagree on it).
    pub fn default_inodes_per_group(block_size: u32, num_blocks: u64, ngroups: u32) -> u64 {
        let ipb = (block_size as usize / DINODE_SIZE) as u64;
        Self::default_inodes(block_size, num_blocks).div_ceil(ngroups.max(1) as u64).div_ceil(ipb) * ipb
    }

    /// Computes mkfs's geometry for a device of `num_blocks` blocks. `inodes` is the number of
    /// inodes wanted (default: one per 16 KiB of space). There are at least `MKFS_MIN_GROUPS`
    /// groups: a device the default group size would cover in one gets groups of half its size
    /// (rounded up to 64 blocks), so that the second group's superblock copy exists.
    pub fn geometry(block_size: u32, num_blocks: u64, inodes: Option<u64>) -> Result<Superblock, FormatError> {
        Self::geometry_groups(block_size, num_blocks, inodes, MKFS_MIN_GROUPS)
    }

    /// `geometry` with at least `min_groups` groups. With 1 the group size alone decides, as
    /// mkfs did before `MKFS_MIN_GROUPS`: an image up to the default group size (64 MiB of 4 KiB
    /// blocks) has one group and no superblock copy (tests of such images).
    pub fn geometry_groups(
        block_size: u32,
        num_blocks: u64,
        inodes: Option<u64>,
        min_groups: u64,
    ) -> Result<Superblock, FormatError> {
        if !block_size.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size) {
            return Err(FormatError::BadGeometry(format!(
                "block size {block_size} is not a power of two from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE}"
            )));
        }
        if min_groups == 0 {
            return Err(FormatError::BadGeometry("at least one group".into()));
        }
        let min_blocks = min_groups.saturating_mul(64);
        if num_blocks < min_blocks {
            return Err(FormatError::BadGeometry(format!(
                "{num_blocks} blocks is too small (at least {min_blocks}: {min_groups} groups of 64)"
            )));
        }
        let ipb = block_size / DINODE_SIZE as u32;
        let bits = ((block_size as usize - CG_HDR_SIZE) * 8) as u64;
        let want_inodes = inodes.unwrap_or(Self::default_inodes(block_size, num_blocks)).max(16);
        // Bits in the header hold both bitmaps: bpg + ipg <= bits. Start from the ratio wanted,
        // no larger than leaves `min_groups` groups, and shrink groups until the inodes fit.
        let ratio = (num_blocks as f64 / want_inodes as f64).max(1.0);
        let mut bpg = ((bits as f64 * ratio / (ratio + 1.0)) as u64 / 64 * 64).min(bits);
        if min_groups > 1 {
            bpg = bpg.min(num_blocks.div_ceil(min_groups).next_multiple_of(64));
        }
        loop {
            if bpg < 64 {
                return Err(FormatError::BadGeometry(format!(
                    "cannot fit {want_inodes} inodes in {num_blocks} blocks as {min_groups} groups or more of a multiple of 64 blocks, each with room for its superblock, header and inode table"
                )));
            }
            let ngroups = num_blocks.div_ceil(bpg);
            let ipg = want_inodes.div_ceil(ngroups).div_ceil(ipb as u64) * ipb as u64;
            let itable = ipg / ipb as u64;
            let last = num_blocks - (ngroups - 1) * bpg;
            if bpg + ipg <= bits && 2 + itable < last.min(bpg) && ipg <= u32::MAX as u64 / ngroups {
                let sb = Superblock {
                    version: VERSION,
                    block_size,
                    num_blocks,
                    blocks_per_group: bpg as u32,
                    inodes_per_group: ipg as u32,
                    ngroups: ngroups as u32,
                    free_blocks: 0,
                    free_inodes: 0,
                    ndirs: 0,
                    flags: SB_CLEAN,
                    created: 0,
                    mount_time: 0,
                    write_time: 0,
                    mount_count: 0,
                    minfree: None,
                    default_ordering: ORDER_DEFAULT,
                    label: Vec::new(),
                    snapshots: [0; MAX_SNAPSHOTS],
                    ufs2: None,
                };
                sb.check_geometry()?;
                assert!(sb.ngroups as u64 >= min_groups, "{} groups, asked for {min_groups}", sb.ngroups);
                return Ok(sb);
            }
            bpg = bpg * 7 / 8 / 64 * 64;
        }
    }

    /// Checks that the geometry is self-consistent, so that no later computation on a corrupt
    /// superblock can overflow or index out of bounds.
    pub fn check_geometry(&self) -> Result<(), FormatError> {
        let bad = |s: String| Err(FormatError::BadGeometry(s));
        let bs = self.block_size;
        if !bs.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&bs) {
            return bad(format!("block size {bs}"));
        }
        if self.num_blocks < 64 {
            return bad(format!("{} blocks is too small (at least {MIN_FS_BLOCKS})", self.num_blocks));
        }
        if self.blocks_per_group < 64 || self.inodes_per_group == 0 || self.ngroups == 0 {
            return bad(format!(
                "blocks per group {}, inodes per group {}, groups {}",
                self.blocks_per_group, self.inodes_per_group, self.ngroups
            ));
        }
        let bits = ((bs as usize - CG_HDR_SIZE) * 8) as u64;
        if self.blocks_per_group as u64 + self.inodes_per_group as u64 > bits {
            return bad("bitmaps do not fit in the group header".into());
        }
        if !self.inodes_per_group.is_multiple_of(self.inodes_per_block()) {
            return bad("inodes per group is not a multiple of inodes per block".into());
        }
        if (self.ngroups as u64).checked_mul(self.blocks_per_group as u64).is_none()
            || self.num_blocks.div_ceil(self.blocks_per_group as u64) != self.ngroups as u64
        {
            return bad(format!(
                "{} groups of {} blocks do not cover {} blocks",
                self.ngroups, self.blocks_per_group, self.num_blocks
            ));
        }
        if self.total_inodes() > u32::MAX as u64 {
            return bad("too many inodes".into());
        }
        let last = self.cg_blocks(self.ngroups - 1) as u64;
        if 2 + self.inode_table_blocks() as u64 >= last {
            return bad("last group too small for its inode table".into());
        }
        if self.minfree.is_some_and(|m| m > MAX_MINFREE) {
            return bad(format!("minfree {}% (at most {MAX_MINFREE})", self.minfree_percent()));
        }
        if self.default_ordering > ORDER_ASYNC {
            return bad(format!("default ordering {} (at most {ORDER_ASYNC})", self.default_ordering));
        }
        if self.label.len() > MAX_LABEL || self.label.contains(&0) {
            return bad("the label is longer than 32 bytes or holds a NUL".into());
        }
        if self.total_inodes() <= LOST_FOUND_INO as u64 {
            return bad("too few inodes".into());
        }
        Ok(())
    }

    pub fn encode(&self, buf: &mut [u8]) {
        assert!(self.ufs2.is_none(), "a UFS2 image's superblock is never written as sufs's");
        buf[..SB_SIZE].fill(0);
        put_u64(buf, SB_MAGIC, MAGIC);
        put_u32(buf, SB_VERSION, self.version);
        put_u32(buf, SB_BSIZE, self.block_size);
        put_u64(buf, SB_NBLOCKS, self.num_blocks);
        put_u32(buf, SB_BPG, self.blocks_per_group);
        put_u32(buf, SB_IPG, self.inodes_per_group);
        put_u32(buf, SB_NGROUPS, self.ngroups);
        put_u32(buf, SB_FLAGS, self.flags);
        put_u64(buf, SB_FREE_BLOCKS, self.free_blocks);
        put_u64(buf, SB_FREE_INODES, self.free_inodes);
        put_u64(buf, SB_NDIRS, self.ndirs);
        put_i64(buf, SB_CREATED, self.created);
        put_i64(buf, SB_MTIME, self.mount_time);
        put_i64(buf, SB_WTIME, self.write_time);
        put_u32(buf, SB_MNTCOUNT, self.mount_count);
        if let Some(m) = self.minfree {
            buf[SB_MINFREE_SET] = 1;
            buf[SB_MINFREE] = m;
        }
        buf[SB_ORDERING] = self.default_ordering;
        assert!(self.label.len() <= MAX_LABEL, "label of {} bytes", self.label.len());
        buf[SB_LABEL..SB_LABEL + self.label.len()].copy_from_slice(&self.label);
        for (i, s) in self.snapshots.iter().enumerate() {
            put_u32(buf, SB_SNAPS + 4 * i, *s);
        }
        let crc = crc32c::crc32c(&buf[..SB_CRC]);
        put_u32(buf, SB_CRC, crc);
    }

    pub fn decode(buf: &[u8]) -> Result<Superblock, FormatError> {
        if buf.len() < SB_SIZE {
            return Err(FormatError::BadGeometry("superblock buffer too short".into()));
        }
        let magic = get_u64(buf, SB_MAGIC);
        if magic != MAGIC {
            return Err(FormatError::BadMagic(magic));
        }
        let version = get_u32(buf, SB_VERSION);
        if version != VERSION && version != VERSION_EAGER {
            return Err(FormatError::BadVersion(version));
        }
        let stored = get_u32(buf, SB_CRC);
        let computed = crc32c::crc32c(&buf[..SB_CRC]);
        if stored != computed {
            return Err(FormatError::BadChecksum { stored, computed });
        }
        let mut snapshots = [0u32; MAX_SNAPSHOTS];
        for (i, s) in snapshots.iter_mut().enumerate() {
            *s = get_u32(buf, SB_SNAPS + 4 * i);
        }
        let sb = Superblock {
            version,
            block_size: get_u32(buf, SB_BSIZE),
            num_blocks: get_u64(buf, SB_NBLOCKS),
            blocks_per_group: get_u32(buf, SB_BPG),
            inodes_per_group: get_u32(buf, SB_IPG),
            ngroups: get_u32(buf, SB_NGROUPS),
            free_blocks: get_u64(buf, SB_FREE_BLOCKS),
            free_inodes: get_u64(buf, SB_FREE_INODES),
            ndirs: get_u64(buf, SB_NDIRS),
            flags: get_u32(buf, SB_FLAGS),
            created: get_i64(buf, SB_CREATED),
            mount_time: get_i64(buf, SB_MTIME),
            write_time: get_i64(buf, SB_WTIME),
            mount_count: get_u32(buf, SB_MNTCOUNT),
            minfree: (buf[SB_MINFREE_SET] != 0).then_some(buf[SB_MINFREE]),
            default_ordering: buf[SB_ORDERING],
            label: label_at(&buf[SB_LABEL..SB_LABEL + MAX_LABEL]),
            snapshots,
            ufs2: None,
        };
        sb.check_geometry()?;
        Ok(sb)
    }
}

/// The label in its NUL-padded field: the bytes before the first NUL.
fn label_at(field: &[u8]) -> Vec<u8> {
    field.iter().take_while(|&&c| c != 0).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_sb() -> Superblock {
        let mut sb = Superblock::geometry(4096, 262144, None).unwrap();
        sb.free_blocks = 1000;
        sb.free_inodes = 77;
        sb.ndirs = 3;
        sb.flags = SB_CLEAN | SB_SOFTDEP;
        sb.created = 1_700_000_000;
        sb.snapshots[3] = 99;
        sb.minfree = Some(5);
        sb.default_ordering = ORDER_SYNC;
        sb.label = b"volume-1".to_vec();
        sb
    }

    #[test]
    fn superblock_round_trip() {
        let sb = sample_sb();
        let mut buf = vec![0u8; 4096];
        sb.encode(&mut buf);
        assert_eq!(Superblock::decode(&buf).unwrap(), sb);
        // An image made before the field reads as the default reserve; 0% is kept as 0%.
        for (m, pct) in [(None, DEFAULT_MINFREE), (Some(0), 0)] {
            let s = Superblock { minfree: m, ..sb.clone() };
            s.encode(&mut buf);
            let back = Superblock::decode(&buf).unwrap();
            assert_eq!((back.minfree, back.minfree_percent()), (m, pct));
        }
        assert_eq!(buf[SB_MINFREE_SET..SB_MINFREE + 1], [1, 0]);
        // An image made before the label and the default ordering reads as neither set.
        let s = Superblock { label: Vec::new(), default_ordering: ORDER_DEFAULT, ..sb.clone() };
        s.encode(&mut buf);
        assert!(buf[SB_ORDERING] == 0 && buf[SB_LABEL..SB_CRC].iter().all(|&b| b == 0));
        let full = Superblock { label: vec![b'x'; MAX_LABEL], ..sb.clone() };
        full.encode(&mut buf);
        assert_eq!(Superblock::decode(&buf).unwrap(), full);
    }

    #[test]
    fn superblock_refuses_corruption() {
        let sb = sample_sb();
        let mut buf = vec![0u8; 4096];
        sb.encode(&mut buf);
        let mut bad = buf.clone();
        bad[0] ^= 1;
        assert!(matches!(Superblock::decode(&bad), Err(FormatError::BadMagic(_))));
        let mut bad = buf.clone();
        bad[SB_VERSION] = 9;
        assert!(matches!(Superblock::decode(&bad), Err(FormatError::BadVersion(9))));
        let mut bad = buf.clone();
        bad[SB_FREE_BLOCKS] ^= 0xff;
        assert!(matches!(Superblock::decode(&bad), Err(FormatError::BadChecksum { .. })));
        // A checksummed but inconsistent geometry is refused too.
        let mut g = sb.clone();
        g.ngroups += 1;
        g.encode(&mut buf);
        assert!(matches!(Superblock::decode(&buf), Err(FormatError::BadGeometry(_))));
    }

    #[test]
    fn geometry_is_consistent_over_sizes() {
        for &(bs, n) in &[(4096u32, 300u64), (4096, 262144), (8192, 100_000), (65536, 5000), (4096, 1 << 22)] {
            let sb = Superblock::geometry(bs, n, None).unwrap();
            sb.check_geometry().unwrap();
            assert!(sb.total_inodes() > 3);
            for cg in 0..sb.ngroups {
                assert!(sb.cg_data_start(cg) < sb.cg_start(cg) + sb.cg_blocks(cg) as u64);
            }
        }
        let sb = Superblock::geometry(4096, 262144, Some(1000)).unwrap();
        assert!(sb.total_inodes() >= 1000);
        // At least two groups, so a superblock copy: half the device when one group would do.
        for n in [128u64, 133, 8192, 16384, 25792] {
            let sb = Superblock::geometry(4096, n, None).unwrap();
            assert_eq!((sb.ngroups, sb.blocks_per_group as u64), (2, n.div_ceil(2).next_multiple_of(64)), "{n}");
        }
        assert!(Superblock::geometry(4096, 127, None).is_err());
        // 129 blocks: a second group of 1 block, or a third one: no room for either's metadata.
        assert!(Superblock::geometry(4096, 129, None).is_err());
        // The old rule, for tests of images made with it: one group while the default size holds.
        let one = Superblock::geometry_groups(4096, 16384, None, 1).unwrap();
        assert_eq!((one.ngroups, one.blocks_per_group), (1, 25792));
        assert_eq!(Superblock::default_inodes_per_group(4096, 16384, 1), one.inodes_per_group as u64);
        assert!(Superblock::geometry(3000, 1000, None).is_err());
        assert!(Superblock::geometry(4096, 10, None).is_err());
    }
}
