//! A mount shared by users who do not trust each other: what another user (nobody, through
//! setpriv) can do to root's files and to a root mount's control channel, and what `sufs umount`
//! says when the daemon's unmount fails. Root only (CI runs as root); skipped elsewhere.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::fuse::{fuse_available, mkfs, mount_fg, Mounted};
use common::{ok, sufs};

/// A temporary directory everybody may enter, with a sticky directory `shared` in it that
/// everybody may write to (as /tmp is).
fn shared_dir() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let shared = t.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    (t, shared)
}

/// Root, and FUSE there (else the test is skipped).
fn root_with_fuse() -> bool {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: needs root (the other user is played through setpriv)");
        return false;
    }
    fuse_available()
}

/// As root with FUSE: a new 64 MiB image `x.img` in `shared_dir`'s sticky directory; None (the
/// test skipped) elsewhere.
fn shared_image() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    if !root_with_fuse() {
        return None;
    }
    let (t, shared) = shared_dir();
    let img = shared.join("x.img");
    mkfs(&img, "64M");
    Some((t, shared, img))
}

/// Runs a Python program as user nobody.
fn as_nobody(program: &str) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", program])
        .output()
        .expect("setpriv")
}

/// Nobody plants a symbolic link at `at` pointing to `to`.
fn plant_link(to: &Path, at: &Path) {
    let out = as_nobody(&format!("import os; os.symlink({:?}, {:?})", to.to_str().unwrap(), at.to_str().unwrap()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::symlink_metadata(at).unwrap().uid(), 65534);
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn err(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Links nobody planted in a sticky directory, at the names root's commands write: the mount's
/// log, a snapshot export, a volume export, a new image. Each command refuses with a message,
/// and nothing is made or written where the link points.
#[test]
fn root_does_not_follow_links_another_user_planted() {
    let Some((_t, shared, img)) = shared_image() else { return };
    let victim = shared.join("victim");
    std::fs::write(&victim, "root's file\n").unwrap();

    // The mount's log: a link to an existing file of root's, then a dangling one.
    let log = shared.join("x.img.log");
    for target in [victim.clone(), shared.join("made-by-root")] {
        plant_link(&target, &log);
        let out = sufs(&["mount", s(&img), s(&shared.join("mnt"))]);
        let _mounted = Unmount(shared.join("mnt"));
        assert!(!out.status.success(), "mounted, logging through the link");
        assert!(err(&out).contains("symbolic link"), "{}", err(&out));
        std::fs::remove_file(&log).unwrap();
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's file\n");
    assert!(!shared.join("made-by-root").exists());

    // Exports and a new image at a dangling link.
    ok(&["snapshot", "--on", s(&img), "create", "s1"]);
    ok(&["volume", "snapshot", "create", s(&img), "--store", "br"]);
    for (i, cmd) in [
        vec!["snapshot", "--on", s(&img), "export", "s1"],
        vec!["volume", "snapshot", "export", s(&img)],
        vec!["mkfs", "--size", "16M"],
    ]
    .into_iter()
    .enumerate()
    {
        let (at, target) = (shared.join(format!("out{i}")), shared.join(format!("target{i}")));
        plant_link(&target, &at);
        let out = sufs(&[cmd.as_slice(), &[s(&at)]].concat());
        assert!(!out.status.success(), "{cmd:?} wrote through the link");
        assert!(!target.exists(), "{cmd:?} made the link's target");
    }
}

/// What root's commands make is root's only: nobody cannot read an image (every file's bytes),
/// its log, the control socket, exports, or a `--stats` file.
#[test]
fn images_logs_and_exports_are_made_0600() {
    let Some((_t, shared, img)) = shared_image() else { return };
    let mnt = shared.join("mnt");
    let stats = shared.join("stats.json");
    ok(&["mount", s(&img), s(&mnt), "--stats", s(&stats)]);
    let _mounted = Unmount(mnt.clone());
    std::fs::write(mnt.join("secret"), "rootsecret42\n").unwrap();
    std::fs::set_permissions(mnt.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    ok(&["sync", s(&mnt)]);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
    let (log, sock) = (shared.join("x.img.log"), shared.join("x.img.ctl"));
    assert_eq!(mode(&sock), 0o600, "control socket");
    let out = as_nobody(&format!("print(b'rootsecret' + b'42' in open({:?}, 'rb').read())", s(&img)));
    assert!(!out.status.success(), "nobody read the image: {}", String::from_utf8_lossy(&out.stdout));
    ok(&["snapshot", "--on", s(&mnt), "create", "s1"]);
    let export = shared.join("s1.img");
    ok(&["snapshot", "--on", s(&mnt), "export", "s1", s(&export)]);
    ok(&["umount", s(&mnt)]);
    ok(&["volume", "snapshot", "create", s(&img), "--store", "br"]);
    let vexport = shared.join("v.img");
    ok(&["volume", "snapshot", "export", s(&img), s(&vexport)]);
    for p in [&img, &log, &export, &vexport, &stats] {
        assert_eq!(mode(p), 0o600, "{}", p.display());
    }
}

/// The daemon's pid, its thread count, and its resident memory in KiB.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().count()
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A root mount (`shared_image`) in the foreground, and its control socket.
fn root_mount() -> Option<(tempfile::TempDir, PathBuf, Mounted)> {
    let (t, shared, img) = shared_image()?;
    let m = mount_fg(&img, &shared.join("mnt"), &[]);
    Some((t, shared.join("x.img.ctl"), m))
}

/// A connection to a control socket that gives up reading after 10 seconds.
fn connect(sock: &Path) -> UnixStream {
    let c = UnixStream::connect(sock).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

/// Unmounts (lazily) a daemon's mount left by a failed test.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        if common::fuse::is_mounted(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// Sends `line` and reads one answer line.
fn ask(c: &mut UnixStream, line: &str) -> String {
    // A refused connection is closed after its error line: the write may fail, the line is there.
    let _ = c.write_all(line.as_bytes());
    let mut answer = String::new();
    BufReader::new(c.try_clone().unwrap()).read_line(&mut answer).unwrap();
    answer
}

/// Nobody, reaching the control socket (its mode widened here, as a mistake or a mount from an
/// older sufs would leave it), is refused by the credentials the kernel gives (`SO_PEERCRED`)
/// with an error line, and served nothing; root still is.
#[test]
fn control_channel_refuses_other_users() {
    let Some((_t, sock, m)) = root_mount() else { return };
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = as_nobody(&format!(
        "import socket; c = socket.socket(socket.AF_UNIX); c.settimeout(10); c.connect({:?})\n\
         try: c.sendall(b'{{\"op\":\"snapshot_create\",\"name\":\"mine\"}}\\n')\n\
         except OSError: pass\n\
         print(c.makefile().readline())",
        s(&sock)
    ));
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(answer.contains("may not use this mount") && !answer.contains("\"ok\""), "{answer} {}", err(&out));
    let mut c = connect(&sock);
    let list = ask(&mut c, "{\"op\":\"snapshot_list\"}\n");
    assert!(list.contains("\"list\":[]"), "nobody's request was run: {list}");
    drop(c);
    m.umount();
}

/// A line far longer than any request is refused with an error line, and the daemon does not
/// grow by it; connections past the bound are refused with an error line and make no thread.
#[test]
fn control_channel_bounds_lines_and_connections() {
    let Some((_t, sock, m)) = root_mount() else { return };
    let pid = m.child.id();
    let mut c = connect(&sock);
    ask(&mut c, "{\"op\":\"ping\"}\n");
    let before = rss_kib(pid);
    // 64 MiB without a newline (the mount may close the connection before it has all of it).
    let chunk = vec![b' '; 1 << 20];
    for _ in 0..64 {
        if c.write_all(&chunk).is_err() {
            break;
        }
    }
    let mut answer = String::new();
    let _ = BufReader::new(c.try_clone().unwrap()).read_line(&mut answer);
    drop(c);
    let grown = rss_kib(pid).saturating_sub(before);
    assert!(answer.contains("longer than"), "{answer}");
    assert!(grown < 32 << 10, "the daemon grew by {grown} KiB for one long line");

    let base = threads(pid);
    let mut conns: Vec<UnixStream> = (0..200).map(|_| connect(&sock)).collect();
    // Each admitted connection is served: an answer from each shows its thread is there.
    let mut refused = 0;
    for c in &mut conns {
        let a = ask(c, "{\"op\":\"ping\"}\n");
        if a.contains("connections are open already") {
            refused += 1;
        } else {
            assert!(a.contains("geometry"), "{a}");
        }
    }
    let grown = threads(pid) - base;
    assert!(grown <= sufs_mount::ctl::MAX_CONNECTIONS, "200 connections made {grown} threads");
    assert!(refused >= 200 - sufs_mount::ctl::MAX_CONNECTIONS, "{refused} refused");
    drop(conns);
    // Once they are closed, a connection is served again.
    let start = Instant::now();
    loop {
        let a = ask(&mut connect(&sock), "{\"op\":\"ping\"}\n");
        if a.contains("geometry") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{a}");
        std::thread::sleep(Duration::from_millis(50));
    }
    m.umount();
}

/// With no descriptor left in the daemon, its accept loop pauses between tries instead of
/// spinning (and logging each failed accept).
#[test]
fn control_channel_backs_off_when_out_of_descriptors() {
    let Some((t, shared, img)) = shared_image() else { return };
    let log = t.path().join("stderr");
    let mnt = shared.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let child = Command::new(common::SUFS)
        .args(["mount", s(&img), s(&mnt), "-f"])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !common::fuse::is_mounted(&mnt) {
        assert!(start.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = Mounted { child, dir: mnt, done: false };
    // Counted once the daemon has its transport up (`transport:` in its log): a ring's
    // descriptors, or /dev/fuse's copy for it, come after the mount is visible, and a limit set
    // before them ends the session at its start instead of testing the accept loop.
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("sufs: transport:") {
        assert!(start.elapsed() < Duration::from_secs(20), "no transport in the daemon's log");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = m.child.id();
    // As many descriptors as it has open now: the next accept fails with EMFILE.
    let open = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count() as u64;
    let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    assert_eq!(unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) }, 0);
    let lim = |cur: u64| {
        let lim = libc::rlimit { rlim_cur: cur, rlim_max: old.rlim_max };
        let r = unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) };
        assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
    };
    lim(open);
    let sock = shared.join("x.img.ctl");
    let _c = connect(&sock);
    std::thread::sleep(Duration::from_secs(2));
    let text = std::fs::read_to_string(&log).unwrap();
    let fails = text.lines().filter(|l| l.contains("accept")).count();
    assert!(fails <= 5, "{fails} lines about accept in 2 s:\n{}", &text[..text.len().min(2000)]);
    lim(old.rlim_cur);
    assert!(common::fuse::is_mounted(&m.dir), "{text}");
    m.umount();
}

/// `sufs umount` of a mount whose unmount fails (its image on a full tmpfs: the delayed writes
/// cannot land) exits non-zero with the daemon's error, as umount(8) does; the image is left
/// unclean, as `sufs dumpfs` says.
#[test]
fn umount_reports_a_failed_unmount() {
    if !root_with_fuse() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let small = t.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let st = Command::new("mount").args(["-t", "tmpfs", "-o", "size=3m", "tmpfs", s(&small)]).status().unwrap();
    assert!(st.success());
    /// Unmounts the tmpfs whatever the test does.
    struct Tmpfs(PathBuf);
    impl Drop for Tmpfs {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _tmpfs = Tmpfs(small.clone());
    let img = small.join("x.img");
    mkfs(&img, "64M");
    let mnt = t.path().join("mnt");
    let mut m = mount_fg(&img, &mnt, &["--age", "3600", "--interval", "3600"]);
    // 8 MiB of delayed writes on a 3 MiB tmpfs.
    let data: Vec<u8> = (0..8u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(mnt.join("big"), &data).unwrap();
    let out = sufs(&["umount", s(&mnt)]);
    assert_ne!(out.status.code(), Some(0), "umount of a failed unmount exited 0");
    assert!(err(&out).contains("No space left on device"), "{}", err(&out));
    let st = m.child.wait().unwrap();
    m.done = true;
    assert!(!st.success());
    assert!(!common::dumpfs_says_clean(&img), "a failed unmount left the image marked clean");
}

/// On a UFS2 image of newfs's geometry (32 KiB blocks of 4 KiB fragments), an unprivileged
/// user renames files over each other in a shared sticky directory while the directory grows
/// past its fragment, so its last fragments move to a run with room under names whose removal
/// still waits on disk; then fills the disk. Nothing wedges: no rename fails, the full disk
/// says ENOSPC (not EIO), the daemon logs no error, the unmount is clean and the checker finds
/// nothing. (The old-name removal kept the block's old address: the next flush found its
/// hidden name "vanished", and every write after that failed for every user.)
#[test]
fn renames_in_a_directory_whose_fragments_move_do_not_wedge_the_mount() {
    if !root_with_fuse() {
        return;
    }
    let (t, _) = shared_dir();
    let img = t.path().join("ufs2.img");
    ok(&["mkfs", "--ufs2", s(&img), "--size", "64M"]);
    let (mnt, log) = (t.path().join("mnt"), t.path().join("stderr"));
    std::fs::create_dir(&mnt).unwrap();
    let child = Command::new(common::SUFS)
        .args(["mount", s(&img), s(&mnt), "-f", "-o", "allow_other"])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !common::fuse::is_mounted(&mnt) {
        assert!(start.elapsed() < Duration::from_secs(20), "not mounted");
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = Mounted { child, dir: mnt.clone(), done: false };
    let dir = mnt.join("shared");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let program = format!(
        r#"
import errno, os
os.chdir({dir:?})
for i in range(2000):
    with open(f't{{i % 50}}', 'ab') as f:
        f.write(b'x' * (i % 5000 + 1))
    os.rename(f't{{i % 50}}', f't{{(i + 7) % 50}}')
for i in range(300):
    os.symlink('target' * 10, f'l{{i}}')
try:
    with open('fill', 'wb') as f:
        while True:
            f.write(b'y' * (1 << 20))
except OSError as e:
    print(errno.errorcode[e.errno])
"#,
        dir = s(&dir)
    );
    let out = as_nobody(&program);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(out.status.success(), "nobody's renames failed: {}\ndaemon: {text}", err(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ENOSPC", "the full disk; daemon: {text}");
    // The names the renames leave, by a model of the loop, then the links and the fill.
    let mut want = std::collections::BTreeSet::new();
    for i in 0..2000 {
        want.remove(&format!("t{}", i % 50));
        want.insert(format!("t{}", (i + 7) % 50));
    }
    want.extend((0..300).map(|i| format!("l{i}")));
    want.insert("fill".to_string());
    let names: std::collections::BTreeSet<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, want, "the names left");
    m.umount();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("ERROR") && !text.contains("did not drain"), "the daemon logged errors:\n{text}");
    let out = sufs(&["fsck", "-n", s(&img)]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && report.contains(" 0 findings"), "fsck -n:\n{report}");
}
