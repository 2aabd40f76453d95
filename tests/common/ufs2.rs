//! The UFS2 image FreeBSD made, shared by the UFS2 tests: `SUFS_UFS2_IMAGE`, or the first file
//! of its name found below the directory that holds the repository (where the project's shared
//! fixtures sit, as tests/fstests/setup.sh finds fstests' tarball); a test fails when it is
//! missing rather than passing without it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub const IMAGE: &str = "freebsd-ufs2-32k4k.img.gz";

/// The unpacked image, decompressed once with gzip(1).
pub fn image() -> &'static [u8] {
    static IMG: OnceLock<Vec<u8>> = OnceLock::new();
    IMG.get_or_init(|| {
        let path =
            fixture().unwrap_or_else(|| panic!("the FreeBSD UFS2 fixture {IMAGE} is missing: set SUFS_UFS2_IMAGE"));
        let out = std::process::Command::new("gzip").arg("-dc").arg(&path).output().expect("run gzip -dc");
        assert!(out.status.success(), "gzip -dc {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
        out.stdout
    })
}

/// Where the image is: `SUFS_UFS2_IMAGE`, else a file named `IMAGE` at most three directories
/// below the repository's parent.
fn fixture() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SUFS_UFS2_IMAGE") {
        return Some(PathBuf::from(p));
    }
    fn find(dir: &Path, depth: u32) -> Option<PathBuf> {
        let mut entries: Vec<_> = std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).collect();
        entries.sort();
        if let Some(hit) = entries.iter().find(|p| p.file_name().is_some_and(|n| n == IMAGE) && p.is_file()) {
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

/// Whether makefs(8) (NetBSD's, Debian's `makefs` package) is installed.
pub fn have_makefs() -> bool {
    std::process::Command::new("makefs").arg("-h").output().is_ok()
}

/// A UFS2 image of `src` made by makefs with `bsize`/`fsize` blocks, `size` long (as `-s`).
pub fn makefs(src: &Path, out: &Path, bsize: u32, fsize: u32, size: &str) {
    makefs_with(src, out, &format!("bsize={bsize},fsize={fsize}"), size);
}

/// The same with more of makefs's ffs options (`opts`, as `-o` takes them: `bsize=4096,
/// fsize=512,maxbpcg=256,density=8192` makes groups of 256 fragments).
pub fn makefs_with(src: &Path, out: &Path, opts: &str, size: &str) {
    let o = std::process::Command::new("makefs")
        .args(["-t", "ffs", "-o", &format!("version=2,{opts}"), "-s", size])
        .arg(out)
        .arg(src)
        .output()
        .expect("run makefs");
    assert!(o.status.success(), "makefs: {}", String::from_utf8_lossy(&o.stderr));
}

/// The unpacked image, a copy to write into a file.
pub fn freebsd_image() -> Vec<u8> {
    image().to_vec()
}
