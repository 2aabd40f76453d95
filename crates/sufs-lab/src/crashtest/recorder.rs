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
    check_write, count_runs, read_units, write_units, BlockDevice, Counters, DevResult, DevStats, MemDevice, Record,
    RecordingDevice, WriteKind, WriteReq,
};
use sufs_fs::fs::{Fs, MountOptions, Ordering};
use sufs_fs::policy::{Sweeper, SyncerOptions, UpdatePolicy};

use super::promise::{Promise, PromiseKind};
use super::work::Work;
use super::workloads::make_workload;
use super::{CrashError, CrashOptions, End, BS};

/// A batch this small has every single write tried alone and the batch minus each single write.
const SMALL_BATCH: usize = 8;

/// A device's contents in its address units (blocks, or a UFS2 image's fragments), `None` for
/// zeros: what a crash image starts from.
pub(super) type Units = Vec<Option<Arc<[u8]>>>;

/// Hands `put` each address unit (of `unit` bytes) of a write of `data` at `bno`: each write
/// changes its own bytes only, so a write of a fragment run, or a subset of a batch, leaves the
/// neighbouring fragments as they were. A write of one unit is shared, not copied.
fn apply(bno: u64, data: &Arc<[u8]>, unit: usize, mut put: impl FnMut(u64, Arc<[u8]>)) {
    if data.len() == unit {
        put(bno, data.clone());
    } else {
        write_units(bno, data, unit).for_each(|(a, u)| put(a, Arc::from(u)));
    }
}

/// A crash image: the state after some batches, plus writes of the batch in flight, copy on write
/// (mounting or repairing it writes only to its own overlay). Kept in the recorded device's
/// address units, so that a write of fewer bytes than a block (a fragment run) lands on its own
/// bytes, as on the disk.
pub struct CrashImage {
    bs: usize,
    unit: usize,
    pub(super) base: Arc<Units>,
    over: Mutex<HashMap<u64, Arc<[u8]>>>,
    counters: Counters,
}

impl CrashImage {
    fn new(bs: usize, unit: usize, base: Arc<Units>, writes: &[(u64, Arc<[u8]>)]) -> CrashImage {
        let mut over = HashMap::new();
        for (bno, data) in writes {
            apply(*bno, data, unit, |a, u| {
                over.insert(a, u);
            });
        }
        CrashImage { bs, unit, base, over: Mutex::new(over), counters: Counters::default() }
    }
    fn over(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<[u8]>>> {
        self.over.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// An independent copy of this image (its writes so far included).
    pub fn fork(&self) -> CrashImage {
        CrashImage {
            bs: self.bs,
            unit: self.unit,
            base: self.base.clone(),
            over: Mutex::new(self.over().clone()),
            counters: Counters::default(),
        }
    }
}

impl BlockDevice for CrashImage {
    fn block_size(&self) -> usize {
        self.bs
    }
    fn addr_unit(&self) -> usize {
        self.unit
    }
    fn num_blocks(&self) -> u64 {
        self.base.len() as u64
    }
    fn read_block(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
        sufs_fs::dev::check_range(bno, self.num_blocks())?;
        self.counters.read();
        let over = self.over();
        let unit_at = |a: u64| over.get(&a).or(self.base.get(a as usize)?.as_ref()).map(|u| &u[..]);
        if self.unit == self.bs {
            match unit_at(bno) {
                Some(d) => buf.copy_from_slice(d),
                None => buf.fill(0),
            }
        } else {
            read_units(bno, buf, self.unit, unit_at);
        }
        Ok(())
    }
    fn write_batch(&self, reqs: &[WriteReq], kind: WriteKind) -> DevResult<()> {
        let mut over = self.over();
        for r in reqs {
            check_write(r.bno, r.data.len(), self.unit, self.num_blocks())?;
        }
        for r in reqs {
            apply(r.bno, &Arc::from(r.data), self.unit, |a, u| {
                over.insert(a, u);
            });
        }
        self.counters.batch(reqs.len(), count_runs(reqs, self.unit), kind);
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
    /// The recorded device's block size and address unit (`BlockDevice::addr_unit`).
    bs: usize,
    unit: usize,
    /// The image before the workload, in address units.
    pub(super) base: Units,
    /// At each barrier of a batch with writes, in order, the writes in the air: the batch's own,
    /// and those of batches written beside it whose barriers come later. (Written one after
    /// another, each is its batch's writes alone.)
    pub(super) batches: Vec<Vec<(u64, Arc<[u8]>)>>,
    /// Which of each barrier's writes in the air it makes durable (its own batch's).
    lands: Vec<Vec<usize>>,
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
    let dev = Arc::new(opts.new_device(blocks));
    let sb = super::make_fs(&dev, (blocks / 8).max(256)).map_err(fail("mkfs"))?;
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
    let rec = Arc::new(RecordingDevice::new(MemDevice::from_units(BS, opts.unit(), image.clone())));
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
    /// `image` is in the device's address units (`MemDevice::blocks`).
    pub(super) fn new(
        workload: &str,
        ordering: Ordering,
        seed: u64,
        image: Vec<Option<Box<[u8]>>>,
        rec: &RecordingDevice<MemDevice>,
        ops: &[(usize, String)],
        promises: Vec<Promise>,
    ) -> Recording {
        let Batches { batches, lands, starts, ends } = Batches::cut(&rec.log());
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
            bs: rec.block_size(),
            unit: rec.addr_unit(),
            base: image.into_iter().map(|b| b.map(Arc::from)).collect(),
            batches,
            lands,
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

/// A recording device's log cut at its barriers: at each barrier of a batch with writes, the
/// writes in the air (that batch's, and those of the batches begun beside it whose barriers are
/// not yet logged) and which of them the barrier makes durable.
struct Batches {
    /// The writes in the air at each barrier, in log order.
    batches: Vec<Vec<(u64, Arc<[u8]>)>>,
    /// Which of them become durable there (positions in `batches`' entry): the barrier's own
    /// batch's.
    lands: Vec<Vec<usize>>,
    /// The log position where each barrier's own batch began (its first write).
    starts: Vec<usize>,
    /// The log position just after each barrier.
    ends: Vec<usize>,
}

impl Batches {
    fn cut(log: &[Record]) -> Batches {
        let mut out = Batches { batches: Vec::new(), lands: Vec::new(), starts: Vec::new(), ends: Vec::new() };
        // The writes in the air: batch, position in the log, block, contents.
        let mut air: Vec<(u64, usize, u64, Arc<[u8]>)> = Vec::new();
        for (i, r) in log.iter().enumerate() {
            match r {
                Record::Write { bno, data, batch } => air.push((*batch, i, *bno, data.clone())),
                Record::Barrier { batch } => {
                    let lands: Vec<usize> = (0..air.len()).filter(|&k| air[k].0 == *batch).collect();
                    let Some(&first) = lands.first() else { continue };
                    debug_assert!(
                        {
                            let mut b: Vec<(u64, u64)> = air.iter().map(|w| (w.2, w.0)).collect();
                            b.sort_unstable();
                            b.dedup();
                            b.windows(2).all(|w| w[0].0 != w[1].0)
                        },
                        "a block written by two batches in the air at once"
                    );
                    out.starts.push(air[first].1);
                    out.ends.push(i + 1);
                    out.batches.push(air.iter().map(|w| (w.2, w.3.clone())).collect());
                    out.lands.push(lands);
                    air.retain(|w| w.0 != *batch);
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
        self.lands.iter().map(|l| l.len()).sum()
    }

    /// Barriers at which writes of other batches were in the air too (flights side by side).
    pub fn shared_barriers(&self) -> usize {
        self.batches.iter().zip(&self.lands).filter(|(b, l)| l.len() < b.len()).count()
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
            let image =
                |writes: &[(u64, Arc<[u8]>)]| Arc::new(CrashImage::new(self.bs, self.unit, cur.clone(), writes));
            f(&CrashState { index, batches: k, partial: None }, image(&[]))?;
            index += 1;
            let Some(batch) = self.batches.get(k) else {
                break;
            };
            for s in subsets(batch.len(), random_subsets, &mut rng) {
                let writes: Vec<(u64, Arc<[u8]>)> = s.iter().map(|&i| batch[i].clone()).collect();
                f(&CrashState { index, batches: k, partial: Some(s) }, image(&writes))?;
                index += 1;
            }
            // Every image of this state is gone, so the base is updated in place, with the
            // writes the barrier makes durable (the others stay in the air).
            let base = Arc::make_mut(&mut cur);
            for &i in &self.lands[k] {
                let (bno, data) = &batch[i];
                apply(*bno, data, self.unit, |a, u| base[a as usize] = Some(u));
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
    fn crash_states_put_each_write_on_its_own_bytes() {
        // 16 fragments of 1 KiB in blocks of 4 KiB, each fragment holding its number; batches
        // of fragment runs and whole blocks, side by side and overlapping blocks.
        let (bs, unit, n) = (4096, 1024, 16u64);
        let dev = MemDevice::new_frags(bs, unit, n);
        for f in 0..n {
            dev.write_batch(&[WriteReq { bno: f, data: &[0x10 + f as u8; 1024] }], WriteKind::Sync).unwrap();
        }
        let image = dev.blocks();
        let rec = RecordingDevice::new(MemDevice::from_units(bs, unit, image.clone()));
        let batches: [&[(u64, usize, u8)]; 3] = [
            &[(2, 1024, 0xa1), (8, 4096, 0xa2), (13, 2048, 0xa3)],
            &[(5, 2048, 0xb1), (3, 1024, 0xb2), (12, 1024, 0xb3)],
            &[(0, 4096, 0xc1)],
        ];
        for batch in batches {
            let data: Vec<Vec<u8>> = batch.iter().map(|&(_, len, x)| vec![x; len]).collect();
            let reqs: Vec<WriteReq> = batch.iter().zip(&data).map(|(w, d)| WriteReq { bno: w.0, data: d }).collect();
            rec.write_batch(&reqs, WriteKind::Async).unwrap();
        }
        let r = Recording::new("runs", Ordering::Async, 1, image, &rec, &[], Vec::new());
        // The model: the device's bytes, each write applied at its own offset.
        let base: Vec<u8> = (0..n).flat_map(|f| [0x10 + f as u8; 1024]).collect();
        let put = |bytes: &mut Vec<u8>, (bno, len, x): (u64, usize, u8)| {
            bytes[bno as usize * unit..][..len].fill(x);
        };
        let mut partial = 0;
        let states = r
            .for_each_state(8, |s, img| {
                let mut want = base.clone();
                batches[..s.batches].iter().flat_map(|b| b.iter()).for_each(|&w| put(&mut want, w));
                for &i in s.partial.iter().flatten() {
                    put(&mut want, batches[s.batches][i]);
                }
                partial += s.partial.is_some() as usize;
                want.resize(want.len() + bs, 0);
                let mut b = vec![0u8; bs];
                for bno in 0..n {
                    img.read_block(bno, &mut b).unwrap();
                    assert!(b == want[bno as usize * unit..][..bs], "{}: block {bno}", r.describe(s));
                }
                Ok(())
            })
            .unwrap();
        assert_eq!((states, partial), (16, 12), "4 prefixes, each 3-write batch's 6 subsets");
    }

    /// Two batches written at once from two threads are in the air together: a crash before the
    /// first one's barrier may hold any part of either, and that barrier makes only the first
    /// durable (the old model took every write before a barrier as durable at it).
    #[test]
    fn batches_in_the_air_together_land_each_at_its_own_barrier() {
        let (bs, n) = (4096, 8u64);
        let image = MemDevice::new(bs, n).blocks();
        let slow = std::time::Duration::from_millis(300);
        let rec = RecordingDevice::new(MemDevice::from_units(bs, bs, image.clone())).slow(slow);
        let (a, b) = (vec![0xa1u8; bs], vec![0xb2u8; bs]);
        std::thread::scope(|s| {
            s.spawn(|| rec.write_batch(&[WriteReq { bno: 1, data: &a }], WriteKind::Sync).unwrap());
            std::thread::sleep(std::time::Duration::from_millis(100));
            rec.write_batch(&[WriteReq { bno: 2, data: &b }], WriteKind::Sync).unwrap();
        });
        let r = Recording::new("air", Ordering::Softdep, 1, image, &rec, &[], Vec::new());
        assert_eq!((r.batches(), r.writes(), r.shared_barriers()), (2, 2, 1));
        let mut seen = Vec::new();
        r.for_each_state(8, |s, img| {
            let mut buf = vec![0u8; bs];
            let mut held = |bno| {
                img.read_block(bno, &mut buf).unwrap();
                buf[0] != 0
            };
            seen.push((s.batches, s.partial.clone(), held(1), held(2)));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![
                (0, None, false, false),
                (0, Some(vec![0]), true, false),
                (0, Some(vec![1]), false, true),
                (1, None, true, false),
                (2, None, true, true),
            ]
        );
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
