//! A hostile user against a root mount, for permissions: each attempt runs as user nobody
//! (`setpriv`, python3 making the one system call), against what root made and used in the
//! mount, whoever checks permissions: the kernel (`default_permissions`) or sufs
//! (`-o permissions=sufs`).

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::fuse::{fsck_clean, fuse_available, public_mount};

/// Runs `op` (`open`, `stat` or `listdir`) on `path` as user nobody: Ok with what a read gave,
/// or the errno.
fn as_nobody(op: &str, path: &Path) -> Result<String, i32> {
    let script = r#"
import os, sys
op, path = sys.argv[1], sys.argv[2]
try:
    if op == "open":
        with open(path, "rb") as f:
            out = f.read().decode()
    elif op == "stat":
        out = oct(os.stat(path).st_mode)
    else:
        out = " ".join(sorted(os.listdir(path)))
    print("ok " + out)
except OSError as e:
    print("errno %d" % e.errno)
"#;
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script, op])
        .arg(path)
        .output()
        .expect("run setpriv");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success(), "setpriv python3: {text} {}", String::from_utf8_lossy(&out.stderr));
    match text.split_once(' ') {
        Some(("ok", v)) => Ok(v.to_string()),
        Some(("errno", n)) => Err(n.parse().expect("an errno")),
        _ => Ok(text.strip_prefix("ok").unwrap_or(&text).to_string()),
    }
}

/// Root makes `/secret` (0700) with a readable file, and `/open` (0755) with one; root reads
/// both, so that the kernel holds their names. Nobody must be refused the file below the
/// directory it may not search (EACCES), by path, though its name is cached, and must read the
/// one it may reach (the control: the mount is reachable and the file readable). Then root
/// takes search permission away from `/open` after its name was cached: refused too.
#[test]
fn a_cached_name_below_a_private_directory_is_refused() {
    if !fuse_available() || unsafe { libc::geteuid() } != 0 {
        return;
    }
    for opts in [&[][..], &["-o", "permissions=sufs"][..]] {
        let (_t, img, mnt, m) = public_mount(opts);
        for (dir, mode) in [("secret", 0o700), ("open", 0o755)] {
            fs::create_dir(mnt.join(dir)).unwrap();
            fs::set_permissions(mnt.join(dir), fs::Permissions::from_mode(mode)).unwrap();
            let f = mnt.join(dir).join("f");
            fs::write(&f, format!("{dir} data")).unwrap();
            fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
            // Root reads it: the kernel now holds the directory's and the file's names.
            assert_eq!(fs::read_to_string(&f).unwrap(), format!("{dir} data"));
        }
        let (secret, open) = (mnt.join("secret/f"), mnt.join("open/f"));
        assert_eq!(as_nobody("open", &open), Ok("open data".into()), "{opts:?}: the control");
        assert_eq!(as_nobody("open", &secret), Err(libc::EACCES), "{opts:?}: open below a 0700 directory");
        assert_eq!(as_nobody("stat", &secret), Err(libc::EACCES), "{opts:?}: stat below a 0700 directory");
        assert_eq!(as_nobody("listdir", &mnt.join("secret")), Err(libc::EACCES), "{opts:?}: list a 0700 directory");
        // Search permission taken away after nobody itself walked to the file.
        fs::set_permissions(mnt.join("open"), fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(as_nobody("open", &open), Err(libc::EACCES), "{opts:?}: open after chmod 700");
        // And given back.
        fs::set_permissions(mnt.join("secret"), fs::Permissions::from_mode(0o711)).unwrap();
        assert_eq!(as_nobody("open", &secret), Ok("secret data".into()), "{opts:?}: open after chmod 711");
        m.umount();
        fsck_clean(&img);
    }
}
