//! Extended attributes and POSIX ACLs through the real FUSE mount, as a user would: the
//! xattr system calls and their errors, `setfattr`/`getfattr`, `setfacl`/`getfacl` (the
//! kernel enforcing an ACL, a default ACL inherited, chmod), then unmount, a clean fsck, a
//! remount, and everything still there. Skipped, with a message, where /dev/fuse is missing
//! (or the attr and acl tools, unless `SUFS_REQUIRE_SUITES=1`).

use std::ffi::CString;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

mod common;

use common::fuse::*;
use common::pattern;

fn c(p: &Path) -> CString {
    CString::new(p.to_str().unwrap()).unwrap()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// setxattr(2): Ok or the errno.
fn set(p: &Path, name: &str, value: &[u8], flags: i32) -> Result<(), i32> {
    let n = CString::new(name).unwrap();
    let r = unsafe { libc::setxattr(c(p).as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// lsetxattr(2), on a symbolic link itself.
fn lset(p: &Path, name: &str, value: &[u8]) -> Result<(), i32> {
    let n = CString::new(name).unwrap();
    let r = unsafe { libc::lsetxattr(c(p).as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// getxattr(2) with a buffer of `cap` bytes: the bytes, or the errno.
fn get_cap(p: &Path, name: &str, cap: usize) -> Result<Vec<u8>, i32> {
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; cap];
    let r = unsafe { libc::getxattr(c(p).as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), cap) };
    if r < 0 {
        return Err(errno());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

fn get(p: &Path, name: &str) -> Result<Vec<u8>, i32> {
    get_cap(p, name, 1 << 17)
}

/// The size getxattr(2) answers for a buffer of 0.
fn size_of(p: &Path, name: &str) -> Result<usize, i32> {
    let n = CString::new(name).unwrap();
    let r = unsafe { libc::getxattr(c(p).as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as usize)
    }
}

fn list(p: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 1 << 16];
    let r = unsafe { libc::listxattr(c(p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "listxattr: {}", errno());
    let mut names: Vec<String> = buf[..r as usize]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    names.sort();
    names
}

fn remove(p: &Path, name: &str) -> Result<(), i32> {
    let n = CString::new(name).unwrap();
    let r = unsafe { libc::removexattr(c(p).as_ptr(), n.as_ptr()) };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

fn ctime_ns(p: &Path) -> i128 {
    let m = fs::metadata(p).unwrap();
    m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128
}

/// The system calls and their Linux errors.
fn exercise(m: &Path) {
    let f = m.join("f");
    fs::write(&f, pattern(1, 5000)).unwrap();
    assert_eq!(list(&f), Vec::<String>::new());
    assert_eq!(get(&f, "user.none"), Err(libc::ENODATA));
    let before = ctime_ns(&f);
    std::thread::sleep(std::time::Duration::from_millis(20));
    set(&f, "user.a", b"alpha", 0).unwrap();
    assert!(ctime_ns(&f) > before, "a set changes ctime");
    assert_eq!(get(&f, "user.a").unwrap(), b"alpha");
    assert_eq!(size_of(&f, "user.a"), Ok(5), "size 0 asks for the size");
    assert_eq!(get_cap(&f, "user.a", 3), Err(libc::ERANGE));
    assert_eq!(set(&f, "user.a", b"x", libc::XATTR_CREATE), Err(libc::EEXIST));
    assert_eq!(set(&f, "user.b", b"x", libc::XATTR_REPLACE), Err(libc::ENODATA));
    set(&f, "user.a", b"replaced", libc::XATTR_REPLACE).unwrap();
    set(&f, "user.empty", b"", libc::XATTR_CREATE).unwrap();
    assert_eq!(get(&f, "user.empty").unwrap(), b"");
    set(&f, "trusted.t", b"root only", 0).unwrap();
    set(&f, "security.s", b"sec", 0).unwrap();
    assert_eq!(set(&f, "other.x", b"1", 0), Err(libc::EOPNOTSUPP));
    assert_eq!(set(&f, "system.other", b"1", 0), Err(libc::EOPNOTSUPP));
    assert_eq!(set(&f, &format!("user.{}", "n".repeat(251)), b"1", 0), Err(libc::ERANGE), "a name past 255 bytes");
    set(&f, &format!("user.{}", "n".repeat(250)), b"longest name", 0).unwrap();
    assert_eq!(set(&f, "user.huge", &vec![1u8; XATTR_SIZE_MAX + 1], 0), Err(libc::E2BIG), "a value past 64 KiB");
    // The area is two blocks of the file system's: records that cannot fit are ENOSPC, as in UFS2.
    area_fills_at_two_blocks(m);
    // A large value takes the area into its second block (where one value can reach it).
    let (bsize, frsize) = geometry(m);
    let big = big_len(m);
    set(&f, "user.big", &pattern(7, big), 0).unwrap();
    assert_eq!(get(&f, "user.big").unwrap(), pattern(7, big));
    let held = 5000u64.next_multiple_of(frsize) + (big as u64).next_multiple_of(frsize);
    assert!(
        fs::metadata(&f).unwrap().blocks() * 512 >= held,
        "the attribute blocks count in st_blocks ({bsize}-byte blocks of {frsize}-byte fragments)"
    );
    let mut names = vec!["security.s", "trusted.t", "user.a", "user.big", "user.empty"];
    let long = format!("user.{}", "n".repeat(250));
    names.push(&long);
    names.sort();
    assert_eq!(list(&f), names);
    remove(&f, "user.empty").unwrap();
    assert_eq!(remove(&f, "user.empty"), Err(libc::ENODATA));
    // Symbolic links take no user attributes (as on Linux), but other namespaces.
    std::os::unix::fs::symlink("f", m.join("sym")).unwrap();
    assert_eq!(lset(&m.join("sym"), "user.x", b"1"), Err(libc::EPERM));
    lset(&m.join("sym"), "trusted.x", b"on the link").unwrap();
    // A directory has them too; a removed file's go with it.
    fs::create_dir(m.join("d")).unwrap();
    set(&m.join("d"), "user.dir", b"of a directory", 0).unwrap();
    let g = m.join("gone");
    fs::write(&g, b"g").unwrap();
    set(&g, "user.x", &pattern(3, 5000), 0).unwrap();
    fs::remove_file(&g).unwrap();
    // Many files with attributes, then rewritten.
    for i in 0..50u64 {
        let p = m.join(format!("many{i}"));
        fs::write(&p, b"").unwrap();
        for k in 0..4u64 {
            set(&p, &format!("user.k{k}"), &pattern(i * 4 + k, (i * 37 + k * 11) as usize % 900), 0).unwrap();
        }
        set(&p, "user.k1", b"again", 0).unwrap();
    }
}

/// The largest value Linux passes to a file system (`XATTR_SIZE_MAX`): past it, E2BIG.
const XATTR_SIZE_MAX: usize = 65536;

/// The block and fragment sizes of the file system mounted on `m` (statvfs's f_bsize and
/// f_frsize).
fn geometry(m: &Path) -> (u64, u64) {
    let s = common::ufs2::statvfs(m);
    (s.f_bsize, s.f_frsize)
}

/// The length of `user.big`: half a block past the area's first block, where a value may be
/// that long.
fn big_len(m: &Path) -> usize {
    ((geometry(m).0 * 3 / 2) as usize).min(XATTR_SIZE_MAX)
}

/// A record's bytes in the area (UFS2's `struct extattr`): a 7-byte header and the name
/// (without its namespace's prefix) padded to 8, then the value padded to 8.
fn record_len(name: &str, value: usize) -> usize {
    (7 + name.len()).next_multiple_of(8) + value.next_multiple_of(8)
}

/// A new file's area holds records of two blocks and no byte more: filled to its last byte
/// (with a first value where one value of at most 64 KiB cannot fill it), the set of one byte
/// more answers ENOSPC and changes nothing, the set that fits exactly succeeds.
fn area_fills_at_two_blocks(m: &Path) {
    let p = m.join("full");
    fs::write(&p, b"").unwrap();
    let mut room = 2 * geometry(m).0 as usize;
    let last = record_len("last", 0);
    // The last value one byte longer must still be one Linux passes (not E2BIG).
    let most = XATTR_SIZE_MAX - 8;
    if room - last > most {
        let fill = room - last - most;
        let value = fill - record_len("fill", 0);
        assert_eq!(record_len("fill", value), fill, "a filler of 8-byte multiples");
        set(&p, "user.fill", &vec![3u8; value], 0).unwrap();
        room -= fill;
    }
    let value = room - last;
    assert_eq!(set(&p, "user.last", &vec![4u8; value + 1], 0), Err(libc::ENOSPC), "one byte past the area");
    assert_eq!(get(&p, "user.last"), Err(libc::ENODATA), "the refused set left nothing");
    set(&p, "user.last", &vec![4u8; value], 0).unwrap();
    assert_eq!(get(&p, "user.last").unwrap().len(), value);
    assert_eq!(set(&p, "user.more", b"", 0), Err(libc::ENOSPC), "no room for even an empty record");
}

fn verify(m: &Path) {
    let f = m.join("f");
    assert_eq!(get(&f, "user.a").unwrap(), b"replaced");
    assert_eq!(get(&f, "user.big").unwrap(), pattern(7, big_len(m)));
    assert_eq!(get(&f, "trusted.t").unwrap(), b"root only");
    assert_eq!(get(&f, "user.empty"), Err(libc::ENODATA));
    assert_eq!(fs::read(&f).unwrap(), pattern(1, 5000), "the data is untouched");
    assert_eq!(get(&m.join("d"), "user.dir").unwrap(), b"of a directory");
    let n = CString::new("trusted.x").unwrap();
    let mut buf = [0u8; 64];
    let r = unsafe { libc::lgetxattr(c(&m.join("sym")).as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), 64) };
    assert_eq!(&buf[..r.max(0) as usize], b"on the link");
    for i in 0..50u64 {
        let p = m.join(format!("many{i}"));
        assert_eq!(get(&p, "user.k1").unwrap(), b"again");
        assert_eq!(get(&p, "user.k3").unwrap(), pattern(i * 4 + 3, (i as usize * 37 + 33) % 900));
    }
}

#[test]
fn xattrs_survive_unmount_and_fsck_in_every_ordering() {
    if !fuse_available() {
        return;
    }
    for ordering in ["softdep", "sync", "async"] {
        let t = tempfile::tempdir().unwrap();
        let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
        mkfs(&img, "64M");
        let m = mount_fg(&img, &mnt, &["--ordering", ordering]);
        exercise(&mnt);
        verify(&mnt);
        m.umount();
        fsck_clean(&img);
        let m = mount_fg(&img, &mnt, &["--ordering", ordering]);
        verify(&mnt);
        // Everything removed: fsck finds every attribute block freed.
        for e in fs::read_dir(&mnt).unwrap() {
            let p = e.unwrap().path();
            if p.file_name().unwrap() != "lost+found" {
                if p.is_dir() && !p.is_symlink() {
                    fs::remove_dir(&p).unwrap();
                } else {
                    fs::remove_file(&p).unwrap();
                }
            }
        }
        m.umount();
        fsck_clean(&img);
    }
}

fn tool(name: &str, package: &str) -> bool {
    external_tool(name, &format!("apt-get install {package}")).is_some()
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `cat` as user nobody: true if it could read the file.
fn nobody_reads(p: &Path) -> bool {
    Command::new("cat").arg(p).uid(65534).gid(65534).output().unwrap().status.success()
}

#[test]
fn attr_and_acl_tools_work_and_acls_are_enforced() {
    acls_enforced(&[]);
}

/// The same where sufs checks permissions (`-o permissions=sufs`): the kernel then passes the
/// ACLs through and sufs evaluates them.
#[test]
fn acls_are_enforced_by_sufs_checks() {
    acls_enforced(&["-o", "permissions=sufs"]);
}

fn acls_enforced(opts: &[&str]) {
    if !fuse_available() || !tool("setfattr", "attr") || !tool("setfacl", "acl") {
        return;
    }
    let (_t, img, mnt, m) = common::fuse::public_mount(opts);
    let f = mnt.join("f");
    let fs_ = f.to_str().unwrap();
    fs::write(&f, b"secret").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
    run("setfattr", &["-n", "user.note", "-v", "hello", fs_]);
    assert!(run("getfattr", &["-d", fs_]).contains("user.note=\"hello\""));
    if unsafe { libc::geteuid() } == 0 {
        assert!(!nobody_reads(&f), "mode 0600 keeps nobody out");
    }
    run("setfacl", &["-m", "u:nobody:r", fs_]);
    let acl = run("getfacl", &["-c", fs_]);
    assert!(acl.contains("user:nobody:r--") && acl.contains("mask::r--"), "{acl}");
    // The mode shows the ACL's mask in its group bits.
    assert_eq!(fs::metadata(&f).unwrap().mode() & 0o777, 0o640);
    if unsafe { libc::geteuid() } == 0 {
        assert!(nobody_reads(&f), "the ACL lets nobody read");
    }
    // chmod changes the mask; an ACL the mode says entirely is kept as the mode alone.
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
    assert!(run("getfacl", &["-c", fs_]).contains("mask::---"));
    if unsafe { libc::geteuid() } == 0 {
        assert!(!nobody_reads(&f), "the mask keeps nobody out");
    }
    // A default ACL is inherited by new files and directories (the umask is then not applied).
    let d = mnt.join("d");
    fs::create_dir(&d).unwrap();
    run("setfacl", &["-d", "-m", "u:nobody:rwx", d.to_str().unwrap()]);
    fs::write(d.join("g"), b"g").unwrap();
    fs::create_dir(d.join("sub")).unwrap();
    let g = run("getfacl", &["-c", d.join("g").to_str().unwrap()]);
    assert!(g.contains("user:nobody:rwx") && g.contains("mask::rw-"), "{g}");
    let sub = run("getfacl", &["-c", d.join("sub").to_str().unwrap()]);
    assert!(sub.contains("default:user:nobody:rwx") && sub.contains("user:nobody:rwx"), "{sub}");
    let plain = mnt.join("plain");
    fs::write(&plain, b"").unwrap();
    let acl = run("getfacl", &["-c", plain.to_str().unwrap()]);
    assert!(!acl.contains("mask") && acl.contains("user::rw-"), "no ACL without a default: {acl}");
    m.umount();
    fsck_clean(&img);
    let m = mount_fg(&img, &mnt, opts);
    assert!(run("getfacl", &["-c", fs_]).contains("user:nobody:r--"));
    assert!(run("getfacl", &["-c", d.join("g").to_str().unwrap()]).contains("user:nobody:rwx"));
    assert!(run("getfattr", &["-d", fs_]).contains("user.note=\"hello\""));
    m.umount();
    fsck_clean(&img);
}

/// `ACL_UNDEFINED_ID`: the id of the entries that name no user or group.
const U: u32 = u32::MAX;

/// One record of a UFS2 attribute area (FreeBSD's `struct extattr`, sys/ufs/ufs/extattr.h).
#[derive(Debug)]
struct Record {
    /// Where it starts in the area, and where its content starts.
    start: usize,
    content: usize,
    namespace: u8,
    name: String,
    value: Vec<u8>,
}

/// The records of a UFS2 attribute area, read by hand: `ea_length` u32, `ea_namespace` u8,
/// `ea_contentpadlen` u8, `ea_namelength` u8, the name, the content from the next multiple of 8.
fn extattr_records(area: &[u8]) -> Vec<Record> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < area.len() {
        let len = u32::from_le_bytes(area[at..at + 4].try_into().unwrap()) as usize;
        let (namespace, pad, namelen) = (area[at + 4], area[at + 5] as usize, area[at + 6] as usize);
        let name = String::from_utf8(area[at + 7..at + 7 + namelen].to_vec()).unwrap();
        let content = at + (7 + namelen).div_ceil(8) * 8;
        out.push(Record { start: at, content, namespace, name, value: area[content..at + len - pad].to_vec() });
        at += len;
    }
    out
}

fn names(recs: &[Record]) -> Vec<(u8, &str)> {
    recs.iter().map(|r| (r.namespace, r.name.as_str())).collect()
}

/// FreeBSD's `struct oldacl` (sys/sys/acl.h), 388 bytes: `int acl_cnt`, then 32 entries of
/// `int ae_tag`, `uid_t ae_id`, `mode_t ae_perm` (16 bits) and 2 bytes of padding.
fn oldacl_entries(v: &[u8]) -> Vec<(u32, u32, u16)> {
    assert_eq!(v.len(), 388, "sizeof(struct oldacl)");
    let cnt = i32::from_le_bytes(v[..4].try_into().unwrap()) as usize;
    assert!(v[4 + 12 * cnt..].iter().all(|&b| b == 0), "unused entries are zeros");
    (0..cnt)
        .map(|i| {
            let e = &v[4 + 12 * i..4 + 12 * (i + 1)];
            let u = |o: usize| u32::from_le_bytes(e[o..o + 4].try_into().unwrap());
            (u(0), u(4), u16::from_le_bytes([e[8], e[9]]))
        })
        .collect()
}

fn oldacl(entries: &[(u32, u32, u16)]) -> Vec<u8> {
    let mut v = vec![0u8; 388];
    v[..4].copy_from_slice(&(entries.len() as i32).to_le_bytes());
    for (i, &(tag, id, perm)) in entries.iter().enumerate() {
        let o = 4 + 12 * i;
        v[o..o + 4].copy_from_slice(&tag.to_le_bytes());
        v[o + 4..o + 8].copy_from_slice(&id.to_le_bytes());
        v[o + 8..o + 10].copy_from_slice(&perm.to_le_bytes());
    }
    v
}

/// Inode `ino`'s attribute records in the UFS2 image `img`, and the byte offset of its area.
fn ufs2_records(img: &Path, ino: u32) -> (u64, Vec<Record>) {
    use std::os::unix::fs::FileExt;
    use sufs_fs::format::ufs2::{Dinode, FileReader, Superblock, UFS2_DINODE_SIZE};
    let f = fs::File::open(img).unwrap();
    let (_, sb) = Superblock::search(|off, buf| f.read_exact_at(buf, off)).unwrap();
    let mut raw = vec![0u8; UFS2_DINODE_SIZE];
    f.read_exact_at(&mut raw, sb.ino_offset(ino)).unwrap();
    let dip = Dinode::decode_checked(&raw, &sb, ino).unwrap();
    let area = FileReader::new(&sb, &f, &dip, ino).read_ext().unwrap();
    assert!(area.len() <= sb.fs_bsize as usize, "one block of attributes");
    (sb.fsb_offset(dip.di_extb[0]), extattr_records(&area))
}

/// `sufs fsck -n` finds nothing.
fn fsck_n_clean(img: &Path) {
    let out = common::sufs(&["fsck", "-n", img.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "fsck -n: {}", String::from_utf8_lossy(&out.stdout));
}

/// On UFS2 an ACL set with setfacl is FreeBSD's record (system namespace, `posix1e.acl_access`
/// or `posix1e.acl_default`, a `struct oldacl`), and a record written in FreeBSD's layout, by
/// hand here, reads through sufs as Linux's ACL and is enforced, by the kernel and by sufs.
#[test]
fn acls_on_ufs2_are_freebsds_records() {
    if !fuse_available() || !tool("setfacl", "acl") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
    common::ok(&["mkfs", img.to_str().unwrap(), "--size", "64M"]);
    assert!(common::is_ufs2_image(&img));
    let m = mount_fg(&img, &mnt, &[]);
    let (f, d) = (mnt.join("f"), mnt.join("d"));
    let (fs_, ds) = (f.to_str().unwrap(), d.to_str().unwrap());
    fs::write(&f, b"secret").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
    run("setfacl", &["-m", "u:nobody:r,g:4321:rw", fs_]);
    fs::create_dir(&d).unwrap();
    run("setfacl", &["-d", "-m", "u:1234:rwx", ds]);
    // More than FreeBSD's 32 entries: refused, nothing changed.
    let many: Vec<String> = (0..29).map(|i| format!("u:{}:r", 2000 + i)).collect();
    let out = Command::new("setfacl").args(["-m", &many.join(","), fs_]).output().unwrap();
    assert!(!out.status.success(), "33 entries set");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Argument list too long"), "{out:?}");
    let acl = run("getfacl", &["-cn", fs_]);
    assert!(acl.contains("user:65534:r--") && acl.contains("group:4321:rw-") && !acl.contains("2000"), "{acl}");
    assert_eq!(fs::metadata(&f).unwrap().mode() & 0o777, 0o660);
    let (fino, dino) = (fs::metadata(&f).unwrap().ino() as u32, fs::metadata(&d).unwrap().ino() as u32);
    m.umount();
    fsck_n_clean(&img);

    // The records FreeBSD's ufs_getacl_posix1e reads, and nothing under Linux's names.
    let (area_at, recs) = ufs2_records(&img, fino);
    assert_eq!(names(&recs), [(2, "posix1e.acl_access")]);
    let want = [(0x01, U, 6), (0x02, 65534, 4), (0x04, U, 0), (0x08, 4321, 6), (0x10, U, 6), (0x20, U, 0)];
    assert_eq!(oldacl_entries(&recs[0].value), want);
    let (_, drecs) = ufs2_records(&img, dino);
    assert_eq!(names(&drecs), [(2, "posix1e.acl_default")]);
    assert_eq!(
        oldacl_entries(&drecs[0].value),
        [(0x01, U, 7), (0x02, 1234, 7), (0x04, U, 5), (0x10, U, 7), (0x20, U, 5)]
    );

    // FreeBSD's setfacl changing f's ACL: nobody may read and write, the group entry goes, and
    // the mask is left as FreeBSD's chmod would leave it (7): the mode's group bits (rw) rule.
    let by_hand = oldacl(&[(0x01, U, 6), (0x02, 65534, 6), (0x04, U, 0), (0x10, U, 7), (0x20, U, 0)]);
    let dev = fs::OpenOptions::new().write(true).open(&img).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&dev, &by_hand, area_at + recs[0].content as u64).unwrap();
    drop(dev);
    fsck_n_clean(&img);
    for opts in [&[][..], &["-o", "permissions=sufs"][..]] {
        let m = mount_fg(&img, &mnt, opts);
        let acl = run("getfacl", &["-cn", fs_]);
        assert!(
            acl.contains("user:65534:rw-") && acl.contains("mask::rw-") && !acl.contains("4321"),
            "{opts:?}: {acl}"
        );
        assert!(run("getfacl", &["-cn", ds]).contains("default:user:1234:rwx"));
        if unsafe { libc::geteuid() } == 0 {
            assert!(nobody_reads(&f), "{opts:?}: FreeBSD's ACL lets nobody read");
        }
        m.umount();
    }
    // A chmod under sufs narrows the mask; FreeBSD reads the mode for it.
    let m = mount_fg(&img, &mnt, &["-o", "permissions=sufs"]);
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
    assert!(run("getfacl", &["-cn", fs_]).contains("mask::---"));
    if unsafe { libc::geteuid() } == 0 {
        assert!(!nobody_reads(&f), "the mask keeps nobody out");
    }
    m.umount();
    fsck_n_clean(&img);
    let (_, recs) = ufs2_records(&img, fino);
    assert_eq!(names(&recs), [(2, "posix1e.acl_access")]);
}

/// An ACL an earlier sufs kept on UFS2 (Linux's xattr value under `posix_acl_access` in the
/// system namespace) is read and enforced as the ACL, and goes into FreeBSD's form at the
/// file's next attribute change.
#[test]
fn an_earlier_sufs_acl_on_ufs2_moves_to_freebsds_form() {
    if !fuse_available() || !tool("setfattr", "attr") || !tool("setfacl", "acl") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let (img, mnt) = (t.path().join("img"), t.path().join("mnt"));
    common::ok(&["mkfs", img.to_str().unwrap(), "--size", "64M"]);
    // Linux's xattr format: version 2, then (tag, perm, id): user::rw-, user:nobody:r--,
    // group::---, mask::r--, other::---.
    let mut linux = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [(1u16, 6u16, U), (2, 4, 65534), (4, 0, U), (0x10, 4, U), (0x20, 0, U)] {
        linux.extend(tag.to_le_bytes());
        linux.extend(perm.to_le_bytes());
        linux.extend(id.to_le_bytes());
    }
    let hex: String = linux.iter().map(|b| format!("{b:02x}")).collect();
    // The same record in the user namespace: the earlier record is then one byte away.
    let m = mount_fg(&img, &mnt, &[]);
    let f = mnt.join("f");
    let fs_ = f.to_str().unwrap();
    fs::write(&f, b"secret").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o640)).unwrap();
    run("setfattr", &["-n", "user.posix_acl_access", "-v", &format!("0x{hex}"), fs_]);
    let ino = fs::metadata(&f).unwrap().ino() as u32;
    m.umount();
    let (area_at, recs) = ufs2_records(&img, ino);
    assert_eq!(names(&recs), [(1, "posix_acl_access")]);
    let dev = fs::OpenOptions::new().write(true).open(&img).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&dev, &[2], area_at + recs[0].start as u64 + 4).unwrap();
    drop(dev);
    assert_eq!(names(&ufs2_records(&img, ino).1), [(2, "posix_acl_access")]);
    fsck_n_clean(&img);

    let m = mount_fg(&img, &mnt, &[]);
    let acl = run("getfacl", &["-cn", fs_]);
    assert!(acl.contains("user:65534:r--") && acl.contains("mask::r--"), "{acl}");
    if unsafe { libc::geteuid() } == 0 {
        assert!(nobody_reads(&f), "the earlier ACL lets nobody read");
    }
    // Any attribute change writes the area again, the ACL in FreeBSD's form.
    run("setfattr", &["-n", "user.note", "-v", "x", fs_]);
    m.umount();
    fsck_n_clean(&img);
    let (_, recs) = ufs2_records(&img, ino);
    assert_eq!(names(&recs), [(2, "posix1e.acl_access"), (1, "note")]);
    let want = [(0x01, U, 6), (0x02, 65534, 4), (0x04, U, 0), (0x10, U, 4), (0x20, U, 0)];
    assert_eq!(oldacl_entries(&recs[0].value), want);
    let m = mount_fg(&img, &mnt, &[]);
    assert!(run("getfacl", &["-cn", fs_]).contains("user:65534:r--"));
    m.umount();
}
