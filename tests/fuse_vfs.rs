//! What the kernel asks of a file system beyond the POSIX calls, through the real FUSE mount
//! (fstests exercises each): file handles that outlive the kernel's caches. Each test checks
//! its result again after a remount and a clean `sufs fsck`. Skipped, with a message, where
//! /dev/fuse is missing or the test needs root and does not have it.

use std::ffi::CString;
use std::fs;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

mod common;

use common::fuse::*;
use common::{pattern, sufs};

fn root() -> bool {
    if unsafe { libc::geteuid() } == 0 {
        true
    } else {
        eprintln!("SKIPPED: needs root (open_by_handle_at, drop_caches)");
        false
    }
}

/// The kernel forgets every unused name and inode: a FUSE file system then hears of each file
/// again only through a LOOKUP.
fn drop_caches() {
    fs::write("/proc/sys/vm/drop_caches", "3").expect("write /proc/sys/vm/drop_caches");
}

/// A file handle as name_to_handle_at gives it: the kernel's `struct file_handle` (length,
/// type, then the bytes; for FUSE the inode number and generation).
#[derive(Clone)]
struct Handle(Vec<u32>);

const MAX_HANDLE_SZ: usize = 128;

fn handle_of(path: &Path) -> Handle {
    let mut buf = vec![0u32; 2 + MAX_HANDLE_SZ / 4];
    buf[0] = MAX_HANDLE_SZ as u32;
    let mut mount_id = 0;
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let r = unsafe { libc::name_to_handle_at(libc::AT_FDCWD, c.as_ptr(), buf.as_mut_ptr().cast(), &mut mount_id, 0) };
    assert_eq!(r, 0, "name_to_handle_at {}: {}", path.display(), std::io::Error::last_os_error());
    Handle(buf)
}

/// open_by_handle_at through the mount `mnt`: the file, or the errno.
fn open_handle(mnt: &Path, h: &Handle, flags: i32) -> Result<fs::File, i32> {
    let m = fs::File::open(mnt).unwrap();
    let mut buf = h.0.clone();
    let fd = unsafe { libc::open_by_handle_at(m.as_raw_fd(), buf.as_mut_ptr().cast(), flags) };
    if fd < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(unsafe { fs::File::from_raw_fd(fd) })
    }
}

fn read_all(mut f: fs::File) -> Vec<u8> {
    let mut v = Vec::new();
    f.read_to_end(&mut v).unwrap();
    v
}

/// Where the kernel says an open directory is (its dentry reconnected to the tree through
/// LOOKUPs of "..").
fn path_of(f: &fs::File) -> std::path::PathBuf {
    fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap()
}

/// Handles of files and directories open after the kernel dropped its caches, in this mount and
/// the next; a handle of a removed file answers ESTALE, also once its inode holds another file
/// (only the generation tells them apart), and the new file's handle opens the new file.
#[test]
fn file_handles_outlive_the_kernels_caches_and_go_stale_with_their_file() {
    if !fuse_available() || !root() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
    // A small inode table: the allocator's rotor comes back to a freed inode soon.
    let out = sufs(&["mkfs", img.to_str().unwrap(), "--size", "64M", "-i", "1048576"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m = mount_fg(&img, &mnt, &[]);
    let d = mnt.join("d");
    fs::create_dir_all(d.join("sub/deeper")).unwrap();
    let n = 8u64;
    for i in 0..n {
        fs::write(d.join(format!("f{i}")), pattern(i, 1000 + i as usize * 3000)).unwrap();
    }
    let files: Vec<Handle> = (0..n).map(|i| handle_of(&d.join(format!("f{i}")))).collect();
    let deeper = handle_of(&d.join("sub/deeper"));
    let root = handle_of(&mnt);

    let check_files = |mnt: &Path, skip: &[u64]| {
        for i in (0..n).filter(|i| !skip.contains(i)) {
            let f = open_handle(mnt, &files[i as usize], libc::O_RDONLY).unwrap_or_else(|e| panic!("f{i}: errno {e}"));
            assert!(read_all(f) == pattern(i, 1000 + i as usize * 3000), "f{i}");
        }
        // A directory's handle: the kernel finds its parents by "..", up to the root.
        let f = open_handle(mnt, &deeper, libc::O_RDONLY | libc::O_DIRECTORY).expect("directory handle");
        assert_eq!(path_of(&f), fs::canonicalize(mnt).unwrap().join("d/sub/deeper"));
        let f = open_handle(mnt, &root, libc::O_RDONLY | libc::O_DIRECTORY).expect("root handle");
        assert_eq!(path_of(&f), fs::canonicalize(mnt).unwrap());
    };
    drop_caches();
    check_files(&mnt, &[]);

    // f1 removed while soft updates still hold its inode (its name's removal is not on disk
    // yet, so its link count is not dropped): already stale.
    assert!(sufs(&["sync", mnt.to_str().unwrap()]).status.success());
    fs::remove_file(d.join("f1")).unwrap();
    drop_caches();
    assert_eq!(open_handle(&mnt, &files[1], libc::O_RDONLY).err(), Some(libc::ESTALE));
    // f0 removed: its handle is stale, and stays so once its inode is taken again.
    let ino0 = fs::metadata(d.join("f0")).unwrap().ino();
    fs::remove_file(d.join("f0")).unwrap();
    drop_caches();
    assert_eq!(open_handle(&mnt, &files[0], libc::O_RDONLY).err(), Some(libc::ESTALE));
    let mut reused = None;
    for k in 0..64 {
        // The inode returns to the free map once its cleared copy is on disk.
        assert!(sufs(&["sync", mnt.to_str().unwrap()]).status.success());
        let p = d.join(format!("new{k}"));
        fs::write(&p, b"the inode's next file").unwrap();
        if fs::metadata(&p).unwrap().ino() == ino0 {
            reused = Some(p);
            break;
        }
    }
    let reused = reused.expect("a new file takes the freed inode");
    let new = handle_of(&reused);
    assert_eq!(new.0[2..4], files[0].0[2..4], "the same inode number in both handles");
    for drop in [false, true] {
        if drop {
            drop_caches();
        }
        assert_eq!(open_handle(&mnt, &files[0], libc::O_RDONLY).err(), Some(libc::ESTALE), "dropped: {drop}");
        assert_eq!(read_all(open_handle(&mnt, &new, libc::O_RDONLY).unwrap()), b"the inode's next file");
    }
    check_files(&mnt, &[0, 1]);
    m.umount();
    fsck_clean(&img);

    // The next mount knows none of them: inode numbers and generations come from the disk.
    let m = mount_fg(&img, &mnt, &[]);
    check_files(&mnt, &[0, 1]);
    assert_eq!(open_handle(&mnt, &files[0], libc::O_RDONLY).err(), Some(libc::ESTALE));
    assert_eq!(read_all(open_handle(&mnt, &new, libc::O_RDONLY).unwrap()), b"the inode's next file");
    // A handle of a number no file has (free, beyond the inode table, beyond 32 bits) is stale.
    for (word, value) in [(3, 60), (3, u32::MAX - 7), (2, 1)] {
        let mut bogus = files[2].clone();
        bogus.0[word] = value;
        assert_eq!(open_handle(&mnt, &bogus, libc::O_RDONLY).err(), Some(libc::ESTALE), "{word} {value}");
    }
    m.umount();
    fsck_clean(&img);
}

/// FS_IOC_SHUTDOWN, `_IOR('X', 125, __u32)`, as fstests' godown calls it on the mount point.
fn shutdown_ioctl(mnt: &Path, flags: u32) -> Result<(), i32> {
    let f = fs::File::open(mnt).unwrap();
    let mut flags = flags;
    let r = unsafe { libc::ioctl(f.as_raw_fd(), 0x8004_587D, &mut flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    }
}

fn errno_of<T>(r: std::io::Result<T>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

/// The fsck report's counts: (allowed, violations).
fn fsck_counts(img: &Path) -> (u64, u64) {
    let out = sufs(&["fsck", img.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text.lines().find(|l| l.contains(" findings (")).unwrap_or_else(|| panic!("fsck: {text}"));
    let num = |before: &str| -> u64 {
        let head = &line[..line.find(before).unwrap()];
        head.rsplit(|c: char| !c.is_ascii_digit()).find(|s| !s.is_empty()).unwrap().parse().unwrap()
    };
    (num(" allowed"), num(" violations"))
}

/// The shutdown ioctl on the mount point stops the mount as a crash would: every request
/// after it fails with EIO, the unmount writes nothing (the image stays unclean), and the next
/// softdep mount comes up at once with the fsync'ed files whole; fsck finds no violation
/// (leaks allowed), and none at all once the background check has run.
#[test]
fn the_shutdown_ioctl_stops_the_mount_as_a_crash_would() {
    if !root() {
        return;
    }
    let Some((t, img, mnt, m)) = small_mount() else { return };
    fs::create_dir_all(mnt.join("d/e")).unwrap();
    let mut open = None;
    for i in 0..20u64 {
        let p = mnt.join(if i % 2 == 0 { format!("d/f{i}") } else { format!("d/e/f{i}") });
        let mut f = fs::File::create(&p).unwrap();
        std::io::Write::write_all(&mut f, &pattern(i, 5000 + i as usize * 700)).unwrap();
        if i % 3 == 0 {
            f.sync_all().unwrap();
        }
        open = Some(f);
    }
    for i in 0..10u64 {
        fs::write(mnt.join(format!("later{i}")), pattern(100 + i, 3000)).unwrap();
    }
    fs::remove_file(mnt.join("d/f2")).unwrap();
    shutdown_ioctl(&mnt, 2).expect("shutdown ioctl");
    let before = fs::metadata(&img).unwrap().modified().unwrap();
    let digest = std::process::Command::new("sha256sum").arg(&img).output().unwrap().stdout;
    // Every request now fails with EIO: a new name, a lookup, a listing, a write, an fsync.
    assert_eq!(errno_of(fs::write(mnt.join("new"), b"x")), Some(libc::EIO));
    assert_eq!(errno_of(fs::metadata(mnt.join("nope"))), Some(libc::EIO));
    assert_eq!(errno_of(fs::read_dir(mnt.join("d/e")).and_then(|mut r| r.next().transpose())), Some(libc::EIO));
    let mut f = open.take().unwrap();
    assert_eq!(errno_of(std::io::Write::write_all(&mut f, b"more")), Some(libc::EIO));
    assert_eq!(errno_of(f.sync_all()), Some(libc::EIO));
    drop(f);
    assert_eq!(errno_of(fs::remove_file(mnt.join("d/f0"))), Some(libc::EIO));
    // A second shutdown is no error (as in xfs and ext4).
    shutdown_ioctl(&mnt, 0).expect("second shutdown");
    m.umount();
    let after = std::process::Command::new("sha256sum").arg(&img).output().unwrap().stdout;
    assert_eq!(digest, after, "the image changed after the shutdown");
    assert_eq!(fs::metadata(&img).unwrap().modified().unwrap(), before);
    let dump = String::from_utf8(sufs(&["dumpfs", img.to_str().unwrap()]).stdout).unwrap();
    assert!(!dump.contains("flags     clean"), "{dump}");
    let (_, violations) = fsck_counts(&img);
    assert_eq!(violations, 0);

    // The next mount: at once (softdep), checked in the background; the fsync'ed files whole.
    assert!(sufs(&["mount", img.to_str().unwrap(), mnt.to_str().unwrap()]).status.success());
    wait_background_fsck(&t.path().join("img.log"));
    for i in (0..20u64).filter(|i| i % 3 == 0) {
        let p = mnt.join(if i % 2 == 0 { format!("d/f{i}") } else { format!("d/e/f{i}") });
        assert!(fs::read(&p).unwrap() == pattern(i, 5000 + i as usize * 700), "{}", p.display());
    }
    fs::write(mnt.join("after"), b"the mount works again").unwrap();
    assert!(sufs(&["umount", mnt.to_str().unwrap()]).status.success());
    assert_eq!(fsck_counts(&img).1, 0);
    // What the background check leaves for a full one (block counts too high, directories
    // no entry names) is preen's.
    let out = sufs(&["fsck", "-p", "-f", img.to_str().unwrap()]);
    assert!(out.status.code().unwrap_or(8) <= 1, "{}", String::from_utf8_lossy(&out.stdout));
    fsck_clean(&img);
    let m = mount_fg(&img, &mnt, &[]);
    assert_eq!(fs::read(mnt.join("after")).unwrap(), b"the mount works again");
    m.umount();
    fsck_clean(&img);
}

/// `sufs shutdown` carries the flag the ioctl cannot: fullsync writes everything first, so
/// nothing done before it is lost; nologflush on an async mount leaves an image the next
/// mount refuses until fsck, as any crash of an async mount does.
#[test]
fn sufs_shutdown_writes_first_or_not_by_its_mode() {
    let Some((_t, img, mnt, m)) = small_mount() else { return };
    fs::create_dir_all(mnt.join("a/b")).unwrap();
    for i in 0..30u64 {
        fs::write(mnt.join(format!("a/b/f{i}")), pattern(i, 2000 + i as usize * 300)).unwrap();
    }
    let out = sufs(&["shutdown", mnt.to_str().unwrap(), "--mode", "fullsync"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("blocks written first"));
    assert_eq!(errno_of(fs::write(mnt.join("x"), b"x")), Some(libc::EIO));
    m.umount();
    assert_eq!(fsck_counts(&img), (0, 0), "fullsync wrote everything");
    let m = mount_fg(&img, &mnt, &[]);
    for i in 0..30u64 {
        assert!(fs::read(mnt.join(format!("a/b/f{i}"))).unwrap() == pattern(i, 2000 + i as usize * 300), "f{i}");
    }
    m.umount();
    fsck_clean(&img);

    let m = mount_fg(&img, &mnt, &["--ordering", "async"]);
    fs::write(mnt.join("lost"), b"never written").unwrap();
    let out = sufs(&["shutdown", mnt.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(" 0 blocks written first"));
    m.umount();
    let out = sufs(&["mount", img.to_str().unwrap(), mnt.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(32), "{}", String::from_utf8_lossy(&out.stderr));
    let out = sufs(&["fsck", "-y", img.to_str().unwrap()]);
    assert!(out.status.code().unwrap_or(8) <= 1, "{}", String::from_utf8_lossy(&out.stdout));
    let m = mount_fg(&img, &mnt, &[]);
    assert!(!mnt.join("lost").exists());
    assert!(fs::read(mnt.join("a/b/f7")).unwrap() == pattern(7, 2000 + 7 * 300));
    m.umount();
    fsck_clean(&img);
    // An unmounted image is refused: there is nothing to stop.
    let out = sufs(&["shutdown", img.to_str().unwrap()]);
    assert!(!out.status.success());
}

fn renameat2(from: &Path, to: &Path, flags: u32) -> Result<(), i32> {
    let (a, b) = (CString::new(from.as_os_str().as_bytes()).unwrap(), CString::new(to.as_os_str().as_bytes()).unwrap());
    let r = unsafe { libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    }
}

/// A whiteout: a character device 0/0.
fn is_whiteout(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let m = fs::symlink_metadata(p).unwrap();
    m.file_type().is_char_device() && m.rdev() == 0
}

/// renameat2's three flags through the mount: RENAME_WHITEOUT (overlayfs's: the source name
/// becomes a whiteout) for a file and a directory, over a file, with NOREPLACE; EXCHANGE swaps
/// and NOREPLACE refuses; EXCHANGE with WHITEOUT is EINVAL. The result after a remount.
#[test]
fn renameat2_whiteout_exchange_and_noreplace() {
    if !root() {
        return;
    }
    let Some((_t, img, mnt, m)) = small_mount() else { return };
    let (up, work) = (mnt.join("upper"), mnt.join("work"));
    fs::create_dir_all(up.join("dir/inner")).unwrap();
    fs::create_dir_all(&work).unwrap();
    fs::write(up.join("file"), b"upper file").unwrap();
    fs::write(up.join("other"), b"other").unwrap();
    fs::write(work.join("target"), b"replaced").unwrap();
    let (wo, ex, nr) = (libc::RENAME_WHITEOUT, libc::RENAME_EXCHANGE, libc::RENAME_NOREPLACE);
    renameat2(&up.join("file"), &work.join("file"), wo).unwrap();
    assert!(is_whiteout(&up.join("file")));
    assert_eq!(fs::read(work.join("file")).unwrap(), b"upper file");
    renameat2(&up.join("dir"), &work.join("dir"), wo).unwrap();
    assert!(is_whiteout(&up.join("dir")));
    assert!(work.join("dir/inner").is_dir());
    renameat2(&up.join("other"), &work.join("target"), wo).unwrap();
    assert!(is_whiteout(&up.join("other")));
    assert_eq!(fs::read(work.join("target")).unwrap(), b"other");
    // NOREPLACE with WHITEOUT over a name: EEXIST, and no whiteout.
    fs::write(up.join("again"), b"again").unwrap();
    assert_eq!(renameat2(&up.join("again"), &work.join("file"), wo | nr), Err(libc::EEXIST));
    assert_eq!(fs::read(up.join("again")).unwrap(), b"again");
    renameat2(&up.join("again"), &work.join("again"), wo | nr).unwrap();
    assert!(is_whiteout(&up.join("again")));
    assert_eq!(renameat2(&work.join("file"), &work.join("target"), wo | ex), Err(libc::EINVAL));
    // The other two flags pass through too.
    renameat2(&work.join("file"), &work.join("target"), ex).unwrap();
    assert_eq!(fs::read(work.join("file")).unwrap(), b"other");
    assert_eq!(renameat2(&work.join("file"), &work.join("target"), nr), Err(libc::EEXIST));
    // A whiteout is removed as any file (overlayfs does, when the name comes back).
    fs::remove_file(up.join("again")).unwrap();
    fs::write(up.join("again"), b"back").unwrap();

    let check = |mnt: &Path| {
        let (up, work) = (mnt.join("upper"), mnt.join("work"));
        for w in ["file", "dir", "other"] {
            assert!(is_whiteout(&up.join(w)), "{w}");
        }
        assert_eq!(fs::read(up.join("again")).unwrap(), b"back");
        assert_eq!(fs::read(work.join("file")).unwrap(), b"other");
        assert_eq!(fs::read(work.join("target")).unwrap(), b"upper file");
        assert_eq!(fs::read(work.join("again")).unwrap(), b"again");
        assert!(work.join("dir/inner").is_dir());
    };
    check(&mnt);
    m.umount();
    fsck_clean(&img);
    let m = mount_fg(&img, &mnt, &[]);
    check(&mnt);
    m.umount();
    fsck_clean(&img);
}

/// The birth time (`statx` with STATX_BTIME, what `stat` shows as "Birth"): FUSE_STATX answers
/// it. Set when the file is made, left alone by writes and time changes, the same after a
/// remount; each file its own.
#[test]
fn statx_shows_the_birth_time_and_it_never_changes() {
    let Some((_t, img, mnt, m)) = small_mount() else { return };
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let (a, b) = (mnt.join("a"), mnt.join("b"));
    fs::write(&a, b"first").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    fs::write(&b, b"second").unwrap();
    let born_a = btime(&a);
    let born_b = btime(&b);
    assert!(born_a.0 >= before, "born now: {born_a:?} >= {before}");
    assert!(born_b > born_a, "b was made after a: {born_b:?} > {born_a:?}");
    std::thread::sleep(std::time::Duration::from_millis(30));
    fs::write(&a, b"rewritten").unwrap();
    let f = fs::File::options().write(true).open(&a).unwrap();
    f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1000)).unwrap();
    drop(f);
    assert_eq!(btime(&a), born_a, "writes and utimes leave it");
    assert!(fs::metadata(&a).unwrap().mtime() == 1000);
    m.umount();
    fsck_clean(&img);
    let m = mount_fg(&img, &mnt, &[]);
    assert_eq!(btime(&a), born_a, "after a remount");
    assert_eq!(btime(&b), born_b);
    m.umount();
    fsck_clean(&img);
}

/// `statx(path, STATX_BTIME)`: the birth time as (seconds, nanoseconds); it must be there.
fn btime(path: &Path) -> (i64, u32) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let r =
        unsafe { libc::statx(libc::AT_FDCWD, c.as_ptr(), 0, libc::STATX_BASIC_STATS | libc::STATX_BTIME, &mut stx) };
    assert_eq!(r, 0, "statx {}: {}", path.display(), std::io::Error::last_os_error());
    assert!(stx.stx_mask & libc::STATX_BTIME != 0, "{}: no birth time in the answer", path.display());
    (stx.stx_btime.tv_sec, stx.stx_btime.tv_nsec)
}

/// A flag set through the ioctl (`chattr +a`) changes the ctime, and `stat` shows the new one
/// at once: the kernel, which had the attributes cached, is told to drop them.
#[test]
fn chattr_changes_the_ctime_stat_shows() {
    let Some((_t, img, mnt, m)) = small_mount() else { return };
    let f = mnt.join("f");
    fs::write(&f, b"x").unwrap();
    let before = fs::metadata(&f).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let file = fs::File::open(&f).unwrap();
    const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
    const FS_APPEND_FL: libc::c_long = 0x20;
    let flags: libc::c_long = FS_APPEND_FL;
    assert_eq!(
        unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_SETFLAGS, &flags) },
        0,
        "{}",
        std::io::Error::last_os_error()
    );
    let after = fs::metadata(&f).unwrap();
    let ns = |m: &fs::Metadata| m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128;
    assert!(ns(&after) > ns(&before), "ctime moved: {} > {}", ns(&after), ns(&before));
    let none: libc::c_long = 0;
    assert_eq!(unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_SETFLAGS, &none) }, 0);
    drop(file);
    m.umount();
    fsck_clean(&img);
}

/// `open(2)` of `path` with `flags`: Ok, or the errno.
fn open_errno(path: &Path, flags: i32) -> Result<(), i32> {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    unsafe { libc::close(fd) };
    Ok(())
}

/// `chattr` through FS_IOC_SETFLAGS on a file opened for reading.
fn set_inode_flags(path: &Path, flags: libc::c_long) {
    const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
    let f = fs::File::open(path).unwrap();
    let r = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_SETFLAGS, &flags) };
    assert_eq!(r, 0, "FS_IOC_SETFLAGS {}: {}", path.display(), std::io::Error::last_os_error());
}

/// What FreeBSD and Linux refuse at open (EPERM): any open for writing or truncating of an
/// immutable file; an open of an append-only file for writing without O_APPEND, or with
/// O_TRUNC. Reading opens of both and appending opens of the append-only file succeed.
fn check_opens_of_flagged_files(immutable: &Path, append: &Path) {
    use libc::{O_APPEND, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY};
    for (flags, what) in [
        (O_WRONLY, "O_WRONLY"),
        (O_RDWR, "O_RDWR"),
        (O_WRONLY | O_APPEND, "O_WRONLY|O_APPEND"),
        (O_RDONLY | O_TRUNC, "O_RDONLY|O_TRUNC"),
    ] {
        assert_eq!(open_errno(immutable, flags), Err(libc::EPERM), "{what} of an immutable file");
    }
    assert_eq!(open_errno(immutable, O_RDONLY), Ok(()));
    assert_eq!(fs::read(immutable).unwrap(), b"frozen");
    for (flags, what) in [
        (O_WRONLY, "O_WRONLY"),
        (O_RDWR, "O_RDWR"),
        (O_WRONLY | O_TRUNC, "O_WRONLY|O_TRUNC"),
        (O_WRONLY | O_APPEND | O_TRUNC, "O_WRONLY|O_APPEND|O_TRUNC"),
    ] {
        assert_eq!(open_errno(append, flags), Err(libc::EPERM), "{what} of an append-only file");
    }
    assert_eq!(open_errno(append, O_RDONLY), Ok(()));
    let mut f = fs::OpenOptions::new().append(true).open(append).unwrap();
    std::io::Write::write_all(&mut f, b"more\n").unwrap();
    drop(f);
    assert!(fs::read(append).unwrap().starts_with(b"log\nmore\n"));
}

/// generic/079's opens: an immutable or append-only file refuses a writer at open, not only
/// at its first write, in this mount and the next.
#[test]
fn immutable_and_append_only_files_refuse_writers_at_open() {
    if !root() {
        return;
    }
    let Some((_t, img, mnt, m)) = small_mount() else { return };
    let (immutable, append) = (mnt.join("immutable"), mnt.join("append"));
    fs::write(&immutable, b"frozen").unwrap();
    fs::write(&append, b"log\n").unwrap();
    const FS_IMMUTABLE_FL: libc::c_long = 0x10;
    const FS_APPEND_FL: libc::c_long = 0x20;
    set_inode_flags(&immutable, FS_IMMUTABLE_FL);
    set_inode_flags(&append, FS_APPEND_FL);
    check_opens_of_flagged_files(&immutable, &append);
    m.umount();
    fsck_clean(&img);
    let m = mount_fg(&img, &mnt, &[]);
    check_opens_of_flagged_files(&immutable, &append);
    set_inode_flags(&immutable, 0);
    set_inode_flags(&append, 0);
    assert_eq!(open_errno(&immutable, libc::O_WRONLY), Ok(()));
    assert_eq!(open_errno(&append, libc::O_WRONLY | libc::O_TRUNC), Ok(()));
    m.umount();
    fsck_clean(&img);
}

/// `open(dir, O_TMPFILE | O_RDWR [| O_EXCL], 0600)`: the file, or the errno.
fn open_tmpfile(dir: &Path, excl: bool) -> Result<fs::File, i32> {
    let c = CString::new(dir.as_os_str().as_bytes()).unwrap();
    let flags = libc::O_TMPFILE | libc::O_RDWR | if excl { libc::O_EXCL } else { 0 };
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o600) };
    if fd < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(unsafe { fs::File::from_raw_fd(fd) })
    }
}

/// `linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, to, AT_SYMLINK_FOLLOW)`: the way to give an
/// O_TMPFILE file a name.
fn link_fd(f: &fs::File, to: &Path) -> Result<(), i32> {
    let from = CString::new(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
    let to = CString::new(to.as_os_str().as_bytes()).unwrap();
    let r =
        unsafe { libc::linkat(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::AT_SYMLINK_FOLLOW) };
    os_result(r)
}

/// Free blocks of the file system `path` is on, as statfs(2) shows them.
fn free_blocks(path: &Path) -> u64 {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut s) }, 0);
    s.f_bfree
}

/// O_TMPFILE (FUSE_TMPFILE): a file with no name, written, then named by `linkat` and found
/// with its data after a remount; one never named gives its space back at its close; one opened
/// with O_EXCL cannot be named (ENOENT, as Linux). fstests' generic/004 checks the same.
#[test]
fn o_tmpfile_files_have_no_name_until_linked() {
    let Some((_t, img, mnt, m)) = small_mount() else { return };
    let dir = mnt.join("d");
    fs::create_dir(&dir).unwrap();
    let data = pattern(7, 300_000);
    let mut f = open_tmpfile(&dir, false).expect("O_TMPFILE");
    std::io::Write::write_all(&mut f, &data).unwrap();
    assert_eq!(f.metadata().unwrap().nlink(), 0, "no name yet");
    assert_eq!(f.metadata().unwrap().mode() & 0o7777, 0o600);
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "nothing in the directory");
    link_fd(&f, &dir.join("named")).expect("linkat of the O_TMPFILE file");
    assert_eq!(f.metadata().unwrap().nlink(), 1);
    let ino = f.metadata().unwrap().ino();
    drop(f);
    assert_eq!(fs::read(dir.join("named")).unwrap(), data);

    // Never named: freed at its close.
    let before = free_blocks(&mnt);
    let mut g = open_tmpfile(&mnt, false).unwrap();
    std::io::Write::write_all(&mut g, &vec![1u8; 4 << 20]).unwrap();
    g.sync_all().unwrap();
    assert!(free_blocks(&mnt) + 1000 < before, "its 4 MiB are in use while it is open");
    drop(g);
    let start = std::time::Instant::now();
    while free_blocks(&mnt) + 10 < before {
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "its space never came back");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // O_EXCL: never linkable.
    let h = open_tmpfile(&mnt, true).unwrap();
    assert_eq!(link_fd(&h, &mnt.join("excl")), Err(libc::ENOENT));
    drop(h);
    // Still open at unmount would be EBUSY; one left open by a process is freed at unmount.
    m.umount();
    fsck_clean(&img);
    let m = mount_fg(&img, &mnt, &[]);
    let named = dir.join("named");
    assert_eq!(fs::read(&named).unwrap(), data, "after a remount");
    assert_eq!(fs::metadata(&named).unwrap().ino(), ino);
    assert_eq!(fs::metadata(&named).unwrap().nlink(), 1);
    assert!(!mnt.join("excl").exists());
    m.umount();
    fsck_clean(&img);
}

/// A crash while O_TMPFILE files are open, one fsync'ed, one named and fsync'ed: the named
/// one is there whole; the nameless ones leave only what fsck allows (leaked inodes and
/// blocks), which preening reclaims.
#[test]
fn a_crash_leaves_unnamed_o_tmpfile_files_as_allowed_leaks() {
    let Some((_t, img, mnt, m)) = small_mount() else { return };
    let data = pattern(9, 100_000);
    let mut a = open_tmpfile(&mnt, false).unwrap();
    std::io::Write::write_all(&mut a, &data).unwrap();
    a.sync_all().unwrap();
    let mut b = open_tmpfile(&mnt, false).unwrap();
    std::io::Write::write_all(&mut b, &data).unwrap();
    link_fd(&b, &mnt.join("kept")).unwrap();
    b.sync_all().unwrap();
    // The root's names: "kept" and what mkfs made (.snap).
    let names = |mnt: &Path| {
        let mut v: Vec<_> = fs::read_dir(mnt).unwrap().map(|e| e.unwrap().file_name()).collect();
        v.sort();
        v
    };
    let named = names(&mnt);
    crash(m);
    drop((a, b));
    let (_allowed, violations) = fsck_counts(&img);
    assert_eq!(violations, 0);
    let out = sufs(&["fsck", "-p", img.to_str().unwrap()]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "preen: {}", String::from_utf8_lossy(&out.stdout));
    fsck_clean(&img);
    let m = mount_fg(&img, &mnt, &[]);
    assert_eq!(fs::read(mnt.join("kept")).unwrap(), data);
    assert_eq!(names(&mnt), named, "no lost+found made to reconnect them");
    let lost = mnt.join("lost+found");
    assert!(!lost.exists() || fs::read_dir(lost).unwrap().count() == 0, "nothing reconnected");
    m.umount();
    fsck_clean(&img);
}

const FS_IOC_SETFSLABEL: libc::c_ulong = 0x4100_9432;

/// FS_IOC_SETFSLABEL on `path` with `label` (NUL-ended when shorter than the buffer's 256
/// bytes): Ok or the errno.
fn set_label(path: &Path, label: &[u8]) -> Result<(), i32> {
    let f = fs::File::open(path).unwrap();
    let mut buf = [0u8; 256];
    buf[..label.len()].copy_from_slice(label);
    os_result(unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_SETFSLABEL, buf.as_ptr()) })
}

/// A system call's result: Ok for 0, else the errno.
fn os_result(r: libc::c_int) -> Result<(), i32> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    }
}

/// The volume label through the mount (FS_IOC_GETFSLABEL, FS_IOC_SETFSLABEL, as `xfs_io -c
/// label` calls them): root sets it, anyone reads it, another user may not set it (EPERM); a
/// label longer than the 31 bytes UFS2's `fs_volname` keeps before its NUL, or filling the
/// 256-byte buffer, is EINVAL; the label set is the superblock's after a remount, as `sufs
/// tunefs -p` shows it.
#[test]
fn the_volume_label_through_the_ioctls() {
    if !root() {
        return;
    }
    let (_t, img, mnt, m) = public_mount(&[]);
    assert_eq!(get_label(&mnt), b"");
    set_label(&mnt, b"data.1").unwrap();
    fs::write(mnt.join("f"), b"x").unwrap();
    assert_eq!(get_label(&mnt.join("f")), b"data.1", "on a file too");
    let max = [b'o'; 31];
    set_label(&mnt, &max).unwrap();
    assert_eq!(get_label(&mnt), max);
    assert_eq!(set_label(&mnt, &[b'o'; 32]), Err(libc::EINVAL), "longer than UFS2 keeps");
    assert_eq!(set_label(&mnt, &[b'l'; 256]), Err(libc::EINVAL), "no room for the NUL");
    assert_eq!(get_label(&mnt), max, "unchanged");
    let nobody = |op: &str| {
        let program = format!(
            "import fcntl, os\nfd = os.open({:?}, os.O_RDONLY)\ntry:\n    {op}\nexcept OSError as e:\n    print(e.errno)",
            mnt.to_str().unwrap()
        );
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", &program])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let get = format!("print(fcntl.ioctl(fd, {FS_IOC_GETFSLABEL}, bytes(256)).rstrip(b'\\0').decode())");
    assert_eq!(nobody(&get), "o".repeat(31), "anyone reads it");
    let set = format!("fcntl.ioctl(fd, {FS_IOC_SETFSLABEL}, b'mine' + bytes(252))");
    assert_eq!(nobody(&set), libc::EPERM.to_string(), "root alone sets it");
    set_label(&mnt, b"data.2").unwrap();
    m.umount();
    fsck_clean(&img);
    assert!(sufs(&["tunefs", img.to_str().unwrap(), "-p"]).stdout.windows(6).any(|w| w == b"data.2"));
    let m = mount_fg(&img, &mnt, &[]);
    assert_eq!(get_label(&mnt), b"data.2", "after a remount");
    set_label(&mnt, b"").unwrap();
    m.umount();
    fsck_clean(&img);
    let m = mount_fg(&img, &mnt, &[]);
    assert_eq!(get_label(&mnt), b"", "cleared");
    m.umount();
}

/// `chattr +S` (FS_SYNC_FL): a flagged file's writes and attribute changes, and the new names
/// in a flagged directory, are durable when the call returns, as on a `sync` mount: a crash
/// (the daemon killed) right after them, long before the syncer's 30 s, loses none of them.
/// lsattr shows the flag, after a remount too.
#[test]
fn chattr_plus_s_makes_changes_durable_before_the_call_returns() {
    const FS_SYNC_FL: libc::c_long = 0x8;
    let Some((_t, img, mnt, m)) = small_mount() else { return };
    let (f, d) = (mnt.join("f"), mnt.join("d"));
    fs::write(&f, b"").unwrap();
    fs::create_dir(&d).unwrap();
    // The file and the directory themselves made durable first; what follows is up to +S.
    sufs(&["sync", mnt.to_str().unwrap()]);
    set_inode_flags(&f, FS_SYNC_FL);
    set_inode_flags(&d, FS_SYNC_FL);
    let data = pattern(3, 70_000);
    let mut w = fs::OpenOptions::new().write(true).open(&f).unwrap();
    std::io::Write::write_all(&mut w, &data).unwrap();
    w.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    fs::write(d.join("new"), b"named in a +S directory").unwrap();
    crash(m);
    drop(w);
    let out = sufs(&["fsck", "-p", img.to_str().unwrap()]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "preen: {}", String::from_utf8_lossy(&out.stdout));
    fsck_clean(&img);
    let m = mount_fg(&img, &mnt, &[]);
    let got = fs::read(&f).unwrap();
    assert!(got == data, "the +S file's write survived the crash: {} bytes of {}", got.len(), data.len());
    assert_eq!(fs::metadata(&f).unwrap().mode() & 0o7777, 0o640, "and its chmod");
    assert!(d.join("new").exists(), "the name made in the +S directory survived the crash");
    let lsattr = std::process::Command::new("lsattr").arg("-d").arg(&f).output();
    if let Ok(out) = lsattr {
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(text.split_whitespace().next().is_some_and(|fl| fl.contains('S')), "lsattr: {text}");
    }
    set_inode_flags(&f, 0);
    m.umount();
    fsck_clean(&img);
}

/// FITRIM, `_IOWR('X', 121, struct fstrim_range)`, on `path`: the bytes trimmed, or the errno.
fn fitrim(path: &Path, start: u64, len: u64, minlen: u64) -> Result<u64, i32> {
    let f = fs::File::open(path).unwrap();
    let mut range = [start, len, minlen];
    os_result(unsafe { libc::ioctl(f.as_raw_fd(), 0xc018_5879 as libc::c_ulong, range.as_mut_ptr()) })?;
    Ok(range[1])
}

/// FITRIM (fstrim) through the mount, on UFS2 with fragments (as `sufs mkfs` makes it): the
/// blocks of a removed file are punched out of the image (its space given back to the host), a
/// file kept reads back whole after a remount, another user may not trim (EPERM), and fsck
/// finds nothing. (The trim once read sufs's earlier map where FreeBSD's group is, and the
/// mount panicked.)
#[test]
fn fitrim_punches_the_free_blocks_out_of_the_image() {
    if !root() {
        return;
    }
    let (_t, img, mnt, m) = public_mount(&[]);
    let format = "UFS2";
    let dump = String::from_utf8_lossy(&sufs(&["dumpfs", img.to_str().unwrap()]).stdout).into_owned();
    assert!(dump.contains("(UFS2)"), "{dump}");
    let allocated = || fs::metadata(&img).unwrap().blocks() * 512;
    let keep = pattern(5, 1 << 20);
    fs::write(mnt.join("keep"), &keep).unwrap();
    fs::write(mnt.join("gone"), vec![0x5a; 16 << 20]).unwrap();
    sufs(&["sync", mnt.to_str().unwrap()]);
    let full = allocated();
    fs::remove_file(mnt.join("gone")).unwrap();
    sufs(&["sync", mnt.to_str().unwrap()]);
    let nobody = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "fstrim"])
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(!nobody.status.success(), "a user may not trim");
    assert_eq!(fitrim(&mnt, u64::MAX - 4096, 8192, 0), Err(libc::EINVAL), "past the end");
    let trimmed = fitrim(&mnt, 0, u64::MAX, 0).expect("FITRIM");
    assert!(trimmed >= 16 << 20, "{format}: the removed file's 16 MiB among the {trimmed} bytes trimmed");
    assert!(allocated() + (15 << 20) < full, "the image gave its space back: {} of {full} bytes", allocated());
    assert_eq!(fs::read(mnt.join("keep")).unwrap(), keep);
    m.umount();
    fsck_clean(&img);
    let m = mount_fg(&img, &mnt, &[]);
    assert_eq!(fs::read(mnt.join("keep")).unwrap(), keep, "after a remount");
    m.umount();
    fsck_clean(&img);
}
