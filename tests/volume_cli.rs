//! Volume snapshots from the command line, with both stores: files written through a FUSE mount,
//! `sufs volume snapshot create`, heavy rewrites and removals through a second mount (copy-on-write
//! under the file system), then after that restart `status`, `export` and a snapshot mount that
//! must show exactly the files and bytes of snapshot time.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;

mod common;

use common::{ok, sufs};

fn bytes(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seed.wrapping_mul(131).wrapping_add(i as u64 / 3) % 253) as u8).collect()
}

/// Every file under `dir` (but /.br and lost+found) with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            if d == dir && (name == ".br" || name == "lost+found") {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path().strip_prefix(dir).unwrap().display().to_string(), fs::read(e.path()).unwrap());
            }
        }
    }
    out
}

/// Mounts, runs `f` on the mount point, unmounts (also when `f` panics).
fn with_mount(args: &[&str], mnt: &Path, f: impl FnOnce(&Path)) {
    ok(args);
    struct Guard<'a>(&'a Path);
    impl Drop for Guard<'_> {
        fn drop(&mut self) {
            if !sufs(&["umount", self.0.to_str().unwrap()]).status.success() {
                let _ = Command::new("umount").arg("-l").arg(self.0).status();
            }
        }
    }
    let _g = Guard(mnt);
    f(mnt);
}

fn run(store: &str) {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("vol.img");
    let mnt = dir.path().join("mnt");
    let (img_s, mnt_s) = (img.to_str().unwrap(), mnt.to_str().unwrap());
    ok(&["mkfs", "--format", "sufs", img_s, "--size", "96M", "--snapshot-reserve", "32M"]);
    let mut before = BTreeMap::new();
    with_mount(&["mount", img_s, mnt_s], &mnt, |m| {
        fs::create_dir(m.join("src")).unwrap();
        for i in 0..30u64 {
            let p = if i % 3 == 0 { m.join(format!("f{i}")) } else { m.join(format!("src/f{i}")) };
            fs::write(&p, bytes(i, 1000 + i as usize * 7000)).unwrap();
        }
        before = files(m);
    });
    assert!(
        ok(&["volume", "snapshot", "create", img_s, "--store", store, "--initial", "2048"]).contains("snapshot taken")
    );
    let out = sufs(&["volume", "snapshot", "create", img_s, "--store", store]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    // Heavy changes through a mount on the volume.
    with_mount(&["mount", img_s, mnt_s], &mnt, |m| {
        for round in 0..3u64 {
            for i in 0..30u64 {
                let p = if i % 3 == 0 { m.join(format!("f{i}")) } else { m.join(format!("src/f{i}")) };
                match (i + round) % 3 {
                    0 => fs::write(&p, bytes(i + 1000 * round, 60_000)).unwrap(),
                    1 => {
                        let _ = fs::remove_file(&p);
                    }
                    _ => fs::write(m.join(format!("new{round}-{i}")), bytes(i * 3, 30_000)).unwrap(),
                }
            }
        }
        assert_ne!(files(m), before);
    });
    let status = ok(&["volume", "snapshot", "status", img_s]);
    assert!(status.contains(&format!("{store} store, valid")), "{status}");
    let export = dir.path().join("export.img");
    ok(&["volume", "snapshot", "export", img_s, export.to_str().unwrap()]);
    assert!(ok(&["fsck", export.to_str().unwrap()]).contains("0 findings"));
    with_mount(&["mount", export.to_str().unwrap(), mnt_s, "--ro"], &mnt, |m| {
        assert_eq!(files(m), before, "the export holds exactly the files of snapshot time");
    });
    with_mount(&["volume", "snapshot", "mount", img_s, mnt_s], &mnt, |m| {
        assert_eq!(files(m), before, "the snapshot mount shows exactly the files of snapshot time");
        assert!(fs::write(m.join("x"), b"x").is_err(), "read-only");
    });
    ok(&["volume", "snapshot", "delete", img_s]);
    assert!(ok(&["volume", "snapshot", "status", img_s]).contains("no volume snapshot"));
    assert!(ok(&["fsck", img_s]).contains("0 findings"));
}

#[test]
fn snapshot_with_the_reserved_store() {
    if Path::new("/dev/fuse").exists() {
        run("reserved");
    } else {
        eprintln!("SKIPPED: /dev/fuse is missing, FUSE tests cannot run here");
    }
}

#[test]
fn snapshot_with_the_br_store() {
    if Path::new("/dev/fuse").exists() {
        run("br");
    } else {
        eprintln!("SKIPPED: /dev/fuse is missing, FUSE tests cannot run here");
    }
}
