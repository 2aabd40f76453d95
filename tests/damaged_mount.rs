//! Damaged images through the mount (the library API a FUSE request reaches): a value read from
//! disk that is out of range fails that request with an error, marks the superblock "needs fsck",
//! and leaves the rest of the file system working; nothing panics, and nothing live is overwritten.

mod common;

use common::*;
use std::sync::Arc;
use sufs::dev::{BlockDevice, MemDevice};
use sufs::format::*;
use sufs::fs::{Fs, FsError, Ordering};

const ORDERINGS: [Ordering; 3] = [Ordering::Softdep, Ordering::Sync, Ordering::Async];

fn sb(dev: &MemDevice) -> Superblock {
    let mut buf = vec![0u8; 4096];
    dev.read_block(0, &mut buf).unwrap();
    Superblock::decode(&buf).unwrap()
}

fn modify_block(dev: &MemDevice, bno: u64, f: impl FnOnce(&mut [u8])) {
    let mut buf = vec![0u8; 4096];
    dev.read_block(bno, &mut buf).unwrap();
    f(&mut buf);
    dev.write_batch(&[sufs::dev::WriteReq { bno, data: &buf }], sufs::dev::WriteKind::Sync).unwrap();
}

fn modify_inode(dev: &MemDevice, ino: u32, f: impl FnOnce(&mut Dinode)) {
    let s = sb(dev);
    let (bno, off) = s.inode_location(ino);
    modify_block(dev, bno, |b| {
        let mut d = Dinode::decode(&b[off..off + DINODE_SIZE]);
        f(&mut d);
        d.encode(&mut b[off..off + DINODE_SIZE]);
    });
}

fn inode(dev: &MemDevice, ino: u32) -> Dinode {
    let s = sb(dev);
    let (bno, off) = s.inode_location(ino);
    let mut buf = vec![0u8; 4096];
    dev.read_block(bno, &mut buf).unwrap();
    Dinode::decode(&buf[off..off + DINODE_SIZE])
}

/// Sets (`used`) or clears a bit of a group's inode or block bitmap and reseals the header.
fn set_map_bit(dev: &MemDevice, blocks: bool, n: u64, used: bool) {
    let s = sb(dev);
    let (cg, bit) = if blocks {
        (s.cg_of_block(n), (n - s.cg_start(s.cg_of_block(n))) as usize)
    } else {
        (s.cg_of_inode(n as u32), (n as u32 % s.inodes_per_group) as usize)
    };
    let base = if blocks { CgHeader::block_map_offset(s.inodes_per_group) } else { CgHeader::inode_map_offset() };
    modify_block(dev, s.cg_header_block(cg), |b| {
        let byte = base + bit / 8;
        if used {
            b[byte] |= 1 << (bit % 8);
        } else {
            b[byte] &= !(1 << (bit % 8));
        }
        CgHeader::seal(b);
    });
}

/// A small tree: /d/f (two blocks), /d/e (a directory with files), /s (a symlink), /big (an
/// indirect block).
struct Tree {
    d: u32,
    f: u32,
    e: u32,
    s: u32,
    big: u32,
}

fn populate(dev: &Arc<MemDevice>) -> Tree {
    let mut fs = mount(dev, Ordering::Softdep, 256);
    let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    let (f, _) = fs.create(d, b"f", 0o644, 0, 0).unwrap();
    fs.write(f, 0, &pattern(1, 6000)).unwrap();
    let (e, _) = fs.mkdir(d, b"e", 0o755, 0, 0).unwrap();
    for i in 0..20 {
        let (x, _) = fs.create(e, format!("x{i}").as_bytes(), 0o644, 0, 0).unwrap();
        fs.write(x, 0, &pattern(100 + i, 100)).unwrap();
    }
    let (s, _) = fs.symlink(ROOT_INO, b"s", b"d/f", 0, 0).unwrap();
    let (big, _) = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap();
    fs.write(big, 0, &pattern(7, 4096 * 20)).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(dev);
    Tree { d, f, e, s, big }
}

fn needs_fsck(dev: &MemDevice) -> bool {
    sb(dev).flags & SB_NEEDS_FSCK != 0
}

/// The files the damage did not touch still read back.
fn untouched_files_read(fs: &mut Fs, t: &Tree) {
    let f = resolve(fs, "d/f").unwrap();
    assert_eq!(f, t.f);
    assert_eq!(fs.read(f, 0, 10_000).unwrap(), pattern(1, 6000));
    for i in 0..20u64 {
        let x = resolve(fs, &format!("d/e/x{i}")).unwrap();
        assert_eq!(fs.read(x, 0, 1000).unwrap(), pattern(100 + i, 100));
    }
}

#[test]
fn symlink_with_a_huge_size_fails_readlink_and_asks_for_fsck() {
    for size in [1u64 << 32, 1 << 39, 4096, u64::MAX] {
        let dev = new_image(4096);
        let t = populate(&dev);
        modify_inode(&dev, t.s, |d| d.size = size);
        let mut fs = mount(&dev, Ordering::Softdep, 256);
        assert!(matches!(fs.readlink(t.s), Err(FsError::Corrupt(_))), "size {size}");
        untouched_files_read(&mut fs, &t);
        fs.unmount().unwrap();
        assert!(needs_fsck(&dev), "size {size}: the superblock asks for fsck");
    }
}

#[test]
fn file_with_no_links_but_a_name_is_not_freed() {
    for ordering in ORDERINGS {
        let dev = new_image(4096);
        let t = populate(&dev);
        modify_inode(&dev, t.f, |d| d.nlink = 0);
        let mut fs = mount(&dev, ordering, 256);
        // Looked up by its name, read, and let go: it must stay allocated with its blocks.
        assert!(matches!(fs.lookup(t.d, b"f"), Err(FsError::Corrupt(_))), "{ordering}");
        fs.hold(t.f, 1);
        fs.unhold(t.f, 1).unwrap();
        fs.unmount().unwrap();
        drop(fs);
        assert!(needs_fsck(&dev));
        let d = inode(&dev, t.f);
        assert!(!d.is_free(), "{ordering}: inode freed while a name points at it");
        assert_eq!(d.size, 6000);
        // fsck -y gives it its link back, and the data is there.
        let r = sufs::fsck::repair(&*dev).unwrap();
        assert!(!r.findings.is_empty());
        assert_clean(&dev);
        let mut fs = mount(&dev, ordering, 256);
        let f = resolve(&mut fs, "d/f").unwrap();
        assert_eq!(fs.read(f, 0, 10_000).unwrap(), pattern(1, 6000));
        fs.unmount().unwrap();
    }
}

#[test]
fn block_bitmap_that_frees_the_root_directory_never_overwrites_it() {
    for ordering in ORDERINGS {
        let dev = new_image(4096);
        let t = populate(&dev);
        let root_blk = inode(&dev, ROOT_INO).db[0];
        let d_blk = inode(&dev, t.d).db[0];
        let e_blk = inode(&dev, t.e).db[0];
        for b in [root_blk, d_blk, e_blk] {
            set_map_bit(&dev, true, b, false);
        }
        let mut fs = mount(&dev, ordering, 256);
        // Many creates and writes: every block handed out must be really free.
        let mut made = 0;
        for i in 0..40u64 {
            if let Ok((x, _)) = fs.create(t.e, format!("new{i}").as_bytes(), 0o644, 0, 0) {
                if fs.write(x, 0, &pattern(500 + i, 5000)).is_ok() {
                    made += 1;
                }
            }
        }
        assert!(made > 0, "{ordering}: the file system still works");
        untouched_files_read(&mut fs, &t);
        fs.unmount().unwrap();
        drop(fs);
        let mut fs = mount(&dev, ordering, 256);
        untouched_files_read(&mut fs, &t);
        fs.unmount().unwrap();
        drop(fs);
        assert!(needs_fsck(&dev), "{ordering}: the wrong bitmap was noticed");
        sufs::fsck::repair(&*dev).unwrap();
        assert_clean(&dev);
    }
}

#[test]
fn block_bitmap_that_frees_metadata_fails_allocation_without_a_panic() {
    for ordering in ORDERINGS {
        let dev = new_image(4096);
        let t = populate(&dev);
        let s = sb(&dev);
        // The group header and the first inode-table blocks of group 0 shown free.
        for b in [s.cg_header_block(0), s.cg_itable_block(0), s.cg_itable_block(0) + 1, 0] {
            set_map_bit(&dev, true, b, false);
        }
        let mut fs = mount(&dev, ordering, 256);
        for i in 0..40u64 {
            if let Ok((x, _)) = fs.create(t.e, format!("new{i}").as_bytes(), 0o644, 0, 0) {
                let _ = fs.write(x, 0, &pattern(500 + i, 5000));
            }
        }
        untouched_files_read(&mut fs, &t);
        fs.unmount().unwrap();
        drop(fs);
        assert!(needs_fsck(&dev), "{ordering}");
        let mut fs = mount(&dev, ordering, 256);
        untouched_files_read(&mut fs, &t);
        fs.unmount().unwrap();
    }
}

#[test]
fn inode_bitmap_that_frees_live_inodes_never_reuses_them() {
    for ordering in ORDERINGS {
        let dev = new_image(4096);
        let t = populate(&dev);
        let mut live = vec![t.d, t.f, t.e, t.s, t.big];
        {
            let mut fs = mount(&dev, ordering, 256);
            for i in 0..20 {
                live.push(resolve(&mut fs, &format!("d/e/x{i}")).unwrap());
            }
            fs.unmount().unwrap();
        }
        for &ino in &live {
            set_map_bit(&dev, false, ino as u64, false);
        }
        let mut fs = mount(&dev, ordering, 256);
        let mut made = 0;
        for i in 0..60u64 {
            let name = format!("n{i}");
            let r = if i % 5 == 0 {
                fs.mkdir(ROOT_INO, name.as_bytes(), 0o755, 0, 0)
            } else {
                fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)
            };
            if let Ok((x, _)) = r {
                assert!(!live.contains(&x), "{ordering}: live inode {x} handed out again");
                made += 1;
                if i % 7 == 0 {
                    fs.unlink(ROOT_INO, name.as_bytes()).ok();
                }
            }
        }
        assert!(made > 30, "{ordering}: allocation goes on past the bad bits ({made})");
        untouched_files_read(&mut fs, &t);
        fs.unmount().unwrap();
        drop(fs);
        assert!(needs_fsck(&dev), "{ordering}");
        sufs::fsck::repair(&*dev).unwrap();
        assert_clean(&dev);
    }
}

#[test]
fn directory_block_shared_by_two_directories() {
    for ordering in ORDERINGS {
        let dev = new_image(4096);
        let t = populate(&dev);
        let e_blk = inode(&dev, t.e).db[0];
        // A second directory whose block is /d/e's.
        let other = {
            let mut fs = mount(&dev, ordering, 256);
            let (o, _) = fs.mkdir(ROOT_INO, b"other", 0o755, 0, 0).unwrap();
            for i in 0..30 {
                fs.create(o, format!("o{i}").as_bytes(), 0o644, 0, 0).unwrap();
            }
            fs.unmount().unwrap();
            o
        };
        modify_inode(&dev, other, |d| d.db[0] = e_blk);
        let mut fs = mount(&dev, ordering, 256);
        let mut off = 0;
        let mut seen = 0;
        while let Ok(part) = fs.readdir(other, off, 16) {
            if part.is_empty() {
                break;
            }
            seen += part.len();
            off = part.last().unwrap().next;
            assert!(seen < 1000, "readdir ends");
        }
        let _ = fs.lookup(other, b"x1");
        let _ = fs.lookup(other, b"o1");
        let _ = fs.create(other, b"fresh", 0o644, 0, 0);
        let _ = fs.unlink(other, b"x2");
        let _ = fs.rmdir(ROOT_INO, b"other");
        let _ = fs.lookup(t.e, b"x3");
        fs.unmount().unwrap();
    }
}

#[test]
fn times_out_of_every_range_read_back() {
    let dev = new_image(4096);
    let t = populate(&dev);
    modify_inode(&dev, t.f, |d| {
        d.mtime = i64::MAX;
        d.mtime_ns = u32::MAX;
        d.atime = i64::MIN;
        d.atime_ns = 999_999_999;
        d.ctime = -1;
        d.ctime_ns = 1;
    });
    let mut fs = mount(&dev, Ordering::Softdep, 256);
    let d = fs.getattr(t.f).unwrap();
    assert_eq!((d.mtime, d.atime, d.ctime, d.ctime_ns), (i64::MAX, i64::MIN, -1, 1));
    untouched_files_read(&mut fs, &t);
    fs.unmount().unwrap();
}
