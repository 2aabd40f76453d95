//! The 256-byte on-disk inode (`Dinode`), the directory-entry type of a mode, and the block
//! pointers of an indirect block.

use super::*;

/// The on-disk inode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dinode {
    pub mode: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Blocks held (data, indirect and extended-attribute), in file-system blocks.
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
    /// Bytes of the extended-attribute area (UFS2's `di_extsize`); 0: no attributes.
    pub extsize: u32,
    /// The blocks of the extended-attribute area (UFS2's `di_extb`), `ceil(extsize /
    /// block_size)` of them in order, the rest 0.
    pub extb: [u64; NXADDR],
    /// What a UFS2 dinode holds that sufs does not use, kept to be written back as read
    /// (`layout.rs`); zero on a sufs image.
    pub ufs2: Ufs2Extra,
}

/// The fields of a UFS2 dinode sufs keeps without interpreting them: written back as they were
/// read, so that an inode sufs changes loses nothing FreeBSD put there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ufs2Extra {
    /// `di_flags` as read: the bits sufs maps to its own flags are taken from `Dinode::flags`
    /// when the inode is written, the others kept.
    pub flags: u32,
    pub kernflags: u32,
    pub blksize: u32,
    pub modrev: u64,
    /// `di_freelink` (`di_dirdepth` of a directory in FreeBSD 14).
    pub freelink: u32,
    /// A device's `di_rdev` (`di_db[0]`) in full: FreeBSD's `dev_t` is 64 bits.
    pub rdev: u64,
    pub spare: [u32; 2],
    /// A symbolic link whose target is in its block pointers (shorter than `fs_maxsymlinklen`):
    /// its `blocks` count only its extended-attribute area. Not on disk: known from the size.
    pub shortlink: bool,
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
const DI_EXTSIZE: usize = 212;
const DI_EXTB: usize = 216;

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
        put_u32(b, DI_EXTSIZE, self.extsize);
        for i in 0..NXADDR {
            put_u64(b, DI_EXTB + 8 * i, self.extb[i]);
        }
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
            extsize: get_u32(b, DI_EXTSIZE),
            ..Default::default()
        };
        for i in 0..NDADDR {
            d.db[i] = get_u64(b, DI_DB + 8 * i);
        }
        for i in 0..NIADDR {
            d.ib[i] = get_u64(b, DI_IB + 8 * i);
        }
        for i in 0..NXADDR {
            d.extb[i] = get_u64(b, DI_EXTB + 8 * i);
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
    /// The blocks of the extended-attribute area (nonzero pointers).
    pub fn ext_blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.extb.iter().copied().filter(|&b| b != 0)
    }

    /// True if the inode's block pointers address data (regular files, directories, symlinks).
    pub fn has_blocks(&self) -> bool {
        match self.file_type() {
            S_IFREG | S_IFDIR => true,
            S_IFLNK => !self.short_symlink(),
            _ => false,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
        d.extsize = 4097;
        d.extb = [77, 78];
        let mut buf = vec![0xAAu8; DINODE_SIZE];
        d.encode(&mut buf);
        assert_eq!(Dinode::decode(&buf), d);
    }
}
