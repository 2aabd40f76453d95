//! Recording: a workload run over a `RecordingDevice` (setup unrecorded, then the steps on a
//! mount with a small cache), its log cut into batches at the barriers, and the crash states
//! rebuilt from them: every prefix of complete batches, and subsets of the batch in flight, each
//! a copy-on-write `CrashImage`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use sufs_fs::clock::SimClock;
use sufs_fs::dev::{
    BlockDevice, Counters, DevResult, DevStats, MemDevice, Record, RecordingDevice, WriteKind, WriteReq,
};
use sufs_fs::fs::{Fs, MountOptions, Ordering};
use sufs_fs::policy::{Sweeper, SyncerOptions, UpdatePolicy};

use super::promise::{Promise, PromiseKind};
use super::work::Work;
use super::workloads::make_workload;
use super::{CrashError, CrashOptions, End, BS};

/// A batch this small has every single write tried alone and the batch minus each single write.
const SMALL_BATCH: usize = 8;

/// A crash image: the state after some batches, plus writes of the batch in flight, copy on write
/// (mounting or repairing it writes only to its own overlay).
pub struct CrashImage {
    pub(super) base: Arc<Vec<Option<Arc<[u8]>>>>,
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
            return Err(sufs_fs::dev::DevError::OutOfRange { bno, nblocks: self.num_blocks() });
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
                return Err(sufs_fs::dev::DevError::OutOfRange { bno: r.bno, nblocks: self.num_blocks() });
            }
            over.insert(r.bno, r.data.into());
        }
        self.counters.batch(reqs.len(), sufs_fs::dev::count_runs(reqs), kind);
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
pub(super) struct Interval {
    pub(super) p: Promise,
    pub(super) from: usize,
    pub(super) until: usize,
}

/// A recorded workload: the image before it, the batches it wrote, and its promises.
pub struct Recording {
    pub workload: String,
    pub ordering: Ordering,
    pub seed: u64,
    pub unmounted: bool,
    pub(super) base: Vec<Option<Arc<[u8]>>>,
    /// The non-empty batches, in order.
    pub(super) batches: Vec<Vec<(u64, Arc<[u8]>)>>,
    /// The operation during which each batch was written (an index in `ops`).
    pub(super) batch_op: Vec<Option<usize>>,
    pub(super) ops: Vec<String>,
    pub(super) promises: Vec<Interval>,
}

/// Runs `workload` (one of the sequential ones) over a recording device: mkfs and setup (not
/// recorded), then the workload on a fresh mount with a small cache, ending with or without
/// unmount.
pub(super) fn record(
    ordering: Ordering,
    workload: &str,
    seed: u64,
    opts: &CrashOptions,
) -> Result<Recording, CrashError> {
    let mut wl = make_workload(workload, opts.ops).ok_or_else(|| CrashError::UnknownWorkload(workload.into()))?;
    let fail = |what: &str| {
        let what = format!("{workload} ({ordering}, seed {seed}): {what}");
        move |source| CrashError::Fs { what, source }
    };
    let blocks = wl.blocks(opts.blocks);
    let dev = Arc::new(MemDevice::new(BS, blocks));
    let sb = super::make_fs(&dev, (blocks / 8).max(256), opts.ufs2).map_err(fail("mkfs"))?;
    wl.age_device(&dev, &sb);
    let clock = Arc::new(SimClock::new());
    let mut rng = SmallRng::seed_from_u64(seed);
    let mount = |d: Arc<dyn BlockDevice>, cache_blocks| {
        Fs::mount(d, MountOptions { ordering, cache_blocks, readonly: false }, clock.clone())
    };

    // Setup, then the names it left: each stays until an operation removes or renames it.
    let mut fs = mount(dev.clone(), 4096).map_err(fail("mount for setup"))?;
    let stable = {
        let mut w = Work::new(&mut fs, &mut rng, &clock, None, Vec::new(), None);
        wl.setup(&mut w).map_err(fail(&format!("setup: {}", w.ops.last().map_or("", |o| &o.1))))?;
        w.walk("/").map_err(fail("walk after setup"))?
    };
    fs.unmount().map_err(fail("unmount after setup"))?;
    drop(fs);
    let promises = setup_promises(&stable);

    let image = dev.blocks();
    let rec = Arc::new(RecordingDevice::new(MemDevice::from_blocks(BS, image.clone())));
    let mut fs = mount(rec.clone(), opts.cache_blocks).map_err(fail("mount"))?;
    let unmounted = match opts.end {
        End::Auto => seed % 2 == 1,
        End::Unmount => true,
        End::Crash => false,
    };
    let sweeper = opts.update.map(|policy| scaled_sweeper(policy, &mut fs));
    let mut w = Work::new(&mut fs, &mut rng, &clock, Some(&rec), promises, sweeper);
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
    let mut r = Recording::new(workload, ordering, seed, image, &rec, &ops, promises);
    r.unmounted = unmounted;
    Ok(r)
}

impl Recording {
    /// A recording of the log of `rec`, over the image `image` it started from: the batches cut
    /// at its barriers, each with the operation during which it was written (`ops`: log
    /// positions where operations began, in order), and the promises' intervals in batches.
    pub(super) fn new(
        workload: &str,
        ordering: Ordering,
        seed: u64,
        image: Vec<Option<Box<[u8]>>>,
        rec: &RecordingDevice<MemDevice>,
        ops: &[(usize, String)],
        promises: Vec<Promise>,
    ) -> Recording {
        let Batches { batches, starts, ends } = Batches::cut(&rec.log());
        let batches_before = |pos: usize| ends.partition_point(|&e| e <= pos);
        let batch_op =
            starts.iter().map(|&s| ops.partition_point(|o: &(usize, String)| o.0 <= s).checked_sub(1)).collect();
        let promises = promises
            .into_iter()
            .map(|p| Interval { from: batches_before(p.from), until: p.until.map_or(usize::MAX, batches_before), p })
            .collect();
        Recording {
            workload: workload.into(),
            ordering,
            seed,
            unmounted: false,
            base: image.into_iter().map(|b| b.map(Arc::from)).collect(),
            batches,
            batch_op,
            ops: ops.iter().map(|o| o.1.clone()).collect(),
            promises,
        }
    }
}

/// The promises of the tree the setup left (`stable`: path, is a directory, inode): each name
/// stays until an operation removes or renames it, and each inode (once, by the first of its
/// names) stays reachable until an operation removes it.
pub(super) fn setup_promises(stable: &[(String, bool, u32)]) -> Vec<Promise> {
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
    for (path, _, ino) in stable {
        let special = path.starts_with("/.br") || path.starts_with("/.snap");
        if !special && kept.insert(*ino) {
            promises.push(promise(PromiseKind::Kept, path, *ino));
        }
    }
    promises
}

/// An update policy's sweeps, their times scaled to a workload's 50 ms operations: PU every
/// second, AIPU every 100 ms for buffers a second old, metadata every second.
pub(super) fn scaled_sweeper(policy: UpdatePolicy, fs: &mut Fs) -> Sweeper {
    let mut o = SyncerOptions::for_policy(policy);
    o.age = std::time::Duration::from_secs(1);
    o.interval = std::time::Duration::from_millis(if policy == UpdatePolicy::Pu { 1000 } else { 100 });
    o.metadata_interval = std::time::Duration::from_secs(1);
    Sweeper::new(o, fs)
}

/// A recording device's log cut at its barriers into the non-empty batches.
struct Batches {
    batches: Vec<Vec<(u64, Arc<[u8]>)>>,
    /// The log position where each batch begins (just after the barrier before it).
    starts: Vec<usize>,
    /// The log position just after each batch's barrier.
    ends: Vec<usize>,
}

impl Batches {
    fn cut(log: &[Record]) -> Batches {
        let mut out = Batches { batches: Vec::new(), starts: Vec::new(), ends: Vec::new() };
        let mut cur = Vec::new();
        let mut start = 0;
        for (i, r) in log.iter().enumerate() {
            match r {
                Record::Write { bno, data } => cur.push((*bno, data.clone())),
                Record::Barrier => {
                    if !cur.is_empty() {
                        out.batches.push(std::mem::take(&mut cur));
                        out.starts.push(start);
                        out.ends.push(i + 1);
                    }
                    start = i + 1;
                }
            }
        }
        out
    }
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

    /// A digest of what was written, in order: every batch's block numbers and contents. Two
    /// recordings of one workload and seed have the same digest (the order of writes within a
    /// batch counts: the crash states take subsets of a batch by position).
    pub fn digest(&self) -> u32 {
        let mut crc = 0;
        for batch in &self.batches {
            for (bno, data) in batch {
                crc = crc32c::crc32c_append(crc, &bno.to_le_bytes());
                crc = crc32c::crc32c_append(crc, data);
            }
            crc = crc32c::crc32c_append(crc, b"barrier");
        }
        crc
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use sufs_fs::format::NDADDR;

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
}
