//! The crash tester (DESIGN.md "Crash states are tested, not argued"; soft updates §4 and §5 say
//! which inconsistencies a crash may leave). A workload, a deterministic function of a seed, runs
//! in-process over a `RecordingDevice`; every state the medium could hold after a power loss is
//! rebuilt from the log: each prefix of completed batches, and sampled subsets of the batch in
//! flight (a device may reorder writes within a batch). Each state is judged by `fsck::check`
//! (every finding carries its class) and by the promises the workload recorded: a name that
//! existed before the workload stays until an operation removes or renames it; a renamed inode
//! that was durable under its old name keeps the old or the new name; an fsync'ed file keeps its
//! name and contents from the moment fsync returns.
//!
//! Invariant: a verdict depends only on the crash image and on the promises whose interval covers
//! the state, never on the ordering mode, so a new mode (soft updates) needs no change here.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use thiserror::Error;

use crate::br::BrRun;
use crate::clock::SimClock;
use crate::dev::{BlockDevice, Counters, DevResult, DevStats, MemDevice, Record, RecordingDevice, WriteKind, WriteReq};
use crate::format::{DT_DIR, NDADDR, ROOT_INO};
use crate::fs::flight::Flight;
use crate::fs::{mkfs, Fs, FsError, FsResult, MkfsOptions, MountOptions, Ordering, RenameFlags, SetAttr};
use crate::fsck::{self, Class, Finding};
use crate::syncer::{Sweeper, SyncerOptions, UpdatePolicy};

/// The workloads, in the order `all` runs them.
pub const WORKLOADS: [&str; 17] = [
    "create-many",
    "remove-tree",
    "mkdir-rmdir",
    "rename-storm",
    "grow-indirect",
    "truncate",
    "hard-links",
    "fsync",
    "mix",
    "br",
    "snapshot",
    "swap-fsync",
    "ancestor-rename",
    "rename-over",
    "link-fsync",
    "rename-back",
    "rename-whiteout",
];

const BS: usize = 4096;
/// A batch this small has every single write tried alone and the batch minus each single write.
const SMALL_BATCH: usize = 8;

#[derive(Debug, Error)]
pub enum CrashError {
    #[error("unknown workload {0:?}; the workloads are: {list}", list = WORKLOADS.join(", "))]
    UnknownWorkload(String),
    #[error("{what}: {source}")]
    Fs { what: String, source: FsError },
}

/// How the recorded workload ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum End {
    /// Unmount for odd seeds, stop without unmount for even ones.
    Auto,
    /// Unmount: the last batches are the final flush and the clean superblock.
    Unmount,
    /// Stop without unmount: whatever the cache still holds never reaches the medium.
    Crash,
}

#[derive(Debug, Clone)]
pub struct CrashOptions {
    /// Random subsets tried of each in-flight batch larger than 8 writes.
    pub subsets: usize,
    /// Operations in the workload.
    pub ops: usize,
    /// Buffer cache of the recorded mount, in blocks: small, so that evictions write mid-workload.
    pub cache_blocks: usize,
    /// Size of the image in 4 KiB blocks.
    pub blocks: u64,
    pub end: End,
    /// Run an update policy's sweeps during the workload (their times scaled to the workload:
    /// PU every second, AIPU every 100 ms for buffers a second old, metadata every second)
    /// instead of the plain sweep every 20 operations.
    pub update: Option<UpdatePolicy>,
}

impl Default for CrashOptions {
    fn default() -> Self {
        CrashOptions { subsets: 8, ops: 80, cache_blocks: 64, blocks: 8192, end: End::Auto, update: None }
    }
}

// ------------------------------------------------------------------------------------- promises

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromiseKind {
    /// A name that existed before the workload, until an operation removes or renames it.
    Stable,
    /// An inode that existed before the workload stays reachable from the root by some name,
    /// whatever renames moved it (and its ancestors), until an operation removes it.
    Kept,
    /// A renamed inode keeps its old or its new name, if the old one was durable when the rename
    /// began.
    Rename,
    /// An fsync'ed file keeps its name and its contents from the moment fsync returned.
    Fsync,
    /// A Block Register reservation keeps its name and exactly its blocks from the moment a
    /// Block Register call on it returned.
    Reservation,
    /// A snapshot keeps its name and shows the file system of its moment (`contents`: the digest
    /// of the frozen tree) from the moment its creation returned until it is deleted.
    Snapshot,
}

/// What must hold in every crash state whose writes all lie in `[from, until)` (log positions).
#[derive(Debug, Clone)]
pub struct Promise {
    pub kind: PromiseKind,
    /// One of these paths names `ino` (the first is its name when the promise was made).
    pub paths: Vec<String>,
    pub ino: u32,
    /// The file's full contents (fsync).
    pub contents: Option<Vec<u8>>,
    /// A reservation's runs, as brquery answered (reservation).
    pub runs: Option<Vec<BrRun>>,
    pub from: usize,
    /// The start of the operation that next touches the name (or, with contents, the data).
    pub until: Option<usize>,
}

/// `p` is `q` or lies under directory `q`.
fn under(p: &str, q: &str) -> bool {
    p == q || (p.starts_with(q) && (q == "/" || p[q.len()..].starts_with('/')))
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("/", path),
    }
}

fn resolve(fs: &mut Fs, path: &str) -> FsResult<u32> {
    let mut ino = ROOT_INO;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = fs.lookup(ino, part.as_bytes())?.0;
    }
    Ok(ino)
}

/// Every inode reachable from the root through directory entries.
fn reachable_inodes(fs: &mut Fs) -> HashSet<u32> {
    let mut seen = HashSet::from([ROOT_INO]);
    let mut queue = vec![ROOT_INO];
    while let Some(d) = queue.pop() {
        let Ok(entries) = fs.readdir(d, 0, usize::MAX) else { continue };
        for e in entries {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            if seen.insert(e.ino) && e.dtype == DT_DIR {
                queue.push(e.ino);
            }
        }
    }
    seen
}

// ------------------------------------------------------------------------------------- work

/// A workload's view of the file system: operations by path, each labelled with the log position
/// where it began, and the promises they make.
pub struct Work<'a> {
    fs: &'a mut Fs,
    rng: &'a mut SmallRng,
    clock: &'a SimClock,
    /// None during setup, which is not recorded.
    rec: Option<&'a RecordingDevice<MemDevice>>,
    ops: Vec<(usize, String)>,
    promises: Vec<Promise>,
    count: u64,
    sweeper: Option<Sweeper>,
    /// The plain sweep's last batch, left in flight across the next operation (as the mount's
    /// syncer writes outside the lock while requests go on), landed at the next `begin`.
    flight: Option<Arc<Flight>>,
}

impl Work<'_> {
    fn pos(&self) -> usize {
        self.rec.map_or(0, |r| r.log_len())
    }

    /// Starts an operation: time moves 50 ms, and every 20 operations the syncer's sweep writes
    /// the buffers dirty for a second, as a mounted file system's would.
    fn begin(&mut self, what: String) -> FsResult<usize> {
        self.count += 1;
        self.clock.advance(50_000_000);
        if let Some(sw) = self.sweeper.as_mut() {
            if sw.next_due() <= self.fs.now_ns() {
                self.ops.push((self.rec.map_or(0, |r| r.log_len()), "syncer sweep".into()));
                sw.tick(self.fs)?;
            }
        } else {
            if let Some(flight) = self.flight.take() {
                self.ops.push((self.pos(), "syncer batch lands".into()));
                flight.issue();
                self.fs.land_flight()?;
                self.fs.run_tasks()?;
            }
            if self.count.is_multiple_of(20) {
                self.ops.push((self.pos(), "syncer sweep".into()));
                self.sweep()?;
            }
        }
        self.fs.drop_idle_records();
        let pos = self.pos();
        self.ops.push((pos, what));
        Ok(pos)
    }

    /// The mount syncer's sweep of buffers dirty for a second: under sync ordering in order,
    /// under the lock; else as flights, the last left in flight across the next operation.
    fn sweep(&mut self) -> FsResult<()> {
        if self.fs.ordering() == Ordering::Sync {
            self.fs.flush_older_than(1_000_000_000)?;
            return Ok(());
        }
        let plan = self.fs.plan_delayed(self.fs.dirty_blocks(Some(1_000_000_000)), 1024);
        let last = plan.len().saturating_sub(1);
        for (i, chunk) in plan.iter().enumerate() {
            let Some(flight) = self.fs.start_flight(chunk, WriteKind::Async)? else { continue };
            if i == last {
                self.flight = Some(flight);
            } else {
                flight.issue();
                self.fs.land_flight()?;
            }
        }
        self.fs.run_tasks()
    }

    fn close(&mut self, pos: usize, pred: impl Fn(&Promise) -> bool) {
        for p in self.promises.iter_mut().filter(|p| p.until.is_none()) {
            if pred(p) {
                p.until = Some(pos);
            }
        }
    }

    /// The name `path` (and everything under it) is about to change.
    fn touch_name(&mut self, pos: usize, path: &str) {
        self.close(pos, |p| p.paths.iter().any(|q| under(q, path)));
    }

    /// The contents of `ino` are about to change.
    fn touch_data(&mut self, pos: usize, ino: u32) {
        self.close(pos, |p| p.contents.is_some() && p.ino == ino);
    }

    fn resolve(&mut self, path: &str) -> FsResult<u32> {
        resolve(self.fs, path)
    }

    fn size(&mut self, path: &str) -> FsResult<u64> {
        let ino = self.resolve(path)?;
        Ok(self.fs.getattr(ino)?.size)
    }

    fn parent(&mut self, path: &str) -> FsResult<(u32, String)> {
        let (dir, name) = split(path);
        Ok((self.resolve(dir)?, name.to_string()))
    }

    fn data(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.rng.fill(&mut v[..]);
        v
    }

    /// A name of `prefix` and `i`, padded to a random length so that directories grow unevenly.
    fn name(&mut self, prefix: &str, i: usize) -> String {
        let pad = self.rng.gen_range(0..48);
        format!("{prefix}{i}{}", "-".repeat(pad))
    }

    /// Every entry under `dir` (path, is a directory), parents before children.
    fn walk(&mut self, dir: &str) -> FsResult<Vec<(String, bool, u32)>> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_string()];
        while let Some(d) = stack.pop() {
            let ino = self.resolve(&d)?;
            for e in self.fs.readdir(ino, 0, usize::MAX)? {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let p = join(&d, &String::from_utf8_lossy(&e.name));
                let is_dir = self.fs.getattr(e.ino)?.is_dir();
                if is_dir {
                    stack.push(p.clone());
                }
                out.push((p, is_dir, e.ino));
            }
        }
        Ok(out)
    }

    fn mkdir(&mut self, path: &str) -> FsResult<u32> {
        let pos = self.begin(format!("mkdir {path}"))?;
        self.touch_name(pos, path);
        let (d, n) = self.parent(path)?;
        Ok(self.fs.mkdir(d, n.as_bytes(), 0o755, 0, 0)?.0)
    }

    fn create(&mut self, path: &str, len: usize) -> FsResult<u32> {
        let pos = self.begin(format!("create {path} ({len} bytes)"))?;
        self.touch_name(pos, path);
        let (d, n) = self.parent(path)?;
        let ino = self.fs.create(d, n.as_bytes(), 0o644, 0, 0)?.0;
        if len > 0 {
            let data = self.data(len);
            self.fs.write(ino, 0, &data)?;
        }
        Ok(ino)
    }

    /// Files `{prefix}{i}` for i in 0..n, of `len(i)` bytes each; their paths.
    fn create_files(&mut self, prefix: &str, n: usize, len: impl Fn(usize) -> usize) -> FsResult<Vec<String>> {
        (0..n).map(|i| self.create(&format!("{prefix}{i}"), len(i)).map(|_| format!("{prefix}{i}"))).collect()
    }

    fn write(&mut self, path: &str, off: u64, len: usize) -> FsResult<()> {
        let pos = self.begin(format!("write {path} at {off} ({len} bytes)"))?;
        let ino = self.resolve(path)?;
        self.touch_data(pos, ino);
        let data = self.data(len);
        self.fs.write(ino, off, &data)?;
        Ok(())
    }

    fn truncate(&mut self, path: &str, size: u64) -> FsResult<()> {
        let pos = self.begin(format!("truncate {path} to {size}"))?;
        let ino = self.resolve(path)?;
        self.touch_data(pos, ino);
        self.fs.setattr(ino, &SetAttr { size: Some(size), ..Default::default() })?;
        Ok(())
    }

    /// The inode at `path` is about to be removed: it need no longer be reachable.
    fn touch_inode(&mut self, pos: usize, path: &str) {
        if let Ok(ino) = self.resolve(path) {
            self.close(pos, |p| p.kind == PromiseKind::Kept && p.ino == ino);
        }
    }

    fn unlink(&mut self, path: &str) -> FsResult<()> {
        let pos = self.begin(format!("unlink {path}"))?;
        self.touch_name(pos, path);
        self.touch_inode(pos, path);
        let (d, n) = self.parent(path)?;
        self.fs.unlink(d, n.as_bytes())
    }

    fn rmdir(&mut self, path: &str) -> FsResult<()> {
        let pos = self.begin(format!("rmdir {path}"))?;
        self.touch_name(pos, path);
        self.touch_inode(pos, path);
        let (d, n) = self.parent(path)?;
        self.fs.rmdir(d, n.as_bytes())
    }

    fn link(&mut self, existing: &str, new: &str) -> FsResult<()> {
        let pos = self.begin(format!("link {existing} {new}"))?;
        self.touch_name(pos, new);
        let ino = self.resolve(existing)?;
        let (d, n) = self.parent(new)?;
        self.fs.link(ino, d, n.as_bytes())?;
        Ok(())
    }

    fn rename(&mut self, from: &str, to: &str) -> FsResult<()> {
        self.rename_as(from, to, false)
    }

    /// A rename that leaves a whiteout (a character device) at `from` (RENAME_WHITEOUT): the
    /// renamed inode keeps its old or its new name, as in any rename.
    fn rename_whiteout(&mut self, from: &str, to: &str) -> FsResult<()> {
        self.rename_as(from, to, true)
    }

    fn rename_as(&mut self, from: &str, to: &str, whiteout: bool) -> FsResult<()> {
        let what = if whiteout { "rename (whiteout)" } else { "rename" };
        let pos = self.begin(format!("{what} {from} {to}"))?;
        let ino = self.resolve(from)?;
        // A chain of renames (a to b, b to c): until the last is on disk, the file may still be
        // named by an earlier name of the chain (an old name stays until its new one is on disk).
        let mut chain = Vec::new();
        let mut cur = from.to_string();
        for p in self.promises.iter().rev().filter(|p| p.kind == PromiseKind::Rename && p.ino == ino) {
            if p.paths[1] == cur {
                cur = p.paths[0].clone();
                chain.push(cur.clone());
            }
        }
        self.touch_name(pos, from);
        self.touch_name(pos, to);
        if self.resolve(to).is_ok_and(|t| t != ino) {
            self.touch_inode(pos, to);
        }
        let (d, n) = self.parent(from)?;
        let (nd, nn) = self.parent(to)?;
        if whiteout {
            self.fs.rename_whiteout(d, n.as_bytes(), nd, nn.as_bytes(), false, (0, 0))?;
        } else {
            self.fs.rename(d, n.as_bytes(), nd, nn.as_bytes(), RenameFlags::default())?;
        }
        if self.rec.is_some() && from != to {
            self.promises.push(Promise {
                kind: PromiseKind::Rename,
                paths: {
                    let mut paths = vec![from.to_string(), to.to_string()];
                    for q in chain {
                        if !paths.contains(&q) {
                            paths.push(q);
                        }
                    }
                    paths
                },
                ino,
                contents: None,
                runs: None,
                from: pos,
                until: None,
            });
        }
        Ok(())
    }

    fn fsync(&mut self, path: &str) -> FsResult<()> {
        self.begin(format!("fsync {path}"))?;
        let ino = self.resolve(path)?;
        self.fs.fsync(ino)?;
        let size = self.fs.getattr(ino)?.size;
        let contents = self.fs.read(ino, 0, size as usize)?;
        if self.rec.is_some() {
            let from = self.pos();
            self.promises.push(Promise {
                kind: PromiseKind::Fsync,
                paths: vec![path.to_string()],
                ino,
                contents: Some(contents),
                runs: None,
                from,
                until: None,
            });
        }
        Ok(())
    }

    /// A Block Register call on reservation `name`; once it returns, the reservation (if it
    /// still exists) keeps its name and exactly the blocks brquery answers.
    fn br(&mut self, what: String, name: &str, call: impl FnOnce(&mut Fs) -> FsResult<()>) -> FsResult<()> {
        let pos = self.begin(what)?;
        let path = format!("/.br/{name}");
        self.touch_name(pos, &path);
        call(self.fs)?;
        let Ok(ino) = self.resolve(&path) else { return Ok(()) };
        let runs = self.fs.brquery(name.as_bytes(), 0, u64::MAX)?;
        if self.rec.is_some() {
            let from = self.pos();
            let paths = vec![path];
            self.promises.push(Promise {
                kind: PromiseKind::Reservation,
                paths,
                ino,
                contents: None,
                runs: Some(runs),
                from,
                until: None,
            });
        }
        Ok(())
    }
}

// ------------------------------------------------------------------------------------- workloads

/// A workload: a setup that is not recorded, then steps, each one or a few operations.
trait Workload {
    fn setup(&mut self, w: &mut Work) -> FsResult<()>;
    /// One step; false when there is nothing left to do.
    fn step(&mut self, w: &mut Work) -> FsResult<bool>;
}

fn make_workload(name: &str, ops: usize) -> Option<Box<dyn Workload>> {
    Some(match name {
        "create-many" => Box::new(CreateMany::default()),
        "remove-tree" => Box::new(RemoveTree { ops, queue: Vec::new() }),
        "mkdir-rmdir" => Box::new(MkdirRmdir::default()),
        "rename-storm" => Box::new(RenameStorm::default()),
        "grow-indirect" => Box::new(GrowIndirect { ops, done: 0, pos: 0 }),
        "truncate" => Box::new(Truncate),
        "hard-links" => Box::new(HardLinks::default()),
        "fsync" => Box::new(FsyncWork::default()),
        "swap-fsync" => Box::new(SwapFsync::default()),
        "ancestor-rename" => Box::new(AncestorRename::default()),
        "rename-over" => Box::new(RenameOver::default()),
        "link-fsync" => Box::new(LinkFsync::default()),
        "rename-back" => Box::new(RenameBack::default()),
        "rename-whiteout" => Box::new(RenameWhiteout::default()),
        "br" => Box::new(BrWork::default()),
        "snapshot" => Box::new(SnapWork::default()),
        "mix" => {
            let each = (ops / 8).max(4);
            let subs = WORKLOADS[..8].iter().filter_map(|n| make_workload(n, each)).map(|w| (w, true)).collect();
            Box::new(Mix { subs })
        }
        _ => return None,
    })
}

/// A digest of a file tree (every name, type and file's bytes, but `/.snap`), in a fixed order.
fn tree_digest(fs: &mut Fs) -> FsResult<Vec<u8>> {
    let mut out = Vec::new();
    let mut stack = vec![(ROOT_INO, String::new())];
    while let Some((dir, path)) = stack.pop() {
        let mut entries = fs.readdir(dir, 0, usize::MAX)?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        for e in entries {
            if e.name == b"." || e.name == b".." || (dir == ROOT_INO && e.name == b".snap") {
                continue;
            }
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let d = fs.iget(e.ino)?;
            out.extend_from_slice(p.as_bytes());
            out.push(0);
            if d.is_dir() {
                out.push(b'd');
                stack.push((e.ino, p));
            } else {
                let data = fs.read(e.ino, 0, d.size as usize)?;
                out.extend_from_slice(&(data.len() as u64).to_le_bytes());
                out.extend_from_slice(&crc32c::crc32c(&data).to_le_bytes());
            }
        }
    }
    Ok(out)
}

/// The digest of the frozen tree of snapshot `name` on a crash image.
fn frozen_digest(img: &Arc<CrashImage>, name: &str) -> FsResult<Vec<u8>> {
    let live = Fs::mount(img.clone(), readonly(), Arc::new(SimClock::new()))?;
    let frozen = crate::snapshot::FrozenDevice::new(crate::snapshot::shared(live), name.as_bytes())?;
    let mut fs = Fs::mount(Arc::new(frozen), readonly(), Arc::new(SimClock::new()))?;
    tree_digest(&mut fs)
}

/// Files overwritten, grown, truncated and removed while snapshots are taken and deleted: every
/// snapshot must keep showing the tree of its moment in every crash state (copy-on-write and
/// claims ordered before the overwrite and the reuse).
#[derive(Default)]
struct SnapWork {
    files: Vec<String>,
    snaps: Vec<String>,
    n: usize,
}

impl Workload for SnapWork {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/s")?;
        self.files = w.create_files("/s/f", 6, |i| 3000 + i * 9000)?;
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        match w.rng.gen_range(0..14) {
            0..=1 if self.snaps.len() < 3 => {
                let name = format!("s{n}");
                let pos = w.begin(format!("snapshot create {name}"))?;
                let path = format!("/.snap/{name}");
                w.touch_name(pos, &path);
                w.fs.snapshot_create(name.as_bytes())?;
                let ino = w.resolve(&path)?;
                let mut ffs = {
                    let d = w.fs.snapshot_ino(name.as_bytes())?;
                    debug_assert_eq!(d, ino);
                    let bs = w.fs.sb.block_size as usize;
                    let mut img = Vec::with_capacity(w.fs.sb.num_blocks as usize * bs);
                    let mut buf = vec![0u8; bs];
                    for x in 0..w.fs.sb.num_blocks {
                        w.fs.snapshot_block(ino, x, &mut buf)?;
                        img.extend_from_slice(&buf);
                    }
                    let mem = Arc::new(MemDevice::new(bs, w.fs.sb.num_blocks));
                    let reqs: Vec<crate::dev::WriteReq> = img
                        .chunks(bs)
                        .enumerate()
                        .map(|(i, c)| crate::dev::WriteReq { bno: i as u64, data: c })
                        .collect();
                    mem.write_batch(&reqs, crate::dev::WriteKind::Sync)?;
                    Fs::mount(mem, readonly(), Arc::new(SimClock::new()))?
                };
                let digest = tree_digest(&mut ffs)?;
                if w.rec.is_some() {
                    let from = w.pos();
                    w.promises.push(Promise {
                        kind: PromiseKind::Snapshot,
                        paths: vec![path],
                        ino,
                        contents: Some(digest),
                        runs: None,
                        from,
                        until: None,
                    });
                }
                self.snaps.push(name);
            }
            2 => {
                if self.snaps.is_empty() {
                    return Ok(true);
                }
                let name = self.snaps.remove(w.rng.gen_range(0..self.snaps.len()));
                let pos = w.begin(format!("snapshot delete {name}"))?;
                w.touch_name(pos, &format!("/.snap/{name}"));
                w.fs.snapshot_delete(name.as_bytes())?;
            }
            3..=7 => {
                if let Some(p) = pick(w.rng, &self.files) {
                    let off = w.rng.gen_range(0..80_000);
                    let len = w.rng.gen_range(1..20_000);
                    w.write(&p, off, len)?;
                }
            }
            8 => {
                if let Some(p) = pick(w.rng, &self.files) {
                    let size = w.size(&p)?;
                    let to = w.rng.gen_range(0..=size);
                    w.truncate(&p, to)?;
                }
            }
            9..=10 => {
                let p = format!("/s/n{n}");
                let len = w.rng.gen_range(0..60_000);
                w.create(&p, len)?;
                self.files.push(p);
            }
            11 => {
                if let Some(p) = pick(w.rng, &self.files) {
                    w.fsync(&p)?;
                }
            }
            _ => {
                if let Some(p) = pick(w.rng, &self.files) {
                    w.unlink(&p)?;
                    self.files.retain(|x| *x != p);
                }
            }
        }
        Ok(true)
    }
}

fn pick<T: Clone>(rng: &mut SmallRng, v: &[T]) -> Option<T> {
    (!v.is_empty()).then(|| v[rng.gen_range(0..v.len())].clone())
}

/// Many files, of a few sizes, in two directories that grow past a block; some removed, among
/// them names made before the workload.
#[derive(Default)]
struct CreateMany {
    pre: Vec<String>,
    files: Vec<String>,
    n: usize,
}

impl Workload for CreateMany {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/cm")?;
        w.mkdir("/cm/sub")?;
        for i in 0..8 {
            let p = format!("/cm/pre{i}");
            let len = w.rng.gen_range(0..6000);
            w.create(&p, len)?;
            self.pre.push(p);
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        let r = w.rng.gen_range(0..10);
        if r < 7 || self.files.is_empty() {
            self.n += 1;
            let dir = if w.rng.gen_bool(0.7) { "/cm" } else { "/cm/sub" };
            let name = w.name("f", self.n);
            let p = join(dir, &name);
            let len = [0, 100, 4096, 9000][w.rng.gen_range(0..4)];
            w.create(&p, len)?;
            self.files.push(p);
        } else {
            let list = if r < 9 || self.pre.is_empty() { &mut self.files } else { &mut self.pre };
            let p = list.swap_remove(w.rng.gen_range(0..list.len()));
            w.unlink(&p)?;
        }
        Ok(true)
    }
}

/// Trees made before the workload removed one entry at a time, children first.
struct RemoveTree {
    ops: usize,
    /// What is left to remove, last first (path, is a directory).
    queue: Vec<(String, bool)>,
}

impl Workload for RemoveTree {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/rt")?;
        w.mkdir("/rt/keep")?;
        w.create("/rt/keep/file", 3000)?;
        let trees = (self.ops / 16).max(1);
        let per = (self.ops / trees).max(6);
        let mut order = Vec::new();
        for t in 0..trees {
            let root = format!("/rt/t{t}");
            let dirs = [root.clone(), format!("{root}/a"), format!("{root}/a/b"), format!("{root}/c")];
            for d in &dirs {
                w.mkdir(d)?;
            }
            // Files spread over the directories; the removal order is post-order.
            let mut files: Vec<Vec<String>> = vec![Vec::new(); dirs.len()];
            for i in 0..per.saturating_sub(dirs.len()) {
                let k = w.rng.gen_range(0..dirs.len());
                let name = w.name("f", i);
                let p = join(&dirs[k], &name);
                let len = [0, 700, 5000][w.rng.gen_range(0..3)];
                w.create(&p, len)?;
                files[k].push(p);
            }
            for k in [2, 1, 3, 0] {
                order.extend(files[k].drain(..).map(|p| (p, false)));
                order.push((dirs[k].clone(), true));
            }
        }
        order.reverse();
        self.queue = order;
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        let Some((p, is_dir)) = self.queue.pop() else {
            return Ok(false);
        };
        if is_dir {
            w.rmdir(&p)?;
        } else {
            w.unlink(&p)?;
        }
        Ok(true)
    }
}

/// Directories nested up to six deep, made and removed at random, a few files among them.
#[derive(Default)]
struct MkdirRmdir {
    dirs: Vec<String>,
    files: Vec<String>,
    n: usize,
}

impl Workload for MkdirRmdir {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        for d in ["/mr", "/mr/p0", "/mr/p1", "/mr/p0/q"] {
            w.mkdir(d)?;
        }
        self.dirs = vec!["/mr/p0".into(), "/mr/p1".into(), "/mr/p0/q".into()];
        w.create("/mr/p0/file", 100)?;
        self.files.push("/mr/p0/file".into());
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let r = w.rng.gen_range(0..20);
        let empty: Vec<String> = self
            .dirs
            .iter()
            .filter(|d| !self.dirs.iter().chain(&self.files).any(|x| x != *d && under(x, d)))
            .cloned()
            .collect();
        if r < 11 || empty.is_empty() {
            let mut parents: Vec<String> = self.dirs.iter().filter(|d| d.matches('/').count() < 7).cloned().collect();
            parents.push("/mr".into());
            let parent = pick(w.rng, &parents).unwrap_or_else(|| "/mr".into());
            let name = w.name("n", self.n);
            let p = join(&parent, &name);
            w.mkdir(&p)?;
            self.dirs.push(p);
        } else if r < 17 {
            let d = pick(w.rng, &empty).unwrap_or_default();
            w.rmdir(&d)?;
            self.dirs.retain(|x| *x != d);
        } else if r < 19 || self.files.is_empty() {
            let parent = pick(w.rng, &self.dirs).unwrap_or_else(|| "/mr".into());
            let p = join(&parent, &format!("file{}", self.n));
            w.create(&p, 200)?;
            self.files.push(p);
        } else {
            let i = w.rng.gen_range(0..self.files.len());
            let p = self.files.swap_remove(i);
            w.unlink(&p)?;
        }
        Ok(true)
    }
}

/// Renames of files and directories, within and across directories, to new names and over
/// existing ones (a file over a file, a directory over an empty directory).
#[derive(Default)]
struct RenameStorm {
    n: usize,
}

impl Workload for RenameStorm {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        for d in ["/rs", "/rs/a", "/rs/b", "/rs/c", "/rs/a/x", "/rs/b/y", "/rs/c/e0", "/rs/c/e1"] {
            w.mkdir(d)?;
        }
        for (dir, k) in [("/rs/a", 4), ("/rs/b", 4), ("/rs/c", 3), ("/rs/b/y", 2), ("/rs/a/x", 1)] {
            for i in 0..k {
                let len = w.rng.gen_range(0..5000);
                w.create(&format!("{dir}/f{i}"), len)?;
            }
        }
        // A directory whose first block is full (63 entries of 64 bytes after "." and ".."), so
        // that a rename into it grows it by a block.
        w.mkdir("/rs/full")?;
        for i in 0..63 {
            w.create(&format!("/rs/full/{i:02}{}", "-".repeat(53)), 0)?;
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let all = w.walk("/rs")?;
        let mut dirs: Vec<String> = all.iter().filter(|e| e.1).map(|e| e.0.clone()).collect();
        dirs.push("/rs".into());
        let r = w.rng.gen_range(0..20);
        if r == 2 {
            // A directory emptied by renaming its files out, then removed at once: its name must
            // stay on disk until the files' new names are reachable.
            let leaves: Vec<&String> = dirs
                .iter()
                .filter(|d| d.as_str() != "/rs" && d.as_str() != "/rs/full")
                .filter(|d| !all.iter().any(|e| e.1 && split(&e.0).0 == d.as_str()))
                .collect();
            if let Some(d) = pick(w.rng, &leaves).cloned() {
                let files: Vec<String> = all.iter().filter(|e| split(&e.0).0 == d).map(|e| e.0.clone()).collect();
                // Out to /rs, or into a directory made now (not reachable on disk yet).
                let to_dir = if w.rng.gen_bool(0.5) {
                    let p = format!("/rs/new{}", self.n);
                    w.mkdir(&p)?;
                    p
                } else {
                    "/rs".to_string()
                };
                for (i, f) in files.iter().enumerate() {
                    let to = join(&to_dir, &w.name(&format!("out{i}-"), self.n));
                    w.rename(f, &to)?;
                }
                w.rmdir(&d)?;
                return Ok(true);
            }
        }
        if r == 3 {
            // A name reused at once: its entry moves into a new directory (so its old name stays
            // on disk, hidden), and a new file takes the name and is fsync'ed. The new entry
            // must not land behind the hidden one, where a lookup after a crash finds the old.
            // The name is taken by a new file, fsync'ed; or by another file renamed there; or by
            // a new directory, a file then moved into it.
            let movable: Vec<String> =
                all.iter().filter(|e| split(&e.0).0 != "/rs/full").map(|e| e.0.clone()).collect();
            if let Some(src) = pick(w.rng, &movable) {
                let (parent, _) = split(&src);
                let p = join(parent, &format!("new{}", self.n));
                w.mkdir(&p)?;
                let to = join(&p, &w.name("m", self.n));
                w.rename(&src, &to)?;
                let files: Vec<String> =
                    all.iter().filter(|e| !e.1 && !under(&e.0, &src)).map(|e| e.0.clone()).collect();
                match w.rng.gen_range(0..3) {
                    0 => {
                        w.create(&src, 700)?;
                        w.fsync(&src)?;
                    }
                    1 if !files.is_empty() => {
                        let f = pick(w.rng, &files).expect("not empty");
                        w.rename(&f, &src)?;
                    }
                    _ => {
                        w.mkdir(&src)?;
                        if let Some(f) = pick(w.rng, &files) {
                            let to = join(&src, &w.name("m", self.n));
                            w.rename(&f, &to)?;
                        }
                    }
                }
                return Ok(true);
            }
        }
        if r < 2 || all.len() < 4 {
            let parent = pick(w.rng, &dirs).unwrap_or_else(|| "/rs".into());
            let p = join(&parent, &format!("new{}", self.n));
            if r == 0 {
                // A new directory, and at once a file renamed into it: the new name is on disk
                // before the directory is reachable, so the old name must stay until it is.
                w.mkdir(&p)?;
                let files: Vec<&(String, bool, u32)> = all.iter().filter(|e| !e.1).collect();
                if let Some((f, _, _)) = pick(w.rng, &files) {
                    let to = join(&p, &w.name("m", self.n));
                    w.rename(f, &to)?;
                }
            } else {
                w.create(&p, 1500)?;
            }
            return Ok(true);
        }
        // Mostly not the many names of /rs/full.
        let movable: Vec<&(String, bool, u32)> =
            all.iter().filter(|e| split(&e.0).0 != "/rs/full" || w.rng.gen_bool(0.1)).collect();
        let (src, src_dir, _) = match pick(w.rng, &movable) {
            Some(e) => e.clone(),
            None => return Ok(true),
        };
        let (src_parent, _) = split(&src);
        let targets: Vec<String> = dirs.iter().filter(|d| !src_dir || !under(d, &src)).cloned().collect();
        let dst_dir = if w.rng.gen_bool(0.3) {
            src_parent.to_string()
        } else {
            pick(w.rng, &targets).unwrap_or_else(|| "/rs".into())
        };
        // Over an existing name of the same kind, or to a new name.
        let over: Vec<String> = all
            .iter()
            .filter(|e| split(&e.0).0 == dst_dir && e.1 == src_dir && e.0 != src)
            .filter(|e| !e.1 || !all.iter().any(|x| x.0 != e.0 && under(&x.0, &e.0)))
            .filter(|e| !under(&e.0, &src) && !under(&src, &e.0))
            .map(|e| e.0.clone())
            .collect();
        let dst = match pick(w.rng, &over) {
            Some(o) if w.rng.gen_bool(0.5) => o,
            _ => join(&dst_dir, &w.name("r", self.n)),
        };
        w.rename(&src, &dst)?;
        if src_dir && w.rng.gen_bool(0.3) {
            // The same directory moved again at once, while its first rename is in flight.
            let again: Vec<&String> = dirs.iter().filter(|d| !under(d, &src) && !under(d, &dst)).collect();
            if let Some(to_dir) = pick(w.rng, &again).cloned() {
                let to = join(&to_dir, &w.name("again", self.n));
                w.rename(&dst, &to)?;
            }
        }
        Ok(true)
    }
}

/// A file grown through its direct blocks, then by strides through the single indirect block and
/// into the double indirect tree; a second file appended by small writes beside it.
struct GrowIndirect {
    ops: usize,
    done: usize,
    /// Next logical block of the big file.
    pos: u64,
}

impl Workload for GrowIndirect {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/gi")?;
        w.create("/gi/big", 0)?;
        w.create("/gi/small", 3000)?;
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        let p = w.fs.sb.ptrs_per_block();
        // Into the third single-indirect block under the double indirect one.
        let target = NDADDR as u64 + p + 2 * p + 8;
        self.done += 1;
        if w.rng.gen_range(0..10) < 3 {
            let size = w.size("/gi/small")?;
            let len = w.rng.gen_range(500..3000);
            w.write("/gi/small", size, len)?;
            return Ok(true);
        }
        let k = w.rng.gen_range(1..=3u64);
        let len = k as usize * BS - w.rng.gen_range(0..BS / 2);
        w.write("/gi/big", self.pos * BS as u64, len)?;
        self.pos += k;
        // Strides reach the double indirect tree by half-way; dense growth after that.
        let left = (self.ops / 2).saturating_sub(self.done).max(1) as u64;
        if self.done > 4 {
            self.pos += (target.saturating_sub(self.pos) / left).saturating_sub(k);
        }
        Ok(true)
    }
}

/// Files reaching into single and double indirect blocks, truncated partly and fully, extended
/// again by writes and by a larger size.
struct Truncate;

const TRUNC_FILES: usize = 6;

impl Workload for Truncate {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/tr")?;
        let p = w.fs.sb.ptrs_per_block();
        let nd = NDADDR as u64;
        // (file, blocks written)
        let layouts: [Vec<u64>; TRUNC_FILES] = [
            vec![0],
            (0..40).collect(),
            vec![0, 5, nd + 3, nd + 200, nd + p + 2, nd + p + 600],
            (0..nd + 20).collect(),
            vec![nd + p + 3 * p + 1],
            vec![],
        ];
        for (i, blocks) in layouts.iter().enumerate() {
            let path = format!("/tr/t{i}");
            w.create(&path, 1000)?;
            for &b in blocks {
                w.write(&path, b * BS as u64, BS)?;
            }
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        let path = format!("/tr/t{}", w.rng.gen_range(0..TRUNC_FILES));
        let size = w.size(&path)?;
        let p = w.fs.sb.ptrs_per_block();
        let nd = NDADDR as u64;
        let bs = BS as u64;
        match w.rng.gen_range(0..10) {
            0 => w.truncate(&path, 0)?,
            1..=3 => {
                let to = w.rng.gen_range(0..=size);
                w.truncate(&path, to)?
            }
            4 => w.truncate(&path, nd * bs - 100)?,
            5 => {
                let to = w.rng.gen_range(nd..nd + p) * bs + w.rng.gen_range(0..bs);
                w.truncate(&path, to.min(size))?
            }
            6 => {
                let to = size + w.rng.gen_range(1..(nd + 2 * p) * bs);
                w.truncate(&path, to)?
            }
            _ => {
                let b = w.rng.gen_range(0..nd + p + 2 * p);
                let len = w.rng.gen_range(1..2 * BS);
                w.write(&path, b * bs, len)?
            }
        }
        Ok(true)
    }
}

/// Hard links made, removed (the last one frees the file), renamed over each other, and files
/// written through any of their names.
#[derive(Default)]
struct HardLinks {
    /// Every name and the file it names.
    names: Vec<(String, usize)>,
    files: usize,
    n: usize,
}

impl Workload for HardLinks {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        for d in ["/hl", "/hl/d1", "/hl/d2"] {
            w.mkdir(d)?;
        }
        for i in 0..5 {
            let p = format!("/hl/d1/f{i}");
            w.create(&p, 2000 + i * 1000)?;
            self.names.push((p, i));
        }
        self.files = 5;
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let dirs = ["/hl", "/hl/d1", "/hl/d2"];
        let r = w.rng.gen_range(0..10);
        if self.names.is_empty() || r == 9 {
            let p = join(dirs[w.rng.gen_range(0..3)], &format!("new{}", self.n));
            w.create(&p, 1200)?;
            self.names.push((p, self.files));
            self.files += 1;
            return Ok(true);
        }
        let i = w.rng.gen_range(0..self.names.len());
        let (src, file) = self.names[i].clone();
        match r {
            0..=3 => {
                let p = join(dirs[w.rng.gen_range(0..3)], &w.name("l", self.n));
                w.link(&src, &p)?;
                self.names.push((p, file));
            }
            4..=6 => {
                w.unlink(&src)?;
                self.names.swap_remove(i);
            }
            7 => {
                let j = w.rng.gen_range(0..self.names.len());
                let (dst, _) = self.names[j].clone();
                w.rename(&src, &dst)?;
                if dst != src && self.names[j].1 != file {
                    self.names.retain(|n| n.0 != src);
                    if let Some(k) = self.names.iter().position(|n| n.0 == dst) {
                        self.names[k].1 = file;
                    }
                }
            }
            _ => {
                let off = w.rng.gen_range(0..20000);
                w.write(&src, off, 3000)?;
            }
        }
        Ok(true)
    }
}

/// Files written and fsync'ed (new ones, some in new directories, and rewrites of fsync'ed ones),
/// with unsynced creates and removes around them.
#[derive(Default)]
struct FsyncWork {
    synced: Vec<String>,
    others: Vec<String>,
    n: usize,
}

impl Workload for FsyncWork {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/fs")?;
        w.mkdir("/fs/d")?;
        w.create("/fs/old", 5000)?;
        self.synced.push("/fs/old".into());
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        match w.rng.gen_range(0..10) {
            0..=3 => {
                let p = match w.rng.gen_range(0..3) {
                    0 => format!("/fs/f{n}"),
                    1 => format!("/fs/d/f{n}"),
                    _ => {
                        w.mkdir(&format!("/fs/s{n}"))?;
                        format!("/fs/s{n}/f")
                    }
                };
                let len = w.rng.gen_range(0..20000);
                w.create(&p, len)?;
                w.fsync(&p)?;
                self.synced.push(p);
            }
            4..=5 => {
                let p = pick(w.rng, &self.synced).unwrap_or_else(|| "/fs/old".into());
                let size = w.size(&p)?;
                if w.rng.gen_bool(0.3) {
                    let to = w.rng.gen_range(0..=size);
                    w.truncate(&p, to)?;
                } else {
                    let off = w.rng.gen_range(0..=size);
                    let len = w.rng.gen_range(1..9000);
                    w.write(&p, off, len)?;
                }
                w.fsync(&p)?;
            }
            6..=7 => {
                let p = format!("/fs/u{n}");
                w.create(&p, 3000)?;
                self.others.push(p);
            }
            _ => {
                if let Some(p) = pick(w.rng, &self.others) {
                    w.unlink(&p)?;
                    self.others.retain(|x| *x != p);
                }
            }
        }
        Ok(true)
    }
}

/// Names swapped through a temporary name (`mv x t; mv y x; mv t y`), then one or both
/// fsync'ed, some after a write: each new name waits on disk for its hidden namesake, the old
/// name of the other file. Files in two directories, so some swaps cross directories.
#[derive(Default)]
struct SwapFsync {
    names: Vec<String>,
    n: usize,
}

impl Workload for SwapFsync {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/sw")?;
        w.mkdir("/sw/d")?;
        for i in 0..6 {
            let p = if i % 3 == 2 { format!("/sw/d/x{i}") } else { format!("/sw/x{i}") };
            w.create(&p, 1000 + i * 1500)?;
            self.names.push(p);
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        if w.rng.gen_range(0..8) == 0 {
            // A new file, made durable, joins the swaps (its name fresh on disk).
            let p = if w.rng.gen_bool(0.5) { format!("/sw/n{n}") } else { format!("/sw/d/n{n}") };
            let len = w.rng.gen_range(0..9000);
            w.create(&p, len)?;
            w.fsync(&p)?;
            self.names.push(p);
            return Ok(true);
        }
        let i = w.rng.gen_range(0..self.names.len());
        let j = (i + w.rng.gen_range(1..self.names.len())) % self.names.len();
        let (x, y) = (self.names[i].clone(), self.names[j].clone());
        let t = if w.rng.gen_bool(0.5) { format!("/sw/t{n}") } else { format!("/sw/d/t{n}") };
        w.rename(&x, &t)?;
        w.rename(&y, &x)?;
        w.rename(&t, &y)?;
        if w.rng.gen_bool(0.3) {
            let len = w.rng.gen_range(1..6000);
            w.write(&x, 0, len)?;
        }
        match w.rng.gen_range(0..3) {
            0 => w.fsync(&x)?,
            1 => w.fsync(&y)?,
            _ => {
                w.fsync(&x)?;
                w.fsync(&y)?;
            }
        }
        Ok(true)
    }
}

/// Directories holding files moved to other parents (into each other too, so that a file's
/// grandparent is renamed as well), then a file below written and fsync'ed under its new path:
/// fsync makes every name up to the root durable, the moved ancestors' new names too.
#[derive(Default)]
struct AncestorRename {
    /// The movable directories' paths; each holds a file `f`.
    dirs: Vec<String>,
    n: usize,
}

impl Workload for AncestorRename {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/ar")?;
        w.mkdir("/ar/p")?;
        for i in 0..4 {
            let d = format!("/ar/m{i}");
            w.mkdir(&d)?;
            w.create(&format!("{d}/f"), 2000 + i * 2500)?;
            self.dirs.push(d);
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        let k = w.rng.gen_range(0..self.dirs.len());
        let d = self.dirs[k].clone();
        if w.rng.gen_range(0..4) == 0 {
            // Only the file changes, fsync'ed where it is.
            let f = format!("{d}/f");
            let len = w.rng.gen_range(1..8000);
            w.write(&f, 0, len)?;
            w.fsync(&f)?;
            return Ok(true);
        }
        // A new parent: /ar, /ar/p or another movable directory not under this one.
        let mut parents = vec!["/ar".to_string(), "/ar/p".to_string()];
        parents.extend(self.dirs.iter().filter(|p| !under(p, &d)).cloned());
        let parent = pick(w.rng, &parents).unwrap_or_else(|| "/ar".into());
        let to = join(&parent, &w.name("m", n));
        w.rename(&d, &to)?;
        for p in &mut self.dirs {
            if under(p, &d) {
                *p = format!("{to}{}", &p[d.len()..]);
            }
        }
        // A file at or below the moved directory, written (sometimes) and fsync'ed.
        let below: Vec<String> = self.dirs.iter().filter(|p| under(p, &to)).cloned().collect();
        let target = pick(w.rng, &below).unwrap_or(to);
        let f = format!("{target}/f");
        if w.rng.gen_bool(0.5) {
            let off = w.rng.gen_range(0..4000);
            let len = w.rng.gen_range(1..6000);
            w.write(&f, off, len)?;
        }
        w.fsync(&f)?;
        Ok(true)
    }
}

/// Renames over existing files (a new file, fsync'ed first or not, or another old one), then
/// the survivor fsync'ed under the name it took; some in a second directory.
#[derive(Default)]
struct RenameOver {
    names: Vec<String>,
    n: usize,
}

impl Workload for RenameOver {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/ro")?;
        w.mkdir("/ro/d")?;
        for i in 0..6 {
            let p = if i % 2 == 1 { format!("/ro/d/v{i}") } else { format!("/ro/v{i}") };
            w.create(&p, 1500 + i * 2000)?;
            self.names.push(p);
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        let j = w.rng.gen_range(0..self.names.len());
        let dst = self.names[j].clone();
        if self.names.len() < 3 || w.rng.gen_bool(0.6) {
            let src = if w.rng.gen_bool(0.5) { format!("/ro/s{n}") } else { format!("/ro/d/s{n}") };
            let len = w.rng.gen_range(0..9000);
            w.create(&src, len)?;
            if w.rng.gen_bool(0.4) {
                w.fsync(&src)?;
            }
            w.rename(&src, &dst)?;
        } else {
            let i = (j + w.rng.gen_range(1..self.names.len())) % self.names.len();
            let src = self.names.swap_remove(i);
            w.rename(&src, &dst)?;
            // A name freed: a new file takes its place later.
            if w.rng.gen_bool(0.5) {
                w.create(&src, 700)?;
                self.names.push(src);
            }
        }
        w.fsync(&dst)?;
        Ok(true)
    }
}

/// fstests' readdir-while-renames, crashed: each file of a directory is renamed to a temporary
/// name (in its directory or another) and back, some after a write of the file or an fsync
/// between, some fsync'ed by the name they end with; files are made and removed on the way, so
/// that renames are undone both before and after their names reach the disk.
#[derive(Default)]
struct RenameBack {
    names: Vec<String>,
    n: usize,
}

impl Workload for RenameBack {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/rb")?;
        w.mkdir("/rb/o")?;
        self.names = w.create_files("/rb/", 12, |i| 300 + i * 700)?;
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        let j = w.rng.gen_range(0..self.names.len());
        let name = self.names[j].clone();
        let tmp = if w.rng.gen_bool(0.7) { "/rb/TEMPFILE".to_string() } else { "/rb/o/TEMPFILE".to_string() };
        w.rename(&name, &tmp)?;
        match w.rng.gen_range(0..5) {
            0 => w.fsync(&tmp)?,
            1 => w.write(&tmp, 0, 200)?,
            2 => {
                let other = self.names[(j + 1) % self.names.len()].clone();
                if other != name {
                    w.fsync(&other)?;
                }
            }
            _ => {}
        }
        w.rename(&tmp, &name)?;
        if w.rng.gen_bool(0.3) {
            w.fsync(&name)?;
        }
        if n.is_multiple_of(7) {
            let p = format!("/rb/new{n}");
            w.create(&p, 500)?;
            self.names.push(p);
        } else if n.is_multiple_of(11) && self.names.len() > 4 {
            let p = self.names.swap_remove(j);
            w.unlink(&p)?;
        }
        Ok(true)
    }
}

/// Overlayfs's copy-up and removal in its upper directory: files and directories renamed away
/// with RENAME_WHITEOUT (into another directory, over files there too), the whiteouts and the
/// moved files fsync'ed, whiteouts removed and their names taken by new files. Each renamed
/// inode keeps its old or new name; each fsync'ed whiteout (empty) and file keeps its name and
/// contents.
#[derive(Default)]
struct RenameWhiteout {
    /// Files and directories in the upper directory that may be renamed away.
    upper: Vec<String>,
    /// Whiteouts in the upper directory.
    whiteouts: Vec<String>,
    /// Names in the work directory (renames may land on them).
    work: Vec<String>,
    n: usize,
}

impl Workload for RenameWhiteout {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        for d in ["/ow", "/ow/up", "/ow/up/sub", "/ow/work"] {
            w.mkdir(d)?;
        }
        for i in 0..6 {
            let p = if i % 3 == 2 { format!("/ow/up/sub/u{i}") } else { format!("/ow/up/u{i}") };
            w.create(&p, 1200 + i * 1700)?;
            self.upper.push(p);
        }
        w.mkdir("/ow/up/dir0")?;
        w.create("/ow/up/dir0/inside", 3000)?;
        self.upper.push("/ow/up/dir0".into());
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        match w.rng.gen_range(0..10) {
            0..=5 if !self.upper.is_empty() => {
                let src = self.upper.swap_remove(w.rng.gen_range(0..self.upper.len()));
                let ino = w.resolve(&src)?;
                let is_dir = w.fs.getattr(ino)?.is_dir();
                let dst = match self.work.len() {
                    k if k > 0 && !is_dir && w.rng.gen_bool(0.3) => self.work.swap_remove(w.rng.gen_range(0..k)),
                    _ => format!("/ow/work/{}", w.name("m", n)),
                };
                w.rename_whiteout(&src, &dst)?;
                if w.rng.gen_bool(0.5) {
                    w.fsync(&src)?;
                }
                if !is_dir {
                    if w.rng.gen_bool(0.4) {
                        w.fsync(&dst)?;
                    }
                    self.work.push(dst);
                }
                self.whiteouts.push(src);
            }
            6..=7 if !self.whiteouts.is_empty() => {
                // The name comes back: its whiteout goes and a new file takes it.
                let p = self.whiteouts.swap_remove(w.rng.gen_range(0..self.whiteouts.len()));
                w.unlink(&p)?;
                let len = w.rng.gen_range(0..7000);
                w.create(&p, len)?;
                if w.rng.gen_bool(0.5) {
                    w.fsync(&p)?;
                }
                self.upper.push(p);
            }
            _ => {
                let p = if w.rng.gen_bool(0.5) { format!("/ow/up/n{n}") } else { format!("/ow/up/sub/n{n}") };
                let len = w.rng.gen_range(0..9000);
                w.create(&p, len)?;
                self.upper.push(p);
            }
        }
        Ok(true)
    }
}

/// Hard links made (into new directories too, whose own names are not on disk yet), then the
/// file fsync'ed by the new name; old names removed, files rewritten and fsync'ed by any name.
#[derive(Default)]
struct LinkFsync {
    /// Every name and the file it names.
    names: Vec<(String, usize)>,
    dirs: Vec<String>,
    files: usize,
    n: usize,
}

impl Workload for LinkFsync {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        for d in ["/lk", "/lk/a", "/lk/b"] {
            w.mkdir(d)?;
            self.dirs.push(d.into());
        }
        for i in 0..4 {
            let p = format!("/lk/a/f{i}");
            w.create(&p, 1000 + i * 3000)?;
            self.names.push((p, i));
        }
        self.files = 4;
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        if self.names.is_empty() {
            let p = format!("/lk/f{n}");
            w.create(&p, 2500)?;
            self.names.push((p, self.files));
            self.files += 1;
            return Ok(true);
        }
        let i = w.rng.gen_range(0..self.names.len());
        let (src, file) = self.names[i].clone();
        match w.rng.gen_range(0..10) {
            0..=5 => {
                let dir = if w.rng.gen_range(0..4) == 0 {
                    let parent = pick(w.rng, &self.dirs).unwrap_or_else(|| "/lk".into());
                    let d = join(&parent, &format!("d{n}"));
                    w.mkdir(&d)?;
                    self.dirs.push(d.clone());
                    d
                } else {
                    pick(w.rng, &self.dirs).unwrap_or_else(|| "/lk".into())
                };
                let p = join(&dir, &w.name("l", n));
                w.link(&src, &p)?;
                self.names.push((p.clone(), file));
                if w.rng.gen_bool(0.3) {
                    let len = w.rng.gen_range(1..5000);
                    w.write(&p, 0, len)?;
                }
                w.fsync(&p)?;
            }
            6..=7 => {
                w.unlink(&src)?;
                self.names.swap_remove(i);
            }
            _ => {
                let off = w.rng.gen_range(0..8000);
                w.write(&src, off, 2000)?;
                w.fsync(&src)?;
            }
        }
        Ok(true)
    }
}

/// Block Register reservations made, grown (some near a hint), punched, shortened and freed, among
/// files created, grown and removed that compete for the same blocks.
#[derive(Default)]
struct BrWork {
    live: Vec<String>,
    files: Vec<String>,
    n: usize,
}

impl BrWork {
    fn some_block(w: &mut Work, name: &str) -> FsResult<Option<u64>> {
        let runs = w.fs.brquery(name.as_bytes(), 0, u64::MAX)?;
        let blocks: Vec<u64> = runs.iter().flat_map(|r| r.start..r.start + r.len).collect();
        Ok(pick(w.rng, &blocks))
    }
}

impl Workload for BrWork {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        w.mkdir("/b")?;
        w.create("/b/f0", 30000)?;
        w.br("brreserve r0 40".into(), "r0", |fs| fs.brreserve(b"r0", 40, None).map(|_| ()))?;
        self.live.push("r0".into());
        self.files.push("/b/f0".into());
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        self.n += 1;
        let n = self.n;
        let hint = if w.rng.gen_bool(0.3) { Some(w.rng.gen_range(0..w.fs.sb.num_blocks)) } else { None };
        match w.rng.gen_range(0..12) {
            0..=1 => {
                let name = format!("r{n}");
                let k = w.rng.gen_range(1..40);
                w.br(format!("brreserve {name} {k} {hint:?}"), &name, |fs| {
                    fs.brreserve(name.as_bytes(), k, hint).map(|_| ())
                })?;
                self.live.push(name);
            }
            2..=4 => {
                let Some(name) = pick(w.rng, &self.live) else { return Ok(true) };
                let k = w.rng.gen_range(1..30);
                w.br(format!("brexpand {name} {k} {hint:?}"), &name, |fs| {
                    fs.brexpand(name.as_bytes(), k, hint).map(|_| ())
                })?;
            }
            5..=6 => {
                let Some(name) = pick(w.rng, &self.live) else { return Ok(true) };
                if let Some(b) = Self::some_block(w, &name)? {
                    w.br(format!("brtruncate {name} {b}"), &name, |fs| fs.brtruncate(name.as_bytes(), b).map(|_| ()))?;
                }
            }
            7 => {
                let Some(name) = pick(w.rng, &self.live) else { return Ok(true) };
                w.br(format!("brfree {name}"), &name, |fs| fs.brfree(name.as_bytes()).map(|_| ()))?;
                self.live.retain(|x| *x != name);
            }
            8..=9 => {
                let p = format!("/b/f{n}");
                let len = w.rng.gen_range(0..60000);
                w.create(&p, len)?;
                self.files.push(p);
            }
            10 => {
                if let Some(p) = pick(w.rng, &self.files) {
                    let off = w.rng.gen_range(0..70000);
                    w.write(&p, off, 8000)?;
                }
            }
            _ => {
                if let Some(p) = pick(w.rng, &self.files) {
                    w.unlink(&p)?;
                    self.files.retain(|x| *x != p);
                }
            }
        }
        Ok(true)
    }
}

/// All of them, interleaved at random, each in its own directory.
struct Mix {
    subs: Vec<(Box<dyn Workload>, bool)>,
}

impl Workload for Mix {
    fn setup(&mut self, w: &mut Work) -> FsResult<()> {
        for (s, _) in &mut self.subs {
            s.setup(w)?;
        }
        Ok(())
    }
    fn step(&mut self, w: &mut Work) -> FsResult<bool> {
        let live: Vec<usize> = (0..self.subs.len()).filter(|&i| self.subs[i].1).collect();
        let Some(i) = pick(w.rng, &live) else {
            return Ok(false);
        };
        if !self.subs[i].0.step(w)? {
            self.subs[i].1 = false;
        }
        Ok(true)
    }
}

// ------------------------------------------------------------------------------------- recording

/// A crash image: the state after some batches, plus writes of the batch in flight, copy on write
/// (mounting or repairing it writes only to its own overlay).
pub struct CrashImage {
    base: Arc<Vec<Option<Arc<[u8]>>>>,
    over: Mutex<HashMap<u64, Arc<[u8]>>>,
    counters: Counters,
}

impl CrashImage {
    fn new(base: Arc<Vec<Option<Arc<[u8]>>>>, writes: &[(u64, Arc<[u8]>)]) -> CrashImage {
        CrashImage { base, over: Mutex::new(writes.iter().cloned().collect()), counters: Counters::default() }
    }
    fn over(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<[u8]>>> {
        self.over.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// An independent copy of this image (its writes so far included).
    pub fn fork(&self) -> CrashImage {
        CrashImage { base: self.base.clone(), over: Mutex::new(self.over().clone()), counters: Counters::default() }
    }
}

impl BlockDevice for CrashImage {
    fn block_size(&self) -> usize {
        BS
    }
    fn num_blocks(&self) -> u64 {
        self.base.len() as u64
    }
    fn read_block(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        let Some(b) = self.base.get(bno as usize) else {
            return Err(crate::dev::DevError::OutOfRange { bno, nblocks: self.num_blocks() });
        };
        self.counters.read();
        match self.over().get(&bno).or(b.as_ref()) {
            Some(d) => buf.copy_from_slice(d),
            None => buf.fill(0),
        }
        Ok(())
    }
    fn write_batch(&self, reqs: &[WriteReq], kind: WriteKind) -> DevResult<()> {
        let mut over = self.over();
        for r in reqs {
            if r.bno >= self.num_blocks() {
                return Err(crate::dev::DevError::OutOfRange { bno: r.bno, nblocks: self.num_blocks() });
            }
            over.insert(r.bno, r.data.into());
        }
        self.counters.batch(reqs.len(), crate::dev::count_runs(reqs), kind);
        Ok(())
    }
    fn stats(&self) -> DevStats {
        self.counters.snapshot()
    }
}

/// One crash state: `batches` batches complete, and of the next one, the writes in `partial`.
#[derive(Debug, Clone)]
pub struct CrashState {
    pub index: usize,
    pub batches: usize,
    pub partial: Option<Vec<usize>>,
}

/// A promise with its interval in batches: it holds in states with at least `from` batches
/// complete and no write of batch `until` or later.
struct Interval {
    p: Promise,
    from: usize,
    until: usize,
}

/// A recorded workload: the image before it, the batches it wrote, and its promises.
pub struct Recording {
    pub workload: String,
    pub ordering: Ordering,
    pub seed: u64,
    pub unmounted: bool,
    base: Vec<Option<Arc<[u8]>>>,
    /// The non-empty batches, in order.
    batches: Vec<Vec<(u64, Arc<[u8]>)>>,
    /// The operation during which each batch was written (an index in `ops`).
    batch_op: Vec<Option<usize>>,
    ops: Vec<String>,
    promises: Vec<Interval>,
}

/// Runs `workload` over a recording device: mkfs and setup (not recorded), then the workload on a
/// fresh mount with a small cache, ending with or without unmount.
pub fn record(ordering: Ordering, workload: &str, seed: u64, opts: &CrashOptions) -> Result<Recording, CrashError> {
    let mut wl = make_workload(workload, opts.ops).ok_or_else(|| CrashError::UnknownWorkload(workload.into()))?;
    let fail = |what: &str| {
        let what = format!("{workload} ({ordering}, seed {seed}): {what}");
        move |source| CrashError::Fs { what, source }
    };
    let dev = Arc::new(MemDevice::new(BS, opts.blocks));
    let mk = MkfsOptions { inodes: Some((opts.blocks / 8).max(256)), zeroed: true, ..Default::default() };
    mkfs(dev.clone(), &mk, (946_684_800, 0)).map_err(fail("mkfs"))?;
    let clock = Arc::new(SimClock::new());
    let mut rng = SmallRng::seed_from_u64(seed);
    let mount = |d: Arc<dyn BlockDevice>, cache_blocks| {
        Fs::mount(d, MountOptions { ordering, cache_blocks, readonly: false }, clock.clone())
    };

    // Setup, then the names it left: each stays until an operation removes or renames it.
    let mut fs = mount(dev.clone(), 4096).map_err(fail("mount for setup"))?;
    let stable = {
        let mut w = Work {
            fs: &mut fs,
            rng: &mut rng,
            clock: &clock,
            rec: None,
            ops: Vec::new(),
            promises: vec![],
            count: 0,
            sweeper: None,
            flight: None,
        };
        wl.setup(&mut w).map_err(fail(&format!("setup: {}", w.ops.last().map_or("", |o| &o.1))))?;
        w.walk("/").map_err(fail("walk after setup"))?
    };
    fs.unmount().map_err(fail("unmount after setup"))?;
    drop(fs);
    let promise = |kind, path: &str, ino| Promise {
        kind,
        paths: vec![path.to_string()],
        ino,
        contents: None,
        runs: None,
        from: 0,
        until: None,
    };
    let mut promises: Vec<Promise> =
        stable.iter().map(|(path, _, ino)| promise(PromiseKind::Stable, path, *ino)).collect();
    // Each inode once (the first of its names); the file system's own directories (/.br, /.snap)
    // and what they hold are freed by calls of their own.
    let mut kept = HashSet::new();
    for (path, _, ino) in &stable {
        let special = path.starts_with("/.br") || path.starts_with("/.snap");
        if !special && kept.insert(*ino) {
            promises.push(promise(PromiseKind::Kept, path, *ino));
        }
    }

    let image = dev.blocks();
    let rec = Arc::new(RecordingDevice::new(MemDevice::from_blocks(BS, image.clone())));
    let mut fs = mount(rec.clone(), opts.cache_blocks).map_err(fail("mount"))?;
    let unmounted = match opts.end {
        End::Auto => seed % 2 == 1,
        End::Unmount => true,
        End::Crash => false,
    };
    let sweeper = opts.update.map(|policy| {
        let mut o = SyncerOptions::for_policy(policy);
        o.age = std::time::Duration::from_secs(1);
        o.interval = std::time::Duration::from_millis(if policy == UpdatePolicy::Pu { 1000 } else { 100 });
        o.metadata_interval = std::time::Duration::from_secs(1);
        Sweeper::new(o, &mut fs)
    });
    let mut w = Work {
        fs: &mut fs,
        rng: &mut rng,
        clock: &clock,
        rec: Some(&rec),
        ops: Vec::new(),
        promises,
        count: 0,
        sweeper,
        flight: None,
    };
    for _ in 0..opts.ops {
        match wl.step(&mut w) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(fail(&w.ops.last().map_or(String::new(), |o| o.1.clone()))(e)),
        }
    }
    let (mut ops, promises) = (std::mem::take(&mut w.ops), std::mem::take(&mut w.promises));
    drop(w);
    if unmounted {
        ops.push((rec.log_len(), "unmount".into()));
        fs.unmount().map_err(fail("unmount"))?;
    }
    drop(fs);
    let log = rec.log();

    // Batches, dropping empty ones; `ends[k]` is the log position just after batch k.
    let mut batches = Vec::new();
    let mut starts = Vec::new();
    let mut ends = Vec::new();
    let mut cur = Vec::new();
    let mut start = 0;
    for (i, r) in log.iter().enumerate() {
        match r {
            Record::Write { bno, data } => cur.push((*bno, data.clone())),
            Record::Barrier => {
                if !cur.is_empty() {
                    batches.push(std::mem::take(&mut cur));
                    starts.push(start);
                    ends.push(i + 1);
                }
                start = i + 1;
            }
        }
    }
    let batches_before = |pos: usize| ends.partition_point(|&e| e <= pos);
    let batch_op = starts.iter().map(|&s| ops.partition_point(|o: &(usize, String)| o.0 <= s).checked_sub(1)).collect();
    let promises = promises
        .into_iter()
        .map(|p| Interval { from: batches_before(p.from), until: p.until.map_or(usize::MAX, batches_before), p })
        .collect();
    Ok(Recording {
        workload: workload.into(),
        ordering,
        seed,
        unmounted,
        base: image.into_iter().map(|b| b.map(Arc::from)).collect(),
        batches,
        batch_op,
        ops: ops.into_iter().map(|o| o.1).collect(),
        promises,
    })
}

/// One verdict on a crash state.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub class: Class,
    pub kind: String,
    pub text: String,
}

fn finding_kind(f: &Finding) -> String {
    format!("{f:?}").chars().take_while(|c| c.is_alphanumeric()).collect()
}

/// The subsets of a batch of `n` writes tried as the batch in flight.
fn subsets(n: usize, random: usize, rng: &mut SmallRng) -> Vec<Vec<usize>> {
    if n < 2 {
        return Vec::new();
    }
    let mut out: Vec<Vec<usize>> = Vec::new();
    if n <= SMALL_BATCH {
        for i in 0..n {
            out.push(vec![i]);
            if n > 2 {
                out.push((0..n).filter(|&j| j != i).collect());
            }
        }
        return out;
    }
    while out.len() < random {
        let s: Vec<usize> = (0..n).filter(|_| rng.gen_bool(0.5)).collect();
        if !s.is_empty() && s.len() < n {
            out.push(s);
        }
    }
    out
}

impl Recording {
    pub fn writes(&self) -> usize {
        self.batches.iter().map(|b| b.len()).sum()
    }
    pub fn batches(&self) -> usize {
        self.batches.len()
    }

    /// Calls `f` on every crash state, in log order, with a fresh image of it.
    pub fn for_each_state(
        &self,
        random_subsets: usize,
        mut f: impl FnMut(&CrashState, Arc<CrashImage>) -> Result<(), CrashError>,
    ) -> Result<usize, CrashError> {
        let mut rng = SmallRng::seed_from_u64(self.seed ^ 0x5eed_c0de_cafe_f00d);
        let mut cur = Arc::new(self.base.clone());
        let mut index = 0;
        for k in 0..=self.batches.len() {
            f(&CrashState { index, batches: k, partial: None }, Arc::new(CrashImage::new(cur.clone(), &[])))?;
            index += 1;
            let Some(batch) = self.batches.get(k) else {
                break;
            };
            for s in subsets(batch.len(), random_subsets, &mut rng) {
                let writes: Vec<(u64, Arc<[u8]>)> = s.iter().map(|&i| batch[i].clone()).collect();
                let img = Arc::new(CrashImage::new(cur.clone(), &writes));
                f(&CrashState { index, batches: k, partial: Some(s) }, img)?;
                index += 1;
            }
            // Every image of this state is gone, so the base is updated in place.
            let base = Arc::make_mut(&mut cur);
            for (bno, data) in batch {
                base[*bno as usize] = Some(data.clone());
            }
        }
        Ok(index)
    }

    /// How a state was built, in words.
    pub fn describe(&self, s: &CrashState) -> String {
        let op = |k: usize| match self.batch_op.get(k) {
            Some(Some(i)) => format!("operation {} \"{}\"", i + 1, self.ops[*i]),
            Some(None) => "mount".to_string(),
            None => "the end".to_string(),
        };
        let done = match s.batches {
            0 => format!("0 of {} batches complete", self.batches.len()),
            k => format!("{k} of {} batches complete (the last written by {})", self.batches.len(), op(k - 1)),
        };
        match &s.partial {
            None => format!("state {}: {done}; crash before batch {} ({})", s.index, s.batches, op(s.batches)),
            Some(w) => {
                let batch = &self.batches[s.batches];
                let shown: Vec<String> = w.iter().map(|&i| format!("#{i} (block {})", batch[i].0)).collect();
                format!(
                    "state {}: {done}; of batch {} ({} writes, by {}) only writes {} reached the disk",
                    s.index,
                    s.batches,
                    batch.len(),
                    op(s.batches),
                    shown.join(", ")
                )
            }
        }
    }

    /// Arms the rename promises that begin at prefix state `k`: each holds only if its old name
    /// was on disk when the rename began.
    fn arm(&self, k: usize, img: &Arc<CrashImage>, armed: &mut [bool]) {
        let mut fs = None;
        for (i, iv) in self.promises.iter().enumerate() {
            if iv.p.kind != PromiseKind::Rename || iv.from != k {
                continue;
            }
            if fs.is_none() {
                fs = Some(Fs::mount(img.clone(), readonly(), Arc::new(SimClock::new())).ok());
            }
            armed[i] = match fs.as_mut().and_then(|f| f.as_mut()) {
                Some(fs) => resolve(fs, &iv.p.paths[0]).ok() == Some(iv.p.ino),
                None => false,
            };
        }
    }

    /// The verdicts on one state: fsck's findings, then the promises.
    pub fn judge(&self, s: &CrashState, img: &Arc<CrashImage>, armed: &[bool]) -> Vec<Verdict> {
        let mut out = Vec::new();
        match fsck::check(&**img) {
            Ok(r) => out.extend(r.findings.iter().map(|f| Verdict {
                class: f.class(),
                kind: finding_kind(f),
                text: f.to_string(),
            })),
            Err(e) => out.push(Verdict { class: Class::Violation, kind: "FsckFailed".into(), text: e.to_string() }),
        }
        let violation = |kind: &str, text: String| Verdict { class: Class::Violation, kind: kind.into(), text };
        let mut fs = match Fs::mount(img.clone(), readonly(), Arc::new(SimClock::new())) {
            Ok(fs) => fs,
            Err(e) => {
                out.push(violation("Unmountable", format!("mount fails: {e}")));
                return out;
            }
        };
        if let Err(e) = fs.readdir(ROOT_INO, 0, usize::MAX) {
            out.push(violation("Unmountable", format!("root directory unreadable: {e}")));
        }
        let high = s.batches + s.partial.is_some() as usize;
        let mut reachable = None;
        for (i, iv) in self.promises.iter().enumerate() {
            let p = &iv.p;
            if s.batches < iv.from || high > iv.until || (p.kind == PromiseKind::Rename && !armed[i]) {
                continue;
            }
            if p.kind == PromiseKind::Kept {
                let reachable = reachable.get_or_insert_with(|| reachable_inodes(&mut fs));
                if !reachable.contains(&p.ino) {
                    out.push(violation(
                        "InodeLost",
                        format!(
                            "inode {} (before the workload {}), never removed, is reachable by no name",
                            p.ino, p.paths[0]
                        ),
                    ));
                }
                continue;
            }
            let found: Vec<FsResult<u32>> = p.paths.iter().map(|q| resolve(&mut fs, q)).collect();
            if !found.iter().any(|r| matches!(r, Ok(i) if *i == p.ino)) {
                let (kind, what) = match p.kind {
                    PromiseKind::Stable => ("StableNameLost", "a name made before the workload and not yet removed"),
                    PromiseKind::Kept => unreachable!("judged above"),
                    PromiseKind::Rename => ("RenameLostBoth", "a renamed inode, durable before the rename"),
                    PromiseKind::Fsync => ("FsyncNameLost", "an fsync'ed file"),
                    PromiseKind::Reservation => ("ReservationLost", "a reservation"),
                    PromiseKind::Snapshot => ("SnapshotLost", "a snapshot"),
                };
                let got: Vec<String> = p
                    .paths
                    .iter()
                    .zip(&found)
                    .map(|(q, r)| match r {
                        Ok(i) => format!("{q} names inode {i}"),
                        Err(e) => format!("{q}: {e}"),
                    })
                    .collect();
                let kind = if found.iter().any(|r| matches!(r, Err(e) if !matches!(e, FsError::NotFound))) {
                    "NameUnreadable"
                } else {
                    kind
                };
                out.push(violation(kind, format!("{what}, inode {}, is not named: {}", p.ino, got.join("; "))));
                continue;
            }
            if let Some(want) = &p.runs {
                let name = p.paths[0].trim_start_matches("/.br/");
                match fs.brquery(name.as_bytes(), 0, u64::MAX) {
                    Ok(got) if got == *want => {}
                    got => out.push(violation(
                        "ReservationWrong",
                        format!("reservation {name} (inode {}): brquery answers {got:?}, expected {want:?}", p.ino),
                    )),
                }
            }
            if p.kind == PromiseKind::Snapshot {
                let want = p.contents.as_deref().unwrap_or_default();
                let name = p.paths[0].trim_start_matches("/.snap/");
                match frozen_digest(img, name) {
                    Ok(got) if got == want => {}
                    Ok(_) => out.push(violation(
                        "SnapshotWrong",
                        format!("snapshot {name} (inode {}) no longer shows the file system of its moment", p.ino),
                    )),
                    Err(e) => out.push(violation("SnapshotWrong", format!("snapshot {name} unreadable: {e}"))),
                }
                continue;
            }
            if let Some(want) = &p.contents {
                let got = fs.getattr(p.ino).and_then(|d| fs.read(p.ino, 0, d.size as usize));
                match got {
                    Ok(g) if g == *want => {}
                    Ok(g) => {
                        let first = g.iter().zip(want).position(|(a, b)| a != b).unwrap_or(g.len().min(want.len()));
                        out.push(violation(
                            "FsyncDataWrong",
                            format!(
                                "fsync'ed file {} (inode {}): {} bytes, expected {}; first difference at byte {first}",
                                p.paths[0],
                                p.ino,
                                g.len(),
                                want.len()
                            ),
                        ))
                    }
                    Err(e) => out.push(violation(
                        "FsyncDataWrong",
                        format!("fsync'ed file {} (inode {}) unreadable: {e}", p.paths[0], p.ino),
                    )),
                }
            }
        }
        out
    }

    /// Judges every crash state.
    pub fn check(&self, random_subsets: usize) -> Result<Summary, CrashError> {
        let mut sum = Summary {
            workload: self.workload.clone(),
            ordering: self.ordering.to_string(),
            seed: self.seed,
            unmounted: self.unmounted,
            ops: self.ops.len(),
            writes: self.writes(),
            batches: self.batches(),
            ..Default::default()
        };
        for iv in &self.promises {
            let k = match iv.p.kind {
                PromiseKind::Stable => "stable names",
                PromiseKind::Kept => "kept inodes",
                PromiseKind::Rename => "renames",
                PromiseKind::Fsync => "fsyncs",
                PromiseKind::Reservation => "reservations",
                PromiseKind::Snapshot => "snapshots",
            };
            *sum.promises.entry(k).or_default() += 1;
        }
        let mut armed = vec![false; self.promises.len()];
        sum.states = self.for_each_state(random_subsets, |s, img| {
            if s.partial.is_none() {
                self.arm(s.batches, &img, &mut armed);
            }
            let verdicts = self.judge(s, &img, &armed);
            sum.add(self, s, &verdicts);
            Ok(())
        })?;
        Ok(sum)
    }
}

fn readonly() -> MountOptions {
    MountOptions { ordering: Ordering::Sync, cache_blocks: 256, readonly: true }
}

// ------------------------------------------------------------------------------------- summary

/// What the crash states of one workload showed.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub workload: String,
    pub ordering: String,
    pub seed: u64,
    pub unmounted: bool,
    pub ops: usize,
    pub writes: usize,
    pub batches: usize,
    /// Promises made, by kind.
    pub promises: BTreeMap<&'static str, usize>,
    pub states: usize,
    /// Findings and tester verdicts by kind (the `Finding` variant name, or the tester's own).
    pub findings_by_kind: BTreeMap<String, usize>,
    pub violations_by_kind: BTreeMap<String, usize>,
    pub allowed: usize,
    pub violations: usize,
    pub states_with_violations: usize,
    /// The first state with a violation: how it was built, and all its findings.
    pub first_violation: Option<String>,
}

impl Summary {
    fn add(&mut self, rec: &Recording, s: &CrashState, verdicts: &[Verdict]) {
        let mut bad = false;
        for v in verdicts {
            *self.findings_by_kind.entry(v.kind.clone()).or_default() += 1;
            match v.class {
                Class::Allowed => self.allowed += 1,
                Class::Violation => {
                    bad = true;
                    self.violations += 1;
                    *self.violations_by_kind.entry(v.kind.clone()).or_default() += 1;
                }
            }
        }
        if bad {
            self.states_with_violations += 1;
            if self.first_violation.is_none() {
                // Every finding, violations first; a state of thousands (an indirect block full
                // of garbage) is cut short, saying how much was left out.
                let mut text = rec.describe(s);
                for (class, limit) in [(Class::Violation, 200), (Class::Allowed, 40)] {
                    let of: Vec<&Verdict> = verdicts.iter().filter(|v| v.class == class).collect();
                    for v in of.iter().take(limit) {
                        text.push_str(&format!("\n    {:?} {}: {}", v.class, v.kind, v.text));
                    }
                    if of.len() > limit {
                        text.push_str(&format!("\n    ... and {} more {class:?} findings", of.len() - limit));
                    }
                }
                self.first_violation = Some(text);
            }
        }
    }
}

fn counts(m: &BTreeMap<String, usize>) -> String {
    m.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "crashtest {} --ordering {} --seed {}: {} operations, {} writes in {} batches, {}",
            self.workload,
            self.ordering,
            self.seed,
            self.ops,
            self.writes,
            self.batches,
            if self.unmounted { "then unmount" } else { "stopped without unmount" }
        )?;
        let promises: Vec<String> = self.promises.iter().map(|(k, n)| format!("{n} {k}")).collect();
        writeln!(f, "  promises: {}", if promises.is_empty() { "none".into() } else { promises.join(", ") })?;
        writeln!(f, "  crash states: {}", self.states)?;
        let allowed: BTreeMap<String, usize> = self
            .findings_by_kind
            .iter()
            .map(|(k, &n)| (k.clone(), n - self.violations_by_kind.get(k).copied().unwrap_or(0)))
            .filter(|&(_, n)| n > 0)
            .collect();
        writeln!(f, "  allowed findings: {} ({})", self.allowed, counts(&allowed))?;
        if self.violations == 0 {
            write!(f, "  violations: 0")
        } else {
            writeln!(
                f,
                "  VIOLATIONS: {} in {} states ({})",
                self.violations,
                self.states_with_violations,
                counts(&self.violations_by_kind)
            )?;
            write!(f, "  first violation: {}", self.first_violation.as_deref().unwrap_or(""))
        }
    }
}

/// Records `workload` under `ordering` and judges every crash state.
pub fn run(ordering: Ordering, workload: &str, seed: u64, opts: &CrashOptions) -> Result<Summary, CrashError> {
    record(ordering, workload, seed, opts)?.check(opts.subsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert!(under("/a/b", "/a"));
        assert!(under("/a", "/a"));
        assert!(!under("/ab", "/a"));
        assert!(under("/x", "/"));
        assert_eq!(split("/a"), ("/", "a"));
        assert_eq!(split("/a/b/c"), ("/a/b", "c"));
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
    }

    #[test]
    fn subsets_of_small_and_large_batches() {
        let mut rng = SmallRng::seed_from_u64(1);
        assert!(subsets(1, 8, &mut rng).is_empty());
        assert_eq!(subsets(2, 8, &mut rng), vec![vec![0], vec![1]]);
        let s = subsets(4, 8, &mut rng);
        assert_eq!(s.len(), 8);
        assert!(s.contains(&vec![2]) && s.contains(&vec![0, 1, 3]));
        let s = subsets(20, 8, &mut rng);
        assert_eq!(s.len(), 8);
        assert!(s.iter().all(|x| !x.is_empty() && x.len() < 20));
    }

    #[test]
    fn grow_indirect_reaches_the_double_indirect_tree() {
        for ops in [16, 80] {
            let rec = record(Ordering::Async, "grow-indirect", 3, &CrashOptions { ops, ..Default::default() }).unwrap();
            let last = rec
                .ops
                .iter()
                .filter_map(|o| o.strip_prefix("write /gi/big at "))
                .filter_map(|o| o.split(' ').next()?.parse::<u64>().ok())
                .max()
                .unwrap();
            assert!(last / BS as u64 > (NDADDR + 2 * BS / 8) as u64, "{ops} ops: last write at {last}");
        }
    }

    #[test]
    fn unknown_workload() {
        assert!(matches!(
            run(Ordering::Sync, "nope", 1, &CrashOptions::default()),
            Err(CrashError::UnknownWorkload(_))
        ));
    }
}
