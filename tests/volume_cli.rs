//! Volume snapshots from the command line, with both stores: files written through a FUSE mount,
//! `sufs volume snapshot create`, heavy rewrites and removals through a second mount (copy-on-write
//! under the file system), then after that restart `status`, `export` and a snapshot mount that
//! must show exactly the files and bytes of snapshot time. On UFS2 with fragments (newfs's default
//! 32768/4096 and 4096/1024), whose export fuse-ufs reads too.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;

mod common;

use common::fuse::external_tool;
use common::ufs2::FuseUfs;
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

/// The scenario with `store` (of `initial` blocks) on an image `mkfs` (arguments after the
/// image's name) makes.
fn run(store: &str, initial: &str, mkfs: &[&str]) {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: /dev/fuse is missing, FUSE tests cannot run here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("vol.img");
    let mnt = dir.path().join("mnt");
    let (img_s, mnt_s) = (img.to_str().unwrap(), mnt.to_str().unwrap());
    ok(&[&["mkfs", img_s][..], mkfs].concat());
    // fuse-ufs reads newfs's default 32768/4096 (it refuses 4096/1024: "sb.sbsize == sb.fsize").
    let fuse_ufs = !mkfs.contains(&"-f");
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
        ok(&["volume", "snapshot", "create", img_s, "--store", store, "--initial", initial]).contains("snapshot taken")
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
    let report = ok(&["fsck", "-n", export.to_str().unwrap()]);
    assert!(report.contains(" 0 findings"), "{report}");
    with_mount(&["mount", export.to_str().unwrap(), mnt_s, "--ro"], &mnt, |m| {
        assert_eq!(files(m), before, "the export holds exactly the files of snapshot time");
    });
    if fuse_ufs {
        // A UFS2 reader no one here wrote reads the export as the tree of snapshot time.
        if let Some(tool) = external_tool("fuse-ufs", "cargo install fuse-ufs") {
            let _m = FuseUfs::mount(&tool, &export, &mnt);
            assert_eq!(files(&mnt), before, "fuse-ufs reads the export as the files of snapshot time");
        }
    }
    with_mount(&["volume", "snapshot", "mount", img_s, mnt_s], &mnt, |m| {
        assert_eq!(files(m), before, "the snapshot mount shows exactly the files of snapshot time");
        assert!(fs::write(m.join("x"), b"x").is_err(), "read-only");
    });
    ok(&["volume", "snapshot", "delete", img_s]);
    assert!(ok(&["volume", "snapshot", "status", img_s]).contains("no volume snapshot"));
    let report = ok(&["fsck", "-n", img_s]);
    assert!(report.contains(" 0 findings"), "{report}");
}

const RESERVE: [&str; 4] = ["--size", "96M", "--snapshot-reserve", "32M"];

#[test]
fn snapshot_of_ufs2_with_the_reserved_store() {
    run("reserved", "256", &[&["--format", "ufs2"][..], &RESERVE].concat());
    run("reserved", "2048", &[&["--format", "ufs2", "-b", "4096", "-f", "1024"][..], &RESERVE].concat());
}

/// The br store (8 MiB to start with) on UFS2 images that are all file system (no reserve).
#[test]
fn snapshot_of_ufs2_with_the_br_store() {
    run("br", "256", &["--format", "ufs2", "--size", "96M"]);
    run("br", "2048", &["--format", "ufs2", "--size", "96M", "-b", "4096", "-f", "1024"]);
}
