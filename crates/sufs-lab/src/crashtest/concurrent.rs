//! The workload `concurrent`: a run driven by several threads, as a mount's request threads,
//! syncer and fsyncs drive it, recorded and judged like the others. Workers share the file
//! system as a mount does (`SharedFs`), each in its own subtree `/tN`, creating, writing,
//! truncating, renaming, linking and removing files, making and removing a directory, and
//! fsyncing (`Fs::fsync_shared`: its batches written outside the lock), while a syncer thread
//! runs the update policy's sweeps (`Sweeper::tick_shared`) and the background flushes
//! (`Sweeper::flush_shared`) with their writes outside the lock too.
//!
//! The recording stays a single log because the file system writes one batch at a time (one
//! flight at a time; any other write lands the flight first): a crash state is still a prefix of
//! batches plus part of the next. Each worker stamps its operations and promises with the log
//! position when it began (or, for an fsync, when it returned): a batch written while an
//! operation runs counts as its, or as one of another worker's, and either way the promises
//! only get weaker. The promises: the setup's names and inodes (`Stable`, `Kept`), and an
//! fsync'ed file's name and contents (`Fsync`) and that its inode stays reachable (`Kept`) until
//! the worker removes it. Renames make no `Rename` promise here (the single-threaded workloads
//! hold renames to it); a rename that lost an fsync'ed or setup inode breaks `Kept`.
//!
//! Unlike the others, a seed does not replay exactly: it fixes each worker's operations, not
//! how the threads interleave.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtOrd};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use sufs_fs::clock::SimClock;
use sufs_fs::dev::{BlockDevice, MemDevice, RecordingDevice};
use sufs_fs::fs::flight::FlushRequest;
use sufs_fs::fs::{lock, Fs, FsResult, MountOptions, Ordering, RenameFlags, SetAttr, SharedFs};
use sufs_fs::policy::{Sweeper, UpdatePolicy};

use super::promise::{close, resolve, split, under, Promise, PromiseKind};
use super::recorder::{scaled_sweeper, setup_promises, Recording};
use super::work::Work;
use super::{CrashError, CrashOptions, End, BS};

/// The workload's name (`sufs crashtest --workload concurrent`; not part of `all`, whose
/// recordings replay exactly).
pub const CONCURRENT: &str = "concurrent";

const WORKERS: usize = 3;

/// How long each write batch of the recorded device takes.
const DEVICE_TIME: Duration = Duration::from_micros(200);

/// A worker's file names, under `/tN`: in its root, in `d` (made by the setup) and in `e` (made
/// and removed by the worker).
const DIRS: [&str; 3] = ["", "/d", "/e"];
const FILES: usize = 4;

/// One worker: its subtree, the files in it (every name, hard links included), the operations
/// it began (log position, text) and its promises.
struct Worker<'a> {
    fs: &'a SharedFs,
    rec: &'a RecordingDevice<MemDevice>,
    rng: SmallRng,
    top: String,
    files: BTreeSet<String>,
    e_exists: bool,
    /// The operations it began: log position, place in the order all workers began theirs
    /// (`order`), text.
    ops: Vec<(usize, usize, String)>,
    order: &'a AtomicUsize,
    promises: Vec<Promise>,
}

impl Worker<'_> {
    /// Starts an operation: records it at the log's current position.
    fn begin(&mut self, what: String) -> usize {
        lock(self.fs).drop_idle_records();
        let pos = self.rec.log_len();
        let n = self.order.fetch_add(1, AtOrd::SeqCst);
        self.ops.push((pos, n, format!("{}: {what}", self.top)));
        pos
    }

    fn ino(&self, path: &str) -> FsResult<u32> {
        resolve(&mut lock(self.fs), path)
    }

    fn parent(&self, path: &str) -> FsResult<(u32, String)> {
        let (dir, name) = split(path);
        Ok((self.ino(dir)?, name.to_string()))
    }

    /// The name `path` (and anything under it) is about to change.
    fn touch_name(&mut self, pos: usize, path: &str) {
        close(&mut self.promises, pos, |p| p.paths.iter().any(|q| under(q, path)));
    }

    /// The inode named `path` is about to lose that name (its data, and with its last name, it).
    fn touch_inode(&mut self, pos: usize, path: &str) -> FsResult<()> {
        let ino = self.ino(path)?;
        close(&mut self.promises, pos, |p| p.ino == ino && matches!(p.kind, PromiseKind::Kept | PromiseKind::Fsync));
        Ok(())
    }

    /// The contents of the file named `path` are about to change.
    fn touch_data(&mut self, pos: usize, path: &str) -> FsResult<u32> {
        let ino = self.ino(path)?;
        close(&mut self.promises, pos, |p| p.ino == ino && p.contents.is_some());
        Ok(ino)
    }

    fn any_file(&mut self) -> Option<String> {
        let n = self.files.len();
        (n > 0).then(|| self.files.iter().nth(self.rng.gen_range(0..n)).cloned()).flatten()
    }

    /// A file name of the pool whose directory exists.
    fn pool_name(&mut self) -> String {
        let dirs = if self.e_exists { 3 } else { 2 };
        let dir = DIRS[self.rng.gen_range(0..dirs)];
        format!("{}{dir}/f{}", self.top, self.rng.gen_range(0..FILES))
    }

    fn data(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.rng.fill(&mut v[..]);
        v
    }

    /// One operation, chosen by weight.
    fn step(&mut self) -> FsResult<()> {
        let name = self.pool_name();
        let file = self.any_file();
        match (self.rng.gen_range(0..16), file) {
            (0..=2, _) if !self.files.contains(&name) => self.create(&name),
            (3..=5, Some(f)) => self.write(&f),
            (6, Some(f)) => self.truncate(&f),
            (7..=9, Some(f)) if f != name => self.rename(&f, &name),
            (10, Some(f)) if !self.files.contains(&name) => self.link(&f, &name),
            (11..=12, Some(f)) => self.unlink(&f),
            (13, _) => self.mkdir_rmdir_e(),
            (_, Some(f)) => self.fsync(&f),
            // (no file left: `name` is free)
            (_, None) => self.create(&name),
        }
    }

    fn create(&mut self, path: &str) -> FsResult<()> {
        let len = self.rng.gen_range(0..20_000);
        let pos = self.begin(format!("create {path} ({len} bytes)"));
        self.touch_name(pos, path);
        let (d, n) = self.parent(path)?;
        let data = self.data(len);
        let mut g = lock(self.fs);
        let (ino, _) = g.create(d, n.as_bytes(), 0o644, 0, 0)?;
        g.write(ino, 0, &data)?;
        self.files.insert(path.to_string());
        Ok(())
    }

    fn write(&mut self, path: &str) -> FsResult<()> {
        let (off, len) = (self.rng.gen_range(0..60_000u64), self.rng.gen_range(1..12_000));
        let pos = self.begin(format!("write {path} at {off} ({len} bytes)"));
        let ino = self.touch_data(pos, path)?;
        let data = self.data(len);
        lock(self.fs).write(ino, off, &data).map(|_| ())
    }

    fn truncate(&mut self, path: &str) -> FsResult<()> {
        let size = self.rng.gen_range(0..40_000u64);
        let pos = self.begin(format!("truncate {path} to {size}"));
        let ino = self.touch_data(pos, path)?;
        lock(self.fs).setattr(ino, &SetAttr { size: Some(size), ..Default::default() }).map(|_| ())
    }

    /// Renames a file to `to`, replacing the file there if any.
    fn rename(&mut self, from: &str, to: &str) -> FsResult<()> {
        let pos = self.begin(format!("rename {from} {to}"));
        if self.files.contains(to) && self.ino(to)? != self.ino(from)? {
            self.touch_inode(pos, to)?;
        }
        self.touch_name(pos, from);
        self.touch_name(pos, to);
        let (d, n) = self.parent(from)?;
        let (nd, nn) = self.parent(to)?;
        lock(self.fs).rename(d, n.as_bytes(), nd, nn.as_bytes(), RenameFlags::default())?;
        // (renaming a name onto another name of the same inode leaves both)
        if self.ino(from).is_err() {
            self.files.remove(from);
        }
        self.files.insert(to.to_string());
        Ok(())
    }

    fn link(&mut self, existing: &str, new: &str) -> FsResult<()> {
        let pos = self.begin(format!("link {existing} {new}"));
        self.touch_name(pos, new);
        let ino = self.ino(existing)?;
        let (d, n) = self.parent(new)?;
        lock(self.fs).link(ino, d, n.as_bytes())?;
        self.files.insert(new.to_string());
        Ok(())
    }

    fn unlink(&mut self, path: &str) -> FsResult<()> {
        let pos = self.begin(format!("unlink {path}"));
        self.touch_name(pos, path);
        self.touch_inode(pos, path)?;
        let (d, n) = self.parent(path)?;
        lock(self.fs).unlink(d, n.as_bytes())?;
        self.files.remove(path);
        Ok(())
    }

    /// Makes `/tN/e` if missing, removes it if empty, else removes a file in it.
    fn mkdir_rmdir_e(&mut self) -> FsResult<()> {
        let e = format!("{}/e", self.top);
        if !self.e_exists {
            let pos = self.begin(format!("mkdir {e}"));
            self.touch_name(pos, &e);
            let top = self.ino(&self.top)?;
            lock(self.fs).mkdir(top, b"e", 0o755, 0, 0)?;
            self.e_exists = true;
            return Ok(());
        }
        if let Some(f) = self.files.iter().find(|f| under(f, &e)).cloned() {
            return self.unlink(&f);
        }
        let pos = self.begin(format!("rmdir {e}"));
        self.touch_name(pos, &e);
        let top = self.ino(&self.top)?;
        lock(self.fs).rmdir(top, b"e")?;
        self.e_exists = false;
        Ok(())
    }

    /// fsync (its writes outside the lock); from its return the file keeps its name and
    /// contents, and its inode stays reachable, until this worker changes them.
    fn fsync(&mut self, path: &str) -> FsResult<()> {
        self.begin(format!("fsync {path}"));
        let ino = self.ino(path)?;
        Fs::fsync_shared(self.fs, ino)?;
        let from = self.rec.log_len();
        let contents = {
            let mut g = lock(self.fs);
            let size = g.getattr(ino)?.size;
            g.read(ino, 0, size as usize)?
        };
        let promise = |kind, contents| Promise {
            kind,
            paths: vec![path.to_string()],
            ino,
            contents,
            runs: None,
            from,
            until: None,
        };
        self.promises.push(promise(PromiseKind::Fsync, Some(contents)));
        self.promises.push(promise(PromiseKind::Kept, None));
        Ok(())
    }
}

/// The syncer of a mount on the recorded file system, on simulated time it moves itself: the
/// scaled policy's sweeps and the background flushes, until `stop`.
fn syncer(
    fs: &SharedFs,
    clock: &SimClock,
    wanted: &FlushRequest,
    mut sweeper: Sweeper,
    stop: &AtomicBool,
) -> FsResult<()> {
    while !stop.load(AtOrd::Relaxed) {
        if wanted.wait(Duration::from_millis(1)) {
            Sweeper::flush_shared(fs, 8)?;
        }
        clock.advance(20_000_000);
        let due = lock(fs).now_ns() >= sweeper.next_due();
        if due {
            sweeper.tick_shared(fs)?;
        }
    }
    Ok(())
}

/// Records the concurrent workload: the setup (each worker's `/tN` with files and a directory
/// `d`, not recorded), then `opts.ops` operations shared among the workers, with the syncer,
/// on a mount with a small cache; then the unmount, or a crash, as `opts.end` says.
pub fn record(ordering: Ordering, seed: u64, opts: &CrashOptions) -> Result<Recording, CrashError> {
    let fail = |what: String| {
        move |source| CrashError::Fs { what: format!("{CONCURRENT} ({ordering}, seed {seed}): {what}"), source }
    };
    let dev = Arc::new(opts.new_device(opts.blocks));
    super::make_fs(&dev, (opts.blocks / 8).max(256)).map_err(fail("mkfs".into()))?;
    let clock = Arc::new(SimClock::new());
    let mut rng = SmallRng::seed_from_u64(seed);
    let mount = |d: Arc<dyn BlockDevice>, cache_blocks| {
        Fs::mount(d, MountOptions { ordering, cache_blocks, readonly: false }, clock.clone())
    };

    let mut fs = mount(dev.clone(), 4096).map_err(fail("mount for setup".into()))?;
    let stable = {
        let mut w = Work::new(&mut fs, &mut rng, &clock, None, Vec::new(), None);
        let setup = |w: &mut Work| -> FsResult<()> {
            for t in 0..WORKERS {
                w.mkdir(&format!("/t{t}"))?;
                w.mkdir(&format!("/t{t}/d"))?;
                for i in 0..2 {
                    w.create(&format!("/t{t}/f{i}"), 3000 + 5000 * i)?;
                    w.create(&format!("/t{t}/d/f{i}"), 100)?;
                }
            }
            Ok(())
        };
        setup(&mut w).map_err(fail("setup".into()))?;
        w.walk("/").map_err(fail("walk after setup".into()))?
    };
    fs.unmount().map_err(fail("unmount after setup".into()))?;
    drop(fs);
    let mut global = setup_promises(&stable);

    let image = dev.blocks();
    // Each write batch takes a while, as on a real device, so that the workers' fsyncs have
    // flights in the air together (group commit's flights side by side) for the judge to see.
    let rec = RecordingDevice::new(MemDevice::from_units(BS, opts.unit(), image.clone())).slow(DEVICE_TIME);
    let rec = Arc::new(rec);
    let mut fs = mount(rec.clone(), opts.cache_blocks).map_err(fail("mount".into()))?;
    let sweeper = scaled_sweeper(opts.update.unwrap_or(UpdatePolicy::Aipu), &mut fs);
    let fs: SharedFs = Arc::new(Mutex::new(fs));
    let order = AtomicUsize::new(0);
    let mut workers: Vec<Worker> = (0..WORKERS)
        .map(|t| {
            let top = format!("/t{t}");
            let mine: Vec<Promise>;
            (mine, global) = global.drain(..).partition(|p| p.paths[0].starts_with(&format!("{top}/")));
            let files =
                stable.iter().filter(|(p, dir, _)| !dir && p.starts_with(&format!("{top}/"))).map(|e| e.0.clone());
            Worker {
                fs: &fs,
                rec: &rec,
                rng: SmallRng::seed_from_u64(seed.wrapping_mul(31).wrapping_add(t as u64)),
                files: files.collect(),
                top,
                e_exists: false,
                ops: Vec::new(),
                order: &order,
                promises: mine,
            }
        })
        .collect();
    let stop = AtomicBool::new(false);
    let wanted = lock(&fs).attach_flusher();
    let per_worker = opts.ops.div_ceil(WORKERS);
    let start = Barrier::new(WORKERS);
    let failed = |what: String, source| CrashError::Fs {
        what: format!("{CONCURRENT} ({ordering}, seed {seed}): {what}"),
        source,
    };
    let results: Vec<Result<(), CrashError>> = std::thread::scope(|s| {
        let syncer = s.spawn(|| syncer(&fs, &clock, &wanted, sweeper, &stop).map_err(|e| failed("syncer".into(), e)));
        let handles: Vec<_> = workers
            .iter_mut()
            .map(|w| {
                let start = &start;
                s.spawn(move || {
                    // (together from the start, and, as a mount's request threads, which go back
                    // to the kernel between requests, giving way between operations)
                    start.wait();
                    for _ in 0..per_worker {
                        w.step().map_err(|e| failed(w.ops.last().map_or(String::new(), |o| o.2.clone()), e))?;
                        std::thread::yield_now();
                    }
                    Ok(())
                })
            })
            .collect();
        let join = |h: std::thread::ScopedJoinHandle<'_, _>| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        let mut out: Vec<Result<(), CrashError>> = handles.into_iter().map(join).collect();
        stop.store(true, AtOrd::Relaxed);
        out.push(join(syncer));
        out
    });
    results.into_iter().collect::<Result<Vec<()>, CrashError>>()?;
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.ops);
        global.extend(w.promises);
    }
    // (log positions alone leave operations that wrote nothing between them unordered)
    all.sort_by_key(|o| (o.0, o.1));
    let mut ops: Vec<(usize, String)> = all.into_iter().map(|(pos, _, what)| (pos, what)).collect();
    let unmounted = match opts.end {
        End::Auto => seed % 2 == 1,
        End::Unmount => true,
        End::Crash => false,
    };
    let mut fs =
        Arc::try_unwrap(fs).ok().expect("every thread is done").into_inner().unwrap_or_else(|p| p.into_inner());
    if unmounted {
        ops.push((rec.log_len(), "unmount".into()));
        fs.unmount().map_err(fail("unmount".into()))?;
    }
    drop(fs);
    let mut r = Recording::new(CONCURRENT, ordering, seed, image, &rec, &ops, global);
    r.unmounted = unmounted;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workers' operations interleave in the log, and they make fsync promises.
    #[test]
    fn workers_interleave() {
        let opts = CrashOptions { ops: 150, end: End::Unmount, ..Default::default() };
        let rec = record(Ordering::Softdep, 1, &opts).unwrap();
        let worker = |o: &String| o.split(':').next().map(str::to_string);
        let switches = rec.ops.windows(2).filter(|w| worker(&w[0]) != worker(&w[1])).count();
        assert!(switches > 10, "the workers ran one after another: {:?}", rec.ops);
        assert!(rec.ops.iter().any(|o| o.contains("fsync")));
        assert!(rec.promises.iter().any(|iv| iv.p.kind == PromiseKind::Fsync));
        assert_eq!(rec.ops.last().map(String::as_str), Some("unmount"));
    }
}
