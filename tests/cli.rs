//! The `sufs` command's own checks of its arguments: a clear message and an exit code, never a
//! panic.

mod common;

use common::sufs;

/// An existing file too small to hold a file system, without --size: refused with exit 1, a
/// message, and the file as it was.
#[test]
fn mkfs_refuses_a_file_too_small_with_a_message() {
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("tiny.img");
    std::fs::write(&img, vec![7u8; 5000]).unwrap();
    let out = sufs(&["mkfs", img.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
    assert_eq!(std::fs::read(&img).unwrap(), vec![7u8; 5000]);
}

/// sufs's own earlier format is retired: an image of it (its magic "SUFSFFS1" at byte 0) is
/// refused by every command that opens an image, with a message that says what it is and what
/// to do, and is left as it was; `--format sufs` is refused where it was taken.
#[test]
fn the_retired_format_is_refused_by_every_command_with_a_message() {
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("old.img");
    let mut bytes = vec![0u8; 4 << 20];
    bytes[..8].copy_from_slice(&0x5355_4653_4646_5331u64.to_le_bytes());
    std::fs::write(&img, &bytes).unwrap();
    let i = img.to_str().unwrap();
    let mnt = t.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    let commands: [&[&str]; 11] = [
        &["fsck", i],
        &["fsck", "-y", i],
        &["fsck", "-p", i],
        &["dumpfs", i],
        &["inspect", i, "sb"],
        &["tunefs", "-p", i],
        &["growfs", i, "--size", "8M"],
        &["snapshot", "--on", i, "list"],
        &["br", "--on", i, "list"],
        &["mount", "-o", "ro", i, m],
        &["mount", i, m],
    ];
    for args in commands {
        let out = sufs(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(err.contains("sufs's earlier format") && err.contains("no longer reads"), "{args:?}: {err}");
        assert!(std::fs::read(&img).unwrap() == bytes, "{args:?}: the image changed");
    }
    for args in [&["mkfs", "--format", "sufs", i][..], &["crashtest", "--ordering", "sync", "--format", "sufs"]] {
        let out = sufs(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("retired"), "{args:?}: {err}");
    }
    assert!(std::fs::read(&img).unwrap() == bytes);
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
    common::ok(&["mkfs", img.to_str().unwrap(), "--size", "64M"]);
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

/// `sufs mkfs` makes FreeBSD's UFS2 (newfs's 32 KiB blocks of 4 KiB fragments, or those asked
/// for); the earlier format's options are refused with a message (exit 2), sizes too small for
/// UFS2 are refused and leave no image, and what is made checks clean.
#[test]
fn mkfs_makes_ufs2() {
    let t = tempfile::tempdir().unwrap();
    let path = |n: &str| t.path().join(n).to_str().unwrap().to_string();
    let out = common::ok(&["mkfs", &path("u.img"), "--size", "64M"]);
    assert!(out.contains("block size 32768, fragment size 4096"), "{out}");
    assert!(common::is_ufs2_image(&t.path().join("u.img")));
    let fsck = common::ok(&["fsck", "-n", &path("u.img")]);
    assert!(fsck.contains(" 0 findings"), "{fsck}");
    let out = common::ok(&["mkfs", "--ufs2", &path("u2.img"), "--size", "64M", "-f", "1024", "-b", "8192"]);
    assert!(out.contains("block size 8192, fragment size 1024"), "{out}");
    for (args, says) in [
        (vec!["--inodes", "100"], "unexpected argument '--inodes'"),
        (vec!["--format", "sufs", "-f", "1024"], "retired"),
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
