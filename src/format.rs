//! The on-disk format (FFS layout, DESIGN.md "On-disk format"): superblock, cylinder group
//! header with its bitmaps, 256-byte dinode and the directory chunk. Every structure is encoded
//! here and nowhere else, little-endian at explicit offsets; the superblock and the cylinder group
//! headers carry a CRC32C so that a torn or foreign block is refused rather than trusted.
//!
//! Layout of cylinder group `g` (first block `g * blocks_per_group`): a superblock copy (the
//! primary in group 0), the group header (counts, inode bitmap, block bitmap), the inode table,
//! then data blocks.

use thiserror::Error;

pub const MAGIC: u64 = 0x5355_4653_4646_5331; // "SUFSFFS1"
pub const VERSION: u32 = 1;
pub const CG_MAGIC: u32 = 0x4347_5346; // "FSGC"
pub const DINODE_SIZE: usize = 256;
pub const NDADDR: usize = 12;
pub const NIADDR: usize = 3;
pub const MAX_SNAPSHOTS: usize = 20;
pub const DIRBLKSIZ: usize = 512;
pub const MAXNAMLEN: usize = 255;
pub const ROOT_INO: u32 = 2;
pub const LOST_FOUND_INO: u32 = 3;
/// First inode number handed out to users; 0 and 1 are never used, as in FFS.
pub const FIRST_INO: u32 = 2;
pub const MIN_BLOCK_SIZE: u32 = 4096;
pub const MAX_BLOCK_SIZE: u32 = 65536;
/// The fewest blocks a file system can have.
pub const MIN_FS_BLOCKS: u64 = 64;
/// Bytes of a cylinder group header before its inode bitmap.
pub const CG_HDR_SIZE: usize = 64;
/// The longest symbolic link target sufs makes: the kernel's PATH_MAX (4096) less its NUL.
pub const MAX_SYMLINK: usize = 4095;
/// A time's nanoseconds field is below this.
pub const NSEC_PER_SEC: u32 = 1_000_000_000;
/// Largest link count; a link past it is EMLINK.
pub const LINK_MAX: u32 = 32000;

/// Superblock flags. `SB_CLEAN`: unmounted cleanly, the summary counts are exact.
pub const SB_CLEAN: u32 = 1;
/// The last read-write mount ran soft updates: an unclean image holds only what soft updates
/// may leave after a crash (leaks and link counts too high), so it may be mounted at once.
pub const SB_SOFTDEP: u32 = 2;
/// The last read-write mount ran `async` (with neither this nor `SB_SOFTDEP`, it ran `sync`).
pub const SB_ASYNC: u32 = 4;
/// Something was found damaged while mounted (a value read from disk out of range, a bitmap
/// that disagreed with the inodes): only a full `fsck -y` clears it.
pub const SB_NEEDS_FSCK: u32 = 8;

/// Dinode flags (chflags-like); the Block Register and snapshots rely on them.
pub const DI_IMMUTABLE: u32 = 1;
pub const DI_SNAPSHOT: u32 = 2;
pub const DI_UNMOVABLE: u32 = 4;

/// In a snapshot file's block map (logical block = physical block of the file system): the block
/// was not in use when the snapshot was taken, or belongs to a snapshot, and is never copied
/// (FreeBSD's BLK_NOCOPY). 0 means not copied yet: the snapshot reads the block in place.
pub const BLK_NOCOPY: u64 = 1;

pub const S_IFMT: u16 = 0o170000;
pub const S_IFREG: u16 = 0o100000;
pub const S_IFDIR: u16 = 0o040000;
pub const S_IFLNK: u16 = 0o120000;
pub const S_IFIFO: u16 = 0o010000;
pub const S_IFCHR: u16 = 0o020000;
pub const S_IFBLK: u16 = 0o060000;
pub const S_IFSOCK: u16 = 0o140000;

pub const DT_UNKNOWN: u8 = 0;
pub const DT_FIFO: u8 = 1;
pub const DT_CHR: u8 = 2;
pub const DT_DIR: u8 = 4;
pub const DT_BLK: u8 = 6;
pub const DT_REG: u8 = 8;
pub const DT_LNK: u8 = 10;
pub const DT_SOCK: u8 = 12;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("bad magic number {0:#x}: not a sufs image")]
    BadMagic(u64),
    #[error("unsupported format version {0} (this sufs reads version {VERSION})")]
    BadVersion(u32),
    #[error("superblock checksum mismatch (stored {stored:#x}, computed {computed:#x})")]
    BadChecksum { stored: u32, computed: u32 },
    #[error("inconsistent geometry: {0}")]
    BadGeometry(String),
    #[error("cylinder group {cg}: {what}")]
    BadCg { cg: u32, what: String },
}

fn get_u16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn get_u32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
fn get_u64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}
fn get_i64(b: &[u8], o: usize) -> i64 {
    get_u64(b, o) as i64
}
fn put_u16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_le_bytes())
}
fn put_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes())
}
fn put_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes())
}
fn put_i64(b: &mut [u8], o: usize, v: i64) {
    put_u64(b, o, v as u64)
}

/// The superblock. Its summary counts are exact only when `SB_CLEAN` is set; after a crash the
/// mount recomputes them from the cylinder groups (as FFS does with soft updates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
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
    pub snapshots: [u32; MAX_SNAPSHOTS],
}

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
const SB_SNAPS: usize = 96; // 20 * u32 = 80 bytes
const SB_CRC: usize = 252;
pub const SB_SIZE: usize = 256;

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
    pub fn cg_start(&self, cg: u32) -> u64 {
        cg as u64 * self.blocks_per_group as u64
    }
    /// Blocks in group `cg` (the last one may be short).
    pub fn cg_blocks(&self, cg: u32) -> u32 {
        let start = self.cg_start(cg);
        (self.num_blocks - start).min(self.blocks_per_group as u64) as u32
    }
    pub fn cg_header_block(&self, cg: u32) -> u64 {
        self.cg_start(cg) + 1
    }
    pub fn cg_itable_block(&self, cg: u32) -> u64 {
        self.cg_start(cg) + 2
    }
    /// First data block of the group: everything before it is metadata.
    pub fn cg_data_start(&self, cg: u32) -> u64 {
        self.cg_itable_block(cg) + self.inode_table_blocks() as u64
    }
    pub fn cg_of_block(&self, bno: u64) -> u32 {
        (bno / self.blocks_per_group as u64) as u32
    }
    pub fn cg_of_inode(&self, ino: u32) -> u32 {
        ino / self.inodes_per_group
    }
    /// The block of the inode table holding `ino`, and the byte offset of its dinode in it.
    pub fn inode_location(&self, ino: u32) -> (u64, usize) {
        let cg = self.cg_of_inode(ino);
        let idx = ino % self.inodes_per_group;
        let ipb = self.inodes_per_block();
        (self.cg_itable_block(cg) + (idx / ipb) as u64, (idx % ipb) as usize * DINODE_SIZE)
    }
    /// True if `bno` is a data block (may be pointed to by an inode).
    pub fn is_data_block(&self, bno: u64) -> bool {
        bno < self.num_blocks && bno >= self.cg_data_start(self.cg_of_block(bno))
    }
    pub fn is_valid_inode(&self, ino: u32) -> bool {
        ino >= FIRST_INO && (ino as u64) < self.total_inodes()
    }
    pub fn ptrs_per_block(&self) -> u64 {
        self.block_size as u64 / 8
    }
    /// Largest file size the block map can address.
    pub fn max_file_size(&self) -> u64 {
        let p = self.ptrs_per_block();
        let blocks = NDADDR as u64 + p + p * p + p * p * p;
        blocks.saturating_mul(self.block_size as u64)
    }

    /// Computes a geometry for a device of `num_blocks` blocks. `inodes` is the number of inodes
    /// wanted (default: one per 16 KiB of space).
    pub fn geometry(block_size: u32, num_blocks: u64, inodes: Option<u64>) -> Result<Superblock, FormatError> {
        if !block_size.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size) {
            return Err(FormatError::BadGeometry(format!(
                "block size {block_size} is not a power of two from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE}"
            )));
        }
        if num_blocks < MIN_FS_BLOCKS {
            return Err(FormatError::BadGeometry(format!(
                "{num_blocks} blocks is too small (at least {MIN_FS_BLOCKS})"
            )));
        }
        let ipb = block_size / DINODE_SIZE as u32;
        let bits = ((block_size as usize - CG_HDR_SIZE) * 8) as u64;
        let want_inodes = inodes.unwrap_or(num_blocks * block_size as u64 / 16384).max(16);
        // Bits in the header hold both bitmaps: bpg + ipg <= bits. Start from the ratio wanted
        // and shrink groups until the inodes fit.
        let ratio = (num_blocks as f64 / want_inodes as f64).max(1.0);
        let mut bpg = ((bits as f64 * ratio / (ratio + 1.0)) as u64 / 64 * 64).min(bits);
        loop {
            if bpg < 64 {
                return Err(FormatError::BadGeometry(format!(
                    "cannot fit {want_inodes} inodes in {num_blocks} blocks"
                )));
            }
            let ngroups = num_blocks.div_ceil(bpg);
            let ipg = want_inodes.div_ceil(ngroups).div_ceil(ipb as u64) * ipb as u64;
            let itable = ipg / ipb as u64;
            let last = num_blocks - (ngroups - 1) * bpg;
            if bpg + ipg <= bits && 2 + itable < last.min(bpg) && ipg <= u32::MAX as u64 / ngroups {
                let sb = Superblock {
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
                    snapshots: [0; MAX_SNAPSHOTS],
                };
                sb.check_geometry()?;
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
        if self.total_inodes() <= LOST_FOUND_INO as u64 {
            return bad("too few inodes".into());
        }
        Ok(())
    }

    pub fn encode(&self, buf: &mut [u8]) {
        buf[..SB_SIZE].fill(0);
        put_u64(buf, SB_MAGIC, MAGIC);
        put_u32(buf, SB_VERSION, VERSION);
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
        if version != VERSION {
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
            snapshots,
        };
        sb.check_geometry()?;
        Ok(sb)
    }
}

/// A cylinder group header: counts and both bitmaps, in one block (one bitmap buffer per group,
/// as the soft updates paper assumes). The bitmaps live in the block buffer itself; `CgHeader`
/// is the decoded fixed part and `CgView`/`CgViewMut` give bit access over the raw buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgHeader {
    pub cg: u32,
    pub nblocks: u32,
    pub ninodes: u32,
    pub free_blocks: u32,
    pub free_inodes: u32,
    pub ndirs: u32,
    /// Allocation rotors: where the last block / inode search ended.
    pub block_rotor: u32,
    pub inode_rotor: u32,
}

const CG_O_MAGIC: usize = 0;
const CG_O_CG: usize = 4;
const CG_O_NBLOCKS: usize = 8;
const CG_O_NINODES: usize = 12;
const CG_O_FREEB: usize = 16;
const CG_O_FREEI: usize = 20;
const CG_O_NDIRS: usize = 24;
const CG_O_BROTOR: usize = 28;
const CG_O_IROTOR: usize = 32;
const CG_O_CRC: usize = 60;

impl CgHeader {
    /// Byte offset of the inode bitmap in the header block.
    pub fn inode_map_offset() -> usize {
        CG_HDR_SIZE
    }
    /// Byte offset of the block bitmap in the header block.
    pub fn block_map_offset(ipg: u32) -> usize {
        CG_HDR_SIZE + (ipg as usize).div_ceil(8)
    }

    /// Writes the fixed fields; the bitmaps are left as they are. The CRC covers the whole
    /// block and is set by `seal` when the block is written.
    pub fn encode(&self, buf: &mut [u8]) {
        put_u32(buf, CG_O_MAGIC, CG_MAGIC);
        put_u32(buf, CG_O_CG, self.cg);
        put_u32(buf, CG_O_NBLOCKS, self.nblocks);
        put_u32(buf, CG_O_NINODES, self.ninodes);
        put_u32(buf, CG_O_FREEB, self.free_blocks);
        put_u32(buf, CG_O_FREEI, self.free_inodes);
        put_u32(buf, CG_O_NDIRS, self.ndirs);
        put_u32(buf, CG_O_BROTOR, self.block_rotor);
        put_u32(buf, CG_O_IROTOR, self.inode_rotor);
    }

    pub fn decode(buf: &[u8], cg: u32) -> Result<CgHeader, FormatError> {
        let magic = get_u32(buf, CG_O_MAGIC);
        if magic != CG_MAGIC {
            return Err(FormatError::BadCg { cg, what: format!("bad magic {magic:#x}") });
        }
        let stored = get_u32(buf, CG_O_CRC);
        let computed = cg_crc(buf);
        if stored != computed {
            return Err(FormatError::BadCg {
                cg,
                what: format!("checksum mismatch (stored {stored:#x}, computed {computed:#x})"),
            });
        }
        let h = CgHeader {
            cg: get_u32(buf, CG_O_CG),
            nblocks: get_u32(buf, CG_O_NBLOCKS),
            ninodes: get_u32(buf, CG_O_NINODES),
            free_blocks: get_u32(buf, CG_O_FREEB),
            free_inodes: get_u32(buf, CG_O_FREEI),
            ndirs: get_u32(buf, CG_O_NDIRS),
            block_rotor: get_u32(buf, CG_O_BROTOR),
            inode_rotor: get_u32(buf, CG_O_IROTOR),
        };
        if h.cg != cg {
            return Err(FormatError::BadCg { cg, what: format!("header says group {}", h.cg) });
        }
        Ok(h)
    }

    /// Stamps the checksum of a header block about to be written.
    pub fn seal(buf: &mut [u8]) {
        let crc = cg_crc(buf);
        put_u32(buf, CG_O_CRC, crc);
    }
}

fn cg_crc(buf: &[u8]) -> u32 {
    let c = crc32c::crc32c(&buf[..CG_O_CRC]);
    crc32c::crc32c_append(c, &buf[CG_O_CRC + 4..])
}

// Counter access over a raw header buffer, for the allocator which works on the cached block.
pub fn cg_get_free_blocks(buf: &[u8]) -> u32 {
    get_u32(buf, CG_O_FREEB)
}
pub fn cg_set_free_blocks(buf: &mut [u8], v: u32) {
    put_u32(buf, CG_O_FREEB, v)
}
pub fn cg_get_free_inodes(buf: &[u8]) -> u32 {
    get_u32(buf, CG_O_FREEI)
}
pub fn cg_set_free_inodes(buf: &mut [u8], v: u32) {
    put_u32(buf, CG_O_FREEI, v)
}
pub fn cg_get_ndirs(buf: &[u8]) -> u32 {
    get_u32(buf, CG_O_NDIRS)
}
pub fn cg_set_ndirs(buf: &mut [u8], v: u32) {
    put_u32(buf, CG_O_NDIRS, v)
}
pub fn cg_get_rotors(buf: &[u8]) -> (u32, u32) {
    (get_u32(buf, CG_O_BROTOR), get_u32(buf, CG_O_IROTOR))
}
pub fn cg_set_rotors(buf: &mut [u8], block: u32, inode: u32) {
    put_u32(buf, CG_O_BROTOR, block);
    put_u32(buf, CG_O_IROTOR, inode);
}

pub fn bit_get(map: &[u8], i: usize) -> bool {
    map[i / 8] & (1 << (i % 8)) != 0
}
pub fn bit_set(map: &mut [u8], i: usize, v: bool) {
    if v {
        map[i / 8] |= 1 << (i % 8);
    } else {
        map[i / 8] &= !(1 << (i % 8));
    }
}

/// The on-disk inode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dinode {
    pub mode: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Blocks held (data and indirect), in file-system blocks.
    pub blocks: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub btime: i64,
    pub atime_ns: u32,
    pub mtime_ns: u32,
    pub ctime_ns: u32,
    pub btime_ns: u32,
    pub generation: u32,
    pub flags: u32,
    pub rdev: u32,
    pub db: [u64; NDADDR],
    pub ib: [u64; NIADDR],
}

const DI_MODE: usize = 0;
const DI_NLINK: usize = 4;
const DI_UID: usize = 8;
const DI_GID: usize = 12;
const DI_SIZE: usize = 16;
const DI_BLOCKS: usize = 24;
const DI_ATIME: usize = 32;
const DI_MTIME: usize = 40;
const DI_CTIME: usize = 48;
const DI_BTIME: usize = 56;
const DI_ATIME_NS: usize = 64;
const DI_MTIME_NS: usize = 68;
const DI_CTIME_NS: usize = 72;
const DI_BTIME_NS: usize = 76;
const DI_GEN: usize = 80;
const DI_FLAGS: usize = 84;
const DI_DB: usize = 88;
const DI_IB: usize = DI_DB + 8 * NDADDR; // 184
const DI_RDEV: usize = DI_IB + 8 * NIADDR; // 208

impl Dinode {
    pub fn encode(&self, b: &mut [u8]) {
        let b = &mut b[..DINODE_SIZE];
        b.fill(0);
        put_u16(b, DI_MODE, self.mode);
        put_u32(b, DI_NLINK, self.nlink);
        put_u32(b, DI_UID, self.uid);
        put_u32(b, DI_GID, self.gid);
        put_u64(b, DI_SIZE, self.size);
        put_u64(b, DI_BLOCKS, self.blocks);
        put_i64(b, DI_ATIME, self.atime);
        put_i64(b, DI_MTIME, self.mtime);
        put_i64(b, DI_CTIME, self.ctime);
        put_i64(b, DI_BTIME, self.btime);
        put_u32(b, DI_ATIME_NS, self.atime_ns);
        put_u32(b, DI_MTIME_NS, self.mtime_ns);
        put_u32(b, DI_CTIME_NS, self.ctime_ns);
        put_u32(b, DI_BTIME_NS, self.btime_ns);
        put_u32(b, DI_GEN, self.generation);
        put_u32(b, DI_FLAGS, self.flags);
        for i in 0..NDADDR {
            put_u64(b, DI_DB + 8 * i, self.db[i]);
        }
        for i in 0..NIADDR {
            put_u64(b, DI_IB + 8 * i, self.ib[i]);
        }
        put_u32(b, DI_RDEV, self.rdev);
    }

    pub fn decode(b: &[u8]) -> Dinode {
        let mut d = Dinode {
            mode: get_u16(b, DI_MODE),
            nlink: get_u32(b, DI_NLINK),
            uid: get_u32(b, DI_UID),
            gid: get_u32(b, DI_GID),
            size: get_u64(b, DI_SIZE),
            blocks: get_u64(b, DI_BLOCKS),
            atime: get_i64(b, DI_ATIME),
            mtime: get_i64(b, DI_MTIME),
            ctime: get_i64(b, DI_CTIME),
            btime: get_i64(b, DI_BTIME),
            atime_ns: get_u32(b, DI_ATIME_NS),
            mtime_ns: get_u32(b, DI_MTIME_NS),
            ctime_ns: get_u32(b, DI_CTIME_NS),
            btime_ns: get_u32(b, DI_BTIME_NS),
            generation: get_u32(b, DI_GEN),
            flags: get_u32(b, DI_FLAGS),
            rdev: get_u32(b, DI_RDEV),
            ..Default::default()
        };
        for i in 0..NDADDR {
            d.db[i] = get_u64(b, DI_DB + 8 * i);
        }
        for i in 0..NIADDR {
            d.ib[i] = get_u64(b, DI_IB + 8 * i);
        }
        d
    }

    /// A new inode: every time set to `now`, no blocks.
    pub fn new(mode: u16, nlink: u32, uid: u32, gid: u32, now: (i64, u32), generation: u32) -> Dinode {
        let (s, ns) = now;
        Dinode {
            mode,
            nlink,
            uid,
            gid,
            atime: s,
            mtime: s,
            ctime: s,
            btime: s,
            atime_ns: ns,
            mtime_ns: ns,
            ctime_ns: ns,
            btime_ns: ns,
            generation,
            ..Default::default()
        }
    }

    pub fn is_free(&self) -> bool {
        self.mode == 0
    }
    pub fn file_type(&self) -> u16 {
        self.mode & S_IFMT
    }
    pub fn is_dir(&self) -> bool {
        self.file_type() == S_IFDIR
    }
    pub fn is_reg(&self) -> bool {
        self.file_type() == S_IFREG
    }
    pub fn is_symlink(&self) -> bool {
        self.file_type() == S_IFLNK
    }
    /// True if the inode's block pointers address data (regular files, directories, symlinks).
    pub fn has_blocks(&self) -> bool {
        matches!(self.file_type(), S_IFREG | S_IFDIR | S_IFLNK)
    }
}

/// The directory-entry type recorded for a mode.
pub fn dtype_of_mode(mode: u16) -> u8 {
    match mode & S_IFMT {
        S_IFREG => DT_REG,
        S_IFDIR => DT_DIR,
        S_IFLNK => DT_LNK,
        S_IFIFO => DT_FIFO,
        S_IFCHR => DT_CHR,
        S_IFBLK => DT_BLK,
        S_IFSOCK => DT_SOCK,
        _ => DT_UNKNOWN,
    }
}

/// Reads a block pointer from an indirect block.
pub fn ind_get(block: &[u8], i: usize) -> u64 {
    get_u64(block, 8 * i)
}
pub fn ind_set(block: &mut [u8], i: usize, v: u64) {
    put_u64(block, 8 * i, v)
}

/// Directory entries: `ino u32, reclen u16, type u8, namelen u8, name`, padded to 4 bytes, in
/// 512-byte chunks that never span a sector. Entries in a chunk chain by `reclen` to the chunk's
/// end; an entry's byte offset in the directory names it (diradd/dirrem need that).
pub const DIRENT_HDR: usize = 8;

/// Space an entry with a name of `namelen` bytes needs.
pub fn dirent_size(namelen: usize) -> usize {
    DIRENT_HDR + (namelen + 1).div_ceil(4) * 4
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Byte offset of the entry in its block.
    pub offset: usize,
    pub ino: u32,
    pub reclen: u16,
    pub dtype: u8,
    pub name: Vec<u8>,
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error("bad directory entry at offset {offset}: {what}")]
pub struct DirError {
    pub offset: usize,
    pub what: &'static str,
}

/// An entry of a directory block, borrowed from the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirRef<'a> {
    pub offset: usize,
    pub ino: u32,
    pub reclen: u16,
    pub dtype: u8,
    pub name: &'a [u8],
}

impl DirRef<'_> {
    pub fn to_owned(&self) -> DirEntry {
        DirEntry {
            offset: self.offset,
            ino: self.ino,
            reclen: self.reclen,
            dtype: self.dtype,
            name: self.name.to_vec(),
        }
    }
    /// Bytes of the record not used by this entry.
    pub fn slack(&self) -> usize {
        let used = if self.ino == 0 { 0 } else { dirent_size(self.name.len()) };
        self.reclen as usize - used
    }
}

/// Walks every record (live or empty) of a directory block, checking the chunk structure; stops
/// at the first malformed record with its error.
pub struct DirIter<'a> {
    block: &'a [u8],
    off: usize,
    failed: bool,
}

pub fn dir_iter(block: &[u8]) -> DirIter<'_> {
    DirIter { block, off: 0, failed: false }
}

impl<'a> Iterator for DirIter<'a> {
    type Item = Result<DirRef<'a>, DirError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.off >= self.block.len() {
            return None;
        }
        let chunk = self.off / DIRBLKSIZ * DIRBLKSIZ;
        match dirent_at(self.block, self.off, chunk) {
            Ok(e) => {
                self.off += e.reclen as usize;
                Some(Ok(e))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Parses every entry (live or empty) of a directory block, checking the chunk structure.
pub fn dir_entries(block: &[u8]) -> Result<Vec<DirEntry>, DirError> {
    dir_iter(block).map(|r| r.map(|e| e.to_owned())).collect()
}

fn dirent_at(block: &[u8], off: usize, chunk: usize) -> Result<DirRef<'_>, DirError> {
    let err = |what| Err(DirError { offset: off, what });
    if off + DIRENT_HDR > chunk + DIRBLKSIZ {
        return err("header crosses a chunk");
    }
    let ino = get_u32(block, off);
    let reclen = get_u16(block, off + 4);
    let dtype = block[off + 6];
    let namelen = block[off + 7] as usize;
    if !(reclen as usize).is_multiple_of(4) || (reclen as usize) < DIRENT_HDR {
        return err("bad record length");
    }
    if off + reclen as usize > chunk + DIRBLKSIZ {
        return err("record crosses a chunk");
    }
    let mut name: &[u8] = &[];
    if ino != 0 {
        if namelen == 0 || dirent_size(namelen) > reclen as usize {
            return err("name does not fit its record");
        }
        name = &block[off + DIRENT_HDR..off + DIRENT_HDR + namelen];
        // One pass: names are short, and two `memchr` calls cost more than the bytes.
        if name.iter().any(|&c| c == 0 || c == b'/') {
            return err("name holds NUL or '/'");
        }
    }
    Ok(DirRef { offset: off, ino, reclen, dtype, name })
}

/// Writes an entry header and name at `off` (the record length is given).
pub fn dirent_put(block: &mut [u8], off: usize, ino: u32, reclen: usize, dtype: u8, name: &[u8]) {
    debug_assert!(name.len() <= MAXNAMLEN && dirent_size(name.len()) <= reclen);
    put_u32(block, off, ino);
    put_u16(block, off + 4, reclen as u16);
    block[off + 6] = dtype;
    block[off + 7] = name.len() as u8;
    block[off + DIRENT_HDR..off + DIRENT_HDR + name.len()].copy_from_slice(name);
    let end = off + dirent_size(name.len());
    block[off + DIRENT_HDR + name.len()..end].fill(0);
}

/// Sets the inode number of the entry at `off` (used by rename and roll-back).
pub fn dirent_set_ino(block: &mut [u8], off: usize, ino: u32) {
    put_u32(block, off, ino)
}
pub fn dirent_set_type(block: &mut [u8], off: usize, dtype: u8) {
    block[off + 6] = dtype;
}

/// Formats `block` as an empty directory block: each chunk one empty record.
pub fn dir_init_block(block: &mut [u8]) {
    block.fill(0);
    for chunk in (0..block.len()).step_by(DIRBLKSIZ) {
        dirent_put(block, chunk, 0, DIRBLKSIZ, DT_UNKNOWN, b"");
    }
}

/// Finds room for an entry of `namelen` bytes; returns the offset of the record to split.
pub fn dir_find_space(block: &[u8], namelen: usize) -> Result<Option<usize>, DirError> {
    let need = dirent_size(namelen);
    for e in dir_iter(block) {
        let e = e?;
        if e.slack() >= need {
            return Ok(Some(e.offset));
        }
    }
    Ok(None)
}

/// Inserts an entry into the record at `at` (found by `dir_find_space`); returns the new entry's
/// offset.
pub fn dir_insert(block: &mut [u8], at: usize, ino: u32, dtype: u8, name: &[u8]) -> Result<usize, DirError> {
    let chunk = at / DIRBLKSIZ * DIRBLKSIZ;
    let e = dirent_at(block, at, chunk)?;
    if e.ino == 0 {
        dirent_put(block, at, ino, e.reclen as usize, dtype, name);
        return Ok(at);
    }
    let used = dirent_size(e.name.len());
    let rest = e.reclen as usize - used;
    if rest < dirent_size(name.len()) {
        return Err(DirError { offset: at, what: "no room in record" });
    }
    put_u16(block, at + 4, used as u16);
    dirent_put(block, at + used, ino, rest, dtype, name);
    Ok(at + used)
}

/// Removes the entry at `off`: merged into the previous record of its chunk, or, as the first
/// record of a chunk, marked empty (inode 0).
pub fn dir_remove(block: &mut [u8], off: usize) -> Result<(), DirError> {
    let chunk = off / DIRBLKSIZ * DIRBLKSIZ;
    let target = dirent_at(block, off, chunk)?;
    if off == chunk {
        put_u32(block, off, 0);
        return Ok(());
    }
    let mut prev = chunk;
    loop {
        let e = dirent_at(block, prev, chunk)?;
        let next = prev + e.reclen as usize;
        if next == off {
            put_u16(block, prev + 4, e.reclen + target.reclen);
            return Ok(());
        }
        if next > off || next >= chunk + DIRBLKSIZ {
            return Err(DirError { offset: off, what: "entry not on the chunk's chain" });
        }
        prev = next;
    }
}

// ------------------------------------------------------------------ volume snapshot store

/// "SUFSVSNP": the header of a volume snapshot's exception store (`volume`).
pub const VOL_MAGIC: u64 = 0x504E_5356_5346_5553;
pub const VOL_VERSION: u32 = 1;
/// Store kinds.
pub const VOL_STORE_RESERVED: u32 = 1;
pub const VOL_STORE_BR: u32 = 2;
/// Why a snapshot is invalid (0: it is valid).
pub const VOL_INVALID_FULL: u32 = 1;
/// One exception: the origin block and the store index holding its old contents.
pub const VOL_ENTRY_SIZE: usize = 16;

/// The first block of an exception store, as device-mapper's persistent store has one: then come
/// exception areas, each a metadata block of `(origin, store index)` entries (an origin of
/// `u64::MAX` ends the list) followed by the data blocks those entries name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeHeader {
    pub kind: u32,
    pub invalid: u32,
    /// Blocks of the origin (the file system) the snapshot covers.
    pub origin_blocks: u64,
    pub created: i64,
}

const VH_MAGIC: usize = 0;
const VH_VERSION: usize = 8;
const VH_KIND: usize = 12;
const VH_INVALID: usize = 16;
const VH_ORIGIN: usize = 24;
const VH_CREATED: usize = 32;

impl VolumeHeader {
    pub fn encode(&self, b: &mut [u8]) {
        b.fill(0);
        put_u64(b, VH_MAGIC, VOL_MAGIC);
        put_u32(b, VH_VERSION, VOL_VERSION);
        put_u32(b, VH_KIND, self.kind);
        put_u32(b, VH_INVALID, self.invalid);
        put_u64(b, VH_ORIGIN, self.origin_blocks);
        put_i64(b, VH_CREATED, self.created);
    }
    /// None if the block is not a store header (no snapshot there).
    pub fn decode(b: &[u8]) -> Option<VolumeHeader> {
        if b.len() < 40 || get_u64(b, VH_MAGIC) != VOL_MAGIC || get_u32(b, VH_VERSION) != VOL_VERSION {
            return None;
        }
        Some(VolumeHeader {
            kind: get_u32(b, VH_KIND),
            invalid: get_u32(b, VH_INVALID),
            origin_blocks: get_u64(b, VH_ORIGIN),
            created: get_i64(b, VH_CREATED),
        })
    }
}

/// Entry `i` of an exception area block: `(origin block, store index)`, None past the end.
pub fn vol_entry_get(b: &[u8], i: usize) -> Option<(u64, u64)> {
    let o = i * VOL_ENTRY_SIZE;
    let origin = get_u64(b, o);
    (origin != u64::MAX).then(|| (origin, get_u64(b, o + 8)))
}

pub fn vol_entry_set(b: &mut [u8], i: usize, origin: u64, index: u64) {
    let o = i * VOL_ENTRY_SIZE;
    put_u64(b, o, origin);
    put_u64(b, o + 8, index);
}

/// An empty exception area block.
pub fn vol_area_init(b: &mut [u8]) {
    b.fill(0xff);
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
        sb
    }

    #[test]
    fn superblock_round_trip() {
        let sb = sample_sb();
        let mut buf = vec![0u8; 4096];
        sb.encode(&mut buf);
        assert_eq!(Superblock::decode(&buf).unwrap(), sb);
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
        assert!(Superblock::geometry(3000, 1000, None).is_err());
        assert!(Superblock::geometry(4096, 10, None).is_err());
    }

    #[test]
    fn cg_round_trip_and_checksum() {
        let h = CgHeader {
            cg: 5,
            nblocks: 16000,
            ninodes: 4096,
            free_blocks: 12,
            free_inodes: 13,
            ndirs: 2,
            block_rotor: 7,
            inode_rotor: 8,
        };
        let mut buf = vec![0u8; 4096];
        h.encode(&mut buf);
        bit_set(&mut buf[CgHeader::block_map_offset(4096)..], 17, true);
        CgHeader::seal(&mut buf);
        assert_eq!(CgHeader::decode(&buf, 5).unwrap(), h);
        assert!(CgHeader::decode(&buf, 4).is_err());
        buf[CgHeader::block_map_offset(4096) + 100] ^= 4;
        assert!(CgHeader::decode(&buf, 5).is_err());
    }

    #[test]
    fn dinode_round_trip() {
        let mut d = Dinode {
            mode: S_IFREG | 0o644,
            nlink: 3,
            uid: 1000,
            gid: 100,
            size: 1 << 40,
            blocks: 12345,
            atime: -5,
            mtime: 6,
            ctime: 7,
            btime: 8,
            atime_ns: 1,
            mtime_ns: 2,
            ctime_ns: 3,
            btime_ns: 4,
            generation: 42,
            flags: DI_IMMUTABLE | DI_UNMOVABLE,
            rdev: 0x0801,
            ..Default::default()
        };
        for i in 0..NDADDR {
            d.db[i] = 1000 + i as u64;
        }
        d.ib = [u64::MAX, 2, 3];
        let mut buf = vec![0xAAu8; DINODE_SIZE];
        d.encode(&mut buf);
        assert_eq!(Dinode::decode(&buf), d);
    }

    #[test]
    fn directory_insert_find_remove() {
        let mut b = vec![0u8; 4096];
        dir_init_block(&mut b);
        assert!(dir_entries(&b).unwrap().iter().all(|e| e.ino == 0));
        let mut offs = Vec::new();
        for i in 0..100u32 {
            let name = format!("file-{i:03}");
            let at = dir_find_space(&b, name.len()).unwrap().unwrap();
            offs.push(dir_insert(&mut b, at, 100 + i, DT_REG, name.as_bytes()).unwrap());
        }
        let live: Vec<_> = dir_entries(&b).unwrap().into_iter().filter(|e| e.ino != 0).collect();
        assert_eq!(live.len(), 100);
        assert!(offs.iter().all(|o| o % DIRBLKSIZ + 8 <= DIRBLKSIZ));
        for (i, o) in offs.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
            dir_remove(&mut b, *o).unwrap();
            let _ = i;
        }
        let live: Vec<_> = dir_entries(&b).unwrap().into_iter().filter(|e| e.ino != 0).collect();
        assert_eq!(live.len(), 50);
        assert!(live.iter().all(|e| (e.ino - 100) % 2 == 1));
        let long = vec![b'x'; MAXNAMLEN];
        let at = dir_find_space(&b, MAXNAMLEN).unwrap().unwrap();
        dir_insert(&mut b, at, 7, DT_DIR, &long).unwrap();
        assert!(dir_entries(&b).unwrap().iter().any(|e| e.name == long));
    }

    #[test]
    fn directory_parse_rejects_garbage() {
        let mut b = vec![0u8; 4096];
        dir_init_block(&mut b);
        put_u16(&mut b, 4, 6); // reclen not a multiple of 4 / too small
        assert!(dir_entries(&b).is_err());
        dir_init_block(&mut b);
        put_u16(&mut b, 4, 1024); // crosses a chunk
        assert!(dir_entries(&b).is_err());
        // A name holding '/' or NUL, at its start, middle or end, is refused; its neighbours pass.
        for bad in [&b"/ab"[..], b"a/b", b"ab\0", b"\0"] {
            dir_init_block(&mut b);
            let at = dir_find_space(&b, 3).unwrap().unwrap();
            dir_insert(&mut b, at, 9, DT_REG, b"abc").unwrap();
            let e = dir_entries(&b).unwrap().into_iter().find(|e| e.ino == 9).unwrap();
            b[e.offset + DIRENT_HDR..e.offset + DIRENT_HDR + 3].fill(b'x');
            b[e.offset + DIRENT_HDR..e.offset + DIRENT_HDR + bad.len()].copy_from_slice(bad);
            let err = dir_entries(&b).unwrap_err();
            assert_eq!((err.offset, err.what), (e.offset, "name holds NUL or '/'"), "{bad:?}");
        }
        b[DIRENT_HDR..DIRENT_HDR + 3].copy_from_slice(b"xyz");
        assert!(dir_entries(&b).is_ok());
    }

    #[test]
    fn volume_header_and_area_round_trip() {
        let h = VolumeHeader { kind: VOL_STORE_BR, invalid: 0, origin_blocks: 12345, created: -3 };
        let mut b = vec![0u8; 4096];
        h.encode(&mut b);
        assert_eq!(VolumeHeader::decode(&b), Some(h));
        b[0] ^= 1;
        assert_eq!(VolumeHeader::decode(&b), None);
        vol_area_init(&mut b);
        assert_eq!(vol_entry_get(&b, 0), None);
        vol_entry_set(&mut b, 0, 7, 9);
        vol_entry_set(&mut b, 255, 0, 1);
        assert_eq!(
            (vol_entry_get(&b, 0), vol_entry_get(&b, 1), vol_entry_get(&b, 255)),
            (Some((7, 9)), None, Some((0, 1)))
        );
    }
}
