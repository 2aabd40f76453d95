//! A block's bytes as a write will carry them (`Outgoing`): the buffer's own bytes, shared, and
//! the changes the write hooks made for this write alone (soft updates' roll-backs), kept as
//! patches until the write is issued.
//!
//! FreeBSD rolls a dependency back in the buffer itself, under the buffer's lock, and forward
//! when the write is done: the buffer cannot change while it is written. sufs's buffers stay
//! writable while their write is in the air, so the write carries bytes of its own. Made when
//! the batch is prepared, under the file system's lock, that was a copy of the whole block for
//! every roll-back of a few bytes (an entry's inode number, a dinode): the longest part of an
//! fsync's hold of the lock (docs/performance.md, "Where the lock is held"). Now the hooks note
//! the few bytes they change (`edit`), and the block is put together (`bytes`) by whoever issues
//! the write, outside the lock. The buffer's bytes cannot change meanwhile: the write holds them
//! (`base`), and a change of the buffer goes to a copy of the buffer's own.
//!
//! A group header is also sealed with its check hash on its way out: the seal is noted too
//! (`seal_with`) and run over the block once it is put together.
//!
//! Invariant: the bytes a write carries are `base` with the patches laid over it in the order
//! they were made, then sealed; a patch lies within the block. Once `whole` has been asked for,
//! `base` is the write's own copy, every patch is in it and later edits go straight into it.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

/// One change of the block for this write: its bytes at `off`.
#[derive(Debug, Clone)]
struct Patch {
    off: usize,
    bytes: Box<[u8]>,
}

impl Patch {
    fn range(&self) -> Range<usize> {
        self.off..self.off + self.bytes.len()
    }
}

/// What a block's bytes go through last, once put together: a group header's check hash.
type Seal = Box<dyn Fn(&mut [u8]) + Send + Sync>;

/// The bytes one write of a block carries.
pub struct Outgoing {
    /// The buffer's bytes when the write was prepared (shared with the buffer until `whole`).
    base: Arc<[u8]>,
    /// This write's changes, oldest first; empty once `base` is the write's own copy.
    patches: Vec<Patch>,
    /// `base` is the write's own copy (`whole`), shared with no buffer.
    own: bool,
    /// Run over the block as it is put together (`bytes`).
    seal: Option<Seal>,
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let patched: usize = self.patches.iter().map(|p| p.bytes.len()).sum();
        let (len, own, sealed) = (self.len(), self.own, self.seal.is_some());
        write!(f, "Outgoing {{ {len} bytes, {patched} patched, own copy {own}, sealed {sealed} }}")
    }
}

impl Outgoing {
    /// The write of `base` as it is.
    pub fn new(base: Arc<[u8]>) -> Outgoing {
        Outgoing { base, patches: Vec::new(), own: false, seal: None }
    }

    pub fn len(&self) -> usize {
        self.base.len()
    }

    /// True when the write carries `buf`'s bytes unchanged and uncopied.
    #[cfg(test)]
    pub fn shares(&self, buf: &Arc<[u8]>) -> bool {
        self.patches.is_empty() && self.seal.is_none() && Arc::ptr_eq(&self.base, buf)
    }

    /// The bytes at `at` as the write will carry them.
    pub fn read(&self, at: Range<usize>) -> Cow<'_, [u8]> {
        assert!(at.start <= at.end && at.end <= self.len(), "a read of {at:?} past the block's {} bytes", self.len());
        if !self.patches.iter().any(|p| overlaps(&p.range(), &at)) {
            return Cow::Borrowed(&self.base[at]);
        }
        let mut bytes = self.base[at.clone()].to_vec();
        self.lay_over(&mut bytes, at.start);
        Cow::Owned(bytes)
    }

    /// The bytes at `at`, to change for this write only (the buffer keeps its own): a patch
    /// holding what the write carries there now, or the write's own copy once it has one.
    pub fn edit(&mut self, at: Range<usize>) -> &mut [u8] {
        assert!(at.start <= at.end && at.end <= self.len(), "an edit of {at:?} past the block's {} bytes", self.len());
        if self.own {
            return &mut self.whole()[at];
        }
        let bytes = self.read(at.clone()).into_owned().into_boxed_slice();
        self.patches.push(Patch { off: at.start, bytes });
        &mut self.patches.last_mut().expect("just pushed").bytes
    }

    /// The whole block to change for this write only: the write's own copy, made now (a change
    /// of most of it, a group header's counts and check hash).
    pub fn whole(&mut self) -> &mut [u8] {
        if !self.own {
            // One allocation, one copy: the patches go into the new block itself.
            let mut copy: Arc<[u8]> = Arc::from(&self.base[..]);
            self.lay_over(Arc::get_mut(&mut copy).expect("just made"), 0);
            (self.base, self.own) = (copy, true);
            self.patches.clear();
        }
        assert!(self.patches.is_empty(), "a write's own copy holds its patches");
        Arc::get_mut(&mut self.base).expect("the write's own copy is shared with nobody")
    }

    /// Notes that the block, once put together, is to go through `seal` (a group header's
    /// check hash over its final bytes); the last change of the write.
    pub fn seal_with(&mut self, seal: impl Fn(&mut [u8]) + Send + Sync + 'static) {
        assert!(self.seal.is_none(), "a block sealed twice for one write");
        self.seal = Some(Box::new(seal));
    }

    /// The block as the write carries it: the buffer's bytes, shared, when nothing was changed;
    /// else put together now (outside the file system's lock, by the write's issuer).
    pub fn bytes(&self) -> Cow<'_, [u8]> {
        if self.patches.is_empty() && self.seal.is_none() {
            return Cow::Borrowed(&self.base);
        }
        let mut copy = self.base.to_vec();
        self.lay_over(&mut copy, 0);
        if let Some(seal) = &self.seal {
            seal(&mut copy);
        }
        Cow::Owned(copy)
    }

    /// The bytes this write changed in patches (None once it has a copy of its own).
    #[cfg(test)]
    pub fn patched(&self) -> Option<usize> {
        (!self.own).then(|| self.patches.iter().map(|p| p.bytes.len()).sum())
    }

    #[cfg(test)]
    pub fn to_vec(&self) -> Vec<u8> {
        self.bytes().into_owned()
    }

    /// Lays the patches over `bytes`, which hold the block's bytes from `from` on.
    fn lay_over(&self, bytes: &mut [u8], from: usize) {
        let span = from..from + bytes.len();
        for p in &self.patches {
            let (s, e) = (p.off.max(span.start), p.range().end.min(span.end));
            if s < e {
                bytes[s - from..e - from].copy_from_slice(&p.bytes[s - p.off..e - p.off]);
            }
        }
    }
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer() -> Arc<[u8]> {
        (0..64u8).collect::<Vec<_>>().into()
    }

    #[test]
    fn an_edit_changes_the_write_not_the_buffer() {
        let buf = buffer();
        let mut w = Outgoing::new(buf.clone());
        assert!(w.shares(&buf));
        assert!(matches!(w.bytes(), Cow::Borrowed(_)), "nothing changed: the buffer's bytes go");
        w.edit(4..8).fill(0xee);
        assert!(!w.shares(&buf));
        assert_eq!(buf[4], 4, "the buffer keeps its bytes");
        let out = w.to_vec();
        assert_eq!(&out[..4], &buf[..4]);
        assert_eq!(&out[4..8], &[0xee; 4]);
        assert_eq!(&out[8..], &buf[8..]);
        assert_eq!(w.len(), 64);
    }

    #[test]
    fn later_edits_see_and_overlay_earlier_ones() {
        let buf = buffer();
        let mut w = Outgoing::new(buf.clone());
        w.edit(10..20).fill(1);
        // An edit over part of an earlier one starts from what the write carries there.
        let e = w.edit(15..25);
        assert_eq!(&e[..5], &[1; 5]);
        assert_eq!(&e[5..], &buf[20..25]);
        e[0] = 9;
        assert_eq!(&*w.read(14..17), &[1, 9, 1]);
        assert!(matches!(w.read(30..40), Cow::Borrowed(_)), "no patch there");
        let out = w.to_vec();
        assert_eq!(out[10..15], [1; 5]);
        assert_eq!(out[15], 9);
        assert_eq!(out[16..20], [1; 4]);
        assert_eq!(&out[20..25], &buf[20..25]);
    }

    #[test]
    fn the_whole_block_takes_the_patches_and_later_edits_go_into_it() {
        let buf = buffer();
        let mut w = Outgoing::new(buf.clone());
        w.edit(0..2).fill(7);
        let copy = w.whole();
        assert_eq!(&copy[..3], &[7, 7, 2], "the copy holds the patch");
        copy[63] = 0xff;
        w.edit(2..3)[0] = 8;
        assert!(w.patches.is_empty(), "the edit went into the copy");
        let out = w.to_vec();
        assert_eq!(&out[..3], &[7, 7, 8]);
        assert_eq!(out[63], 0xff);
        assert_eq!(buf[63], 63, "the buffer keeps its bytes");
        assert!(w.own && !w.shares(&buf));
    }

    #[test]
    fn the_seal_runs_over_the_block_as_put_together() {
        let buf = buffer();
        let mut w = Outgoing::new(buf.clone());
        w.edit(1..2)[0] = 0xaa;
        // A seal that writes a sum of the other bytes into the first.
        w.seal_with(|b: &mut [u8]| b[0] = b[1..].iter().fold(0u8, |a, &x| a.wrapping_add(x)));
        assert!(!w.shares(&buf));
        let out = w.to_vec();
        let sum = out[1..].iter().fold(0u8, |a, &x| a.wrapping_add(x));
        assert_eq!((out[0], out[1]), (sum, 0xaa), "sealed after the patch");
        assert_eq!(buf[0], 0, "the buffer keeps its bytes");
        // A seal alone still gives the write bytes of its own.
        let mut w = Outgoing::new(buf.clone());
        w.seal_with(|b: &mut [u8]| b[63] = 0);
        assert!(matches!(w.bytes(), Cow::Owned(_)) && w.to_vec()[63] == 0 && buf[63] == 63);
    }

    #[test]
    #[should_panic(expected = "past the block")]
    fn an_edit_past_the_block_is_refused() {
        Outgoing::new(buffer()).edit(60..65);
    }
}
