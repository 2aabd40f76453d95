//! FFS snapshots from the command line, as a user drives them: `sufs snapshot` on a mounted file
//! system (through its control channel) while files change, the frozen file system read back
//! through a read-only FUSE mount and through `export` (which `sufs fsck` passes, holding exactly
//! the files and bytes of the moment), then the same on the unmounted image.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;

mod common;

use common::fuse::{fuse_available, mkfs_and_mount};
use common::{ok, pattern, sufs};

/// Every file (contents) and directory (None) under `root`, but `/.snap`.
fn tree(root: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == ".snap" {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                out.insert(rel, None);
                stack.push(p);
            } else {
                out.insert(rel, Some(fs::read(&p).unwrap()));
            }
        }
    }
    out
}

struct Unmount<'a>(&'a Path, bool);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        let out = if self.1 {
            sufs(&["umount", self.0.to_str().unwrap()])
        } else {
            Command::new("umount").arg(self.0).output().unwrap()
        };
        if !out.status.success() {
            let _ = Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
}

fn mount_tree(img: &str, name: &str, at: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    fs::create_dir_all(at).unwrap();
    ok(&["snapshot", "--on", img, "mount", name, at.to_str().unwrap()]);
    let guard = Unmount(at, false);
    let t = tree(at);
    let eperm = fs::write(at.join("x"), b"x").unwrap_err();
    assert_eq!(eperm.raw_os_error(), Some(libc::EROFS));
    ok(&["umount", at.to_str().unwrap()]);
    drop(guard);
    // The daemon lets go of the image once unmounted.
    for _ in 0..100 {
        if fs::File::open(img).unwrap().try_lock().is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    t
}

#[test]
fn snapshots_of_a_mounted_and_an_unmounted_file_system() {
    if !fuse_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, mnt) = mkfs_and_mount(dir.path());
    let (img_s, mnt_s) = (img.to_str().unwrap(), mnt.to_str().unwrap());
    let guard = Unmount(&mnt, true);
    fs::create_dir(mnt.join("d")).unwrap();
    for i in 0..30u64 {
        fs::write(mnt.join(format!("d/f{i}")), pattern(i, 100 + i as usize * 3000)).unwrap();
    }
    fs::write(mnt.join("big"), pattern(99, 3 << 20)).unwrap();
    let before = tree(&mnt);
    let out = ok(&["snapshot", "--on", mnt_s, "create", "s1"]);
    assert!(out.contains("s1: inode"), "{out}");
    // Writers go on: overwrite, remove, create, truncate.
    fs::write(mnt.join("big"), pattern(7, 1 << 20)).unwrap();
    for i in 0..10 {
        fs::remove_file(mnt.join(format!("d/f{i}"))).unwrap();
    }
    fs::write(mnt.join("d/new"), pattern(5, 50_000)).unwrap();
    let after = tree(&mnt);
    assert_ne!(before, after);
    let list = ok(&["snapshot", "--on", img_s, "list"]);
    assert!(list.starts_with("s1: inode"), "{list}");
    // The snapshot file reads but refuses changes. It is FreeBSD's: the file system's bytes,
    // then the block hints list (its length in 8-byte entries, itself counted, first).
    let snapfile = mnt.join(".snap/s1");
    let len = fs::metadata(&snapfile).unwrap().len();
    assert!(len > 64 << 20 && (len - (64 << 20)) % 8 == 0, "{len}");
    let mut first = [0u8; 8];
    std::os::unix::fs::FileExt::read_exact_at(&fs::File::open(&snapfile).unwrap(), &mut first, 64 << 20).unwrap();
    assert_eq!(u64::from_le_bytes(first), (len - (64 << 20)) / 8, "the hints list fills the file's end");
    let e =
        fs::OpenOptions::new().write(true).open(&snapfile).and_then(|mut f| std::io::Write::write_all(&mut f, b"x"));
    assert!(e.is_err());
    assert_eq!(fs::remove_file(&snapfile).unwrap_err().raw_os_error(), Some(libc::EPERM));
    let e = sufs(&["snapshot", "--on", mnt_s, "create", "s1"]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("file exists"), "{e:?}");
    // Export of the mounted file system's snapshot: fsck passes, the files are those of then.
    let out1 = dir.path().join("out1.img");
    ok(&["snapshot", "--on", mnt_s, "export", "s1", out1.to_str().unwrap()]);
    assert_eq!(fs::metadata(&out1).unwrap().len(), 64 << 20, "an export is the file system, not the snapshot file");
    let f = ok(&["fsck", out1.to_str().unwrap()]);
    assert!(f.contains(" 0 findings"), "{f}");
    let e = sufs(&["snapshot", "--on", out1.to_str().unwrap(), "mount", "s1", dir.path().to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("not a snapshot"), "expunged in itself: {e:?}");
    let emnt = dir.path().join("emnt");
    ok(&["mount", out1.to_str().unwrap(), emnt.to_str().unwrap(), "--ro"]);
    let eguard = Unmount(&emnt, true);
    assert_eq!(tree(&emnt), before, "the export holds the files and bytes of the moment");
    drop(eguard);
    drop(guard);
    assert_eq!(tree(&mnt), BTreeMap::new());
    let f = ok(&["fsck", img_s]);
    assert!(f.contains(" 0 findings"), "{f}");
    // Unmounted: the snapshot is still there, mounts read-only and exports the same bytes.
    assert!(ok(&["snapshot", "--on", img_s, "list"]).starts_with("s1:"));
    assert_eq!(mount_tree(img_s, "s1", &dir.path().join("snapmnt")), before);
    let out2 = dir.path().join("out2.img");
    ok(&["snapshot", "--on", img_s, "export", "s1", out2.to_str().unwrap()]);
    assert!(fs::read(&out1).unwrap() == fs::read(&out2).unwrap(), "both exports hold the same bytes");
    // The live tree is today's.
    ok(&["mount", img_s, mnt_s]);
    let guard = Unmount(&mnt, true);
    assert_eq!(tree(&mnt), after);
    drop(guard);
    ok(&["snapshot", "--on", img_s, "create", "s2"]);
    assert!(ok(&["snapshot", "--on", img_s, "delete", "s1"]).contains("blocks released"));
    assert_eq!(ok(&["snapshot", "--on", img_s, "list"]).lines().count(), 1);
    ok(&["snapshot", "--on", img_s, "delete", "s2"]);
    let f = ok(&["fsck", img_s]);
    assert!(f.contains(" 0 findings"), "{f}");
    let e = sufs(&["snapshot", "--on", img_s, "delete", "nope"]);
    assert!(!e.status.success());
}

/// What `damage` did: the leaked block's fragments, the inode with two links too many, and the
/// inode whose name is gone.
struct Damage {
    leaked: (i64, i64),
    a: u32,
    orphan: u32,
}

/// Damage a crash could leave, made in the bytes of the unmounted UFS2 image: "a" counts two
/// links too many, "orphan" loses its name (its record given to the entry before it), and a
/// free block of the last group is marked used, the group's counts with it (as the kernel
/// changes them together; the summaries keep the old count, right again once it is freed).
/// Only the pages changed are written back: the image stays sparse.
fn damage(img: &Path) -> Damage {
    use common::ufs2::{edit_inode, root_entry, superblock, unlink_root_entry};
    use std::os::unix::fs::FileExt;
    use sufs_fs::format::ufs2::Cg;
    let before = fs::read(img).unwrap();
    let mut bytes = before.clone();
    let sb = superblock(&bytes);
    let (a, _) = root_entry(&bytes, &sb, "a");
    edit_inode(&mut bytes, &sb, a, |d| d.di_nlink += 2);
    let orphan = unlink_root_entry(&mut bytes, &sb, "orphan");
    let c = sb.fs_ncg - 1;
    let (off, len, frag) = (sb.fsb_offset(sb.cgtod(c)) as usize, sb.fs_cgsize as usize, sb.fs_frag as u32);
    let mut g = Cg::decode(&bytes[off..off + len], &sb, c, true).unwrap();
    let b = (0..g.hdr.cg_ndblk / frag).rev().find(|&b| g.block_free(b)).expect("a free block in the last group");
    g.set_frags_free(b * frag, frag, false);
    g.recount();
    bytes[off..off + len].copy_from_slice(&g.encode(&sb));
    let f = fs::OpenOptions::new().write(true).open(img).unwrap();
    for (i, (new, old)) in bytes.chunks(4096).zip(before.chunks(4096)).enumerate() {
        if new != old {
            f.write_all_at(new, i as u64 * 4096).unwrap();
        }
    }
    let first = sb.cgbase(c) + (b * frag) as i64;
    Damage { leaked: (first, first + frag as i64 - 1), a, orphan }
}

#[test]
fn background_fsck_repairs_a_mounted_file_system_while_a_writer_works() {
    if !fuse_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, mnt) = mkfs_and_mount(dir.path());
    let (img_s, mnt_s) = (img.to_str().unwrap(), mnt.to_str().unwrap());
    let guard = Unmount(&mnt, true);
    fs::write(mnt.join("a"), pattern(1, 10_000)).unwrap();
    fs::write(mnt.join("orphan"), [3u8; 20_000]).unwrap();
    drop(guard);
    let Damage { leaked: (first, last), a, orphan } = damage(&img);
    let f = sufs(&["fsck", img_s]);
    let text = String::from_utf8_lossy(&f.stdout);
    for want in [
        format!("LINK COUNT FILE I={a} COUNT 3 SHOULD BE 1"),
        format!("UNREF FILE I={orphan} MODE=100644 SIZE=20000"),
        format!("UNALLOCATED FRAG(S) {first}-{last} MARKED USED"),
    ] {
        assert!(text.contains(&want), "{want}: {text}");
    }
    // Instant restart: mount without fsck; a writer keeps writing during the background check.
    ok(&["mount", img_s, mnt_s]);
    let guard = Unmount(&mnt, true);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (m2, s2) = (mnt.clone(), stop.clone());
    let writer = std::thread::spawn(move || {
        let mut n = 0u64;
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            fs::write(m2.join(format!("w{}", n % 20)), pattern(n, 30_000)).unwrap();
            n += 1;
        }
        n
    });
    let out = sufs(&["fsck", "--background", mnt_s]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}{}", String::from_utf8_lossy(&out.stderr));
    // The leaked block's fragments given back as one whole block, the orphan's inode freed,
    // the link count lowered.
    let freed =
        format!(" {} fragments freed (1 whole blocks), 1 inodes freed, 1 link counts lowered,", last - first + 1);
    assert!(text.contains(&freed) && text.contains(" 0 refused"), "{text}");
    assert!(writes > 0);
    assert!(snap_dir_is_empty(&mnt), "its snapshot is gone");
    // A second run finds nothing.
    let out = sufs(&["fsck", "--background", img_s]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    drop(guard);
    let f = ok(&["fsck", img_s]);
    assert!(f.contains(" 0 findings"), "{f}");
}

/// Whether `/.snap` under the mount `mnt` holds nothing. On UFS2 it is newfs's, kept when the
/// last snapshot goes, as FreeBSD keeps it.
fn snap_dir_is_empty(mnt: &Path) -> bool {
    fs::read_dir(mnt.join(".snap")).unwrap().next().is_none()
}

/// A background fsck of a file system too full for its snapshot is not started: it says why,
/// and leaves no snapshot behind; a snapshot made later is made and deleted as ever.
#[test]
fn background_fsck_without_room_for_its_snapshot_leaves_nothing_behind() {
    use std::io::Write;
    if !fuse_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, mnt) = mkfs_and_mount(dir.path());
    let (img_s, mnt_s) = (img.to_str().unwrap(), mnt.to_str().unwrap());
    let guard = Unmount(&mnt, true);
    // Fill the file system, then give back two blocks: room for the snapshot's inode, not for
    // its map and first copies (a block each, whole blocks: with the fragments left free by
    // the fill there are more free fragments than the blocks the snapshot needs).
    let mut f = fs::File::create(mnt.join("fill")).unwrap();
    let chunk = vec![5u8; 1 << 20];
    while f.write_all(&chunk).and_then(|_| f.sync_all()).is_ok() {}
    drop(f);
    let len = fs::metadata(mnt.join("fill")).unwrap().len();
    let bsize = common::ufs2::statvfs(&mnt).f_bsize;
    fs::OpenOptions::new().write(true).open(mnt.join("fill")).unwrap().set_len(len - 2 * bsize).unwrap();
    let out = sufs(&["fsck", "--background", mnt_s]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("background fsck not started") && text.contains("no room for a snapshot"), "{text}");
    assert!(snap_dir_is_empty(&mnt), "nothing left behind: {text}");
    assert!(ok(&["snapshot", "--on", mnt_s, "list"]).trim().is_empty());
    // With room again, a snapshot is made, and its deletion leaves /.snap as it was.
    fs::remove_file(mnt.join("fill")).unwrap();
    ok(&["snapshot", "--on", mnt_s, "create", "s"]);
    assert!(mnt.join(".snap/s").exists());
    ok(&["snapshot", "--on", mnt_s, "delete", "s"]);
    assert!(snap_dir_is_empty(&mnt));
    drop(guard);
    let f = ok(&["fsck", img_s]);
    assert!(f.contains(" 0 findings"), "{f}");
}

/// `sufs fsck -n` of a UFS2 image finds nothing.
fn ufs2_clean(img: &str, when: &str) {
    let f = ok(&["fsck", "-n", img]);
    assert!(f.contains(" 0 findings"), "{when}: {f}");
}

/// FreeBSD's snapshots on UFS2 images with and without fragments: taken through the mount and
/// offline, listed, read back (export and a read-only mount hold the tree of the moment),
/// deleted; the UFS2 checker finds nothing after each step, and fuse-ufs (where it reads the
/// geometry) shows the snapshot file in `/.snap` at the file system's size.
#[test]
fn ufs2_snapshots_in_freebsds_form() {
    if !fuse_available() {
        return;
    }
    let fuse_ufs = common::fuse::external_tool("fuse-ufs", "cargo install fuse-ufs");
    for (b, f) in [("4096", "4096"), ("32768", "4096"), ("4096", "1024")] {
        let dir = tempfile::tempdir().unwrap();
        let (img, mnt) = (dir.path().join("u.img"), dir.path().join("mnt"));
        let (img_s, mnt_s) = (img.to_str().unwrap(), mnt.to_str().unwrap());
        ok(&["mkfs", "--ufs2", img_s, "--size", "64M", "-b", b, "-f", f]);
        fs::create_dir(&mnt).unwrap();
        ok(&["mount", img_s, mnt_s]);
        let guard = Unmount(&mnt, true);
        fs::create_dir(mnt.join("d")).unwrap();
        for i in 0..20u64 {
            fs::write(mnt.join(format!("d/f{i}")), pattern(i, 100 + i as usize * 1500)).unwrap();
        }
        fs::write(mnt.join("big"), pattern(99, 1 << 20)).unwrap();
        let before = tree(&mnt);
        assert!(ok(&["snapshot", "--on", mnt_s, "create", "s1"]).contains("s1: inode"));
        // Overwrites, appends to tails in fragments, removals, a truncation, new files.
        fs::write(mnt.join("big"), pattern(7, 300_000)).unwrap();
        for i in 0..8 {
            fs::remove_file(mnt.join(format!("d/f{i}"))).unwrap();
        }
        for i in 8..14 {
            let mut v = fs::read(mnt.join(format!("d/f{i}"))).unwrap();
            v.extend_from_slice(&pattern(i + 50, 700));
            fs::write(mnt.join(format!("d/f{i}")), v).unwrap();
        }
        fs::write(mnt.join("d/new"), pattern(5, 9_000)).unwrap();
        let after = tree(&mnt);
        assert_ne!(before, after);
        // FreeBSD's block hints list follows the map: its length (itself counted), then the
        // logical blocks copied at creation, ascending.
        let snap = fs::read(mnt.join(".snap/s1")).unwrap();
        let list: Vec<u64> = snap[64 << 20..].chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(list.first().copied(), Some(list.len() as u64), "{b}/{f}: {list:?}");
        assert!(list[1..].windows(2).all(|w| w[0] < w[1]) && list[1] == 0, "{b}/{f}: {list:?}");
        assert_eq!(fs::remove_file(mnt.join(".snap/s1")).unwrap_err().raw_os_error(), Some(libc::EPERM));
        let out1 = dir.path().join("out1.img");
        ok(&["snapshot", "--on", mnt_s, "export", "s1", out1.to_str().unwrap()]);
        // Background fsck beside a snapshot: its own snapshot checked (the other's blocks
        // counted as used), nothing found, and only s1 left in /.snap.
        let e = sufs(&["fsck", "--background", mnt_s]);
        assert_eq!(e.status.code(), Some(0), "{b}/{f}: {e:?}");
        assert!(String::from_utf8_lossy(&e.stdout).contains(" 0 findings"), "{b}/{f}: {e:?}");
        assert_eq!(fs::read_dir(mnt.join(".snap")).unwrap().count(), 1);
        drop(guard);
        ufs2_clean(img_s, "after the snapshot through the mount and changes");
        ufs2_clean(out1.to_str().unwrap(), "the export");
        let emnt = dir.path().join("emnt");
        ok(&["mount", out1.to_str().unwrap(), emnt.to_str().unwrap(), "--ro"]);
        let eguard = Unmount(&emnt, true);
        assert_eq!(tree(&emnt), before, "{b}/{f}: the export holds the files and bytes of the moment");
        drop(eguard);
        fs::remove_file(&out1).unwrap();
        // Offline: a second snapshot, the first read through a read-only mount of it.
        assert!(ok(&["snapshot", "--on", img_s, "create", "s2"]).contains("s2: inode"));
        ufs2_clean(img_s, "after the offline snapshot");
        assert_eq!(ok(&["snapshot", "--on", img_s, "list"]).lines().count(), 2);
        assert_eq!(mount_tree(img_s, "s1", &dir.path().join("snapmnt")), before, "{b}/{f}");
        if let Some(tool) = fuse_ufs.as_deref().filter(|_| b == "4096" && f == "4096") {
            let fu = dir.path().join("fu");
            let _m = common::ufs2::FuseUfs::mount(tool, &img, &fu);
            assert!(fs::metadata(fu.join(".snap/s1")).unwrap().len() > 64 << 20);
            assert!(fu.join(".snap/s2").exists());
            assert_eq!(fs::read(fu.join("d/new")).unwrap(), pattern(5, 9_000));
        }
        // The live tree is today's; more changes, then the snapshots go.
        ok(&["mount", img_s, mnt_s]);
        let guard = Unmount(&mnt, true);
        assert_eq!(tree(&mnt), after);
        fs::remove_file(mnt.join("big")).unwrap();
        fs::write(mnt.join("d/f9"), pattern(3, 33)).unwrap();
        assert!(ok(&["snapshot", "--on", mnt_s, "delete", "s1"]).contains("blocks released"));
        drop(guard);
        ufs2_clean(img_s, "after deleting the first snapshot");
        assert_eq!(mount_tree(img_s, "s2", &dir.path().join("snapmnt2")), after, "{b}/{f}");
        // What a deletion releases is what the list said the snapshot owned, in blocks.
        let list = ok(&["snapshot", "--on", img_s, "list"]);
        let owned = list.split(", ").find_map(|p| p.strip_suffix(" blocks owned")).unwrap().to_string();
        let out = ok(&["snapshot", "--on", img_s, "delete", "s2"]);
        assert!(out.contains(&format!("deleted, {owned} blocks released")), "{b}/{f}: {list} {out}");
        ufs2_clean(img_s, "after deleting both");
        assert_eq!(ok(&["snapshot", "--on", img_s, "list"]), "");
    }
}

/// Background fsck on UFS2 (soft updates §6): a softdep mount stopped as a crash would (`sufs
/// shutdown`) after files were removed while open, others written and not synced, leaves
/// unreferenced files and (with fragments) leaked fragment runs and block counts too high;
/// the next mount comes up at once and its own background check (a FreeBSD snapshot checked
/// by the UFS2 checker) hands them back to the live file system. A second check through the
/// control channel finds nothing; after unmount `sufs fsck -n` finds nothing, and the synced
/// files read back unchanged.
#[test]
fn ufs2_background_fsck_gives_back_what_a_crash_leaked() {
    use std::io::Write;
    if !fuse_available() {
        return;
    }
    for (b, f) in [("32768", "4096"), ("4096", "4096")] {
        let dir = tempfile::tempdir().unwrap();
        let (img, mnt) = (dir.path().join("u.img"), dir.path().join("mnt"));
        let (img_s, mnt_s) = (img.to_str().unwrap(), mnt.to_str().unwrap());
        ok(&["mkfs", "--ufs2", img_s, "--size", "128M", "-b", b, "-f", f]);
        fs::create_dir(&mnt).unwrap();
        ok(&["mount", img_s, mnt_s]);
        let guard = Unmount(&mnt, true);
        fs::create_dir(mnt.join("d")).unwrap();
        let synced = |i: u64| (format!("d/f{i}"), pattern(i, 3000 + i as usize * 5000));
        for i in 0..20 {
            let (name, data) = synced(i);
            let mut file = fs::File::create(mnt.join(name)).unwrap();
            file.write_all(&data).unwrap();
            file.sync_all().unwrap();
        }
        let open: Vec<fs::File> = (0..8u64)
            .map(|i| {
                let mut file = fs::File::create(mnt.join(format!("d/open{i}"))).unwrap();
                file.write_all(&pattern(100 + i, 7000 * i as usize + 1500)).unwrap();
                file.sync_all().unwrap();
                file
            })
            .collect();
        unsafe { libc::sync() };
        for i in 0..8 {
            fs::remove_file(mnt.join(format!("d/open{i}"))).unwrap();
        }
        for i in 0..10u64 {
            fs::write(mnt.join(format!("d/late{i}")), pattern(200 + i, 2000 + i as usize * 3000)).unwrap();
        }
        let mut last = fs::File::create(mnt.join("d/last")).unwrap();
        last.write_all(&pattern(300, 5000)).unwrap();
        last.sync_all().unwrap();
        fs::File::open(mnt.join("d")).unwrap().sync_all().unwrap();
        ok(&["shutdown", mnt_s]);
        drop((open, last));
        drop(guard);
        let crashed = String::from_utf8_lossy(&sufs(&["fsck", "-n", img_s]).stdout).into_owned();
        assert!(crashed.contains("UNREF FILE") && crashed.contains(" 0 violations"), "{b}/{f}: {crashed}");
        if b == "32768" {
            assert!(crashed.contains("UNALLOCATED FRAG(S)"), "{b}/{f}: {crashed}");
        }
        // Instant restart: the mount's own check in the background.
        ok(&["mount", img_s, mnt_s]);
        let guard = Unmount(&mnt, true);
        let log = dir.path().join("u.img.log");
        common::fuse::wait_background_fsck(&log);
        let text = fs::read_to_string(&log).unwrap();
        // The eight files removed while open, and the inodes allocated ahead for new files
        // that the crash left unused.
        let leaked = 8 + unallocated_inodes_marked_used(&crashed);
        assert!(text.contains(&format!(" {leaked} inodes freed")) && text.contains(" 0 refused"), "{b}/{f}: {text}");
        assert!(text.contains("(0 left for a full fsck)"), "{b}/{f}: {text}");
        if b == "32768" {
            assert!(!text.contains(" 0 fragments freed") && !text.contains(" 0 block counts set"), "{b}/{f}: {text}");
        }
        for i in 0..20 {
            let (name, data) = synced(i);
            assert!(fs::read(mnt.join(&name)).unwrap() == data, "{b}/{f}: {name}");
        }
        assert_eq!(fs::read(mnt.join("d/last")).unwrap(), pattern(300, 5000), "{b}/{f}");
        // Nothing left: a second check, through the control channel, finds nothing.
        let out = sufs(&["fsck", "--background", mnt_s]);
        let again = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{b}/{f}: {again}{}", String::from_utf8_lossy(&out.stderr));
        assert!(!mnt.join(".snap").read_dir().unwrap().any(|e| e.is_ok()), "{b}/{f}: its snapshot is gone");
        drop(guard);
        ufs2_clean(img_s, &format!("{b}/{f}: after background fsck"));
        ok(&["mount", img_s, mnt_s]);
        let guard = Unmount(&mnt, true);
        for i in 0..20 {
            let (name, data) = synced(i);
            assert!(fs::read(mnt.join(&name)).unwrap() == data, "{b}/{f}: {name} after a remount");
        }
        drop(guard);
    }
}

/// The inodes fsck's "UNALLOCATED INODE(S) A-B MARKED USED" lines count, in its output `out`.
fn unallocated_inodes_marked_used(out: &str) -> u64 {
    out.lines()
        .filter_map(|l| l.split("UNALLOCATED INODE(S) ").nth(1)?.split_whitespace().next())
        .map(|range| {
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            b.parse::<u64>().unwrap() - a.parse::<u64>().unwrap() + 1
        })
        .sum()
}
