//! docs/SPEC-sufs-format.md (sufs's earlier format) against real images: the superblock, the
//! group headers, the root inode, the directory entries, an indirect block and a symbolic link
//! are read from the raw bytes at the offsets SPEC-sufs-format.md gives, with a CRC32C of this
//! file's own, and compared with what `sufs dumpfs` prints and with what sufs made. Nothing here
//! goes through `sufs_fs::format`'s parsers, so a change of the format that SPEC-sufs-format.md
//! does not follow fails here. tests/spec_ufs2.rs does the same for UFS2 and docs/SPEC.md.

use std::path::Path;
use std::sync::Arc;

mod common;

use common::le::{u16_at, u32_at, u64_at};
use common::ok;

/// A directory entry as read: (offset, inode, record length, type, name).
type Dirent = (usize, u32, u16, u8, Vec<u8>);

/// CRC32C as SPEC-sufs-format.md defines it (reflected polynomial 0x82F63B78, init and final XOR all ones),
/// bit by bit, over the concatenation of `parts`.
fn crc32c(parts: &[&[u8]]) -> u32 {
    let mut c = !0u32;
    for p in parts {
        for &byte in *p {
            c ^= byte as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
            }
        }
    }
    !c
}

/// The superblock as SPEC-sufs-format.md lays it out.
#[derive(Debug)]
struct Sb {
    magic: u64,
    version: u32,
    bsize: u64,
    nblocks: u64,
    bpg: u64,
    ipg: u64,
    ngroups: u64,
    flags: u32,
    free_blocks: u64,
    free_inodes: u64,
    ndirs: u64,
    mount_count: u32,
    /// 0: not set (soft updates), 1 softdep, 2 sync, 3 async.
    ordering: u8,
    /// The label: the bytes of its field before the first NUL.
    label: Vec<u8>,
    snapshots: Vec<u32>,
}

fn superblock(b: &[u8]) -> Sb {
    assert_eq!(u32_at(b, 252), crc32c(&[&b[..252]]), "superblock CRC32C over bytes 0-251");
    assert!(b[95] == 0 && b[208..252].iter().all(|&x| x == 0), "reserved superblock bytes are zero");
    assert!(b[94] <= 3, "the default ordering is 0-3");
    let label: Vec<u8> = b[176..208].iter().copied().take_while(|&c| c != 0).collect();
    assert!(b[176 + label.len()..208].iter().all(|&x| x == 0), "the label is NUL-padded");
    assert!(b[92] == 1 || b[92..94] == [0, 0], "minfree_set is 0 or 1, and minfree 0 when unset");
    assert!(b[93] <= 99, "minfree is at most 99%");
    Sb {
        magic: u64_at(b, 0),
        version: u32_at(b, 8),
        bsize: u32_at(b, 12) as u64,
        nblocks: u64_at(b, 16),
        bpg: u32_at(b, 24) as u64,
        ipg: u32_at(b, 28) as u64,
        ngroups: u32_at(b, 32) as u64,
        flags: u32_at(b, 36),
        free_blocks: u64_at(b, 40),
        free_inodes: u64_at(b, 48),
        ndirs: u64_at(b, 56),
        mount_count: u32_at(b, 88),
        ordering: b[94],
        label,
        snapshots: (0..20).map(|i| u32_at(b, 96 + 4 * i)).collect(),
    }
}

impl Sb {
    fn itable_blocks(&self) -> u64 {
        self.ipg / (self.bsize / 256)
    }
    fn data_start(&self, g: u64) -> u64 {
        g * self.bpg + 2 + self.itable_blocks()
    }
    /// Byte offset of inode `i` in the image.
    fn inode_offset(&self, i: u64) -> usize {
        let (g, idx, ipb) = (i / self.ipg, i % self.ipg, self.bsize / 256);
        ((g * self.bpg + 2 + idx / ipb) * self.bsize + (idx % ipb) * 256) as usize
    }
    fn block<'a>(&self, img: &'a [u8], b: u64) -> &'a [u8] {
        &img[(b * self.bsize) as usize..((b + 1) * self.bsize) as usize]
    }
}

/// A group header as SPEC-sufs-format.md lays it out: (free blocks, free inodes, dirs, initialized inodes),
/// its bitmaps checked against its counts.
fn group(sb: &Sb, img: &[u8], g: u64) -> (u64, u64, u64, u64) {
    let h = sb.block(img, g * sb.bpg + 1);
    assert_eq!(&h[0..4], b"FSGC", "group {g} magic");
    assert_eq!(u32_at(h, 0), 0x4347_5346);
    assert_eq!(u32_at(h, 4) as u64, g, "the header names its group");
    let nblocks = sb.bpg.min(sb.nblocks - g * sb.bpg);
    assert_eq!(u32_at(h, 8) as u64, nblocks);
    assert_eq!(u32_at(h, 12) as u64, sb.ipg);
    assert_eq!(u32_at(h, 60), crc32c(&[&h[..60], &h[64..]]), "group {g} CRC32C with bytes 60-63 left out");
    let bit = |map: &[u8], i: u64| map[(i / 8) as usize] >> (i % 8) & 1 == 1;
    let imap = &h[64..];
    let bmap = &h[64 + sb.ipg.div_ceil(8) as usize..];
    let free_inodes = (0..sb.ipg).filter(|&i| !bit(imap, i)).count() as u64;
    let free_blocks = (0..nblocks).filter(|&i| !bit(bmap, i)).count() as u64;
    assert_eq!(u32_at(h, 16) as u64, free_blocks, "group {g}: free blocks = clear bits");
    assert_eq!(u32_at(h, 20) as u64, free_inodes, "group {g}: free inodes = clear bits");
    // The metadata blocks are in use; bits past the group's blocks are zero.
    assert!((0..2 + sb.itable_blocks()).all(|i| bit(bmap, i)), "group {g}: metadata marked in use");
    assert!((nblocks..sb.bpg).all(|i| !bit(bmap, i)), "group {g}: bits past the group are zero");
    if g == 0 {
        assert!(bit(imap, 0) && bit(imap, 1), "inodes 0 and 1 are never free");
    }
    // Version 2: the initialized inodes, whole inode blocks of the table, cover every inode in use.
    let initialized = u32_at(h, 36) as u64;
    assert!(
        initialized <= sb.ipg && initialized.is_multiple_of(sb.bsize / 256),
        "group {g}: initialized {initialized}"
    );
    assert!((initialized..sb.ipg).all(|i| !bit(imap, i)), "group {g}: no inode in use past the initialized ones");
    assert!(h[40..60].iter().all(|&x| x == 0), "group {g}: reserved header bytes are zero");
    (free_blocks, free_inodes, u32_at(h, 24) as u64, initialized)
}

/// A dinode as SPEC-sufs-format.md lays it out (the fields the tests look at).
#[derive(Debug, PartialEq)]
struct Ino {
    mode: u16,
    nlink: u32,
    uid: u32,
    size: u64,
    blocks: u64,
    generation: u32,
    flags: u32,
    db: Vec<u64>,
    ib: Vec<u64>,
}

fn inode(sb: &Sb, img: &[u8], i: u64) -> Ino {
    let o = sb.inode_offset(i);
    let d = &img[o..o + 256];
    assert!(d[2..4].iter().chain(&d[232..256]).all(|&x| x == 0), "reserved dinode bytes are zero");
    for ns in [64, 68, 72, 76] {
        assert!(u32_at(d, ns) < 1_000_000_000);
    }
    Ino {
        mode: u16_at(d, 0),
        nlink: u32_at(d, 4),
        uid: u32_at(d, 8),
        size: u64_at(d, 16),
        blocks: u64_at(d, 24),
        generation: u32_at(d, 80),
        flags: u32_at(d, 84),
        db: (0..12).map(|k| u64_at(d, 88 + 8 * k)).collect(),
        ib: (0..3).map(|k| u64_at(d, 184 + 8 * k)).collect(),
    }
}

/// The records of a directory block, chunk by chunk: (offset, ino, reclen, type, name).
fn records(block: &[u8]) -> Vec<(usize, u32, u16, u8, Vec<u8>)> {
    let mut out = Vec::new();
    for chunk in (0..block.len()).step_by(512) {
        let mut o = chunk;
        while o < chunk + 512 {
            let (ino, reclen, dtype, namelen) = (u32_at(block, o), u16_at(block, o + 4), block[o + 6], block[o + 7]);
            assert!(reclen >= 8 && reclen % 4 == 0 && o + reclen as usize <= chunk + 512, "record at {o}");
            let name = if ino == 0 { Vec::new() } else { block[o + 8..o + 8 + namelen as usize].to_vec() };
            if ino != 0 {
                let need = 8 + (namelen as usize + 1).div_ceil(4) * 4;
                assert!(namelen > 0 && need <= reclen as usize, "entry at {o} fits its record");
                assert!(block[o + 8 + namelen as usize..o + need].iter().all(|&x| x == 0), "padding at {o}");
            }
            out.push((o, ino, reclen, dtype, name));
            o += reclen as usize;
        }
        assert_eq!(o, chunk + 512, "the chain of chunk {chunk} ends at its end");
    }
    out
}

/// The value after `key` on the line of `sufs dumpfs` that starts with it.
fn field<'a>(dump: &'a str, key: &str) -> &'a str {
    dump.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_else(|| panic!("no {key} in {dump}")).trim()
}

fn num(s: &str) -> u64 {
    s.trim_matches(|c: char| !c.is_ascii_digit()).parse().unwrap_or_else(|_| panic!("not a number: {s}"))
}

fn compare_with_dumpfs(path: &Path, sb: &Sb, img: &[u8]) {
    let dump = ok(&["dumpfs", path.to_str().unwrap()]);
    assert_eq!(num(field(&dump, "bsize")), sb.bsize);
    assert_eq!(num(field(&dump, "blocks").split(' ').next().unwrap()), sb.nblocks);
    let g: Vec<&str> = field(&dump, "groups").split_whitespace().collect();
    // "N of B blocks, I inodes each (T inode table blocks)"
    assert_eq!((num(g[0]), num(g[2]), num(g[4]), num(g[7])), (sb.ngroups, sb.bpg, sb.ipg, sb.itable_blocks()), "{g:?}");
    assert_eq!(num(field(&dump, "inodes")), sb.ngroups * sb.ipg);
    let f: Vec<&str> = field(&dump, "free").split_whitespace().collect();
    // "F blocks, I inodes; D directories"
    assert_eq!((num(f[0]), num(f[2]), num(f[4])), (sb.free_blocks, sb.free_inodes, sb.ndirs), "{f:?}");
    let flags = field(&dump, "flags");
    assert_eq!(flags.starts_with("clean"), sb.flags & 1 != 0, "{flags}");
    assert_eq!(flags.contains("soft updates"), sb.flags & 2 != 0, "{flags}");
    assert_eq!(flags.contains("async"), sb.flags & 4 != 0, "{flags}");
    assert_eq!(flags.contains("needs fsck"), sb.flags & 8 != 0, "{flags}");
    assert_eq!(num(field(&dump, "mounts")), sb.mount_count as u64);
    let label = field(&dump, "label");
    assert_eq!(label, if sb.label.is_empty() { "(none)".into() } else { String::from_utf8_lossy(&sb.label) });
    let ordering = ["softdep (the default)", "softdep", "sync", "async"][sb.ordering as usize];
    assert_eq!(field(&dump, "ordering"), format!("{ordering} for a mount given none"));
    let snaps: Vec<u32> = sb.snapshots.iter().copied().filter(|&s| s != 0).collect();
    let listed = field(&dump, "snapshots");
    if snaps.is_empty() {
        assert_eq!(listed, "none");
    } else {
        assert_eq!(listed, snaps.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" "));
    }
    // The group table: one line per group after the header line.
    let table: Vec<Vec<u64>> = dump
        .lines()
        .skip_while(|l| !l.contains("first block"))
        .skip(1)
        .map(|l| l.split_whitespace().map(num).collect())
        .collect();
    assert_eq!(table.len() as u64, sb.ngroups);
    let (mut fb, mut fi, mut nd) = (0, 0, 0);
    for (g, row) in table.iter().enumerate() {
        let g = g as u64;
        let (b, i, d, inited) = group(sb, img, g);
        assert_eq!(row, &vec![g, g * sb.bpg, b, i, d, inited], "group {g}");
        (fb, fi, nd) = (fb + b, fi + i, nd + d);
    }
    // A clean image's summary counts are exact: the sums of the groups'.
    if sb.flags & 1 != 0 {
        assert_eq!((sb.free_blocks, sb.free_inodes, sb.ndirs), (fb, fi, nd));
    }
}

#[test]
fn crc32c_is_the_castagnoli_crc() {
    assert_eq!(crc32c(&[b"123456789"]), 0xE306_9283);
    assert_eq!(crc32c(&[b"1234", b"56789"]), 0xE306_9283);
}

/// `sufs tunefs`'s settings at the offsets SPEC-sufs-format.md gives: minfree, the default ordering and the
/// label, under the superblock's checksum.
#[test]
fn tuned_settings_read_as_spec_md_says() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.img");
    let p = path.to_str().unwrap();
    ok(&["mkfs", "--format", "sufs", p, "--size", "64M"]);
    let sb = superblock(&std::fs::read(&path).unwrap()[..4096]);
    assert_eq!((sb.ordering, sb.label.len()), (0, 0), "a fresh image has neither");
    ok(&["tunefs", p, "--minfree", "12", "--label", "vol", "--ordering", "async"]);
    let img = std::fs::read(&path).unwrap();
    let sb = superblock(&img[..4096]);
    assert_eq!(img[92..95], [1, 12, 3]);
    assert_eq!((sb.ordering, &sb.label[..]), (3, &b"vol"[..]));
    compare_with_dumpfs(&path, &sb, &img);
}

/// A fresh two-group image read by the offsets of SPEC-sufs-format.md: superblock, its copy, the group
/// headers, the root inode and its directory block, lost+found.
#[test]
fn a_fresh_image_reads_as_spec_md_says() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.img");
    ok(&["mkfs", "--format", "sufs", path.to_str().unwrap(), "--size", "120M"]);
    let img = std::fs::read(&path).unwrap();
    let sb = superblock(&img[..4096]);
    assert_eq!(&img[..8], b"1SFFSFUS");
    assert_eq!((sb.magic, sb.version, sb.bsize), (0x5355_4653_4646_5331, 2, 4096));
    assert_eq!(sb.nblocks * sb.bsize, 120 << 20);
    assert_eq!(sb.ngroups, sb.nblocks.div_ceil(sb.bpg));
    assert_eq!(sb.ngroups, 2, "120 MiB makes two groups (the test reads a copy)");
    assert!(sb.bpg + sb.ipg <= (sb.bsize - 64) * 8);
    assert_eq!(sb.ipg % (sb.bsize / 256), 0);
    assert_eq!(sb.flags, 1, "clean, last mounted sync (mkfs)");
    assert_eq!(sb.mount_count, 1);
    assert!(sb.snapshots.iter().all(|&s| s == 0));
    assert!(img[256..4096].iter().all(|&x| x == 0), "the rest of block 0 is zero");
    compare_with_dumpfs(&path, &sb, &img);

    // The copy in group 1: the same geometry.
    let copy = superblock(&img[(sb.bpg * sb.bsize) as usize..][..4096]);
    assert_eq!((copy.magic, copy.version, copy.bsize), (sb.magic, sb.version, sb.bsize));
    assert_eq!((copy.nblocks, copy.bpg, copy.ipg, copy.ngroups), (sb.nblocks, sb.bpg, sb.ipg, sb.ngroups));

    // The root: inode 2, in the first inode-table block of group 0 at byte 512.
    assert_eq!(sb.inode_offset(2), (2 * sb.bsize + 512) as usize);
    let root = inode(&sb, &img, 2);
    let me = unsafe { libc::getuid() };
    let first = sb.data_start(0);
    assert_eq!(
        root,
        Ino {
            mode: 0o040755,
            nlink: 3,
            uid: me,
            size: sb.bsize,
            blocks: 1,
            generation: 1,
            flags: 0,
            db: [first].into_iter().chain([0; 11]).collect(),
            ib: vec![0; 3],
        }
    );
    let lf = inode(&sb, &img, 3);
    assert_eq!((lf.mode, lf.nlink, lf.size, lf.blocks, lf.db[0]), (0o040700, 2, sb.bsize, 1, first + 1));
    // Only the first two inode blocks of group 0 are initialized (the allocator's step); the
    // rest of the tables were never written.
    let ipb = sb.bsize / 256;
    assert_eq!((group(&sb, &img, 0).3, group(&sb, &img, 1).3), (2 * ipb, 0), "initialized inodes");
    assert!((4..2 * ipb).all(|i| inode(&sb, &img, i).mode == 0), "the other initialized inodes are free");

    // The root's directory block, byte for byte as SPEC-sufs-format.md shows it, then its records.
    let rb = sb.block(&img, root.db[0]);
    assert_eq!(&rb[..24], b"\x02\0\0\0\x0c\0\x04\x01.\0\0\0\x02\0\0\0\x0c\0\x04\x02..\0\0");
    let recs = records(rb);
    let live: Vec<_> = recs.iter().filter(|r| r.1 != 0).map(|r| (r.0, r.1, r.2, r.3, r.4.as_slice())).collect();
    assert_eq!(live, vec![(0, 2, 12, 4, &b"."[..]), (12, 2, 12, 4, b".."), (24, 3, 488, 4, b"lost+found")]);
    assert!(recs.iter().filter(|r| r.0 >= 512).all(|r| r.1 == 0 && r.2 == 512), "empty chunks");
    let lrecs = records(sb.block(&img, lf.db[0]));
    assert_eq!((lrecs[0].1, &lrecs[0].4[..], lrecs[1].1, &lrecs[1].4[..]), (3, &b"."[..], 2, &b".."[..]));
}

/// Files made through the library, read back raw: a directory entry of each type, a file that
/// needs the single indirect block, a symbolic link (its target in its first block), and a
/// Block Register reservation and a snapshot with their flags and the superblock's list.
#[test]
fn files_read_as_spec_md_says() {
    use sufs_fs::clock::SimClock;
    use sufs_fs::dev::{BlockDevice, FileDevice};
    use sufs_fs::fs::{Fs, MountOptions, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.img");
    ok(&["mkfs", "--format", "sufs", path.to_str().unwrap(), "--size", "64M"]);
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(&path, 4096, true).unwrap());
    let opts = MountOptions { ordering: Ordering::Softdep, cache_blocks: 1024, readonly: false };
    let mut fs = Fs::mount(dev, opts, Arc::new(SimClock::new())).unwrap();
    let (f, _) = fs.create(2, b"big", 0o644, 0, 0).unwrap();
    let data: Vec<u8> = (0..20 * 4096 + 100).map(|i| (i % 251) as u8).collect();
    fs.write(f, 0, &data).unwrap();
    let (l, _) = fs.symlink(2, b"link", b"big", 0, 0).unwrap();
    let (d, _) = fs.mkdir(2, b"d", 0o755, 0, 0).unwrap();
    fs.brreserve(b"r", 3, None).unwrap();
    fs.snapshot_create(b"s").unwrap();
    fs.unmount().unwrap();
    drop(fs);

    let img = std::fs::read(&path).unwrap();
    let sb = superblock(&img[..4096]);
    assert_eq!(sb.flags, 1 | 2, "clean, last mounted with soft updates");
    compare_with_dumpfs(&path, &sb, &img);

    let root = inode(&sb, &img, 2);
    let recs = records(sb.block(&img, root.db[0]));
    let entry = |name: &[u8]| recs.iter().find(|r| r.4 == name).map(|r| (r.1, r.3)).unwrap();
    assert_eq!(entry(b"big"), (f, 8));
    assert_eq!(entry(b"link"), (l, 10));
    assert_eq!(entry(b"d"), (d, 4));

    // 21 data blocks: 12 direct, 9 through the single indirect block, which counts too.
    let big = inode(&sb, &img, f as u64);
    assert_eq!((big.mode, big.size, big.blocks), (0o100644, data.len() as u64, 22));
    let ind = sb.block(&img, big.ib[0]);
    let ptrs: Vec<u64> = (0..512).map(|k| u64_at(ind, 8 * k)).collect();
    assert!(ptrs[..9].iter().all(|&p| p != 0) && ptrs[9..].iter().all(|&p| p == 0));
    let blocks: Vec<u64> = big.db.iter().chain(&ptrs[..9]).copied().collect();
    let read: Vec<u8> = blocks.iter().flat_map(|&b| sb.block(&img, b).to_vec()).collect();
    assert_eq!(&read[..data.len()], &data[..]);
    assert!(read[data.len()..].iter().all(|&x| x == 0));

    let link = inode(&sb, &img, l as u64);
    assert_eq!((link.mode, link.size, link.blocks), (0o120777, 3, 1));
    assert_eq!(&sb.block(&img, link.db[0])[..4], b"big\0");

    // /.br/r: immutable and unmovable, its size whole blocks; /.snap/s: flagged, listed.
    let special = |name: &[u8]| -> (u64, Vec<Dirent>) {
        let ino = entry(name).0 as u64;
        let d = inode(&sb, &img, ino);
        assert_eq!((d.mode, d.flags), (0o040700, 1), "{name:?} is root's, immutable");
        (ino, records(sb.block(&img, d.db[0])))
    };
    let (_, br) = special(b".br");
    let r = inode(&sb, &img, br.iter().find(|e| e.4 == b"r").unwrap().1 as u64);
    assert_eq!((r.mode, r.flags, r.size, r.blocks), (0o100600, 1 | 4, 3 * 4096, 3));
    let (_, snap) = special(b".snap");
    let s_ino = snap.iter().find(|e| e.4 == b"s").unwrap().1;
    let s = inode(&sb, &img, s_ino as u64);
    assert_eq!((s.mode, s.flags, s.size), (0o100400, 2, sb.nblocks * sb.bsize));
    assert_eq!(sb.snapshots[0], s_ino);
    assert!(sb.snapshots[1..].iter().all(|&x| x == 0));
    // Its direct slots are copies of blocks 0-11; block 0's copy is a clean superblock with
    // no snapshot in it.
    assert!(s.db.iter().all(|&b| b > 1));
    let frozen = superblock(&sb.block(&img, s.db[0])[..4096]);
    assert_eq!((frozen.flags & 1, frozen.snapshots.iter().all(|&x| x == 0)), (1, true));
    // A block free at snapshot time is BLK_NOCOPY (1) in the map; the last block is free.
    let last = sb.nblocks - 1;
    let per = sb.bsize / 8;
    let x = last - 12;
    let entry_of_last = if x < per {
        u64_at(sb.block(&img, s.ib[0]), 8 * x as usize)
    } else {
        let x = x - per;
        let l1 = u64_at(sb.block(&img, s.ib[1]), 8 * (x / per) as usize);
        u64_at(sb.block(&img, l1), 8 * (x % per) as usize)
    };
    assert_eq!(entry_of_last, 1, "the last block was free at snapshot time: BLK_NOCOPY");
}
