//! The file-system operations (soft updates §2's eight activities and the rest of POSIX): lookup,
//! create, mkdir, link, symlink, unlink, rmdir, rename, read, write, truncate, setattr, readdir,
//! statfs, fsync, over the buffer cache.
//!
//! Ordering is the one thing the modes differ in. `Sync` is the traditional FFS of the paper's
//! §2: the dependent metadata of an operation is ordered by synchronous writes, placed by
//! `order_write`:
//! - an initialised inode before the directory entry that names it, and a new directory's or
//!   indirect block's contents before the pointer to it;
//! - the group bitmaps before any block holding pointers that use them (see `write_bufs`);
//! - a nullified pointer (entry, inode or block pointer) before the resource is freed and may be
//!   reused;
//! - on rename, the new name before the old name is removed; on link and mkdir, the raised link
//!   count before the new name.
//!
//! `Async` delays every write and orders nothing: the upper bound, and the crash tester's
//! negative control.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::fixed_hash::{HashMap, HashMapExt};

use thiserror::Error;

use crate::alloc::{Alloc, AllocError};
use crate::cache::{Cache, CacheStats, WriteHooks};
use crate::clock::Clock;
use crate::dev::{BlockDevice, DevError, DevStats, WriteKind};
use crate::dirhash::{chunk_slack, dirhash_wanted, DirHash};
use crate::format::*;
use crate::softdep::{FreeBlks, FreeFile, FreeFrag, NameWait, PtrSlot, Softdep, Task};

/// Most blocks a read takes from the device in one request: FUSE's largest READ (1 MiB).
const MAX_READ_RUN: u64 = 256;

/// How dependent metadata writes are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
pub enum Ordering {
    /// Soft updates: delayed writes, with per-pointer roll-back of unsatisfied dependencies.
    Softdep,
    /// Traditional FFS: synchronous writes order dependent metadata.
    Sync,
    /// No ordering at all: every metadata write is delayed.
    Async,
}

impl std::fmt::Display for Ordering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Ordering::Softdep => "softdep",
            Ordering::Sync => "sync",
            Ordering::Async => "async",
        })
    }
}

#[derive(Debug, Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("file name too long")]
    NameTooLong,
    #[error("no space left on device")]
    NoSpace,
    /// A snapshot refused before anything is made: its map and first copies do not fit.
    #[error("no room for a snapshot: {needed} blocks needed, {free} free")]
    NoSnapshotRoom { needed: u64, free: u64 },
    #[error("too many links")]
    TooManyLinks,
    #[error("file too large")]
    TooBig,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("operation not permitted")]
    Perm,
    #[error("permission denied")]
    Access,
    #[error("stale inode {0}")]
    Stale(u64),
    #[error("read-only file system")]
    ReadOnly,
    /// The image is one this sufs reads but does not write (a UFS2 image): a read-write mount
    /// is refused with the reason.
    #[error("{0}")]
    Unsupported(String),
    #[error("I/O error: {0}")]
    Io(#[from] DevError),
    #[error("I/O error: the file system was shut down")]
    ShutDown,
    #[error("corrupt file system: {0}")]
    Corrupt(String),
    #[error("no such attribute")]
    NoAttr,
    #[error("attribute name or buffer out of range")]
    AttrRange,
    #[error("attribute value too large")]
    AttrTooBig,
    #[error("no space left in the attribute area")]
    AttrAreaFull,
    /// An ACL of more entries than a UFS2 inode keeps (FreeBSD's `struct oldacl`).
    #[error("an ACL of {0} entries: UFS2 keeps at most 32 (FreeBSD's OLDACL_MAX_ENTRIES)")]
    AclTooLong(usize),
    #[error("operation not supported")]
    NotSupported,
    #[error("no data or hole at or past the offset")]
    NoSuchOffset,
}

impl FsError {
    /// Whether this is a shutdown's refusal (`Fs::shutdown`), from the file system or from the
    /// device (a write planned before the shutdown and issued after it): what a background
    /// writer meets once the file system is shut down, the shutdown's doing and not an error
    /// of the writer's.
    pub fn is_shutdown(&self) -> bool {
        matches!(self, FsError::ShutDown | FsError::Io(DevError::ShutDown))
    }

    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::NoSpace | FsError::NoSnapshotRoom { .. } => libc::ENOSPC,
            FsError::TooManyLinks => libc::EMLINK,
            FsError::TooBig => libc::EFBIG,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::Perm => libc::EPERM,
            FsError::Access => libc::EACCES,
            FsError::Stale(_) => libc::ESTALE,
            FsError::ReadOnly | FsError::Unsupported(_) => libc::EROFS,
            FsError::NotSupported => libc::EOPNOTSUPP,
            FsError::NoSuchOffset => libc::ENXIO,
            FsError::Io(_) | FsError::Corrupt(_) | FsError::ShutDown => libc::EIO,
            FsError::NoAttr => libc::ENODATA,
            FsError::AttrRange => libc::ERANGE,
            FsError::AttrTooBig | FsError::AclTooLong(_) => libc::E2BIG,
            FsError::AttrAreaFull => libc::ENOSPC,
        }
    }
}

impl From<AllocError> for FsError {
    fn from(e: AllocError) -> Self {
        match e {
            AllocError::NoSpace => FsError::NoSpace,
            AllocError::Dev(d) => FsError::Io(d),
            other => FsError::Corrupt(other.to_string()),
        }
    }
}

impl From<FormatError> for FsError {
    fn from(e: FormatError) -> Self {
        FsError::Corrupt(e.to_string())
    }
}

impl From<DirError> for FsError {
    fn from(e: DirError) -> Self {
        FsError::Corrupt(e.to_string())
    }
}

pub type FsResult<T> = Result<T, FsError>;

/// How many wrongly free blocks or inodes one allocation steps over before it gives up.
const MAX_BAD_ALLOCS: usize = 64;

// The Block Register lives in its own file inside `fs`, as a part of the file system: it
// allocates into reservations with the file system's own block map and ordering.
pub mod br;

// Snapshots (§6) live in their own file inside `fs`: their copy-on-write and claiming hook
// into its writes and frees.
pub mod snapshot;
// FreeBSD's form of the snapshot's first copies on a UFS2 image (groups, superblock, summaries).
mod snapufs2;
// Background fsck's adjust: what a snapshot's check found lost, checked against the live state.
pub mod adjust;

// Mount options the file system applies (access times, sync, remounts) live in their own file.
pub mod mountopt;

// Renames' old names kept on disk until the new names are (rule 3), hidden from users.
pub mod hidden;
use hidden::{HiddenName, HiddenNames, Namesakes};
// A forced shutdown (FS_IOC_SHUTDOWN) lives in its own file inside `fs`: it stops the
// writes of the cache and the superblock.
pub mod shutdown;

// The operations, one file per concern; each adds methods to `Fs`.
mod ahead;
mod bmap;
mod data;
mod dir;
pub mod falloc;
pub mod flags;
pub mod flight;
mod frags;
pub mod label;
pub mod lockstat;
pub use lockstat::{lock, FsGuard, LockStats};
pub mod messages;
pub mod perm;
pub mod trim;
pub use flight::{lock_landing, lock_landing_if};
mod inode;
mod minfree;
mod namespace;
mod paths;
mod rename;
mod sync;
mod tasks;

/// A new file system of `blocks` 4 KiB blocks in memory, made and mounted with `ordering` (a
/// cache of 256 blocks, the simulated clock): the unit tests' mount.
#[cfg(test)]
pub(crate) fn mem_mount(blocks: u64, ordering: Ordering) -> Fs {
    mem_mount_on(blocks, ordering, Arc::new(crate::clock::SimClock::new()))
}

/// `mem_mount` on a simulated clock the test keeps, to move time on.
#[cfg(test)]
pub(crate) fn mem_mount_on(blocks: u64, ordering: Ordering, clock: Arc<crate::clock::SimClock>) -> Fs {
    let dev = Arc::new(crate::dev::MemDevice::new(4096, blocks));
    mkfs(dev.clone(), &MkfsOptions::default(), (1, 0)).unwrap();
    let opts = MountOptions { ordering, cache_blocks: 256, readonly: false };
    Fs::mount(dev, opts, clock).unwrap()
}
pub use tasks::{TaskSlice, TASK_SLICE};
// Extended attributes (UFS2's attribute area) and the POSIX ACLs kept in them.
pub mod acl;
pub mod xattr;

/// Options of a new file system: newfs(8)'s, for a device addressed in blocks (one fragment a
/// block, so that the device's block numbers are UFS2's fragment numbers).
#[derive(Debug, Clone)]
pub struct MkfsOptions {
    /// The block size, which is also the fragment size (newfs's `-b` and `-f`).
    pub block_size: u32,
    /// The number of inodes wanted (newfs's `-i` is worked out from it); None: newfs's density.
    pub inodes: Option<u64>,
    /// Owner of the root directory.
    pub uid: u32,
    pub gid: u32,
    /// The space only root may allocate from, in percent of the data blocks (None: newfs's 8%).
    pub minfree: Option<u8>,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions { block_size: 4096, inodes: None, uid: 0, gid: 0, minfree: None }
    }
}

/// Makes a FreeBSD UFS2 file system on `dev` as newfs(8) makes one (`format::ufs2::newfs`),
/// with blocks of the device's size each one fragment, the root owned by `opts.uid`/`opts.gid`,
/// and answers its superblock. The library's own images (tests, the crash tester, the papers'
/// runs) are made here; `sufs mkfs` calls newfs itself with newfs's default geometry.
pub fn mkfs(dev: Arc<dyn BlockDevice>, opts: &MkfsOptions, now: (i64, u32)) -> FsResult<Superblock> {
    use crate::format::ufs2::newfs::{self, NewfsOptions};
    let bs = opts.block_size as usize;
    if dev.block_size() != bs {
        return Err(FsError::Invalid("device block size differs from the file system's"));
    }
    let size = dev.num_blocks() * bs as u64;
    let density = match opts.inodes {
        Some(0) => return Err(FsError::Invalid("a file system needs inodes")),
        Some(n) => Some(i32::try_from((size / n).max(bs as u64)).unwrap_or(i32::MAX)),
        None => None,
    };
    let o = NewfsOptions {
        bsize: Some(bs as i32),
        fsize: Some(bs as i32),
        density,
        minfree: opts.minfree.map_or(newfs::MINFREE, i32::from),
        time: now.0,
        ..NewfsOptions::default()
    };
    newfs::newfs(size, &o, |off, data| {
        crate::dev::write_bytes(&*dev, off, data, WriteKind::Sync).map_err(std::io::Error::other)
    })
    .map_err(|e| FsError::Corrupt(format!("cannot make a file system: {e}")))?;
    let sb = Superblock::probe(|off, buf| crate::dev::read_bytes(&*dev, off, buf))?;
    if (opts.uid, opts.gid) != (0, 0) {
        let clock: Arc<dyn Clock> = Arc::new(FixedClock(now));
        let mut fs =
            Fs::mount(dev, MountOptions { ordering: Ordering::Sync, cache_blocks: 64, readonly: false }, clock)?;
        let owner = SetAttr { uid: Some(opts.uid), gid: Some(opts.gid), ..SetAttr::default() };
        fs.setattr(ROOT_INO, &owner)?;
        let sb = fs.sb.clone();
        fs.unmount()?;
        return Ok(sb);
    }
    Ok(sb)
}

struct FixedClock((i64, u32));
impl Clock for FixedClock {
    fn now_ns(&self) -> u64 {
        0
    }
    fn wall(&self) -> (i64, u32) {
        self.0
    }
}

#[derive(Debug, Clone)]
pub struct MountOptions {
    pub ordering: Ordering,
    /// Buffer cache size in blocks.
    pub cache_blocks: usize,
    pub readonly: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions { ordering: Ordering::Softdep, cache_blocks: 32768, readonly: false }
    }
}

/// Changes to an inode's attributes (setattr).
#[derive(Debug, Clone, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<(i64, u32)>,
    pub mtime: Option<(i64, u32)>,
    /// The times given are the current time (a `touch`), which an append-only file allows; on
    /// a FUSE mount with the writeback cache also the kernel's flush of the times it stamped
    /// on writes (`fuse::times_now`).
    pub times_now: bool,
    /// A change time given by the kernel, which keeps a regular file's times itself under the
    /// writeback cache and sends its change time with every SETATTR of one (never a user's):
    /// stored as given, after the changes' own stamps.
    pub ctime: Option<(i64, u32)>,
}

/// Who writes, which decides what a write changes beside the data and the size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// The library's caller: mtime and ctime set to now, set-user-ID cleared.
    Own,
    /// The kernel through a FUSE mount: mtime and ctime set to now; the set-id bits are left
    /// to the mount, which clears them when the kernel says so (FUSE_WRITE_KILL_SUIDGID: not
    /// for a writer with CAP_FSETID, as Linux).
    Kernel,
    /// The kernel under its writeback cache: it keeps a regular file's mtime and ctime itself
    /// and sends them with a SETATTR, which may come before a write it sent earlier is
    /// served; so the write leaves them. Set-id bits as `Kernel`.
    KernelTimes,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenameFlags {
    pub noreplace: bool,
    pub exchange: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    /// Free blocks a user other than root may allocate (`bfree` less the minfree reserve).
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    /// The unit of `blocks`, `bfree` and `bavail`: UFS2's fragment.
    pub frsize: u32,
    pub namelen: u32,
}

/// One readdir entry: `next` is the cookie that resumes after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirListEntry {
    pub ino: u32,
    pub dtype: u8,
    pub name: Vec<u8>,
    pub next: u64,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FsStats {
    pub ordering: String,
    pub device: DevStats,
    pub cache: CacheStats,
    pub cache_hit_rate: f64,
    /// Group commit: fsync batches asked for, the flights that wrote them, and of those the
    /// ones that went beside another flight in the air (`flight::MAX_IN_AIR`).
    pub fsync_batches: u64,
    pub fsync_flights: u64,
    pub fsync_beside: u64,
    /// FUSE requests served by the mount, by opcode (`messages`); all zero in-process.
    pub fuse_messages: std::collections::BTreeMap<&'static str, u64>,
    /// The lock of a shared file system (a mount): taken, waited for, held.
    pub lock: LockStats,
    /// Where it was held (each call site that took it), the longest held in all first.
    pub lock_sites: Vec<lockstat::LockSite>,
}

/// What happens around every write: soft updates roll back unsatisfied dependencies in the
/// copy (and forward after), and group headers are sealed with their checksum.
struct Hooks {
    /// The file system's geometry (which blocks are group headers, and how they are sealed).
    geometry: Superblock,
    softdep: Option<Softdep>,
}

impl WriteHooks for Hooks {
    fn before_write(&mut self, bno: u64, copy: &mut crate::cache::Outgoing) {
        if let Some(sd) = self.softdep.as_mut() {
            sd.before_write(bno, copy);
        }
        // Sealed where the block is put together (outside the lock, for a flight).
        if self.geometry.is_cg_header(bno) {
            if let Some(seal) = ufs2::Cg::sealer(self.geometry.ufs2()) {
                copy.seal_with(seal);
            }
        }
    }
    fn after_write(&mut self, bno: u64) -> bool {
        self.softdep.as_mut().is_some_and(|sd| sd.after_write(bno))
    }
    fn write_failed(&mut self, bno: u64) {
        if let Some(sd) = self.softdep.as_mut() {
            sd.write_failed(bno);
        }
    }
}

/// Where an entry lives: the directory block and the byte offset in it.
#[derive(Debug, Clone, Copy)]
struct Slot {
    bno: u64,
    lbn: u64,
    off: usize,
    ino: u32,
}

/// The file system shared by the FUSE session, the syncer, the control channel and the unmount
/// path: one lock for now (the concurrency work splits it).
pub type SharedFs = Arc<std::sync::Mutex<Fs>>;

pub struct Fs {
    pub sb: Superblock,
    cache: Cache,
    alloc: Alloc,
    hooks: Hooks,
    ordering: Ordering,
    clock: Arc<dyn Clock>,
    readonly: bool,
    /// In-core inode state: open counts, orphans, generations, pending directory link drops.
    incore: inode::InCore,
    /// Spread new directories over the groups (off while mkfs places root and lost+found).
    spread_dirs: bool,
    /// Name indexes of large directories (FFS's dirhash).
    dirhash: HashMap<u32, DirHash>,
    /// Update policy `wt`: every modification is queued for writing at once.
    write_through: bool,
    /// Full data blocks are queued for writing as soon as they fill (Mogul's "async writes").
    async_full_blocks: bool,
    /// Soft updates' memory bound: past this many dependency structures, everything is
    /// flushed before new ones are made.
    softdep_limit: usize,
    /// Operations done (the memory bound is checked every 64).
    ops: u64,
    /// When soft updates' structures are counted next (the memory bound), in operations.
    next_count_at: u64,
    /// The last count: (operations done then, structures counted).
    last_count: (u64, usize),
    /// The writes completed when `run_tasks_bounded` last left tasks queued for want of room
    /// (None: it has not since it last ran some).
    tasks_left_at: Option<u64>,
    /// Renames between their call and the disk: hidden old names, deferred removals, namesakes.
    renames: rename::Renames,
    /// Where the next new data block should go (a Block Register placement hint), once.
    br_hint: Option<u64>,
    /// Active snapshots and their counters.
    snapshots: snapshot::Snapshots,
    /// Shut down (`shutdown`): nothing more is written, every operation fails.
    shut_down: bool,
    /// The mount options it applies itself (access times, sync, remount).
    live: mountopt::Live,
    /// The batches being written outside the lock (`flight.rs`), oldest first, until they
    /// land (in that order); at most `flight::MAX_IN_AIR`, more than one only for group commit.
    flights: std::collections::VecDeque<Arc<flight::Flight>>,
    /// fsyncs waiting to share the next flight (`flight::Group`).
    group: flight::Group,
    /// The background flusher that serves this file system, if any (`attach_flusher`).
    flusher: Option<Arc<flight::FlushRequest>>,
    /// The caller may allocate from the minfree reserve (`minfree.rs`): true but while a
    /// request of a user other than root runs (`as_user`).
    privileged: bool,
    /// The FUSE requests a mount served, counted by its adapter (`messages`).
    messages: Arc<messages::Messages>,
    /// How long the lock of a shared file system was waited for and held (`lockstat.rs`).
    lock_stats: LockStats,
    lock_sites: lockstat::LockSites,
    /// Inodes allocated ahead, their bits on their way to disk before any file needs them
    /// (`ahead.rs`; soft updates only).
    ahead: ahead::Ahead,
}

/// What a mount (or a remount) read-write asks of the superblock first: an image sufs may write
/// (`Superblock::writable`), with journaled soft updates turned off (sufs does not write the
/// journal).
fn prepare_writable(sb: &mut Superblock) -> FsResult<()> {
    sb.writable().map_err(FsError::Unsupported)?;
    if sb.disable_suj() {
        log::warn!(
            "journaled soft updates (SU+J) disabled, as tunefs -j disable does: sufs does not write the journal"
        );
    }
    Ok(())
}

impl Fs {
    /// Mounts the file system on `dev`: checks the superblock and every group header, refusing a
    /// corrupt or foreign image, and marks the image in use (not clean) until `unmount`.
    pub fn mount(dev: Arc<dyn BlockDevice>, opts: MountOptions, clock: Arc<dyn Clock>) -> FsResult<Fs> {
        let bs = dev.block_size();
        let mut sb = Superblock::probe(|off, buf| crate::dev::read_bytes(&*dev, off, buf))?;
        if !opts.readonly {
            prepare_writable(&mut sb)?;
        }
        if sb.addr_unit() as usize != dev.addr_unit() {
            return Err(FsError::Corrupt(format!(
                "the file system addresses {}-byte units, the device {}",
                sb.addr_unit(),
                dev.addr_unit()
            )));
        }
        if sb.block_size as usize != bs {
            return Err(FsError::Corrupt(format!("block size {} does not match the device's {}", sb.block_size, bs)));
        }
        if sb.num_blocks > dev.num_blocks() {
            return Err(FsError::Corrupt(format!(
                "file system has {} blocks but the device only {}",
                sb.num_blocks,
                dev.num_blocks()
            )));
        }
        let mut cache = Cache::new(dev, opts.cache_blocks, clock.clone());
        let alloc = Alloc::load(&mut cache, &sb, !opts.readonly)?;
        // Summary counts are exact only after a clean unmount; recompute them from the groups.
        sb.free_blocks = alloc.free_blocks();
        sb.free_inodes = alloc.free_inodes();
        sb.ndirs = alloc.ndirs();
        let mut fs = Fs {
            hooks: Hooks {
                geometry: sb.clone(),
                softdep: (opts.ordering == Ordering::Softdep).then(|| Softdep::new(&sb)),
            },
            sb,
            cache,
            alloc,
            ordering: opts.ordering,
            clock,
            readonly: opts.readonly,
            incore: inode::InCore::new(),
            renames: rename::Renames::new(),
            spread_dirs: true,
            dirhash: HashMap::new(),
            write_through: false,
            async_full_blocks: false,
            softdep_limit: 200_000,
            ops: 0,
            next_count_at: 0,
            last_count: (0, 0),
            tasks_left_at: None,
            br_hint: None,
            snapshots: snapshot::Snapshots::default(),
            flights: Default::default(),
            group: Default::default(),
            flusher: None,
            shut_down: false,
            live: mountopt::Live::new(opts.readonly),
            privileged: true,
            messages: Default::default(),
            lock_stats: LockStats::default(),
            lock_sites: lockstat::LockSites::default(),
            ahead: Default::default(),
        };
        // The root inode's block, checked as it comes in (`read_inode_block`): the blocks of the
        // first directories are known to be in use before anything is allocated.
        fs.iget_raw(ROOT_INO)?;
        fs.snap_activate()?;
        fs.incore.next_gen = fs.clock.wall().1 | 1;
        if !fs.readonly {
            fs.mark_in_use()?;
        }
        Ok(fs)
    }

    pub fn ordering(&self) -> Ordering {
        self.ordering
    }

    pub fn stats(&self) -> FsStats {
        let cache = self.cache.stats();
        FsStats {
            ordering: self.ordering.to_string(),
            device: self.cache.device().stats(),
            cache_hit_rate: cache.hit_rate(),
            cache,
            fsync_batches: self.group.batches,
            fsync_flights: self.group.flights,
            fsync_beside: self.group.beside,
            fuse_messages: self.messages.snapshot(),
            lock: self.lock_stats,
            lock_sites: self.lock_sites.report(),
        }
    }

    /// The FUSE message counters, for the mount's adapter to count into.
    pub fn messages(&self) -> Arc<messages::Messages> {
        self.messages.clone()
    }

    fn write_superblock(&mut self) -> FsResult<()> {
        self.check_live()?;
        self.sb.free_blocks = self.alloc.free_blocks();
        self.sb.free_inodes = self.alloc.free_inodes();
        self.sb.ndirs = self.alloc.ndirs();
        self.sb.write_time = self.clock.wall().0;
        // As FreeBSD's `ffs_sbupdate` writes it: the summary area at `fs_csaddr` (each group's
        // counts) first, then the superblock at `fs_sblockloc`, with `fs_cstotal` the groups'
        // totals and its check hash.
        let mut u = self.sb.to_ufs2();
        let totals = self.alloc.ufs2_super().fs_cstotal;
        u.fs_cstotal = totals;
        u.fs_fmod = 0;
        let csums = self.alloc.ufs2_csums();
        assert_eq!(csums.len(), u.fs_ncg as usize, "a count for each group");
        let mut cs = vec![0u8; u.fragroundup(u.fs_cssize as u64) as usize];
        for (i, c) in csums.iter().enumerate() {
            ufs2::LeField::put(c, &mut cs, i * 16);
        }
        let dev = self.cache.device().clone();
        crate::dev::write_bytes(&*dev, u.fsb_offset(u.fs_csaddr), &cs, WriteKind::Sync)?;
        crate::dev::write_bytes(&*dev, u.fs_sblockloc as u64, &u.encode(), WriteKind::Sync)?;
        Ok(())
    }

    /// Writes everything and marks the image clean; after a shutdown, writes nothing, which
    /// leaves the image as a crash would.
    pub fn unmount(&mut self) -> FsResult<()> {
        if self.readonly {
            return Ok(());
        }
        if self.shut_down {
            log::warn!("unmount after a shutdown: nothing written, the image is left unclean");
            return Ok(());
        }
        // Inodes unlinked while open are freed now that nobody holds them.
        let orphans: Vec<u32> = self.incore.orphans.drain().collect();
        self.incore.drop_holds();
        for ino in orphans {
            let d = self.iget(ino)?;
            if d.nlink == 0 {
                self.release_inode(ino, d, vec![])?;
            }
        }
        self.sync_all()?;
        self.sb.flags |= SB_CLEAN;
        self.write_superblock()
    }

    // ---------------------------------------------------------------- writing buffers

    fn is_cg_block(&self, bno: u64) -> bool {
        self.sb.is_cg_header(bno)
    }

    /// Writes `bnos` as one batch. In `Sync` mode any dirty group header is written in a batch
    /// of its own first, so that no pointer reaches the disk before the bitmap bit that owns it.
    fn write_bufs(&mut self, bnos: &[u64], kind: WriteKind) -> FsResult<()> {
        self.land_flight()?;
        self.snap_cow(bnos)?;
        if self.ordering == Ordering::Sync && bnos.iter().any(|&b| !self.is_cg_block(b)) {
            let cgs = self.dirty_cg_headers();
            if !cgs.is_empty() {
                self.cache.write(&cgs, WriteKind::Sync, &mut self.hooks)?;
            }
        }
        self.cache.write(bnos, kind, &mut self.hooks)?;
        Ok(())
    }

    /// The group headers (bitmaps) with changes not on disk.
    fn dirty_cg_headers(&self) -> Vec<u64> {
        (0..self.sb.ngroups).map(|cg| self.sb.cg_header_block(cg)).filter(|&b| self.cache.is_dirty(b)).collect()
    }

    /// Writes delayed writes picked by age or to make room, `batch` blocks at most to a batch.
    /// Under soft updates they go in the order that leaves least to roll back, each class in
    /// batches of its own: file data and group headers (the bitmaps) first, then other metadata
    /// (indirect blocks, directory blocks with nothing pending), then inode blocks, then
    /// directory blocks whose entries wait for inodes. Any order is safe, since each write rolls
    /// back what is not ready; but in one batch of everything an inode block's new pointers
    /// were rolled back whenever their data was in the same batch, and the block, still dirty
    /// and still the oldest, went again in the next batch: PostMark wrote each inode block 28
    /// times.
    fn write_delayed(&mut self, bnos: Vec<u64>, batch: usize) -> FsResult<()> {
        for chunk in self.plan_delayed(bnos, batch) {
            self.write_bufs(&chunk, WriteKind::Async)?;
        }
        Ok(())
    }

    /// The batches `write_delayed` writes `bnos` in (see there), in order: an inode block
    /// initialized since its last write may be in two of them.
    pub fn plan_delayed(&self, mut bnos: Vec<u64>, batch: usize) -> Vec<Vec<u64>> {
        let Some(sd) = self.hooks.softdep.as_ref() else {
            bnos.sort_unstable();
            return bnos.chunks(batch).map(<[u64]>::to_vec).collect();
        };
        let class = |b: u64| -> u8 {
            if self.cache.is_data(b) || self.is_cg_block(b) {
                0
            } else if sd.dir_block_pending(b) {
                3
            } else if self.sb.is_data_block(b) {
                1
            } else {
                2
            }
        };
        // Inode blocks initialized since their last write go first as well (their new inodes
        // rolled back to free, so the copy is the zeros), so that the group headers after them
        // carry the raised count and the new inodes' bits; then again as inode blocks.
        let mut keyed: Vec<(u8, u64)> = bnos.iter().filter(|&&b| sd.init_pending(b)).map(|&b| (0, b)).collect();
        keyed.extend(bnos.into_iter().map(|b| (class(b) + 1, b)));
        keyed.sort_unstable();
        let mut plan = Vec::new();
        for group in keyed.chunk_by(|a, b| a.0 == b.0) {
            let bnos: Vec<u64> = group.iter().map(|&(_, b)| b).collect();
            plan.extend(bnos.chunks(batch).map(<[u64]>::to_vec));
        }
        plan
    }

    /// A write that orders dependent metadata: synchronous in `Sync` mode, nothing in `Async`
    /// (the buffer stays a delayed write).
    fn order_write(&mut self, bnos: &[u64]) -> FsResult<()> {
        match self.ordering {
            Ordering::Sync => self.write_bufs(bnos, WriteKind::Sync),
            Ordering::Async | Ordering::Softdep => Ok(()),
        }
    }

    fn sd(&mut self) -> Option<&mut Softdep> {
        self.hooks.softdep.as_mut()
    }

    /// Sets soft updates' memory bound (dependency structures kept before a forced flush).
    pub fn set_softdep_limit(&mut self, n: usize) {
        self.softdep_limit = n.max(64);
    }

    /// Drops soft updates' records with nothing left to track, as the memory bound's count
    /// does now and then; the crash tester does it before every operation, so that records
    /// dropped and made again are part of every workload.
    pub fn drop_idle_records(&mut self) {
        if let Some(sd) = self.sd() {
            sd.count();
        }
    }

    /// Soft updates' counters, if mounted with soft updates.
    pub fn softdep_stats(&self) -> Option<crate::softdep::SoftdepStats> {
        self.hooks.softdep.as_ref().map(|s| s.stats.clone())
    }

    /// Writes everything and runs every task until nothing is pending (unmount, fsync, sync).
    /// With soft updates this takes a few rounds: each write satisfies dependencies that let the
    /// next one carry more.
    pub fn sync_all(&mut self) -> FsResult<()> {
        self.check_live()?;
        self.land_flight()?;
        // A synced image holds no inode allocated ahead: their bits go back with these writes.
        self.release_ahead()?;
        // A round can retire one level of a chain of dependencies (a removed tree drains one
        // directory per level), so the rounds go on while they have something to write; the
        // chain is never longer than the number of inodes.
        let max_rounds = self.sb.total_inodes() + 64;
        // The task list runs within the memory bound (`run_tasks_bounded`), a chunk a round, the
        // writes between retiring what each chunk made.
        for _ in 0..max_rounds {
            self.run_tasks_bounded()?;
            self.sample_deps();
            let wrote = self.flush_all()?;
            self.sample_deps();
            let idle =
                self.hooks.softdep.as_ref().is_none_or(|s| s.is_idle()) && self.renames.deferred_old_names.is_empty();
            if idle && self.cache.dirty_count() == 0 {
                assert_eq!(self.tasks_queued(), 0, "sync_all drains the task list");
                // No removal waits for a path: what the walks up the tree found goes.
                self.renames.paths.clear();
                return Ok(());
            }
            if wrote == 0 && self.cache.dirty_count() == 0 {
                // Nothing to write, yet tasks wait for room: what holds the room does not
                // retire by writing; the list is drained whatever it makes.
                if self.tasks_queued() > 0 {
                    self.run_tasks()?;
                    continue;
                }
                break;
            }
        }
        // What holds each deferred name: the first directory on its new path with a name not
        // on disk, and those entries' states.
        let mut held = Vec::new();
        let waits: BTreeSet<u32> = self
            .renames
            .deferred_old_names
            .iter()
            .filter_map(|t| match t {
                Task::RemoveOldName { wait: NameWait::NewPath(d), .. } => Some(*d),
                _ => None,
            })
            .collect();
        for d in waits {
            let mut x = d;
            for _ in 0..64 {
                let pending = self.hooks.softdep.as_ref().map(|s| s.pending_entries_naming(x)).unwrap_or_default();
                if !pending.is_empty() {
                    let rec = self.hooks.softdep.as_ref().map(|s| s.inodedep_summary(x)).unwrap_or_default();
                    held.push(format!("path of {d}: {x} named by {pending:?}; its record: {rec}"));
                    break;
                }
                if x == ROOT_INO {
                    break;
                }
                let Ok(mut di) = self.dir_inode(x) else { break };
                match self.find_entry(x, &mut di, b"..") {
                    Ok(Some(e)) => x = e.ino,
                    _ => break,
                }
            }
        }
        let softdep = self.hooks.softdep.as_ref().map(|s| s.busy_summary()).unwrap_or_default();
        Err(FsError::Corrupt(format!(
            "dependencies did not drain: nothing left to write (held: {held:?}; deferred names: {:?}; hidden: {:?}; soft updates: {softdep})",
            self.renames.deferred_old_names, self.renames.hidden
        )))
    }

    /// Counts soft updates' structures, for the peak they report (`max_deps`): where many
    /// tasks ran at once, between the counts the memory bound makes.
    fn sample_deps(&mut self) {
        if let Some(s) = self.hooks.softdep.as_mut() {
            s.count();
        }
    }

    /// A block from the bitmaps, checked before it is handed out: a bitmap that shows a
    /// metadata block or a block the mount holds in its cache (a directory, an indirect block,
    /// data in use) as free is damaged. Such a block keeps its bit set (it is in use), the
    /// superblock asks for fsck, and the search goes on; live data is never overwritten.
    fn alloc_block(&mut self, pref: u64) -> FsResult<u64> {
        // The reserve counts fragments: a block is `frag` of them (as `ffs_alloc`'s
        // `freespace(fs, fs_minfree) - numfrags(fs, size)`).
        self.check_reserve(self.sb.frag())?;
        for _ in 0..MAX_BAD_ALLOCS {
            let bno = match self.alloc.alloc_block(&mut self.cache, &self.sb, pref) {
                Err(AllocError::NoSpace) if self.reclaim()? => {
                    self.alloc.alloc_block(&mut self.cache, &self.sb, pref)?
                }
                r => r?,
            };
            if !self.sb.is_data_block(bno) {
                self.damaged(format!("block bitmap shows metadata block {bno} free"));
            } else if self.cache.is_cached(bno) {
                self.damaged(format!("block bitmap shows block {bno} free while it is in use"));
            } else {
                return Ok(bno);
            }
        }
        Err(self.damaged(format!("{MAX_BAD_ALLOCS} blocks in a row were wrongly free in the bitmaps")))
    }

    /// Runs an operation that allocates; when it finds no space while soft updates still hold
    /// freed blocks or inodes (removed files whose frees wait for writes), everything is
    /// written, the frees complete, and the operation runs once more, as FreeBSD's
    /// `softdep_request_cleanup` does: a user who just removed files never sees a full disk
    /// that is not full. A create, mkdir, link or rename that fails with ENOSPC has undone its
    /// inode and changed no name, and a write repeated writes the same bytes.
    fn retry_nospace<T>(&mut self, mut op: impl FnMut(&mut Fs) -> FsResult<T>) -> FsResult<T> {
        match op(self) {
            Err(FsError::NoSpace) if self.frees_pending() => {
                self.sync_all()?;
                op(self)
            }
            r => r,
        }
    }

    /// Whether soft updates hold work whose completion may free blocks or inodes.
    fn frees_pending(&self) -> bool {
        self.hooks.softdep.as_ref().is_some_and(|s| !s.is_idle()) || !self.renames.deferred_old_names.is_empty()
    }

    /// A value read from disk is out of range, or a bitmap disagrees with what the mount knows:
    /// logs it, marks the superblock "needs fsck" (written at once, so that a crash keeps the
    /// mark), and returns the error that fails the request. The rest of the file system goes on.
    pub fn damaged(&mut self, what: String) -> FsError {
        log::error!("damaged: {what} (unmount and run sufs fsck -y)");
        if self.sb.flags & SB_NEEDS_FSCK == 0 {
            self.sb.flags |= SB_NEEDS_FSCK;
            if !self.readonly {
                if let Err(e) = self.write_superblock() {
                    log::error!("marking the superblock for fsck: {e}");
                }
            }
        }
        FsError::Corrupt(what)
    }

    /// Whether an earlier damage marked this file system for fsck.
    pub fn needs_fsck(&self) -> bool {
        self.sb.flags & SB_NEEDS_FSCK != 0
    }

    /// The dirty buffers, oldest first; with `age_ns`, only those dirty for at least that long
    /// (what the update policies' sweeps write).
    pub fn dirty_blocks(&self, age_ns: Option<u64>) -> Vec<u64> {
        let now = self.clock.now_ns();
        self.cache
            .dirty_oldest_first()
            .take_while(|(t, _)| age_ns.is_none_or(|age| now.saturating_sub(*t) >= age))
            .map(|(_, b)| b)
            .collect()
    }

    /// The dirty metadata buffers (not file data), in block order.
    pub fn dirty_metadata_blocks(&self) -> Vec<u64> {
        let mut meta = self.cache.dirty_metadata();
        meta.sort_unstable();
        meta
    }

    /// Writes every dirty buffer (the periodic-update sweep); returns how many.
    pub fn flush_all(&mut self) -> FsResult<usize> {
        let all: Vec<u64> = self.cache.dirty_oldest_first().map(|(_, b)| b).collect();
        let n = all.len();
        self.write_delayed(all, 1024)?;
        self.run_tasks_bounded()?;
        Ok(n)
    }

    /// Writes the buffers dirty for at least `age_ns` (the aging sweep; the syncer calls it).
    /// Collects first, then writes, so the sweep is linear in the number of dirty buffers.
    pub fn flush_older_than(&mut self, age_ns: u64) -> FsResult<usize> {
        let now = self.clock.now_ns();
        let ready: Vec<u64> = self
            .cache
            .dirty_oldest_first()
            .take_while(|(t, _)| now.saturating_sub(*t) >= age_ns)
            .map(|(_, b)| b)
            .collect();
        let n = ready.len();
        self.write_delayed(ready, 1024)?;
        self.run_tasks_bounded()?;
        Ok(n)
    }

    /// Update policy `wt`: queue every modification for writing at the end of each operation.
    pub fn set_write_through(&mut self, on: bool) {
        self.write_through = on;
    }

    /// Queue full data blocks for writing as soon as they fill, instead of delaying them.
    pub fn set_async_full_blocks(&mut self, on: bool) {
        self.async_full_blocks = on;
    }

    /// The file system's clock, in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Writes every dirty metadata buffer (the update daemon's periodic metadata sync).
    pub fn flush_metadata(&mut self) -> FsResult<usize> {
        let mut meta = self.cache.dirty_metadata();
        meta.sort_unstable();
        for chunk in meta.chunks(1024) {
            self.write_bufs(chunk, WriteKind::Async)?;
        }
        self.run_tasks_bounded()?;
        Ok(meta.len())
    }
}
