//! One scan: the state the passes share, what fsck_ffs keeps in `fsck.h` (the block map, each
//! inode's state and link counts, the directories' parents), and the order the passes run in
//! (fsck_ffs's `checkfilesys`). A scan reads the image and changes nothing; the findings are
//! reported, the fixes (`repair::Fixes`) applied by `Scan::apply`.

use std::collections::BTreeMap;

use super::{check_fits, Finding, Fixes, Report, Result, SbChoice};
use crate::dev::BlockDevice;
use crate::format::*;

/// A bitset over block or inode numbers.
pub(super) struct Bits(Vec<u64>);

impl Bits {
    pub(super) fn new(n: u64) -> Bits {
        Bits(vec![0; n.div_ceil(64) as usize])
    }
    pub(super) fn get(&self, i: u64) -> bool {
        self.0[(i / 64) as usize] & (1 << (i % 64)) != 0
    }
    pub(super) fn set(&mut self, i: u64) {
        self.0[(i / 64) as usize] |= 1 << (i % 64);
    }
    pub(super) fn clear(&mut self, i: u64) {
        self.0[(i / 64) as usize] &= !(1 << (i % 64));
    }
    pub(super) fn count(&self) -> u64 {
        self.0.iter().map(|w| w.count_ones() as u64).sum()
    }
    /// Bits `64 * w .. 64 * w + 64`, bit `i` of the word standing for number `64 * w + i`.
    pub(super) fn word(&self, w: u64) -> u64 {
        self.0.get(w as usize).copied().unwrap_or(0)
    }
}

/// Bits `64 * w .. 64 * w + 64` of an on-disk bitmap (bit `i` is bit `i % 8` of byte `i / 8`,
/// so eight bytes read little-endian), the bits at or past `nbits` cleared.
pub(super) fn map_word(map: &[u8], w: usize, nbits: usize) -> u64 {
    let lo = w * 8;
    let mut bytes = [0u8; 8];
    let avail = map.len().saturating_sub(lo).min(8);
    bytes[..avail].copy_from_slice(&map[lo..lo + avail]);
    let word = u64::from_le_bytes(bytes);
    match nbits.saturating_sub(w * 64) {
        n if n >= 64 => word,
        n => word & ((1u64 << n) - 1),
    }
}

/// Where a block pointer lives: an inode slot (0..12 direct, 12..15 indirect) or an entry of an
/// indirect block.
#[derive(Debug, Clone, Copy)]
pub(super) enum Loc {
    Inode { ino: u32, slot: usize },
    Ind { bno: u64, idx: usize },
}

/// What fsck knows of an inode in use.
#[derive(Debug, Default)]
pub(super) struct Ino {
    pub(super) mode: u16,
    pub(super) flags: u32,
    pub(super) nlink: u32,
    pub(super) size: u64,
    /// Pointers in range (data and indirect), duplicates included.
    pub(super) reach: u64,
    /// Pointers that own their block.
    pub(super) kept: u64,
    pub(super) max_lbn: Option<u64>,
    /// Directories: (logical block, physical block, pointer location) of each owned data block.
    pub(super) dir_map: Vec<(u64, u64, Loc)>,
    /// Directories: logical blocks of the directory that are parsed (before any hole).
    pub(super) dir_limit: u64,
    /// An inode to be cleared (bad mode or an unusable directory).
    pub(super) bad: bool,
    /// A directory of size 0 with no blocks that look like a directory (cleared).
    pub(super) zero_dir: bool,
    /// Directories: live entries besides "." and "..".
    pub(super) entries: u32,
    /// Entries naming it (for directories: its names, its "." and the ".." of subdirectories).
    pub(super) links: u32,
    /// A directory reached by the walk (from the root or as the top of an orphan tree).
    pub(super) visited: bool,
    /// A directory no path from the root reaches, the top of its tree: reconnected.
    pub(super) orphan: bool,
    /// A directory no path from the root reaches (an orphan or inside an orphan's tree).
    pub(super) unrooted: bool,
    /// Directories: the ".." entry (block, offset, the inode it names).
    pub(super) dotdot: Option<(u64, usize, u32)>,
    /// Directories: the entries naming it (besides "." and "..").
    pub(super) namers: Vec<Namer>,
    /// Directories: what the first chunk holds.
    pub(super) head: Head,
}

/// An entry naming a directory (besides "." and ".."), where it is.
#[derive(Debug)]
pub(super) struct Namer {
    pub(super) dir: u32,
    pub(super) bno: u64,
    pub(super) at: usize,
    pub(super) name: Vec<u8>,
}

/// The first chunk of a directory, as found.
#[derive(Debug, Default)]
pub(super) struct Head {
    /// The directory's first block (None: it has none).
    pub(super) bno: Option<u64>,
    pub(super) corrupt: bool,
    pub(super) dot: bool,
    pub(super) dotdot: bool,
    pub(super) first_ino: u32,
}

impl Ino {
    pub(super) fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
}

/// One scan of the image: what the passes found and computed.
pub(super) struct Scan<'a> {
    pub(super) dev: &'a dyn BlockDevice,
    /// Preen (fsck -p, soft-updates aware): unreferenced inodes are cleared, not reconnected.
    pub(super) preen: bool,
    pub(super) sb: Superblock,
    pub(super) bs: usize,
    /// Block 0 as read.
    pub(super) sb_block: Vec<u8>,
    /// The primary superblock was not used as it is: repair writes it anew.
    pub(super) replace_primary: bool,
    /// The group headers that decode and agree with the superblock (their blocks are read
    /// again where the bitmaps are needed, so that fsck's memory is the block map's).
    pub(super) cgs: Vec<Option<CgHeader>>,
    /// Per group, the inodes up to the last one its inode map shows in use, in whole blocks.
    pub(super) map_used: Vec<u32>,
    /// Per group, the header's count of initialized inodes when it is valid (all of them in a
    /// version 1 image), and the inodes pass 1 read (from the start of the table).
    pub(super) initialized: Vec<Option<u32>>,
    pub(super) scanned: Vec<u32>,
    pub(super) inodes: BTreeMap<u32, Ino>,
    /// Metadata blocks and every block some inode owns.
    pub(super) owned: Bits,
    pub(super) findings: Vec<Finding>,
    pub(super) fixes: Fixes,
    /// Where unreferenced inodes are reconnected (lost+found, or the root without one).
    pub(super) target: Option<u32>,
    /// `/.br`, the directory of Block Register reservations, once the root's scan finds it.
    pub(super) br_dir: Option<u32>,
    /// Reservations named in `/.br` and the blocks they own.
    pub(super) reservations: u64,
    pub(super) reserved_blocks: u64,
}

/// A directory entry as read from a chunk.
pub(super) struct Rec {
    pub(super) at: usize,
    pub(super) ino: u32,
    pub(super) dtype: u8,
    pub(super) name: Vec<u8>,
}

/// A name as text (bytes that are not UTF-8 shown as replacement characters).
pub(super) fn name_str(n: &[u8]) -> String {
    String::from_utf8_lossy(n).into_owned()
}

impl<'a> Scan<'a> {
    /// Scans the image with the superblock `choice` gives: the passes in order.
    pub(super) fn run_with(dev: &'a dyn BlockDevice, preen: bool, choice: &SbChoice) -> Result<Scan<'a>> {
        let bs = dev.block_size();
        let sb = choice.sb.clone();
        check_fits(&sb, dev)?;
        let mut s = Scan {
            preen,
            dev,
            bs,
            sb_block: choice.raw0.clone(),
            replace_primary: choice.why.is_some(),
            cgs: Vec::new(),
            map_used: Vec::new(),
            initialized: Vec::new(),
            scanned: Vec::new(),
            inodes: BTreeMap::new(),
            owned: Bits::new(sb.num_blocks),
            findings: Vec::new(),
            fixes: Fixes::default(),
            target: None,
            br_dir: None,
            reservations: 0,
            reserved_blocks: 0,
            sb,
        };
        if let Some(why) = &choice.why {
            s.findings.push(Finding::BadSuperblock { what: why.clone() });
        }
        s.pass1()?;
        s.pass2()?;
        s.pass3()?;
        // Pass 2's second half waits for pass 3: the orphaned trees it walks name directories
        // too, and each directory's name is chosen among all of them.
        s.pass2_names();
        s.pass4();
        s.pass5();
        Ok(s)
    }

    /// Block `bno` as it is on the device.
    pub(super) fn read(&self, bno: u64) -> Result<Vec<u8>> {
        let mut b = vec![0u8; self.bs];
        self.dev.read_block(bno, &mut b)?;
        Ok(b)
    }

    /// What this scan found, as reported.
    pub(super) fn report(&self) -> Report {
        let dirs = self.inodes.values().filter(|i| i.is_dir()).count() as u64;
        Report {
            findings: self.findings.clone(),
            repaired: false,
            files: self.inodes.len() as u64 - dirs,
            dirs,
            used_blocks: self.owned.count(),
            used_inodes: self.inodes.len() as u64,
            reservations: self.reservations,
            reserved_blocks: self.reserved_blocks,
            ..Default::default()
        }
    }
}
