//! Concurrency stress of the library through the handle a mount shares (`SharedFs`): four
//! workers, each in its own subtree with its own exact model (tests/common/tree.rs), run a
//! seeded mix of creates, writes at offsets, truncations, reads, mkdirs, renames within and
//! across their directories, links, unlinks, rmdirs and fsyncs (`Fs::fsync_shared`, its writes
//! outside the lock), while a syncer thread runs the update policy's sweeps (`tick_shared`) and
//! the memory bound's flushes (`flush_shared`) as the mount's syncer does, and another thread
//! syncs the whole file system now and then. The cache and soft updates' bound are small, so
//! the flushes outside the lock run all the time.
//!
//! Every operation's result (Ok or the errno) and every read is checked against the worker's
//! model as it runs; at the end every subtree is compared with its model, the file system is
//! unmounted, fsck'ed, remounted and compared again. The device checks that no two batches are
//! ever written at once (one flight at a time: the crash tester's model of a run relies on it).
//!
//! `SUFS_CONCURRENCY_SEEDS` (comma-separated) and `SUFS_CONCURRENCY_OPS` (per worker) for
//! longer runs.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtOrd};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use common::tree::{compare, ops, Model, Node, R};
use common::{assert_clean, pattern, resolve};
use sufs_fs::clock::SimClock;
use sufs_fs::dev::{BlockDevice, DevResult, DevStats, MemDevice, WriteKind, WriteReq};
use sufs_fs::fs::flight::MAX_IN_AIR;
use sufs_fs::fs::{lock, mkfs, Fs, MkfsOptions, MountOptions, Ordering, SharedFs};
use sufs_fs::policy::{Sweeper, SyncerOptions, UpdatePolicy};

const WORKERS: usize = 4;
/// The buffer cache, in blocks: small, so that dirty buffers pass half of it all the time.
const CACHE_BLOCKS: usize = 48;
/// Soft updates' memory bound: small, so that its flushes run too.
const SOFTDEP_LIMIT: usize = 200;
const IMAGE_BLOCKS: u64 = 16384;

/// Each worker's names, under its own directory `tN`: directories three deep and files at
/// every level, so that renames move files and trees within and across its directories.
const POOL: [&str; 15] = [
    "d0",
    "d1",
    "d0/d2",
    "d1/d3",
    "d0/d2/d4",
    "f0",
    "f1",
    "f2",
    "d0/f3",
    "d0/f4",
    "d1/f5",
    "d1/f6",
    "d0/d2/f7",
    "d1/d3/f8",
    "d0/d2/d4/f9",
];

/// A device over memory that counts the batches written at once (group commit's flights side by
/// side), the most at once, and the blocks written by two batches at once (never allowed: the
/// two writes would race on the medium).
struct Serial {
    inner: MemDevice,
    /// The blocks of the batches being written, by batch.
    writing: Mutex<Vec<Vec<u64>>>,
    overlaps: AtomicU64,
    most: AtomicU64,
    clashes: AtomicU64,
}

impl BlockDevice for Serial {
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn read_block(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        self.inner.read_block(bno, buf)
    }
    fn read_run(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        self.inner.read_run(bno, buf)
    }
    fn write_batch(&self, reqs: &[WriteReq], kind: WriteKind) -> DevResult<()> {
        let mine: Vec<u64> = reqs.iter().map(|r| r.bno).collect();
        {
            let mut w = self.writing.lock().unwrap();
            if !w.is_empty() {
                self.overlaps.fetch_add(1, AtOrd::SeqCst);
            }
            let clash = w.iter().flatten().any(|b| mine.contains(b));
            self.clashes.fetch_add(clash as u64, AtOrd::SeqCst);
            w.push(mine.clone());
            self.most.fetch_max(w.len() as u64, AtOrd::SeqCst);
        }
        // (a pause makes an overlap, and a clash if the file system allowed one, likely)
        std::thread::yield_now();
        let r = self.inner.write_batch(reqs, kind);
        let mut w = self.writing.lock().unwrap();
        let at = w.iter().position(|b| *b == mine).expect("this batch is being written");
        w.swap_remove(at);
        r
    }
    fn stats(&self) -> DevStats {
        self.inner.stats()
    }
}

/// What a worker did, by operation: attempts and successes.
#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    tried: [u64; 10],
    done: [u64; 10],
}

const KINDS: [&str; 10] =
    ["create", "mkdir", "write", "truncate", "read", "unlink", "rmdir", "rename", "link", "fsync"];

impl Counts {
    fn add(&mut self, o: &Counts) {
        for k in 0..KINDS.len() {
            self.tried[k] += o.tried[k];
            self.done[k] += o.done[k];
        }
    }
}

/// One worker: `n` operations on its subtree `tN`, each checked against its model; the model
/// back at the end.
fn worker(fs: SharedFs, t: usize, seed: u64, n: usize) -> (Model, Counts) {
    let mut rng = SmallRng::seed_from_u64(seed.wrapping_mul(1000).wrapping_add(t as u64));
    let top = format!("t{t}");
    let path = |i: usize| format!("{top}/{}", POOL[i]);
    let mut m = Model::default();
    m.add(&top, Node::Dir).unwrap();
    let mut c = Counts::default();
    for i in 0..n {
        let kind = pick(&mut rng);
        // A name that exists, of the kind the operation needs, two times in three (else any
        // name of the pool: most then fail, with the errno the model predicts); a link's or a
        // rename's new name free two times in three.
        let want_dir = match kind {
            2 | 3 | 4 | 5 | 8 => Some(false),
            6 => Some(true),
            _ => None,
        };
        let existing: Vec<&String> = m
            .paths
            .iter()
            .filter(|(k, n)| **k != top && want_dir.is_none_or(|d| d == (m.nodes[**n] == Node::Dir)))
            .map(|(k, _)| k)
            .collect();
        let a = match kind {
            2..=9 if !existing.is_empty() && rng.gen_ratio(2, 3) => existing[rng.gen_range(0..existing.len())].clone(),
            _ => path(rng.gen_range(0..POOL.len())),
        };
        let free: Vec<String> = (0..POOL.len()).map(path).filter(|p| !m.paths.contains_key(p)).collect();
        let b = match kind {
            7 | 8 if !free.is_empty() && rng.gen_ratio(2, 3) => free[rng.gen_range(0..free.len())].clone(),
            _ => path(rng.gen_range(0..POOL.len())),
        };
        let what = format!("worker {t} (seed {seed}) op {i}: {} {a} {b}", KINDS[kind]);
        let (want, got): (R<()>, R<()>) = match kind {
            0 => (m.add(&a, Node::File(Vec::new())), ops::create(&mut lock(&fs), &a)),
            1 => (m.add(&a, Node::Dir), ops::mkdir(&mut lock(&fs), &a)),
            2 => {
                let (off, len, s) = (rng.gen_range(0..240_000u64), rng.gen_range(1..16_000usize), rng.gen::<u64>());
                (m.write(&a, off as usize, &pattern(s, len)), ops::write(&mut lock(&fs), &a, off, len, s))
            }
            3 => {
                let size = rng.gen_range(0..240_000u64);
                (m.truncate(&a, size as usize), ops::truncate(&mut lock(&fs), &a, size))
            }
            4 => {
                let (off, len) = (rng.gen_range(0..250_000u64), rng.gen_range(1..20_000usize));
                let want = m.read(&a, off as usize, len);
                // Resolved under the lock, read with the device reads outside it, as the mount does.
                let ino = resolve(&mut lock(&fs), &a).map_err(|e| e.errno());
                let got = ino.and_then(|ino| Fs::read_shared(&fs, ino, off, len).map_err(|e| e.errno()));
                assert!(got == want, "{what}: read {len} at {off} differs from the model");
                (want.map(|_| ()), got.map(|_| ()))
            }
            5 => (m.unlink(&a), ops::unlink(&mut lock(&fs), &a)),
            6 => (m.rmdir(&a), ops::rmdir(&mut lock(&fs), &a)),
            7 => (m.rename(&a, &b), ops::rename(&mut lock(&fs), &a, &b)),
            8 => (m.link(&a, &b), ops::link(&mut lock(&fs), &a, &b)),
            _ => {
                // Only this worker changes its subtree, so the inode stays while its fsync runs
                // with the lock released.
                let want = m.resolve(&a).and_then(|n| n.map(|_| ()).ok_or(libc::ENOENT));
                let ino = resolve(&mut lock(&fs), &a).map_err(|e| e.errno());
                let got = ino.and_then(|ino| Fs::fsync_shared(&fs, ino).map_err(|e| e.errno()));
                (want, got)
            }
        };
        assert_eq!(got, want, "{what}");
        c.tried[kind] += 1;
        c.done[kind] += want.is_ok() as u64;
        if i % 97 == 96 {
            compare(&mut lock(&fs), &m, &top);
        }
    }
    (m, c)
}

/// An operation kind, by weight.
fn pick(rng: &mut SmallRng) -> usize {
    const WEIGHTS: [u32; 10] = [4, 3, 7, 1, 4, 2, 1, 4, 2, 1];
    let mut x = rng.gen_range(0..WEIGHTS.iter().sum::<u32>());
    for (k, w) in WEIGHTS.iter().enumerate() {
        if x < *w {
            return k;
        }
        x -= w;
    }
    unreachable!()
}

/// Waits for a thread, failing the test (rather than hanging it) after `limit`.
fn join<T>(h: JoinHandle<T>, what: &str, deadline: Instant) -> T {
    while !h.is_finished() {
        assert!(Instant::now() < deadline, "{what} still running at the deadline: a hang");
        std::thread::sleep(Duration::from_millis(5));
    }
    h.join().unwrap_or_else(|_| panic!("{what} panicked"))
}

struct Figures {
    counts: Counts,
    flushes: u64,
    sweeps: u64,
    syncs: u64,
    changed_in_flight: u64,
    batches: u64,
}

fn mount(dev: &Arc<Serial>, ordering: Ordering, clock: &Arc<SimClock>) -> Fs {
    let d: Arc<dyn BlockDevice> = dev.clone();
    let opts = MountOptions { ordering, cache_blocks: CACHE_BLOCKS, readonly: false };
    let mut fs = Fs::mount(d, opts, clock.clone()).expect("mount");
    fs.set_softdep_limit(SOFTDEP_LIMIT);
    fs
}

/// One run: the workers, the syncer and the syncing thread on one shared file system; then
/// the comparisons, the unmount, fsck, the remount and the comparisons again.
fn run(ordering: Ordering, seed: u64, n: usize) -> Figures {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(120);
    let mem = MemDevice::new(4096, IMAGE_BLOCKS);
    let (overlaps, most, clashes) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let dev = Arc::new(Serial { inner: mem, writing: Mutex::new(Vec::new()), overlaps, most, clashes });
    mkfs(dev.clone(), &MkfsOptions::default(), (1_700_000_000, 0)).expect("mkfs");
    let clock = Arc::new(SimClock::new());
    let fs: SharedFs = Arc::new(Mutex::new(mount(&dev, ordering, &clock)));
    for t in 0..WORKERS {
        ops::mkdir(&mut lock(&fs), &format!("t{t}")).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));

    // The syncer, as the mount's (`Syncer::start`), on simulated time that it moves itself:
    // the policy's sweeps (AIPU or PU by seed, their times scaled down) and the background
    // flushes the cache and soft updates' bound ask for.
    let policy = if seed.is_multiple_of(2) { UpdatePolicy::Pu } else { UpdatePolicy::Aipu };
    let mut o = SyncerOptions::for_policy(policy);
    o.age = Duration::from_millis(200);
    o.interval = Duration::from_millis(if policy == UpdatePolicy::Pu { 100 } else { 20 });
    o.metadata_interval = Duration::from_millis(300);
    let mut sweeper = Sweeper::new(o, &mut lock(&fs));
    let wanted = lock(&fs).attach_flusher();
    let syncer = {
        let (fs, stop, clock) = (fs.clone(), stop.clone(), clock.clone());
        std::thread::spawn(move || {
            let (mut flushes, mut sweeps) = (0, 0);
            while !stop.load(AtOrd::Relaxed) {
                if wanted.wait(Duration::from_millis(1)) {
                    Sweeper::flush_shared(&fs, 8).expect("background flush");
                    flushes += 1;
                }
                clock.advance(10_000_000);
                let due = lock(&fs).now_ns() >= sweeper.next_due();
                if due {
                    sweeper.tick_shared(&fs).expect("sweep");
                    sweeps += 1;
                }
            }
            (flushes, sweeps)
        })
    };
    let syncing = {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut syncs = 0;
            while !stop.load(AtOrd::Relaxed) {
                std::thread::sleep(Duration::from_millis(25));
                lock(&fs).sync_all().expect("sync");
                syncs += 1;
            }
            syncs
        })
    };
    let workers: Vec<_> = (0..WORKERS)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || worker(fs, t, seed, n))
        })
        .collect();
    let mut models = Vec::new();
    let mut counts = Counts::default();
    for (t, h) in workers.into_iter().enumerate() {
        let (m, c) = join(h, &format!("worker {t} ({ordering}, seed {seed})"), deadline);
        counts.add(&c);
        models.push(m);
    }
    stop.store(true, AtOrd::Relaxed);
    let (flushes, sweeps) = join(syncer, "the syncer", deadline);
    let syncs = join(syncing, "the syncing thread", deadline);

    let mut fs = Arc::try_unwrap(fs).ok().expect("every thread is done").into_inner().unwrap();
    let changed_in_flight = fs.stats().cache.changed_in_flight;
    for (t, m) in models.iter().enumerate() {
        compare(&mut fs, m, &format!("t{t}"));
    }
    fs.unmount().unwrap();
    drop(fs);
    // Batches at once only for group commit (flights side by side: softdep's fsyncs), never a
    // block in two of them, never more than `MAX_IN_AIR`.
    let (overlaps, most) = (dev.overlaps.load(AtOrd::SeqCst), dev.most.load(AtOrd::SeqCst));
    assert_eq!(dev.clashes.load(AtOrd::SeqCst), 0, "{ordering}, seed {seed}: a block in two batches at once");
    assert!(most <= MAX_IN_AIR as u64, "{ordering}, seed {seed}: {most} batches at once");
    assert!(ordering == Ordering::Softdep || overlaps == 0, "{ordering}, seed {seed}: {overlaps} batches side by side");
    let batches = dev.stats().batches;
    assert_clean(&dev.inner);
    let mut fs = mount(&dev, ordering, &clock);
    for (t, m) in models.iter().enumerate() {
        compare(&mut fs, m, &format!("t{t}"));
    }
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&dev.inner);
    eprintln!(
        "{ordering}, seed {seed}, {policy}: {} operations ({} succeeded), {flushes} background flushes, \
         {sweeps} sweeps, {syncs} syncs, {changed_in_flight} buffers changed in flight, {batches} batches, {:.1} s",
        counts.tried.iter().sum::<u64>(),
        counts.done.iter().sum::<u64>(),
        started.elapsed().as_secs_f64()
    );
    Figures { counts, flushes, sweeps, syncs, changed_in_flight, batches }
}

fn seeds() -> Vec<u64> {
    let s = std::env::var("SUFS_CONCURRENCY_SEEDS").unwrap_or_else(|_| "1,2,3".into());
    s.split(',').map(|x| x.trim().parse().expect("SUFS_CONCURRENCY_SEEDS: numbers")).collect()
}

fn ops_per_worker() -> usize {
    // (a debug build, as `cargo test` makes, runs about eight times slower)
    let default = if cfg!(debug_assertions) { 4000 } else { 20000 };
    std::env::var("SUFS_CONCURRENCY_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Every kind of operation succeeded in the run, and the background paths all ran (the
/// background flush under soft updates: under sync ordering the syncs keep the cache clean
/// enough that a short run may never ask for one).
fn check_exercised(ordering: Ordering, f: &Figures) {
    for (k, name) in KINDS.iter().enumerate() {
        assert!(f.counts.done[k] > 0, "{ordering}: no {name} succeeded: {:?}", f.counts);
    }
    assert!(f.flushes > 0 || ordering == Ordering::Sync, "{ordering}: the background flush never ran");
    assert!(f.sweeps > 0 && f.syncs > 0 && f.batches > 0, "{ordering}: sweeps {} syncs {}", f.sweeps, f.syncs);
}

#[test]
fn softdep_workers_syncer_and_syncs_race() {
    let mut in_flight = 0;
    for seed in seeds() {
        let f = run(Ordering::Softdep, seed, ops_per_worker());
        check_exercised(Ordering::Softdep, &f);
        in_flight += f.changed_in_flight;
    }
    assert!(in_flight > 0, "no buffer was ever changed while a write of it was in flight");
}

#[test]
fn sync_workers_syncer_and_syncs_race() {
    for seed in seeds() {
        let f = run(Ordering::Sync, seed, ops_per_worker() / 2);
        check_exercised(Ordering::Sync, &f);
    }
}

/// The crash tester's concurrent workload (three workers, the syncer's sweeps and flushes, and
/// fsyncs writing outside the lock, recorded on one device): no crash state of softdep or sync
/// breaks a rule or a promise, those of group commit's flights side by side among them (any
/// part of each in the air); async, the negative control, is caught in every run.
#[test]
fn crash_states_of_concurrent_runs_are_judged() {
    use sufs_lab::crashtest::{self, CrashOptions, End, CONCURRENT};
    let mut side_by_side = 0;
    for seed in 1..=4u64 {
        let end = if seed % 2 == 1 { End::Unmount } else { End::Crash };
        let opts = CrashOptions { ops: 120, end, ..Default::default() };
        for ordering in [Ordering::Softdep, Ordering::Sync] {
            let s = crashtest::run(ordering, CONCURRENT, seed, &opts).unwrap();
            assert!(s.states > 20 && s.promises.get("fsyncs").is_some_and(|&n| n > 0), "{s}");
            assert_eq!(s.violations, 0, "{s}");
            side_by_side += s.shared;
        }
        let s = crashtest::run(Ordering::Async, CONCURRENT, seed, &opts).unwrap();
        assert!(s.violations > 0, "async not caught: the tester is broken\n{s}");
    }
    assert!(side_by_side > 0, "no flights side by side were judged");
}
