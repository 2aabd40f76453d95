//! The Block Register (Depoutovitch & Warkentin), reproduced: the paper's tables and figures beside sufs's.

use super::{PResult, Page, Paper, PapersOptions};

/// Runs the paper's evaluation and returns its page.
pub fn page(o: &PapersOptions, progress: &mut dyn FnMut(&str)) -> PResult<Page> {
    progress("br: nothing yet");
    Ok(Page::new(Paper::BlockRegister, "The Block Register (Depoutovitch & Warkentin), reproduced", o))
}
