//! A thin adapter from FUSE requests to `fs` calls: it maps inode numbers (FUSE's root is 1,
//! ours is 2), attributes and errors, and holds the file system behind one lock. It has no
//! file-system logic of its own.
//!
//! Several threads take requests from the kernel (`--threads`). A read does its device reads
//! and an fsync its writes with the lock released (`Fs::read_shared`, `Fs::fsync_shared`), and
//! a truncation, which lands the flight in progress, waits for its write without the lock
//! (`lock_landing`), as an unlink, an rmdir or a rename does when it would land the flight
//! (`lock_landing_if`); every other request holds the lock throughout. Even so, two
//! threads help: while one sends its reply and goes back for the next request, the other is
//! already waiting in the kernel for it. Where an idle CPU halts rather than polls
//! (a VM with `guest_halt_poll_ns` 0, as the development machine), waking the one thread was
//! most of each round trip: 10,000 creates took 1.6-1.8 s with one thread, 0.70-0.81 s with
//! two, and fio's random 4 KiB reads went from 15,000-17,600 to 37,000-39,500 a second. Where
//! idle CPUs poll, two threads cost little (0.28-0.34 s against 0.27-0.30 s).
//!
//! Permissions are checked by the kernel (`default_permissions`), or with `-o permissions=sufs`
//! by sufs (`fs::perm`, called from each handler through `SufsFuse::check`; the kernel then
//! keeps no name, `NO_TTL`, so that each walk asks for search permission). Every request is
//! counted by opcode (`fs::messages`).
//!
//! Directories open without a message where the kernel supports it and checks permissions
//! (OPENDIR answers ENOSYS once). Files open through OPEN (or CREATE), so that an open for
//! writing of an immutable file, or of an append-only one without O_APPEND, fails at open as
//! on FreeBSD and Linux: the kernel's choice of opening without a message holds for every file
//! of the mount, and FUSE tells the kernel no inode flags it could check itself. An inode lives
//! while the kernel counts lookups of it (each entry answered holds it, FORGET lets go) or a
//! handle is open, which is also what keeps a file unlinked while open. Changes made through the control channel are told to the kernel
//! (`stale_sink`), since it would otherwise keep the names and attributes it had.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags as FuseRenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

use fuse_uring::{Negotiated, Transport};
use sufs_fs::format::*;
use sufs_fs::fs::falloc::FallocMode;
use sufs_fs::fs::flags;
use sufs_fs::fs::label;
use sufs_fs::fs::messages::{Messages, Op};
use sufs_fs::fs::mountopt::{AtimeMode, Change};
use sufs_fs::fs::perm::{self, Cred, MAY_EXEC, MAY_READ, MAY_WRITE};
use sufs_fs::fs::shutdown::{Shutdown, FS_IOC_SHUTDOWN};
use sufs_fs::fs::trim;
use sufs_fs::fs::xattr::XattrMode;
use sufs_fs::fs::{Fs, FsError, FsGuard, FsResult, RenameFlags, SetAttr, Writer};

/// How long the kernel may keep a name and its attributes without asking again. Every change
/// to the namespace and to attributes goes through this mount, whose replies keep the kernel's
/// caches right, or through the control channel, which tells the kernel (`stale_sink`): so the
/// kernel may keep them long, and a `stat` or a path walk over known names costs no round trip.
pub(crate) const TTL: Duration = Duration::from_secs(3600);

/// Except for Block Register reservations and snapshot files: the volume layer's refill thread
/// grows its reservation behind the kernel's back, so their attributes are asked for again soon.
const SPECIAL_TTL: Duration = Duration::from_secs(1);

fn ttl(d: &Dinode) -> &'static Duration {
    if d.flags & (DI_IMMUTABLE | DI_SNAPSHOT) != 0 {
        &SPECIAL_TTL
    } else {
        &TTL
    }
}

/// How long the kernel may keep a name where sufs checks permissions (`-o permissions=sufs`):
/// not at all. Without `default_permissions` the kernel checks no search permission on a path
/// walk; sufs checks it when asked for the name (LOOKUP), and a cached name is not asked for.
/// Kept, a name that root looked up in a directory of mode 0700 would let any user walk to the
/// file below it. So every walk of every name reaches sufs; attributes may still be kept.
const NO_TTL: Duration = Duration::ZERO;

/// Every change to a file's data goes through this mount, where the kernel keeps its page cache
/// coherent itself; so a file's cached pages survive a close and a new open.
pub(crate) const OPEN_FLAGS: FopenFlags = FopenFlags::FOPEN_KEEP_CACHE;

/// Request threads unless `--threads` says otherwise. More than two measured no faster on 2
/// cores (4 and 8: 10,000 creates in 0.76-0.93 s, random reads 34,700-40,700 a second).
pub const DEFAULT_THREADS: usize = 2;

/// How a mount serves the kernel, fixed when it is made: one struct for what the command line
/// and `-o` say about the FUSE side (`sufs_mount::options::MountOpts` parses them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FuseOptions {
    /// How requests arrive (`--transport`, `-o transport=`): the ring or /dev/fuse.
    pub transport: Transport,
    /// Request threads (`--threads`): the classic reader's on a classic mount, each ring
    /// queue's otherwise.
    pub threads: usize,
    /// The kernel's writeback cache asked for at INIT (`-o writeback_cache`).
    pub writeback_cache: bool,
    /// sufs checks permissions (`-o permissions=sufs`, `fs::perm`), not the kernel.
    pub sufs_checks: bool,
}

impl Default for FuseOptions {
    fn default() -> FuseOptions {
        FuseOptions { transport: Transport::Auto, threads: DEFAULT_THREADS, writeback_cache: false, sufs_checks: false }
    }
}

/// The session's settings: the name shown in the mount table, read-only or not, the number
/// of classic request threads, and who checks permissions. As root the mount is open to every
/// user (`allow_other`), with the kernel checking permissions (`default_permissions`) unless
/// `sufs_checks` (`-o permissions=sufs`): sufs then checks them itself (`fs::perm`).
pub fn config(fsname: String, ro: bool, o: &FuseOptions) -> fuser::Config {
    let mut config = fuser::Config::default();
    config.mount_options = vec![fuser::MountOption::FSName(fsname), fuser::MountOption::Subtype("sufs".into())];
    if !o.sufs_checks {
        config.mount_options.push(fuser::MountOption::DefaultPermissions);
    }
    if ro {
        config.mount_options.push(fuser::MountOption::RO);
    }
    if unsafe { libc::geteuid() } == 0 {
        config.acl = fuser::SessionACL::All;
        config.mount_options.push(fuser::MountOption::CUSTOM("allow_other".into()));
        // mount(2) is given type "fuse": the subtype makes the mount table say "fuse.sufs" (as
        // fusermount does for users), so that mount(8) hands a remount to mount.fuse.sufs.
        config.mount_options.push(fuser::MountOption::CUSTOM("subtype=sufs".into()));
    }
    // The classic reader serves everything on a classic mount; beside a ring, only what the
    // kernel still sends through /dev/fuse (FORGET, INTERRUPT) and what comes before it is up.
    let threads = if o.transport == Transport::Classic { o.threads } else { 1 };
    config.n_threads = Some(threads.max(1));
    config
}

// The shared handle lives with the file system (the syncer, the control channel and snapshots
// use it without the FUSE adapter); re-exported for the adapter's users.
pub use sufs_fs::fs::{lock, lock_landing, lock_landing_if, SharedFs};

/// Tells the kernel of a mount what its control channel changed (`ctl::Stale`): a name gone is
/// dropped from its cache (and the inode, once nobody uses it, forgotten), an inode's
/// attributes and pages are fetched again. The kernel may not know either (ENOENT): fine.
pub fn stale_sink(notifier: fuser::Notifier) -> crate::ctl::StaleSink {
    Box::new(move |what| {
        for s in what {
            let r = match s {
                crate::ctl::Stale::Entry { dir, name } => notifier.inval_entry(to_fuse(*dir), OsStr::from_bytes(name)),
                crate::ctl::Stale::Inode(ino) => notifier.inval_inode(to_fuse(*ino), 0, 0),
            };
            if let Err(e) = r {
                if e.raw_os_error() != Some(libc::ENOENT) {
                    log::warn!("telling the kernel of {s:?}: {e}");
                }
            }
        }
    })
}

pub struct SufsFuse {
    fs: SharedFs,
    /// Directories are used without OPENDIR and RELEASEDIR (the kernel supports it, and checks
    /// permissions): a listing is READDIR(PLUS) alone. Files always open through OPEN or
    /// CREATE (the module's comment says why): a create is LOOKUP, CREATE and RELEASE, an open
    /// and close of a known file OPEN and RELEASE. (Linux 6.18 also sends a GETATTR of the
    /// directory before each create or unlink in a directory just changed: it drops the
    /// directory's mode with its times and asks again for the path walk's permission check;
    /// later kernels keep the mode, `FUSE_STATX_MODDIR`. docs/performance.md, "Messages per
    /// operation".)
    no_opendir: bool,
    /// Whether a file's cached pages survive a close and a new open. Not under `strictatime`:
    /// the kernel reads through its page cache without telling sufs, so there every open goes
    /// through OPEN, drops the cached pages, and its first read reaches sufs and the atime.
    keep_cache: bool,
    /// The requests served, by opcode (the file system's statistics carry them).
    msgs: Arc<Messages>,
    /// sufs checks permissions (`fs::perm`), not the kernel: the mount has no
    /// `default_permissions`, asks for no FUSE_POSIX_ACL (which would turn it on), and opens
    /// files and directories through OPEN and OPENDIR, where their checks are made.
    checks: bool,
    /// The transport's side of INIT: whether to ask for FUSE over io_uring, and what the
    /// kernel offered (`fuse_uring::run` reads it once the session is up).
    negotiated: Arc<Negotiated>,
    /// The kernel's writeback cache asked for (`-o writeback_cache`): it then keeps written
    /// pages and sends them in large writes (at close, fsync, or its own writeback after 30 s),
    /// and keeps a regular file's size, mtime and ctime itself, sending the times with SETATTR.
    /// Files open through OPEN on every mount, so an immutable or append-only file refuses a
    /// writer at open, before the kernel could take writes into its cache that sufs could
    /// only refuse at close.
    writeback: bool,
    /// Files whose pages, written back, sufs refused for want of space (ENOSPC), until the
    /// writer is told at its next write(2) (`getattr`): the kernel takes writes into its
    /// cache whatever the space left, so a writer that never fsyncs (`cat /dev/zero > f`)
    /// would otherwise write on for ever.
    refused: Mutex<HashSet<u32>>,
    /// The kernel's notification channel, set once the session exists (`notifier_slot`).
    notifier: Arc<OnceLock<fuser::Notifier>>,
}

impl SufsFuse {
    /// The adapter of a mount of `fs` served as `o` says.
    pub fn new(fs: SharedFs, o: &FuseOptions) -> SufsFuse {
        let msgs = lock(&fs).messages();
        let refused = Mutex::new(HashSet::new());
        SufsFuse {
            fs,
            no_opendir: false,
            keep_cache: true,
            msgs,
            checks: o.sufs_checks,
            negotiated: Negotiated::new(o.transport),
            writeback: o.writeback_cache,
            refused,
            notifier: Default::default(),
        }
    }

    /// What INIT settled about the transport, for `fuse_uring::run` once the session is up.
    pub fn negotiated(&self) -> Arc<Negotiated> {
        self.negotiated.clone()
    }

    /// Runs sufs's permission check `f` for the caller of `req` where sufs checks (None where
    /// the kernel does).
    fn check<T>(
        &self,
        fs: &mut Fs,
        req: &Request,
        f: impl FnOnce(&mut Fs, &Cred) -> FsResult<T>,
    ) -> Result<Option<T>, Errno> {
        if !self.checks {
            return Ok(None);
        }
        let pid = req.pid();
        let load = move || groups_of(pid);
        let cred = Cred::new(req.uid(), req.gid(), &load);
        f(fs, &cred).map(Some).map_err(errno)
    }

    /// Where the session's notifier goes once the session is made (`refuse_for_space`).
    pub fn notifier_slot(&self) -> Arc<OnceLock<fuser::Notifier>> {
        self.notifier.clone()
    }

    /// Notes that written-back pages of `ino` were refused for want of space, and has the
    /// kernel drop its attributes (not its pages: laundering them would send WRITEs this
    /// thread may be needed to serve): its writer's next write(2) then asks for them with its
    /// handle, and `getattr` answers ENOSPC, which write(2) returns.
    /// Without the cache only a shared mapping's pages come written back, and its writer's
    /// write(2) goes to sufs directly: nothing to note.
    fn refuse_for_space(&self, ino: u32) {
        if !self.writeback {
            return;
        }
        let new = self.refused.lock().unwrap_or_else(|e| e.into_inner()).insert(ino);
        debug_assert!(self.refused.lock().is_ok_and(|r| r.contains(&ino)), "inode {ino} noted");
        if let (true, Some(n)) = (new, self.notifier.get()) {
            if let Err(e) = n.inval_inode(to_fuse(ino), -1, 0) {
                log::warn!("telling the kernel of inode {ino}'s refused pages: {e}");
            }
        }
    }

    /// Answers a change of extended attributes. Under the writeback cache the kernel then
    /// drops only the change time it keeps itself, so a `stat` would show the block count
    /// from before (an attribute block added or freed): its attributes are dropped whole,
    /// before the reply, as `mode_changed` drops them. (Dropped after it, the caller's next
    /// stat(2) could come first on a busy machine and show the old count.)
    fn reply_xattr_change(&self, ino: INodeNo, r: Result<(), Errno>, reply: ReplyEmpty) {
        if let Err(e) = r {
            return reply.error(e);
        }
        if let (true, Some(n)) = (self.writeback, self.notifier.get()) {
            if let Err(e) = n.inval_inode(ino, -1, 0) {
                log::warn!("telling the kernel of inode {}'s attributes: {e}", ino.0);
            }
        }
        reply.ok();
    }

    /// Has the kernel drop its attributes of `ino` (not its pages), after a change of mode it
    /// does not learn from the reply: set-user-ID and set-group-ID cleared by a WRITE, whose
    /// reply carries no attributes and after which the kernel drops only the size and times,
    /// or by a FALLOCATE. Sent before the reply (so the caller's next stat(2) asks), without
    /// the lock; dropping attributes alone (offset -1) takes no lock the waiting caller holds.
    fn mode_changed(&self, ino: u32) {
        if let Some(n) = self.notifier.get() {
            if let Err(e) = n.inval_inode(to_fuse(ino), -1, 0) {
                log::warn!("telling the kernel of inode {ino}'s new mode: {e}");
            }
        }
    }

    /// Whether `ino`'s writer is to be told of refused pages now (once).
    fn take_refused(&self, ino: u32) -> bool {
        self.refused.lock().unwrap_or_else(|e| e.into_inner()).remove(&ino)
    }

    fn open_flags(&self) -> FopenFlags {
        if self.keep_cache {
            OPEN_FLAGS
        } else {
            FopenFlags::empty()
        }
    }
}

/// On a `sync` or `dirsync` mount, or of an inode flagged `chattr +S`, a change is durable
/// before its reply (`Fs::settle`).
fn settle(fs: &mut Fs, change: Change, inos: &[u32]) -> Result<(), Errno> {
    fs.settle(change, inos).map_err(errno)
}

/// `settle` of new names in directory `dir` (made durable where `dir` is flagged `+S` too).
fn settle_names(fs: &mut Fs, dir: u32, inos: &[u32]) -> Result<(), Errno> {
    fs.settle_in(Some(dir), Change::Names, inos).map_err(errno)
}

/// Clears a regular file's set-user-ID bit, and its set-group-ID bit where group execution
/// makes it one, or where the one changing the file is not in its group (`member` false;
/// without group execution the bit marks mandatory locking), as Linux's
/// `setattr_should_drop_suidgid`: the kernel leaves it to sufs under FUSE_HANDLE_KILLPRIV_V2
/// (for a caller without CAP_FSETID: a WRITE it flags FUSE_WRITE_KILL_SUIDGID, a truncation,
/// a fallocate, whose `file_modified` sends nothing to a KILLPRIV_V2 server).
/// Returns the attributes after.
fn kill_suidgid(fs: &mut Fs, ino: u32, d: Dinode, member: bool) -> Result<Dinode, Errno> {
    let mut mode = d.mode as u32 & 0o7777;
    if !d.is_reg() {
        return Ok(d);
    }
    mode &= !libc::S_ISUID;
    if mode & libc::S_IXGRP != 0 || !member {
        mode &= !libc::S_ISGID;
    }
    if mode == d.mode as u32 & 0o7777 {
        return Ok(d);
    }
    fs.setattr(ino, &SetAttr { mode: Some(mode), ..Default::default() }).map_err(errno)
}

/// Gives back `nlookup` of the kernel's lookups of `ino` (FORGET, BATCH_FORGET).
fn unhold(fs: &mut Fs, ino: INodeNo, nlookup: u64) {
    if let Err(e) = from_fuse(ino).and_then(|i| fs.unhold(i, nlookup.min(u32::MAX as u64) as u32).map_err(errno)) {
        log::error!("forget {ino:?}: {e:?}");
    }
}

fn to_fuse(ino: u32) -> INodeNo {
    INodeNo(if ino == ROOT_INO { 1 } else { ino as u64 })
}

fn from_fuse(ino: INodeNo) -> Result<u32, Errno> {
    match ino.0 {
        1 => Ok(ROOT_INO),
        n if n == ROOT_INO as u64 || n > u32::MAX as u64 => Err(Errno::ESTALE),
        n => Ok(n as u32),
    }
}

/// Whether the caller of `req` is in group `gid`: its group, or one of its supplementary
/// groups (which FUSE does not send: read from /proc, as other FUSE servers do).
fn in_group(req: &Request, gid: u32) -> bool {
    req.gid() == gid || groups_of(req.pid()).contains(&gid)
}

/// The supplementary groups of process `pid` (none where it is gone).
fn groups_of(pid: u32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let groups = status.lines().find_map(|l| l.strip_prefix("Groups:")).unwrap_or("");
    groups.split_whitespace().filter_map(|g| g.parse().ok()).collect()
}

/// A getxattr or listxattr answer: the size when asked for it (`size` 0), ERANGE when the
/// caller's buffer is too small.
fn xattr_reply(reply: fuser::ReplyXattr, size: u32, v: &[u8]) {
    if size == 0 {
        reply.size(v.len() as u32)
    } else if (size as usize) < v.len() {
        reply.error(Errno::ERANGE)
    } else {
        reply.data(v)
    }
}

fn errno(e: FsError) -> Errno {
    if let FsError::Io(_) | FsError::Corrupt(_) = e {
        log::error!("{e}");
    }
    Errno::from_i32(e.errno())
}

/// A time from disk as the kernel is shown it. Any signed 64-bit seconds value is kept on disk
/// and reads back through the library; here a time past what `SystemTime` holds saturates, and
/// a nanoseconds field past 999,999,999 (damage) shows as 999,999,999.
fn time(s: i64, ns: u32) -> SystemTime {
    const LIMIT: u64 = 1 << 62;
    let ns = ns.min(999_999_999);
    let secs = Duration::from_secs(s.unsigned_abs().min(LIMIT));
    let t = if s >= 0 {
        UNIX_EPOCH.checked_add(secs + Duration::new(0, ns))
    } else {
        UNIX_EPOCH.checked_sub(secs).and_then(|t| t.checked_add(Duration::new(0, ns)))
    };
    t.unwrap_or(UNIX_EPOCH)
}

/// The time a SETATTR carried. fuser turns the kernel's (seconds, nanoseconds) before 1970
/// into `EPOCH - (|seconds| + nanoseconds)`, not `EPOCH - |seconds| + nanoseconds`; this undoes
/// that, so that `touch -d` before 1970 with a fraction of a second is stored as given.
fn setattr_time(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(_) => wall(t),
        Err(e) => (-(e.duration().as_secs().min(i64::MAX as u64) as i64), e.duration().subsec_nanos()),
    }
}

/// Whether a SETATTR's times are ones an append-only file takes (`SetAttr::times_now`): each
/// time given is the current time (UTIME_NOW: `Now`), or, under the writeback cache, where
/// the kernel stamps a regular file's times itself and sends them with its change time
/// `ctime`, equal to that change time (a UTIME_NOW, stamped by the kernel); or the SETATTR is
/// the kernel's own flush of the times it stamped on writes (`flush`: mtime and ctime alone,
/// with the handle of a file open for writing, which on an append-only file was opened with
/// O_APPEND; a user's utimensat carries no handle).
fn times_now(atime: &Option<TimeOrNow>, mtime: &Option<TimeOrNow>, ctime: Option<(i64, u32)>, flush: bool) -> bool {
    let now = |t: &Option<TimeOrNow>| match t {
        None | Some(TimeOrNow::Now) => true,
        Some(TimeOrNow::SpecificTime(t)) => ctime == Some(setattr_time(*t)),
    };
    if ctime.is_some() && flush && atime.is_none() {
        return true;
    }
    (atime.is_some() || mtime.is_some()) && now(atime) && now(mtime)
}

/// The statx attribute bits sufs's inode flags stand for (`STATX_ATTR_IMMUTABLE`, `_APPEND`,
/// `_NODUMP`), all of which it supports.
const STATX_ATTRS: u64 = (libc::STATX_ATTR_IMMUTABLE | libc::STATX_ATTR_APPEND | libc::STATX_ATTR_NODUMP) as u64;

fn statx_attributes(flags: u32) -> u64 {
    let mut a = 0;
    for (di, sx) in [
        (DI_IMMUTABLE, libc::STATX_ATTR_IMMUTABLE),
        (DI_APPEND, libc::STATX_ATTR_APPEND),
        (DI_NODUMP, libc::STATX_ATTR_NODUMP),
    ] {
        if flags & di != 0 {
            a |= sx as u64;
        }
    }
    debug_assert_eq!(a & !STATX_ATTRS, 0);
    a
}

fn wall(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let (s, ns) = (d.as_secs() as i64, d.subsec_nanos());
            if ns == 0 {
                (-s, 0)
            } else {
                (-s - 1, 1_000_000_000 - ns)
            }
        }
    }
}

fn kind(mode: u16) -> FileType {
    match mode & S_IFMT {
        S_IFDIR => FileType::Directory,
        S_IFLNK => FileType::Symlink,
        S_IFIFO => FileType::NamedPipe,
        S_IFCHR => FileType::CharDevice,
        S_IFBLK => FileType::BlockDevice,
        S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

fn dtype_kind(dtype: u8) -> FileType {
    match dtype {
        DT_DIR => FileType::Directory,
        DT_LNK => FileType::Symlink,
        DT_FIFO => FileType::NamedPipe,
        DT_CHR => FileType::CharDevice,
        DT_BLK => FileType::BlockDevice,
        DT_SOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

/// The unit `Dinode::blocks` counts and the block size: what `attr` needs of the superblock.
fn units(sb: &Superblock) -> (u32, u32) {
    (sb.addr_unit(), sb.block_size)
}

/// A name's reply to the kernel (LOOKUP, MKNOD, MKDIR, SYMLINK, LINK, CREATE), made under the
/// lock (`SufsFuse::entry`, which counts the kernel's lookup) and sent after it is given back:
/// the lock is never held across the reply's write to the kernel.
struct Entry {
    attr: FileAttr,
    ttl: &'static Duration,
    name_ttl: &'static Duration,
    generation: Generation,
}

impl Entry {
    fn send(self, reply: ReplyEntry) {
        reply.entry_with_ttls(self.ttl, self.name_ttl, &self.attr, self.generation);
    }
}

/// The attributes of inode `ino`; `(unit, bs)` from `units`.
fn attr(ino: u32, d: &Dinode, (unit, bs): (u32, u32)) -> FileAttr {
    FileAttr {
        ino: to_fuse(ino),
        size: d.size,
        blocks: d.blocks * (unit as u64 / 512),
        atime: time(d.atime, d.atime_ns),
        mtime: time(d.mtime, d.mtime_ns),
        ctime: time(d.ctime, d.ctime_ns),
        crtime: time(d.btime, d.btime_ns),
        kind: kind(d.mode),
        perm: d.mode & 0o7777,
        nlink: d.nlink,
        uid: d.uid,
        gid: d.gid,
        rdev: d.rdev,
        blksize: bs,
        flags: 0,
    }
}

impl SufsFuse {
    /// Answers with an entry, which the kernel counts as one lookup of the inode (it gives the
    /// count back with FORGET): until then the inode is held, so that an unlinked file lives
    /// while the kernel may still use it.
    fn entry(&self, fs: &mut Fs, ino: u32, d: &Dinode) -> Entry {
        fs.hold(ino, 1);
        Entry {
            attr: attr(ino, d, units(&fs.sb)),
            ttl: ttl(d),
            name_ttl: self.name_ttl(d),
            generation: Generation(d.generation as u64),
        }
    }

    /// How long the kernel may keep a name naming `d` (a negative one: `Dinode::default()`):
    /// as long as its attributes, unless sufs checks permissions (`NO_TTL`).
    fn name_ttl(&self, d: &Dinode) -> &'static Duration {
        if self.checks {
            &NO_TTL
        } else {
            ttl(d)
        }
    }

    /// A name that is not there: an entry without an inode (number 0), which the kernel keeps
    /// as a negative entry for `TTL`, so that looking the name up again costs no round trip.
    /// A name made through this mount replaces it in the kernel's cache; one made through the
    /// control channel is told to the kernel (`stale_sink`, `ctl::Stale::Entry`).
    fn negative_entry(&self, reply: ReplyEntry) {
        let none = Dinode::default();
        reply.entry_with_ttls(&TTL, self.name_ttl(&none), &attr(0, &none, (512, 0)), Generation(0));
    }

    /// The group of a new node: the parent's when the parent is set-group-ID, as BSD and
    /// Linux's `grpid`-less default both do for such directories.
    fn new_gid(fs: &mut Fs, parent: u32, req: &Request) -> u32 {
        match fs.getattr(parent) {
            Ok(p) if p.mode & libc::S_ISGID as u16 != 0 => p.gid,
            _ => req.gid(),
        }
    }
}

/// What INIT asks of the kernel on a mount without the writeback cache, sufs's and the floor's
/// (`floor`) alike, so that both are sent the same requests; `keep_cache`: files' pages survive
/// a close (not under `strictatime`); `checks`: sufs checks permissions (`-o permissions=sufs`).
/// Returns whether directories open without a message (OPENDIR answered ENOSYS).
pub(crate) fn ask_at_init(config: &mut KernelConfig, keep_cache: bool, checks: bool, negotiated: &Negotiated) -> bool {
    // READDIRPLUS: a listing carries each entry's attributes, which saves `ls -l` a lookup
    // per name; AUTO lets the kernel fall back to plain READDIR when nobody looks them up.
    let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
    // sufs clears set-user-ID and set-group-ID itself on a write, a truncation and a chown
    // (`kill_suidgid`): without this the kernel asks for `security.capability` (GETXATTR)
    // before every write, which made 4 KiB writes three times slower.
    let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
    // Zero-message opens of directories: OPENDIR answers ENOSYS once, and the kernel then
    // opens directories itself and sends no RELEASEDIR. Saves two round trips per listing.
    // Files are not opened so (`no_opendir`): FUSE_NO_OPEN_SUPPORT would save OPEN and
    // RELEASE per open, but an immutable file would then open for writing.
    // Not where sufs checks permissions: an open without a message could check nothing.
    let no_opendir = keep_cache && !checks && config.capabilities().contains(InitFlags::FUSE_NO_OPENDIR_SUPPORT);
    // File handles (name_to_handle_at, NFS export) that outlive the kernel's inode cache:
    // it then asks for the inode by number (a LOOKUP of "." in it) and for a directory's
    // parent (".."), and compares the generation (`lookup`).
    // POSIX ACLs: the kernel checks permissions against them (with FUSE_POSIX_ACL it turns
    // `default_permissions` on, whatever the mount said) and keeps them as the two
    // `system.posix_acl_*` attributes; sufs sets the mode an ACL implies and gives new
    // files their directory's default ACL (`fs::acl`), for which it gets the mode before
    // the umask (DONT_MASK) and applies the umask itself when there is no default ACL.
    // Where sufs checks permissions, FUSE_POSIX_ACL stays off (the kernel would turn
    // `default_permissions` on with it): the kernel then passes the ACL attributes through
    // as they are, caches none, and sufs checks against them (`fs::perm`).
    let acl = if checks { InitFlags::FUSE_DONT_MASK } else { InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK };
    if let Err(e) = config.add_capabilities(acl) {
        log::warn!("the kernel does not offer {e:?}: no POSIX ACLs on this mount");
    }
    if let Err(e) = config.add_capabilities(InitFlags::FUSE_EXPORT_SUPPORT) {
        log::warn!("the kernel does not offer {e:?}: file handles go stale with its inode cache");
    }
    negotiated.negotiate(config);
    no_opendir
}

impl SufsFuse {
    /// Answers a CREATE or TMPFILE: the file made and opened (one hold, the handle's), and its
    /// entry, which the kernel counts as a lookup (a second hold, given back by FORGET).
    /// The reply goes after the lock is given back (`mut fs`, dropped here).
    fn reply_created(&self, mut fs: FsGuard<'_>, r: Result<(u32, Dinode), Errno>, reply: ReplyCreate) {
        let r = r.map(|(ino, d)| self.entry(&mut fs, ino, &d));
        drop(fs);
        match r {
            // One time-to-live for the name and its attributes: the name's.
            Ok(e) => reply.created(e.name_ttl, &e.attr, e.generation, FileHandle(0), self.open_flags()),
            Err(e) => reply.error(e),
        }
    }

    /// FS_IOC_GETFSLABEL, by anyone, and FS_IOC_SETFSLABEL, by root alone (Linux's file systems
    /// ask for CAP_SYS_ADMIN; FUSE passes the ioctl on unchecked), on any file or directory of
    /// the mount: the answer's bytes (the label in `FSLABEL_MAX`), or the errno.
    fn label_ioctl(&self, req: &Request, cmd: u32, input: &[u8]) -> Result<Vec<u8>, Errno> {
        let mut fs = lock(&self.fs);
        if cmd == label::FS_IOC_GETFSLABEL {
            return Ok(fs.label_ioctl());
        }
        if req.uid() != 0 {
            return Err(Errno::EPERM);
        }
        fs.set_label_ioctl(input).map_err(errno)?;
        Ok(Vec::new())
    }

    /// FITRIM, by root alone (Linux asks CAP_SYS_ADMIN), on any file or directory of the
    /// mount: `struct fstrim_range` (start, length, shortest run; bytes, native endian) in, and
    /// back with the length the bytes trimmed (`Fs::trim`).
    fn trim_ioctl(&self, req: &Request, input: &[u8]) -> Result<Vec<u8>, Errno> {
        if req.uid() != 0 {
            return Err(Errno::EPERM);
        }
        let word = |i: usize| input.get(i * 8..i * 8 + 8).and_then(|w| w.try_into().ok()).map(u64::from_ne_bytes);
        let (Some(start), Some(len), Some(minlen)) = (word(0), word(1), word(2)) else {
            return Err(Errno::EINVAL);
        };
        let trimmed = lock(&self.fs).trim(start, len, minlen).map_err(errno)?;
        Ok([start, trimmed, minlen].iter().flat_map(|w| w.to_ne_bytes()).collect())
    }

    /// The inode-flag ioctls (`ioctl`): the answer's bytes, or the errno. Anything else is
    /// ENOTTY.
    fn flags_ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        cmd: u32,
        input: &[u8],
        out_size: u32,
    ) -> Result<Vec<u8>, Errno> {
        let i = from_fuse(ino)?;
        let word = |b: &[u8], at: usize| b.get(at..at + 4).map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
        let mut fs = lock_landing(&self.fs);
        match cmd {
            flags::FS_IOC_GETFLAGS | flags::FS_IOC32_GETFLAGS => {
                let f = fs.get_flags(i).map_err(errno)?;
                let mut out = f.to_ne_bytes().to_vec();
                out.resize((out_size as usize).clamp(4, 8), 0);
                Ok(out)
            }
            flags::FS_IOC_SETFLAGS | flags::FS_IOC32_SETFLAGS => {
                let f = word(input, 0).ok_or(Errno::EINVAL)?;
                fs.set_flags(i, f, req.uid()).map_err(errno)?;
                settle(&mut fs, Change::Attr, &[i])?;
                Ok(Vec::new())
            }
            flags::FS_IOC_FSGETXATTR => {
                let f = fs.get_flags(i).map_err(errno)?;
                let mut out = vec![0u8; flags::FSXATTR_SIZE];
                out[..4].copy_from_slice(&flags::fsx_from_linux(f).to_ne_bytes());
                Ok(out)
            }
            flags::FS_IOC_FSSETXATTR => {
                let x = word(input, 0).ok_or(Errno::EINVAL)?;
                let f = flags::linux_from_fsx(x).ok_or(Errno::EOPNOTSUPP)?;
                fs.set_flags(i, f, req.uid()).map_err(errno)?;
                settle(&mut fs, Change::Attr, &[i])?;
                Ok(Vec::new())
            }
            _ => Err(Errno::ENOTTY),
        }
    }
}

impl Filesystem for SufsFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        self.keep_cache = lock(&self.fs).atime_policy().mode != AtimeMode::Strictatime;
        if self.writeback {
            if let Err(e) = config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE) {
                log::warn!("the kernel does not offer {e:?}: writes go through one by one");
                self.writeback = false;
            }
        }
        self.no_opendir = ask_at_init(config, self.keep_cache, self.checks, &self.negotiated);
        log::info!("writeback cache {}", if self.writeback { "on" } else { "off" });
        Ok(())
    }

    /// The kernel gives back `nlookup` lookups. The nodes of one batch share its request id,
    /// which tells the messages apart (`Messages::forgot`).
    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        self.msgs.forgot(req.unique().0, nlookup);
        unhold(&mut lock(&self.fs), ino, nlookup);
    }

    /// BATCH_FORGET: every node of the batch under one taking of the lock.
    fn batch_forget(&self, req: &Request, nodes: &[fuser::ForgetOne]) {
        let mut fs = lock(&self.fs);
        for n in nodes {
            self.msgs.forgot(req.unique().0, n.nlookup());
            unhold(&mut fs, n.nodeid(), n.nlookup());
        }
    }

    fn destroy(&mut self) {
        if let Err(e) = lock(&self.fs).unmount() {
            log::error!("unmount: {e}");
        }
    }

    /// A name in a directory; also, with export support, an inode by number: the kernel opens a
    /// file handle whose inode it no longer holds with a LOOKUP of "." in the handle's inode
    /// number, whatever its type, and compares the generation answered with the handle's. A
    /// number that names no inode now answers ESTALE, and so does a removed file whose freeing
    /// still waits for writes (no link left); a freed and reused one answers the new inode,
    /// whose generation differs (`Fs::next_generation`).
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.msgs.count(Op::Lookup);
        let mut fs = lock(&self.fs);
        let r = from_fuse(parent).and_then(|p| {
            // "." and ".." come from the kernel's file handles (open_by_handle_at, which needs
            // CAP_DAC_READ_SEARCH), a path walk's names from users: search permission.
            if name.as_bytes() != b"." && name.as_bytes() != b".." {
                self.check(&mut fs, req, |fs, c| fs.may(p, c, MAY_EXEC))?;
            }
            if name.as_bytes() == b"." {
                match fs.getattr(p).map_err(errno)? {
                    d if d.nlink == 0 => Err(Errno::ESTALE),
                    d => Ok((p, d)),
                }
            } else {
                fs.lookup(p, name.as_bytes()).map_err(errno)
            }
        });
        let r = r.map(|(ino, d)| self.entry(&mut fs, ino, &d));
        drop(fs);
        match r {
            Ok(e) => e.send(reply),
            Err(Errno::ENOENT) if name.as_bytes() != b"." => self.negative_entry(reply),
            Err(e) => reply.error(e),
        }
    }

    /// With a handle (under the writeback cache only the kernel's write(2) asks so, after
    /// `refuse_for_space` dropped its attributes), a file whose pages were refused for want of
    /// space answers ENOSPC once.
    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.msgs.count(Op::Getattr);
        if fh.is_some() && self.writeback && from_fuse(ino).is_ok_and(|i| self.take_refused(i)) {
            return reply.error(Errno::ENOSPC);
        }
        let mut fs = lock(&self.fs);
        let r = from_fuse(ino).and_then(|i| fs.getattr(i).map(|d| (i, d)).map_err(errno));
        let u = units(&fs.sb);
        drop(fs);
        match r {
            Ok((i, d)) => reply.attr(ttl(&d), &attr(i, &d, u)),
            Err(e) => reply.error(e),
        }
    }

    /// statx(2) asking for the birth time (`stat` does): the attributes with it (`di_btime`,
    /// set at creation, never changed; FUSE_STATX, which GETATTR's reply has no room for).
    /// Under the writeback cache, like `getattr`, a writer's handle learns of refused pages.
    fn statx(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: Option<FileHandle>,
        _flags: u32,
        _mask: u32,
        reply: fuser::ReplyStatx,
    ) {
        self.msgs.count(Op::Statx);
        if fh.is_some() && self.writeback && from_fuse(ino).is_ok_and(|i| self.take_refused(i)) {
            return reply.error(Errno::ENOSPC);
        }
        let mut fs = lock(&self.fs);
        let r = from_fuse(ino).and_then(|i| fs.getattr(i).map(|d| (i, d)).map_err(errno));
        let u = units(&fs.sb);
        drop(fs);
        match r {
            Ok((i, d)) => reply.statx(ttl(&d), &attr(i, &d, u), statx_attributes(d.flags), STATX_ATTRS),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.msgs.count(Op::Setattr);
        // A truncation that frees blocks lands the flight in progress: wait for it unlocked.
        let mut fs = if size.is_some() { lock_landing(&self.fs) } else { lock(&self.fs) };
        let clock = fs.now();
        let now = |t: TimeOrNow| match t {
            TimeOrNow::SpecificTime(t) => setattr_time(t),
            TimeOrNow::Now => clock,
        };
        let ctime = ctime.map(setattr_time);
        let only_times = mode.is_none() && uid.is_none() && gid.is_none() && size.is_none();
        let times_now = times_now(&atime, &mtime, ctime, only_times && fh.is_some());
        let (atime, mtime) = (atime.map(now), mtime.map(now));
        let mut a = SetAttr { mode, uid, gid, size, atime, mtime, times_now, ctime };
        let r = from_fuse(ino).and_then(|i| {
            if let Some(m) = self.check(&mut fs, req, |fs, c| fs.may_setattr(i, &a, fh.is_some(), c))? {
                a.mode = m;
            }
            let mut d = fs.setattr(i, &a).map_err(errno)?;
            if a.mode.is_some() {
                fs.acl_chmod(i).map_err(errno)?;
            }
            // With HANDLE_KILLPRIV_V2 the kernel leaves these to sufs (fuser does not pass
            // FATTR_KILL_SUIDGID): a chown always (Linux's chown_common), a truncation by
            // anyone but root (set-group-ID also where the caller is not in the file's group).
            // The reply's attributes tell the kernel.
            let chown = a.uid.is_some() || a.gid.is_some();
            if a.mode.is_none() && chown {
                d = kill_suidgid(&mut fs, i, d, true)?;
            } else if a.mode.is_none() && a.size.is_some() && req.uid() != 0 {
                let member = in_group(req, d.gid);
                d = kill_suidgid(&mut fs, i, d, member)?;
            }
            settle(&mut fs, Change::Attr, &[i])?;
            Ok((i, d))
        });
        let u = units(&fs.sb);
        drop(fs);
        match r {
            Ok((i, d)) => reply.attr(ttl(&d), &attr(i, &d, u)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.msgs.count(Op::Readlink);
        let mut fs = lock(&self.fs);
        let r = from_fuse(ino).and_then(|i| fs.readlink(i).map_err(errno));
        drop(fs);
        match r {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        self.msgs.count(Op::Mknod);
        let mut fs = lock(&self.fs);
        let r = from_fuse(parent).and_then(|p| {
            self.check(&mut fs, req, |fs, c| fs.may(p, c, MAY_WRITE | MAY_EXEC))?;
            let gid = Self::new_gid(&mut fs, p, req);
            let inh = fs.acl_inherit(p, mode, umask, false).map_err(errno)?;
            let (ino, d) = fs
                .as_user(req.uid(), |fs| fs.mknod(p, name.as_bytes(), inh.mode, req.uid(), gid, rdev))
                .map_err(errno)?;
            let d = fs.acl_apply(ino, &inh).map_err(errno)?.unwrap_or(d);
            settle_names(&mut fs, p, &[ino])?;
            Ok((ino, d))
        });
        let r = r.map(|(ino, d)| self.entry(&mut fs, ino, &d));
        drop(fs);
        match r {
            Ok(e) => e.send(reply),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        self.msgs.count(Op::Mkdir);
        let mut fs = lock(&self.fs);
        let r = from_fuse(parent).and_then(|p| {
            self.check(&mut fs, req, |fs, c| fs.may(p, c, MAY_WRITE | MAY_EXEC))?;
            let pd = fs.getattr(p).map_err(errno)?;
            let sgid = pd.mode & libc::S_ISGID as u16;
            let gid = Self::new_gid(&mut fs, p, req);
            let inh = fs.acl_inherit(p, mode, umask, true).map_err(errno)?;
            let mode = inh.mode | sgid as u32;
            let (ino, d) =
                fs.as_user(req.uid(), |fs| fs.mkdir(p, name.as_bytes(), mode, req.uid(), gid)).map_err(errno)?;
            let d = fs.acl_apply(ino, &inh).map_err(errno)?.unwrap_or(d);
            settle_names(&mut fs, p, &[ino])?;
            Ok((ino, d))
        });
        let r = r.map(|(ino, d)| self.entry(&mut fs, ino, &d));
        drop(fs);
        match r {
            Ok(e) => e.send(reply),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.msgs.count(Op::Unlink);
        // An unlink that would land the flight in the air waits for its write unlocked.
        let dir = from_fuse(parent);
        let mut fs = lock_landing_if(&self.fs, |fs| dir.is_ok_and(|p| fs.unlink_lands_flight(p, name.as_bytes())));
        let r = dir.and_then(|p| {
            self.check(&mut fs, req, |fs, c| fs.may_delete(p, name.as_bytes(), c))?;
            fs.unlink(p, name.as_bytes()).map_err(errno)?;
            settle(&mut fs, Change::Names, &[p])
        });
        drop(fs);
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.msgs.count(Op::Rmdir);
        // An rmdir that would land the flight in the air waits for its write unlocked.
        let dir = from_fuse(parent);
        let mut fs = lock_landing_if(&self.fs, |fs| dir.is_ok_and(|p| fs.rmdir_lands_flight(p, name.as_bytes())));
        let r = dir.and_then(|p| {
            self.check(&mut fs, req, |fs, c| fs.may_delete(p, name.as_bytes(), c))?;
            fs.rmdir(p, name.as_bytes()).map_err(errno)?;
            settle(&mut fs, Change::Names, &[p])
        });
        drop(fs);
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &std::path::Path, reply: ReplyEntry) {
        self.msgs.count(Op::Symlink);
        let mut fs = lock(&self.fs);
        let r = from_fuse(parent).and_then(|p| {
            self.check(&mut fs, req, |fs, c| fs.may(p, c, MAY_WRITE | MAY_EXEC))?;
            let gid = Self::new_gid(&mut fs, p, req);
            let target = target.as_os_str().as_bytes();
            let (ino, d) = fs
                .as_user(req.uid(), |fs| fs.symlink(p, link_name.as_bytes(), target, req.uid(), gid))
                .map_err(errno)?;
            settle_names(&mut fs, p, &[ino])?;
            Ok((ino, d))
        });
        let r = r.map(|(ino, d)| self.entry(&mut fs, ino, &d));
        drop(fs);
        match r {
            Ok(e) => e.send(reply),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: FuseRenameFlags,
        reply: ReplyEmpty,
    ) {
        self.msgs.count(Op::Rename);
        // RENAME_WHITEOUT (the kernel has checked CAP_MKNOD) with RENAME_EXCHANGE makes no sense.
        let whiteout = flags.contains(FuseRenameFlags::RENAME_WHITEOUT);
        let known = FuseRenameFlags::RENAME_NOREPLACE
            | if whiteout { FuseRenameFlags::RENAME_WHITEOUT } else { FuseRenameFlags::RENAME_EXCHANGE };
        if !(flags - known).is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let f = RenameFlags {
            noreplace: flags.contains(FuseRenameFlags::RENAME_NOREPLACE),
            exchange: flags.contains(FuseRenameFlags::RENAME_EXCHANGE),
        };
        // A rename that meets the flight in the air lands it: wait for its write unlocked.
        let ids = from_fuse(parent).and_then(|p| Ok((p, from_fuse(newparent)?)));
        let mut fs = lock_landing_if(&self.fs, |fs| {
            ids.is_ok_and(|(p, np)| fs.rename_lands_flight(p, name.as_bytes(), np, newname.as_bytes()))
        });
        let r = ids.and_then(|(p, np)| {
            let (from, to) = ((p, name.as_bytes()), (np, newname.as_bytes()));
            self.check(&mut fs, req, |fs, c| fs.may_rename(from, to, f.exchange, c))?;
            if whiteout {
                // The whiteout left behind is the caller's, as a mknod's node.
                let owner = (req.uid(), Self::new_gid(&mut fs, p, req));
                fs.rename_whiteout(p, name.as_bytes(), np, newname.as_bytes(), f.noreplace, owner).map_err(errno)?;
            } else {
                fs.as_user(req.uid(), |fs| fs.rename(p, name.as_bytes(), np, newname.as_bytes(), f)).map_err(errno)?;
            }
            // The moved inode (its new name, up to the root), and the old name's directory.
            let mut inos = Vec::new();
            if fs.sync_mode() != Default::default() {
                for (d, n) in [(np, newname), (p, name)] {
                    inos.extend(fs.lookup(d, n.as_bytes()).ok().map(|x| x.0));
                }
            }
            inos.push(p);
            settle_names(&mut fs, np, &inos)
        });
        drop(fs);
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        self.msgs.count(Op::Link);
        let mut fs = lock(&self.fs);
        let r = from_fuse(ino).and_then(|i| {
            let np = from_fuse(newparent)?;
            self.check(&mut fs, req, |fs, c| fs.may_link(i, np, c))?;
            let d = fs.as_user(req.uid(), |fs| fs.link(i, np, newname.as_bytes())).map_err(errno)?;
            settle_names(&mut fs, np, &[i])?;
            Ok((i, d))
        });
        let r = r.map(|(i, d)| self.entry(&mut fs, i, &d));
        drop(fs);
        match r {
            Ok(e) => e.send(reply),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.msgs.count(Op::Open);
        let mut fs = lock(&self.fs);
        let write = flags.0 & libc::O_ACCMODE != libc::O_RDONLY || flags.0 & libc::O_TRUNC != 0;
        let append = flags.0 & libc::O_APPEND != 0;
        let r = from_fuse(ino).and_then(|i| {
            self.check(&mut fs, req, |fs, c| fs.may(i, c, perm::open_wants(flags.0)))?;
            fs.check_open_append(i, write, append, flags.0 & libc::O_TRUNC != 0).map_err(errno)?;
            fs.open(i, write).map_err(errno)
        });
        drop(fs);
        match r {
            Ok(_) => reply.opened(FileHandle(0), self.open_flags()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.msgs.count(Op::Read);
        // The device reads go outside the lock.
        match from_fuse(ino).and_then(|i| Fs::read_shared(&self.fs, i, offset, size as usize).map_err(errno)) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.msgs.count(Op::Write);
        // Under the writeback cache the kernel keeps the times (`Writer::KernelTimes`).
        let writer = if self.writeback { Writer::KernelTimes } else { Writer::Kernel };
        let cached = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        let mut fs = lock(&self.fs);
        let mut killed = false;
        let r = from_fuse(ino).and_then(|i| {
            // Pages written back come from the kernel's flusher (uid 0) or whoever made it
            // write: the file's owner stands for the writer, for root's reserve (`as_user`).
            let uid = if cached { fs.getattr(i).map_err(errno)?.uid } else { req.uid() };
            let n = fs.as_user(uid, |fs| fs.write_by(i, offset, data, writer)).map_err(errno)?;
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                let d = fs.getattr(i).map_err(errno)?;
                let member = in_group(req, d.gid);
                killed = kill_suidgid(&mut fs, i, d.clone(), member)?.mode != d.mode;
            }
            settle(&mut fs, Change::Data, &[i])?;
            // The kernel's writeback takes a short count for success and drops the rest of its
            // pages: an error instead reaches the writer's fsync or close (ENOSPC).
            if cached && n < data.len() {
                log::warn!("inode {i}: {n} of {} bytes written back at {offset}: ENOSPC", data.len());
                return Err(Errno::ENOSPC);
            }
            Ok(n)
        });
        drop(fs);
        // Before the reply: sent after it, a stat(2) by the writer right after its write(2)
        // could still see the kernel's cached set-user-ID (seen in CI).
        if killed {
            from_fuse(ino).map(|i| self.mode_changed(i)).unwrap_or(());
        }
        let refused = match r {
            Ok(n) => {
                reply.written(n as u32);
                false
            }
            Err(e) => {
                // The writer learns of it at its next fsync or close, and its next write(2).
                if cached {
                    log::warn!("inode {}: {} bytes written back at {offset} refused: {e:?}", ino.0, data.len());
                }
                reply.error(e);
                cached && e == Errno::ENOSPC
            }
        };
        if refused {
            from_fuse(ino).map(|i| self.refuse_for_space(i)).unwrap_or(());
        }
    }

    /// Nothing to do on close (data is in the cache; fsync and the syncer write it, and no
    /// locks are held): ENOSYS tells the kernel so once, and it sends no FLUSH on later closes,
    /// which saves a round trip per close of a file opened through OPEN or CREATE.
    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        self.msgs.count(Op::Flush);
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.msgs.count(Op::Release);
        let mut fs = lock(&self.fs);
        let r = from_fuse(ino).and_then(|i| fs.release(i).map_err(errno));
        drop(fs);
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.msgs.count(Op::Fsync);
        // The writes go outside the lock: other requests are served meanwhile.
        match from_fuse(ino).and_then(|i| Fs::fsync_shared(&self.fs, i).map_err(errno)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// A directory's listing needs read permission: checked here, where sufs checks (READDIR
    /// follows an OPENDIR then, and the kernel may serve a listing again from its cache).
    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.msgs.count(Op::Opendir);
        if self.no_opendir {
            return reply.error(Errno::ENOSYS);
        }
        let mut fs = lock(&self.fs);
        let r = from_fuse(ino).and_then(|i| {
            let d = fs.getattr(i).map_err(errno)?;
            if d.is_dir() {
                self.check(&mut fs, req, |fs, c| fs.may(i, c, MAY_READ))?;
            }
            Ok(d)
        });
        drop(fs);
        match r {
            Ok(d) if d.is_dir() => reply.opened(FileHandle(0), FopenFlags::empty()),
            Ok(_) => reply.error(Errno::ENOTDIR),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        self.msgs.count(Op::Readdir);
        let mut fs = lock(&self.fs);
        let entries = match from_fuse(ino).and_then(|i| fs.readdir(i, offset, 1024).map_err(errno)) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        for e in entries {
            if reply.add(to_fuse(e.ino), e.next, dtype_kind(e.dtype), OsStr::from_bytes(&e.name)) {
                break;
            }
        }
        drop(fs);
        reply.ok();
    }

    /// Entries with their attributes. An entry whose inode does not read (a name left naming a
    /// free inode, a number out of range) is damage met by this listing: it is left out
    /// (logged, the image marked for fsck) and the listing goes on, so that one bad name does
    /// not hide the directory; a lookup of that name still fails. A reply is never empty
    /// while entries remain, or the kernel would take it for the end of the directory.
    fn readdirplus(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        self.msgs.count(Op::Readdirplus);
        let mut fs = lock(&self.fs);
        let dir = match from_fuse(ino) {
            Ok(i) => i,
            Err(e) => return reply.error(e),
        };
        let mut offset = offset;
        let mut added = false;
        'fill: while !added {
            let entries = match fs.readdir(dir, offset, 256) {
                Ok(e) if e.is_empty() => break,
                Ok(e) => e,
                Err(e) => return reply.error(errno(e)),
            };
            for e in entries {
                offset = e.next;
                let d = match fs.getattr(e.ino) {
                    Ok(d) => d,
                    Err(err @ (FsError::Stale(_) | FsError::Corrupt(_))) => {
                        let name = String::from_utf8_lossy(&e.name).into_owned();
                        fs.damaged(format!("directory {dir}: entry {name:?} names inode {}: {err}", e.ino));
                        continue;
                    }
                    Err(err) => return reply.error(errno(err)),
                };
                // One time-to-live for the name and its attributes: the name's.
                let full = reply.add(
                    to_fuse(e.ino),
                    e.next,
                    OsStr::from_bytes(&e.name),
                    self.name_ttl(&d),
                    &attr(e.ino, &d, units(&fs.sb)),
                    Generation(d.generation as u64),
                );
                if full {
                    break 'fill;
                }
                added = true;
                // The kernel counts a lookup for every entry but "." and ".." (`entry`).
                if e.name != b"." && e.name != b".." {
                    fs.hold(e.ino, 1);
                }
            }
        }
        drop(fs);
        reply.ok();
    }

    /// Nothing is held for an open directory.
    fn releasedir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.msgs.count(Op::Releasedir);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.msgs.count(Op::Fsyncdir);
        // The writes go outside the lock: other requests are served meanwhile.
        match from_fuse(ino).and_then(|i| Fs::fsync_shared(&self.fs, i).map_err(errno)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.msgs.count(Op::Statfs);
        let mut fs = lock(&self.fs);
        let s = fs.statfs();
        drop(fs);
        reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize);
    }

    /// Extended attributes (`fs::xattr`). Since sufs answers getxattr, the kernel asks for
    /// `security.capability` before each write to a file (FUSE file systems are not
    /// `SB_NOSEC`): one round trip per write(2), answered ENODATA from the cached inode.
    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: fuser::ReplyXattr) {
        self.msgs.count(Op::Getxattr);
        let mut fs = lock(&self.fs);
        let r = from_fuse(ino).and_then(|i| {
            self.check(&mut fs, req, |fs, c| fs.may_xattr(i, name.as_bytes(), false, c))?;
            fs.getxattr(i, name.as_bytes(), req.uid()).map_err(errno)
        });
        drop(fs);
        match r {
            Ok(v) => xattr_reply(reply, size, &v),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: fuser::ReplyXattr) {
        self.msgs.count(Op::Listxattr);
        let mut fs = lock(&self.fs);
        let r = from_fuse(ino).and_then(|i| fs.listxattr(i, req.uid()).map_err(errno));
        drop(fs);
        match r {
            Ok(v) => xattr_reply(reply, size, &v),
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        self.msgs.count(Op::Setxattr);
        if position != 0 {
            return reply.error(Errno::EINVAL);
        }
        let mut fs = lock_landing(&self.fs);
        let r = from_fuse(ino).and_then(|i| {
            let mode = XattrMode::from_flags(flags).map_err(errno)?;
            self.check(&mut fs, req, |fs, c| fs.may_xattr(i, name.as_bytes(), true, c))?;
            fs.setxattr(i, name.as_bytes(), value, mode, req.uid()).map_err(errno)?;
            if name.as_bytes().starts_with(b"system.posix_acl_") {
                // Setting an ACL clears set-group-ID unless the caller is in the file's group
                // or root (what the kernel would say with FUSE_SETXATTR_ACL_KILL_SGID, which
                // needs the setxattr format fuser does not read).
                let gid = fs.getattr(i).map_err(errno)?.gid;
                if req.uid() != 0 && !in_group(req, gid) {
                    fs.clear_sgid(i).map_err(errno)?;
                }
            }
            settle(&mut fs, Change::Attr, &[i])
        });
        drop(fs);
        self.reply_xattr_change(ino, r, reply);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.msgs.count(Op::Removexattr);
        let mut fs = lock_landing(&self.fs);
        let r = from_fuse(ino).and_then(|i| {
            self.check(&mut fs, req, |fs, c| fs.may_xattr(i, name.as_bytes(), true, c))?;
            fs.removexattr(i, name.as_bytes(), req.uid()).map_err(errno)?;
            settle(&mut fs, Change::Attr, &[i])
        });
        drop(fs);
        self.reply_xattr_change(ino, r, reply);
    }

    /// FS_IOC_SHUTDOWN (fstests' `godown`), by root on any file or directory of the mount. A
    /// FUSE server gets an ioctl's data as its command encodes it, and this one is `_IOR`: the
    /// kernel copies nothing in, so the flags the caller points to never arrive (nor, through
    /// fuser, the pointer). The mount stops as `FS_GOING_DOWN_NOLOGFLUSH` (godown's default)
    /// asks; `sufs shutdown --mode` carries the other two (docs/vfs.md).
    ///
    /// The inode flags (chattr, lsattr): FS_IOC_GETFLAGS / FS_IOC_SETFLAGS, and their XFS forms
    /// FS_IOC_FSGETXATTR / FS_IOC_FSSETXATTR, which the kernel sends as ioctls to a FUSE server
    /// (its `fileattr_get` and `fileattr_set`), each on a file it opens for the purpose.
    ///
    /// The volume label: FS_IOC_GETFSLABEL and FS_IOC_SETFSLABEL (`label_ioctl`). FITRIM
    /// (fstrim): `trim_ioctl`.
    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        self.msgs.count(Op::Ioctl);
        if cmd == trim::FITRIM {
            return match self.trim_ioctl(req, in_data) {
                Ok(out) => reply.ioctl(0, &out),
                Err(e) => reply.error(e),
            };
        }
        if cmd == label::FS_IOC_GETFSLABEL || cmd == label::FS_IOC_SETFSLABEL {
            return match self.label_ioctl(req, cmd, in_data) {
                Ok(out) => reply.ioctl(0, &out),
                Err(e) => reply.error(e),
            };
        }
        if cmd != FS_IOC_SHUTDOWN {
            let out = match self.flags_ioctl(req, ino, cmd, in_data, out_size) {
                Ok(out) => out,
                Err(e) => return reply.error(e),
            };
            // A flag set changes the ctime and statx's attribute bits, which the kernel would
            // otherwise keep as it had them: it drops the inode's attributes before the reply
            // (after it, a stat by the caller could still find the old ones). Attributes only:
            // that takes no lock the kernel may hold for the ioctl (the inode's, in
            // vfs_fileattr_set), where dropping pages would.
            if matches!(cmd, flags::FS_IOC_SETFLAGS | flags::FS_IOC32_SETFLAGS | flags::FS_IOC_FSSETXATTR) {
                if let Some(n) = self.notifier.get() {
                    if let Err(e) = n.inval_inode(ino, -1, 0) {
                        log::warn!("telling the kernel of inode {}'s flags: {e}", ino.0);
                    }
                }
            }
            return reply.ioctl(0, &out);
        }
        if req.uid() != 0 {
            return reply.error(Errno::EPERM);
        }
        lock(&self.fs).shutdown(Shutdown::Nologflush);
        reply.ioctl(0, &[]);
    }

    /// fallocate(2): the kernel has checked the mode's combinations it knows; sufs takes the
    /// default mode, KEEP_SIZE, PUNCH_HOLE and ZERO_RANGE (EOPNOTSUPP otherwise).
    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.msgs.count(Op::Fallocate);
        let mut killed = false;
        let r = from_fuse(ino).and_then(|i| {
            let m = FallocMode::from_linux(mode).map_err(errno)?;
            // A file removed just before may hold the space until its FORGET, which another
            // request thread serves once the lock is free: ENOSPC then waits for it a little.
            let mut tries = 0;
            loop {
                let mut fs = lock_landing(&self.fs);
                match fs.as_user(req.uid(), |fs| fs.fallocate(i, offset, length, m)) {
                    Err(FsError::NoSpace) if tries < 10 && fs.frees_held() => tries += 1,
                    r => {
                        let d = r.map_err(errno)?;
                        // Linux's fallocate modifies the file as a write does (`file_modified`),
                        // which under KILLPRIV_V2 sends sufs nothing: set-user-ID and
                        // set-group-ID go here, for a caller without CAP_FSETID.
                        if req.uid() != 0 {
                            let member = in_group(req, d.gid);
                            killed = kill_suidgid(&mut fs, i, d.clone(), member)?.mode != d.mode;
                        }
                        return settle(&mut fs, Change::Data, &[i]);
                    }
                }
                drop(fs);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        // Before the reply, as for a WRITE.
        if killed {
            from_fuse(ino).map(|i| self.mode_changed(i)).unwrap_or(());
        }
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// SEEK_DATA and SEEK_HOLE (the kernel answers the other whences itself).
    fn lseek(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: i64, whence: i32, reply: fuser::ReplyLseek) {
        self.msgs.count(Op::Lseek);
        if whence != libc::SEEK_DATA && whence != libc::SEEK_HOLE {
            return reply.error(Errno::EINVAL);
        }
        // Under the writeback cache the kernel asks without handing its dirty pages over
        // first: sufs would answer holes where the kernel holds data (and `cp` would copy
        // holes). ENOSYS has the kernel answer from its own size: all data, then the end.
        if self.writeback {
            return reply.error(Errno::ENOSYS);
        }
        if offset < 0 {
            return reply.error(Errno::ENXIO);
        }
        let mut fs = lock(&self.fs);
        let r =
            from_fuse(ino).and_then(|i| fs.seek_data_hole(i, offset as u64, whence == libc::SEEK_DATA).map_err(errno));
        drop(fs);
        match r {
            Ok(o) => reply.offset(o as i64),
            Err(e) => reply.error(e),
        }
    }

    /// copy_file_range(2) within the mount, read and written through the cache, a few MiB
    /// under the lock at a time.
    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.msgs.count(Op::CopyFileRange);
        const STEP: u64 = 8 << 20;
        let r = from_fuse(ino_in).and_then(|src| {
            let dst = from_fuse(ino_out)?;
            let len = len.min(u32::MAX as u64);
            let n = lock(&self.fs).copy_check(src, offset_in, dst, offset_out, len).map_err(errno)?;
            let mut done = 0;
            while done < n {
                let mut fs = lock(&self.fs);
                let step = (n - done).min(STEP);
                let copy = |fs: &mut Fs| fs.copy_range(src, offset_in + done, dst, offset_out + done, step);
                let w = match fs.as_user(req.uid(), copy) {
                    Ok(w) => w,
                    Err(_) if done > 0 => break,
                    Err(e) => return Err(errno(e)),
                };
                done += w;
                if w < step {
                    break;
                }
            }
            settle(&mut lock(&self.fs), Change::Data, &[dst])?;
            Ok(done)
        });
        match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        }
    }

    /// access(2), chdir and the like: sent only where sufs checks permissions (without
    /// `default_permissions` the kernel asks; with it, it answers itself).
    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.msgs.count(Op::Access);
        let want = (mask.bits() & 7) as u16;
        let mut fs = lock(&self.fs);
        // A read-only mount's EROFS the kernel answers itself (`sb_permission`).
        let r = from_fuse(ino).and_then(|i| self.check(&mut fs, req, |fs, c| fs.may(i, c, want)).map(|_| ()));
        drop(fs);
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        self.msgs.count(Op::Create);
        let mut fs = lock(&self.fs);
        let r = from_fuse(parent).and_then(|p| {
            self.check(&mut fs, req, |fs, c| fs.may(p, c, MAY_WRITE | MAY_EXEC))?;
            let gid = Self::new_gid(&mut fs, p, req);
            let inh = fs.acl_inherit(p, mode, umask, false).map_err(errno)?;
            let (ino, d) =
                fs.as_user(req.uid(), |fs| fs.create(p, name.as_bytes(), inh.mode, req.uid(), gid)).map_err(errno)?;
            let d = fs.acl_apply(ino, &inh).map_err(errno)?.unwrap_or(d);
            settle_names(&mut fs, p, &[ino])?;
            fs.open(ino, false).map_err(errno)?;
            Ok((ino, d))
        });
        self.reply_created(fs, r, reply);
    }

    /// open(2) with `O_TMPFILE`: a regular file with no name (`Fs::tmpfile`, which opens it),
    /// answered as a create is. `linkat` of it gives it a name through `link`, unless it was
    /// opened with `O_EXCL` (the kernel refuses that link itself; sufs too).
    fn tmpfile(&self, req: &Request, parent: INodeNo, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        self.msgs.count(Op::Tmpfile);
        let mut fs = lock(&self.fs);
        let linkable = flags & libc::O_EXCL == 0;
        let r = from_fuse(parent).and_then(|p| {
            // Linux asks for write and search permission on the directory (`vfs_tmpfile`).
            self.check(&mut fs, req, |fs, c| fs.may(p, c, MAY_WRITE | MAY_EXEC))?;
            let gid = Self::new_gid(&mut fs, p, req);
            let inh = fs.acl_inherit(p, mode, umask, false).map_err(errno)?;
            let (ino, d) =
                fs.as_user(req.uid(), |fs| fs.tmpfile(p, inh.mode, req.uid(), gid, linkable)).map_err(errno)?;
            let d = match fs.acl_apply(ino, &inh) {
                Ok(a) => a.unwrap_or(d),
                Err(e) => {
                    // Closed again: the nameless inode goes with its only hold.
                    fs.release(ino).map_err(errno)?;
                    return Err(errno(e));
                }
            };
            // Its data and attributes: on a `sync` mount a later fsync or link finds them
            // durable already; it has no name to make durable on a `dirsync` one.
            settle(&mut fs, Change::Data, &[ino])?;
            Ok((ino, d))
        });
        self.reply_created(fs, r, reply);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_map_both_ways() {
        assert_eq!(to_fuse(ROOT_INO), INodeNo(1));
        assert_eq!(from_fuse(INodeNo(1)).unwrap(), ROOT_INO);
        assert_eq!(from_fuse(to_fuse(77)).unwrap(), 77);
        assert!(from_fuse(INodeNo(2)).is_err());
    }

    #[test]
    fn times_round_trip() {
        for (s, ns) in [(0i64, 0u32), (1_700_000_000, 5), (-10, 0), (-10, 999), (-315_619_200, 500_000_000)] {
            assert_eq!(wall(time(s, ns)), (s, ns));
        }
    }

    #[test]
    fn times_out_of_range_saturate_without_a_panic() {
        for (s, ns) in
            [(i64::MAX, u32::MAX), (i64::MIN, u32::MAX), (i64::MAX, 0), (i64::MIN, 999_999_999), (-1, u32::MAX)]
        {
            let t = time(s, ns);
            let (ws, wns) = wall(t);
            assert!(wns < 1_000_000_000);
            if s.unsigned_abs() <= 1 << 62 {
                assert_eq!((ws, wns), (s, ns.min(999_999_999)));
            } else {
                assert_eq!(ws.signum(), s.signum(), "{s} {ns}: saturates on its own side");
            }
        }
    }

    /// What fuser makes of the kernel's (seconds, nanoseconds) in a SETATTR, undone.
    #[test]
    fn setattr_times_before_1970_keep_their_fraction() {
        for (s, ns) in [(-315_619_200i64, 500_000_000u32), (-1, 250_000_000), (-10, 0), (1_700_000_000, 7)] {
            // fuser's system_time_from_time
            let t = if s >= 0 {
                UNIX_EPOCH + Duration::new(s as u64, ns)
            } else {
                UNIX_EPOCH - Duration::new((-s) as u64, ns)
            };
            assert_eq!(setattr_time(t), (s, ns));
        }
    }
}
