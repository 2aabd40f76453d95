//! `sufs inspect`: FreeBSD's fsdb/ffsinfo for an unmounted image, read-only. Prints an inode, a
//! directory, a file's block map, a raw block or the superblock; every value read from the disk
//! is checked where it is used, so a damaged image gets messages, not a panic.
//!
//! On a UFS2 image the addresses are fragments (as everywhere in sufs on UFS2, docs/ufs2.md): a
//! block map lists runs of whole blocks in fragments and a file's tail as its fragments, the
//! group maps are UFS2's (`Cg`: the used-inode map and the free-fragment map), and the
//! FreeBSD-only fields are printed beside sufs's view of them.

use std::path::Path;
use sufs_fs::dev::{BlockDevice, FileDevice};
use sufs_fs::format::{self, Dinode, Superblock};

use super::*;

/// What `sufs inspect` prints.
#[derive(clap::Subcommand)]
pub(crate) enum InspectCmd {
    /// An inode's fields.
    Inode { ino: u64 },
    /// A directory's entries: a path from the root, or an inode number.
    Dir { target: String },
    /// A file's block map: logical to physical runs, holes, indirect blocks.
    Bmap { ino: u64 },
    /// A raw block as hex, with its group and what the bitmap says of it.
    Block { bno: u64 },
    /// The superblock's fields.
    Sb,
}

/// An opened image: the device and its superblock.
struct Image {
    /// The image, opened read-only with the file system's block size.
    dev: FileDevice,
    /// The primary superblock (decoded and checked).
    sb: Superblock,
}

/// Refuses an image a mount holds (the mount keeps an exclusive lock on the image file).
pub(crate) fn refuse_mounted(image: &Path, exclusive: bool) -> Result<std::fs::File, Fail> {
    let f = std::fs::File::open(image).map_err(|e| Fail(format!("{}: {e}", image.display()), 1))?;
    let locked = if exclusive { f.try_lock() } else { f.try_lock_shared() };
    if locked.is_err() {
        return Err(Fail(format!("{} is mounted (or in use); unmount it first", image.display()), 1));
    }
    Ok(f)
}

pub(crate) fn cmd_inspect(image: &Path, what: InspectCmd) -> Result<u8, Fail> {
    let _lock = refuse_mounted(image, false)?;
    let (dev, sb) = open_image_any(image, false)
        .map_err(|Fail(m, _)| Fail(format!("{m} (the superblock is unreadable: try `sufs fsck -b N`)"), 8))?;
    let img = Image { dev, sb };
    let problems = match what {
        InspectCmd::Inode { ino } => print_inode(&img, inode_number(&img.sb, ino)?)?,
        InspectCmd::Dir { target } => print_dir(&img, &target)?,
        InspectCmd::Bmap { ino } => print_bmap(&img, inode_number(&img.sb, ino)?)?,
        InspectCmd::Block { bno } => print_block(&img, bno)?,
        InspectCmd::Sb => print_sb(&img.sb, img.sb.ufs2()),
    };
    if problems > 0 {
        println!("{problems} problems found (run `sufs fsck` on the image)");
    }
    Ok(0)
}

/// An inode number given by the user, checked against the geometry.
fn inode_number(sb: &Superblock, ino: u64) -> Result<u32, Fail> {
    if ino >= sb.total_inodes() {
        return Err(Fail(format!("inode {ino} is out of range (the file system has {})", sb.total_inodes()), 1));
    }
    Ok(ino as u32)
}

fn read_inode(img: &Image, ino: u32) -> Result<Dinode, Fail> {
    Ok(img.sb.decode_dinode(&read_raw_inode(img, ino)?))
}

/// The inode's bytes as they are in the inode table.
fn read_raw_inode(img: &Image, ino: u32) -> Result<Vec<u8>, Fail> {
    let (bno, off) = img.sb.inode_location(ino);
    let mut buf = vec![0u8; img.sb.block_size as usize];
    img.dev.read_block(bno, &mut buf).map_err(|e| Fail(format!("reading inode {ino}: {e}"), 8))?;
    Ok(buf[off..off + format::DINODE_SIZE].to_vec())
}

/// Fragments per block.
fn frag(img: &Image) -> u64 {
    img.sb.frag()
}

/// What block numbers count.
const UNIT: &str = "fragments";

fn type_name(mode: u16) -> &'static str {
    match mode & format::S_IFMT {
        format::S_IFREG => "regular file",
        format::S_IFDIR => "directory",
        format::S_IFLNK => "symlink",
        format::S_IFIFO => "fifo",
        format::S_IFCHR => "character device",
        format::S_IFBLK => "block device",
        format::S_IFSOCK => "socket",
        0 => "free",
        _ => "unknown type",
    }
}

fn dtype_name(t: u8) -> &'static str {
    match t {
        format::DT_REG => "file",
        format::DT_DIR => "dir",
        format::DT_LNK => "symlink",
        format::DT_FIFO => "fifo",
        format::DT_CHR => "chr",
        format::DT_BLK => "blk",
        format::DT_SOCK => "sock",
        _ => "unknown",
    }
}

fn flag_names(flags: u32) -> String {
    let names = [
        (format::DI_IMMUTABLE, "immutable"),
        (format::DI_SNAPSHOT, "snapshot"),
        (format::DI_UNMOVABLE, "unmovable"),
        (format::DI_APPEND, "append"),
        (format::DI_NODUMP, "nodump"),
        (format::DI_NOATIME, "noatime"),
        (format::DI_SYNC, "sync"),
    ];
    let mut v: Vec<&str> = names.iter().filter(|(b, _)| flags & b != 0).map(|(_, n)| *n).collect();
    if v.is_empty() {
        v.push("none");
    }
    format!("{flags:#x} ({})", v.join(", "))
}

/// Prints an inode; returns the problems seen.
fn print_inode(img: &Image, ino: u32) -> Result<usize, Fail> {
    let raw = read_raw_inode(img, ino)?;
    let di = img.sb.decode_dinode(&raw);
    let mut problems = 0;
    let cg = img.sb.cg_of_inode(ino);
    let bit = inode_bit(img, ino)?;
    problems += bit.is_err() as usize;
    println!("inode      {ino} (group {cg}; bitmap: {})", bit_text(&bit));
    println!("mode       {:#o} ({})", di.mode, type_name(di.mode));
    println!("nlink      {}", di.nlink);
    println!("uid/gid    {}/{}", di.uid, di.gid);
    println!("size       {}", di.size);
    // di_blocks counts 512-byte sectors on disk (what stat's st_blocks shows).
    let d = format::ufs2::Dinode::decode(&raw).map_err(|e| Fail(e.to_string(), 8))?;
    println!("blocks     {} fragments ({} sectors)", di.blocks, d.di_blocks);
    if let Err(e) = format::ufs2::Dinode::decode_checked(&raw, img.sb.ufs2(), ino) {
        problems += 1;
        println!("check hash bad: {e}");
    }
    for (name, s, ns) in [
        ("atime", di.atime, di.atime_ns),
        ("mtime", di.mtime, di.mtime_ns),
        ("ctime", di.ctime, di.ctime_ns),
        ("birthtime", di.btime, di.btime_ns),
    ] {
        let bad = if ns >= format::NSEC_PER_SEC { "  (bad: nanoseconds past 10^9)" } else { "" };
        problems += !bad.is_empty() as usize;
        println!("{name:<10} {s}.{ns:09}{bad}");
    }
    println!("flags      {}", flag_names(di.flags));
    println!("di_flags   {:#x} (FreeBSD's chflags bits)", di.ufs2.flags);
    println!("generation {}", di.generation);
    println!("rdev       {:#x}", di.rdev);
    if di.short_symlink() {
        // A target shorter than fs_maxsymlinklen is kept in the block pointers.
        println!("target     {:?} (in the inode)", String::from_utf8_lossy(&di.short_target()));
    } else {
        println!("direct     {:?}", di.db);
        println!("indirect   {:?}", di.ib);
    }
    problems += print_ext_area(img, &di)?;
    Ok(problems)
}

/// Prints the extended-attribute area: its size, blocks and the attributes' names.
fn print_ext_area(img: &Image, di: &Dinode) -> Result<usize, Fail> {
    println!("extsize    {} (blocks {:?})", di.extsize, di.extb);
    if di.extsize == 0 {
        return Ok(0);
    }
    let bs = img.sb.block_size as usize;
    let nblocks = (di.extsize as usize).div_ceil(bs);
    if nblocks > format::NXADDR {
        println!("  bad: the area is larger than its {} block pointers", format::NXADDR);
        return Ok(1);
    }
    let mut area = vec![0u8; nblocks * bs];
    for (i, &b) in di.extb[..nblocks].iter().enumerate() {
        // The area's last block may be a run of fragments (UFS2), as a file's tail.
        let len = (di.extsize as usize - i * bs).min(bs);
        if !run_ok(img, b, (len as u64).div_ceil(img.sb.addr_unit() as u64)) {
            println!("  bad: attribute block {b} is not a data block");
            return Ok(1);
        }
        img.dev.read_block(b, &mut area[i * bs..(i + 1) * bs]).map_err(|e| Fail(e.to_string(), 8))?;
    }
    match format::decode_ext_area(&area[..di.extsize as usize]) {
        Ok(attrs) => {
            for a in attrs {
                println!("  xattr ns {} {} ({} bytes)", a.namespace, String::from_utf8_lossy(&a.name), a.value.len());
            }
            Ok(0)
        }
        Err(e) => {
            println!("  bad attribute area: {e}");
            Ok(1)
        }
    }
}

/// One entry of a block map walk.
enum MapItem {
    /// Logical blocks `[0]..[0]+[2]` are at physical `[1]..` (whole blocks, `frag` addresses
    /// apart).
    Data(u64, u64, u64),
    /// Logical block `[0]`, a file's last direct block, is the `[2]` fragments at `[1]` (UFS2).
    Tail(u64, u64, u64),
    /// Logical blocks `[0]..[0]+[1]` are holes.
    Hole(u64, u64),
    /// An indirect block of the given level (1 single, 2 double, 3 triple) at `[1]`, mapping
    /// from logical `[2]`.
    Indirect(u32, u64, u64),
    /// A pointer that names no data block: level, logical block, value.
    Bad(u32, u64, u64),
    /// An indirect block met a second time (not followed again): level, logical block, block.
    Repeated(u32, u64, u64),
}

/// Walks the block map of `di` over its first `nblocks` logical blocks.
fn walk_map(img: &Image, di: &Dinode, nblocks: u64) -> Result<Vec<MapItem>, Fail> {
    let mut out = Vec::new();
    for (i, &p) in di.db.iter().enumerate() {
        if (i as u64) < nblocks {
            // UFS2's `sblksize`: the last direct block holds only the fragments its bytes need.
            let u = img.sb.ufs2();
            let frags = u.sblksize(di.size, i as i64).div_ceil(u.fs_fsize as u64);
            leaf(img, &mut out, i as u64, p, frags);
        }
    }
    let ppb = img.sb.ptrs_per_block();
    let mut start = format::NDADDR as u64;
    let mut span = ppb;
    for (lvl, &p) in di.ib.iter().enumerate() {
        if start < nblocks {
            walk_indirect(img, &mut out, lvl as u32 + 1, p, start, span, nblocks)?;
        }
        start += span;
        span = span.saturating_mul(ppb);
    }
    Ok(out)
}

/// Whether the `frags` addresses from `p` may be a file's block or tail: data space, inside one
/// block (a whole block starts a block), in the file system.
fn run_ok(img: &Image, p: u64, frags: u64) -> bool {
    let f = frag(img);
    frags >= 1 && img.sb.is_data_block(p) && img.sb.is_data_block(p + frags - 1) && p % f + frags <= f
}

/// Adds one data pointer for logical block `lbn`, of `frags` addresses (a whole block's
/// `fs_frag`, or a tail's fragments), merging runs of whole blocks.
fn leaf(img: &Image, out: &mut Vec<MapItem>, lbn: u64, p: u64, frags: u64) {
    if p == 0 {
        return hole(out, lbn, 1);
    }
    if !run_ok(img, p, frags) {
        return out.push(MapItem::Bad(0, lbn, p));
    }
    let f = frag(img);
    if frags < f {
        return out.push(MapItem::Tail(lbn, p, frags));
    }
    if let Some(MapItem::Data(l, b, n)) = out.last_mut() {
        if *l + *n == lbn && *b + *n * f == p {
            *n += 1;
            return;
        }
    }
    out.push(MapItem::Data(lbn, p, 1));
}

fn hole(out: &mut Vec<MapItem>, lbn: u64, len: u64) {
    if let Some(MapItem::Hole(l, n)) = out.last_mut() {
        if *l + *n == lbn {
            *n += len;
            return;
        }
    }
    out.push(MapItem::Hole(lbn, len));
}

/// Walks an indirect block of level `lvl` mapping `span` logical blocks from `start`.
fn walk_indirect(
    img: &Image,
    out: &mut Vec<MapItem>,
    lvl: u32,
    p: u64,
    start: u64,
    span: u64,
    nblocks: u64,
) -> Result<(), Fail> {
    let len = span.min(nblocks - start);
    if p == 0 {
        hole(out, start, len);
        return Ok(());
    }
    if !run_ok(img, p, frag(img)) {
        out.push(MapItem::Bad(lvl, start, p));
        return Ok(());
    }
    if out.iter().any(|i| matches!(i, MapItem::Indirect(_, b, _) if *b == p)) {
        // A damaged map may name one indirect block again (even itself): not walked twice.
        out.push(MapItem::Repeated(lvl, start, p));
        return Ok(());
    }
    out.push(MapItem::Indirect(lvl, p, start));
    let mut buf = vec![0u8; img.sb.block_size as usize];
    img.dev.read_block(p, &mut buf).map_err(|e| Fail(format!("reading indirect block {p}: {e}"), 8))?;
    let child = span / img.sb.ptrs_per_block();
    for i in 0..img.sb.ptrs_per_block() as usize {
        let c = format::ind_get(&buf, i);
        let s = start + i as u64 * child;
        if s >= nblocks {
            break;
        }
        if lvl == 1 {
            leaf(img, out, s, c, frag(img));
        } else {
            walk_indirect(img, out, lvl - 1, c, s, child, nblocks)?;
        }
    }
    Ok(())
}

/// Prints a file's block map; returns the problems seen.
fn print_bmap(img: &Image, ino: u32) -> Result<usize, Fail> {
    let di = read_inode(img, ino)?;
    let bs = img.sb.block_size as u64;
    let nblocks = di.size.div_ceil(bs).min(img.sb.max_file_size() / bs);
    println!(
        "inode {ino}: {}, size {}, {} logical blocks, {} {} held",
        type_name(di.mode),
        di.size,
        nblocks,
        di.blocks,
        UNIT
    );
    if di.is_symlink() && di.blocks == 0 {
        println!("  (a short symlink: its target is in the inode)");
        return Ok(0);
    }
    let (f, unit) = (frag(img), UNIT);
    let mut problems = 0;
    for item in walk_map(img, &di, nblocks)? {
        match item {
            MapItem::Data(l, b, n) => println!("  lbn {l}..{}  -> {unit} {b}..{}", l + n - 1, b + n * f - 1),
            MapItem::Tail(l, p, k) => println!("  lbn {l}..{l}  -> {unit} {p}..{} (a tail of {k})", p + k - 1),
            MapItem::Hole(l, n) => println!("  lbn {l}..{}  hole", l + n - 1),
            MapItem::Indirect(lvl, b, l) if f > 1 => {
                println!("  indirect level {lvl} at fragments {b}..{} (from lbn {l})", b + f - 1)
            }
            MapItem::Indirect(lvl, b, l) => println!("  indirect level {lvl} at block {b} (from lbn {l})"),
            MapItem::Bad(lvl, l, p) => {
                problems += 1;
                let what = if f > 1 { "not data fragments inside one block" } else { "not a data block" };
                println!("  lbn {l}: bad pointer {p} (level {lvl}): {what}");
            }
            MapItem::Repeated(lvl, l, p) => {
                problems += 1;
                println!("  lbn {l}: bad pointer: indirect block {p} (level {lvl}) is already in the map");
            }
        }
    }
    Ok(problems)
}

/// The inode of a directory given as a number or a path from the root.
fn dir_inode(img: &Image, target: &str) -> Result<u32, Fail> {
    if let Ok(n) = target.parse::<u64>() {
        return inode_number(&img.sb, n);
    }
    let mut ino = format::ROOT_INO;
    for part in target.split('/').filter(|p| !p.is_empty()) {
        let entries = dir_entries_of(img, ino)?.0;
        let found = entries.iter().find(|e| e.ino != 0 && e.name == part.as_bytes());
        let e = found.ok_or_else(|| Fail(format!("{target}: no entry {part} in directory inode {ino}"), 1))?;
        ino = inode_number(&img.sb, e.ino as u64)?;
    }
    Ok(ino)
}

/// A directory's live entries, and the problems met reading its blocks.
fn dir_entries_of(img: &Image, ino: u32) -> Result<(Vec<format::DirEntry>, Vec<String>), Fail> {
    let di = read_inode(img, ino)?;
    if !di.is_dir() {
        return Err(Fail(format!("inode {ino} is not a directory ({})", type_name(di.mode)), 1));
    }
    let bs = img.sb.block_size as u64;
    let nblocks = di.size.div_ceil(bs).min(img.sb.max_file_size() / bs);
    let mut entries = Vec::new();
    let mut problems = Vec::new();
    let mut buf = vec![0u8; bs as usize];
    // A block's entries end at the directory's size (UFS2 directories grow a chunk at a time).
    let mut read = |lbn: u64, at: u64, problems: &mut Vec<String>| match img.dev.read_block(at, &mut buf) {
        Ok(()) => {
            let len = di.size.saturating_sub(lbn * bs).min(bs) as usize;
            read_dir_block(&buf[..len], lbn, &mut entries, problems);
        }
        Err(e) => problems.push(format!("lbn {lbn}: {e}")),
    };
    for item in walk_map(img, &di, nblocks)? {
        match item {
            MapItem::Data(l, b, n) => {
                for i in 0..n {
                    read(l + i, b + i * frag(img), &mut problems);
                }
            }
            MapItem::Tail(l, p, _) => read(l, p, &mut problems),
            MapItem::Hole(l, _) => problems.push(format!("a hole at lbn {l}")),
            MapItem::Bad(_, l, p) => problems.push(format!("lbn {l}: bad pointer {p}")),
            MapItem::Repeated(_, l, p) => problems.push(format!("lbn {l}: indirect block {p} repeated")),
            MapItem::Indirect(..) => {}
        }
    }
    Ok((entries, problems))
}

/// Reads the entries of one directory block, chunk by chunk, so that a bad chunk loses only
/// itself.
fn read_dir_block(buf: &[u8], lbn: u64, entries: &mut Vec<format::DirEntry>, problems: &mut Vec<String>) {
    for (c, chunk) in buf.chunks(format::DIRBLKSIZ).enumerate() {
        for r in format::dir_iter(chunk) {
            match r {
                Ok(e) if e.ino != 0 => entries.push(e.to_owned()),
                Ok(_) => {}
                Err(e) => problems.push(format!("lbn {lbn} chunk {c}: {e}")),
            }
        }
    }
}

fn print_dir(img: &Image, target: &str) -> Result<usize, Fail> {
    let ino = dir_inode(img, target)?;
    let (entries, problems) = dir_entries_of(img, ino)?;
    println!("directory inode {ino}: {} entries", entries.len());
    println!("{:>10} {:<8} name", "inode", "type");
    for e in &entries {
        let bad = if img.sb.is_valid_inode(e.ino) || e.ino == format::ROOT_INO { "" } else { "  (bad inode number)" };
        println!("{:>10} {:<8} {}{bad}", e.ino, dtype_name(e.dtype), String::from_utf8_lossy(&e.name));
    }
    for p in &problems {
        println!("bad: {p}");
    }
    Ok(problems.len())
}

fn print_block(img: &Image, bno: u64) -> Result<usize, Fail> {
    let sb = &img.sb;
    if bno >= img.dev.num_blocks() {
        return Err(Fail(format!("block {bno} is past the device's end ({} {})", img.dev.num_blocks(), UNIT), 1));
    }
    let problems = print_frag_place(img, sb.ufs2(), bno)?;
    let mut buf = vec![0u8; sb.block_size as usize];
    img.dev.read_block(bno, &mut buf).map_err(|e| Fail(e.to_string(), 8))?;
    hexdump(&buf);
    Ok(problems)
}

/// Where fragment `bno` is: its group and role, and what the group's free map
/// says of it and of the other fragments of its block. Returns the problems seen.
fn print_frag_place(img: &Image, u: &format::ufs2::Superblock, bno: u64) -> Result<usize, Fail> {
    if bno >= u.fs_size as u64 {
        println!("fragment {bno}: past the file system's end ({} fragments)", u.fs_size);
        return Ok(0);
    }
    let cg = u.dtog(bno as i64) as u32;
    println!("fragment {bno}: group {cg}, {}", frag_role(u, bno));
    let g = match ufs2_cg(img, u, cg)? {
        Ok(g) => g,
        Err(e) => {
            println!("bitmap: unreadable ({e})");
            return Ok(1);
        }
    };
    let in_group = |f: u64| (f < u.fs_size as u64).then(|| u.dtogd(f as i64) as u32);
    let free = |f: u64| in_group(f).map(|d| g.frag_free(d));
    println!("bitmap: {}", if free(bno) == Some(true) { "free" } else { "in use" });
    let first = u.blknum(bno as i64) as u64;
    let map: String = (first..first + u.fs_frag as u64)
        .map(|f| match free(f) {
            Some(true) => '.',
            Some(false) => '#',
            None => ' ',
        })
        .collect();
    println!("fragments {first}..{} of its block: [{map}] (# in use, . free)", first + u.fs_frag as u64 - 1);
    Ok(0)
}

/// What fragment `bno` is, by FreeBSD's layout of its group (`cgsblock`,
/// `cgtod`, `cgimin`, `cgdmin`) and the summary area at `fs_csaddr`.
fn frag_role(u: &format::ufs2::Superblock, bno: u64) -> String {
    let cg = u.dtog(bno as i64) as u32;
    let b = bno as i64;
    let fsize = u.fs_fsize as i64;
    let cs_frags = (u.fs_cssize as i64 + fsize - 1) / fsize;
    let primary = u.fs_sblockloc / fsize..(u.fs_sblockloc + u.fs_sbsize as i64 + fsize - 1) / fsize;
    if primary.contains(&b) {
        "the primary superblock (fs_sblockloc)".into()
    } else if cg == 0 && b < u.cgsblock(0) {
        "the boot area".into()
    } else if (u.cgsblock(cg)..u.cgtod(cg)).contains(&b) {
        "a superblock copy".into()
    } else if (u.cgtod(cg)..u.cgimin(cg)).contains(&b) {
        "the group block (cylinder group header and maps)".into()
    } else if (u.cgimin(cg)..u.cgdmin(cg)).contains(&b) {
        let k = (b - u.cgimin(cg)) / u.fs_frag as i64;
        let first = cg as u64 * u.fs_ipg as u64 + k as u64 * u.inopb() as u64;
        format!("inode table (inodes {first}..{})", first + u.inopb() as u64 - 1)
    } else if (u.fs_csaddr..u.fs_csaddr + cs_frags).contains(&b) {
        "the summary area (fs_csaddr)".into()
    } else {
        "a data fragment".into()
    }
}

/// Group `cg`, decoded and checked (magic, counts, check hash): Ok, or why it
/// cannot be trusted.
fn ufs2_cg(img: &Image, u: &format::ufs2::Superblock, cg: u32) -> Result<Result<format::ufs2::Cg, String>, Fail> {
    let mut buf = vec![0u8; img.sb.block_size as usize];
    img.dev.read_block(img.sb.cg_header_block(cg), &mut buf).map_err(|e| Fail(e.to_string(), 8))?;
    Ok(format::ufs2::Cg::decode(&buf, u, cg, true).map_err(|e| e.to_string()))
}

/// Whether inode `ino` is in use by its group's map: Ok(in use), or why the group cannot be
/// trusted.
fn inode_bit(img: &Image, ino: u32) -> Result<Result<bool, String>, Fail> {
    let cg = img.sb.cg_of_inode(ino);
    let i = ino % img.sb.inodes_per_group;
    Ok(ufs2_cg(img, img.sb.ufs2(), cg)?.map(|g| g.inode_used(i)))
}

fn bit_text(bit: &Result<bool, String>) -> String {
    match bit {
        Ok(true) => "in use".into(),
        Ok(false) => "free".into(),
        Err(e) => format!("unreadable ({e})"),
    }
}

/// Prints bytes as hex and ASCII, 16 a line; a run of lines equal to the one before is a `*`.
fn hexdump(buf: &[u8]) {
    let mut last: Option<&[u8]> = None;
    let mut starred = false;
    for (i, line) in buf.chunks(16).enumerate() {
        if last == Some(line) {
            if !starred {
                println!("*");
                starred = true;
            }
            continue;
        }
        last = Some(line);
        starred = false;
        let hex: Vec<String> = line.iter().map(|b| format!("{b:02x}")).collect();
        let text: String =
            line.iter().map(|&b| if b.is_ascii_graphic() || b == b' ' { b as char } else { '.' }).collect();
        println!("{:08x}  {}  |{text}|", i * 16, hex.join(" "));
    }
    println!("{:08x}", buf.len());
}

/// The UFS2 superblock's fields, as dumpfs(8) names them, and sufs's view of them.
fn print_sb(sb: &Superblock, u: &format::ufs2::Superblock) -> usize {
    let cs = u.fs_cstotal;
    let label: Vec<u8> = u.fs_volname.iter().take_while(|&&c| c != 0).copied().collect();
    let snaps: Vec<String> = u.fs_snapinum.iter().filter(|&&s| s != 0).map(|s| s.to_string()).collect();
    let fsmnt: Vec<u8> = u.fs_fsmnt.iter().take_while(|&&c| c != 0).copied().collect();
    println!("magic             {:#x} (UFS2) at byte {}", u.fs_magic, u.fs_sblockloc);
    println!("bsize/fsize/frag  {} {} {}", u.fs_bsize, u.fs_fsize, u.fs_frag);
    println!("size              {} fragments (dsize {})", u.fs_size, u.fs_dsize);
    println!("ncg               {} of {} fragments, {} inodes each", u.fs_ncg, u.fs_fpg, u.fs_ipg);
    println!("sblkno/cblkno     {} {}", u.fs_sblkno, u.fs_cblkno);
    println!("iblkno/dblkno     {} {}", u.fs_iblkno, u.fs_dblkno);
    println!("cgsize            {}", u.fs_cgsize);
    println!("csaddr/cssize     {} {}", u.fs_csaddr, u.fs_cssize);
    println!(
        "cstotal           nbfree {} nffree {} nifree {} ndir {}",
        cs.cs_nbfree, cs.cs_nffree, cs.cs_nifree, cs.cs_ndir
    );
    println!(
        "minfree/optim     {}% {}",
        u.fs_minfree,
        if u.fs_optim == format::ufs2::newfs::FS_OPTSPACE { "space" } else { "time" }
    );
    println!("maxcontig/maxbpg  {} {}", u.fs_maxcontig, u.fs_maxbpg);
    println!("avgfilesize/fpdir {} {}", u.fs_avgfilesize, u.fs_avgfpdir);
    println!("maxsymlinklen     {}", u.fs_maxsymlinklen);
    println!("maxfilesize       {}", u.fs_maxfilesize);
    println!("flags             {:#x} ({})", u.fs_flags, ufs2_flag_names(u.fs_flags));
    println!("clean             {}", u.fs_clean);
    println!("metackhash        {:#x}  ckhash {:#x}", u.fs_metackhash, u.fs_ckhash);
    println!("time/mtime        {} {}", u.fs_time, u.fs_mtime);
    println!("label             {:?}", String::from_utf8_lossy(&label));
    println!("fsmnt             {:?}", String::from_utf8_lossy(&fsmnt));
    println!("snapinum          {}", if snaps.is_empty() { "none".into() } else { snaps.join(" ") });
    println!("default_ordering  {}", format!("{:?}", super::default_ordering(sb)).to_lowercase());
    0
}
