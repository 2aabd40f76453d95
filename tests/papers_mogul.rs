//! `sufs bench papers --paper mogul --quick`: the page is written, its rows carry the paper's
//! value beside sufs's, and every claim the run checks holds (the command exits 1 otherwise).

use std::process::Command;

#[test]
fn mogul_quick_page_has_paper_and_sufs_values() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("papers");
    let st = Command::new(env!("CARGO_BIN_EXE_sufs"))
        .args(["bench", "papers", "--paper", "mogul", "--quick", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let md = std::fs::read_to_string(out.join("mogul.md")).unwrap();
    for table in ["Table 4-1", "Table 2-1", "Figure 4-1", "Figure 4-2", "Table 4-2", "Table 4-3", "Figure 4-7"] {
        assert!(md.contains(&format!("## {table}")), "no {table} in\n{md}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("mogul.json")).unwrap()).unwrap();
    let rows = json["rows"].as_array().unwrap();
    let both = rows.iter().filter(|r| r["paper"].is_number() && r["sufs"].is_number()).count();
    assert!(both >= 40, "only {both} rows with both values");
    // The row the page exists for: PU's longest read with delayed writes, seconds as in the paper.
    let pu_max = rows
        .iter()
        .find(|r| r["table"].as_str().unwrap().starts_with("Figure 4-1") && r["item"] == "PU delayed: longest read")
        .unwrap();
    let ratio = pu_max["sufs"].as_f64().unwrap() / pu_max["paper"].as_f64().unwrap();
    assert!((0.5..2.0).contains(&ratio), "PU's longest read is {ratio} of the paper's");
    assert!(json["claims"].as_array().unwrap().iter().all(|c| c["holds"] == true));
    for f in json["figures"].as_array().unwrap() {
        let svg = std::fs::read_to_string(out.join(f["file"].as_str().unwrap())).unwrap();
        assert!(svg.starts_with("<svg"), "{}", f["file"]);
    }
}
