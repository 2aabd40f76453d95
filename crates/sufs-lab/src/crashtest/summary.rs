//! `Summary`: what the crash states of one workload showed (promises, states, findings and
//! verdicts by kind, the first violating state in full), and how it prints.

use std::collections::BTreeMap;
use std::fmt;

use sufs_fs::fsck::Class;

use super::recorder::{CrashState, Recording};

/// One verdict on a crash state.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub class: Class,
    pub kind: String,
    pub text: String,
}

/// What the crash states of one workload showed.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub workload: String,
    pub ordering: String,
    pub seed: u64,
    pub unmounted: bool,
    pub ops: usize,
    pub writes: usize,
    pub batches: usize,
    /// Barriers at which other batches' writes were in the air too (flights side by side):
    /// their crash states hold any part of all of them.
    pub shared: usize,
    /// Promises made, by kind.
    pub promises: BTreeMap<&'static str, usize>,
    pub states: usize,
    /// Findings and tester verdicts by kind (the `Finding` variant name, or the tester's own).
    pub findings_by_kind: BTreeMap<String, usize>,
    pub violations_by_kind: BTreeMap<String, usize>,
    pub allowed: usize,
    pub violations: usize,
    pub states_with_violations: usize,
    /// The first state with a violation: how it was built, and all its findings.
    pub first_violation: Option<String>,
}

impl Summary {
    pub(super) fn add(&mut self, rec: &Recording, s: &CrashState, verdicts: &[Verdict]) {
        let mut bad = false;
        for v in verdicts {
            *self.findings_by_kind.entry(v.kind.clone()).or_default() += 1;
            match v.class {
                Class::Allowed => self.allowed += 1,
                Class::Violation => {
                    bad = true;
                    self.violations += 1;
                    *self.violations_by_kind.entry(v.kind.clone()).or_default() += 1;
                }
            }
        }
        if bad {
            self.states_with_violations += 1;
            if self.first_violation.is_none() {
                // Every finding, violations first; a state of thousands (an indirect block full
                // of garbage) is cut short, saying how much was left out.
                let mut text = rec.describe(s);
                for (class, limit) in [(Class::Violation, 200), (Class::Allowed, 40)] {
                    let of: Vec<&Verdict> = verdicts.iter().filter(|v| v.class == class).collect();
                    for v in of.iter().take(limit) {
                        text.push_str(&format!("\n    {:?} {}: {}", v.class, v.kind, v.text));
                    }
                    if of.len() > limit {
                        text.push_str(&format!("\n    ... and {} more {class:?} findings", of.len() - limit));
                    }
                }
                self.first_violation = Some(text);
            }
        }
    }
}

fn counts(m: &BTreeMap<String, usize>) -> String {
    m.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "crashtest {} --ordering {} --seed {}: {} operations, {} writes in {} batches{}, {}",
            self.workload,
            self.ordering,
            self.seed,
            self.ops,
            self.writes,
            self.batches,
            match self.shared {
                0 => String::new(),
                n => format!(" ({n} landing with others in the air)"),
            },
            if self.unmounted { "then unmount" } else { "stopped without unmount" }
        )?;
        let promises: Vec<String> = self.promises.iter().map(|(k, n)| format!("{n} {k}")).collect();
        writeln!(f, "  promises: {}", if promises.is_empty() { "none".into() } else { promises.join(", ") })?;
        writeln!(f, "  crash states: {}", self.states)?;
        let allowed: BTreeMap<String, usize> = self
            .findings_by_kind
            .iter()
            .map(|(k, &n)| (k.clone(), n - self.violations_by_kind.get(k).copied().unwrap_or(0)))
            .filter(|&(_, n)| n > 0)
            .collect();
        writeln!(f, "  allowed findings: {} ({})", self.allowed, counts(&allowed))?;
        if self.violations == 0 {
            write!(f, "  violations: 0")
        } else {
            writeln!(
                f,
                "  VIOLATIONS: {} in {} states ({})",
                self.violations,
                self.states_with_violations,
                counts(&self.violations_by_kind)
            )?;
            write!(f, "  first violation: {}", self.first_violation.as_deref().unwrap_or(""))
        }
    }
}
