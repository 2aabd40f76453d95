//! UFS2 file systems mounted through sufs, read-only: the FreeBSD-made fixture (32 KiB blocks
//! of 4 KiB fragments) reads as the fixture's README says FreeBSD wrote it, and exactly as
//! fuse-ufs, a UFS2 reader no one here wrote, reads it; makefs images of every geometry makefs
//! makes (one to eight fragments a block, 4 to 64 KiB blocks) read as the tree they were made
//! from; the commands that do not take UFS2 yet say so; and nothing a read-only mount does
//! changes a byte of the image (writing is tests/ufs2_write.rs).

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use common::fuse::{external_tool, fuse_available, mount_fg};
use common::sufs;
use common::ufs2::{brief, freebsd_image, have_makefs, makefs, makefs_sample, statvfs, walk, FuseUfs};

/// The fixture unpacked into `dir`.
fn unpack_freebsd(dir: &Path) -> std::path::PathBuf {
    let img = dir.join("freebsd.img");
    fs::write(&img, freebsd_image()).unwrap();
    img
}

fn md5ish(p: &Path) -> Vec<u8> {
    fs::read(p).unwrap()
}

#[test]
fn freebsd_image_reads_as_freebsd_wrote_it() {
    if !fuse_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = unpack_freebsd(t.path());
    let before = md5ish(&img);
    let mnt = t.path().join("mnt");
    let m = mount_fg(&img, &mnt, &["-o", "ro"]);
    let tree = walk(&mnt);
    let data = |p: &str| tree[p].data.clone();
    assert_eq!(data("/file1"), b"This is a simple file.\n");
    assert_eq!(data("/dir1/dir2/dir3/file2"), b"Hello World\n");
    let hex: Vec<u8> = (0..65536u32).flat_map(|i| format!("{i:015x}\n").into_bytes()).collect();
    assert!(data("/file3") == hex, "file3 differs");
    assert_eq!(data("/link1"), b"dir1/dir2/dir3/file2");
    assert_eq!(data("/long-link"), [b"./".repeat(508), b"//file1".to_vec()].concat());
    // The sparse files: a hole, then 8 (sparse2: 1) blocks of 4 KiB of `x` at their end.
    for (name, xs) in [("/sparse", 8 * 4096), ("/sparse2", 4096), ("/sparse3", 8 * 4096)] {
        let d = data(name);
        let tail = &d[d.len() - xs..];
        assert!(tail.iter().all(|&b| b == b'x'), "{name}: its last {xs} bytes");
        assert!(d[..d.len() - xs].iter().all(|&b| b == 0), "{name}: the hole reads as zeros");
    }
    assert_eq!(tree["/sparse3"].size, 549_890_457_600);
    let x = &tree["/xattrs"].xattrs;
    assert_eq!(x.get(&b"user.test"[..]).map(|v| &v[..]), Some(&b"testvalue"[..]));
    assert_eq!(tree["/xattrs2"].xattrs.len(), 2297);
    assert_eq!(tree["/xattrs2"].xattrs[&b"user.attr1234"[..]], b"value1234");
    let big = &tree["/xattrs3"].xattrs[&b"user.big"[..]];
    // FreeBSD stored 63,999 of the 64,000 bytes written (the fixture's own quirk).
    assert_eq!(&big[..], &(0..4000u32).flat_map(|i| format!("{i:015x}\n").into_bytes()).collect::<Vec<_>>()[..63_999]);
    // 23 bytes in one 4 KiB fragment: 8 sectors; statfs counts in fragments.
    let m1 = fs::metadata(mnt.join("file1")).unwrap();
    assert_eq!((m1.blocks(), m1.blksize()), (8, 32768));
    let st = statvfs(&mnt);
    assert_eq!((st.f_bsize, st.f_frsize), (32768, 4096));
    // Nothing changes through a read-only mount.
    assert!(fs::write(mnt.join("new"), b"x").is_err(), "a write through a read-only mount");
    m.umount();
    assert!(md5ish(&img) == before, "a read-only mount changed the image");
}

#[test]
fn freebsd_image_reads_the_same_through_fuse_ufs() {
    if !fuse_available() {
        return;
    }
    let Some(tool) = external_tool("fuse-ufs", "cargo install fuse-ufs") else { return };
    let t = tempfile::tempdir().unwrap();
    let img = unpack_freebsd(t.path());
    let theirs = {
        let _m = FuseUfs::mount(&tool, &img, &t.path().join("theirs"));
        walk(&t.path().join("theirs"))
    };
    let m = mount_fg(&img, &t.path().join("ours"), &["-o", "ro"]);
    let ours = walk(&t.path().join("ours"));
    m.umount();
    assert_eq!(ours.keys().collect::<Vec<_>>(), theirs.keys().collect::<Vec<_>>(), "the names");
    for (name, n) in &ours {
        assert!(*n == theirs[name], "{name}: sufs {:?}\nfuse-ufs {:?}", brief(n), brief(&theirs[name]));
    }
}

#[test]
fn makefs_images_of_every_geometry_read_as_their_tree() {
    let t = tempfile::tempdir().unwrap();
    let Some((src, want)) = makefs_sample(t.path()) else { return };
    for (bsize, fsize) in
        [(4096, 4096), (4096, 512), (8192, 1024), (16384, 2048), (32768, 4096), (65536, 8192), (32768, 32768)]
    {
        let img = t.path().join(format!("img-{bsize}-{fsize}"));
        makefs(&src, &img, bsize, fsize, "64m");
        let before = md5ish(&img);
        let mnt = t.path().join(format!("mnt-{bsize}-{fsize}"));
        let m = mount_fg(&img, &mnt, &["-o", "ro"]);
        let got = walk(&mnt);
        let frsize = statvfs(&mnt).f_frsize;
        m.umount();
        assert_eq!(frsize, fsize as u64, "{bsize}/{fsize}: statfs's fragment size");
        assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{bsize}/{fsize}: the names");
        for (name, w) in &want {
            let g = &got[name];
            // makefs keeps modes, sizes, links, times and contents; not xattrs.
            let same = (g.mode, g.size, g.nlink, g.mtime.0, &g.data) == (w.mode, w.size, w.nlink, w.mtime.0, &w.data);
            assert!(same, "{bsize}/{fsize} {name}: sufs {}\nthe tree {}", brief(g), brief(w));
        }
        assert!(md5ish(&img) == before, "{bsize}/{fsize}: a read-only mount changed the image");
    }
}

/// The volume snapshot's status and dumpfs read FreeBSD's image; neither changes it.
#[test]
fn status_commands_read_the_freebsd_image_and_leave_it_as_it_was() {
    let t = tempfile::tempdir().unwrap();
    let img = unpack_freebsd(t.path());
    let before = md5ish(&img);
    let i = img.to_str().unwrap();
    let out = sufs(&["volume", "snapshot", "status", i]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("no volume snapshot"), "volume snapshot status: {text}");
    let out = sufs(&["dumpfs", img.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("(UFS2)") && text.contains("bsize     32768  fsize 4096  frag 8"),
        "{text}"
    );
    assert!(md5ish(&img) == before, "a status command changed the image");
}

/// The UFS images sufs does not read are named for what they are, by mount and by fsck, and
/// left untouched: UFS1, and UFS2 in the other byte order (both made by makefs).
#[test]
fn ufs1_and_big_endian_images_are_refused_by_name() {
    if !have_makefs() {
        eprintln!("SKIPPED: makefs(8) is not installed (apt-get install makefs)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"data\n").unwrap();
    let cases = [("ufs1", vec!["-o", "version=1"], "UFS1"), ("be", vec!["-B", "be", "-o", "version=2"], "big-endian")];
    for (name, opts, says) in cases {
        let img = t.path().join(format!("{name}.img"));
        let out =
            Command::new("makefs").args(["-t", "ffs", "-s", "8m"]).args(&opts).arg(&img).arg(&src).output().unwrap();
        assert!(out.status.success(), "makefs {name}: {}", String::from_utf8_lossy(&out.stderr));
        let before = md5ish(&img);
        let mnt = t.path().join(format!("mnt-{name}"));
        fs::create_dir_all(&mnt).unwrap();
        for args in [vec!["mount", "-o", "ro", "-f"], vec!["fsck"], vec!["dumpfs"]] {
            let mut a = args.clone();
            a.insert(1, img.to_str().unwrap());
            if args[0] == "mount" {
                a.insert(2, mnt.to_str().unwrap());
            }
            let out = sufs(&a);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success() && err.contains(says), "{name} {args:?}: {err}");
            assert!(!err.contains("panicked"), "{name} {args:?}: {err}");
        }
        assert!(md5ish(&img) == before, "{name}: changed by a refusal");
    }
}

/// A read-write mount records its mount point in `fs_fsmnt` (at byte 212 of the superblock), as
/// FreeBSD's mount does, so that fsck_ffs and `sufs inspect IMG sb` name where the file system
/// was last mounted; a read-only mount leaves it as it was.
#[test]
fn a_read_write_mount_records_where_it_was_mounted() {
    if !fuse_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("img");
    let out = sufs(&["mkfs", img.to_str().unwrap(), "--size", "64M"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let fsmnt = || {
        let sb = fs::read(&img).unwrap();
        let field = &sb[65536 + 212..65536 + 212 + 468];
        String::from_utf8(field.iter().take_while(|&&c| c != 0).copied().collect()).unwrap()
    };
    assert_eq!(fsmnt(), "", "newfs leaves it empty");
    let rw = t.path().join("first");
    mount_fg(&img, &rw, &[]).umount();
    let canon = fs::canonicalize(&rw).unwrap().to_string_lossy().into_owned();
    assert_eq!(fsmnt(), canon);
    let dump = String::from_utf8_lossy(&sufs(&["inspect", img.to_str().unwrap(), "sb"]).stdout).into_owned();
    assert!(dump.contains(&format!("fsmnt             {canon:?}")), "{dump}");
    mount_fg(&img, &t.path().join("second"), &["-o", "ro"]).umount();
    assert_eq!(fsmnt(), canon, "a read-only mount changed it");
    let check = sufs(&["fsck", "-n", img.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&check.stdout).contains(" 0 findings"),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}
