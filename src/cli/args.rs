//! The command line: every command and its arguments (clap).

use clap::{Args, Parser, Subcommand};
use fuse_uring::Transport;
use std::path::PathBuf;
use sufs_fs::fs::shutdown::Shutdown;
use sufs_fs::fs::Ordering;
use sufs_fs::policy::UpdatePolicy;
use sufs_fs::volume::StoreKind;
use sufs_lab::crashtest::{self, End};
use sufs_mount::fuse::DEFAULT_THREADS;
use sufs_mount::helper;
use sufs_mount::options::parse_size;

/// The on-disk format `sufs mkfs` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DiskFormat {
    /// FreeBSD's UFS2, as newfs(8) makes it.
    Ufs2,
    /// sufs's own earlier format, retired: refused with a message.
    #[value(hide = true)]
    Sufs,
}

#[derive(Parser)]
#[command(name = "sufs", version, about = "A user-space FFS with soft updates, update policies and the Block Register")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

// Parsed once per run: `bench`'s flattened peer options make it the largest variant, at no cost.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// Make a file system on an image file (created sparse if missing) or a block device:
    /// FreeBSD's UFS2, as newfs(8) makes it.
    Mkfs {
        image: PathBuf,
        /// Size of a new image, e.g. 1G, 512M (default: the existing file's or device's size).
        #[arg(long, value_parser = parse_size)]
        size: Option<u64>,
        /// Block size (default newfs's 32768).
        #[arg(short = 'b', long)]
        block_size: Option<u32>,
        /// Leave this much at the end of the device outside the file system, for a volume
        /// snapshot's `reserved` exception store.
        #[arg(long, value_parser = parse_size)]
        snapshot_reserve: Option<u64>,
        /// The share of the data blocks only root may allocate, in percent (FFS's minfree;
        /// default 8).
        #[arg(short = 'm', long, value_parser = clap::value_parser!(u8).range(0..=sufs_fs::format::MAX_MINFREE as i64))]
        minfree: Option<u8>,
        /// The on-disk format: `ufs2`, FreeBSD's (docs/ufs2.md), the only one sufs makes (its
        /// own earlier format is retired).
        #[arg(long, value_enum, default_value_t = DiskFormat::Ufs2)]
        format: DiskFormat,
        /// The same as `--format ufs2` (the default).
        #[arg(long, hide = true, conflicts_with = "format")]
        ufs2: bool,
        /// The fragment size (newfs -f; default 4096).
        #[arg(short = 'f', long)]
        frag_size: Option<u32>,
        /// Bytes of data space per inode (newfs -i; default two fragments).
        #[arg(short = 'i', long)]
        bytes_per_inode: Option<u32>,
        /// The volume label (newfs -L).
        #[arg(short = 'L', long)]
        label: Option<String>,
    },
    /// Mount an image through FUSE. With no arguments: ./sufs.img (made, 1 GiB sparse, if missing)
    /// on ./mnt.
    Mount {
        #[arg(default_value = "sufs.img")]
        image: PathBuf,
        #[arg(default_value = "mnt")]
        dir: PathBuf,
        /// The write ordering (default: the image's, set by `sufs tunefs --ordering`; softdep
        /// if it has none).
        #[arg(long, value_enum)]
        ordering: Option<Ordering>,
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
        /// FUSE request threads (their CPU work takes turns on the file system's lock; reads and
        /// fsyncs wait for the device without it, so fsync-heavy parallel work gains from more).
        #[arg(long, default_value_t = DEFAULT_THREADS as u16, value_parser = clap::value_parser!(u16).range(1..=64))]
        threads: u16,
        /// How requests reach sufs: io_uring (FUSE over io_uring, when root has switched it on:
        /// `echo Y > /sys/module/fuse/parameters/enable_uring`), classic (/dev/fuse reads and
        /// writes), or auto (io_uring when the kernel offers it, else classic). The environment's
        /// SUFS_TRANSPORT, if set, is the default.
        #[arg(long, value_enum, env = "SUFS_TRANSPORT", default_value_t = Transport::Auto)]
        transport: Transport,
        /// Mount read-write even an image that needs fsck first (not unmounted cleanly after a
        /// sync or async mount, or marked for fsck when damage was found).
        #[arg(long)]
        force: bool,
        /// Mount options, comma-separated, as mount(8) takes them (docs/mount-options.md): ro, rw,
        /// dev, nodev, suid, nosuid, exec, noexec, sync, dirsync, async, relatime, strictatime,
        /// noatime, nodiratime, remount (of the mount on DIR, or on IMAGE if that is a mount
        /// point), and sufs's own: ordering=, cache=, update=, threads=, transport=, wait=, mkfs_size=.
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
        /// Check only and change nothing (fsck_ffs's -n; what a run without -y or -p does).
        #[arg(short = 'n', long = "no", conflicts_with_all = ["yes", "preen"])]
        no: bool,
        /// Use the superblock copy at block N (mkfs writes one at the first block of every
        /// cylinder group but the first); -y then rewrites the primary from it. On a UFS2 image N
        /// is a 512-byte sector, as fsck_ffs's -b has it (a group's copy is at its `cgsblock`).
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
    /// Change the superblock's settings of an unmounted, clean image (FreeBSD's tunefs): the
    /// minfree reserve, the volume label, the ordering a mount uses when given none.
    Tunefs {
        image: PathBuf,
        /// The share of the data blocks only root may allocate, in percent.
        #[arg(long, value_parser = clap::value_parser!(u8).range(0..=sufs_fs::format::MAX_MINFREE as i64))]
        minfree: Option<u8>,
        /// The volume label (at most 32 bytes; empty clears it).
        #[arg(long)]
        label: Option<String>,
        /// The ordering a mount uses when `--ordering` is not given.
        #[arg(long, value_enum)]
        ordering: Option<Ordering>,
        /// UFS2 only: whether FreeBSD enforces the image's POSIX.1e ACLs on a mount (`FS_ACLS`,
        /// FreeBSD's tunefs -a); sufs enforces them whatever this says.
        #[arg(long, value_parser = ["enable", "disable"])]
        posix_acls: Option<String>,
        /// Print the current settings (after the changes, if any).
        #[arg(short = 'p')]
        print: bool,
    },
    /// Grow an unmounted, clean image file and its file system (FreeBSD's growfs): the last
    /// group is extended and new groups added; a crash leaves the old or the new file system.
    Growfs {
        image: PathBuf,
        /// The new size of the image, e.g. 2G (larger than the file system).
        #[arg(long, value_parser = parse_size)]
        size: u64,
    },
    /// Print an inode, a directory, a file's block map, a raw block or the superblock of an
    /// unmounted image (FreeBSD's fsdb and ffsinfo); read-only, and works on a damaged image.
    Inspect {
        image: PathBuf,
        #[command(subcommand)]
        what: super::InspectCmd,
    },
    /// Write every delayed write of a mount (or of every sufs mount) and return once it is on
    /// disk. sync(1) does not reach a FUSE file system; this does.
    Sync {
        /// The mount point or its image (default: every sufs mount this process can see).
        on: Option<PathBuf>,
    },
    /// Shut a mount down as FS_IOC_SHUTDOWN does: it stops writing to the image at once (after
    /// writing everything, with fullsync or metaflush), every later request fails with EIO, and
    /// the unmount leaves the image as a crash would.
    Shutdown {
        /// The mount point or its image.
        on: PathBuf,
        /// The ioctl's flag: what is written first.
        #[arg(long, value_enum, default_value_t = Shutdown::Nologflush)]
        mode: Shutdown,
    },
    /// The volume under the file system: its copy-on-write volume snapshot (take, status,
    /// export, mount, delete) on an unmounted image.
    Volume {
        #[command(subcommand)]
        op: VolumeCmd,
    },
    /// The Block Register: reservations of free blocks for other components, on an unmounted
    /// image or (through its control channel, IMAGE.ctl) a mounted file system.
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
        /// The format the workload starts from: `ufs2`, FreeBSD's (newfs's layout, judged by the
        /// UFS2 checker), the only one.
        #[arg(long, value_enum, default_value_t = DiskFormat::Ufs2)]
        format: DiskFormat,
        /// The same as `--format ufs2` (the default).
        #[arg(long, hide = true, conflicts_with = "format")]
        ufs2: bool,
        /// UFS2: the fragment size (512 to 4096): blocks of 4096 bytes hold fragments, and
        /// files' tails are fragment runs. Default 512: eight fragments a block, newfs's ratio.
        #[arg(long)]
        fsize: Option<usize>,
    },
}

#[derive(Subcommand)]
pub(crate) enum VolumeCmd {
    /// The volume snapshot: a copy-on-write snapshot of the whole volume under the file system.
    Snapshot {
        #[command(subcommand)]
        op: SnapCmd,
    },
}

#[derive(Subcommand)]
pub(crate) enum SnapCmd {
    /// Take a snapshot of an unmounted volume. `--store reserved` keeps the old blocks in the area
    /// after the file system (mkfs --snapshot-reserve); `--store br` in a Block Register
    /// reservation of the file system itself.
    Create {
        image: PathBuf,
        #[arg(long, value_enum)]
        store: StoreKind,
        /// Blocks the br store reserves at first (no more than an eighth of the file system's).
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
pub(crate) enum FsSnapCmd {
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
pub(crate) enum BrCmd {
    /// Reserve NBLOCKS blocks under NAME (the file /.br/NAME).
    Reserve {
        name: String,
        nblocks: u64,
        /// Place the blocks near this physical block.
        #[arg(long)]
        hint: Option<u64>,
    },
    /// The physical runs of logical blocks OFFSET..OFFSET+COUNT: "offset start length" lines
    /// (on UFS2 addresses are fragments: a run's blocks are a block's fragments apart).
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

/// `sufs bench peers`: sizes default to the full comparison's; `--scale` shrinks them all for a quick run.
#[derive(Args, Clone)]
pub(crate) struct PeersArgs {
    /// File systems, comma-separated (default: all of them). A sufs peer may name an update
    /// policy after its ordering: sufs-softdep-pu, sufs-softdep-aipu, sufs-sync-wt (without one,
    /// the mount's default, aipu), and a transport last: sufs-softdep-classic, sufs-softdep-uring
    /// (without one, the mount's default: io_uring when the kernel offers it). A sufs peer's image
    /// is UFS2 as `sufs mkfs` makes it. fuse-ufs (FreeBSD's UFS2, mounted read-only) runs only
    /// the read workload.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "sufs-softdep,sufs-sync,sufs-async,fuse2fs,ext4-kernel,fuse-ufs"
    )]
    pub(crate) peers: Vec<String>,
    /// Workloads, comma-separated. Two long ones are off this default list: parallel (the
    /// files, a large file written and read cold, and mail, from 1, 2 and 4 threads) and coldread
    /// (Mogul's cold reads behind a steady writer, 60 s a file system). read: the copy's trees put
    /// on the file system, then listed, stat'ed and read with every cache cold.
    #[arg(long, value_delimiter = ',', default_value = "files,copy,andrew,postmark,fio,mail,stall,read")]
    pub(crate) workloads: Vec<String>,
    /// Multiply every count and size below (but the image's) by this.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) scale: f64,
    /// Empty files created, stat'ed and removed (1,000 to a directory).
    #[arg(long, default_value_t = 100_000)]
    pub(crate) files: usize,
    /// Trees copied in and removed.
    #[arg(long, value_delimiter = ',', default_value = "/usr/include,/usr/share/doc")]
    pub(crate) trees: Vec<PathBuf>,
    /// At most this many files of the trees.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) tree_files: usize,
    /// Source tree of the Andrew-like phases, and at most this many of its files.
    #[arg(long, default_value = "/usr/include")]
    pub(crate) andrew_tree: PathBuf,
    #[arg(long, default_value_t = 4000)]
    pub(crate) andrew_files: usize,
    /// PostMark: files in the initial pool, and transactions.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) postmark_files: usize,
    #[arg(long, default_value_t = 50_000)]
    pub(crate) postmark_tx: usize,
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// fio's file, and the time limit of each of its four jobs in seconds.
    #[arg(long, value_parser = parse_size, default_value = "2G")]
    pub(crate) fio_size: u64,
    #[arg(long, default_value_t = 30)]
    pub(crate) fio_runtime: u64,
    /// Mail delivery: messages each deliverer writes (16 KiB, fsync, rename), alone and four at once.
    #[arg(long, default_value_t = 2000)]
    pub(crate) mail_messages: usize,
    /// Stall: MiB written without fsync, then seconds of creates every 10 ms (their latency).
    #[arg(long, default_value_t = 600)]
    pub(crate) stall_mb: u64,
    #[arg(long, default_value_t = 45.0)]
    pub(crate) stall_secs: f64,
    /// Parallel, per worker thread: empty files created, stat'ed and removed; MiB written in
    /// 64 KiB writes, then read back cold; mail messages delivered.
    #[arg(long, default_value_t = 5000)]
    pub(crate) parallel_files: usize,
    #[arg(long, default_value_t = 64)]
    pub(crate) parallel_mb: u64,
    #[arg(long, default_value_t = 500)]
    pub(crate) parallel_messages: usize,
    /// Coldread: seconds of timed cold reads, and the writer's rate meanwhile in MiB/s (not scaled).
    #[arg(long, default_value_t = 60.0)]
    pub(crate) coldread_secs: f64,
    #[arg(long, default_value_t = 2.0)]
    pub(crate) coldread_rate: f64,
    /// Run every workload this many times on each peer, the peers' order rotated each round,
    /// and report each phase's median (the first mount after a pause runs on a cold CPU).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=99))]
    pub(crate) rounds: u16,
    /// Buffer cache of every sufs mount (default: the mount's, 128M).
    #[arg(long, value_parser = parse_size)]
    pub(crate) sufs_cache: Option<u64>,
    /// Size of every image.
    #[arg(long, value_parser = parse_size, default_value = "4G")]
    pub(crate) image_size: u64,
    /// Write every image file whole before its mkfs, as a disk holds every block (a sparse
    /// image pays for the host file system's allocation at each flush of a new region).
    #[arg(long)]
    pub(crate) written_images: bool,
    /// Where the images and mount points go.
    #[arg(long, default_value = "/var/tmp")]
    pub(crate) dir: PathBuf,
    /// Directory for the SVG plots.
    #[arg(long, default_value = "bench-out")]
    pub(crate) out: PathBuf,
    /// Also write the results as JSON here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
}

// Parsed once per run, as `Cmd`: the peers' options make it the largest variant, at no cost.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub(crate) enum BenchCmd {
    /// The same workloads (many empty files; real trees copied; Andrew-like; PostMark-
    /// like; fio; mail delivery with fsync, alone and four at once; creates behind a burst of writes;
    /// a tree read cold; and, when named, parallel and coldread) through the mounts of sufs softdep, sync and async, fuse2fs
    /// and kernel ext4 on a loop device, and fuse-ufs (the read only), each on a fresh image; a table, plots and JSON.
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
    /// Terabyte images and millions of files: mkfs, mount and fsck of an empty sparse image
    /// beside mkfs.ext4 and e2fsck; creates, lookups, listing and removal of `--files` files
    /// through the library, in a tree and in one directory, with each step's peak resident
    /// memory and soft updates' peak dependency count; fsck of the tree beside e2fsck of the
    /// same tree on ext4.
    Scale {
        /// Size of the empty sparse image.
        #[arg(long, value_parser = parse_size, default_value = "1T")]
        size: u64,
        /// Files created, checked and removed.
        #[arg(long, default_value_t = 1_000_000)]
        files: usize,
        /// Where the images go (and the tree `mkfs.ext4 -d` copies).
        #[arg(long, default_value = "/var/tmp")]
        dir: PathBuf,
        /// Also write the results as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// One library step of `bench scale`, run by it in a child process (its own resident
    /// memory); prints what it measured as one JSON line.
    #[command(hide = true)]
    ScaleStep {
        image: PathBuf,
        #[arg(long, value_enum)]
        step: sufs_lab::bench_scale::Step,
        #[arg(long, value_enum)]
        layout: sufs_lab::bench_scale::Layout,
        #[arg(long)]
        files: usize,
        /// Buffer cache in blocks.
        #[arg(long, default_value_t = 32768)]
        cache_blocks: usize,
        /// Soft updates' memory bound (dependency structures).
        #[arg(long)]
        softdep_limit: Option<usize>,
    },
    /// The floor peer of `bench peers`: a file system kept in memory, mounted on DIR in the
    /// foreground and served as sufs's default mount is (the same mount options, INIT and
    /// transports), counting its FUSE requests by opcode; gone at the unmount.
    #[command(hide = true)]
    FloorServe {
        dir: PathBuf,
        /// As `sufs mount --transport`.
        #[arg(long, value_enum, env = "SUFS_TRANSPORT", default_value_t = Transport::Auto)]
        transport: Transport,
        /// As `sufs mount --threads`.
        #[arg(long, default_value_t = DEFAULT_THREADS as u16, value_parser = clap::value_parser!(u16).range(1..=64))]
        threads: u16,
        /// Write the request counts here at the unmount (`fuse_messages`, as `sufs mount --stats`).
        #[arg(long)]
        stats: Option<PathBuf>,
        /// Answer the control channel's `stats` request on this socket while mounted.
        #[arg(long)]
        ctl: Option<PathBuf>,
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
    /// The three papers' tables and figures, each row with the paper's value beside sufs's:
    /// writes OUT/soft-updates.md, mogul.md, block-register.md with their JSON and SVGs. Exit 1
    /// when one of a paper's qualitative claims does not hold on this run.
    Papers {
        /// One paper (soft-updates, mogul, block-register); all three when absent.
        #[arg(long, value_parser = ["soft-updates", "softdep", "mogul", "block-register", "br"])]
        paper: Option<String>,
        /// Minutes instead of an hour: every run scaled down.
        #[arg(long)]
        quick: bool,
        /// Where the pages go.
        #[arg(long, default_value = "docs/papers")]
        out: PathBuf,
        /// Where image files go.
        #[arg(long, default_value = "/var/tmp")]
        dir: PathBuf,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

pub(crate) fn workload_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(crashtest::WORKLOADS.iter().copied().chain([crashtest::CONCURRENT, "all"]))
}
