//! `sufs fsck` on UFS2 images (the checker of `sufs_fs::fsck::ufs2`): the image FreeBSD made and
//! makefs(8) images of four geometries over a tree of small files, symbolic links, a deep
//! directory and a sparse file are clean (exit 0); each kind of damage is found, with its
//! finding in fsck_ffs's words and its class, and exit 4; `-b` takes a group's superblock copy.
//! `-y` repairs each damage (then `-n` finds nothing, and sufs and fuse-ufs read every file as
//! before), `-p` repairs what a soft-updates crash leaves and refuses the rest, `-n` never
//! writes. Then random damage to the FreeBSD image's metadata, which the checker must report or
//! refuse, never panic on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use proptest::prelude::*;

mod common;

use common::fuse::{external_tool, fuse_available, mount_fg};
use common::ufs2::{
    dinode, edit_inode, have_makefs, image, makefs, root_entry, superblock, unlink_root_entry, FuseUfs,
};
use common::{ok, sufs, SUFS};
use sufs_fs::format::ufs2::*;
use sufs_fs::fsck::ufs2::{check, Options};
use sufs_fs::fsck::Class;

/// `sufs fsck ARGS IMG`: exit code and stdout.
fn fsck(img: &Path, args: &[&str]) -> (i32, String) {
    let mut a: Vec<&str> = vec!["fsck"];
    a.extend_from_slice(args);
    a.push(img.to_str().unwrap());
    let out = sufs(&a);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

fn assert_clean(img: &Path, args: &[&str]) {
    let (code, out) = fsck(img, args);
    assert_eq!(code, 0, "{}: {out}", img.display());
    assert!(out.contains(" 0 findings (0 allowed, 0 violations)"), "{out}");
}

/// The FreeBSD image, marked not clean (as a crash or a mount that met damage leaves it, so
/// that `fsck -p` looks at it: it skips an image marked clean) and changed by `edit`, written
/// to a file in `dir`.
fn damaged(dir: &Path, edit: impl FnOnce(&mut Vec<u8>, &Superblock)) -> PathBuf {
    let mut img = image().to_vec();
    let mut sb = superblock(&img);
    sb.fs_clean = 0;
    let b = sb.encode();
    img[SBLOCK_UFS2 as usize..SBLOCK_UFS2 as usize + b.len()].copy_from_slice(&b);
    let sb = superblock(&img);
    edit(&mut img, &sb);
    let p = dir.join("img");
    std::fs::write(&p, &img).unwrap();
    p
}

/// Changes group `c` through its decoder and writes it back with its check hash.
fn edit_cg(img: &mut [u8], sb: &Superblock, c: u32, f: impl FnOnce(&mut Cg, &mut Vec<u8>)) {
    let off = sb.fsb_offset(sb.cgtod(c)) as usize;
    let len = sb.fs_cgsize as usize;
    let mut g = Cg::decode(&img[off..off + len], sb, c, true).unwrap();
    let mut raw = g.encode(sb);
    f(&mut g, &mut raw);
    // Raw edits first, then the decoded ones, resealed.
    let mut g2 = Cg::decode(&raw, sb, c, false).unwrap();
    g2.hdr = g.hdr.clone();
    let mut after = Cg::decode(&g2.encode(sb), sb, c, false).unwrap();
    for f in 0..g.hdr.cg_ndblk {
        after.set_frag_free(f, g.frag_free(f));
    }
    img[off..off + len].copy_from_slice(&after.encode(sb));
}

/// Runs the checker on the damaged image: exit 4, and a line `Class: text` for each expected.
fn expect(p: &Path, want: &[(Class, String)]) -> String {
    let (code, out) = fsck(p, &[]);
    assert_eq!(code, 4, "{out}");
    for (class, line) in want {
        let line = format!("{class:?}: {line}");
        assert!(out.lines().any(|l| l == line), "missing {line:?} in:\n{out}");
    }
    out
}

#[test]
fn freebsd_image_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    let p = damaged(dir.path(), |_, _| {});
    assert_clean(&p, &[]);
    assert_clean(&p, &["-n"]);
    let (_, out) = fsck(&p, &[]);
    assert!(out.contains("superblock at byte 65536"), "{out}");
    assert!(out.contains("11 files, 5 directories"), "{out}");
}

/// A terabyte as newfs leaves it (1,677 groups of 80,128 inodes, two blocks of them
/// initialized in each) is checked in seconds and in little memory: the inode table holds
/// only the inodes pass 1 read, and pass 5 compares each group's maps a word at a time. Run
/// in 1 GiB of address space, and in a minute (a debug build takes about 4 s; checking every
/// inode and fragment one by one took 4.3 GB and nearly three minutes).
#[test]
fn a_terabyte_is_checked_in_little_time_and_memory() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("t.img");
    let img = img.to_str().unwrap();
    ok(&["mkfs", "--ufs2", img, "--size", "1T"]);
    let start = Instant::now();
    let out = Command::new("prlimit").args(["--as=1073741824", "--", SUFS, "fsck", "-n", img]).output().unwrap();
    let took = start.elapsed();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("0 files, 2 directories") && text.contains(" 0 findings "), "{text}");
    assert!(took < Duration::from_secs(60), "took {took:?}");
}

#[test]
fn alternate_superblock_is_a_groups_copy_by_sector() {
    let dir = tempfile::tempdir().unwrap();
    let sb = superblock(image());
    let sector = sb.fsbtodb(sb.cgsblock(1));
    // The standard superblock destroyed: the check runs from group 1's copy and says so.
    let p = damaged(dir.path(), |img, _| img[65536..65536 + 2048].fill(0));
    let (code, out) = fsck(&p, &[]);
    assert_eq!(code, 8, "no superblock at the standard places: {out}");
    let (code, out) = fsck(&p, &["-b", &sector.to_string()]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains(&format!("superblock at byte {}", sector * 512)), "{out}");
    assert!(out.contains("Violation: STANDARD SUPERBLOCK BAD"), "{out}");
    assert_eq!(out.matches("Violation").count(), 1, "nothing else: {out}");
    let clean = damaged(dir.path(), |_, _| {});
    assert_clean(&clean, &["-b", &sector.to_string()]);
}

/// Every name below `root` with its bytes (a file's size and data, a symbolic link's target;
/// nothing for a directory), as a mounted reader gives them.
fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn go(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let t = std::fs::symlink_metadata(&p).unwrap().file_type();
            if t.is_symlink() {
                out.insert(name, std::fs::read_link(&p).unwrap().into_os_string().into_encoded_bytes());
            } else if t.is_dir() {
                out.insert(name + "/", Vec::new());
                go(root, &p, out);
            } else {
                // The size and the first MiB (the fixture holds a sparse file of 512 GiB).
                let f = std::fs::File::open(&p).unwrap();
                let mut b = f.metadata().unwrap().len().to_le_bytes().to_vec();
                std::io::Read::read_to_end(&mut std::io::Read::take(f, 1 << 20), &mut b).unwrap();
                out.insert(name, b);
            }
        }
    }
    let mut out = BTreeMap::new();
    go(root, root, &mut out);
    out
}

/// What `sufs mount -o ro` reads of the image at `p`, and fuse-ufs too when it is installed
/// (the same or the test fails); `None` without FUSE.
fn read_through_mounts(p: &Path) -> Option<BTreeMap<String, Vec<u8>>> {
    if !fuse_available() {
        return None;
    }
    let t = tempfile::tempdir().unwrap();
    let m = mount_fg(p, &t.path().join("ours"), &["-o", "ro"]);
    let ours = files(&t.path().join("ours"));
    m.umount();
    if let Some(tool) = external_tool("fuse-ufs", "cargo install fuse-ufs") {
        let _m = FuseUfs::mount(&tool, p, &t.path().join("theirs"));
        assert_eq!(files(&t.path().join("theirs")), ours, "fuse-ufs and sufs read the same");
    }
    Some(ours)
}

/// `sufs fsck FLAG` repairs the image at `p` (exit 1, a line starting with each of `want`), then `-n`
/// finds nothing, the superblock is marked clean, and the mounts read what they read of the
/// undamaged image, changed by `expect` (names gained or lost by the repair).
fn repairs(p: &Path, flag: &str, want: &[String], expect: impl FnOnce(&mut BTreeMap<String, Vec<u8>>)) {
    let (code, out) = fsck(p, &[flag]);
    assert_eq!(code, 1, "{out}");
    for line in want {
        assert!(out.lines().any(|l| l.starts_with(&format!("repaired: {line}"))), "missing {line:?} in:\n{out}");
    }
    assert_clean(p, &["-n"]);
    let img = std::fs::read(p).unwrap();
    let sb = superblock(&img);
    assert_eq!((sb.fs_clean, sb.fs_flags & (FS_NEEDSFSCK | FS_UNCLEAN)), (1, 0), "marked clean");
    let dir = tempfile::tempdir().unwrap();
    let Some(mut before) = read_through_mounts(&damaged(dir.path(), |_, _| {})) else { return };
    expect(&mut before);
    assert!(read_through_mounts(p) == Some(before), "the repaired image reads as the undamaged one");
}

#[test]
fn check_only_never_writes() {
    let dir = tempfile::tempdir().unwrap();
    let p = damaged(dir.path(), |img, sb| {
        let file = root_entry(img, sb, "file1").0;
        edit_inode(img, sb, file, |d| d.di_nlink += 1);
        edit_cg(img, sb, 1, |g, _| g.hdr.cg_cs.cs_nbfree += 1);
    });
    let before = std::fs::read(&p).unwrap();
    for args in [&["-n"][..], &[][..]] {
        let (code, out) = fsck(&p, args);
        assert_eq!(code, 4, "{out}");
    }
    assert!(std::fs::read(&p).unwrap() == before, "the image is untouched");
}

/// The standard superblock marked as a crash leaves it: not clean, `FS_NEEDSFSCK`.
fn mark_unclean(img: &mut [u8], sb: &Superblock) {
    let mut sb = sb.clone();
    sb.fs_clean = 0;
    sb.fs_flags |= FS_NEEDSFSCK;
    let b = sb.encode();
    img[SBLOCK_UFS2 as usize..SBLOCK_UFS2 as usize + b.len()].copy_from_slice(&b);
}

#[test]
fn repair_frees_nothing_under_a_file_and_marks_the_superblock_clean() {
    let dir = tempfile::tempdir().unwrap();
    let p = damaged(dir.path(), |img, sb| {
        let (ino, _) = root_entry(img, sb, "file1");
        let frag = dinode(img, sb, ino).di_db[0];
        edit_cg(img, sb, sb.dtog(frag) as u32, |g, _| g.set_frag_free(sb.dtogd(frag) as u32, true));
        mark_unclean(img, sb);
    });
    repairs(&p, "-y", &["SUPERBLOCK: MARKED CLEAN".into()], |_| {});
}

#[test]
fn repair_rewrites_group_counts_fragment_summary_and_cluster_map() {
    let dir = tempfile::tempdir().unwrap();
    let p = damaged(dir.path(), |img, sb| {
        edit_cg(img, sb, 1, |g, _| {
            g.hdr.cg_cs.cs_nbfree += 1;
            g.hdr.cg_frsum[1] += 1;
        });
        edit_cg(img, sb, 2, |g, raw| {
            let block = (0..g.hdr.cg_ndblk / sb.fs_frag as u32).rev().find(|&b| g.block_free(b)).unwrap();
            raw[g.hdr.cg_clusteroff as usize + block as usize / 8] ^= 1 << (block % 8);
        });
    });
    let want =
        ["CG 1: REWRITTEN (maps, counts and summaries)".into(), "CG 2: REWRITTEN (maps, counts and summaries)".into()];
    repairs(&p, "-y", &want, |_| {});
}

#[test]
fn repair_and_preen_lower_a_link_count_too_high() {
    for flag in ["-y", "-p"] {
        let dir = tempfile::tempdir().unwrap();
        let mut file = 0;
        let p = damaged(dir.path(), |img, sb| {
            file = root_entry(img, sb, "file1").0;
            edit_inode(img, sb, file, |d| d.di_nlink += 1);
        });
        repairs(&p, flag, &[format!("LINK COUNT FILE I={file} COUNT 2 SHOULD BE 1 (ADJUSTED)")], |_| {});
    }
}

/// A free inode of group 1 set in use, with a file's mode and no blocks, and its group's count
/// lowered with it (as the kernel changes them together); the summary area and the superblock
/// keep the old count, which is right again once the inode is cleared: what a create leaves
/// when its name and inode never reached the disk.
#[test]
fn preen_clears_a_leaked_inode_and_its_counts() {
    let dir = tempfile::tempdir().unwrap();
    let mut ino = 0;
    let p = damaged(dir.path(), |img, sb| {
        ino = sb.fs_ipg + 5;
        assert_eq!(dinode(img, sb, ino).di_mode, 0);
        edit_inode(img, sb, ino, |d| {
            d.di_mode = IFREG | 0o644;
            d.di_nlink = 1;
        });
        edit_cg(img, sb, 1, |g, raw| {
            raw[g.hdr.cg_iusedoff as usize] |= 1 << 5;
            g.hdr.cg_cs.cs_nifree -= 1;
        });
    });
    let want = [format!("UNREF FILE I={ino} MODE=100644 SIZE=0 (CLEARED)"), "CG 1: REWRITTEN".into()];
    repairs(&p, "-p", &want, |_| {});
}

/// file1's name removed from the root (its record given to the entry before it): `-y` makes
/// lost+found and names it there; `-p` clears it and frees its fragment.
#[test]
fn an_unreferenced_file_is_reconnected_with_yes_and_cleared_by_preen() {
    for flag in ["-y", "-p"] {
        let dir = tempfile::tempdir().unwrap();
        let mut file = 0;
        let p = damaged(dir.path(), |img, sb| file = unlink_root_entry(img, sb, "file1"));
        if flag == "-y" {
            let want = [format!("UNREF FILE I={file} MODE=100644 SIZE=23 (RECONNECTED to lost+found I=")];
            repairs(&p, flag, &want, |t| {
                let data = t.remove("file1").unwrap();
                t.insert("lost+found/".into(), Vec::new());
                t.insert(format!("lost+found/#{file}"), data);
            });
        } else {
            repairs(&p, flag, &[format!("UNREF FILE I={file} MODE=100644 SIZE=23 (CLEARED)")], |t| {
                t.remove("file1").unwrap();
            });
        }
    }
}

#[test]
fn preen_refuses_a_link_count_too_low_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = damaged(dir.path(), |img, sb| {
        let sub = root_entry(img, sb, "dir1").0;
        edit_inode(img, sb, sub, |d| d.di_nlink -= 1);
    });
    let before = std::fs::read(&p).unwrap();
    let (code, out) = fsck(&p, &["-p"]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("not what a soft-updates crash leaves: LINK COUNT DIR"), "{out}");
    assert!(out.contains("nothing changed: run sufs fsck -y"), "{out}");
    assert!(std::fs::read(&p).unwrap() == before, "the image is untouched");
    // -y raises it to the names counted.
    let (code, out) = fsck(&p, &["-y"]);
    assert_eq!(code, 1, "{out}");
    assert_clean(&p, &["-n"]);
}

/// makefs images of four geometries over a tree of small files, short and long symbolic links,
/// a deep directory, a sparse file and a large one.
#[test]
fn makefs_images_are_clean() {
    if !have_makefs() {
        eprintln!("SKIPPED: makefs(8) is not installed (apt-get install makefs)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let deep = (0..12).fold(src.clone(), |p, i| p.join(format!("d{i}")));
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("bottom"), b"deep\n").unwrap();
    for i in 0..60 {
        std::fs::write(src.join(format!("small{i}")), vec![b'a' + (i % 26) as u8; i * 97 + 1]).unwrap();
    }
    let big: Vec<u8> = (0..400_000u32).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(src.join("d0/big"), &big).unwrap();
    std::os::unix::fs::symlink("small1", src.join("short-link")).unwrap();
    std::os::unix::fs::symlink("x/".repeat(100), src.join("long-link")).unwrap();
    let sparse = std::fs::File::create(src.join("sparse")).unwrap();
    sparse.set_len(3 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, b"tail", 3 << 20).unwrap();
    for (bsize, fsize) in [(4096, 4096), (16384, 2048), (32768, 4096), (65536, 8192)] {
        let p = dir.path().join(format!("img-{bsize}-{fsize}"));
        makefs(&src, &p, bsize, fsize, "24m");
        assert_clean(&p, &[]);
    }
}

#[test]
fn a_fragment_marked_free_under_a_file_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let mut frag = 0;
    let p = damaged(dir.path(), |img, sb| {
        let (ino, _) = root_entry(img, sb, "file1");
        frag = dinode(img, sb, ino).di_db[0];
        edit_cg(img, sb, sb.dtog(frag) as u32, |g, _| g.set_frag_free(sb.dtogd(frag) as u32, true));
    });
    expect(&p, &[(Class::Violation, format!("ALLOCATED FRAG(S) {frag}-{frag} MARKED FREE"))]);
}

#[test]
fn group_counts_and_fragment_summary_are_checked_against_the_maps() {
    let dir = tempfile::tempdir().unwrap();
    let mut was = (0, 0);
    let p = damaged(dir.path(), |img, sb| {
        edit_cg(img, sb, 1, |g, _| {
            was = (g.hdr.cg_cs.cs_nbfree, g.hdr.cg_frsum[1]);
            g.hdr.cg_cs.cs_nbfree += 1;
            g.hdr.cg_frsum[1] += 1;
        })
    });
    let (nbfree, runs1) = was;
    expect(
        &p,
        &[
            (Class::Violation, format!("CG 1: SUMMARY INFORMATION BAD: nbfree {} SHOULD BE {nbfree}", nbfree + 1)),
            (Class::Violation, format!("CG 1: FRAG SUMMARY BAD: RUNS OF 1 FRAGS {} SHOULD BE {runs1}", runs1 + 1)),
            // The summary area and the superblock's totals still hold the old count.
            (Class::Allowed, format!("CG 1: SUMMARY AREA BAD: nbfree {nbfree} SHOULD BE {}", nbfree + 1)),
        ],
    );
}

#[test]
fn a_cluster_map_bit_is_checked_against_the_free_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let mut block = 0;
    let p = damaged(dir.path(), |img, sb| {
        edit_cg(img, sb, 2, |g, raw| {
            block = (0..g.hdr.cg_ndblk / sb.fs_frag as u32).rev().find(|&b| g.block_free(b)).unwrap();
            raw[g.hdr.cg_clusteroff as usize + block as usize / 8] ^= 1 << (block % 8);
        })
    });
    expect(&p, &[(Class::Violation, format!("CG 2: CLUSTER MAP BAD FOR BLOCKS {block}-{block}"))]);
}

#[test]
fn link_counts_too_high_are_allowed_and_too_low_are_violations() {
    let dir = tempfile::tempdir().unwrap();
    let (mut file, mut sub) = (0, 0);
    let p = damaged(dir.path(), |img, sb| {
        file = root_entry(img, sb, "file1").0;
        sub = root_entry(img, sb, "dir1").0;
        edit_inode(img, sb, file, |d| d.di_nlink += 1);
        edit_inode(img, sb, sub, |d| d.di_nlink -= 1);
    });
    expect(
        &p,
        &[
            (Class::Allowed, format!("LINK COUNT FILE I={file} COUNT 2 SHOULD BE 1")),
            (Class::Violation, format!("LINK COUNT DIR I={sub} COUNT 2 SHOULD BE 3")),
        ],
    );
}

#[test]
fn an_entry_naming_a_free_inode_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let (mut free, mut file) = (0, 0);
    let p = damaged(dir.path(), |img, sb| {
        let (ino, at) = root_entry(img, sb, "file1");
        file = ino;
        free = sb.maxino() - 1;
        assert_eq!(dinode(img, sb, free).di_mode, 0);
        img[at..at + 4].copy_from_slice(&free.to_le_bytes());
    });
    expect(
        &p,
        &[
            (Class::Violation, format!("UNALLOCATED I={free} NAME=file1 DIR=2")),
            (Class::Allowed, format!("UNREF FILE I={file} MODE=100644 SIZE=23")),
        ],
    );
}

#[test]
fn a_wrong_block_count_and_a_wrong_inode_check_hash_are_found() {
    let dir = tempfile::tempdir().unwrap();
    let (mut f3, mut f1, mut blocks) = (0, 0, 0);
    let p = damaged(dir.path(), |img, sb| {
        f3 = root_entry(img, sb, "file3").0;
        f1 = root_entry(img, sb, "file1").0;
        edit_inode(img, sb, f3, |d| {
            blocks = d.di_blocks;
            d.di_blocks += 8;
        });
        let off = sb.ino_offset(f1) as usize + 244;
        img[off] ^= 0x55;
    });
    let out =
        expect(&p, &[(Class::Allowed, format!("INCORRECT BLOCK COUNT I={f3} ({} should be {blocks})", blocks + 8))]);
    let line = format!("Violation: INODE CHECK-HASH FAILED I={f1} (");
    assert!(out.lines().any(|l| l.starts_with(&line)), "missing {line:?} in:\n{out}");
}

/// file1's one-fragment tail moved onto file2's: both own it (pass 1 meets the second claim,
/// pass 1b names the first owner), and file1's own fragment is left leaked.
/// The inode of dir1/dir2/dir3/file2, reached through the directories' first blocks.
fn file2(img: &[u8], sb: &Superblock) -> u32 {
    let lookup = |dir: u32, name: &str| {
        let d = dinode(img, sb, dir);
        let data = FileReader::new(sb, img, &d, dir).read_block(0).unwrap();
        DirIter::new(&data, 0, d.di_size, sb.maxino())
            .map(|e| e.unwrap())
            .find(|e| e.name == name.as_bytes())
            .unwrap()
            .d_ino
    };
    lookup(lookup(lookup(root_entry(img, sb, "dir1").0, "dir2"), "dir3"), "file2")
}

#[test]
fn a_tail_fragment_moved_into_another_files_is_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let (mut f1, mut f2, mut frag, mut old) = (0, 0, 0, 0);
    let p = damaged(dir.path(), |img, sb| {
        f1 = root_entry(img, sb, "file1").0;
        f2 = file2(img, sb);
        frag = dinode(img, sb, f2).di_db[0];
        edit_inode(img, sb, f1, |d| {
            old = d.di_db[0];
            d.di_db[0] = frag;
        });
    });
    expect(
        &p,
        &[
            (Class::Violation, format!("{frag} DUP I={f1}")),
            (Class::Violation, format!("{frag} DUP I={f2}")),
            (Class::Allowed, format!("UNALLOCATED FRAG(S) {old}-{old} MARKED USED")),
        ],
    );
}

/// With -y, both owners of a duplicate are cleared (fsck_ffs's pass1b asks CLEAR of each: it
/// cannot tell which pointer is the damaged one), then the entries naming them are removed in
/// the next round; everything else reads as before.
#[test]
fn yes_clears_both_owners_of_a_duplicate_and_their_names() {
    let dir = tempfile::tempdir().unwrap();
    let (mut f1, mut f2, mut frag) = (0, 0, 0);
    let p = damaged(dir.path(), |img, sb| {
        f1 = root_entry(img, sb, "file1").0;
        f2 = file2(img, sb);
        frag = dinode(img, sb, f2).di_db[0];
        edit_inode(img, sb, f1, |d| d.di_db[0] = frag);
    });
    let want = [
        format!("{frag} DUP I={f1} (CLEARED)"),
        format!("{frag} DUP I={f2} (CLEARED)"),
        format!("UNALLOCATED I={f1} NAME=file1 DIR=2 (REMOVED)"),
        format!("UNALLOCATED I={f2} NAME=file2 DIR="),
    ];
    repairs(&p, "-y", &want, |t| {
        t.remove("file1").unwrap();
        t.remove("dir1/dir2/dir3/file2").unwrap();
    });
}

/// With -y, a directory chunk `dircheck` refuses is salvaged (the bad entry becomes free space of
/// the entry before it), and what it named is reconnected to lost+found.
#[test]
fn yes_salvages_a_corrupt_directory_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let (mut name, mut ino, mut at) = (String::new(), 0, 0);
    let p = damaged(dir.path(), |img, sb| {
        // The last entry of the root's first chunk, its name given a '/'.
        let root = dinode(img, sb, UFS_ROOTINO);
        let start = sb.fsb_offset(root.di_db[0]) as usize;
        let data = img[start..start + 512].to_vec();
        let last = DirIter::new(&data, 0, root.di_size, sb.maxino()).map(|e| e.unwrap()).last().unwrap();
        (name, ino, at) = (String::from_utf8(last.name.to_vec()).unwrap(), last.d_ino, last.offset as usize);
        img[start + at + 8] = b'/';
    });
    let want = [
        format!("DIRECTORY CORRUPTED I=2 OFFSET {at}: name holds NUL or '/' (SALVAGED)"),
        "NO lost+found DIRECTORY (CREATED I=".to_string(),
    ];
    repairs(&p, "-y", &want, |t| {
        let moved: Vec<String> =
            t.keys().filter(|k| *k == &name || k.starts_with(&format!("{name}/"))).cloned().collect();
        for k in moved {
            let v = t.remove(&k).unwrap();
            t.insert(format!("lost+found/#{ino}{}", &k[name.len()..]), v);
        }
        t.insert("lost+found/".into(), Vec::new());
    });
}

/// The metadata a fuzzer damages: the superblock, group blocks, the first inode block, the
/// root directory's block and file3's indirect block (byte ranges of the image).
fn metadata_ranges(img: &[u8]) -> Vec<(usize, usize)> {
    let sb = superblock(img);
    let root = dinode(img, &sb, UFS_ROOTINO);
    let (f3, _) = root_entry(img, &sb, "file3");
    let at = |fsb: i64| sb.fsb_offset(fsb) as usize;
    let mut r = vec![(SBLOCK_UFS2 as usize, sb.fs_sbsize as usize)];
    for c in 0..sb.fs_ncg {
        r.push((at(sb.cgtod(c)), sb.fs_cgsize as usize));
    }
    r.push((at(sb.cgimin(0)), sb.fs_bsize as usize));
    r.push((at(root.di_db[0]), 512));
    r.push((at(dinode(img, &sb, f3).di_ib[0]), sb.fs_bsize as usize));
    r.push((at(sb.fs_csaddr), sb.fs_cssize as usize));
    r
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Random bytes written over the metadata: the checker answers a report or an error, in
    /// bounded time, and never panics (from the standard superblock and from group 1's copy).
    #[test]
    fn damaged_metadata_never_panics_the_checker(
        edits in proptest::collection::vec((0usize..16, 0usize..65536, any::<u8>()), 1..12),
    ) {
        static RANGES: std::sync::OnceLock<(Vec<(usize, usize)>, u64)> = std::sync::OnceLock::new();
        let base = image();
        let (ranges, copy) = RANGES.get_or_init(|| {
            let sb = superblock(base);
            (metadata_ranges(base), sb.fsbtodb(sb.cgsblock(1)) as u64)
        });
        let mut img = base.to_vec();
        for (which, at, v) in edits {
            let (start, len) = ranges[which % ranges.len()];
            img[start + at % len] = v;
        }
        let _ = check(&img[..], img.len() as u64, &Options::default());
        let _ = check(&img[..], img.len() as u64, &Options { alternate: Some(*copy) });
    }
}

/// A tail of two fragments starting at the last fragment of a block would cross into the next
/// block: `chkrange` refuses it, and it is not claimed.
#[test]
fn a_tail_fragment_run_crossing_its_block_is_bad() {
    let dir = tempfile::tempdir().unwrap();
    let (mut f1, mut at) = (0, 0);
    let p = damaged(dir.path(), |img, sb| {
        f1 = root_entry(img, sb, "file1").0;
        edit_inode(img, sb, f1, |d| {
            at = sb.blknum(d.di_db[0]) + sb.fs_frag as i64 - 1;
            d.di_size = sb.fs_fsize as u64 + 100;
            d.di_db[0] = at;
        });
    });
    expect(&p, &[(Class::Violation, format!("{at} BAD I={f1} (2 FRAGS)"))]);
}
