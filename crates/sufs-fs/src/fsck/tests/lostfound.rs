//! Pass 4's reconnections past lost+found's first blocks: lost+found grows a block at a time,
//! through its direct blocks and then its single indirect block (fsck_ffs's `expanddir`); a
//! file that finds no room even so is cleared, and the image is left clean.

use super::*;

/// Files per directory of the image `orphans` makes: their names stay in direct blocks.
const PER_DIR: u32 = 500;

/// A 64 MiB image holding `n` files of one block each (file `i` holds `content(ino)`), in
/// directories of `PER_DIR`, whose names are then all zeroed: `n` unreferenced files with
/// data, as a crash that lost every directory block leaves them. Returns the image and the
/// lost inodes.
fn orphans(n: u32) -> (Arc<MemDevice>, Vec<u32>) {
    let dev = Arc::new(MemDevice::new(4096, 16384));
    mkfs(dev.clone(), &MkfsOptions { inodes: Some(12000), ..Default::default() }, (0, 0)).unwrap();
    let mut fs = mount(&dev, Ordering::Async);
    let mut dirs = Vec::new();
    let mut lost = Vec::new();
    for i in 0..n {
        if i % PER_DIR == 0 {
            dirs.push(fs.mkdir(ROOT_INO, format!("d{}", i / PER_DIR).as_bytes(), 0o755, 0, 0).unwrap().0);
        }
        let dir = *dirs.last().unwrap();
        let (f, _) = fs.create(dir, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
        fs.write(f, 0, &content(f)).unwrap();
        lost.push(f);
    }
    fs.unmount().unwrap();
    for dir in dirs {
        let d = get_inode(&dev, dir);
        assert_eq!(d.ib[0], 0, "the names are in direct blocks");
        for &bno in d.db.iter().filter(|&&b| b != 0) {
            modify(&dev, bno, |b| {
                let live: Vec<usize> = dir_iter(b)
                    .map(|e| e.unwrap())
                    .filter(|e| e.ino != 0 && e.name != b"." && e.name != b"..")
                    .map(|e| e.offset)
                    .collect();
                for at in live {
                    dirent_set_ino(b, at, 0);
                }
            });
        }
    }
    (dev, lost)
}

/// File `ino`'s bytes: a block naming it.
fn content(ino: u32) -> Vec<u8> {
    format!("file {ino:>7}\n").into_bytes().repeat(4096 / 13)
}

/// The inodes named in lost+found by `#INO` names, each checked to hold its bytes.
fn reconnected(dev: &Arc<MemDevice>) -> Vec<u32> {
    let mut fs = mount(dev, Ordering::Sync);
    let names = fs.readdir(LOST_FOUND_INO, 0, 100_000).unwrap();
    let mut found = Vec::new();
    for e in names.iter().filter(|e| e.name.starts_with(b"#")) {
        assert_eq!(e.name, format!("#{}", e.ino).into_bytes());
        let want = content(e.ino);
        assert_eq!(fs.read(e.ino, 0, want.len() + 1).unwrap(), want, "I={}", e.ino);
        found.push(e.ino);
    }
    fs.unmount().unwrap();
    found.sort_unstable();
    found
}

#[test]
fn lost_found_grows_into_its_indirect_block() {
    // 5,000 names of 16 bytes: more than lost+found's 12 direct blocks hold (~3,000).
    let (dev, lost) = orphans(5000);
    let r = check(&*dev).unwrap();
    let unref = r.findings.iter().filter(|f| matches!(f, Finding::UnreferencedInode { .. })).count();
    assert_eq!(unref, lost.len(), "{}", show(&r));
    let r = repair_and_verify(&dev);
    assert!(r.remaining.is_empty() && r.notes.is_empty(), "{:?}", r.notes);
    let lf = get_inode(&dev, LOST_FOUND_INO);
    assert!(lf.ib[0] != 0 && lf.size > NDADDR as u64 * 4096, "lost+found: size {}", lf.size);
    let (found, mut lost) = (reconnected(&dev), lost);
    lost.sort_unstable();
    let missing: Vec<&u32> = lost.iter().filter(|i| found.binary_search(i).is_err()).take(5).collect();
    assert!(found == lost, "{} of {} reconnected; missing {missing:?}...", found.len(), lost.len());
}

#[test]
fn no_free_block_clears_what_finds_no_room() {
    let (dev, lost) = orphans(1000);
    // Every free block taken by one file: lost+found cannot grow past its one block.
    let mut fs = mount(&dev, Ordering::Async);
    let (fill, _) = fs.create(ROOT_INO, b"fill", 0o644, 0, 0).unwrap();
    let chunk = vec![5u8; 256 * 4096];
    let mut off = 0;
    while let Ok(n) = fs.write(fill, off, &chunk) {
        off += n as u64;
        if n < chunk.len() {
            break;
        }
    }
    while fs.write(fill, off, &[5u8; 4096]).is_ok() {
        off += 4096;
    }
    fs.unmount().unwrap();
    assert_eq!(sb(&dev).free_blocks, 0, "the image is full");
    assert_eq!(get_inode(&dev, LOST_FOUND_INO).size, 4096);
    // The image is left clean and usable (the cleared files' blocks are free again).
    let r = repair_and_verify(&dev);
    assert!(r.remaining.is_empty(), "{}", show(&r));
    // Those that fit lost+found's block are there, intact; the rest are cleared, and said so.
    let kept = reconnected(&dev);
    assert!(kept.len() > 100 && kept.len() < lost.len(), "{} reconnected", kept.len());
    assert!(r.notes.iter().all(|l| l.contains("NO SPACE IN lost+found") && l.ends_with("(CLEARED)")));
    let mut cleared: Vec<u32> = (r.notes.iter())
        .map(|l| l.split(['=', ':']).nth(1).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{l}")))
        .collect();
    cleared.extend(&kept);
    cleared.sort_unstable();
    let mut lost = lost;
    lost.sort_unstable();
    assert!(cleared == lost, "{} reconnected, {} cleared, of {}", kept.len(), r.notes.len(), lost.len());
}
