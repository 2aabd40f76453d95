//! `sufs growfs` on UFS2 images (`format::ufs2::growfs`, FreeBSD's growfs(8)): images made by
//! `sufs mkfs --ufs2` in several geometries, by makefs(8), and by FreeBSD, grown by less than
//! a group (the last group extended) and by several groups (new groups added, the summary area
//! moved when it outgrows its fragments). After each grow the checker finds nothing, dumpfs
//! shows the new size, a read-write mount fills the new space, df grows by what was added less
//! the new groups' metadata, the old files read back unchanged and fuse-ufs reads the image
//! where it reads the geometry. Growing through a device that stops writing after N writes, for
//! every N, leaves the old or the new file system, with nothing `fsck -p` cannot repair.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use common::fuse::{external_tool, fuse_available, mount_fg};
use common::ufs2::{brief, freebsd_image, have_makefs, makefs_with, statvfs, walk, FuseUfs, Node};
use common::{ok, pattern, sufs};
use sufs_fs::format::ufs2::growfs::{self, GrowDevice, GrowError};
use sufs_fs::format::ufs2::newfs::{newfs, NewfsOptions};
use sufs_fs::format::ufs2::{ReadAt, Superblock};
use sufs_fs::fsck;

/// The superblock of the image file `img`.
fn superblock(img: &Path) -> Superblock {
    let f = fs::File::open(img).unwrap();
    Superblock::search(|off, b| ReadAt::read_exact_at(&f, b, off)).unwrap().1
}

/// The checker must find nothing at all.
fn assert_fsck_clean(img: &Path, what: &str) {
    let out = sufs(&["fsck", "-n", img.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains(" 0 findings"), "{what}: fsck -n\n{text}");
}

/// The file system's size and the bytes available to a user, as df shows them through a
/// read-only mount.
fn df(img: &Path, scratch: &Path) -> (u64, u64) {
    let mnt = scratch.join("df");
    let m = mount_fg(img, &mnt, &["-o", "ro"]);
    let st = statvfs(&mnt);
    m.umount();
    (st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)
}

/// Grows `img` to `size` bytes through the command and checks the result against the
/// superblocks before and after: fsck clean, dumpfs's size and groups, and `fs_dsize` grown by
/// what was added less the new groups' metadata and the summary area's growth.
fn grow(img: &Path, size: u64, what: &str) -> (Superblock, Superblock) {
    let old = superblock(img);
    let out = ok(&["growfs", img.to_str().unwrap(), "--size", &size.to_string()]);
    let new = superblock(img);
    assert!(out.contains(&format!("to {} fragments", new.fs_size)), "{what}: {out}");
    assert_fsck_clean(img, what);
    let shown = ok(&["dumpfs", img.to_str().unwrap()]);
    assert!(shown.contains(&format!("size      {} fragments", new.fs_size)), "{what}: dumpfs\n{shown}");
    assert!(shown.contains(&format!("groups    {} of", new.fs_ncg)), "{what}: dumpfs\n{shown}");
    let fsize = new.fs_fsize as i64;
    let asked = size as i64 / fsize;
    assert!(
        new.fs_size == asked || (new.fs_size % new.fs_fpg as i64 == 0 && asked - new.fs_size <= new.fs_dblkno as i64),
        "{what}"
    );
    let meta = (new.fs_ncg - old.fs_ncg) as i64 * (new.fs_dblkno - new.fs_sblkno) as i64;
    let cs = |sb: &Superblock| (sb.fs_cssize as i64 + fsize - 1) / fsize;
    assert_eq!(
        new.fs_dsize - old.fs_dsize,
        new.fs_size - old.fs_size - meta - (cs(&new) - cs(&old)),
        "{what}: fs_dsize"
    );
    assert_eq!(new.fs_providersize, (size / fsize as u64) as i64, "{what}: fs_providersize");
    (old, new)
}

/// Grows `img` to `size` and checks it through the mounts: df grows by `fs_dsize`'s growth, a
/// read-write mount writes more than the old file system had free (so into the new groups),
/// every file that was there reads back unchanged, and fuse-ufs (when given) reads what sufs
/// reads.
fn grow_and_use(img: &Path, size: u64, scratch: &Path, what: &str, fuse_ufs: Option<&Path>) {
    let mnt = scratch.join("mnt");
    let m = mount_fg(img, &mnt, &["-o", "ro"]);
    let before = walk(&mnt);
    m.umount();
    let (df_old, old_free) = df(img, scratch);
    let (old, new) = grow(img, size, what);
    let (df_new, new_free) = df(img, scratch);
    let fsize = new.fs_fsize as u64;
    assert_eq!(df_new - df_old, (new.fs_dsize - old.fs_dsize) as u64 * fsize, "{what}: df");
    assert!(new_free > old_free, "{what}: {new_free} bytes available, {old_free} before");

    // More than there was room for before: into the new space.
    let m = mount_fg(img, &mnt, &[]);
    let fill = old_free + (new_free - old_free) / 2;
    let chunk = pattern(3, 1 << 20);
    let dir = format!("grown-{size}");
    fs::create_dir(mnt.join(&dir)).unwrap();
    let mut written = 0u64;
    for i in 0.. {
        if written >= fill {
            break;
        }
        let n = (fill - written).min(8 << 20);
        let data: Vec<u8> = chunk.iter().cycle().take(n as usize).copied().collect();
        fs::write(mnt.join(format!("{dir}/f{i}")), &data)
            .unwrap_or_else(|e| panic!("{what}: writing {written} of {fill}: {e}"));
        written += n;
    }
    let after = walk(&mnt);
    m.umount();
    assert!(written > old_free, "{what}: wrote {written}, more than the old {old_free} free");
    for (name, w) in &before {
        let g = &after[name];
        let same = (g.mode, g.size, g.nlink, &g.data) == (w.mode, w.size, w.nlink, &w.data);
        assert!(same, "{what} {name}: now {}\nthen {}", brief(g), brief(w));
    }
    assert_fsck_clean(img, &format!("{what}, filled"));
    if let Some(tool) = fuse_ufs {
        let dir = scratch.join("fuse-ufs");
        let theirs = {
            let _m = FuseUfs::mount(tool, img, &dir);
            walk(&dir)
        };
        let data = |t: &BTreeMap<String, Node>| {
            t.iter().map(|(k, n)| (k.clone(), (n.size, n.data.clone()))).collect::<Vec<_>>()
        };
        assert!(data(&theirs) == data(&after), "{what}: fuse-ufs reads another tree");
    }
}

/// Files put on a fresh image before it grows: the old files growfs must keep.
fn populate(img: &Path, scratch: &Path) {
    let mnt = scratch.join("mnt");
    let m = mount_fg(img, &mnt, &[]);
    fs::create_dir(mnt.join("old")).unwrap();
    for (i, len) in [1usize, 700, 4097, 40_000, 1_000_000].iter().enumerate() {
        fs::write(mnt.join(format!("old/f{i}")), pattern(i as u64, *len)).unwrap();
    }
    m.umount();
}

/// A tree for makefs small enough for an image of a few MiB: fragment tails of several sizes,
/// a directory of many names, a link.
fn small_tree(src: &Path) {
    fs::create_dir_all(src.join("a/b")).unwrap();
    for (i, len) in [1usize, 511, 4097, 9000, 100_000, 700_000].iter().enumerate() {
        fs::write(src.join(format!("f{i}")), pattern(i as u64, *len)).unwrap();
    }
    for i in 0..200 {
        fs::write(src.join(format!("a/name-{i:04}")), format!("file {i}\n")).unwrap();
    }
    std::os::unix::fs::symlink("a/b", src.join("link")).unwrap();
}

/// A scratch directory holding `small_tree` (its `src`) for makefs, or None without makefs(8).
fn makefs_source() -> Option<(tempfile::TempDir, PathBuf)> {
    if !have_makefs() {
        eprintln!("SKIPPED: makefs(8) is not installed (apt-get install makefs)");
        return None;
    }
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    small_tree(&src);
    Some((t, src))
}

/// The room left in the last group of `img`, in bytes.
fn last_group_room(img: &Path) -> u64 {
    let sb = superblock(img);
    ((sb.cgbase(sb.fs_ncg - 1) + sb.fs_fpg as i64 - sb.fs_size) * sb.fs_fsize as i64) as u64
}

/// For a test through mounts: fuse-ufs (if installed) and a scratch directory, or None without
/// FUSE.
fn mounts() -> Option<(Option<PathBuf>, tempfile::TempDir)> {
    fuse_available().then(|| (external_tool("fuse-ufs", "cargo install fuse-ufs"), tempfile::tempdir().unwrap()))
}

#[test]
fn newfs_images_of_several_geometries_grow_within_their_last_group_and_by_groups() {
    let Some((tool, t)) = mounts() else { return };
    // fuse-ufs reads superblocks of one fragment only (not 512- or 2048-byte fragments).
    for (bsize, fsize, theirs) in [(32768, 4096, true), (4096, 4096, true), (16384, 2048, false), (4096, 512, false)] {
        let what = format!("newfs {bsize}/{fsize}");
        let img = t.path().join(format!("img-{bsize}-{fsize}"));
        let (b, f) = (bsize.to_string(), fsize.to_string());
        ok(&["mkfs", "--ufs2", img.to_str().unwrap(), "--size", "25M", "-b", &b, "-f", &f]);
        populate(&img, t.path());
        // Several groups, the last of them a third of a group (newfs's last group is nearly
        // whole: this one grows by the few fragments it lacks).
        let sb = superblock(&img);
        let group = sb.fs_fpg as u64 * sb.fs_fsize as u64;
        let big = fs::metadata(&img).unwrap().len() + 3 * group + group / 3;
        let theirs = tool.as_deref().filter(|_| theirs);
        grow_and_use(&img, big, t.path(), &format!("{what}, by groups"), theirs);
        let ncg = superblock(&img).fs_ncg;
        assert!(ncg >= sb.fs_ncg + 3, "{what}");
        // Less than a group: the last group grows by half its room, no group is added.
        let room = last_group_room(&img);
        assert!(room > 2 * bsize as u64, "{what}: the last group is short by {room} bytes");
        let small = fs::metadata(&img).unwrap().len() + room / 2 / bsize as u64 * bsize as u64;
        grow_and_use(&img, small, t.path(), &format!("{what}, within the last group"), theirs);
        assert_eq!(superblock(&img).fs_ncg, ncg, "{what}");
        fs::remove_file(&img).unwrap();
    }
}

#[test]
fn makefs_images_grow_and_a_summary_area_that_outgrows_its_place_moves() {
    if !fuse_available() {
        return;
    }
    let Some((t, src)) = makefs_source() else { return };
    // Groups of 256 fragments of 512 bytes: 64 groups, a summary area of two fragments, which
    // 192 groups outgrow.
    for (opts, size, to) in [
        ("bsize=4096,fsize=512,maxbpcg=256,density=8192", "8m", 24u64 << 20),
        ("bsize=32768,fsize=4096,density=16384", "60m", 130 << 20),
        ("bsize=16384,fsize=2048,density=16384", "60m", 61 << 20),
    ] {
        let what = format!("makefs {opts}");
        let img = t.path().join("makefs.img");
        makefs_with(&src, &img, opts, size);
        let old = superblock(&img);
        grow_and_use(&img, to, t.path(), &what, None);
        let new = superblock(&img);
        if opts.contains("maxbpcg") {
            assert!(new.fs_cssize > old.fs_cssize && new.fs_csaddr != old.fs_csaddr, "{what}: the summary area moved");
            assert!(new.fs_csaddr >= old.fs_size, "{what}: into a new group");
        }
        fs::remove_file(&img).unwrap();
    }
}

#[test]
fn the_freebsd_image_grows_and_fuse_ufs_reads_it() {
    let Some((tool, t)) = mounts() else { return };
    let img = t.path().join("freebsd.img");
    fs::write(&img, freebsd_image()).unwrap();
    let room = last_group_room(&img);
    let len = fs::metadata(&img).unwrap().len();
    assert!(room > 65536, "the fixture's last group is short");
    grow_and_use(
        &img,
        len + room / 2 / 32768 * 32768,
        t.path(),
        "the FreeBSD image, within its last group",
        tool.as_deref(),
    );
    grow_and_use(&img, 12 << 20, t.path(), "the FreeBSD image, by groups", tool.as_deref());
}

#[test]
fn growfs_refuses_what_it_cannot_grow() {
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("i.img");
    ok(&["mkfs", "--ufs2", img.to_str().unwrap(), "--size", "40M"]);
    let sb = superblock(&img);
    let i = img.to_str().unwrap();
    let out = sufs(&["growfs", i, "--size", "40M"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("not larger"), "{out:?}");
    // A whole group and the metadata of one more: the last is left out, nothing added.
    let group = sb.fs_fpg as u64 * sb.fs_fsize as u64;
    let len = fs::metadata(&img).unwrap().len();
    if last_group_room(&img) == 0 {
        let out = sufs(&["growfs", i, "--size", &(len + sb.fs_dblkno as u64 * sb.fs_fsize as u64).to_string()]);
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("too little"), "{out:?}");
        assert_eq!(fs::metadata(&img).unwrap().len(), len, "the file is set back");
    }
    // Not clean: refused.
    let mut bytes = fs::read(&img).unwrap();
    let (loc, mut dirty) = Superblock::search(|off, b| ReadAt::read_exact_at(bytes.as_slice(), b, off)).unwrap();
    dirty.fs_clean = 0;
    let enc = dirty.encode();
    bytes[loc as usize..loc as usize + enc.len()].copy_from_slice(&enc);
    fs::write(&img, &bytes).unwrap();
    let out = sufs(&["growfs", i, "--size", &(len + 2 * group).to_string()]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("not clean"), "{out:?}");
    assert_eq!(fs::metadata(&img).unwrap().len(), len, "the file is set back");
}

/// An image in memory that takes `left` writes, then fails every write.
struct Stopping {
    img: Vec<u8>,
    left: usize,
}

impl GrowDevice for Stopping {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.img.read_at(buf, off)
    }
    fn write_at(&mut self, buf: &[u8], off: u64) -> io::Result<()> {
        if self.left == 0 {
            return Err(io::Error::other("the device stopped writing"));
        }
        self.left -= 1;
        self.img.write_at(buf, off)
    }
}

/// Grows `base` (a file system on the first part of the image) to the whole image through a
/// device that stops after N writes, for every N: each image left is the old file system or
/// the new one, with no violation, and what it holds besides (an interrupted growfs's header,
/// a summary that is stale, the old summary area leaked) `fsck -p` repairs to nothing.
fn crash_every_write(base: Vec<u8>, what: &str) -> usize {
    let len = base.len() as u64;
    let old = Superblock::search(|off, b| ReadAt::read_exact_at(base.as_slice(), b, off)).unwrap().1;
    let mut whole = Stopping { img: base.clone(), left: usize::MAX };
    let g = growfs::grow(&mut whole, len, len, 1_700_000_000).unwrap();
    let writes = usize::MAX - whole.left;
    let t = tempfile::tempdir().unwrap();
    let mut mixed = 0;
    for n in 0..=writes {
        let mut dev = Stopping { img: base.clone(), left: n };
        let r = growfs::grow(&mut dev, len, len, 1_700_000_000);
        assert_eq!(r.is_ok(), n == writes, "{what}: {n} of {writes} writes: {r:?}");
        assert!(r.is_ok() || matches!(r, Err(GrowError::Io(_))), "{what}: {n} writes");
        let report = fsck::ufs2::check(dev.img.as_slice(), len, &Default::default()).unwrap();
        let shown: Vec<String> = report.findings.iter().map(|f| format!("{:?}: {f}", f.class())).collect();
        assert_eq!(report.violations(), 0, "{what}: after {n} of {writes} writes:\n{}", shown.join("\n"));
        let size = Superblock::search(|off, b| ReadAt::read_exact_at(dev.img.as_slice(), b, off)).unwrap().1.fs_size;
        assert!([old.fs_size, g.new.fs_size].contains(&size), "{what}: after {n} writes a third size {size}");
        if n == 0 || n == writes {
            assert!(report.findings.is_empty(), "{what}: after {n} writes:\n{}", shown.join("\n"));
        }
        if !report.findings.is_empty() {
            mixed += 1;
            let path = t.path().join("crashed.img");
            fs::write(&path, &dev.img).unwrap();
            let f = fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
            let out = fsck::ufs2::repair(&f, len, &Default::default(), fsck::ufs2::RepairMode::Preen).unwrap();
            assert!(out.refused.is_none(), "{what}: after {n} writes: {:?}", out.refused);
            assert!(out.after.is_some_and(|a| a.findings.is_empty()), "{what}: after {n} writes, repaired");
            let back = superblock(&path);
            assert_eq!(back.fs_size, size, "{what}: repair keeps the file system it found");
        }
    }
    assert!(writes > 3, "{what}: {writes} writes");
    eprintln!("{what}: {writes} writes; {mixed} of the {} states hold allowed findings", writes + 1);
    mixed
}

/// A newfs image of `size` bytes at the start of an image of `total` bytes.
fn newfs_image(size: u64, total: u64, bsize: i32, fsize: i32) -> Vec<u8> {
    let mut img = vec![0u8; total as usize];
    let o =
        NewfsOptions { bsize: Some(bsize), fsize: Some(fsize), time: 1, regression: true, ..NewfsOptions::default() };
    newfs(size, &o, |off, b| {
        img[off as usize..off as usize + b.len()].copy_from_slice(b);
        Ok(())
    })
    .unwrap();
    img
}

#[test]
fn a_growfs_cut_short_after_any_write_leaves_the_old_or_the_new_file_system() {
    // The last group extended and groups added.
    let mixed = crash_every_write(newfs_image(21 << 20, 50 << 20, 32768, 4096), "newfs 32768/4096");
    assert!(mixed > 0, "the extended header before the superblock is seen");
    crash_every_write(newfs_image(21 << 20, 22 << 20, 4096, 512), "newfs 4096/512, within the last group");
    crash_every_write(newfs_image(20 << 20, 47 << 20, 4096, 4096), "newfs 4096/4096");
}

#[test]
fn a_summary_area_move_cut_short_after_any_write_leaves_the_old_or_the_new_file_system() {
    let Some((t, src)) = makefs_source() else { return };
    let img = t.path().join("m.img");
    makefs_with(&src, &img, "bsize=4096,fsize=512,maxbpcg=256,density=8192", "8m");
    let mut base = fs::read(&img).unwrap();
    base.resize(24 << 20, 0);
    crash_every_write(base, "makefs with small groups");
}

/// An interrupted growfs's one mixed state through the commands: `fsck -n` reports it (exit 4,
/// allowed), `fsck -p` cuts the header back (exit 1), the image is then the old file system,
/// clean, and growfs runs again on the longer file.
#[test]
fn an_interrupted_growfs_through_the_commands() {
    let total = 50u64 << 20;
    let base = newfs_image(21 << 20, total, 32768, 4096);
    let old = Superblock::search(|off, b| ReadAt::read_exact_at(base.as_slice(), b, off)).unwrap().1;
    let mixed = (1..)
        .map(|n| {
            let mut dev = Stopping { img: base.clone(), left: n };
            growfs::grow(&mut dev, total, total, 1_700_000_000).unwrap_err();
            dev.img
        })
        .find(|img| {
            let r = fsck::ufs2::check(img.as_slice(), total, &Default::default()).unwrap();
            r.findings.iter().any(|f| matches!(f, fsck::ufs2::Finding::GrowInterrupted { .. }))
        })
        .unwrap();
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("i.img");
    fs::write(&img, &mixed).unwrap();
    let i = img.to_str().unwrap();
    let out = sufs(&["fsck", "-n", i]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(text.contains("(AN INTERRUPTED GROWFS)") && text.contains(" 0 violations"), "{text}");
    assert_eq!(sufs(&["fsck", "-p", i]).status.code(), Some(1));
    assert_fsck_clean(&img, "repaired");
    assert_eq!(superblock(&img).fs_size, old.fs_size, "repair keeps the old file system");
    ok(&["growfs", i, "--size", &total.to_string()]);
    assert_fsck_clean(&img, "grown again");
    assert_eq!(superblock(&img).fs_size as u64 * 4096, total);
}
