//! The file-system operations through the library, in both orderings, checked by reading back,
//! by remounting, and by fsck.

mod common;

use common::*;
use std::sync::Arc;
use sufs_fs::dev::{BlockDevice, MemDevice};
use sufs_fs::format::*;
use sufs_fs::fs::{FsError, Ordering, RenameFlags, SetAttr};

const ORDERINGS: [Ordering; 3] = [Ordering::Softdep, Ordering::Sync, Ordering::Async];

#[test]
fn tree_files_links_renames_survive_remount() {
    for ordering in ORDERINGS {
        let dev = new_image(16384);
        let mut fs = mount(&dev, ordering, 256);
        let (a, _) = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap();
        let (b, _) = fs.mkdir(a, b"b", 0o755, 0, 0).unwrap();
        let (f, _) = fs.create(b, b"f", 0o644, 0, 0).unwrap();
        fs.write(f, 0, b"hello world").unwrap();
        fs.link(f, a, b"hard").unwrap();
        fs.symlink(a, b"sym", b"b/f", 0, 0).unwrap();
        fs.rename(b, b"f", ROOT_INO, b"moved", RenameFlags::default()).unwrap();
        assert_eq!(fs.getattr(f).unwrap().nlink, 2);
        assert_eq!(fs.getattr(a).unwrap().nlink, 3);
        // Many entries: the directory grows past one block.
        for i in 0..300 {
            let (x, _) = fs.create(b, format!("file-with-a-longish-name-{i:04}").as_bytes(), 0o600, 0, 0).unwrap();
            fs.write(x, 0, &pattern(i, 100)).unwrap();
        }
        for i in (0..300).step_by(3) {
            fs.unlink(b, format!("file-with-a-longish-name-{i:04}").as_bytes()).unwrap();
        }
        fs.unmount().unwrap();
        drop(fs);
        assert_clean(&dev);

        let mut fs = mount(&dev, ordering, 256);
        assert_eq!(resolve(&mut fs, "a/b").unwrap(), b);
        let m = resolve(&mut fs, "moved").unwrap();
        assert_eq!(m, f);
        assert_eq!(fs.read(m, 0, 100).unwrap(), b"hello world");
        let hard = resolve(&mut fs, "a/hard").unwrap();
        assert_eq!(fs.read(hard, 0, 100).unwrap(), b"hello world");
        let s = resolve(&mut fs, "a/sym").unwrap();
        assert_eq!(fs.readlink(s).unwrap(), b"b/f");
        assert!(matches!(resolve(&mut fs, "a/b/f"), Err(FsError::NotFound)));
        let names: Vec<Vec<u8>> = {
            let mut all = Vec::new();
            let mut off = 0;
            loop {
                let part = fs.readdir(b, off, 37).unwrap();
                if part.is_empty() {
                    break;
                }
                off = part.last().unwrap().next;
                all.extend(part.into_iter().map(|e| e.name));
            }
            all
        };
        assert_eq!(names.len(), 2 + 200, "readdir in pieces sees every entry once");
        for i in 0..300u64 {
            let r = resolve(&mut fs, &format!("a/b/file-with-a-longish-name-{i:04}"));
            if i % 3 == 0 {
                assert!(r.is_err());
            } else {
                assert_eq!(fs.read(r.unwrap(), 0, 1000).unwrap(), pattern(i, 100));
            }
        }
        fs.unmount().unwrap();
        assert_clean(&dev);
    }
}

#[test]
fn large_files_with_holes_through_every_indirect_level() {
    for ordering in ORDERINGS {
        let dev = new_image(16384);
        let mut fs = mount(&dev, ordering, 512);
        let (f, _) = fs.create(ROOT_INO, b"sparse", 0o644, 0, 0).unwrap();
        let bs = 4096u64;
        let p = bs / 8;
        // Direct, single, double and triple indirect regions.
        let offsets =
            [0, 5 * bs + 100, 12 * bs, (12 + p) * bs - 7, (12 + p + p * p) * bs + 3, (12 + p + p * p + 77) * bs];
        for (i, &off) in offsets.iter().enumerate() {
            fs.write(f, off, &pattern(i as u64, 5000)).unwrap();
        }
        let size = fs.getattr(f).unwrap().size;
        assert_eq!(size, offsets[5] + 5000);
        fs.unmount().unwrap();
        assert_clean(&dev);
        let mut fs = mount(&dev, ordering, 64);
        for (i, &off) in offsets.iter().enumerate() {
            assert_eq!(fs.read(f, off, 5000).unwrap(), pattern(i as u64, 5000), "region {i}");
        }
        // A hole reads as zeros.
        assert!(fs.read(f, 40 * bs, 8192).unwrap().iter().all(|&b| b == 0));
        // Truncate into the double-indirect region, then extend: the tail reads zeros.
        let cut = (12 + p) * bs + 10;
        fs.setattr(f, &SetAttr { size: Some(cut), ..Default::default() }).unwrap();
        let blocks_after_cut = fs.getattr(f).unwrap().blocks;
        fs.setattr(f, &SetAttr { size: Some(cut + 3 * bs), ..Default::default() }).unwrap();
        assert!(fs.read(f, cut, 3 * bs as usize).unwrap().iter().all(|&b| b == 0));
        // The new size ends in a block, as FreeBSD's truncate up allocates it (`UFS_BALLOC` of
        // the last byte); the rest is a hole.
        assert_eq!(fs.getattr(f).unwrap().blocks, blocks_after_cut + 1);
        // Past the largest file: EFBIG.
        assert!(matches!(fs.write(f, 1 << 50, b"x"), Err(FsError::TooBig)));
        fs.setattr(f, &SetAttr { size: Some(0), ..Default::default() }).unwrap();
        assert_eq!(fs.getattr(f).unwrap().blocks, 0);
        fs.unmount().unwrap();
        assert_clean(&dev);
    }
}

#[test]
fn errors_come_back_as_errnos() {
    let dev = new_image(4096);
    let mut fs = mount(&dev, Ordering::Sync, 256);
    let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    let (f, _) = fs.create(d, b"f", 0o644, 0, 0).unwrap();
    let long = vec![b'n'; 256];
    assert!(matches!(fs.create(ROOT_INO, &long, 0o644, 0, 0), Err(FsError::NameTooLong)));
    assert!(matches!(fs.lookup(ROOT_INO, &long), Err(FsError::NameTooLong)));
    assert!(fs.create(ROOT_INO, &vec![b'n'; 255], 0o644, 0, 0).is_ok());
    assert!(matches!(fs.create(d, b"f", 0o644, 0, 0), Err(FsError::Exists)));
    assert!(matches!(fs.mkdir(d, b"f", 0o755, 0, 0), Err(FsError::Exists)));
    assert!(matches!(fs.rmdir(ROOT_INO, b"d"), Err(FsError::NotEmpty)));
    assert!(matches!(fs.unlink(ROOT_INO, b"d"), Err(FsError::IsDir)));
    assert!(matches!(fs.rmdir(d, b"f"), Err(FsError::NotDir)));
    assert!(matches!(fs.create(f, b"x", 0o644, 0, 0), Err(FsError::NotDir)));
    assert!(matches!(fs.read(d, 0, 10), Err(FsError::IsDir)));
    assert!(matches!(fs.link(d, ROOT_INO, b"dl"), Err(FsError::Perm)));
    // Rename: into itself, over a non-empty directory, dir over file and back, NOREPLACE.
    let (sub, _) = fs.mkdir(d, b"sub", 0o755, 0, 0).unwrap();
    assert!(matches!(fs.rename(ROOT_INO, b"d", sub, b"x", RenameFlags::default()), Err(FsError::Invalid(_))));
    let (e, _) = fs.mkdir(ROOT_INO, b"e", 0o755, 0, 0).unwrap();
    assert!(matches!(fs.rename(ROOT_INO, b"e", ROOT_INO, b"d", RenameFlags::default()), Err(FsError::NotEmpty)));
    assert!(matches!(fs.rename(ROOT_INO, b"e", d, b"f", RenameFlags::default()), Err(FsError::NotDir)));
    assert!(matches!(fs.rename(d, b"f", ROOT_INO, b"e", RenameFlags::default()), Err(FsError::IsDir)));
    let nr = RenameFlags { noreplace: true, exchange: false };
    assert!(matches!(fs.rename(d, b"sub", ROOT_INO, b"e", nr), Err(FsError::Exists)));
    // Empty directory replaced by a directory from another parent: counts follow.
    let root_links = fs.getattr(ROOT_INO).unwrap().nlink;
    fs.rename(d, b"sub", ROOT_INO, b"e", RenameFlags::default()).unwrap();
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, root_links);
    assert_eq!(fs.getattr(d).unwrap().nlink, 2);
    assert!(fs.getattr(e).is_err(), "the replaced directory is freed");
    assert_eq!(fs.lookup(sub, b"..").unwrap().0, ROOT_INO);
    // Exchange a file and a directory across parents.
    let ex = RenameFlags { noreplace: false, exchange: true };
    fs.rename(d, b"f", ROOT_INO, b"e", ex).unwrap();
    assert_eq!(fs.lookup(ROOT_INO, b"e").unwrap().0, f);
    assert_eq!(fs.lookup(d, b"f").unwrap().0, sub);
    assert_eq!(fs.lookup(sub, b"..").unwrap().0, d);
    assert_eq!(fs.getattr(d).unwrap().nlink, 3);
    fs.unmount().unwrap();
    assert_clean(&dev);
}

#[test]
fn full_disk_is_enospc_and_loses_nothing() {
    for ordering in ORDERINGS {
        let dev = new_image(2048);
        let mut fs = mount(&dev, ordering, 128);
        let (keep, _) = fs.create(ROOT_INO, b"keep", 0o644, 0, 0).unwrap();
        fs.write(keep, 0, &pattern(9, 10000)).unwrap();
        let (f, _) = fs.create(ROOT_INO, b"fill", 0o644, 0, 0).unwrap();
        let chunk = pattern(1, 1 << 16);
        let mut off = 0u64;
        let err = loop {
            match fs.write(f, off, &chunk) {
                Ok(n) => off += n as u64,
                Err(e) => break e,
            }
        };
        assert!(matches!(err, FsError::NoSpace), "{err}");
        assert_eq!(fs.statfs().bfree, 0);
        // Creating files still works until the directory needs a block; then ENOSPC, cleanly.
        let mut made = 0;
        loop {
            match fs.create(ROOT_INO, format!("n{made}").as_bytes(), 0o644, 0, 0) {
                Ok(_) => made += 1,
                Err(FsError::NoSpace) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(fs.read(keep, 0, 10000).unwrap(), pattern(9, 10000));
        fs.unlink(ROOT_INO, b"fill").unwrap();
        assert!(fs.statfs().bfree > 1000);
        fs.unmount().unwrap();
        assert_clean(&dev);
    }
}

#[test]
fn unlinked_open_file_lives_until_last_close() {
    for ordering in ORDERINGS {
        let dev = new_image(4096);
        let mut fs = mount(&dev, ordering, 128);
        let (f, _) = fs.create(ROOT_INO, b"tmp", 0o644, 0, 0).unwrap();
        fs.open(f, false).unwrap();
        fs.write(f, 0, b"still here").unwrap();
        let free = fs.statfs().bfree;
        fs.unlink(ROOT_INO, b"tmp").unwrap();
        assert_eq!(fs.read(f, 0, 100).unwrap(), b"still here");
        assert_eq!(fs.statfs().bfree, free);
        fs.release(f).unwrap();
        assert_eq!(fs.statfs().bfree, free + 1);
        fs.sync_all().unwrap();
        assert!(fs.getattr(f).is_err());
        assert_eq!(fs.statfs().bfree, free + 1);
        fs.unmount().unwrap();
        assert_clean(&dev);
    }
}

/// A nameless file (O_TMPFILE): linked once, it keeps its name and data across a remount; a
/// file whose last name went (and one linked, unlinked again) gets no name back (ENOENT, as
/// Linux); one never linked is freed at its last close or at unmount.
#[test]
fn tmpfile_is_nameless_until_linked_once() {
    for ordering in ORDERINGS {
        let dev = new_image(4096);
        let mut fs = mount(&dev, ordering, 128);
        let free = fs.statfs().bfree;
        let (t, d) = fs.tmpfile(ROOT_INO, 0o600, 0, 0, true).unwrap();
        assert_eq!(d.nlink, 0);
        fs.write(t, 0, b"made without a name").unwrap();
        assert!(fs.readdir(ROOT_INO, 0, usize::MAX).unwrap().iter().all(|e| e.ino != t));
        fs.link(t, ROOT_INO, b"named").unwrap();
        assert_eq!(fs.getattr(t).unwrap().nlink, 1);
        fs.unlink(ROOT_INO, b"named").unwrap();
        assert!(matches!(fs.link(t, ROOT_INO, b"again"), Err(FsError::NotFound)), "{ordering:?}: linkable once");
        fs.release(t).unwrap();
        fs.sync_all().unwrap();
        assert!(fs.getattr(t).is_err(), "{ordering:?}: freed at its close");

        let (u, _) = fs.create(ROOT_INO, b"u", 0o644, 0, 0).unwrap();
        fs.open(u, false).unwrap();
        fs.unlink(ROOT_INO, b"u").unwrap();
        fs.sync_all().unwrap();
        assert!(matches!(fs.link(u, ROOT_INO, b"u2"), Err(FsError::NotFound)), "{ordering:?}: unlinked, not linkable");
        fs.release(u).unwrap();

        let (e, _) = fs.tmpfile(ROOT_INO, 0o600, 0, 0, false).unwrap();
        assert!(matches!(fs.link(e, ROOT_INO, b"excl"), Err(FsError::NotFound)), "{ordering:?}: O_EXCL");
        let (k, _) = fs.tmpfile(ROOT_INO, 0o600, 0, 0, true).unwrap();
        fs.write(k, 0, b"kept").unwrap();
        fs.link(k, ROOT_INO, b"kept").unwrap();
        fs.release(k).unwrap();
        let (o, _) = fs.tmpfile(ROOT_INO, 0o600, 0, 0, true).unwrap();
        fs.write(o, 0, &[7u8; 20_000]).unwrap();
        fs.unmount().unwrap(); // `e` and `o` still open: freed here
        assert_clean(&dev);
        let mut fs = mount(&dev, ordering, 128);
        let k2 = common::resolve(&mut fs, "kept").unwrap();
        assert_eq!(k2, k);
        assert_eq!(fs.read(k, 0, 100).unwrap(), b"kept");
        assert_eq!(fs.statfs().bfree, free - 1, "{ordering:?}: only the kept file's block in use");
        fs.unmount().unwrap();
        assert_clean(&dev);
    }
}

#[test]
fn corrupt_images_are_refused_at_mount() {
    use std::sync::Arc;
    use sufs_fs::clock::SimClock;
    use sufs_fs::dev::{BlockDevice, MemDevice, WriteKind, WriteReq};
    use sufs_fs::fs::{Fs, MountOptions};
    let try_mount = |dev: &Arc<MemDevice>| {
        let d: Arc<dyn BlockDevice> = dev.clone();
        Fs::mount(d, MountOptions::default(), Arc::new(SimClock::new())).err().map(|e| e.to_string())
    };
    // A blank device: no superblock.
    let blank = Arc::new(MemDevice::new(4096, 1024));
    let why = try_mount(&blank).unwrap();
    assert!(why.contains("no UFS2 superblock"), "{why}");
    // sufs's earlier format, retired: said so.
    let old = Arc::new(MemDevice::new(4096, 1024));
    let mut b = vec![0u8; 4096];
    b[..8].copy_from_slice(b"1SFFSFUS");
    old.write_batch(&[WriteReq { bno: 0, data: &b }], WriteKind::Sync).unwrap();
    let why = try_mount(&old).unwrap();
    assert!(why.contains("sufs's earlier format") && why.contains("no longer reads"), "{why}");
    // A damaged superblock field: its check hash.
    let dev = new_image(4096);
    let sb_block = 65536 / 4096;
    dev.read_block(sb_block, &mut b).unwrap();
    b[48] ^= 0x10;
    dev.write_batch(&[WriteReq { bno: sb_block, data: &b }], WriteKind::Sync).unwrap();
    let why = try_mount(&dev).unwrap();
    assert!(why.contains("check-hash mismatch"), "{why}");
    // A damaged group.
    let dev = new_image(4096);
    let sb = Superblock::probe(|off, buf| sufs_fs::dev::read_bytes(&*dev, off, buf)).unwrap();
    dev.read_block(sb.cg_header_block(0), &mut b).unwrap();
    b[200] ^= 1;
    dev.write_batch(&[WriteReq { bno: sb.cg_header_block(0), data: &b }], WriteKind::Sync).unwrap();
    let why = try_mount(&dev).unwrap();
    assert!(why.contains("cylinder group 0"), "{why}");
    // A file system larger than its device.
    let dev = new_image(4096);
    let small = Arc::new(MemDevice::from_blocks(4096, dev.blocks()[..2048].to_vec()));
    let why = try_mount(&small).unwrap();
    assert!(why.contains("device only"), "{why}");
}

#[test]
fn cached_reads_touch_no_device() {
    let dev = new_image(8192);
    let mut fs = mount(&dev, Ordering::Async, 4096);
    let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(f, 0, &pattern(3, 1 << 20)).unwrap();
    let _ = fs.read(f, 0, 1 << 20).unwrap();
    let before = fs.stats().device.reads;
    for _ in 0..5 {
        assert_eq!(fs.read(f, 0, 1 << 20).unwrap(), pattern(3, 1 << 20));
    }
    assert_eq!(fs.stats().device.reads, before);
}

#[test]
fn large_directories_stay_consistent_under_the_name_index() {
    for ordering in ORDERINGS {
        let dev = new_image(16384);
        let mut fs = mount(&dev, ordering, 256);
        let (d, _) = fs.mkdir(ROOT_INO, b"big", 0o755, 0, 0).unwrap();
        let (e, _) = fs.mkdir(ROOT_INO, b"other", 0o755, 0, 0).unwrap();
        let mut live = std::collections::BTreeMap::new();
        for i in 0..3000u32 {
            let (ino, _) = fs.create(d, format!("n{i}").as_bytes(), 0o644, 0, 0).unwrap();
            live.insert(format!("n{i}"), ino);
        }
        // Remove a third, rename a third within the directory (some over existing names) and a
        // few out of it and back in, then fill the holes with new names.
        for i in (0..3000u32).step_by(3) {
            fs.unlink(d, format!("n{i}").as_bytes()).unwrap();
            live.remove(&format!("n{i}"));
        }
        for i in (1..3000u32).step_by(3) {
            let to = if i % 2 == 0 { format!("r{i}") } else { format!("n{}", i + 1) };
            fs.rename(d, format!("n{i}").as_bytes(), d, to.as_bytes(), RenameFlags::default()).unwrap();
            let ino = live.remove(&format!("n{i}")).unwrap();
            live.insert(to, ino);
        }
        for i in (2..300u32).step_by(30) {
            let name = format!("n{i}");
            if let Some(ino) = live.remove(&name) {
                fs.rename(d, name.as_bytes(), e, b"tmp", RenameFlags::default()).unwrap();
                fs.rename(e, b"tmp", d, format!("back{i}").as_bytes(), RenameFlags::default()).unwrap();
                live.insert(format!("back{i}"), ino);
            }
        }
        for i in 0..500u32 {
            let (ino, _) = fs.create(d, format!("late-{i}").as_bytes(), 0o644, 0, 0).unwrap();
            live.insert(format!("late-{i}"), ino);
        }
        let check = |fs: &mut sufs_fs::fs::Fs| {
            let mut seen = std::collections::BTreeMap::new();
            for x in fs.readdir(d, 0, usize::MAX).unwrap() {
                if x.name != b"." && x.name != b".." {
                    seen.insert(String::from_utf8(x.name).unwrap(), x.ino);
                }
            }
            assert_eq!(seen, live);
            for (name, ino) in &live {
                assert_eq!(fs.lookup(d, name.as_bytes()).unwrap().0, *ino, "{name}");
            }
            assert!(matches!(fs.lookup(d, b"n0"), Err(FsError::NotFound)));
        };
        check(&mut fs);
        fs.unmount().unwrap();
        assert_clean(&dev);
        let mut fs = mount(&dev, ordering, 256);
        check(&mut fs);
        fs.unmount().unwrap();
    }
}

#[test]
fn softdep_fsync_writes_the_file_not_the_whole_cache() {
    let dev = new_image(16384);
    let mut fs = mount(&dev, Ordering::Softdep, 8192);
    let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    let (other, _) = fs.create(ROOT_INO, b"other", 0o644, 0, 0).unwrap();
    fs.write(other, 0, &pattern(1, 4 << 20)).unwrap(); // 1024 dirty blocks, unrelated
    let (f, _) = fs.create(d, b"f", 0o644, 0, 0).unwrap();
    fs.write(f, 0, &pattern(2, 20_000)).unwrap();
    let before = fs.stats().device.writes();
    fs.fsync(f).unwrap();
    let written = fs.stats().device.writes() - before;
    assert!(written > 5, "the file, its inode and its names were written ({written})");
    assert!(written < 200, "fsync of a small file wrote {written} blocks: the unrelated file went too");
    // What fsync promised is on disk: a crash now (drop without unmount) keeps the file.
    drop(fs);
    let mut fs = mount(&dev, Ordering::Softdep, 256);
    let f2 = resolve(&mut fs, "d/f").unwrap();
    assert_eq!(f2, f);
    assert_eq!(fs.read(f2, 0, 30_000).unwrap(), pattern(2, 20_000));
    fs.unmount().unwrap();
}

#[test]
fn softdep_fsync_of_a_clean_file_writes_nothing() {
    let dev = new_image(4096);
    let mut fs = mount(&dev, Ordering::Softdep, 512);
    let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(f, 0, b"data").unwrap();
    fs.fsync(f).unwrap();
    let before = fs.stats().device.writes();
    fs.fsync(f).unwrap();
    assert_eq!(fs.stats().device.writes(), before);
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// A file made and removed before its name reached the disk: the removal is complete at once
/// (its link drops and its blocks go without waiting for the directory's write), so none of
/// its 64 data blocks is ever written. A file whose name is on disk still waits for it.
#[test]
fn softdep_a_file_removed_before_its_name_reached_disk_is_never_written() {
    let dev = new_image(4096);
    let mut fs = mount(&dev, Ordering::Softdep, 512);
    let (kept, _) = fs.create(ROOT_INO, b"kept", 0o644, 0, 0).unwrap();
    fs.fsync(kept).unwrap();
    let before = fs.stats().device.writes();
    let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(f, 0, &pattern(1, 64 * 4096)).unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    assert!(matches!(fs.getattr(f), Err(FsError::Stale(_))), "the inode is freed at once");
    fs.unlink(ROOT_INO, b"kept").unwrap();
    assert_eq!(fs.getattr(kept).unwrap().nlink, 0, "users see the link gone (effnlink)");
    fs.unmount().unwrap();
    let writes = fs.stats().device.writes() - before;
    assert!(writes < 16, "{writes} blocks written");
    assert_clean(&dev);
}

/// Soft updates: one sweep of every delayed write puts new files with data wholly on disk. The
/// data and bitmaps go before the inode blocks that point to them, and those before the
/// directory block that names them, so nothing is rolled back; a second sweep finds nothing
/// left. (In block-number order the inode blocks went first, rolled back, and again.)
#[test]
fn softdep_one_sweep_writes_new_files_without_rollbacks() {
    let dev = new_image(8192);
    let mut fs = mount(&dev, Ordering::Softdep, 1024);
    for i in 0..40 {
        let (f, _) = fs.create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
        fs.write(f, 0, &pattern(i, 3 * 4096)).unwrap();
    }
    let first = fs.flush_all().unwrap();
    assert!(first > 120, "{first} blocks in the first sweep");
    assert_eq!(fs.flush_all().unwrap(), 0, "the second sweep found blocks still dirty");
    let crashed = Arc::new(MemDevice::from_blocks(4096, dev.blocks()));
    let mut after = mount(&crashed, Ordering::Softdep, 256);
    for i in 0..40 {
        let f = resolve(&mut after, &format!("f{i}")).unwrap();
        assert_eq!(after.read(f, 0, 3 * 4096).unwrap(), pattern(i, 3 * 4096));
    }
    drop(after);
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// POSIX: unlink and a rename over a name update the remaining inode's ctime at once, even
/// when soft updates drop the link later (pjdfstest's unlink/update_ctime_success and
/// rename/to_multiply_linked found that they did not).
#[test]
fn unlink_and_replacing_rename_change_ctime_at_once() {
    use std::sync::Arc;
    use sufs_fs::clock::SimClock;
    use sufs_fs::dev::BlockDevice;
    use sufs_fs::fs::{Fs, MountOptions};
    for ordering in ORDERINGS {
        let dev = new_image(4096);
        let clock = Arc::new(SimClock::new());
        let d: Arc<dyn BlockDevice> = dev.clone();
        let mut fs =
            Fs::mount(d, MountOptions { ordering, cache_blocks: 256, readonly: false }, clock.clone()).unwrap();
        let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        fs.link(f, ROOT_INO, b"f2").unwrap();
        let (g, _) = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap();
        fs.link(g, ROOT_INO, b"g2").unwrap();
        let before = fs.getattr(f).unwrap();
        clock.advance(2_000_000_000);
        fs.unlink(ROOT_INO, b"f2").unwrap();
        let after = fs.getattr(f).unwrap();
        assert_eq!(after.nlink, 1, "{ordering:?}");
        assert!(after.ctime > before.ctime, "{ordering:?}: unlink left ctime at {}", after.ctime);
        let before = fs.getattr(g).unwrap();
        clock.advance(2_000_000_000);
        fs.rename(ROOT_INO, b"f", ROOT_INO, b"g2", RenameFlags::default()).unwrap();
        let after = fs.getattr(g).unwrap();
        assert_eq!(after.nlink, 1, "{ordering:?}");
        assert!(after.ctime > before.ctime, "{ordering:?}: the replaced inode kept ctime {}", after.ctime);
        fs.unmount().unwrap();
        drop(fs);
        assert_clean(&dev);
    }
}

/// A removed tree drains one directory level per round of writes; sync_all (which an rmdir or a
/// rename may need) must go on while rounds make progress. It gave up after 64 rounds with EIO
/// once stress-ng's dirdeep had removed a deeper tree.
#[test]
fn sync_all_drains_a_removed_deep_tree() {
    for ordering in ORDERINGS {
        let dev = new_image(8192);
        let mut fs = mount(&dev, ordering, 1024);
        let mut chain = vec![ROOT_INO];
        for _ in 0..200 {
            let (d, _) = fs.mkdir(*chain.last().unwrap(), b"d", 0o755, 0, 0).unwrap();
            chain.push(d);
        }
        for w in chain.windows(2).rev() {
            fs.rmdir(w[0], b"d").unwrap();
        }
        // An rmdir of a directory with a renamed (hidden) old name settles it with sync_all.
        let (p, _) = fs.mkdir(ROOT_INO, b"p", 0o755, 0, 0).unwrap();
        fs.create(p, b"a", 0o644, 0, 0).unwrap();
        fs.rename(p, b"a", p, b"b", RenameFlags::default()).unwrap();
        fs.unlink(p, b"b").unwrap();
        fs.rmdir(ROOT_INO, b"p").unwrap_or_else(|e| panic!("{ordering:?}: rmdir: {e}"));
        fs.sync_all().unwrap();
        fs.unmount().unwrap();
        drop(fs);
        assert_clean(&dev);
    }
}

/// Soft updates: moving files out of a directory into one whose own name is not on disk yet, then
/// removing the emptied directory, writes nothing at once: the old names, and the removed
/// directory's name, wait on disk until the new names are reachable.
#[test]
fn softdep_rmdir_after_moving_files_out_writes_nothing_at_once() {
    let dev = new_image(8192);
    let mut fs = mount(&dev, Ordering::Softdep, 1024);
    let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    let (v, _) = fs.mkdir(ROOT_INO, b"v", 0o755, 0, 0).unwrap();
    let (f, _) = fs.create(d, b"f", 0o644, 0, 0).unwrap();
    let (g, _) = fs.create(v, b"g", 0o644, 0, 0).unwrap();
    fs.write(f, 0, b"eff").unwrap();
    fs.sync_all().unwrap();
    let writes_before = fs.stats().device.writes();
    let (n, _) = fs.mkdir(ROOT_INO, b"n", 0o755, 0, 0).unwrap();
    fs.rename(d, b"f", n, b"f", RenameFlags::default()).unwrap();
    fs.rmdir(ROOT_INO, b"d").unwrap();
    fs.rename(v, b"g", n, b"g", RenameFlags::default()).unwrap();
    let (w, _) = fs.mkdir(ROOT_INO, b"w", 0o755, 0, 0).unwrap();
    assert_eq!(fs.stats().device.writes(), writes_before, "nothing was written out to make room for the order");
    // Replacing v, which still holds g's old name: v's name stays on disk, hidden, and the new
    // "v" may not land behind it, so that one is written out first.
    fs.rename(ROOT_INO, b"w", ROOT_INO, b"v", RenameFlags::default()).unwrap();
    assert!(matches!(fs.lookup(ROOT_INO, b"d"), Err(FsError::NotFound)));
    assert!(matches!(fs.lookup(ROOT_INO, b"w"), Err(FsError::NotFound)));
    assert_eq!(fs.lookup(ROOT_INO, b"v").unwrap().0, w);
    assert_eq!(resolve(&mut fs, "n/f").unwrap(), f);
    assert_eq!(resolve(&mut fs, "n/g").unwrap(), g);
    let names: Vec<Vec<u8>> = fs.readdir(ROOT_INO, 0, 100).unwrap().into_iter().map(|e| e.name).collect();
    assert!(!names.contains(&b"d".to_vec()) && names.contains(&b"v".to_vec()));
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 5, "root: ., .., lost+found, n, v");
    fs.unmount().unwrap();
    assert_clean(&dev);
    let mut fs = mount(&dev, Ordering::Softdep, 256);
    let f2 = resolve(&mut fs, "n/f").unwrap();
    assert_eq!(fs.read(f2, 0, 10).unwrap(), b"eff");
    assert_eq!(fs.lookup(ROOT_INO, b"v").unwrap().0, w);
    fs.unmount().unwrap();
}

/// Soft updates: a directory whose subdirectory was just removed (its ".." link drop still on
/// its way to disk) is renamed without writing anything first.
#[test]
fn softdep_rename_after_rmdir_of_a_subdirectory_writes_nothing_at_once() {
    let dev = new_image(8192);
    let mut fs = mount(&dev, Ordering::Softdep, 1024);
    let (x, _) = fs.mkdir(ROOT_INO, b"x", 0o755, 0, 0).unwrap();
    fs.mkdir(x, b"sub", 0o755, 0, 0).unwrap();
    let (other, _) = fs.mkdir(ROOT_INO, b"other", 0o755, 0, 0).unwrap();
    fs.sync_all().unwrap();
    let before = fs.stats().device.writes();
    fs.rmdir(x, b"sub").unwrap();
    fs.rename(ROOT_INO, b"x", other, b"y", RenameFlags::default()).unwrap();
    assert_eq!(fs.stats().device.writes(), before, "nothing was written out first");
    assert_eq!(resolve(&mut fs, "other/y").unwrap(), x);
    assert_eq!(fs.getattr(x).unwrap().nlink, 2);
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// Soft updates' memory bound: past `--softdep-limit` structures, everything is written before
/// new ones are made, so removing a large tree never holds more than about the limit.
#[test]
fn softdep_memory_bound_holds_the_dependency_count() {
    let run = |limit: Option<usize>| {
        let dev = new_image(16384);
        let mut fs = mount(&dev, Ordering::Softdep, 8192);
        if let Some(l) = limit {
            fs.set_softdep_limit(l);
        }
        let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        for i in 0..4000 {
            fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
        }
        for i in 0..4000 {
            fs.unlink(d, format!("f{i}").as_bytes()).unwrap();
        }
        let max = fs.softdep_stats().unwrap().max_deps;
        fs.unmount().unwrap();
        assert_clean(&dev);
        max
    };
    let unbounded = run(None);
    let bounded = run(Some(1500));
    assert!(unbounded > 8000, "without a tight bound the structures pile up ({unbounded})");
    assert!(bounded <= 1500 + 64 * 8, "the bound held: at most {bounded} structures");
}

/// Soft updates: renames over an existing name, over and over in one directory (a lock file
/// made and renamed over the real one, as mail delivery and editors' saves do). Each new entry
/// waits on disk for the hidden namesakes there when it was made; that wait must cost a few
/// records and tasks per rename, not one per (new entry, hidden name) pair, and those records
/// count against the memory bound.
#[test]
fn softdep_renames_over_one_name_cost_linear_work() {
    const N: u64 = 3000;
    let dev = new_image(16384);
    let mut fs = mount(&dev, Ordering::Softdep, 1024);
    let limit = 2000;
    fs.set_softdep_limit(limit);
    let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    fs.create(d, b"mtab", 0o644, 0, 0).unwrap();
    let mut last = 0;
    for i in 0..N {
        let (f, _) = fs.create(d, b"mtab.tmp", 0o644, 0, 0).unwrap();
        fs.write(f, 0, &i.to_le_bytes()).unwrap();
        fs.rename(d, b"mtab.tmp", d, b"mtab", RenameFlags::default()).unwrap();
        last = f;
    }
    fs.sync_all().unwrap();
    let stats = fs.softdep_stats().unwrap();
    assert!(stats.tasks_run < 20 * N, "{} tasks for {N} renames over one name", stats.tasks_run);
    assert!(stats.max_deps <= limit + 64 * 8, "the bound held: at most {} structures", stats.max_deps);
    assert_eq!(fs.lookup(d, b"mtab").unwrap().0, last);
    assert!(matches!(fs.lookup(d, b"mtab.tmp"), Err(FsError::NotFound)));
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// A directory's name index built while one of its names is hidden (a rename's old name still on
/// disk) and the same name is live again (the file moved back): the live one must be found.
#[test]
fn softdep_name_index_built_beside_a_hidden_name_finds_the_live_one() {
    let dev = new_image(8192);
    let mut fs = mount(&dev, Ordering::Softdep, 1024);
    let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    let (e, _) = fs.mkdir(ROOT_INO, b"e", 0o755, 0, 0).unwrap();
    let name = |i: usize| format!("{i:02}-{}", "x".repeat(37)).into_bytes();
    for i in 0..60 {
        fs.create(d, &name(i), 0o644, 0, 0).unwrap();
    }
    fs.sync_all().unwrap();
    let (f, _) = fs.lookup(d, &name(59)).unwrap();
    // Room early in the block; the file leaves (its old name stays on disk, hidden) and comes
    // back into that room, ahead of its hidden old name.
    fs.unlink(d, &name(0)).unwrap();
    fs.rename(d, &name(59), e, &name(59), RenameFlags::default()).unwrap();
    fs.rename(e, &name(59), d, &name(59), RenameFlags::default()).unwrap();
    // The directory grows past one block: its name index is built now.
    let mut i = 100;
    while fs.getattr(d).unwrap().size <= 4096 {
        fs.create(d, &name(i), 0o644, 0, 0).unwrap();
        i += 1;
    }
    assert_eq!(fs.lookup(d, &name(59)).unwrap().0, f);
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// Soft updates: a rename's old name stays on disk, hidden, until the new one is reachable. A new
/// file given that name at once must not land behind it in the directory, where a lookup after a
/// crash would find the old entry: its fsync'ed name would be lost.
#[test]
fn softdep_a_new_name_is_not_hidden_behind_its_renamed_namesake() {
    let dev = new_image(8192);
    let mut fs = mount(&dev, Ordering::Softdep, 1024);
    let (a, _) = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap();
    let (old, _) = fs.create(a, b"x", 0o644, 0, 0).unwrap();
    fs.write(old, 0, b"old").unwrap();
    fs.sync_all().unwrap();
    let (n, _) = fs.mkdir(ROOT_INO, b"n", 0o755, 0, 0).unwrap();
    fs.rename(a, b"x", n, b"x", RenameFlags::default()).unwrap();
    let before = fs.stats().device.writes();
    let (new, _) = fs.create(a, b"x", 0o644, 0, 0).unwrap();
    fs.write(new, 0, b"new").unwrap();
    // The new entry waits on disk for its namesake's removal: nothing is written at once, and
    // after each round of the syncer's writes a crash finds a/x naming the old file or the new,
    // or no a/x between the write of the removal and that of the new entry (both in a's block),
    // when the old file is at n/x.
    assert_eq!(fs.stats().device.writes(), before, "nothing was written out first");
    for _ in 0..3 {
        fs.flush_all().unwrap();
        let crashed = Arc::new(MemDevice::from_blocks(4096, dev.blocks()));
        let mut after = mount(&crashed, Ordering::Softdep, 256);
        match resolve(&mut after, "a/x") {
            Ok(x) => assert!(x == old || x == new, "a/x names inode {x}"),
            Err(FsError::NotFound) => assert_eq!(resolve(&mut after, "n/x").unwrap(), old),
            Err(e) => panic!("a/x: {e}"),
        }
        drop(after);
        assert_eq!(sufs_fs::fsck::check(&*crashed).unwrap().violations(), 0);
    }
    // Again in a fresh directory (the new entry lands after the hidden one), with an fsync of
    // the new file at once: it must find its name after a crash.
    let (b, _) = fs.mkdir(ROOT_INO, b"b", 0o755, 0, 0).unwrap();
    fs.create(b, b"x", 0o644, 0, 0).unwrap();
    fs.sync_all().unwrap();
    let (n2, _) = fs.mkdir(ROOT_INO, b"n2", 0o755, 0, 0).unwrap();
    fs.rename(b, b"x", n2, b"x", RenameFlags::default()).unwrap();
    let (newer, _) = fs.create(b, b"x", 0o644, 0, 0).unwrap();
    fs.write(newer, 0, b"newer").unwrap();
    fs.fsync(newer).unwrap();
    let crashed = Arc::new(MemDevice::from_blocks(4096, dev.blocks()));
    let mut after = mount(&crashed, Ordering::Softdep, 256);
    let x = resolve(&mut after, "b/x").unwrap();
    assert_eq!(after.read(x, 0, 10).unwrap(), b"newer", "b/x names inode {x}; the fsync'ed file is {newer}");
    drop(after);
    let report = sufs_fs::fsck::check(&*crashed).unwrap();
    assert!(report.findings.iter().all(|f| f.class() == sufs_fs::fsck::Class::Allowed), "{report:?}");
    fs.unmount().unwrap();
    assert_clean(&dev);
}

/// Soft updates: a directory renamed again, and again, while its earlier renames' old names are
/// still on disk writes nothing at once (for a while it may have three names on disk, each
/// counted by its link count), and ends with one name and the right counts.
#[test]
fn softdep_directory_renamed_again_at_once_writes_nothing() {
    let dev = new_image(8192);
    let mut fs = mount(&dev, Ordering::Softdep, 1024);
    let (a, _) = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap();
    let (x, _) = fs.mkdir(a, b"x", 0o755, 0, 0).unwrap();
    let (f, _) = fs.create(x, b"f", 0o644, 0, 0).unwrap();
    fs.write(f, 0, b"eff").unwrap();
    let (b, _) = fs.mkdir(ROOT_INO, b"b", 0o755, 0, 0).unwrap();
    let (c, _) = fs.mkdir(ROOT_INO, b"c", 0o755, 0, 0).unwrap();
    fs.sync_all().unwrap();
    let before = fs.stats().device.writes();
    // Into a directory not on disk yet: the old name a/x stays until n is reachable.
    let (n, _) = fs.mkdir(ROOT_INO, b"n", 0o755, 0, 0).unwrap();
    fs.rename(a, b"x", n, b"x", RenameFlags::default()).unwrap();
    fs.rename(n, b"x", c, b"y", RenameFlags::default()).unwrap();
    fs.rename(c, b"y", b, b"z", RenameFlags::default()).unwrap();
    assert_eq!(fs.stats().device.writes(), before, "nothing was written out first");
    assert_eq!(resolve(&mut fs, "b/z").unwrap(), x);
    assert_eq!(resolve(&mut fs, "b/z/f").unwrap(), f);
    assert_eq!(fs.getattr(x).unwrap().nlink, 2);
    assert_eq!(fs.getattr(a).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b).unwrap().nlink, 3);
    fs.unmount().unwrap();
    assert_clean(&dev);
    let mut fs = mount(&dev, Ordering::Softdep, 256);
    let f2 = resolve(&mut fs, "b/z/f").unwrap();
    assert_eq!(fs.read(f2, 0, 10).unwrap(), b"eff");
    assert!(matches!(resolve(&mut fs, "a/x"), Err(FsError::NotFound)));
    fs.unmount().unwrap();
}

/// Soft updates: RENAME_EXCHANGE of a file whose new name waits for its hidden namesake with a
/// directory: the directory must not come to wait in its place; the hidden name goes first.
#[test]
fn softdep_exchange_with_a_name_waiting_for_its_namesake() {
    let dev = new_image(8192);
    let mut fs = mount(&dev, Ordering::Softdep, 1024);
    let (a, _) = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap();
    let (old, _) = fs.create(a, b"x", 0o644, 0, 0).unwrap();
    fs.sync_all().unwrap();
    let (n, _) = fs.mkdir(ROOT_INO, b"n", 0o755, 0, 0).unwrap();
    fs.rename(a, b"x", n, b"x", RenameFlags::default()).unwrap();
    let (new, _) = fs.create(a, b"x", 0o644, 0, 0).unwrap();
    let (d, _) = fs.mkdir(a, b"d", 0o755, 0, 0).unwrap();
    let ex = RenameFlags { noreplace: false, exchange: true };
    fs.rename(a, b"x", a, b"d", ex).unwrap();
    assert_eq!(fs.lookup(a, b"x").unwrap().0, d);
    assert_eq!(fs.lookup(a, b"d").unwrap().0, new);
    fs.mkdir(d, b"under", 0o755, 0, 0).unwrap();
    fs.rename(ROOT_INO, b"n", d, b"n", RenameFlags::default()).unwrap();
    fs.unmount().unwrap();
    assert_clean(&dev);
    let mut fs = mount(&dev, Ordering::Softdep, 256);
    assert_eq!(resolve(&mut fs, "a/x/n/x").unwrap(), old);
    assert_eq!(resolve(&mut fs, "a/d").unwrap(), new);
    fs.unmount().unwrap();
}

/// A read takes the uncached blocks that follow each other on disk in one device request; what
/// it returns is the same wherever each block is: in the cache (dirty or clean), in a hole, or
/// on an image file. Such runs stream past the cache; a read of one block is cached.
#[test]
fn reads_of_runs_holes_and_cached_blocks_return_the_file() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use sufs_fs::dev::{BlockDevice, DevResult, DevStats, FileDevice, WriteKind, WriteReq};
    /// An image file that counts read requests.
    struct Counted(FileDevice, AtomicU64);
    impl BlockDevice for Counted {
        fn block_size(&self) -> usize {
            self.0.block_size()
        }
        fn num_blocks(&self) -> u64 {
            self.0.num_blocks()
        }
        fn read_block(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
            self.1.fetch_add(1, Relaxed);
            self.0.read_block(bno, buf)
        }
        fn read_run(&self, bno: u64, buf: &mut [u8]) -> DevResult<()> {
            self.1.fetch_add(1, Relaxed);
            self.0.read_run(bno, buf)
        }
        fn write_batch(&self, reqs: &[WriteReq], kind: WriteKind) -> DevResult<()> {
            self.0.write_batch(reqs, kind)
        }
        fn stats(&self) -> DevStats {
            self.0.stats()
        }
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("img");
    FileDevice::create(&img, 64 << 20).unwrap();
    let counted = Arc::new(Counted(FileDevice::open(&img, 4096, true).unwrap(), AtomicU64::new(0)));
    let dev: Arc<dyn BlockDevice> = counted.clone();
    sufs_fs::fs::mkfs(dev.clone(), &sufs_fs::fs::MkfsOptions::default(), (1_700_000_000, 0)).unwrap();
    let opts = |cache_blocks| sufs_fs::fs::MountOptions { ordering: Ordering::Softdep, cache_blocks, readonly: false };
    let clock = || Arc::new(sufs_fs::clock::SimClock::new());
    // The file: 3 MiB of data, a 1 MiB hole, 1 MiB of data; the model beside it.
    let mut model = pattern(7, 5 << 20);
    model[3 << 20..4 << 20].fill(0);
    let mut fs = sufs_fs::fs::Fs::mount(dev.clone(), opts(4096), clock()).unwrap();
    let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(f, 0, &model[..3 << 20]).unwrap();
    fs.write(f, 4 << 20, &model[4 << 20..]).unwrap();
    fs.unmount().unwrap();
    drop(fs);

    let mut fs = sufs_fs::fs::Fs::mount(dev.clone(), opts(1024), clock()).unwrap();
    // Some blocks in the cache before the reads: dirty ones in the middle of runs, a clean one.
    for (off, seed) in [(100 * 4096 + 5, 1u64), (300 * 4096, 2), (1030 * 4096 - 3, 3)] {
        let p = pattern(seed, 10);
        fs.write(f, off as u64, &p).unwrap();
        model[off..off + 10].copy_from_slice(&p);
    }
    assert_eq!(fs.read(f, 200 * 4096, 1).unwrap(), &model[200 * 4096..200 * 4096 + 1]);
    let (before, requests_before) = (fs.stats().device.reads, counted.1.load(Relaxed));
    let mut off = 17usize;
    while off < model.len() {
        let len = (1 << 20).min(model.len() + 4096 - off);
        let got = fs.read(f, off as u64, len).unwrap();
        let end = (off + len).min(model.len());
        assert_eq!(got.len(), end - off, "read of {len} at {off}");
        assert!(got == model[off..end], "read of {len} at {off} differs");
        off += len;
    }
    // Every data block but the 4 cached ones came from the device, once (the hole from none),
    // plus the indirect blocks.
    let reads = fs.stats().device.reads - before;
    let data_blocks = (4 << 20) / 4096 - 4;
    assert!(reads >= data_blocks && reads < data_blocks + 8, "{reads} device reads");
    // In few requests: the data is in runs of up to 256 blocks, split at the cached blocks and
    // at each indirect block between the data.
    let requests = counted.1.load(Relaxed) - requests_before;
    assert!(requests <= 20, "{requests} device requests for {reads} blocks");
    // Read again: the runs from the device again (all but block 300, dirty in the cache), the
    // one block read alone from the cache.
    let before = fs.stats().device.reads;
    assert!(fs.read(f, 1 << 20, 1 << 20).unwrap() == model[1 << 20..2 << 20]);
    assert_eq!(fs.stats().device.reads - before, 255);
    assert_eq!(fs.read(f, 200 * 4096, 1).unwrap(), &model[200 * 4096..200 * 4096 + 1]);
    assert_eq!(fs.stats().device.reads - before, 255);
    fs.unmount().unwrap();
}

/// Soft updates: a second link removed before it reached the disk drops at once, and users see
/// the count it leaves, also beside a rename's queued drop (the proptest model found it showing
/// 2 for a file with one name: the immediate drop took a pending-unlink note it never made).
#[test]
fn softdep_unwritten_link_removed_beside_a_renames_queued_drop() {
    let dev = new_image(4096);
    let mut fs = mount(&dev, Ordering::Softdep, 256);
    let (f, _) = fs.create(ROOT_INO, b"f0", 0o644, 0, 0).unwrap();
    fs.rename(ROOT_INO, b"f0", ROOT_INO, b"d0", RenameFlags::default()).unwrap();
    assert_eq!(fs.getattr(f).unwrap().nlink, 1);
    fs.link(f, ROOT_INO, b"f1").unwrap();
    assert_eq!(fs.getattr(f).unwrap().nlink, 2);
    fs.unlink(ROOT_INO, b"f1").unwrap();
    assert_eq!(fs.getattr(f).unwrap().nlink, 1);
    fs.unmount().unwrap();
    assert_clean(&dev);
    let mut fs = mount(&dev, Ordering::Softdep, 256);
    assert_eq!(fs.getattr(f).unwrap().nlink, 1);
}

/// Soft updates hold the blocks and inodes of removed files until the writes that free them
/// are done; a create or write that finds the disk full meanwhile waits for those frees
/// instead of failing: right after `rm -rf` of a full file system, the same files fit again.
#[test]
fn a_full_disk_emptied_takes_its_files_again_at_once() {
    for ordering in ORDERINGS {
        let dev = new_image(2048);
        let mut fs = mount(&dev, ordering, 64);
        let fill = |fs: &mut sufs_fs::fs::Fs, round: u64| -> (u64, u64) {
            let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
            let mut files = 0;
            // Inodes run out first (empty files), then blocks (one large file).
            loop {
                match fs.create(d, format!("f{files}").as_bytes(), 0o644, 0, 0) {
                    Ok(_) => files += 1,
                    Err(FsError::NoSpace) => break,
                    Err(e) => panic!("{ordering} round {round}: create {files}: {e}"),
                }
            }
            fs.unlink(d, b"f0").unwrap();
            let (big, _) = fs.create(d, b"big", 0o644, 0, 0).unwrap();
            let mut written = 0u64;
            loop {
                match fs.write(big, written, &[7u8; 65536]) {
                    Ok(n) => written += n as u64,
                    Err(FsError::NoSpace) => break,
                    Err(e) => panic!("{ordering} round {round}: write at {written}: {e}"),
                }
            }
            (files, written)
        };
        let empty = |fs: &mut sufs_fs::fs::Fs, files: u64| {
            let d = resolve(fs, "d").unwrap();
            for i in 1..files {
                fs.unlink(d, format!("f{i}").as_bytes()).unwrap();
            }
            fs.unlink(d, b"big").unwrap();
            fs.rmdir(ROOT_INO, b"d").unwrap();
        };
        let (files, written) = fill(&mut fs, 0);
        assert!(files > 100 && written > 4 << 20, "{ordering}: {files} files, {written} bytes");
        empty(&mut fs, files);
        let (files2, written2) = fill(&mut fs, 1);
        assert_eq!(files2, files, "{ordering}: the same number of files fits again");
        assert!(written2 + 65536 >= written, "{ordering}: {written2} bytes after {written}");
        empty(&mut fs, files2);
        fs.unmount().unwrap();
        drop(fs);
        assert_clean(&dev);
    }
}

/// fstests' readdir-while-renames (generic/736): every entry seen by a reader of a large
/// directory is renamed to a temporary name and back. The reader must end, seeing each entry
/// about once (the renamed entry goes back where it was), and soft updates must cost no more
/// device writes than synchronous writes for it, unmount included.
#[test]
fn readdir_while_renaming_ends_and_softdep_writes_no_more_than_sync() {
    const N: usize = 2000;
    let mut writes = Vec::new();
    for ordering in [Ordering::Softdep, Ordering::Sync] {
        let dev = new_image(16384);
        let mut fs = mount(&dev, ordering, 1024);
        let (dir, _) = fs.mkdir(ROOT_INO, b"testdir", 0o700, 0, 0).unwrap();
        for i in 1..=N {
            fs.create(dir, i.to_string().as_bytes(), 0o644, 0, 0).unwrap();
        }
        let before = dev.stats().writes();
        let (mut seen, mut off) = (0, 0);
        'read: loop {
            let part = fs.readdir(dir, off, 64).unwrap();
            if part.is_empty() {
                break;
            }
            for e in part {
                off = e.next;
                seen += 1;
                assert!(seen <= 3 * N, "{ordering:?}: readdir never ends ({seen} entries seen)");
                if seen > 3 * N {
                    break 'read;
                }
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                fs.rename(dir, &e.name, dir, b"TEMPFILE", RenameFlags::default()).unwrap();
                fs.rename(dir, b"TEMPFILE", dir, &e.name, RenameFlags::default()).unwrap();
            }
        }
        fs.unmount().unwrap();
        let w = dev.stats().writes() - before;
        drop(fs);
        assert_clean(&dev);
        assert!(seen <= N + 2 + N / 50, "{ordering:?}: {seen} entries seen for {N} files");
        writes.push((ordering, seen, w));
    }
    eprintln!("readdir while renaming: {writes:?}");
    assert!(writes[0].2 <= writes[1].2, "soft updates wrote more than sync: {writes:?}");
}

/// Writes that fail (an I/O error on the device) leave soft updates' records as they were: the
/// next writes carry the same changes, ordered as before, and the image ends clean.
#[test]
fn failed_writes_are_retried_in_order() {
    use sufs_fs::clock::SimClock;
    use sufs_fs::dev::FaultDevice;
    use sufs_fs::fs::{Fs, MountOptions};
    for ordering in [Ordering::Softdep, Ordering::Sync] {
        let mem = new_image(4096);
        let dev = Arc::new(FaultDevice::new(mem.clone()));
        let d: Arc<dyn BlockDevice> = dev.clone();
        let mut fs =
            Fs::mount(d, MountOptions { ordering, cache_blocks: 256, readonly: false }, Arc::new(SimClock::new()))
                .unwrap();
        let (dir, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        let (f, _) = fs.create(dir, b"f", 0o644, 0, 0).unwrap();
        fs.write(f, 0, &pattern(1, 9000)).unwrap();
        dev.set_failing(true);
        assert!(fs.sync_all().is_err(), "{ordering:?}: a sync whose writes fail must say so");
        dev.set_failing(false);
        fs.rename(dir, b"f", ROOT_INO, b"g", RenameFlags::default()).unwrap();
        fs.sync_all().unwrap();
        fs.unmount().unwrap();
        drop(fs);
        assert_clean(&mem);
        let mut fs = mount(&mem, ordering, 64);
        let g = resolve(&mut fs, "g").unwrap();
        assert_eq!(fs.read(g, 0, 9000).unwrap(), pattern(1, 9000));
    }
}

/// Generations (what a file handle carries beside the inode number): a freed inode's next file
/// gets another one, whichever ordering freed it, and they survive a remount; a fresh inode's
/// is never 0.
#[test]
fn a_reused_inode_gets_another_generation_that_persists() {
    for ordering in ORDERINGS {
        let dev = new_image(4096);
        let mut fs = mount(&dev, ordering, 128);
        let (a, da) = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap();
        assert_ne!(da.generation, 0, "{ordering:?}");
        fs.unlink(ROOT_INO, b"a").unwrap();
        fs.sync_all().unwrap();
        let (b, db) = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap();
        assert_eq!(b, a, "{ordering:?}: the freed inode is taken again");
        assert_ne!(db.generation, da.generation, "{ordering:?}");
        fs.unlink(ROOT_INO, b"b").unwrap();
        fs.sync_all().unwrap();
        let (c, dc) = fs.create(ROOT_INO, b"c", 0o644, 0, 0).unwrap();
        assert_eq!(c, a);
        assert!(dc.generation != da.generation && dc.generation != db.generation, "{ordering:?}");
        fs.unmount().unwrap();
        assert_clean(&dev);
        let mut fs = mount(&dev, ordering, 128);
        assert_eq!(fs.lookup(ROOT_INO, b"c").unwrap().1.generation, dc.generation, "{ordering:?}");
        fs.unlink(ROOT_INO, b"c").unwrap();
        fs.sync_all().unwrap();
        let (d, dd) = fs.create(ROOT_INO, b"d", 0o644, 0, 0).unwrap();
        assert_eq!(d, a);
        assert!(![da.generation, db.generation, dc.generation].contains(&dd.generation), "{ordering:?}");
        fs.unmount().unwrap();
        assert_clean(&dev);
    }
}

/// RENAME_WHITEOUT: the rename, and a character device 0/0 in the source's place, for a file and
/// a directory, over a file, refused by NOREPLACE; without an inode for the whiteout it is
/// ENOSPC and nothing is renamed. Every ordering, checked after a remount and by fsck.
#[test]
fn rename_whiteout_leaves_a_char_device_where_the_source_was() {
    for ordering in ORDERINGS {
        let dev = std::sync::Arc::new(MemDevice::new(4096, 4096));
        let opts = sufs_fs::fs::MkfsOptions { inodes: Some(32), ..Default::default() };
        sufs_fs::fs::mkfs(dev.clone(), &opts, (1_700_000_000, 0)).unwrap();
        let mut fs = mount(&dev, ordering, 128);
        let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        let (f, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        fs.write(f, 0, b"upper").unwrap();
        let (sub, _) = fs.mkdir(ROOT_INO, b"sub", 0o755, 0, 0).unwrap();
        fs.create(d, b"victim", 0o644, 0, 0).unwrap();
        let (w, wd) = fs.rename_whiteout(ROOT_INO, b"f", d, b"f", false, (7, 8)).unwrap();
        assert_eq!((wd.mode, wd.rdev, wd.uid, wd.gid, wd.nlink), (S_IFCHR, 0, 7, 8, 1), "{ordering:?}");
        assert_eq!(fs.lookup(ROOT_INO, b"f").unwrap().0, w);
        assert_eq!(fs.lookup(d, b"f").unwrap().0, f);
        // A directory, over a file in another directory (which goes), and NOREPLACE.
        fs.rename_whiteout(ROOT_INO, b"sub", d, b"victim", false, (0, 0)).unwrap_err();
        fs.unlink(d, b"victim").unwrap();
        fs.rename_whiteout(ROOT_INO, b"sub", d, b"sub", false, (0, 0)).unwrap();
        assert_eq!(fs.lookup(d, b"sub").unwrap().0, sub);
        assert_eq!(fs.lookup(sub, b"..").unwrap().0, d);
        assert_eq!(fs.lookup(ROOT_INO, b"sub").unwrap().1.mode & S_IFMT, S_IFCHR);
        let (g, _) = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap();
        assert!(matches!(fs.rename_whiteout(ROOT_INO, b"g", d, b"f", true, (0, 0)), Err(FsError::Exists)));
        assert_eq!(fs.lookup(ROOT_INO, b"g").unwrap().0, g);
        let (h, _) = fs.create(ROOT_INO, b"h", 0o644, 0, 0).unwrap();
        fs.rename_whiteout(ROOT_INO, b"g", ROOT_INO, b"h", false, (0, 0)).unwrap();
        assert_eq!(fs.lookup(ROOT_INO, b"h").unwrap().0, g);
        // The target goes: no link is left (or its inode, freed, holds the whiteout already).
        assert!(fs.getattr(h).map_or(true, |d| d.nlink == 0 || d.mode & S_IFMT == S_IFCHR), "{ordering:?}");
        // No inode left for a whiteout: ENOSPC, and the source keeps its name.
        let mut n = 0;
        while fs.create(d, format!("fill{n}").as_bytes(), 0o644, 0, 0).is_ok() {
            n += 1;
        }
        assert!(matches!(fs.rename_whiteout(d, b"f", ROOT_INO, b"moved", false, (0, 0)), Err(FsError::NoSpace)));
        assert_eq!(fs.lookup(d, b"f").unwrap().0, f, "{ordering:?}");
        assert!(matches!(fs.lookup(ROOT_INO, b"moved"), Err(FsError::NotFound)));
        fs.unmount().unwrap();
        assert_clean(&dev);
        let mut fs = mount(&dev, ordering, 128);
        for (dir, name, mode) in [(ROOT_INO, "f", S_IFCHR), (ROOT_INO, "sub", S_IFCHR), (ROOT_INO, "g", S_IFCHR)] {
            let (_, di) = fs.lookup(dir, name.as_bytes()).unwrap();
            assert_eq!((di.mode & S_IFMT, di.rdev), (mode, 0), "{ordering:?} {name}");
        }
        assert_eq!(fs.read(f, 0, 10).unwrap(), b"upper");
        fs.unmount().unwrap();
        assert_clean(&dev);
    }
}

/// A directory removed while it holds a rename's old name (hidden, on disk) keeps its own name
/// hidden until then; a new directory of that name makes the old one leave the disk first, and
/// that may free the removed directory on the way (the model test found the ESTALE it gave).
#[test]
fn a_name_reused_after_rmdir_of_a_directory_holding_an_old_name() {
    for ordering in ORDERINGS {
        let dev = new_image(4096);
        let mut fs = mount(&dev, ordering, 64);
        fs.create(ROOT_INO, b"d1", 0o644, 0, 0).unwrap();
        let (d0, _) = fs.mkdir(ROOT_INO, b"d0", 0o755, 0, 0).unwrap();
        let (d2, _) = fs.mkdir(d0, b"d2", 0o755, 0, 0).unwrap();
        let (f, _) = fs.create(d2, b"d6", 0o644, 0, 0).unwrap();
        fs.rename(d2, b"d6", ROOT_INO, b"d1", RenameFlags::default()).unwrap();
        fs.rmdir(d0, b"d2").unwrap();
        let (n, _) = fs.mkdir(d0, b"d2", 0o755, 0, 0).unwrap();
        assert_eq!(resolve(&mut fs, "d0/d2").unwrap(), n, "{ordering:?}");
        assert_eq!(resolve(&mut fs, "d1").unwrap(), f, "{ordering:?}");
        fs.unmount().unwrap();
        drop(fs);
        assert_clean(&dev);
    }
}
