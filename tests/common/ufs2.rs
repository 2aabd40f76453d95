//! UFS2 images no sufs code wrote: the FreeBSD-made fixture, and images NetBSD's makefs(8)
//! (Debian's `makefs`) makes of a tree.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The FreeBSD fixture's file name.
pub const FREEBSD_IMAGE: &str = "freebsd-ufs2-32k4k.img.gz";

/// Where the FreeBSD fixture is: `SUFS_UFS2_IMAGE`, else a file named `FREEBSD_IMAGE` at most
/// three directories below the repository's parent (where the project's shared fixtures sit,
/// as tests/fstests/setup.sh finds fstests' tarball).
pub fn fixture() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SUFS_UFS2_IMAGE") {
        return Some(PathBuf::from(p));
    }
    fn find(dir: &Path, depth: u32) -> Option<PathBuf> {
        let mut entries: Vec<_> = std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).collect();
        entries.sort();
        if let Some(hit) = entries.iter().find(|p| p.file_name().is_some_and(|n| n == FREEBSD_IMAGE) && p.is_file()) {
            return Some(hit.clone());
        }
        if depth == 0 {
            return None;
        }
        // Not into build output or version control, which are large and hold no fixture.
        let skip = |p: &PathBuf| p.file_name().is_some_and(|n| n == "target" || n == ".git");
        entries.iter().filter(|p| p.is_dir() && !skip(p)).find_map(|p| find(p, depth - 1))
    }
    find(Path::new(env!("CARGO_MANIFEST_DIR")).parent()?, 3)
}

/// The FreeBSD fixture unpacked (gzip -dc); the test fails when it is missing rather than
/// passing without it.
pub fn freebsd_image() -> Vec<u8> {
    let path =
        fixture().unwrap_or_else(|| panic!("the FreeBSD UFS2 fixture {FREEBSD_IMAGE} is missing: set SUFS_UFS2_IMAGE"));
    let out = Command::new("gzip").arg("-dc").arg(&path).output().expect("run gzip -dc");
    assert!(out.status.success(), "gzip -dc {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// Whether makefs(8) is installed (a skip message if not).
pub fn have_makefs() -> bool {
    let ok = Command::new("makefs").arg("-h").output().is_ok();
    if !ok {
        eprintln!("SKIPPED: makefs(8) is not installed (apt-get install makefs)");
    }
    ok
}

/// `makefs -t ffs -o version=2,bsize=B,fsize=F -s SIZE image src`.
pub fn makefs(image: &Path, src: &Path, bsize: u32, fsize: u32, size: &str) {
    let out = Command::new("makefs")
        .args(["-t", "ffs", "-o", &format!("version=2,bsize={bsize},fsize={fsize}"), "-s", size])
        .arg(image)
        .arg(src)
        .output()
        .expect("run makefs");
    assert!(out.status.success(), "makefs: {}", String::from_utf8_lossy(&out.stderr));
}
