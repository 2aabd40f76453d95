//! The file-system tools through the `sufs` binary: `inspect` (fsdb/ffsinfo), `tunefs` and
//! `growfs`, on images made through the library.

use std::path::{Path, PathBuf};

mod common;

use common::mutate::{read_layout, workload_image};
use common::{ok, sufs};
use sufs_fs::dev::{write_sparse_image, BlockDevice, MemDevice, WriteKind, WriteReq};

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
    for name in [".snap", "d1", "ind", "many", "sym", "empty"] {
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
    assert!(map.contains("lbn 524..524  -> fragments"), "{map}");
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
    assert!(block.contains("a data fragment") && block.contains("bitmap: in use"), "{block}");
    assert!(block.contains("00000000  "), "{block}");
    let sb = ok(&["inspect", i, "block", "16"]);
    assert!(sb.contains("the primary superblock"), "{sb}");
    let sb = ok(&["inspect", i, "sb"]);
    assert!(sb.contains("size              30000 fragments"), "{sb}");
}

/// The first physical block of a `bmap` listing.
fn map_first_block(map: &str) -> String {
    let line = map.lines().find(|l| l.contains("-> fragments")).expect("a data run");
    let run = line.split("-> fragments ").nth(1).unwrap();
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
    let root_block = sb.decode_dinode(&buf[roff..roff + 256]).db[0];
    let ind = layout.nodes.values().find(|n| n.paths.iter().any(|p| p == "/ind")).expect("ind").ino;
    let (ib, off) = sb.inode_location(ind);
    dev.read_block(ib, &mut buf).unwrap();
    let mut d = sb.decode_dinode(&buf[off..off + 256]);
    d.db[0] = sb.num_blocks + 5;
    sb.encode_dinode(&d, &mut buf[off..off + 256]);
    let junk = vec![0xabu8; 4096];
    dev.write_batch(&[WriteReq { bno: root_block, data: &junk }, WriteReq { bno: ib, data: &buf }], WriteKind::Sync)
        .unwrap();
    // The double indirect block of `dind` names itself.
    let dind = layout.nodes.values().find(|n| n.paths.iter().any(|p| p == "/d1/sub/dind")).expect("dind").ino;
    let (db, doff) = sb.inode_location(dind);
    dev.read_block(db, &mut buf).unwrap();
    let dbl = sb.decode_dinode(&buf[doff..doff + 256]).ib[1];
    dev.read_block(dbl, &mut buf).unwrap();
    buf[0..8].copy_from_slice(&dbl.to_le_bytes());
    dev.write_batch(&[WriteReq { bno: dbl, data: &buf }], WriteKind::Sync).unwrap();
    let mut hdr = vec![0u8; 4096];
    let cg0 = sb.cg_header_block(0);
    dev.read_block(cg0, &mut hdr).unwrap();
    hdr[100] ^= 0xff;
    dev.write_batch(&[WriteReq { bno: cg0, data: &hdr }], WriteKind::Sync).unwrap();
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
    dev.read_block(16, &mut sbb).unwrap();
    sbb[48] ^= 1;
    dev.write_batch(&[WriteReq { bno: 16, data: &sbb }], WriteKind::Sync).unwrap();
    let img = to_file(&dev, tmp.path(), "badsb.img");
    let (code, _, err) = run(&["inspect", img.to_str().unwrap(), "sb"]);
    assert_eq!(code, 8, "{err}");
    assert!(err.contains("fsck -b"), "{err}");
}
