//! Through the real FUSE mount: fallocate (default, KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE),
//! SEEK_DATA / SEEK_HOLE, copy_file_range, the inode flags of chattr (immutable, append-only,
//! nodump, noatime) and the minfree reserve, each with its errors; then unmount, a clean fsck, a
//! remount, and everything still as it was. Skipped, with a message, where /dev/fuse is missing.
//! On UFS2 of 4096-byte blocks and fragments (`BS`), so that the offsets below are blocks; UFS2's
//! rule that a file holds no block past its size and keeps its last block shapes what is asked.

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

mod common;

use common::fuse::*;
use common::{pattern, sufs};

/// The block (and fragment) size of the image these tests make (`mount_4k`).
const BS: u64 = 4096;
const KEEP_SIZE: i32 = 0x01;
const PUNCH_HOLE: i32 = 0x02;
const COLLAPSE_RANGE: i32 = 0x08;
const ZERO_RANGE: i32 = 0x10;
const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
const FS_IMMUTABLE_FL: u32 = 0x10;
const FS_APPEND_FL: u32 = 0x20;
const FS_NODUMP_FL: u32 = 0x40;
const FS_NOATIME_FL: u32 = 0x80;

/// Where the sparse file's last block is: past the double indirect block's reach (12 + 512 +
/// 512^2 blocks of 4096 bytes), under the triple one.
const SPARSE_END: u64 = 1100 << 20;

/// A 64 MiB UFS2 image of `BS`-byte blocks and fragments mounted in the foreground in a new
/// temporary directory (kept alive by the first member); None where FUSE is missing.
fn mount_4k() -> Option<(tempfile::TempDir, std::path::PathBuf, std::path::PathBuf, Mounted)> {
    if !fuse_available() {
        return None;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
    let bs = BS.to_string();
    let out = sufs(&["mkfs", img.to_str().unwrap(), "--size", "64M", "-b", &bs, "-f", &bs]);
    assert!(out.status.success(), "mkfs: {}", String::from_utf8_lossy(&out.stderr));
    let m = mount_fg(&img, &mnt, &[]);
    Some((t, img, mnt, m))
}

/// The errno of a call that returned -1, or 0.
fn err(r: i64) -> i32 {
    if r < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    } else {
        0
    }
}

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

fn falloc(f: &File, mode: i32, off: u64, len: u64) -> i32 {
    err(unsafe { libc::fallocate(f.as_raw_fd(), mode, off as i64, len as i64) } as i64)
}

/// lseek with SEEK_DATA or SEEK_HOLE: the offset, or the errno as a negative number.
fn seek(f: &File, off: u64, whence: i32) -> i64 {
    let r = unsafe { libc::lseek(f.as_raw_fd(), off as i64, whence) };
    if r < 0 {
        -(err(r) as i64)
    } else {
        r
    }
}

fn copy_range(src: &File, off_in: u64, dst: &File, off_out: u64, len: usize) -> Result<usize, i32> {
    let (mut i, mut o) = (off_in as i64, off_out as i64);
    let r = unsafe { libc::copy_file_range(src.as_raw_fd(), &mut i, dst.as_raw_fd(), &mut o, len, 0) };
    if r < 0 {
        Err(err(-1))
    } else {
        Ok(r as usize)
    }
}

fn get_flags(p: &Path) -> u32 {
    let f = File::open(p).unwrap();
    let mut v: libc::c_int = 0;
    assert_eq!(
        unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_GETFLAGS, &mut v) },
        0,
        "{}",
        std::io::Error::last_os_error()
    );
    v as u32
}

fn set_flags(p: &Path, flags: u32) -> i32 {
    let f = File::open(p).unwrap();
    let v = flags as libc::c_int;
    err(unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_SETFLAGS, &v) } as i64)
}

fn statvfs(p: &Path) -> libc::statvfs {
    let c = CString::new(p.to_str().unwrap()).unwrap();
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
    s
}

/// fallocate's modes and errors, and SEEK_DATA / SEEK_HOLE over what they leave.
fn fallocate_and_seek(m: &Path) {
    // Default mode: the size grows and the blocks are there, reading as zeros.
    let f = OpenOptions::new().create(true).truncate(true).read(true).write(true).open(m.join("pre")).unwrap();
    assert_eq!(falloc(&f, 0, 0, 1 << 20), 0);
    let md = fs::metadata(m.join("pre")).unwrap();
    assert_eq!(md.len(), 1 << 20);
    assert!(md.blocks() >= (1 << 20) / 512, "preallocated: {} sectors", md.blocks());
    assert!(fs::read(m.join("pre")).unwrap().iter().all(|&b| b == 0));
    // KEEP_SIZE past the end: refused, UFS2 holds no block past a file's size.
    assert_eq!(falloc(&f, KEEP_SIZE, 1 << 20, 256 << 10), libc::EOPNOTSUPP);
    // KEEP_SIZE over the holes of a file grown by truncation (which allocates its last block):
    // blocks, no size.
    f.set_len(1280 << 10).unwrap();
    let before = fs::metadata(m.join("pre")).unwrap().blocks();
    assert_eq!(before, ((1 << 20) + BS + BS) / 512, "the data, the indirect block and the last block");
    assert_eq!(falloc(&f, KEEP_SIZE, 1 << 20, 256 << 10), 0);
    let md = fs::metadata(m.join("pre")).unwrap();
    assert_eq!((md.len(), md.blocks() - before), (1280 << 10, ((256 << 10) - BS) / 512));
    // Errors: PUNCH_HOLE without KEEP_SIZE, modes sufs does not have, length 0.
    assert_eq!(falloc(&f, PUNCH_HOLE, 0, BS), libc::EOPNOTSUPP);
    assert_eq!(falloc(&f, COLLAPSE_RANGE, 0, BS), libc::EOPNOTSUPP);
    assert_eq!(falloc(&f, PUNCH_HOLE | ZERO_RANGE | KEEP_SIZE, 0, BS), libc::EOPNOTSUPP);
    assert_eq!(falloc(&f, 0, 0, 0), libc::EINVAL);
    drop(f);

    // A written file with a hole punched across block boundaries.
    let data = pattern(7, 64 * BS as usize);
    fs::write(m.join("punch"), &data).unwrap();
    let f = OpenOptions::new().read(true).write(true).open(m.join("punch")).unwrap();
    let (a, b) = (10 * BS + 100, 20 * BS + 50);
    let before = fs::metadata(m.join("punch")).unwrap().blocks();
    assert_eq!(falloc(&f, PUNCH_HOLE | KEEP_SIZE, a, b - a), 0);
    let md = fs::metadata(m.join("punch")).unwrap();
    assert_eq!(md.len(), data.len() as u64, "punching keeps the size");
    assert_eq!(before - md.blocks(), 9 * BS / 512, "blocks 11 to 19 freed");
    let mut want = data.clone();
    want[a as usize..b as usize].fill(0);
    assert!(fs::read(m.join("punch")).unwrap() == want);
    assert_eq!(seek(&f, 0, libc::SEEK_HOLE), (11 * BS) as i64);
    assert_eq!(seek(&f, 11 * BS + 5, libc::SEEK_DATA), (20 * BS) as i64);
    assert_eq!(seek(&f, 5, libc::SEEK_DATA), 5);
    assert_eq!(seek(&f, 20 * BS, libc::SEEK_HOLE), data.len() as i64, "the end is a hole");
    assert_eq!(seek(&f, data.len() as u64, libc::SEEK_DATA), -(libc::ENXIO as i64));
    assert_eq!(seek(&f, data.len() as u64, libc::SEEK_HOLE), -(libc::ENXIO as i64));

    // ZERO_RANGE inside, and past the end without KEEP_SIZE (the size grows).
    assert_eq!(falloc(&f, ZERO_RANGE, 100, 9000), 0);
    want[100..9100].fill(0);
    assert_eq!(falloc(&f, ZERO_RANGE, 12 * BS, BS), 0, "zeroing a hole allocates it");
    assert_eq!(seek(&f, 11 * BS, libc::SEEK_DATA), (12 * BS) as i64);
    assert_eq!(falloc(&f, ZERO_RANGE, want.len() as u64 - 10, 5000), 0);
    want[data.len() - 10..].fill(0);
    want.resize(data.len() + 4990, 0);
    assert!(fs::read(m.join("punch")).unwrap() == want);
    fs::write(m.join("punch.want"), &want).unwrap();

    // A sparse file through the indirect blocks: data at 0, at 40 MiB (under the double
    // indirect block) and, its last block, at `SPARSE_END` (under the triple one).
    let f = OpenOptions::new().create(true).truncate(true).read(true).write(true).open(m.join("sparse")).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &pattern(1, BS as usize), 0).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &pattern(2, BS as usize), 40 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &pattern(3, BS as usize), SPARSE_END).unwrap();
    assert_eq!(seek(&f, 0, libc::SEEK_HOLE), BS as i64);
    assert_eq!(seek(&f, BS, libc::SEEK_DATA), 40 << 20);
    assert_eq!(seek(&f, (40 << 20) + 1, libc::SEEK_HOLE), (40 << 20) + BS as i64);
    // A hole punched over the block at 40 MiB frees the indirect blocks it leaves empty too.
    let before = fs::metadata(m.join("sparse")).unwrap().blocks();
    assert_eq!(falloc(&f, PUNCH_HOLE | KEEP_SIZE, 1 << 20, 40 << 20), 0);
    let md = fs::metadata(m.join("sparse")).unwrap();
    assert_eq!(before - md.blocks(), 3 * BS / 512, "the data block and both indirect blocks above it");
    assert_eq!(seek(&f, 0, libc::SEEK_HOLE), BS as i64);
    assert_eq!(seek(&f, BS, libc::SEEK_DATA), SPARSE_END as i64);
    assert_eq!(md.len(), SPARSE_END + BS);

    // A full disk: the file is left as it was, and so is the free space.
    let f = OpenOptions::new().create(true).truncate(true).read(true).write(true).open(m.join("big")).unwrap();
    let free = statvfs(m).f_bfree;
    assert_eq!(falloc(&f, 0, 0, 200 << 20), libc::ENOSPC);
    assert_eq!(falloc(&f, ZERO_RANGE, 0, 200 << 20), libc::ENOSPC);
    let md = fs::metadata(m.join("big")).unwrap();
    assert_eq!((md.len(), md.blocks()), (0, 0));
    assert_eq!(statvfs(m).f_bfree, free);
    // Flags refuse: immutable all of it, append-only all but allocation.
    fs::write(m.join("imm"), b"x").unwrap();
    let f = OpenOptions::new().read(true).write(true).open(m.join("imm")).unwrap();
    assert_eq!(set_flags(&m.join("imm"), FS_IMMUTABLE_FL), 0);
    assert_eq!(falloc(&f, 0, 0, BS), libc::EPERM);
    assert_eq!(set_flags(&m.join("imm"), FS_APPEND_FL), 0);
    assert_eq!(falloc(&f, PUNCH_HOLE | KEEP_SIZE, 0, BS), libc::EPERM);
    assert_eq!(falloc(&f, 0, 0, 2 * BS), 0);
    assert_eq!(set_flags(&m.join("imm"), 0), 0);
}

fn fallocate_verify(m: &Path) {
    let md = fs::metadata(m.join("pre")).unwrap();
    // 1.25 MiB of data and the single indirect block.
    assert_eq!((md.len(), md.blocks()), (1280 << 10, ((1280 << 10) + BS) / 512));
    assert!(fs::read(m.join("punch")).unwrap() == fs::read(m.join("punch.want")).unwrap());
    let f = File::open(m.join("punch")).unwrap();
    assert_eq!(seek(&f, 0, libc::SEEK_HOLE), (11 * BS) as i64);
    assert_eq!(seek(&f, 11 * BS, libc::SEEK_DATA), (12 * BS) as i64);
    assert_eq!(seek(&f, 13 * BS, libc::SEEK_DATA), (20 * BS) as i64);
    let f = File::open(m.join("sparse")).unwrap();
    assert_eq!(seek(&f, BS, libc::SEEK_DATA), SPARSE_END as i64);
    assert_eq!(fs::read(m.join("sparse")).unwrap()[..BS as usize], pattern(1, BS as usize)[..]);
    assert_eq!(fs::metadata(m.join("big")).unwrap().blocks(), 0);
}

/// copy_file_range within the mount, and its errors.
fn copy(m: &Path) {
    let data = pattern(3, 300_000);
    fs::write(m.join("src"), &data).unwrap();
    let src = File::open(m.join("src")).unwrap();
    let dst = OpenOptions::new().create(true).truncate(true).read(true).write(true).open(m.join("dst")).unwrap();
    assert_eq!(copy_range(&src, 1000, &dst, 5000, 250_000), Ok(250_000));
    // Past the end of the source: short, then nothing.
    assert_eq!(copy_range(&src, 290_000, &dst, 255_000, 50_000), Ok(10_000));
    assert_eq!(copy_range(&src, 300_000, &dst, 0, 10), Ok(0));
    let got = fs::read(m.join("dst")).unwrap();
    assert_eq!(got.len(), 265_000);
    assert!(got[..5000].iter().all(|&b| b == 0));
    assert!(got[5000..255_000] == data[1000..251_000]);
    assert!(got[255_000..] == data[290_000..]);
    // One file, overlapping ranges: EINVAL; apart: fine.
    let same = OpenOptions::new().read(true).write(true).open(m.join("src")).unwrap();
    assert_eq!(copy_range(&same, 0, &same, 1000, 5000), Err(libc::EINVAL));
    assert_eq!(copy_range(&same, 0, &same, 300_000, 5000), Ok(5000));
    // A destination opened read-only, a directory: EBADF and EISDIR (the kernel's checks).
    assert_eq!(copy_range(&src, 0, &src, 400_000, 10), Err(libc::EBADF));
    let dir = File::open(m).unwrap();
    assert_eq!(copy_range(&dir, 0, &dst, 0, 10), Err(libc::EISDIR));
    // An immutable destination.
    assert_eq!(set_flags(&m.join("dst"), FS_IMMUTABLE_FL), 0);
    assert_eq!(copy_range(&src, 0, &dst, 0, 10), Err(libc::EPERM));
    assert_eq!(set_flags(&m.join("dst"), 0), 0);
}

fn copy_verify(m: &Path) {
    let data = pattern(3, 300_000);
    let got = fs::read(m.join("dst")).unwrap();
    assert!(got[5000..255_000] == data[1000..251_000]);
    let src = fs::read(m.join("src")).unwrap();
    assert!(src.len() == 305_000 && src[300_000..] == data[..5000]);
}

/// A write through a handle opened for writing is refused with EPERM: at the open, or, where
/// the kernel opens files without asking sufs, at the write (at offset 0).
fn refused(h: std::io::Result<File>) {
    match h {
        Ok(mut h) => assert_eq!(errno_of(h.write_all(b"zap")), libc::EPERM),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM)),
    }
}

/// chattr's flags: what immutable and append-only refuse, nodump kept, noatime's reads.
fn flags(m: &Path) {
    let f = m.join("imm");
    fs::write(&f, b"frozen").unwrap();
    fs::create_dir(m.join("d")).unwrap();
    fs::write(m.join("d/inside"), b"in").unwrap();
    assert_eq!(set_flags(&f, FS_IMMUTABLE_FL), 0);
    assert_eq!(get_flags(&f), FS_IMMUTABLE_FL);
    for o in [OpenOptions::new().write(true).clone(), OpenOptions::new().append(true).clone()] {
        refused(o.open(&f));
    }
    assert_eq!(errno_of(File::open(&f).and_then(|h| h.set_len(0))), libc::EINVAL, "read-only handle");
    let c = CString::new(f.to_str().unwrap()).unwrap();
    assert_eq!(err(unsafe { libc::truncate(c.as_ptr(), 0) } as i64), libc::EPERM);
    assert_eq!(errno_of(fs::rename(&f, m.join("imm2"))), libc::EPERM);
    assert_eq!(errno_of(fs::remove_file(&f)), libc::EPERM);
    assert_eq!(errno_of(fs::hard_link(&f, m.join("imm.link"))), libc::EPERM);
    assert_eq!(errno_of(fs::set_permissions(&f, fs::Permissions::from_mode(0o600))), libc::EPERM);
    assert_eq!(fs::read(&f).unwrap(), b"frozen");
    // An immutable directory takes no new name and loses none.
    assert_eq!(set_flags(&m.join("d"), FS_IMMUTABLE_FL), 0);
    assert_eq!(errno_of(fs::write(m.join("d/new"), b"")), libc::EPERM);
    assert_eq!(errno_of(fs::create_dir(m.join("d/sub"))), libc::EPERM);
    assert_eq!(errno_of(fs::remove_file(m.join("d/inside"))), libc::EPERM);
    assert_eq!(errno_of(fs::rename(m.join("d/inside"), m.join("out"))), libc::EPERM);
    assert_eq!(errno_of(fs::remove_dir(m.join("d"))), libc::EPERM);
    // Writing inside a file of the directory is fine: only its names are frozen.
    fs::write(m.join("d/inside"), b"changed").unwrap();

    // Append-only: writes at the end only, with O_APPEND; no truncation, no removal.
    let a = m.join("log");
    fs::write(&a, b"one\n").unwrap();
    assert_eq!(set_flags(&a, FS_APPEND_FL | FS_NODUMP_FL), 0);
    assert_eq!(get_flags(&a), FS_APPEND_FL | FS_NODUMP_FL);
    OpenOptions::new().append(true).open(&a).unwrap().write_all(b"two\n").unwrap();
    refused(OpenOptions::new().write(true).open(&a));
    let c = CString::new(a.to_str().unwrap()).unwrap();
    assert_eq!(err(unsafe { libc::truncate(c.as_ptr(), 0) } as i64), libc::EPERM);
    assert_eq!(errno_of(fs::remove_file(&a)), libc::EPERM);
    assert_eq!(errno_of(fs::rename(&a, m.join("log2"))), libc::EPERM);
    assert_eq!(fs::read(&a).unwrap(), b"one\ntwo\n");
    // Flags sufs does not keep (FS_COMPR_FL): EOPNOTSUPP.
    assert_eq!(set_flags(&m.join("src"), 0x4), libc::EOPNOTSUPP);
    // Only root sets immutable or append-only; the owner sets nodump.
    fs::write(m.join("mine"), b"").unwrap();
    std::os::unix::fs::chown(m.join("mine"), Some(65534), Some(65534)).unwrap();
    fs::set_permissions(m, fs::Permissions::from_mode(0o777)).unwrap();
    let as_nobody = |flag: u32| {
        let st = Command::new("chattr")
            .arg(if flag == FS_IMMUTABLE_FL { "+i" } else { "+d" })
            .arg(m.join("mine"))
            .uid(65534)
            .gid(65534)
            .status()
            .unwrap();
        st.success()
    };
    if Command::new("chattr").arg("-V").output().is_ok() {
        assert!(!as_nobody(FS_IMMUTABLE_FL), "a user may not set immutable");
        assert!(as_nobody(FS_NODUMP_FL), "the owner sets nodump");
        assert_eq!(get_flags(&m.join("mine")), FS_NODUMP_FL);
        // chattr and lsattr as a user would run them.
        let out = Command::new("chattr").arg("+i").arg(m.join("mine")).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let out = Command::new("lsattr").arg("-d").arg(m.join("mine")).output().unwrap();
        let shown = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(shown.starts_with("----i-d"), "lsattr shows {shown}");
        assert_eq!(Command::new("chattr").args(["-i", "-d"]).arg(m.join("mine")).status().unwrap().code(), Some(0));
    } else {
        eprintln!("chattr missing (apt-get install e2fsprogs): the chattr/lsattr part is skipped");
        assert_eq!(set_flags(&m.join("mine"), FS_NODUMP_FL), 0);
        assert_eq!(set_flags(&m.join("mine"), 0), 0);
    }

    // noatime: a read leaves the access time.
    let n = m.join("quiet");
    fs::write(&n, b"quiet").unwrap();
    let old = libc::timespec { tv_sec: 1_000_000, tv_nsec: 0 };
    let times = [old, libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT }];
    let c = CString::new(n.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) }, 0);
    assert_eq!(set_flags(&n, FS_NOATIME_FL), 0);
    fs::read(&n).unwrap();
    assert_eq!(fs::metadata(&n).unwrap().atime(), 1_000_000, "noatime: the read left the atime");
}

fn flags_verify(m: &Path) {
    assert_eq!(get_flags(&m.join("imm")), FS_IMMUTABLE_FL);
    assert_eq!(errno_of(fs::remove_file(m.join("imm"))), libc::EPERM);
    assert_eq!(get_flags(&m.join("d")), FS_IMMUTABLE_FL);
    assert_eq!(get_flags(&m.join("log")), FS_APPEND_FL | FS_NODUMP_FL);
    assert_eq!(get_flags(&m.join("quiet")), FS_NOATIME_FL);
    assert_eq!(get_flags(&m.join("mine")), 0);
    assert_eq!(fs::read(m.join("d/inside")).unwrap(), b"changed");
    // Cleared, everything may go again.
    for p in ["imm", "d", "log"] {
        assert_eq!(set_flags(&m.join(p), 0), 0);
    }
    fs::remove_file(m.join("imm")).unwrap();
    fs::remove_file(m.join("log")).unwrap();
    fs::remove_dir_all(m.join("d")).unwrap();
}

#[test]
fn fallocate_seek_copy_and_flags_survive_unmount_and_fsck() {
    let Some((_t, img, mnt, m)) = mount_4k() else { return };
    fallocate_and_seek(&mnt);
    copy(&mnt);
    flags(&mnt);
    fallocate_verify(&mnt);
    m.umount();
    fsck_clean(&img);
    let m = mount_fg(&img, &mnt, &[]);
    fallocate_verify(&mnt);
    copy_verify(&mnt);
    flags_verify(&mnt);
    m.umount();
    fsck_clean(&img);
}

/// The minfree reserve: `df` shows it, a user other than root stops short of it with ENOSPC,
/// root writes into it; mkfs's `--minfree` sets it, and it survives a remount.
#[test]
fn minfree_reserve_is_for_root() {
    if !fuse_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
    let out = sufs(&["mkfs", img.to_str().unwrap(), "--size", "32M", "--minfree", "20"]);
    assert!(out.status.success(), "{out:?}");
    let out = sufs(&["mkfs", t.path().join("bad").to_str().unwrap(), "--size", "32M", "--minfree", "100"]);
    assert!(!out.status.success(), "minfree 100% is refused");
    let m = mount_fg(&img, &mnt, &[]);
    let s = statvfs(&mnt);
    let reserve = s.f_bfree - s.f_bavail;
    let data = s.f_blocks; // the data blocks
    assert_eq!(reserve, data * 20 / 100, "df: {} free, {} available", s.f_bfree, s.f_bavail);
    fs::set_permissions(&mnt, fs::Permissions::from_mode(0o777)).unwrap();
    // A user fills the disk: ENOSPC with the reserve left.
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!("cat /dev/zero > {}", mnt.join("user").display()))
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&st.stderr).contains("No space left"), "{st:?}");
    let s = statvfs(&mnt);
    // Less than a block left to the user (newfs's 8 fragments: a file's middle takes whole blocks).
    assert!(s.f_bavail < 8 && s.f_bfree + 2 >= reserve, "free {} available {}", s.f_bfree, s.f_bavail);
    let user_size = fs::metadata(mnt.join("user")).unwrap().len();
    // A user's fallocate meets the reserve too; root's goes into it.
    let st =
        Command::new("fallocate").args(["-l", "1M"]).arg(mnt.join("user2")).uid(65534).gid(65534).output().unwrap();
    assert!(!st.status.success(), "{st:?}");
    let mut f = File::create(mnt.join("root")).unwrap();
    f.write_all(&vec![1u8; (reserve as usize / 2) * BS as usize]).unwrap();
    drop(f);
    m.umount();
    fsck_clean(&img);
    let out = sufs(&["dumpfs", img.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("minfree   20%"), "{out:?}");
    let m = mount_fg(&img, &mnt, &[]);
    let s = statvfs(&mnt);
    assert_eq!(s.f_bfree - s.f_bavail.min(s.f_bfree), s.f_bfree.min(reserve));
    assert_eq!(fs::metadata(mnt.join("user")).unwrap().len(), user_size);
    fs::remove_file(mnt.join("root")).unwrap();
    fs::remove_file(mnt.join("user")).unwrap();
    // The space of a removed file counts as free once the kernel lets go of the inode (its
    // FORGET may come a moment after the unlink returns).
    let mut s = statvfs(&mnt);
    for _ in 0..200 {
        if s.f_bfree - s.f_bavail == reserve {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        s = statvfs(&mnt);
    }
    assert_eq!(s.f_bfree - s.f_bavail, reserve);
    m.umount();
    fsck_clean(&img);
}

/// Set-user-ID and set-group-ID after a change by a user without CAP_FSETID (nobody, through
/// setpriv), as Linux's `setattr_should_drop_suidgid`: set-user-ID goes always, set-group-ID
/// where group execution is on or the user is not in the file's group. For a buffered and a
/// direct write, a truncation and fallocate's default mode, hole punch and zero range; with
/// and without the writeback cache. `stat` shows the mode at once (the kernel kept the mode
/// from before a write or fallocate until a remount), and the same after a remount.
#[test]
fn changes_by_a_user_clear_set_id_bits_as_linux_does() {
    let Some((_t, img, mnt, m)) = small_mount() else { return };
    let ops: [(&str, &str); 6] = [
        ("write", "printf x >> F"),
        ("direct", "dd if=/dev/zero of=F bs=4096 count=1 oflag=direct conv=notrunc status=none"),
        ("truncate", "truncate -s 100 F"),
        ("falloc", "fallocate -l 64k F"),
        ("punch", "fallocate -p -o 0 -l 4096 F"),
        ("zero", "fallocate -z -o 0 -l 4096 F"),
    ];
    // (mode, group, mode after): nobody is in group 65534, not in group 0.
    let setups = [(0o6754, 0, 0o0754), (0o6744, 0, 0o0744), (0o6744, 65534, 0o2744), (0o6754, 65534, 0o0754)];
    let mut m = m;
    for (round, extra) in [&[][..], &["-o", "writeback_cache"][..]].into_iter().enumerate() {
        m.umount();
        m = mount_fg(&img, &mnt, extra);
        fs::set_permissions(&mnt, fs::Permissions::from_mode(0o777)).unwrap();
        let mut want = Vec::new();
        for (op, script) in ops {
            for (k, &(mode, gid, after)) in setups.iter().enumerate() {
                let p = mnt.join(format!("{op}-{k}-{round}"));
                fs::write(&p, vec![7u8; 8192]).unwrap();
                std::os::unix::fs::chown(&p, Some(65534), Some(gid)).unwrap();
                fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
                let st = Command::new("setpriv")
                    .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c"])
                    .arg(script.replace('F', p.to_str().unwrap()))
                    .status()
                    .unwrap();
                assert!(st.success(), "{op} {extra:?}");
                // stat(1) asks for the mode alone (statx's mask), which the kernel answers
                // from what it holds while the mode is not marked stale.
                let out = Command::new("stat").args(["-c", "%a"]).arg(&p).output().unwrap();
                let shown = u32::from_str_radix(String::from_utf8_lossy(&out.stdout).trim(), 8).unwrap();
                assert_eq!(shown, after, "{op} {extra:?}: mode {mode:o} group {gid}: shown {shown:o}");
                want.push((p, after));
            }
        }
        m.umount();
        fsck_clean(&img);
        m = mount_fg(&img, &mnt, extra);
        for (p, after) in want {
            assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, after, "{} after a remount", p.display());
        }
    }
    m.umount();
    fsck_clean(&img);
}
