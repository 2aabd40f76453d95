//! sufs's tools on UFS2 images: `sufs tunefs` changes what FreeBSD's tunefs changes (the
//! label, minfree and the optimization that follows it, soft updates on or off) and the change
//! reads back through `sufs dumpfs`, every superblock copy, a mount (its ordering, statfs, its
//! label, the reserve a user cannot write into), the UFS2 checker and fuse-ufs; `sufs inspect`
//! prints the FreeBSD-made image as the mount and fuse-ufs show it, and survives damage.

mod common;

use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::fuse::{external_tool, fuse_available, mount_fg};
use common::ufs2::{statvfs, FuseUfs};
use common::{ok, sufs};
use sufs_fs::format::ufs2::{Superblock, SBLOCK_UFS2};

/// Runs `sufs` and returns its exit code, stdout and stderr.
fn run(args: &[&str]) -> (i32, String, String) {
    let out = sufs(args);
    let s = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    (out.status.code().unwrap_or(-1), s(&out.stdout), s(&out.stderr))
}

/// The checker's verdict on `img`: it must find nothing at all.
fn assert_fsck_clean(img: &Path, what: &str) {
    let (code, out, err) = run(&["fsck", "-n", img.to_str().unwrap()]);
    assert!(code == 0 && out.contains(" 0 findings"), "{what}: fsck -n\n{out}{err}");
}

/// The superblock at byte `off` of the image, decoded with its check hash checked.
fn superblock_at(img: &Path, off: u64) -> Superblock {
    let f = fs::File::open(img).unwrap();
    let mut b = vec![0u8; 8192];
    f.read_exact_at(&mut b, off).unwrap();
    Superblock::decode(&b, true).unwrap_or_else(|e| panic!("the superblock at byte {off}: {e}"))
}

/// Every copy of the superblock (each group's, at `cgsblock`) as it is on the image.
fn copies(img: &Path) -> Vec<Superblock> {
    let u = superblock_at(img, SBLOCK_UFS2);
    (0..u.fs_ncg).map(|c| superblock_at(img, u.fsb_offset(u.cgsblock(c)))).collect()
}

/// Whether the image's superblock says soft updates, as read while a mount holds it.
fn softdep_flag(img: &Path) -> bool {
    superblock_at(img, SBLOCK_UFS2).fs_flags & sufs_fs::format::ufs2::FS_DOSOFTDEP != 0
}

/// Runs a shell command as user nobody; whether it succeeded, and its stderr.
fn as_nobody(script: &str) -> (bool, String) {
    use std::os::unix::process::CommandExt;
    let out = Command::new("sh").arg("-c").arg(script).uid(65534).gid(65534).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `xfs_io -c label`: the label a mount reports (FS_IOC_GETFSLABEL).
fn mount_label(mnt: &Path) -> String {
    let out = Command::new("xfs_io").args(["-c", "label"]).arg(mnt).output().expect("xfs_io");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// tunefs on a newfs image: dumpfs, every copy, the checker, a mount and fuse-ufs see the change;
/// the mount's ordering follows soft updates on or off; a user's writes stop at the new reserve.
#[test]
fn tunefs_changes_a_ufs2_image_as_freebsds_tunefs_does() {
    if !fuse_available() {
        return;
    }
    let tool = external_tool("fuse-ufs", "cargo install fuse-ufs");
    let tmp = tempfile::tempdir().unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let (img, mnt) = (tmp.path().join("u.img"), tmp.path().join("mnt"));
    let i = img.to_str().unwrap();
    ok(&["mkfs", "--ufs2", i, "--size", "64M", "-b", "4096", "-f", "4096"]);
    let p = ok(&["tunefs", i, "-p"]);
    assert!(p.contains("minfree   8%") && p.contains("ordering  softdep") && p.contains("optim     time"), "{p}");
    // newfs's soft updates: a mount given no ordering runs them.
    let m = mount_fg(&img, &mnt, &[]);
    assert!(softdep_flag(&img), "a mount of a soft-updates image runs soft updates");
    let before = statvfs(&mnt);
    m.umount();

    let out = ok(&["tunefs", i, "--minfree", "30", "--label", "tuned-1", "--ordering", "sync"]);
    assert!(!out.contains("optimization"), "8% to 30% stays on time: {out}");
    let d = ok(&["dumpfs", i]);
    for want in
        ["minfree   30%  optim time", "label     tuned-1", "ordering  sync for a mount given none (soft updates off)"]
    {
        assert!(d.contains(want), "{want} in:\n{d}");
    }
    for (c, u) in copies(&img).iter().enumerate() {
        let name: Vec<u8> = u.fs_volname.iter().take_while(|&&b| b != 0).copied().collect();
        assert_eq!((u.fs_minfree, &name[..]), (30, &b"tuned-1"[..]), "copy {c}");
    }
    assert_fsck_clean(&img, "after tunefs");

    let m = mount_fg(&img, &mnt, &[]);
    assert!(!softdep_flag(&img), "soft updates off: a mount given no ordering runs sync");
    assert!(mount_label(&mnt).contains("tuned-1"), "{}", mount_label(&mnt));
    let after = statvfs(&mnt);
    let dsize = superblock_at(&img, SBLOCK_UFS2).fs_dsize as u64;
    assert_eq!(before.f_bfree - before.f_bavail, dsize * 8 / 100);
    assert_eq!(after.f_bfree - after.f_bavail, dsize * 30 / 100);
    // A user fills the file system up to the reserve, and no further; root writes past it.
    let pubdir = mnt.join("pub");
    fs::create_dir(&pubdir).unwrap();
    fs::set_permissions(&pubdir, fs::Permissions::from_mode(0o777)).unwrap();
    let (filled, err) = as_nobody(&format!("dd if=/dev/zero of={}/fill bs=64k 2>&1", pubdir.display()));
    assert!(!filled, "a user's writes must stop at the reserve: {err}");
    let written = fs::metadata(pubdir.join("fill")).unwrap().len();
    let frsize = after.f_frsize;
    let avail = after.f_bavail * frsize;
    assert!(written <= avail && written + (1 << 20) > avail, "wrote {written} of {avail} available");
    assert_eq!(statvfs(&mnt).f_bavail, 0, "the user used what was available");
    fs::write(mnt.join("root-file"), vec![7u8; 1 << 20]).expect("root writes into the reserve");
    m.umount();
    assert_fsck_clean(&img, "filled to the reserve");
    assert!(!ok(&["dumpfs", i]).contains("soft updates on"), "the setting stays off");
    if let Some(tool) = &tool {
        let dir = tmp.path().join("fuse-ufs");
        let _m = FuseUfs::mount(tool, &img, &dir);
        assert_eq!(fs::metadata(dir.join("pub/fill")).unwrap().len(), written);
        assert_eq!(fs::read(dir.join("root-file")).unwrap(), vec![7u8; 1 << 20]);
    }

    // Soft updates back on; a sync mount runs without them but leaves the setting on.
    ok(&["tunefs", i, "--ordering", "softdep", "--minfree", "5"]);
    assert!(ok(&["dumpfs", i]).contains("minfree   5%  optim space"), "below 8%, optimized for space");
    let m = mount_fg(&img, &mnt, &["--ordering", "sync"]);
    assert!(!softdep_flag(&img), "the sync mount's crash would need a full fsck");
    m.umount();
    let d = ok(&["dumpfs", i]);
    assert!(d.contains("ordering  softdep for a mount given none (soft updates on)"), "{d}");
    let m = mount_fg(&img, &mnt, &[]);
    assert!(softdep_flag(&img));
    m.umount();
    assert_fsck_clean(&img, "soft updates on again");
}

/// What tunefs refuses on UFS2: a label newfs would refuse, an unclean image, a mounted one.
#[test]
fn tunefs_refusals_on_ufs2() {
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("u.img");
    let i = img.to_str().unwrap();
    ok(&["mkfs", "--ufs2", i, "--size", "64M"]);
    let before = fs::read(&img).unwrap();
    let (code, _, err) = run(&["tunefs", i, "--label", "a b"]);
    assert_eq!((code, err.contains("Valid characters")), (1, true), "{err}");
    let (code, _, err) = run(&["tunefs", i, "--label", &"x".repeat(32)]);
    assert_eq!((code, err.contains("longer than 31")), (1, true), "{err}");
    assert!(fs::read(&img).unwrap() == before, "a refusal writes nothing");
    ok(&["tunefs", i, "--label", &"x".repeat(31)]);
    assert!(ok(&["dumpfs", i]).contains(&format!("label     {}", "x".repeat(31))));
    ok(&["tunefs", i, "--label", ""]);
    assert!(ok(&["dumpfs", i]).contains("label     (none)"));
    // fs_clean cleared, the check hash resealed: tunefs wants fsck first.
    let mut u = superblock_at(&img, SBLOCK_UFS2);
    u.fs_clean = 0;
    fs::OpenOptions::new().write(true).open(&img).unwrap().write_all_at(&u.encode(), SBLOCK_UFS2).unwrap();
    let (code, _, err) = run(&["tunefs", i, "--minfree", "5"]);
    assert_eq!((code, err.contains("sufs fsck -y")), (1, true), "{err}");
    assert!(ok(&["tunefs", i, "-p"]).contains("minfree   8%"), "-p alone reads an unclean image");
    assert_eq!(fs::metadata(&img).unwrap().size(), 64 << 20);
}
