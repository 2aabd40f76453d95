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

use foldhash::{HashMap, HashMapExt};

use thiserror::Error;

use crate::alloc::{Alloc, AllocError};
use crate::cache::{Cache, CacheStats, WriteHooks};
use crate::clock::Clock;
use crate::dev::{BlockDevice, DevError, DevStats, WriteKind, WriteReq};
use crate::dirhash::{block_slack, DirHash, DIRHASH_MIN_BLOCKS};
use crate::format::*;
use crate::softdep::{FreeBlks, FreeFile, NameWait, PtrSlot, Softdep, Task};

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
    #[error("too many links")]
    TooManyLinks,
    #[error("file too large")]
    TooBig,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("operation not permitted")]
    Perm,
    #[error("stale inode {0}")]
    Stale(u64),
    #[error("read-only file system")]
    ReadOnly,
    #[error("I/O error: {0}")]
    Io(#[from] DevError),
    #[error("corrupt file system: {0}")]
    Corrupt(String),
}

impl FsError {
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::NoSpace => libc::ENOSPC,
            FsError::TooManyLinks => libc::EMLINK,
            FsError::TooBig => libc::EFBIG,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::Perm => libc::EPERM,
            FsError::Stale(_) => libc::ESTALE,
            FsError::ReadOnly => libc::EROFS,
            FsError::Io(_) | FsError::Corrupt(_) => libc::EIO,
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

// The Block Register lives in its own file but inside `fs`, as a part of the file system: it
// allocates into reservations with the file system's own block map and ordering.
#[path = "br.rs"]
pub mod br;

// Snapshots (§6) live in their own file but inside `fs`: their copy-on-write and claiming hook
// into its writes and frees.
#[path = "snapshot.rs"]
pub mod snapshot;

// Mount options the file system applies (access times, sync, remounts) live in their own file.
#[path = "mountopt.rs"]
pub mod mountopt;

/// Options of a new file system.
#[derive(Debug, Clone)]
pub struct MkfsOptions {
    pub block_size: u32,
    pub inodes: Option<u64>,
    /// Owner of the root directory.
    pub uid: u32,
    pub gid: u32,
    /// The device already reads as zeros (a new sparse image): skip zeroing the inode tables.
    pub zeroed: bool,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions { block_size: 4096, inodes: None, uid: 0, gid: 0, zeroed: false }
    }
}

/// Makes a file system on `dev`: cylinder groups, the root directory and lost+found.
pub fn mkfs(dev: Arc<dyn BlockDevice>, opts: &MkfsOptions, now: (i64, u32)) -> FsResult<Superblock> {
    let bs = opts.block_size as usize;
    if dev.block_size() != bs {
        return Err(FsError::Invalid("device block size differs from the file system's"));
    }
    let mut sb = Superblock::geometry(opts.block_size, dev.num_blocks(), opts.inodes)?;
    sb.created = now.0;
    let mut buf = vec![0u8; bs];
    let zero = vec![0u8; bs];
    let mut free_blocks = 0u64;
    let mut free_inodes = 0u64;
    for cg in 0..sb.ngroups {
        crate::alloc::init_cg_block(&sb, cg, &mut buf);
        let h = CgHeader::decode(&buf, cg)?;
        free_blocks += h.free_blocks as u64;
        free_inodes += h.free_inodes as u64;
        dev.write_batch(&[WriteReq { bno: sb.cg_header_block(cg), data: &buf }], WriteKind::Sync)?;
        if !opts.zeroed {
            let itable = sb.cg_itable_block(cg);
            let reqs: Vec<WriteReq> =
                (0..sb.inode_table_blocks() as u64).map(|i| WriteReq { bno: itable + i, data: &zero }).collect();
            for chunk in reqs.chunks(256) {
                dev.write_batch(chunk, WriteKind::Sync)?;
            }
        }
    }
    sb.free_blocks = free_blocks;
    sb.free_inodes = free_inodes;
    sb.flags = SB_CLEAN;
    for cg in 0..sb.ngroups {
        let mut b = vec![0u8; bs];
        sb.encode(&mut b);
        dev.write_batch(&[WriteReq { bno: sb.cg_start(cg), data: &b }], WriteKind::Sync)?;
    }
    // Root and lost+found, made through the file system itself so they follow its rules.
    let clock: Arc<dyn Clock> = Arc::new(FixedClock(now));
    let mut fs = Fs::mount(dev, MountOptions { ordering: Ordering::Sync, cache_blocks: 1024, readonly: false }, clock)?;
    fs.spread_dirs = false;
    fs.make_root(opts.uid, opts.gid)?;
    let lf = fs.mkdir(ROOT_INO, b"lost+found", 0o700, opts.uid, opts.gid)?;
    if lf.0 != LOST_FOUND_INO {
        return Err(FsError::Corrupt(format!("lost+found got inode {}", lf.0)));
    }
    let sb = fs.sb.clone();
    fs.unmount()?;
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
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
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
}

/// What happens around every write: soft updates roll back unsatisfied dependencies in the
/// copy (and forward after), and group headers are sealed with their checksum.
struct Hooks {
    bpg: u64,
    softdep: Option<Softdep>,
}

impl WriteHooks for Hooks {
    fn before_write(&mut self, bno: u64, copy: &mut [u8]) {
        if let Some(sd) = self.softdep.as_mut() {
            sd.before_write(bno, copy);
        }
        if bno % self.bpg == 1 {
            CgHeader::seal(copy);
        }
    }
    fn after_write(&mut self, bno: u64) -> bool {
        self.softdep.as_mut().is_some_and(|sd| sd.after_write(bno))
    }
}

/// A rename's old name kept on disk until the new one is: (directory, logical block, name,
/// inode it names).
type HiddenName = (u32, u64, Vec<u8>, u32);

/// A new entry waiting for a hidden namesake's removal: its block, offset and inode.
type NamesakeWaiter = (u64, usize, u32);

/// Where an entry lives: the directory block and the byte offset in it.
#[derive(Debug, Clone, Copy)]
struct Slot {
    bno: u64,
    lbn: u64,
    off: usize,
    ino: u32,
}

pub struct Fs {
    pub sb: Superblock,
    cache: Cache,
    alloc: Alloc,
    hooks: Hooks,
    ordering: Ordering,
    clock: Arc<dyn Clock>,
    readonly: bool,
    /// Open handles per inode: an unlinked inode is freed at its last close.
    open: HashMap<u32, u32>,
    /// Inodes whose last link went while they were held (`open`): freed at the last `unhold`
    /// or at unmount, as FFS frees an unlinked open file at its last close.
    orphans: foldhash::HashSet<u32>,
    next_gen: u32,
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
    /// Removed directories still counted by subdirectories' pending ".." drops: the parent
    /// whose link goes when each is finally freed.
    parent_drop: HashMap<u32, u32>,
    /// Directories whose last name is gone but which other pending link drops still hold.
    removed_dirs: foldhash::HashSet<u32>,
    /// Operations done (the memory bound is checked every 64).
    ops: u64,
    /// When soft updates' structures are counted next (the memory bound), in operations.
    next_count_at: u64,
    /// Old names of renames, still in their blocks (so on disk) until the new name is on disk,
    /// but gone for users: (block, offset) -> (directory, logical block, name).
    hidden: HashMap<(u64, usize), HiddenName>,
    /// Renames' old-name removals whose new name is on disk but in a directory not yet
    /// reachable on disk (rule 3 for the whole path): retried after later writes complete.
    deferred_old_names: Vec<Task>,
    /// The soft updates write count and hidden names removed when the deferred removals were
    /// last tried (only a write or another removal can let one go).
    deferred_tried_at: (u64, u64),
    /// Hidden names removed so far.
    hidden_removed: u64,
    /// New entries (not of directories) named like a hidden name of their directory, waiting
    /// on disk for its removal (NAMESAKE): hidden (block, offset) -> (block, offset, inode) of each.
    namesakes: HashMap<(u64, usize), Vec<NamesakeWaiter>>,
    /// With soft updates, a directory holding a name of each file looked up or named in this
    /// mount (the latest): fsync walks its path to the root, so that a renamed ancestor's new
    /// name is made durable too. At most one entry per inode.
    name_dir: HashMap<u32, u32>,
    /// Where the next new data block should go (a Block Register placement hint), once.
    br_hint: Option<u64>,
    /// Active snapshots, oldest first (the superblock's list).
    snaps: Vec<snapshot::Active>,
    /// Blocks copied before an overwrite, and freed blocks claimed, by snapshots.
    stats_cow: u64,
    stats_claimed: u64,
    /// The mount options it applies itself (access times, sync, remount).
    live: mountopt::Live,
}

impl Fs {
    /// Mounts the file system on `dev`: checks the superblock and every group header, refusing a
    /// corrupt or foreign image, and marks the image in use (not clean) until `unmount`.
    pub fn mount(dev: Arc<dyn BlockDevice>, opts: MountOptions, clock: Arc<dyn Clock>) -> FsResult<Fs> {
        let bs = dev.block_size();
        let mut buf = vec![0u8; bs];
        dev.read_block(0, &mut buf)?;
        let mut sb = Superblock::decode(&buf)?;
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
        let alloc = Alloc::load(&mut cache, &sb)?;
        // Summary counts are exact only after a clean unmount; recompute them from the groups.
        sb.free_blocks = alloc.free_blocks();
        sb.free_inodes = alloc.free_inodes();
        sb.ndirs = alloc.ndirs();
        let mut fs = Fs {
            hooks: Hooks {
                bpg: sb.blocks_per_group as u64,
                softdep: (opts.ordering == Ordering::Softdep).then(|| Softdep::new(&sb)),
            },
            sb,
            cache,
            alloc,
            ordering: opts.ordering,
            clock,
            readonly: opts.readonly,
            open: HashMap::new(),
            orphans: foldhash::HashSet::default(),
            next_gen: 1,
            spread_dirs: true,
            dirhash: HashMap::new(),
            write_through: false,
            async_full_blocks: false,
            softdep_limit: 200_000,
            parent_drop: HashMap::new(),
            ops: 0,
            next_count_at: 0,
            removed_dirs: foldhash::HashSet::default(),
            hidden: HashMap::new(),
            deferred_old_names: Vec::new(),
            deferred_tried_at: (0, 0),
            hidden_removed: 0,
            namesakes: HashMap::new(),
            name_dir: HashMap::new(),
            br_hint: None,
            snaps: Vec::new(),
            stats_cow: 0,
            stats_claimed: 0,
            live: mountopt::Live::new(opts.readonly),
        };
        for what in std::mem::take(&mut fs.alloc.damage) {
            fs.damaged(what);
        }
        // The root inode's block, checked as it comes in (`read_inode_block`): the blocks of the
        // first directories are known to be in use before anything is allocated.
        fs.iget_raw(ROOT_INO)?;
        fs.snap_activate()?;
        fs.next_gen = fs.clock.wall().1 | 1;
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
        }
    }

    fn write_superblock(&mut self) -> FsResult<()> {
        self.sb.free_blocks = self.alloc.free_blocks();
        self.sb.free_inodes = self.alloc.free_inodes();
        self.sb.ndirs = self.alloc.ndirs();
        self.sb.write_time = self.clock.wall().0;
        let mut buf = vec![0u8; self.sb.block_size as usize];
        self.sb.encode(&mut buf);
        self.cache.device().write_batch(&[WriteReq { bno: 0, data: &buf }], WriteKind::Sync)?;
        Ok(())
    }

    /// Writes everything and marks the image clean.
    pub fn unmount(&mut self) -> FsResult<()> {
        if self.readonly {
            return Ok(());
        }
        // Inodes unlinked while open are freed now that nobody holds them.
        let orphans: Vec<u32> = self.orphans.drain().collect();
        self.open.clear();
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
        bno % self.sb.blocks_per_group as u64 == 1
    }

    /// Writes `bnos` as one batch. In `Sync` mode any dirty group header is written in a batch
    /// of its own first, so that no pointer reaches the disk before the bitmap bit that owns it.
    fn write_bufs(&mut self, bnos: &[u64], kind: WriteKind) -> FsResult<()> {
        self.snap_cow(bnos)?;
        if self.ordering == Ordering::Sync && bnos.iter().any(|&b| !self.is_cg_block(b)) {
            let cgs: Vec<u64> = (0..self.sb.ngroups)
                .map(|cg| self.sb.cg_header_block(cg))
                .filter(|&b| self.cache.is_dirty(b))
                .collect();
            if !cgs.is_empty() {
                self.cache.write(&cgs, WriteKind::Sync, &mut self.hooks)?;
            }
        }
        self.cache.write(bnos, kind, &mut self.hooks)?;
        Ok(())
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
    fn write_delayed(&mut self, mut bnos: Vec<u64>, batch: usize) -> FsResult<()> {
        let Some(sd) = self.hooks.softdep.as_ref() else {
            bnos.sort_unstable();
            for chunk in bnos.chunks(batch) {
                self.write_bufs(chunk, WriteKind::Async)?;
            }
            return Ok(());
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
        let mut keyed: Vec<(u8, u64)> = bnos.into_iter().map(|b| (class(b), b)).collect();
        keyed.sort_unstable();
        for group in keyed.chunk_by(|a, b| a.0 == b.0) {
            let bnos: Vec<u64> = group.iter().map(|&(_, b)| b).collect();
            for chunk in bnos.chunks(batch) {
                self.write_bufs(chunk, WriteKind::Async)?;
            }
        }
        Ok(())
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
        // A round can retire one level of a chain of dependencies (a removed tree drains one
        // directory per level), so the rounds go on while they have something to write; the
        // chain is never longer than the number of inodes.
        let max_rounds = self.sb.total_inodes() + 64;
        for _ in 0..max_rounds {
            self.run_tasks()?;
            let wrote = self.flush_all()?;
            self.run_tasks()?;
            let idle = self.hooks.softdep.as_ref().is_none_or(|s| s.is_idle()) && self.deferred_old_names.is_empty();
            if idle && self.cache.dirty_count() == 0 {
                return Ok(());
            }
            if wrote == 0 && self.cache.dirty_count() == 0 {
                break;
            }
        }
        // What holds each deferred name: the first directory on its new path with a name not
        // on disk, and those entries' states.
        let mut held = Vec::new();
        let waits: BTreeSet<u32> = self
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
        Err(FsError::Corrupt(format!(
            "dependencies did not drain: nothing left to write (held: {held:?}; deferred names: {:?}; hidden: {:?})",
            self.deferred_old_names, self.hidden
        )))
    }

    /// Runs the task list: work that completed writes made possible (soft updates' dirrem,
    /// freeblks and freefile).
    pub fn run_tasks(&mut self) -> FsResult<()> {
        loop {
            while let Some(t) = self.hooks.softdep.as_mut().and_then(|s| s.tasks.pop()) {
                self.hooks.softdep.as_mut().expect("softdep").stats.tasks_run += 1;
                self.run_task(t)?;
            }
            // Deferred old names: only writes can make their paths durable, so they are tried
            // again only after some have completed.
            let stamp = (self.hooks.softdep.as_ref().map_or(0, |s| s.writes_completed()), self.hidden_removed);
            if self.deferred_old_names.is_empty() || stamp == self.deferred_tried_at {
                return Ok(());
            }
            self.deferred_tried_at = stamp;
            for t in std::mem::take(&mut self.deferred_old_names) {
                self.run_task(t)?;
            }
        }
    }

    /// Soft updates hold freed blocks and inodes until the nullified pointers are on disk; when
    /// an allocation finds the maps full, write until those frees complete. Only the free-map
    /// tasks run here: this is called in the middle of an operation, which may hold inodes.
    fn reclaim(&mut self) -> FsResult<bool> {
        let mut any = false;
        for _ in 0..8 {
            let (pb, pi) = match self.hooks.softdep.as_ref() {
                Some(s) => s.pending_frees(),
                None => return Ok(any),
            };
            if pb == 0 && pi == 0 {
                break;
            }
            let mut all: Vec<u64> = self.cache.dirty_oldest_first().map(|(_, b)| b).collect();
            all.sort_unstable();
            self.snap_cow(&all)?;
            self.cache.write(&all, WriteKind::Async, &mut self.hooks)?;
            let free = self.sd().map(|s| s.take_free_tasks()).unwrap_or_default();
            for t in free {
                any = true;
                match t {
                    Task::FreeBlks(FreeBlks { blocks, then, .. }) => {
                        for b in blocks {
                            self.free_block(b)?;
                        }
                        // What follows (link drops) waits for the task list proper.
                        if let Some(sd) = self.sd() {
                            sd.tasks.extend(then);
                        }
                    }
                    other => self.run_task(other)?,
                }
            }
        }
        Ok(any)
    }

    /// A block from the bitmaps, checked before it is handed out: a bitmap that shows a
    /// metadata block or a block the mount holds in its cache (a directory, an indirect block,
    /// data in use) as free is damaged. Such a block keeps its bit set (it is in use), the
    /// superblock asks for fsck, and the search goes on; live data is never overwritten.
    fn alloc_block(&mut self, pref: u64) -> FsResult<u64> {
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
        self.hooks.softdep.as_ref().is_some_and(|s| !s.is_idle()) || !self.deferred_old_names.is_empty()
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

    fn run_task(&mut self, t: Task) -> FsResult<()> {
        log::trace!("task {t:?}");
        match t {
            Task::DropLink(ino) => {
                if let Some(sd) = self.sd() {
                    sd.take_pending_unlink(ino);
                }
                self.drop_link(ino)
            }
            Task::RmdirChild { child, parent } => {
                if let Some(sd) = self.sd() {
                    sd.take_pending_unlink(child);
                    sd.take_pending_unlink(child);
                }
                // Its name goes. Links still pending (the ".." of subdirectories removed before
                // it, an old name of a rename) keep it, and its "." with it, until the last of
                // those drops: only then does "." go and the directory is freed.
                let mut d = self.iget(child)?;
                d.nlink = d.nlink.saturating_sub(1);
                if d.nlink <= 1 {
                    d.nlink = 0;
                }
                self.touch_c(&mut d);
                let then: Vec<Task> = parent.into_iter().map(Task::DropLink).collect();
                if d.nlink > 0 {
                    self.iput(child, &d)?;
                    self.removed_dirs.insert(child);
                    if let Some(p) = parent {
                        self.parent_drop.insert(child, p);
                    }
                    Ok(())
                } else if self.open.contains_key(&child) {
                    self.orphans.insert(child);
                    self.iput(child, &d)?;
                    for t in then {
                        self.run_task(t)?;
                    }
                    Ok(())
                } else {
                    self.release_inode(child, d, then)
                }
            }
            Task::FreeBlks(FreeBlks { blocks, then, .. }) => {
                for b in blocks {
                    self.free_block(b)?;
                }
                for t in then {
                    self.run_task(t)?;
                }
                Ok(())
            }
            Task::FreeFile(FreeFile { ino, is_dir }) => {
                self.alloc.free_inode(&mut self.cache, &self.sb, ino, is_dir)?;
                Ok(())
            }
            Task::NamesakeGone { dirblk, off } => {
                // Unless another hidden namesake of it is still on disk.
                let still = self.namesakes.values().flatten().any(|j| (j.0, j.1) == (dirblk, off));
                if !still && self.sd().is_some_and(|sd| sd.namesake_gone(dirblk, off)) {
                    // Its block may be clean (the entry rolled back): it must be written again.
                    self.cache.modify(dirblk)?;
                }
                Ok(())
            }
            Task::RemoveOldName { dir, wait, bno, lbn, off, mut tasks } => {
                let waits = match wait {
                    NameWait::NewPath(newdir) => self.new_path_pending(newdir)?,
                    NameWait::Emptied(d) => self.hidden.values().any(|h| h.0 == d),
                };
                if waits {
                    self.deferred_old_names.push(Task::RemoveOldName { dir, wait, bno, lbn, off, tasks });
                    return Ok(());
                }
                if self.hidden.remove(&(bno, off)).is_none() {
                    return Err(FsError::Corrupt(format!("a hidden name in directory {dir} vanished")));
                }
                self.hidden_removed += 1;
                let waiting = self.namesakes.remove(&(bno, off)).unwrap_or_default();
                tasks.extend(waiting.into_iter().map(|(dirblk, off, _)| Task::NamesakeGone { dirblk, off }));
                let buf = self.cache.modify(bno)?;
                dir_remove(buf, off)?;
                let slack = block_slack(buf)?;
                if let Some(h) = self.dirhash.get_mut(&dir) {
                    h.set_slack(lbn, slack);
                }
                let now = match self.sd() {
                    Some(sd) => sd.dir_remove(bno, off, tasks).unwrap_or_default(),
                    None => tasks,
                };
                for t in now {
                    self.run_task(t)?;
                }
                Ok(())
            }
        }
    }

    /// Writes every dirty buffer (the periodic-update sweep); returns how many.
    pub fn flush_all(&mut self) -> FsResult<usize> {
        let all: Vec<u64> = self.cache.dirty_oldest_first().map(|(_, b)| b).collect();
        let n = all.len();
        self.write_delayed(all, 1024)?;
        self.run_tasks()?;
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
        self.run_tasks()?;
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
        self.run_tasks()?;
        Ok(meta.len())
    }

    /// Keeps the cache within its size: when it is full of dirty buffers, the oldest are written.
    fn balance(&mut self) -> FsResult<()> {
        self.run_tasks()?;
        self.ops += 1;
        let limit = self.softdep_limit;
        if self.ops >= self.next_count_at {
            if let Some(n) = self.hooks.softdep.as_mut().map(|s| s.count()) {
                // Counting is a scan of every structure, so it is done only as often as the
                // room left needs: no operation adds more than a few structures.
                self.next_count_at = self.ops + (limit.saturating_sub(n) as u64 / 8).clamp(16, 1024);
                if n > limit {
                    // The memory bound: new dependencies wait until old ones retire.
                    self.sync_all()?;
                }
            }
        }
        if self.write_through {
            self.sync_all()?;
            return Ok(());
        }
        self.make_room()
    }

    /// Writes the oldest dirty buffers if the cache is full of them. Unlike `balance`, safe in
    /// the middle of an operation, while an inode's new block pointers are only in memory: it
    /// neither waits for dependencies to drain (which those pointers hold) nor runs the task
    /// list (which may change that inode).
    fn make_room(&mut self) -> FsResult<()> {
        if !self.cache.over_capacity() && self.cache.dirty_count() < self.cache.capacity() * 3 / 4 {
            return Ok(());
        }
        let n = (self.cache.capacity() / 8).max(16);
        let old: Vec<u64> = self.cache.dirty_oldest_first().take(n).map(|(_, b)| b).collect();
        self.write_delayed(old, usize::MAX)
    }

    // ---------------------------------------------------------------- inodes

    fn check_ino(&self, ino: u32) -> FsResult<()> {
        if self.sb.is_valid_inode(ino) {
            Ok(())
        } else {
            Err(FsError::Stale(ino as u64))
        }
    }

    /// Reads an inode, allocated or not.
    fn iget_raw(&mut self, ino: u32) -> FsResult<Dinode> {
        self.check_ino(ino)?;
        let (bno, off) = self.sb.inode_location(ino);
        let buf = self.read_inode_block(bno)?;
        Ok(Dinode::decode(&buf[off..off + DINODE_SIZE]))
    }

    /// Reads an allocated inode.
    pub fn iget(&mut self, ino: u32) -> FsResult<Dinode> {
        let d = self.iget_raw(ino)?;
        if d.is_free() {
            return Err(FsError::Stale(ino as u64));
        }
        Ok(d)
    }

    fn iput(&mut self, ino: u32, d: &Dinode) -> FsResult<u64> {
        let (bno, off) = self.sb.inode_location(ino);
        let buf = self.cache.modify(bno)?;
        d.encode(&mut buf[off..off + DINODE_SIZE]);
        if let Some(sd) = self.hooks.softdep.as_mut() {
            sd.inode_update(ino);
        }
        Ok(bno)
    }

    fn now(&self) -> (i64, u32) {
        self.clock.wall()
    }

    fn touch_mc(&self, d: &mut Dinode) {
        let (s, ns) = self.now();
        d.mtime = s;
        d.mtime_ns = ns;
        d.ctime = s;
        d.ctime_ns = ns;
    }

    fn touch_c(&self, d: &mut Dinode) {
        let (s, ns) = self.now();
        d.ctime = s;
        d.ctime_ns = ns;
    }

    fn check_writable(&self) -> FsResult<()> {
        if self.readonly {
            Err(FsError::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// Allocates and initialises an inode near `parent`.
    fn new_inode(&mut self, parent: u32, mode: u16, uid: u32, gid: u32) -> FsResult<(u32, Dinode)> {
        let is_dir = mode & S_IFMT == S_IFDIR;
        let (ino, old) = self.alloc_inode(parent, is_dir)?;
        if let Some(sd) = self.sd() {
            sd.new_inode(ino, is_dir);
        }
        let (s, ns) = self.now();
        self.next_gen = self.next_gen.wrapping_add(1).max(1);
        let d = Dinode::new(mode, 0, uid, gid, (s, ns), old.generation.wrapping_add(self.next_gen) | 1);
        Ok((ino, d))
    }

    /// An inode from the bitmaps, checked before it is handed out as `alloc_block` checks
    /// blocks: a reserved number, an inode in use on disk or in the cache, or one whose freeing
    /// soft updates still track, is kept allocated and the search goes on.
    fn alloc_inode(&mut self, parent: u32, is_dir: bool) -> FsResult<(u32, Dinode)> {
        for _ in 0..MAX_BAD_ALLOCS {
            let ino = match self.alloc.alloc_inode(&mut self.cache, &self.sb, parent, is_dir, self.spread_dirs) {
                Err(AllocError::NoSpace) if self.reclaim()? => {
                    self.alloc.alloc_inode(&mut self.cache, &self.sb, parent, is_dir, self.spread_dirs)?
                }
                r => r?,
            };
            if ino < FIRST_INO {
                self.damaged(format!("inode bitmap shows reserved inode {ino} free"));
                continue;
            }
            let old = self.iget_raw(ino)?;
            if !old.is_free() {
                self.damaged(format!("inode bitmap shows inode {ino} free while it is in use"));
            } else if self.open.contains_key(&ino) || self.hooks.softdep.as_ref().is_some_and(|s| s.inode_busy(ino)) {
                self.damaged(format!("inode bitmap shows inode {ino} free before its freeing completed"));
            } else {
                return Ok((ino, old));
            }
        }
        Err(self.damaged(format!("{MAX_BAD_ALLOCS} inodes in a row were wrongly free in the bitmaps")))
    }

    // ---------------------------------------------------------------- block map

    /// Physical block of logical block `lbn` (0 for a hole). With `alloc`, missing blocks
    /// (and the indirect blocks leading to them) are allocated; a new data block's buffer is
    /// created zeroed. `d` is the in-memory inode; the caller writes it back.
    fn bmap(&mut self, ino: u32, d: &mut Dinode, lbn: u64, alloc: bool) -> FsResult<(u64, bool)> {
        let p = self.sb.ptrs_per_block();
        if lbn < NDADDR as u64 {
            let cur = d.db[lbn as usize];
            if cur != 0 || !alloc {
                return Ok((self.checked_ptr(cur)?, false));
            }
            let pref =
                if lbn > 0 && d.db[lbn as usize - 1] != 0 { d.db[lbn as usize - 1] + 1 } else { self.ino_pref(ino) };
            let pref = self.br_hint.take().unwrap_or(pref);
            let b = self.alloc_block(pref)?;
            self.cache.create(b);
            d.db[lbn as usize] = b;
            d.blocks += 1;
            let is_dir = d.is_dir();
            if let Some(sd) = self.sd() {
                sd.alloc_direct(ino, is_dir, PtrSlot::Direct(lbn as usize), lbn, b);
            }
            return Ok((b, true));
        }
        // Find the level and the index path.
        let mut rel = lbn - NDADDR as u64;
        let mut level = 0usize;
        let mut span = p;
        let mut level_base = NDADDR as u64;
        while rel >= span {
            rel -= span;
            level_base += span;
            level += 1;
            if level >= NIADDR {
                return Err(FsError::TooBig);
            }
            span *= p;
        }
        // Top pointer lives in the inode.
        let mut ptr = d.ib[level];
        let mut fresh = false;
        if ptr == 0 {
            if !alloc {
                return Ok((0, false));
            }
            ptr = self.alloc_indirect(ino, self.ino_pref(ino))?;
            d.ib[level] = ptr;
            d.blocks += 1;
            let is_dir = d.is_dir();
            if let Some(sd) = self.sd() {
                sd.alloc_direct(ino, is_dir, PtrSlot::Indirect(level), level_base, ptr);
            }
        }
        self.checked_ptr(ptr)?;
        let mut span = span / p; // blocks covered by each pointer of the top indirect block
        loop {
            let idx = (rel / span) as usize;
            rel %= span;
            let child = ind_get(self.read_indirect(ptr)?, idx);
            if child != 0 {
                self.checked_ptr(child)?;
                if span == 1 {
                    return Ok((child, false));
                }
                ptr = child;
                span /= p;
                continue;
            }
            if !alloc {
                return Ok((0, false));
            }
            let pref = if idx > 0 { ind_get(self.cache.read(ptr)?, idx - 1) + 1 } else { ptr + 1 };
            let nb = if span == 1 {
                let pref = self.br_hint.take().unwrap_or(pref);
                let b = self.alloc_block(pref)?;
                self.cache.create(b);
                fresh = true;
                b
            } else {
                self.alloc_indirect(ino, pref)?
            };
            ind_set(self.cache.modify(ptr)?, idx, nb);
            if let Some(sd) = self.sd() {
                sd.alloc_indir(ptr, idx, nb);
            }
            d.blocks += 1;
            if span == 1 {
                return Ok((nb, fresh));
            }
            ptr = nb;
            span /= p;
        }
    }

    /// A new indirect block: zeroed, and in `Sync` mode on disk before any pointer to it.
    fn alloc_indirect(&mut self, _ino: u32, pref: u64) -> FsResult<u64> {
        let b = self.alloc_block(pref)?;
        self.cache.create(b);
        self.order_write(&[b])?;
        Ok(b)
    }

    fn checked_ptr(&mut self, b: u64) -> FsResult<u64> {
        if b != 0 && !self.sb.is_data_block(b) {
            return Err(self.damaged(format!("block pointer {b} outside the data area")));
        }
        Ok(b)
    }

    /// The blocks that inodes and indirect blocks read from disk point at must be in use in
    /// the bitmaps: a wrong bitmap is caught here, before an allocation could hand such a block
    /// out again. Each block is checked once, when it comes into the cache (`ptrs` are its
    /// pointers); a wrong bit is set and the superblock asks for fsck.
    fn claim_pointers(&mut self, what: u64, ptrs: &[u64]) -> FsResult<()> {
        let mut wrong = 0;
        for &b in ptrs {
            if b != 0 && self.alloc.ensure_block_used(&mut self.cache, &self.sb, b)? {
                wrong += 1;
            }
        }
        if wrong > 0 {
            self.damaged(format!("{wrong} blocks that block {what} points at were free in the bitmaps"));
        }
        Ok(())
    }

    /// Reads an inode-table block, checking its inodes' pointers when it comes from disk.
    fn read_inode_block(&mut self, bno: u64) -> FsResult<&[u8]> {
        if !self.cache.is_cached(bno) {
            let buf = self.cache.read(bno)?;
            let ptrs: Vec<u64> = buf
                .chunks_exact(DINODE_SIZE)
                .map(Dinode::decode)
                .filter(|d| !d.is_free())
                .flat_map(|d| d.db.into_iter().chain(d.ib))
                .collect();
            self.claim_pointers(bno, &ptrs)?;
        }
        Ok(self.cache.read(bno)?)
    }

    /// Reads an indirect block, checking its pointers when it comes from disk.
    fn read_indirect(&mut self, bno: u64) -> FsResult<&[u8]> {
        if !self.cache.is_cached(bno) {
            let buf = self.cache.read(bno)?;
            let ptrs: Vec<u64> = (0..self.sb.ptrs_per_block() as usize).map(|i| ind_get(buf, i)).collect();
            self.claim_pointers(bno, &ptrs)?;
        }
        Ok(self.cache.read(bno)?)
    }

    fn ino_pref(&self, ino: u32) -> u64 {
        self.sb.cg_data_start(self.sb.cg_of_inode(ino))
    }

    /// Frees every block at logical block `from` and beyond. Pointers are nullified in the inode
    /// and indirect blocks; in `Sync` mode those are written before the blocks return to the
    /// free map. The inode itself is written back.
    /// The tasks in `then` run once the blocks are free (with soft updates: once the nullified
    /// pointers are on disk, the paper's freeblks).
    fn truncate_blocks(&mut self, ino: u32, d: &mut Dinode, from: u64, then: Vec<Task>) -> FsResult<()> {
        let p = self.sb.ptrs_per_block();
        let mut freed = Vec::new();
        let mut dirtied = Vec::new();
        for i in (from.min(NDADDR as u64) as usize)..NDADDR {
            if d.db[i] != 0 {
                freed.push(d.db[i]);
                d.db[i] = 0;
            }
        }
        let mut base = NDADDR as u64;
        let mut span = p;
        for level in 0..NIADDR {
            let top = d.ib[level];
            if top != 0 && from < base + span {
                let keep_from = from.saturating_sub(base);
                if keep_from == 0 {
                    self.collect_tree(top, level, &mut freed)?;
                    d.ib[level] = 0;
                } else if self.trunc_tree(top, level, span / p, keep_from, &mut freed, &mut dirtied)? {
                    freed.push(top);
                    d.ib[level] = 0;
                }
            }
            base += span;
            span = span.saturating_mul(p);
        }
        d.blocks = d.blocks.saturating_sub(freed.len() as u64);
        let mut then = then;
        if let Some(sd) = self.hooks.softdep.as_mut() {
            then.extend(sd.cancel_blocks(ino, &freed));
            if dirtied.is_empty() {
                // Only the inode points at the blocks: they are freed once it is on disk.
                for &b in &freed {
                    self.cache.forget(b);
                }
                sd.free_blocks(ino, freed, then);
                self.iput(ino, d)?;
                return Ok(());
            }
        }
        let ib = self.iput(ino, d)?;
        if self.hooks.softdep.is_some() {
            // Partial truncation through indirect blocks: synchronous writes, as in the paper.
            dirtied.push(ib);
            self.write_bufs(&dirtied, WriteKind::Sync)?;
        } else {
            dirtied.push(ib);
            // The nullified pointers go first; only then may the blocks be reused.
            self.order_write(&dirtied)?;
        }
        for b in freed {
            self.cache.forget(b);
            self.free_block(b)?;
        }
        for t in then {
            self.run_task(t)?;
        }
        Ok(())
    }

    /// Every block of the tree under indirect block `bno` of `level` (0 = single), itself included.
    fn collect_tree(&mut self, bno: u64, level: usize, out: &mut Vec<u64>) -> FsResult<()> {
        self.checked_ptr(bno)?;
        let ptrs: Vec<u64> = {
            let buf = self.cache.read(bno)?;
            (0..self.sb.ptrs_per_block() as usize).map(|i| ind_get(buf, i)).filter(|&c| c != 0).collect()
        };
        for c in ptrs {
            if level == 0 {
                out.push(self.checked_ptr(c)?);
            } else {
                self.collect_tree(c, level - 1, out)?;
            }
        }
        out.push(bno);
        Ok(())
    }

    /// Frees the part of an indirect tree from relative block `keep_from` on; `span` is the
    /// number of data blocks each pointer of `bno` covers. Returns true if the tree is now empty.
    fn trunc_tree(
        &mut self,
        bno: u64,
        level: usize,
        span: u64,
        keep_from: u64,
        freed: &mut Vec<u64>,
        dirtied: &mut Vec<u64>,
    ) -> FsResult<bool> {
        self.checked_ptr(bno)?;
        let n = self.sb.ptrs_per_block() as usize;
        let ptrs: Vec<u64> = {
            let buf = self.cache.read(bno)?;
            (0..n).map(|i| ind_get(buf, i)).collect()
        };
        let mut changed = false;
        let mut empty = true;
        for (i, &c) in ptrs.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let start = i as u64 * span;
            if start >= keep_from {
                if level == 0 {
                    freed.push(self.checked_ptr(c)?);
                } else {
                    self.collect_tree(c, level - 1, freed)?;
                }
                ind_set(self.cache.modify(bno)?, i, 0);
                changed = true;
            } else if start + span > keep_from && level > 0 {
                if self.trunc_tree(c, level - 1, span / self.sb.ptrs_per_block(), keep_from - start, freed, dirtied)? {
                    freed.push(c);
                    ind_set(self.cache.modify(bno)?, i, 0);
                    changed = true;
                } else {
                    empty = false;
                }
            } else {
                empty = false;
            }
        }
        if changed && !empty {
            dirtied.push(bno);
        }
        Ok(empty)
    }

    /// Frees an inode whose last link and last open handle are gone: its blocks, then (once the
    /// cleared inode is ordered to disk) its bitmap bit.
    /// `then` runs once the blocks are free.
    fn release_inode(&mut self, ino: u32, mut d: Dinode, then: Vec<Task>) -> FsResult<()> {
        let is_dir = d.is_dir();
        let mut then = then;
        if is_dir {
            self.dirhash.remove(&ino);
            then.extend(self.parent_drop.remove(&ino).map(Task::DropLink));
            self.removed_dirs.remove(&ino);
        }
        if d.has_blocks() {
            // Size goes with the pointers, so no crash shows a directory with a hole.
            d.size = 0;
            self.truncate_blocks(ino, &mut d, 0, std::mem::take(&mut then))?;
        }
        let cleared = Dinode { generation: d.generation, ..Default::default() };
        if let Some(sd) = self.hooks.softdep.as_mut() {
            // freefile: the inode returns to the map once its cleared dinode is on disk.
            sd.free_file(ino, is_dir, then);
            self.iput(ino, &cleared)?;
            return Ok(());
        }
        let ib = self.iput(ino, &cleared)?;
        self.order_write(&[ib])?;
        self.alloc.free_inode(&mut self.cache, &self.sb, ino, is_dir)?;
        for t in then {
            self.run_task(t)?;
        }
        Ok(())
    }

    /// Drops one link; frees the inode when no link and no open handle remain.
    fn drop_link(&mut self, ino: u32) -> FsResult<()> {
        let mut d = self.iget(ino)?;
        d.nlink = d.nlink.saturating_sub(1);
        if d.is_dir() && d.nlink == 1 && self.removed_dirs.remove(&ino) {
            d.nlink = 0; // a removed directory's "." goes with its last link
        }
        self.touch_c(&mut d);
        if d.nlink == 0 {
            if !self.open.contains_key(&ino) {
                return self.release_inode(ino, d, vec![]);
            }
            self.orphans.insert(ino);
        }
        self.iput(ino, &d)?;
        Ok(())
    }

    // ---------------------------------------------------------------- directories

    fn check_name(name: &[u8]) -> FsResult<()> {
        if name.len() > MAXNAMLEN {
            return Err(FsError::NameTooLong);
        }
        if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
            return Err(FsError::Invalid("bad file name"));
        }
        Ok(())
    }

    fn dir_inode(&mut self, ino: u32) -> FsResult<Dinode> {
        let d = self.iget(ino)?;
        if !d.is_dir() {
            return Err(FsError::NotDir);
        }
        Ok(d)
    }

    /// Builds the name index of a large directory if it has none.
    fn dirhash_ensure(&mut self, dir: u32, d: &mut Dinode) -> FsResult<bool> {
        let nblocks = d.size.div_ceil(self.sb.block_size as u64);
        if self.dirhash.contains_key(&dir) {
            return Ok(true);
        }
        if nblocks < DIRHASH_MIN_BLOCKS {
            return Ok(false);
        }
        // Hidden entries stay out: one may share its name with a live entry (a file moved out
        // and back, say), and whichever came last in the blocks would have taken the name.
        let mut h = DirHash::default();
        for lbn in 0..nblocks {
            let (bno, _) = self.bmap(dir, d, lbn, false)?;
            if bno == 0 {
                h.add_block(lbn, None)?;
            } else {
                let hidden = &self.hidden;
                h.add_block_except(lbn, Some(self.cache.read(bno)?), |off| hidden.contains_key(&(bno, off)))?;
            }
        }
        self.dirhash.insert(dir, h);
        Ok(true)
    }

    /// Finds `name` in directory `dir`.
    fn find_entry(&mut self, dir: u32, d: &mut Dinode, name: &[u8]) -> FsResult<Option<Slot>> {
        if self.dirhash_ensure(dir, d)? {
            let Some((lbn, off)) = self.dirhash[&dir].get(name) else { return Ok(None) };
            let (bno, _) = self.bmap(dir, d, lbn, false)?;
            let buf = self.cache.read(bno)?;
            for e in dir_iter(buf) {
                let e = e?;
                if e.offset == off {
                    assert!(e.ino != 0 && e.name == name, "dirhash of directory {dir} is stale");
                    return Ok(Some(Slot { bno, lbn, off, ino: e.ino }));
                }
            }
            panic!("dirhash of directory {dir} names a missing entry");
        }
        self.scan_dir(dir, d, |e| e.name == name)
    }

    /// The first live entry of `dir` (hidden old names of renames excluded) that `pred` accepts.
    fn scan_dir(&mut self, dir: u32, d: &mut Dinode, pred: impl Fn(&DirRef) -> bool) -> FsResult<Option<Slot>> {
        let bs = self.sb.block_size as u64;
        for lbn in 0..d.size.div_ceil(bs) {
            let (bno, _) = self.bmap(dir, d, lbn, false)?;
            if bno == 0 {
                continue;
            }
            let buf = self.cache.read(bno)?;
            for e in dir_iter(buf) {
                let e = e?;
                if e.ino != 0 && !self.hidden.contains_key(&(bno, e.offset)) && pred(&e) {
                    return Ok(Some(Slot { bno, lbn, off: e.offset, ino: e.ino }));
                }
            }
        }
        Ok(None)
    }

    /// Removes the entry `slot` (named `name`) from directory `dir`.
    fn remove_entry(&mut self, dir: u32, slot: &Slot, name: &[u8]) -> FsResult<()> {
        let buf = self.cache.modify(slot.bno)?;
        dir_remove(buf, slot.off)?;
        if let Some(h) = self.dirhash.get_mut(&dir) {
            h.removed(name, slot.lbn, block_slack(buf)?);
        }
        Ok(())
    }

    /// Link drops that `tasks` will make, counted now so users see final link counts at once.
    fn note_pending(&mut self, tasks: &[Task]) {
        if self.hooks.softdep.is_none() {
            return;
        }
        let Some(sd) = self.sd() else { return };
        for t in tasks {
            match t {
                Task::DropLink(i) => sd.add_pending_unlink(*i),
                Task::RmdirChild { child, parent } => {
                    sd.add_pending_unlink(*child);
                    sd.add_pending_unlink(*child);
                    if let Some(p) = parent {
                        sd.add_pending_unlink(*p);
                    }
                }
                _ => {}
            }
        }
    }

    /// A name was added (or, with `old`, changed) at `off` of directory block `bno`: ordered
    /// after the inode it names (and for mkdir after the parent's raised count and the new
    /// directory's first block). `tasks` run once the name is on disk.
    #[allow(clippy::too_many_arguments)]
    fn entry_added(
        &mut self,
        dir: u32,
        bno: u64,
        off: usize,
        ino: u32,
        old: Option<(u32, u8)>,
        parent: Option<u32>,
        mkdir: bool,
        tasks: Vec<Task>,
    ) -> FsResult<()> {
        if self.hooks.softdep.is_some() {
            self.note_pending(&tasks);
            self.sd().expect("softdep").dir_add(dir, bno, off, ino, old, parent, mkdir, tasks);
            // The inodes the entry waits for must be written again for it to complete.
            for i in std::iter::once(ino).chain(parent) {
                let (ib, _) = self.sb.inode_location(i);
                self.cache.modify(ib)?;
            }
            return Ok(());
        }
        self.order_write(&[bno])?;
        for t in tasks {
            self.run_task(t)?;
        }
        Ok(())
    }

    /// Removes the entry `slot` of `dir`; `tasks` (the link drops) run once the removal is on
    /// disk (soft updates' dirrem) or, ordered by a synchronous write, at once.
    fn unlink_name(&mut self, dir: u32, slot: &Slot, name: &[u8], tasks: Vec<Task>) -> FsResult<()> {
        log::trace!("unlink {:?} from directory {dir} at {slot:?}: then {tasks:?}", String::from_utf8_lossy(name));
        self.remove_entry(dir, slot, name)?;
        if self.hooks.softdep.is_some() {
            // Users see the link counts the queued drops will leave (each drop takes its note).
            self.note_pending(&tasks);
            // A name that never reached the disk is gone now: its drops run at once, and a file
            // removed before the syncer wrote it costs no write (its dirty blocks go).
            for t in self.sd().expect("softdep").dir_remove(slot.bno, slot.off, tasks).unwrap_or_default() {
                self.run_task(t)?;
            }
            return Ok(());
        }
        self.order_write(&[slot.bno])?;
        for t in tasks {
            self.run_task(t)?;
        }
        Ok(())
    }

    /// The inode of a root directory the file system keeps for itself (`/.br`, `/.snap`): made,
    /// root-only and immutable so that it cannot be renamed, if `create`.
    pub(crate) fn special_dir(&mut self, name: &[u8], create: bool) -> FsResult<u32> {
        match self.lookup(ROOT_INO, name) {
            Ok((ino, d)) if d.is_dir() => Ok(ino),
            Ok(_) => Err(FsError::Corrupt(format!("/{} is not a directory", String::from_utf8_lossy(name)))),
            Err(FsError::NotFound) if create => {
                let (ino, _) = self.mkdir(ROOT_INO, name, 0o700, 0, 0)?;
                let mut d = self.iget(ino)?;
                d.flags |= DI_IMMUTABLE;
                self.iput(ino, &d)?;
                Ok(ino)
            }
            Err(e) => Err(e),
        }
    }

    /// The entries (without "." and "..") of a root directory the file system keeps for itself;
    /// none if it was never made.
    pub(crate) fn special_dir_entries(&mut self, name: &[u8]) -> FsResult<Vec<DirListEntry>> {
        let dir = match self.special_dir(name, false) {
            Ok(d) => d,
            Err(FsError::NotFound) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        let mut cookie = 0;
        loop {
            let batch = self.readdir(dir, cookie, 256)?;
            let Some(last) = batch.last() else { break };
            cookie = last.next;
            out.extend(batch.into_iter().filter(|e| e.name != b"." && e.name != b".."));
        }
        Ok(out)
    }

    /// Bytes `off..off + len` (up to `size`) of a file whose logical block `x` `block` reads into
    /// a buffer: for files the cache must not serve (reservations, snapshots).
    pub(crate) fn read_blocks(
        &mut self,
        size: u64,
        off: u64,
        len: usize,
        mut block: impl FnMut(&mut Fs, u64, &mut [u8]) -> FsResult<()>,
    ) -> FsResult<Vec<u8>> {
        let bs = self.sb.block_size as u64;
        let end = size.min(off.saturating_add(len as u64));
        let mut out = Vec::with_capacity(end.saturating_sub(off) as usize);
        let mut buf = vec![0u8; bs as usize];
        let mut pos = off;
        while pos < end {
            let boff = (pos % bs) as usize;
            let n = ((bs - boff as u64).min(end - pos)) as usize;
            block(self, pos / bs, &mut buf)?;
            out.extend_from_slice(&buf[boff..boff + n]);
            pos += n as u64;
        }
        Ok(out)
    }

    /// Hides the entry `slot` of `dir` from users while it stays in its block (so on disk).
    fn hide_name(&mut self, dir: u32, slot: &Slot, name: &[u8]) {
        self.hidden.insert((slot.bno, slot.off), (dir, slot.lbn, name.to_vec(), slot.ino));
        if let Some(h) = self.dirhash.get_mut(&dir) {
            h.hide(name, slot.lbn, slot.off);
        }
    }

    /// A rename's new name in `newdir` is on disk; true if it is not reachable there yet. A
    /// directory that has since been removed holds no name of the renamed inode any more (it was
    /// moved again or unlinked), so its old name may go.
    fn new_path_pending(&mut self, newdir: u32) -> FsResult<bool> {
        match self.path_pending(newdir) {
            Err(FsError::NotDir | FsError::NotFound | FsError::Stale(_)) => Ok(false),
            r => r,
        }
    }

    /// With soft updates, true if `dir` or one of its ancestors is named by an entry not yet on
    /// disk: a rename's new name there would not be reachable after a crash, so the old name
    /// stays on disk until the path is (rule 3 for the whole path, not only the last name).
    fn path_pending(&mut self, mut dir: u32) -> FsResult<bool> {
        if self.hooks.softdep.is_none() {
            return Ok(false);
        }
        for _ in 0..4096 {
            if dir == ROOT_INO {
                return Ok(false);
            }
            // A directory with a hidden name (renamed, or removed while it holds hidden names)
            // stays reachable on disk by that name until its other name may replace it.
            if self.hooks.softdep.as_ref().is_some_and(|s| s.has_pending_name(dir)) {
                return Ok(true);
            }
            let mut d = self.dir_inode(dir)?;
            dir = self.find_entry(dir, &mut d, b"..")?.ok_or_else(|| FsError::Corrupt(format!("{dir} has no ..")))?.ino;
        }
        Ok(true)
    }

    /// The link count users see: soft updates count a link as gone as soon as its name is.
    fn eff(&self, ino: u32, mut d: Dinode) -> Dinode {
        if let Some(sd) = self.hooks.softdep.as_ref() {
            d.nlink = d.nlink.saturating_sub(sd.pending_unlinks_of(ino));
        }
        d
    }

    /// Adds an entry to `dir`, growing it by a block if no block has room. The directory inode
    /// `d` is updated in memory (size, times) and written back. Returns the block holding the
    /// new entry.
    fn add_entry(&mut self, dir: u32, d: &mut Dinode, name: &[u8], ino: u32, dtype: u8) -> FsResult<(u64, usize)> {
        let bs = self.sb.block_size as u64;
        let nblocks = d.size.div_ceil(bs);
        let indexed = self.dirhash_ensure(dir, d)?;
        let candidates = if indexed {
            let h = &self.dirhash[&dir];
            h.block_with_room(dirent_size(name.len())).map(|l| l..l + 1).unwrap_or(nblocks..nblocks)
        } else {
            0..nblocks
        };
        for lbn in candidates {
            let (bno, _) = self.bmap(dir, d, lbn, false)?;
            if bno == 0 {
                continue;
            }
            let at = dir_find_space(self.cache.read(bno)?, name.len())?;
            if let Some(at) = at {
                let buf = self.cache.modify(bno)?;
                let off = dir_insert(buf, at, ino, dtype, name)?;
                if let Some(h) = self.dirhash.get_mut(&dir) {
                    h.inserted(name, lbn, off, block_slack(buf)?);
                }
                self.touch_mc(d);
                self.iput(dir, d)?;
                return Ok((bno, off));
            }
            assert!(!indexed, "dirhash of directory {dir} claims room in block {lbn}");
        }
        // A new block: initialised and (Sync) on disk before the inode points to it.
        let mut nd = d.clone();
        let (bno, _) = self.bmap(dir, &mut nd, nblocks, true)?;
        let buf = self.cache.create(bno);
        dir_init_block(buf);
        let off = dir_insert(buf, 0, ino, dtype, name)?;
        let slack = block_slack(buf)?;
        self.order_write(&[bno])?;
        if let Some(h) = self.dirhash.get_mut(&dir) {
            h.inserted(name, nblocks, off, slack);
        }
        *d = nd;
        d.size = (nblocks + 1) * bs;
        self.touch_mc(d);
        let ib = self.iput(dir, d)?;
        // The new name is reachable only once the directory's inode (size, pointer) is on disk:
        // written now, as FFS's direnter does, so that a rename's old name never goes first.
        self.order_write(&[ib])?;
        Ok((bno, off))
    }

    fn dir_is_empty(&mut self, ino: u32, d: &mut Dinode) -> FsResult<bool> {
        Ok(self.scan_dir(ino, d, |e| e.name != b"." && e.name != b"..")?.is_none())
    }

    /// Makes the root directory of a new file system (mkfs only).
    fn make_root(&mut self, uid: u32, gid: u32) -> FsResult<()> {
        let ino = self.alloc.alloc_inode(&mut self.cache, &self.sb, ROOT_INO, true, false)?;
        if ino != ROOT_INO {
            return Err(FsError::Corrupt(format!("root got inode {ino}")));
        }
        let (s, ns) = self.now();
        let mut d = Dinode::new(S_IFDIR | 0o755, 2, uid, gid, (s, ns), 1);
        self.init_dir_block(ino, &mut d, ROOT_INO)?;
        self.iput(ino, &d)?;
        self.sync_all()
    }

    /// Gives a new directory its first block with "." and "..".
    fn init_dir_block(&mut self, ino: u32, d: &mut Dinode, parent: u32) -> FsResult<u64> {
        let (bno, _) = self.bmap(ino, d, 0, true)?;
        let buf = self.cache.create(bno);
        dir_init_block(buf);
        let at = dir_insert(buf, 0, ino, DT_DIR, b".")?;
        let at = dir_find_space(buf, 2)?.unwrap_or(at);
        dir_insert(buf, at, parent, DT_DIR, b"..")?;
        d.size = self.sb.block_size as u64;
        Ok(bno)
    }

    /// Sets the ".." entry of directory `ino` to `parent`; returns its block.
    fn set_dotdot(&mut self, ino: u32, parent: u32) -> FsResult<(u64, usize)> {
        let mut d = self.dir_inode(ino)?;
        let slot = self
            .find_entry(ino, &mut d, b"..")?
            .ok_or_else(|| FsError::Corrupt(format!("directory {ino} has no ..")))?;
        dirent_set_ino(self.cache.modify(slot.bno)?, slot.off, parent);
        Ok((slot.bno, slot.off))
    }

    // ---------------------------------------------------------------- operations

    pub fn lookup(&mut self, dir: u32, name: &[u8]) -> FsResult<(u32, Dinode)> {
        if name.len() > MAXNAMLEN {
            return Err(FsError::NameTooLong);
        }
        let mut d = self.dir_inode(dir)?;
        match self.find_entry(dir, &mut d, name)? {
            Some(s) => {
                let d = match self.iget(s.ino) {
                    Ok(d) if d.nlink > 0 => d,
                    Ok(_) => return Err(self.damaged(format!("directory {dir} names inode {} with no links", s.ino))),
                    Err(_) => return Err(self.damaged(format!("directory {dir} names free inode {}", s.ino))),
                };
                self.note_name_dir(dir, s.ino, &d);
                Ok((s.ino, self.eff(s.ino, d)))
            }
            None => Err(FsError::NotFound),
        }
    }

    pub fn getattr(&mut self, ino: u32) -> FsResult<Dinode> {
        let d = self.iget(ino)?;
        Ok(self.eff(ino, d))
    }

    /// Creates a non-directory node (regular file, fifo, device, socket) named `name` in `dir`.
    pub fn mknod(
        &mut self,
        dir: u32,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
    ) -> FsResult<(u32, Dinode)> {
        self.retry_nospace(|fs| fs.mknod_once(dir, name, mode, uid, gid, rdev))
    }

    fn mknod_once(
        &mut self,
        dir: u32,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
    ) -> FsResult<(u32, Dinode)> {
        let ftype = (mode as u16) & S_IFMT;
        let ftype = if ftype == 0 { S_IFREG } else { ftype };
        if ftype == S_IFDIR || ftype == S_IFLNK {
            return Err(FsError::Invalid("mknod of a directory or symlink"));
        }
        let r = self.create_node(dir, name, ftype | (mode as u16 & 0o7777), uid, gid, |_, _, d| {
            d.rdev = rdev;
            Ok(())
        });
        self.balance()?;
        r
    }

    pub fn create(&mut self, dir: u32, name: &[u8], mode: u32, uid: u32, gid: u32) -> FsResult<(u32, Dinode)> {
        self.mknod(dir, name, S_IFREG as u32 | (mode & 0o7777), uid, gid, 0)
    }

    /// The common path of create, mknod and symlink: inode first, then the name.
    fn create_node(
        &mut self,
        dir: u32,
        name: &[u8],
        mode: u16,
        uid: u32,
        gid: u32,
        init: impl FnOnce(&mut Fs, u32, &mut Dinode) -> FsResult<()>,
    ) -> FsResult<(u32, Dinode)> {
        self.check_writable()?;
        Self::check_name(name)?;
        let mut dd = self.dir_for_new_name(dir, name)?;
        let (ino, mut d) = self.new_inode(dir, mode, uid, gid)?;
        d.nlink = 1;
        if let Err(e) = init(self, ino, &mut d) {
            self.abandon_inode(ino, d)?;
            return Err(e);
        }
        let ib = self.iput(ino, &d)?;
        // The initialised inode (and its bitmap bit) before the name.
        self.order_write(&[ib])?;
        match self.add_entry(dir, &mut dd, name, ino, dtype_of_mode(mode)) {
            Ok((db, off)) => {
                self.entry_added(dir, db, off, ino, None, None, false, vec![])?;
                self.wait_for_namesake(dir, name, db, off, ino);
            }
            Err(e) => {
                self.abandon_inode(ino, d)?;
                return Err(e);
            }
        }
        Ok((ino, d))
    }

    /// The directory a new name goes in: it must exist, not be removed, and not hold the name.
    fn dir_for_new_name(&mut self, dir: u32, name: &[u8]) -> FsResult<Dinode> {
        let mut dd = self.dir_inode(dir)?;
        if self.eff(dir, dd.clone()).nlink == 0 {
            return Err(FsError::NotFound);
        }
        if self.find_entry(dir, &mut dd, name)?.is_some() {
            return Err(FsError::Exists);
        }
        Ok(dd)
    }

    /// With soft updates a rename's old name stays in its block, hidden, until the new name is
    /// reachable on disk. A new entry of the same name in that directory may land after it, and
    /// a lookup after a crash would find the old entry first: the new name would be lost behind
    /// it. A new entry of a file waits on disk for the hidden one's removal
    /// (`wait_for_namesake`); a directory's cannot (what is later moved under it would wait
    /// for its path, and the hidden name's removal may wait for that), so before a directory
    /// takes such a name, the hidden one leaves the disk here: the renamed inode's names are
    /// written as fsync writes them, which lets its removal run, and the removal's block is
    /// written. If something else holds it (a removed directory whose name waits for the hidden
    /// names it holds), everything is written. Call it before reading the inodes the operation
    /// changes.
    fn retire_hidden_name(&mut self, dir: u32, name: &[u8]) -> FsResult<()> {
        let find = |fs: &Fs| fs.hidden.iter().find(|(_, h)| h.0 == dir && h.2 == name).map(|(&k, _)| k);
        while let Some(key) = find(self) {
            log::debug!(
                "new name {:?} in directory {dir}: its hidden namesake goes first",
                String::from_utf8_lossy(name)
            );
            self.retire_hidden(key)?;
        }
        Ok(())
    }

    /// The hidden entry at `key` (block, offset) leaves the disk now: the names of the inode it
    /// names are written as fsync writes them (which lets its removal run), then the removal's
    /// block; everything, if that is not enough.
    fn retire_hidden(&mut self, key: (u64, usize)) -> FsResult<()> {
        let Some(&(.., ino)) = self.hidden.get(&key) else {
            return Ok(());
        };
        self.fsync(ino)?;
        self.run_tasks()?;
        if self.hidden.contains_key(&key) {
            self.sync_all()?;
            if self.hidden.contains_key(&key) {
                return Err(FsError::Corrupt(format!("a hidden name at {key:?} outlived a full sync")));
            }
            return Ok(());
        }
        self.write_bufs(&[key.0], WriteKind::Sync)
    }

    /// The new entry at `off` of directory block `bno`, naming file `ino`, waits on disk for
    /// the removal of a hidden entry of the same name in `dir`, if there is one (see
    /// `retire_hidden_name`).
    fn wait_for_namesake(&mut self, dir: u32, name: &[u8], bno: u64, off: usize, ino: u32) {
        if self.hooks.softdep.is_some() {
            self.name_dir.insert(ino, dir);
        }
        let hidden: Vec<(u64, usize)> =
            self.hidden.iter().filter(|(_, h)| h.0 == dir && h.2 == name).map(|(&k, _)| k).collect();
        if hidden.is_empty() {
            return;
        }
        if let Some(sd) = self.sd() {
            sd.wait_for_namesake(bno, off);
        }
        for k in hidden {
            self.namesakes.entry(k).or_default().push((bno, off, ino));
        }
    }

    /// A file `ino` has a name in `dir` (see `name_dir`); a directory's own ".." says where it is.
    fn note_name_dir(&mut self, dir: u32, ino: u32, d: &Dinode) {
        if self.hooks.softdep.is_some() && !d.is_dir() {
            self.name_dir.insert(ino, dir);
        }
    }

    /// Undoes a half-made inode after a failure (e.g. ENOSPC for its directory entry).
    fn abandon_inode(&mut self, ino: u32, mut d: Dinode) -> FsResult<()> {
        d.nlink = 0;
        self.release_inode(ino, d, vec![])
    }

    pub fn mkdir(&mut self, dir: u32, name: &[u8], mode: u32, uid: u32, gid: u32) -> FsResult<(u32, Dinode)> {
        self.retry_nospace(|fs| fs.mkdir_once(dir, name, mode, uid, gid))
    }

    fn mkdir_once(&mut self, dir: u32, name: &[u8], mode: u32, uid: u32, gid: u32) -> FsResult<(u32, Dinode)> {
        self.check_writable()?;
        Self::check_name(name)?;
        self.retire_hidden_name(dir, name)?;
        let mut dd = self.dir_for_new_name(dir, name)?;
        if dd.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        // The parent's raised link count (for the new "..") goes first.
        dd.nlink += 1;
        let pb = self.iput(dir, &dd)?;
        self.order_write(&[pb])?;
        let (ino, mut d) = match self.new_inode(dir, S_IFDIR | (mode as u16 & 0o7777), uid, gid) {
            Ok(x) => x,
            Err(e) => {
                dd.nlink -= 1;
                self.iput(dir, &dd)?;
                return Err(e);
            }
        };
        d.nlink = 2;
        let body = match self.init_dir_block(ino, &mut d, dir) {
            Ok(b) => b,
            Err(e) => {
                self.abandon_inode(ino, d)?;
                dd.nlink -= 1;
                self.iput(dir, &dd)?;
                return Err(e);
            }
        };
        if let Some(sd) = self.hooks.softdep.as_mut() {
            sd.mkdir_parent(ino, dir);
        }
        let ib = self.iput(ino, &d)?;
        // The new directory's block, then its inode, then its name.
        self.order_write(&[body])?;
        self.order_write(&[ib])?;
        match self.add_entry(dir, &mut dd, name, ino, DT_DIR) {
            Ok((db, off)) => self.entry_added(dir, db, off, ino, None, Some(dir), true, vec![])?,
            Err(e) => {
                self.abandon_inode(ino, d)?;
                let mut dd = self.iget(dir)?;
                dd.nlink -= 1;
                self.iput(dir, &dd)?;
                return Err(e);
            }
        }
        self.balance()?;
        Ok((ino, d))
    }

    pub fn symlink(&mut self, dir: u32, name: &[u8], target: &[u8], uid: u32, gid: u32) -> FsResult<(u32, Dinode)> {
        self.retry_nospace(|fs| fs.symlink_once(dir, name, target, uid, gid))
    }

    fn symlink_once(&mut self, dir: u32, name: &[u8], target: &[u8], uid: u32, gid: u32) -> FsResult<(u32, Dinode)> {
        if target.is_empty() || target.len() >= self.sb.block_size as usize || target.len() > MAX_SYMLINK {
            return Err(if target.is_empty() { FsError::NotFound } else { FsError::NameTooLong });
        }
        let r = self.create_node(dir, name, S_IFLNK | 0o777, uid, gid, |fs, ino, d| {
            // The target goes through the ordinary block map, like file data.
            fs.write_inner(ino, d, 0, target)?;
            Ok(())
        });
        self.balance()?;
        r
    }

    pub fn readlink(&mut self, ino: u32) -> FsResult<Vec<u8>> {
        let d = self.iget(ino)?;
        if !d.is_symlink() {
            return Err(FsError::Invalid("not a symbolic link"));
        }
        if d.size == 0 || d.size > MAX_SYMLINK as u64 || d.size >= self.sb.block_size as u64 {
            return Err(self.damaged(format!("symlink {ino} has size {}", d.size)));
        }
        self.read(ino, 0, d.size as usize)
    }

    pub fn link(&mut self, ino: u32, newdir: u32, newname: &[u8]) -> FsResult<Dinode> {
        self.retry_nospace(|fs| fs.link_once(ino, newdir, newname))
    }

    fn link_once(&mut self, ino: u32, newdir: u32, newname: &[u8]) -> FsResult<Dinode> {
        self.check_writable()?;
        Self::check_name(newname)?;
        let mut d = self.iget(ino)?;
        if d.is_dir() {
            return Err(FsError::Perm);
        }
        if d.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0 {
            return Err(FsError::Perm);
        }
        let mut dd = self.dir_for_new_name(newdir, newname)?;
        if d.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        // The raised count before the new name.
        d.nlink += 1;
        self.touch_c(&mut d);
        let ib = self.iput(ino, &d)?;
        self.order_write(&[ib])?;
        match self.add_entry(newdir, &mut dd, newname, ino, dtype_of_mode(d.mode)) {
            Ok((db, off)) => {
                self.entry_added(newdir, db, off, ino, None, None, false, vec![])?;
                self.wait_for_namesake(newdir, newname, db, off, ino);
            }
            Err(e) => {
                d.nlink -= 1;
                self.iput(ino, &d)?;
                return Err(e);
            }
        }
        self.balance()?;
        Ok(self.eff(ino, d))
    }

    pub fn unlink(&mut self, dir: u32, name: &[u8]) -> FsResult<()> {
        self.check_writable()?;
        let mut dd = self.dir_inode(dir)?;
        let slot = self.find_entry(dir, &mut dd, name)?.ok_or(FsError::NotFound)?;
        let mut d = self.iget(slot.ino)?;
        if d.is_dir() {
            return Err(FsError::IsDir);
        }
        if d.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0 {
            return Err(FsError::Perm);
        }
        // The name goes first; then the link count. The inode's change time is the unlink's,
        // even when soft updates drop the link later.
        self.touch_mc(&mut dd);
        self.iput(dir, &dd)?;
        self.touch_c(&mut d);
        self.iput(slot.ino, &d)?;
        self.unlink_name(dir, &slot, name, vec![Task::DropLink(slot.ino)])?;
        self.balance()
    }

    pub fn rmdir(&mut self, dir: u32, name: &[u8]) -> FsResult<()> {
        self.check_writable()?;
        if name == b"." {
            return Err(FsError::Invalid("rmdir of ."));
        }
        if name == b".." {
            return Err(FsError::NotEmpty);
        }
        let mut dd = self.dir_inode(dir)?;
        let slot = self.find_entry(dir, &mut dd, name)?.ok_or(FsError::NotFound)?;
        let mut d = self.iget(slot.ino)?;
        if !d.is_dir() {
            return Err(FsError::NotDir);
        }
        if slot.ino == ROOT_INO {
            return Err(FsError::Perm);
        }
        if !self.dir_is_empty(slot.ino, &mut d)? {
            return Err(FsError::NotEmpty);
        }
        self.touch_mc(&mut dd);
        self.iput(dir, &dd)?;
        // The name goes first; then the child (its ".." with it), then the parent's count.
        let task = Task::RmdirChild { child: slot.ino, parent: Some(dir) };
        if self.hidden.values().any(|h| h.0 == slot.ino) {
            // It still holds renames' old names on disk, whose new names are not yet reachable:
            // its own name stays on disk, hidden, until those may go (or the files would be
            // reachable by no name on disk).
            self.note_pending(std::slice::from_ref(&task));
            self.hide_name(dir, &slot, name);
            let wait = NameWait::Emptied(slot.ino);
            let (bno, lbn, off) = (slot.bno, slot.lbn, slot.off);
            self.run_task(Task::RemoveOldName { dir, wait, bno, lbn, off, tasks: vec![task] })?;
        } else {
            self.unlink_name(dir, &slot, name, vec![task])?;
        }
        self.balance()
    }

    /// True if `anc` is `ino` or one of its ancestors.
    fn is_ancestor(&mut self, anc: u32, mut ino: u32) -> FsResult<bool> {
        for _ in 0..=self.sb.total_inodes() {
            if ino == anc {
                return Ok(true);
            }
            if ino == ROOT_INO {
                return Ok(false);
            }
            let mut d = self.dir_inode(ino)?;
            ino = self
                .find_entry(ino, &mut d, b"..")?
                .ok_or_else(|| FsError::Corrupt(format!("directory {ino} has no ..")))?
                .ino;
        }
        Err(FsError::Corrupt("directory loop".into()))
    }

    pub fn rename(&mut self, dir: u32, name: &[u8], newdir: u32, newname: &[u8], flags: RenameFlags) -> FsResult<()> {
        self.retry_nospace(|fs| fs.rename_once(dir, name, newdir, newname, flags))
    }

    fn rename_once(&mut self, dir: u32, name: &[u8], newdir: u32, newname: &[u8], flags: RenameFlags) -> FsResult<()> {
        self.check_writable()?;
        Self::check_name(newname)?;
        if flags.noreplace && flags.exchange {
            return Err(FsError::Invalid("RENAME_NOREPLACE with RENAME_EXCHANGE"));
        }
        if name == b"." || name == b".." || newname == b"." || newname == b".." {
            return Err(FsError::Invalid("rename of . or .."));
        }
        let mut sd = self.dir_inode(dir)?;
        let src = self.find_entry(dir, &mut sd, name)?.ok_or(FsError::NotFound)?;
        let si = self.iget(src.ino)?;
        let namesake = |fs: &Fs, d: u32, n: &[u8]| fs.hidden.values().any(|h| h.0 == d && h.2 == n);
        if (si.is_dir() || flags.exchange) && namesake(self, newdir, newname) {
            // A directory taking a hidden name: that name leaves the disk first. So in an
            // exchange, where either entry may come to name a directory in place.
            self.retire_hidden_name(newdir, newname)?;
            return self.rename(dir, name, newdir, newname, flags);
        }
        if flags.exchange && namesake(self, dir, name) {
            self.retire_hidden_name(dir, name)?;
            return self.rename(dir, name, newdir, newname, flags);
        }
        let mut nd = self.dir_inode(newdir)?;
        let dst = self.find_entry(newdir, &mut nd, newname)?;
        if si.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0 {
            return Err(FsError::Perm);
        }
        if flags.exchange {
            let dst = dst.ok_or(FsError::NotFound)?;
            return self.exchange(dir, src, newdir, dst);
        }
        if let Some(t) = dst {
            if flags.noreplace {
                return Err(FsError::Exists);
            }
            if t.ino == src.ino {
                return Ok(()); // two names of one inode: POSIX says do nothing
            }
        }
        let moving_dir = si.is_dir();
        if moving_dir && dir != newdir && self.is_ancestor(src.ino, newdir)? {
            return Err(FsError::Invalid("rename of a directory into itself"));
        }
        let mut victim = None;
        if let Some(t) = dst {
            let mut ti = self.iget(t.ino)?;
            if ti.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0 {
                return Err(FsError::Perm);
            }
            if moving_dir && ti.is_dir() && self.hidden.values().any(|(hd, _, _, _)| *hd == t.ino) {
                // The directory replaced still holds renames' old names on disk: its name cannot
                // be overwritten in place before those go. It is removed as by rmdir (its name
                // stays on disk, hidden, until then) and the source takes a new entry once that
                // hidden namesake has left the disk (retire_hidden_name); the checks that could
                // fail that come first, so a failed rename removes nothing.
                if (dir != newdir && nd.nlink >= LINK_MAX) || si.nlink >= LINK_MAX {
                    return Err(FsError::TooManyLinks);
                }
                if self.alloc.free_blocks() == 0 {
                    return Err(FsError::NoSpace);
                }
                self.rmdir(newdir, newname)?;
                return self.rename(dir, name, newdir, newname, flags);
            }
            match (moving_dir, ti.is_dir()) {
                (true, false) => return Err(FsError::NotDir),
                (false, true) => return Err(FsError::IsDir),
                (true, true) if !self.dir_is_empty(t.ino, &mut ti)? => {
                    return Err(FsError::NotEmpty);
                }
                _ => {}
            }
            victim = Some((t, ti));
        }
        if moving_dir && dir != newdir && nd.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        // 1. The source's count goes up while it has two names.
        let mut si = si;
        if si.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        si.nlink += 1;
        self.touch_c(&mut si);
        let ib = self.iput(src.ino, &si)?;
        self.order_write(&[ib])?;
        // 2. A moved directory's new parent gains a link before ".." names it. Over a directory
        //    victim too: the victim's ".." names newdir until the victim is freed (step 7), so for
        //    a while both count; step 7 takes the extra link back.
        if moving_dir && dir != newdir {
            let mut nd2 = self.iget(newdir)?;
            nd2.nlink += 1;
            let b = self.iput(newdir, &nd2)?;
            self.order_write(&[b])?;
        }
        // 3. The new name; a replaced inode loses its link once the new name is on disk. With
        // soft updates the old name stays in its block, hidden, until then (step 4).
        let across = moving_dir && dir != newdir;
        let softdep = self.hooks.softdep.is_some();
        let old_name_task = softdep.then(|| Task::RemoveOldName {
            dir,
            wait: NameWait::NewPath(newdir),
            bno: src.bno,
            lbn: src.lbn,
            off: src.off,
            tasks: vec![Task::DropLink(src.ino)],
        });
        match victim {
            Some((t, mut ti)) => {
                // The replaced inode changes now, whenever its link drop reaches the disk.
                self.touch_c(&mut ti);
                self.iput(t.ino, &ti)?;
                let victim_task = if ti.is_dir() {
                    // Its ".." names newdir until it is freed; step 2 counted a moved
                    // directory's new "..", so newdir's extra link goes once the victim does.
                    Task::RmdirChild { child: t.ino, parent: Some(newdir) }
                } else {
                    Task::DropLink(t.ino)
                };
                let buf = self.cache.modify(t.bno)?;
                dirent_set_ino(buf, t.off, src.ino);
                dirent_set_type(buf, t.off, dtype_of_mode(si.mode));
                let mut nd2 = self.iget(newdir)?;
                self.touch_mc(&mut nd2);
                self.iput(newdir, &nd2)?;
                let old = Some((t.ino, dtype_of_mode(ti.mode)));
                let tasks = std::iter::once(victim_task).chain(old_name_task).collect();
                self.entry_added(newdir, t.bno, t.off, src.ino, old, None, false, tasks)?;
                self.note_name_dir(newdir, src.ino, &si);
                // A wait of the replaced entry for a hidden namesake is now the source's.
                for w in self.namesakes.values_mut().flatten().filter(|w| (w.0, w.1) == (t.bno, t.off)) {
                    w.2 = src.ino;
                }
            }
            None => {
                let mut nd2 = self.iget(newdir)?;
                match self.add_entry(newdir, &mut nd2, newname, src.ino, dtype_of_mode(si.mode)) {
                    Ok((b, off)) => {
                        let tasks = old_name_task.into_iter().collect();
                        self.entry_added(newdir, b, off, src.ino, None, None, false, tasks)?;
                        if !moving_dir {
                            self.wait_for_namesake(newdir, newname, b, off, src.ino);
                        }
                    }
                    Err(e) => {
                        si.nlink -= 1;
                        self.iput(src.ino, &si)?;
                        if across {
                            let mut nd3 = self.iget(newdir)?;
                            nd3.nlink -= 1;
                            self.iput(newdir, &nd3)?;
                        }
                        return Err(e);
                    }
                }
            }
        }
        // 4. The old name goes (found again: the new entry may share its block); the source's
        // temporary count drops once that is on disk.
        let mut sd = self.iget(dir)?;
        let old =
            self.find_entry(dir, &mut sd, name)?.ok_or_else(|| FsError::Corrupt("renamed entry vanished".into()))?;
        self.touch_mc(&mut sd);
        self.iput(dir, &sd)?;
        if softdep {
            // Rule 3: the old name leaves the disk only after the new one is there; for users
            // it is gone now.
            self.hide_name(dir, &old, name);
            self.note_pending(&[Task::DropLink(src.ino)]);
        } else {
            self.unlink_name(dir, &old, name, vec![Task::DropLink(src.ino)])?;
        }
        // 5. A moved directory's ".." names its new parent; the old parent loses a link once
        // that is on disk.
        if across {
            let (b, off) = self.set_dotdot(src.ino, newdir)?;
            self.entry_added(src.ino, b, off, newdir, Some((dir, DT_DIR)), None, false, vec![Task::DropLink(dir)])?;
        }
        self.balance()
    }

    /// RENAME_EXCHANGE: the two names swap inodes.
    fn exchange(&mut self, dir: u32, a: Slot, newdir: u32, b: Slot) -> FsResult<()> {
        if a.ino == b.ino {
            return Ok(());
        }
        let ai = self.iget(a.ino)?;
        let bi = self.iget(b.ino)?;
        if bi.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0 {
            return Err(FsError::Perm);
        }
        if dir != newdir {
            if ai.is_dir() && self.is_ancestor(a.ino, newdir)? {
                return Err(FsError::Invalid("exchange would move a directory into itself"));
            }
            if bi.is_dir() && self.is_ancestor(b.ino, dir)? {
                return Err(FsError::Invalid("exchange would move a directory into itself"));
            }
        }
        // Both counts up while each inode may have two names on disk.
        for (ino, mut d) in [(a.ino, ai.clone()), (b.ino, bi.clone())] {
            d.nlink += 1;
            self.touch_c(&mut d);
            let ib = self.iput(ino, &d)?;
            self.order_write(&[ib])?;
        }
        // Parents that gain a subdirectory gain a link first.
        if dir != newdir && ai.is_dir() != bi.is_dir() {
            let gainer = if ai.is_dir() { newdir } else { dir };
            let mut g = self.iget(gainer)?;
            g.nlink += 1;
            let gb = self.iput(gainer, &g)?;
            self.order_write(&[gb])?;
        }
        // Each entry now names the other inode; the inode it named loses its extra link once
        // that is on disk.
        for (slot, in_dir, ino, mode, was, was_mode) in
            [(a, dir, b.ino, bi.mode, a.ino, ai.mode), (b, newdir, a.ino, ai.mode, b.ino, bi.mode)]
        {
            let buf = self.cache.modify(slot.bno)?;
            dirent_set_ino(buf, slot.off, ino);
            dirent_set_type(buf, slot.off, dtype_of_mode(mode));
            let old = Some((was, dtype_of_mode(was_mode)));
            self.entry_added(in_dir, slot.bno, slot.off, ino, old, None, false, vec![Task::DropLink(was)])?;
        }
        if dir != newdir {
            // A directory that changes parent: its ".." follows, and a parent left with one
            // subdirectory fewer loses a link once that is on disk.
            let loses = ai.is_dir() != bi.is_dir();
            if ai.is_dir() {
                let (x, off) = self.set_dotdot(a.ino, newdir)?;
                let then = if loses { vec![Task::DropLink(dir)] } else { vec![] };
                self.entry_added(a.ino, x, off, newdir, Some((dir, DT_DIR)), None, false, then)?;
            }
            if bi.is_dir() {
                let (x, off) = self.set_dotdot(b.ino, dir)?;
                let then = if loses { vec![Task::DropLink(newdir)] } else { vec![] };
                self.entry_added(b.ino, x, off, dir, Some((newdir, DT_DIR)), None, false, then)?;
            }
        }
        for p in [dir, newdir] {
            let mut d = self.iget(p)?;
            self.touch_mc(&mut d);
            self.iput(p, &d)?;
        }
        self.balance()
    }

    pub fn read(&mut self, ino: u32, off: u64, len: usize) -> FsResult<Vec<u8>> {
        let mut d = self.iget(ino)?;
        if d.is_dir() {
            return Err(FsError::IsDir);
        }
        if off >= d.size {
            self.accessed(ino, &mut d)?;
            return Ok(Vec::new());
        }
        if d.flags & DI_UNMOVABLE != 0 {
            // A reservation's blocks belong to its owner, who writes them on the device.
            return self.br_read(ino, &mut d, off, len);
        }
        if d.flags & DI_SNAPSHOT != 0 {
            // A snapshot reads as the frozen file system.
            return self.snap_read(&d, off, len);
        }
        let end = d.size.min(off.saturating_add(len as u64));
        let bs = self.sb.block_size as u64;
        let mut out = Vec::with_capacity((end - off) as usize);
        let mut run = Vec::new();
        let mut pos = off;
        while pos < end {
            let lbn = pos / bs;
            let boff = (pos % bs) as usize;
            let (bno, _) = self.bmap(ino, &mut d, lbn, false)?;
            // The blocks of the request that follow this one on disk, none of them cached, come
            // in one device read (a sequential read's requests are up to 1 MiB), past the cache.
            let mut nblk = 1;
            if bno != 0 && !self.cache.is_cached(bno) {
                while (lbn + nblk) * bs < end && nblk < MAX_READ_RUN {
                    let (next, _) = self.bmap(ino, &mut d, lbn + nblk, false)?;
                    if next != bno + nblk || self.cache.is_cached(next) {
                        break;
                    }
                    nblk += 1;
                }
            }
            let n = (((lbn + nblk) * bs).min(end) - pos) as usize;
            if bno == 0 {
                out.resize(out.len() + n, 0);
            } else if nblk == 1 {
                out.extend_from_slice(&self.cache.read(bno)?[boff..boff + n]);
            } else {
                self.cache.read_past(bno, nblk as usize, &mut run)?;
                out.extend_from_slice(&run[boff..boff + n]);
            }
            pos += n as u64;
        }
        self.accessed(ino, &mut d)?;
        Ok(out)
    }

    /// Writes `data` at `off`. A write that runs out of space part way is tried again whole
    /// after the frees soft updates hold have completed (`retry_nospace`): the same bytes at the
    /// same offset.
    pub fn write(&mut self, ino: u32, off: u64, data: &[u8]) -> FsResult<usize> {
        self.retry_nospace(|fs| fs.write_once(ino, off, data))
    }

    fn write_once(&mut self, ino: u32, off: u64, data: &[u8]) -> FsResult<usize> {
        self.check_writable()?;
        let mut d = self.iget(ino)?;
        if d.is_dir() {
            return Err(FsError::IsDir);
        }
        if d.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0 {
            return Err(FsError::Perm);
        }
        let r = self.write_inner(ino, &mut d, off, data);
        let n = match r {
            Ok(n) => n,
            Err(FsError::NoSpace) if d.size > 0 => 0,
            Err(e) => return Err(e),
        };
        self.touch_mc(&mut d);
        // A write by a non-owner clears set-id bits, as POSIX asks.
        d.mode &= !(libc::S_ISUID as u16);
        self.iput(ino, &d)?;
        self.balance()?;
        if n == 0 && !data.is_empty() {
            return Err(FsError::NoSpace);
        }
        Ok(n)
    }

    /// Writes data into the file's blocks, allocating as needed; updates `d` in memory (size,
    /// block pointers, block count). On ENOSPC part-way, returns what was written.
    fn write_inner(&mut self, ino: u32, d: &mut Dinode, off: u64, data: &[u8]) -> FsResult<usize> {
        let end = off.checked_add(data.len() as u64).ok_or(FsError::TooBig)?;
        if end > self.sb.max_file_size() {
            return Err(FsError::TooBig);
        }
        let bs = self.sb.block_size as u64;
        let mut pos = off;
        while pos < end {
            let lbn = pos / bs;
            let boff = (pos % bs) as usize;
            let n = ((bs - boff as u64).min(end - pos)) as usize;
            let (bno, fresh) = match self.bmap(ino, d, lbn, true) {
                Ok(x) => x,
                Err(FsError::NoSpace) if pos > off => break,
                Err(e) => return Err(e),
            };
            let src = &data[(pos - off) as usize..(pos - off) as usize + n];
            let buf = if fresh || n == bs as usize { self.cache.create(bno) } else { self.cache.modify(bno)? };
            buf[boff..boff + n].copy_from_slice(src);
            self.cache.set_data(bno);
            if self.async_full_blocks && boff + n == bs as usize {
                self.write_bufs(&[bno], WriteKind::Async)?;
            }
            pos += n as u64;
            if pos > d.size {
                d.size = pos;
            }
            if self.cache.over_capacity() {
                self.make_room()?;
            }
        }
        Ok((pos - off) as usize)
    }

    pub fn setattr(&mut self, ino: u32, a: &SetAttr) -> FsResult<Dinode> {
        self.check_writable()?;
        let mut d = self.iget(ino)?;
        let immutable = d.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0;
        if let Some(size) = a.size {
            if d.is_dir() {
                return Err(FsError::IsDir);
            }
            if !d.is_reg() {
                return Err(FsError::Invalid("truncate of a non-regular file"));
            }
            if immutable {
                return Err(FsError::Perm);
            }
            self.truncate(ino, &mut d, size)?;
            self.touch_mc(&mut d);
        }
        if let Some(m) = a.mode {
            d.mode = (d.mode & S_IFMT) | (m as u16 & 0o7777);
            self.touch_c(&mut d);
        }
        if let Some(u) = a.uid {
            d.uid = u;
            self.touch_c(&mut d);
        }
        if let Some(g) = a.gid {
            d.gid = g;
            self.touch_c(&mut d);
        }
        if let Some((s, ns)) = a.atime {
            d.atime = s;
            d.atime_ns = ns;
            self.touch_c(&mut d);
        }
        if let Some((s, ns)) = a.mtime {
            d.mtime = s;
            d.mtime_ns = ns;
            self.touch_c(&mut d);
        }
        self.iput(ino, &d)?;
        self.balance()?;
        Ok(self.eff(ino, d))
    }

    /// Sets the size of a regular file: shrinking frees the blocks past the end and zeroes the
    /// tail of the last block, so a later extension reads zeros.
    fn truncate(&mut self, ino: u32, d: &mut Dinode, size: u64) -> FsResult<()> {
        if size > self.sb.max_file_size() {
            return Err(FsError::TooBig);
        }
        let bs = self.sb.block_size as u64;
        if size < d.size {
            if !size.is_multiple_of(bs) {
                let (bno, _) = self.bmap(ino, d, size / bs, false)?;
                if bno != 0 {
                    self.cache.modify(bno)?[(size % bs) as usize..].fill(0);
                    self.cache.set_data(bno);
                }
            }
            d.size = size;
            self.truncate_blocks(ino, d, size.div_ceil(bs), vec![])?;
        } else {
            d.size = size;
        }
        Ok(())
    }

    /// Lists `dir` from cookie `offset` (0 = start); at most `max` entries.
    pub fn readdir(&mut self, dir: u32, offset: u64, max: usize) -> FsResult<Vec<DirListEntry>> {
        let mut d = self.dir_inode(dir)?;
        let bs = self.sb.block_size as u64;
        let mut out = Vec::new();
        let first_lbn = offset.saturating_sub(1) / bs;
        for lbn in first_lbn..d.size.div_ceil(bs) {
            let (bno, _) = self.bmap(dir, &mut d, lbn, false)?;
            if bno == 0 {
                continue;
            }
            let buf = self.cache.read(bno)?;
            for e in dir_iter(buf) {
                let e = e?;
                let pos = lbn * bs + e.offset as u64;
                if e.ino == 0 || pos < offset || self.hidden.contains_key(&(bno, e.offset)) {
                    continue;
                }
                if out.len() >= max {
                    self.accessed(dir, &mut d)?;
                    return Ok(out);
                }
                out.push(DirListEntry { ino: e.ino, dtype: e.dtype, name: e.name.to_vec(), next: pos + 1 });
            }
        }
        self.accessed(dir, &mut d)?;
        Ok(out)
    }

    pub fn statfs(&mut self) -> StatFs {
        let meta_per_group = 2 + self.sb.inode_table_blocks() as u64;
        let (mut pb, mut pi) = self.hooks.softdep.as_ref().map(|s| s.pending_frees()).unwrap_or((0, 0));
        // Inodes whose last link is gone but whose dirrem has not run yet will be freed too.
        let going: Vec<(u32, u32)> = self
            .hooks
            .softdep
            .as_ref()
            .map(|s| s.pending_unlinks.iter().map(|(&i, &n)| (i, n)).collect())
            .unwrap_or_default();
        for (ino, n) in going {
            if let Ok(d) = self.iget(ino) {
                if d.nlink <= n && !self.open.contains_key(&ino) {
                    pb += d.blocks;
                    pi += 1;
                }
            }
        }
        StatFs {
            blocks: self.sb.num_blocks - meta_per_group * self.sb.ngroups as u64,
            bfree: self.alloc.free_blocks() + pb,
            files: self.sb.total_inodes() - FIRST_INO as u64,
            ffree: self.alloc.free_inodes() + pi,
            bsize: self.sb.block_size,
            namelen: MAXNAMLEN as u32,
        }
    }

    /// Makes the file durable: its data, its inode, and every name on the way to it (here by
    /// writing all dirty buffers in order, which covers them).
    /// Makes the file durable: its data, its inode, and every name on the way to it. Without
    /// soft updates, by writing all dirty buffers; with them, as §4 of the paper does: the
    /// bitmaps and data first, then the indirect blocks level by level, then the inodes, then
    /// the directory blocks whose entries name it (and, up to the root, those naming its
    /// directories), in batches, until none of it is pending.
    pub fn fsync(&mut self, ino: u32) -> FsResult<()> {
        self.iget(ino)?;
        if self.hooks.softdep.is_none() {
            return self.sync_all();
        }
        let start = self.sd().expect("softdep").track(&[ino]);
        for _ in 0..16 {
            self.run_tasks()?;
            // The inode and the directories whose pending entries lead to it; and the inodes
            // named by hidden namesakes that those entries wait for: such a name leaves once its
            // inode's new name is on disk (the removal itself is in a block of a directory
            // already here). One work list, not a recursion: a chain of names swapped through
            // temporary names is as long as users make it, and is drained here a link a round.
            let mut inos = vec![ino];
            let mut name_blocks = Vec::new();
            let mut walked = Vec::new();
            let mut i = 0;
            while i < inos.len() {
                let x = inos[i];
                // The path to the root from the directory holding it (from a directory itself):
                // an ancestor named by an entry not yet on disk joins, so that its new name (a
                // rename's, say) is written with the rest.
                let from = if self.iget(x)?.is_dir() { Some(x) } else { self.name_dir.get(&x).copied() };
                for a in self.ancestors(from)? {
                    if walked.contains(&a) {
                        break;
                    }
                    walked.push(a);
                    let named = self.hooks.softdep.as_ref().is_some_and(|s| s.has_pending_name(a));
                    if named && !inos.contains(&a) {
                        inos.push(a);
                    }
                }
                let pending = self.hooks.softdep.as_ref().map(|s| s.pending_name_blocks(x)).unwrap_or_default();
                for (b, d) in pending {
                    name_blocks.push(b);
                    if !inos.contains(&d) {
                        inos.push(d);
                    }
                }
                for (k, waiters) in &self.namesakes {
                    if let Some(h) = self.hidden.get(k).filter(|_| waiters.iter().any(|w| w.2 == x)) {
                        if !inos.contains(&h.3) {
                            inos.push(h.3);
                        }
                    }
                }
                i += 1;
            }
            let mut data = Vec::new();
            let mut levels: [Vec<u64>; NIADDR] = Default::default();
            for &x in &inos {
                let d = self.iget(x)?;
                if d.has_blocks() {
                    self.file_blocks(&d, &mut data, &mut levels)?;
                }
            }
            let inode_blocks: Vec<u64> = inos.iter().map(|&x| self.sb.inode_location(x).0).collect();
            self.sd().expect("softdep").track(&inos);
            let settled = {
                let sd = self.hooks.softdep.as_ref().expect("softdep");
                // Each inode on disk as it is now: written since fsync began, or in a clean block
                // (its block may stay dirty for a neighbour's sake).
                let on_disk = |x: u32| sd.written_since(x, start) || !self.cache.is_dirty(self.sb.inode_location(x).0);
                inos.iter().all(|&x| sd.inode_settled(x) && on_disk(x))
                    && name_blocks.is_empty()
                    && levels.iter().flatten().all(|&b| !sd.indir_pending(b))
            };
            let cache = &self.cache;
            let dirty = |v: &[u64]| v.iter().any(|&b| cache.is_dirty(b));
            if settled && !dirty(&data) && levels.iter().all(|l| !dirty(l)) {
                return Ok(());
            }
            let mut first: Vec<u64> = (0..self.sb.ngroups)
                .map(|cg| self.sb.cg_header_block(cg))
                .filter(|&b| self.cache.is_dirty(b))
                .collect();
            first.extend(data);
            self.write_bufs(&first, WriteKind::Sync)?;
            for level in levels {
                self.write_bufs(&level, WriteKind::Sync)?;
            }
            self.write_bufs(&inode_blocks, WriteKind::Sync)?;
            self.write_bufs(&name_blocks, WriteKind::Sync)?;
        }
        // Something keeps it busy (another inode in its block, say): write everything.
        log::debug!("fsync of inode {ino}: not settled after 16 rounds, writing everything");
        self.sync_all()
    }

    /// `dir` and its ancestors up to the root (not included), by "..": as far as the path can be
    /// followed (a directory removed meanwhile ends it).
    fn ancestors(&mut self, dir: Option<u32>) -> FsResult<Vec<u32>> {
        let mut out = Vec::new();
        let Some(mut dir) = dir else { return Ok(out) };
        while dir != ROOT_INO && out.len() < 4096 && !out.contains(&dir) {
            out.push(dir);
            let Ok(mut d) = self.dir_inode(dir) else { break };
            match self.find_entry(dir, &mut d, b"..")? {
                Some(e) => dir = e.ino,
                None => break,
            }
        }
        Ok(out)
    }

    /// The data blocks of a file and its indirect blocks by level (0: those pointing at data).
    ///
    /// A Block Register reservation's data blocks are never written by the file system (its
    /// owner writes them on the device), so they are not listed and its last level of indirect
    /// blocks is not read: a brexpand's fsync costs no read per 2 MiB of reservation.
    fn file_blocks(&mut self, d: &Dinode, data: &mut Vec<u64>, levels: &mut [Vec<u64>; NIADDR]) -> FsResult<()> {
        let with_data = !br::is_reservation(d);
        if with_data {
            data.extend(d.db.iter().copied().filter(|&b| b != 0));
        }
        for (top_level, &top) in d.ib.iter().enumerate() {
            let mut frontier = vec![top];
            for level in (0..=top_level).rev() {
                let mut next = Vec::new();
                for &b in frontier.iter().filter(|&&b| b != 0) {
                    self.checked_ptr(b)?;
                    levels[level].push(b);
                    if level == 0 && !with_data {
                        continue;
                    }
                    let buf = self.cache.read(b)?;
                    next.extend((0..self.sb.ptrs_per_block() as usize).map(|i| ind_get(buf, i)).filter(|&c| c != 0));
                }
                frontier = next;
            }
            data.extend(frontier);
        }
        Ok(())
    }

    /// Opens a handle (for writing, if `write`): an immutable file, a snapshot or a read-only
    /// mount refuse writers here, at open, as Linux does. (The FUSE mount opens files without
    /// a message where the kernel can: there `write` and `setattr` refuse them, with EPERM.)
    pub fn open(&mut self, ino: u32, write: bool) -> FsResult<Dinode> {
        let d = self.iget(ino)?;
        if write {
            self.check_writable()?;
            if d.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0 {
                return Err(FsError::Perm);
            }
        }
        self.hold(ino, 1);
        Ok(d)
    }

    /// Takes `n` references on an inode that an unlink must not free while they last: an open
    /// handle, or the kernel's knowledge of the inode through a mount (a FUSE lookup count).
    pub fn hold(&mut self, ino: u32, n: u32) {
        *self.open.entry(ino).or_insert(0) += n;
    }

    /// Closes a handle; the last close of an unlinked inode frees it.
    pub fn release(&mut self, ino: u32) -> FsResult<()> {
        self.unhold(ino, 1)
    }

    /// Drops `n` references taken by `hold`; when none is left, an unlinked inode is freed.
    pub fn unhold(&mut self, ino: u32, n: u32) -> FsResult<()> {
        let Some(held) = self.open.get_mut(&ino) else {
            return Ok(());
        };
        *held = held.saturating_sub(n);
        if *held == 0 {
            self.open.remove(&ino);
            // Only an inode whose last link this mount removed is freed: one found with no
            // links on disk is damage, left for fsck (lookup refuses it).
            if !self.orphans.remove(&ino) {
                return Ok(());
            }
            if let Ok(d) = self.iget(ino) {
                if d.nlink == 0 && !self.readonly {
                    self.release_inode(ino, d, vec![])?;
                    self.balance()?;
                }
            }
        }
        Ok(())
    }
}
