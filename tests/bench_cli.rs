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
