//! Helpers for tests through the real FUSE mount: the `sufs` command, a mount in the
//! foreground that cleans up after a failed test, fsck, and external tools that may be missing.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::{sufs, SUFS};
use std::time::{Duration, Instant};

pub fn fuse_available() -> bool {
    if Path::new("/dev/fuse").exists() {
        true
    } else {
        eprintln!("SKIPPED: /dev/fuse is missing, FUSE tests cannot run here");
        false
    }
}

pub fn mkfs(image: &Path, size: &str) {
    let out = sufs(&["mkfs", image.to_str().unwrap(), "--size", size]);
    assert!(out.status.success(), "mkfs: {}", String::from_utf8_lossy(&out.stderr));
}

/// A fresh 64 MiB image `img` in `dir`, mounted (as a daemon, `sufs mount`) on `dir/mnt`.
pub fn mkfs_and_mount(dir: &Path) -> (PathBuf, PathBuf) {
    let (img, mnt) = (dir.join("img"), dir.join("mnt"));
    mkfs(&img, "64M");
    super::ok(&["mount", img.to_str().unwrap(), mnt.to_str().unwrap()]);
    (img, mnt)
}

/// A 64 MiB image mounted with the defaults (in the foreground) in a new temporary directory
/// (kept alive by the first member); None where FUSE is missing.
pub fn small_mount() -> Option<(tempfile::TempDir, PathBuf, PathBuf, Mounted)> {
    sized_mount("64M")
}

/// `small_mount` with an image of `size` (e.g. "256M").
pub fn sized_mount(size: &str) -> Option<(tempfile::TempDir, PathBuf, PathBuf, Mounted)> {
    if !fuse_available() {
        return None;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
    mkfs(&img, size);
    let m = mount_fg(&img, &mnt, &[]);
    Some((t, img, mnt, m))
}

/// A 64 MiB image mounted (in the foreground, with `opts`) where every user may reach it: a new
/// temporary directory (kept alive by the first member) and the mount's root of mode 0755, for
/// tests that act as another user against root's mount.
pub fn public_mount(opts: &[&str]) -> (tempfile::TempDir, PathBuf, PathBuf, Mounted) {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
    mkfs(&img, "64M");
    let m = mount_fg(&img, &mnt, opts);
    fs::set_permissions(&mnt, fs::Permissions::from_mode(0o755)).unwrap();
    (t, img, mnt, m)
}

pub fn is_mounted(dir: &Path) -> bool {
    let dir = fs::canonicalize(dir).unwrap();
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()) && l.contains("sufs:"))
}

pub struct Mounted {
    pub child: Child,
    pub dir: PathBuf,
    pub done: bool,
}

impl Drop for Mounted {
    /// A failed test must not leave its mount (and a server holding the test's output) behind.
    fn drop(&mut self) {
        if !self.done {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `sufs mount IMAGE DIR -f EXTRA...`, returning once the mount is there.
pub fn mount_fg(image: &Path, dir: &Path, extra: &[&str]) -> Mounted {
    mount_fg_with(image, dir, extra, Stdio::inherit())
}

/// `mount_fg` with the server's standard output captured (`Mounted::umount_report`).
pub fn mount_fg_with(image: &Path, dir: &Path, extra: &[&str], stdout: Stdio) -> Mounted {
    let mut args = vec!["mount", image.to_str().unwrap(), dir.to_str().unwrap(), "-f"];
    args.extend_from_slice(extra);
    spawn_mounted(Command::new(SUFS).args(&args).stdout(stdout), dir)
}

/// Starts `server` (a `sufs` command that serves a mount on `dir` in the foreground: `sufs
/// mount -f`, `sufs bench floor-serve`), returning once the mount is there.
pub fn spawn_mounted(server: &mut Command, dir: &Path) -> Mounted {
    fs::create_dir_all(dir).unwrap();
    let mut child = server.spawn().unwrap();
    let start = Instant::now();
    while !is_mounted(dir) {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("{server:?} exited early: {st}");
        }
        assert!(start.elapsed() < Duration::from_secs(20), "mount did not appear");
        std::thread::sleep(Duration::from_millis(20));
    }
    Mounted { child, dir: dir.to_path_buf(), done: false }
}

impl Mounted {
    /// `sufs umount`, and the server must exit successfully.
    pub fn umount(mut self) {
        let out = sufs(&["umount", self.dir.to_str().unwrap()]);
        assert!(out.status.success(), "umount: {}", String::from_utf8_lossy(&out.stderr));
        let st = self.child.wait().unwrap();
        self.done = true;
        assert!(st.success(), "sufs mount exited with {st}");
    }

    /// `umount`, returning what the server printed (its unmount report: device writes etc.);
    /// the mount must have been made with its standard output piped.
    pub fn umount_report(mut self) -> String {
        let mut out = String::new();
        let mut pipe = self.child.stdout.take().expect("mounted with stdout piped");
        let reader = std::thread::spawn(move || {
            std::io::Read::read_to_string(&mut pipe, &mut out).unwrap();
            out
        });
        self.umount();
        reader.join().unwrap()
    }
}

/// Waits (30 s at most) for the background fsck that a daemon mount (`sufs mount`) of an image a
/// softdep mount left unclean runs, as its log `log` says, and checks that it ended well.
pub fn wait_background_fsck(log: &Path) {
    let start = Instant::now();
    loop {
        let text = fs::read_to_string(log).unwrap_or_default();
        if text.contains("background fsck of") {
            assert!(text.contains("done (exit 0)") || text.contains("done (exit 1)"), "{text}");
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no background fsck: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills the daemon of mount `m` (SIGKILL: a crash of the process) and clears its mount point.
pub fn crash(mut m: Mounted) {
    m.child.kill().unwrap();
    m.child.wait().unwrap();
    let _ = Command::new("umount").arg("-l").arg(&m.dir).status();
    m.done = true;
}

/// `sufs fsck IMAGE` must find nothing (exit 0).
pub fn fsck_clean(image: &Path) {
    let out = sufs(&["fsck", image.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "fsck: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An external program, from PATH or cargo's bin directory (where `cargo install` puts it).
/// Missing, the test is skipped with a message, unless `SUFS_REQUIRE_SUITES=1` (set by `.ci/run`
/// after installing the tools) makes that a failure.
pub fn external_tool(name: &str, install: &str) -> Option<PathBuf> {
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|c| c.join("bin"));
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path).chain(cargo_bin).map(|d| d.join(name)).find(|p| p.is_file());
    if found.is_none() {
        let msg = format!("{name} is not installed (install it with `{install}`)");
        if std::env::var("SUFS_REQUIRE_SUITES").is_ok_and(|v| v == "1") {
            panic!("{msg}, and SUFS_REQUIRE_SUITES=1 requires it");
        }
        eprintln!("SKIPPED: {msg}");
    }
    found
}

/// FS_IOC_GETFSLABEL (as `xfs_io -c label` calls it).
pub const FS_IOC_GETFSLABEL: libc::c_ulong = 0x8100_9431;

/// FS_IOC_GETFSLABEL on `path`: the label of the file system holding it.
pub fn get_label(path: &Path) -> Vec<u8> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    let mut buf = [0u8; 256];
    let r = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_GETFSLABEL, buf.as_mut_ptr()) };
    assert_eq!(r, 0, "FS_IOC_GETFSLABEL: {}", std::io::Error::last_os_error());
    buf.iter().take_while(|&&b| b != 0).copied().collect()
}
