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

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::br::{BrRun, Reservation};
use crate::format::ROOT_INO;
use crate::fs::adjust::AdjustDone;
use crate::fs::mountopt::Remount;
use crate::fs::{lock, SharedFs};
use crate::fs::{Fs, FsError};
use crate::snapshot::SnapInfo;

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
        adjust: crate::fs::adjust::Adjust,
    },
    /// Writes every delayed write, in soft updates' order, and answers once all of it is on
    /// disk (the kernel sends no syncfs to a FUSE server, so sync(1) never reaches a mount).
    Sync,
    /// A forced shutdown (FS_IOC_SHUTDOWN with its flags, which the ioctl through FUSE cannot
    /// carry): nothing more is written, every later request fails with EIO.
    Shutdown {
        mode: crate::fs::shutdown::Shutdown,
    },
    /// A remount (`sufs mount -o remount,...` and the mount helper): read-only or read-write,
    /// access times, sync and dirsync; answers the mount's state after it (no change: the
    /// state as it is).
    Remount {
        changes: crate::fs::mountopt::Remount,
    },
    /// The mount's statistics as `sufs mount --stats` writes them at unmount (`FsStats`: the
    /// device, the cache, and the FUSE messages served by opcode), while it runs.
    Stats,
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

/// A running control channel; `stop` (or drop) closes it and removes the socket.
pub struct CtlServer {
    path: PathBuf,
    stale: Arc<OnceLock<StaleSink>>,
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
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(io(std::io::Error::new(std::io::ErrorKind::AddrInUse, "another mount serves it")));
            }
            std::fs::remove_file(path).map_err(io)?;
        }
        let listener = UnixListener::bind(path).map_err(io)?;
        let fd = listener.as_raw_fd();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let stale: Arc<OnceLock<StaleSink>> = Arc::new(OnceLock::new());
        let sink = stale.clone();
        let thread = std::thread::Builder::new()
            .name("sufs-ctl".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if flag.load(Ordering::Acquire) {
                        break;
                    }
                    match conn {
                        Ok(c) => {
                            let (fs, sink) = (fs.clone(), sink.clone());
                            let _ = std::thread::Builder::new()
                                .name("sufs-ctl-conn".into())
                                .spawn(move || serve(c, &fs, &sink));
                        }
                        Err(e) => log::warn!("control channel: accept: {e}"),
                    }
                }
            })
            .map_err(io)?;
        Ok(CtlServer { path: path.to_path_buf(), stale, fd, stop, thread: Some(thread) })
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
}

impl Drop for CtlServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Serves one connection until the peer closes it.
fn serve(conn: UnixStream, fs: &SharedFs, sink: &OnceLock<StaleSink>) {
    let Ok(mut out) = conn.try_clone() else { return };
    let mut lines = BufReader::new(conn);
    let mut line = String::new();
    loop {
        line.clear();
        match lines.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let answer = match serde_json::from_str::<Request>(line.trim()) {
            Ok(req) => {
                let mut guard = lock(fs);
                let kept = sink.get().map(|_| req.clone());
                let r = execute(&mut guard, req);
                let what = match &kept {
                    Some(req) if r.is_ok() => stale_after(&mut guard, req),
                    _ => Vec::new(),
                };
                drop(guard);
                if let Some(sink) = sink.get().filter(|_| !what.is_empty()) {
                    sink(&what);
                }
                match r {
                    Ok(reply) => serde_json::json!({ "ok": reply }),
                    Err(e) => serde_json::json!({ "error": e.to_string(), "errno": e.errno() }),
                }
            }
            Err(e) => serde_json::json!({ "error": format!("bad request: {e}"), "errno": libc::EINVAL }),
        };
        let mut text = answer.to_string();
        text.push('\n');
        if out.write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}

/// What `req`, which has just succeeded on `fs`, made stale in a kernel's caches.
fn stale_after(fs: &mut Fs, req: &Request) -> Vec<Stale> {
    use crate::br::BR_DIR;
    use crate::snapshot::SNAP_DIR;
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
        Request::FsckAdjust { adjust } => adjust.links.iter().map(|l| Stale::Inode(l.ino)).collect(),
        Request::Ping
        | Request::BrQuery { .. }
        | Request::BrList
        | Request::SnapshotList
        | Request::Sync
        | Request::Shutdown { .. } => Vec::new(),
        Request::Remount { .. } | Request::Stats => Vec::new(),
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
        let io = |source| CtlError::Io { path: self.path.clone(), source };
        let mut text = serde_json::to_string(req).map_err(|e| CtlError::Protocol(e.to_string()))?;
        text.push('\n');
        self.out.write_all(text.as_bytes()).map_err(io)?;
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
    use crate::clock::SimClock;
    use crate::dev::MemDevice;
    use crate::fs::{mkfs, MkfsOptions, MountOptions};
    use std::sync::Mutex;

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
