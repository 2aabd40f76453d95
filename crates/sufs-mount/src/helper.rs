//! mount(8)'s side of a sufs mount. `mount -t fuse.sufs SPEC DIR -o OPTS` (and an fstab line of
//! type `fuse.sufs`) runs `/sbin/mount.fuse.sufs SPEC DIR [-sfnv] [-o OPTS] [-t TYPE]`; that
//! program is the `sufs` binary itself under another name (`sufs install-helper` makes the link),
//! which turns the call into `sufs mount` (`parse_args`). SPEC is `sufs:IMAGE`, the name a sufs
//! mount shows in the mount table (so `umount sufs:IMAGE` and `findmnt -S` find it), or IMAGE.
//!
//! Also here, what the helper needs around a mount: waiting for an image a daemon still holds
//! after `umount` returned (`wait_for_image`; `umount` of a FUSE mount returns before the
//! server has written everything), the kernel's side of a remount (`remount_flags`,
//! `kernel_remount`), the link itself (`install`), and handing a call on to another build
//! (`hand_off`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sufs_fs::fs::mountopt::{AtimeMode, AtimePolicy};

/// The helper's name: the binary run under it acts as the helper.
pub const HELPER_NAME: &str = "mount.fuse.sufs";

/// Where mount(8) looks for it.
pub const DEFAULT_PREFIX: &str = "/sbin";

/// The variable naming the sufs binary that should serve helper calls (`hand_off`).
pub const HAND_OFF_VAR: &str = "SUFS_MOUNT_HELPER";

/// How long a mount waits for an image a daemon still holds, unless `-o wait=SECONDS`.
pub const DEFAULT_WAIT_SECS: u64 = 600;

/// A call of the helper, as mount(8) makes it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HelperCall {
    pub image: PathBuf,
    pub dir: PathBuf,
    /// Every `-o` list, joined with commas.
    pub options: String,
    /// `-s`: unknown options are ignored (with a warning) instead of refused.
    pub sloppy: bool,
    /// `-f`: do everything but the mount (nothing, here).
    pub fake: bool,
    /// `-v`: say what is done.
    pub verbose: bool,
}

/// mount(8) finds one helper for the whole machine, `/sbin/mount.fuse.sufs`, whichever build it
/// links to. A harness that tests another build (fstests' `local.config` does) names it in
/// `SUFS_MOUNT_HELPER`, and a helper that is not that build runs it in its place, under the
/// helper's name, with the same arguments. Returns only if that fails (or there is nothing to
/// hand on: the variable unset, or naming this very program).
pub fn hand_off(args: &[String]) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let Some(other) = std::env::var_os(HAND_OFF_VAR).filter(|v| !v.is_empty()) else { return Ok(()) };
    let other =
        std::fs::canonicalize(&other).map_err(|e| format!("{HAND_OFF_VAR}={}: {e}", Path::new(&other).display()))?;
    let me = std::env::current_exe().and_then(std::fs::canonicalize).ok();
    if me.as_deref() == Some(other.as_path()) {
        return Ok(());
    }
    let e = std::process::Command::new(&other).arg0(HELPER_NAME).args(args).exec();
    Err(format!("{HAND_OFF_VAR}={}: {e}", other.display()))
}

/// The image a mount source names: `sufs:IMAGE` or IMAGE.
pub fn image_of(spec: &str) -> PathBuf {
    PathBuf::from(spec.strip_prefix("sufs:").unwrap_or(spec))
}

/// Parses the helper's arguments (without argv[0]): `SPEC DIR`, and the flags mount(8) passes
/// (`-o OPTS` or `-oOPTS`, several allowed; `-s`, `-f`, `-n`, `-v`, grouped or not; `-t TYPE`).
pub fn parse_args(args: &[String]) -> Result<HelperCall, String> {
    let mut call = HelperCall::default();
    let mut options = Vec::new();
    let mut positional = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => options.push(it.next().ok_or("-o needs a list of options")?.clone()),
            "-t" => {
                let t = it.next().ok_or("-t needs a type")?;
                if !matches!(t.as_str(), "fuse.sufs" | "sufs") {
                    return Err(format!("-t {t}: this helper mounts fuse.sufs"));
                }
            }
            o if o.starts_with("-o") => options.push(o[2..].to_string()),
            f if f.starts_with('-') && f.len() > 1 => {
                for c in f[1..].chars() {
                    match c {
                        's' => call.sloppy = true,
                        'f' => call.fake = true,
                        'v' => call.verbose = true,
                        // No mtab to write: the kernel's mount table is the only one.
                        'n' => {}
                        _ => return Err(format!("unknown flag -{c} in {f}")),
                    }
                }
            }
            p => positional.push(p.to_string()),
        }
    }
    let [spec, dir] = positional.as_slice() else {
        return Err(format!("expected SPEC DIR, got {} arguments", positional.len()));
    };
    call.image = image_of(spec);
    call.dir = PathBuf::from(dir);
    call.options = options.join(",");
    Ok(call)
}

/// The mount point of a mounted image (from /proc/self/mountinfo), if this process sees it.
pub fn mount_point_of(image: &Path) -> Option<PathBuf> {
    let abs = std::fs::canonicalize(image).ok()?;
    let want = format!("sufs:{}", abs.display());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mut r = right.split(' ');
        let (_fstype, source) = (r.next()?, r.next()?);
        let mp = left.split(' ').nth(4)?;
        (source == want).then(|| PathBuf::from(mp))
    })
}

/// A second mount of an image mounted now (root only), as Linux gives a block device mounted
/// twice: the same file system, shown at `dir` too (a bind mount of the first mount point),
/// read-only there if asked. Returns the first mount point.
pub fn mount_again(image: &Path, dir: &Path, readonly: bool) -> Result<PathBuf, String> {
    let mp = mount_point_of(image).ok_or_else(|| format!("{} is not mounted", image.display()))?;
    let cstr = |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string());
    let (from, to) = (cstr(&mp)?, cstr(dir)?);
    let fail =
        |what: &str| format!("{what} {} on {}: {}", mp.display(), dir.display(), std::io::Error::last_os_error());
    // SAFETY: both paths are NUL-terminated strings that outlive the calls.
    if unsafe { libc::mount(from.as_ptr(), to.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) } != 0 {
        return Err(fail("cannot bind"));
    }
    if readonly {
        let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
        if unsafe { libc::mount(std::ptr::null(), to.as_ptr(), std::ptr::null(), flags, std::ptr::null()) } != 0 {
            let e = fail("cannot make read-only the bind of");
            unsafe { libc::umount2(to.as_ptr(), 0) };
            return Err(e);
        }
    }
    Ok(mp)
}

/// Waits until no process holds `image` (a sufs daemon holds a lock on it until it has written
/// everything), for `secs` seconds at most; an image mounted now is refused at once, as a
/// second mount of one image is. `note` hears once that it waits.
pub fn wait_for_image(image: &Path, secs: u64, note: &mut dyn FnMut(&str)) -> Result<(), String> {
    let f = File::open(image).map_err(|e| format!("{}: {e}", image.display()))?;
    let start = Instant::now();
    let mut told = false;
    loop {
        // The lock goes with `f` at return: the mount takes it again for itself.
        if f.try_lock().is_ok() {
            return Ok(());
        }
        if let Some(mp) = mount_point_of(image) {
            return Err(format!("{} is already mounted on {}", image.display(), mp.display()));
        }
        let waited = start.elapsed();
        if waited >= Duration::from_secs(secs) {
            return Err(format!(
                "{} is still held by another process after {secs} s (a sufs daemon finishing an unmount?)",
                image.display()
            ));
        }
        if !told && waited >= Duration::from_secs(1) {
            note(&format!(
                "{} is held by another process (a daemon finishing an unmount?): waiting up to {secs} s",
                image.display()
            ));
            told = true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The kernel's flags of a mount point (statvfs's `f_flag`, `ST_*`).
pub fn vfs_flags(dir: &Path) -> std::io::Result<libc::c_ulong> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_flag)
}

/// The per-mount flags a remount passes to mount(2) (`MS_*`): read-only, nosuid, nodev,
/// noexec and the access-time flags, each as asked (`Some`) or as `cur` (statvfs) has it.
pub fn remount_flags(
    cur: libc::c_ulong,
    ro: bool,
    suid: Option<bool>,
    dev: Option<bool>,
    exec: Option<bool>,
    atime: AtimePolicy,
) -> libc::c_ulong {
    let mut f = libc::MS_REMOUNT;
    let keep = |want: Option<bool>, st: libc::c_ulong| want.map(|w| !w).unwrap_or(cur & st != 0);
    if ro {
        f |= libc::MS_RDONLY;
    }
    if keep(suid, libc::ST_NOSUID) {
        f |= libc::MS_NOSUID;
    }
    if keep(dev, libc::ST_NODEV) {
        f |= libc::MS_NODEV;
    }
    if keep(exec, libc::ST_NOEXEC) {
        f |= libc::MS_NOEXEC;
    }
    f |= match atime.mode {
        AtimeMode::Noatime => libc::MS_NOATIME,
        AtimeMode::Relatime => libc::MS_RELATIME,
        AtimeMode::Strictatime => libc::MS_STRICTATIME,
    };
    if atime.nodiratime {
        f |= libc::MS_NODIRATIME;
    }
    f
}

/// mount(2) with `MS_REMOUNT` and `flags` on `dir` (root only).
pub fn kernel_remount(dir: &Path, flags: libc::c_ulong) -> std::io::Result<()> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())?;
    let r = unsafe { libc::mount(std::ptr::null(), c.as_ptr(), std::ptr::null(), flags, std::ptr::null()) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `PREFIX/mount.fuse.sufs` a link to the running binary, replacing what was there.
/// Answers the link and, if something was replaced, what it pointed to (or "a file").
pub fn install(prefix: &Path) -> Result<(PathBuf, Option<String>), String> {
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| format!("cannot find this program's path: {e}"))?;
    std::fs::create_dir_all(prefix).map_err(|e| format!("{}: {e}", prefix.display()))?;
    let link = prefix.join(HELPER_NAME);
    let old = match std::fs::symlink_metadata(&link) {
        Ok(m) => {
            let was = if m.file_type().is_symlink() {
                std::fs::read_link(&link).map(|t| t.display().to_string()).unwrap_or_default()
            } else {
                "a file".to_string()
            };
            std::fs::remove_file(&link).map_err(|e| format!("cannot replace {}: {e}", link.display()))?;
            Some(was)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("{}: {e}", link.display())),
    };
    std::os::unix::fs::symlink(&exe, &link).map_err(|e| format!("cannot make {}: {e}", link.display()))?;
    Ok((link, old.filter(|o| Path::new(o) != exe)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn mount8_calls_parse() {
        let c = parse_args(&args("sufs:/var/tmp/a.img /mnt/a -n -o rw,noatime -s -t fuse.sufs -oremount")).unwrap();
        assert_eq!(c.image, PathBuf::from("/var/tmp/a.img"));
        assert_eq!(c.dir, PathBuf::from("/mnt/a"));
        assert_eq!(c.options, "rw,noatime,remount");
        assert!(c.sloppy && !c.fake && !c.verbose);
        let c = parse_args(&args("-fv /x.img /m")).unwrap();
        assert_eq!((c.image.to_str(), c.fake, c.verbose, c.options.as_str()), (Some("/x.img"), true, true, ""));
        for bad in ["/x.img", "/x.img /m /n", "/x.img /m -o", "/x.img /m -q", "/x.img /m -t ext4"] {
            assert!(parse_args(&args(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn remount_flags_keep_what_is_not_said() {
        let rel = AtimePolicy::default();
        let cur = libc::ST_NOSUID | libc::ST_NODEV;
        let f = remount_flags(cur, true, None, None, None, rel);
        assert_eq!(f, libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_RELATIME);
        let strict = AtimePolicy { mode: AtimeMode::Strictatime, nodiratime: true };
        let f = remount_flags(cur, false, Some(true), None, Some(false), strict);
        assert_eq!(f, libc::MS_REMOUNT | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_STRICTATIME | libc::MS_NODIRATIME);
    }
}
