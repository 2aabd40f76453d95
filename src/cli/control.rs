//! Commands to a running mount through its control channel (sync, shutdown, snapshots, the Block Register) and to volumes.

use fuse_uring::Transport;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use sufs_fs::br::Reservation;
use sufs_fs::clock::{Clock, RealClock};
use sufs_fs::dev::{BlockDevice, FileDevice};
use sufs_fs::fs::shutdown::Shutdown;
use sufs_fs::fs::{Fs, MountOptions, Ordering};
use sufs_fs::policy::{SyncerOptions, UpdatePolicy};
use sufs_fs::snapshot::{self, SnapInfo};
use sufs_fs::volume::{self, PoolOptions, VolumeDevice};
use sufs_mount::ctl::{self, CtlClient};
use sufs_mount::fuse::{self as fusemount, FuseOptions, SufsFuse, DEFAULT_THREADS};
use sufs_mount::helper::mount_point_of;
use sufs_mount::options::MountOpts;

use super::*;

/// The image a sufs mount on `dir` serves (from /proc/self/mountinfo).
pub(crate) fn mounted_image(dir: &Path) -> Result<(PathBuf, String), Fail> {
    match mount_source(dir)? {
        (abs, Some(source)) if source.starts_with("sufs:") => Ok((abs, source.trim_start_matches("sufs:").to_string())),
        _ => Err(Fail(format!("{} is not a sufs mount", dir.display()), 1)),
    }
}

/// Has the kernel hand the mount on `dir` what it holds back (syncfs(2)): under the writeback
/// cache (docs/vfs.md) its dirty pages and the times it keeps, which a request through the
/// control channel would otherwise not see.
pub(crate) fn flush_kernel(dir: &Path) -> Result<(), Fail> {
    let d = std::fs::File::open(dir).map_err(|e| Fail(format!("{}: {e}", dir.display()), 1))?;
    // SAFETY: syncfs takes any open descriptor of the file system.
    if unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&d)) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Fail(format!("syncfs {}: {e}", dir.display()), 1));
    }
    Ok(())
}

/// The mount point `dir` made absolute, and the source of the FUSE mount there, if any.
pub(crate) fn mount_source(dir: &Path) -> Result<(PathBuf, Option<String>), Fail> {
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

/// A control-channel failure or an answer of the wrong kind, as a command's failure.
pub(crate) fn answer(e: ctl::CtlError) -> Fail {
    Fail(e.to_string(), 1)
}

/// Runs a control request on `on`: through the control channel of the mount serving it (a mount
/// point, or an image some sufs holds), or on the unmounted image itself.
pub(crate) fn control(on: &Path, req: ctl::Request) -> Result<ctl::Reply, Fail> {
    let image = if on.is_dir() { PathBuf::from(mounted_image(on)?.1) } else { on.to_path_buf() };
    let f = std::fs::File::open(&image).map_err(|e| Fail(format!("{}: {e}", image.display()), 1))?;
    if f.try_lock().is_err() {
        let sock = ctl::socket_path(&image);
        let mut c =
            CtlClient::connect(&sock).map_err(|e| Fail(format!("{} is mounted, but: {e}", image.display()), 1))?;
        return c.call(&req).map_err(|e| Fail(e.to_string(), 1));
    }
    // The Block Register and snapshots (FreeBSD's) work on an unmounted image; anything else is
    // refused before the image is mounted (a mount and unmount would rewrite its superblock).
    let snapshot = matches!(
        req,
        ctl::Request::SnapshotCreate { .. } | ctl::Request::SnapshotList | ctl::Request::SnapshotDelete { .. }
    );
    if !is_br(&req) && !snapshot {
        return Err(Fail(
            format!("{} is not mounted: this request goes to a mount's control channel", image.display()),
            8,
        ));
    }
    let (dev, sb) = open_image_any(&image, true)?;
    let clock: Arc<dyn Clock> = Arc::new(RealClock::new());
    let opts = MountOptions { cache_blocks: (64 << 20) / sb.block_size as usize, ..Default::default() };
    let mut fs = Fs::mount(Arc::new(dev), opts, clock).map_err(|e| Fail(format!("{}: {e}", image.display()), 1))?;
    let r = ctl::execute(&mut fs, req);
    fs.unmount().map_err(|e| Fail(format!("{}: {e}", image.display()), 1))?;
    drop(f);
    r.map_err(|e| Fail(e.to_string(), 1))
}

/// Whether `req` is a Block Register call (which an unmounted UFS2 image takes).
fn is_br(req: &ctl::Request) -> bool {
    use ctl::Request as R;
    matches!(
        req,
        R::BrReserve { .. }
            | R::BrQuery { .. }
            | R::BrExpand { .. }
            | R::BrTruncate { .. }
            | R::BrFree { .. }
            | R::BrList
    )
}

/// Opens an unmounted image for the volume commands (whole device: file system and reserved area).
pub(crate) fn volume_device(image: &Path, writable: bool) -> Result<(Arc<dyn BlockDevice>, std::fs::File), Fail> {
    let f = std::fs::File::open(image).map_err(|e| Fail(format!("{}: {e}", image.display()), 1))?;
    let locked = if writable { f.try_lock().is_ok() } else { f.try_lock_shared().is_ok() };
    if !locked {
        return Err(Fail(format!("{} is mounted; unmount it first", image.display()), 1));
    }
    // A UFS2 image opens addressed in fragments; the volume layer copies whole blocks.
    let (dev, _) = open_image_any(image, writable)?;
    Ok((Arc::new(dev), f))
}

pub(crate) fn cmd_volume(op: SnapCmd) -> Result<(), Fail> {
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
                ordering: Some(Ordering::Softdep),
                foreground,
                stats: None,
                cache: 128 << 20,
                size: 0,
                ro: true,
                sync: SyncerOptions::for_policy(UpdatePolicy::Aipu),
                async_full_blocks: false,
                softdep_limit: 200_000,
                threads: DEFAULT_THREADS,
                transport: Transport::Auto,
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

pub(crate) fn cmd_br(on: &Path, op: BrCmd) -> Result<(), Fail> {
    use ctl::Request;
    let show =
        |r: &Reservation| format!("{}: {} blocks reserved, length {} (inode {})", r.name, r.blocks, r.length, r.ino);
    let reservation = |req| control(on, req)?.into_reservation().map_err(answer);
    match op {
        BrCmd::Reserve { name, nblocks, hint } => {
            println!("{}", show(&reservation(Request::BrReserve { name, nblocks, hint })?))
        }
        BrCmd::Expand { name, nblocks, hint } => {
            println!("{}", show(&reservation(Request::BrExpand { name, nblocks, hint })?))
        }
        BrCmd::Truncate { name, physblock } => {
            println!("{}", show(&reservation(Request::BrTruncate { name, block: physblock })?))
        }
        BrCmd::Query { name, offset, count } => {
            for r in control(on, Request::BrQuery { name, offset, count })?.into_runs().map_err(answer)? {
                println!("{} {} {}", r.offset, r.start, r.len);
            }
        }
        BrCmd::Free { name } => {
            let n = control(on, Request::BrFree { name: name.clone() })?.into_released().map_err(answer)?;
            println!("{name}: freed, {n} blocks returned");
        }
        BrCmd::List => {
            for r in control(on, Request::BrList)?.into_reservations().map_err(answer)? {
                println!("{}", show(&r));
            }
        }
    }
    Ok(())
}

/// `sufs sync [ON]`: one mount, or every sufs mount in /proc/self/mountinfo.
pub(crate) fn cmd_sync(on: Option<&Path>) -> Result<(), Fail> {
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
            flush_kernel(&t)?;
        }
        let n = control(&t, ctl::Request::Sync)?.into_written().map_err(answer)?;
        println!("{}: {n} blocks written", t.display());
    }
    Ok(())
}

/// Shuts a mount down through its control channel (never an unmounted image: there is nothing
/// to stop, and a mount made here to stop it would leave the image unclean).
pub(crate) fn cmd_shutdown(on: &Path, mode: Shutdown) -> Result<(), Fail> {
    let image = if on.is_dir() { PathBuf::from(mounted_image(on)?.1) } else { on.to_path_buf() };
    let sock = ctl::socket_path(&image);
    let mut c = CtlClient::connect(&sock).map_err(|e| Fail(format!("{} is not mounted: {e}", on.display()), 1))?;
    let n = c.call(&ctl::Request::Shutdown { mode }).and_then(ctl::Reply::into_written).map_err(answer)?;
    println!("{}: shut down, {n} blocks written first", on.display());
    Ok(())
}

/// The frozen file system of snapshot `name` of `on` as a read-only device: the snapshot file
/// read through the mount (a mounted image), or the image opened here. The lock file (if any)
/// must be kept while the device is used.
pub(crate) fn frozen_device(on: &Path, name: &str) -> Result<(Arc<dyn BlockDevice>, Option<std::fs::File>), Fail> {
    let image = if on.is_dir() { PathBuf::from(mounted_image(on)?.1) } else { on.to_path_buf() };
    let f = std::fs::File::open(&image).map_err(|e| Fail(format!("{}: {e}", image.display()), 1))?;
    let (_, sb) = open_image_any(&image, false)?;
    if f.try_lock_shared().is_err() {
        let mnt = if on.is_dir() {
            on.to_path_buf()
        } else {
            mount_point_of(&image).ok_or_else(|| {
                Fail(format!("{} is in use but not mounted where this process can see it", image.display()), 1)
            })?
        };
        let file = mnt.join(".snap").join(name);
        let dev = FileDevice::open_frags(&file, sb.block_size as usize, sb.addr_unit() as usize, false)
            .map_err(|e| Fail(format!("snapshot {name}: {e}"), 1))?;
        return Ok((Arc::new(dev), None));
    }
    let (dev, sb) = open_image_any(&image, false)?;
    let opts = MountOptions { readonly: true, cache_blocks: (16 << 20) / sb.block_size as usize, ..Default::default() };
    let fs = Fs::mount(Arc::new(dev), opts, Arc::new(RealClock::new()))
        .map_err(|e| Fail(format!("{}: {e}", image.display()), 1))?;
    let frozen = snapshot::FrozenDevice::new(snapshot::shared(fs), name.as_bytes())
        .map_err(|e| Fail(format!("snapshot {name}: {e}"), 1))?;
    Ok((Arc::new(frozen), Some(f)))
}

pub(crate) fn cmd_snapshot(on: &Path, op: FsSnapCmd) -> Result<(), Fail> {
    use ctl::Request;
    let show = |s: &SnapInfo| {
        format!(
            "{}: inode {}, taken at {}, {} blocks owned, {} blocks shared with the file system",
            s.name, s.ino, s.created, s.blocks, s.shared
        )
    };
    match op {
        FsSnapCmd::Create { name } => {
            let t = std::time::Instant::now();
            if on.is_dir() {
                flush_kernel(on)?;
            }
            let s = control(on, Request::SnapshotCreate { name })?.into_snapshot().map_err(answer)?;
            println!("{} (took {:.3} s)", show(&s), t.elapsed().as_secs_f64());
        }
        FsSnapCmd::List => {
            for s in control(on, Request::SnapshotList)?.into_snapshots().map_err(answer)? {
                println!("{}", show(&s));
            }
        }
        FsSnapCmd::Delete { name } => {
            let n = control(on, Request::SnapshotDelete { name: name.clone() })?.into_released().map_err(answer)?;
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
            // A frozen file system, served through /dev/fuse.
            let fuse = FuseOptions { transport: Transport::Classic, ..FuseOptions::default() };
            let config = fusemount::config(format!("sufs-snapshot:{name}"), true, &fuse);
            let mut session = fuser::Session::new(SufsFuse::new(shared, &fuse), &dir, &config)
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
