//! Damaged images through the mount (the library API a FUSE request reaches): a value read from
//! disk that is out of range fails that request with an error, marks the superblock "needs fsck",
//! and leaves the rest of the file system working; nothing panics, and nothing live is overwritten.

mod common;

use common::*;
use std::sync::Arc;
use sufs_fs::dev::{BlockDevice, MemDevice};
use sufs_fs::format::*;
use sufs_fs::fs::{Fs, FsError, Ordering};

const ORDERINGS: [Ordering; 3] = [Ordering::Softdep, Ordering::Sync, Ordering::Async];

fn sb(dev: &MemDevice) -> Superblock {
    Superblock::probe(|off, buf| sufs_fs::dev::read_bytes(dev, off, buf)).unwrap()
}

fn modify_block(dev: &MemDevice, bno: u64, f: impl FnOnce(&mut [u8])) {
    let mut buf = vec![0u8; 4096];
    dev.read_block(bno, &mut buf).unwrap();
    f(&mut buf);
    dev.write_batch(&[sufs_fs::dev::WriteReq { bno, data: &buf }], sufs_fs::dev::WriteKind::Sync).unwrap();
}

fn modify_inode(dev: &MemDevice, ino: u32, f: impl FnOnce(&mut Dinode)) {
    let s = sb(dev);
    let (bno, off) = s.inode_location(ino);
    modify_block(dev, bno, |b| {
        let mut d = s.decode_dinode(&b[off..off + DINODE_SIZE]);
        f(&mut d);
        s.encode_dinode(&d, &mut b[off..off + DINODE_SIZE]);
    });
}

fn inode(dev: &MemDevice, ino: u32) -> Dinode {
    let s = sb(dev);
    let (bno, off) = s.inode_location(ino);
    let mut buf = vec![0u8; 4096];
    dev.read_block(bno, &mut buf).unwrap();
    s.decode_dinode(&buf[off..off + DINODE_SIZE])
}

/// Marks a block (of one fragment) or an inode used (`used`) or free in its group's map, the
/// group's counts left as they are, and stamps the group's check hash again.
fn set_map_bit(dev: &MemDevice, blocks: bool, n: u64, used: bool) {
    let s = sb(dev);
    let u = s.ufs2().clone();
    let cg = if blocks { u.dtog(n as i64) as u32 } else { n as u32 / u.fs_ipg };
    modify_block(dev, s.cg_header_block(cg), |b| {
        let mut g = sufs_fs::format::ufs2::Cg::decode(b, &u, cg, false).unwrap();
        // The group's count follows its map (a mount refuses a group whose counts and maps
        // disagree), so that the damage is met by the allocator.
        if blocks {
            g.set_frag_free((n - u.cgbase(cg) as u64) as u32, !used);
            g.recount();
        } else {
            g.set_inode_used(n as u32 % u.fs_ipg, used);
            g.hdr.cg_cs.cs_nifree += if used { -1 } else { 1 };
            if inode(dev, n as u32).is_dir() {
                g.hdr.cg_cs.cs_ndir += if used { 1 } else { -1 };
            }
        }
        let enc = g.encode(&u);
        b[..enc.len()].copy_from_slice(&enc);
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

/// A directory whose size reads far past its blocks (2^40 with one block): each walk of it
/// would step through 2^28 holes under the lock. The size is checked where it is used: a lookup
/// in it fails with EIO at once, the image is marked for fsck, other directories work, and
/// fsck -y gives it its size back. (The smaller size comes first: old code, which walked every
/// hole, answered "not found" for it in a second instead of taking minutes.)
#[test]
fn directory_with_a_huge_size_fails_its_requests_and_asks_for_fsck() {
    for size in [1u64 << 30, 1 << 40, u64::MAX] {
        let dev = new_image(4096);
        let t = populate(&dev);
        modify_inode(&dev, t.e, |d| d.size = size);
        let mut fs = mount(&dev, Ordering::Softdep, 256);
        assert!(matches!(fs.lookup(t.e, b"x1"), Err(FsError::Corrupt(_))), "size {size}: lookup");
        assert!(matches!(fs.lookup(t.e, b"absent"), Err(FsError::Corrupt(_))), "size {size}: lookup");
        assert!(matches!(fs.readdir(t.e, 0, 64), Err(FsError::Corrupt(_))), "size {size}: readdir");
        assert!(matches!(fs.create(t.e, b"new", 0o644, 0, 0), Err(FsError::Corrupt(_))), "size {size}: create");
        // The rest of the file system goes on.
        let f = resolve(&mut fs, "d/f").unwrap();
        assert_eq!(fs.read(f, 0, 10_000).unwrap(), pattern(1, 6000));
        let (n, _) = fs.create(t.d, b"beside", 0o644, 0, 0).unwrap();
        fs.write(n, 0, b"still works").unwrap();
        assert_eq!(fs.readdir(t.d, 0, 64).unwrap().len(), 5, "size {size}: . .. f e beside");
        fs.unmount().unwrap();
        drop(fs);
        assert!(needs_fsck(&dev), "size {size}: the superblock asks for fsck");
        let r = sufs_fs::fsck::repair(&*dev).unwrap();
        assert!(!r.before.findings.is_empty(), "size {size}");
        assert_clean(&dev);
        let mut fs = mount(&dev, Ordering::Softdep, 256);
        untouched_files_read(&mut fs, &t);
        fs.unmount().unwrap();
    }
}

/// A file whose size reads past the largest file the geometry allows (2^50 with two blocks):
/// served as it is, `cat` would read zeros for ever. Its reads fail with EIO, the image is
/// marked for fsck, and fsck -y cuts the size back to its blocks, whose bytes are kept.
#[test]
fn file_with_a_size_past_the_largest_file_fails_reads_and_asks_for_fsck() {
    for size in [1u64 << 50, u64::MAX] {
        let dev = new_image(4096);
        let t = populate(&dev);
        modify_inode(&dev, t.f, |d| d.size = size);
        let mut fs = mount(&dev, Ordering::Softdep, 256);
        assert!(matches!(fs.read(t.f, 0, 4096), Err(FsError::Corrupt(_))), "size {size}");
        assert!(matches!(fs.read(t.f, 1 << 45, 4096), Err(FsError::Corrupt(_))), "size {size}");
        assert!(matches!(fs.read(t.big, 0, 4096), Ok(b) if b == pattern(7, 4096 * 20)[..4096]));
        fs.unmount().unwrap();
        drop(fs);
        assert!(needs_fsck(&dev), "size {size}: the superblock asks for fsck");
        sufs_fs::fsck::repair(&*dev).unwrap();
        assert_clean(&dev);
        let mut fs = mount(&dev, Ordering::Softdep, 256);
        let got = fs.read(t.f, 0, 1 << 20).unwrap();
        assert_eq!(got.len(), 8192, "size {size}: cut back to its two blocks");
        assert_eq!(got[..6000], pattern(1, 6000)[..], "size {size}");
        fs.unmount().unwrap();
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
        let r = sufs_fs::fsck::repair(&*dev).unwrap();
        assert!(!r.before.findings.is_empty());
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
        sufs_fs::fsck::repair(&*dev).unwrap();
        assert_clean(&dev);
    }
}

#[test]
fn block_bitmap_that_frees_metadata_is_refused_at_mount_and_repaired() {
    for ordering in ORDERINGS {
        let dev = new_image(4096);
        let t = populate(&dev);
        let s = sb(&dev);
        // The group header and the first inode-table blocks of group 0 shown free.
        for b in [s.cg_header_block(0), s.cg_itable_block(0), s.cg_itable_block(0) + 1, 0] {
            set_map_bit(&dev, true, b, false);
        }
        // UFS2's mount checks each group's map against its metadata, and refuses the image.
        let d: Arc<dyn BlockDevice> = dev.clone();
        let opts = sufs_fs::fs::MountOptions { ordering, cache_blocks: 256, readonly: false };
        let why = Fs::mount(d, opts, Arc::new(sufs_fs::clock::SimClock::new())).err().expect("refused").to_string();
        assert!(why.contains("metadata fragment 0 is free") && why.contains("run sufs fsck"), "{why}");
        let r = sufs_fs::fsck::repair(&*dev).unwrap();
        assert!(r.refused.is_none() && !r.before.findings.is_empty(), "{r:?}");
        assert_clean(&dev);
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
        // Enough to come round each group's rotor to the bad bits, wherever the allocations
        // before left it (inodes allocated ahead move it on).
        for i in 0..1200u64 {
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
        assert!(made > 600, "{ordering}: allocation goes on past the bad bits ({made})");
        untouched_files_read(&mut fs, &t);
        fs.unmount().unwrap();
        drop(fs);
        assert!(needs_fsck(&dev), "{ordering}");
        sufs_fs::fsck::repair(&*dev).unwrap();
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

// ------------------------------------------------------------------ mutants, walked

/// A tree for the mutants: directories of several blocks (dirhash), files with indirect
/// blocks, symlinks, hard links.
fn populate_wide(dev: &Arc<MemDevice>) {
    let mut fs = mount(dev, Ordering::Softdep, 256);
    let (d, _) = fs.mkdir(ROOT_INO, b"wide", 0o755, 0, 0).unwrap();
    for i in 0..150u64 {
        let (x, _) = fs.create(d, format!("a-rather-long-file-name-{i:04}").as_bytes(), 0o644, 0, 0).unwrap();
        fs.write(x, 0, &pattern(i, (i as usize * 97) % 3000)).unwrap();
    }
    let (s, _) = fs.mkdir(d, b"sub", 0o755, 0, 0).unwrap();
    let (big, _) = fs.create(s, b"big", 0o644, 0, 0).unwrap();
    fs.write(big, 0, &pattern(9, 4096 * 40)).unwrap();
    fs.link(big, ROOT_INO, b"big-link").unwrap();
    fs.symlink(s, b"up", b"../a-rather-long-file-name-0001", 0, 0).unwrap();
    fs.unmount().unwrap();
}

/// Every block that holds metadata a mutation should reach: inode tables in use, directory
/// blocks and indirect blocks.
fn metadata_blocks(dev: &MemDevice) -> Vec<u64> {
    let s = sb(dev);
    let mut out = vec![s.cg_itable_block(0)];
    for ino in FIRST_INO..64 {
        let d = inode(dev, ino);
        if d.is_free() {
            continue;
        }
        if d.is_dir() {
            out.extend(d.db.iter().filter(|&&b| b != 0));
        }
        out.extend(d.ib.iter().filter(|&&b| b != 0));
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Walks the whole tree through the library as a user of the mount would, then changes it: no
/// call may panic or loop (errors are fine). Bounded in entries and depth.
fn walk_and_change(fs: &mut Fs) {
    let mut queue = vec![(ROOT_INO, 0)];
    let mut seen = 0;
    while let Some((dir, depth)) = queue.pop() {
        let mut off = 0;
        while let Ok(part) = fs.readdir(dir, off, 64) {
            if part.is_empty() || seen > 5000 {
                break;
            }
            off = part.last().unwrap().next;
            for e in part {
                seen += 1;
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let Ok((ino, d)) = fs.lookup(dir, &e.name) else { continue };
                let _ = fs.getattr(ino);
                if d.is_dir() && depth < 16 {
                    queue.push((ino, depth + 1));
                } else if d.is_symlink() {
                    let _ = fs.readlink(ino);
                } else {
                    let _ = fs.read(ino, 0, 1 << 20);
                    let _ = fs.read(ino, d.size.saturating_sub(100), 4096);
                }
            }
        }
    }
    for i in 0..8u64 {
        if let Ok((x, _)) = fs.create(ROOT_INO, format!("new{i}").as_bytes(), 0o644, 0, 0) {
            let _ = fs.write(x, 0, &pattern(i, 9000));
        }
        let _ = fs.mkdir(ROOT_INO, format!("dir{i}").as_bytes(), 0o755, 0, 0);
    }
    if let Ok((w, _)) = fs.lookup(ROOT_INO, b"wide") {
        for i in 0..20u64 {
            let name = format!("a-rather-long-file-name-{i:04}");
            let _ = match i % 3 {
                0 => fs.unlink(w, name.as_bytes()),
                1 => fs.rename(w, name.as_bytes(), ROOT_INO, format!("moved{i}").as_bytes(), Default::default()),
                _ => {
                    let x = fs.lookup(w, name.as_bytes()).map(|x| x.0).unwrap_or(0);
                    fs.write(x, 10, b"xyz").map(|_| ())
                }
            };
        }
        let _ = fs.fsync(w);
    }
    let _ = fs.rmdir(ROOT_INO, b"dir3");
}

/// A deterministic generator (xorshift), so that a failing mutant can be named by its seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const EDGES: [u64; 9] = [0, 1, 2, 0xff, 0xffff, 1 << 32, 1 << 39, u64::MAX >> 1, u64::MAX];

/// Mutant `seed` of `base`: bytes flipped or fields set to edge values in one metadata block.
fn mutant(base: &MemDevice, blocks: &[u64], seed: u64) -> (Arc<MemDevice>, String) {
    let dev = Arc::new(MemDevice::new(4096, base.num_blocks()));
    let mut buf = vec![0u8; 4096];
    for b in 0..base.num_blocks() {
        base.read_block(b, &mut buf).unwrap();
        if buf.iter().any(|&x| x != 0) {
            dev.write_batch(&[sufs_fs::dev::WriteReq { bno: b, data: &buf }], sufs_fs::dev::WriteKind::Sync).unwrap();
        }
    }
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let bno = blocks[r.below(blocks.len() as u64) as usize];
    let what = match r.below(3) {
        0 => {
            let n = 1 + r.below(8);
            let offs: Vec<usize> = (0..n).map(|_| r.below(4096) as usize).collect();
            let bits: Vec<u8> = (0..n).map(|_| 1u8 << r.below(8)).collect();
            modify_block(&dev, bno, |b| offs.iter().zip(&bits).for_each(|(&o, &x)| b[o] ^= x));
            format!("block {bno}: {n} bits flipped at {offs:?}")
        }
        1 => {
            let off = (r.below(4096 / 8) * 8) as usize;
            let v = EDGES[r.below(EDGES.len() as u64) as usize];
            modify_block(&dev, bno, |b| b[off..off + 8].copy_from_slice(&v.to_le_bytes()));
            format!("block {bno}: u64 at {off} = {v:#x}")
        }
        _ => {
            let off = (r.below(4096 / 4) * 4) as usize;
            let v = EDGES[r.below(EDGES.len() as u64) as usize] as u32;
            modify_block(&dev, bno, |b| b[off..off + 4].copy_from_slice(&v.to_le_bytes()));
            format!("block {bno}: u32 at {off} = {v:#x}")
        }
    };
    (dev, what)
}

/// Mounts every mutant in each ordering and walks it: no panic, no hang; unmount works or
/// fails with an error. `SUFS_MUTANTS=N` runs more.
#[test]
fn mutants_mount_and_walk_without_a_panic() {
    let n: u64 = std::env::var("SUFS_MUTANTS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let base = new_image(4096);
    populate_wide(&base);
    let blocks = metadata_blocks(&base);
    let mut refused = 0;
    let mut marked = 0;
    for seed in 0..n {
        let (dev, what) = mutant(&base, &blocks, seed);
        let ordering = ORDERINGS[(seed % 3) as usize];
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let d: Arc<dyn BlockDevice> = dev.clone();
            let opts = sufs_fs::fs::MountOptions { ordering, cache_blocks: 64, readonly: false };
            let Ok(mut fs) = Fs::mount(d, opts, Arc::new(sufs_fs::clock::SimClock::new())) else {
                return false;
            };
            walk_and_change(&mut fs);
            let _ = fs.unmount();
            true
        }));
        match r {
            Ok(true) => marked += needs_fsck(&dev) as u64,
            Ok(false) => refused += 1,
            Err(_) => panic!("mutant {seed} ({ordering}): {what}: the mount panicked"),
        }
    }
    eprintln!("{n} mutants: {refused} refused at mount, {marked} marked for fsck while mounted");
}

/// Two directories of several blocks (indexed by dirhash) that share their blocks crosswise.
#[test]
fn large_directories_sharing_blocks_crosswise() {
    for ordering in ORDERINGS {
        let dev = new_image(4096);
        populate_wide(&dev);
        let other = {
            let mut fs = mount(&dev, ordering, 256);
            let (o, _) = fs.mkdir(ROOT_INO, b"other", 0o755, 0, 0).unwrap();
            for i in 0..150 {
                fs.create(o, format!("another-long-name-for-a-file-{i:04}").as_bytes(), 0o644, 0, 0).unwrap();
            }
            fs.unmount().unwrap();
            o
        };
        let wide = {
            let mut fs = mount(&dev, ordering, 256);
            let w = resolve(&mut fs, "wide").unwrap();
            fs.unmount().unwrap();
            w
        };
        let wd = inode(&dev, wide);
        let od = inode(&dev, other);
        modify_inode(&dev, other, |d| {
            d.db[0] = wd.db[1];
            d.db[1] = wd.db[0];
        });
        modify_inode(&dev, wide, |d| d.db[2] = od.db[2]);
        let mut fs = mount(&dev, ordering, 256);
        walk_and_change(&mut fs);
        for i in 0..40 {
            let _ = fs.create(other, format!("x{i}").as_bytes(), 0o644, 0, 0);
            let _ = fs.create(wide, format!("y{i}").as_bytes(), 0o644, 0, 0);
            let _ = fs.unlink(other, format!("another-long-name-for-a-file-{i:04}").as_bytes());
            let _ = fs.lookup(wide, format!("a-rather-long-file-name-{:04}", i + 50).as_bytes());
        }
        let _ = fs.unmount();
    }
}

/// One entry naming a free inode, through a real mount: a listing of its directory (the
/// kernel's READDIRPLUS, which carries each entry's attributes) lists every other name, with
/// the bad one left out and the image marked for fsck; a lookup of that name fails with EIO;
/// fsck -y removes the entry. (Old code failed the whole listing with ESTALE.)
#[test]
fn dangling_entry_leaves_the_rest_of_the_listing() {
    use common::fuse::{fsck_clean, fuse_available, mount_fg};
    use std::collections::BTreeSet;
    if !fuse_available() {
        return;
    }
    let dev = new_image(16384);
    let t = populate(&dev);
    let x5 = {
        let mut fs = mount(&dev, Ordering::Softdep, 256);
        let x = resolve(&mut fs, "d/e/x5").unwrap();
        fs.unmount().unwrap();
        x
    };
    // Freed in its inode (the bitmap, whose counts the mount checks, left as it was).
    modify_inode(&dev, x5, |d| *d = Dinode { generation: d.generation, ..Default::default() });
    let tmp = tempfile::tempdir().unwrap();
    let (img, mnt) = (tmp.path().join("img"), tmp.path().join("mnt"));
    let mut bytes = vec![0u8; 4096 * dev.num_blocks() as usize];
    for (b, block) in bytes.chunks_mut(4096).enumerate() {
        dev.read_block(b as u64, block).unwrap();
    }
    std::fs::write(&img, &bytes).unwrap();
    let list = |dir: &std::path::Path| -> BTreeSet<String> {
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect()
    };
    let others: BTreeSet<String> = (0..20).filter(|&i| i != 5).map(|i| format!("x{i}")).collect();

    let m = mount_fg(&img, &mnt, &[]);
    assert_eq!(list(&mnt.join("d/e")), others, "the listing goes on past the bad entry");
    let err = std::fs::metadata(mnt.join("d/e/x5")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert_eq!(std::fs::read(mnt.join("d/e/x7")).unwrap(), pattern(107, 100));
    m.umount();
    let (_, s) = sufs_fs::dev::FileDevice::open_image(&img, false).unwrap();
    assert_ne!(s.flags & SB_NEEDS_FSCK, 0, "marked for fsck");

    let out = sufs(&["fsck", "-y", img.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "fsck -y repairs: {}", String::from_utf8_lossy(&out.stdout));
    fsck_clean(&img);
    let m = mount_fg(&img, &mnt, &[]);
    assert_eq!(list(&mnt.join("d/e")), others);
    m.umount();
    let _ = t;
}
