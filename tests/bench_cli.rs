//! `sufs bench update-policy` through the command line: it prints the table and writes the plots.

use std::process::Command;

#[test]
fn update_policy_bench_prints_and_plots() {
    let t = tempfile::tempdir().unwrap();
    let json = t.path().join("r.json");
    let out = Command::new(env!("CARGO_BIN_EXE_sufs"))
        .args(["bench", "update-policy", "--trials", "1", "--seconds", "60", "--out"])
        .arg(t.path())
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for needle in ["PU delayed", "AIPU delayed", "max read response", "blocks written", "aipu"] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    for f in ["update-policy-histogram.svg", "update-policy-bursts.svg"] {
        let svg = std::fs::read_to_string(t.path().join(f)).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("AIPU delayed"), "{f}");
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["update_policy"].as_array().unwrap().len(), 4);
    let bad =
        Command::new(env!("CARGO_BIN_EXE_sufs")).args(["bench", "update-policy", "--disk", "floppy"]).output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown disk model"));
}

/// A source tree of `n` files of 0, `size`, 2 `size`, ... bytes, half of them in a subdirectory.
fn small_tree(dir: &std::path::Path, n: usize, size: usize) -> std::path::PathBuf {
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    for i in 0..n {
        let d = if i % 2 == 0 { tree.join("sub") } else { tree.clone() };
        std::fs::write(d.join(format!("h{i}.h")), vec![b'x'; size * i]).unwrap();
    }
    tree
}

#[test]
fn orderings_bench_runs_in_process_and_through_fuse() {
    let t = tempfile::tempdir().unwrap();
    let tree = small_tree(t.path(), 12, 300);
    let through = if std::path::Path::new("/dev/fuse").exists() { "both" } else { "lib" };
    let out = Command::new(env!("CARGO_BIN_EXE_sufs"))
        .args(["bench", "orderings", "--files", "40", "--tree-files", "10", "--big-mb", "2", "--rounds", "1"])
        .args(["--through", through, "--tree"])
        .arg(&tree)
        .arg("--dir")
        .arg(t.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let tables = text.matches("softdep vs async:").count();
    assert_eq!(tables, if through == "both" { 2 } else { 1 }, "{text}");
    for needle in ["in-process", "copy tree", "write 2M", "softdep ", "fewer writes"] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    // Every ordering wrote something, and sync wrote synchronously.
    let sync_row = text.lines().find(|l| l.starts_with("sync ")).unwrap();
    let cols: Vec<&str> = sync_row.split_whitespace().collect();
    assert!(cols[cols.len() - 2].parse::<u64>().unwrap() > 40, "{sync_row}");
}

#[test]
fn peers_bench_prints_table_plots_and_json() {
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("skipped: /dev/fuse is missing");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let tree = small_tree(t.path(), 6, 500);
    let json = t.path().join("peers.json");
    let out = t.path().join("plots");
    // Only sufs (the other peers need fuse2fs and root and take longer), and a peer that is
    // not there, which must be listed as skipped rather than given numbers.
    let run = Command::new(env!("CARGO_BIN_EXE_sufs"))
        .args([
            "bench",
            "--peers",
            "sufs-softdep,sufs-async,nofs",
            "--workloads",
            "files,copy,andrew,postmark,mail,stall",
        ])
        .args(["--files", "30", "--tree-files", "8", "--andrew-files", "6", "--postmark-files", "20"])
        .args(["--mail-messages", "10", "--stall-mb", "4", "--stall-secs", "0.3"])
        .args(["--postmark-tx", "40", "--image-size", "64M", "--trees"])
        .arg(&tree)
        .arg("--andrew-tree")
        .arg(&tree)
        .arg("--dir")
        .arg(t.path())
        .arg("--out")
        .arg(&out)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{text}{}", String::from_utf8_lossy(&run.stderr));
    for needle in [
        "| files | create | 30 |",
        "| postmark | transactions | 80 |",
        "| mail | mail x4 | 40 |",
        "| stall | write 4 MiB | 4 |",
        "| stall | create: worst |",
        "softdep / sufs-async",
        "skipped nofs",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    for w in ["files", "copy", "andrew", "postmark", "mail", "stall"] {
        let svg = std::fs::read_to_string(out.join(format!("peers-{w}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("sufs-softdep"), "{w}");
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 12);
    assert!(runs.iter().all(|r| r["writes"]["blocks"].as_u64().unwrap() > 0), "{v}");
    assert_eq!(v["skipped"][0][0], "nofs");
}
