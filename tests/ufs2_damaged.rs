//! Damaged UFS2 images through the file system: the FreeBSD fixture with bytes of its metadata
//! changed at random (inodes, directories, the group blocks, indirect blocks) is either refused
//! at mount with an error, or read whole with answers or errors, and written to (read-write: new
//! files, writes, truncates, removals, renames) with answers or errors: never a panic, never a
//! walk that does not end. `sufs inspect` prints such an image: answers, or a number refused.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use proptest::prelude::*;
use sufs_fs::clock::SimClock;
use sufs_fs::dev::{BlockDevice, FileDevice};
use sufs_fs::format::ufs2::{Superblock, UFS2_DINODE_SIZE};
use sufs_fs::format::{DT_DIR, DT_LNK, DT_REG, ROOT_INO};
use sufs_fs::fs::{Fs, MountOptions};

/// The superblock of the image `img`.
fn superblock_of(img: &[u8]) -> Superblock {
    let (_, u) = Superblock::search(|off, buf| {
        let off = off as usize;
        buf.copy_from_slice(&img[off..off + buf.len()]);
        Ok(())
    })
    .unwrap();
    u
}

/// Where the fixture's metadata is (byte ranges), found by decoding the clean image: with
/// `groups`, its group blocks (whose check hashes a mount verifies); else its inode blocks and
/// the root directory's first block (read as they are: the mount does not check inode hashes).
fn metadata_ranges(img: &[u8], groups: bool) -> Vec<(usize, usize)> {
    let u = superblock_of(img);
    let fsize = u.fs_fsize as usize;
    let mut out = Vec::new();
    for c in 0..u.fs_ncg {
        if groups {
            out.push((u.cgtod(c) as usize * fsize, u.fs_cgsize as usize));
        } else {
            out.push((u.cgimin(c) as usize * fsize, 2 * u.fs_bsize as usize));
        }
    }
    if groups {
        return out;
    }
    // The root directory's first block and the inodes of the first files.
    let root = u.ino_offset(ROOT_INO) as usize;
    let db0 = i64::from_le_bytes(img[root + 112..root + 120].try_into().unwrap());
    out.push((db0 as usize * fsize, 512));
    out.push((root, 32 * UFS2_DINODE_SIZE));
    out
}

/// Reads everything below the root through `fs`, answers or errors alike, visiting each
/// directory once; the walk must end (a bounded number of steps).
fn walk_all(fs: &mut Fs) {
    let mut seen = HashSet::new();
    let mut todo = vec![ROOT_INO];
    let mut steps = 0;
    while let Some(dir) = todo.pop() {
        if !seen.insert(dir) {
            continue;
        }
        let mut off = 0;
        while let Ok(entries) = fs.readdir(dir, off, 64) {
            let Some(last) = entries.last() else { break };
            off = last.next;
            for e in &entries {
                steps += 1;
                assert!(steps < 100_000, "the walk does not end");
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let _ = fs.listxattr(e.ino, 0);
                match e.dtype {
                    DT_DIR => todo.push(e.ino),
                    DT_LNK => drop(fs.readlink(e.ino)),
                    DT_REG => {
                        if let Ok(d) = fs.getattr(e.ino) {
                            let _ = fs.read(e.ino, 0, 1 << 16);
                            let _ = fs.read(e.ino, d.size.saturating_sub(4096), 8192);
                        }
                    }
                    _ => drop(fs.getattr(e.ino)),
                }
            }
        }
    }
}

/// Mounts a copy of `img` from a file (in a directory that lives as long as the answer).
fn mount_copy(img: &[u8], writable: bool) -> (tempfile::TempDir, Result<Fs, sufs_fs::fs::FsError>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.img");
    std::fs::write(&path, img).unwrap();
    let dev = FileDevice::open_frags(&path, 32768, 4096, writable).unwrap();
    let dev: Arc<dyn BlockDevice> = Arc::new(dev);
    let opts = MountOptions { readonly: !writable, cache_blocks: 64, ..Default::default() };
    let fs = Fs::mount(dev, opts, Arc::new(SimClock::new()));
    (dir, fs)
}

/// Mounts `img` read-only from a file and walks it; whether it mounted.
fn mount_and_walk(img: &[u8]) -> bool {
    let (_dir, fs) = mount_copy(img, false);
    match fs {
        Ok(mut fs) => {
            walk_all(&mut fs);
            true
        }
        Err(_) => false,
    }
}

/// Mounts `img` read-write from a file, walks it, then changes it the way a user would: files
/// made, the root's names written to, truncated, renamed and removed, a directory made; every
/// call answers or fails, and the unmount ends. Whether it mounted.
fn mount_and_change(img: &[u8]) -> bool {
    let (_dir, fs) = mount_copy(img, true);
    let Ok(mut fs) = fs else { return false };
    walk_all(&mut fs);
    let names: Vec<(Vec<u8>, u32)> = fs
        .readdir(ROOT_INO, 0, 64)
        .map(|v| v.into_iter().filter(|e| e.name != b"." && e.name != b"..").map(|e| (e.name, e.ino)).collect())
        .unwrap_or_default();
    for (i, (name, ino)) in names.iter().enumerate() {
        let _ = fs.write(*ino, (i as u64) * 3000, &[7u8; 5000]);
        let _ = fs.setattr(*ino, &sufs_fs::fs::SetAttr { size: Some(i as u64 * 700), ..Default::default() });
        match i % 3 {
            0 => drop(fs.unlink(ROOT_INO, name)),
            1 => drop(fs.rename(ROOT_INO, name, ROOT_INO, format!("moved-{i}").as_bytes(), Default::default())),
            _ => {}
        }
    }
    for i in 0..8 {
        if let Ok((ino, _)) = fs.create(ROOT_INO, format!("new-{i}").as_bytes(), 0o644, 0, 0) {
            let _ = fs.write(ino, 0, &vec![i as u8; 1000 * i + 1]);
        }
    }
    let _ = fs.mkdir(ROOT_INO, b"new-dir", 0o755, 0, 0);
    let _ = fs.unmount();
    true
}

#[test]
fn the_clean_fixture_walks_whole() {
    assert!(mount_and_walk(common::ufs2::image()));
}

/// Changes `picks` bytes of `ranges` in a copy of the fixture.
fn damaged(ranges: &[(usize, usize)], picks: &[(prop::sample::Index, prop::sample::Index, u8)]) -> Vec<u8> {
    let mut img = common::ufs2::image().to_vec();
    for (r, at, v) in picks {
        let (start, len) = ranges[r.index(ranges.len())];
        img[start + at.index(len)] = *v;
    }
    img
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Inodes and a directory damaged: the mount goes on (nothing it checks at mount is
    /// touched), and every read answers or fails.
    #[test]
    fn damaged_inodes_and_directories_never_panic_the_read_path(
        picks in proptest::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<u8>()), 1..16)
    ) {
        let img = damaged(&metadata_ranges(common::ufs2::image(), false), &picks);
        prop_assert!(mount_and_walk(&img), "a mount refused an image whose groups are intact");
    }

    /// Inodes and a directory damaged, mounted read-write and changed: no panic, no hang.
    #[test]
    fn damaged_inodes_and_directories_never_panic_a_read_write_mount(
        picks in proptest::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<u8>()), 1..16)
    ) {
        let img = damaged(&metadata_ranges(common::ufs2::image(), false), &picks);
        mount_and_change(&img);
    }

    /// Group blocks damaged: refused at mount (their check hashes), or read as any image.
    #[test]
    fn damaged_groups_never_panic_the_mount(
        picks in proptest::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<u8>()), 1..4)
    ) {
        let img = damaged(&metadata_ranges(common::ufs2::image(), true), &picks);
        mount_and_walk(&img);
    }
}

/// `sufs inspect` of `img` (written to a file): the superblock, the root directory, the first
/// inodes' fields, block maps and (for directories) entries, and each group's block, inode table
/// and first data fragments. The superblock is intact, so `sb` answers; every other command
/// answers (exit 0) or refuses its number (exit 1, "not a directory"): never a panic.
fn inspect_all(img: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.img");
    std::fs::write(&path, img).unwrap();
    let p = path.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = common::sufs(&[&["inspect", p][..], args].concat());
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let code = out.status.code();
        assert!(!err.contains("panicked") && matches!(code, Some(0 | 1)), "inspect {args:?}: {code:?} {err}");
        code
    };
    assert_eq!(run(&["sb"]), Some(0));
    run(&["dir", "/"]);
    for ino in 2..16u32 {
        let n = ino.to_string();
        run(&["inode", &n]);
        run(&["bmap", &n]);
        run(&["dir", &n]);
    }
    let u = superblock_of(img);
    for c in 0..u.fs_ncg {
        for f in [u.cgtod(c), u.cgimin(c), u.cgdmin(c), u.cgdmin(c) + 9] {
            run(&["block", &f.to_string()]);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Inodes, the root directory and the group blocks damaged: `sufs inspect` prints them.
    #[test]
    fn damaged_images_never_panic_inspect(
        picks in proptest::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<u8>()), 1..16),
        groups in any::<bool>(),
    ) {
        inspect_all(&damaged(&metadata_ranges(common::ufs2::image(), groups), &picks));
    }
}

/// Damage inspect must report, not follow: the root's first pointer past the file system, the
/// first file's tail in the middle of a block's end, an inode's check hash broken, a group block
/// overwritten.
#[test]
fn inspect_reports_the_damage_it_meets() {
    let img = common::ufs2::image().to_vec();
    let u = superblock_of(&img);
    let mut bad = img.clone();
    let at = |ino: u32| u.ino_offset(ino) as usize;
    // Root (inode 2): di_db[0] past the end, its check hash resealed so only the pointer is bad.
    let mut d = sufs_fs::format::ufs2::Dinode::decode(&bad[at(2)..]).unwrap();
    d.di_db[0] = u.fs_size + 3;
    bad[at(2)..at(2) + UFS2_DINODE_SIZE].copy_from_slice(&d.encode_for(&u));
    // file1 (inode 4, 23 bytes, one fragment): its fragment moved to a block's last fragment but
    // one, then two fragments long: past its block.
    let mut d = sufs_fs::format::ufs2::Dinode::decode(&bad[at(4)..]).unwrap();
    d.di_db[0] = 7 * u.fs_frag as i64 + u.fs_frag as i64 - 1;
    d.di_size = u.fs_fsize as u64 + 1;
    bad[at(4)..at(4) + UFS2_DINODE_SIZE].copy_from_slice(&d.encode_for(&u));
    // file3 (inode 5): a byte changed, its check hash left.
    bad[at(5) + 16] ^= 0x40;
    // Group 1's block.
    let cg1 = u.cgtod(1) as usize * u.fs_fsize as usize;
    bad[cg1..cg1 + 64].fill(0xee);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.img");
    std::fs::write(&path, &bad).unwrap();
    let p = path.to_str().unwrap();
    let out = |args: &[&str]| {
        let o = common::sufs(&[&["inspect", p][..], args].concat());
        assert_eq!(o.status.code(), Some(0), "inspect {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let root = out(&["dir", "/"]);
    assert!(root.contains("bad: lbn 0: bad pointer") && root.contains("problems found"), "{root}");
    let map = out(&["bmap", "4"]);
    assert!(map.contains("lbn 0: bad pointer") && map.contains("1 problems found"), "{map}");
    let ino = out(&["inode", "5"]);
    assert!(ino.contains("check hash bad") && ino.contains("problems found"), "{ino}");
    let place = out(&["block", &u.cgdmin(1).to_string()]);
    assert!(place.contains("bitmap: unreadable") && place.contains("problems found"), "{place}");
}
