//! The three papers' evaluations, table by table (`sufs bench papers`).
//!
//! Each paper has a module that runs its tables and figures on the disk model (and on image
//! files where the paper measured a real disk) and returns a [`Page`]: for every table row or
//! figure point, the paper's value beside sufs's, and the qualitative claims the paper makes,
//! each checked ([`Claim`]). [`write_page`] turns a page into `docs/papers/<paper>.md` and
//! `<paper>.json`; the figures' SVGs go beside them.
//!
//! `--quick` scales every run down so that all three papers finish in minutes; CI runs it and
//! fails when a claim does not hold. The full run is what the pages in docs/papers/ show.

pub mod br;
pub mod mogul;
pub mod softdep;

use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What can stop a paper's run: the file system, a benchmark step, the volume layer, a file.
#[derive(Debug, thiserror::Error)]
pub enum PapersError {
    #[error(transparent)]
    Fs(#[from] sufs_fs::fs::FsError),
    #[error(transparent)]
    Bench(#[from] crate::bench::BenchError),
    #[error(transparent)]
    Volume(#[from] sufs_fs::volume::VolumeError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Run(String),
}

pub type PResult<T> = Result<T, PapersError>;

/// The three papers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Paper {
    /// McKusick & Ganger 1999, "Soft Updates: A Technique for Eliminating Most Synchronous
    /// Writes in the Fast File System".
    SoftUpdates,
    /// Mogul 1994, "A Better Update Policy".
    Mogul,
    /// Depoutovitch & Warkentin, "The Block Register".
    BlockRegister,
}

impl Paper {
    pub const ALL: [Paper; 3] = [Paper::SoftUpdates, Paper::Mogul, Paper::BlockRegister];

    /// The name on the command line (`--paper`) and of the page's files.
    pub fn name(self) -> &'static str {
        match self {
            Paper::SoftUpdates => "soft-updates",
            Paper::Mogul => "mogul",
            Paper::BlockRegister => "block-register",
        }
    }

    pub fn from_name(s: &str) -> Option<Paper> {
        match s {
            "soft-updates" | "softdep" => Some(Paper::SoftUpdates),
            "mogul" => Some(Paper::Mogul),
            "block-register" | "br" => Some(Paper::BlockRegister),
            _ => None,
        }
    }
}

/// What every paper's run is given.
#[derive(Clone, Debug)]
pub struct PapersOptions {
    /// Minutes instead of an hour: every run scaled down, claims checked loosely.
    pub quick: bool,
    /// Where the pages, JSON and SVGs go (docs/papers).
    pub out: PathBuf,
    /// Where image files go, for the runs on a real file.
    pub dir: PathBuf,
    pub seed: u64,
}

/// One row of a paper's table, or one point of a figure: the paper's value beside sufs's.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The table or figure, as the paper numbers it ("Table 4-2", "Figure 2", "§5 create").
    pub table: String,
    /// The row within it ("PU, 30 s", "remove 10,000 files, sync/softdep").
    pub item: String,
    /// The unit both values are in ("s", "ms", "writes", "x" for a ratio).
    pub unit: String,
    /// The paper's value, when the paper gives one.
    pub paper: Option<f64>,
    /// sufs's value, when this run measured it.
    pub sufs: Option<f64>,
    /// Why they differ, where they do; how sufs's value was obtained where it is not obvious.
    pub note: String,
}

impl Row {
    /// sufs's value over the paper's, when both exist and the paper's is not zero.
    pub fn ratio(&self) -> Option<f64> {
        match (self.paper, self.sufs) {
            (Some(p), Some(s)) if p != 0.0 => Some(s / p),
            _ => None,
        }
    }
}

/// A qualitative claim of the paper, checked on this run (loosely in `--quick`).
#[derive(Clone, Debug, Serialize)]
pub struct Claim {
    /// The claim as the paper makes it, with its section.
    pub text: String,
    /// What sufs measured, in words and numbers.
    pub measured: String,
    pub holds: bool,
}

/// A figure written as an SVG beside the page.
#[derive(Clone, Debug, Serialize)]
pub struct Figure {
    /// The file name within `out` ("mogul-figure-4-4.svg").
    pub file: String,
    pub caption: String,
}

/// One paper's results.
#[derive(Clone, Debug, Serialize)]
pub struct Page {
    pub paper: Paper,
    pub title: String,
    /// How the paper's setup is modelled: the disk model's parameters with their sources, the
    /// workloads' scale against the paper's. Markdown paragraphs.
    pub setup: Vec<String>,
    pub rows: Vec<Row>,
    pub claims: Vec<Claim>,
    pub figures: Vec<Figure>,
    /// Longer explanations (the gaps the page explains with measurements). Markdown.
    pub discussion: Vec<String>,
    /// Whether this was a `--quick` run.
    pub quick: bool,
    /// The command that reproduces the page.
    pub command: String,
}

impl Page {
    pub fn new(paper: Paper, title: &str, o: &PapersOptions) -> Page {
        let quick = if o.quick { " --quick" } else { "" };
        Page {
            paper,
            title: title.to_string(),
            setup: Vec::new(),
            rows: Vec::new(),
            claims: Vec::new(),
            figures: Vec::new(),
            discussion: Vec::new(),
            quick: o.quick,
            command: format!("sufs bench papers --paper {}{quick} --seed {}", paper.name(), o.seed),
        }
    }

    pub fn row(&mut self, table: &str, item: &str, unit: &str, paper: Option<f64>, sufs: Option<f64>, note: &str) {
        self.rows.push(Row {
            table: table.to_string(),
            item: item.to_string(),
            unit: unit.to_string(),
            paper,
            sufs,
            note: note.to_string(),
        });
    }

    pub fn claim(&mut self, text: &str, measured: String, holds: bool) {
        self.claims.push(Claim { text: text.to_string(), measured, holds });
    }

    /// The claims that did not hold.
    pub fn failed(&self) -> Vec<&Claim> {
        self.claims.iter().filter(|c| !c.holds).collect()
    }
}

/// Runs one paper's evaluation.
pub fn run(paper: Paper, o: &PapersOptions, progress: &mut dyn FnMut(&str)) -> PResult<Page> {
    std::fs::create_dir_all(&o.out)?;
    let page = match paper {
        Paper::SoftUpdates => softdep::page(o, progress)?,
        Paper::Mogul => mogul::page(o, progress)?,
        Paper::BlockRegister => br::page(o, progress)?,
    };
    assert_eq!(page.paper, paper);
    Ok(page)
}

fn fmt_value(v: Option<f64>) -> String {
    match v {
        None => "—".to_string(),
        Some(0.0) => "0".to_string(),
        Some(x) if x.abs() >= 1000.0 => format!("{x:.0}"),
        Some(x) if x.abs() >= 10.0 => format!("{x:.1}"),
        Some(x) if x.abs() >= 0.1 => format!("{x:.2}"),
        Some(x) => format!("{x:.3}"),
    }
}

/// The page as Markdown: setup, one table per paper table (paper, sufs, ratio, note), claims,
/// figures, discussion.
pub fn markdown(page: &Page) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {}\n", page.title);
    let _ = writeln!(s, "Reproduce with `{}` (written by that command; do not edit by hand).\n", page.command);
    if page.quick {
        let _ = writeln!(s, "**This is a `--quick` run: every workload scaled down.**\n");
    }
    if !page.setup.is_empty() {
        let _ = writeln!(s, "## Setup\n");
        for p in &page.setup {
            let _ = writeln!(s, "{p}\n");
        }
    }
    let mut tables: Vec<&str> = Vec::new();
    for r in &page.rows {
        if !tables.contains(&r.table.as_str()) {
            tables.push(&r.table);
        }
    }
    for t in tables {
        let _ = writeln!(s, "## {t}\n");
        let _ = writeln!(s, "| row | unit | paper | sufs | sufs / paper | note |");
        let _ = writeln!(s, "| --- | --- | ---: | ---: | ---: | --- |");
        for r in page.rows.iter().filter(|r| r.table == t) {
            let ratio = r.ratio().map(|x| format!("{x:.2}")).unwrap_or_else(|| "—".to_string());
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                r.item,
                r.unit,
                fmt_value(r.paper),
                fmt_value(r.sufs),
                ratio,
                r.note
            );
        }
        let _ = writeln!(s);
    }
    if !page.claims.is_empty() {
        let _ = writeln!(s, "## The paper's claims\n");
        let _ = writeln!(s, "| claim | measured | holds |");
        let _ = writeln!(s, "| --- | --- | --- |");
        for c in &page.claims {
            let _ = writeln!(s, "| {} | {} | {} |", c.text, c.measured, if c.holds { "yes" } else { "**no**" });
        }
        let _ = writeln!(s);
    }
    if !page.figures.is_empty() {
        let _ = writeln!(s, "## Figures\n");
        for f in &page.figures {
            let _ = writeln!(s, "![{}]({})\n\n{}\n", f.caption, f.file, f.caption);
        }
    }
    if !page.discussion.is_empty() {
        let _ = writeln!(s, "## Where sufs and the paper differ\n");
        for p in &page.discussion {
            let _ = writeln!(s, "{p}\n");
        }
    }
    s
}

/// Writes `<out>/<paper>.md` and `<out>/<paper>.json`; returns the Markdown's path.
pub fn write_page(page: &Page, out: &Path) -> PResult<PathBuf> {
    std::fs::create_dir_all(out)?;
    let md = out.join(format!("{}.md", page.paper.name()));
    std::fs::write(&md, markdown(page))?;
    let json = serde_json::to_string_pretty(page).map_err(|e| PapersError::Run(e.to_string()))?;
    std::fs::write(out.join(format!("{}.json", page.paper.name())), json)?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> PapersOptions {
        PapersOptions { quick: true, out: PathBuf::from("/nonexistent"), dir: PathBuf::from("/tmp"), seed: 1 }
    }

    #[test]
    fn markdown_has_paper_sufs_and_ratio() {
        let mut p = Page::new(Paper::Mogul, "Mogul", &opts());
        p.row("Table 4-2", "PU", "s", Some(100.0), Some(50.0), "");
        p.row("Table 4-2", "AIPU", "s", None, Some(40.0), "no paper value");
        p.claim("AIPU lowers the max read latency (§4.1)", "1.0 s vs 2.0 s".into(), true);
        let md = markdown(&p);
        assert!(md.contains("| PU | s | 100.0 | 50.0 | 0.50 |  |"), "{md}");
        assert!(md.contains("| AIPU | s | — | 40.0 | — |"), "{md}");
        assert!(md.contains("| yes |"));
        assert!(p.failed().is_empty());
        p.claim("x", String::new(), false);
        assert_eq!(p.failed().len(), 1);
        assert!(markdown(&p).contains("**no**"));
    }

    #[test]
    fn names_round_trip() {
        for p in Paper::ALL {
            assert_eq!(Paper::from_name(p.name()), Some(p));
        }
        assert_eq!(Paper::from_name("nope"), None);
    }
}
