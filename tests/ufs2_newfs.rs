//! `sufs mkfs --ufs2`: UFS2 file systems made as FreeBSD's newfs(8) makes them. For six
//! geometries and three sizes (the smallest newfs accepts, 64 MiB, 1 GiB sparse) the image's
//! superblock is found and validated, the UFS2 checker finds nothing, sufs mounts it read-only
//! with the counts the superblock gives and an empty root holding `.snap`, and fuse-ufs (a UFS2
//! reader no one here wrote) lists the same root. The layout is compared with FreeBSD's own
//! newfs (the fixture it made) field by field, and with makefs(8) where makefs follows the same
//! rules. A terabyte is made in seconds.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Instant;

use common::fuse::{external_tool, fuse_available, mount_fg};
use common::ufs2::{have_makefs, image, makefs, statvfs, FuseUfs};
use common::{ok, sufs};
use sufs_fs::format::ufs2::newfs::{geometry, NewfsOptions, OPERATOR_GID};
use sufs_fs::format::ufs2::*;

/// The superblock of the image file at `p`, found and validated as FreeBSD finds it.
fn superblock_of(p: &Path) -> Superblock {
    let f = fs::File::open(p).unwrap();
    let (loc, sb) = Superblock::search(|off, buf| f.read_exact_at(buf, off)).expect("a valid UFS2 superblock");
    assert_eq!(loc, SBLOCK_UFS2);
    sb
}

fn options(bsize: i32, fsize: i32) -> NewfsOptions {
    NewfsOptions { bsize: Some(bsize), fsize: Some(fsize), ..NewfsOptions::default() }
}

/// The smallest device, in whole fragments, newfs makes a file system on for this geometry.
fn smallest(bsize: i32, fsize: i32) -> u64 {
    let o = options(bsize, fsize);
    (1..1 << 16).map(|n| n * fsize as u64).find(|&s| geometry(s, &o).is_ok()).expect("some size works")
}

/// The names in a directory, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

const GEOMETRIES: [(i32, i32); 6] =
    [(32768, 4096), (4096, 512), (16384, 2048), (65536, 8192), (4096, 4096), (65536, 65536)];

#[test]
fn every_geometry_is_clean_and_mounts_in_sufs_and_fuse_ufs() {
    let fuse = fuse_available();
    let tool = external_tool("fuse-ufs", "cargo install fuse-ufs");
    let t = tempfile::tempdir().unwrap();
    for (bsize, fsize) in GEOMETRIES {
        let tiny = smallest(bsize, fsize);
        for size in [tiny, 64 << 20, 1 << 30] {
            let what = format!("{bsize}/{fsize}, {size} bytes");
            let img = t.path().join("img");
            let _ = fs::remove_file(&img);
            let out = ok(&[
                "mkfs",
                "--ufs2",
                img.to_str().unwrap(),
                "--size",
                &size.to_string(),
                "-b",
                &bsize.to_string(),
                "-f",
                &fsize.to_string(),
            ]);
            assert!(out.contains(&format!("block size {bsize}, fragment size {fsize}")), "{what}: {out}");
            let sb = superblock_of(&img);
            assert_eq!((sb.fs_bsize, sb.fs_fsize, sb.fs_size), (bsize, fsize, size as i64 / fsize as i64), "{what}");
            assert_eq!(sb.fs_flags, FS_DOSOFTDEP | FS_METACKHASH, "{what}");
            assert!(fs::metadata(&img).unwrap().blocks() * 512 < size.max(8 << 20), "{what}: the image is sparse");

            let out = sufs(&["fsck", "-n", img.to_str().unwrap()]);
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success() && text.contains(" 0 findings"), "{what}: fsck -n: {text}");
            assert!(text.contains("0 files, 2 directories"), "{what}: {text}");

            if !fuse {
                continue;
            }
            let mnt = t.path().join("mnt");
            let m = mount_fg(&img, &mnt, &["-o", "ro"]);
            let st = statvfs(&mnt);
            let root = fs::metadata(&mnt).unwrap();
            let snap = fs::metadata(mnt.join(".snap")).unwrap();
            let (listed, snap_listed) = (names(&mnt), names(&mnt.join(".snap")));
            m.umount();
            assert_eq!(listed, [".snap"], "{what}: the root");
            assert!(snap_listed.is_empty(), "{what}: .snap is empty");
            assert_eq!((root.mode(), root.nlink(), root.uid(), root.gid()), (0o40755, 3, 0, 0), "{what}: the root");
            assert_eq!((snap.mode(), snap.nlink(), snap.gid()), (0o40775, 2, OPERATOR_GID), "{what}: .snap");
            let c = &sb.fs_cstotal;
            assert_eq!((st.f_bsize, st.f_frsize), (bsize as u64, fsize as u64), "{what}");
            assert_eq!(st.f_blocks, sb.fs_dsize as u64, "{what}: statfs's blocks");
            assert_eq!(st.f_bfree, (c.cs_nbfree * sb.fs_frag as i64 + c.cs_nffree) as u64, "{what}: free");
            assert_eq!((st.f_ffree, st.f_files - st.f_ffree), (c.cs_nifree as u64, 2), "{what}: inodes");
            // fuse-ufs reads only superblocks of exactly one fragment (`sb.sbsize == sb.fsize`
            // in its checks): not those of 512-byte fragments (1,536 bytes, as newfs sizes
            // them) nor of 64 KiB ones (8,192 bytes).
            if let Some(tool) = tool.as_ref().filter(|_| sb.fs_sbsize == sb.fs_fsize) {
                let theirs = t.path().join("theirs");
                let m = FuseUfs::mount(tool, &img, &theirs);
                assert_eq!(names(&theirs), [".snap"], "{what}: fuse-ufs's root");
                assert!(names(&theirs.join(".snap")).is_empty(), "{what}: fuse-ufs's .snap");
                drop(m);
            }
        }
        // One fragment less than the smallest is refused before the image is made.
        let img = t.path().join("too-small");
        let out = sufs(&[
            "mkfs",
            "--ufs2",
            img.to_str().unwrap(),
            "--size",
            &(tiny - fsize as u64).to_string(),
            "-b",
            &bsize.to_string(),
            "-f",
            &fsize.to_string(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("cannot make a file system"), "{bsize}/{fsize}: {err}");
        assert!(!err.contains("panicked") && !img.exists(), "{bsize}/{fsize}: {err}");
    }
}

/// FreeBSD's newfs made the fixture (4 MiB, its defaults: 32 KiB blocks, 4 KiB fragments, soft
/// updates, check hashes); the kernel then filled it, which changes counts, times and the
/// group rotor but none of the fields below, all of which newfs alone decides: the group's
/// layout (`fs_sblkno`, `fs_cblkno`, `fs_iblkno`, `fs_dblkno`), the fragments and inodes of a
/// group and their count, the sizes of the group block, summary area and superblock, the
/// summary area's place, the data space, clustering (`fs_maxcontig`, `fs_contigsumsize`,
/// `fs_maxbsize`), `fs_maxbpg`, `fs_metaspace`, the limits, the flags and check hashes, and
/// the recovery record at the end of the boot area. `.snap` is inode 3, root:operator, 0775,
/// one below the root.
#[test]
fn the_layout_is_freebsds_newfs_layout() {
    let theirs = image();
    let fb = Superblock::search(|off, buf| theirs.read_exact_at(buf, off)).unwrap().1;
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("img");
    ok(&["mkfs", "--ufs2", img.to_str().unwrap(), "--size", &theirs.len().to_string()]);
    let ours = superblock_of(&img);
    macro_rules! same {
        ($($f:ident),*) => {$(
            assert_eq!(ours.$f, fb.$f, stringify!($f));
        )*};
    }
    same!(fs_sblkno, fs_cblkno, fs_iblkno, fs_dblkno, fs_ncg, fs_fpg, fs_ipg, fs_size, fs_dsize, fs_providersize);
    same!(fs_cgsize, fs_cssize, fs_csaddr, fs_sbsize, fs_sblockloc, fs_sblockactualloc);
    same!(fs_bsize, fs_fsize, fs_frag, fs_bshift, fs_fshift, fs_fragshift, fs_fsbtodb, fs_nindir, fs_inopb);
    same!(fs_bmask, fs_fmask, fs_qbmask, fs_qfmask);
    same!(fs_maxcontig, fs_contigsumsize, fs_maxbsize, fs_maxbpg, fs_metaspace, fs_minfree, fs_optim);
    same!(fs_maxfilesize, fs_maxsymlinklen, fs_avgfilesize, fs_avgfpdir, fs_old_inodefmt, fs_old_flags);
    same!(fs_flags, fs_metackhash, fs_magic);
    let mine = fs::read(&img).unwrap();
    assert_eq!(mine[65536 - 20..65536], theirs[65536 - 20..65536], "the recovery record");
    let dinode =
        |img: &[u8], ino: u32| Dinode::decode_checked(&img[ours.ino_offset(ino) as usize..], &ours, ino).unwrap();
    for ino in [UFS_ROOTINO, UFS_ROOTINO + 1] {
        let (a, b) = (dinode(&mine, ino), dinode(theirs, ino));
        assert_eq!(
            (a.di_mode, a.di_uid, a.di_gid, a.di_size),
            (b.di_mode, b.di_uid, b.di_gid, b.di_size),
            "inode {ino}"
        );
        assert_eq!((a.di_blocks, a.di_db[0], a.di_freelink), (b.di_blocks, b.di_db[0], b.di_freelink), "inode {ino}");
    }
    // The kernel linked files into the root; .snap is as newfs left it.
    assert_eq!(dinode(&mine, UFS_ROOTINO + 1).di_nlink, dinode(theirs, UFS_ROOTINO + 1).di_nlink);
}

/// makefs(8) (NetBSD's, as Debian ships it) follows FreeBSD's rules for the sizes and for the
/// layout of a group after its superblock copy, which must agree. It does not for the rest: it
/// puts the superblock at 8192 (so `fs_sblkno` and what follows it move), sizes the inode
/// count to the tree it copies (`fs_ipg`, hence `fs_fpg`, `fs_ncg`, `fs_dblkno`), keeps the
/// clustering of a 64 KiB `MAXPHYS` (`fs_maxcontig`, `fs_contigsumsize`), `fs_maxbpg` of a
/// 32-bit block pointer, its own minfree (5%), and sets no check hashes or soft updates.
#[test]
fn the_sizes_agree_with_makefs() {
    if !have_makefs() {
        eprintln!("SKIPPED: makefs(8) is not installed (apt-get install makefs)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("empty");
    fs::create_dir_all(&src).unwrap();
    for (bsize, fsize) in GEOMETRIES {
        let what = format!("{bsize}/{fsize}");
        let theirs_img = t.path().join("theirs");
        let _ = fs::remove_file(&theirs_img);
        makefs(&src, &theirs_img, bsize as u32, fsize as u32, "64m");
        let f = fs::File::open(&theirs_img).unwrap();
        let theirs = Superblock::search(|off, buf| f.read_exact_at(buf, off)).unwrap().1;
        let ours = geometry(64 << 20, &options(bsize, fsize)).unwrap().sb;
        macro_rules! same {
            ($($f:ident),*) => {$(
                assert_eq!(ours.$f, theirs.$f, "{what}: {}", stringify!($f));
            )*};
        }
        same!(fs_size, fs_bsize, fs_fsize, fs_frag, fs_bshift, fs_fshift, fs_fragshift, fs_fsbtodb);
        same!(fs_bmask, fs_fmask, fs_qbmask, fs_qfmask, fs_nindir, fs_inopb, fs_sbsize, fs_maxbsize);
        same!(fs_maxfilesize, fs_maxsymlinklen, fs_avgfilesize, fs_avgfpdir);
        assert_eq!(ours.fs_cblkno - ours.fs_sblkno, theirs.fs_cblkno - theirs.fs_sblkno, "{what}: superblock copy");
        assert_eq!(ours.fs_iblkno - ours.fs_cblkno, theirs.fs_iblkno - theirs.fs_cblkno, "{what}: group block");
    }
}

/// A terabyte, sparse: every group's header, superblock copy and first inode blocks are
/// written, the rest of the inode tables lazily; in seconds even from a debug build.
#[test]
fn a_terabyte_is_made_fast_and_clean() {
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("tb");
    let start = Instant::now();
    ok(&["mkfs", "--ufs2", img.to_str().unwrap(), "--size", "1T"]);
    let took = start.elapsed();
    let sb = superblock_of(&img);
    eprintln!(
        "mkfs --ufs2 of 1 TiB: {took:.2?}, {} groups, {} MiB written",
        sb.fs_ncg,
        (fs::metadata(&img).unwrap().blocks() * 512) >> 20
    );
    assert!(took.as_secs() < 60, "mkfs of 1 TiB took {took:?}");
    assert_eq!(sb.fs_size, (1i64 << 40) / 4096);
    // Every group decodes with its check hash, and their counts add up to the superblock's
    // (the whole check, `sufs fsck -n`, runs on the smaller images above: on a terabyte it
    // takes minutes in a debug build).
    let f = fs::File::open(&img).unwrap();
    let mut buf = vec![0u8; sb.fs_cgsize as usize];
    let (mut nbfree, mut nifree) = (0i64, 0i64);
    for c in 0..sb.fs_ncg {
        f.read_exact_at(&mut buf, sb.fsb_offset(sb.cgtod(c))).unwrap();
        let g = Cg::decode(&buf, &sb, c, true).unwrap_or_else(|e| panic!("group {c}: {e}"));
        assert_eq!(g.hdr.cg_initediblk, 2 * sb.fs_inopb, "group {c}: two blocks of inodes written");
        nbfree += g.hdr.cg_cs.cs_nbfree as i64;
        nifree += g.hdr.cg_cs.cs_nifree as i64;
    }
    assert_eq!((nbfree, nifree), (sb.fs_cstotal.cs_nbfree, sb.fs_cstotal.cs_nifree));
}
