//! `sufs bench papers --paper P --quick` through the command line, one test a paper: the command
//! exits 0 (every claim the run checks held), and the page (Markdown, JSON, SVGs) carries the
//! paper's tables with the paper's value beside sufs's.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `sufs bench papers --paper PAPER --quick` into a fresh directory (images there too) and
/// returns the directory, the page's Markdown and its JSON; fails unless the command exits 0.
fn quick_page(paper: &str) -> (tempfile::TempDir, PathBuf, String, serde_json::Value) {
    let t = tempfile::tempdir().unwrap();
    let out_dir = t.path().join("papers");
    let out = Command::new(env!("CARGO_BIN_EXE_sufs"))
        .args(["bench", "papers", "--paper", paper, "--quick", "--out"])
        .arg(&out_dir)
        .arg("--dir")
        .arg(t.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "exit {:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(out_dir.join(format!("{paper}.md"))).unwrap();
    let json = serde_json::from_str(&std::fs::read_to_string(out_dir.join(format!("{paper}.json"))).unwrap()).unwrap();
    (t, out_dir, md, json)
}

/// Rows with both the paper's value and sufs's.
fn rows_with_both(page: &serde_json::Value) -> usize {
    page["rows"].as_array().unwrap().iter().filter(|r| r["paper"].is_number() && r["sufs"].is_number()).count()
}

/// Every figure the page names is an SVG file beside it; returns how many.
fn figures_are_svgs(page: &serde_json::Value, out_dir: &Path) -> usize {
    let figs = page["figures"].as_array().unwrap();
    for f in figs {
        let svg = std::fs::read_to_string(out_dir.join(f["file"].as_str().unwrap())).unwrap();
        assert!(svg.starts_with("<svg"), "{f}");
    }
    figs.len()
}

#[test]
fn soft_updates_page_quick() {
    let (_t, out_dir, md, json) = quick_page("soft-updates");
    // A row of the torture test with the paper's value (1,459,147 sync writes) and a number of sufs's.
    let row = md.lines().find(|l| l.starts_with("| normal (sync): sync writes |")).expect("torture row");
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(cells[3], "1459147", "{row}");
    assert!(cells[4].parse::<f64>().is_ok_and(|x| x > 0.0), "{row}");
    for table in ["§5 torture test (disk model)", "§5 system build (disk model)", "§5 mail server (disk model)"] {
        assert!(md.contains(&format!("## {table}")), "{table} missing");
    }
    assert!(md.contains("| yes |") && !md.contains("**no**"), "{md}");
    assert!(rows_with_both(&json) >= 40);
    assert!(out_dir.join("soft-updates-tasks.svg").exists());
}

#[test]
fn mogul_quick_page_has_paper_and_sufs_values() {
    let (_t, out_dir, md, json) = quick_page("mogul");
    for table in ["Table 4-1", "Table 2-1", "Figure 4-1", "Figure 4-2", "Table 4-2", "Table 4-3", "Figure 4-7"] {
        assert!(md.contains(&format!("## {table}")), "no {table} in\n{md}");
    }
    let both = rows_with_both(&json);
    assert!(both >= 40, "only {both} rows with both values");
    // The row the page exists for: PU's longest read with delayed writes, seconds as in the paper.
    let rows = json["rows"].as_array().unwrap();
    let pu_max = rows
        .iter()
        .find(|r| r["table"].as_str().unwrap().starts_with("Figure 4-1") && r["item"] == "PU delayed: longest read")
        .unwrap();
    let ratio = pu_max["sufs"].as_f64().unwrap() / pu_max["paper"].as_f64().unwrap();
    assert!((0.5..2.0).contains(&ratio), "PU's longest read is {ratio} of the paper's");
    assert!(json["claims"].as_array().unwrap().iter().all(|c| c["holds"] == true));
    figures_are_svgs(&json, &out_dir);
}

#[test]
fn block_register_page_quick() {
    let (_t, out_dir, md, page) = quick_page("block-register");
    for needle in
        ["## Figure 2: br relative to LVM (simulated disk)", "## Figure 3", "## The paper's claims", "7200 RPM"]
    {
        assert!(md.contains(needle), "missing {needle:?} in:\n{md}");
    }
    assert!(!md.contains("**no**"), "a claim did not hold:\n{md}");
    assert_eq!(page["paper"], "block-register");
    assert_eq!(page["quick"], true);
    let rows = page["rows"].as_array().unwrap();
    // Figure 2's eight direct-I/O tests and the unpack, each with the paper's value and sufs's.
    assert!(rows_with_both(&page) >= 9, "{rows:#?}");
    let row = |item: &str| rows.iter().find(|r| r["item"].as_str().unwrap().starts_with(item)).unwrap();
    assert_eq!(row("sequential write OIO 8 (IOPS")["paper"], 126.0);
    let seq = row("sequential write OIO 8 (IOPS")["sufs"].as_f64().unwrap();
    assert!(seq > 100.0 && seq < 1000.0, "{seq}");
    // Figure 3: the reserved store's copies are farther from their chunks than the br store's.
    let span = |item: &str| row(item)["sufs"].as_f64().unwrap();
    assert!(span("sequential write OIO 1, reserved: chunk") > span("sequential write OIO 1, br: chunk"));
    assert_eq!(figures_are_svgs(&page, &out_dir), 3);
}
