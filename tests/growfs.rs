//! growfs over any block device (`sufs_fs::fs::growfs`): every crash state it can leave is the old
//! or the new file system, and the grown one holds files past the old end.

use std::sync::Arc;

mod common;

use common::{assert_clean, mount, pattern};
use sufs_fs::dev::{BlockDevice, MemDevice, Record, RecordingDevice, WriteKind, WriteReq};
use sufs_fs::format::{Superblock, MKFS_MIN_GROUPS, ROOT_INO};
use sufs_fs::fs::growfs::{self, GrowError};
use sufs_fs::fs::{mkfs, MkfsOptions, Ordering};
use sufs_fs::fsck::{self, Finding};

/// A file system of `old` blocks holding a few files, on a device of `new` blocks whose blocks
/// past `old` hold `fill` (a device that was not zeroed) or nothing.
fn image(old: u64, new: u64, fill: Option<u8>) -> Vec<Option<Box<[u8]>>> {
    image_groups(old, new, fill, MKFS_MIN_GROUPS)
}

/// `image` made with at least `min_groups` groups (1: one group, as mkfs made a small image
/// before it made two).
fn image_groups(old: u64, new: u64, fill: Option<u8>, min_groups: u64) -> Vec<Option<Box<[u8]>>> {
    let dev = Arc::new(MemDevice::new(4096, old));
    mkfs(dev.clone(), &MkfsOptions { min_groups, ..Default::default() }, (1_700_000_000, 0)).unwrap();
    let mut fs = mount(&dev, Ordering::Softdep, 1024);
    let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    for i in 0..5u64 {
        let (f, _) = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
        fs.write(f, 0, &pattern(i, 30_000 * i as usize + 1)).unwrap();
    }
    fs.unmount().unwrap();
    let mut blocks = dev.blocks();
    let junk: Box<[u8]> = vec![fill.unwrap_or(0); 4096].into();
    blocks.resize(new as usize, fill.map(|_| junk));
    blocks
}

/// The primary superblock's block count.
fn fs_blocks(dev: &MemDevice) -> u64 {
    let mut buf = vec![0u8; 4096];
    dev.read_block(0, &mut buf).unwrap();
    Superblock::decode(&buf).unwrap().num_blocks
}

/// Grows the image, then checks each prefix of growfs's writes applied to the old image: fsck
/// finds no violation, the file system is the old or the new one, and the only finding besides
/// summary counts is an interrupted growfs's header, which repair fixes.
fn grow_and_crash(old: u64, new: u64, fill: Option<u8>) -> growfs::Growth {
    grow_and_crash_groups(old, new, fill, MKFS_MIN_GROUPS)
}

/// `grow_and_crash` of an image made with at least `min_groups` groups.
fn grow_and_crash_groups(old: u64, new: u64, fill: Option<u8>, min_groups: u64) -> growfs::Growth {
    let base = image_groups(old, new, fill, min_groups);
    let rec = RecordingDevice::new(MemDevice::from_blocks(4096, base.clone()));
    let g = growfs::grow(&rec, fill.is_none()).expect("growfs");
    assert!(g.new.num_blocks > old);
    let writes: Vec<(u64, Arc<[u8]>)> = rec
        .log()
        .into_iter()
        .filter_map(|r| match r {
            Record::Write { bno, data } => Some((bno, data)),
            Record::Barrier => None,
        })
        .collect();
    let dev = MemDevice::from_blocks(4096, base);
    let mut interrupted = 0;
    for k in 0..=writes.len() {
        if k > 0 {
            let (bno, data) = &writes[k - 1];
            dev.write_batch(&[WriteReq { bno: *bno, data }], WriteKind::Sync).unwrap();
        }
        let r = fsck::check(&dev).unwrap();
        let shown: Vec<String> = r.findings.iter().map(|f| format!("{:?}: {f}", f.class())).collect();
        assert_eq!(r.violations(), 0, "after {k} of {} writes:\n{}", writes.len(), shown.join("\n"));
        assert!([old, g.new.num_blocks].contains(&fs_blocks(&dev)), "after {k} writes: a third size");
        if r.findings.iter().any(|f| matches!(f, Finding::GrowInterrupted { .. })) {
            interrupted += 1;
            let copy = MemDevice::from_blocks(4096, dev.blocks());
            let opts = fsck::Options { mode: fsck::Mode::Repair, ..Default::default() };
            fsck::run(&copy, &opts).unwrap();
            assert_clean(&copy);
            assert_eq!(fs_blocks(&copy), old, "repair keeps the old file system");
        }
    }
    assert_eq!(interrupted, g.extended.is_some() as usize, "one mixed state when the last group grows");
    assert_clean(&dev);
    assert_eq!(fs_blocks(&dev), g.new.num_blocks);
    g
}

/// Fills the grown file system past its old size and reads the files back.
fn fill_past(blocks: Vec<Option<Box<[u8]>>>, old: u64) {
    let dev = Arc::new(MemDevice::from_blocks(4096, blocks));
    let mut fs = mount(&dev, Ordering::Softdep, 4096);
    let chunk = pattern(9, 1 << 20);
    let (f, _) = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap();
    let mut off = 0u64;
    while off < (old + 2000) * 4096 {
        fs.write(f, off, &chunk).unwrap();
        off += chunk.len() as u64;
    }
    fs.unmount().unwrap();
    assert_clean(&dev);
}

#[test]
fn extending_the_last_group_is_crash_safe() {
    // Two groups of 7552 blocks, the second 7448 long: it grows to 7552, and a third is added.
    let g = grow_and_crash(15000, 20000, None);
    assert_eq!((g.old.ngroups, g.new.ngroups, g.extended), (2, 3, Some((7448, 7552))));
    // An image of one group, as mkfs made small ones before it made two: the group grows.
    let g = grow_and_crash_groups(16384, 20000, None, 1);
    assert_eq!((g.old.ngroups, g.new.ngroups, g.extended), (1, 1, Some((16384, 20000))));
}

#[test]
fn new_groups_on_a_dirty_device_are_crash_safe_and_usable() {
    // Two whole groups of 8192 blocks, then new ones of the same size.
    let g = grow_and_crash(16384, 60000, Some(0xa5));
    assert_eq!((g.old.ngroups, g.new.ngroups, g.extended), (2, 8, None));
    let base = image(16384, 60000, Some(0xa5));
    let dev = MemDevice::from_blocks(4096, base);
    growfs::grow(&dev, false).unwrap();
    fill_past(dev.blocks(), 16384);
}

#[test]
fn whole_groups_after_a_full_last_group() {
    let sb = Superblock::geometry(4096, 60000, None).unwrap();
    let full = sb.blocks_per_group as u64 * 2;
    let g = grow_and_crash(full, full * 2 + 500, None);
    assert_eq!((g.extended, g.new.ngroups), (None, 5));
}

#[test]
fn refusals() {
    let dev = MemDevice::from_blocks(4096, image(16384, 16384, None));
    assert!(matches!(growfs::grow(&dev, true), Err(GrowError::Refused(m)) if m.contains("not larger")));
    // A tail too short for a group's metadata.
    let dev = MemDevice::from_blocks(4096, image(15000, 15000 + 10, None));
    assert!(growfs::grow(&dev, true).is_ok(), "the short last group grows by 10 blocks");
    let dev = MemDevice::from_blocks(4096, image(16384, 16384 + 5, None));
    assert!(matches!(growfs::grow(&dev, true), Err(GrowError::Refused(m)) if m.contains("too little")));
}

/// The one mixed state through the commands: `fsck` reports it (exit 4, no violation), `fsck -p`
/// sets the header back (exit 1), and then the image is the old file system, clean; growfs
/// runs again once the file is cut back to it.
#[test]
fn an_interrupted_growfs_through_the_commands() {
    let base = image(15000, 20000, None);
    let rec = RecordingDevice::new(MemDevice::from_blocks(4096, base.clone()));
    growfs::grow(&rec, true).unwrap();
    let dev = MemDevice::from_blocks(4096, base);
    for r in rec.log() {
        let Record::Write { bno, data } = r else { continue };
        dev.write_batch(&[WriteReq { bno, data: &data }], WriteKind::Sync).unwrap();
        if fsck::check(&dev).unwrap().findings.iter().any(|f| matches!(f, Finding::GrowInterrupted { .. })) {
            break;
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("i.img");
    let i = img.to_str().unwrap();
    sufs_fs::dev::write_sparse_image::<sufs_fs::dev::DevError>(
        &img,
        20000,
        4096,
        |b, buf| dev.read_block(b, buf),
        |_| true,
    )
    .unwrap();
    let out = common::sufs(&["fsck", i]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(text.contains("Allowed: cylinder group 1: the header holds 104 free blocks past"), "{text}");
    assert!(text.contains("0 violations"), "{text}");
    assert_eq!(common::sufs(&["fsck", "-p", i]).status.code(), Some(1));
    assert_eq!(common::sufs(&["fsck", i]).status.code(), Some(0));
    assert!(common::ok(&["dumpfs", i]).contains("blocks    15000"));
    let out = common::sufs(&["growfs", i, "--size", "100M"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("truncate -s 61440000"), "{out:?}");
    std::fs::OpenOptions::new().write(true).open(&img).unwrap().set_len(15000 * 4096).unwrap();
    common::ok(&["growfs", i, "--size", "100M"]);
    assert_eq!(common::sufs(&["fsck", i]).status.code(), Some(0));
}
