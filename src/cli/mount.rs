//! Mounting: `sufs mount` (the gate on unclean images, the daemon, the syncer and control channel), mount(8)'s helper, remount and `sufs umount`.

use clap::Parser;
use fuse_uring::{self, Transport};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use sufs_fs::clock::{Clock, RealClock};
use sufs_fs::dev::BlockDevice;
use sufs_fs::files::{open_private, private_dir, write_private, Existing};
use sufs_fs::format;
use sufs_fs::format::Superblock;
use sufs_fs::fs::{Fs, FsStats, MountOptions, Ordering};
use sufs_fs::policy::SyncerOptions;
use sufs_fs::volume::{PoolOptions, Refiller, SnapshotDevice, StoreKind, VolumeDevice};
use sufs_mount::ctl::{self, CtlClient, CtlServer};
use sufs_mount::fuse::{self as fusemount, lock, FuseOptions, SufsFuse};
use sufs_mount::helper;
use sufs_mount::options::MountOpts;
use sufs_mount::syncer::Syncer;

use super::*;

/// Run as `mount.fuse.sufs SPEC DIR [-sfnv] [-o OPTS]` (by mount(8)): the same as
/// `sufs mount -q --no-create IMAGE DIR -o OPTS`, or a remount. Exit codes as mount(8)'s
/// helpers: 0, 1 for a bad call, 32 for a failed mount.
pub(crate) fn helper_main(args: &[String]) -> ExitCode {
    if let Err(e) = helper::hand_off(args) {
        eprintln!("{}: {e}", helper::HELPER_NAME);
        return ExitCode::from(1);
    }
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

pub(crate) struct MountArgs {
    /// The ordering asked for; None: the image's default (`sufs tunefs --ordering`).
    pub(crate) ordering: Option<Ordering>,
    pub(crate) foreground: bool,
    pub(crate) stats: Option<PathBuf>,
    pub(crate) cache: u64,
    pub(crate) size: u64,
    pub(crate) ro: bool,
    pub(crate) sync: SyncerOptions,
    pub(crate) async_full_blocks: bool,
    pub(crate) softdep_limit: usize,
    pub(crate) threads: usize,
    /// How requests reach sufs (`mount::transport`).
    pub(crate) transport: Transport,
    /// Mount the volume snapshot (read-only) instead of the file system.
    pub(crate) snapshot: bool,
    /// Mount read-write even an image that `mount_gate` refuses.
    pub(crate) force: bool,
    /// The `-o` options (those above already merged in).
    pub(crate) opts: MountOpts,
    /// `sufs` arguments that run this mount again (in the foreground, as its daemon).
    pub(crate) reexec: Vec<String>,
    /// Make a missing image (`sufs mount`; not the mount helper, unless `mkfs_size`).
    pub(crate) make_missing: bool,
    /// Nothing on stdout or stderr on success; notes go to the image's log.
    pub(crate) quiet: bool,
}

/// What the superblock says of a read-write mount (soft updates §6, instant restart): a clean
/// image mounts; an unclean one last mounted with soft updates holds only leaks and link counts
/// too high, so it mounts at once and `Recovery::Background` checks it; an unclean one last
/// mounted `sync` or `async`, or one marked for fsck, must be checked first (on UFS2, which
/// records only whether the last mount ran soft updates, one last mounted without them).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Recovery {
    None,
    Background,
}

pub(crate) fn mount_gate(image: &Path, sb: &Superblock, force: bool) -> Result<Recovery, Fail> {
    let why = if sb.flags & format::SB_NEEDS_FSCK != 0 {
        "damage was found while it was mounted"
    } else if sb.flags & format::SB_CLEAN != 0 {
        return Ok(Recovery::None);
    } else if sb.flags & format::SB_SOFTDEP != 0 {
        return Ok(Recovery::Background);
    } else {
        // UFS2 records only FS_DOSOFTDEP: a sync and an async mount look alike.
        "it was not unmounted cleanly, and its last mount was not soft updates (sync or async: FFS needs fsck after a crash)"
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

pub(crate) fn cmd_mount(image: &Path, dir: &Path, args: MountArgs) -> Result<(), Fail> {
    args.opts.check_norecovery(args.ro || args.snapshot).map_err(|e| Fail(e, 32))?;
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
        if mount_again(image, dir, root, ro, args.quiet)? {
            return Ok(());
        }
        prepare_image(image, size, &args.opts, args.quiet, args.make_missing)?;
    }
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(|e| Fail(format!("cannot create {}: {e}", dir.display()), 1))?;
    }
    if !foreground {
        return spawn_daemon(image, dir, args.reexec, args.quiet);
    }
    // A read-only mount opens the image for writing where it can, so that a remount may make it
    // read-write.
    let (dev, sb, writable) = match open_image_any(image, !ro || !snapshot) {
        Ok((dev, sb)) => (dev, sb, true),
        Err(_) if ro => open_image_any(image, false).map(|(dev, sb)| (dev, sb, false))?,
        Err(e) => return Err(e),
    };
    let lock_file = std::fs::File::open(image)?;
    if lock_file.try_lock().is_err() {
        return Err(Fail(format!("{} is already mounted (another sufs holds it)", image.display()), 32));
    }
    let recovery = if ro { Recovery::None } else { mount_gate(image, &sb, args.force)? };
    let writeback = args.opts.writeback_cache.unwrap_or(false);
    let clock: Arc<dyn Clock> = Arc::new(if writeback { RealClock::coarse() } else { RealClock::new() });
    let ordering = ordering.unwrap_or_else(|| default_ordering(&sb));
    let opts = MountOptions { ordering, cache_blocks: (cache / sb.block_size as u64) as usize, readonly: ro };
    let Stack { dev, vol, can_write } =
        volume_stack(image, Arc::new(dev), opts.cache_blocks as u64, ro, snapshot, writable)?;
    let mut fs = Fs::mount(dev, opts, clock).map_err(|e| Fail(format!("cannot mount {}: {e}", image.display()), 32))?;
    fs.set_async_full_blocks(async_full_blocks);
    fs.set_softdep_limit(softdep_limit);
    fs.set_atime_policy(args.opts.atime_policy());
    fs.set_sync_mode(args.opts.sync_mode());
    fs.allow_remount_rw(can_write);
    let mounted_on = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    fs.set_last_mounted(mounted_on.as_os_str().as_encoded_bytes())
        .map_err(|e| Fail(format!("cannot mount {}: {e}", image.display()), 32))?;
    let shared = Arc::new(Mutex::new(fs));
    let mut ctl = CtlServer::start(&ctl::socket_path(image), shared.clone())?;
    let mut refiller = vol.filter(|v| v.kind() == StoreKind::Br).map(|v| Refiller::start(v, shared.clone()));

    let fuse = FuseOptions {
        transport: args.transport,
        threads: args.threads,
        writeback_cache: writeback,
        sufs_checks: args.opts.sufs_checks.unwrap_or(false),
    };
    let abs = std::fs::canonicalize(image).unwrap_or_else(|_| image.to_path_buf());
    let mut config = fusemount::config(format!("sufs:{}", abs.display()), ro, &fuse);
    config.mount_options.extend(fuse_options);
    let sufs = SufsFuse::new(shared.clone(), &fuse);
    let negotiated = sufs.negotiated();
    let notifier = sufs.notifier_slot();
    let mut session = fuser::Session::new(sufs, dir, &config)
        .map_err(|e| Fail(format!("cannot mount {} on {}: {e}", image.display(), dir.display()), 32))?;
    let _ = notifier.set(session.notifier());
    // io_uring asked for and not offered: no mount (unmounted again before anyone is told of
    // it), but the file system is unmounted cleanly all the same.
    let refused = fuse_uring::refusal(fuse.transport, &negotiated);
    ctl.on_stale(fusemount::stale_sink(session.notifier()));
    let handle = unmount_on_signals(session.unmount_callable(), &mounted_on)?;
    let mut syncer = Syncer::start(shared.clone(), sync);
    let bgfsck = (recovery == Recovery::Background && !snapshot && refused.is_none())
        .then(|| start_background_fsck(image.to_path_buf(), shared.clone()))
        .flatten();
    let run = match refused {
        Some(why) => {
            drop(session);
            Err(Fail(
                format!("cannot mount {} on {} with --transport uring: {why}", image.display(), dir.display()),
                32,
            ))
        }
        None => {
            notify_ready();
            fuse_uring::run(session, fuse.transport, &negotiated, fuse.threads, &mut |m| eprintln!("sufs: {m}"))
                .map_err(|e| Fail(format!("FUSE session ended with an error: {e}"), 1))
        }
    };
    handle.close();
    syncer.stop();
    ctl.stop();
    // A background fsck still running finishes first: it deletes its snapshot when done.
    if let Some(t) = bgfsck {
        let _ = t.join();
    }
    if let Some(r) = refiller.as_mut() {
        r.stop();
    }
    let mut fs = lock(&shared);
    let unmounted = fs
        .unmount()
        .map_err(|e| Fail(format!("unmount of {} failed: {e}", image.display()), 1))
        .and_then(|()| report_unmount(image, &fs.stats(), stats));
    // `sufs umount` waits for this (its exit status is the unmount's).
    ctl.unmounted(unmounted.as_ref().map(|_| ()).map_err(|Fail(m, _)| m.clone()));
    unmounted?;
    if let Some(sd) = fs.softdep_stats() {
        // The memory bound's witness: the most dependency structures counted at once.
        println!(
            "sufs: soft updates: at most {} dependency structures at once (bound {softdep_limit}), {} roll-backs, {} tasks run",
            sd.max_deps, sd.rollbacks, sd.tasks_run
        );
    }
    drop(lock_file);
    run
}

/// SIGINT, SIGTERM and SIGHUP unmount `dir` (the session then ends); the handle stops the
/// watch. A busy mount point (a file just closed still held by the kernel) is tried again as
/// `sufs umount` does, then detached lazily (the session ends once its last user lets go):
/// a signal whose unmount found it busy once left the mount running for good.
pub(crate) fn unmount_on_signals(
    mut unmounter: fuser::SessionUnmounter,
    dir: &Path,
) -> Result<signal_hook::iterator::Handle, Fail> {
    let mut signals = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM, libc::SIGHUP])?;
    let handle = signals.handle();
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            let r = kernel_unmount(&dir, false).or_else(|busy| {
                eprintln!("sufs: unmount of {}: {busy}; detached instead", dir.display());
                kernel_unmount(&dir, true)
            });
            // (fuser's own unmount, the last resort: it knows how it mounted)
            if let Err(e) = r.or_else(|_| unmounter.unmount()) {
                eprintln!("sufs: unmount: {e}");
            }
        }
    });
    Ok(handle)
}

/// The kernel's unmount of the FUSE mount on `dir` (`umount2` as root, `fusermount3 -u`
/// otherwise; with `lazy`, detached: gone from the tree at once, ended once unused). A file
/// just closed may still hold the mount for an instant (the kernel sends RELEASE in the
/// background and keeps its reference until the daemon answers), so busy is tried again for
/// about two seconds.
pub(crate) fn kernel_unmount(dir: &Path, lazy: bool) -> std::io::Result<()> {
    let root = unsafe { libc::geteuid() } == 0;
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())?;
    let mut tries = 0;
    loop {
        let err = if root {
            let flags = if lazy { libc::MNT_DETACH } else { 0 };
            if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
                return Ok(());
            }
            std::io::Error::last_os_error()
        } else {
            let out =
                std::process::Command::new("fusermount3").arg(if lazy { "-uz" } else { "-u" }).arg(dir).output()?;
            if out.status.success() {
                return Ok(());
            }
            // fusermount3 tells why only in words: "Device or resource busy".
            let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
            let busy = why.contains("busy");
            if !busy {
                return Err(std::io::Error::other(why));
            }
            std::io::Error::from_raw_os_error(libc::EBUSY)
        };
        let busy = err.raw_os_error() == Some(libc::EBUSY);
        if !busy || tries == 100 {
            return Err(err);
        }
        tries += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Mounted already (and root): the same file system at `dir` too, as Linux does for a block
/// device mounted twice. True if so.
fn mount_again(image: &Path, dir: &Path, root: bool, ro: bool, quiet: bool) -> Result<bool, Fail> {
    if !(image.exists() && root && helper::mount_point_of(image).is_some()) {
        return Ok(false);
    }
    let canon = |p: &Path| std::fs::canonicalize(p).ok();
    if canon(dir).is_some() && canon(dir) == helper::mount_point_of(image).and_then(|m| canon(&m)) {
        return Err(Fail(format!("{} is already mounted on {}", image.display(), dir.display()), 32));
    }
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(|e| Fail(format!("cannot create {}: {e}", dir.display()), 32))?;
    }
    let mp = helper::mount_again(image, dir, ro).map_err(|e| Fail(e, 32))?;
    say(image, quiet, &format!("{} is mounted on {}: {} shows it too", image.display(), mp.display(), dir.display()));
    Ok(true)
}

/// Before a mount's daemon starts: waits for an image another daemon still holds, preens it if
/// asked to (`-o preen`, unless `-o norecovery`: the image is mounted as it is), and makes the image if asked to (`-o mkfs_size`) or if it is missing
/// (unless `--no-create`).
fn prepare_image(image: &Path, size: u64, opts: &MountOpts, quiet: bool, make_missing: bool) -> Result<(), Fail> {
    if image.exists() {
        let wait = opts.wait.unwrap_or(helper::DEFAULT_WAIT_SECS);
        helper::wait_for_image(image, wait, &mut |m| say(image, quiet, m)).map_err(|e| Fail(e, 32))?;
    }
    if opts.preen
        && !opts.norecovery
        && image.exists()
        && opts.mkfs_size.is_none_or(|s| std::fs::metadata(image).is_ok_and(|m| m.len() == s))
    {
        preen_first(image)?;
    }
    if let Some(want) = opts.mkfs_size {
        mkfs_sized(image, want, quiet)?;
    } else if !image.exists() {
        if !make_missing {
            return Err(Fail(
                format!(
                    "{} does not exist (make it with `sufs mkfs`, or ask for it with -o mkfs_size=SIZE)",
                    image.display()
                ),
                32,
            ));
        }
        // A missing image is made as `sufs mkfs` makes one: UFS2.
        let made = newfs_image(image, Some(size), Default::default())?;
        let sb = &made.sb;
        let mib = (sb.fs_size as u64 * sb.fs_fsize as u64) >> 20;
        say(image, quiet, &format!("made a UFS2 file system of {mib} MiB on {} (newfs's defaults)", image.display()));
    }
    Ok(())
}

/// The device a mount works on, the volume under it if it has a snapshot, and whether a remount
/// may make the mount read-write.
struct Stack {
    dev: Arc<dyn BlockDevice>,
    vol: Option<Arc<VolumeDevice>>,
    can_write: bool,
}

/// The device a mount works on. A volume snapshot: §4's start-up (the store found read-only, then
/// copy-on-write, then the read-write mount), or with `snapshot` the snapshot itself (read-only).
/// Also whether a remount may make the mount read-write.
fn volume_stack(
    image: &Path,
    base: Arc<dyn BlockDevice>,
    cache_blocks: u64,
    ro: bool,
    snapshot: bool,
    writable: bool,
) -> Result<Stack, Fail> {
    // A br store's low watermark and refills: a full cache's writes, but no more than an eighth
    // of the file system (on a smaller one the store could never reach the watermark, and every
    // refill would fail for want of space, under the mount's lock).
    let sb = Superblock::probe(|off, buf| sufs_fs::dev::read_bytes(base.as_ref(), off, buf))
        .map_err(|e| Fail(format!("{}: {e}", image.display()), 32))?;
    let want = (cache_blocks + 1024).min(PoolOptions::cap(&sb));
    let pool = PoolOptions { low_watermark: want, grow: want, ..Default::default() };
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
    Ok(Stack { dev, vol, can_write })
}

/// What a mount did, said at its unmount: a line of device and cache counts, and with `--stats`
/// all of them as JSON in a file.
fn report_unmount(image: &Path, st: &FsStats, stats: Option<PathBuf>) -> Result<(), Fail> {
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
        write_private(&p, serde_json::to_string_pretty(st)?.as_bytes())
            .map_err(|e| Fail(format!("cannot write {}: {e}", p.display()), 1))?;
    }
    Ok(())
}

pub(crate) const READY_ENV: &str = "SUFS_READY_FD";

/// Runs this same command in the foreground as a detached child and returns once it has
/// mounted (or failed). The child's output (its unmount statistics, any error) goes to a log
/// file beside the image, so that nothing it prints later can block a pipe of the caller's.
pub(crate) fn spawn_daemon(image: &Path, dir: &Path, mut args: Vec<String>, quiet: bool) -> Result<(), Fail> {
    use std::io::{Read, Seek};
    use std::os::fd::FromRawFd;
    use std::os::unix::process::CommandExt;
    let log_path = log_path(image)?;
    let mut log = open_private(&log_path, Existing::Append).map_err(|e| Fail(format!("cannot open log {e}"), 1))?;
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

/// Where a device's mount logs as root: a directory only root may write to (a log in a directory
/// everybody writes to, such as /var/tmp, could be a link another user planted).
pub(crate) const DEVICE_LOG_DIR: &str = "/var/log/sufs";

/// Where a mount's daemon writes: beside the image (`IMAGE.log`), or for a device `NAME.log` in a
/// directory of the caller's only: `DEVICE_LOG_DIR` for root, else `$XDG_RUNTIME_DIR/sufs` or
/// `/var/tmp/sufs-UID` (made 0700 if missing, refused if anybody else may write to it).
pub(crate) fn log_path(image: &Path) -> Result<PathBuf, Fail> {
    if image.is_file() {
        return Ok(PathBuf::from(format!("{}.log", image.display())));
    }
    let uid = unsafe { libc::geteuid() };
    let dir = if uid == 0 {
        PathBuf::from(DEVICE_LOG_DIR)
    } else if let Some(run) = std::env::var_os("XDG_RUNTIME_DIR") {
        PathBuf::from(run).join("sufs")
    } else {
        PathBuf::from(format!("/var/tmp/sufs-{uid}"))
    };
    let dir = private_dir(&dir).map_err(|e| Fail(format!("log directory {e}"), 1))?;
    let name = image.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(dir.join(format!("{name}.log")))
}

/// A note on the way to a mount: on stderr, or (quiet, as the mount helper is) in the log.
pub(crate) fn say(image: &Path, quiet: bool, msg: &str) {
    if !quiet {
        eprintln!("sufs: {msg}");
        return;
    }
    match log_path(image).and_then(|p| open_private(&p, Existing::Append).map_err(|e| Fail(e.to_string(), 1))) {
        Ok(mut f) => {
            let _ = writeln!(f, "sufs: {msg}");
        }
        // Nowhere safe to write it: said on stderr after all.
        Err(Fail(why, _)) => eprintln!("sufs: {msg} (not logged: {why})"),
    }
}

/// `-o preen`: `sufs fsck -p` on the image first (an image marked clean is not scanned); what
/// it repaired goes to the mount's log, as a mount prints nothing when all is well; one with
/// more than a crash leaves is refused, untouched.
fn preen_first(image: &Path) -> Result<(), Fail> {
    let fail = |m: String| Fail(format!("{}: preen: {m}", image.display()), 32);
    // Held while fsck runs: no mount may start meanwhile.
    let lock = std::fs::File::open(image).map_err(|e| fail(e.to_string()))?;
    lock.try_lock().map_err(|_| fail("the image is in use".into()))?;
    let (_, sb) = open_image_any(image, false).map_err(|Fail(m, _)| fail(m))?;
    preen_ufs2_first(image, &sb).map_err(|Fail(m, _)| fail(m))
}

/// `-o preen` of a UFS2 image: skipped when the superblock says clean (as fsck_ffs -p skips it);
/// otherwise fsck_ffs's preen (`fsck::ufs2::repair`), which writes nothing unless every finding
/// is one a soft-updates crash leaves.
fn preen_ufs2_first(image: &Path, sb: &sufs_fs::format::Superblock) -> Result<(), Fail> {
    use sufs_fs::format::{SB_CLEAN, SB_NEEDS_FSCK};
    if sb.flags & SB_CLEAN != 0 && sb.flags & SB_NEEDS_FSCK == 0 {
        return Ok(());
    }
    let f = std::fs::OpenOptions::new().read(true).write(true).open(image).map_err(|e| Fail(e.to_string(), 32))?;
    let len = f.metadata().map_err(|e| Fail(e.to_string(), 32))?.len();
    let mode = sufs_fs::fsck::ufs2::RepairMode::Preen;
    let out = sufs_fs::fsck::ufs2::repair(&f, len, &Default::default(), mode).map_err(|e| Fail(e.to_string(), 32))?;
    if let Some(why) = &out.refused {
        return Err(Fail(format!("{why}: run `sufs fsck -y` first"), 32));
    }
    f.sync_all().map_err(|e| Fail(e.to_string(), 32))?;
    let left = out.after.as_ref().map_or(0, |a| a.findings.len());
    if left > 0 {
        return Err(Fail(format!("{left} findings left after the preen: run `sufs fsck -y` first"), 32));
    }
    let msg = format!(
        "{} was not unmounted cleanly: preened before mounting: {} findings, {}",
        image.display(),
        out.before.findings.len(),
        if out.done.is_empty() { "nothing to repair" } else { "repaired" }
    );
    say(image, true, &msg);
    Ok(())
}

/// `-o mkfs_size=SIZE`: a new file system of SIZE bytes on the image (a regular file, made
/// anew), unless it already is an image of exactly that size in the format asked for (UFS2 with
/// `ufs2`, `-o mkfs_format=ufs2`). For test harnesses, whose "make a file system of this size"
/// for FUSE can only be a mount option.
pub(crate) fn mkfs_sized(image: &Path, size: u64, quiet: bool) -> Result<(), Fail> {
    match std::fs::metadata(image) {
        Ok(m) if !m.is_file() => {
            return Err(Fail(format!("mkfs_size: {} is not a regular file", image.display()), 32));
        }
        Ok(m) if m.len() == size && open_image_any(image, false).is_ok() => return Ok(()),
        Ok(_) => std::fs::remove_file(image).map_err(|e| Fail(format!("mkfs_size: {}: {e}", image.display()), 32))?,
        Err(_) => {}
    }
    let made = format!("made a new file system of {size} bytes on {} (mkfs_size)", image.display());
    newfs_image(image, Some(size), Default::default()).map_err(|Fail(m, _)| Fail(format!("mkfs_size: {m}"), 32))?;
    say(image, quiet, &made);
    Ok(())
}

/// A remount of the sufs mount on `dir` (root): the kernel's flags by mount(2), and what the
/// file system applies itself through the mount's control channel. Read-only goes to the
/// kernel first (it refuses while files are open for writing), then the file system, which
/// writes everything and marks the image clean; read-write goes to the file system first (it
/// refuses an image that needs fsck), then the kernel.
pub(crate) fn cmd_remount(dir: &Path, opts: &MountOpts) -> Result<(), Fail> {
    use sufs_fs::fs::mountopt::{AtimePolicy, Remount};
    let (abs, image) = mounted_image(dir)?;
    if unsafe { libc::geteuid() } != 0 {
        return Err(Fail(format!("remount of {}: only root can remount", dir.display()), 32));
    }
    let fail = |e: String| Fail(format!("remount of {}: {e}", dir.display()), 32);
    let sock = ctl::socket_path(Path::new(&image));
    let mut c = CtlClient::connect(&sock).map_err(|e| fail(e.to_string()))?;
    let mut call = |changes: Remount| -> Result<Remount, Fail> {
        c.call(&ctl::Request::Remount { changes }).and_then(ctl::Reply::into_mount).map_err(|e| fail(e.to_string()))
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

pub(crate) fn notify_ready() {
    use std::os::fd::FromRawFd;
    if let Some(fd) = std::env::var(READY_ENV).ok().and_then(|s| s.parse::<i32>().ok()) {
        let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
        let _ = f.write_all(b"ready\n");
    }
}

/// `sufs umount DIR`: the kernel's unmount, then the daemon's (written everything and marked the
/// image clean): its result, through the control channel, is this command's (`Request::AwaitUnmount`).
pub(crate) fn cmd_umount(dir: &Path) -> Result<(), Fail> {
    // A snapshot mount is read-only, the floor writes nothing: nothing to wait for once gone.
    let (abs, image) = match mount_source(dir)? {
        (abs, Some(s)) if s.starts_with("sufs-snapshot:") || s == sufs_mount::floor::SOURCE => (abs, None),
        _ => {
            let (abs, image) = mounted_image(dir)?;
            (abs, Some(image))
        }
    };
    // Set before the kernel's unmount: the daemon may be done an instant after it.
    let mut watch = image.as_deref().map(|image| {
        let sock = ctl::socket_path(Path::new(image));
        CtlClient::connect(&sock).and_then(|mut c| c.await_unmount().map(|()| c))
    });
    if let Err(e) = kernel_unmount(&abs, false) {
        return Err(Fail(format!("cannot unmount {}: {e}", dir.display()), 1));
    }
    let Some(image) = image else { return Ok(()) };
    // Still shown elsewhere (a second mount of the image): its daemon goes on serving.
    if sufs_mount::helper::mount_point_of(Path::new(&image)).is_some() {
        return Ok(());
    }
    match watch.as_mut() {
        Some(Ok(c)) => c.unmount_result().map_err(|e| {
            let log = log_path(Path::new(&image)).map(|p| p.display().to_string()).unwrap_or_else(|Fail(m, _)| m);
            Fail(format!("{}: {e} (log: {log})", dir.display()), 1)
        })?,
        Some(Err(e)) => eprintln!("sufs: {image}: cannot learn how its unmount goes ({e}); its log says"),
        None => {}
    }
    // The mount process holds a lock on the image until it has written everything.
    let f = std::fs::File::open(&image)?;
    for pause in lock_pauses() {
        if f.try_lock().is_ok() {
            return Ok(());
        }
        std::thread::sleep(pause);
    }
    Err(Fail(format!("{image} is still busy after 5 minutes"), 1))
}

/// The pauses between looks at the image's lock, 5 minutes in all: short at first, since the
/// daemon gives the lock up an instant after answering `Unmounted` (a first pause of 50 ms
/// was most of what every unmount took past the file system's own writes), then 50 ms.
fn lock_pauses() -> impl Iterator<Item = Duration> {
    let first = (0..6).map(|k| Duration::from_millis(1 << k));
    let spent: Duration = first.clone().sum();
    let rest = (Duration::from_secs(300) - spent).as_millis() / 50;
    first.chain(std::iter::repeat_n(Duration::from_millis(50), rest as usize))
}

/// Instant restart: an image that soft updates left unclean is checked in the background once the
/// mount has started, as `sufs fsck --background` does but with the requests going to the file
/// system directly (not its control channel), and what it reclaims goes to the mount's log.
pub(crate) fn start_background_fsck(image: PathBuf, fs: sufs_fs::fs::SharedFs) -> Option<std::thread::JoinHandle<()>> {
    let spawned = std::thread::Builder::new().name("sufs-bgfsck".into()).spawn(move || {
        println!("sufs: {} was not unmounted cleanly: checking it in the background", image.display());
        match cmd_fsck_background(&image, Some(fs.clone())) {
            Ok(4) => {
                lock(&fs).damaged("background fsck found violations".into());
                println!("sufs: background fsck of {}: violations, the image is marked for fsck", image.display())
            }
            Ok(code) => println!("sufs: background fsck of {} done (exit {code})", image.display()),
            Err(e) => println!("sufs: background fsck of {} failed: {}", image.display(), e.0),
        }
    });
    spawned.map_err(|e| log::error!("background fsck: {e}")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sufs umount` looks again after a millisecond, not after 50, and still gives the daemon
    /// 5 minutes in all.
    #[test]
    fn the_lock_is_looked_at_soon_and_for_5_minutes() {
        let pauses: Vec<Duration> = lock_pauses().collect();
        assert_eq!(pauses[0], Duration::from_millis(1));
        let total: Duration = pauses.iter().sum();
        assert!(total <= Duration::from_secs(300) && total > Duration::from_secs(299), "{total:?}");
    }
}
