//! fsck's unit tests: an image built through `Fs`, damaged by hand, then checked, preened and
//! repaired. The helpers are here, the tests by pass in the submodules.

mod counts;
mod crash;
mod dirs;
mod inodes;
mod lazy;
mod lostfound;
mod modes;

use super::*;
use crate::clock::SimClock;
use crate::dev::{FileDevice, MemDevice, WriteKind, WriteReq};
use crate::fs::{mkfs, Fs, MkfsOptions, MountOptions, Ordering, RenameFlags};
use rand::{Rng, SeedableRng};
use std::sync::Arc;

fn mount(dev: &Arc<MemDevice>, ordering: Ordering) -> Fs {
    Fs::mount(dev.clone(), MountOptions { ordering, cache_blocks: 1024, readonly: false }, Arc::new(SimClock::new()))
        .unwrap()
}

/// Inode numbers of the populated image.
#[allow(dead_code)]
struct Tree {
    a: u32,
    d1: u32,
    sub: u32,
    b2: u32,
    big: u32,
    many: u32,
    empty: u32,
    sym: u32,
    fifo: u32,
}

/// A fresh image of 8192 blocks made with at least `min_groups` groups (1: one group and no
/// superblock copy, as mkfs made small images before it made two).
fn new_dev_groups(min_groups: u64) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(4096, 8192));
    let s = mkfs(dev.clone(), &MkfsOptions { min_groups, ..Default::default() }, (0, 0)).unwrap();
    assert_eq!(s.ngroups as u64, min_groups, "8192 blocks fit one group of the default size");
    dev
}

fn new_dev() -> Arc<MemDevice> {
    new_dev_groups(MKFS_MIN_GROUPS)
}

/// Files, directories, hard links, a file through double indirect blocks, a directory of
/// two blocks, renames and unlinks; cleanly unmounted.
fn build() -> (Arc<MemDevice>, Tree) {
    build_on(new_dev())
}

/// `build` on an image of one group, with no superblock copy.
fn build_one_group() -> (Arc<MemDevice>, Tree) {
    build_on(new_dev_groups(1))
}

fn build_on(dev: Arc<MemDevice>) -> (Arc<MemDevice>, Tree) {
    let mut fs = mount(&dev, Ordering::Sync);
    let (a, _) = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap();
    fs.write(a, 0, &[7u8; 100]).unwrap();
    let (d1, _) = fs.mkdir(ROOT_INO, b"d1", 0o755, 0, 0).unwrap();
    let (sub, _) = fs.mkdir(d1, b"sub", 0o755, 0, 0).unwrap();
    let (b, _) = fs.create(d1, b"b", 0o644, 0, 0).unwrap();
    fs.write(b, 0, &[1u8; 10000]).unwrap();
    fs.link(a, d1, b"a2").unwrap();
    fs.rename(d1, b"b", sub, b"b2", RenameFlags::default()).unwrap();
    let (big, _) = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap();
    let chunk = vec![3u8; 64 * 4096];
    for i in 0..9u64 {
        fs.write(big, i * chunk.len() as u64, &chunk).unwrap();
    }
    let (many, _) = fs.mkdir(ROOT_INO, b"many", 0o755, 0, 0).unwrap();
    for i in 0..300 {
        let (f, _) = fs.create(many, format!("f{i:04}").as_bytes(), 0o644, 0, 0).unwrap();
        if i % 50 == 0 {
            fs.write(f, 0, b"x").unwrap();
        }
    }
    for i in (1..300).step_by(7) {
        fs.unlink(many, format!("f{i:04}").as_bytes()).unwrap();
    }
    let (empty, _) = fs.create(ROOT_INO, b"empty", 0o644, 0, 0).unwrap();
    let (sym, _) = fs.symlink(ROOT_INO, b"sym", b"d1/sub", 0, 0).unwrap();
    let (fifo, _) = fs.mknod(ROOT_INO, b"fifo", S_IFIFO as u32 | 0o644, 0, 0, 0).unwrap();
    let (gone, _) = fs.mkdir(d1, b"gone", 0o755, 0, 0).unwrap();
    let _ = gone;
    fs.rmdir(d1, b"gone").unwrap();
    let b2 = fs.lookup(sub, b"b2").unwrap().0;
    fs.unmount().unwrap();
    (dev, Tree { a, d1, sub, b2, big, many, empty, sym, fifo })
}

fn sb(dev: &MemDevice) -> Superblock {
    let mut b = vec![0u8; 4096];
    dev.read_block(0, &mut b).unwrap();
    Superblock::decode(&b).unwrap()
}

fn modify(dev: &MemDevice, bno: u64, f: impl FnOnce(&mut [u8])) {
    let mut b = vec![0u8; dev.block_size()];
    dev.read_block(bno, &mut b).unwrap();
    f(&mut b);
    dev.write_batch(&[WriteReq { bno, data: &b }], WriteKind::Sync).unwrap();
}

fn modify_cg(dev: &MemDevice, cg: u32, f: impl FnOnce(&mut [u8], &Superblock)) {
    let s = sb(dev);
    modify(dev, s.cg_header_block(cg), |b| {
        f(b, &s);
        CgHeader::seal(b);
    });
}

fn get_inode(dev: &MemDevice, ino: u32) -> Dinode {
    let (bno, off) = sb(dev).inode_location(ino);
    let mut b = vec![0u8; dev.block_size()];
    dev.read_block(bno, &mut b).unwrap();
    Dinode::decode(&b[off..off + DINODE_SIZE])
}

fn modify_inode(dev: &MemDevice, ino: u32, f: impl FnOnce(&mut Dinode)) {
    let (bno, off) = sb(dev).inode_location(ino);
    modify(dev, bno, |b| {
        let mut d = Dinode::decode(&b[off..off + DINODE_SIZE]);
        f(&mut d);
        d.encode(&mut b[off..off + DINODE_SIZE]);
    });
}

/// The block and offset of entry `name` in directory `dir` (direct blocks only).
fn entry(dev: &MemDevice, dir: u32, name: &[u8]) -> (u64, usize, u32) {
    let d = get_inode(dev, dir);
    let mut b = vec![0u8; dev.block_size()];
    for &bno in d.db.iter().filter(|&&x| x != 0) {
        dev.read_block(bno, &mut b).unwrap();
        for e in dir_iter(&b) {
            let e = e.unwrap();
            if e.ino != 0 && e.name == name {
                return (bno, e.offset, e.ino);
            }
        }
    }
    panic!("no entry {name:?} in {dir}");
}

fn has(r: &Report, pred: impl Fn(&Finding) -> bool) -> bool {
    r.findings.iter().any(pred)
}

fn show(r: &Report) -> String {
    r.findings.iter().map(|f| format!("{f} [{:?}]", f.class())).collect::<Vec<_>>().join("\n")
}

/// Repairs, then checks that the image is clean, mounts and is usable, and stays clean.
fn repair_and_verify(dev: &Arc<MemDevice>) -> Report {
    let r = repair(&**dev).unwrap();
    assert!(r.repaired, "repair changed nothing:\n{}", show(&r));
    let c = check(&**dev).unwrap();
    assert!(c.is_clean(), "not clean after repair:\n{}", show(&c));
    assert!(sb(dev).flags & SB_CLEAN != 0);
    let mut fs = mount(dev, Ordering::Sync);
    let (f, _) = fs.create(ROOT_INO, b"after-repair", 0o644, 0, 0).unwrap();
    fs.write(f, 0, &[9u8; 50000]).unwrap();
    fs.mkdir(LOST_FOUND_INO, b"dir-after", 0o755, 0, 0).unwrap();
    fs.unmount().unwrap();
    let c = check(&**dev).unwrap();
    assert!(c.is_clean(), "not clean after use:\n{}", show(&c));
    r
}

/// Checks, expects a finding matching `pred` of class `class`, repairs and verifies.
fn expect(dev: &Arc<MemDevice>, class: Class, pred: impl Fn(&Finding) -> bool) -> Report {
    let r = check(&**dev).unwrap();
    let f = r.findings.iter().find(|f| pred(f)).unwrap_or_else(|| panic!("finding not reported:\n{}", show(&r)));
    assert_eq!(f.class(), class, "{f}");
    repair_and_verify(dev);
    r
}

/// Preen of an image holding a violation: refused, and not one byte written.
fn preen_refuses(dev: &Arc<MemDevice>) -> Report {
    let before = dev.blocks();
    let r = preen(&**dev).unwrap();
    assert!(r.refused.is_some() && !r.repaired, "{}", show(&r));
    assert!(dev.blocks() == before, "a refused preen changed the image");
    r
}

/// Repairs, and checks that a second check finds nothing and no file was lost.
fn repair_converges(dev: &Arc<MemDevice>, files: u64) -> Report {
    let r = repair(&**dev).unwrap();
    assert!(r.repaired && r.remaining.is_empty(), "{}", show(&r));
    let c = check(&**dev).unwrap();
    assert!(c.is_clean(), "a second check finds:\n{}", show(&c));
    assert_eq!(c.files, files, "files lost by the repair");
    assert_eq!(sb(dev).flags & (SB_CLEAN | SB_NEEDS_FSCK), SB_CLEAN);
    r
}

/// An image of two cylinder groups with files in both, and its superblock copy's block.
fn two_groups() -> (Arc<MemDevice>, u64) {
    let dev = Arc::new(MemDevice::new(4096, 30000));
    let s = mkfs(dev.clone(), &MkfsOptions { ..Default::default() }, (0, 0)).unwrap();
    assert_eq!(s.ngroups, 2);
    let mut fs = mount(&dev, Ordering::Sync);
    let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    for i in 0..20 {
        let (f, _) = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
        fs.write(f, 0, &[i as u8; 5000]).unwrap();
    }
    fs.unmount().unwrap();
    (dev, s.cg_start(1))
}

#[test]
fn fresh_and_populated_images_are_clean() {
    let dev = new_dev();
    let r = check(&*dev).unwrap();
    assert!(r.is_clean(), "{}", show(&r));
    assert_eq!(r.dirs, 2);
    let (dev, _) = build();
    let r = check(&*dev).unwrap();
    assert!(r.is_clean(), "{}", show(&r));
    assert_eq!(r.dirs, 5);
    assert_eq!(r.violations(), 0);
    let r = repair(&*dev).unwrap();
    assert!(!r.repaired && r.is_clean());
}
