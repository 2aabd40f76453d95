//! docs/SPEC.md (FreeBSD's UFS2 as sufs uses it) against a real image: `sufs mkfs` makes one,
//! the library mounts and writes it, and this file reads the superblock and its copies, a
//! cylinder group, the summary area, dinodes, the root directory, a short symbolic link and an
//! extended-attribute record from the raw bytes at the offsets SPEC.md gives, with a check-hash
//! function of its own, and compares them with `sufs dumpfs` and with what was written. Nothing
//! here goes through `sufs_fs::format`'s parsers, so a change that SPEC.md does not follow fails
//! here.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

mod common;

use common::le::{i32_at, i64_at, u16_at, u32_at};
use common::ok;
use sufs_fs::clock::RealClock;
use sufs_fs::dev::FileDevice;
use sufs_fs::format::ROOT_INO;
use sufs_fs::fs::xattr::XattrMode;
use sufs_fs::fs::{Fs, MountOptions, Ordering};

const SBLOCK: u64 = 65536;
const FS_UNCLEAN: i32 = 0x1;
const FS_DOSOFTDEP: i32 = 0x2;
const FS_NEEDSFSCK: i32 = 0x4;
const FS_METACKHASH: i32 = 0x200;

fn read(img: &Path, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    std::fs::File::open(img).unwrap().read_exact_at(&mut b, off).unwrap();
    b
}

/// FreeBSD's check hash as SPEC.md gives it: CRC32C (reflected polynomial 0x82F63B78, initial
/// value all ones) without the final inversion, over `b` with the four bytes at `hole` as zero.
fn ckhash(b: &[u8], hole: usize) -> u32 {
    let mut c = !0u32;
    for (i, &byte) in b.iter().enumerate() {
        c ^= if (hole..hole + 4).contains(&i) { 0 } else { byte as u32 };
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
        }
    }
    c
}

/// The superblock fields SPEC.md's table gives.
#[derive(Debug, Clone)]
struct Sb {
    sblkno: i64,
    cblkno: i64,
    iblkno: i64,
    dblkno: i64,
    ncg: i64,
    bsize: i64,
    fsize: i64,
    frag: i64,
    minfree: i32,
    cgsize: usize,
    ipg: i64,
    fpg: i64,
    clean: u8,
    volname: Vec<u8>,
    sblockactualloc: i64,
    sblockloc: i64,
    /// `fs_cstotal`: ndir, nbfree, nifree, nffree.
    cstotal: [i64; 4],
    size: i64,
    csaddr: i64,
    snapinum: Vec<u32>,
    mtime: i64,
    metackhash: u32,
    flags: i32,
    maxsymlinklen: i32,
}

fn superblock_at(img: &Path, off: u64) -> Sb {
    let b = read(img, off, 8192);
    assert_eq!(i32_at(&b, 1372), 0x1954_0119, "fs_magic at {off} + 1372");
    let sbsize = i32_at(&b, 104) as usize;
    let sb = Sb {
        sblkno: i32_at(&b, 8) as i64,
        cblkno: i32_at(&b, 12) as i64,
        iblkno: i32_at(&b, 16) as i64,
        dblkno: i32_at(&b, 20) as i64,
        ncg: u32_at(&b, 44) as i64,
        bsize: i32_at(&b, 48) as i64,
        fsize: i32_at(&b, 52) as i64,
        frag: i32_at(&b, 56) as i64,
        minfree: i32_at(&b, 60),
        cgsize: i32_at(&b, 160) as usize,
        ipg: u32_at(&b, 184) as i64,
        fpg: i32_at(&b, 188) as i64,
        clean: b[209],
        volname: b[680..712].iter().copied().take_while(|&c| c != 0).collect(),
        sblockactualloc: i64_at(&b, 992),
        sblockloc: i64_at(&b, 1000),
        cstotal: [i64_at(&b, 1008), i64_at(&b, 1016), i64_at(&b, 1024), i64_at(&b, 1032)],
        size: i64_at(&b, 1080),
        csaddr: i64_at(&b, 1096),
        snapinum: (0..20).map(|i| u32_at(&b, 1116 + 4 * i)).collect(),
        mtime: i64_at(&b, 1208),
        metackhash: u32_at(&b, 1308),
        flags: i32_at(&b, 1312),
        maxsymlinklen: i32_at(&b, 1320),
    };
    assert!((1376..=8192).contains(&sbsize), "fs_sbsize {sbsize}");
    assert!(b[680..712].contains(&0), "fs_volname ends with a NUL");
    if sb.flags & FS_METACKHASH != 0 && sb.metackhash & 1 != 0 {
        assert_eq!(u32_at(&b, 1304), ckhash(&b[..sbsize], 1304), "fs_ckhash over fs_sbsize bytes");
    }
    sb
}

/// A dinode as SPEC.md lays it out (the fields looked at), its check hash verified.
#[derive(Debug)]
struct Di {
    mode: u16,
    nlink: i16,
    gid: u32,
    size: u64,
    blocks: u64,
    extsize: u32,
    extb0: i64,
    db: Vec<i64>,
    dirdepth: u32,
    raw: Vec<u8>,
}

fn dinode(img: &Path, sb: &Sb, ino: u32) -> Di {
    let (cg, idx) = (ino as i64 / sb.ipg, ino as i64 % sb.ipg);
    let off = (cg * sb.fpg + sb.iblkno) * sb.fsize + idx * 256;
    let b = read(img, off as u64, 256);
    let d = Di {
        mode: u16_at(&b, 0),
        nlink: i16::from_le_bytes([b[2], b[3]]),
        gid: u32_at(&b, 8),
        size: i64_at(&b, 16) as u64,
        blocks: i64_at(&b, 24) as u64,
        extsize: u32_at(&b, 92),
        extb0: i64_at(&b, 96),
        db: (0..12).map(|i| i64_at(&b, 112 + 8 * i)).collect(),
        dirdepth: u32_at(&b, 240),
        raw: b.clone(),
    };
    assert_ne!(d.mode, 0, "inode {ino} is allocated");
    assert_eq!(u32_at(&b, 244), ckhash(&b, 244), "di_ckhash of inode {ino}");
    d
}

/// The live entries of a directory's chunks: (inode, type, name).
fn dir_entries(img: &Path, sb: &Sb, d: &Di) -> Vec<(u32, u8, Vec<u8>)> {
    assert!(d.size > 0 && d.size.is_multiple_of(512), "a directory is whole 512-byte chunks, size {}", d.size);
    assert!(d.size <= sb.bsize as u64, "the test's directories fit one block");
    let b = read(img, (d.db[0] * sb.fsize) as u64, d.size as usize);
    let mut out = Vec::new();
    for chunk in b.chunks(512) {
        let mut at = 0;
        while at < 512 {
            let (ino, reclen, ty, namlen) =
                (u32_at(chunk, at), u16_at(chunk, at + 4) as usize, chunk[at + 6], chunk[at + 7]);
            assert!(reclen >= 8 && reclen % 4 == 0 && at + reclen <= 512, "d_reclen {reclen} at {at}");
            if ino != 0 {
                let n = namlen as usize;
                assert!(n >= 1 && reclen >= (8 + n + 1 + 3) & !3, "an entry fits its record");
                let name = chunk[at + 8..at + 8 + n].to_vec();
                assert_eq!(chunk[at + 8 + n], 0, "a NUL after the name");
                out.push((ino, ty, name));
            }
            at += reclen;
        }
        assert_eq!(at, 512, "a chunk's records end at its end");
    }
    out
}

fn dumpfs_line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("no {key} line in:\n{out}"))
}

fn mount(img: &Path, ordering: Ordering) -> Fs {
    let (dev, _) = FileDevice::open_image(img, true).unwrap();
    Fs::mount(Arc::new(dev), MountOptions { ordering, cache_blocks: 256, readonly: false }, Arc::new(RealClock::new()))
        .unwrap()
}

#[test]
fn a_ufs2_image_reads_at_the_offsets_spec_md_gives() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("u.img");
    let s = img.to_str().unwrap();
    let made = ok(&["mkfs", s, "--size", "64M", "-L", "spec-vol", "-m", "5"]);

    // The fresh superblock: newfs's defaults, the label, minfree, soft updates and check hashes.
    let sb = superblock_at(&img, SBLOCK);
    assert_eq!((sb.sblockloc, sb.sblockactualloc), (65536, 65536));
    assert_eq!((sb.bsize, sb.fsize, sb.frag), (32768, 4096, 8));
    assert_eq!((sb.ncg, sb.fpg, sb.ipg, sb.size), (4, 4104, 2176, 16384), "SPEC.md's 64 MiB example");
    assert_eq!((sb.sblkno, sb.cblkno, sb.iblkno, sb.dblkno, sb.csaddr), (24, 32, 40, 176, 176));
    assert_eq!((sb.volname.as_slice(), sb.minfree), (&b"spec-vol"[..], 5));
    assert_eq!((sb.clean, sb.flags, sb.metackhash), (1, FS_DOSOFTDEP | FS_METACKHASH, 7));
    assert_eq!(sb.maxsymlinklen, 120);
    assert!(sb.snapinum.iter().all(|&i| i == 0));
    let dump = ok(&["dumpfs", s]);
    assert!(dumpfs_line(&dump, "magic").contains("0x19540119"));
    assert!(dumpfs_line(&dump, "bsize").split_whitespace().eq(["bsize", "32768", "fsize", "4096", "frag", "8"]));
    assert!(dumpfs_line(&dump, "groups")
        .starts_with(&format!("groups    {} of {} fragments, {} inodes", sb.ncg, sb.fpg, sb.ipg)));
    assert_eq!(dumpfs_line(&dump, "label").split_whitespace().nth(1), Some("spec-vol"));
    assert!(dumpfs_line(&dump, "minfree").starts_with("minfree   5%"));
    let [ndir, nbfree, nifree, nffree] = sb.cstotal;
    let free = format!("free      {nbfree} blocks, {nffree} fragments, {nifree} inodes; {ndir} directories");
    assert_eq!(dumpfs_line(&dump, "free"), free);
    // The copies, at each group's cgsblock, each saying where it is; mkfs lists their sectors.
    let sectors: Vec<String> = (0..sb.ncg).map(|c| ((c * sb.fpg + sb.sblkno) * sb.fsize / 512).to_string()).collect();
    assert!(made.contains(&sectors.join(", ")), "mkfs's backups are {sectors:?}:\n{made}");
    for c in 0..sb.ncg {
        let at = (c * sb.fpg + sb.sblkno) * sb.fsize;
        let copy = superblock_at(&img, at as u64);
        assert_eq!((copy.sblockactualloc, copy.fpg, copy.ipg, copy.ncg), (at, sb.fpg, sb.ipg, sb.ncg));
    }

    // FS_DOSOFTDEP on a clean image is the default ordering: tunefs clears it for sync.
    ok(&["tunefs", s, "--ordering", "sync"]);
    assert_eq!(superblock_at(&img, SBLOCK).flags & (FS_DOSOFTDEP | FS_UNCLEAN | FS_NEEDSFSCK), 0);

    // While a soft-updates mount runs: not clean, FS_DOSOFTDEP set (the mount's ordering).
    let mut fs = mount(&img, Ordering::Softdep);
    let live = superblock_at(&img, SBLOCK);
    assert_eq!((live.clean, live.flags & FS_DOSOFTDEP), (0, FS_DOSOFTDEP), "a softdep mount's superblock");
    assert!(live.mtime > 0, "fs_mtime: the mount's time");
    let (d_ino, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    let target = b"a-short-target/under-120-bytes";
    let (l_ino, _) = fs.symlink(ROOT_INO, b"l", target, 0, 0).unwrap();
    let (f_ino, _) = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs.write(f_ino, 0, &data).unwrap();
    fs.setxattr(f_ino, b"user.k", b"v1", XattrMode::Any, 0).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    // A clean unmount writes the setting back: sync, so FS_DOSOFTDEP clear.
    let sb = superblock_at(&img, SBLOCK);
    assert_eq!((sb.clean, sb.flags & (FS_DOSOFTDEP | FS_UNCLEAN | FS_NEEDSFSCK)), (1, 0));
    assert!(dumpfs_line(&ok(&["dumpfs", s]), "ordering").contains("sync"));
    // And the other way: a sync mount of a soft-updates image clears the flag while it runs.
    ok(&["tunefs", s, "--ordering", "softdep"]);
    let mut fs = mount(&img, Ordering::Sync);
    assert_eq!(superblock_at(&img, SBLOCK).flags & FS_DOSOFTDEP, 0, "a sync mount's superblock");
    fs.unmount().unwrap();
    drop(fs);
    let sb = superblock_at(&img, SBLOCK);
    assert_eq!((sb.clean, sb.flags & FS_DOSOFTDEP), (1, FS_DOSOFTDEP));

    // Every group: its struct cg, the free-fragment map (bit set: free) against its counts, the
    // summary area's copy of the counts, and the counts' sum in fs_cstotal.
    let csum = read(&img, (sb.csaddr * sb.fsize) as u64, 16 * sb.ncg as usize);
    let mut total = [0i64; 4];
    let mut used_inodes = Vec::new();
    for c in 0..sb.ncg {
        let g = read(&img, ((c * sb.fpg + sb.cblkno) * sb.fsize) as u64, sb.cgsize);
        assert_eq!((i32_at(&g, 4), u32_at(&g, 12) as i64), (0x0009_0255, c), "cg_magic, cg_cgx");
        assert_eq!(u32_at(&g, 132), ckhash(&g, 132), "cg_ckhash of group {c}");
        let ndblk = u32_at(&g, 20) as i64;
        assert_eq!(ndblk, sb.fpg.min(sb.size - c * sb.fpg), "cg_ndblk");
        assert_eq!(u32_at(&g, 116) as i64, sb.ipg, "cg_niblk");
        let inited = u32_at(&g, 120) as i64;
        assert!(
            inited >= 2 * sb.bsize / 256 && inited % (sb.bsize / 256) == 0 && inited <= sb.ipg,
            "cg_initediblk {inited}"
        );
        let cs: Vec<i64> = (0..4).map(|i| i32_at(&g, 24 + 4 * i) as i64).collect();
        let summary: Vec<i64> = (0..4).map(|i| i32_at(&csum, 16 * c as usize + 4 * i) as i64).collect();
        assert_eq!(cs, summary, "group {c}'s cg_cs and its struct csum at fs_csaddr");
        for (t, v) in total.iter_mut().zip(&cs) {
            *t += v;
        }
        let (iused, free) = (u32_at(&g, 92) as usize, u32_at(&g, 96) as usize);
        let bit = |off: usize, i: usize| g[off + i / 8] & (1 << (i % 8)) != 0;
        let free_frags = (0..ndblk as usize).filter(|&i| bit(free, i)).count() as i64;
        assert_eq!(free_frags, cs[1] * sb.frag + cs[3], "group {c}: free fragments = nbfree * frag + nffree");
        let used: Vec<i64> = (0..sb.ipg as usize).filter(|&i| bit(iused, i)).map(|i| c * sb.ipg + i as i64).collect();
        assert_eq!(used.len() as i64, sb.ipg - cs[2], "group {c}: inodes in use = ipg - nifree");
        assert!(used.iter().all(|&i| i % sb.ipg < inited), "no inode in use at or past cg_initediblk");
        used_inodes.extend(used);
    }
    assert_eq!(total, sb.cstotal, "fs_cstotal is the groups' sum");
    let mut expect = vec![0, 1, 2, 3, d_ino as i64, l_ino as i64, f_ino as i64];
    expect.sort();
    assert_eq!(used_inodes, expect, "the inodes in use: 0, 1, the root, /.snap and the three made");

    // The root: 0755, ". .. .snap d", its entries as dir.h lays them out, depth 0.
    let root = dinode(&img, &sb, 2);
    assert_eq!((root.mode, root.nlink, root.dirdepth), (0o40755, 4, 0));
    assert_eq!(root.blocks, sb.fsize as u64 / 512, "one fragment, in 512-byte sectors");
    let ents = dir_entries(&img, &sb, &root);
    let names: Vec<(u32, u8, &[u8])> = ents.iter().map(|(i, t, n)| (*i, *t, n.as_slice())).collect();
    let want: Vec<(u32, u8, &[u8])> =
        vec![(2, 4, b"."), (2, 4, b".."), (3, 4, b".snap"), (d_ino, 4, b"d"), (l_ino, 10, b"l"), (f_ino, 8, b"f")];
    assert_eq!(names, want);
    let snap = dinode(&img, &sb, 3);
    assert_eq!((snap.mode, snap.gid, snap.dirdepth), (0o40775, 5, 1), "newfs's /.snap, root:operator");
    let d = dinode(&img, &sb, d_ino);
    assert_eq!((d.mode, d.nlink, d.dirdepth), (0o40755, 2, 1), "a directory one below the root");
    assert_eq!(dir_entries(&img, &sb, &d), vec![(d_ino, 4, b".".to_vec()), (2, 4, b"..".to_vec())]);

    // A short symbolic link: the target in the 120 bytes from 112, no block.
    let l = dinode(&img, &sb, l_ino);
    assert_eq!((l.mode & 0o170000, l.size, l.blocks), (0o120000, target.len() as u64, 0));
    assert_eq!(&l.raw[112..112 + target.len()], target);

    // The file: a tail of two fragments, its bytes at di_db[0], its attribute record at di_extb[0].
    let f = dinode(&img, &sb, f_ino);
    assert_eq!((f.mode, f.size), (0o100644, 5000));
    assert_eq!(read(&img, (f.db[0] * sb.fsize) as u64, 5000), data);
    assert_eq!(f.extsize, 16, "one record: 8 bytes for its header and name, 8 for the value");
    let ea = read(&img, (f.extb0 * sb.fsize) as u64, f.extsize as usize);
    assert_eq!(&ea[..8], &[16, 0, 0, 0, 1, 6, 1, b'k'], "ea_length 16, namespace user, padding 6, name k");
    assert_eq!(&ea[8..10], b"v1");
    assert_eq!(f.blocks, 3 * sb.fsize as u64 / 512, "two data fragments and one of attributes, in sectors");
}
