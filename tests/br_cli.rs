//! The Block Register from the command line, as a user drives it: `sufs br` on an unmounted image,
//! then on a mounted one through its control channel (by image and by mount point), with the file
//! interface refusing changes to a reservation (EPERM), and `sufs fsck` counting reservations.

use std::fs;
use std::path::Path;
use std::process::Command;

mod common;

use common::fuse::{fuse_available, mkfs};
use common::{ok, sufs};

/// The physical blocks a `sufs br query` printed ("offset start len" lines).
fn blocks(query: &str) -> Vec<u64> {
    query
        .lines()
        .flat_map(|l| {
            let v: Vec<u64> = l.split(' ').map(|x| x.parse().unwrap()).collect();
            v[1]..v[1] + v[2]
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
    let q = ok(&["br", "--on", img, "query", "store", "0", "1000"]);
    let b = blocks(&q);
    assert_eq!(b.len(), 100);
    ok(&["br", "--on", img, "expand", "store", "10", "--hint", "12000"]);
    let tail = blocks(&ok(&["br", "--on", img, "query", "store", "100", "10"]));
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
    // The kernel has seen both names: what the channel changes must reach it at once.
    assert_eq!(fs::metadata(mnt.join(".br/live")).unwrap().len(), 40 * 4096);
    assert!(mnt.join(".br/old").exists());
    ok(&["br", "--on", img_s, "expand", "live", "4"]);
    let q = blocks(&ok(&["br", "--on", mnt_s, "query", "live", "0", "100"]));
    assert_eq!(q.len(), 44);
    // The reservation is a file in /.br that the file interface may read but not change.
    let res = mnt.join(".br/live");
    assert_eq!(fs::metadata(&res).unwrap().len(), 44 * 4096);
    let eperm = |r: std::io::Result<()>| assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EPERM));
    eperm(fs::OpenOptions::new().write(true).open(&res).and_then(|mut f| std::io::Write::write_all(&mut f, b"x")));
    eperm(fs::OpenOptions::new().write(true).open(&res).and_then(|f| f.set_len(0)));
    eperm(fs::remove_file(&res));
    eperm(fs::rename(&res, mnt.join("x")));
    assert_eq!(fs::read(&res).unwrap().len(), 44 * 4096);
    // Errors come back through the channel.
    let out = sufs(&["br", "--on", mnt_s, "free", "nope"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such file"), "{out:?}");
    ok(&["br", "--on", mnt_s, "free", "old"]);
    assert!(!mnt.join(".br/old").exists());
    drop(guard);
    assert!(!dir.path().join("img.ctl").exists(), "the socket goes at unmount");
    let list = ok(&["br", "--on", img_s, "list"]);
    assert!(list.contains("live: 44 blocks reserved") && !list.contains("old"), "{list}");
    let fsck = ok(&["fsck", img_s]);
    assert!(fsck.contains("0 findings") && fsck.contains("1 Block Register reservations"), "{fsck}");
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
