//! The UFS2 image FreeBSD made, shared by the UFS2 tests: `SUFS_UFS2_IMAGE`, or the first file
//! of its name found below the directory that holds the repository (where the project's shared
//! fixtures sit, as tests/fstests/setup.sh finds fstests' tarball); a test fails when it is
//! missing rather than passing without it.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use sufs_fs::format::ufs2::{Dinode, DirIter, FileReader, Superblock, UFS2_DINODE_SIZE, UFS_ROOTINO};

use super::pattern;

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

/// For a test of makefs images through a mount: `sample_tree` made under `scratch` and as a
/// reader shows it, or None (the test has nothing to do) without FUSE or makefs(8).
pub fn makefs_sample(scratch: &Path) -> Option<(PathBuf, BTreeMap<String, Node>)> {
    if !super::fuse::fuse_available() {
        return None;
    }
    if !have_makefs() {
        eprintln!("SKIPPED: makefs(8) is not installed (apt-get install makefs)");
        return None;
    }
    let src = scratch.join("src");
    sample_tree(&src);
    let tree = walk(&src);
    Some((src, tree))
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
    let Ok(dir) = std::fs::canonicalize(dir) else { return false };
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines().any(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
}

impl Drop for FuseUfs {
    /// Unmounts and waits for fuse-ufs to end: an unmount refused for a moment (a reader's last
    /// release still on its way) is tried again, then done lazily, and a fuse-ufs that outlives
    /// its mount is killed, so that the test never waits forever.
    fn drop(&mut self) {
        use std::time::{Duration, Instant};
        for _ in 0..50 {
            if !mounted_at(&self.1) {
                break;
            }
            let _ = std::process::Command::new("umount").arg(&self.1).status();
            std::thread::sleep(Duration::from_millis(100));
        }
        if mounted_at(&self.1) {
            eprintln!("fuse-ufs: {} still busy after 5 s: unmounted lazily", self.1.display());
            let _ = std::process::Command::new("umount").arg("-l").arg(&self.1).status();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.0.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                eprintln!("fuse-ufs: did not end after its unmount: killed");
                let _ = self.0.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.wait();
    }
}

/// What a reader shows of one name: its type and permissions, size, link count and times, the
/// file's bytes (of a large file, its first and last MiB), the link's target, the extended
/// attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub mode: u32,
    pub size: u64,
    pub nlink: u64,
    pub mtime: (i64, i64),
    pub uid_gid: (u32, u32),
    pub data: Vec<u8>,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// The bytes of a file this test compares: whole up to 16 MiB, else the first and last MiB
/// (the fixture's sparse files run to 512 GiB).
pub fn file_bytes(p: &Path, size: u64) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    const MIB: u64 = 1 << 20;
    if size <= 16 * MIB {
        return fs::read(p).unwrap();
    }
    let f = fs::File::open(p).unwrap();
    let mut head = vec![0u8; MIB as usize];
    let mut tail = vec![0u8; MIB as usize];
    f.read_exact_at(&mut head, 0).unwrap();
    f.read_exact_at(&mut tail, size - MIB).unwrap();
    head.extend_from_slice(&tail);
    head
}

/// The extended attributes of `p` (not following a link), by listxattr(2) and getxattr(2).
pub fn xattrs(p: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 1 << 16];
    // SAFETY: the buffers outlive the calls, whose lengths they give.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(n >= 0, "listxattr {}: {}", p.display(), std::io::Error::last_os_error());
    let mut out = BTreeMap::new();
    for name in names[..n as usize].split(|&b| b == 0).filter(|s| !s.is_empty()) {
        let cn = CString::new(name).unwrap();
        let mut val = vec![0u8; 1 << 16];
        // SAFETY: as above.
        let r = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), val.as_mut_ptr().cast(), val.len()) };
        assert!(r >= 0, "getxattr {} {:?}: {}", p.display(), cn, std::io::Error::last_os_error());
        val.truncate(r as usize);
        out.insert(name.to_vec(), val);
    }
    out
}

/// Every name under `root`, as a reader shows it.
pub fn walk(root: &Path) -> BTreeMap<String, Node> {
    fn go(dir: &Path, rel: &str, out: &mut BTreeMap<String, Node>) {
        let mut names: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        for name in names {
            let p = dir.join(&name);
            let r = format!("{rel}/{}", name.to_string_lossy());
            let m = fs::symlink_metadata(&p).unwrap();
            let ft = m.file_type();
            let data = if ft.is_file() {
                file_bytes(&p, m.size())
            } else if ft.is_symlink() {
                fs::read_link(&p).unwrap().as_os_str().as_bytes().to_vec()
            } else {
                Vec::new()
            };
            let node = Node {
                mode: m.mode(),
                size: if ft.is_dir() { 0 } else { m.size() },
                nlink: m.nlink(),
                mtime: (m.mtime(), m.mtime_nsec()),
                uid_gid: (m.uid(), m.gid()),
                data,
                xattrs: if ft.is_fifo() { BTreeMap::new() } else { xattrs(&p) },
            };
            out.insert(r.clone(), node);
            if ft.is_dir() {
                go(&p, &r, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    go(root, "", &mut out);
    out
}

/// A node without its bytes, for a failure message.
pub fn brief(n: &Node) -> String {
    format!(
        "mode {:o} size {} nlink {} mtime {:?} owner {:?}, {} bytes, {} xattrs",
        n.mode,
        n.size,
        n.nlink,
        n.mtime,
        n.uid_gid,
        n.data.len(),
        n.xattrs.len()
    )
}

/// A tree with what a UFS2 reader must get right: fragment tails of every size, a directory
/// of many blocks, short and long links, a hole, hard links, a fifo.
pub fn sample_tree(src: &Path) {
    fs::create_dir_all(src.join("a/b/c")).unwrap();
    fs::create_dir_all(src.join("empty")).unwrap();
    fs::write(src.join("a/b/c/f"), b"hello\n").unwrap();
    for (i, len) in [1usize, 511, 512, 513, 4095, 4097, 9000, 32767, 32769, 100_000, 400_000].iter().enumerate() {
        fs::write(src.join(format!("f{i}")), pattern(i as u64, *len)).unwrap();
    }
    for i in 0..400 {
        fs::write(src.join(format!("a/name-{i:04}")), format!("file {i}\n")).unwrap();
    }
    std::os::unix::fs::symlink("a/b/c/f", src.join("short")).unwrap();
    std::os::unix::fs::symlink("y".repeat(300), src.join("long")).unwrap();
    let f = fs::File::create(src.join("holey")).unwrap();
    f.set_len(40 << 20).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"the end", (40 << 20) - 7).unwrap();
    fs::hard_link(src.join("f9"), src.join("f9-again")).unwrap();
    let fifo = CString::new(src.join("fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
}

/// The superblock of the UFS2 image `img` (its bytes).
pub fn superblock(img: &[u8]) -> Superblock {
    Superblock::search(|off, buf| sufs_fs::format::ufs2::ReadAt::read_exact_at(img, buf, off))
        .expect("a UFS2 superblock")
        .1
}

pub fn dinode(img: &[u8], sb: &Superblock, ino: u32) -> Dinode {
    let off = sb.ino_offset(ino) as usize;
    Dinode::decode(&img[off..off + UFS2_DINODE_SIZE]).unwrap()
}

/// Changes inode `ino` and writes it back with its check hash.
pub fn edit_inode(img: &mut [u8], sb: &Superblock, ino: u32, f: impl FnOnce(&mut Dinode)) {
    let mut d = dinode(img, sb, ino);
    f(&mut d);
    let off = sb.ino_offset(ino) as usize;
    img[off..off + UFS2_DINODE_SIZE].copy_from_slice(&d.encode_for(sb));
}

/// The inode a name in the root directory names, and the byte offset of its entry on the device.
pub fn root_entry(img: &[u8], sb: &Superblock, name: &str) -> (u32, usize) {
    let root = dinode(img, sb, UFS_ROOTINO);
    let data = FileReader::new(sb, img, &root, UFS_ROOTINO).read_block(0).unwrap();
    let e = DirIter::new(&data, 0, root.di_size, sb.maxino())
        .map(|e| e.unwrap())
        .find(|e| e.name == name.as_bytes())
        .unwrap_or_else(|| panic!("/{name} in the root"));
    (e.d_ino, sb.fsb_offset(root.di_db[0]) as usize + e.offset as usize)
}

/// Removes `name` from the root directory of `img` as ufs_dirremove does (its record given to
/// the entry before it, in the root's first 512-byte chunk), leaving its inode as it is:
/// unreferenced. The inode the name named.
pub fn unlink_root_entry(img: &mut [u8], sb: &Superblock, name: &str) -> u32 {
    let (ino, at) = root_entry(img, sb, name);
    let root = dinode(img, sb, UFS_ROOTINO);
    let start = sb.fsb_offset(root.di_db[0]) as usize;
    let data = img[start..start + 512].to_vec();
    let prev = DirIter::new(&data, 0, root.di_size, sb.maxino())
        .map(|e| e.unwrap())
        .take_while(|e| start + (e.offset as usize) < at)
        .last()
        .unwrap_or_else(|| panic!("/{name} is the first entry of its chunk"));
    let reclen = u16::from_le_bytes([img[at + 4], img[at + 5]]) + prev.d_reclen;
    let p = start + prev.offset as usize;
    img[p + 4..p + 6].copy_from_slice(&reclen.to_le_bytes());
    ino
}
