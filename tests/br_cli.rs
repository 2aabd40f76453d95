//! The Block Register from the command line, as a user drives it: `sufs br` on an unmounted image,
//! then on a mounted one through its control channel (by image and by mount point), with the file
//! interface refusing changes to a reservation (EPERM), and `sufs fsck` counting reservations.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

mod common;

use common::fuse::{external_tool, fuse_available, mkfs, mount_fg};
use common::ufs2::{statvfs, walk, FuseUfs};
use common::{ok, pattern, sufs};

/// The physical blocks a `sufs br query` printed ("offset start len" lines).
fn blocks(query: &str) -> Vec<u64> {
    frag_blocks(query, 1)
}

/// The same on a file system whose blocks are `frag` addresses apart (UFS2's fragments).
fn frag_blocks(query: &str, frag: u64) -> Vec<u64> {
    query
        .lines()
        .flat_map(|l| {
            let v: Vec<u64> = l.split(' ').map(|x| x.parse().unwrap()).collect();
            (0..v[2]).map(move |i| v[1] + i * frag)
        })
        .collect()
}

#[test]
fn br_on_an_unmounted_image() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    let img = img.to_str().unwrap();
    ok(&["mkfs", img, "--size", "64M"]);
    assert!(ok(&["br", "--on", img, "reserve", "store", "100"]).contains("store: 100 blocks reserved"));
    // newfs's 32 KiB blocks of 8 fragments: a block is 8 fragment addresses apart.
    let q = ok(&["br", "--on", img, "query", "store", "0", "1000"]);
    let b = frag_blocks(&q, 8);
    assert_eq!(b.len(), 100);
    ok(&["br", "--on", img, "expand", "store", "10", "--hint", "12000"]);
    let tail = frag_blocks(&ok(&["br", "--on", img, "query", "store", "100", "10"]), 8);
    assert!(tail[0] >= 12000, "hinted expansion at {}", tail[0]);
    let t = ok(&["br", "--on", img, "truncate", "store", &b[5].to_string()]);
    assert!(t.contains("109 blocks reserved, length 110"), "{t}");
    let out = sufs(&["br", "--on", img, "truncate", "store", "1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("block not in the reservation"));
    let out = sufs(&["br", "--on", img, "reserve", "store", "1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("file exists"));
    let fsck = ok(&["fsck", img]);
    assert!(fsck.contains("1 Block Register reservations in /.br own 110 blocks"), "{fsck}");
    assert!(ok(&["br", "--on", img, "list"]).contains("store: 109 blocks reserved"));
    assert!(ok(&["br", "--on", img, "free", "store"]).contains("110 blocks returned"));
    assert_eq!(ok(&["br", "--on", img, "list"]), "");
    let fsck = ok(&["fsck", img]);
    assert!(fsck.contains("0 findings"), "{fsck}");
}

#[test]
fn br_on_a_mounted_file_system() {
    if !fuse_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, mnt) = (dir.path().join("img"), dir.path().join("mnt"));
    let (img_s, mnt_s) = (img.to_str().unwrap(), mnt.to_str().unwrap());
    mkfs(&img, "64M");
    ok(&["br", "--on", img_s, "reserve", "old", "8"]);
    // `sufs mount` returns once the file system is mounted.
    ok(&["mount", img_s, mnt_s]);
    let guard = scopeguard(&mnt);
    // Through the channel, by image and by mount point.
    assert!(ok(&["br", "--on", img_s, "list"]).contains("old: 8 blocks reserved"));
    ok(&["br", "--on", mnt_s, "reserve", "live", "40"]);
    // A reservation counts the file system's blocks (32 KiB as sufs mkfs makes UFS2).
    let bsize = statvfs(&mnt).f_bsize;
    // The kernel has seen both names: what the channel changes must reach it at once.
    assert_eq!(fs::metadata(mnt.join(".br/live")).unwrap().len(), 40 * bsize);
    assert!(mnt.join(".br/old").exists());
    ok(&["br", "--on", img_s, "expand", "live", "4"]);
    let q = blocks(&ok(&["br", "--on", mnt_s, "query", "live", "0", "100"]));
    assert_eq!(q.len(), 44);
    // The reservation is a file in /.br that the file interface may read but not change.
    let res = mnt.join(".br/live");
    assert_eq!(fs::metadata(&res).unwrap().len(), 44 * bsize);
    let eperm = |r: std::io::Result<()>| assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EPERM));
    eperm(fs::OpenOptions::new().write(true).open(&res).and_then(|mut f| std::io::Write::write_all(&mut f, b"x")));
    eperm(fs::OpenOptions::new().write(true).open(&res).and_then(|f| f.set_len(0)));
    eperm(fs::remove_file(&res));
    eperm(fs::rename(&res, mnt.join("x")));
    assert_eq!(fs::read(&res).unwrap().len() as u64, 44 * bsize);
    // Errors come back through the channel.
    let out = sufs(&["br", "--on", mnt_s, "free", "nope"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such file"), "{out:?}");
    ok(&["br", "--on", mnt_s, "free", "old"]);
    assert!(!mnt.join(".br/old").exists());
    drop(guard);
    assert!(!dir.path().join("img.ctl").exists(), "the socket goes at unmount");
    let list = ok(&["br", "--on", img_s, "list"]);
    assert!(list.contains("live: 44 blocks reserved") && !list.contains("old"), "{list}");
    // The UFS2 checker, as fsck_ffs, sees a reservation as an ordinary file owning its blocks
    // (sufs's own checker, above, also counts reservations).
    let fsck = ok(&["fsck", img_s]);
    assert!(fsck.contains("UFS2") && fsck.contains(" 0 findings"), "{fsck}");
}

/// newfs's default UFS2 (32 KiB blocks of eight 4 KiB fragments): the Block Register's calls
/// offline and through a mount take whole blocks; after each the user's files read back the
/// same after a remount and the UFS2 checker finds nothing; a user filling the disk gets ENOSPC
/// before any reserved fragment (what the owner wrote there stays); freeing returns them to df.
#[test]
fn br_on_ufs2_with_fragments() {
    if !fuse_available() {
        return;
    }
    const FRAG: u64 = 8;
    const FSIZE: u64 = 4096;
    let dir = tempfile::tempdir().unwrap();
    let (img, mnt) = (dir.path().join("img"), dir.path().join("mnt"));
    let (img_s, mnt_s) = (img.to_str().unwrap(), mnt.to_str().unwrap());
    ok(&["mkfs", "--ufs2", img_s, "--size", "64M"]);
    // The user's files: tails of every few fragments, a file past its direct blocks.
    let m = mount_fg(&img, &mnt, &[]);
    fs::create_dir(mnt.join("data")).unwrap();
    for (i, len) in [1usize, 4095, 4097, 9000, 32768, 40000, 500_000].into_iter().enumerate() {
        fs::write(mnt.join(format!("data/f{i}")), pattern(i as u64, len)).unwrap();
    }
    let tree = walk(&mnt.join("data"));
    m.umount();
    let check = |what: &str| {
        let fsck = ok(&["fsck", "-n", img_s]);
        assert!(fsck.contains(" 0 findings"), "{what}: {fsck}");
        let m = mount_fg(&img, &mnt, &["-o", "ro"]);
        let got = walk(&mnt.join("data"));
        m.umount();
        assert!(got == tree, "{what}: the user's files changed");
    };
    let query = |on: &str, name: &str| {
        let b = frag_blocks(&ok(&["br", "--on", on, "query", name, "0", "1000"]), FRAG);
        assert!(b.iter().all(|x| x % FRAG == 0), "{name}: blocks not block-aligned: {b:?}");
        b
    };

    // Offline.
    let r = ok(&["br", "--on", img_s, "reserve", "store", "100"]);
    assert!(r.contains("store: 100 blocks reserved, length 100"), "{r}");
    let b = query(img_s, "store");
    assert_eq!(b.len(), 100);
    check("reserve");
    let far = 3 * 4104 + 1001; // a fragment address in the last of four groups of 4104
    ok(&["br", "--on", img_s, "expand", "store", "10", "--hint", &far.to_string()]);
    let tail = frag_blocks(&ok(&["br", "--on", img_s, "query", "store", "100", "10"]), FRAG);
    assert_eq!(tail.len(), 10);
    assert!(tail[0] >= far - far % FRAG, "hinted expansion at {}", tail[0]);
    check("expand");
    let t = ok(&["br", "--on", img_s, "truncate", "store", &b[5].to_string()]);
    assert!(t.contains("109 blocks reserved, length 110"), "{t}");
    // An address inside a reserved block is not one of its blocks.
    let out = sufs(&["br", "--on", img_s, "truncate", "store", &(b[6] + 1).to_string()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("block not in the reservation"), "{out:?}");
    let t = ok(&["br", "--on", img_s, "truncate", "store", &tail[9].to_string()]);
    assert!(t.contains("108 blocks reserved, length 109"), "{t}");
    check("truncate");
    ok(&["br", "--on", img_s, "reserve", "gone", "20"]);
    assert!(ok(&["br", "--on", img_s, "free", "gone"]).contains("gone: freed, 21 blocks returned"));
    check("free");
    let kept = query(img_s, "store");
    assert_eq!(kept.len(), 108);
    // A UFS2 reader no one here wrote sees the reservation as a file owning its blocks (108
    // and an indirect block, in 512-byte sectors), beside the user's files.
    if let Some(tool) = external_tool("fuse-ufs", "cargo install fuse-ufs") {
        let theirs = dir.path().join("fuse-ufs");
        let _m = FuseUfs::mount(&tool, &img, &theirs);
        let st = fs::metadata(theirs.join(".br/store")).unwrap();
        assert_eq!((st.len(), st.blocks()), (109 * 32768, 109 * 32768 / 512));
        assert!(walk(&theirs.join("data")) == tree, "fuse-ufs reads other files");
    }

    // Mounted: through the control channel.
    let m = mount_fg(&img, &mnt, &[]);
    let r = ok(&["br", "--on", mnt_s, "reserve", "live", "40"]);
    assert!(r.contains("live: 40 blocks reserved"), "{r}");
    ok(&["br", "--on", mnt_s, "expand", "live", "8"]);
    let mut live = query(mnt_s, "live");
    assert_eq!(live.len(), 48);
    let t = ok(&["br", "--on", mnt_s, "truncate", "live", &live[3].to_string()]);
    assert!(t.contains("47 blocks reserved, length 48"), "{t}");
    live.remove(3);
    assert_eq!(query(mnt_s, "live"), live);
    assert_eq!(fs::metadata(mnt.join(".br/live")).unwrap().len(), 48 * 32768);
    // The owner writes its blocks on the device; the file system never does.
    let dev = fs::OpenOptions::new().read(true).write(true).open(&img).unwrap();
    let mark = vec![0xa5u8; 32768];
    for &x in kept.iter().chain(&live) {
        std::os::unix::fs::FileExt::write_all_at(&dev, &mark, x * FSIZE).unwrap();
    }
    // A user fills the disk: ENOSPC comes before any reserved fragment.
    fs::create_dir(mnt.join("fill")).unwrap();
    let mut n = 0u64;
    let enospc = loop {
        let len = 1 + (n as usize * 7919) % 300_000;
        if let Err(e) = fs::write(mnt.join(format!("fill/{n}")), pattern(n, len)) {
            break e;
        }
        n += 1;
    };
    assert_eq!(enospc.raw_os_error(), Some(libc::ENOSPC), "{enospc}");
    assert_eq!(query(mnt_s, "live"), live);
    assert_eq!(query(mnt_s, "store"), kept);
    let marked = |blocks: &[u64]| {
        let mut buf = vec![0u8; 32768];
        for &x in blocks {
            std::os::unix::fs::FileExt::read_exact_at(&dev, &mut buf, x * FSIZE).unwrap();
            assert!(buf == mark, "reserved block {x} was written by the file system");
        }
    };
    ok(&["sync", mnt_s]);
    marked(&live);
    let before = statvfs(&mnt);
    let r = ok(&["br", "--on", mnt_s, "free", "live"]);
    assert!(r.contains("live: freed, 48 blocks returned"), "{r}");
    ok(&["sync", mnt_s]);
    let after = statvfs(&mnt);
    assert_eq!((after.f_frsize, after.f_bfree - before.f_bfree), (FSIZE as _, 48 * FRAG), "df after brfree");
    // Those blocks are the file system's again.
    fs::write(mnt.join("fill/after"), pattern(99, 40 * 32768)).unwrap();
    m.umount();
    marked(&kept);
    check("mounted");
    let m = mount_fg(&img, &mnt, &[]);
    fs::remove_dir_all(mnt.join("fill")).unwrap();
    ok(&["br", "--on", mnt_s, "free", "store"]);
    m.umount();
    check("all freed");
    let fsck = ok(&["fsck", "-n", img_s]);
    assert!(fsck.contains(" 0 findings"), "{fsck}");
}

/// Unmounts (with `sufs umount`, which waits for the final writes) when dropped, so that a failed
/// assertion does not leave the mount behind.
struct Unmount<'a>(&'a Path);

fn scopeguard(mnt: &Path) -> Unmount<'_> {
    Unmount(mnt)
}

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        let out = sufs(&["umount", self.0.to_str().unwrap()]);
        if !out.status.success() {
            let _ = Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
}
