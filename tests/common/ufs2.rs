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

/// statvfs(2) of `p`.
pub fn statvfs(p: &Path) -> libc::statvfs {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: `st` is written by statvfs before it is read.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st
}

/// fuse-ufs (a UFS2 reader no one here wrote) mounted read-only in the foreground on `dir`,
/// until dropped.
pub struct FuseUfs(std::process::Child, PathBuf);

impl FuseUfs {
    pub fn mount(tool: &Path, img: &Path, dir: &Path) -> FuseUfs {
        use std::time::{Duration, Instant};
        std::fs::create_dir_all(dir).unwrap();
        let child = std::process::Command::new(tool).arg("-f").args(["-o", "ro"]).arg(img).arg(dir).spawn().unwrap();
        let mut m = FuseUfs(child, dir.to_path_buf());
        let start = Instant::now();
        while !mounted_at(dir) {
            assert!(m.0.try_wait().unwrap().is_none(), "fuse-ufs exited early");
            assert!(start.elapsed() < Duration::from_secs(20), "fuse-ufs did not mount");
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }
}

/// Whether some file system is mounted on `dir` (fuse-ufs names itself in no way `is_mounted`
/// knows).
fn mounted_at(dir: &Path) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap();
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines().any(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
}

impl Drop for FuseUfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.1).status();
        let _ = self.0.wait();
    }
}
