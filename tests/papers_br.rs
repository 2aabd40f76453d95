//! `sufs bench papers --paper block-register --quick` through the command line: it exits 0 (every
//! claim held), and its page has Figure 2's and Figure 3's rows with the paper's value beside
//! sufs's, its claims and its SVGs.

use std::process::Command;

#[test]
fn block_register_page_quick() {
    let t = tempfile::tempdir().unwrap();
    let out_dir = t.path().join("papers");
    let out = Command::new(env!("CARGO_BIN_EXE_sufs"))
        .args(["bench", "papers", "--paper", "block-register", "--quick", "--out"])
        .arg(&out_dir)
        .arg("--dir")
        .arg(t.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let md = std::fs::read_to_string(out_dir.join("block-register.md")).unwrap();
    for needle in
        ["## Figure 2: br relative to LVM (simulated disk)", "## Figure 3", "## The paper's claims", "7200 RPM"]
    {
        assert!(md.contains(needle), "missing {needle:?} in:\n{md}");
    }
    assert!(!md.contains("**no**"), "a claim did not hold:\n{md}");
    let page: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("block-register.json")).unwrap()).unwrap();
    assert_eq!(page["paper"], "block-register");
    assert_eq!(page["quick"], true);
    let rows = page["rows"].as_array().unwrap();
    // Figure 2's eight direct-I/O tests and the unpack, each with the paper's value and sufs's.
    let both: Vec<&serde_json::Value> =
        rows.iter().filter(|r| r["paper"].as_f64().is_some() && r["sufs"].as_f64().is_some()).collect();
    assert!(both.len() >= 9, "{rows:#?}");
    let row = |item: &str| rows.iter().find(|r| r["item"].as_str().unwrap().starts_with(item)).unwrap();
    assert_eq!(row("sequential write OIO 8 (IOPS")["paper"], 126.0);
    let seq = row("sequential write OIO 8 (IOPS")["sufs"].as_f64().unwrap();
    assert!(seq > 100.0 && seq < 1000.0, "{seq}");
    // Figure 3: the reserved store's copies are farther from their chunks than the br store's.
    let span = |item: &str| row(item)["sufs"].as_f64().unwrap();
    assert!(span("sequential write OIO 1, reserved: chunk") > span("sequential write OIO 1, br: chunk"));
    for f in page["figures"].as_array().unwrap() {
        let svg = std::fs::read_to_string(out_dir.join(f["file"].as_str().unwrap())).unwrap();
        assert!(svg.starts_with("<svg"), "{f}");
    }
    assert_eq!(page["figures"].as_array().unwrap().len(), 3);
}
