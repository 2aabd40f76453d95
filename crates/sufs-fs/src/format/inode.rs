//! sufs's view of an inode (`Dinode`, FreeBSD's `struct ufs2_dinode` read and written by
//! `layout.rs`), the directory-entry type of a mode, and the block pointers of an indirect
//! block.

use super::*;

/// An inode: FreeBSD's `struct ufs2_dinode` as the file system works with it (`layout.rs`
/// maps one onto the other).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dinode {
    pub mode: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Blocks held (data, indirect and extended-attribute), in fragments.
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
    /// (`layout.rs`).
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

impl Dinode {
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
