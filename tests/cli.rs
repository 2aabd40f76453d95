//! The `sufs` command's own checks of its arguments: a clear message and an exit code, never a
//! panic.

mod common;

use common::sufs;

#[test]
fn mkfs_refuses_sizes_too_small_with_a_message() {
    let t = tempfile::tempdir().unwrap();
    // 256K is 64 blocks: one group of the smallest size, and mkfs makes two.
    for size in ["0", "1", "4095", "4096", "65536", "256K"] {
        let img = t.path().join(format!("small-{size}.img"));
        let out = sufs(&["mkfs", img.to_str().unwrap(), "--size", size]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "size {size}: {err}");
        assert!(err.contains("too small"), "size {size}: {err}");
        assert!(!img.exists(), "size {size}: no image is left behind");
    }
    // An existing file too small to hold a file system, without --size.
    let img = t.path().join("tiny.img");
    std::fs::write(&img, vec![0u8; 5000]).unwrap();
    let out = sufs(&["mkfs", img.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    // The smallest that works: two groups of 64 blocks.
    let img = t.path().join("min.img");
    let out = sufs(&["mkfs", img.to_str().unwrap(), "--size", "512K"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = sufs(&["fsck", img.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}
