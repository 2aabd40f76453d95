//! Passes 4 and 5: link counts, unreferenced inodes, bitmaps and summary counts.

use super::*;

#[test]
fn leaked_block() {
    let (dev, _) = build();
    let s = sb(&dev);
    let bno = s.num_blocks - 1;
    let cg = s.cg_of_block(bno);
    modify_cg(&dev, cg, |b, s| {
        let off = CgHeader::block_map_offset(s.inodes_per_group);
        bit_set(&mut b[off..], (bno - s.cg_start(cg)) as usize, true);
        cg_set_free_blocks(b, cg_get_free_blocks(b) - 1);
    });
    let r = expect(&dev, Class::Allowed, |f| *f == Finding::LeakedBlock { bno });
    assert_eq!(r.violations(), 0, "{}", show(&r));
}

#[test]
fn block_used_but_free_and_cg_count() {
    let (dev, t) = build();
    let bno = get_inode(&dev, t.a).db[0];
    let s = sb(&dev);
    let cg = s.cg_of_block(bno);
    modify_cg(&dev, cg, |b, s| {
        let off = CgHeader::block_map_offset(s.inodes_per_group);
        bit_set(&mut b[off..], (bno - s.cg_start(cg)) as usize, false);
    });
    expect(&dev, Class::Violation, |f| *f == Finding::BlockUsedButFree { bno });
    let (dev, _) = build();
    modify_cg(&dev, 0, |b, _| cg_set_free_inodes(b, cg_get_free_inodes(b) + 3));
    expect(&dev, Class::Violation, |f| matches!(f, Finding::CgCountWrong { cg: 0, what: "free inodes", .. }));
}

#[test]
fn leaked_and_free_inodes() {
    let (dev, t) = build();
    let s = sb(&dev);
    let ino = s.total_inodes() as u32 - 1;
    modify_cg(&dev, s.cg_of_inode(ino), |b, s| {
        bit_set(&mut b[CgHeader::inode_map_offset()..], (ino % s.inodes_per_group) as usize, true);
        cg_set_free_inodes(b, cg_get_free_inodes(b) - 1);
    });
    let r = expect(&dev, Class::Allowed, |f| *f == Finding::LeakedInode { ino });
    assert_eq!(r.violations(), 0, "{}", show(&r));
    let (dev, _) = build();
    modify_cg(&dev, s.cg_of_inode(t.a), |b, s| {
        bit_set(&mut b[CgHeader::inode_map_offset()..], (t.a % s.inodes_per_group) as usize, false);
    });
    expect(&dev, Class::Violation, |f| *f == Finding::InodeUsedButFree { ino: t.a });
}

#[test]
fn bad_cg_header() {
    let (dev, t) = build();
    let s = sb(&dev);
    let cg = s.cg_of_inode(t.sub);
    modify(&dev, s.cg_header_block(cg), |b| b[100] ^= 0x10);
    expect(&dev, Class::Violation, |f| matches!(f, Finding::BadCgHeader { cg: c, .. } if *c == cg));
}

#[test]
fn link_counts() {
    let (dev, t) = build();
    modify_inode(&dev, t.a, |d| d.nlink = 1);
    expect(&dev, Class::Violation, |f| *f == Finding::LinkCountTooLow { ino: t.a, stored: 1, actual: 2 });
    let (dev, t) = build();
    modify_inode(&dev, t.d1, |d| d.nlink = 7);
    let r = expect(&dev, Class::Allowed, |f| *f == Finding::LinkCountTooHigh { ino: t.d1, stored: 7, actual: 3 });
    assert_eq!(r.violations(), 0);
    // A directory's count too low: its subdirectory's ".." is not counted.
    let (dev, t) = build();
    modify_inode(&dev, t.d1, |d| d.nlink = 2);
    expect(&dev, Class::Violation, |f| matches!(f, Finding::LinkCountTooLow { ino, .. } if *ino == t.d1));
}

#[test]
fn nlink_zero_with_a_name() {
    let (dev, t) = build();
    modify_inode(&dev, t.a, |d| d.nlink = 0);
    let r = check(&*dev).unwrap();
    assert!(has(&r, |f| *f == Finding::LinkCountTooLow { ino: t.a, stored: 0, actual: 2 }), "{}", show(&r));
    assert!(r.violations() > 0);
    preen_refuses(&dev);
    repair_converges(&dev, r.files);
    assert_eq!(get_inode(&dev, t.a).nlink, 2);
}

#[test]
fn unreferenced_file_goes_to_lost_found() {
    let (dev, t) = build();
    let (bno, off, _) = entry(&dev, t.sub, b"b2");
    modify(&dev, bno, |b| dirent_set_ino(b, off, 0));
    let r = expect(&dev, Class::Allowed, |f| matches!(f, Finding::UnreferencedInode { ino, .. } if *ino == t.b2));
    assert_eq!(r.violations(), 0, "{}", show(&r));
    let mut fs = mount(&dev, Ordering::Sync);
    let (ino, d) = fs.lookup(LOST_FOUND_INO, format!("#{}", t.b2).as_bytes()).unwrap();
    assert_eq!((ino, d.nlink, d.size), (t.b2, 1, 10000));
    assert_eq!(fs.read(ino, 0, 10).unwrap(), vec![1u8; 10]);
    fs.unmount().unwrap();
}

#[test]
fn unreferenced_empty_file_is_cleared() {
    let (dev, t) = build();
    let (bno, off, _) = entry(&dev, ROOT_INO, b"empty");
    modify(&dev, bno, |b| dir_remove(b, off).unwrap());
    expect(&dev, Class::Allowed, |f| matches!(f, Finding::UnreferencedInode { ino, .. } if *ino == t.empty));
    assert!(get_inode(&dev, t.empty).is_free());
}

#[test]
fn summary_wrong() {
    let (dev, _) = build();
    let mut s = sb(&dev);
    s.free_blocks += 10;
    s.ndirs = 1;
    modify(&dev, 0, |b| s.encode(b));
    let r = expect(&dev, Class::Allowed, |f| matches!(f, Finding::SummaryWrong { what: "free blocks", .. }));
    assert_eq!(r.violations(), 0);
}

#[test]
fn snapshot_list_naming_no_snapshot() {
    let (dev, t) = build();
    let mut s = sb(&dev);
    s.snapshots[0] = t.a; // a regular file
    s.snapshots[1] = 9000; // not in use
    modify(&dev, 0, |b| s.encode(b));
    expect(&dev, Class::Violation, |f| {
        matches!(f, Finding::BadSnapshotList { slot: 0, what: "not flagged as a snapshot", .. })
    });
    assert_eq!(sb(&dev).snapshots, [0; MAX_SNAPSHOTS], "repair empties the list");
}
