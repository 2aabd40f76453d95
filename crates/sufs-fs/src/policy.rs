//! The update policies of Mogul 1994 §3, which decide when delayed writes go to disk:
//! - `wt`, write-through: every modification is queued for writing as soon as it is made;
//! - `pu`, periodic update: every `interval` (30 s) every delayed-write buffer is queued;
//! - `aipu`, approximate interval periodic update: every `interval` (1 s) the buffers that have
//!   been dirty for at least `age` (30 s) are queued. A buffer's age counts from when it was first
//!   dirtied (the cache keeps that time; redirtying does not reset it). The sweep is two-phase and
//!   linear: it collects the ready buffers from the dirty list, then writes them.
//!
//! Under every policy the metadata is forced out every 30 s, as the paper's update program does.
//! `Sweeper` is the policy's state and runs on any clock: the mount's syncer thread drives it in
//! real time (`tick_shared`: the sweep's writes go outside the file system's lock, so requests
//! are not stalled behind a burst, the stall Mogul's paper measures), the experiments call
//! `tick` in simulated time.

use std::time::Duration;

use crate::dev::WriteKind;
use crate::fs::{lock, SharedFs, TASK_SLICE};
use crate::fs::{Fs, FsResult, Ordering as Ordered};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum UpdatePolicy {
    /// Write-through: every modification is queued at once.
    Wt,
    /// Periodic update: all dirty buffers every interval.
    Pu,
    /// Approximate interval periodic update: buffers older than `age`, checked every interval.
    Aipu,
}

impl std::fmt::Display for UpdatePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            UpdatePolicy::Wt => "wt",
            UpdatePolicy::Pu => "pu",
            UpdatePolicy::Aipu => "aipu",
        })
    }
}

#[derive(Debug, Clone, Copy)]
pub struct SyncerOptions {
    pub policy: UpdatePolicy,
    pub age: Duration,
    pub interval: Duration,
    /// How often metadata is forced out whatever the policy.
    pub metadata_interval: Duration,
}

impl Default for SyncerOptions {
    fn default() -> Self {
        Self::for_policy(UpdatePolicy::Aipu)
    }
}

impl SyncerOptions {
    /// The paper's parameters for a policy: PU sweeps every 30 s; AIPU every 1 s for buffers
    /// 30 s old; WT has nothing to sweep but the metadata.
    pub fn for_policy(policy: UpdatePolicy) -> SyncerOptions {
        let interval = match policy {
            UpdatePolicy::Pu => Duration::from_secs(30),
            UpdatePolicy::Aipu | UpdatePolicy::Wt => Duration::from_secs(1),
        };
        SyncerOptions { policy, age: Duration::from_secs(30), interval, metadata_interval: Duration::from_secs(30) }
    }
}

/// The state of an update policy: when its sweeps are due, and how many writes each queued.
pub struct Sweeper {
    opts: SyncerOptions,
    next_sweep: u64,
    next_meta: u64,
    /// Writes queued by each sweep (Mogul's burst sizes).
    pub bursts: Vec<usize>,
}

impl Sweeper {
    /// A sweeper whose first sweep is one interval after `now`.
    pub fn new(opts: SyncerOptions, fs: &mut Fs) -> Sweeper {
        fs.set_write_through(opts.policy == UpdatePolicy::Wt);
        let now = fs.now_ns();
        Sweeper {
            opts,
            next_sweep: now + opts.interval.as_nanos() as u64,
            next_meta: now + opts.metadata_interval.as_nanos() as u64,
            bursts: Vec::new(),
        }
    }

    /// The time the next sweep is due.
    pub fn next_due(&self) -> u64 {
        self.next_sweep.min(self.next_meta)
    }

    /// Runs the sweeps that are due at the file system's current time.
    pub fn tick(&mut self, fs: &mut Fs) -> FsResult<()> {
        let now = fs.now_ns();
        let mut queued = None;
        if self.next_sweep <= now {
            let n = match self.opts.policy {
                UpdatePolicy::Pu => fs.flush_all()?,
                UpdatePolicy::Aipu => fs.flush_older_than(self.opts.age.as_nanos() as u64)?,
                UpdatePolicy::Wt => 0,
            };
            queued = Some(n);
            let step = self.opts.interval.as_nanos() as u64;
            while self.next_sweep <= now {
                self.next_sweep += step;
            }
        }
        if self.next_meta <= now {
            *queued.get_or_insert(0) += fs.flush_metadata()?;
            let step = self.opts.metadata_interval.as_nanos() as u64;
            while self.next_meta <= now {
                self.next_meta += step;
            }
        }
        if let Some(n) = queued {
            self.bursts.push(n);
        }
        Ok(())
    }
}

impl Sweeper {
    /// `tick` on a shared file system, with the sweep's device writes outside its lock: the
    /// blocks due are picked under the lock and written batch by batch (each prepared under the
    /// lock, written without it, landed under it again), as `tick` would write them. Sync
    /// ordering writes in order under the lock (`tick`).
    pub fn tick_shared(&mut self, fs: &SharedFs) -> FsResult<()> {
        let plan = {
            let mut g = lock(fs);
            if g.ordering() == Ordered::Sync || g.is_shut_down() {
                return self.tick(&mut g);
            }
            let Some(bnos) = self.pick(&g) else { return Ok(()) };
            g.plan_delayed(bnos, 1024)
        };
        Self::write_plan(fs, plan)
    }

    /// Writes a sweep's batches, in order, as flights, then runs the work they made possible.
    fn write_plan(fs: &SharedFs, plan: Vec<Vec<u64>>) -> FsResult<()> {
        for chunk in plan {
            Fs::write_in_flight(fs, &chunk, WriteKind::Async)?;
        }
        Self::run_tasks_shared(fs)
    }

    /// Runs the task list a slice at a time (`TASK_SLICE`), the lock taken for each slice only:
    /// after a sweep's writes, and at each of the syncer's wake-ups for what the requests left
    /// (each runs one slice).
    pub fn run_tasks_shared(fs: &SharedFs) -> FsResult<()> {
        loop {
            let mut g = lock(fs);
            if g.is_shut_down() || !g.run_tasks_upto(TASK_SLICE)?.more {
                return Ok(());
            }
        }
    }

    /// The background flush (`FlushRequest`): every dirty buffer, in flights outside the lock,
    /// round after round (each write lets soft updates retire what it satisfied, and the next
    /// carry more) while the file system still wants one, at most `rounds`.
    pub fn flush_shared(fs: &SharedFs, rounds: usize) -> FsResult<()> {
        for _ in 0..rounds {
            let plan = {
                let mut g = lock(fs);
                if g.is_shut_down() || !g.flush_wanted() {
                    return Ok(());
                }
                if g.ordering() == Ordered::Sync {
                    return g.flush_all().map(|_| ());
                }
                let all = g.dirty_blocks(None);
                g.plan_delayed(all, 1024)
            };
            Self::write_plan(fs, plan)?;
        }
        Ok(())
    }

    /// The blocks the sweeps due now write (None when none is due); notes the burst.
    fn pick(&mut self, fs: &Fs) -> Option<Vec<u64>> {
        let now = fs.now_ns();
        let (sweep, meta) = (self.next_sweep <= now, self.next_meta <= now);
        if !sweep && !meta {
            return None;
        }
        let mut bnos = match self.opts.policy {
            _ if !sweep => Vec::new(),
            UpdatePolicy::Pu => fs.dirty_blocks(None),
            UpdatePolicy::Aipu => fs.dirty_blocks(Some(self.opts.age.as_nanos() as u64)),
            UpdatePolicy::Wt => Vec::new(),
        };
        if meta {
            let picked: std::collections::HashSet<u64> = bnos.iter().copied().collect();
            bnos.extend(fs.dirty_metadata_blocks().into_iter().filter(|b| !picked.contains(b)));
        }
        for (due, next, step) in [
            (sweep, &mut self.next_sweep, self.opts.interval),
            (meta, &mut self.next_meta, self.opts.metadata_interval),
        ] {
            while due && *next <= now {
                *next += step.as_nanos() as u64;
            }
        }
        self.bursts.push(bnos.len());
        Some(bnos)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::SimClock;
    use crate::dev::{BlockDevice, MemDevice};
    use crate::format::ROOT_INO;
    use crate::fs::{mkfs, MkfsOptions, MountOptions, Ordering as Ord};

    fn setup() -> (Fs, Arc<SimClock>, Arc<MemDevice>) {
        let dev = Arc::new(MemDevice::new(4096, 8192));
        mkfs(dev.clone(), &MkfsOptions::default(), (0, 0)).unwrap();
        let clock = Arc::new(SimClock::new());
        let d: Arc<dyn BlockDevice> = dev.clone();
        let opts = MountOptions { ordering: Ord::Async, cache_blocks: 4096, readonly: false };
        (Fs::mount(d, opts, clock.clone()).unwrap(), clock, dev)
    }

    const S: u64 = 1_000_000_000;

    /// A sweep planned before a shutdown and written after it (the syncer plans under the
    /// lock and writes outside it) fails with the shutdown's error, which the mount's syncer
    /// does not log as its own (`FsError::is_shutdown`), for every ordering.
    #[test]
    fn a_sweep_cut_short_by_a_shutdown_fails_with_the_shutdown() {
        use crate::fs::shutdown::Shutdown;
        for ordering in [Ord::Softdep, Ord::Sync, Ord::Async] {
            let dev = Arc::new(MemDevice::new(4096, 8192));
            mkfs(dev.clone(), &MkfsOptions::default(), (0, 0)).unwrap();
            let opts = MountOptions { ordering, cache_blocks: 4096, readonly: false };
            let mut fs = Fs::mount(dev.clone(), opts, Arc::new(SimClock::new())).unwrap();
            let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
            fs.write(f, 0, &[1; 3 * 4096]).unwrap();
            let plan = fs.plan_delayed(fs.dirty_blocks(None), 1024);
            assert!(!plan.is_empty(), "{ordering:?}: dirty blocks to write");
            fs.shutdown(Shutdown::Nologflush);
            let shared: SharedFs = Arc::new(std::sync::Mutex::new(fs));
            let e = Sweeper::write_plan(&shared, plan).unwrap_err();
            assert!(e.is_shutdown(), "{ordering:?}: {e}");
            assert!(!crate::fs::FsError::NoSpace.is_shutdown());
        }
    }

    #[test]
    fn aipu_writes_a_block_once_it_is_age_old_and_redirtying_keeps_its_age() {
        let (mut fs, clock, dev) = setup();
        let mut sw = Sweeper::new(SyncerOptions::for_policy(UpdatePolicy::Aipu), &mut fs);
        let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        fs.flush_all().unwrap();
        let w0 = dev.stats().writes();
        fs.write(f, 0, &[1; 4096]).unwrap(); // first dirtied at t=0
        for t in 1..=29 {
            clock.set(t * S);
            fs.write(f, 0, &[t as u8; 4096]).unwrap(); // redirtied every second
            sw.tick(&mut fs).unwrap();
        }
        assert_eq!(dev.stats().writes(), w0, "nothing is 30 s old yet");
        clock.set(30 * S);
        sw.tick(&mut fs).unwrap();
        assert!(dev.stats().writes() > w0, "30 s after it was first dirtied, it goes");
    }

    #[test]
    fn pu_writes_everything_each_interval_and_counts_bursts() {
        let (mut fs, clock, dev) = setup();
        let mut sw = Sweeper::new(SyncerOptions::for_policy(UpdatePolicy::Pu), &mut fs);
        let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        clock.set(29 * S);
        fs.write(f, 0, &[1; 40960]).unwrap();
        sw.tick(&mut fs).unwrap();
        assert!(sw.bursts.is_empty());
        let w0 = dev.stats().writes();
        clock.set(30 * S);
        sw.tick(&mut fs).unwrap();
        assert!(dev.stats().writes() >= w0 + 10, "a buffer 1 s old goes with the sweep");
        assert_eq!(sw.bursts.len(), 1);
        assert!(sw.bursts[0] >= 10);
    }

    #[test]
    fn wt_queues_each_modification_at_once() {
        let (mut fs, _clock, dev) = setup();
        let _sw = Sweeper::new(SyncerOptions::for_policy(UpdatePolicy::Wt), &mut fs);
        let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        let w0 = dev.stats().writes();
        fs.write(f, 0, &[1; 8192]).unwrap();
        assert!(dev.stats().writes() >= w0 + 2);
    }
}
