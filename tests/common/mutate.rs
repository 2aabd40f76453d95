//! A deterministic mutator of UFS2 images, for tests that damage an image on purpose: a fixed
//! workload builds a small image through the library (UFS2 of 4 KiB blocks of one fragment, so
//! that block and fragment numbers are the same), `Layout` reads what it holds straight from the
//! blocks (independent of fsck and of the mount), and `mutants` gives, for a seed, a list of
//! single changes (a field set to an edge value, bytes flipped) to the superblock, the group
//! blocks and their maps, inodes, directory blocks, attribute areas and indirect blocks, each
//! saying what it changed and which bytes, so that a test can tell which files the damage
//! touched. A changed superblock, group or inode gets its check hash again (so that the change
//! is seen, not refused by the hash), or keeps the stale one.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use sufs_fs::clock::SimClock;
use sufs_fs::dev::{BlockDevice, MemDevice, WriteKind, WriteReq};
use sufs_fs::format::ufs2::ffs_ckhash;
use sufs_fs::format::*;
use sufs_fs::fs::xattr::XattrMode;
use sufs_fs::fs::{mkfs, Fs, MkfsOptions, MountOptions, Ordering};

/// Blocks of the workload's device: several cylinder groups, so that there are superblock copies.
pub const IMAGE_BLOCKS: u64 = 30000;

/// The workload: files, directories, a symlink, a fifo, hard links, a file through an
/// indirect block and one through a double indirect block, a directory of two blocks, a rename
/// and an unlink; cleanly unmounted.
pub fn workload_image() -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(4096, IMAGE_BLOCKS));
    mkfs(dev.clone(), &MkfsOptions { ..Default::default() }, (1_700_000_000, 0)).expect("mkfs");
    let d: Arc<dyn BlockDevice> = dev.clone();
    let mut fs = Fs::mount(
        d,
        MountOptions { ordering: Ordering::Sync, cache_blocks: 1024, readonly: false },
        Arc::new(SimClock::new()),
    )
    .expect("mount");
    let root = ROOT_INO;
    let (a, _) = fs.create(root, b"a", 0o644, 0, 0).unwrap();
    fs.write(a, 0, &super::pattern(1, 100)).unwrap();
    let (d1, _) = fs.mkdir(root, b"d1", 0o755, 0, 0).unwrap();
    let (sub, _) = fs.mkdir(d1, b"sub", 0o755, 0, 0).unwrap();
    let (b, _) = fs.create(d1, b"b", 0o644, 0, 0).unwrap();
    fs.write(b, 0, &super::pattern(2, 10000)).unwrap();
    fs.link(a, d1, b"a2").unwrap();
    fs.rename(d1, b"b", sub, b"b2", Default::default()).unwrap();
    let (ind, _) = fs.create(root, b"ind", 0o644, 0, 0).unwrap();
    fs.write(ind, 0, &super::pattern(3, 20 * 4096 + 17)).unwrap();
    let (dind, _) = fs.create(sub, b"dind", 0o644, 0, 0).unwrap();
    fs.write(dind, (12 + 512) * 4096, &super::pattern(4, 4096)).unwrap();
    let (many, _) = fs.mkdir(root, b"many", 0o755, 0, 0).unwrap();
    for i in 0..300 {
        let (f, _) = fs.create(many, format!("file-{i:04}").as_bytes(), 0o644, 0, 0).unwrap();
        if i % 60 == 0 {
            fs.write(f, 0, &super::pattern(10 + i, 300)).unwrap();
        }
    }
    for i in (1..300).step_by(5) {
        fs.unlink(many, format!("file-{i:04}").as_bytes()).unwrap();
    }
    fs.create(root, b"empty", 0o644, 0, 0).unwrap();
    fs.symlink(root, b"sym", b"d1/sub/b2", 0, 0).unwrap();
    fs.mknod(root, b"fifo", S_IFIFO as u32 | 0o644, 0, 0, 0).unwrap();
    // Extended attributes: an area of two blocks, one of one block on a directory.
    let (x, _) = fs.create(root, b"attrs", 0o644, 0, 0).unwrap();
    fs.write(x, 0, &super::pattern(5, 700)).unwrap();
    fs.setxattr(x, b"user.small", b"value", XattrMode::Any, 0).unwrap();
    fs.setxattr(x, b"user.big", &super::pattern(6, 5000), XattrMode::Any, 0).unwrap();
    fs.setxattr(x, b"trusted.t", b"t", XattrMode::Any, 0).unwrap();
    fs.setxattr(sub, b"user.dir", &super::pattern(7, 300), XattrMode::Any, 0).unwrap();
    fs.unmount().unwrap();
    dev
}

/// What one inode reachable from the root holds, and where.
#[derive(Debug, Clone)]
pub struct Node {
    pub ino: u32,
    pub paths: Vec<String>,
    pub mode: u16,
    pub size: u64,
    /// The inode table block and byte offset of the dinode.
    pub inode_at: (u64, usize),
    /// Directory chunks (block, chunk offset) holding its entries.
    pub entry_chunks: Vec<(u64, usize)>,
    /// Blocks it owns: data and indirect.
    pub blocks: Vec<u64>,
    /// A checksum of its data blocks within its size (files and symlinks).
    pub hash: u32,
}

/// Every inode reachable from the root of an image, read from its blocks.
#[derive(Debug, Clone)]
pub struct Layout {
    pub sb: Superblock,
    pub nodes: BTreeMap<u32, Node>,
}

fn read(dev: &dyn BlockDevice, bno: u64) -> Vec<u8> {
    let mut b = vec![0u8; dev.block_size()];
    dev.read_block(bno, &mut b).expect("read");
    b
}

fn dinode(dev: &dyn BlockDevice, sb: &Superblock, ino: u32) -> Dinode {
    let (bno, off) = sb.inode_location(ino);
    sb.decode_dinode(&read(dev, bno)[off..off + DINODE_SIZE])
}

/// The superblock's place: block 16 (byte 65536 in 4 KiB blocks), from its start.
const SB_BLOCK: u64 = 65536 / 4096;
/// Bytes of the superblock its check hash covers (`fs_sbsize`, newfs's for 4 KiB blocks).
const SB_HASHED: usize = 4096;
const SB_CKHASH_OFF: usize = 1304;
const CG_CKHASH_OFF: usize = 132;
const DI_CKHASH_OFF: usize = 244;

/// The block map of an inode: (logical block, block) of its data, and its indirect blocks.
/// Pointers outside the data area are skipped, and so is a map past `limit` blocks.
fn block_map(dev: &dyn BlockDevice, sb: &Superblock, d: &Dinode) -> (Vec<(u64, u64)>, Vec<u64>) {
    let (mut data, mut ind) = (Vec::new(), Vec::new());
    if d.short_symlink() {
        return (data, ind);
    }
    for (i, &b) in d.db.iter().enumerate() {
        if sb.is_data_block(b) {
            data.push((i as u64, b));
        }
    }
    let p = sb.ptrs_per_block();
    let mut base = NDADDR as u64;
    let mut span = p;
    for (level, &b) in d.ib.iter().enumerate() {
        let mut stack = vec![(b, level, base)];
        while let Some((bno, lvl, first)) = stack.pop() {
            if !sb.is_data_block(bno) || ind.len() > 4096 {
                continue;
            }
            ind.push(bno);
            let buf = read(dev, bno);
            let per = p.pow(lvl as u32);
            for i in 0..p as usize {
                let c = ind_get(&buf, i);
                let lbn = first + i as u64 * per;
                if lvl == 0 {
                    if sb.is_data_block(c) {
                        data.push((lbn, c));
                    }
                } else if c != 0 {
                    stack.push((c, lvl - 1, lbn));
                }
            }
        }
        base += span;
        span = span.saturating_mul(p);
    }
    data.sort();
    (data, ind)
}

/// Reads the tree from the root, each directory once. Fails on an image whose superblock does
/// not decode.
pub fn read_layout(dev: &dyn BlockDevice) -> Result<Layout, String> {
    let sb = Superblock::probe(|off, buf| sufs_fs::dev::read_bytes(dev, off, buf)).map_err(|e| e.to_string())?;
    let bs = sb.block_size as u64;
    let mut nodes: BTreeMap<u32, Node> = BTreeMap::new();
    let mut queue = VecDeque::from([(ROOT_INO, String::new())]);
    let mut seen_dirs = BTreeSet::from([ROOT_INO]);
    let add = |nodes: &mut BTreeMap<u32, Node>, ino: u32, path: String, chunk: Option<(u64, usize)>| {
        let d = dinode(dev, &sb, ino);
        let n = nodes.entry(ino).or_insert_with(|| {
            let (data, ind) = block_map(dev, &sb, &d);
            let mut hash = 0u32;
            if !d.is_dir() {
                for &(lbn, b) in data.iter().filter(|(l, _)| l * bs < d.size) {
                    hash = crc32c::crc32c_append(hash, &lbn.to_le_bytes());
                    hash = crc32c::crc32c_append(hash, &read(dev, b));
                }
            }
            Node {
                ino,
                paths: Vec::new(),
                mode: d.mode,
                size: d.size,
                inode_at: sb.inode_location(ino),
                entry_chunks: Vec::new(),
                blocks: data.iter().map(|e| e.1).chain(ind).chain(d.ext_blocks()).collect(),
                hash,
            }
        });
        n.paths.push(path);
        n.entry_chunks.extend(chunk);
    };
    add(&mut nodes, ROOT_INO, "/".into(), None);
    while let Some((dir, path)) = queue.pop_front() {
        let d = dinode(dev, &sb, dir);
        let (data, _) = block_map(dev, &sb, &d);
        for (lbn, bno) in data {
            if lbn * bs >= d.size {
                break;
            }
            let buf = read(dev, bno);
            for chunk in (0..buf.len()).step_by(DIRBLKSIZ) {
                for e in dir_iter(&buf[chunk..chunk + DIRBLKSIZ]).map_while(|e| e.ok()) {
                    if e.ino == 0 || e.name == b"." || e.name == b".." || !sb.is_valid_inode(e.ino) {
                        continue;
                    }
                    let p = format!("{path}/{}", String::from_utf8_lossy(e.name));
                    let is_dir = dinode(dev, &sb, e.ino).is_dir();
                    add(&mut nodes, e.ino, p.clone(), Some((bno, chunk)));
                    if is_dir && seen_dirs.insert(e.ino) {
                        queue.push_back((e.ino, p));
                    }
                }
            }
        }
    }
    Ok(Layout { sb, nodes })
}

/// Blocks that more than one inode in use holds (data, indirect or attribute blocks), over
/// every inode of an image, named or not. `None` when the superblock does not decode.
pub fn shared_blocks(dev: &dyn BlockDevice) -> Option<BTreeSet<u64>> {
    let sb = Superblock::probe(|off, buf| sufs_fs::dev::read_bytes(dev, off, buf)).ok()?;
    let (mut seen, mut shared) = (BTreeSet::new(), BTreeSet::new());
    let mut cached: Option<(u64, Vec<u8>)> = None;
    for ino in FIRST_INO..sb.total_inodes() as u32 {
        let (bno, off) = sb.inode_location(ino);
        if cached.as_ref().is_none_or(|c| c.0 != bno) {
            cached = Some((bno, read(dev, bno)));
        }
        let d = sb.decode_dinode(&cached.as_ref().unwrap().1[off..off + DINODE_SIZE]);
        if d.mode == 0 {
            continue;
        }
        let (data, ind) = block_map(dev, &sb, &d);
        let mine: BTreeSet<u64> = data.iter().map(|e| e.1).chain(ind).chain(d.ext_blocks()).collect();
        for b in mine {
            if !seen.insert(b) {
                shared.insert(b);
            }
        }
    }
    Some(shared)
}

/// The blocks of `l`'s nodes that the superblock now on `dev` counts as metadata (a changed
/// `fs_csaddr` makes a file's block the summary area's). Empty when it does not decode.
/// The check hash is not asked for: fsck reads a superblock whose hash fails.
pub fn now_metadata(dev: &dyn BlockDevice, l: &Layout) -> BTreeSet<u64> {
    let mut buf = vec![0u8; 8192];
    if sufs_fs::dev::read_bytes(dev, SB_BLOCK * 4096, &mut buf).is_err() {
        return BTreeSet::new();
    }
    let Ok(sb) = sufs_fs::format::ufs2::Superblock::decode(&buf, false) else {
        return BTreeSet::new();
    };
    // The summary area, and each group's metadata, in fragments (which are blocks here).
    let cs = sb.fs_csaddr..sb.fs_csaddr + (sb.fs_cssize as u64).div_ceil(sb.fs_fsize as u64) as i64;
    let meta = |b: i64| {
        let c = sb.dtog(b) as u32;
        let lo = if c == 0 { sb.cgbase(0) } else { sb.cgsblock(c) };
        b >= sb.fs_size || (lo..sb.cgdmin(c)).contains(&b) || cs.contains(&b)
    };
    l.nodes.values().flat_map(|n| n.blocks.iter().copied()).filter(|&b| meta(b as i64)).collect()
}

/// After a change, the check hash of the superblock, a group or an inode is stamped again (so
/// that the change is seen, not refused by the hash), or left stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reseal {
    None,
    Superblock,
    /// A group of `fs_cgsize` bytes at the block's start.
    Cg(usize),
    /// The inode at this byte of the block.
    Inode(usize),
}

/// One change to an image: `bytes` written at `off` in block `bno`.
#[derive(Debug, Clone)]
pub struct Mutant {
    pub desc: String,
    pub bno: u64,
    pub off: usize,
    pub bytes: Vec<u8>,
    pub reseal: Reseal,
}

impl Mutant {
    pub fn apply(&self, dev: &dyn BlockDevice) {
        let mut b = read(dev, self.bno);
        b[self.off..self.off + self.bytes.len()].copy_from_slice(&self.bytes);
        match self.reseal {
            Reseal::None => {}
            Reseal::Superblock => {
                let h = ffs_ckhash(&b[..SB_HASHED], SB_CKHASH_OFF);
                b[SB_CKHASH_OFF..SB_CKHASH_OFF + 4].copy_from_slice(&h.to_le_bytes());
            }
            Reseal::Cg(size) => {
                let h = ffs_ckhash(&b[..size], CG_CKHASH_OFF);
                b[CG_CKHASH_OFF..CG_CKHASH_OFF + 4].copy_from_slice(&h.to_le_bytes());
            }
            Reseal::Inode(at) => {
                let h = ffs_ckhash(&b[at..at + DINODE_SIZE], DI_CKHASH_OFF);
                b[at + DI_CKHASH_OFF..at + DI_CKHASH_OFF + 4].copy_from_slice(&h.to_le_bytes());
            }
        }
        dev.write_batch(&[WriteReq { bno: self.bno, data: &b }], WriteKind::Sync).expect("write");
    }

    /// Did the change touch bytes `at..at + len` of block `bno`?
    pub fn touches(&self, bno: u64, at: usize, len: usize) -> bool {
        self.bno == bno && self.off < at + len && at < self.off + self.bytes.len()
    }

    /// Did the change touch the node's inode, a chunk holding one of its entries, or a block it
    /// owns?
    pub fn touches_node(&self, n: &Node) -> bool {
        self.touches(n.inode_at.0, n.inode_at.1, DINODE_SIZE)
            || n.entry_chunks.iter().any(|&(b, c)| self.touches(b, c, DIRBLKSIZ))
            || n.blocks.contains(&self.bno)
    }
}

/// Superblock fields (FreeBSD's `struct fs`): (name, offset, width in bytes).
const SB_FIELDS: &[(&str, usize, usize)] = &[
    ("fs_sblkno", 8, 4),
    ("fs_iblkno", 16, 4),
    ("fs_dblkno", 20, 4),
    ("fs_ncg", 44, 4),
    ("fs_bsize", 48, 4),
    ("fs_fsize", 52, 4),
    ("fs_frag", 56, 4),
    ("fs_minfree", 60, 4),
    ("fs_cssize", 156, 4),
    ("fs_cgsize", 160, 4),
    ("fs_ipg", 184, 4),
    ("fs_fpg", 188, 4),
    ("fs_clean", 209, 1),
    ("cs_ndir", 1008, 8),
    ("cs_nbfree", 1016, 8),
    ("cs_nifree", 1024, 8),
    ("cs_nffree", 1032, 8),
    ("fs_time", 1072, 8),
    ("fs_size", 1080, 8),
    ("fs_dsize", 1088, 8),
    ("fs_csaddr", 1096, 8),
    ("fs_snapinum[0]", 1116, 4),
    ("fs_flags", 1312, 4),
];
/// Group fields (`struct cg`).
const CG_FIELDS: &[(&str, usize, usize)] = &[
    ("cg_cgx", 12, 4),
    ("cg_ndblk", 20, 4),
    ("cs_ndir", 24, 4),
    ("cs_nbfree", 28, 4),
    ("cs_nifree", 32, 4),
    ("cs_nffree", 36, 4),
    ("cg_rotor", 40, 4),
    ("cg_frotor", 44, 4),
    ("cg_irotor", 48, 4),
    ("cg_frsum[1]", 56, 4),
    ("cg_iusedoff", 92, 4),
    ("cg_freeoff", 96, 4),
    ("cg_clustersumoff", 104, 4),
    ("cg_clusteroff", 108, 4),
    ("cg_niblk", 116, 4),
    ("cg_initediblk", 120, 4),
];
/// Inode fields (`struct ufs2_dinode`).
const INODE_FIELDS: &[(&str, usize, usize)] = &[
    ("di_mode", 0, 2),
    ("di_nlink", 2, 2),
    ("di_size", 16, 8),
    ("di_blocks", 24, 8),
    ("di_atime", 32, 8),
    ("di_mtime", 40, 8),
    ("di_mtimensec", 64, 4),
    ("di_ctimensec", 72, 4),
    ("di_flags", 88, 4),
    ("di_extsize", 92, 4),
    ("di_extb[0]", 96, 8),
    ("di_extb[1]", 104, 8),
    ("di_db[0]", 112, 8),
    ("di_db[1]", 120, 8),
    ("di_db[11]", 200, 8),
    ("di_ib[0]", 208, 8),
    ("di_ib[1]", 216, 8),
    ("di_dirdepth", 240, 4),
    ("di_spare[0]", 248, 4),
];

/// Edge values for a field of `width` bytes; `ptrs` are block numbers worth pointing at.
fn edge_value(rng: &mut SmallRng, width: usize, ptrs: &[u64]) -> (String, u64) {
    let max = if width == 8 { u64::MAX } else { (1u64 << (8 * width)) - 1 };
    let mut v: Vec<(String, u64)> = vec![("0".into(), 0), ("1".into(), 1), ("max".into(), max)];
    if width == 8 {
        v.push(("i64::MAX".into(), i64::MAX as u64));
        v.push(("i64::MIN".into(), i64::MIN as u64));
        v.push(("2^32".into(), 1 << 32));
        v.push(("2^39".into(), 1 << 39));
        for &p in ptrs {
            v.push((format!("block {p}"), p));
        }
    }
    if width == 4 {
        v.push(("10^9".into(), 1_000_000_000));
        v.push(("16".into(), 16));
    }
    v.push(("random".into(), rng.gen::<u64>() & max));
    v.swap_remove(rng.gen_range(0..v.len()))
}

fn field(
    rng: &mut SmallRng,
    what: &str,
    bno: u64,
    base: usize,
    f: &(&str, usize, usize),
    ptrs: &[u64],
    reseal: Reseal,
) -> Mutant {
    let (vname, v) = edge_value(rng, f.2, ptrs);
    Mutant {
        desc: format!("{what}: {} set to {vname}", f.0),
        bno,
        off: base + f.1,
        bytes: v.to_le_bytes()[..f.2].to_vec(),
        reseal,
    }
}

/// Bits flipped in one byte of `block` (block `bno`), between `base` and `base + len`.
fn flip(rng: &mut SmallRng, what: &str, block: &[u8], bno: u64, base: usize, len: usize) -> Mutant {
    let at = base + rng.gen_range(0..len);
    let x = rng.gen::<u8>() | 1;
    Mutant {
        desc: format!("{what}: byte {at} xor {x:#x}"),
        bno,
        off: at,
        bytes: vec![block[at] ^ x],
        reseal: Reseal::None,
    }
}

/// `n` mutants of the image `dev` holds (its layout `l`), for `seed`. The list depends only on
/// the image and the seed; each mutant is one change, to be applied to a copy of the image.
pub fn mutants(dev: &dyn BlockDevice, l: &Layout, seed: u64, n: usize) -> Vec<Mutant> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let sb = &l.sb;
    let nodes: Vec<&Node> = l.nodes.values().collect();
    let dirs: Vec<&Node> = nodes.iter().copied().filter(|n| n.mode & S_IFMT == S_IFDIR).collect();
    let with_ind: Vec<(u32, u64)> = nodes
        .iter()
        .flat_map(|n| {
            let d = dinode(dev, sb, n.ino);
            block_map(dev, sb, &d).1.into_iter().map(move |b| (n.ino, b))
        })
        .collect();
    let data_blocks: Vec<u64> = nodes.iter().flat_map(|n| n.blocks.iter().copied()).collect();
    // Attribute blocks: (inode, block, bytes of the area in it).
    let ext: Vec<(u32, u64, usize)> = nodes
        .iter()
        .flat_map(|n| {
            let d = dinode(dev, sb, n.ino);
            let bs = sb.block_size as usize;
            d.ext_blocks().enumerate().map(|(i, b)| (n.ino, b, bs.min(d.extsize as usize - i * bs))).collect::<Vec<_>>()
        })
        .collect();
    assert!(!ext.is_empty(), "the workload gives files attributes");
    let cgsize = {
        let b = read(dev, SB_BLOCK);
        i32::from_le_bytes(b[160..164].try_into().unwrap()) as usize
    };
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let mut ptrs = vec![
            0,
            SB_BLOCK,
            sb.cg_header_block(0),
            sb.cg_itable_block(0),
            sb.cg_start(1.min(sb.ngroups - 1)),
            sb.num_blocks,
            sb.num_blocks - 1,
        ];
        ptrs.push(data_blocks[rng.gen_range(0..data_blocks.len())]);
        let m = match rng.gen_range(0..100) {
            0..=9 => {
                let f = &SB_FIELDS[rng.gen_range(0..SB_FIELDS.len())];
                let reseal = if rng.gen_bool(0.8) { Reseal::Superblock } else { Reseal::None };
                field(&mut rng, "superblock", SB_BLOCK, 0, f, &ptrs, reseal)
            }
            10..=12 => {
                let mut m = flip(&mut rng, "superblock", &read(dev, SB_BLOCK), SB_BLOCK, 0, SB_HASHED);
                if rng.gen_bool(0.8) {
                    m.reseal = Reseal::Superblock;
                }
                m
            }
            13..=22 => {
                let cg = rng.gen_range(0..sb.ngroups);
                let what = format!("group {cg} header");
                let f = &CG_FIELDS[rng.gen_range(0..CG_FIELDS.len())];
                let reseal = if rng.gen_bool(0.8) { Reseal::Cg(cgsize) } else { Reseal::None };
                field(&mut rng, &what, sb.cg_header_block(cg), 0, f, &ptrs, reseal)
            }
            23..=32 => {
                // A bit of a bitmap, in a byte that covers something in use (or not).
                let cg = rng.gen_range(0..sb.ngroups);
                let bno = sb.cg_header_block(cg);
                let block = read(dev, bno);
                let word = |at: usize| u32::from_le_bytes(block[at..at + 4].try_into().unwrap()) as usize;
                let (name, base, bits) = if rng.gen_bool(0.5) {
                    ("inode map", word(92), word(116))
                } else {
                    ("free-fragment map", word(96), word(20))
                };
                let bit = if rng.gen_bool(0.7) { rng.gen_range(0..bits.min(600)) } else { rng.gen_range(0..bits) };
                let cur = block[base + bit / 8];
                Mutant {
                    desc: format!("group {cg} {name}: bit {bit} flipped"),
                    bno,
                    off: base + bit / 8,
                    bytes: vec![cur ^ (1 << (bit % 8))],
                    reseal: Reseal::Cg(cgsize),
                }
            }
            33..=62 => {
                // An inode: one of the tree's, or now and then a free one.
                let ino = if rng.gen_bool(0.9) {
                    nodes[rng.gen_range(0..nodes.len())].ino
                } else {
                    rng.gen_range(FIRST_INO..sb.total_inodes() as u32)
                };
                let (bno, off) = sb.inode_location(ino);
                let reseal = if rng.gen_bool(0.8) { Reseal::Inode(off) } else { Reseal::None };
                let mut m = if rng.gen_bool(0.85) {
                    let f = &INODE_FIELDS[rng.gen_range(0..INODE_FIELDS.len())];
                    field(&mut rng, &format!("inode {ino}"), bno, off, f, &ptrs, reseal)
                } else {
                    flip(&mut rng, &format!("inode {ino}"), &read(dev, bno), bno, off, DINODE_SIZE)
                };
                m.reseal = reseal;
                m
            }
            63..=87 => {
                // A directory entry's field, or bytes of a directory block.
                let d = dirs[rng.gen_range(0..dirs.len())];
                let dd = dinode(dev, sb, d.ino);
                let (data, _) = block_map(dev, sb, &dd);
                let (lbn, bno) = data[rng.gen_range(0..data.len())];
                let buf = read(dev, bno);
                let entries: Vec<(usize, usize)> = (0..buf.len())
                    .step_by(DIRBLKSIZ)
                    .flat_map(|c| {
                        dir_iter(&buf[c..c + DIRBLKSIZ])
                            .map_while(|e| e.ok())
                            .map(move |e| (c + e.offset, e.name.len()))
                    })
                    .collect();
                let what = format!("directory {} block {lbn}", d.ino);
                let (at, namelen) = entries[rng.gen_range(0..entries.len())];
                let other = nodes[rng.gen_range(0..nodes.len())].ino;
                let (fname, foff, bytes): (&str, usize, Vec<u8>) = match rng.gen_range(0..6) {
                    0 => {
                        let v = [0, 1, u32::MAX, other, sb.total_inodes() as u32][rng.gen_range(0..5)];
                        ("ino", 0, v.to_le_bytes().to_vec())
                    }
                    1 => {
                        let v = [0u16, 1, 7, 12, 513, u16::MAX][rng.gen_range(0..6)];
                        ("reclen", 4, v.to_le_bytes().to_vec())
                    }
                    2 => ("type", 6, vec![[0u8, DT_DIR, DT_REG, DT_LNK, 255][rng.gen_range(0..5)]]),
                    3 => ("name length", 7, vec![[0u8, 1, 255][rng.gen_range(0..3)]]),
                    4 => ("name", 8 + rng.gen_range(0..namelen.max(1)), vec![[0u8, b'/', b'.'][rng.gen_range(0..3)]]),
                    _ => {
                        let m = flip(&mut rng, &what, &buf, bno, 0, buf.len());
                        out.push(m);
                        continue;
                    }
                };
                Mutant {
                    desc: format!("{what}: entry at {at}: {fname} set to {bytes:?}"),
                    bno,
                    off: at + foff,
                    bytes,
                    reseal: Reseal::None,
                }
            }
            88..=91 => {
                // A byte of an attribute area, often a record's length or namespace.
                let (ino, bno, len) = ext[rng.gen_range(0..ext.len())];
                let off = if rng.gen_bool(0.5) { [0, 4, 5, 6][rng.gen_range(0..4)] } else { rng.gen_range(0..len) };
                let cur = read(dev, bno)[off];
                let v = [0u8, 1, 7, 0xff, cur ^ 0x10][rng.gen_range(0..5)];
                Mutant {
                    desc: format!("inode {ino} attribute block {bno}: byte {off} set to {v}"),
                    bno,
                    off,
                    bytes: vec![v],
                    reseal: Reseal::None,
                }
            }
            _ => {
                // An indirect block's pointer.
                let (ino, bno) = with_ind[rng.gen_range(0..with_ind.len())];
                let buf = read(dev, bno);
                let used: Vec<usize> = (0..buf.len() / 8).filter(|&i| ind_get(&buf, i) != 0).collect();
                let idx = if !used.is_empty() && rng.gen_bool(0.8) {
                    used[rng.gen_range(0..used.len())]
                } else {
                    rng.gen_range(0..buf.len() / 8)
                };
                let (vname, v) = edge_value(&mut rng, 8, &ptrs);
                Mutant {
                    desc: format!("inode {ino} indirect block {bno}: pointer {idx} set to {vname}"),
                    bno,
                    off: idx * 8,
                    bytes: v.to_le_bytes().to_vec(),
                    reseal: Reseal::None,
                }
            }
        };
        out.push(m);
    }
    out
}
