//! `sufs fsck` from the command line: exit codes as fsck(8) (0 clean, 1 repaired with nothing
//! left, 4 damage left or preen refused, 8 operational error), preen that refuses to touch an
//! image holding a violation, preen that skips an image marked clean, and -b with the
//! superblock copies mkfs writes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

mod common;

use common::{ok, sufs};
use sufs_fs::clock::SimClock;
use sufs_fs::dev::{BlockDevice, FileDevice, WriteKind, WriteReq};
use sufs_fs::format::{Dinode, FormatError, Superblock, DINODE_SIZE, ROOT_INO};
use sufs_fs::fs::{Fs, MountOptions, Ordering};

/// A 120 MiB image (two cylinder groups) holding a directory of files.
fn image(dir: &Path) -> PathBuf {
    image_of(dir, "120M")
}

/// The library's mount of the image at `p`.
fn lib_mount(p: &Path) -> Fs {
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(p, 4096, true).unwrap());
    Fs::mount(
        dev,
        MountOptions { ordering: Ordering::Sync, cache_blocks: 256, readonly: false },
        Arc::new(SimClock::new()),
    )
    .unwrap()
}

/// An image made by `sufs mkfs --size SIZE` holding a directory `d` of 50 files, `f{i}` of
/// 3000 bytes `i`.
fn image_of(dir: &Path, size: &str) -> PathBuf {
    let p = dir.join("img");
    ok(&["mkfs", "--format", "sufs", p.to_str().unwrap(), "--size", size]);
    let mut fs = lib_mount(&p);
    let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    for i in 0..50 {
        let (f, _) = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
        fs.write(f, 0, &[i as u8; 3000]).unwrap();
    }
    fs.unmount().unwrap();
    p
}

/// The files `image_of` wrote, read back through a mount.
fn assert_files_intact(p: &Path) {
    let mut fs = lib_mount(p);
    let d = fs.lookup(ROOT_INO, b"d").unwrap().0;
    for i in 0..50 {
        let f = fs.lookup(d, format!("f{i}").as_bytes()).unwrap().0;
        assert_eq!(fs.read(f, 0, 4000).unwrap(), vec![i as u8; 3000], "d/f{i}");
    }
    fs.unmount().unwrap();
}

fn edit(p: &Path, f: impl FnOnce(&FileDevice, &Superblock)) {
    let dev = FileDevice::open(p, 4096, true).unwrap();
    let mut b = vec![0u8; 4096];
    dev.read_block(0, &mut b).unwrap();
    let sb = Superblock::decode(&b).unwrap();
    f(&dev, &sb);
}

fn edit_block(dev: &FileDevice, bno: u64, f: impl FnOnce(&mut [u8])) {
    let mut b = vec![0u8; 4096];
    dev.read_block(bno, &mut b).unwrap();
    f(&mut b);
    dev.write_batch(&[WriteReq { bno, data: &b }], WriteKind::Sync).unwrap();
}

/// Runs `sufs fsck ARGS IMAGE`: exit code and stdout.
fn fsck(args: &[&str], p: &Path) -> (i32, String) {
    let mut all = vec!["fsck"];
    all.extend_from_slice(args);
    all.push(p.to_str().unwrap());
    let out = sufs(&all);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code().unwrap_or(-1), stdout + &String::from_utf8_lossy(&out.stderr))
}

#[test]
fn exit_codes_preen_and_repair() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    let (code, out) = fsck(&["-p"], &p);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("clean, not checked"), "{out}");
    let (code, out) = fsck(&["-p", "-f"], &p);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 findings"), "{out}");

    // The root's size lost, in an image not marked clean (as a crash leaves it): a violation.
    // Preen changes nothing and says what to run.
    edit(&p, |dev, sb| {
        let mut sb = sb.clone();
        sb.flags &= !sufs_fs::format::SB_CLEAN;
        edit_block(dev, 0, |b| sb.encode(b));
        let (bno, off) = sb.inode_location(ROOT_INO);
        edit_block(dev, bno, |b| {
            let mut d = Dinode::decode(&b[off..off + DINODE_SIZE]);
            d.size = 0;
            d.encode(&mut b[off..off + DINODE_SIZE]);
        });
    });
    let before = std::fs::read(&p).unwrap();
    let (code, out) = fsck(&["-p"], &p);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("run sufs fsck -y"), "{out}");
    assert!(std::fs::read(&p).unwrap() == before, "a refused preen changed the image");
    assert_eq!(fsck(&[], &p).0, 4);
    let (code, out) = fsck(&["-y"], &p);
    assert_eq!(code, 1, "{out}");
    let (code, out) = fsck(&[], &p);
    assert_eq!(code, 0, "a second fsck finds more:\n{out}");
    assert!(out.contains("50 files, 3 directories"), "{out}");
    assert_eq!(fsck(&["-p"], &p).0, 0);
}

#[test]
fn superblock_copies() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    let mut copy = 0;
    edit(&p, |dev, sb| {
        copy = sb.cg_start(1);
        edit_block(dev, 0, |b| b[16] ^= 0x40);
    });
    // The primary does not decode: the first copy, said so, and -p leaves it to -y.
    let (code, out) = fsck(&[], &p);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains(&format!("superblock copy at block {copy}")), "{out}");
    let (code, out) = fsck(&["-p"], &p);
    assert_eq!(code, 4, "{out}");
    let (code, out) = fsck(&["-y"], &p);
    assert_eq!(code, 1, "{out}");
    let (code, out) = fsck(&["-p", "-f"], &p);
    assert_eq!(code, 0, "{out}");
    // -b N on a good image: the copy's geometry, the primary rewritten from it.
    let (code, out) = fsck(&["-b", &copy.to_string()], &p);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("asked for"), "{out}");
    let (code, out) = fsck(&["-b", "7"], &p);
    assert_eq!(code, 8, "{out}");
    let (code, out) = fsck(&["-y", "-b", &copy.to_string()], &p);
    assert_eq!(code, 1, "{out}");
    assert_eq!(fsck(&[], &p).0, 0);
}

#[test]
fn a_small_image_recovers_from_its_superblock_copy() {
    // 32 MiB fits one group of the default size: mkfs makes two anyway, so that the second's
    // superblock copy stands in for a damaged primary. Zeroed, then one byte of the counts
    // flipped (the checksum fails).
    for what in ["zeroed", "checksum"] {
        let dir = tempfile::tempdir().unwrap();
        let p = image_of(dir.path(), "32M");
        let mut copy = 0;
        edit(&p, |dev, sb| {
            copy = sb.cg_start(1);
            edit_block(dev, 0, |b| match what {
                "zeroed" => b.fill(0),
                _ => b[40] ^= 0x10, // free_blocks
            });
        });
        let mut b = vec![0u8; 4096];
        FileDevice::open(&p, 4096, false).unwrap().read_block(0, &mut b).unwrap();
        let e = Superblock::decode(&b).unwrap_err();
        assert!(what == "zeroed" || matches!(e, FormatError::BadChecksum { .. }), "{what}: {e}");
        let (code, out) = fsck(&["-y"], &p);
        assert_eq!(code, 1, "{what}: {out}");
        assert!(out.contains(&format!("using the superblock copy at block {copy}")), "{what}: {out}");
        let (code, out) = fsck(&["-p"], &p);
        assert_eq!(code, 0, "{what}: marked clean: {out}");
        assert_files_intact(&p);
        let (code, out) = fsck(&["-f"], &p);
        assert_eq!(code, 0, "{what}: {out}");
        assert!(!out.contains("superblock copy"), "{what}: the primary is used again: {out}");
    }
}
