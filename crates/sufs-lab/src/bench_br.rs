//! `sufs bench br`: the Block Register paper's Figure 2. With an active volume snapshot, both
//! exception stores side by side: 4 KiB direct writes (random and sequential, 1 and 8 outstanding)
//! to a large file, in IOPS, and unpacking copies of a source tree then deleting them. On the
//! simulated disk (`ModelDevice`: seek distance matters) and on an image file.
//!
//! Direct writes go to the file's blocks (found with `fibmap`) straight through the volume, as
//! O_DIRECT overwrites of an allocated file do; 8 outstanding requests are one batch, sorted as an
//! elevator would. The br store's pool is refilled between requests, outside any I/O (the
//! paper's background thread, run in step so that the simulation is deterministic).
//!
//! On the simulated disk the volume lives in a `SparseDevice` that keeps only blocks that are not
//! all zeros, and the large file is written with zeros: a volume with the paper's 50 GB file then
//! takes memory only for its metadata. The file system, the file and the snapshot are made once
//! per store (`SimBase`) and forked for every run, so that every run starts from the snapshot.
//! `sufs bench papers --paper block-register` runs the same code at the paper's scale.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use sufs_fs::clock::{Clock, SimClock};
use sufs_fs::dev::{
    check_range, count_runs, BlockDevice, Counters, DevResult, DevStats, DiskModel, FileDevice, ModelDevice, WriteKind,
    WriteReq,
};
use sufs_fs::format::ROOT_INO;
use sufs_fs::fs::{lock, SharedFs};
use sufs_fs::fs::{mkfs, Fs, FsError, MkfsOptions, MountOptions};
use sufs_fs::volume::{PoolOptions, PrefixDevice, StoreKind, VolumeDevice, VolumeError};

#[derive(Debug, Clone)]
pub struct BrBenchOptions {
    /// Volume size in 4 KiB blocks; the reserved store gets the last fifth.
    pub blocks: u64,
    /// The large file, in blocks.
    pub file_blocks: u64,
    /// Requests per direct-write run.
    pub ios: u64,
    /// Requests per run on the image file (each is fdatasync'ed).
    pub file_ios: u64,
    pub tree: PathBuf,
    pub tree_files: usize,
    pub copies: usize,
    pub dir: PathBuf,
    pub seed: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BrRow {
    pub device: String,
    pub test: String,
    pub reserved: f64,
    pub br: f64,
    /// br relative to reserved, percent (IOPS: higher is better; times: lower is better).
    pub br_vs_reserved: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BrBenchResult {
    pub rows: Vec<BrRow>,
    /// Store blocks used after all runs on the simulated disk, and the space each store took.
    pub space: Vec<(String, u64, u64)>,
    /// Where the time went in each run on the simulated disk.
    pub profiles: Vec<Profile>,
}

type R<T> = Result<T, VolumeError>;

/// The br store's pool in these runs: 4096 blocks at first, refilled by 4096 below 2048.
pub const POOL: PoolOptions = PoolOptions { initial: 4096, low_watermark: 2048, grow: 4096 };

/// An in-memory device that stores only blocks that are not all zeros; the others read as
/// zeros. `fork` copies it (the blocks are shared until overwritten).
pub struct SparseDevice {
    bs: usize,
    blocks: u64,
    map: Mutex<HashMap<u64, Arc<[u8]>>>,
    counters: Counters,
}

impl SparseDevice {
    pub fn new(bs: usize, blocks: u64) -> SparseDevice {
        SparseDevice { bs, blocks, map: Mutex::new(HashMap::new()), counters: Counters::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<[u8]>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A copy of the device as it is now, with fresh counters.
    pub fn fork(&self) -> SparseDevice {
        SparseDevice {
            bs: self.bs,
            blocks: self.blocks,
            map: Mutex::new(self.lock().clone()),
            counters: Counters::default(),
        }
    }

    /// Blocks stored (not all zeros).
    pub fn stored(&self) -> usize {
        self.lock().len()
    }
}

impl BlockDevice for SparseDevice {
    fn block_size(&self) -> usize {
        self.bs
    }
    fn num_blocks(&self) -> u64 {
        self.blocks
    }
    fn read_block(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        check_range(bno, self.blocks)?;
        self.counters.read();
        match self.lock().get(&bno) {
            Some(b) => buf.copy_from_slice(b),
            None => buf.fill(0),
        }
        Ok(())
    }
    fn write_batch(&self, reqs: &[WriteReq], kind: WriteKind) -> DevResult<()> {
        if reqs.is_empty() {
            return Ok(());
        }
        for r in reqs {
            check_range(r.bno, self.blocks)?;
            assert_eq!(r.data.len(), self.bs, "a whole block");
        }
        let mut map = self.lock();
        for r in reqs {
            // An OR over the block (no early exit) is vectorised.
            if r.data.iter().fold(0u8, |a, &x| a | x) == 0 {
                map.remove(&r.bno);
            } else {
                map.insert(r.bno, r.data.into());
            }
        }
        self.counters.batch(reqs.len(), count_runs(reqs, self.bs), kind);
        Ok(())
    }
    fn stats(&self) -> DevStats {
        self.counters.snapshot()
    }
}

/// A volume made once per store and forked for every run on the simulated disk: a file system
/// (over all of the volume, or all but the reserved store's last fifth), the large file (zeros)
/// and a fresh snapshot.
pub struct SimBase {
    dev: SparseDevice,
    pub kind: StoreKind,
    /// The file system's size in blocks.
    pub fs_blocks: u64,
    /// The large file's physical blocks, in file order (`fibmap`).
    pub file: Vec<u64>,
}

impl SimBase {
    pub fn new(kind: StoreKind, blocks: u64, file_blocks: u64) -> R<SimBase> {
        let dev = Arc::new(SparseDevice::new(4096, blocks));
        let raw: Arc<dyn BlockDevice> = dev.clone();
        let fs_blocks = if kind == StoreKind::Reserved { blocks - blocks / 5 } else { blocks };
        mkfs(Arc::new(PrefixDevice { inner: raw.clone(), blocks: fs_blocks }), &MkfsOptions::default(), (1, 0))?;
        let file = make_big_file(raw.clone(), file_blocks, 0)?;
        VolumeDevice::create(raw.clone(), kind, POOL, 1)?;
        drop(raw);
        let dev = Arc::try_unwrap(dev).map_err(|_| VolumeError::Invalid("the base device is still in use".into()))?;
        Ok(SimBase { dev, kind, fs_blocks, file })
    }

    /// A run on the simulated disk from this base: the volume opened on a fork of it under the
    /// disk model, the file system mounted on the volume.
    pub fn start(&self, model: &DiskModel, seed: u64, copy_free: bool) -> R<Setup> {
        let mem = Arc::new(self.dev.fork());
        let clock = Arc::new(SimClock::new());
        let model = Arc::new(ModelDevice::new(mem, model.clone(), clock.clone(), seed));
        let vol = VolumeDevice::open(model.clone(), POOL)?.ok_or(VolumeError::NoSnapshot)?;
        vol.set_copy_free(copy_free);
        let fs = Fs::mount(vol.clone(), MountOptions { cache_blocks: 4096, ..Default::default() }, clock.clone())?;
        Ok(Setup {
            vol,
            fs: Arc::new(Mutex::new(fs)),
            clock: Some(clock),
            model: Some(model),
            refill_s: Default::default(),
        })
    }
}

/// Writes `/big` of `blocks` blocks filled with `fill` on the file system of `dev` (mounted
/// and unmounted here); returns its physical blocks in file order.
fn make_big_file(dev: Arc<dyn BlockDevice>, blocks: u64, fill: u8) -> R<Vec<u64>> {
    let mut fs = Fs::mount(dev, MountOptions { cache_blocks: 4096, ..Default::default() }, Arc::new(SimClock::new()))?;
    let mut map = Vec::new();
    if blocks > 0 {
        let (ino, _) = fs.create(ROOT_INO, b"big", 0o644, 0, 0)?;
        let chunk = vec![fill; 4 << 20];
        let mut off = 0;
        while off < blocks * 4096 {
            let n = (blocks * 4096 - off).min(chunk.len() as u64) as usize;
            fs.write(ino, off, &chunk[..n])?;
            off += n as u64;
        }
        map = (0..blocks).map(|l| fs.fibmap(ino, l)).collect::<Result<_, FsError>>()?;
    }
    fs.unmount()?;
    Ok(map)
}

/// A run: the volume with its snapshot, the file system mounted on it, and on the simulated disk
/// the clock and the disk model.
pub struct Setup {
    pub vol: Arc<VolumeDevice>,
    pub fs: SharedFs,
    clock: Option<Arc<SimClock>>,
    /// The simulated disk, whose request log says where the time went.
    model: Option<Arc<ModelDevice<Arc<SparseDevice>>>>,
    /// Simulated seconds spent in the pool's refills (brexpand and what it brings).
    refill_s: std::cell::Cell<f64>,
}

/// Where a run's time went on the simulated disk.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Profile {
    pub run: String,
    pub store: String,
    /// Simulated seconds of the whole run, and of it in the pool's refills.
    pub seconds: f64,
    pub refill_seconds: f64,
    pub refills: u64,
    /// Store blocks that were in use at snapshot time, copied before the store used them.
    pub preserved: u64,
    /// Chunks copied on write.
    pub exceptions: u64,
    pub reads: u64,
    pub writes: u64,
    /// Requests that had to position the head (every request that did not stream after the one
    /// before it), and their mean seek distance in blocks.
    pub positionings: u64,
    pub mean_seek_blocks: f64,
    /// Write batches (each ends with a barrier).
    pub batches: u64,
    /// The seek distance of every positioning, in blocks, in order (for the figures).
    #[serde(skip)]
    pub seeks: Vec<u64>,
    /// The block of every request, in order, for the first requests of the run.
    #[serde(skip)]
    pub head: Vec<u64>,
    /// For every chunk copied, the distance in blocks between it and its copy in the store: the
    /// seek span of a copy-on-write (the paper's Figure 3).
    #[serde(skip)]
    pub cow_spans: Vec<u64>,
}

/// Requests kept in `Profile::head`.
const HEAD_REQUESTS: usize = 400;

/// A volume with a file system (over all of it, or all but the reserved area), a large file,
/// and an active snapshot with `kind`'s store, on an image file; then mounted on the volume.
fn setup_image(dev: Arc<dyn BlockDevice>, kind: StoreKind, file_blocks: u64) -> R<Setup> {
    let n = dev.num_blocks();
    let fs_blocks = if kind == StoreKind::Reserved { n - n / 5 } else { n };
    mkfs(Arc::new(PrefixDevice { inner: dev.clone(), blocks: fs_blocks }), &MkfsOptions::default(), (1, 0))?;
    make_big_file(dev.clone(), file_blocks, 0x5a)?;
    VolumeDevice::create(dev.clone(), kind, POOL, 1)?;
    let vol = VolumeDevice::open(dev, POOL)?.ok_or(VolumeError::NoSnapshot)?;
    vol.set_copy_free(true);
    let c: Arc<dyn Clock> = Arc::new(sufs_fs::clock::RealClock::new());
    let fs = Fs::mount(vol.clone(), MountOptions { cache_blocks: 4096, ..Default::default() }, c)?;
    Ok(Setup { vol, fs: Arc::new(Mutex::new(fs)), clock: None, model: None, refill_s: Default::default() })
}

/// The br store's refill thread, run in step (between requests, never inside one) so that the
/// simulation is deterministic; its simulated time is counted apart.
fn refill(s: &Setup) -> R<()> {
    let t0 = s.clock.as_ref().map(|c| c.now_ns());
    while s.vol.needs_refill() {
        if s.vol.refill(&s.fs)? == 0 {
            break;
        }
    }
    if let (Some(c), Some(t0)) = (&s.clock, t0) {
        s.refill_s.set(s.refill_s.get() + (c.now_ns() - t0) as f64 / 1e9);
    }
    Ok(())
}

/// What `Setup::begin` remembers: counters at the start of a measured run.
pub struct RunStart {
    refills: u64,
    dev: DevStats,
    exceptions: usize,
}

impl Setup {
    /// Starts a measured run: forgets the requests of the setup.
    pub fn begin(&self) -> RunStart {
        if let Some(m) = &self.model {
            m.clear_requests();
        }
        self.refill_s.set(0.0);
        RunStart {
            refills: self.vol.volume_stats().refills,
            dev: self.vol.stats(),
            exceptions: self.vol.exception_blocks().len(),
        }
    }

    /// The profile of the run since `begin`.
    pub fn profile(&self, run: &str, seconds: f64, before: &RunStart) -> Option<Profile> {
        let m = self.model.as_ref()?;
        let log = m.requests();
        let st = self.vol.volume_stats();
        let ds = self.vol.stats();
        let mut p = Profile {
            run: run.into(),
            store: format!("{}", self.vol.kind()),
            seconds,
            refill_seconds: self.refill_s.get(),
            refills: st.refills - before.refills,
            preserved: st.preserved,
            exceptions: st.exceptions,
            batches: ds.batches.saturating_sub(before.dev.batches),
            ..Default::default()
        };
        let mut dist = 0u64;
        for (i, r) in log.iter().enumerate() {
            if r.write {
                p.writes += 1;
            } else {
                p.reads += 1;
            }
            if i < HEAD_REQUESTS {
                p.head.push(r.bno);
            }
            let prev = i.checked_sub(1).map(|j| &log[j]);
            let streamed = prev.is_some_and(|q| q.bno + 1 == r.bno && q.done == r.start);
            if !streamed {
                p.positionings += 1;
                let d = prev.map_or(0, |q| q.bno.abs_diff(r.bno));
                dist += d;
                p.seeks.push(d);
            }
        }
        p.mean_seek_blocks = dist as f64 / p.positionings.max(1) as f64;
        let mut ex = self.vol.exception_blocks();
        ex.sort_unstable_by_key(|e| e.2);
        p.cow_spans = ex.iter().skip(before.exceptions).map(|&(o, s, _)| o.abs_diff(s)).collect();
        Some(p)
    }
}

fn now(s: &Setup, t0: Instant) -> f64 {
    match &s.clock {
        Some(c) => c.now_ns() as f64 / 1e9,
        None => t0.elapsed().as_secs_f64(),
    }
}

/// One direct-I/O test of the paper's first set: 4 KiB requests to the large file.
#[derive(Debug, Clone, Copy)]
pub struct DirectIo {
    pub random: bool,
    pub write: bool,
    /// Outstanding requests: each batch of this many is sorted and sent together.
    pub oio: usize,
}

impl DirectIo {
    pub fn name(&self) -> String {
        format!(
            "{} {} OIO {}",
            if self.random { "random" } else { "sequential" },
            if self.write { "write" } else { "read" },
            self.oio
        )
    }
}

/// Direct I/O to the large file, whose physical blocks are `blocks`: IOPS.
pub fn direct_io(s: &Setup, t: DirectIo, blocks: &[u64], ios: u64, seed: u64) -> R<f64> {
    assert!(!blocks.is_empty() && t.oio > 0);
    let mut rng = SmallRng::seed_from_u64(seed);
    let data = vec![0xc3u8; 4096];
    let mut buf = vec![0u8; 4096];
    let t0 = Instant::now();
    let mut start = now(s, t0);
    let mut next = rng.gen_range(0..blocks.len());
    // One batch first, not counted, to bring the head to the file from wherever mounting left it.
    let batches = ios.div_ceil(t.oio as u64);
    for i in 0..=batches {
        if i == 1 {
            start = now(s, t0);
        }
        let mut batch: Vec<u64> = (0..t.oio)
            .map(|_| {
                let b = if t.random { blocks[rng.gen_range(0..blocks.len())] } else { blocks[next % blocks.len()] };
                next += 1;
                b
            })
            .collect();
        batch.sort_unstable();
        batch.dedup();
        if t.write {
            let reqs: Vec<WriteReq> = batch.iter().map(|&b| WriteReq { bno: b, data: &data }).collect();
            s.vol.write_batch(&reqs, WriteKind::Sync)?;
        } else {
            for &b in &batch {
                s.vol.read_block(b, &mut buf)?;
            }
        }
        refill(s)?;
    }
    let ios = batches * t.oio as u64;
    Ok(ios as f64 / (now(s, t0) - start))
}

/// One file of a source tree: its directory (an index into the tree's directories), its size,
/// and its contents (None: zeros).
#[derive(Debug, Clone)]
pub struct TreeFile {
    pub dir: usize,
    pub len: usize,
    pub data: Option<Vec<u8>>,
}

/// A source tree to unpack: directories (each named by its index, in a flat list under the copy's
/// top directory) and files.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    pub dirs: usize,
    pub files: Vec<TreeFile>,
}

impl Tree {
    /// Up to `max` files of the tree at `root`, with their contents.
    pub fn read(root: &Path, max: usize) -> Tree {
        let mut t = Tree::default();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else { continue };
            let mut ents: Vec<_> = rd.flatten().collect();
            ents.sort_by_key(|e| e.path());
            let dir = t.dirs;
            t.dirs += 1;
            for e in ents {
                if t.files.len() >= max {
                    return t;
                }
                let Ok(ft) = e.file_type() else { continue };
                if ft.is_dir() {
                    stack.push(e.path());
                } else if ft.is_file() {
                    if let Ok(data) = std::fs::read(e.path()) {
                        t.files.push(TreeFile { dir, len: data.len(), data: Some(data) });
                    }
                }
            }
        }
        t
    }

    /// A tree of `files` files of zeros in `dirs` directories, the sizes log-normal with the given
    /// median (bytes) and shape, seeded: a stand-in for a source tree that is not on this machine.
    pub fn synthetic(files: usize, dirs: usize, median: f64, sigma: f64, seed: u64) -> Tree {
        assert!(dirs > 0 && median > 0.0);
        let mut rng = SmallRng::seed_from_u64(seed);
        let files = (0..files)
            .map(|i| {
                // Box-Muller: a standard normal from two uniforms.
                let (u1, u2): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen());
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let len = (median * (sigma * z).exp()).clamp(1.0, 4e6) as usize;
                TreeFile { dir: i * dirs / files.max(1), len, data: None }
            })
            .collect();
        Tree { dirs, files }
    }

    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.len as u64).sum()
    }
}

/// Unpack `copies` copies of the tree, then delete them: seconds.
pub fn unpack_delete(s: &Setup, tree: &Tree, copies: usize) -> R<f64> {
    let zeros = vec![0u8; tree.files.iter().map(|f| f.len).max().unwrap_or(0)];
    let t0 = Instant::now();
    let start = now(s, t0);
    for c in 0..copies {
        let top = lock(&s.fs).mkdir(ROOT_INO, format!("copy{c}").as_bytes(), 0o755, 0, 0)?.0;
        let mut dirs: Vec<Option<u32>> = vec![None; tree.dirs];
        for (i, f) in tree.files.iter().enumerate() {
            {
                let mut fs = lock(&s.fs);
                let dir = match dirs[f.dir] {
                    Some(d) => d,
                    None => {
                        let d = fs.mkdir(top, format!("d{}", f.dir).as_bytes(), 0o755, 0, 0)?.0;
                        dirs[f.dir] = Some(d);
                        d
                    }
                };
                let (ino, _) = fs.create(dir, format!("f{i}").as_bytes(), 0o644, 0, 0)?;
                fs.write(ino, 0, f.data.as_deref().unwrap_or(&zeros[..f.len]))?;
            }
            // Between operations, as the refill thread would get the lock.
            refill(s)?;
        }
    }
    for c in 0..copies {
        let mut fs = lock(&s.fs);
        let top = fs.lookup(ROOT_INO, format!("copy{c}").as_bytes())?.0;
        let mut dirs: Vec<Option<u32>> = vec![None; tree.dirs];
        for (i, f) in tree.files.iter().enumerate() {
            let dir = match dirs[f.dir] {
                Some(d) => d,
                None => {
                    let d = fs.lookup(top, format!("d{}", f.dir).as_bytes())?.0;
                    dirs[f.dir] = Some(d);
                    d
                }
            };
            fs.unlink(dir, format!("f{i}").as_bytes())?;
        }
        for (d, ino) in dirs.iter().enumerate() {
            if ino.is_some() {
                fs.rmdir(top, format!("d{d}").as_bytes())?;
            }
        }
        fs.rmdir(ROOT_INO, format!("copy{c}").as_bytes())?;
    }
    lock(&s.fs).sync_all()?;
    Ok(now(s, t0) - start)
}

fn row(device: &str, test: &str, reserved: f64, br: f64, higher_better: bool) -> BrRow {
    let rel = if higher_better { br / reserved } else { reserved / br };
    BrRow { device: device.into(), test: test.into(), reserved, br, br_vs_reserved: 100.0 * rel }
}

/// The direct-write tests of Figure 2.
pub const WRITE_TESTS: [DirectIo; 4] = [
    DirectIo { random: true, write: true, oio: 1 },
    DirectIo { random: true, write: true, oio: 8 },
    DirectIo { random: false, write: true, oio: 1 },
    DirectIo { random: false, write: true, oio: 8 },
];

/// The whole experiment.
pub fn run(o: &BrBenchOptions) -> R<BrBenchResult> {
    let tree = Tree::read(&o.tree, o.tree_files);
    let mut rows = Vec::new();
    let mut space = Vec::new();
    let model = DiskModel::modern();
    let mut profiles = Vec::new();
    let bases = [
        SimBase::new(StoreKind::Reserved, o.blocks, o.file_blocks)?,
        SimBase::new(StoreKind::Br, o.blocks, o.file_blocks)?,
    ];
    for t in WRITE_TESTS {
        let name = t.name().replace("write ", "");
        let mut v = [0.0; 2];
        for (k, base) in bases.iter().enumerate() {
            let s = base.start(&model, o.seed, true)?;
            let before = s.begin();
            v[k] = direct_io(&s, t, &base.file, o.ios, o.seed)?;
            profiles.extend(s.profile(&name, o.ios as f64 / v[k], &before));
            if t.random && t.oio == 8 {
                let st = s.vol.volume_stats();
                space.push((format!("{} (after {} random writes)", base.kind, o.ios), st.store_used, st.store_size));
            }
        }
        rows.push(row("simulated disk", &format!("{name} (IOPS)"), v[0], v[1], true));
    }
    // Unpack-then-delete, first as dm-snap does it (every chunk copied on its first write,
    // though the snapshot is of an empty file system), then copying only chunks in use at
    // snapshot time.
    let empty = [SimBase::new(StoreKind::Reserved, o.blocks, 0)?, SimBase::new(StoreKind::Br, o.blocks, 0)?];
    for copy_free in [true, false] {
        if tree.files.is_empty() {
            break;
        }
        let how = if copy_free { "" } else { ", free chunks not copied" };
        let mut v = [0.0; 2];
        for (k, base) in empty.iter().enumerate() {
            let s = base.start(&model, o.seed, copy_free)?;
            let before = s.begin();
            v[k] = unpack_delete(&s, &tree, o.copies)?;
            profiles.extend(s.profile(&format!("unpack, delete{how}"), v[k], &before));
            let st = s.vol.volume_stats();
            space.push((format!("{} (after unpack and delete{how})", base.kind), st.store_used, st.store_size));
        }
        rows.push(row(
            "simulated disk",
            &format!("unpack {} x {} files, delete{how} (s)", o.copies, tree.files.len()),
            v[0],
            v[1],
            false,
        ));
    }
    // The image file: real time, every request durable.
    for t in WRITE_TESTS {
        if o.file_ios == 0 {
            break;
        }
        let mut v = [0.0; 2];
        for (k, kind) in [StoreKind::Reserved, StoreKind::Br].into_iter().enumerate() {
            v[k] = image_run(&o.dir, kind, o.blocks, o.file_blocks, t, o.file_ios, o.seed)?;
        }
        rows.push(row("image file", &format!("{} (IOPS)", t.name().replace("write ", "")), v[0], v[1], true));
    }
    Ok(BrBenchResult { rows, space, profiles })
}

/// One direct-I/O test on a fresh image file in `dir` of `blocks` blocks with a file of
/// `file_blocks` and a snapshot with `kind`'s store, in real time: IOPS. The image is removed.
pub fn image_run(
    dir: &Path,
    kind: StoreKind,
    blocks: u64,
    file_blocks: u64,
    t: DirectIo,
    ios: u64,
    seed: u64,
) -> R<f64> {
    let p = dir.join(format!("sufs-bench-br-{}-{kind}.img", std::process::id()));
    let _ = std::fs::remove_file(&p);
    FileDevice::create(&p, blocks * 4096)?;
    let r = FileDevice::open(&p, 4096, true).map_err(VolumeError::from).and_then(|dev| {
        let s = setup_image(Arc::new(dev), kind, file_blocks)?;
        let blocks = image_file_blocks(&s)?;
        direct_io(&s, t, &blocks, ios, seed)
    });
    let _ = std::fs::remove_file(&p);
    r
}

/// The large file's physical blocks, through the mounted file system.
fn image_file_blocks(s: &Setup) -> R<Vec<u64>> {
    let mut fs = lock(&s.fs);
    let (ino, d) = fs.lookup(ROOT_INO, b"big")?;
    Ok((0..d.size / 4096).map(|l| fs.fibmap(ino, l)).collect::<Result<_, FsError>>()?)
}
