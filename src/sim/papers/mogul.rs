//! A better update policy (Mogul 1994), reproduced: the paper's tables and figures beside sufs's.

use super::{PResult, Page, Paper, PapersOptions};

/// Runs the paper's evaluation and returns its page.
pub fn page(o: &PapersOptions, progress: &mut dyn FnMut(&str)) -> PResult<Page> {
    progress("mogul: nothing yet");
    Ok(Page::new(Paper::Mogul, "A better update policy (Mogul 1994), reproduced", o))
}
