//! The control channel of a mount: a Unix socket beside the image (`IMAGE.ctl`) through which
//! other processes ask the mounted file system for things the file interface has no call for (the
//! Block Register's five calls, and more to come: snapshots, background fsck's adjust). A thread
//! accepts connections and serves each in its own thread; every request takes the mount's lock
//! (`SharedFs`), exactly as a FUSE request does, so it is one more file-system operation.
//!
//! Protocol: one JSON object per line each way. A request is `{"op": "...", ...arguments}`; the
//! answer is `{"ok": {"reply": "...", ...fields}}` (a `Reply`) or `{"error": "message", "errno": n}`.
//! A connection may carry many requests. Both sides are typed: the client gets a `Reply` back and
//! turns it into what the request answers with `Reply::into_*`. To add a request, add a variant
//! to `Request`, its answer to `Reply` (if it is a new kind) and its arm to `execute`.
//!
//! The mount may be shared by users who do not trust each other, so the channel keeps bounds: the
//! socket is made with its final mode 0600 (bound inside a private directory, then moved beside
//! the image: never an instant with a wider mode); a peer that is neither root nor the mount's
//! owner (`SO_PEERCRED`) gets one error line and is closed; at most `MAX_CONNECTIONS` are served
//! at once (one more gets an error line); a request line longer than `MAX_LINE` gets an error line
//! and its connection is closed (background fsck sends its adjust in pieces of `ADJUST_ITEMS`);
//! an `accept` that fails for want of descriptors or memory is retried after a growing pause.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use sufs_fs::br::{BrRun, Reservation};
use sufs_fs::format::ROOT_INO;
use sufs_fs::fs::adjust::{Adjust, AdjustDone};
use sufs_fs::fs::mountopt::Remount;
use sufs_fs::fs::{lock, SharedFs};
use sufs_fs::fs::{Fs, FsError};
use sufs_fs::snapshot::SnapInfo;

/// A request to the mounted file system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Is anybody there? Answers the file system's block size and size in blocks.
    Ping,
    BrReserve {
        name: String,
        nblocks: u64,
        hint: Option<u64>,
    },
    BrQuery {
        name: String,
        offset: u64,
        count: u64,
    },
    BrExpand {
        name: String,
        nblocks: u64,
        hint: Option<u64>,
    },
    BrTruncate {
        name: String,
        block: u64,
    },
    BrFree {
        name: String,
    },
    BrList,
    /// Takes a snapshot `/.snap/NAME` (writers wait on the mount's lock meanwhile).
    SnapshotCreate {
        name: String,
    },
    SnapshotList,
    SnapshotDelete {
        name: String,
    },
    /// Background fsck's adjust: frees lost blocks and inodes, lowers link counts, each only
    /// if the live file system agrees (`Fs::fsck_adjust`); the rest is refused.
    FsckAdjust {
        adjust: sufs_fs::fs::adjust::Adjust,
    },
    /// Writes every delayed write, in soft updates' order, and answers once all of it is on
    /// disk (the kernel sends no syncfs to a FUSE server, so sync(1) never reaches a mount).
    Sync,
    /// A forced shutdown (FS_IOC_SHUTDOWN with its flags, which the ioctl through FUSE cannot
    /// carry): nothing more is written, every later request fails with EIO.
    Shutdown {
        mode: sufs_fs::fs::shutdown::Shutdown,
    },
    /// A remount (`sufs mount -o remount,...` and the mount helper): read-only or read-write,
    /// access times, sync and dirsync; answers the mount's state after it (no change: the
    /// state as it is).
    Remount {
        changes: sufs_fs::fs::mountopt::Remount,
    },
    /// The mount's statistics as `sufs mount --stats` writes them at unmount (`FsStats`: the
    /// device, the cache, and the FUSE messages served by opcode), while it runs.
    Stats,
    /// `sufs umount`, before it unmounts: the one request answered twice. At once `Watching`;
    /// then, once the mount's daemon has unmounted the file system (written everything and
    /// marked it clean, or failed to), `Unmounted` or the error that made the unmount fail.
    AwaitUnmount,
}

/// The answer to a request, one variant per kind of answer (several requests share one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// `Ping`: the file system's block size and size in blocks.
    Geometry { block_size: u32, blocks: u64 },
    /// `BrReserve`, `BrExpand`, `BrTruncate`: the reservation after the call.
    Reservation(Reservation),
    /// `BrQuery`: the physical runs of the range asked for.
    Runs { runs: Vec<BrRun> },
    /// `BrList`.
    Reservations { list: Vec<Reservation> },
    /// `BrFree`, `SnapshotDelete`: blocks given back to the file system.
    Released { blocks: u64 },
    /// `SnapshotCreate`.
    Snapshot(SnapInfo),
    /// `SnapshotList`.
    Snapshots { list: Vec<SnapInfo> },
    /// `FsckAdjust`: what the adjust did.
    Adjusted(AdjustDone),
    /// `Sync`, `Shutdown`: blocks written to answer it.
    Written { blocks: u64 },
    /// `Remount`: the mount's state after it.
    Mount(Remount),
    /// `Stats`: `FsStats` as JSON.
    Stats { stats: Value },
    /// `AwaitUnmount`'s first answer: the unmount's result will follow on this connection.
    Watching,
    /// `AwaitUnmount`'s second answer: the file system was unmounted and marked clean.
    Unmounted,
}

/// `Reply::into_NAME`: the answer as the one kind `NAME` expects, or a protocol error.
macro_rules! reply_into {
    ($($name:ident: $variant:ident $pat:tt => $out:expr, $ty:ty;)*) => {
        impl Reply {
            $(
                #[doc = concat!("The answer of a request answered by `Reply::", stringify!($variant), "`.")]
                pub fn $name(self) -> Result<$ty, CtlError> {
                    match self {
                        Reply::$variant $pat => Ok($out),
                        other => Err(CtlError::Protocol(format!(
                            "expected a {} answer, got {other:?}",
                            stringify!($variant)
                        ))),
                    }
                }
            )*
        }
    };
}

reply_into! {
    into_geometry: Geometry { block_size, blocks } => (block_size, blocks), (u32, u64);
    into_reservation: Reservation(r) => r, Reservation;
    into_runs: Runs { runs } => runs, Vec<BrRun>;
    into_reservations: Reservations { list } => list, Vec<Reservation>;
    into_released: Released { blocks } => blocks, u64;
    into_snapshot: Snapshot(s) => s, SnapInfo;
    into_snapshots: Snapshots { list } => list, Vec<SnapInfo>;
    into_adjusted: Adjusted(a) => a, AdjustDone;
    into_written: Written { blocks } => blocks, u64;
    into_mount: Mount(m) => m, Remount;
    into_stats: Stats { stats } => stats, Value;
    into_watching: Watching {} => (), ();
    into_unmounted: Unmounted {} => (), ();
}

/// The longest request line a mount reads (4 MiB): far above any request but a background fsck's
/// adjust, which is sent in pieces of `ADJUST_ITEMS` (each under 2 MiB as JSON).
pub const MAX_LINE: usize = 4 << 20;

/// Connections served at once; one more gets an error line and is closed.
pub const MAX_CONNECTIONS: usize = 32;

/// The most items (blocks, fragment runs, inodes, link counts) in one `FsckAdjust` request: a
/// block number is at most 21 bytes of JSON, a fragment run 46, an inode with its generation
/// 43, a link count 54, so a piece is under 2 MiB, half of `MAX_LINE` (block counts, up to 72
/// bytes, go half as many a piece).
pub const ADJUST_ITEMS: usize = 32_768;

/// `adjust` as requests of at most `ADJUST_ITEMS` items each, in its order (fragment runs, unreferenced inodes, leaked inodes, link counts, block counts): each item is checked
/// against the live state on its own, so the pieces do what the whole would.
pub fn adjust_requests(adjust: Adjust) -> Vec<Request> {
    let n = ADJUST_ITEMS;
    let mut out: Vec<Adjust> = Vec::new();
    out.extend(adjust.frags.chunks(n).map(|c| Adjust { frags: c.to_vec(), ..Default::default() }));
    out.extend(adjust.unreferenced.chunks(n).map(|c| Adjust { unreferenced: c.to_vec(), ..Default::default() }));
    out.extend(adjust.leaked_inodes.chunks(n).map(|c| Adjust { leaked_inodes: c.to_vec(), ..Default::default() }));
    out.extend(adjust.links.chunks(n).map(|c| Adjust { links: c.to_vec(), ..Default::default() }));
    // A block count is up to 72 bytes: half as many a piece.
    out.extend(adjust.counts.chunks(n / 2).map(|c| Adjust { counts: c.to_vec(), ..Default::default() }));
    out.into_iter().map(|adjust| Request::FsckAdjust { adjust }).collect()
}

#[derive(Debug, Error)]
pub enum CtlError {
    #[error("control channel {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("control channel: bad message: {0}")]
    Protocol(String),
    /// The file system refused the request.
    #[error("{message}")]
    Remote { message: String, errno: i32 },
}

impl CtlError {
    /// The errno of a refused request (EIO for a channel that failed).
    pub fn errno(&self) -> i32 {
        match self {
            CtlError::Remote { errno, .. } => *errno,
            _ => libc::EIO,
        }
    }
}

/// The control socket of an image: `IMAGE.ctl`.
pub fn socket_path(image: &Path) -> PathBuf {
    let mut s = image.as_os_str().to_owned();
    s.push(".ctl");
    PathBuf::from(s)
}

/// What a request changed behind the kernel's back. The kernel keeps names and attributes
/// that it learned from its own requests; a mount tells it of these (`CtlServer::on_stale`), or
/// it would go on showing a freed reservation, and hold its inode, until its cache lets go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stale {
    /// A name gone from directory `dir`.
    Entry { dir: u32, name: Vec<u8> },
    /// An inode's attributes and cached data.
    Inode(u32),
}

/// Where a mount's control channel reports what its requests made stale.
pub type StaleSink = Box<dyn Fn(&[Stale]) + Send + Sync>;

/// The result of the mount's unmount, for the connections waiting for it (`AwaitUnmount`).
#[derive(Default)]
struct Outcome {
    /// The result once the daemon has unmounted (None before), and how many waiting connections
    /// have not been sent it yet.
    state: Mutex<(Option<Result<(), String>>, usize)>,
    changed: Condvar,
}

impl Outcome {
    fn state(&self) -> std::sync::MutexGuard<'_, (Option<Result<(), String>>, usize)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the connections' threads share.
struct Shared {
    fs: SharedFs,
    stale: Arc<OnceLock<StaleSink>>,
    outcome: Arc<Outcome>,
    /// Connections being served, at most `MAX_CONNECTIONS`.
    active: AtomicUsize,
    /// The mount's owner (the daemon's user): with root, the only user served.
    owner: u32,
}

/// A running control channel; `stop` (or drop) closes it and removes the socket.
pub struct CtlServer {
    path: PathBuf,
    stale: Arc<OnceLock<StaleSink>>,
    outcome: Arc<Outcome>,
    /// The listening socket (owned by the thread), shut down to stop it.
    fd: RawFd,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl CtlServer {
    /// Listens on `path` (readable and writable by the mount's owner only). A socket left by a
    /// mount that died is replaced; one another mount still serves is not.
    pub fn start(path: &Path, fs: SharedFs) -> Result<CtlServer, CtlError> {
        let io = |source| CtlError::Io { path: path.to_path_buf(), source };
        if path.exists() && UnixStream::connect(path).is_ok() {
            return Err(io(std::io::Error::new(std::io::ErrorKind::AddrInUse, "another mount serves it")));
        }
        let listener = bind_private(path).map_err(io)?;
        let fd = listener.as_raw_fd();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let stale: Arc<OnceLock<StaleSink>> = Arc::new(OnceLock::new());
        let outcome = Arc::new(Outcome::default());
        // SAFETY: geteuid cannot fail and touches no memory.
        let owner = unsafe { libc::geteuid() };
        let shared =
            Arc::new(Shared { fs, stale: stale.clone(), outcome: outcome.clone(), active: AtomicUsize::new(0), owner });
        let thread = std::thread::Builder::new()
            .name("sufs-ctl".into())
            .spawn(move || accept_loop(listener, &flag, &shared))
            .map_err(io)?;
        Ok(CtlServer { path: path.to_path_buf(), stale, outcome, fd, stop, thread: Some(thread) })
    }

    /// From now on, what each request changed is reported to `sink` (once; a later call is
    /// ignored), after the request and outside the file system's lock.
    pub fn on_stale(&self, sink: StaleSink) {
        let _ = self.stale.set(sink);
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn stop(&mut self) {
        let Some(t) = self.thread.take() else { return };
        self.stop.store(true, Ordering::Release);
        // Wake the accept loop: shutting the listening socket down fails its accept (a connect
        // to the path would not reach it if the socket file was removed or its directory moved).
        // The thread owns the listener, so the descriptor is open until it is joined.
        unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
        let _ = t.join();
        let _ = std::fs::remove_file(&self.path);
    }

    /// The daemon has unmounted the file system (`result`: the error that made the unmount
    /// fail): tells every connection waiting for it (`AwaitUnmount`), and waits, 10 seconds at
    /// most, until each has been sent it. Only the first call's result counts.
    pub fn unmounted(&self, result: Result<(), String>) {
        let mut st = self.outcome.state();
        if st.0.is_none() {
            st.0 = Some(result);
        }
        self.outcome.changed.notify_all();
        let deadline = Instant::now() + Duration::from_secs(10);
        while st.1 > 0 {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else { break };
            st = self.outcome.changed.wait_timeout(st, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

impl Drop for CtlServer {
    fn drop(&mut self) {
        self.stop();
        self.unmounted(Err("the mount ended before its file system was unmounted".into()));
    }
}

/// Binds a listening socket at `path` whose mode is 0600 from its first instant: bound in a new
/// directory of mode 0700 beside it (nobody else can reach the socket there while its mode is
/// set), then renamed into place (the socket is its inode: it keeps listening under the new name).
pub(crate) fn bind_private(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::DirBuilderExt;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    let mut dir = path.as_os_str().to_owned();
    dir.push(format!(".{}.{nanos}", std::process::id()));
    let dir = PathBuf::from(dir);
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    let tmp = dir.join("s");
    let bound = UnixListener::bind(&tmp).and_then(|l| {
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&tmp, path)?;
        Ok(l)
    });
    if bound.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    let _ = std::fs::remove_dir(&dir);
    bound
}

/// Accepts connections until `stop` is set. An accept that fails (no descriptor left: EMFILE,
/// ENFILE; no memory) is retried after a pause that doubles up to a second, and said once per
/// run of failures, not once per try.
fn accept_loop(listener: UnixListener, stop: &AtomicBool, sh: &Arc<Shared>) {
    let mut pause = Duration::ZERO;
    let mut failed = 0u64;
    for conn in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            break;
        }
        match conn {
            Ok(c) => {
                if failed > 0 {
                    log::warn!("control channel: accepting again after {failed} failed accepts");
                }
                (failed, pause) = (0, Duration::ZERO);
                admit(c, sh);
            }
            Err(e) => {
                if failed == 0 {
                    log::warn!("control channel: accept: {e} (trying again after pauses of up to a second)");
                }
                failed += 1;
                pause = (pause * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                std::thread::sleep(pause);
            }
        }
    }
}

/// The user at the other end of a connection (`SO_PEERCRED`: who connected, as the kernel saw it).
pub(crate) fn peer_uid(c: &UnixStream) -> std::io::Result<u32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for the call, `len` is `cred`'s size.
    let r = unsafe {
        libc::getsockopt(
            c.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast::<libc::c_void>(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// An error answer as a line.
pub(crate) fn error_line(message: &str, errno: i32) -> String {
    let mut text = serde_json::json!({ "error": message, "errno": errno }).to_string();
    text.push('\n');
    text
}

/// Serves a new connection in a thread of its own, or refuses it with one error line: a peer
/// that is neither root nor the mount's owner, or one connection more than `MAX_CONNECTIONS`.
fn admit(mut c: UnixStream, sh: &Arc<Shared>) {
    let refusal = match peer_uid(&c) {
        Ok(uid) if uid == 0 || uid == sh.owner => None,
        Ok(uid) => Some((
            format!(
                "control channel: uid {uid} may not use this mount's control channel (root and uid {} may)",
                sh.owner
            ),
            libc::EACCES,
        )),
        Err(e) => Some((format!("control channel: cannot tell who connected: {e}"), libc::EACCES)),
    };
    let refusal = refusal.or_else(|| {
        (sh.active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS).then(|| {
            sh.active.fetch_sub(1, Ordering::AcqRel);
            (format!("control channel: {MAX_CONNECTIONS} connections are open already; try again later"), libc::EAGAIN)
        })
    });
    if let Some((message, errno)) = refusal {
        // A line into a new connection's empty buffer: the pause only guards against the odd case.
        let _ = c.set_write_timeout(Some(Duration::from_millis(100)));
        let _ = c.write_all(error_line(&message, errno).as_bytes());
        return;
    }
    let sh2 = sh.clone();
    let spawned = std::thread::Builder::new().name("sufs-ctl-conn".into()).spawn(move || {
        serve(c, &sh2);
        sh2.active.fetch_sub(1, Ordering::AcqRel);
    });
    if let Err(e) = spawned {
        sh.active.fetch_sub(1, Ordering::AcqRel);
        log::warn!("control channel: no thread for a connection: {e}");
    }
}

/// Serves one connection until the peer closes it (or sends a line longer than `MAX_LINE`, or
/// waits for the unmount).
fn serve(conn: UnixStream, sh: &Shared) {
    let Ok(mut out) = conn.try_clone() else { return };
    let mut lines = BufReader::new(conn);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut lines).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.len() > MAX_LINE {
            let _ = out.write_all(error_line(&format!("request longer than {MAX_LINE} bytes"), libc::E2BIG).as_bytes());
            return;
        }
        let text = match serde_json::from_slice::<Request>(&line) {
            Ok(Request::AwaitUnmount) => return await_unmount(&mut out, &sh.outcome),
            Ok(req) => answer(sh, req),
            Err(e) => error_line(&format!("bad request: {e}"), libc::EINVAL),
        };
        if out.write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}

/// Runs one request under the mount's lock and tells the kernel what it made stale; the answer
/// as a line.
fn answer(sh: &Shared, req: Request) -> String {
    let mut guard = lock(&sh.fs);
    let kept = sh.stale.get().map(|_| req.clone());
    let r = execute(&mut guard, req);
    let what = match &kept {
        Some(req) if r.is_ok() => stale_after(&mut guard, req),
        _ => Vec::new(),
    };
    drop(guard);
    if let Some(sink) = sh.stale.get().filter(|_| !what.is_empty()) {
        sink(&what);
    }
    match r {
        Ok(reply) => {
            let mut text = serde_json::json!({ "ok": reply }).to_string();
            text.push('\n');
            text
        }
        Err(e) => error_line(&e.to_string(), e.errno()),
    }
}

/// `AwaitUnmount`: counted as a waiter, answers `Watching`; then, once the daemon has unmounted
/// (`CtlServer::unmounted`), the result.
fn await_unmount(out: &mut UnixStream, outcome: &Outcome) {
    let line = |reply: Reply| format!("{}\n", serde_json::json!({ "ok": reply }));
    let mut st = outcome.state();
    st.1 += 1;
    drop(st);
    let _ = out.write_all(line(Reply::Watching).as_bytes());
    let mut st = outcome.state();
    while st.0.is_none() {
        st = outcome.changed.wait(st).unwrap_or_else(|e| e.into_inner());
    }
    let text = match &st.0 {
        Some(Err(message)) => error_line(message, libc::EIO),
        _ => line(Reply::Unmounted),
    };
    drop(st);
    let _ = out.write_all(text.as_bytes());
    outcome.state().1 -= 1;
    outcome.changed.notify_all();
}

/// What `req`, which has just succeeded on `fs`, made stale in a kernel's caches.
fn stale_after(fs: &mut Fs, req: &Request) -> Vec<Stale> {
    use sufs_fs::br::BR_DIR;
    use sufs_fs::snapshot::SNAP_DIR;
    let mut dir_of = |d: &[u8]| fs.lookup(ROOT_INO, d).ok().map(|(i, _)| i);
    match req {
        Request::BrFree { name } => dir_of(BR_DIR)
            .map(|dir| vec![Stale::Entry { dir, name: name.as_bytes().to_vec() }, Stale::Inode(dir)])
            .unwrap_or_default(),
        // `/.snap` goes with the last snapshot: then the root's entry is what is stale.
        Request::SnapshotDelete { name } => match dir_of(SNAP_DIR) {
            Some(dir) => vec![Stale::Entry { dir, name: name.as_bytes().to_vec() }, Stale::Inode(dir)],
            None => vec![Stale::Entry { dir: ROOT_INO, name: SNAP_DIR.to_vec() }, Stale::Inode(ROOT_INO)],
        },
        Request::BrReserve { name, .. }
        | Request::BrExpand { name, .. }
        | Request::BrTruncate { name, .. }
        | Request::SnapshotCreate { name } => {
            let top = if matches!(req, Request::SnapshotCreate { .. }) { SNAP_DIR } else { BR_DIR };
            let dir = dir_of(top);
            // The kernel may hold the new names as negative entries (`fuse::negative_entry`).
            let mut v = vec![Stale::Inode(ROOT_INO), Stale::Entry { dir: ROOT_INO, name: top.to_vec() }];
            if let Some(dir) = dir {
                v.push(Stale::Entry { dir, name: name.as_bytes().to_vec() });
                v.push(Stale::Inode(dir));
                v.extend(fs.lookup(dir, name.as_bytes()).ok().map(|(i, _)| Stale::Inode(i)));
                // Under the writeback cache the kernel keeps a regular file's size whatever
                // sufs answers: dropping the name lets it forget an inode nobody has open, and
                // the next lookup takes the new size (docs/vfs.md, "The writeback cache").
                if !matches!(req, Request::SnapshotCreate { .. }) {
                    v.push(Stale::Entry { dir, name: name.as_bytes().to_vec() });
                }
            }
            v
        }
        Request::FsckAdjust { adjust } => {
            adjust.links.iter().map(|l| l.ino).chain(adjust.counts.iter().map(|c| c.ino)).map(Stale::Inode).collect()
        }
        Request::Ping
        | Request::BrQuery { .. }
        | Request::BrList
        | Request::SnapshotList
        | Request::Sync
        | Request::Shutdown { .. } => Vec::new(),
        Request::Remount { .. } | Request::Stats | Request::AwaitUnmount => Vec::new(),
    }
}

/// Runs one request on a file system (the mount's, under its lock, or an image opened by the
/// command line).
pub fn execute(fs: &mut Fs, req: Request) -> Result<Reply, FsError> {
    Ok(match req {
        Request::Ping => Reply::Geometry { block_size: fs.sb.block_size, blocks: fs.sb.num_blocks },
        Request::BrReserve { name, nblocks, hint } => {
            Reply::Reservation(fs.brreserve(name.as_bytes(), nblocks, hint)?)
        }
        Request::BrQuery { name, offset, count } => Reply::Runs { runs: fs.brquery(name.as_bytes(), offset, count)? },
        Request::BrExpand { name, nblocks, hint } => Reply::Reservation(fs.brexpand(name.as_bytes(), nblocks, hint)?),
        Request::BrTruncate { name, block } => Reply::Reservation(fs.brtruncate(name.as_bytes(), block)?),
        Request::BrFree { name } => Reply::Released { blocks: fs.brfree(name.as_bytes())? },
        Request::BrList => Reply::Reservations { list: fs.brlist()? },
        Request::SnapshotCreate { name } => Reply::Snapshot(fs.snapshot_create(name.as_bytes())?),
        Request::SnapshotList => Reply::Snapshots { list: fs.snapshot_list()? },
        Request::SnapshotDelete { name } => Reply::Released { blocks: fs.snapshot_delete(name.as_bytes())? },
        Request::FsckAdjust { adjust } => Reply::Adjusted(fs.fsck_adjust(&adjust)?),
        Request::Sync => {
            let before = fs.stats().device.writes();
            fs.sync_all()?;
            Reply::Written { blocks: fs.stats().device.writes() - before }
        }
        Request::Shutdown { mode } => {
            let before = fs.stats().device.writes();
            fs.shutdown(mode);
            Reply::Written { blocks: fs.stats().device.writes() - before }
        }
        Request::Remount { changes } => Reply::Mount(fs.remount(&changes)?),
        // Plain numbers and strings: the conversion cannot fail (a NaN would become null).
        Request::Stats => Reply::Stats { stats: serde_json::to_value(fs.stats()).unwrap_or(Value::Null) },
        Request::AwaitUnmount => {
            return Err(FsError::Invalid("await_unmount: only a mount's control channel answers it"))
        }
    })
}

/// A connection to a mount's control channel.
pub struct CtlClient {
    path: PathBuf,
    out: UnixStream,
    lines: BufReader<UnixStream>,
}

impl CtlClient {
    pub fn connect(path: &Path) -> Result<CtlClient, CtlError> {
        let io = |source| CtlError::Io { path: path.to_path_buf(), source };
        let out = UnixStream::connect(path).map_err(io)?;
        // A request waits for the mount's lock; a long brexpand may take a while.
        out.set_read_timeout(Some(Duration::from_secs(600))).map_err(io)?;
        let lines = BufReader::new(out.try_clone().map_err(io)?);
        Ok(CtlClient { path: path.to_path_buf(), out, lines })
    }

    /// Sends one request and waits for its answer.
    pub fn call(&mut self, req: &Request) -> Result<Reply, CtlError> {
        let mut text = serde_json::to_string(req).map_err(|e| CtlError::Protocol(e.to_string()))?;
        text.push('\n');
        if let Err(source) = self.out.write_all(text.as_bytes()) {
            // A mount that refused the connection wrote why before closing it.
            return match self.next_answer() {
                Err(e @ CtlError::Remote { .. }) => Err(e),
                _ => Err(CtlError::Io { path: self.path.clone(), source }),
            };
        }
        self.next_answer()
    }

    /// `sufs umount`'s watch, set before it unmounts: the mount's daemon has counted this
    /// connection once this returns; `unmount_result` then waits for the result.
    pub fn await_unmount(&mut self) -> Result<(), CtlError> {
        self.call(&Request::AwaitUnmount)?.into_watching()
    }

    /// The unmount's result (after `await_unmount`): Ok once the file system is unmounted and
    /// marked clean, the daemon's error if that failed.
    pub fn unmount_result(&mut self) -> Result<(), CtlError> {
        self.next_answer()?.into_unmounted()
    }

    /// Reads the next answer line.
    fn next_answer(&mut self) -> Result<Reply, CtlError> {
        let io = |source| CtlError::Io { path: self.path.clone(), source };
        let mut line = String::new();
        if self.lines.read_line(&mut line).map_err(io)? == 0 {
            return Err(CtlError::Protocol("the mount closed the channel".into()));
        }
        let mut v: Value = serde_json::from_str(line.trim()).map_err(|e| CtlError::Protocol(e.to_string()))?;
        if let Some(ok) = v.get_mut("ok") {
            return serde_json::from_value(ok.take()).map_err(|e| CtlError::Protocol(format!("answer: {e}")));
        }
        let message = v.get("error").and_then(Value::as_str).unwrap_or("malformed answer").to_string();
        let errno = v.get("errno").and_then(Value::as_i64).unwrap_or(libc::EIO as i64) as i32;
        Err(CtlError::Remote { message, errno })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use sufs_fs::clock::SimClock;
    use sufs_fs::dev::MemDevice;
    use sufs_fs::fs::{mkfs, MkfsOptions, MountOptions};

    #[test]
    fn a_big_adjust_goes_in_pieces_under_the_longest_line() {
        use sufs_fs::fs::adjust::{CountAdjust, FragRun, InodeRef, LinkAdjust};
        let big = Adjust {
            unreferenced: vec![InodeRef { ino: 7, generation: u32::MAX }, InodeRef { ino: 8, generation: 1 }],
            leaked_inodes: vec![],
            links: (0..70_000)
                .map(|i| LinkAdjust { ino: u32::MAX - i, generation: u32::MAX, delta: u32::MAX })
                .collect(),
            frags: (0..40_000).map(|i| FragRun { fsb: u64::MAX - i, frags: u32::MAX }).collect(),
            counts: (0..40_000)
                .map(|i| CountAdjust { ino: u32::MAX - i, generation: u32::MAX, delta: i64::MIN })
                .collect(),
        };
        let reqs = adjust_requests(big.clone());
        let mut back = Adjust::default();
        for r in &reqs {
            assert!(serde_json::to_string(r).unwrap().len() < MAX_LINE / 2, "a piece near the longest line");
            let Request::FsckAdjust { adjust } = r else { panic!("{r:?}") };
            back.unreferenced.extend(&adjust.unreferenced);
            back.leaked_inodes.extend(&adjust.leaked_inodes);
            back.links.extend(&adjust.links);
            back.frags.extend(&adjust.frags);
            back.counts.extend(&adjust.counts);
        }
        assert_eq!(back, big, "every item once, in order");
        assert_eq!(reqs.len(), 2 + 1 + 3 + 3);
    }

    #[test]
    fn requests_round_trip_and_errors_come_back() {
        let dev = Arc::new(MemDevice::new(4096, 4096));
        mkfs(dev.clone(), &MkfsOptions { ..Default::default() }, (1, 0)).unwrap();
        let fs = Fs::mount(dev, MountOptions::default(), Arc::new(SimClock::new())).unwrap();
        let shared: SharedFs = Arc::new(Mutex::new(fs));
        let dir = tempfile::tempdir().unwrap();
        let path = socket_path(&dir.path().join("img"));
        let mut server = CtlServer::start(&path, shared.clone()).unwrap();
        assert!(CtlServer::start(&path, shared.clone()).is_err(), "a second server is refused");
        let mut c = CtlClient::connect(&path).unwrap();
        assert_eq!(c.call(&Request::Ping).unwrap().into_geometry().unwrap(), (4096, 4096));
        let stats = c.call(&Request::Stats).unwrap().into_stats().unwrap();
        assert_eq!(stats["fuse_messages"]["lookup"], 0, "in-process: no FUSE messages");
        let r = c.call(&Request::BrReserve { name: "s".into(), nblocks: 10, hint: None }).unwrap();
        assert_eq!(r.into_reservation().unwrap().blocks, 10);
        let runs = c.call(&Request::BrQuery { name: "s".into(), offset: 0, count: 10 }).unwrap();
        assert_eq!(runs.into_runs().unwrap().iter().map(|r| r.len).sum::<u64>(), 10);
        // An answer of another kind than the caller expects is a protocol error, not a panic.
        let e = c.call(&Request::BrList).unwrap().into_snapshots().unwrap_err();
        assert!(matches!(e, CtlError::Protocol(_)), "{e}");
        let e = c.call(&Request::BrFree { name: "nope".into() }).unwrap_err();
        assert_eq!(e.errno(), libc::ENOENT);
        // A malformed line gets an error, and the connection keeps working.
        c.out.write_all(b"{\"op\":\"explode\"}\n").unwrap();
        let mut line = String::new();
        c.lines.read_line(&mut line).unwrap();
        assert!(line.contains("bad request"), "{line}");
        assert_eq!(c.call(&Request::BrList).unwrap().into_reservations().unwrap().len(), 1);
        server.stop();
        assert!(!path.exists());
        assert!(CtlClient::connect(&path).is_err());
    }
}
