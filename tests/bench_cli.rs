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
            "files,copy,andrew,postmark,mail,stall,read",
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
        // The tree (6 files, a subdirectory, in t0) listed, stat'ed and read cold.
        "| read | list | 8 |",
        "| read | stat | 8 |",
        "| read | read | 6 |",
        "softdep / sufs-async",
        "skipped nofs",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    for w in ["files", "copy", "andrew", "postmark", "mail", "stall", "read"] {
        let svg = std::fs::read_to_string(out.join(format!("peers-{w}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("sufs-softdep"), "{w}");
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 14);
    assert!(runs.iter().all(|r| r["writes"]["blocks"].as_u64().unwrap() > 0), "{v}");
    // Every request the mount served is counted: a create, a stat and a removal of 30 files
    // take at least 30 each.
    let files = runs.iter().find(|r| r["workload"] == "files" && r["peer"] == "sufs-softdep").unwrap();
    assert!(files["writes"]["messages"].as_u64().unwrap() >= 90, "{files}");
    assert!(text.contains("| files | FUSE messages |"), "{text}");
    assert_eq!(v["skipped"][0][0], "nofs");
}

#[test]
fn peers_bench_runs_parallel_and_coldread_with_update_policies() {
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("skipped: /dev/fuse is missing");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let json = t.path().join("peers.json");
    // Both of Mogul's policies, on a 16 MiB cache; a policy that does not exist is skipped.
    let run = Command::new(env!("CARGO_BIN_EXE_sufs"))
        .args(["bench", "--peers", "sufs-softdep-pu,sufs-softdep-aipu,sufs-softdep-never"])
        .args(["--workloads", "parallel,coldread", "--sufs-cache", "16M"])
        .args(["--parallel-files", "10", "--parallel-mb", "1", "--parallel-messages", "3"])
        .args(["--coldread-secs", "1.5", "--coldread-rate", "4", "--image-size", "256M", "--dir"])
        .arg(t.path())
        .arg("--out")
        .arg(t.path().join("plots"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{text}{}", String::from_utf8_lossy(&run.stderr));
    for needle in [
        "| parallel | create x1 | 10 |",
        "| parallel | stat x2 | 20 |",
        "| parallel | remove x4 | 40 |",
        "| parallel | write MiB x4 | 4 |",
        "| parallel | read MiB x2 | 2 |",
        "| parallel | mail x4 | 12 |",
        "| coldread | make cold files | 151 |",
        "| coldread | cold reads |",
        "| coldread | read: std dev |",
        "| coldread | read: max |",
        "softdep-pu / sufs-softdep-aipu",
        "skipped sufs-softdep-never",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    for r in runs {
        let opts: Vec<&str> = r["mount_options"].as_array().unwrap().iter().map(|o| o.as_str().unwrap()).collect();
        let policy = if r["peer"] == "sufs-softdep-pu" { "pu" } else { "aipu" };
        assert!(opts.windows(2).any(|w| w == ["--update", policy]), "{opts:?}");
        assert!(opts.windows(2).any(|w| w == ["--cache", "16777216"]), "{opts:?}");
        assert!(r["writes"]["blocks"].as_u64().unwrap() > 0, "{r}");
        let phase = |name: &str| r["phases"].as_array().unwrap().iter().find(|p| p["name"] == name).cloned();
        if r["workload"] == "coldread" {
            let reads = phase("cold reads").unwrap()["ops"].as_u64().unwrap();
            assert!(reads > 10, "{r}");
            let ms = |n: &str| phase(n).unwrap()["secs"].as_f64().unwrap();
            assert!(0.0 < ms("read: median") && ms("read: median") <= ms("read: p99"), "{r}");
            assert!(ms("read: p99") <= ms("read: max") && ms("read: mean") <= ms("read: max"), "{r}");
            // The writer wrote while the reader read: 4 MiB/s for 1.5 s.
            assert!(phase("writer MiB").unwrap()["ops"].as_u64().unwrap() >= 4, "{r}");
            assert!(phase("writer MiB").unwrap()["alongside"].as_bool().unwrap(), "{r}");
            assert!(phase("read: max").unwrap()["latency"].as_bool().unwrap());
        } else {
            assert_eq!(phase("read MiB x4").unwrap()["ops"], 4);
        }
    }
}

#[test]
fn peers_bench_measures_the_floor_and_counts_requests_per_phase() {
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("skipped: /dev/fuse is missing");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let tree = small_tree(t.path(), 6, 500);
    let json = t.path().join("peers.json");
    let run = Command::new(env!("CARGO_BIN_EXE_sufs"))
        .args(["bench", "--peers", "sufs-softdep-classic,floor-classic", "--workloads", "files,andrew"])
        .args(["--files", "30", "--andrew-files", "6", "--image-size", "64M", "--rounds", "2", "--andrew-tree"])
        .arg(&tree)
        .arg("--dir")
        .arg(t.path())
        .arg("--out")
        .arg(t.path().join("plots"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{text}{}", String::from_utf8_lossy(&run.stderr));
    for needle in [
        "| files | create | 30 |",
        "| softdep-classic / floor-classic |",
        "| andrew | compile |",
        "FUSE requests per operation",
        "2 rounds, the peers' order rotated each round",
        "| files | lock held a message (µs) | | ",
        "| files | device busy (s) | | ",
        "| files | server CPU (s) | | ",
        "| files | server CPU | ",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    // Requests per file made, for each server: a CREATE each (and a LOOKUP, a RELEASE...).
    let per_op = text.lines().find(|l| l.starts_with("| files | create | 4.") && l.contains(": ")).unwrap_or_default();
    assert_eq!(per_op.matches("create 1.00").count(), 2, "{text}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    // Two rounds of each workload on each server, one run of medians each.
    assert_eq!((runs.len(), v["options"]["rounds"].as_u64()), (4, Some(2)), "{v}");
    for r in runs {
        let phase = |name: &str| r["phases"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap().clone();
        let count = |name: &str, op: &str| phase(name)["messages"][op].as_u64().unwrap_or(0);
        if r["workload"] == "files" {
            // One CREATE per file made and one UNLINK per file removed, on both servers; a stat
            // after the dentries were dropped asks for the name again.
            assert_eq!(count("create", "create"), 30, "{r}");
            assert_eq!(count("remove", "unlink"), 30, "{r}");
            assert!(count("stat", "lookup") >= 30 || !is_root(), "{r}");
            assert!(phase("create")["secs"].as_f64().unwrap() > 0.0, "{r}");
        } else {
            // Every file of the tree copied in, then an object file made for each.
            assert_eq!(count("copy tree", "create"), 6, "{r}");
            assert_eq!(count("compile", "create"), 6, "{r}");
            assert!(count("read all", "read") >= 5, "{r}");
        }
        assert!(r["writes"]["messages"].as_u64().unwrap() >= 60, "{r}");
        // Both servers' CPU time, from their exit: each served the requests above.
        assert!(r["writes"]["server_cpu_secs"].as_f64().unwrap() > 0.0, "{r}");
        if r["peer"] == "floor-classic" {
            assert_eq!(r["writes"]["blocks"], 0, "the floor writes nothing: {r}");
            assert!(r["writes"].get("lock_held_ns").is_none(), "the floor has no lock: {r}");
        } else {
            assert!(r["writes"]["lock_held_ns"].as_u64().unwrap() > 0, "sufs's lock was held: {r}");
            assert!(r["writes"]["device_busy_secs"].as_f64().unwrap() > 0.0, "sufs wrote its image: {r}");
        }
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `sufs bench` with `args` and `--dir DIR --json DIR/peers.json`, asserts that it
/// succeeded, and answers its output and JSON report.
fn bench_json(dir: &std::path::Path, args: &[&str]) -> (String, serde_json::Value) {
    let json = dir.join("peers.json");
    let run = Command::new(env!("CARGO_BIN_EXE_sufs"))
        .arg("bench")
        .args(args)
        .arg("--dir")
        .arg(dir)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "{text}{}", String::from_utf8_lossy(&run.stderr));
    (text, serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap())
}

#[test]
fn peers_bench_runs_sufs_on_ufs2() {
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("skipped: /dev/fuse is missing");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let tree = small_tree(t.path(), 6, 500);
    // A sufs peer's image is UFS2, as `sufs mkfs` makes it (`ufs2` after the ordering changes
    // nothing). The bench's fsck after each workload must find both clean; `sufsfmt`, the
    // earlier format's peer, is no peer any more.
    let peers = "sufs-softdep,sufs-softdep-ufs2,sufs-softdep-sufsfmt";
    let sizes = ["--files", "30", "--tree-files", "8", "--image-size", "64M", "--trees"];
    let mut args = vec!["--peers", peers, "--workloads", "files,copy"];
    args.extend(sizes);
    args.push(tree.to_str().unwrap());
    let (text, v) = bench_json(t.path(), &args);
    for needle in ["| files | create | 30 |", "softdep / sufs-softdep-ufs2", "skipped sufs-softdep-sufsfmt"] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    let runs = v["runs"].as_array().unwrap();
    for peer in ["sufs-softdep", "sufs-softdep-ufs2"] {
        let mine: Vec<_> = runs.iter().filter(|r| r["peer"] == peer).collect();
        assert_eq!(mine.len(), 2, "{peer}: {v}");
        assert!(mine.iter().all(|r| r["writes"]["blocks"].as_u64().unwrap() > 0), "{peer}: {v}");
    }
}
