//! The `sufs` command: make, mount, check and inspect sufs images.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use sufs::clock::{Clock, RealClock};
use sufs::crashtest::{self, CrashOptions, End};
use sufs::ctl::{self, CtlClient, CtlServer};
use sufs::dev::{BlockDevice, FileDevice};
use sufs::format::Superblock;
use sufs::fs::mountopt::{parse_size, MountOpts};
use sufs::fs::{mkfs, Fs, MkfsOptions, MountOptions, Ordering};
use sufs::fuse::{self as fusemount, lock, SufsFuse, DEFAULT_THREADS};
use sufs::helper::{self, mount_point_of};
use sufs::syncer::{Syncer, SyncerOptions, UpdatePolicy};
use sufs::volume::{self, PoolOptions, PrefixDevice, Refiller, SnapshotDevice, StoreKind, VolumeDevice};
use sufs::{format, fsck, snapshot};

#[derive(Parser)]
#[command(name = "sufs", version, about = "A user-space FFS with soft updates, update policies and the Block Register")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// Parsed once per run: `bench`'s flattened peer options make it the largest variant, at no cost.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Make a file system on an image file (created sparse if missing) or a block device.
    Mkfs {
        image: PathBuf,
        /// Size of a new image, e.g. 1G, 512M (default: the existing file's or device's size).
        #[arg(long, value_parser = parse_size)]
        size: Option<u64>,
        #[arg(long, default_value_t = 4096)]
        block_size: u32,
        /// Number of inodes (default: one per 16 KiB).
        #[arg(long)]
        inodes: Option<u64>,
        /// Leave this much at the end of the device outside the file system, for a volume
        /// snapshot's `reserved` exception store.
        #[arg(long, value_parser = parse_size)]
        snapshot_reserve: Option<u64>,
    },
    /// Mount an image through FUSE. With no arguments: ./sufs.img (made, 1 GiB sparse, if missing)
    /// on ./mnt.
    Mount {
        #[arg(default_value = "sufs.img")]
        image: PathBuf,
        #[arg(default_value = "mnt")]
        dir: PathBuf,
        #[arg(long, value_enum, default_value_t = Ordering::Softdep)]
        ordering: Ordering,
        /// Stay in the foreground (otherwise sufs returns once the file system is mounted).
        #[arg(short, long)]
        foreground: bool,
        /// Write the device and cache counters as JSON here at unmount.
        #[arg(long)]
        stats: Option<PathBuf>,
        /// Buffer cache size, e.g. 128M.
        #[arg(long, value_parser = parse_size, default_value = "128M")]
        cache: u64,
        /// Size of the image made when it is missing.
        #[arg(long, value_parser = parse_size, default_value = "1G")]
        size: u64,
        /// Mount read-only.
        #[arg(long)]
        ro: bool,
        /// Update policy: when delayed writes go to disk (Mogul 1994).
        #[arg(long, value_enum, default_value_t = UpdatePolicy::Aipu)]
        update: UpdatePolicy,
        /// Seconds a buffer may stay dirty under aipu.
        #[arg(long, default_value_t = 30)]
        age: u64,
        /// Seconds between sweeps (default: 1 for aipu and wt, 30 for pu).
        #[arg(long)]
        interval: Option<u64>,
        /// Queue full data blocks for writing as soon as they fill, instead of delaying them.
        #[arg(long)]
        async_full_blocks: bool,
        /// Soft updates' memory bound: dependency structures kept before everything is flushed.
        #[arg(long, default_value_t = 200_000)]
        softdep_limit: usize,
        /// FUSE request threads (they take turns on the file system's one lock).
        #[arg(long, default_value_t = DEFAULT_THREADS as u16, value_parser = clap::value_parser!(u16).range(1..=64))]
        threads: u16,
        /// Mount read-write even an image that needs fsck first (not unmounted cleanly after a
        /// sync or async mount, or marked for fsck when damage was found).
        #[arg(long)]
        force: bool,
        /// Mount options, comma-separated, as mount(8) takes them (docs/mount-options.md): ro, rw,
        /// dev, nodev, suid, nosuid, exec, noexec, sync, dirsync, async, relatime, strictatime,
        /// noatime, nodiratime, remount (of the mount on DIR, or on IMAGE if that is a mount
        /// point), and sufs's own: ordering=, cache=, update=, threads=, wait=, mkfs_size=.
        /// They take precedence over the flags above.
        #[arg(short = 'o', value_name = "OPTS")]
        options: Vec<String>,
        /// Print nothing on success (the mount helper's way): messages go to the image's log.
        #[arg(short, long)]
        quiet: bool,
        /// Fail if the image is missing instead of making it.
        #[arg(long)]
        no_create: bool,
    },
    /// Make the mount helper, PREFIX/mount.fuse.sufs, a link to this program, so that
    /// `mount -t fuse.sufs IMAGE DIR` and fstab lines of type fuse.sufs mount sufs images.
    InstallHelper {
        #[arg(long, default_value = helper::DEFAULT_PREFIX)]
        prefix: PathBuf,
    },
    /// Unmount and wait until sufs has written everything and marked the image clean.
    Umount { dir: PathBuf },
    /// Check an unmounted image; -y repairs. Exit codes as fsck(8): 0 clean, 1 repaired (and
    /// nothing left), 4 damage left (or found by a check, or refused by -p), 8 operational error.
    Fsck {
        image: PathBuf,
        /// Repair everything found.
        #[arg(short = 'y', long)]
        yes: bool,
        /// Preen: repair only what soft updates may leave after a crash (leaks, link counts too
        /// high, unreferenced files, which are cleared); anything else changes nothing and takes
        /// -y. An image marked clean is not scanned.
        #[arg(short = 'p', long, conflicts_with = "yes")]
        preen: bool,
        /// With -p, scan even an image marked clean.
        #[arg(short = 'f', long)]
        force: bool,
        /// Use the superblock copy at block N (mkfs writes one at the first block of every
        /// cylinder group but the first); -y then rewrites the primary from it.
        #[arg(short = 'b', value_name = "N")]
        superblock: Option<u64>,
        /// Background check (soft updates §6.1) of a mounted file system (IMAGE may be its mount
        /// point) or an image: check a snapshot, then free the blocks and inodes it shows lost and
        /// lower the link counts too high, through the mount's control channel.
        #[arg(long, conflicts_with_all = ["yes", "preen"])]
        background: bool,
    },
    /// Print the superblock and the per-group counts.
    Dumpfs { image: PathBuf },
    /// Write every delayed write of a mount (or of every sufs mount) and return once it is on
    /// disk. sync(1) does not reach a FUSE file system; this does.
    Sync {
        /// The mount point or its image (default: every sufs mount this process can see).
        on: Option<PathBuf>,
    },
    /// The Block Register: reservations of free blocks for other components, on an unmounted
    /// image or (through its control channel, IMAGE.ctl) a mounted file system.
    Volume {
        #[command(subcommand)]
        op: VolumeCmd,
    },
    Br {
        /// An image file (mounted or not) or the directory it is mounted on.
        #[arg(long, global = true, default_value = "sufs.img")]
        on: PathBuf,
        #[command(subcommand)]
        op: BrCmd,
    },
    /// File-system snapshots (soft updates §6), `/.snap/NAME`: on an unmounted image or, through
    /// its control channel, a mounted file system.
    Snapshot {
        /// An image file (mounted or not) or the directory it is mounted on.
        #[arg(long, global = true, default_value = "sufs.img")]
        on: PathBuf,
        #[command(subcommand)]
        op: FsSnapCmd,
    },
    /// Benchmarks. With no subcommand, `peers`: sufs against fuse2fs and kernel ext4 through
    /// their mounts. The others reproduce the papers' figures.
    #[command(args_conflicts_with_subcommands = true)]
    Bench {
        #[command(subcommand)]
        which: Option<BenchCmd>,
        #[command(flatten)]
        peers: PeersArgs,
    },
    /// Run a workload in-process over a recording device and judge every crash state it could
    /// leave with fsck and the workload's promises. Exit codes: 0 no violation, 1 violations,
    /// 2 usage or operational error.
    Crashtest {
        #[arg(long, value_enum)]
        ordering: Ordering,
        /// A workload, or `all`.
        #[arg(long, default_value = "all", value_parser = workload_names())]
        workload: String,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Random subsets tried of each in-flight batch of more than 8 writes.
        #[arg(long, default_value_t = 8)]
        subsets: usize,
        /// Operations in each workload.
        #[arg(long, default_value_t = 80)]
        ops: usize,
        /// Buffer cache of the recorded mount, in blocks.
        #[arg(long, default_value_t = 64)]
        cache_blocks: usize,
        /// End with unmount, or stop without it (auto: unmount for odd seeds).
        #[arg(long, value_enum, default_value_t = End::Auto)]
        end: End,
        /// Run this update policy's sweeps during the workload (times scaled down).
        #[arg(long, value_enum)]
        update: Option<UpdatePolicy>,
    },
}

#[derive(Subcommand)]
enum VolumeCmd {
    /// The volume snapshot: a copy-on-write snapshot of the whole volume under the file system.
    Snapshot {
        #[command(subcommand)]
        op: SnapCmd,
    },
}

#[derive(Subcommand)]
enum SnapCmd {
    /// Take a snapshot of an unmounted volume. `--store reserved` keeps the old blocks in the area
    /// after the file system (mkfs --snapshot-reserve); `--store br` in a Block Register
    /// reservation of the file system itself.
    Create {
        image: PathBuf,
        #[arg(long, value_enum)]
        store: StoreKind,
        /// Blocks the br store reserves at first.
        #[arg(long, default_value_t = 4096)]
        initial: u64,
    },
    /// The snapshot's store, its size and whether it is valid.
    Status { image: PathBuf },
    /// Write the volume as it was at snapshot time to a new image OUT.
    Export { image: PathBuf, out: PathBuf },
    /// Mount the snapshot read-only through FUSE.
    Mount {
        image: PathBuf,
        dir: PathBuf,
        #[arg(short, long)]
        foreground: bool,
    },
    /// Delete the snapshot (and a br store's reservation).
    Delete { image: PathBuf },
}

#[derive(Subcommand)]
enum FsSnapCmd {
    /// Take a snapshot NAME (writers wait meanwhile).
    Create { name: String },
    /// The snapshots, oldest first.
    List,
    /// Delete a snapshot; its blocks go to the other snapshots that need them, or are freed.
    Delete { name: String },
    /// Write the file system as it was when NAME was taken to a new image OUT.
    Export { name: String, out: PathBuf },
    /// Mount the frozen file system of NAME read-only on DIR.
    Mount {
        name: String,
        dir: PathBuf,
        #[arg(short, long)]
        foreground: bool,
    },
}

#[derive(Subcommand)]
enum BrCmd {
    /// Reserve NBLOCKS blocks under NAME (the file /.br/NAME).
    Reserve {
        name: String,
        nblocks: u64,
        /// Place the blocks near this physical block.
        #[arg(long)]
        hint: Option<u64>,
    },
    /// The physical runs of logical blocks OFFSET..OFFSET+COUNT: "offset start length" lines.
    Query { name: String, offset: u64, count: u64 },
    /// Add NBLOCKS blocks at the end of the reservation.
    Expand {
        name: String,
        nblocks: u64,
        #[arg(long)]
        hint: Option<u64>,
    },
    /// Return physical block PHYSBLOCK to the file system.
    Truncate { name: String, physblock: u64 },
    /// Remove the reservation; its blocks return to the file system.
    Free { name: String },
    /// Every reservation.
    List,
}

/// `sufs bench peers`: sizes default to issue 8's; `--scale` shrinks them all for a quick run.
#[derive(Args, Clone)]
struct PeersArgs {
    /// File systems, comma-separated (default: all of them).
    #[arg(long, value_delimiter = ',', default_value = "sufs-softdep,sufs-sync,sufs-async,fuse2fs,ext4-kernel")]
    peers: Vec<String>,
    /// Workloads, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "files,copy,andrew,postmark,fio")]
    workloads: Vec<String>,
    /// Multiply every count and size below (but the image's) by this.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Empty files created, stat'ed and removed (1,000 to a directory).
    #[arg(long, default_value_t = 100_000)]
    files: usize,
    /// Trees copied in and removed.
    #[arg(long, value_delimiter = ',', default_value = "/usr/include,/usr/share/doc")]
    trees: Vec<PathBuf>,
    /// At most this many files of the trees.
    #[arg(long, default_value_t = 100_000)]
    tree_files: usize,
    /// Source tree of the Andrew-like phases, and at most this many of its files.
    #[arg(long, default_value = "/usr/include")]
    andrew_tree: PathBuf,
    #[arg(long, default_value_t = 4000)]
    andrew_files: usize,
    /// PostMark: files in the initial pool, and transactions.
    #[arg(long, default_value_t = 20_000)]
    postmark_files: usize,
    #[arg(long, default_value_t = 50_000)]
    postmark_tx: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// fio's file, and the time limit of each of its four jobs in seconds.
    #[arg(long, value_parser = parse_size, default_value = "2G")]
    fio_size: u64,
    #[arg(long, default_value_t = 30)]
    fio_runtime: u64,
    /// Size of every image.
    #[arg(long, value_parser = parse_size, default_value = "4G")]
    image_size: u64,
    /// Where the images and mount points go.
    #[arg(long, default_value = "/var/tmp")]
    dir: PathBuf,
    /// Directory for the SVG plots.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
    /// Also write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Issue 8: the same workloads (many empty files; real trees copied; Andrew-like; PostMark-
    /// like; fio) through the mounts of sufs softdep, sync and async, fuse2fs and kernel ext4 on
    /// a loop device, each on a fresh image; a table, plots and JSON.
    Peers(PeersArgs),
    /// The Block Register paper's Figure 2: a volume snapshot with the reserved store and with the
    /// br store, side by side: 4 KiB direct writes and unpack-then-delete, on the simulated disk
    /// and on an image file.
    Br {
        /// Volume size.
        #[arg(long, value_parser = parse_size, default_value = "1G")]
        size: u64,
        /// The large file written to.
        #[arg(long, value_parser = parse_size, default_value = "256M")]
        file: u64,
        /// Requests per direct-write run on the simulated disk.
        #[arg(long, default_value_t = 4000)]
        ios: u64,
        /// Requests per direct-write run on the image file.
        #[arg(long, default_value_t = 1000)]
        file_ios: u64,
        #[arg(long, default_value = "/usr/include")]
        tree: PathBuf,
        #[arg(long, default_value_t = 2000)]
        tree_files: usize,
        #[arg(long, default_value_t = 5)]
        copies: usize,
        /// Where the image files go.
        #[arg(long, default_value = "/var/tmp")]
        dir: PathBuf,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The soft updates paper's comparison (§5), in-process on durable image files: create and
    /// remove files, then an Andrew-like set of phases, for sync, async and softdep.
    Orderings {
        /// Files created, then removed.
        #[arg(long, default_value_t = 10_000)]
        files: usize,
        /// Source tree copied in the Andrew-like phases.
        #[arg(long, default_value = "/usr/include")]
        tree: PathBuf,
        /// At most this many files of the tree.
        #[arg(long, default_value_t = 4000)]
        tree_files: usize,
        /// Where the image files go.
        #[arg(long, default_value = "/var/tmp")]
        dir: PathBuf,
        /// Size of the large file written and fsync'ed, in MiB.
        #[arg(long, default_value_t = 256)]
        big_mb: usize,
        /// Rounds, the orderings interleaved; each phase reports its median.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// In-process (`lib`), through a FUSE mount (`fuse`), or both.
        #[arg(long, default_value = "both", value_parser = ["lib", "fuse", "both"])]
        through: String,
    },
    /// Mogul 1994 §4.1: read response time under PU and AIPU, with delayed and async full-block
    /// writes; and the kernel-build-like workload's blocks written per policy (Table 4-3).
    UpdatePolicy {
        #[arg(long, default_value_t = 6)]
        trials: u32,
        /// Simulated seconds per trial.
        #[arg(long, default_value_t = 600)]
        seconds: u64,
        /// Disk model: rz58 (the paper's) or modern.
        #[arg(long, default_value = "rz58")]
        disk: String,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Directory for the SVG plots.
        #[arg(long, default_value = "bench-out")]
        out: PathBuf,
        /// Also write the results as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn workload_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(crashtest::WORKLOADS.iter().copied().chain(["all"]))
}

/// An error for the user: a message and an exit code.
struct Fail(String, u8);

impl<E: std::fmt::Display> From<E> for Fail {
    fn from(e: E) -> Fail {
        Fail(e.to_string(), 1)
    }
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn,fuser=error")).init();
    let args: Vec<String> = std::env::args().collect();
    let name = args.first().and_then(|a| Path::new(a).file_name()).map(|n| n.to_string_lossy().into_owned());
    if name.as_deref() == Some(helper::HELPER_NAME) {
        return helper_main(&args[1..]);
    }
    finish(run(Cli::parse(), &args[1..]))
}

/// The exit of a command: its code, or its message and code.
fn finish(r: Result<u8, Fail>) -> ExitCode {
    match r {
        Ok(code) => ExitCode::from(code),
        Err(Fail(msg, code)) => {
            eprintln!("sufs: {msg}");
            ExitCode::from(code)
        }
    }
}

/// Run as `mount.fuse.sufs SPEC DIR [-sfnv] [-o OPTS]` (by mount(8)): the same as
/// `sufs mount -q --no-create IMAGE DIR -o OPTS`, or a remount. Exit codes as mount(8)'s
/// helpers: 0, 1 for a bad call, 32 for a failed mount.
fn helper_main(args: &[String]) -> ExitCode {
    let usage = "usage: mount.fuse.sufs [sufs:]IMAGE DIR [-sfnv] [-o OPTIONS]";
    let call = match helper::parse_args(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}: {e}\n{usage}", helper::HELPER_NAME);
            return ExitCode::from(1);
        }
    };
    let opts = match MountOpts::parse(&call.options, call.sloppy) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{}: {e}", helper::HELPER_NAME);
            return ExitCode::from(1);
        }
    };
    for u in &opts.unknown {
        eprintln!("{}: ignoring unknown option {u:?} (-s)", helper::HELPER_NAME);
    }
    let known: Vec<&str> =
        call.options.split(',').filter(|o| !o.is_empty() && !opts.unknown.iter().any(|u| u == o)).collect();
    let (image, dir) = (call.image.to_string_lossy().into_owned(), call.dir.to_string_lossy().into_owned());
    let mut argv = vec!["sufs".to_string(), "mount".into(), image, dir, "--no-create".into()];
    if !call.verbose {
        argv.push("--quiet".into());
    }
    if !known.is_empty() {
        argv.extend(["-o".to_string(), known.join(",")]);
    }
    if call.verbose {
        eprintln!("{}: {}", helper::HELPER_NAME, argv.join(" "));
    }
    if call.fake {
        return ExitCode::SUCCESS;
    }
    match Cli::try_parse_from(&argv) {
        Ok(cli) => finish(run(cli, &argv[1..])),
        Err(e) => {
            eprintln!("{}: {e}", helper::HELPER_NAME);
            ExitCode::from(1)
        }
    }
}

/// Runs a command; `args` are its arguments (without argv[0]), to run a mount again as its daemon.
fn run(cli: Cli, args: &[String]) -> Result<u8, Fail> {
    match cli.cmd {
        Cmd::Mkfs { image, size, block_size, inodes, snapshot_reserve } => {
            let sb = cmd_mkfs(&image, size, block_size, inodes, snapshot_reserve)?;
            print_mkfs(&image, &sb);
            Ok(0)
        }
        Cmd::Mount {
            image,
            dir,
            ordering,
            foreground,
            stats,
            cache,
            size,
            ro,
            update,
            age,
            interval,
            async_full_blocks,
            softdep_limit,
            threads,
            force,
            options,
            quiet,
            no_create,
        } => {
            let mut opts = MountOpts::default();
            for o in &options {
                opts.add(o, false).map_err(|e| Fail(e, 1))?;
            }
            let update = opts.update.unwrap_or(update);
            let mut sync = SyncerOptions::for_policy(update);
            sync.age = Duration::from_secs(age);
            if let Some(i) = interval {
                sync.interval = Duration::from_secs(i.max(1));
            }
            let m = MountArgs {
                ordering: opts.ordering.unwrap_or(ordering),
                foreground,
                stats,
                cache: opts.cache.unwrap_or(cache),
                size,
                ro: opts.ro.unwrap_or(ro),
                sync,
                async_full_blocks,
                softdep_limit,
                threads: opts.threads.unwrap_or(threads).into(),
                snapshot: false,
                force,
                opts,
                reexec: args.to_vec(),
                make_missing: !no_create,
                quiet,
            };
            cmd_mount(&image, &dir, m).map(|_| 0)
        }
        Cmd::InstallHelper { prefix } => {
            let (link, old) = helper::install(&prefix).map_err(|e| Fail(e, 1))?;
            let target = std::fs::read_link(&link)?;
            match old {
                Some(old) => println!("{} -> {} (was {old})", link.display(), target.display()),
                None => println!("{} -> {}", link.display(), target.display()),
            }
            Ok(0)
        }
        Cmd::Umount { dir } => cmd_umount(&dir).map(|_| 0),
        Cmd::Fsck { image, background: true, .. } => cmd_fsck_background(&image),
        Cmd::Fsck { image, yes, preen, force, superblock, .. } => {
            let mode = if yes {
                fsck::Mode::Repair
            } else if preen {
                fsck::Mode::Preen
            } else {
                fsck::Mode::Check
            };
            cmd_fsck(&image, &fsck::Options { mode, force, superblock })
        }
        Cmd::Dumpfs { image } => cmd_dumpfs(&image).map(|_| 0),
        Cmd::Sync { on } => cmd_sync(on.as_deref()).map(|_| 0),
        Cmd::Br { on, op } => cmd_br(&on, op).map(|_| 0),
        Cmd::Snapshot { on, op } => cmd_snapshot(&on, op).map(|_| 0),
        Cmd::Volume { op: VolumeCmd::Snapshot { op } } => cmd_volume(op).map(|_| 0),
        Cmd::Bench { which: None, peers } | Cmd::Bench { which: Some(BenchCmd::Peers(peers)), .. } => {
            cmd_bench_peers(peers).map(|_| 0)
        }
        Cmd::Bench {
            which: Some(BenchCmd::Orderings { files, tree, tree_files, dir, big_mb, rounds, through }),
            ..
        } => cmd_bench_orderings(files, &tree, tree_files, &dir, big_mb, rounds, &through).map(|_| 0),
        Cmd::Bench {
            which: Some(BenchCmd::Br { size, file, ios, file_ios, tree, tree_files, copies, dir, seed, json }),
            ..
        } => {
            let o = sufs::bench_br::BrBenchOptions {
                blocks: size / 4096,
                file_blocks: file / 4096,
                ios,
                file_ios,
                tree,
                tree_files,
                copies,
                dir,
                seed,
            };
            cmd_bench_br(&o, json).map(|_| 0)
        }
        Cmd::Bench { which: Some(BenchCmd::UpdatePolicy { trials, seconds, disk, seed, out, json }), .. } => {
            cmd_bench_update(trials, seconds, &disk, seed, &out, json).map(|_| 0)
        }
        Cmd::Crashtest { ordering, workload, seed, subsets, ops, cache_blocks, end, update } => {
            let opts = CrashOptions { subsets, ops, cache_blocks, end, update, ..Default::default() };
            cmd_crashtest(ordering, &workload, seed, &opts)
        }
    }
}

/// This command's arguments (without argv[0]), to run it again as the mount's daemon.
fn own_args() -> Vec<String> {
    std::env::args().skip(1).collect()
}

fn cmd_mkfs(
    image: &Path,
    size: Option<u64>,
    block_size: u32,
    inodes: Option<u64>,
    snapshot_reserve: Option<u64>,
) -> Result<Superblock, Fail> {
    if !block_size.is_power_of_two() || !(format::MIN_BLOCK_SIZE..=format::MAX_BLOCK_SIZE).contains(&block_size) {
        return Err(Fail(
            format!(
                "block size {block_size} is not a power of two from {} to {}",
                format::MIN_BLOCK_SIZE,
                format::MAX_BLOCK_SIZE
            ),
            1,
        ));
    }
    let existed = image.exists();
    if let Some(size) = size {
        let blocks = size / block_size as u64;
        if let Err(e) = Superblock::geometry(block_size, blocks, inodes) {
            return Err(Fail(format!("cannot make a file system of {size} bytes: {e}"), 1));
        }
        FileDevice::create(image, size)?;
    } else if !existed {
        return Err(Fail(format!("{} does not exist: give --size to create it", image.display()), 1));
    }
    let dev = FileDevice::open(image, block_size as usize, true)?;
    if let Some(size) = size {
        if dev.num_blocks() * (block_size as u64) < size / block_size as u64 * block_size as u64 {
            return Err(Fail(format!("{} is smaller than --size", image.display()), 1));
        }
    }
    let mut dev: Arc<dyn BlockDevice> = Arc::new(dev);
    if let Some(r) = snapshot_reserve {
        let keep = r.div_ceil(block_size as u64);
        if keep + 1024 > dev.num_blocks() {
            return Err(Fail(format!("--snapshot-reserve {r} leaves too little for a file system"), 1));
        }
        let blocks = dev.num_blocks() - keep;
        dev = Arc::new(PrefixDevice { inner: dev, blocks });
    }
    let opts = MkfsOptions {
        block_size,
        inodes,
        uid: unsafe { libc::getuid() },
        gid: unsafe { libc::getgid() },
        zeroed: !existed,
    };
    mkfs(dev, &opts, RealClock::new().wall())
        .map_err(|e| Fail(format!("cannot make a file system on {}: {e}", image.display()), 1))
}

fn print_mkfs(image: &Path, sb: &Superblock) {
    println!(
        "{}: {} blocks of {} bytes ({} MiB), {} groups, {} inodes",
        image.display(),
        sb.num_blocks,
        sb.block_size,
        (sb.num_blocks * sb.block_size as u64) >> 20,
        sb.ngroups,
        sb.total_inodes()
    );
}

/// Reads the superblock with a probe of the smallest block size, then opens the image with the
/// file system's block size.
fn open_image(image: &Path, writable: bool) -> Result<(FileDevice, Superblock), Fail> {
    let probe = FileDevice::open(image, format::MIN_BLOCK_SIZE as usize, false)?;
    if probe.num_blocks() == 0 {
        return Err(Fail(format!("{}: too small to hold a file system", image.display()), 8));
    }
    let mut buf = vec![0u8; format::MIN_BLOCK_SIZE as usize];
    probe.read_block(0, &mut buf)?;
    let sb = Superblock::decode(&buf).map_err(|e| Fail(format!("{}: {e}", image.display()), 8))?;
    let dev = FileDevice::open(image, sb.block_size as usize, writable)?;
    Ok((dev, sb))
}

struct MountArgs {
    ordering: Ordering,
    foreground: bool,
    stats: Option<PathBuf>,
    cache: u64,
    size: u64,
    ro: bool,
    sync: SyncerOptions,
    async_full_blocks: bool,
    softdep_limit: usize,
    threads: usize,
    /// Mount the volume snapshot (read-only) instead of the file system.
    snapshot: bool,
    /// Mount read-write even an image that `mount_gate` refuses.
    force: bool,
    /// The `-o` options (those above already merged in).
    opts: MountOpts,
    /// `sufs` arguments that run this mount again (in the foreground, as its daemon).
    reexec: Vec<String>,
    /// Make a missing image (`sufs mount`; not the mount helper, unless `mkfs_size`).
    make_missing: bool,
    /// Nothing on stdout or stderr on success; notes go to the image's log.
    quiet: bool,
}

/// What the superblock says of a read-write mount (soft updates §6, instant restart): a clean
/// image mounts; an unclean one last mounted with soft updates holds only leaks and link counts
/// too high, so it mounts at once and `Recovery::Background` checks it; an unclean one last
/// mounted `sync` or `async`, or one marked for fsck, must be checked first.
#[derive(Debug, PartialEq, Eq)]
enum Recovery {
    None,
    Background,
}

fn mount_gate(image: &Path, sb: &Superblock, force: bool) -> Result<Recovery, Fail> {
    let why = if sb.flags & format::SB_NEEDS_FSCK != 0 {
        "damage was found while it was mounted"
    } else if sb.flags & format::SB_CLEAN != 0 {
        return Ok(Recovery::None);
    } else if sb.flags & format::SB_SOFTDEP != 0 {
        return Ok(Recovery::Background);
    } else if sb.flags & format::SB_ASYNC != 0 {
        "it was not unmounted cleanly, and its last mount was async (no ordering: anything may be damaged)"
    } else {
        "it was not unmounted cleanly, and its last mount was sync (FFS needs fsck after a crash)"
    };
    if force {
        eprintln!("sufs: {}: mounting although {why} (--force)", image.display());
        return Ok(Recovery::None);
    }
    Err(Fail(
        format!(
            "{}: needs fsck: {why}; run `sufs fsck -y {}` first (or mount with --force)",
            image.display(),
            image.display()
        ),
        32,
    ))
}

fn cmd_mount(image: &Path, dir: &Path, args: MountArgs) -> Result<(), Fail> {
    if args.opts.remount {
        // The mount point: DIR, or IMAGE's place when that is one (`sufs mount -o remount,ro MNT`).
        return cmd_remount(if image.is_dir() { image } else { dir }, &args.opts);
    }
    let MountArgs { ordering, foreground, stats, cache, size, sync, async_full_blocks, softdep_limit, .. } = args;
    let (ro, snapshot) = (args.ro || args.snapshot, args.snapshot);
    let root = unsafe { libc::geteuid() } == 0;
    let fuse_options = args.opts.fuse_options(root).map_err(|e| Fail(e, 32))?;
    // What happens once, before the daemon starts (which runs this command again).
    if std::env::var_os(READY_ENV).is_none() {
        if image.exists() {
            let wait = args.opts.wait.unwrap_or(helper::DEFAULT_WAIT_SECS);
            helper::wait_for_image(image, wait, &mut |m| say(image, args.quiet, m)).map_err(|e| Fail(e, 32))?;
        }
        if let Some(want) = args.opts.mkfs_size {
            mkfs_sized(image, want, args.quiet)?;
        } else if !image.exists() {
            if !args.make_missing {
                return Err(Fail(
                    format!(
                        "{} does not exist (make it with `sufs mkfs`, or ask for it with -o mkfs_size=SIZE)",
                        image.display()
                    ),
                    32,
                ));
            }
            let sb = cmd_mkfs(image, Some(size), 4096, None, None)?;
            if !args.quiet {
                print_mkfs(image, &sb);
            }
        }
    }
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(|e| Fail(format!("cannot create {}: {e}", dir.display()), 1))?;
    }
    if !foreground {
        return spawn_daemon(image, dir, args.reexec, args.quiet);
    }
    // A read-only mount opens the image for writing where it can, so that a remount may make it
    // read-write.
    let (dev, sb, writable) = match open_image(image, !ro || !snapshot) {
        Ok((dev, sb)) => (dev, sb, true),
        Err(_) if ro => open_image(image, false).map(|(dev, sb)| (dev, sb, false))?,
        Err(e) => return Err(e),
    };
    let lock_file = std::fs::File::open(image)?;
    if lock_file.try_lock().is_err() {
        return Err(Fail(format!("{} is already mounted (another sufs holds it)", image.display()), 32));
    }
    let recovery = if ro { Recovery::None } else { mount_gate(image, &sb, args.force)? };
    let clock: Arc<dyn Clock> = Arc::new(RealClock::new());
    let opts = MountOptions { ordering, cache_blocks: (cache / sb.block_size as u64) as usize, readonly: ro };
    // A volume snapshot: §4's start-up (the store found read-only, then copy-on-write, then the
    // read-write mount), or the snapshot itself.
    let cache_blocks = opts.cache_blocks as u64;
    let pool = PoolOptions { low_watermark: cache_blocks + 1024, grow: cache_blocks + 1024, ..Default::default() };
    let base: Arc<dyn BlockDevice> = Arc::new(dev);
    let (dev, vol): (Arc<dyn BlockDevice>, Option<Arc<VolumeDevice>>) = if snapshot {
        let vol = VolumeDevice::open(base, pool)?
            .ok_or_else(|| Fail(format!("{}: no volume snapshot", image.display()), 32))?;
        if let Some(why) = vol.invalid_reason() {
            return Err(Fail(format!("{}: {why}", image.display()), 32));
        }
        (Arc::new(SnapshotDevice(vol)), None)
    } else if ro {
        (base, None)
    } else {
        match VolumeDevice::open(base.clone(), pool)? {
            Some(v) => (v.clone(), Some(v)),
            None => (base, None),
        }
    };
    // A volume snapshot's copy-on-write starts only at a read-write mount.
    let can_write =
        writable && !snapshot && vol.is_none() && (!ro || matches!(VolumeDevice::open(dev.clone(), pool), Ok(None)));
    let mut fs = Fs::mount(dev, opts, clock).map_err(|e| Fail(format!("cannot mount {}: {e}", image.display()), 32))?;
    fs.set_async_full_blocks(async_full_blocks);
    fs.set_softdep_limit(softdep_limit);
    fs.set_atime_policy(args.opts.atime_policy());
    fs.set_sync_mode(args.opts.sync_mode());
    fs.allow_remount_rw(can_write);
    let shared = Arc::new(Mutex::new(fs));
    let mut ctl = CtlServer::start(&ctl::socket_path(image), shared.clone())?;
    let mut refiller = vol.filter(|v| v.kind() == StoreKind::Br).map(|v| Refiller::start(v, shared.clone()));

    let abs = std::fs::canonicalize(image).unwrap_or_else(|_| image.to_path_buf());
    let mut config = fusemount::config(format!("sufs:{}", abs.display()), ro, args.threads);
    config.mount_options.extend(fuse_options);
    let mut session = fuser::Session::new(SufsFuse::new(shared.clone()), dir, &config)
        .map_err(|e| Fail(format!("cannot mount {} on {}: {e}", image.display(), dir.display()), 32))?;
    ctl.on_stale(fusemount::stale_sink(session.notifier()));
    let mut unmounter = session.unmount_callable();
    let mut signals = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM, libc::SIGHUP])?;
    let handle = signals.handle();
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            if let Err(e) = unmounter.unmount() {
                eprintln!("sufs: unmount: {e}");
            }
        }
    });
    let mut syncer = Syncer::start(shared.clone(), sync);
    if recovery == Recovery::Background && !snapshot {
        start_background_fsck(image.to_path_buf(), shared.clone());
    }
    notify_ready();
    let run = session.run();
    handle.close();
    syncer.stop();
    ctl.stop();
    if let Some(r) = refiller.as_mut() {
        r.stop();
    }
    let mut fs = lock(&shared);
    fs.unmount().map_err(|e| Fail(format!("unmount of {} failed: {e}", image.display()), 1))?;
    let st = fs.stats();
    let mut out = std::io::stdout();
    let _ = writeln!(
        out,
        "sufs: unmounted {} ({}): device reads {}, writes {} ({} sync, {} async) in {} requests and {} batches; cache hit rate {:.1}%",
        image.display(),
        st.ordering,
        st.device.reads,
        st.device.writes(),
        st.device.sync_writes,
        st.device.async_writes,
        st.device.write_requests,
        st.device.batches,
        100.0 * st.cache_hit_rate
    );
    if let Some(p) = stats {
        std::fs::write(&p, serde_json::to_string_pretty(&st)?)
            .map_err(|e| Fail(format!("cannot write {}: {e}", p.display()), 1))?;
    }
    drop(lock_file);
    run.map_err(|e| Fail(format!("FUSE session ended with an error: {e}"), 1))
}

const READY_ENV: &str = "SUFS_READY_FD";

/// Runs this same command in the foreground as a detached child and returns once it has
/// mounted (or failed). The child's output (its unmount statistics, any error) goes to a log
/// file beside the image, so that nothing it prints later can block a pipe of the caller's.
fn spawn_daemon(image: &Path, dir: &Path, mut args: Vec<String>, quiet: bool) -> Result<(), Fail> {
    use std::io::{Read, Seek};
    use std::os::fd::FromRawFd;
    use std::os::unix::process::CommandExt;
    let log_path = log_path(image);
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(&log_path)
        .map_err(|e| Fail(format!("cannot open log {}: {e}", log_path.display()), 1))?;
    let start = log.seek(std::io::SeekFrom::End(0))?;
    let mut fds = [0i32; 2];
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(Fail(format!("pipe: {}", std::io::Error::last_os_error()), 1));
    }
    // SAFETY: pipe(2) just returned this descriptor and nothing else owns it.
    let mut reader = unsafe { std::fs::File::from_raw_fd(fds[0]) };
    let exe = std::env::current_exe()?;
    args.push("--foreground".into());
    let spawned = std::process::Command::new(exe)
        .args(&args)
        .env(READY_ENV, fds[1].to_string())
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log.try_clone()?)
        .process_group(0)
        .spawn();
    unsafe { libc::close(fds[1]) };
    let mut child = spawned?;
    let mut buf = String::new();
    let _ = reader.read_to_string(&mut buf);
    if buf.starts_with("ready") {
        if !quiet {
            println!("sufs: {} mounted on {} (log: {})", image.display(), dir.display(), log_path.display());
        }
        return Ok(());
    }
    let status = child.wait()?;
    let mut out = String::new();
    log.seek(std::io::SeekFrom::Start(start))?;
    let _ = log.read_to_string(&mut out);
    let msg = out.lines().filter(|l| !l.trim().is_empty()).map(|l| l.trim_start_matches("sufs: ")).collect::<Vec<_>>();
    Err(Fail(if msg.is_empty() { format!("mount failed ({status})") } else { msg.join("\n") }, 32))
}

/// Where a mount's daemon writes: beside the image, or in /var/tmp for a device.
fn log_path(image: &Path) -> PathBuf {
    if image.is_file() {
        PathBuf::from(format!("{}.log", image.display()))
    } else {
        let name = image.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        PathBuf::from(format!("/var/tmp/sufs-{name}.log"))
    }
}

/// A note on the way to a mount: on stderr, or (quiet, as the mount helper is) in the log.
fn say(image: &Path, quiet: bool, msg: &str) {
    if !quiet {
        eprintln!("sufs: {msg}");
    } else if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log_path(image)) {
        let _ = writeln!(f, "sufs: {msg}");
    }
}

/// `-o mkfs_size=SIZE`: a new file system of SIZE bytes on the image (a regular file, made
/// anew), unless it already is a sufs image of exactly that size. For test harnesses, whose
/// "make a file system of this size" for FUSE can only be a mount option.
fn mkfs_sized(image: &Path, size: u64, quiet: bool) -> Result<(), Fail> {
    match std::fs::metadata(image) {
        Ok(m) if !m.is_file() => {
            return Err(Fail(format!("mkfs_size: {} is not a regular file", image.display()), 32));
        }
        Ok(m) if m.len() == size && open_image(image, false).is_ok() => return Ok(()),
        Ok(_) => std::fs::remove_file(image).map_err(|e| Fail(format!("mkfs_size: {}: {e}", image.display()), 32))?,
        Err(_) => {}
    }
    let sb = cmd_mkfs(image, Some(size), 4096, None, None).map_err(|Fail(m, _)| Fail(format!("mkfs_size: {m}"), 32))?;
    say(image, quiet, &format!("made a new file system of {size} bytes on {} (mkfs_size)", image.display()));
    if !quiet {
        print_mkfs(image, &sb);
    }
    Ok(())
}

/// A remount of the sufs mount on `dir` (root): the kernel's flags by mount(2), and what the
/// file system applies itself through the mount's control channel. Read-only goes to the
/// kernel first (it refuses while files are open for writing), then the file system, which
/// writes everything and marks the image clean; read-write goes to the file system first (it
/// refuses an image that needs fsck), then the kernel.
fn cmd_remount(dir: &Path, opts: &MountOpts) -> Result<(), Fail> {
    use sufs::fs::mountopt::{AtimePolicy, Remount};
    let (abs, image) = mounted_image(dir)?;
    if unsafe { libc::geteuid() } != 0 {
        return Err(Fail(format!("remount of {}: only root can remount", dir.display()), 32));
    }
    let fail = |e: String| Fail(format!("remount of {}: {e}", dir.display()), 32);
    let sock = ctl::socket_path(Path::new(&image));
    let mut c = CtlClient::connect(&sock).map_err(|e| fail(e.to_string()))?;
    let mut call = |changes: Remount| -> Result<Remount, Fail> {
        let v = c.call(&ctl::Request::Remount { changes }).map_err(|e| fail(e.to_string()))?;
        serde_json::from_value(v).map_err(|e| fail(e.to_string()))
    };
    let cur = call(Remount::default())?;
    let want = opts.remount_changes();
    if want.ordering.is_some_and(|o| Some(o) != cur.ordering) {
        return Err(fail("the ordering cannot change on a remount".into()));
    }
    let was_ro = cur.readonly == Some(true);
    let ro = want.readonly.unwrap_or(was_ro);
    let atime = AtimePolicy {
        mode: want.atime.or(cur.atime).unwrap_or_default(),
        nodiratime: want.nodiratime.or(cur.nodiratime).unwrap_or(false),
    };
    let vfs = helper::vfs_flags(&abs).map_err(|e| fail(e.to_string()))?;
    let mut flags = helper::remount_flags(vfs, ro, opts.suid, opts.dev, opts.exec, atime);
    if want.sync.or(cur.sync) == Some(true) {
        flags |= libc::MS_SYNCHRONOUS;
    }
    if want.dirsync.or(cur.dirsync) == Some(true) {
        flags |= libc::MS_DIRSYNC;
    }
    let kernel = || helper::kernel_remount(&abs, flags).map_err(|e| fail(e.to_string()));
    if !ro && was_ro {
        call(want)?;
        if let Err(e) = kernel() {
            call(Remount { readonly: Some(true), ..Default::default() })?;
            return Err(e);
        }
    } else {
        kernel()?;
        call(want)?;
    }
    Ok(())
}

fn notify_ready() {
    use std::os::fd::FromRawFd;
    if let Some(fd) = std::env::var(READY_ENV).ok().and_then(|s| s.parse::<i32>().ok()) {
        let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
        let _ = f.write_all(b"ready\n");
    }
}

/// The image a sufs mount on `dir` serves (from /proc/self/mountinfo).
fn mounted_image(dir: &Path) -> Result<(PathBuf, String), Fail> {
    match mount_source(dir)? {
        (abs, Some(source)) if source.starts_with("sufs:") => Ok((abs, source.trim_start_matches("sufs:").to_string())),
        _ => Err(Fail(format!("{} is not a sufs mount", dir.display()), 1)),
    }
}

/// The mount point `dir` made absolute, and the source of the FUSE mount there, if any.
fn mount_source(dir: &Path) -> Result<(PathBuf, Option<String>), Fail> {
    let abs = std::fs::canonicalize(dir).map_err(|e| Fail(format!("{}: {e}", dir.display()), 1))?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    // mountinfo: ... mountpoint ... - fstype source options
    let source = mounts.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mp = left.split(' ').nth(4)?;
        let mut r = right.split(' ');
        let fstype = r.next()?;
        let source = r.next()?;
        (mp == abs.to_str()? && fstype.starts_with("fuse")).then(|| source.to_string())
    });
    Ok((abs, source))
}

fn cmd_umount(dir: &Path) -> Result<(), Fail> {
    // A snapshot mount is read-only: nothing to wait for once it is gone.
    let (abs, image) = match mount_source(dir)? {
        (abs, Some(s)) if s.starts_with("sufs-snapshot:") => (abs, None),
        _ => {
            let (abs, image) = mounted_image(dir)?;
            (abs, Some(image))
        }
    };
    let ok = if unsafe { libc::geteuid() } == 0 {
        let c = std::ffi::CString::new(abs.as_os_str().as_encoded_bytes())?;
        // A file just closed may still hold the mount for an instant: where files are opened
        // through OPEN (a strictatime mount, say), the kernel sends RELEASE in the background
        // and keeps its reference until sufs answers. Busy is tried again for a while.
        let mut tries = 0;
        loop {
            if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
                break true;
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EBUSY) || tries == 100 {
                break false;
            }
            tries += 1;
            std::thread::sleep(Duration::from_millis(20));
        }
    } else {
        std::process::Command::new("fusermount3").arg("-u").arg(&abs).status().is_ok_and(|s| s.success())
    };
    if !ok {
        return Err(Fail(format!("cannot unmount {}: {}", dir.display(), std::io::Error::last_os_error()), 1));
    }
    let Some(image) = image else { return Ok(()) };
    // The mount process holds a lock on the image until it has written everything.
    let f = std::fs::File::open(&image)?;
    for _ in 0..6000 {
        if f.try_lock().is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(Fail(format!("{image} is still busy after 5 minutes"), 1))
}

/// Runs a control request on `on`: through the control channel of the mount serving it (a mount
/// point, or an image some sufs holds), or on the unmounted image itself.
fn control(on: &Path, req: ctl::Request) -> Result<serde_json::Value, Fail> {
    let image = if on.is_dir() { PathBuf::from(mounted_image(on)?.1) } else { on.to_path_buf() };
    let f = std::fs::File::open(&image).map_err(|e| Fail(format!("{}: {e}", image.display()), 1))?;
    if f.try_lock().is_err() {
        let sock = ctl::socket_path(&image);
        let mut c =
            CtlClient::connect(&sock).map_err(|e| Fail(format!("{} is mounted, but: {e}", image.display()), 1))?;
        return c.call(&req).map_err(|e| Fail(e.to_string(), 1));
    }
    let (dev, sb) = open_image(&image, true)?;
    let clock: Arc<dyn Clock> = Arc::new(RealClock::new());
    let opts = MountOptions { cache_blocks: (64 << 20) / sb.block_size as usize, ..Default::default() };
    let mut fs = Fs::mount(Arc::new(dev), opts, clock).map_err(|e| Fail(format!("{}: {e}", image.display()), 1))?;
    let r = ctl::execute(&mut fs, req);
    fs.unmount().map_err(|e| Fail(format!("{}: {e}", image.display()), 1))?;
    drop(f);
    r.map_err(|e| Fail(e.to_string(), 1))
}

/// Opens an unmounted image for the volume commands (whole device: file system and reserved area).
fn volume_device(image: &Path, writable: bool) -> Result<(Arc<dyn BlockDevice>, std::fs::File), Fail> {
    let f = std::fs::File::open(image).map_err(|e| Fail(format!("{}: {e}", image.display()), 1))?;
    let locked = if writable { f.try_lock().is_ok() } else { f.try_lock_shared().is_ok() };
    if !locked {
        return Err(Fail(format!("{} is mounted; unmount it first", image.display()), 1));
    }
    let (dev, _) = open_image(image, writable)?;
    Ok((Arc::new(dev), f))
}

fn cmd_volume(op: SnapCmd) -> Result<(), Fail> {
    let pool = PoolOptions::default();
    match op {
        SnapCmd::Create { image, store, initial } => {
            let (dev, _lock) = volume_device(&image, true)?;
            VolumeDevice::create(dev, store, PoolOptions { initial, ..pool }, RealClock::new().wall().0)?;
            println!("{}: snapshot taken ({store} store)", image.display());
        }
        SnapCmd::Status { image } => {
            let (dev, _lock) = volume_device(&image, false)?;
            let Some(vol) = VolumeDevice::open(dev, pool)? else {
                println!("{}: no volume snapshot", image.display());
                return Ok(());
            };
            let s = vol.volume_stats();
            let state = vol.invalid_reason().map_or("valid".to_string(), |r| format!("INVALID: {r}"));
            println!(
                "{}: {} store, {state}; {} exceptions; store blocks used {} of {} ({} MiB)",
                image.display(),
                vol.kind(),
                s.exceptions,
                s.store_used,
                s.store_size,
                (s.store_size * vol.block_size() as u64) >> 20
            );
        }
        SnapCmd::Export { image, out } => {
            let (dev, _lock) = volume_device(&image, false)?;
            let vol = VolumeDevice::open(dev, pool)?
                .ok_or_else(|| Fail(format!("{}: no volume snapshot", image.display()), 1))?;
            let n = volume::export(&vol, &out)?;
            println!("{}: snapshot exported to {} ({n} blocks written)", image.display(), out.display());
        }
        SnapCmd::Mount { image, dir, foreground } => {
            if !foreground {
                return spawn_daemon(&image, &dir, own_args(), false);
            }
            let m = MountArgs {
                ordering: Ordering::Softdep,
                foreground,
                stats: None,
                cache: 128 << 20,
                size: 0,
                ro: true,
                sync: SyncerOptions::for_policy(UpdatePolicy::Aipu),
                async_full_blocks: false,
                softdep_limit: 200_000,
                threads: DEFAULT_THREADS,
                snapshot: true,
                force: false,
                opts: MountOpts { ro: Some(true), ..Default::default() },
                reexec: own_args(),
                make_missing: false,
                quiet: false,
            };
            if !image.exists() {
                return Err(Fail(format!("{} does not exist", image.display()), 32));
            }
            cmd_mount(&image, &dir, m)?;
        }
        SnapCmd::Delete { image } => {
            let (dev, _lock) = volume_device(&image, true)?;
            let kind = VolumeDevice::delete(dev)?;
            println!("{}: snapshot deleted ({kind} store)", image.display());
        }
    }
    Ok(())
}

fn cmd_br(on: &Path, op: BrCmd) -> Result<(), Fail> {
    use ctl::Request;
    let show = |v: &serde_json::Value| {
        format!(
            "{}: {} blocks reserved, length {} (inode {})",
            v["name"].as_str().unwrap_or("?"),
            v["blocks"],
            v["length"],
            v["ino"]
        )
    };
    match op {
        BrCmd::Reserve { name, nblocks, hint } => {
            println!("{}", show(&control(on, Request::BrReserve { name, nblocks, hint })?))
        }
        BrCmd::Expand { name, nblocks, hint } => {
            println!("{}", show(&control(on, Request::BrExpand { name, nblocks, hint })?))
        }
        BrCmd::Truncate { name, physblock } => {
            println!("{}", show(&control(on, Request::BrTruncate { name, block: physblock })?))
        }
        BrCmd::Query { name, offset, count } => {
            let runs = control(on, Request::BrQuery { name, offset, count })?;
            for r in runs.as_array().into_iter().flatten() {
                println!("{} {} {}", r["offset"], r["start"], r["len"]);
            }
        }
        BrCmd::Free { name } => {
            let n = control(on, Request::BrFree { name: name.clone() })?;
            println!("{name}: freed, {n} blocks returned");
        }
        BrCmd::List => {
            let list = control(on, Request::BrList)?;
            for v in list.as_array().into_iter().flatten() {
                println!("{}", show(v));
            }
        }
    }
    Ok(())
}

/// `sufs sync [ON]`: one mount, or every sufs mount in /proc/self/mountinfo.
fn cmd_sync(on: Option<&Path>) -> Result<(), Fail> {
    let targets: Vec<PathBuf> = match on {
        Some(p) => vec![p.to_path_buf()],
        None => {
            let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
            mounts
                .lines()
                .filter_map(|l| {
                    let (left, right) = l.split_once(" - ")?;
                    let mp = left.split(' ').nth(4)?;
                    right.split(' ').nth(1)?.starts_with("sufs:").then(|| PathBuf::from(mp))
                })
                .collect()
        }
    };
    for t in targets {
        if t.is_dir() {
            mounted_image(&t)?;
        }
        let v = control(&t, ctl::Request::Sync)?;
        println!("{}: {} blocks written", t.display(), v["blocks_written"]);
    }
    Ok(())
}

/// The frozen file system of snapshot `name` of `on` as a read-only device: the snapshot file
/// read through the mount (a mounted image), or the image opened here. The lock file (if any)
/// must be kept while the device is used.
fn frozen_device(on: &Path, name: &str) -> Result<(Arc<dyn BlockDevice>, Option<std::fs::File>), Fail> {
    let image = if on.is_dir() { PathBuf::from(mounted_image(on)?.1) } else { on.to_path_buf() };
    let f = std::fs::File::open(&image).map_err(|e| Fail(format!("{}: {e}", image.display()), 1))?;
    let (_, sb) = open_image(&image, false)?;
    if f.try_lock_shared().is_err() {
        let mnt = if on.is_dir() {
            on.to_path_buf()
        } else {
            mount_point_of(&image).ok_or_else(|| {
                Fail(format!("{} is in use but not mounted where this process can see it", image.display()), 1)
            })?
        };
        let file = mnt.join(".snap").join(name);
        let dev = FileDevice::open(&file, sb.block_size as usize, false)
            .map_err(|e| Fail(format!("snapshot {name}: {e}"), 1))?;
        return Ok((Arc::new(dev), None));
    }
    let (dev, sb) = open_image(&image, false)?;
    let opts = MountOptions { readonly: true, cache_blocks: (16 << 20) / sb.block_size as usize, ..Default::default() };
    let fs = Fs::mount(Arc::new(dev), opts, Arc::new(RealClock::new()))
        .map_err(|e| Fail(format!("{}: {e}", image.display()), 1))?;
    let frozen = snapshot::FrozenDevice::new(snapshot::shared(fs), name.as_bytes())
        .map_err(|e| Fail(format!("snapshot {name}: {e}"), 1))?;
    Ok((Arc::new(frozen), Some(f)))
}

fn cmd_snapshot(on: &Path, op: FsSnapCmd) -> Result<(), Fail> {
    use ctl::Request;
    let show = |v: &serde_json::Value| {
        format!(
            "{}: inode {}, taken at {}, {} blocks owned, {} blocks shared with the file system",
            v["name"].as_str().unwrap_or("?"),
            v["ino"],
            v["created"],
            v["blocks"],
            v["shared"]
        )
    };
    match op {
        FsSnapCmd::Create { name } => {
            let t = std::time::Instant::now();
            let v = control(on, Request::SnapshotCreate { name })?;
            println!("{} (took {:.3} s)", show(&v), t.elapsed().as_secs_f64());
        }
        FsSnapCmd::List => {
            for v in control(on, Request::SnapshotList)?.as_array().into_iter().flatten() {
                println!("{}", show(v));
            }
        }
        FsSnapCmd::Delete { name } => {
            let n = control(on, Request::SnapshotDelete { name: name.clone() })?;
            println!("{name}: deleted, {n} blocks released");
        }
        FsSnapCmd::Export { name, out } => {
            if out.exists() {
                return Err(Fail(format!("{} exists; not overwriting it", out.display()), 1));
            }
            let (dev, _lock) = frozen_device(on, &name)?;
            let n = snapshot::export(dev.as_ref(), &out)?;
            println!("{name}: exported to {} ({n} blocks written)", out.display());
        }
        FsSnapCmd::Mount { name, dir, foreground } => {
            if !foreground {
                return spawn_daemon(on, &dir, own_args(), false);
            }
            let (dev, lock_file) = frozen_device(on, &name)?;
            let opts = MountOptions { readonly: true, cache_blocks: 4096, ..Default::default() };
            let fs = Fs::mount(dev, opts, Arc::new(RealClock::new()))
                .map_err(|e| Fail(format!("cannot mount snapshot {name}: {e}"), 32))?;
            let shared = Arc::new(Mutex::new(fs));
            let config = fusemount::config(format!("sufs-snapshot:{name}"), true, DEFAULT_THREADS);
            let mut session = fuser::Session::new(SufsFuse::new(shared), &dir, &config)
                .map_err(|e| Fail(format!("cannot mount snapshot {name} on {}: {e}", dir.display()), 32))?;
            let mut unmounter = session.unmount_callable();
            let mut signals = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM, libc::SIGHUP])?;
            let handle = signals.handle();
            std::thread::spawn(move || {
                if signals.forever().next().is_some() {
                    let _ = unmounter.unmount();
                }
            });
            notify_ready();
            let run = session.run();
            handle.close();
            drop(lock_file);
            run.map_err(|e| Fail(format!("FUSE session ended with an error: {e}"), 1))?;
        }
    }
    Ok(())
}

/// Instant restart: an image that soft updates left unclean is checked in the background once the
/// mount serves requests, exactly as `sufs fsck --background` does (through the control channel
/// and the mount), and what it reclaims goes to the mount's log.
fn start_background_fsck(image: PathBuf, fs: sufs::fuse::SharedFs) {
    let spawned = std::thread::Builder::new().name("sufs-bgfsck".into()).spawn(move || {
        let start = std::time::Instant::now();
        while mount_point_of(&image).is_none() {
            if start.elapsed() > Duration::from_secs(30) {
                log::error!("background fsck: the mount did not appear");
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        println!("sufs: {} was not unmounted cleanly: checking it in the background", image.display());
        match cmd_fsck_background(&image) {
            Ok(4) => {
                lock(&fs).damaged("background fsck found violations".into());
                println!("sufs: background fsck of {}: violations, the image is marked for fsck", image.display())
            }
            Ok(code) => println!("sufs: background fsck of {} done (exit {code})", image.display()),
            Err(e) => println!("sufs: background fsck of {} failed: {}", image.display(), e.0),
        }
    });
    if let Err(e) = spawned {
        log::error!("background fsck: {e}");
    }
}

/// `fsck --background`: a snapshot checked while writers go on, its lost resources handed to the
/// live file system. Exit 0 nothing found, 1 adjusted, 4 violations found (nothing adjusted).
fn cmd_fsck_background(on: &Path) -> Result<u8, Fail> {
    use ctl::Request;
    let t = std::time::Instant::now();
    let name = format!("fsck.{}", std::process::id());
    control(on, Request::SnapshotCreate { name: name.clone() })?;
    let taken = t.elapsed();
    let report = {
        let (dev, _lock) = frozen_device(on, &name)?;
        fsck::check(dev.as_ref())
    };
    let checked = t.elapsed();
    control(on, Request::SnapshotDelete { name: name.clone() })?;
    let report = report.map_err(|e| Fail(e.to_string(), 8))?;
    let mut adjust = snapshot::Adjust::default();
    let mut other = Vec::new();
    for f in &report.findings {
        println!("{:?}: {f}", f.class());
        match *f {
            fsck::Finding::LeakedBlock { bno } => adjust.blocks.push(bno),
            fsck::Finding::UnreferencedInode { ino, .. } => adjust.unreferenced.push(ino),
            fsck::Finding::LeakedInode { ino } => adjust.leaked_inodes.push(ino),
            fsck::Finding::LinkCountTooHigh { ino, stored, actual } => adjust.links.push((ino, stored - actual)),
            _ => other.push(f),
        }
    }
    if report.violations() > 0 {
        println!("{}: {} violations: run a full fsck on the unmounted image", on.display(), report.violations());
        return Ok(4);
    }
    let done = if adjust == snapshot::Adjust::default() {
        serde_json::Value::Null
    } else {
        control(on, Request::FsckAdjust { adjust })?
    };
    println!(
        "{}: background fsck: snapshot {:.3} s, check {:.3} s, total {:.3} s; {} files, {} directories, {} blocks used; {} findings ({} left for a full fsck); adjusted: {}",
        on.display(),
        taken.as_secs_f64(),
        (checked - taken).as_secs_f64(),
        t.elapsed().as_secs_f64(),
        report.files,
        report.dirs,
        report.used_blocks,
        report.findings.len(),
        other.len(),
        if done.is_null() { "nothing".to_string() } else { done.to_string() }
    );
    Ok(if done.is_null() { 0 } else { 1 })
}

fn cmd_fsck(image: &Path, opts: &fsck::Options) -> Result<u8, Fail> {
    let writes = opts.mode != fsck::Mode::Check;
    let f = std::fs::File::open(image).map_err(|e| Fail(format!("{}: {e}", image.display()), 8))?;
    if f.try_lock_shared().is_err() {
        return Err(Fail(format!("{} is mounted; unmount it first", image.display()), 8));
    }
    let dev = fsck::open_image_at(image, writes, opts.superblock).map_err(|e| Fail(e.to_string(), 8))?;
    let report = fsck::run(&dev, opts).map_err(|e| Fail(e.to_string(), 8))?;
    if report.skipped_clean {
        println!("{}: clean, not checked (-f to check)", image.display());
        return Ok(0);
    }
    if let Some(n) = report.alternate {
        println!("{}: using the superblock copy at block {n} (geometry only)", image.display());
    }
    for f in &report.findings {
        println!("{:?}: {f}", f.class());
    }
    println!(
        "{}: {} files, {} directories, {} blocks used; {} findings ({} allowed, {} violations){}",
        image.display(),
        report.files,
        report.dirs,
        report.used_blocks,
        report.findings.len(),
        report.allowed(),
        report.violations(),
        if report.repaired { ", repaired" } else { "" }
    );
    if report.reservations > 0 {
        println!(
            "{}: {} Block Register reservations in /.br own {} blocks",
            image.display(),
            report.reservations,
            report.reserved_blocks
        );
    }
    if let Some(why) = &report.refused {
        println!("{}: not preened ({why}), nothing changed: run sufs fsck -y", image.display());
        return Ok(4);
    }
    if writes && !report.remaining.is_empty() {
        for f in &report.remaining {
            println!("left: {:?}: {f}", f.class());
        }
        println!("{}: {} findings left unrepaired: run sufs fsck -y", image.display(), report.remaining.len());
    }
    Ok(if report.findings.is_empty() {
        0
    } else if !report.remaining.is_empty() {
        4
    } else {
        1
    })
}

fn cmd_bench_br(o: &sufs::bench_br::BrBenchOptions, json: Option<PathBuf>) -> Result<(), Fail> {
    let r = sufs::bench_br::run(o)?;
    println!("| device | test | reserved store | br store | br vs reserved |");
    println!("| --- | --- | --- | --- | --- |");
    for row in &r.rows {
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.0}% |",
            row.device, row.test, row.reserved, row.br, row.br_vs_reserved
        );
    }
    println!();
    println!("| store | blocks used | space set aside |");
    println!("| --- | --- | --- |");
    for (what, used, size) in &r.space {
        println!("| {what} | {used} ({} MiB) | {size} ({} MiB) |", (used * 4096) >> 20, (size * 4096) >> 20);
    }
    println!();
    println!("Where the time went on the simulated disk:");
    println!();
    println!("| run | store | s | in refills (s) | refills | preserved | exceptions | reads | writes | positionings | mean seek (blocks) | write batches |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for p in &r.profiles {
        println!(
            "| {} | {} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {} | {:.0} | {} |",
            p.run,
            p.store,
            p.seconds,
            p.refill_seconds,
            p.refills,
            p.preserved,
            p.exceptions,
            p.reads,
            p.writes,
            p.positionings,
            p.mean_seek_blocks,
            p.batches
        );
    }
    if let Some(p) = json {
        std::fs::write(&p, serde_json::to_string_pretty(&r)?)?;
    }
    Ok(())
}

fn cmd_bench_peers(a: PeersArgs) -> Result<(), Fail> {
    use sufs::bench_peers::{run, PeersOptions};
    let o = PeersOptions {
        exe: std::env::current_exe()?,
        dir: a.dir,
        image_size: a.image_size,
        peers: a.peers,
        workloads: a.workloads,
        files: a.files,
        trees: a.trees,
        tree_files: a.tree_files,
        andrew_tree: a.andrew_tree,
        andrew_files: a.andrew_files,
        postmark_files: a.postmark_files,
        postmark_tx: a.postmark_tx,
        seed: a.seed,
        fio_size: a.fio_size,
        fio_runtime: a.fio_runtime,
        ..Default::default()
    }
    .scaled(a.scale);
    println!(
        "sufs bench peers: {} empty files; trees {} (at most {} files); Andrew-like over {} (at most {} files); \
         PostMark {} files, {} transactions, seed {}; fio on {} MiB, {} s a job; {} MiB images in {}",
        o.files,
        o.trees.iter().map(|t| t.display().to_string()).collect::<Vec<_>>().join(" and "),
        o.tree_files,
        o.andrew_tree.display(),
        o.andrew_files,
        o.postmark_files,
        o.postmark_tx,
        o.seed,
        o.fio_size >> 20,
        o.fio_runtime,
        o.image_size >> 20,
        o.dir.display()
    );
    let multi = indicatif::MultiProgress::new();
    let style = indicatif::ProgressStyle::with_template("{prefix:>9} {bar:30} {pos}/{len} {msg}")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    let bars: Vec<(String, indicatif::ProgressBar)> = o
        .workloads
        .iter()
        .map(|w| {
            let b = multi.add(indicatif::ProgressBar::new(o.peers.len() as u64));
            b.set_style(style.clone());
            b.set_prefix(w.clone());
            (w.clone(), b)
        })
        .collect();
    let bar = |w: &str| bars.iter().find(|(n, _)| n == w).map(|(_, b)| b);
    let r = run(&o, &mut |w, peer, phase| {
        if let Some(b) = bar(w) {
            match phase {
                Some(ph) => b.set_message(format!("{peer}: {ph}")),
                None => b.inc(1),
            }
        }
    })?;
    for (_, b) in &bars {
        b.finish_with_message("done");
    }
    for (what, why) in &r.skipped {
        println!("skipped {what}: {why}");
    }
    println!("\n{}", r.table());
    let ratios = r.ratios();
    if !ratios.is_empty() {
        println!("softdep's time over the others' (below 1: softdep is faster):\n\n{ratios}");
    }
    let plots = r.plots(&a.out).map_err(|e| Fail(format!("plots: {e}"), 1))?;
    for p in &plots {
        println!("plot: {}", p.display());
    }
    if let Some(j) = a.json {
        std::fs::write(&j, serde_json::to_string_pretty(&r)?).map_err(|e| Fail(format!("{}: {e}", j.display()), 1))?;
        println!("json: {}", j.display());
    }
    Ok(())
}

fn cmd_bench_orderings(
    files: usize,
    tree: &Path,
    tree_files: usize,
    dir: &Path,
    big_mb: usize,
    rounds: usize,
    through: &str,
) -> Result<(), Fail> {
    println!(
        "soft updates §5 comparison: {files} files created and removed; Andrew-like phases over {} (at most \
         {tree_files} files); a {big_mb} MiB file written and fsync'ed; median of {rounds} interleaved rounds",
        tree.display()
    );
    let work = sufs::bench::OrderingWork { files, tree, tree_files, big_mb };
    if through != "fuse" {
        let rs = sufs::bench::ordering_compare(dir, &work, rounds)?;
        print_orderings("in-process, durable image files", &rs);
    }
    if through != "lib" {
        if !Path::new("/dev/fuse").exists() {
            return Err(Fail("/dev/fuse is missing: the FUSE comparison cannot run (use --through lib)".into(), 1));
        }
        let exe = std::env::current_exe()?;
        let rs = sufs::bench::ordering_compare_fuse(&exe, dir, &work, rounds)?;
        print_orderings("through the FUSE mount", &rs);
    }
    Ok(())
}

/// One table of `sufs bench orderings`, with the paper's ratios: time over the paper's phases
/// (create, remove and the Andrew-like ones) and over all of them, creates, removes and writes
/// against sync.
fn print_orderings(title: &str, rs: &[sufs::bench::OrderingResult]) {
    println!("\n{title}:");
    print!("{:<9}", "ordering");
    for (name, _) in &rs[0].phases {
        print!(" {:>10}", name);
    }
    println!(" {:>10} {:>12} {:>12}", "total s", "sync writes", "async writes");
    let total = |r: &sufs::bench::OrderingResult| r.phases.iter().map(|p| p.1).sum::<f64>();
    // The paper's phases: everything before the large file.
    let paper = |r: &sufs::bench::OrderingResult| r.phases.iter().take(6).map(|p| p.1).sum::<f64>();
    for r in rs {
        print!("{:<9}", r.ordering);
        for (_, t) in &r.phases {
            print!(" {:>10.3}", t);
        }
        println!(" {:>10.3} {:>12} {:>12}", total(r), r.sync_writes, r.async_writes);
    }
    let by = |name: &str| rs.iter().find(|r| r.ordering == name);
    if let (Some(s), Some(a), Some(d)) = (by("sync"), by("async"), by("softdep")) {
        let phase = |r: &sufs::bench::OrderingResult, i: usize| r.phases[i].1.max(1e-9);
        println!(
            "softdep vs async: {:.2}x the time over the paper's phases (create to compile), {:.2}x over all; \
             vs sync: creates {:.1}x faster, removes {:.1}x faster, {:.0}% fewer writes",
            paper(d) / paper(a).max(1e-9),
            total(d) / total(a).max(1e-9),
            phase(s, 0) / phase(d, 0),
            phase(s, 1) / phase(d, 1),
            100.0 * (1.0 - (d.sync_writes + d.async_writes) as f64 / (s.sync_writes + s.async_writes).max(1) as f64)
        );
    }
}

fn cmd_bench_update(
    trials: u32,
    seconds: u64,
    disk: &str,
    seed: u64,
    out: &Path,
    json: Option<PathBuf>,
) -> Result<(), Fail> {
    use sufs::bench;
    let disk = sufs::dev::DiskModel::by_name(disk)
        .ok_or_else(|| Fail(format!("unknown disk model {disk:?} (rz58, modern)"), 2))?;
    let o = bench::UpdateBenchOptions { trials, seconds, disk: disk.clone(), seed, ..Default::default() };
    let bar = indicatif::ProgressBar::new(4 * trials as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} trials  {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let results = bench::update_policy(&o, |label, t| {
        bar.set_message(format!("{label} trial {t}"));
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    println!(
        "Mogul 1994 §4.1 on the {} model: {} trials of {} simulated s each, cache {} blocks of {} bytes, seed {}\n",
        disk.name, trials, seconds, o.cache_blocks, o.block_size, seed
    );
    print!("{}", bench::update_policy_report(&results));
    let pu = &results[0];
    let aipu = &results[2];
    println!(
        "\nAIPU vs PU (delayed writes): max read response {:.1}x lower, std {:.1}x lower, mean {:.2}x",
        pu.max_ms / aipu.max_ms.max(1e-9),
        pu.std_ms / aipu.std_ms.max(1e-9),
        aipu.mean_ms / pu.mean_ms.max(1e-9)
    );
    let build = bench::kernel_build(&disk, 300, seed)?;
    println!("\nkernel-build-like workload (Table 4-3), 300 units:");
    println!("{:<6} {:>15} {:>12}", "policy", "blocks written", "redirties");
    for b in &build {
        println!("{:<6} {:>15} {:>12}", b.policy.to_string(), b.blocks_written, b.redirties);
    }
    bench::update_policy_plots(&results, out).map_err(|e| Fail(format!("plots: {e}"), 1))?;
    println!("\nplots: {}/update-policy-histogram.svg, {}/update-policy-bursts.svg", out.display(), out.display());
    if let Some(j) = json {
        let v = serde_json::json!({ "update_policy": results, "kernel_build": build });
        std::fs::write(&j, serde_json::to_string_pretty(&v)?).map_err(|e| Fail(format!("{}: {e}", j.display()), 1))?;
    }
    Ok(())
}

fn cmd_crashtest(ordering: Ordering, workload: &str, seed: u64, opts: &CrashOptions) -> Result<u8, Fail> {
    let names: Vec<&str> = if workload == "all" { crashtest::WORKLOADS.to_vec() } else { vec![workload] };
    let (mut states, mut violations) = (0, 0);
    for name in &names {
        let s = crashtest::run(ordering, name, seed, opts).map_err(|e| Fail(e.to_string(), 2))?;
        println!("{s}\n");
        states += s.states;
        violations += s.violations;
    }
    let what = format!("{} workload(s), ordering {ordering}, seed {seed}: {states} crash states", names.len());
    if violations == 0 {
        println!("crashtest: {what}, no violations");
        Ok(0)
    } else {
        println!("crashtest: {what}, VIOLATIONS: {violations}");
        Ok(1)
    }
}

fn cmd_dumpfs(image: &Path) -> Result<(), Fail> {
    let (dev, sb) = open_image(image, false)?;
    println!("magic     {:#x}  version {}", format::MAGIC, format::VERSION);
    println!("bsize     {}", sb.block_size);
    println!("blocks    {} ({} MiB)", sb.num_blocks, (sb.num_blocks * sb.block_size as u64) >> 20);
    println!(
        "groups    {} of {} blocks, {} inodes each ({} inode table blocks)",
        sb.ngroups,
        sb.blocks_per_group,
        sb.inodes_per_group,
        sb.inode_table_blocks()
    );
    println!("inodes    {}", sb.total_inodes());
    println!("free      {} blocks, {} inodes; {} directories", sb.free_blocks, sb.free_inodes, sb.ndirs);
    let mut flags = Vec::new();
    if sb.flags & format::SB_CLEAN != 0 {
        flags.push("clean");
    } else {
        flags.push("not clean (mounted or crashed)");
    }
    if sb.flags & format::SB_SOFTDEP != 0 {
        flags.push("last mounted with soft updates");
    } else if sb.flags & format::SB_ASYNC != 0 {
        flags.push("last mounted async");
    } else {
        flags.push("last mounted sync");
    }
    if sb.flags & format::SB_NEEDS_FSCK != 0 {
        flags.push("needs fsck (damage was found while mounted)");
    }
    println!("flags     {}", flags.join(", "));
    println!("mounts    {}", sb.mount_count);
    let snaps: Vec<String> = sb.snapshots.iter().filter(|&&s| s != 0).map(|s| s.to_string()).collect();
    println!("snapshots {}", if snaps.is_empty() { "none".into() } else { snaps.join(" ") });
    println!();
    println!("{:>5} {:>12} {:>10} {:>10} {:>8}", "group", "first block", "free blks", "free inos", "dirs");
    let mut buf = vec![0u8; sb.block_size as usize];
    for cg in 0..sb.ngroups {
        dev.read_block(sb.cg_header_block(cg), &mut buf)?;
        match format::CgHeader::decode(&buf, cg) {
            Ok(h) => {
                println!("{:>5} {:>12} {:>10} {:>10} {:>8}", cg, sb.cg_start(cg), h.free_blocks, h.free_inodes, h.ndirs)
            }
            Err(e) => println!("{:>5} {:>12} {e}", cg, sb.cg_start(cg)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("x").is_err());
    }
}
