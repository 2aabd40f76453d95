//! Mount options and the mount helper through real FUSE mounts: `mount.fuse.sufs` called as
//! mount(8) calls it (and mount(8) itself when the installed helper is this build), remounts
//! between read-only and read-write, root's dev and suid, sync and dirsync across a killed
//! daemon, and access times (relatime, noatime, strictatime, nodiratime, read-only).

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

use common::dumpfs_says_clean;
use common::fuse::{crash, fsck_clean, fuse_available, is_mounted, mkfs, mount_fg};
use common::{ok, sufs, SUFS};

fn root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// `PREFIX/mount.fuse.sufs` made by `sufs install-helper --prefix PREFIX`.
fn install_helper(prefix: &Path) -> PathBuf {
    let out = ok(&["install-helper", "--prefix", prefix.to_str().unwrap()]);
    let link = prefix.join("mount.fuse.sufs");
    assert!(out.contains("mount.fuse.sufs ->"), "{out}");
    assert_eq!(fs::canonicalize(&link).unwrap(), fs::canonicalize(SUFS).unwrap());
    link
}

fn run(prog: &Path, args: &[&str]) -> Output {
    Command::new(prog).args(args).output().expect("run")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// The mount table's line for `dir`: (per-mount options, file-system type, super options).
fn mount_entry(dir: &Path) -> Option<(Vec<String>, String, Vec<String>)> {
    let dir = fs::canonicalize(dir).ok()?;
    fs::read_to_string("/proc/self/mountinfo").ok()?.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let f: Vec<&str> = left.split(' ').collect();
        if f.get(4) != Some(&dir.to_str()?) {
            return None;
        }
        let r: Vec<&str> = right.split(' ').collect();
        let split = |s: &str| s.split(',').map(String::from).collect();
        Some((split(f.get(5)?), r.first()?.to_string(), split(r.get(2)?)))
    })
}

/// Plain umount (the kernel's: returns before the daemon has finished), as fstests does.
fn kernel_umount(dir: &Path) {
    let st = Command::new("umount").arg(dir).status().unwrap();
    assert!(st.success(), "umount {}", dir.display());
}

/// A fresh 64 MiB image and its mount point in a temporary directory; `None` (the test is
/// skipped) without FUSE, or without root when `need_root`.
fn setup(need_root: bool) -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    if !fuse_available() || (need_root && !root()) {
        return None;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
    mkfs(&img, "64M");
    fs::create_dir_all(&mnt).unwrap();
    Some((t, img, mnt))
}

fn sufs_umount(dir: &Path) {
    let out = sufs(&["umount", dir.to_str().unwrap()]);
    assert!(out.status.success(), "sufs umount: {}", text(&out));
}

#[test]
fn the_helper_mounts_as_mount8_calls_it() {
    let Some((t, img, mnt)) = setup(true) else { return };
    let helper = install_helper(&t.path().join("sbin"));
    let spec = format!("sufs:{}", img.display());
    let out = run(&helper, &[&spec, mnt.to_str().unwrap(), "-n", "-o", "rw,noatime,nodev"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "a helper is quiet: {}", text(&out));
    let (per_mount, fstype, _) = mount_entry(&mnt).expect("mounted");
    assert_eq!(fstype, "fuse.sufs");
    assert!(per_mount.contains(&"noatime".to_string()) && per_mount.contains(&"nodev".to_string()), "{per_mount:?}");
    assert!(!per_mount.contains(&"nosuid".to_string()), "root's mount has suid: {per_mount:?}");
    for i in 0..50 {
        fs::write(mnt.join(format!("f{i}")), vec![i as u8; 10_000]).unwrap();
    }
    // A plain umount returns while the daemon still writes; the helper waits for the image.
    kernel_umount(&mnt);
    let out = run(&helper, &[img.to_str().unwrap(), mnt.to_str().unwrap(), "-o", "ro"]);
    assert!(out.status.success(), "{}", text(&out));
    for i in 0..50 {
        assert_eq!(fs::read(mnt.join(format!("f{i}"))).unwrap(), vec![i as u8; 10_000]);
    }
    // Mounted now: a second mount of the image on the same directory is refused at once; on
    // another it shows the same file system there (an_image_mounted_twice_is_one_file_system).
    let start = Instant::now();
    let out = run(&helper, &[&spec, mnt.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(32), "{}", text(&out));
    assert!(text(&out).contains("already mounted on"), "{}", text(&out));
    assert!(start.elapsed() < Duration::from_secs(5));
    let other = t.path().join("other");
    let out = run(&helper, &[&spec, other.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(fs::read(other.join("f7")).unwrap(), vec![7u8; 10_000]);
    kernel_umount(&other);
    sufs_umount(&mnt);
    fsck_clean(&img);

    // Bad calls: an unknown option, no such image (the helper makes none unless asked).
    let out = run(&helper, &[&spec, mnt.to_str().unwrap(), "-o", "rw,frobnicate"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("unknown mount option \"frobnicate\""), "{}", text(&out));
    let out = run(&helper, &[&spec, mnt.to_str().unwrap(), "-s", "-o", "rw,frobnicate"]);
    assert!(out.status.success(), "sloppy: {}", text(&out));
    assert!(text(&out).contains("ignoring unknown option"), "{}", text(&out));
    sufs_umount(&mnt);
    let missing = t.path().join("missing.img");
    let out = run(&helper, &[missing.to_str().unwrap(), mnt.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(32), "{}", text(&out));
    assert!(text(&out).contains("does not exist") && !missing.exists(), "{}", text(&out));
    let out = sufs(&["mount", img.to_str().unwrap(), mnt.to_str().unwrap(), "-o", "bogus"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("unknown mount option \"bogus\""), "{}", text(&out));
}

/// The kernel's generic options (`lazytime`, `iversion`, `mand` and their negations) and
/// mount(8)'s own are accepted by the helper, at mount and at a remount, as the kernel
/// accepts them for any file system (fstests' generic/622 mounts with `-o lazytime`).
#[test]
fn generic_kernel_options_are_accepted() {
    let Some((t, img, mnt)) = setup(true) else { return };
    let helper = install_helper(&t.path().join("sbin"));
    let spec = format!("sufs:{}", img.display());
    let opts = "rw,lazytime,iversion,mand,silent,defaults,auto,user,_netdev,nofail,x-test=1";
    let out = run(&helper, &[&spec, mnt.to_str().unwrap(), "-o", opts]);
    assert!(out.status.success(), "{}", text(&out));
    fs::write(mnt.join("f"), b"lazy").unwrap();
    let remount = "remount,nolazytime,noiversion,nomand,loud,noauto,nouser";
    let out = run(&helper, &[&spec, mnt.to_str().unwrap(), "-o", remount]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"lazy");
    sufs_umount(&mnt);
    fsck_clean(&img);
}

/// The helper in /sbin is one for the whole machine: `SUFS_MOUNT_HELPER` names the build that
/// should serve the call, and a helper of another build hands it on.
#[test]
fn the_helper_hands_the_call_to_the_build_named() {
    let Some((t, img, mnt)) = setup(true) else { return };
    let helper = install_helper(&t.path().join("sbin"));
    let other = t.path().join("other-sufs");
    // Copied by cp(1), not fs::copy: a child another test thread forks while this process
    // holds the copy open for writing inherits that descriptor until its exec, and the exec of
    // the copy then fails with ETXTBSY (seen in CI).
    let cp = Command::new("cp").arg(SUFS).arg(&other).status().unwrap();
    assert!(cp.success(), "cp {SUFS}");
    let spec = format!("sufs:{}", img.display());
    let out = Command::new(&helper)
        .env("SUFS_MOUNT_HELPER", &other)
        .args([spec.as_str(), mnt.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    // The daemon serving the mount is the other build.
    let daemon = fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            fs::read(e.path().join("cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c).into_owned();
                c.contains(img.to_str().unwrap()) && c.contains("--foreground")
            })
        })
        .map(|e| fs::read_link(e.path().join("exe")).unwrap())
        .next();
    assert_eq!(daemon, Some(fs::canonicalize(&other).unwrap()));
    sufs_umount(&mnt);
    let out = Command::new(&helper)
        .env("SUFS_MOUNT_HELPER", t.path().join("missing"))
        .args([spec.as_str(), mnt.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("SUFS_MOUNT_HELPER"), "{}", text(&out));
    assert!(!is_mounted(&mnt));
    fsck_clean(&img);
}

/// `-o mkfs_size=SIZE`, how a test harness makes a file system of a given size through the
/// helper: made when missing or of another size, kept when it already is that size.
#[test]
fn mkfs_size_makes_an_image_only_of_another_size() {
    let Some((t, img, mnt)) = setup(true) else { return };
    let helper = install_helper(&t.path().join("sbin"));
    fs::remove_file(&img).unwrap();
    let (i, m) = (img.to_str().unwrap(), mnt.to_str().unwrap());
    let out = run(&helper, &[i, m, "-o", "mkfs_size=48M"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(fs::metadata(&img).unwrap().len(), 48 << 20);
    assert!(common::is_ufs2_image(&img), "made as sufs mkfs makes one: UFS2");
    fs::write(mnt.join("kept"), b"x").unwrap();
    sufs_umount(&mnt);
    let out = run(&helper, &[i, m, "-o", "mkfs_size=48M"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(mnt.join("kept").exists(), "same size: the file system is kept");
    kernel_umount(&mnt);
    let out = run(&helper, &[i, m, "-o", "mkfs_size=40M"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!mnt.join("kept").exists(), "another size: a new file system");
    let statfs = nix_statvfs(&mnt);
    assert!(statfs < 40 << 20 && statfs > 30 << 20, "{statfs}");
    sufs_umount(&mnt);
    fsck_clean(&img);
}

/// An image mounted twice (as fstests' generic/732 does, and as Linux allows for a block
/// device): the second mount shows the same file system (a bind mount of the first), renames
/// through one are seen through the other, a read-only second mount refuses writes, and the
/// first mount's unmount still writes everything.
#[test]
fn an_image_mounted_twice_is_one_file_system() {
    let Some((t, img, mnt)) = setup(true) else { return };
    let helper = install_helper(&t.path().join("sbin"));
    let (mnt2, mnt3) = (t.path().join("mnt2"), t.path().join("mnt3"));
    fs::create_dir_all(&mnt2).unwrap();
    fs::create_dir_all(&mnt3).unwrap();
    let i = img.to_str().unwrap();
    for (dir, extra) in [(&mnt, None), (&mnt2, None), (&mnt3, Some("ro"))] {
        let mut args = vec![i, dir.to_str().unwrap()];
        if let Some(o) = extra {
            args.extend(["-o", o]);
        }
        let out = run(&helper, &args);
        assert!(out.status.success(), "{}", text(&out));
    }
    let out = run(&helper, &[i, mnt.to_str().unwrap()]);
    assert!(!out.status.success() && text(&out).contains("already mounted"), "{}", text(&out));
    fs::create_dir_all(mnt.join("A")).unwrap();
    fs::create_dir_all(mnt.join("B")).unwrap();
    fs::write(mnt.join("A/f"), b"one file system").unwrap();
    fs::rename(mnt.join("A/f"), mnt.join("B/f")).unwrap();
    assert_eq!(fs::read(mnt2.join("B/f")).unwrap(), b"one file system");
    fs::rename(mnt2.join("B/f"), mnt2.join("A/f")).unwrap();
    assert_eq!(fs::read(mnt.join("A/f")).unwrap(), b"one file system");
    assert_eq!(fs::read(mnt3.join("A/f")).unwrap(), b"one file system");
    let e = fs::write(mnt3.join("A/g"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    assert!(mount_entry(&mnt3).unwrap().0.contains(&"ro".to_string()));
    // The second and third go first: the daemon serves on; then the first writes everything.
    kernel_umount(&mnt3);
    sufs_umount(&mnt2);
    assert_eq!(fs::read(mnt.join("A/f")).unwrap(), b"one file system");
    sufs_umount(&mnt);
    fsck_clean(&img);
    let out = sufs(&["mount", i, mnt.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(fs::read(mnt.join("A/f")).unwrap(), b"one file system");
    sufs_umount(&mnt);
}

fn nix_statvfs(dir: &Path) -> u64 {
    let c = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st.f_blocks * st.f_frsize
}

#[test]
fn remount_read_only_and_back() {
    let Some((t, img, mnt)) = setup(true) else { return };
    let helper = install_helper(&t.path().join("sbin"));
    let (i, m) = (img.to_str().unwrap(), mnt.to_str().unwrap());
    ok(&["mount", i, m]);
    fs::write(mnt.join("a"), b"written before").unwrap();
    ok(&["mount", "-o", "remount,ro", m]);
    assert!(mount_entry(&mnt).unwrap().0.contains(&"ro".to_string()));
    let e = fs::write(mnt.join("b"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    // Read-only: everything written and the image marked clean while mounted (fsck refuses a
    // mounted image: a copy).
    let copy = t.path().join("copy");
    fs::copy(&img, &copy).unwrap();
    fsck_clean(&copy);
    assert!(dumpfs_says_clean(&img));
    // mount(8) passes the mount table's options back on a remount; the helper takes them.
    let spec = format!("sufs:{}", img.display());
    let out = run(&helper, &[&spec, m, "-o", "rw,user_id=0,group_id=0,default_permissions,allow_other,remount"]);
    assert!(out.status.success(), "{}", text(&out));
    fs::write(mnt.join("b"), b"written after").unwrap();
    assert!(!dumpfs_says_clean(&img));
    let out = sufs(&["mount", "-o", "remount,ordering=sync", m]);
    assert_eq!(out.status.code(), Some(32), "{}", text(&out));
    sufs_umount(&mnt);
    fsck_clean(&img);
    // A read-only mount may become read-write.
    ok(&["mount", i, m, "-o", "ro"]);
    assert_eq!(fs::write(mnt.join("c"), b"x").unwrap_err().raw_os_error(), Some(libc::EROFS));
    ok(&["mount", "-o", "remount,rw", m]);
    fs::write(mnt.join("c"), b"third").unwrap();
    sufs_umount(&mnt);
    fsck_clean(&img);
    let mnt2 = mount_fg(&img, &mnt, &["-o", "ro"]);
    for (n, want) in [("a", &b"written before"[..]), ("b", b"written after"), ("c", b"third")] {
        assert_eq!(fs::read(mnt.join(n)).unwrap(), want, "{n}");
    }
    mnt2.umount();
}

#[test]
fn root_gets_dev_and_suid_unless_told() {
    let Some((_t, img, mnt)) = setup(true) else { return };
    let null = |m: &Path| {
        let p = m.join("null");
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        let _ = fs::remove_file(&p);
        assert_eq!(unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) }, 0);
        fs::write(&p, b"into the void")
    };
    let m = mount_fg(&img, &mnt, &[]);
    let (per_mount, _, _) = mount_entry(&mnt).unwrap();
    assert!(!per_mount.iter().any(|o| o == "nodev" || o == "nosuid" || o == "noexec"), "{per_mount:?}");
    null(&mnt).expect("a device node works on a dev mount");
    m.umount();
    let m = mount_fg(&img, &mnt, &["-o", "nodev,nosuid,noexec"]);
    let (per_mount, _, _) = mount_entry(&mnt).unwrap();
    for f in ["nodev", "nosuid", "noexec"] {
        assert!(per_mount.iter().any(|o| o == f), "{f}: {per_mount:?}");
    }
    assert_eq!(null(&mnt).unwrap_err().raw_os_error(), Some(libc::EACCES), "nodev");
    m.umount();
    fsck_clean(&img);
}

#[test]
fn dirsync_and_sync_changes_survive_a_killed_daemon() {
    let Some((_t, img, mnt)) = setup(false) else { return };
    let m = mount_fg(&img, &mnt, &["-o", "dirsync"]);
    let d = mnt.join("d");
    fs::create_dir(&d).unwrap();
    for i in 0..20 {
        fs::File::create(d.join(format!("f{i}"))).unwrap();
    }
    fs::rename(d.join("f0"), mnt.join("moved")).unwrap();
    fs::remove_file(d.join("f1")).unwrap();
    crash(m);
    let m = mount_fg(&img, &mnt, &["-o", "sync"]);
    let mut names: Vec<String> =
        fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    let mut want: Vec<String> = (2..20).map(|i| format!("f{i}")).collect();
    want.sort();
    assert_eq!(names, want, "dirsync: every name change before the kill is there");
    assert!(mnt.join("moved").exists());
    fs::write(mnt.join("moved"), b"synchronous data").unwrap();
    fs::write(d.join("f2"), vec![7u8; 300_000]).unwrap();
    crash(m);
    // Read-only: no background check of the unclean image (it would hold the mount busy).
    let m = mount_fg(&img, &mnt, &["-o", "ro"]);
    assert_eq!(fs::read(mnt.join("moved")).unwrap(), b"synchronous data");
    assert_eq!(fs::read(d.join("f2")).unwrap(), vec![7u8; 300_000]);
    m.umount();
    let out = sufs(&["fsck", img.to_str().unwrap()]);
    assert!(out.status.code().unwrap_or(8) <= 4, "{}", text(&out));
    assert!(text(&out).contains(" 0 violations"), "{}", text(&out));
}

fn atime_of(p: &Path) -> SystemTime {
    fs::metadata(p).unwrap().accessed().unwrap()
}

/// Sets atime and mtime (ctime becomes now).
fn set_times(p: &Path, atime: SystemTime, mtime: SystemTime) {
    let f = fs::File::options().write(true).open(p).unwrap();
    f.set_times(fs::FileTimes::new().set_accessed(atime).set_modified(mtime)).unwrap();
}

fn near_now(t: SystemTime) -> bool {
    let now = SystemTime::now();
    now.duration_since(t).unwrap_or_default() < Duration::from_secs(30) && t.duration_since(now).is_err()
}

#[test]
fn access_times_through_the_mount() {
    let Some((_t, img, mnt)) = setup(false) else { return };
    let now = SystemTime::now();
    let past = now - Duration::from_secs(1000);
    let future = now + Duration::from_secs(1000);

    // relatime, the default.
    let m = mount_fg(&img, &mnt, &[]);
    let (a, b, d) = (mnt.join("a"), mnt.join("b"), mnt.join("d"));
    for f in [&a, &b] {
        fs::write(f, b"aaa").unwrap();
    }
    set_times(&a, past, past);
    set_times(&b, future, past);
    fs::create_dir(&d).unwrap();
    fs::write(d.join("x"), b"x").unwrap();
    assert_eq!(fs::read(&a).unwrap(), b"aaa");
    assert_eq!(fs::read(&b).unwrap(), b"aaa");
    let a_read = atime_of(&a);
    assert!(near_now(a_read), "relatime: atime before ctime moves to now");
    assert_eq!(atime_of(&b), future, "relatime: a recent atime after mtime and ctime stays");
    let d_before = atime_of(&d);
    assert_eq!(fs::read_dir(&d).unwrap().count(), 1);
    assert!(atime_of(&d) > d_before, "relatime: a listing after a change");
    m.umount();
    fsck_clean(&img);

    // noatime; then the times kept across the remount.
    let m = mount_fg(&img, &mnt, &["-o", "noatime"]);
    assert_eq!(atime_of(&a), a_read, "the atime reached the disk");
    let c = mnt.join("c");
    fs::write(&c, b"ccc").unwrap();
    set_times(&c, past, past);
    fs::read(&c).unwrap();
    assert_eq!(atime_of(&c), past, "noatime");
    m.umount();

    // strictatime: every open's read reaches sufs and changes atime.
    let m = mount_fg(&img, &mnt, &["-o", "strictatime"]);
    set_times(&c, future, past);
    fs::read(&c).unwrap();
    let first = atime_of(&c);
    assert!(near_now(first), "strictatime changes even a recent atime");
    std::thread::sleep(Duration::from_millis(20));
    fs::read(&c).unwrap();
    assert!(atime_of(&c) > first, "strictatime: a second open and read");
    m.umount();

    // nodiratime: files yes, directories no.
    let m = mount_fg(&img, &mnt, &["-o", "strictatime,nodiratime"]);
    let d_before = atime_of(&d);
    let c_before = atime_of(&c);
    std::thread::sleep(Duration::from_millis(20));
    fs::read_dir(&d).unwrap().count();
    fs::read(&c).unwrap();
    assert_eq!(atime_of(&d), d_before, "nodiratime");
    assert!(atime_of(&c) > c_before);
    m.umount();

    // Read-only: nothing changes.
    let m = mount_fg(&img, &mnt, &["-o", "ro,strictatime"]);
    let (c_before, d_before) = (atime_of(&c), atime_of(&d));
    fs::read(&c).unwrap();
    fs::read_dir(&d).unwrap().count();
    assert_eq!((atime_of(&c), atime_of(&d)), (c_before, d_before), "read-only");
    m.umount();
    fsck_clean(&img);
    assert!(fs::metadata(&img).unwrap().size() > 0);
}

/// Through mount(8) and an fstab line, when the installed helper is this build
/// (`sufs install-helper`; the fstests harness and CI install it).
#[test]
fn mount8_and_fstab_through_the_installed_helper() {
    let installed = fs::canonicalize("/sbin/mount.fuse.sufs").ok();
    if installed != fs::canonicalize(SUFS).ok() {
        eprintln!("SKIPPED: /sbin/mount.fuse.sufs is not this build (run `{SUFS} install-helper`)");
        return;
    }
    let Some((t, img, mnt)) = setup(true) else { return };
    let st = Command::new("mount").args(["-t", "fuse.sufs", img.to_str().unwrap(), mnt.to_str().unwrap()]).status();
    assert!(st.unwrap().success());
    assert!(is_mounted(&mnt));
    fs::write(mnt.join("f"), b"through mount(8)").unwrap();
    kernel_umount(&mnt);
    let fstab = t.path().join("fstab");
    fs::write(&fstab, format!("sufs:{} {} fuse.sufs noatime,nosuid 0 0\n", img.display(), mnt.display())).unwrap();
    let st = Command::new("mount").arg("-T").arg(&fstab).arg(&mnt).status();
    assert!(st.unwrap().success());
    let (per_mount, _, _) = mount_entry(&mnt).unwrap();
    assert!(per_mount.contains(&"noatime".to_string()) && per_mount.contains(&"nosuid".to_string()));
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"through mount(8)");
    let st = Command::new("mount").args(["-o", "remount,ro"]).arg(&mnt).status();
    assert!(st.unwrap().success());
    assert!(mount_entry(&mnt).unwrap().0.contains(&"ro".to_string()));
    sufs_umount(&mnt);
    fsck_clean(&img);
}
