//! `sufs bench scale` at a tiny scale, and soft updates' memory bound over a tree's removal.

use std::process::Command;

fn sufs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sufs"))
}

#[test]
fn scale_bench_prints_every_row_and_json() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("scale.json");
    let out = sufs()
        .args(["bench", "scale", "--size", "8G", "--files", "2000", "--dir"])
        .arg(tmp.path())
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for row in [
        "| mkfs, empty 8G |",
        "| mount + unmount, empty 8G |",
        "| fsck, empty 8G |",
        "| create 2,000 files (directories of 1000) |",
        "| fsck, 2,000 files (directories of 1000) |",
        "| look up 2,000 files (directories of 1000) |",
        "| remove 2,000 files (directories of 1000) (rm -rf) |",
        "| create 2,000 files (one directory) |",
        "| look up 2,000 files (one directory) |",
        "| remove 2,000 files (one directory) (rm -rf) |",
    ] {
        assert!(stdout.contains(row), "no row {row:?} in:\n{stdout}");
    }
    // The listings saw every file (and the tree's two directories).
    assert!(stdout.contains("2,002 entries") && stdout.contains("2,000 entries"), "{stdout}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = r["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 10);
    // Every sufs step ran as a child whose memory was measured.
    let mkfs = &rows[0]["sufs"];
    assert!(mkfs["secs"].as_f64().unwrap() > 0.0 && mkfs["rss_kb"].as_u64().unwrap() > 0, "{mkfs}");
    // The creates left dependencies for the unmount; the removal drained them.
    let deps: Vec<(String, u64)> = serde_json::from_value(r["peak_deps"].clone()).unwrap();
    assert!(deps.iter().any(|(s, n)| s == "create tree" && *n >= 2000), "{deps:?}");
    assert!(r["skipped"].as_array().unwrap().len() <= 3, "{}", r["skipped"]);
    // Nothing left behind in --dir but the JSON.
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["scale.json"]);
}

/// `rm -rf` of a 20,000-file tree under a bound of 1,000 dependency structures: the count
/// never passes the bound by more than the few operations between two counts add, and the
/// image is clean after.
#[test]
fn removing_a_tree_keeps_dependencies_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("t.img");
    let st = sufs().arg("mkfs").arg(&img).args(["--size", "1G", "-i", "16384"]).output().unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let limit = 1000u64;
    for step in ["create", "remove"] {
        let out = sufs()
            .args(["bench", "scale-step"])
            .arg(&img)
            .args(["--step", step, "--layout", "tree", "--files", "20000", "--softdep-limit", &limit.to_string()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{step}: {}", String::from_utf8_lossy(&out.stderr));
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let peak = r["peak_deps"].as_u64().unwrap();
        assert!(peak > limit / 2 && peak <= limit + 200, "{step}: peak {peak} against a bound of {limit}");
    }
    let fsck = sufs().args(["fsck", "-f"]).arg(&img).output().unwrap();
    let text = String::from_utf8_lossy(&fsck.stdout);
    assert!(fsck.status.success() && text.contains("0 files, 2 directories"), "{text}");
}
