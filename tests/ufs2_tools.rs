//! sufs's tools on UFS2 images: `sufs tunefs` changes what FreeBSD's tunefs changes (the
//! label, minfree and the optimization that follows it, soft updates on or off, FreeBSD's ACL
//! enforcement) and the change
//! reads back through `sufs dumpfs`, every superblock copy, a mount (its ordering, statfs, its
//! label, the reserve a user cannot write into), the UFS2 checker and fuse-ufs; `sufs inspect`
//! prints the FreeBSD-made image as the mount and fuse-ufs show it, and survives damage.

mod common;

use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::fuse::{external_tool, fuse_available, get_label, mount_fg};
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

/// The label a mount reports (FS_IOC_GETFSLABEL).
fn mount_label(mnt: &Path) -> String {
    String::from_utf8_lossy(&get_label(mnt)).into_owned()
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
        // Each copy says where it is, as libufs's sbput writes it.
        assert_eq!(u.fs_sblockactualloc as u64, u.fsb_offset(u.cgsblock(c as u32)), "copy {c}'s place");
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
    // Soft updates turned off take their journal (SU+J) with them.
    u.fs_clean = 1;
    u.fs_flags |= sufs_fs::format::ufs2::FS_SUJ;
    fs::OpenOptions::new().write(true).open(&img).unwrap().write_all_at(&u.encode(), SBLOCK_UFS2).unwrap();
    ok(&["tunefs", i, "--ordering", "sync"]);
    let u = superblock_at(&img, SBLOCK_UFS2);
    assert_eq!(u.fs_flags & (sufs_fs::format::ufs2::FS_SUJ | sufs_fs::format::ufs2::FS_DOSOFTDEP), 0);
    assert_eq!(fs::metadata(&img).unwrap().size(), 64 << 20);
}

/// `--posix-acls` turns FreeBSD's `FS_ACLS` on and off in every copy, as tunefs -a does; a
/// mount keeps it; it is refused beside `FS_NFS4ACLS` and on sufs's earlier format.
#[test]
fn tunefs_turns_freebsds_acl_enforcement_on_and_off() {
    use sufs_fs::format::ufs2::{FS_ACLS, FS_NFS4ACLS};
    let tmp = tempfile::tempdir().unwrap();
    let (img, mnt) = (tmp.path().join("u.img"), tmp.path().join("mnt"));
    let i = img.to_str().unwrap();
    ok(&["mkfs", i, "--size", "64M"]);
    let acls = |img: &Path| copies(img).iter().map(|u| u.fs_flags & FS_ACLS != 0).collect::<Vec<_>>();
    assert!(acls(&img).iter().all(|&on| !on), "newfs's image has no FS_ACLS");
    assert!(ok(&["tunefs", i, "-p"]).contains("acls      POSIX.1e ACLs not enforced on FreeBSD"));
    let p = ok(&["tunefs", i, "--posix-acls", "enable", "-p"]);
    assert!(p.contains("acls      POSIX.1e ACLs enforced on FreeBSD"), "{p}");
    assert!(acls(&img).iter().all(|&on| on), "every copy");
    assert!(ok(&["dumpfs", i]).contains(" acls"));
    assert_fsck_clean(&img, "FS_ACLS on");
    if fuse_available() {
        let m = mount_fg(&img, &mnt, &[]);
        fs::write(mnt.join("f"), b"x").unwrap();
        m.umount();
        assert!(superblock_at(&img, SBLOCK_UFS2).fs_flags & FS_ACLS != 0, "a mount keeps FS_ACLS");
        assert_fsck_clean(&img, "mounted with FS_ACLS");
    }
    ok(&["tunefs", i, "--posix-acls", "disable"]);
    assert!(acls(&img).iter().all(|&on| !on));
    // NFSv4 ACLs on: FreeBSD's tunefs -a enable refuses, and so does sufs, writing nothing.
    let mut u = superblock_at(&img, SBLOCK_UFS2);
    u.fs_flags |= FS_NFS4ACLS;
    fs::OpenOptions::new().write(true).open(&img).unwrap().write_all_at(&u.encode(), SBLOCK_UFS2).unwrap();
    let before = fs::read(&img).unwrap();
    let (code, _, err) = run(&["tunefs", i, "--posix-acls", "enable"]);
    assert_eq!((code, err.contains("mutually exclusive")), (1, true), "{err}");
    assert!(fs::read(&img).unwrap() == before, "a refusal writes nothing");
    // An image of sufs's retired earlier format (its magic at byte 0).
    let old = tmp.path().join("old.img");
    let mut bytes = vec![0u8; 1 << 20];
    bytes[..8].copy_from_slice(&0x5355_4653_4646_5331u64.to_le_bytes());
    fs::write(&old, &bytes).unwrap();
    let (code, _, err) = run(&["tunefs", old.to_str().unwrap(), "--posix-acls", "enable"]);
    assert_eq!((code, err.contains("earlier format")), (8, true), "{err}");
}

/// The names under `dir` as a reader lists them, with their inode numbers.
fn listing(dir: &Path) -> Vec<(String, u64)> {
    let name_ino = |e: fs::DirEntry| (e.file_name().into_string().unwrap(), e.metadata().unwrap().ino());
    let mut v: Vec<(String, u64)> = fs::read_dir(dir).unwrap().map(|e| name_ino(e.unwrap())).collect();
    v.sort();
    v
}

/// `inspect dir`'s entries other than `.` and `..`, sorted: (name, inode).
fn inspect_listing(img: &str, dir: &str) -> Vec<(String, u64)> {
    let out = ok(&["inspect", img, "dir", dir]);
    let mut v: Vec<(String, u64)> = out
        .lines()
        .skip(2)
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let ino = w.next()?.parse().ok()?;
            let name = w.nth(1)?.to_string();
            (name != "." && name != "..").then_some((name, ino))
        })
        .collect();
    v.sort();
    v
}

/// The fragments a `bmap` listing names: data runs, tails and indirect blocks.
fn mapped_fragments(map: &str) -> u64 {
    map.lines()
        .skip(1)
        .filter_map(|l| l.split("fragments ").nth(1))
        .map(|r| {
            let (a, b) = r.split_whitespace().next().unwrap().split_once("..").unwrap();
            b.parse::<u64>().unwrap() - a.parse::<u64>().unwrap() + 1
        })
        .sum()
}

/// On the image FreeBSD made, inspect says what the mount and fuse-ufs show: each directory's
/// names and inode numbers, each file's size and blocks held, a short link's target, and block
/// maps whose fragment runs and indirect blocks add up to the blocks held.
#[test]
fn inspect_shows_the_freebsd_image_as_the_mount_and_fuse_ufs_do() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (img, mnt) = (tmp.path().join("fb.img"), tmp.path().join("mnt"));
    fs::write(&img, common::ufs2::freebsd_image()).unwrap();
    // inspect reads a copy: it refuses an image a mount holds.
    let copy = tmp.path().join("copy.img");
    fs::write(&copy, common::ufs2::freebsd_image()).unwrap();
    let i = copy.to_str().unwrap();
    let m = mount_fg(&img, &mnt, &["-o", "ro"]);
    let readers = {
        let mut r = vec![mnt.clone()];
        let tool = external_tool("fuse-ufs", "cargo install fuse-ufs");
        let fu = tool.as_ref().map(|t| FuseUfs::mount(t, &img, &tmp.path().join("fuse-ufs")));
        if fu.is_some() {
            r.push(tmp.path().join("fuse-ufs"));
        }
        (r, fu)
    };
    let mut checked = 0;
    for root in &readers.0 {
        for dir in ["", "dir1", "dir1/dir2", "dir1/dir2/dir3"] {
            let inspect_dir = if dir.is_empty() { "/".to_string() } else { dir.to_string() };
            let mut theirs = listing(&root.join(dir));
            theirs.retain(|(n, _)| n != ".snap" || dir.is_empty());
            assert_eq!(inspect_listing(i, &inspect_dir), theirs, "{dir} under {}", root.display());
            for (name, ino) in &theirs {
                let p = root.join(dir).join(name);
                let md = fs::symlink_metadata(&p).unwrap();
                let inode = ok(&["inspect", i, "inode", &ino.to_string()]);
                assert!(inode.contains(&format!("size       {}\n", md.len())), "{name}: {inode}");
                assert!(inode.contains(&format!("({} sectors)", md.blocks())), "{name}: {} in {inode}", md.blocks());
                if md.file_type().is_symlink() && md.blocks() == 0 {
                    let target = fs::read_link(&p).unwrap();
                    assert!(
                        inode.contains(&format!("target     {:?} (in the inode)", target.to_str().unwrap())),
                        "{inode}"
                    );
                    checked += 1;
                }
                if md.is_file() || md.file_type().is_symlink() {
                    // Every fragment held is a data run, a tail or an indirect block of the map,
                    // or the extended-attribute area's.
                    let map = ok(&["inspect", i, "bmap", &ino.to_string()]);
                    let ext = inode.lines().find(|l| l.starts_with("extsize")).unwrap();
                    let extsize: u64 = ext.split_whitespace().nth(1).unwrap().parse().unwrap();
                    // Whole blocks of 32 KiB, the last in 4 KiB fragments.
                    let ext_frags = extsize / 32768 * 8 + (extsize % 32768).div_ceil(4096);
                    assert_eq!(mapped_fragments(&map) + ext_frags, md.blocks() / 8, "{name}: {map}");
                    checked += 1;
                }
            }
        }
    }
    // Ten files or more by each reader (the mount, and fuse-ufs where it is installed).
    assert!(checked >= 10 * readers.0.len(), "the files were compared ({checked})");
    drop(readers);
    m.umount();
    // A file's first fragment, as hex: the bytes the mount reads.
    let map = ok(&["inspect", i, "bmap", "4"]);
    assert!(map.contains("lbn 0..0  -> fragments") && map.contains("(a tail of 1)"), "{map}");
    let frag = map.lines().nth(1).unwrap().split("fragments ").nth(1).unwrap().split("..").next().unwrap();
    let block = ok(&["inspect", i, "block", frag]);
    assert!(block.contains("a data fragment") && block.contains("bitmap: in use"), "{block}");
    let sb = ok(&["inspect", i, "sb"]);
    assert!(sb.contains("bsize/fsize/frag  32768 4096 8") && sb.contains("default_ordering  softdep"), "{sb}");
}

/// A volume snapshot of a UFS2 image, its reserved store in the blocks past the file system
/// (a file made longer): growfs refuses the image while the snapshot exists and writes nothing,
/// and grows it once the snapshot is deleted.
#[test]
fn growfs_refuses_a_ufs2_image_with_a_volume_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("u.img");
    let i = img.to_str().unwrap();
    ok(&["mkfs", "--ufs2", i, "--size", "64M", "-b", "4096", "-f", "4096"]);
    fs::OpenOptions::new().write(true).open(&img).unwrap().set_len(80 << 20).unwrap();
    ok(&["volume", "snapshot", "create", "--store", "reserved", i]);
    assert!(ok(&["volume", "snapshot", "status", i]).contains("reserved store, valid"));
    let before = fs::read(&img).unwrap();
    let (code, _, err) = run(&["growfs", i, "--size", "96M"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("has a volume snapshot"), "{err}");
    assert!(fs::read(&img).unwrap() == before, "nothing written");
    ok(&["volume", "snapshot", "delete", i]);
    ok(&["growfs", i, "--size", "96M"]);
    assert!(ok(&["fsck", "-n", i]).contains(" 0 findings"));
}
