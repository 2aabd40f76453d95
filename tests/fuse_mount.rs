//! Through the real FUSE mount, as a user would: `sufs mkfs`, `sufs mount`, file operations with
//! the standard library, `sufs umount`, `sufs fsck`. Skipped, with a message, where /dev/fuse is
//! missing.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

mod common;

use common::fuse::*;
use common::{dumpfs_says_clean, pattern, sufs, SUFS};

/// Dropping the kernel's caches (`a_batch_of_forgets_gives_back_every_lookup`) drops every
/// mount's dentries, this test binary's other mounts' too: a test that counts its lookups
/// holds this while it counts, and the dropping test holds it while it drops.
static KERNEL_CACHES: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn kernel_caches() -> std::sync::MutexGuard<'static, ()> {
    KERNEL_CACHES.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

fn exercise(m: &Path) {
    // A tree.
    fs::create_dir_all(m.join("a/b/c")).unwrap();
    for i in 0..200 {
        fs::write(m.join(format!("a/b/file{i}")), pattern(i, (i as usize * 37) % 9000)).unwrap();
    }
    // A large file with holes, through the indirect blocks.
    let big = m.join("big");
    {
        let mut f = fs::File::create(&big).unwrap();
        f.write_all(&pattern(1, 3 << 20)).unwrap();
        f.seek(SeekFrom::Start(300 << 20)).unwrap();
        f.write_all(&pattern(2, 100_000)).unwrap();
        f.sync_all().unwrap();
    }
    assert_eq!(fs::metadata(&big).unwrap().len(), (300 << 20) + 100_000);
    assert!(fs::metadata(&big).unwrap().blocks() < 2 * (4 << 20) / 512, "holes take no space");
    // Rename (across directories and over an existing name), link, unlink, rmdir, chmod, symlink.
    fs::rename(m.join("a/b/file1"), m.join("a/moved")).unwrap();
    fs::rename(m.join("a/b/file2"), m.join("a/b/file3")).unwrap();
    fs::hard_link(m.join("a/moved"), m.join("hard")).unwrap();
    assert_eq!(fs::metadata(m.join("hard")).unwrap().nlink(), 2);
    fs::remove_file(m.join("a/b/file4")).unwrap();
    fs::remove_dir(m.join("a/b/c")).unwrap();
    fs::set_permissions(m.join("a/moved"), fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink("a/moved", m.join("sym")).unwrap();
    assert_eq!(fs::read(m.join("sym")).unwrap(), pattern(1, 37));
    fs::create_dir(m.join("x")).unwrap();
    fs::create_dir(m.join("y")).unwrap();
    fs::write(m.join("y/inside"), b"y").unwrap();
    // RENAME_EXCHANGE swaps; RENAME_NOREPLACE refuses.
    let c = |p: &Path| std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    let (x, y) = (c(&m.join("x")), c(&m.join("y")));
    let r = unsafe { libc::renameat2(libc::AT_FDCWD, x.as_ptr(), libc::AT_FDCWD, y.as_ptr(), libc::RENAME_EXCHANGE) };
    assert_eq!(r, 0, "exchange: {}", std::io::Error::last_os_error());
    assert!(m.join("x/inside").exists());
    let r = unsafe { libc::renameat2(libc::AT_FDCWD, x.as_ptr(), libc::AT_FDCWD, y.as_ptr(), libc::RENAME_NOREPLACE) };
    assert_eq!((r, std::io::Error::last_os_error().raw_os_error()), (-1, Some(libc::EEXIST)));
    // Errors.
    assert_eq!(errno_of(fs::write(m.join("n".repeat(256)), b"")), libc::ENAMETOOLONG);
    fs::write(m.join("n".repeat(255)), b"ok").unwrap();
    assert_eq!(errno_of(fs::remove_dir(m.join("a"))), libc::ENOTEMPTY);
    assert_eq!(errno_of(fs::create_dir(m.join("a"))), libc::EEXIST);
    assert_eq!(errno_of(fs::remove_file(m.join("a"))), libc::EISDIR);
    assert_eq!(errno_of(fs::write(m.join("hard/x"), b"")), libc::ENOTDIR);
    assert_eq!(errno_of(fs::read(m.join("nope"))), libc::ENOENT);
}

fn verify(m: &Path) {
    for i in 5..200 {
        assert_eq!(fs::read(m.join(format!("a/b/file{i}"))).unwrap(), pattern(i, (i as usize * 37) % 9000));
    }
    assert_eq!(fs::read(m.join("a/b/file3")).unwrap(), pattern(2, 74));
    assert!(!m.join("a/b/file4").exists());
    assert!(!m.join("a/b/c").exists());
    assert_eq!(fs::metadata(m.join("a/moved")).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(fs::read_link(m.join("sym")).unwrap(), Path::new("a/moved"));
    let mut f = fs::File::open(m.join("big")).unwrap();
    let mut head = vec![0u8; 3 << 20];
    f.read_exact(&mut head).unwrap();
    assert!(head == pattern(1, 3 << 20));
    let mut hole = vec![1u8; 1 << 20];
    f.seek(SeekFrom::Start(100 << 20)).unwrap();
    f.read_exact(&mut hole).unwrap();
    assert!(hole.iter().all(|&b| b == 0), "a hole reads as zeros");
    let mut tail = Vec::new();
    f.seek(SeekFrom::Start(300 << 20)).unwrap();
    f.read_to_end(&mut tail).unwrap();
    assert!(tail == pattern(2, 100_000));
    assert_eq!(fs::read(m.join("x/inside")).unwrap(), b"y");
}

#[test]
fn operations_survive_unmount_and_fsck_in_both_orderings() {
    if !fuse_available() {
        return;
    }
    for ordering in ["softdep", "sync", "async"] {
        let t = tempfile::tempdir().unwrap();
        let img = t.path().join("img");
        let mnt = t.path().join("mnt");
        let stats = t.path().join("stats.json");
        let out = sufs(&["mkfs", img.to_str().unwrap(), "--size", "512M"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // Four request threads, then one at the remount: the same results either way.
        let m = mount_fg(&img, &mnt, &["--ordering", ordering, "--stats", stats.to_str().unwrap(), "--threads", "4"]);
        exercise(&mnt);
        verify(&mnt);
        m.umount();
        let json: serde_json::Value = serde_json::from_str(&fs::read_to_string(&stats).unwrap()).unwrap();
        assert_eq!(json["ordering"], ordering);
        assert!(json["device"]["async_writes"].as_u64().unwrap() > 0);
        if ordering == "sync" {
            assert!(json["device"]["sync_writes"].as_u64().unwrap() > 400, "sync mode orders with sync writes");
        }
        fsck_clean(&img);
        let m = mount_fg(&img, &mnt, &["--ordering", ordering, "--threads", "1"]);
        verify(&mnt);
        m.umount();
        fsck_clean(&img);
    }
}

/// The mount counts the FUSE messages it serves, by opcode, and `--stats` writes them at
/// unmount (`fuse_messages`): 100 creates, stats and unlinks in a directory of their own.
#[test]
fn fuse_messages_are_counted_by_opcode() {
    let _caches = kernel_caches();
    let Some((t, _img, mnt, m)) = small_mount() else { return };
    m.umount();
    let stats = t.path().join("stats.json");
    let m = mount_fg(&t.path().join("img"), &mnt, &["--stats", stats.to_str().unwrap()]);
    let dir = mnt.join("d");
    fs::create_dir(&dir).unwrap();
    for i in 0..100 {
        fs::File::create(dir.join(format!("f{i}"))).unwrap();
    }
    for i in 0..100 {
        assert!(fs::metadata(dir.join(format!("f{i}"))).unwrap().is_file());
    }
    for i in 0..100 {
        fs::remove_file(dir.join(format!("f{i}"))).unwrap();
    }
    m.umount();
    let json: serde_json::Value = serde_json::from_str(&fs::read_to_string(&stats).unwrap()).unwrap();
    let n = |op: &str| json["fuse_messages"][op].as_u64().unwrap_or_else(|| panic!("no count for {op}"));
    // A create is CREATE, once per file, and its close a RELEASE: files open through OPEN,
    // where an immutable file refuses a writer.
    assert_eq!((n("create"), n("mknod"), n("release")), (100, 0, 100), "{json}");
    assert_eq!(n("mkdir"), 1);
    assert_eq!(n("unlink"), 100);
    // Each new name is looked up once (not found) before it is made; the stats hit the cache.
    assert!((100..=110).contains(&n("lookup")), "{json}");
    assert!(n("getattr") <= 210, "{json}");
    assert_eq!(n("write") + n("read") + n("rename") + n("rmdir"), 0, "{json}");
    assert!(n("forget_nodes") <= 101 && n("forget") <= n("forget_nodes"), "{json}");
    // The lock is counted by the place that took it (`lock_sites`, longest held first): the
    // places add up to the lock's own counts (but for the holding that read them), and the
    // request handlers' places in the mount's adapter took it for every create and unlink.
    let sites = json["lock_sites"].as_array().unwrap_or_else(|| panic!("no lock_sites: {json}"));
    let field = |s: &serde_json::Value, k: &str| s[k].as_u64().unwrap_or_else(|| panic!("no {k}: {s}"));
    let taken: u64 = sites.iter().map(|s| field(s, "taken")).sum();
    let held: u64 = sites.iter().map(|s| field(s, "held_ns")).sum();
    let lock = &json["lock"];
    let unread = lock["acquisitions"].as_u64().unwrap().checked_sub(taken);
    assert!(matches!(unread, Some(0 | 1)), "{json}");
    assert!(held <= lock["held_ns"].as_u64().unwrap(), "{json}");
    assert!(sites.windows(2).all(|w| field(&w[0], "held_ns") >= field(&w[1], "held_ns")), "{json}");
    assert!(sites.iter().all(|s| field(s, "longest_ns") <= field(s, "held_ns")), "{json}");
    let handlers: u64 = sites
        .iter()
        .filter(|s| s["at"].as_str().is_some_and(|a| a.starts_with("crates/sufs-mount/src/fuse.rs:")))
        .map(|s| field(s, "taken"))
        .sum();
    assert!(handlers >= 200 + n("lookup"), "every create, unlink and lookup: {json}");
}

/// The kernel gives back many inodes at once when its caches are dropped: BATCH_FORGET,
/// served under one taking of the lock (the server is stopped while they are dropped, so that
/// they queue). Every lookup given back is counted, the files stay whole, and the image is
/// clean after the unmount (no inode kept or freed too early).
#[test]
fn a_batch_of_forgets_gives_back_every_lookup() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: dropping the kernel's caches needs root");
        return;
    }
    let Some((t, img, mnt, m)) = small_mount() else { return };
    m.umount();
    let stats = t.path().join("stats.json");
    let m = mount_fg(&img, &mnt, &["--stats", stats.to_str().unwrap()]);
    let dir = mnt.join("d");
    fs::create_dir(&dir).unwrap();
    for i in 0..500 {
        fs::write(dir.join(format!("f{i}")), format!("{i}")).unwrap();
    }
    // The server stopped while the kernel drops its inodes: their forgets queue up and come as
    // BATCH_FORGET once it goes on (a running server may keep up and take them one by one).
    let pid = m.child.id() as libc::pid_t;
    let caches = kernel_caches();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let dropping = std::thread::spawn(|| fs::write("/proc/sys/vm/drop_caches", "2"));
    let start = std::time::Instant::now();
    while !dropping.is_finished() && start.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    dropping.join().unwrap().unwrap();
    drop(caches);
    for i in 0..500 {
        assert_eq!(fs::read_to_string(dir.join(format!("f{i}"))).unwrap(), format!("{i}"));
    }
    m.umount();
    fsck_clean(&img);
    let json: serde_json::Value = serde_json::from_str(&fs::read_to_string(&stats).unwrap()).unwrap();
    let n = |op: &str| json["fuse_messages"][op].as_u64().unwrap();
    assert!(n("forget_nodes") >= 500, "the dropped inodes came back: {json}");
    assert!(n("forget") < n("forget_nodes"), "some came in batches: {json}");
}

/// A missing name is kept by the kernel as a negative entry (`fuse::negative_entry`): it must
/// give way to a name made through the mount, and to names the control channel makes (a
/// snapshot, a Block Register reservation and its directory), which are told to the kernel.
/// (`/.snap` is there from the start: newfs makes it on UFS2.)
#[test]
fn missing_names_are_cached_and_then_made() {
    let Some((_t, _img, mnt, m)) = small_mount() else { return };
    let f = mnt.join("later");
    for _ in 0..2 {
        assert_eq!(errno_of(fs::metadata(&f)), libc::ENOENT);
    }
    fs::write(&f, b"x").unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"x");
    fs::remove_file(&f).unwrap();
    assert_eq!(errno_of(fs::metadata(&f)), libc::ENOENT);
    let on = mnt.to_str().unwrap();
    assert!(fs::metadata(mnt.join(".snap")).unwrap().is_dir(), "newfs made /.snap");
    for name in [".snap/s1", ".snap/s2", ".br", ".br/r"] {
        assert_eq!(errno_of(fs::metadata(mnt.join(name))), libc::ENOENT, "{name}");
    }
    common::ok(&["snapshot", "--on", on, "create", "s1"]);
    common::ok(&["snapshot", "--on", on, "create", "s2"]);
    common::ok(&["br", "--on", on, "reserve", "r", "4"]);
    for name in [".snap", ".snap/s1", ".snap/s2", ".br", ".br/r"] {
        assert!(fs::metadata(mnt.join(name)).is_ok(), "{name} made through the control channel");
    }
    m.umount();
}

/// What user nobody may do, the same whoever checks: the kernel (`default_permissions`) or
/// sufs (`-o permissions=sufs`). Each command runs as nobody in the mount.
#[test]
fn sufs_checks_answer_as_the_kernel_does() {
    use std::os::unix::process::CommandExt;
    if !fuse_available() || unsafe { libc::geteuid() } != 0 {
        return;
    }
    let cases: &[(&str, bool)] = &[
        ("./t700", false),
        ("./t701", true),
        ("cd d700", false),
        ("ls d700", false),
        ("test -r t700", false),
        ("test -x t701", true),
        ("rm -f tmp/rootfile", false),
        ("echo x >> tmp/rootfile", true),
        ("touch -d 2000-01-01 tmp/rootfile", false),
        ("touch tmp/rootfile", true),
        ("chmod 777 t701", false),
        ("chown nobody t701", false),
        ("ln t700 tmp/link", false),
        ("truncate -s 0 t701", false),
        ("mkdir d700/x", false),
        ("touch tmp/mine && chmod 600 tmp/mine && rm tmp/mine", true),
        ("mv tmp/rootfile tmp/moved", false),
    ];
    for opts in [&[][..], &["-o", "permissions=sufs"][..]] {
        let (_t, img, mnt, m) = common::fuse::public_mount(opts);
        for (name, mode) in [("t700", 0o700), ("t701", 0o701)] {
            fs::copy("/bin/true", mnt.join(name)).unwrap();
            fs::set_permissions(mnt.join(name), fs::Permissions::from_mode(mode)).unwrap();
        }
        fs::create_dir(mnt.join("d700")).unwrap();
        fs::set_permissions(mnt.join("d700"), fs::Permissions::from_mode(0o700)).unwrap();
        fs::create_dir(mnt.join("tmp")).unwrap();
        fs::set_permissions(mnt.join("tmp"), fs::Permissions::from_mode(0o1777)).unwrap();
        fs::write(mnt.join("tmp/rootfile"), b"").unwrap();
        fs::set_permissions(mnt.join("tmp/rootfile"), fs::Permissions::from_mode(0o666)).unwrap();
        for &(cmd, ok) in cases {
            let st = Command::new("sh").args(["-c", cmd]).current_dir(&mnt).uid(65534).gid(65534).output().unwrap();
            assert_eq!(st.status.success(), ok, "{opts:?}: {cmd}: {}", String::from_utf8_lossy(&st.stderr));
        }
        m.umount();
        fsck_clean(&img);
    }
}

/// SIGTERM to a foreground mount: it stops within 30 s, unmounted, the image clean (flag and
/// fsck), the file written before it there after a remount. With `remove_socket`, the control
/// socket is removed first (a cleaner, or the image's directory moved): stopping once hung
/// there, before writing anything out.
fn sigterm_stops_the_mount(remove_socket: bool) {
    if !fuse_available() {
        return;
    }
    let (t, img, mnt, mut m) = mounted_with_f();
    if remove_socket {
        fs::remove_file(t.path().join("img.ctl")).unwrap();
    }
    unsafe { libc::kill(m.child.id() as i32, libc::SIGTERM) };
    let st = exit_within_30s(&mut m, "SIGTERM");
    m.done = true;
    assert!(st.success(), "{st}");
    assert!(!is_mounted(&mnt));
    f_kept_and_image_clean(&img, &mnt);
}

/// A new 64 MiB image mounted in the foreground, with the file `f` written through the mount:
/// the directory holding both, the image, the mount point, the mount.
fn mounted_with_f() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf, Mounted) {
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("img");
    let mnt = t.path().join("mnt");
    assert!(sufs(&["mkfs", img.to_str().unwrap(), "--size", "64M"]).status.success());
    let m = mount_fg(&img, &mnt, &[]);
    fs::write(mnt.join("f"), pattern(5, 100_000)).unwrap();
    (t, img, mnt, m)
}

/// After a mount of `mounted_with_f` ended: the image marked clean and fsck-clean, and `f` there
/// again after a remount.
fn f_kept_and_image_clean(img: &Path, mnt: &Path) {
    let dump = String::from_utf8(sufs(&["dumpfs", img.to_str().unwrap()]).stdout).unwrap();
    assert!(dump.contains("clean     yes"), "{dump}");
    fsck_clean(img);
    let m = mount_fg(img, mnt, &[]);
    assert!(fs::read(mnt.join("f")).unwrap() == pattern(5, 100_000));
    m.umount();
}

/// The mount's exit status, which must come within 30 s of `what`.
fn exit_within_30s(m: &mut Mounted, what: &str) -> std::process::ExitStatus {
    let start = std::time::Instant::now();
    loop {
        if let Some(st) = m.child.try_wait().unwrap() {
            return st;
        }
        assert!(start.elapsed().as_secs() < 30, "the mount did not end within 30 s of {what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A connection the kernel shuts down while a daemon thread holds a request it is reading (an
/// unmount racing that read, or its `abort` file written) makes the read fail with
/// ECONNABORTED, not ENODEV: the mount ends as at an unmount, everything written and the image
/// clean, and exits 0 (it said "FUSE session ended with an error" and exited 1).
#[test]
fn an_aborted_connection_ends_the_mount_as_an_unmount_does() {
    let conns = Path::new("/sys/fs/fuse/connections");
    if !fuse_available() || !conns.is_dir() || unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: needs /dev/fuse, root and {}", conns.display());
        return;
    }
    // (the connections' control files are a file system of their own, fusectl, not always
    // mounted: mounted for the test then, and unmounted after it)
    let mounted_here = !is_mounted(conns);
    if mounted_here && !Command::new("mount").args(["-t", "fusectl", "fusectl"]).arg(conns).status().unwrap().success()
    {
        eprintln!("SKIPPED: fusectl cannot be mounted on {}", conns.display());
        return;
    }
    let (_t, img, mnt, mut m) = mounted_with_f();
    let minor = libc::minor(fs::metadata(&mnt).unwrap().dev());
    let aborted = fs::write(conns.join(minor.to_string()).join("abort"), "1");
    if mounted_here {
        let _ = Command::new("umount").arg(conns).status();
    }
    aborted.unwrap();
    let st = exit_within_30s(&mut m, "the abort");
    let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    m.done = true;
    assert!(st.success(), "{st}: the mount took its aborted connection for an error");
    assert!(dumpfs_says_clean(&img));
    f_kept_and_image_clean(&img, &mnt);
}

#[test]
fn sigterm_unmounts_cleanly() {
    sigterm_stops_the_mount(false);
}

#[test]
fn sigterm_unmounts_without_the_control_socket() {
    sigterm_stops_the_mount(true);
}

/// SIGTERM while a file of the mount is open (the mount busy, as for an instant after a close,
/// when the kernel still holds the file for its RELEASE): the unmount is tried again, then the
/// mount is detached (gone from the tree, `f` still readable through the open file), and the
/// mount ends once the file is closed, everything written. The signal's one unmount, refused
/// as busy, left the mount running for good (seen in CI under load).
#[test]
fn sigterm_on_a_busy_mount_detaches_it_and_ends_when_it_is_let_go() {
    if !fuse_available() {
        return;
    }
    let (_t, img, mnt, mut m) = mounted_with_f();
    let mut held = fs::File::open(mnt.join("f")).unwrap();
    unsafe { libc::kill(m.child.id() as i32, libc::SIGTERM) };
    let start = std::time::Instant::now();
    while is_mounted(&mnt) && start.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let detached = !is_mounted(&mnt);
    let running = m.child.try_wait().unwrap().is_none();
    let mut back = Vec::new();
    std::io::Read::read_to_end(&mut held, &mut back).unwrap();
    drop(held);
    assert!(detached, "the busy mount was not detached within 30 s of SIGTERM");
    assert!(running, "the mount ended while a file was still open");
    assert!(back == pattern(5, 100_000), "f read through the open file after the detach");
    let st = exit_within_30s(&mut m, "the last close");
    m.done = true;
    assert!(st.success(), "{st}");
    f_kept_and_image_clean(&img, &mnt);
}

#[test]
fn default_mount_makes_an_image_and_daemonizes() {
    if !fuse_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let out = Command::new(SUFS).arg("mount").current_dir(t.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(is_mounted(&t.path().join("mnt")));
    assert_eq!(fs::metadata(t.path().join("sufs.img")).unwrap().len(), 1 << 30);
    assert!(common::is_ufs2_image(&t.path().join("sufs.img")), "the image is made as sufs mkfs makes one: UFS2");
    fs::write(t.path().join("mnt/hello"), b"hi").unwrap();
    let out = Command::new(SUFS).args(["umount", "mnt"]).current_dir(t.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!is_mounted(&t.path().join("mnt")));
    fsck_clean(&t.path().join("sufs.img"));
}

#[test]
fn bad_images_are_refused_with_a_message() {
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("junk");
    fs::write(&img, vec![0x5au8; 1 << 20]).unwrap();
    let out = sufs(&["mount", img.to_str().unwrap(), t.path().join("m").to_str().unwrap(), "-f"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no UFS2 superblock"), "{err}");
    let out = sufs(&["fsck", img.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(8), "fsck of junk is an operational error");
    let out = sufs(&["mkfs", t.path().join("missing").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--size"));
    let out = sufs(&["mkfs", img.to_str().unwrap(), "--size", "1G", "--block-size", "3000"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("block size") && err.contains("3000"), "{err}");
}

/// READDIRPLUS hands the kernel each entry's attributes with the listing, and FOPEN_KEEP_CACHE
/// keeps a file's pages across opens: both must show what the file system holds, after
/// overwrites, truncations, links and renames through the mount.
#[test]
fn listings_with_attributes_and_cached_reopens_stay_exact() {
    let Some((_t, img, mnt, m)) = small_mount() else { return };
    let d = mnt.join("d");
    fs::create_dir(&d).unwrap();
    for i in 0..300u64 {
        let p = d.join(format!("f{i}"));
        fs::write(&p, pattern(i, (i as usize * 131) % 20_000)).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600 | (i as u32 % 8) << 3)).unwrap();
    }
    fs::hard_link(d.join("f7"), d.join("link7")).unwrap();
    fs::rename(d.join("f8"), d.join("moved8")).unwrap();
    let mut seen = 0;
    for e in fs::read_dir(&d).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        let md = e.metadata().unwrap();
        let i: u64 = name.trim_start_matches(|c: char| c.is_alphabetic()).parse().unwrap();
        assert_eq!(md.len(), (i * 131) % 20_000, "{name}");
        assert_eq!(md.mode() & 0o7777, 0o600 | (i as u32 % 8) << 3, "{name}");
        assert_eq!(md.nlink(), if i == 7 { 2 } else { 1 }, "{name}");
        seen += 1;
    }
    assert_eq!(seen, 301);
    // Cached pages after a close: an overwrite, a truncation and an append through other opens.
    let p = d.join("f5");
    let mut model = fs::read(&p).unwrap();
    {
        let f = fs::OpenOptions::new().write(true).open(&p).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, b"overwritten", 100).unwrap();
    }
    model[100..111].copy_from_slice(b"overwritten");
    assert_eq!(fs::read(&p).unwrap(), model);
    fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(50).unwrap();
    model.truncate(50);
    assert_eq!(fs::read(&p).unwrap(), model);
    fs::OpenOptions::new().append(true).open(&p).unwrap().write_all(b"tail").unwrap();
    model.extend_from_slice(b"tail");
    assert_eq!(fs::read(&p).unwrap(), model);
    m.umount();
    fsck_clean(&img);
    let m = mount_fg(&img, &mnt, &[]);
    assert_eq!(fs::read(&p).unwrap(), model);
    m.umount();
}

/// Files are opened without OPEN and RELEASE messages (the kernel's zero-message opens), so an
/// inode lives by the kernel's lookup count: a file unlinked while open still reads and writes,
/// its space comes back once it is closed (statfs, in bytes: its blocks are UFS2's fragments,
/// and what soft updates will free counts), and a removed directory still open lists nothing;
/// fsck finds the image clean after unmount.
#[test]
fn unlinked_open_files_live_until_closed() {
    let Some((_t, img, mnt, m)) = small_mount() else { return };
    // Free space in units of 4 KiB.
    let free = || {
        let s = common::ufs2::statvfs(&mnt);
        s.f_bfree * s.f_frsize / 4096
    };
    let before = free();
    for round in 0..3u64 {
        let p = mnt.join(format!("f{round}"));
        let mut f = fs::OpenOptions::new().create_new(true).read(true).write(true).open(&p).unwrap();
        f.write_all(&pattern(round, 8 << 20)).unwrap();
        fs::remove_file(&p).unwrap();
        assert!(!p.exists());
        f.write_all(b"tail").unwrap();
        // Under the writeback cache the blocks are taken when the kernel hands its pages over.
        f.sync_data().unwrap();
        let mut back = Vec::new();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_end(&mut back).unwrap();
        assert!(back[..8 << 20] == pattern(round, 8 << 20)[..] && back.ends_with(b"tail"));
        assert!(free() + 2048 <= before, "the open file keeps its blocks");
        drop(f);
        // The kernel's FORGET follows the close; give it a moment to arrive.
        let t0 = std::time::Instant::now();
        while free() + 64 < before && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(free() + 64 >= before, "round {round}: the closed file's blocks came back");
    }
    // A removed directory that is still open.
    fs::create_dir(mnt.join("d")).unwrap();
    fs::write(mnt.join("d/x"), b"x").unwrap();
    let dir = fs::File::open(mnt.join("d")).unwrap();
    fs::remove_file(mnt.join("d/x")).unwrap();
    fs::remove_dir(mnt.join("d")).unwrap();
    let listed = fs::read_dir(format!("/proc/self/fd/{}", std::os::unix::io::AsRawFd::as_raw_fd(&dir)))
        .expect("the removed directory, still open, can be listed")
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<Vec<_>, _>>()
        .expect("listing the removed directory");
    assert!(listed.is_empty(), "a removed directory lists nothing: {listed:?}");
    drop(dir);
    m.umount();
    fsck_clean(&img);
}

/// Changes inode `ino` of an unmounted UFS2 image file through the library's UFS2 dinode, and
/// writes it back with its check hash (so the mount reads the damaged values, not a bad hash).
fn damage_inode(img: &Path, ino: u32, f: impl FnOnce(&mut sufs_fs::format::ufs2::Dinode)) {
    use std::os::unix::fs::FileExt;
    use sufs_fs::format::ufs2::{Dinode, Superblock, UFS2_DINODE_SIZE};
    let file = fs::OpenOptions::new().read(true).write(true).open(img).unwrap();
    let (_, sb) = Superblock::search(|off, buf| file.read_exact_at(buf, off)).expect("a UFS2 superblock");
    let mut raw = [0u8; UFS2_DINODE_SIZE];
    file.read_exact_at(&mut raw, sb.ino_offset(ino)).unwrap();
    let mut d = Dinode::decode_checked(&raw, &sb, ino).expect("the inode, its check hash right");
    f(&mut d);
    file.write_all_at(&d.encode_for(&sb), sb.ino_offset(ino)).unwrap();
    file.sync_all().unwrap();
}

/// Times before 1970 with a fraction of a second round-trip; a time no `SystemTime` holds and a
/// symlink whose size is 2^32 (values from a damaged disk) fail or saturate without taking the
/// daemon down, and the image is marked for fsck (and so not clean, as FreeBSD writes it).
#[test]
fn old_times_and_damaged_values_through_the_mount() {
    let Some((_t, img, mnt, m)) = small_mount() else { return };
    let old = mnt.join("old");
    fs::write(&old, b"x").unwrap();
    let path = std::ffi::CString::new(old.to_str().unwrap()).unwrap();
    // 1960-01-01 00:00:00.5 and 1969-12-31 23:59:59.25
    let ts = [
        libc::timespec { tv_sec: -315_619_200, tv_nsec: 500_000_000 },
        libc::timespec { tv_sec: -1, tv_nsec: 250_000_000 },
    ];
    assert_eq!(unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), ts.as_ptr(), 0) }, 0);
    let check = |p: &Path| {
        let md = fs::metadata(p).unwrap();
        assert_eq!((md.atime(), md.atime_nsec()), (-315_619_200, 500_000_000));
        assert_eq!((md.mtime(), md.mtime_nsec()), (-1, 250_000_000));
    };
    check(&old);
    fs::write(mnt.join("f"), b"hello").unwrap();
    std::os::unix::fs::symlink("f", mnt.join("s")).unwrap();
    let (f_ino, s_ino) =
        (fs::metadata(mnt.join("f")).unwrap().ino(), fs::symlink_metadata(mnt.join("s")).unwrap().ino());
    m.umount();

    damage_inode(&img, f_ino as u32, |d| {
        d.di_mtime = i64::MAX;
        d.di_mtimensec = -1;
    });
    damage_inode(&img, s_ino as u32, |d| d.di_size = 1 << 32);
    let m = mount_fg(&img, &mnt, &[]);
    check(&mnt.join("old"));
    let md = fs::metadata(mnt.join("f")).unwrap();
    assert!(md.mtime() > 1 << 40, "the far future shows as the far future");
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"hello");
    assert_eq!(errno_of(fs::read_link(mnt.join("s"))), libc::EIO);
    fs::write(mnt.join("after"), b"still serving").unwrap();
    assert_eq!(fs::read(mnt.join("after")).unwrap(), b"still serving");
    m.umount();
    let out = sufs(&["dumpfs", img.to_str().unwrap()]);
    // The mark, and not clean (as FreeBSD's unmount leaves an image marked for fsck).
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("needs-fsck") && text.contains("clean     no"), "dumpfs shows the mark: {text}");
}

/// `sufs sync` makes every delayed write durable: after it, a daemon killed with SIGKILL loses
/// nothing (sync(1) cannot do this on a FUSE mount: the kernel sends no syncfs to the server).
#[test]
fn sufs_sync_makes_delayed_writes_durable_before_a_kill() {
    let Some((_t, img, mnt, mut m)) = small_mount() else { return };
    let d = mnt.join("tree").join("sub");
    fs::create_dir_all(&d).unwrap();
    for i in 0..200u64 {
        fs::write(d.join(format!("f{i}")), pattern(i, 100 + i as usize * 37)).unwrap();
    }
    let out = sufs(&["sync", mnt.to_str().unwrap()]);
    assert!(out.status.success(), "sync: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("blocks written"));
    // What comes after the sync may be lost, but nothing before it.
    fs::write(mnt.join("late"), b"after the sync").unwrap();
    m.child.kill().unwrap();
    m.child.wait().unwrap();
    let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    m.done = true;

    let m = mount_fg(&img, &mnt, &[]);
    for i in 0..200u64 {
        let got = fs::read(mnt.join("tree/sub").join(format!("f{i}"))).unwrap();
        assert_eq!(got, pattern(i, 100 + i as usize * 37), "f{i}");
    }
    m.umount();
    fsck_clean(&img);
}

/// The background fsck of an unclean softdep image talks to the file system in its own process:
/// a mount unmounted at once (as fstests' tests do) neither loses it (the control channel was
/// once looked for before it existed, or after it was gone) nor leaves its snapshot behind.
#[test]
fn background_fsck_of_a_mount_unmounted_at_once() {
    if !fuse_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
    mkfs(&img, "2G");
    let log = t.path().join("img.log");
    for round in 0..3 {
        let m = mount_fg(&img, &mnt, &[]);
        for i in 0..20 {
            fs::write(mnt.join(format!("f-{round}-{i}")), b"data").unwrap();
        }
        crash(m);
        let out = sufs(&["mount", img.to_str().unwrap(), mnt.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(sufs(&["umount", mnt.to_str().unwrap()]).status.success());
        let text = fs::read_to_string(&log).unwrap();
        assert!(!text.contains("failed"), "round {round}: {text}");
        assert_eq!(text.matches("checking it in the background").count(), round + 1, "{text}");
        assert_eq!(text.matches("background fsck of").count(), round + 1, "{text}");
        let snaps = sufs(&["snapshot", "list", img.to_str().unwrap()]);
        assert!(
            !String::from_utf8_lossy(&snaps.stdout).contains("fsck."),
            "{}",
            String::from_utf8_lossy(&snaps.stdout)
        );
        fsck_clean(&img);
    }
}

/// `-o preen`: an image a sync or async mount left unclean is preened (fsck -p) and mounted,
/// where without it the mount is refused until fsck; what was fsync'ed is there.
#[test]
fn preen_mounts_an_unclean_sync_image() {
    if !fuse_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
    mkfs(&img, "64M");
    for ordering in ["sync", "async"] {
        let m = mount_fg(&img, &mnt, &["--ordering", ordering]);
        let name = format!("kept-{ordering}");
        let mut f = fs::File::create(mnt.join(&name)).unwrap();
        f.write_all(b"fsynced").unwrap();
        f.sync_all().unwrap();
        drop(f);
        fs::write(mnt.join(format!("maybe-{ordering}")), b"not fsynced").unwrap();
        crash(m);
        let (i, d) = (img.to_str().unwrap(), mnt.to_str().unwrap());
        let out = sufs(&["mount", i, d, "--ordering", ordering]);
        assert_eq!(out.status.code(), Some(32), "refused without preen: {}", String::from_utf8_lossy(&out.stderr));
        let out = sufs(&["mount", i, d, "--ordering", ordering, "-o", "preen"]);
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(fs::read(mnt.join(&name)).unwrap(), b"fsynced");
        assert!(sufs(&["umount", d]).status.success());
        fsck_clean(&img);
    }
}

/// `-o norecovery` (fstests' generic/537 mounts `ro,norecovery`): only with `ro`; the image is
/// mounted as it is, so an unclean one is not preened (`preen` is sufs's only repair that
/// writes before a mount) and stays unclean, where `ro,preen` alone repairs it.
#[test]
fn norecovery_mounts_read_only_and_skips_the_preen() {
    if !fuse_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
    mkfs(&img, "64M");
    let m = mount_fg(&img, &mnt, &["--ordering", "sync"]);
    let mut f = fs::File::create(mnt.join("kept")).unwrap();
    f.write_all(b"synchronous").unwrap();
    f.sync_all().unwrap();
    drop(f);
    crash(m);
    let (i, d) = (img.to_str().unwrap(), mnt.to_str().unwrap());
    let unclean = || !dumpfs_says_clean(&img);
    assert!(unclean(), "the crash left the image unclean");
    let out = sufs(&["mount", i, d, "--ordering", "sync", "-o", "rw,norecovery,preen"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(32), "norecovery without ro: {err}");
    assert!(err.contains("norecovery: only with ro"), "{err}");
    for opts in ["ro,norecovery,preen", "noload,preen"] {
        let mut args = vec!["mount", i, d, "--ordering", "sync", "-o", opts];
        if !opts.contains("ro,") {
            args.push("--ro");
        }
        let out = sufs(&args);
        assert!(out.status.success(), "{opts}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(fs::read(mnt.join("kept")).unwrap(), b"synchronous");
        assert!(sufs(&["umount", d]).status.success());
        assert!(unclean(), "{opts}: mounted as it was, not preened");
    }
    let out = sufs(&["mount", i, d, "--ordering", "sync", "-o", "ro,preen"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(sufs(&["umount", d]).status.success());
    assert!(!unclean(), "preened without norecovery");
    fsck_clean(&img);
}

/// Instant restart (soft updates §6): an image a softdep mount left unclean mounts at once and
/// is checked in the background; one a sync or async mount left unclean (on UFS2: one whose
/// last mount did not run soft updates), or one marked for fsck, is refused until fsck (or
/// --force).
#[test]
fn unclean_images_mount_by_what_their_last_mount_promised() {
    if !fuse_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
    mkfs(&img, "64M");
    let log = t.path().join("img.log");
    for ordering in ["softdep", "sync", "async"] {
        let m = mount_fg(&img, &mnt, &["--ordering", ordering]);
        fs::write(mnt.join(format!("f-{ordering}")), b"data").unwrap();
        crash(m);
        let out = sufs(&["mount", img.to_str().unwrap(), mnt.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        if ordering == "softdep" {
            assert!(out.status.success(), "{ordering}: {err}");
            wait_background_fsck(&log);
            assert!(fs::read_to_string(&log).unwrap().contains("checking it in the background"));
            assert!(sufs(&["umount", mnt.to_str().unwrap()]).status.success());
        } else {
            assert_eq!(out.status.code(), Some(32), "{ordering}: {err}");
            // UFS2 records only whether the last mount ran soft updates (FS_DOSOFTDEP).
            assert!(err.contains("needs fsck") && err.contains("not soft updates"), "{ordering}: {err}");
            // --force mounts it; fsck -y then makes it mountable as usual.
            let m = mount_fg(&img, &mnt, &["--force"]);
            m.umount();
            crash(mount_fg(&img, &mnt, &["--ordering", ordering]));
            let out = sufs(&["fsck", "-y", img.to_str().unwrap()]);
            assert!(out.status.code().unwrap_or(8) <= 1, "{}", String::from_utf8_lossy(&out.stdout));
            mount_fg(&img, &mnt, &[]).umount();
        }
        fsck_clean(&img);
    }
}

/// The set-ID bits a write, a truncation or a chown clears, as Linux does (sufs does it itself:
/// the kernel leaves it to the server under FUSE_HANDLE_KILLPRIV_V2): a write or truncation
/// by another user clears set-user-ID and, with group execution or from outside the file's
/// group, set-group-ID (Linux 6.2 on: ext4 and tmpfs do so on 6.18); root's write keeps both;
/// a chown clears both. Then
/// unmount, fsck, and the modes are still so after a remount.
#[test]
fn writes_truncations_and_chowns_clear_set_id_bits() {
    use std::os::unix::process::CommandExt;
    if !fuse_available() || unsafe { libc::geteuid() } != 0 {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
    mkfs(&img, "64M");
    let m = mount_fg(&img, &mnt, &[]);
    std::fs::set_permissions(&mnt, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mode = |name: &str| std::fs::metadata(mnt.join(name)).unwrap().permissions().mode() & 0o7777;
    let make = |name: &str, mode: u32| {
        std::fs::write(mnt.join(name), b"x").unwrap();
        std::fs::set_permissions(mnt.join(name), std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let as_nobody = |script: &str| {
        let mut sh = Command::new("sh");
        sh.arg("-c").arg(script).current_dir(&mnt).uid(65534).gid(65534);
        assert!(sh.status().unwrap().success(), "{script}");
    };
    make("w", 0o6777);
    as_nobody("echo more >> w");
    assert_eq!(mode("w"), 0o0777, "a write by another user clears both bits");
    make("t", 0o6777);
    as_nobody("truncate -s 0 t");
    assert_eq!(mode("t"), 0o0777, "a truncation by another user clears both bits");
    make("g", 0o2666);
    as_nobody("echo more >> g");
    assert_eq!(mode("g"), 0o0666, "set-group-ID without group execution, by a non-member: cleared");
    make("m", 0o2666);
    std::os::unix::fs::chown(mnt.join("m"), None, Some(65534)).unwrap();
    as_nobody("echo more >> m");
    assert_eq!(mode("m"), 0o2666, "set-group-ID without group execution, by a member: kept");
    make("c", 0o6755);
    std::os::unix::fs::chown(mnt.join("c"), Some(1), Some(1)).unwrap();
    assert_eq!(mode("c"), 0o0755, "a chown clears both bits");
    make("r", 0o4755);
    std::fs::write(mnt.join("d"), b"").unwrap();
    m.umount();
    fsck_clean(&img);
    let m = mount_fg(&img, &mnt, &[]);
    let modes = (mode("w"), mode("t"), mode("g"), mode("m"), mode("c"), mode("r"));
    assert_eq!(modes, (0o0777, 0o0777, 0o0666, 0o2666, 0o0755, 0o4755));
    m.umount();
}
