//! fsync under soft updates when renames leave old names hidden on disk: names swapped through
//! a temporary name, renamed ancestors, replaced files and hard links. Each fsync must return
//! (no recursion whose depth users control) and leave the file durable under its name, which a
//! copy of the device taken right after it shows.

mod common;

use common::*;
use std::sync::Arc;
use sufs_fs::dev::MemDevice;
use sufs_fs::format::ROOT_INO;
use sufs_fs::fs::{Ordering, RenameFlags};

const NO: RenameFlags = RenameFlags { noreplace: false, exchange: false };

/// The device as a crash would leave it now (the cache's dirty buffers lost): `path` must name
/// a file holding `contents`, and fsck must find no violation.
fn assert_durable(dev: &MemDevice, path: &str, contents: &[u8]) {
    let copy = Arc::new(MemDevice::from_blocks(4096, dev.blocks()));
    let report = sufs_fs::fsck::check(&*copy).expect("fsck runs");
    let bad: Vec<String> = report
        .findings
        .iter()
        .filter(|f| f.class() == sufs_fs::fsck::Class::Violation)
        .map(|f| f.to_string())
        .collect();
    assert!(bad.is_empty(), "violations after a crash: {bad:?}");
    let mut fs = mount(&copy, Ordering::Softdep, 64);
    let ino = resolve(&mut fs, path).unwrap_or_else(|e| panic!("{path} lost after its fsync: {e:?}"));
    assert_eq!(fs.read(ino, 0, 4096).unwrap(), contents, "{path} after its fsync");
}

/// `echo A>a; echo B>b; fsync a b; mv a t; mv b a; mv t b; fsync a`: the new names wait for
/// each other's hidden namesakes in a cycle.
#[test]
fn fsync_after_a_swap_through_a_temporary_name() {
    let dev = new_image(8192);
    let mut fs = mount(&dev, Ordering::Softdep, 256);
    let (a, _) = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap();
    let (b, _) = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap();
    fs.write(a, 0, b"A\n").unwrap();
    fs.write(b, 0, b"B\n").unwrap();
    fs.fsync(a).unwrap();
    fs.fsync(b).unwrap();
    fs.rename(ROOT_INO, b"a", ROOT_INO, b"t", NO).unwrap();
    fs.rename(ROOT_INO, b"b", ROOT_INO, b"a", NO).unwrap();
    fs.rename(ROOT_INO, b"t", ROOT_INO, b"b", NO).unwrap();
    fs.fsync(a).unwrap();
    assert_durable(&dev, "a", b"B\n");
    fs.fsync(b).unwrap();
    assert_durable(&dev, "b", b"A\n");
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&dev);
}

/// `mkdir /a /b; /a/f durable; mv /a /b/a; write and fsync /b/a/f`: fsync makes every name up
/// to the root durable, the renamed ancestor's new one too.
#[test]
fn fsync_below_a_renamed_ancestor() {
    let dev = new_image(8192);
    let mut fs = mount(&dev, Ordering::Softdep, 256);
    let (a, _) = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap();
    let (b, _) = fs.mkdir(ROOT_INO, b"b", 0o755, 0, 0).unwrap();
    let (f, _) = fs.create(a, b"f", 0o644, 0, 0).unwrap();
    fs.write(f, 0, b"one").unwrap();
    fs.fsync(f).unwrap();
    assert_durable(&dev, "a/f", b"one");
    fs.rename(ROOT_INO, b"a", b, b"a", NO).unwrap();
    fs.write(f, 0, b"two").unwrap();
    fs.fsync(f).unwrap();
    assert_durable(&dev, "b/a/f", b"two");
    // The same on a file made before this mount, found by lookup as a user finds it.
    fs.unmount().unwrap();
    drop(fs);
    let mut fs = mount(&dev, Ordering::Softdep, 256);
    let f = resolve(&mut fs, "b/a/f").unwrap();
    let b = resolve(&mut fs, "b").unwrap();
    fs.rename(b, b"a", ROOT_INO, b"a", NO).unwrap();
    fs.write(f, 0, b"three").unwrap();
    fs.fsync(f).unwrap();
    assert_durable(&dev, "a/f", b"three");
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&dev);
}

/// A rename over an existing file, then fsync of the file under its new name.
#[test]
fn fsync_after_a_rename_over_a_file() {
    let dev = new_image(8192);
    let mut fs = mount(&dev, Ordering::Softdep, 256);
    let (x, _) = fs.create(ROOT_INO, b"x", 0o644, 0, 0).unwrap();
    let (y, _) = fs.create(ROOT_INO, b"y", 0o644, 0, 0).unwrap();
    fs.write(x, 0, b"x").unwrap();
    fs.write(y, 0, b"y").unwrap();
    fs.fsync(x).unwrap();
    fs.fsync(y).unwrap();
    fs.rename(ROOT_INO, b"x", ROOT_INO, b"y", NO).unwrap();
    fs.fsync(x).unwrap();
    assert_durable(&dev, "y", b"x");
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&dev);
}

/// A hard link in a directory that was itself just renamed, then fsync of the file.
#[test]
fn fsync_after_a_link_into_a_renamed_directory() {
    let dev = new_image(8192);
    let mut fs = mount(&dev, Ordering::Softdep, 256);
    let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(f, 0, b"f").unwrap();
    fs.fsync(f).unwrap();
    fs.fsync(d).unwrap();
    fs.rename(ROOT_INO, b"d", ROOT_INO, b"e", NO).unwrap();
    fs.link(f, d, b"g").unwrap();
    fs.fsync(f).unwrap();
    assert_durable(&dev, "e/g", b"f");
    assert_durable(&dev, "f", b"f");
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&dev);
}
