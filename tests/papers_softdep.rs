//! `sufs bench papers --paper soft-updates --quick`: the soft updates paper's page is written,
//! every claim holds, and its tables carry the paper's values beside sufs's.

use std::process::Command;

#[test]
fn soft_updates_page_quick() {
    let tmp = std::env::temp_dir().join(format!("sufs-papers-softdep-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sufs"))
        .args(["bench", "papers", "--paper", "soft-updates", "--quick", "--out"])
        .arg(&tmp)
        .arg("--dir")
        .arg(&tmp)
        .output()
        .expect("sufs runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "exit {:?}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let md = std::fs::read_to_string(tmp.join("soft-updates.md")).unwrap();
    // A row of the torture test with the paper's value (1,459,147 sync writes) and a number of sufs's.
    let row = md.lines().find(|l| l.starts_with("| normal (sync): sync writes |")).expect("torture row");
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(cells[3], "1459147", "{row}");
    assert!(cells[4].parse::<f64>().is_ok_and(|x| x > 0.0), "{row}");
    for table in ["§5 torture test (disk model)", "§5 system build (disk model)", "§5 mail server (disk model)"] {
        assert!(md.contains(&format!("## {table}")), "{table} missing");
    }
    assert!(md.contains("| yes |") && !md.contains("**no**"), "{md}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.join("soft-updates.json")).unwrap()).unwrap();
    let rows = json["rows"].as_array().unwrap();
    assert!(rows.iter().filter(|r| r["paper"].is_number() && r["sufs"].is_number()).count() >= 40);
    assert!(tmp.join("soft-updates-tasks.svg").exists());
    let _ = std::fs::remove_dir_all(&tmp);
}
