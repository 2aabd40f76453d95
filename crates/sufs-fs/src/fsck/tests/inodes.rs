//! Pass 1 and 1b: inodes, their block maps, and blocks owned twice.

use super::*;

#[test]
fn block_count_wrong() {
    let (dev, t) = build();
    let stored = get_inode(&dev, t.big).blocks;
    modify_inode(&dev, t.big, |d| d.blocks += 5);
    let r = expect(&dev, Class::Allowed, |f| {
        *f == Finding::BlockCountWrong { ino: t.big, stored: stored + 5, actual: stored }
    });
    assert_eq!(r.violations(), 0);
    assert_eq!(get_inode(&dev, t.big).blocks, stored);
}

#[test]
fn duplicate_block() {
    let (dev, t) = build();
    let shared = get_inode(&dev, t.a).db[0];
    modify_inode(&dev, t.b2, |d| d.db[1] = shared);
    expect(&dev, Class::Violation, |f| *f == Finding::DuplicateBlock { ino: t.b2, bno: shared });
    assert_eq!(get_inode(&dev, t.b2).db[1], 0);
    assert_eq!(get_inode(&dev, t.a).db[0], shared);
    // Twice in one file, in an indirect block.
    let (dev, t) = build();
    let d = get_inode(&dev, t.big);
    let ind = d.ib[0];
    let first = d.db[0];
    modify(&dev, ind, |b| ind_set(b, 3, first));
    expect(&dev, Class::Violation, |f| *f == Finding::DuplicateBlock { ino: t.big, bno: first });
}

#[test]
fn bad_pointers() {
    let (dev, t) = build();
    modify_inode(&dev, t.a, |d| d.db[5] = 1);
    expect(&dev, Class::Violation, |f| *f == Finding::BadPointer { ino: t.a, bno: 1 });
    let (dev, t) = build();
    let ind = get_inode(&dev, t.big).ib[1];
    modify(&dev, ind, |b| ind_set(b, 0, u64::MAX));
    expect(&dev, Class::Violation, |f| *f == Finding::BadPointer { ino: t.big, bno: u64::MAX });
}

#[test]
fn bad_inodes() {
    let (dev, t) = build();
    modify_inode(&dev, t.fifo, |d| d.mode = 0o170644);
    expect(&dev, Class::Violation, |f| matches!(f, Finding::BadInode { ino, .. } if *ino == t.fifo));
    assert!(get_inode(&dev, t.fifo).is_free());
    let (dev, t) = build();
    modify_inode(&dev, t.sub, |d| d.size = 100);
    expect(&dev, Class::Violation, |f| matches!(f, Finding::BadInode { ino, .. } if *ino == t.sub));
    let (dev, t) = build();
    modify_inode(&dev, t.a, |d| d.size = u64::MAX);
    expect(&dev, Class::Violation, |f| matches!(f, Finding::BadInode { ino, .. } if *ino == t.a));
}

#[test]
fn symlink_longer_than_any_target() {
    for size in [1u64 << 32, 1u64 << 39, 4096] {
        let (dev, t) = build();
        modify_inode(&dev, t.sym, |d| d.size = size);
        let r = check(&*dev).unwrap();
        assert!(has(&r, |f| matches!(f, Finding::BadInode { ino, .. } if *ino == t.sym)), "{size}: {}", show(&r));
        assert!(r.violations() > 0);
        preen_refuses(&dev);
        repair_converges(&dev, r.files);
        let mut fs = mount(&dev, Ordering::Sync);
        assert_eq!(fs.readlink(t.sym).unwrap(), b"d1/sub");
        fs.unmount().unwrap();
    }
}

#[test]
fn nanoseconds_out_of_range_but_any_seconds() {
    let (dev, t) = build();
    modify_inode(&dev, t.a, |d| {
        d.atime = i64::MAX;
        d.ctime = i64::MIN;
        d.mtime = -1;
    });
    assert!(check(&*dev).unwrap().is_clean());
    modify_inode(&dev, t.a, |d| d.mtime_ns = NSEC_PER_SEC);
    let r = check(&*dev).unwrap();
    assert!(has(&r, |f| matches!(f, Finding::BadInode { ino, .. } if *ino == t.a)), "{}", show(&r));
    assert_eq!(r.violations(), 1);
    preen_refuses(&dev);
    repair_converges(&dev, r.files);
    assert_eq!(get_inode(&dev, t.a).mtime_ns, 0);
    assert_eq!(get_inode(&dev, t.a).atime, i64::MAX);
}

#[test]
fn directory_block_shared_by_two_directories() {
    let (dev, t) = build();
    let files = check(&*dev).unwrap().files;
    let shared = get_inode(&dev, t.d1).db[0];
    modify_inode(&dev, t.sub, |d| d.db[0] = shared);
    let r = check(&*dev).unwrap();
    assert!(has(&r, |f| *f == Finding::DuplicateBlock { ino: t.sub, bno: shared }), "{}", show(&r));
    preen_refuses(&dev);
    repair_converges(&dev, files);
}
