//! The file-system tools through the `sufs` binary: `inspect` (fsdb/ffsinfo), `tunefs` and
//! `growfs`, on images made through the library.

use std::path::{Path, PathBuf};

mod common;

use common::mutate::{read_layout, workload_image};
use common::{ok, sufs};
use sufs_fs::dev::{write_sparse_image, BlockDevice, FileDevice, MemDevice, WriteKind, WriteReq};
use sufs_fs::format::{Superblock, SB_CLEAN, SB_NEEDS_FSCK};

/// Writes a memory device to a new image file in `dir`.
fn to_file(dev: &MemDevice, dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    let bs = dev.block_size();
    write_sparse_image::<sufs_fs::dev::DevError>(&p, dev.num_blocks(), bs, |b, buf| dev.read_block(b, buf), |_| true)
        .expect("write the image");
    p
}

/// The mutator's workload image (files, directories, a file through an indirect block, one with
/// a hole through a double indirect block) as a file.
fn workload_file(dir: &Path) -> PathBuf {
    to_file(&workload_image(), dir, "w.img")
}

/// Runs `sufs` and returns its exit code, stdout and stderr.
fn run(args: &[&str]) -> (i32, String, String) {
    let out = sufs(args);
    let s = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    (out.status.code().unwrap_or(-1), s(&out.stdout), s(&out.stderr))
}

#[test]
fn inspect_inodes_dirs_and_block_maps() {
    let tmp = tempfile::tempdir().unwrap();
    let img = workload_file(tmp.path());
    let i = img.to_str().unwrap();
    let root = ok(&["inspect", i, "dir", "/"]);
    for name in ["lost+found", "d1", "ind", "many", "sym", "empty"] {
        assert!(root.lines().any(|l| l.ends_with(&format!(" {name}"))), "{name} in:\n{root}");
    }
    assert!(root.contains(" dir "), "{root}");
    let sub = ok(&["inspect", i, "dir", "d1/sub"]);
    assert!(sub.contains(" dind") && sub.contains(" b2"), "{sub}");
    // The file through a single indirect block: 21 blocks, one indirect block.
    let ino = |dir: &str, name: &str| -> String {
        let out = ok(&["inspect", i, "dir", dir]);
        let line = out.lines().find(|l| l.ends_with(&format!(" {name}"))).expect("entry");
        line.split_whitespace().next().unwrap().to_string()
    };
    let ind = ino("/", "ind");
    let map = ok(&["inspect", i, "bmap", &ind]);
    assert!(map.contains("21 logical blocks"), "{map}");
    assert!(map.contains("indirect level 1 at block"), "{map}");
    assert!(!map.contains("hole") && !map.contains("bad"), "{map}");
    // The file with a hole before its one block through a double indirect block.
    let dind = ino("d1/sub", "dind");
    let map = ok(&["inspect", i, "bmap", &dind]);
    assert!(map.contains("lbn 0..523  hole"), "{map}");
    assert!(map.contains("indirect level 2") && map.contains("indirect level 1"), "{map}");
    assert!(map.contains("lbn 524..524  -> blocks"), "{map}");
    let inode = ok(&["inspect", i, "inode", &ind]);
    for field in
        ["mode       0o100644 (regular file)", "nlink      1", "size       81937", "birthtime", "generation", "extsize"]
    {
        assert!(inode.contains(field), "{field} in:\n{inode}");
    }
    assert!(inode.lines().any(|l| l.starts_with("mtime") && l.contains('.')), "{inode}");
    // A data block of the file, as hex, with what the bitmap says.
    let first = map_first_block(&ok(&["inspect", i, "bmap", &ind]));
    let block = ok(&["inspect", i, "block", &first]);
    assert!(block.contains("a data block") && block.contains("bitmap: in use"), "{block}");
    assert!(block.contains("00000000  "), "{block}");
    let sb = ok(&["inspect", i, "block", "0"]);
    assert!(sb.contains("the primary superblock") && sb.contains("|1SFFSFUS"), "{sb}");
    assert!(ok(&["inspect", i, "sb"]).contains("num_blocks        30000"));
}

/// The first physical block of a `bmap` listing.
fn map_first_block(map: &str) -> String {
    let line = map.lines().find(|l| l.contains("-> blocks")).expect("a data run");
    let run = line.split("-> blocks ").nth(1).unwrap();
    run.split("..").next().unwrap().to_string()
}

#[test]
fn inspect_refuses_bad_numbers_and_survives_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = workload_image();
    let layout = read_layout(dev.as_ref()).expect("layout");
    let img = to_file(&dev, tmp.path(), "ok.img");
    let i = img.to_str().unwrap();
    let (code, _, err) = run(&["inspect", i, "inode", "99999999"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("out of range"), "{err}");
    let (code, _, err) = run(&["inspect", i, "block", "99999999"]);
    assert_eq!((code, err.contains("past the device")), (1, true), "{err}");
    let (code, _, err) = run(&["inspect", i, "dir", "ind"]);
    assert_eq!((code, err.contains("not a directory")), (1, true), "{err}");
    let (code, _, err) = run(&["inspect", i, "dir", "nothere"]);
    assert_eq!((code, err.contains("no entry")), (1, true), "{err}");
    // Damage: the root directory's first block overwritten, a file's pointer out of range,
    // the group header's checksum broken.
    let sb = layout.sb.clone();
    let mut buf = vec![0u8; 4096];
    let (rb, roff) = sb.inode_location(sufs_fs::format::ROOT_INO);
    dev.read_block(rb, &mut buf).unwrap();
    let root_block = sufs_fs::format::Dinode::decode(&buf[roff..roff + 256]).db[0];
    let ind = layout.nodes.values().find(|n| n.paths.iter().any(|p| p == "/ind")).expect("ind").ino;
    let (ib, off) = sb.inode_location(ind);
    dev.read_block(ib, &mut buf).unwrap();
    buf[off + 88..off + 96].copy_from_slice(&(sb.num_blocks + 5).to_le_bytes());
    let junk = vec![0xabu8; 4096];
    dev.write_batch(&[WriteReq { bno: root_block, data: &junk }, WriteReq { bno: ib, data: &buf }], WriteKind::Sync)
        .unwrap();
    // The double indirect block of `dind` names itself.
    let dind = layout.nodes.values().find(|n| n.paths.iter().any(|p| p == "/d1/sub/dind")).expect("dind").ino;
    let (db, doff) = sb.inode_location(dind);
    dev.read_block(db, &mut buf).unwrap();
    let dbl = sufs_fs::format::Dinode::decode(&buf[doff..doff + 256]).ib[1];
    dev.read_block(dbl, &mut buf).unwrap();
    buf[0..8].copy_from_slice(&dbl.to_le_bytes());
    dev.write_batch(&[WriteReq { bno: dbl, data: &buf }], WriteKind::Sync).unwrap();
    let mut hdr = vec![0u8; 4096];
    dev.read_block(1, &mut hdr).unwrap();
    hdr[100] ^= 0xff;
    dev.write_batch(&[WriteReq { bno: 1, data: &hdr }], WriteKind::Sync).unwrap();
    let img = to_file(&dev, tmp.path(), "bad.img");
    let i = img.to_str().unwrap();
    let (code, out, err) = run(&["inspect", i, "dir", "/"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("bad: lbn 0 chunk 0") && out.contains("problems found"), "{out}");
    let (code, out, _) = run(&["inspect", i, "bmap", &ind.to_string()]);
    assert_eq!(code, 0);
    assert!(out.contains("lbn 0: bad pointer"), "{out}");
    let (code, out, _) = run(&["inspect", i, "bmap", &dind.to_string()]);
    assert_eq!(code, 0);
    assert!(out.contains(&format!("indirect block {dbl} (level 1) is already in the map")), "{out}");
    let (code, out, _) = run(&["inspect", i, "block", "300"]);
    assert_eq!(code, 0);
    assert!(out.contains("bitmap: unreadable"), "{out}");
    // A superblock that does not decode: an operational error with a hint, no panic.
    let mut sbb = vec![0u8; 4096];
    dev.read_block(0, &mut sbb).unwrap();
    sbb[20] ^= 1;
    dev.write_batch(&[WriteReq { bno: 0, data: &sbb }], WriteKind::Sync).unwrap();
    let img = to_file(&dev, tmp.path(), "badsb.img");
    let (code, _, err) = run(&["inspect", img.to_str().unwrap(), "sb"]);
    assert_eq!(code, 8, "{err}");
    assert!(err.contains("fsck -b"), "{err}");
}

/// Changes the primary superblock of an image file.
fn edit_sb(img: &Path, f: impl FnOnce(&mut Superblock)) {
    let dev = FileDevice::open(img, 4096, true).unwrap();
    let mut buf = vec![0u8; 4096];
    dev.read_block(0, &mut buf).unwrap();
    let mut sb = Superblock::decode(&buf).unwrap();
    f(&mut sb);
    sb.encode(&mut buf);
    dev.write_batch(&[WriteReq { bno: 0, data: &buf }], WriteKind::Sync).unwrap();
}

#[test]
fn tunefs_changes_minfree_label_and_ordering() {
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("t.img");
    let i = img.to_str().unwrap();
    ok(&["mkfs", "--format", "sufs", i, "--size", "64M"]);
    let p = ok(&["tunefs", i, "-p"]);
    assert!(p.contains("minfree   8% (the default)") && p.contains("label     (none)"), "{p}");
    assert!(p.contains("ordering  softdep (the default)"), "{p}");
    ok(&["tunefs", i, "--minfree", "20", "--label", "data-1", "--ordering", "sync"]);
    let d = ok(&["dumpfs", i]);
    assert!(d.contains("minfree   20%") && d.contains("label     data-1"), "{d}");
    assert!(d.contains("ordering  sync for a mount given none"), "{d}");
    assert_eq!(sufs(&["fsck", i]).status.code(), Some(0));
    // Each setting alone leaves the others.
    ok(&["tunefs", i, "--label", ""]);
    let p = ok(&["tunefs", i, "-p"]);
    assert!(p.contains("minfree   20%") && p.contains("label     (none)") && p.contains("ordering  sync"), "{p}");
    // Refused: nothing asked, a label too long, a minfree out of range, an unclean image.
    assert_eq!(run(&["tunefs", i]).0, 1);
    let (code, _, err) = run(&["tunefs", i, "--label", &"x".repeat(33)]);
    assert_eq!((code, err.contains("at most 32 bytes")), (1, true), "{err}");
    assert_eq!(run(&["tunefs", i, "--minfree", "100"]).0, 2, "clap's usage error");
    edit_sb(&img, |sb| sb.flags &= !SB_CLEAN);
    let (code, _, err) = run(&["tunefs", i, "--minfree", "5"]);
    assert_eq!((code, err.contains("sufs fsck -y")), (1, true), "{err}");
    edit_sb(&img, |sb| sb.flags |= SB_CLEAN | SB_NEEDS_FSCK);
    let (code, _, err) = run(&["tunefs", i, "--minfree", "5"]);
    assert_eq!((code, err.contains("needing fsck")), (1, true), "{err}");
    assert!(ok(&["tunefs", i, "-p"]).contains("minfree   20%"), "-p alone reads an unclean image");
}

/// The mount takes its ordering from the image when given none, and `df` shows minfree.
#[test]
fn tunefs_settings_reach_the_mount() {
    if !common::fuse::fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (img, mnt) = (tmp.path().join("t.img"), tmp.path().join("mnt"));
    let i = img.to_str().unwrap();
    ok(&["mkfs", "--format", "sufs", i, "--size", "64M"]);
    let avail = |mnt: &Path| {
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        let p = std::ffi::CString::new(mnt.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::statvfs(p.as_ptr(), &mut s) }, 0);
        (s.f_bfree as u64, s.f_bavail as u64)
    };
    let m = common::fuse::mount_fg(&img, &mnt, &[]);
    let (free8, avail8) = avail(&mnt);
    let (code, _, err) = run(&["tunefs", i, "--minfree", "30"]);
    assert_eq!((code, err.contains("is mounted")), (1, true), "{err}");
    m.umount();
    assert!(ok(&["dumpfs", i]).contains("last mounted with soft updates"));
    ok(&["tunefs", i, "--minfree", "30", "--ordering", "sync"]);
    let m = common::fuse::mount_fg(&img, &mnt, &[]);
    let (free30, avail30) = avail(&mnt);
    m.umount();
    assert_eq!(free8, free30);
    let data = Superblock::geometry(4096, 16384, None).unwrap().data_blocks();
    assert_eq!(free8 - avail8, data * 8 / 100);
    assert_eq!(free30 - avail30, data * 30 / 100);
    let d = ok(&["dumpfs", i]);
    assert!(d.contains("last mounted sync") && d.contains("clean"), "{d}");
    common::fuse::fsck_clean(&img);
}

/// growfs on an image file: fsck clean after, and the new space is used by a mount.
#[test]
fn growfs_grows_an_image_a_mount_then_fills() {
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("g.img");
    let i = img.to_str().unwrap();
    ok(&["mkfs", "--format", "sufs", i, "--size", "64M"]);
    let out = ok(&["growfs", i, "--size", "200M"]);
    // mkfs made two groups of 8192 blocks; growfs adds groups of that size, the last partial.
    assert!(out.contains("grew from 16384 blocks (64 MiB, 2 groups) to 51200 blocks (200 MiB, 7 groups)"), "{out}");
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 200 << 20);
    assert_eq!(sufs(&["fsck", i]).status.code(), Some(0));
    let d = ok(&["dumpfs", i]);
    assert!(d.contains("blocks    51200") && d.contains("groups    7 of 8192 blocks"), "{d}");
    // Grown again, from a partial last group.
    ok(&["growfs", i, "--size", "300M"]);
    assert_eq!(sufs(&["fsck", i]).status.code(), Some(0));
    if !common::fuse::fuse_available() {
        return;
    }
    let mnt = tmp.path().join("mnt");
    let m = common::fuse::mount_fg(&img, &mnt, &[]);
    let data = common::pattern(5, 1 << 20);
    let mut f = std::fs::File::create(mnt.join("big")).unwrap();
    for _ in 0..160 {
        std::io::Write::write_all(&mut f, &data).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(std::fs::metadata(mnt.join("big")).unwrap().len(), 160 << 20, "more than the old 64 MiB");
    m.umount();
    common::fuse::fsck_clean(&img);
    // Refused while mounted.
    let m = common::fuse::mount_fg(&img, &mnt, &[]);
    let (code, _, err) = run(&["growfs", i, "--size", "400M"]);
    m.umount();
    assert_eq!((code, err.contains("is mounted")), (1, true), "{err}");
}

#[test]
fn growfs_refusals() {
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("g.img");
    let i = img.to_str().unwrap();
    ok(&["mkfs", "--format", "sufs", i, "--size", "64M"]);
    for (size, why) in [("32M", "not larger"), ("64M", "not larger")] {
        let (code, _, err) = run(&["growfs", i, "--size", size]);
        assert_eq!((code, err.contains(why)), (1, true), "{size}: {err}");
    }
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 64 << 20, "the file is left as it was");
    edit_sb(&img, |sb| sb.flags &= !SB_CLEAN);
    let (code, _, err) = run(&["growfs", i, "--size", "128M"]);
    assert_eq!((code, err.contains("sufs fsck -y")), (1, true), "{err}");
    edit_sb(&img, |sb| sb.flags |= SB_CLEAN);
    // An FFS snapshot is the file system's size: refused until it is deleted.
    ok(&["snapshot", "--on", i, "create", "s1"]);
    let (code, _, err) = run(&["growfs", i, "--size", "128M"]);
    assert_eq!((code, err.contains("snapshots")), (1, true), "{err}");
    ok(&["snapshot", "--on", i, "delete", "s1"]);
    // A volume snapshot in a br store.
    ok(&["volume", "snapshot", "create", i, "--store", "br"]);
    let (code, _, err) = run(&["growfs", i, "--size", "128M"]);
    assert_eq!((code, err.contains("volume snapshot")), (1, true), "{err}");
    ok(&["volume", "snapshot", "delete", i]);
    ok(&["growfs", i, "--size", "128M"]);
    // A snapshot reserve past the file system.
    let r = tmp.path().join("r.img");
    ok(&["mkfs", "--format", "sufs", r.to_str().unwrap(), "--size", "64M", "--snapshot-reserve", "8M"]);
    let (code, _, err) = run(&["growfs", r.to_str().unwrap(), "--size", "128M"]);
    assert_eq!((code, err.contains("snapshot-reserve")), (1, true), "{err}");
    let (code, _, err) = run(&["growfs", "/dev/null", "--size", "128M"]);
    assert_eq!((code, err.contains("not an image file")), (1, true), "{err}");
    // A block device node (the loop device's numbers; never opened). Only root may make one.
    let node = tmp.path().join("blk");
    let c = std::ffi::CString::new(node.to_str().unwrap()).unwrap();
    if unsafe { libc::mknod(c.as_ptr(), libc::S_IFBLK | 0o600, libc::makedev(7, 0)) } == 0 {
        let (code, _, err) = run(&["growfs", node.to_str().unwrap(), "--size", "128M"]);
        assert_eq!((code, err.contains("block device")), (1, true), "{err}");
    }
}
