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
        let out = sufs(&["mkfs", "--format", "sufs", img.to_str().unwrap(), "--size", size]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "size {size}: {err}");
        assert!(err.contains("too small"), "size {size}: {err}");
        assert!(!img.exists(), "size {size}: no image is left behind");
    }
    // An existing file too small to hold a file system, without --size.
    let img = t.path().join("tiny.img");
    std::fs::write(&img, vec![0u8; 5000]).unwrap();
    let out = sufs(&["mkfs", "--format", "sufs", img.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    // The smallest that works: two groups of 64 blocks.
    let img = t.path().join("min.img");
    let out = sufs(&["mkfs", "--format", "sufs", img.to_str().unwrap(), "--size", "512K"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = sufs(&["fsck", img.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}

/// `sufs --help` describes each command by its own doc comment: `br` is the Block Register,
/// `volume` the volume snapshot (a doc comment above the wrong variant once put the Block
/// Register's words on `volume` and none on `br`).
#[test]
fn help_describes_br_and_volume_each_by_its_own_words() {
    let out = sufs(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let line = |cmd: &str| {
        help.lines()
            .find(|l| l.split_whitespace().next() == Some(cmd))
            .unwrap_or_else(|| panic!("no {cmd} in {help}"))
            .to_string()
    };
    assert!(line("br").contains("Block Register"), "{}", line("br"));
    let volume = line("volume");
    assert!(volume.contains("volume snapshot") && !volume.contains("Block Register"), "{volume}");
}

/// A command whose reader goes away (`sufs dumpfs IMG | head`) ends by SIGPIPE, as Unix tools
/// do, not by a panic in `println!`.
#[test]
fn a_reader_that_goes_away_ends_the_command_without_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("big.img");
    common::ok(&["mkfs", "--format", "sufs", img.to_str().unwrap(), "--size", "64M"]);
    // Its stdout is a pipe whose read end is closed before it starts: its first line meets it.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(common::SUFS)
        .args(["dumpfs", img.to_str().unwrap()])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}: {err}", out.status);
}

/// `sufs mkfs` makes FreeBSD's UFS2 (newfs's 32 KiB blocks of 4 KiB fragments) unless asked for
/// `--format sufs`; each format's own options are refused for the other with a message (exit
/// 2), sizes too small for UFS2 are refused and leave no image, and what is made checks clean.
#[test]
fn mkfs_makes_ufs2_unless_asked_for_sufs_format() {
    let t = tempfile::tempdir().unwrap();
    let path = |n: &str| t.path().join(n).to_str().unwrap().to_string();
    let out = common::ok(&["mkfs", &path("u.img"), "--size", "64M"]);
    assert!(out.contains("block size 32768, fragment size 4096"), "{out}");
    assert!(common::is_ufs2_image(&t.path().join("u.img")));
    let fsck = common::ok(&["fsck", "-n", &path("u.img")]);
    assert!(fsck.contains(" 0 findings"), "{fsck}");
    let out = common::ok(&["mkfs", "--format", "sufs", &path("s.img"), "--size", "64M"]);
    assert!(out.contains("blocks of 4096 bytes"), "{out}");
    assert!(!common::is_ufs2_image(&t.path().join("s.img")));
    let out = common::ok(&["mkfs", "--ufs2", &path("u2.img"), "--size", "64M", "-f", "1024", "-b", "8192"]);
    assert!(out.contains("block size 8192, fragment size 1024"), "{out}");
    for (args, says) in [
        (vec!["--inodes", "100"], "-i BYTES"),
        (vec!["--format", "sufs", "-f", "1024"], "-f is newfs's"),
        (vec!["--format", "sufs", "-L", "x"], "-L is newfs's"),
    ] {
        let img = path("refused.img");
        let mut all = vec!["mkfs", &img, "--size", "64M"];
        all.extend(args.iter().copied());
        let out = sufs(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!t.path().join("refused.img").exists(), "{args:?}: nothing made");
    }
    for size in ["0", "4095", "65536", "256K"] {
        let img = path(&format!("small-{size}.img"));
        let out = sufs(&["mkfs", &img, "--size", size]);
        assert_eq!(out.status.code(), Some(1), "size {size}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(!std::path::Path::new(&img).exists(), "size {size}: no image is left behind");
    }
}
