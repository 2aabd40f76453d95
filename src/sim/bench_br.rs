//! `sufs bench br`: the Block Register paper's Figure 2. With an active volume snapshot, both
//! exception stores side by side: 4 KiB direct writes (random and sequential, 1 and 8 outstanding)
//! to a large file, in IOPS, and unpacking copies of a source tree then deleting them. On the
//! simulated disk (`ModelDevice`: seek distance matters) and on an image file.
//!
//! Direct writes go to the file's blocks (found with `fibmap`) straight through the volume, as
//! O_DIRECT overwrites of an allocated file do; 8 outstanding requests are one batch, sorted as an
//! elevator would. The br store's pool is refilled between requests, outside any I/O (the
//! paper's background thread, run in step so that the simulation is deterministic).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::clock::{Clock, SimClock};
use crate::dev::{BlockDevice, DiskModel, FileDevice, MemDevice, ModelDevice, WriteKind, WriteReq};
use crate::format::ROOT_INO;
use crate::fs::{lock, SharedFs};
use crate::fs::{mkfs, Fs, FsError, MkfsOptions, MountOptions};
use crate::volume::{PoolOptions, PrefixDevice, StoreKind, VolumeDevice, VolumeError};

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

struct Setup {
    vol: Arc<VolumeDevice>,
    fs: SharedFs,
    clock: Option<Arc<SimClock>>,
    /// The simulated disk, whose request log says where the time went.
    model: Option<Arc<ModelDevice<Arc<MemDevice>>>>,
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
}

/// A volume with a file system (over all of it, or all but the reserved area), a large file,
/// and an active snapshot with `kind`'s store; then mounted on the volume.
fn setup(
    raw: Arc<dyn BlockDevice>,
    kind: StoreKind,
    file_blocks: u64,
    clock: Option<Arc<SimClock>>,
    top: Arc<dyn BlockDevice>,
    copy_free: bool,
) -> R<Setup> {
    let n = raw.num_blocks();
    let fs_blocks = if kind == StoreKind::Reserved { n - n / 5 } else { n };
    mkfs(
        Arc::new(PrefixDevice { inner: raw.clone(), blocks: fs_blocks }),
        &MkfsOptions { ..Default::default() },
        (1, 0),
    )?;
    let mut fs =
        Fs::mount(raw.clone(), MountOptions { cache_blocks: 4096, ..Default::default() }, Arc::new(SimClock::new()))?;
    if file_blocks > 0 {
        let (ino, _) = fs.create(ROOT_INO, b"big", 0o644, 0, 0)?;
        let chunk = vec![0x5au8; 1 << 20];
        let mut off = 0;
        while off < file_blocks * 4096 {
            fs.write(ino, off, &chunk)?;
            off += chunk.len() as u64;
        }
    }
    fs.unmount()?;
    let pool = PoolOptions { initial: 4096, low_watermark: 2048, grow: 4096 };
    VolumeDevice::create(raw, kind, pool, 1)?;
    let vol = VolumeDevice::open(top, pool)?.ok_or(VolumeError::NoSnapshot)?;
    vol.set_copy_free(copy_free);
    let c: Arc<dyn Clock> = match &clock {
        Some(c) => c.clone(),
        None => Arc::new(crate::clock::RealClock::new()),
    };
    let fs = Fs::mount(vol.clone(), MountOptions { cache_blocks: 4096, ..Default::default() }, c)?;
    Ok(Setup { vol, fs: Arc::new(Mutex::new(fs)), clock, model: None, refill_s: Default::default() })
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

impl Setup {
    /// Starts a measured run: forgets the requests of the setup.
    fn begin(&self) -> (u64, crate::dev::DevStats) {
        if let Some(m) = &self.model {
            m.clear_requests();
        }
        self.refill_s.set(0.0);
        (self.vol.volume_stats().refills, self.vol.stats())
    }

    /// The profile of the run since `begin`.
    fn profile(&self, run: &str, seconds: f64, before: (u64, crate::dev::DevStats)) -> Option<Profile> {
        let m = self.model.as_ref()?;
        let log = m.requests();
        let st = self.vol.volume_stats();
        let ds = self.vol.stats();
        let mut p = Profile {
            run: run.into(),
            store: format!("{}", self.vol.kind()),
            seconds,
            refill_seconds: self.refill_s.get(),
            refills: st.refills - before.0,
            preserved: st.preserved,
            exceptions: st.exceptions,
            batches: ds.batches.saturating_sub(before.1.batches),
            ..Default::default()
        };
        let mut dist = 0u64;
        for (i, r) in log.iter().enumerate() {
            if r.write {
                p.writes += 1;
            } else {
                p.reads += 1;
            }
            let prev = i.checked_sub(1).map(|j| &log[j]);
            let streamed = prev.is_some_and(|q| q.bno + 1 == r.bno && q.done == r.start);
            if !streamed {
                p.positionings += 1;
                dist += prev.map_or(0, |q| q.bno.abs_diff(r.bno));
            }
        }
        p.mean_seek_blocks = dist as f64 / p.positionings.max(1) as f64;
        Some(p)
    }
}

fn now(s: &Setup, t0: Instant) -> f64 {
    match &s.clock {
        Some(c) => c.now_ns() as f64 / 1e9,
        None => t0.elapsed().as_secs_f64(),
    }
}

/// Direct writes to the large file: IOPS.
fn direct_writes(s: &Setup, random: bool, oio: usize, ios: u64, seed: u64) -> R<f64> {
    let blocks: Vec<u64> = {
        let mut fs = lock(&s.fs);
        let (ino, d) = fs.lookup(ROOT_INO, b"big")?;
        (0..d.size / 4096).map(|l| fs.fibmap(ino, l)).collect::<Result<_, FsError>>()?
    };
    let mut rng = SmallRng::seed_from_u64(seed);
    let data = vec![0xc3u8; 4096];
    let t0 = Instant::now();
    let start = now(s, t0);
    let mut next = rng.gen_range(0..blocks.len());
    let mut done = 0;
    while done < ios {
        let mut batch: Vec<u64> = (0..oio)
            .map(|_| {
                let b = if random { blocks[rng.gen_range(0..blocks.len())] } else { blocks[next % blocks.len()] };
                next += 1;
                b
            })
            .collect();
        batch.sort_unstable();
        batch.dedup();
        let reqs: Vec<WriteReq> = batch.iter().map(|&b| WriteReq { bno: b, data: &data }).collect();
        s.vol.write_batch(&reqs, WriteKind::Sync)?;
        done += oio as u64;
        refill(s)?;
    }
    Ok(ios as f64 / (now(s, t0) - start))
}

/// Unpack `copies` copies of the tree, then delete them: seconds.
fn unpack_delete(s: &Setup, tree: &[(PathBuf, Vec<u8>)], copies: usize) -> R<f64> {
    let t0 = Instant::now();
    let start = now(s, t0);
    for c in 0..copies {
        let top = lock(&s.fs).mkdir(ROOT_INO, format!("copy{c}").as_bytes(), 0o755, 0, 0)?.0;
        for (i, (_, data)) in tree.iter().enumerate() {
            {
                let mut fs = lock(&s.fs);
                let (ino, _) = fs.create(top, format!("f{i}").as_bytes(), 0o644, 0, 0)?;
                fs.write(ino, 0, data)?;
            }
            // Between operations, as the refill thread would get the lock.
            refill(s)?;
        }
    }
    for c in 0..copies {
        let mut fs = lock(&s.fs);
        let top = fs.lookup(ROOT_INO, format!("copy{c}").as_bytes())?.0;
        for i in 0..tree.len() {
            fs.unlink(top, format!("f{i}").as_bytes())?;
        }
        fs.rmdir(ROOT_INO, format!("copy{c}").as_bytes())?;
    }
    lock(&s.fs).sync_all()?;
    Ok(now(s, t0) - start)
}

fn read_tree(root: &Path, max: usize) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        let mut ents: Vec<_> = rd.flatten().collect();
        ents.sort_by_key(|e| e.path());
        for e in ents {
            if out.len() >= max {
                return out;
            }
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                if let Ok(data) = std::fs::read(e.path()) {
                    out.push((e.path(), data));
                }
            }
        }
    }
    out
}

fn row(device: &str, test: &str, reserved: f64, br: f64, higher_better: bool) -> BrRow {
    let rel = if higher_better { br / reserved } else { reserved / br };
    BrRow { device: device.into(), test: test.into(), reserved, br, br_vs_reserved: 100.0 * rel }
}

/// The whole experiment.
pub fn run(o: &BrBenchOptions) -> R<BrBenchResult> {
    let tree = read_tree(&o.tree, o.tree_files);
    let mut rows = Vec::new();
    let mut space = Vec::new();
    let tests = [
        ("random OIO 1", true, 1),
        ("random OIO 8", true, 8),
        ("sequential OIO 1", false, 1),
        ("sequential OIO 8", false, 8),
    ];
    // The simulated disk: a fresh volume for each run, so that every run starts from the snapshot.
    let sim = |kind: StoreKind, file_blocks: u64, copy_free: bool| -> R<Setup> {
        let mem = Arc::new(MemDevice::new(4096, o.blocks));
        let clock = Arc::new(SimClock::new());
        let model = Arc::new(ModelDevice::new(mem.clone(), DiskModel::modern(), clock.clone(), o.seed));
        let mut s = setup(mem, kind, file_blocks, Some(clock), model.clone(), copy_free)?;
        s.model = Some(model);
        Ok(s)
    };
    let mut profiles = Vec::new();
    for (name, random, oio) in tests {
        let mut v = [0.0; 2];
        for (k, kind) in [StoreKind::Reserved, StoreKind::Br].into_iter().enumerate() {
            let s = sim(kind, o.file_blocks, true)?;
            let before = s.begin();
            v[k] = direct_writes(&s, random, oio, o.ios, o.seed)?;
            profiles.extend(s.profile(name, o.ios as f64 / v[k], before));
            if name == "random OIO 8" {
                let st = s.vol.volume_stats();
                space.push((format!("{kind} (after {} random writes)", o.ios), st.store_used, st.store_size));
            }
        }
        rows.push(row("simulated disk", &format!("{name} (IOPS)"), v[0], v[1], true));
    }
    // Unpack-then-delete, first as dm-snap does it (every chunk copied on its first write,
    // though the snapshot is of an empty file system), then copying only chunks in use at
    // snapshot time.
    for copy_free in [true, false] {
        if tree.is_empty() {
            break;
        }
        let how = if copy_free { "" } else { ", free chunks not copied" };
        let mut v = [0.0; 2];
        for (k, kind) in [StoreKind::Reserved, StoreKind::Br].into_iter().enumerate() {
            let s = sim(kind, 0, copy_free)?;
            let before = s.begin();
            v[k] = unpack_delete(&s, &tree, o.copies)?;
            profiles.extend(s.profile(&format!("unpack, delete{how}"), v[k], before));
            let st = s.vol.volume_stats();
            space.push((format!("{kind} (after unpack and delete{how})"), st.store_used, st.store_size));
        }
        rows.push(row(
            "simulated disk",
            &format!("unpack {} x {} files, delete{how} (s)", o.copies, tree.len()),
            v[0],
            v[1],
            false,
        ));
    }
    // The image file: real time, every request durable.
    let image = |kind: StoreKind, file_blocks: u64| -> R<(Setup, PathBuf)> {
        let p = o.dir.join(format!("sufs-bench-br-{}-{kind}.img", std::process::id()));
        let _ = std::fs::remove_file(&p);
        FileDevice::create(&p, o.blocks * 4096)?;
        let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(&p, 4096, true)?);
        Ok((setup(dev.clone(), kind, file_blocks, None, dev, true)?, p))
    };
    for (name, random, oio) in tests {
        let mut v = [0.0; 2];
        for (k, kind) in [StoreKind::Reserved, StoreKind::Br].into_iter().enumerate() {
            let (s, p) = image(kind, o.file_blocks)?;
            let r = direct_writes(&s, random, oio, o.file_ios, o.seed);
            drop(s);
            let _ = std::fs::remove_file(&p);
            v[k] = r?;
        }
        rows.push(row("image file", &format!("{name} (IOPS)"), v[0], v[1], true));
    }
    Ok(BrBenchResult { rows, space, profiles })
}
