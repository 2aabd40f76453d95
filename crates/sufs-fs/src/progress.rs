//! Progress bars for the long passes over big images (mkfs, fsck, growfs), drawn on stderr only
//! when the command line asked for them (`enable`, which it does when stderr is a terminal):
//! tests, CI logs and library callers never see one.

use std::sync::atomic::{AtomicBool, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns the bars on for this process if stderr is a terminal.
pub fn enable_on_terminal() {
    use std::io::IsTerminal;
    ENABLED.store(std::io::stderr().is_terminal(), Ordering::Relaxed);
}

/// A bar over `len` steps, or nothing when bars are off or the pass is too short to show one.
pub struct Bar(Option<indicatif::ProgressBar>);

/// Passes of fewer steps than this draw no bar.
const MIN_STEPS: u64 = 64;

impl Bar {
    pub fn new(what: &str, len: u64) -> Bar {
        if !ENABLED.load(Ordering::Relaxed) || len < MIN_STEPS {
            return Bar(None);
        }
        let style = indicatif::ProgressStyle::with_template("{prefix:>6} {bar:40} {pos}/{len} {msg} ({eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        let bar = indicatif::ProgressBar::new(len).with_style(style).with_prefix(what.to_string());
        Bar(Some(bar))
    }
    /// The bar with a note after the counts (e.g. what the steps are).
    pub fn with_message(self, msg: &'static str) -> Bar {
        if let Some(b) = &self.0 {
            b.set_message(msg);
        }
        self
    }
    pub fn inc(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.inc(n);
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            b.finish_and_clear();
        }
    }
}
