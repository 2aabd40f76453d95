//! Where the soft updates paper's tasks run: a file system on the disk model in simulated time
//! (with a CPU model, so that the time a task takes is its CPU plus its waits for the disk), or
//! on an image file in real time. The tasks call the file system through a [`World`], which
//! charges each call's CPU, runs the 30-second update daemon, and times each kind of call.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use sufs_fs::clock::{Clock, RealClock, SimClock};
use sufs_fs::dev::{BlockDevice, DevStats, DiskModel, FileDevice, MemDevice, ModelDevice};
use sufs_fs::fs::{mkfs, Fs, MkfsOptions, MountOptions, Ordering, RenameFlags, SetAttr};
use sufs_fs::policy::{Sweeper, SyncerOptions, UpdatePolicy};

use crate::papers::PResult;

pub const SEC: u64 = 1_000_000_000;

/// The machine of the paper's §5, as the disk model and the CPU model see it. The paper does not
/// describe its machines beyond "a single disk" (the torture test and the system build) and "a
/// mail spool striped across three disks" (the mail server); the values here are a 1998-99 PC
/// server's, each with its reason in `sources`.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub disk: DiskModel,
    /// The disk's size, in bytes.
    pub disk_bytes: u64,
    /// File-system block size: 4.4BSD FFS's default 8 KiB.
    pub block_size: u32,
    /// Buffer cache, in blocks.
    pub cache_blocks: usize,
    /// CPU of one file-system call (system call entry, name lookup, the call's own work).
    pub syscall_ns: u64,
    /// CPU per byte moved between the user and the buffer cache (a copy at ~100 MB/s).
    pub copy_ns_per_kib: u64,
    /// The update daemon's period: 4.4BSD's `update` calls sync(2) every 30 s.
    pub sync_interval_s: u64,
    /// A data block is queued for writing as soon as it is full (4.4BSD's `ffs_write`).
    pub full_blocks_async: bool,
}

impl Machine {
    /// The single-disk machine of the torture test and the system build.
    pub fn paper() -> Machine {
        Machine {
            disk: DiskModel {
                name: "scsi-1999",
                cylinders: 6_962,
                rpm: 7200.0,
                short_a: 1.5,
                short_b: 0.17,
                long_a: 6.0,
                long_b: 0.0009,
                boundary: 1000,
                transfer_mb_s: 12.0,
                // A SCSI drive of 1999 reads ahead into its track buffer.
                streams: true,
            },
            disk_bytes: 4_500_000_000,
            block_size: 8192,
            cache_blocks: 2048,
            syscall_ns: 40_000,
            copy_ns_per_kib: 10_000,
            sync_interval_s: 30,
            full_blocks_async: true,
        }
    }

    /// Why each parameter has its value: Markdown for the page's setup.
    pub fn sources(&self) -> String {
        let d = &self.disk;
        format!(
            "**The machine.** The paper does not describe its machines: it says only that the torture test and the \
             system build ran on \"a single disk\" and that the mail server's spool is \"striped across three disks\" \
             (§5). sufs models a 1998-99 PC server of the kind that ran FreeBSD and BSD/OS then: one SCSI disk of \
             {:.1} GB, {} RPM ({:.2} ms average rotational latency), a seek of {}+{}·√d ms below {} cylinders and \
             {}+{}·d ms from there ({} cylinders: {:.1} ms over a third of the stroke, {:.1} ms full stroke), {} MB/s \
             at the media (the disk model of `crates/sufs-fs/src/dev.rs`: one FIFO queue, Ruemmler & Wilkes's seek curve; the \
             values are those of the 7200 RPM drives of the time, not of a drive the paper names); 4.4BSD FFS's \
             {} KiB blocks, a data block queued for writing as soon as it is full (4.4BSD's `bawrite` in \
             `ffs_write`); a buffer cache of {} MiB ({} blocks; such machines had 64-128 MiB of memory); {} µs of \
             CPU per file-system call and {} µs per KiB copied (a 300 MHz Pentium II); the 4.4BSD update daemon's \
             sync every {} s for all three orderings. The three mail-spool disks are modelled as one (the write \
             counts, which are what the paper gives, do not depend on it). Time is simulated: a task's time is its \
             modelled CPU plus its waits for the disk plus its pauses, so the runs are deterministic and the other \
             work on this machine does not disturb them. One CPU: a process waiting for the disk holds it.",
            self.disk_bytes as f64 / 1e9,
            d.rpm,
            d.rotation_ms() / 2.0,
            d.short_a,
            d.short_b,
            d.boundary,
            d.long_a,
            d.long_b,
            d.cylinders,
            d.seek_ms(d.cylinders / 3),
            d.seek_ms(d.cylinders),
            d.transfer_mb_s,
            self.block_size / 1024,
            self.cache_blocks * self.block_size as usize / (1 << 20),
            self.cache_blocks,
            self.syscall_ns / 1000,
            self.copy_ns_per_kib / 1000,
            self.sync_interval_s,
        )
    }
}

/// The kinds of file-system call a task makes, each timed separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Create,
    Remove,
    Mkdir,
    Rmdir,
    Write,
    Read,
    Stat,
    Readdir,
    Fsync,
    Rename,
    Truncate,
}

pub const CALLS: [Call; 11] = [
    Call::Create,
    Call::Remove,
    Call::Mkdir,
    Call::Rmdir,
    Call::Write,
    Call::Read,
    Call::Stat,
    Call::Readdir,
    Call::Fsync,
    Call::Rename,
    Call::Truncate,
];

impl Call {
    pub fn name(self) -> &'static str {
        match self {
            Call::Create => "create",
            Call::Remove => "remove",
            Call::Mkdir => "mkdir",
            Call::Rmdir => "rmdir",
            Call::Write => "write",
            Call::Read => "read",
            Call::Stat => "stat",
            Call::Readdir => "readdir",
            Call::Fsync => "fsync",
            Call::Rename => "rename",
            Call::Truncate => "truncate",
        }
    }
}

/// The time base: the disk model's simulated clock, or the real one on an image file.
enum Time {
    Sim { clock: Arc<SimClock>, dev: Arc<ModelDevice<MemDevice>> },
    Real { start: Instant },
}

/// What one ordering's run of a task measured.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub ordering: String,
    /// The task's running time: simulated on the disk model, wall-clock on an image file.
    pub time_s: f64,
    /// The modelled CPU in that time (0 on an image file, where the CPU is real).
    pub cpu_s: f64,
    /// The time callers waited for the disk (simulated): reads and synchronous writes.
    pub disk_wait_s: f64,
    /// Blocks written, synchronous (the caller waited) and asynchronous or delayed, from the
    /// task's start to the end of the unmount that follows it.
    pub sync_writes: u64,
    pub async_writes: u64,
    /// Time in each kind of call, seconds, and how many calls.
    pub calls: Vec<(String, f64, u64)>,
    /// The CPU this process spent running the task (sufs's own cost, whatever the model).
    pub host_cpu_s: f64,
    /// Task-specific counts (messages delivered, files compiled...).
    pub counts: Vec<(String, f64)>,
}

impl Outcome {
    pub fn writes(&self) -> u64 {
        self.sync_writes + self.async_writes
    }

    pub fn count(&self, name: &str) -> f64 {
        self.counts.iter().find(|x| x.0 == name).map(|x| x.1).unwrap_or(0.0)
    }
}

/// This thread's CPU time, in seconds.
pub fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// A file system, its clock and its update daemon, with each call charged and timed.
pub struct World {
    pub fs: Fs,
    time: Time,
    dev: Arc<dyn BlockDevice>,
    sweeper: Sweeper,
    pub m: Machine,
    ordering: Ordering,
    cpu_ns: u64,
    wait_ns: u64,
    start_ns: u64,
    start_stats: DevStats,
    host_cpu0: f64,
    call_ns: [u64; CALLS.len()],
    call_n: [u64; CALLS.len()],
    pub counts: Vec<(String, f64)>,
}

impl World {
    /// A fresh file system on the disk model.
    pub fn sim(ordering: Ordering, m: &Machine, seed: u64) -> PResult<World> {
        let clock = Arc::new(SimClock::new());
        let nblocks = m.disk_bytes / m.block_size as u64;
        let mem = MemDevice::new(m.block_size as usize, nblocks);
        let dev = Arc::new(ModelDevice::new(mem, m.disk.clone(), clock.clone(), seed));
        let d: Arc<dyn BlockDevice> = dev.clone();
        let c: Arc<dyn Clock> = clock.clone();
        World::new(ordering, m, d, c, Time::Sim { clock, dev })
    }

    /// A fresh file system on an image file of `bytes` at `path`, durable (each batch ends in
    /// `fdatasync`) unless `durable` is false (`--quick`, where only the path is exercised).
    pub fn image(ordering: Ordering, m: &Machine, path: &Path, bytes: u64, durable: bool) -> PResult<World> {
        let _ = std::fs::remove_file(path);
        FileDevice::create(path, bytes).map_err(sufs_fs::fs::FsError::from)?;
        let mut f = FileDevice::open(path, m.block_size as usize, true).map_err(sufs_fs::fs::FsError::from)?;
        f.set_durable(durable);
        let d: Arc<dyn BlockDevice> = Arc::new(f);
        let c: Arc<dyn Clock> = Arc::new(RealClock::new());
        World::new(ordering, m, d, c, Time::Real { start: Instant::now() })
    }

    /// A fresh file system in memory, in real time: no device cost at all, so a run's time is
    /// the file system's own CPU.
    pub fn mem(ordering: Ordering, m: &Machine, bytes: u64) -> PResult<World> {
        let d: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(m.block_size as usize, bytes / m.block_size as u64));
        let c: Arc<dyn Clock> = Arc::new(RealClock::new());
        World::new(ordering, m, d, c, Time::Real { start: Instant::now() })
    }

    fn new(
        ordering: Ordering,
        m: &Machine,
        dev: Arc<dyn BlockDevice>,
        clock: Arc<dyn Clock>,
        time: Time,
    ) -> PResult<World> {
        let mk = MkfsOptions { block_size: m.block_size, ..Default::default() };
        mkfs(dev.clone(), &mk, clock.wall())?;
        let opts = MountOptions { ordering, cache_blocks: m.cache_blocks, readonly: false };
        let mut fs = Fs::mount(dev.clone(), opts, clock)?;
        fs.set_async_full_blocks(m.full_blocks_async);
        let mut sync = SyncerOptions::for_policy(UpdatePolicy::Pu);
        sync.interval = std::time::Duration::from_secs(m.sync_interval_s);
        sync.metadata_interval = sync.interval;
        let sweeper = Sweeper::new(sync, &mut fs);
        let start_stats = dev.stats();
        Ok(World {
            fs,
            time,
            dev,
            sweeper,
            m: m.clone(),
            ordering,
            cpu_ns: 0,
            wait_ns: 0,
            start_ns: 0,
            start_stats,
            host_cpu0: 0.0,
            call_ns: [0; CALLS.len()],
            call_n: [0; CALLS.len()],
            counts: Vec::new(),
        })
    }

    pub fn simulated(&self) -> bool {
        matches!(self.time, Time::Sim { .. })
    }

    pub fn now(&self) -> u64 {
        match &self.time {
            Time::Sim { clock, .. } => clock.now_ns(),
            Time::Real { start } => start.elapsed().as_nanos() as u64,
        }
    }

    /// The setup is done: everything it wrote is on disk, the disk is idle, and the counters
    /// start from here.
    pub fn start(&mut self) -> PResult<()> {
        self.fs.sync_all()?;
        if let Time::Sim { clock, dev } = &self.time {
            clock.set(dev.idle_at().max(clock.now_ns()) + SEC);
            dev.clear_requests();
        }
        let mut sync = SyncerOptions::for_policy(UpdatePolicy::Pu);
        sync.interval = std::time::Duration::from_secs(self.m.sync_interval_s);
        sync.metadata_interval = sync.interval;
        self.sweeper = Sweeper::new(sync, &mut self.fs);
        self.start_ns = self.now();
        self.start_stats = self.dev.stats();
        self.cpu_ns = 0;
        self.wait_ns = 0;
        self.call_ns = [0; CALLS.len()];
        self.call_n = [0; CALLS.len()];
        self.host_cpu0 = thread_cpu_s();
        Ok(())
    }

    /// Charges `ns` of CPU (simulated time only), then runs the update daemon if it is due.
    pub fn cpu(&mut self, ns: u64) -> PResult<()> {
        if let Time::Sim { clock, .. } = &self.time {
            clock.advance(ns);
            self.cpu_ns += ns;
        }
        self.daemon()
    }

    /// Runs the sweeps due now. Their writes are asynchronous; the clock does not move.
    fn daemon(&mut self) -> PResult<()> {
        if self.sweeper.next_due() <= self.fs.now_ns() {
            self.sweeper.tick(&mut self.fs)?;
        }
        if let Time::Sim { dev, .. } = &self.time {
            // The request log is not needed; keep it from growing over a long run.
            dev.clear_requests();
        }
        Ok(())
    }

    /// Nothing to do until `t` (simulated); the update daemon runs on its schedule meanwhile.
    /// On an image file the pause is skipped.
    pub fn idle_until(&mut self, t: u64) -> PResult<()> {
        let Time::Sim { clock, .. } = &self.time else { return Ok(()) };
        let clock = clock.clone();
        while self.sweeper.next_due() <= t {
            clock.set(clock.now_ns().max(self.sweeper.next_due()));
            self.sweeper.tick(&mut self.fs)?;
        }
        clock.set(clock.now_ns().max(t));
        Ok(())
    }

    /// One call of kind `c` moving `bytes`: its CPU charged first, then `f` timed.
    fn call<T>(&mut self, c: Call, bytes: usize, f: impl FnOnce(&mut Fs) -> sufs_fs::fs::FsResult<T>) -> PResult<T> {
        let t0 = self.now();
        let cpu = self.m.syscall_ns + bytes as u64 * self.m.copy_ns_per_kib / 1024;
        self.cpu(cpu)?;
        let t1 = self.now();
        let r = f(&mut self.fs)?;
        let t2 = self.now();
        if self.simulated() {
            self.wait_ns += t2 - t1;
        }
        let i = CALLS.iter().position(|&x| x == c).expect("every call is listed");
        self.call_ns[i] += t2 - t0;
        self.call_n[i] += 1;
        Ok(r)
    }

    pub fn mkdir(&mut self, dir: u32, name: &str) -> PResult<u32> {
        self.call(Call::Mkdir, 0, |fs| fs.mkdir(dir, name.as_bytes(), 0o755, 0, 0).map(|x| x.0))
    }

    /// Creates `name` in `dir` and writes `data` into it, one call per 64 KiB.
    pub fn create_file(&mut self, dir: u32, name: &str, data: &[u8]) -> PResult<u32> {
        let ino = self.call(Call::Create, 0, |fs| fs.create(dir, name.as_bytes(), 0o644, 0, 0).map(|x| x.0))?;
        self.write_at(ino, 0, data)?;
        Ok(ino)
    }

    pub fn write_at(&mut self, ino: u32, off: u64, data: &[u8]) -> PResult<()> {
        for (i, chunk) in data.chunks(64 << 10).enumerate() {
            let at = off + (i as u64) * (64 << 10);
            self.call(Call::Write, chunk.len(), |fs| fs.write(ino, at, chunk))?;
        }
        Ok(())
    }

    /// Reads a whole file of `size` bytes, one call per 64 KiB.
    pub fn read_file(&mut self, ino: u32, size: u64) -> PResult<Vec<u8>> {
        let mut out = Vec::with_capacity(size as usize);
        let mut off = 0;
        while off < size {
            let n = (size - off).min(64 << 10) as usize;
            let part = self.call(Call::Read, n, |fs| fs.read(ino, off, n))?;
            if part.is_empty() {
                break;
            }
            off += part.len() as u64;
            out.extend(part);
        }
        Ok(out)
    }

    /// The inode's size and whether it is a directory.
    pub fn stat(&mut self, ino: u32) -> PResult<(u64, bool)> {
        self.call(Call::Stat, 0, |fs| fs.getattr(ino).map(|d| (d.size, d.is_dir())))
    }

    pub fn lookup(&mut self, dir: u32, name: &str) -> PResult<u32> {
        self.call(Call::Stat, 0, |fs| fs.lookup(dir, name.as_bytes()).map(|x| x.0))
    }

    /// Every entry of `dir` but "." and "..": name and inode.
    pub fn readdir(&mut self, dir: u32) -> PResult<Vec<(String, u32)>> {
        let mut out = Vec::new();
        let mut off = 0;
        loop {
            let part = self.call(Call::Readdir, 0, |fs| fs.readdir(dir, off, 256))?;
            let Some(last) = part.last() else { break };
            off = last.next;
            for e in part {
                if e.name != b"." && e.name != b".." {
                    out.push((String::from_utf8_lossy(&e.name).into_owned(), e.ino));
                }
            }
        }
        Ok(out)
    }

    pub fn unlink(&mut self, dir: u32, name: &str) -> PResult<()> {
        self.call(Call::Remove, 0, |fs| fs.unlink(dir, name.as_bytes()))
    }

    pub fn rmdir(&mut self, dir: u32, name: &str) -> PResult<()> {
        self.call(Call::Rmdir, 0, |fs| fs.rmdir(dir, name.as_bytes()))
    }

    pub fn fsync(&mut self, ino: u32) -> PResult<()> {
        self.call(Call::Fsync, 0, |fs| fs.fsync(ino))
    }

    pub fn rename(&mut self, dir: u32, name: &str, to: u32, newname: &str) -> PResult<()> {
        self.call(Call::Rename, 0, |fs| fs.rename(dir, name.as_bytes(), to, newname.as_bytes(), RenameFlags::default()))
    }

    pub fn truncate(&mut self, ino: u32, size: u64) -> PResult<()> {
        let a = SetAttr { size: Some(size), ..Default::default() };
        self.call(Call::Truncate, 0, |fs| fs.setattr(ino, &a).map(|_| ()))
    }

    /// `rm -rf`: everything under `dir`'s entry `name`, depth first, then the entry.
    pub fn remove_tree(&mut self, parent: u32, name: &str) -> PResult<()> {
        let dir = self.lookup(parent, name)?;
        for (n, ino) in self.readdir(dir)? {
            let (_, is_dir) = self.stat(ino)?;
            if is_dir {
                self.remove_tree(dir, &n)?;
            } else {
                self.unlink(dir, &n)?;
            }
        }
        self.rmdir(parent, name)
    }

    /// The task is over: its time is taken now; then the file system is unmounted, and the
    /// writes counted include the unmount's (what the task left dirty).
    pub fn finish(mut self) -> PResult<Outcome> {
        let end = self.now();
        let host_cpu_s = thread_cpu_s() - self.host_cpu0;
        self.fs.unmount()?;
        let st = self.dev.stats();
        let calls = CALLS
            .iter()
            .enumerate()
            .filter(|(i, _)| self.call_n[*i] > 0)
            .map(|(i, c)| (c.name().to_string(), self.call_ns[i] as f64 / 1e9, self.call_n[i]))
            .collect();
        Ok(Outcome {
            ordering: self.ordering.to_string(),
            time_s: (end - self.start_ns) as f64 / 1e9,
            cpu_s: self.cpu_ns as f64 / 1e9,
            disk_wait_s: self.wait_ns as f64 / 1e9,
            sync_writes: st.sync_writes - self.start_stats.sync_writes,
            async_writes: st.async_writes - self.start_stats.async_writes,
            calls,
            host_cpu_s,
            counts: self.counts,
        })
    }

    /// After the last write the disk is still busy with what was queued: when it is done.
    pub fn disk_idle_at(&self) -> u64 {
        match &self.time {
            Time::Sim { dev, .. } => dev.idle_at(),
            Time::Real { .. } => self.now(),
        }
    }

    /// Blocks written since `start`.
    pub fn writes(&self) -> u64 {
        self.dev.stats().writes() - self.start_stats.writes()
    }

    /// Writes everything now (sync(2)), as a benchmark's last step.
    pub fn sync(&mut self) -> PResult<()> {
        self.fs.sync_all()?;
        Ok(())
    }
}
