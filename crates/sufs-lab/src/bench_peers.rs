//! `sufs bench peers`: the same workloads through the FUSE mount of sufs (softdep,
//! sync, async), through fuse2fs on an ext4 image of the same size, and through kernel ext4 on a
//! loop device, each run on a fresh image: many empty files created, stat'ed and removed; real
//! trees copied in and removed; the Andrew-like phases of `bench`; a PostMark-like mail-server
//! load; fio's sequential and random 4 KiB reads and writes on a large file; and (in
//! `concurrent`) the same kinds of work from 1, 2 and 4 threads, and Mogul's cold reads behind
//! a steady writer; and a tree listed, stat'ed and read cold, which fuse-ufs (FreeBSD's UFS2
//! through FUSE, mounted read-only) also runs, on an image makefs made of the same tree. A
//! sufs peer may name its update policy (`sufs-softdep-pu`).
//!
//! The floor (`floor`, `floor-classic`, `floor-uring`: `sufs bench floor-serve`, a file system
//! in memory served as sufs is) says what FUSE itself costs: `messages` prints each peer's time
//! over the floor's on the same transport, and the FUSE requests per operation of each phase,
//! which sufs and the floor count by opcode and answer on their control channels.
//!
//! Every number is measured, never made up: a peer that cannot run here (no fuse2fs, not root
//! for a loop device, no fio) is listed with the reason and left out. Device writes come from
//! sufs's own counters (`--stats`: 4 KiB blocks, and requests, each a run of neighbouring blocks
//! in one `pwritev`) and, for fuse2fs and kernel ext4, whose images are attached to a loop
//! device, from `/sys/block/loopN/stat` (write requests and sectors).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::bench::{andrew_phases, copy_tree, run_err, BenchError, FuseMount};
use sufs_fs::fs::Ordering;

mod concurrent;
mod messages;

/// The file systems compared, in table order. A sufs peer may also name an update policy after
/// its ordering, `sufs-ORDERING-POLICY` (`sufs-softdep-pu`), and a transport last
/// (`sufs-softdep-classic`, `sufs-softdep-uring`, `sufs-softdep-pu-uring`), and `wbc` at the
/// very end for the kernel's writeback cache (`sufs-softdep-uring-wbc`, `-o writeback_cache`);
/// without them it has the mount's defaults (aipu; io_uring when the kernel offers it; no
/// writeback cache). Its image is FreeBSD's UFS2 as `sufs mkfs` makes it (32 KiB blocks of 4 KiB
/// fragments); `ufs2` right after the ordering is taken too, and changes nothing.
pub const PEERS: [&str; 7] = ["sufs-softdep", "sufs-sync", "sufs-async", "fuse2fs", "ext4-kernel", "fuse-ufs", FLOOR];
/// The floor peer (`sufs bench floor-serve`), which may name a transport after it (`floor-uring`).
pub const FLOOR: &str = "floor";
/// The update policies a sufs peer's name may end in.
pub const POLICIES: [&str; 3] = ["pu", "aipu", "wt"];
/// The transports a sufs peer's name may end in.
pub const TRANSPORTS: [&str; 2] = ["classic", "uring"];
/// The workloads, in order.
pub const WORKLOADS: [&str; 10] =
    ["files", "copy", "andrew", "postmark", "fio", "mail", "stall", "read", "parallel", "coldread"];
/// The workloads run when none are named: all but the long `parallel` and `coldread`.
pub const DEFAULT_WORKLOADS: [&str; 8] = ["files", "copy", "andrew", "postmark", "fio", "mail", "stall", "read"];
/// The workloads fuse-ufs runs. It is mounted read-only, its default: its write support
/// (`-o rw`, 0.6.0) calls itself experimental, and here stopped making files in a directory
/// at 2,046 and panicked in its block allocator while a copied tree was removed.
const READ_ONLY_WORKLOADS: [&str; 1] = ["read"];
/// The workloads that remount their file system, which the floor, kept in memory, cannot.
const REMOUNTING_WORKLOADS: [&str; 3] = ["read", "parallel", "coldread"];
/// The read workload's tree in the root: only it is listed, whatever else a file system keeps
/// there (lost+found, .snap).
const READ_TREE: &str = "tree";
/// makefs's options for fuse-ufs's image. Debian's makefs (20190105) writes the UFS2 superblock
/// at 8 KiB, and fuse-ufs looks for it only at 64 KiB, where FreeBSD's newfs puts it; makefs
/// also writes a copy at the start of every cylinder group, the first at `sblkno` fragments,
/// which 64 KiB blocks of 8 KiB fragments place at 64 KiB.
const MAKEFS_UFS2: &str = "version=2,bsize=65536,fsize=8192";

/// A sufs peer: its ordering, update policy and transport (`None`: the mount's default).
struct SufsPeer<'a> {
    ordering: Ordering,
    policy: Option<&'a str>,
    transport: Option<&'a str>,
    /// The kernel's writeback cache (`-o writeback_cache`).
    writeback: bool,
}

/// A sufs peer from its name.
fn sufs_peer(peer: &str) -> Option<SufsPeer<'_>> {
    let mut parts = peer.strip_prefix("sufs-")?.split('-');
    let ordering = match parts.next()? {
        "softdep" => Ordering::Softdep,
        "sync" => Ordering::Sync,
        "async" => Ordering::Async,
        _ => return None,
    };
    let (mut policy, mut transport, mut writeback) = (None, None, false);
    let mut first = true;
    for p in parts {
        match p {
            _ if writeback => return None,
            "ufs2" if first => {}
            "wbc" => writeback = true,
            p if POLICIES.contains(&p) && policy.is_none() && transport.is_none() => policy = Some(p),
            p if TRANSPORTS.contains(&p) && transport.is_none() => transport = Some(p),
            _ => return None,
        }
        first = false;
    }
    Some(SufsPeer { ordering, policy, transport, writeback })
}

/// The floor peer from its name: its transport (None: the default, auto).
fn floor_peer(peer: &str) -> Option<Option<&str>> {
    match peer.strip_prefix(FLOOR)? {
        "" => Some(None),
        t => t.strip_prefix('-').filter(|t| TRANSPORTS.contains(t)).map(Some),
    }
}

/// A peer served by this program (sufs or the floor): its transport (None: auto).
fn transport_of(peer: &str) -> Option<Option<&str>> {
    sufs_peer(peer).map(|s| s.transport).or_else(|| floor_peer(peer))
}

/// Sizes and places; `Default` is the full size.
#[derive(Debug, Clone, Serialize)]
pub struct PeersOptions {
    /// This program, for `sufs mount -f`.
    pub exe: PathBuf,
    /// Where the images and mount points go.
    pub dir: PathBuf,
    /// Size of every image (sufs and ext4 alike).
    pub image_size: u64,
    pub peers: Vec<String>,
    pub workloads: Vec<String>,
    /// Empty files created, stat'ed and removed, `per_dir` to a directory.
    pub files: usize,
    pub per_dir: usize,
    /// Trees copied in and removed, at most `tree_files` files of them all.
    pub trees: Vec<PathBuf>,
    pub tree_files: usize,
    /// The Andrew-like phases' source tree and its file limit.
    pub andrew_tree: PathBuf,
    pub andrew_files: usize,
    /// PostMark: files in the initial pool, transactions, subdirectories, file sizes.
    pub postmark_files: usize,
    pub postmark_tx: usize,
    pub postmark_dirs: usize,
    pub postmark_min: usize,
    pub postmark_max: usize,
    pub seed: u64,
    /// fio's file size and the time limit of each of its four jobs, in seconds.
    pub fio_size: u64,
    pub fio_runtime: u64,
    /// The mail-delivery workload: messages each deliverer makes (16 KiB, fsync'ed, renamed in).
    pub mail_messages: usize,
    /// The stall workload: MiB written without fsync, then seconds of probing creates.
    pub stall_mb: u64,
    pub stall_secs: f64,
    /// Every sufs peer's buffer cache in bytes (`None`: the mount's default).
    pub sufs_cache: Option<u64>,
    /// The parallel workload, per worker: empty files, MiB written and read, messages delivered.
    pub par_files: usize,
    pub par_mb: u64,
    pub par_messages: usize,
    /// The coldread workload: seconds of cold reads, and the writer's rate in MiB/s.
    pub coldread_secs: f64,
    pub coldread_rate: f64,
    /// Each workload runs this many times on every peer, the peers in a rotated order each
    /// round (round r starts with the r-th), and each phase reports its median time: the first
    /// mount after a pause pays for a cold CPU and cold kernel paths, which one round charges
    /// to whichever peer goes first.
    pub rounds: usize,
    /// Every image file is written whole (zeros) before its mkfs, as a disk partition holds
    /// every block: an image made sparse pays, at each flush of a region written for the
    /// first time, for the host file system's allocation of it, which is the host's cost and
    /// falls on whichever peer writes more new regions between flushes.
    pub written_images: bool,
}

impl Default for PeersOptions {
    fn default() -> Self {
        PeersOptions {
            exe: PathBuf::from("sufs"),
            dir: PathBuf::from("/var/tmp"),
            image_size: 4 << 30,
            peers: PEERS.iter().map(|s| s.to_string()).collect(),
            workloads: DEFAULT_WORKLOADS.iter().map(|s| s.to_string()).collect(),
            files: 100_000,
            per_dir: 1000,
            trees: vec![PathBuf::from("/usr/include"), PathBuf::from("/usr/share/doc")],
            tree_files: 100_000,
            andrew_tree: PathBuf::from("/usr/include"),
            andrew_files: 4000,
            postmark_files: 20_000,
            postmark_tx: 50_000,
            postmark_dirs: 100,
            postmark_min: 512,
            postmark_max: 16 << 10,
            seed: 1,
            fio_size: 2 << 30,
            fio_runtime: 30,
            mail_messages: 2000,
            stall_mb: 600,
            stall_secs: 45.0,
            sufs_cache: None,
            par_files: 5000,
            par_mb: 64,
            par_messages: 500,
            coldread_secs: 60.0,
            coldread_rate: 2.0,
            rounds: 1,
            written_images: false,
        }
    }
}

impl PeersOptions {
    /// Every count and size multiplied by `scale` (at least 1 of each).
    pub fn scaled(mut self, scale: f64) -> Self {
        let s = |n: usize| ((n as f64 * scale).round() as usize).max(1);
        self.files = s(self.files);
        self.tree_files = s(self.tree_files);
        self.andrew_files = s(self.andrew_files);
        self.postmark_files = s(self.postmark_files);
        self.postmark_tx = s(self.postmark_tx);
        self.mail_messages = s(self.mail_messages);
        self.stall_mb = ((self.stall_mb as f64 * scale).round() as u64).max(1);
        self.stall_secs = (self.stall_secs * scale).max(0.2);
        self.par_files = s(self.par_files);
        self.par_mb = ((self.par_mb as f64 * scale).round() as u64).max(1);
        self.par_messages = s(self.par_messages);
        self.coldread_secs = (self.coldread_secs * scale).max(0.2);
        self.fio_size = ((self.fio_size as f64 * scale) as u64).max(1 << 20) & !4095;
        self
    }
}

/// One timed phase of a workload, or a latency it measured.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub name: String,
    pub ops: u64,
    pub secs: f64,
    /// `secs` is a latency (a median, a mean, a worst case), not time spent: shown in
    /// milliseconds and left out of the workload's total.
    pub latency: bool,
    /// The phase ran at the same time as the one before it (a background writer), so its time
    /// is left out of the workload's total.
    pub alongside: bool,
    /// The FUSE requests the server (sufs or the floor) served during the phase, by opcode
    /// (`messages::per_phase`; the forgets as `forget` messages, `forget_nodes`, `forget_nlookup`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<std::collections::BTreeMap<String, u64>>,
}

impl Phase {
    pub fn new(name: impl Into<String>, ops: u64, secs: f64) -> Phase {
        Phase { name: name.into(), ops, secs, latency: false, alongside: false, messages: None }
    }

    pub fn latency(name: impl Into<String>, secs: f64) -> Phase {
        Phase { latency: true, ..Phase::new(name, 0, secs) }
    }

    pub fn alongside(name: impl Into<String>, ops: u64, secs: f64) -> Phase {
        Phase { alongside: true, ..Phase::new(name, ops, secs) }
    }

    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs.max(1e-9)
    }
}

/// Device writes of one run, from mount to the end of unmount.
#[derive(Debug, Clone, Serialize)]
pub struct Writes {
    /// In 4 KiB blocks.
    pub blocks: u64,
    /// Write requests: sufs's runs of neighbouring blocks, a loop device's merged requests.
    pub requests: Option<u64>,
    /// Where the figure comes from.
    pub source: String,
    /// A sufs peer's FUSE messages in the workload (every request the mount served, a
    /// FORGET or BATCH_FORGET counted once; `--stats`' `fuse_messages`).
    pub messages: Option<u64>,
    /// A sufs peer's nanoseconds holding the file system's one lock in the workload
    /// (`--stats`' `lock`): per message, what bounds the messages a second on any machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_held_ns: Option<u64>,
    /// Seconds the device was busy in the workload: sufs's writes and flushes of its image
    /// (`--stats`' `busy_ns`: time with any batch being written), a loop device's time with
    /// any request in flight (`io_ticks`).
    /// Set against the phases' times, it says how much of them was the disk's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_busy_secs: Option<f64>,
    /// A FUSE peer's CPU seconds in the workload, user and system, every thread of its server
    /// from mount to exit (`wait4`'s rusage; the kernel's share of a request done in the
    /// server's threads, as io_uring's, is in it). Against the floor's, what the server's own
    /// work costs, with less of the machine's noise than the phases' times.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_secs: Option<f64>,
}

/// One workload on one file system.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub workload: String,
    pub peer: String,
    /// The phases; the last is "unmount" (what was left to write).
    pub phases: Vec<Phase>,
    pub writes: Option<Writes>,
    /// The options a sufs peer was mounted with (`sufs mount -f --ordering ...`).
    pub mount_options: Vec<String>,
    /// Of several rounds, each round's total time by its number (a failed round is missing):
    /// the floor's table sets each round against the floor's of the same round, run beside
    /// it, and gives the median of those ratios and their range (`total_over`), which the
    /// machine's noise moves less than one run's. Empty for a single round.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub round_totals: Vec<(usize, f64)>,
    /// The round this run was (0 for the first).
    #[serde(skip)]
    pub round: usize,
}

impl Run {
    pub fn total_secs(&self) -> f64 {
        self.phases.iter().filter(|p| !p.latency && !p.alongside).map(|p| p.secs).sum()
    }
}

/// Everything a run of `sufs bench peers` found, for the table, the plots and the JSON.
#[derive(Debug, Clone, Serialize)]
pub struct PeersReport {
    pub options: PeersOptions,
    pub runs: Vec<Run>,
    /// What did not run, and why: (peer or workload, reason).
    pub skipped: Vec<(String, String)>,
}

pub(crate) fn which(prog: &str) -> bool {
    std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file())).unwrap_or(false)
}

pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Why `peer` cannot run here, if it cannot.
fn unavailable(peer: &str) -> Option<String> {
    let fuse = Path::new("/dev/fuse").exists();
    match peer {
        p if transport_of(p).is_some() && !fuse => Some("/dev/fuse is missing".into()),
        p if transport_of(p) == Some(Some("uring")) && fuse_uring::uring_enabled() != Some(true) => {
            Some(format!("FUSE over io_uring is off (as root: echo Y > {})", fuse_uring::URING_PARAMETER))
        }
        p if transport_of(p).is_some() => None,
        "fuse2fs" if !fuse => Some("/dev/fuse is missing".into()),
        "fuse2fs" if !which("fuse2fs") => Some("fuse2fs is not installed (Debian: apt-get install fuse2fs)".into()),
        "fuse2fs" | "ext4-kernel" if !which("mkfs.ext4") => Some("mkfs.ext4 is not installed (e2fsprogs)".into()),
        "fuse-ufs" if !fuse => Some("/dev/fuse is missing".into()),
        "fuse-ufs" if !which("fuse-ufs") => {
            Some("fuse-ufs is not installed (cargo install fuse-ufs, which needs libfuse3-dev and pkg-config)".into())
        }
        "fuse-ufs" if !which("makefs") => Some("makefs is not installed (Debian: apt-get install makefs)".into()),
        "fuse2fs" | "ext4-kernel" | "fuse-ufs" if !is_root() || !which("losetup") => {
            Some("needs root and losetup for a loop device (its writes are counted there)".into())
        }
        p if !PEERS.contains(&p) => Some(format!(
            "unknown file system (one of {}, or sufs-ORDERING[-POLICY][-TRANSPORT][-wbc] or floor-TRANSPORT with a policy of {} and a transport of {})",
            PEERS.join(", "),
            POLICIES.join(", "),
            TRANSPORTS.join(", ")
        )),
        _ => None,
    }
}

pub(crate) fn cmd(what: &str, c: &mut Command) -> Result<String, BenchError> {
    let out = c.output().map_err(|e| run_err(what, e))?;
    if !out.status.success() {
        return Err(BenchError::Run(format!("{what}: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// (write requests, sectors written) of a loop device.
fn loop_writes(dev: &str) -> Result<DevCount, BenchError> {
    let name = Path::new(dev).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let st = std::fs::read_to_string(format!("/sys/block/{name}/stat")).map_err(|e| run_err("loop device stat", e))?;
    let f: Vec<u64> = st.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    if f.len() < 10 {
        return Err(BenchError::Run(format!("/sys/block/{name}/stat: unexpected {st:?}")));
    }
    // Writes completed, sectors written, and the milliseconds the device had requests in
    // flight (`io_ticks`).
    Ok(DevCount { blocks: f[6] / 8, requests: f[4], sync: 0, busy_ns: f[9] * 1_000_000 })
}

/// A device's writes so far: 4 KiB blocks, requests, blocks written synchronously (sufs), and
/// the nanoseconds it was busy writing (sufs: its writes and flushes; a loop device: the time
/// it had requests in flight).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct DevCount {
    blocks: u64,
    requests: u64,
    sync: u64,
    busy_ns: u64,
}

impl std::ops::Add for DevCount {
    type Output = DevCount;
    fn add(self, o: DevCount) -> DevCount {
        DevCount {
            blocks: self.blocks + o.blocks,
            requests: self.requests + o.requests,
            sync: self.sync + o.sync,
            busy_ns: self.busy_ns + o.busy_ns,
        }
    }
}

impl std::ops::Sub for DevCount {
    type Output = DevCount;
    fn sub(self, o: DevCount) -> DevCount {
        DevCount {
            blocks: self.blocks.saturating_sub(o.blocks),
            requests: self.requests.saturating_sub(o.requests),
            sync: self.sync.saturating_sub(o.sync),
            busy_ns: self.busy_ns.saturating_sub(o.busy_ns),
        }
    }
}

/// An attached loop device, detached when dropped.
struct Loop(String);

impl Loop {
    fn attach(img: &Path) -> Result<Loop, BenchError> {
        let dev = cmd("losetup", Command::new("losetup").args(["-f", "--show"]).arg(img))?;
        Ok(Loop(dev.trim().to_string()))
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

/// A mounted peer on a fresh image.
struct Mounted {
    peer: String,
    dir: PathBuf,
    img: PathBuf,
    stats: PathBuf,
    fuse: Option<FuseMount>,
    kernel: bool,
    lp: Option<(Loop, DevCount)>,
    /// sufs's writes of earlier mounts of this image (blocks, requests, sync blocks), and the
    /// FUSE messages they served.
    earlier: DevCount,
    earlier_messages: u64,
    earlier_lock_ns: u64,
    /// The CPU seconds of the FUSE servers of this image's mounts so far (`FuseMount::unmount`).
    server_cpu: f64,
    /// The options of `sufs mount` or `sufs bench floor-serve` (empty for the other peers).
    options: Vec<String>,
    /// The control channel that answers the FUSE requests served so far (sufs's and the
    /// floor's; None for the others).
    ctl: Option<PathBuf>,
    /// This program, for `sufs fsck`.
    exe: PathBuf,
}

/// A new image file of `size` bytes, every byte written (zeros) and on disk
/// (`PeersOptions::written_images`).
fn write_whole(img: &Path, size: u64) -> Result<(), BenchError> {
    use std::io::Write;
    let mut file = std::fs::File::create(img).map_err(|e| run_err("image", e))?;
    let zeros = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        file.write_all(&zeros[..n]).map_err(|e| run_err("image", e))?;
        left -= n as u64;
    }
    file.sync_all().map_err(|e| run_err("image", e))
}

/// A fresh image of `peer` mounted; with `tree`, the tree is on it (copied in through the mount,
/// or made into fuse-ufs's image by makefs), every cache is cold (`remount`) and the writes and
/// messages of putting it there are not counted.
fn fresh(peer: &str, o: &PeersOptions, tree: Option<&Path>) -> Result<Mounted, BenchError> {
    let img = o.dir.join(format!("peers-{peer}.img"));
    let dir = o.dir.join(format!("peers-{peer}.mnt"));
    let stats = o.dir.join(format!("peers-{peer}.json"));
    let _ = std::fs::remove_file(&img);
    std::fs::create_dir_all(&dir).map_err(|e| run_err("mount point", e))?;
    let mut m = Mounted {
        peer: peer.to_string(),
        dir,
        img: img.clone(),
        stats,
        fuse: None,
        kernel: false,
        lp: None,
        earlier: DevCount::default(),
        earlier_messages: 0,
        earlier_lock_ns: 0,
        server_cpu: 0.0,
        options: Vec::new(),
        ctl: None,
        exe: o.exe.clone(),
    };
    if floor_peer(peer).is_some() {
        // Nothing to make: the floor starts empty at each mount.
    } else if sufs_peer(peer).is_some() {
        let size = o.image_size.to_string();
        if o.written_images {
            write_whole(&img, o.image_size)?;
        }
        cmd("sufs mkfs", Command::new(&o.exe).arg("mkfs").arg(&img).args(["--size", &size]))?;
    } else if peer == "fuse-ufs" {
        let tree = tree.ok_or_else(|| run_err("fuse-ufs", "runs only on a tree made by makefs"))?;
        let size = format!("{}", o.image_size);
        cmd("makefs", Command::new("makefs").args(["-t", "ffs", "-o", MAKEFS_UFS2, "-s", &size]).arg(&img).arg(tree))?;
        let lp = Loop::attach(&img)?;
        let before = loop_writes(&lp.0)?;
        m.lp = Some((lp, before));
    } else {
        if o.written_images {
            write_whole(&img, o.image_size)?;
        } else {
            let file = std::fs::File::create(&img).map_err(|e| run_err("image", e))?;
            file.set_len(o.image_size).map_err(|e| run_err("image", e))?;
        }
        // Inode tables and journal written now, not by ext4lazyinit while the workload runs.
        cmd(
            "mkfs.ext4",
            Command::new("mkfs.ext4").args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"]).arg(&img),
        )?;
        let lp = Loop::attach(&img)?;
        let before = loop_writes(&lp.0)?;
        m.lp = Some((lp, before));
    }
    m.mount(o)?;
    if let Some(tree) = tree {
        if peer != "fuse-ufs" {
            copy_tree(tree, &m.dir, &mut Vec::new(), usize::MAX).map_err(io)?;
        }
        m.remount(o)?;
        m.forget_writes()?;
    }
    settle_host();
    Ok(m)
}

/// Writes every dirty page of the host before a peer's workload starts: an earlier peer's image
/// (a loop device's backing file, or sufs's image written at its unmount) and this one's mkfs.
/// Otherwise the kernel's flusher writes them back, 30 s after they were dirtied, in the middle
/// of a later peer's timed phases, and as the peers take turns in a fixed cycle, the same peer
/// pays for the same other's writes round after round.
fn settle_host() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
}

impl Mounted {
    /// Mounts the image (made by `fresh`) on `dir`.
    fn mount(&mut self, o: &PeersOptions) -> Result<(), BenchError> {
        if let Some(SufsPeer { ordering, policy, transport, writeback, .. }) = sufs_peer(&self.peer) {
            self.options = vec!["--ordering".into(), ordering.to_string()];
            if let Some(p) = policy {
                self.options.extend(["--update".into(), p.into()]);
            }
            if let Some(t) = transport {
                self.options.extend(["--transport".into(), t.into()]);
            }
            if writeback {
                self.options.extend(["-o".into(), "writeback_cache".into()]);
            }
            if let Some(bytes) = o.sufs_cache {
                self.options.extend(["--cache".into(), bytes.to_string()]);
            }
            let umount = vec![o.exe.as_os_str().to_owned(), "umount".into()];
            let f = FuseMount::spawn(&self.dir, umount, |d| {
                let mut c = Command::new(&o.exe);
                c.arg("mount").arg(&self.img).arg(d).arg("-f").args(&self.options).arg("--stats").arg(&self.stats);
                c
            })?;
            self.dir = f.dir.clone();
            self.fuse = Some(f);
            let mut ctl = self.img.clone().into_os_string();
            ctl.push(".ctl");
            self.ctl = Some(ctl.into());
            return Ok(());
        }
        if let Some(transport) = floor_peer(&self.peer) {
            self.options = transport.map(|t| vec!["--transport".into(), t.into()]).unwrap_or_default();
            let ctl = self.stats.with_extension("ctl");
            let umount = vec![o.exe.as_os_str().to_owned(), "umount".into()];
            let f = FuseMount::spawn(&self.dir, umount, |d| {
                let mut c = Command::new(&o.exe);
                c.args(["bench", "floor-serve"]).arg(d).args(&self.options).arg("--stats").arg(&self.stats);
                c.arg("--ctl").arg(&ctl);
                c
            })?;
            self.dir = f.dir.clone();
            self.fuse = Some(f);
            self.ctl = Some(ctl);
            return Ok(());
        }
        let dev = self.lp.as_ref().map(|(lp, _)| lp.0.clone()).ok_or_else(|| run_err("loop device", "missing"))?;
        if self.peer == "fuse2fs" || self.peer == "fuse-ufs" {
            // fuse-ufs mounts read-only unless told `-o rw`.
            let f = FuseMount::spawn(&self.dir, vec!["umount".into()], |d| {
                let mut c = Command::new(&self.peer);
                c.arg(&dev).arg(d).arg("-f");
                c.stderr(std::process::Stdio::null());
                c
            })?;
            self.dir = f.dir.clone();
            self.fuse = Some(f);
        } else {
            cmd("mount", Command::new("mount").args(["-t", "ext4"]).arg(&dev).arg(&self.dir))?;
            self.kernel = true;
        }
        Ok(())
    }

    /// Unmounts, waiting until everything is written.
    fn unmount(&mut self) -> Result<(), BenchError> {
        if let Some(f) = self.fuse.take() {
            self.server_cpu += f.unmount()?;
        }
        if self.kernel {
            cmd("umount", Command::new("umount").arg(&self.dir))?;
            self.kernel = false;
        }
        Ok(())
    }

    /// Makes every cache cold: unmounts (which writes everything and empties sufs's buffer
    /// cache and the kernel's caches of this mount), drops the kernel's page cache where
    /// allowed (root: the pages of sufs's image file and of the loop devices' backing files),
    /// and mounts again. Returns whether the page cache was dropped.
    fn remount(&mut self, o: &PeersOptions) -> Result<bool, BenchError> {
        self.unmount()?;
        if self.lp.is_none() {
            self.earlier = self.earlier + self.sufs_writes()?;
            let (messages, lock_ns) = self.sufs_messages()?;
            self.earlier_messages += messages;
            self.earlier_lock_ns += lock_ns;
        }
        let dropped = drop_page_cache();
        self.mount(o)?;
        Ok(dropped)
    }

    /// Counts the writes and messages from now on (after the tree of the read workload is put
    /// on the file system).
    fn forget_writes(&mut self) -> Result<(), BenchError> {
        self.earlier = DevCount::default();
        self.earlier_messages = 0;
        self.earlier_lock_ns = 0;
        self.server_cpu = 0.0;
        if let Some((lp, before)) = &mut self.lp {
            *before = loop_writes(&lp.0)?;
        }
        Ok(())
    }

    /// sufs's writes from the statistics of its last unmount.
    fn sufs_writes(&self) -> Result<DevCount, BenchError> {
        let st: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&self.stats).map_err(|e| run_err("mount statistics", e))?)
                .map_err(|e| run_err("mount statistics", e))?;
        let count = |k: &str| st["device"][k].as_u64().unwrap_or(0);
        Ok(DevCount {
            blocks: count("sync_writes") + count("async_writes"),
            requests: count("write_requests"),
            sync: count("sync_writes"),
            busy_ns: count("busy_ns"),
        })
    }

    /// The FUSE messages sufs's (or the floor's) last mount served, from the statistics of its
    /// unmount: every opcode's count, the forgets as messages (not nodes or lookups); and the
    /// nanoseconds its file system's lock was held (0 for the floor, which has none).
    fn sufs_messages(&self) -> Result<(u64, u64), BenchError> {
        let st: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&self.stats).map_err(|e| run_err("mount statistics", e))?)
                .map_err(|e| run_err("mount statistics", e))?;
        let counts = st["fuse_messages"].as_object().ok_or_else(|| run_err("mount statistics", "no fuse_messages"))?;
        let messages = counts.iter().filter(|(k, _)| !k.starts_with("forget_")).filter_map(|(_, v)| v.as_u64()).sum();
        Ok((messages, st["lock"]["held_ns"].as_u64().unwrap_or(0)))
    }

    /// Unmounts (timed, as the "unmount" phase) and counts the device writes.
    fn finish(mut self, phases: &mut Vec<Phase>) -> Result<Writes, BenchError> {
        let t = Instant::now();
        let fuse = self.fuse.is_some();
        self.unmount()?;
        phases.push(Phase::new("unmount", 0, t.elapsed().as_secs_f64()));
        let server_cpu_secs = fuse.then_some(self.server_cpu);
        if let Some((lp, before)) = &self.lp {
            let d = loop_writes(&lp.0)? - *before;
            return Ok(Writes {
                blocks: d.blocks,
                requests: Some(d.requests),
                source: format!("{} /sys/block stat", lp.0),
                messages: None,
                lock_held_ns: None,
                device_busy_secs: Some(d.busy_ns as f64 / 1e9),
                server_cpu_secs,
            });
        }
        if floor_peer(&self.peer).is_some() {
            return Ok(Writes {
                blocks: 0,
                requests: Some(0),
                source: "none: the floor keeps everything in memory".into(),
                messages: Some(self.sufs_messages()?.0),
                lock_held_ns: None,
                device_busy_secs: None,
                server_cpu_secs,
            });
        }
        let d = self.earlier + self.sufs_writes()?;
        let (messages, lock_ns) = self.sufs_messages()?;
        let (messages, lock_ns) = (self.earlier_messages + messages, self.earlier_lock_ns + lock_ns);
        // What the workload left must be a clean file system, or its figures count for nothing.
        let out = Command::new(&self.exe).arg("fsck").arg(&self.img).output().map_err(|e| run_err("sufs fsck", e))?;
        if !out.status.success() {
            return Err(BenchError::Run(format!(
                "sufs fsck after the run: {}{}",
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(Writes {
            blocks: d.blocks,
            requests: Some(d.requests),
            source: format!("sufs --stats ({} sync)", d.sync),
            messages: Some(messages),
            lock_held_ns: Some(lock_ns),
            device_busy_secs: Some(d.busy_ns as f64 / 1e9),
            server_cpu_secs,
        })
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        drop(self.fuse.take());
        if self.kernel {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        drop(self.lp.take());
        let _ = std::fs::remove_file(&self.img);
        let _ = std::fs::remove_file(&self.stats);
        let _ = std::fs::remove_dir(&self.dir);
        let _ = &self.peer;
    }
}

fn io(e: std::io::Error) -> BenchError {
    run_err("file call on the mount", e)
}

/// A failed file call on `path`.
fn at(path: &Path, e: std::io::Error) -> BenchError {
    run_err(&format!("{} on the mount", path.display()), e)
}

fn timed<T>(
    phases: &mut Vec<Phase>,
    name: &str,
    f: impl FnOnce() -> Result<(T, u64), BenchError>,
) -> Result<T, BenchError> {
    let t = Instant::now();
    let (v, ops) = f()?;
    phases.push(Phase::new(name, ops, t.elapsed().as_secs_f64()));
    Ok(v)
}

/// Forgets the kernel's dentries and inodes (root only), so that the next lookups reach the file
/// system rather than the kernel's caches. Returns whether it did.
fn drop_dentries() -> bool {
    is_root() && std::fs::write("/proc/sys/vm/drop_caches", "2").is_ok()
}

/// Writes every dirty page and drops the kernel's page cache, dentries and inodes (root only).
/// Returns whether it did.
fn drop_page_cache() -> bool {
    settle_host();
    is_root() && std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// Whether this process may drop the kernel's page cache (`coldread` and `parallel`'s reads are
/// cold only then: otherwise they may find sufs's image file in it).
pub fn drops_page_cache() -> bool {
    is_root()
}

/// `files` empty files in directories of `per_dir`: create, stat (after dropping the kernel's
/// dentries and inodes, where allowed), remove.
fn files(root: &Path, o: &PeersOptions, phases: &mut Vec<Phase>, on: &mut dyn FnMut(&str)) -> Result<(), BenchError> {
    let n = o.files;
    let per = o.per_dir.max(1);
    let path = |i: usize| root.join(format!("d{}", i / per)).join(format!("f{i}"));
    on("create");
    timed(phases, "create", || {
        for i in 0..n {
            if i % per == 0 {
                std::fs::create_dir(root.join(format!("d{}", i / per))).map_err(io)?;
            }
            std::fs::File::create(path(i)).map_err(io)?;
        }
        Ok(((), n as u64))
    })?;
    on("stat");
    drop_dentries();
    timed(phases, "stat", || {
        for i in 0..n {
            std::fs::symlink_metadata(path(i)).map_err(io)?;
        }
        Ok(((), n as u64))
    })?;
    on("remove");
    timed(phases, "remove", || {
        for i in 0..n {
            std::fs::remove_file(path(i)).map_err(io)?;
        }
        for d in 0..n.div_ceil(per) {
            std::fs::remove_dir(root.join(format!("d{d}"))).map_err(io)?;
        }
        Ok(((), n as u64))
    })
}

/// The real trees copied in (at most `tree_files` files in all), then removed.
fn copy(root: &Path, o: &PeersOptions, phases: &mut Vec<Phase>, on: &mut dyn FnMut(&str)) -> Result<(), BenchError> {
    on("copy");
    let n = timed(phases, "copy", || {
        let n = copy_trees(&o.trees, root, o.tree_files).map_err(io)?;
        Ok((n, n as u64))
    })?;
    on("remove");
    timed(phases, "remove", || {
        for k in 0..o.trees.len() {
            std::fs::remove_dir_all(root.join(format!("t{k}"))).map_err(io)?;
        }
        Ok(((), n as u64))
    })
}

/// A tree already on the file system (`fresh`), with every cache cold: every directory listed,
/// from the root down; every name stat'ed (after dropping the kernel's dentries and inodes,
/// where allowed, so that the file system answers); every regular file read whole. The
/// operations are names listed, names stat'ed and files read.
fn read(root: &Path, _o: &PeersOptions, phases: &mut Vec<Phase>, on: &mut dyn FnMut(&str)) -> Result<(), BenchError> {
    on("list");
    let (names, files) = timed(phases, "list", || {
        let (mut names, mut files, mut dirs) = (Vec::new(), Vec::new(), vec![root.join(READ_TREE)]);
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).map_err(|e| at(&d, e))? {
                let e = e.map_err(|e| at(&d, e))?;
                let ft = e.file_type().map_err(|x| at(&e.path(), x))?;
                if ft.is_dir() {
                    dirs.push(e.path());
                } else if ft.is_file() {
                    files.push(e.path());
                }
                names.push(e.path());
            }
        }
        let n = names.len() as u64;
        Ok(((names, files), n))
    })?;
    on("stat");
    drop_dentries();
    timed(phases, "stat", || {
        for p in &names {
            std::fs::symlink_metadata(p).map_err(|e| at(p, e))?;
        }
        Ok(((), names.len() as u64))
    })?;
    on("read");
    timed(phases, "read", || {
        for f in &files {
            std::fs::read(f).map_err(|e| at(f, e))?;
        }
        Ok(((), files.len() as u64))
    })
}

/// The soft updates paper's mail server: deliverers, each writing `mail_messages` messages of
/// 16 KiB into its own mailbox (a temporary file, fsync, then a rename into place), one
/// deliverer alone and then four at once. Four at once is where fsyncs meet: each waits for its
/// own writes, and on a file system that holds one lock across its I/O, for the others' too.
fn mail(root: &Path, o: &PeersOptions, phases: &mut Vec<Phase>, on: &mut dyn FnMut(&str)) -> Result<(), BenchError> {
    for (name, deliverers) in [("mail x1", 1usize), ("mail x4", 4)] {
        on(name);
        let n = o.mail_messages;
        timed(phases, name, || {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..deliverers)
                    .map(|k| {
                        let dir = root.join(format!("{}-box{k}", name.replace(' ', "")));
                        s.spawn(move || deliver(dir, n))
                    })
                    .collect();
                handles.into_iter().try_for_each(|h| h.join().expect("deliverer").map_err(io))
            })?;
            Ok(((), (deliverers * n) as u64))
        })?;
    }
    Ok(())
}

/// Mogul's burst, as a user meets it: `stall_mb` MiB written without fsync, then a 100-byte
/// file made every 10 ms for `stall_secs` seconds while the file system writes the burst out.
/// The creates' median, 99th percentile and worst latency are phases of their own (no
/// operations: their time is the latency).
fn stall(root: &Path, o: &PeersOptions, phases: &mut Vec<Phase>, on: &mut dyn FnMut(&str)) -> Result<(), BenchError> {
    use std::io::Write;
    on("write");
    let chunk = vec![b's'; 1 << 20];
    timed(phases, &format!("write {} MiB", o.stall_mb), || {
        let mut f = std::fs::File::create(root.join("burst")).map_err(io)?;
        for _ in 0..o.stall_mb {
            f.write_all(&chunk).map_err(io)?;
        }
        Ok(((), o.stall_mb))
    })?;
    on("probe");
    let (mut lat, start) = (Vec::new(), Instant::now());
    while start.elapsed().as_secs_f64() < o.stall_secs {
        let t = Instant::now();
        std::fs::write(root.join(format!("probe-{}", lat.len())), [b'p'; 100]).map_err(io)?;
        lat.push(t.elapsed().as_secs_f64());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    phases.push(Phase::new("probe creates", lat.len() as u64, start.elapsed().as_secs_f64()));
    lat.sort_by(f64::total_cmp);
    for (name, q) in [("create: median", 0.5), ("create: p99", 0.99), ("create: worst", 1.0)] {
        phases.push(Phase::latency(name, quantile(&lat, q)));
    }
    Ok(())
}

/// The `q` quantile (0 to 1) of sorted values (latencies, ratios): the one at `q` of the way
/// from the first to the last (the median of an even count the lower); 0 if there are none.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted.get((sorted.len().saturating_sub(1) as f64 * q) as usize).copied().unwrap_or(0.0)
}

/// One deliverer: `n` messages of 16 KiB into `box_dir`, each a temporary file, fsync'ed, then
/// renamed into place.
fn deliver(box_dir: PathBuf, n: usize) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(&box_dir)?;
    let body = vec![b'm'; 16 << 10];
    for i in 0..n {
        let tmp = box_dir.join(format!("tmp.{i}"));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&body)?;
        f.sync_all()?;
        std::fs::rename(&tmp, box_dir.join(format!("msg.{i}")))?;
    }
    Ok(())
}

/// The Andrew-like phases of `bench orderings` over `andrew_tree`.
fn andrew(root: &Path, o: &PeersOptions, phases: &mut Vec<Phase>, on: &mut dyn FnMut(&str)) -> Result<(), BenchError> {
    let mut ph = Vec::new();
    let n = andrew_phases(root, &o.andrew_tree, o.andrew_files, &mut ph, on).map_err(io)?;
    phases.extend(ph.into_iter().map(|(name, secs)| Phase::new(name, n as u64, secs)));
    Ok(())
}

/// A PostMark-like mail-server load (Katcher 1997), seeded: a pool of `postmark_files` files
/// of `postmark_min..=postmark_max` bytes in `postmark_dirs` directories; then
/// `postmark_tx` transactions, each a read of a whole file or an append to one (even odds),
/// then a create or a delete (even odds); then every file deleted.
fn postmark(
    root: &Path,
    o: &PeersOptions,
    phases: &mut Vec<Phase>,
    on: &mut dyn FnMut(&str),
) -> Result<(), BenchError> {
    use std::io::Write;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(o.seed);
    let data: Vec<u8> = (0..o.postmark_max.max(4096)).map(|i| (i * 7 + 13) as u8).collect();
    let dirs = o.postmark_dirs.max(1);
    let (lo, hi) = (o.postmark_min.min(o.postmark_max), o.postmark_max);
    let mut live: Vec<PathBuf> = Vec::new();
    let mut next = 0usize;
    let mut create = |rng: &mut rand::rngs::SmallRng, live: &mut Vec<PathBuf>| -> Result<(), BenchError> {
        let p = root.join(format!("s{}", next % dirs)).join(format!("m{next}"));
        next += 1;
        std::fs::write(&p, &data[..rng.gen_range(lo..=hi)]).map_err(io)?;
        live.push(p);
        Ok(())
    };
    on("pool");
    timed(phases, "create pool", || {
        for d in 0..dirs {
            std::fs::create_dir(root.join(format!("s{d}"))).map_err(io)?;
        }
        for _ in 0..o.postmark_files {
            create(&mut rng, &mut live)?;
        }
        Ok(((), o.postmark_files as u64))
    })?;
    on("transactions");
    timed(phases, "transactions", || {
        for _ in 0..o.postmark_tx {
            if !live.is_empty() {
                let f = &live[rng.gen_range(0..live.len())];
                if rng.gen_bool(0.5) {
                    std::fs::read(f).map_err(io)?;
                } else {
                    let n = rng.gen_range(lo..=hi).min(4096);
                    std::fs::OpenOptions::new()
                        .append(true)
                        .open(f)
                        .and_then(|mut h| h.write_all(&data[..n]))
                        .map_err(io)?;
                }
            }
            if live.is_empty() || rng.gen_bool(0.5) {
                create(&mut rng, &mut live)?;
            } else {
                let f = live.swap_remove(rng.gen_range(0..live.len()));
                std::fs::remove_file(f).map_err(io)?;
            }
        }
        Ok(((), 2 * o.postmark_tx as u64))
    })?;
    on("delete");
    timed(phases, "delete pool", || {
        let n = live.len() as u64;
        for f in live.drain(..) {
            std::fs::remove_file(f).map_err(io)?;
        }
        for d in 0..dirs {
            std::fs::remove_dir(root.join(format!("s{d}"))).map_err(io)?;
        }
        Ok(((), n))
    })
}

/// fio on one file of `fio_size`: sequential write (ending in fsync), sequential read, random
/// write (ending in fsync), random read, 4 KiB each with psync; all but the first stopped after
/// `fio_runtime` s, so compare their operations per second.
fn fio(root: &Path, o: &PeersOptions, phases: &mut Vec<Phase>, on: &mut dyn FnMut(&str)) -> Result<(), BenchError> {
    let file = root.join("fio.dat");
    let size = o.fio_size;
    for (name, rw) in
        [("seq write", "write"), ("seq read", "read"), ("rand write", "randwrite"), ("rand read", "randread")]
    {
        on(name);
        let t = Instant::now();
        let mut c = Command::new("fio");
        c.args(["--name=sufs", "--bs=4k", "--ioengine=psync", "--output-format=json"])
            .arg(format!("--rw={rw}"))
            .arg(format!("--size={size}"))
            .arg(format!("--filename={}", file.display()));
        // The sequential write makes the file, whole, so that every file system reads and
        // rewrites the same file; the other jobs stop after `fio_runtime`.
        if rw != "write" {
            c.arg(format!("--runtime={}", o.fio_runtime));
        }
        if rw.contains("write") {
            c.arg("--end_fsync=1");
        }
        let out = cmd("fio", &mut c)?;
        let secs = t.elapsed().as_secs_f64();
        let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| run_err("fio's JSON", e))?;
        let dir = if rw.contains("write") { "write" } else { "read" };
        let ops = v["jobs"][0][dir]["total_ios"].as_u64().unwrap_or(0);
        phases.push(Phase::new(name, ops, secs));
    }
    Ok(())
}

type Workload = fn(&Path, &PeersOptions, &mut Vec<Phase>, &mut dyn FnMut(&str)) -> Result<(), BenchError>;

/// Makes the mounted file system's caches cold (a remount, then the page cache dropped where
/// allowed); returns whether the page cache was dropped.
type Cold<'a> = dyn FnMut() -> Result<bool, BenchError> + 'a;

/// A workload that makes the caches cold between its phases.
type ColdWorkload =
    fn(&Path, &PeersOptions, &mut Vec<Phase>, &mut dyn FnMut(&str), &mut Cold) -> Result<(), BenchError>;

#[derive(Clone, Copy)]
enum Work {
    Warm(Workload),
    Cold(ColdWorkload),
}

fn workload(name: &str) -> Option<Work> {
    Some(Work::Warm(match name {
        "files" => files,
        "copy" => copy,
        "andrew" => andrew,
        "postmark" => postmark,
        "fio" => fio,
        "mail" => mail,
        "stall" => stall,
        "read" => read,
        "parallel" => return Some(Work::Cold(concurrent::parallel)),
        "coldread" => return Some(Work::Cold(concurrent::coldread)),
        _ => return None,
    }))
}

/// Copies at most `limit` files of `trees` into `dir`, tree k into `dir/tK`; returns how many.
fn copy_trees(trees: &[PathBuf], dir: &Path, limit: usize) -> std::io::Result<usize> {
    let mut files = Vec::new();
    for (k, t) in trees.iter().enumerate() {
        let to = dir.join(format!("t{k}"));
        std::fs::create_dir_all(&to)?;
        copy_tree(t, &to, &mut files, limit)?;
    }
    Ok(files.len())
}

/// Reads the trees once, so that the first file system copied to does not pay for cold reads.
fn warm(trees: &[PathBuf]) {
    let mut n = 0usize;
    for t in trees {
        let mut stack = vec![t.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                match e.file_type() {
                    Ok(ft) if ft.is_dir() => stack.push(e.path()),
                    Ok(ft) if ft.is_file() => n += std::fs::read(e.path()).map(|d| d.len()).unwrap_or(0),
                    _ => {}
                }
            }
        }
    }
    log::debug!("warmed {n} bytes of source trees");
}

/// Runs every workload on every peer that can run here, each from a fresh image. `progress` is
/// told (workload, peer, Some(phase)) as phases start and (workload, peer, None) when a run ends.
pub fn run(o: &PeersOptions, progress: &mut dyn FnMut(&str, &str, Option<&str>)) -> Result<PeersReport, BenchError> {
    let mut skipped = Vec::new();
    let mut peers = Vec::new();
    for p in &o.peers {
        match unavailable(p) {
            Some(why) => skipped.push((p.clone(), why)),
            None => peers.push(p.clone()),
        }
    }
    std::fs::create_dir_all(&o.dir).map_err(|e| run_err("work directory", e))?;
    let mut runs = Vec::new();
    // The read workload's tree: the source trees' first `tree_files` files, as `copy` takes
    // them, in one directory (`READ_TREE` of `staged`) that makefs makes an image of and the
    // others copy in.
    let staged = o.dir.join("peers-read-tree");
    let _ = std::fs::remove_dir_all(&staged);
    if o.workloads.iter().any(|w| w == "read") && !peers.is_empty() {
        copy_trees(&o.trees, &staged.join(READ_TREE), o.tree_files)
            .map_err(|e| run_err("the read workload's tree", e))?;
    }
    for w in &o.workloads {
        let Some(f) = workload(w) else {
            skipped.push((w.clone(), format!("unknown workload (one of {})", WORKLOADS.join(", "))));
            continue;
        };
        if w == "fio" && !which("fio") {
            skipped.push((w.clone(), "fio is not installed (apt-get install fio)".into()));
            continue;
        }
        match w.as_str() {
            "copy" => warm(&o.trees),
            "andrew" => warm(std::slice::from_ref(&o.andrew_tree)),
            _ => {}
        }
        let mut rounds: Vec<Vec<Run>> = vec![Vec::new(); peers.len()];
        let n = peers.len();
        for (round, k) in (0..o.rounds.max(1)).flat_map(|r| (0..n).map(move |i| (r, (r + i) % n))) {
            let p = &peers[k];
            if round > 0 && rounds[k].is_empty() {
                continue; // skipped or failed in the first round: said once
            }
            if p == "fuse-ufs" && !READ_ONLY_WORKLOADS.contains(&w.as_str()) {
                skipped.push((format!("{p} {w}"), "mounted read-only: it runs only the read workload".into()));
                continue;
            }
            if floor_peer(p).is_some() && REMOUNTING_WORKLOADS.contains(&w.as_str()) {
                skipped.push((format!("{p} {w}"), "kept in memory: the workload remounts, which would lose it".into()));
                continue;
            }
            let mut phases = Vec::new();
            let tree = (w == "read").then_some(staged.as_path());
            let r = fresh(p, o, tree).and_then(|mut m| {
                let root = m.dir.clone();
                match f {
                    Work::Warm(f) => {
                        // The requests served so far, as each phase starts and after the last.
                        let sample = || m.ctl.as_deref().and_then(messages::sample);
                        let mut samples = Vec::new();
                        f(&root, o, &mut phases, &mut |ph: &str| {
                            progress(w, p, Some(ph));
                            samples.push(sample());
                        })?;
                        samples.push(sample());
                        messages::per_phase(&mut phases, &samples);
                    }
                    Work::Cold(f) => {
                        let on = &mut |ph: &str| progress(w, p, Some(ph));
                        f(&root, o, &mut phases, on, &mut || m.remount(o))?
                    }
                }
                progress(w, p, Some("unmount"));
                let options = m.options.clone();
                Ok((m.finish(&mut phases)?, options))
            });
            match r {
                Ok((writes, mount_options)) => rounds[k].push(Run {
                    workload: w.clone(),
                    peer: p.clone(),
                    phases,
                    writes: Some(writes),
                    mount_options,
                    round_totals: Vec::new(),
                    round,
                }),
                Err(e) if round == 0 => skipped.push((format!("{p} {w}"), format!("failed, no figures: {e}"))),
                Err(e) => skipped.push((format!("{p} {w} round {}", round + 1), format!("failed, not counted: {e}"))),
            }
            progress(w, p, None);
        }
        runs.extend(rounds.into_iter().filter_map(median_run));
    }
    let _ = std::fs::remove_dir_all(&staged);
    Ok(PeersReport { options: o.clone(), runs, skipped })
}

/// One run standing for a peer's rounds of a workload: each phase's median time (of the
/// rounds that have it, by name; of an even count the lower), the rest (operations, writes,
/// requests, device time) from the round whose total time is the median; and every round's
/// total by its number.
fn median_run(mut rounds: Vec<Run>) -> Option<Run> {
    if rounds.len() <= 1 {
        return rounds.pop();
    }
    let totals: Vec<(usize, f64)> = rounds.iter().map(|r| (r.round, r.total_secs())).collect();
    assert!(totals.windows(2).all(|w| w[0].0 < w[1].0), "a peer's rounds in the order they ran, once each");
    let mut by_total: Vec<&Run> = rounds.iter().collect();
    by_total.sort_by(|a, b| a.total_secs().total_cmp(&b.total_secs()));
    let mut run = by_total[(by_total.len() - 1) / 2].clone();
    for ph in &mut run.phases {
        let mut t: Vec<f64> =
            rounds.iter().filter_map(|r| r.phases.iter().find(|q| q.name == ph.name)).map(|q| q.secs).collect();
        debug_assert!(!t.is_empty(), "the median round has the phase {}", ph.name);
        t.sort_by(f64::total_cmp);
        ph.secs = t[(t.len() - 1) / 2];
    }
    run.round_totals = totals;
    Some(run)
}

fn secs_cell(p: &Phase) -> String {
    if p.latency || (p.ops == 0 && p.secs < 0.1) {
        // A latency (the stall workload's creates) or a short unmount: in milliseconds.
        format!("{:.2} ms", p.secs * 1e3)
    } else if p.ops == 0 {
        format!("{:.2} s", p.secs)
    } else {
        format!("{:.2} s ({}/s)", p.secs, thousands(p.ops_per_sec().round() as u64))
    }
}

/// Whether `peer` is `base` with an update policy (`sufs-softdep-pu` of `sufs-softdep`).
fn variant_of(peer: &str, base: &str) -> bool {
    peer.strip_prefix(base).is_some_and(|s| s.starts_with('-'))
}

/// 1234567 as "1,234,567".
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl PeersReport {
    /// The peers that ran, in `PEERS`' order, each sufs ordering followed by its variants
    /// with an update policy, in the order they ran.
    fn peers(&self) -> Vec<&str> {
        let mut ps: Vec<&str> = Vec::new();
        for r in &self.runs {
            if !ps.contains(&r.peer.as_str()) {
                ps.push(&r.peer);
            }
        }
        ps.sort_by_key(|p| match PEERS.iter().position(|q| p == q) {
            Some(i) => (i, false),
            None => (PEERS.iter().position(|q| variant_of(p, q)).unwrap_or(PEERS.len()), true),
        });
        ps
    }

    fn run(&self, w: &str, p: &str) -> Option<&Run> {
        self.runs.iter().find(|r| r.workload == w && r.peer == p)
    }

    fn workloads(&self) -> Vec<&str> {
        let mut ws: Vec<&str> = Vec::new();
        for r in &self.runs {
            if !ws.contains(&r.workload.as_str()) {
                ws.push(&r.workload);
            }
        }
        ws
    }

    /// Markdown: seconds (and operations per second) per phase and peer, each workload's total
    /// and device writes; then softdep's time over each other peer's.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let peers = self.peers();
        let mut s = String::new();
        let _ = writeln!(s, "| workload | phase | ops | {} |", peers.join(" | "));
        let _ = writeln!(s, "| --- | --- | ---: |{}", " ---: |".repeat(peers.len()));
        for w in self.workloads() {
            let Some(first) = peers.iter().find_map(|p| self.run(w, p)) else { continue };
            for (i, ph) in first.phases.iter().enumerate() {
                let cells: Vec<String> = peers
                    .iter()
                    .map(|p| self.run(w, p).and_then(|r| r.phases.get(i)).map(secs_cell).unwrap_or("-".into()))
                    .collect();
                let ops: Vec<u64> = peers.iter().filter_map(|p| self.run(w, p)?.phases.get(i)).map(|q| q.ops).collect();
                let max = ops.iter().copied().max().unwrap_or(0);
                // Phases stopped by a time limit did different numbers of operations.
                let ops = if ph.latency {
                    String::new()
                } else if ops.iter().all(|&n| n == max) {
                    thousands(max)
                } else {
                    format!("≤ {}", thousands(max))
                };
                let _ = writeln!(s, "| {w} | {} | {ops} | {} |", ph.name, cells.join(" | "));
            }
            let total: Vec<String> = peers
                .iter()
                .map(|p| self.run(w, p).map(|r| format!("**{:.2} s**", r.total_secs())).unwrap_or("-".into()))
                .collect();
            let _ = writeln!(s, "| {w} | **total** | | {} |", total.join(" | "));
            let writes: Vec<String> = peers
                .iter()
                .map(|p| {
                    let wr = self.run(w, p).and_then(|r| r.writes.as_ref());
                    match wr {
                        Some(Writes { blocks, requests: Some(rq), .. }) => {
                            format!("{} ({} req)", thousands(*blocks), thousands(*rq))
                        }
                        Some(wr) => thousands(wr.blocks),
                        None => "-".into(),
                    }
                })
                .collect();
            let _ = writeln!(s, "| {w} | device writes (4 KiB) | | {} |", writes.join(" | "));
            // Rows only some peers fill (sufs's counters): shown when any does.
            let mut optional_row = |name: &str, cell: &dyn Fn(&Writes) -> Option<String>| {
                let cells: Vec<String> = peers
                    .iter()
                    .map(|p| self.run(w, p).and_then(|r| cell(r.writes.as_ref()?)).unwrap_or_else(|| "-".into()))
                    .collect();
                if cells.iter().any(|c| c != "-") {
                    let _ = writeln!(s, "| {w} | {name} | | {} |", cells.join(" | "));
                }
            };
            optional_row("FUSE messages", &|wr| wr.messages.map(thousands));
            optional_row("lock held a message (µs)", &|wr| match (wr.lock_held_ns, wr.messages) {
                (Some(ns), Some(m)) if m > 0 => Some(format!("{:.2}", ns as f64 / 1e3 / m as f64)),
                _ => None,
            });
            optional_row("device busy (s)", &|wr| wr.device_busy_secs.map(|b| format!("{b:.2}")));
            optional_row("server CPU (s)", &|wr| wr.server_cpu_secs.map(|c| format!("{c:.2}")));
        }
        s
    }

    /// The peer the ratios are of: sufs-softdep, or else the first softdep peer with an update
    /// policy.
    pub fn reference(&self) -> Option<&str> {
        let peers = self.peers();
        peers
            .iter()
            .copied()
            .find(|p| *p == "sufs-softdep")
            .or_else(|| peers.into_iter().find(|p| variant_of(p, "sufs-softdep")))
    }

    /// The reference's (softdep's) time per operation over fuse2fs's, kernel ext4's, async's
    /// and the other softdep peers', per phase (latencies: the latency over theirs), and its
    /// total time over theirs where they did the same work (below 1: the reference is faster).
    pub fn ratios(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let Some(me) = self.reference() else { return s };
        let peers = self.peers();
        let others: Vec<&str> = ["fuse2fs", "ext4-kernel", "fuse-ufs", "sufs-async"]
            .into_iter()
            .filter(|p| peers.contains(p))
            .chain(
                peers.iter().copied().filter(|p| *p != me && (*p == "sufs-softdep" || variant_of(p, "sufs-softdep"))),
            )
            .collect();
        if others.is_empty() {
            return s;
        }
        let short = me.trim_start_matches("sufs-");
        let _ = writeln!(
            s,
            "| workload | phase | {} |",
            others.iter().map(|p| format!("{short} / {p}")).collect::<Vec<_>>().join(" | ")
        );
        let _ = writeln!(s, "| --- | --- |{}", " ---: |".repeat(others.len()));
        for w in self.workloads() {
            let Some(d) = self.run(w, me) else { continue };
            let ratio = |mine: f64, theirs: Option<f64>| {
                theirs.map(|t| format!("{:.2}x", mine / t.max(1e-9))).unwrap_or_else(|| "-".into())
            };
            for (i, ph) in d.phases.iter().enumerate().filter(|(_, p)| p.name != "unmount") {
                // Time per operation: phases stopped by a time limit did different numbers.
                let per_op = |q: &Phase| q.secs / q.ops.max(1) as f64;
                let cells: Vec<String> = others
                    .iter()
                    .map(|p| ratio(per_op(ph), self.run(w, p).and_then(|r| r.phases.get(i)).map(per_op)))
                    .collect();
                let _ = writeln!(s, "| {w} | {} | {} |", ph.name, cells.join(" | "));
            }
            // Totals only where both did the same work.
            let same = |r: &Run| r.phases.iter().zip(&d.phases).all(|(a, b)| a.ops == b.ops);
            let cells: Vec<String> = others
                .iter()
                .map(|p| ratio(d.total_secs(), self.run(w, p).filter(|r| same(r)).map(|r| r.total_secs())))
                .collect();
            let _ = writeln!(s, "| {w} | **total** | {} |", cells.join(" | "));
        }
        s
    }

    /// One SVG per workload: operations per second of each phase, a bar per file system.
    pub fn plots(&self, dir: &Path) -> Result<Vec<PathBuf>, String> {
        use plotters::prelude::*;
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let colors = [RED, BLUE, GREEN, MAGENTA, BLACK];
        let peers = self.peers();
        let mut out = Vec::new();
        for w in self.workloads() {
            let runs: Vec<(usize, &Run)> =
                peers.iter().enumerate().filter_map(|(i, p)| self.run(w, p).map(|r| (i, r))).collect();
            let names: Vec<String> = runs[0].1.phases.iter().filter(|p| p.ops > 0).map(|p| p.name.clone()).collect();
            let rate = |r: &Run, n: &str| r.phases.iter().find(|p| p.name == n).map(|p| p.ops_per_sec());
            let ymax = runs.iter().flat_map(|(_, r)| names.iter().filter_map(|n| rate(r, n))).fold(10.0, f64::max);
            let path = dir.join(format!("peers-{w}.svg"));
            let root = SVGBackend::new(&path, (900, 500)).into_drawing_area();
            root.fill(&WHITE).map_err(|x| e(&x))?;
            let mut chart = ChartBuilder::on(&root)
                .caption(format!("{w}: operations per second (log scale)"), ("sans-serif", 20))
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d(0f64..names.len() as f64, (1f64..ymax * 3.0).log_scale())
                .map_err(|x| e(&x))?;
            let labels = names.clone();
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(names.len() * 2 + 1)
                .x_label_formatter(&move |x| {
                    let k = x.floor() as usize;
                    if (x - k as f64 - 0.5).abs() < 0.01 {
                        labels.get(k).cloned().unwrap_or_default()
                    } else {
                        String::new()
                    }
                })
                .y_desc("ops/s")
                .draw()
                .map_err(|x| e(&x))?;
            let width = 0.8 / runs.len() as f64;
            for (j, (i, r)) in runs.iter().enumerate() {
                let c = colors[*i % colors.len()];
                let bars: Vec<Rectangle<(f64, f64)>> = names
                    .iter()
                    .enumerate()
                    .filter_map(|(k, n)| {
                        let x = k as f64 + 0.1 + j as f64 * width;
                        rate(r, n).map(|v| Rectangle::new([(x, 1.0), (x + width * 0.9, v.max(1.0))], c.filled()))
                    })
                    .collect();
                chart
                    .draw_series(bars)
                    .map_err(|x| e(&x))?
                    .label(r.peer.clone())
                    .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], c.filled()));
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE)
                .border_style(BLACK)
                .draw()
                .map_err(|x| e(&x))?;
            root.present().map_err(|x| e(&x))?;
            drop(chart);
            drop(root);
            out.push(path);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An image written whole has every byte allocated in the host file system (no hole for a
    /// flush to allocate), and reads as zeros.
    #[test]
    fn a_written_image_has_no_holes() {
        use std::os::unix::fs::MetadataExt;
        let t = tempfile::tempdir().unwrap();
        let img = t.path().join("w.img");
        let size = (3 << 20) + 4096;
        write_whole(&img, size).unwrap();
        let m = std::fs::metadata(&img).unwrap();
        assert_eq!(m.len(), size);
        assert!(m.blocks() * 512 >= size, "{} bytes allocated of {size}", m.blocks() * 512);
        assert!(std::fs::read(&img).unwrap().iter().all(|&b| b == 0));
    }

    #[test]
    fn scaled_sizes_and_thousands() {
        let o = PeersOptions::default().scaled(0.01);
        assert_eq!(o.files, 1000);
        assert_eq!(o.postmark_tx, 500);
        assert_eq!(o.fio_size % 4096, 0);
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(12), "12");
        assert!(unavailable("zfs").is_some());
    }

    #[test]
    fn sufs_peer_names_take_a_policy_a_transport_and_the_writeback_cache_in_order() {
        let p = sufs_peer("sufs-softdep-pu-uring-wbc").unwrap();
        assert_eq!(
            (p.ordering, p.policy, p.transport, p.writeback),
            (Ordering::Softdep, Some("pu"), Some("uring"), true)
        );
        let p = sufs_peer("sufs-softdep-ufs2-pu").unwrap();
        assert_eq!((p.policy, p.transport), (Some("pu"), None));
        let p = sufs_peer("sufs-sync-classic").unwrap();
        assert_eq!((p.ordering, p.policy, p.transport, p.writeback), (Ordering::Sync, None, Some("classic"), false));
        assert!(sufs_peer("sufs-softdep").is_some_and(|p| p.policy.is_none() && p.transport.is_none()));
        for bad in [
            "sufs-softdep-uring-pu",
            "sufs-softdep-wbc-uring",
            "sufs-softdep-fast",
            "sufs-zfs",
            "sufs-softdep-uring-uring",
            "sufs-softdep-pu-ufs2",
            "sufs-softdep-ufs2-ufs2",
            "sufs-softdep-sufsfmt",
        ] {
            assert!(sufs_peer(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn rounds_report_each_phases_median() {
        let run = |secs: [f64; 2]| Run {
            workload: "files".into(),
            peer: "floor".into(),
            phases: vec![Phase::new("create", 10, secs[0]), Phase::new("unmount", 0, secs[1])],
            writes: Some(Writes {
                blocks: (secs[0] + secs[1]) as u64,
                requests: None,
                source: String::new(),
                messages: None,
                lock_held_ns: None,
                device_busy_secs: None,
                server_cpu_secs: None,
            }),
            mount_options: Vec::new(),
            round_totals: Vec::new(),
            round: secs[0] as usize,
        };
        assert!(median_run(Vec::new()).is_none());
        assert_eq!(median_run(vec![run([3.0, 1.0])]).unwrap().phases[0].secs, 3.0);
        let m = median_run(vec![run([1.0, 9.0]), run([2.0, 5.0]), run([3.0, 1.0])]).unwrap();
        assert_eq!(m.phases.iter().map(|p| (p.ops, p.secs)).collect::<Vec<_>>(), [(10, 2.0), (0, 5.0)]);
        // The writes are the round of the median total's (7.0 of 4.0, 7.0 and 10.0).
        assert_eq!(m.writes.unwrap().blocks, 7);
        // Each round's total by its number (here the create's seconds), for the floor's spread.
        assert_eq!(m.round_totals, [(1, 10.0), (2, 7.0), (3, 4.0)]);
        assert!(median_run(vec![run([3.0, 1.0])]).unwrap().round_totals.is_empty());
        // Of two, the lower: a round's noise only ever adds time.
        assert_eq!(median_run(vec![run([1.0, 9.0]), run([3.0, 1.0])]).unwrap().total_secs(), 2.0);
    }

    #[test]
    fn floor_peer_names_take_a_transport() {
        assert_eq!(floor_peer("floor"), Some(None));
        assert_eq!(floor_peer("floor-uring"), Some(Some("uring")));
        assert_eq!(transport_of("floor-classic"), Some(Some("classic")));
        assert_eq!(transport_of("sufs-softdep-uring"), Some(Some("uring")));
        for bad in ["floor-fast", "floors", "floor-", "ext4-kernel"] {
            assert!(floor_peer(bad).is_none(), "{bad}");
        }
        assert!(unavailable("floor-fast").is_some());
    }
}
