//! `sufs fsck` from the command line: exit codes as fsck(8) (0 clean, 1 repaired with nothing
//! left, 4 damage left or preen refused, 8 operational error), preen that refuses to touch an
//! image holding a violation, preen that skips an image marked clean, and -b with the
//! superblock copies newfs writes in every group (fsck_ffs's sector numbers).

use std::path::{Path, PathBuf};
use std::sync::Arc;

mod common;

use common::{ok, sufs};
use sufs_fs::clock::SimClock;
use sufs_fs::dev::{BlockDevice, FileDevice};
use sufs_fs::format::ufs2::{Superblock as Ufs2Sb, SBLOCK_UFS2};
use sufs_fs::format::ROOT_INO;
use sufs_fs::fs::{Fs, MountOptions, Ordering};

/// A 120 MiB image (several cylinder groups) holding a directory of files.
fn image(dir: &Path) -> PathBuf {
    image_of(dir, "120M")
}

/// The library's mount of the image at `p`.
fn lib_mount(p: &Path) -> Fs {
    let (dev, _) = FileDevice::open_image(p, true).unwrap();
    let dev: Arc<dyn BlockDevice> = Arc::new(dev);
    Fs::mount(
        dev,
        MountOptions { ordering: Ordering::Sync, cache_blocks: 256, readonly: false },
        Arc::new(SimClock::new()),
    )
    .unwrap()
}

/// An image made by `sufs mkfs --size SIZE` holding a directory `d` of 50 files, `f{i}` of
/// 3000 bytes `i`.
fn image_of(dir: &Path, size: &str) -> PathBuf {
    let p = dir.join("img");
    ok(&["mkfs", p.to_str().unwrap(), "--size", size]);
    let mut fs = lib_mount(&p);
    let (d, _) = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    for i in 0..50 {
        let (f, _) = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
        fs.write(f, 0, &[i as u8; 3000]).unwrap();
    }
    fs.unmount().unwrap();
    p
}

/// The files `image_of` wrote, read back through a mount.
fn assert_files_intact(p: &Path) {
    let mut fs = lib_mount(p);
    let d = fs.lookup(ROOT_INO, b"d").unwrap().0;
    for i in 0..50 {
        let f = fs.lookup(d, format!("f{i}").as_bytes()).unwrap().0;
        assert_eq!(fs.read(f, 0, 4000).unwrap(), vec![i as u8; 3000], "d/f{i}");
    }
    fs.unmount().unwrap();
}

/// The image's bytes at `off`.
fn read_at(p: &Path, off: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut b = vec![0u8; len];
    std::fs::File::open(p).unwrap().read_exact_at(&mut b, off).unwrap();
    b
}

fn write_at(p: &Path, off: u64, b: &[u8]) {
    use std::os::unix::fs::FileExt;
    std::fs::OpenOptions::new().write(true).open(p).unwrap().write_all_at(b, off).unwrap();
}

/// The standard superblock, decoded without its check hash.
fn superblock(p: &Path) -> Ufs2Sb {
    Ufs2Sb::decode(&read_at(p, SBLOCK_UFS2, 8192), false).unwrap()
}

/// Runs `sufs fsck ARGS IMAGE`: exit code and stdout.
fn fsck(args: &[&str], p: &Path) -> (i32, String) {
    let mut all = vec!["fsck"];
    all.extend_from_slice(args);
    all.push(p.to_str().unwrap());
    let out = sufs(&all);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code().unwrap_or(-1), stdout + &String::from_utf8_lossy(&out.stderr))
}

#[test]
fn exit_codes_preen_and_repair() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    let (code, out) = fsck(&["-p"], &p);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("clean, not checked"), "{out}");
    let (code, out) = fsck(&["-p", "-f"], &p);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 findings"), "{out}");

    // A file's link count lost, in an image not marked clean (as a crash leaves it): a
    // violation. Preen changes nothing and says what to run.
    let f7 = {
        let mut fs = lib_mount(&p);
        let d = fs.lookup(ROOT_INO, b"d").unwrap().0;
        let f7 = fs.lookup(d, b"f7").unwrap().0;
        fs.unmount().unwrap();
        f7
    };
    let mut sb = superblock(&p);
    let at = sb.ino_offset(f7);
    let mut raw = read_at(&p, at, 256);
    raw[2..4].copy_from_slice(&0i16.to_le_bytes());
    let d = sufs_fs::format::ufs2::Dinode::decode(&raw).unwrap();
    write_at(&p, at, &d.encode_for(&sb));
    sb.fs_clean = 0;
    write_at(&p, SBLOCK_UFS2, &sb.encode());
    let before = std::fs::read(&p).unwrap();
    let (code, out) = fsck(&["-p"], &p);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("run sufs fsck -y"), "{out}");
    assert!(std::fs::read(&p).unwrap() == before, "a refused preen changed the image");
    assert_eq!(fsck(&[], &p).0, 4);
    let (code, out) = fsck(&["-y"], &p);
    assert_eq!(code, 1, "{out}");
    let (code, out) = fsck(&[], &p);
    assert_eq!(code, 0, "a second fsck finds more:\n{out}");
    assert!(out.contains("50 files, 3 directories"), "{out}");
    assert_eq!(fsck(&["-p"], &p).0, 0);
    assert_files_intact(&p);
}

/// The standard superblock zeroed, or one byte of its counts changed (its check hash then
/// fails): fsck finds no file system, or the bad hash; `-y -b` with group 1's copy (in
/// fsck_ffs's sectors, as newfs printed them) writes the standard superblock back from the
/// copy, sets its counts, and leaves every file as it was; `-p -b` writes nothing.
#[test]
fn the_standard_superblock_is_recovered_from_a_copy() {
    for what in ["zeroed", "check hash"] {
        let dir = tempfile::tempdir().unwrap();
        let p = image(dir.path());
        let sb = superblock(&p);
        let copy = sb.fsbtodb(sb.cgsblock(1)).to_string();
        match what {
            "zeroed" => write_at(&p, SBLOCK_UFS2, &[0u8; 8192]),
            _ => {
                let mut b = read_at(&p, SBLOCK_UFS2 + 1016, 1);
                b[0] ^= 0x10; // cs_nbfree
                write_at(&p, SBLOCK_UFS2 + 1016, &b);
            }
        }
        let (code, out) = fsck(&[], &p);
        assert_eq!(code, if what == "zeroed" { 8 } else { 4 }, "{what}: {out}");
        let before = std::fs::read(&p).unwrap();
        let (code, out) = fsck(&["-p", "-f", "-b", &copy], &p);
        assert_eq!(code, 4, "{what}: {out}");
        assert!(std::fs::read(&p).unwrap() == before, "{what}: preen with -b wrote");
        let (code, out) = fsck(&["-y", "-b", &copy], &p);
        assert_eq!(code, 1, "{what}: {out}");
        assert!(out.contains(&format!("UPDATE STANDARD SUPERBLOCK FROM THE COPY AT SECTOR {copy}")), "{what}: {out}");
        let (code, out) = fsck(&["-p"], &p);
        assert_eq!(code, 0, "{what}: marked clean: {out}");
        let (code, out) = fsck(&["-f"], &p);
        assert_eq!(code, 0, "{what}: {out}");
        assert!(out.contains("0 findings"), "{what}: {out}");
        assert_files_intact(&p);
    }
}
