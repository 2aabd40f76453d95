//! `sufs_fs::format::ufs2` against a UFS2 image FreeBSD made (newfs and FreeBSD's kernel; no sufs
//! code wrote it): the superblock found by the standard search with its check hash, every
//! cylinder group with its check hash and its counts, summaries and maps agreeing with each
//! other and with the superblock, every inode reached from the root with its check hash, the
//! directory tree walked with fsck_ffs's entry checks, and each file's content, link target,
//! hole and extended attribute compared with what the image's README says FreeBSD put there.
//! Then decoders fed random and mutated metadata, which must answer errors, never panic.
//!
//! The image is `SUFS_UFS2_IMAGE`, or the first file of its name found below the directory that
//! holds the repository (where the project's shared fixtures sit, as tests/fstests/setup.sh
//! finds fstests' tarball); the test fails when it is missing rather than passing without it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

mod common;

use proptest::prelude::*;
use sufs_fs::format::ufs2::*;
use sufs_fs::format::ExtAttr;

use common::ufs2::{have_makefs, image, makefs};

fn superblock(img: &[u8]) -> Superblock {
    let (loc, sb) = Superblock::search(|off, buf| img.read_exact_at(buf, off)).expect("a UFS2 superblock");
    assert_eq!(loc, SBLOCK_UFS2);
    sb
}

fn cg(img: &[u8], sb: &Superblock, c: u32) -> Cg {
    let off = sb.fsb_offset(sb.cgtod(c)) as usize;
    Cg::decode(&img[off..off + sb.fs_cgsize as usize], sb, c, true).expect("a cylinder group")
}

fn dinode(img: &[u8], sb: &Superblock, ino: u32) -> Dinode {
    let off = sb.ino_offset(ino) as usize;
    Dinode::decode_checked(&img[off..off + UFS2_DINODE_SIZE], sb, ino).expect("an inode")
}

/// A file found by the walk.
struct Found {
    ino: u32,
    dip: Dinode,
}

/// Walks the tree from the root: every directory's entries through `DirIter` ("." and ".."
/// checked), each entry's type against its inode's; answers path -> file.
fn walk(img: &[u8], sb: &Superblock) -> BTreeMap<String, Found> {
    let mut out = BTreeMap::new();
    let mut todo = vec![(String::new(), UFS_ROOTINO, UFS_ROOTINO)];
    while let Some((path, ino, parent)) = todo.pop() {
        let dip = dinode(img, sb, ino);
        assert_eq!(dip.file_type(), IFDIR, "{path}/ is a directory");
        let data = FileReader::new(sb, img, &dip, ino).read_all(1 << 24).unwrap();
        assert_eq!(data.len() % 512, 0);
        let mut names = BTreeSet::new();
        for e in DirIter::new(&data, 0, dip.di_size, sb.maxino()) {
            let e = e.unwrap_or_else(|err| panic!("directory {path}/: {err}"));
            if e.d_ino == 0 {
                continue;
            }
            let name = String::from_utf8(e.name.to_vec()).unwrap();
            assert!(names.insert(name.clone()), "{path}/{name} twice");
            match name.as_str() {
                "." => assert_eq!(e.d_ino, ino, "{path}/."),
                ".." => assert_eq!(e.d_ino, parent, "{path}/.."),
                _ => {
                    let child = dinode(img, sb, e.d_ino);
                    let dt = match child.file_type() {
                        IFDIR => 4,
                        IFREG => 8,
                        IFLNK => 10,
                        t => panic!("{path}/{name}: type {t:o}"),
                    };
                    assert_eq!(e.d_type, dt, "{path}/{name}: d_type");
                    let p = format!("{path}/{name}");
                    if dt == 4 {
                        todo.push((p.clone(), e.d_ino, ino));
                    }
                    out.insert(p, Found { ino: e.d_ino, dip: child });
                }
            }
        }
        assert!(names.contains(".") && names.contains(".."), "{path}/ lacks . or ..");
    }
    out
}

fn hex_lines(n: u32) -> Vec<u8> {
    (0..n).flat_map(|i| format!("{i:015x}\n").into_bytes()).collect()
}

#[test]
fn freebsd_superblock_geometry_and_check_hash() {
    let img = image();
    assert_eq!(img.len(), 4 << 20);
    let sb = superblock(img);
    assert_eq!((sb.fs_bsize, sb.fs_fsize, sb.fs_frag, sb.fs_ncg), (32768, 4096, 8, 4));
    assert_eq!(sb.fs_magic, FS_UFS2_MAGIC);
    assert!(sb.has_ckhash(CK_SUPERBLOCK) && sb.has_ckhash(CK_CYLGRP) && sb.has_ckhash(CK_INODE));
    assert_eq!(sb.fs_maxsymlinklen, UFS2_MAXSYMLINKLEN);
    assert_eq!(sb.fs_size * sb.fs_fsize as i64, img.len() as i64);
    // Re-encoding gives back FreeBSD's bytes, hash and all.
    let sbsize = sb.fs_sbsize as usize;
    assert_eq!(sb.encode(), &img[SBLOCK_UFS2 as usize..SBLOCK_UFS2 as usize + sbsize]);
    // A flipped byte anywhere in the hashed bytes is caught.
    let mut torn = img[SBLOCK_UFS2 as usize..SBLOCK_UFS2 as usize + SBLOCKSIZE].to_vec();
    torn[2000] ^= 1;
    assert!(matches!(Superblock::decode(&torn, true), Err(Ufs2Error::CheckHash { .. })));
    // The backup copy in group 1 is a superblock too (fs_sblockloc still 65536).
    let b1 = sb.fsb_offset(sb.cgsblock(1)) as usize;
    let backup = Superblock::decode(&img[b1..b1 + SBLOCKSIZE], false).unwrap();
    assert_eq!((backup.fs_ncg, backup.fs_sblockloc), (4, SBLOCK_UFS2 as i64));
}

#[test]
fn freebsd_cylinder_groups_agree_with_their_maps_and_the_superblock() {
    let img = image();
    let sb = superblock(img);
    check_groups(img, &sb);
    // A flipped map bit is caught by the group's check hash.
    let off = sb.fsb_offset(sb.cgtod(2)) as usize;
    let mut torn = img[off..off + sb.fs_cgsize as usize].to_vec();
    torn[g_free_byte(&sb, img, 2)] ^= 0x10;
    assert!(matches!(Cg::decode(&torn, &sb, 2, true), Err(Ufs2Error::CheckHash { .. })));
}

/// Every group re-encodes to its bytes, its counts, fragment summary and cluster summary are
/// those its maps give, and they add up to the summary area and `fs_cstotal`.
fn check_groups(img: &[u8], sb: &Superblock) {
    let sb = sb.clone();
    let cs_area = sb.fsb_offset(sb.fs_csaddr) as usize;
    let mut total = CsumTotal::default();
    for c in 0..sb.fs_ncg {
        let g = cg(img, &sb, c);
        let off = sb.fsb_offset(sb.cgtod(c)) as usize;
        assert_eq!(g.encode(&sb), &img[off..off + sb.fs_cgsize as usize], "group {c} re-encodes");
        let m = g.map_counts();
        let cs = g.hdr.cg_cs;
        assert_eq!(
            (m.nbfree, m.nffree, m.nifree),
            (cs.cs_nbfree as u32, cs.cs_nffree as u32, cs.cs_nifree as u32),
            "group {c}: counts from its maps"
        );
        assert_eq!(m.frsum, g.hdr.cg_frsum, "group {c}: cg_frsum from its free map");
        assert_eq!(m.clustersum.len(), g.clustersum().len());
        if sb.fs_contigsumsize > 0 {
            assert_eq!(m.clustersum[1..], g.clustersum()[1..], "group {c}: cluster summary");
        }
        for b in 0..g.hdr.cg_ndblk / sb.fs_frag as u32 {
            let want = (sb.fs_contigsumsize > 0).then(|| g.block_free(b));
            assert_eq!(g.cluster_free(b), want, "group {c} block {b}: cluster map");
        }
        // The summary area holds the same counts.
        let mut raw = [0u8; 16];
        raw.copy_from_slice(&img[cs_area + 16 * c as usize..cs_area + 16 * c as usize + 16]);
        let words: Vec<i32> = raw.chunks(4).map(|w| i32::from_le_bytes(w.try_into().unwrap())).collect();
        assert_eq!(words, [cs.cs_ndir, cs.cs_nbfree, cs.cs_nifree, cs.cs_nffree], "group {c}: fs_csp");
        total.cs_ndir += cs.cs_ndir as i64;
        total.cs_nbfree += cs.cs_nbfree as i64;
        total.cs_nifree += cs.cs_nifree as i64;
        total.cs_nffree += cs.cs_nffree as i64;
    }
    let t = sb.fs_cstotal;
    assert_eq!(
        (total.cs_ndir, total.cs_nbfree, total.cs_nifree, total.cs_nffree),
        (t.cs_ndir, t.cs_nbfree, t.cs_nifree, t.cs_nffree)
    );
}

/// A byte of group `c`'s free map, offset in its block.
fn g_free_byte(sb: &Superblock, img: &[u8], c: u32) -> usize {
    cg(img, sb, c).hdr.cg_freeoff as usize + 10
}

#[test]
fn freebsd_tree_inodes_and_blocks_agree_with_the_maps() {
    let img = image();
    let sb = superblock(img);
    check_accounting(img, &sb);
}

/// Walks the tree and checks that the inodes and fragments it reaches are exactly the ones the
/// groups' maps say are in use, besides the metadata.
fn check_accounting(img: &[u8], sb: &Superblock) -> BTreeMap<String, Found> {
    let sb = sb.clone();
    let files = walk(img, &sb);
    let dirs = 1 + files.values().filter(|f| f.dip.file_type() == IFDIR).count() as i64;
    assert_eq!(dirs, sb.fs_cstotal.cs_ndir, "directories found");
    // Every inode in use is reached (0 and 1 are reserved), and nothing reached is free.
    let reached: BTreeSet<u32> = files.values().map(|f| f.ino).chain([0, 1, UFS_ROOTINO]).collect();
    let groups: Vec<Cg> = (0..sb.fs_ncg).map(|c| cg(img, &sb, c)).collect();
    for ino in 0..sb.maxino() {
        let used = groups[sb.ino_to_cg(ino) as usize].inode_used(ino % sb.fs_ipg);
        assert_eq!(used, reached.contains(&ino), "inode {ino}: used bit");
    }
    // Every fragment a file holds is allocated, held once, and counted in di_blocks; with the
    // metadata they are all the allocated fragments.
    let mut held = BTreeSet::new();
    let root = dinode(img, &sb, UFS_ROOTINO);
    let all = files.iter().map(|(p, f)| (p.as_str(), f.ino, &f.dip)).chain([("/", UFS_ROOTINO, &root)]);
    for (path, ino, dip) in all {
        let r = FileReader::new(&sb, img, dip, ino);
        let blocks: Vec<FileBlock> = r.blocks().unwrap().into_iter().chain(r.ext_blocks()).collect();
        let bytes: u64 = blocks.iter().map(|b| b.size).sum();
        assert_eq!(bytes / 512, dip.di_blocks, "{path}: di_blocks");
        for b in blocks {
            for f in b.fsb..b.fsb + sb.numfrags(b.size) {
                assert!(held.insert(f), "{path}: fragment {f} held twice");
                let c = sb.dtog(f) as u32;
                assert!(!groups[c as usize].frag_free(sb.dtogd(f) as u32), "{path}: fragment {f} is free");
            }
        }
    }
    let meta: i64 = (0..sb.fs_ncg)
        .map(|c| {
            if c == 0 {
                sb.fs_dblkno as i64 + sb.numfrags(sb.fs_cssize as u64)
            } else {
                (sb.fs_dblkno - sb.fs_sblkno) as i64
            }
        })
        .sum();
    let t = sb.fs_cstotal;
    let free = t.cs_nbfree * sb.fs_frag as i64 + t.cs_nffree;
    assert_eq!(held.len() as i64 + meta + free, sb.fs_size, "held + metadata + free = all fragments");
    files
}

/// Images NetBSD's makefs(8) makes (Debian's `makefs`) in three geometries, from a tree made
/// here: the superblock is at 8192 (in the 64 KiB one, with a copy at 65536 that the search
/// must pass over), no check hashes; decoded and walked as the FreeBSD image is.
#[test]
fn makefs_images_decode_and_walk() {
    if !have_makefs() {
        eprintln!("SKIPPED: makefs(8) is not installed (apt-get install makefs)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("d1/d2")).unwrap();
    std::fs::write(src.join("a"), b"hello\n").unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(src.join("d1/big"), &big).unwrap();
    std::fs::write(src.join("d1/d2/f"), vec![b'x'; 5000]).unwrap();
    std::os::unix::fs::symlink("a", src.join("l")).unwrap();
    for (bsize, fsize) in [(16384, 2048), (4096, 512), (65536, 8192)] {
        let path = dir.path().join(format!("img-{bsize}"));
        makefs(&src, &path, bsize as u32, fsize as u32, "16m");
        let img = std::fs::read(&path).unwrap();
        let (loc, sb) = Superblock::search(|off, buf| img.read_exact_at(buf, off)).unwrap();
        assert_eq!((loc, sb.fs_bsize, sb.fs_fsize), (SBLOCK_UFS1, bsize, fsize), "{bsize}");
        check_groups(&img, &sb);
        let files = check_accounting(&img, &sb);
        let read = |p: &str| {
            let f = &files[p];
            FileReader::new(&sb, &img[..], &f.dip, f.ino).read_all(1 << 24).unwrap()
        };
        assert_eq!(read("/a"), b"hello\n");
        assert!(read("/d1/big") == big, "{bsize}: d1/big");
        assert_eq!(read("/d1/d2/f"), vec![b'x'; 5000]);
        assert_eq!(files["/l"].dip.shortlink(&sb).as_deref(), Some(&b"a"[..]));
    }
}

#[test]
fn freebsd_files_hold_what_the_readme_lists() {
    let img = image();
    let sb = superblock(img);
    let files = walk(img, &sb);
    let names: BTreeSet<&str> = files.keys().map(|k| k.as_str()).collect();
    for p in [
        "/.snap",
        "/file1",
        "/dir1/dir2/dir3/file2",
        "/file3",
        "/link1",
        "/long-link",
        "/sparse",
        "/sparse2",
        "/sparse3",
        "/xattrs",
        "/xattrs2",
        "/xattrs3",
    ] {
        assert!(names.contains(p), "{p} missing from {names:?}");
    }
    let reader = |p: &str| {
        let f = &files[p];
        FileReader::new(&sb, img, &f.dip, f.ino)
    };
    let read = |p: &str| reader(p).read_all(1 << 24).unwrap();
    assert_eq!(read("/file1"), b"This is a simple file.\n");
    assert_eq!(read("/dir1/dir2/dir3/file2"), b"Hello World\n");
    // 1 MiB: 12 direct blocks, then the single indirect block.
    let file3 = read("/file3");
    assert_eq!(file3.len(), 1 << 20);
    assert!(file3 == hex_lines(65536), "file3's numbers");
    assert_ne!(files["/file3"].dip.di_ib[0], 0);
    // The file1 tail is one fragment of a block.
    assert_eq!(reader("/file1").block_size(0), 4096);

    let link1 = &files["/link1"].dip;
    assert_eq!(link1.file_type(), IFLNK);
    assert_eq!(link1.shortlink(&sb).as_deref(), Some(&b"dir1/dir2/dir3/file2"[..]));
    assert_eq!(link1.di_blocks, 0);
    let long = &files["/long-link"].dip;
    assert_eq!((long.di_size, long.shortlink(&sb)), (1023, None));
    let mut target = "./".repeat(508).into_bytes();
    target.extend_from_slice(b"//file1");
    assert_eq!(read("/long-link"), target);

    // The sparse files: dd(1) extended each to the offset (FreeBSD allocates the block holding
    // the new last byte, zero-filled) and wrote 'x' there, reached through the double (sparse,
    // sparse2) and triple (sparse3) indirect blocks; everything before is a hole. sparse3's
    // size stops where its data starts (549,890,457,600 bytes): its block is allocated past
    // the end of the file.
    let bs = sb.fs_bsize as u64;
    for (p, lbn, len, size) in [
        ("/sparse", 12 + 4096, 8 * 4096, (12 + 4096) * bs + 8 * 4096),
        ("/sparse2", 12 + 4096, 4096, (12 + 4096) * bs + 4096),
        ("/sparse3", 12 + 4096 + 4096 * 4096, 8 * 4096, 549_890_457_600),
    ] {
        let r = reader(p);
        let at = lbn * bs;
        assert_eq!(r.dip.di_size, size, "{p}: size");
        assert_eq!(sb.lblkno(at), lbn as i64);
        let block = r.read_block(lbn as i64).unwrap();
        assert!(block[..len as usize].iter().all(|&b| b == b'x'), "{p}: the data");
        assert!(block[len as usize..].iter().all(|&b| b == 0), "{p}: the rest of its block");
        let mut buf = vec![1u8; 64 + len as usize];
        let n = r.read_at(at - 64, &mut buf).unwrap();
        assert_eq!(n as u64, size - (at - 64), "{p}: read up to the end");
        assert!(buf[..64].iter().all(|&b| b == 0), "{p}: zeros before the data");
        assert!(buf[64..n].iter().all(|&b| b == b'x'), "{p}: the data read through read_at");
        assert!(r.bmap(lbn as i64 - 1).unwrap().is_some(), "{p}: the block dd's truncate allocated");
        assert_eq!(r.bmap(lbn as i64 - 2).unwrap(), None, "{p}: a hole");
        assert_eq!(r.bmap(0).unwrap(), None, "{p}: a hole");
        let mut head = [1u8; 100];
        assert_eq!(r.read_at(1000, &mut head).unwrap(), 100);
        assert_eq!(head, [0; 100], "{p}: the start is a hole");
        let levels: BTreeSet<u8> = r.blocks().unwrap().iter().map(|b| b.level).collect();
        let deepest = if p == "/sparse3" { 3 } else { 2 };
        assert_eq!(levels.iter().max(), Some(&deepest), "{p}: the indirect levels used");
    }

    let attrs = |p: &str| {
        let r = reader(p);
        assert_eq!(r.dip.di_size, 0, "{p} is empty");
        decode_extattrs(&r.read_ext().unwrap(), &sb).unwrap()
    };
    let user = |name: &str, value: &[u8]| ExtAttr {
        namespace: EXTATTR_NAMESPACE_USER,
        name: name.as_bytes().to_vec(),
        value: value.to_vec(),
    };
    assert_eq!(attrs("/xattrs"), vec![user("test", b"testvalue")]);
    let many = attrs("/xattrs2");
    assert_eq!(many.len(), 2297);
    let got: BTreeSet<(Vec<u8>, Vec<u8>)> = many.into_iter().map(|a| (a.name, a.value)).collect();
    let want: BTreeSet<(Vec<u8>, Vec<u8>)> =
        (1..=2297).map(|i| (format!("attr{i}").into_bytes(), format!("value{i}").into_bytes())).collect();
    assert!(got == want, "xattrs2's attributes");
    // The value is 63,999 bytes: the numbers' text without its last newline (the shell's
    // command substitution that passed it to setextattr(8) dropped it).
    let mut big = hex_lines(4000);
    assert_eq!(big.pop(), Some(b'\n'));
    assert_eq!(attrs("/xattrs3"), vec![user("big", &big)]);
    // The areas re-encode to FreeBSD's bytes.
    for p in ["/xattrs", "/xattrs2", "/xattrs3"] {
        let area = reader(p).read_ext().unwrap();
        assert_eq!(encode_extattrs(&decode_extattrs(&area, &sb).unwrap(), &sb).unwrap(), area, "{p}");
    }
    // Each dinode re-encodes to its bytes, check hash included.
    for (p, f) in &files {
        let off = sb.ino_offset(f.ino) as usize;
        assert_eq!(f.dip.encode_for(&sb), img[off..off + UFS2_DINODE_SIZE], "{p}");
    }
}

/// The image's metadata blocks a fuzzer mutates: the superblock, group 1's block, the root's
/// first directory block, xattrs2's area, file3's dinode.
/// The superblock, then the raw group block, directory block, attribute area and dinode.
type Metadata = (Superblock, Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>);

fn sample_metadata() -> Metadata {
    let img = image();
    let sb = superblock(img);
    let off = sb.fsb_offset(sb.cgtod(1)) as usize;
    let cgb = img[off..off + sb.fs_cgsize as usize].to_vec();
    let files = walk(img, &sb);
    let root = dinode(img, &sb, UFS_ROOTINO);
    let dirb = FileReader::new(&sb, img, &root, UFS_ROOTINO).read_block(0).unwrap();
    let x = &files["/xattrs2"];
    let area = FileReader::new(&sb, img, &x.dip, x.ino).read_ext().unwrap();
    let f3 = sb.ino_offset(files["/file3"].ino) as usize;
    (sb, cgb, dirb, area, img[f3..f3 + UFS2_DINODE_SIZE].to_vec())
}

fn mutate(mut b: Vec<u8>, edits: &[(usize, u8)]) -> Vec<u8> {
    let n = b.len();
    for &(at, v) in edits {
        b[at % n] = v;
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_a_decoder(b in proptest::collection::vec(any::<u8>(), 0..9000)) {
        let _ = Superblock::decode(&b, true);
        let _ = Superblock::decode(&b, false);
        let sb = superblock(image());
        if let Ok(g) = Cg::decode(&b, &sb, 1, false) {
            let _ = g.map_counts();
        }
        let _ = Dinode::decode(&b);
        let _ = DirIter::new(&b, 0, b.len() as u64, sb.maxino()).count();
        let _ = decode_extattrs(&b, &sb);
    }

    #[test]
    fn mutated_freebsd_metadata_never_panics(
        edits in proptest::collection::vec((0usize..8192, any::<u8>()), 1..8),
        which in 0u8..5,
    ) {
        static META: OnceLock<Metadata> = OnceLock::new();
        let (sb, cgb, dirb, area, dino) = META.get_or_init(sample_metadata);
        let img = image();
        match which {
            0 => {
                let mut raw = img[SBLOCK_UFS2 as usize..SBLOCK_UFS2 as usize + SBLOCKSIZE].to_vec();
                for &(at, v) in &edits {
                    raw[at % sb.fs_sbsize as usize] = v;
                }
                if let Ok(m) = Superblock::decode(&raw, false) {
                    // A superblock that passes validation drives the geometry and the group
                    // decoder over the real image without a panic.
                    for c in 0..m.fs_ncg.min(8) {
                        let off = m.fsb_offset(m.cgtod(c));
                        let _ = (m.cgdmin(c), m.cgimin(c), m.ino_to_fsba(c * m.fs_ipg), m.sblksize(12345, 3));
                        if let Some(b) = img.get(off as usize..off as usize + m.fs_cgsize as usize) {
                            if let Ok(g) = Cg::decode(b, &m, c, false) {
                                let _ = g.map_counts();
                            }
                        }
                    }
                    let _ = m.encode();
                }
            }
            1 => {
                if let Ok(g) = Cg::decode(&mutate(cgb.clone(), &edits), sb, 1, false) {
                    let _ = g.map_counts();
                    let _ = g.clustersum();
                }
            }
            2 => {
                let _ = DirIter::new(&mutate(dirb.clone(), &edits), 0, dirb.len() as u64, sb.maxino()).count();
            }
            3 => {
                let _ = decode_extattrs(&mutate(area.clone(), &edits), sb);
            }
            _ => {
                let d = Dinode::decode(&mutate(dino.clone(), &edits)).unwrap();
                let r = FileReader::new(sb, img, &d, 5);
                let mut buf = vec![0u8; 70_000];
                let _ = r.read_at(d.di_size.saturating_sub(50_000), &mut buf);
                let _ = r.read_at(0, &mut buf[..100]);
                let _ = r.bmap(12 + 4096 + 17);
                let _ = r.read_ext();
                let _ = d.shortlink(sb);
            }
        }
    }
}

/// sufs's view of a UFS2 image (`Superblock::from_ufs2`, `Dinode::decode`) loses nothing:
/// every inode FreeBSD (or makefs) wrote, decoded into sufs's dinode and encoded back, is the
/// same 256 bytes, check hash included; the superblock mapped onto sufs's and back encodes to
/// the same bytes. What sufs changes in an inode is then all a write of it changes.
#[test]
fn sufs_view_of_inodes_and_superblock_writes_back_what_it_read() {
    let check = |img: &[u8], what: &str| {
        let (_, u) = Superblock::search(|off, buf| img.read_exact_at(buf, off)).expect("a UFS2 superblock");
        let view = sufs_fs::format::Superblock::from_ufs2(u.clone());
        assert!(view.to_ufs2().encode() == u.encode(), "{what}: the superblock");
        let mut live = 0;
        for c in 0..u.fs_ncg {
            let inited = cg(img, &u, c).hdr.cg_initediblk;
            for i in 0..inited {
                let ino = c * u.fs_ipg + i;
                let off = u.ino_offset(ino) as usize;
                let raw = &img[off..off + UFS2_DINODE_SIZE];
                if Dinode::decode(raw).unwrap().di_mode == 0 {
                    continue;
                }
                live += 1;
                let d = view.decode_dinode(raw);
                assert!(d.encode(&u)[..] == raw[..], "{what}: inode {ino} ({:o})", d.mode);
            }
        }
        assert!(live > 3, "{what}: {live} inodes in use");
    };
    check(image(), "FreeBSD");
    if !have_makefs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("d/f"), vec![7u8; 70_000]).unwrap();
    std::os::unix::fs::symlink("d/f", src.join("l")).unwrap();
    for (b, f) in [(4096, 512), (65536, 8192)] {
        let path = dir.path().join(format!("img-{b}"));
        makefs(&src, &path, b, f, "16m");
        check(&std::fs::read(&path).unwrap(), &format!("makefs {b}/{f}"));
    }
}

/// A flag sufs sets lands on FreeBSD's bit for it, and sufs's own flags (no FreeBSD bit) in
/// the spare word, where a second read finds them.
#[test]
fn sufs_flags_map_onto_freebsd_bits() {
    use sufs_fs::format::{DI_APPEND, DI_IMMUTABLE, DI_NOATIME, DI_NODUMP, DI_UNMOVABLE};
    let img = image();
    let u = superblock(img);
    let view = sufs_fs::format::Superblock::from_ufs2(u.clone());
    let off = u.ino_offset(2) as usize;
    let mut d = view.decode_dinode(&img[off..off + UFS2_DINODE_SIZE]);
    d.flags = DI_IMMUTABLE | DI_APPEND | DI_NODUMP | DI_NOATIME | DI_UNMOVABLE;
    let raw = d.encode(&u);
    let back = Dinode::decode_checked(&raw, &u, 2).expect("a check hash that verifies");
    assert_eq!(back.di_flags, 0x0002_0000 | 0x0004_0000 | 0x1, "SF_IMMUTABLE | SF_APPEND | UF_NODUMP");
    assert_eq!(view.decode_dinode(&raw).flags, d.flags);
    d.flags = 0;
    assert_eq!(Dinode::decode(&d.encode(&u)).unwrap().di_flags, 0);
}
