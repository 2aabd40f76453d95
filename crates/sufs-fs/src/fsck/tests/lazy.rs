//! Lazily initialized inode tables: the header's count of initialized inodes too low, too high,
//! garbage; entries and inodes past it; an image of the first version (every block initialized).

use super::*;

/// A live-looking regular file, as a device used before may hold where the table is not
/// initialized.
fn stale_dinode() -> Dinode {
    Dinode::new(S_IFREG | 0o644, 1, 0, 0, (5, 0), 9)
}

/// Fills inode block `k` of group `cg`'s table with stale dinodes.
fn stale_block(dev: &MemDevice, cg: u32, k: u32) {
    let s = sb(dev);
    modify(dev, s.cg_itable_block(cg) + k as u64, |b| {
        b.chunks_exact_mut(DINODE_SIZE).for_each(|raw| stale_dinode().encode(raw));
    });
}

/// Group `cg`'s count set to `n` (resealed).
fn set_initialized(dev: &MemDevice, cg: u32, n: u32) {
    modify_cg(dev, cg, |b, _| cg_set_initialized(b, n));
}

/// The group of the directory of 300 files, the one with the most inodes in use.
fn busy_group(dev: &MemDevice, t: &Tree) -> u32 {
    sb(dev).cg_of_inode(t.many)
}

#[test]
fn the_allocator_initializes_blocks_ahead_and_fsck_reads_no_further() {
    let (dev, t) = build();
    let s = sb(&dev);
    let cg = busy_group(&dev, &t);
    let header = read_cg(&dev, cg);
    let map = &header[CgHeader::inode_map_offset()..];
    let last = (0..s.inodes_per_group).rfind(|&i| bit_get(map, i as usize)).unwrap_or(0);
    let ipb = s.inodes_per_block();
    let inited = cg_get_initialized(&header);
    // Every inode in use in the group lies in the initialized blocks, and the table's end not.
    assert!(last > 2 * ipb, "the last inode in use in group {cg} is {last}");
    assert!(inited.is_multiple_of(ipb) && inited > last && inited < s.inodes_per_group, "{inited} for {last}");
    // What lies past the count is never read: stale inodes there change nothing.
    stale_block(&dev, cg, inited / ipb);
    stale_block(&dev, cg, s.inode_table_blocks() - 1);
    let r = check(&*dev).unwrap();
    assert!(r.is_clean(), "{}", show(&r));
    let mut fs = mount(&dev, Ordering::Softdep);
    for i in 0..3 * ipb {
        fs.create(t.many, format!("n{i}").as_bytes(), 0o644, 0, 0).unwrap();
    }
    fs.unmount().unwrap();
    let r = check(&*dev).unwrap();
    assert!(r.is_clean(), "the allocator zeroed the stale blocks it reached:\n{}", show(&r));
}

fn read_cg(dev: &MemDevice, cg: u32) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    dev.read_block(sb(dev).cg_header_block(cg), &mut b).unwrap();
    b
}

#[test]
fn a_count_too_low_is_found_and_raised_without_losing_a_file() {
    let (dev, t) = build();
    let files = check(&*dev).unwrap().files;
    let ipb = sb(&dev).inodes_per_block();
    let cg = busy_group(&dev, &t);
    set_initialized(&dev, cg, ipb);
    let r = check(&*dev).unwrap();
    let f = r
        .findings
        .iter()
        .find(|f| matches!(f, Finding::CgCountWrong { cg: c, what: "initialized inodes", .. } if *c == cg));
    assert!(f.is_some_and(|f| f.class() == Class::Violation), "{}", show(&r));
    assert!(!has(&r, |f| matches!(f, Finding::DanglingEntry { .. })), "the map's inodes were read:\n{}", show(&r));
    repair_converges(&dev, files);
    assert!(cg_get_initialized(&read_cg(&dev, cg)) > ipb);
    repair_and_verify_after_use(&dev);
}

/// The repaired image takes new files and stays clean.
fn repair_and_verify_after_use(dev: &Arc<MemDevice>) {
    let mut fs = mount(dev, Ordering::Softdep);
    for i in 0..40 {
        fs.create(ROOT_INO, format!("later{i}").as_bytes(), 0o644, 0, 0).unwrap();
    }
    fs.unmount().unwrap();
    let c = check(&**dev).unwrap();
    assert!(c.is_clean(), "{}", show(&c));
}

#[test]
fn a_count_past_the_table_or_garbage_is_reported_and_rebuilt() {
    let s = sb(&build().0);
    for bad in [s.inodes_per_group + s.inodes_per_block(), 17, 0xdead_beef, u32::MAX] {
        let (dev, _) = build();
        let files = check(&*dev).unwrap().files;
        set_initialized(&dev, 0, bad);
        // The mount takes the blocks up to the map's last inode, asks for fsck, and works.
        let mut fs = mount(&dev, Ordering::Softdep);
        let (f, _) = fs.create(ROOT_INO, b"while-damaged", 0o644, 0, 0).unwrap();
        fs.write(f, 0, &[1u8; 300]).unwrap();
        fs.unmount().unwrap();
        assert!(sb(&dev).flags & SB_NEEDS_FSCK != 0, "count {bad:#x}: the mount noted the damage");
        let r = check(&*dev).unwrap();
        let hit = has(&r, |f| matches!(f, Finding::BadCgHeader { cg: 0, .. }));
        assert!(hit || r.is_clean(), "count {bad:#x}:\n{}", show(&r));
        repair(&*dev).unwrap();
        let c = check(&*dev).unwrap();
        assert!(c.is_clean() && c.files == files + 1, "count {bad:#x}:\n{}", show(&c));
        assert!(sb(&dev).initialized_inodes(cg_get_initialized(&read_cg(&dev, 0))).is_some());
    }
}

#[test]
fn an_entry_naming_an_inode_past_the_count_is_dangling() {
    let (dev, _) = build();
    let s = sb(&dev);
    let inited = cg_get_initialized(&read_cg(&dev, 0));
    let ghost = inited + 1;
    stale_block(&dev, 0, inited / s.inodes_per_block());
    // The file "a" renamed by hand to the stale inode, marked in use in the map too.
    let (bno, at, _) = entry(&dev, ROOT_INO, b"a");
    modify(&dev, bno, |b| b[at..at + 4].copy_from_slice(&ghost.to_le_bytes()));
    let r = check(&*dev).unwrap();
    assert!(has(&r, |f| matches!(f, Finding::DanglingEntry { ino, .. } if *ino == ghost)), "{}", show(&r));
    // ... and a mount reads it as a free inode, never the stale one.
    let mut fs = mount(&dev, Ordering::Sync);
    assert!(fs.lookup(ROOT_INO, b"a").is_err());
    drop(fs);
    repair(&*dev).unwrap();
    assert!(check(&*dev).unwrap().is_clean());
}

#[test]
fn a_live_inode_free_in_the_map_before_the_count_is_found() {
    let (dev, _) = build();
    let inited = cg_get_initialized(&read_cg(&dev, 0));
    let ino = inited - 1;
    assert!(get_inode(&dev, ino).is_free());
    modify_inode(&dev, ino, |d| *d = stale_dinode());
    let r = check(&*dev).unwrap();
    assert!(has(&r, |f| *f == Finding::InodeUsedButFree { ino }), "{}", show(&r));
}

#[test]
fn an_image_of_the_first_version_has_every_inode_block_initialized() {
    let (dev, _) = build();
    let files = check(&*dev).unwrap().files;
    let mut s = sb(&dev);
    s.version = VERSION_EAGER;
    modify(&dev, 0, |b| s.encode(b));
    for cg in 0..s.ngroups {
        modify_cg(&dev, cg, |b, _| cg_set_initialized(b, 0));
    }
    let r = check(&*dev).unwrap();
    assert!(r.is_clean() && r.files == files, "{}", show(&r));
    let mut fs = mount(&dev, Ordering::Softdep);
    for i in 0..3 * s.inodes_per_block() {
        fs.create(ROOT_INO, format!("v1-{i}").as_bytes(), 0o644, 0, 0).unwrap();
    }
    fs.unmount().unwrap();
    assert_eq!(sb(&dev).version, VERSION_EAGER, "the version stays");
    assert_eq!(cg_get_initialized(&read_cg(&dev, 0)), 0, "nothing counted in a version 1 header");
    let r = check(&*dev).unwrap();
    assert!(r.is_clean() && r.files == files + 3 * s.inodes_per_block() as u64, "{}", show(&r));
}
