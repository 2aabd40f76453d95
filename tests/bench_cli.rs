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

#[test]
fn orderings_bench_runs_in_process_and_through_fuse() {
    let t = tempfile::tempdir().unwrap();
    let tree = t.path().join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    for i in 0..12 {
        std::fs::write(tree.join(if i % 2 == 0 { "sub" } else { "." }).join(format!("h{i}.h")), vec![b'x'; 300 * i])
            .unwrap();
    }
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
