//! The modes of a run (check, preen, repair) and setup's choice of superblock.

use super::*;

#[test]
fn preen_repairs_only_allowed_damage() {
    // A leak and a link count too high: repaired.
    let (dev, t) = build();
    modify_inode(&dev, t.d1, |d| d.nlink = 7);
    let r = preen(&*dev).unwrap();
    assert!(r.refused.is_none() && r.repaired && r.remaining.is_empty(), "{}", show(&r));
    assert!(check(&*dev).unwrap().is_clean());
    // Mixed with one violation: nothing is touched, the allowed damage included.
    let (dev, t) = build();
    modify_inode(&dev, t.d1, |d| d.nlink = 7);
    modify_inode(&dev, t.a, |d| d.nlink = 1);
    preen_refuses(&dev);
    assert_eq!(get_inode(&dev, t.d1).nlink, 7);
}

#[test]
fn preen_reconnects_an_unreferenced_tree_with_entries() {
    let (dev, t) = build();
    let files = check(&*dev).unwrap().files;
    let (bno, off, _) = entry(&dev, ROOT_INO, b"d1");
    modify(&dev, bno, |b| dir_remove(b, off).unwrap());
    let r = preen(&*dev).unwrap();
    assert!(r.refused.is_none() && r.remaining.is_empty(), "{}", show(&r));
    let c = check(&*dev).unwrap();
    assert!(c.is_clean() && c.files == files, "{}", show(&c));
    let mut fs = mount(&dev, Ordering::Sync);
    assert_eq!(fs.lookup(LOST_FOUND_INO, format!("#{}", t.d1).as_bytes()).unwrap().0, t.d1);
    fs.unmount().unwrap();
    // An empty one is cleared.
    let (dev, t) = build();
    let (bno, off, _) = entry(&dev, t.d1, b"sub");
    modify(&dev, bno, |b| dir_remove(b, off).unwrap());
    let (bno, off, _) = entry(&dev, t.sub, b"b2");
    modify(&dev, bno, |b| dir_remove(b, off).unwrap());
    let r = preen(&*dev).unwrap();
    assert!(r.refused.is_none(), "{}", show(&r));
    assert!(get_inode(&dev, t.sub).is_free() && get_inode(&dev, t.b2).is_free());
}

#[test]
fn clean_flags_and_preen() {
    let (dev, _) = build();
    let preen_opts = |force| Options { mode: Mode::Preen, force, superblock: None };
    let r = run(&*dev, &preen_opts(false)).unwrap();
    assert!(r.skipped_clean);
    let r = run(&*dev, &preen_opts(true)).unwrap();
    assert!(!r.skipped_clean && r.is_clean());
    // Damage a mount noticed: preen leaves it to -y, which clears the flag.
    let mut s = sb(&dev);
    s.flags |= SB_NEEDS_FSCK;
    modify(&dev, 0, |b| s.encode(b));
    let r = run(&*dev, &preen_opts(false)).unwrap();
    assert!(!r.skipped_clean && r.refused.is_some());
    let r = repair(&*dev).unwrap();
    assert!(r.is_clean() && r.repaired);
    assert_eq!(sb(&dev).flags & SB_NEEDS_FSCK, 0);
    // A repair that leaves something sets it.
    let (dev, _) = build();
    let mut s = sb(&dev);
    s.flags &= !SB_CLEAN;
    modify(&dev, 0, |b| s.encode(b));
    assert!(!run(&*dev, &preen_opts(false)).unwrap().skipped_clean);
}

#[test]
fn operational_errors() {
    let dev = Arc::new(MemDevice::new(4096, 256));
    assert!(matches!(check(&*dev), Err(FsckError::Superblock(_))));
    // A primary that does not decode and no copy to fall back on: an image of one group, and
    // one of two whose copy is damaged too.
    let dev = new_dev_groups(1);
    modify(&dev, 0, |b| b[20] ^= 1);
    assert!(matches!(check(&*dev), Err(FsckError::Superblock(_))));
    assert!(matches!(repair(&*dev), Err(FsckError::Superblock(_))));
    let dev = new_dev();
    let copy = sb(&dev).cg_start(1);
    modify(&dev, 0, |b| b[20] ^= 1);
    assert!(check(&*dev).is_ok(), "the copy stands in");
    modify(&dev, copy, |b| b[20] ^= 1);
    assert!(matches!(check(&*dev), Err(FsckError::Superblock(_))));
    assert!(matches!(repair(&*dev), Err(FsckError::Superblock(_))));
}

#[test]
fn open_image_reads_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("img");
    FileDevice::create(&p, 4096 * 2048).unwrap();
    {
        let mut d = FileDevice::open(&p, 4096, true).unwrap();
        d.set_durable(false);
        mkfs(Arc::new(d), &MkfsOptions::default(), (0, 0)).unwrap();
    }
    let d = open_image(&p, false).unwrap();
    assert_eq!(d.block_size(), 4096);
    assert!(check(&d).unwrap().is_clean());
    assert!(open_image(&dir.path().join("missing"), false).is_err());
}

#[test]
fn alternate_superblock() {
    // A primary that does not decode: the copy's geometry, said so; preen refuses; repair
    // writes the primary again.
    let (dev, copy) = two_groups();
    let good = sb(&dev);
    modify(&dev, 0, |b| b[20] ^= 0xff);
    let r = check(&*dev).unwrap();
    assert_eq!(r.alternate, Some(copy));
    assert!(has(&r, |f| matches!(f, Finding::BadSuperblock { .. })), "{}", show(&r));
    preen_refuses(&dev);
    repair_converges(&dev, 20);
    let now = sb(&dev);
    assert_eq!(
        (now.num_blocks, now.inodes_per_group, now.free_blocks),
        (good.num_blocks, good.inodes_per_group, good.free_blocks)
    );
    // Garbage over the whole primary.
    let (dev, copy) = two_groups();
    modify(&dev, 0, |b| b.fill(0x5a));
    assert_eq!(check(&*dev).unwrap().alternate, Some(copy));
    repair_converges(&dev, 20);
    // A wrong inodes per group in a primary that decodes: the headers and the copy win.
    let (dev, _) = two_groups();
    let mut s = sb(&dev);
    s.inodes_per_group += 16;
    modify(&dev, 0, |b| s.encode(b));
    let r = check(&*dev).unwrap();
    assert!(has(&r, |f| matches!(f, Finding::BadSuperblock { .. })), "{}", show(&r));
    assert_eq!(r.violations(), 1, "{}", show(&r));
    repair_converges(&dev, 20);
    assert_eq!(sb(&dev).inodes_per_group, good.inodes_per_group);
    // One group (as mkfs made small images before it made two), so no copy: the header
    // against the primary, and the inodes per group mkfs gives one group of this size.
    let (dev, _) = build_one_group();
    let good = sb(&dev);
    for delta in [16i64, -16] {
        let mut s = good.clone();
        s.inodes_per_group = (s.inodes_per_group as i64 + delta) as u32;
        modify(&dev, 0, |b| s.encode(b));
        let r = check(&*dev).unwrap();
        assert!(has(&r, |f| matches!(f, Finding::BadSuperblock { .. })), "{delta}: {}", show(&r));
        let files = r.files;
        repair_converges(&dev, files);
        assert_eq!(sb(&dev).inodes_per_group, good.inodes_per_group);
    }
    // -b: the copy asked for; a block holding none is an operational error.
    let (dev, copy) = two_groups();
    let opts = |at| Options { mode: Mode::Check, force: false, superblock: Some(at) };
    let r = run(&*dev, &opts(copy)).unwrap();
    assert_eq!(r.alternate, Some(copy));
    assert!(matches!(run(&*dev, &opts(5)), Err(FsckError::Superblock(_))));
    assert!(run(&*dev, &opts(1 << 40)).is_err());
}
