//! Through the real FUSE mount with the kernel's writeback cache (`-o writeback_cache`): the
//! kernel keeps written pages, a regular file's size and its mtime and ctime, and hands them
//! to sufs later (writes at close, fsync or its own writeback; the times with SETATTR). Each
//! test checks what the kernel showed against what sufs stored: after an unmount, a clean
//! `sufs fsck` and a remount. Skipped, with a message, where /dev/fuse is missing.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::fuse::*;
use common::pattern;

const WB: &[&str] = &["-o", "writeback_cache"];
const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
const FS_IMMUTABLE_FL: u32 = 0x10;
const FS_APPEND_FL: u32 = 0x20;

/// A 64 MiB image (`size` otherwise) mounted with the writeback cache in a new temporary
/// directory (kept alive by the first member); None where FUSE is missing.
fn wb_mount(size: &str) -> Option<(tempfile::TempDir, PathBuf, PathBuf, Mounted)> {
    if !fuse_available() {
        return None;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
    mkfs(&img, size);
    let m = mount_fg(&img, &mnt, WB);
    Some((t, img, mnt, m))
}

/// Unmounts, checks the image is clean, and mounts it again with `extra`.
fn cycle(m: Mounted, img: &Path, mnt: &Path, extra: &[&str]) -> Mounted {
    m.umount();
    fsck_clean(img);
    mount_fg(img, mnt, extra)
}

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

/// What `stat` shows of a file that the tests compare across remounts.
fn shown(p: &Path) -> (u64, i64, i64, i64, i64, u32) {
    let m = fs::metadata(p).unwrap();
    (m.size(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec(), m.mode())
}

fn set_flags(p: &Path, flags: u32) {
    let f = File::open(p).unwrap();
    let v = flags as libc::c_int;
    let r = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_SETFLAGS, &v) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

/// Many small writes, which the kernel gathers in its pages: after the close, the size and the
/// kernel's times are stored as shown, across a remount with the cache and one without it.
#[test]
fn small_writes_keep_size_and_kernel_times_across_remount() {
    let Some((_t, img, mnt, m)) = wb_mount("64M") else { return };
    let data = pattern(1, 300_000);
    let mut f = File::create(mnt.join("small")).unwrap();
    for c in data.chunks(100) {
        f.write_all(c).unwrap();
    }
    drop(f);
    // A write past the end leaves a hole; a truncation cuts into pages still dirty.
    let mut g = OpenOptions::new().create(true).truncate(false).write(true).open(mnt.join("holes")).unwrap();
    g.write_all(&data[..20_000]).unwrap();
    g.seek(SeekFrom::Start(1_000_000)).unwrap();
    g.write_all(&data[..5]).unwrap();
    g.set_len(10_001).unwrap();
    g.write_all(b"tail").unwrap();
    drop(g);
    let mut want_holes = data[..10_001].to_vec();
    want_holes.resize(1_000_005, 0);
    want_holes.extend_from_slice(b"tail");
    std::thread::sleep(std::time::Duration::from_millis(30));
    // A chmod's change time and utimensat's times under the cache come from the kernel.
    fs::set_permissions(mnt.join("holes"), fs::Permissions::from_mode(0o640)).unwrap();
    // An attribute block added shows in st_blocks (the kernel keeps the change time only).
    let blocks = fs::metadata(mnt.join("holes")).unwrap().blocks();
    let c = std::ffi::CString::new(mnt.join("holes").to_str().unwrap()).unwrap();
    let value = vec![7u8; 3000];
    let r = unsafe { libc::setxattr(c.as_ptr(), c"user.big".as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    assert!(fs::metadata(mnt.join("holes")).unwrap().blocks() > blocks, "st_blocks counts the attribute block");
    let before = [shown(&mnt.join("small")), shown(&mnt.join("holes"))];
    assert_eq!(before[0].0, data.len() as u64);
    assert_eq!(before[1].0, want_holes.len() as u64);
    assert!(
        before[1].3 * 1_000_000_000 + before[1].4 > before[1].1 * 1_000_000_000 + before[1].2,
        "chmod: ctime after mtime"
    );
    let mut m = m;
    for extra in [WB, &["-o", "nowriteback_cache"][..]] {
        m = cycle(m, &img, &mnt, extra);
        assert_eq!([shown(&mnt.join("small")), shown(&mnt.join("holes"))], before, "{extra:?}");
        assert_eq!(fs::read(mnt.join("small")).unwrap(), data);
        assert_eq!(fs::read(mnt.join("holes")).unwrap(), want_holes);
    }
    m.umount();
    fsck_clean(&img);
}

/// Under the cache a writer of an immutable or append-only file is refused at open (sufs
/// could refuse its writes only when the kernel hands them over, after write(2) succeeded);
/// an append-only file takes O_APPEND writers, whose pages the kernel writes back from a
/// page's start below the file's end; its times take the current time only.
#[test]
fn append_only_and_immutable_are_refused_at_open() {
    let Some((_t, img, mnt, m)) = wb_mount("64M") else { return };
    let (log, frozen) = (mnt.join("log"), mnt.join("frozen"));
    fs::write(&log, b"first line\n").unwrap();
    fs::write(&frozen, b"still").unwrap();
    set_flags(&log, FS_APPEND_FL);
    set_flags(&frozen, FS_IMMUTABLE_FL);
    let open = |p: &Path, o: &mut OpenOptions| errno_of(o.open(p));
    for p in [&log, &frozen] {
        assert_eq!(open(p, OpenOptions::new().write(true)), libc::EPERM, "{p:?}");
        assert_eq!(open(p, OpenOptions::new().read(true).write(true)), libc::EPERM, "{p:?}");
        assert_eq!(open(p, OpenOptions::new().write(true).truncate(true)), libc::EPERM, "{p:?}");
    }
    assert_eq!(open(&frozen, OpenOptions::new().append(true)), libc::EPERM);
    let mut want = b"first line\n".to_vec();
    let mut a = OpenOptions::new().append(true).open(&log).unwrap();
    for i in 0..500 {
        let line = format!("line {i}\n");
        a.write_all(line.as_bytes()).unwrap();
        want.extend_from_slice(line.as_bytes());
    }
    a.sync_all().unwrap();
    // Times: the current time only, also while a writer has the file open.
    let c = std::ffi::CString::new(log.to_str().unwrap()).unwrap();
    let utimes = |t: [libc::timespec; 2]| unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), t.as_ptr(), 0) };
    let ts = |sec, nsec| libc::timespec { tv_sec: sec, tv_nsec: nsec };
    assert_eq!(utimes([ts(0, libc::UTIME_OMIT), ts(1_000_000, 0)]), -1, "an explicit mtime");
    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EPERM));
    assert_eq!(utimes([ts(0, libc::UTIME_NOW), ts(0, libc::UTIME_NOW)]), 0, "the current time");
    a.write_all(b"after the touch\n").unwrap();
    want.extend_from_slice(b"after the touch\n");
    a.sync_all().unwrap();
    a.write_all(b"and fdatasync\n").unwrap();
    want.extend_from_slice(b"and fdatasync\n");
    a.sync_data().unwrap();
    drop(a);
    assert_eq!(fs::read(&log).unwrap(), want);
    assert_eq!(fs::read(&frozen).unwrap(), b"still");
    let before = [shown(&log), shown(&frozen)];
    let m = cycle(m, &img, &mnt, WB);
    // Under the cache the kernel keeps a regular file's ctime itself and takes none from sufs:
    // the ctime of the chattr that froze `frozen` shows only once the kernel has forgotten the
    // inode (docs/vfs.md). The rest is what was shown.
    let no_ctime = |s: (u64, i64, i64, i64, i64, u32)| (s.0, s.1, s.2, s.5);
    assert_eq!(shown(&log), before[0]);
    assert_eq!(no_ctime(shown(&frozen)), no_ctime(before[1]));
    let after = shown(&frozen);
    assert!(
        (after.3, after.4) >= (before[1].3, before[1].4),
        "the ctime only moves on: {after:?} after {:?}",
        before[1]
    );
    assert_eq!(fs::read(&log).unwrap(), want);
    assert_eq!(open(&log, OpenOptions::new().write(true)), libc::EPERM, "still append-only");
    m.umount();
    fsck_clean(&img);
}

/// `sh -c SCRIPT` as user nobody (65534, group 65534), its success.
fn as_nobody(script: &str) -> bool {
    Command::new("sh").arg("-c").arg(script).uid(65534).gid(65534).status().unwrap().success()
}

/// A write by a user without CAP_FSETID clears set-user-ID, and set-group-ID where group
/// execution makes it one or the writer is not in the file's group: the kernel sends such a
/// write at once (not through its cache) flagged FUSE_WRITE_KILL_SUIDGID. Root's writes,
/// which the kernel caches, keep both, also once they are written back.
#[test]
fn a_non_owners_write_clears_set_id_bits() {
    let Some((_t, img, mnt, m)) = wb_mount("64M") else { return };
    fs::set_permissions(&mnt, fs::Permissions::from_mode(0o777)).unwrap();
    let cases =
        [("exec", 0o6777, 0, 0o0777), ("lock-other", 0o6666, 0, 0o0666), ("lock-member", 0o6666, 65534, 0o2666)];
    for (name, mode, gid, _) in cases {
        let p = mnt.join(name);
        fs::write(&p, b"root's\n").unwrap();
        std::os::unix::fs::chown(&p, Some(0), Some(gid)).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        assert!(as_nobody(&format!("printf 'nobody\\n' >> {}", p.display())), "{name}");
    }
    let rooted = mnt.join("rooted");
    fs::write(&rooted, b"x").unwrap();
    fs::set_permissions(&rooted, fs::Permissions::from_mode(0o6755)).unwrap();
    let mut f = OpenOptions::new().append(true).open(&rooted).unwrap();
    f.write_all(b"root writes").unwrap();
    f.sync_all().unwrap();
    drop(f);
    let check = |when: &str| {
        for (name, _, _, want) in cases {
            let p = mnt.join(name);
            assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, want, "{name} {when}");
            assert_eq!(fs::read(&p).unwrap(), b"root's\nnobody\n", "{name} {when}");
        }
        assert_eq!(fs::metadata(&rooted).unwrap().mode() & 0o7777, 0o6755, "root's write {when}");
    };
    check("mounted");
    let m = cycle(m, &img, &mnt, WB);
    check("after a remount");
    m.umount();
    fsck_clean(&img);
}

/// fsync and fdatasync make the kernel's cached pages durable: the kernel writes them to sufs
/// first, then asks for the fsync. A daemon killed right after loses none of it.
#[test]
fn fsync_makes_cached_pages_durable_before_a_kill() {
    let Some((_t, img, mnt, mut m)) = wb_mount("64M") else { return };
    let data = pattern(7, 1_500_000);
    let mut f = File::create(mnt.join("synced")).unwrap();
    for c in data.chunks(3000) {
        f.write_all(c).unwrap();
    }
    f.sync_all().unwrap();
    let mut g = File::create(mnt.join("datasynced")).unwrap();
    for c in data[..200_000].chunks(512) {
        g.write_all(c).unwrap();
    }
    g.sync_data().unwrap();
    let shown_synced = shown(&mnt.join("synced"));
    m.child.kill().unwrap();
    m.child.wait().unwrap();
    drop((f, g));
    let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    m.done = true;

    let m = mount_fg(&img, &mnt, WB);
    assert_eq!(fs::read(mnt.join("synced")).unwrap(), data);
    assert_eq!(fs::read(mnt.join("datasynced")).unwrap(), &data[..200_000]);
    assert_eq!(shown(&mnt.join("synced")), shown_synced, "fsync stored the kernel's times too");
    m.umount();
    fsck_clean(&img);
}

/// Writes through a shared mapping and a truncation of a file whose pages are dirty.
#[test]
fn mmap_writes_and_truncation_of_dirty_pages() {
    let Some((_t, img, mnt, m)) = wb_mount("64M") else { return };
    let p = mnt.join("mapped");
    let f = OpenOptions::new().create(true).truncate(true).read(true).write(true).open(&p).unwrap();
    f.set_len(64 * 1024).unwrap();
    let len = 64 * 1024;
    let map = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, f.as_raw_fd(), 0)
    };
    assert_ne!(map, libc::MAP_FAILED);
    let bytes = unsafe { std::slice::from_raw_parts_mut(map as *mut u8, len) };
    let data = pattern(3, len);
    bytes.copy_from_slice(&data);
    assert_eq!(unsafe { libc::msync(map, len, libc::MS_SYNC) }, 0);
    bytes[100..200].fill(0xab);
    assert_eq!(unsafe { libc::munmap(map, len) }, 0);
    let mut want = data.clone();
    want[100..200].fill(0xab);
    // Dirty pages cut by a truncation, then written past the new end.
    let mut f = f;
    f.seek(SeekFrom::Start(70_000)).unwrap();
    f.write_all(&data[..5000]).unwrap();
    f.set_len(30_000).unwrap();
    f.seek(SeekFrom::Start(40_000)).unwrap();
    f.write_all(b"again").unwrap();
    drop(f);
    want.truncate(30_000);
    want.resize(40_000, 0);
    want.extend_from_slice(b"again");
    assert_eq!(fs::read(&p).unwrap(), want);
    let before = shown(&p);
    let m = cycle(m, &img, &mnt, WB);
    assert_eq!(shown(&p), before);
    let mut got = Vec::new();
    File::open(&p).unwrap().read_to_end(&mut got).unwrap();
    assert_eq!(got, want);
    m.umount();
    fsck_clean(&img);
}

/// A file system too small for what the kernel cached: write(2) succeeds into the cache, and
/// the error comes when the kernel hands the pages over: at fsync or close, never a silent loss.
#[test]
fn enospc_of_cached_writes_reaches_fsync_or_close() {
    let Some((_t, img, mnt, m)) = wb_mount("16M") else { return };
    let chunk = vec![0x5au8; 1 << 20];
    let mut f = File::create(mnt.join("big")).unwrap();
    let mut failed = 0;
    let mut written = 0u64;
    for _ in 0..32 {
        match f.write_all(&chunk) {
            Ok(()) => written += chunk.len() as u64,
            Err(e) => {
                failed = e.raw_os_error().unwrap();
                break;
            }
        }
    }
    if failed == 0 {
        failed = errno_of(f.sync_all());
    }
    drop(f);
    assert_eq!(failed, libc::ENOSPC, "write or fsync says ENOSPC ({written} bytes written)");
    let m = cycle(m, &img, &mnt, WB);
    let stored = fs::read(mnt.join("big")).unwrap();
    let holes = stored.chunks(4096).filter(|c| c.iter().all(|&b| b == 0)).count();
    let meta = fs::metadata(mnt.join("big")).unwrap();
    // The kernel hands its pages over in several writes at once, which sufs's request threads
    // may serve out of order: a later one may take the last blocks and an earlier one fail,
    // leaving a hole; the writer was told (ENOSPC).
    let data = stored.chunks(4096).count() - holes;
    assert!(data as u64 * 4096 < 16 << 20, "{data} blocks of data in {} bytes, {}", stored.len(), meta.blocks());
    assert!(stored.iter().all(|&b| b == 0x5a || b == 0), "what is stored is the data or a hole");
    fs::remove_file(mnt.join("big")).unwrap();
    m.umount();
    fsck_clean(&img);
}

/// `sufs sync MNT` has the kernel hand over its dirty pages first (syncfs), so that what a
/// file still open had written survives a kill of the daemon right after. (The kernel holds
/// a FUSE mount's dirty pages to a strict per-mount limit and often has handed them over
/// already: this passed without the syncfs too; it checks the outcome, not the syncfs.)
#[test]
fn sufs_sync_takes_the_kernels_dirty_pages() {
    let Some((_t, img, mnt, mut m)) = wb_mount("64M") else { return };
    let data = pattern(11, 3000);
    let mut f = File::create(mnt.join("open")).unwrap();
    for c in data.chunks(100) {
        f.write_all(c).unwrap();
    }
    let shown_open = shown(&mnt.join("open"));
    let out = common::sufs(&["sync", mnt.to_str().unwrap()]);
    assert!(out.status.success(), "sync: {}", String::from_utf8_lossy(&out.stderr));
    m.child.kill().unwrap();
    m.child.wait().unwrap();
    drop(f);
    let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    m.done = true;

    let m = mount_fg(&img, &mnt, WB);
    assert_eq!(fs::read(mnt.join("open")).unwrap(), data);
    assert_eq!(shown(&mnt.join("open")), shown_open, "with the kernel's times");
    m.umount();
    fsck_clean(&img);
}

/// A writer that never fsyncs meets a full file system at write(2): once sufs refused its
/// pages for space it has the kernel ask for the file's attributes at the next write(2) and
/// answers ENOSPC (without it `cat /dev/zero > f` wrote on for ever into the cache). A user
/// stops short of root's reserve (written-back pages are charged to the file's owner).
#[test]
fn a_writer_that_never_fsyncs_stops_at_enospc() {
    let Some((_t, img, mnt, m)) = wb_mount("32M") else { return };
    fs::set_permissions(&mnt, fs::Permissions::from_mode(0o777)).unwrap();
    let p = mnt.join("user");
    let st = Command::new("timeout")
        .args(["60", "sh", "-c", &format!("cat /dev/zero > {}", p.display())])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&st.stderr).contains("No space left"), "{st:?}");
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    let c = std::ffi::CString::new(mnt.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
    // Less than a block (newfs's 8 fragments) left to the user, the reserve to root.
    assert!(s.f_bavail < 8 && s.f_bfree > 8, "the reserve is left: free {} available {}", s.f_bfree, s.f_bavail);
    // SEEK_DATA and SEEK_HOLE come from the kernel: the data it holds is data.
    let mut f = File::create(mnt.join("sparse")).unwrap();
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    f.write_all(b"end").unwrap();
    let data = unsafe { libc::lseek(f.as_raw_fd(), 4096, libc::SEEK_DATA) };
    assert!(data <= 4096, "no hole where the kernel may hold data: {data}");
    assert_eq!(unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_HOLE) }, (1 << 20) + 3);
    drop(f);
    fs::remove_file(&p).unwrap();
    m.umount();
    fsck_clean(&img);
}

/// A full disk never wedges soft updates. Empty files written past their direct blocks, with
/// the disk's last blocks given back one at a time: with one block free, a file's indirect
/// block takes it and its data block finds none. The writer gets ENOSPC (at write(2), or under
/// the writeback cache at fsync or close), and `sufs sync`, the unmount and fsck find
/// everything in order. (The indirect block's dependency once never completed: every later
/// write and sync failed with EIO, "dependencies did not drain", and the unmount left the image
/// unclean.) With and without the writeback cache.
#[test]
fn a_full_disk_with_indirect_blocks_half_made_still_syncs() {
    if !fuse_available() {
        return;
    }
    for extra in [&[][..], WB] {
        let t = tempfile::tempdir().unwrap();
        let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
        mkfs(&img, "16M");
        // The disk is filled without the cache, so that the file's size is what it holds.
        let m = mount_fg(&img, &mnt, &[]);
        let fill = mnt.join("fill");
        let mut f = File::create(&fill).unwrap();
        let chunk = vec![0x11u8; 1 << 16];
        let mut size = 0u64;
        while f.write_all(&chunk).is_ok() {
            size += chunk.len() as u64;
        }
        let empty: Vec<PathBuf> = (0..8).map(|i| mnt.join(format!("e{i}"))).collect();
        for p in &empty {
            File::create(p).unwrap();
        }
        drop(f);
        let m = cycle(m, &img, &mnt, extra);
        let (mut refused, mut written) = (0, 0);
        for (i, p) in empty.iter().enumerate() {
            // One more block free, then an empty file written at its first indirect block.
            size -= 4096;
            OpenOptions::new().write(true).open(&fill).unwrap().set_len(size).unwrap();
            let mut e = OpenOptions::new().write(true).open(p).unwrap();
            let r =
                e.seek(SeekFrom::Start(13 * 4096)).and_then(|_| e.write_all(&[0x22; 4096])).and_then(|_| e.sync_all());
            match errno_of(r) {
                0 => written += 1,
                libc::ENOSPC => refused += 1,
                x => panic!("{extra:?}: file {i}: errno {x}"),
            }
        }
        assert!(refused > 0 && written > 0, "{extra:?}: {refused} refused, {written} written");
        // The kernel's syncfs reports a write-back error no syncfs has seen yet once (under
        // the cache: the refused pages); sufs's own sync must then succeed.
        let sync = || common::sufs(&["sync", mnt.to_str().unwrap()]);
        let out = sync();
        let said = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success() || said.contains("syncfs") && said.contains("No space"), "{extra:?}: {said}");
        let out = sync();
        assert!(out.status.success(), "{extra:?}: sync: {}", String::from_utf8_lossy(&out.stderr));
        m.umount();
        fsck_clean(&img);
    }
}
