//! Damaged UFS2 images through the file system: the FreeBSD fixture with bytes of its metadata
//! changed at random (inodes, directories, the group blocks, indirect blocks) is either refused
//! at mount with an error, or read whole with answers or errors, and written to (read-write: new
//! files, writes, truncates, removals, renames) with answers or errors: never a panic, never a
//! walk that does not end.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use proptest::prelude::*;
use sufs_fs::clock::SimClock;
use sufs_fs::dev::{BlockDevice, FileDevice};
use sufs_fs::format::ufs2::{Superblock, UFS2_DINODE_SIZE};
use sufs_fs::format::{DT_DIR, DT_LNK, DT_REG, ROOT_INO};
use sufs_fs::fs::{Fs, MountOptions};

/// Where the fixture's metadata is (byte ranges), found by decoding the clean image: with
/// `groups`, its group blocks (whose check hashes a mount verifies); else its inode blocks and
/// the root directory's first block (read as they are: the mount does not check inode hashes).
fn metadata_ranges(img: &[u8], groups: bool) -> Vec<(usize, usize)> {
    let (_, u) = Superblock::search(|off, buf| {
        let off = off as usize;
        buf.copy_from_slice(&img[off..off + buf.len()]);
        Ok(())
    })
    .unwrap();
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
