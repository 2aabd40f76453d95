//! The cylinder group header (block 1 of each group): its counts and rotors, then the inode and
//! block bitmaps in the same block, sealed by a CRC32C; and the bit and counter access over the
//! raw buffer that the allocator works on.

use super::*;

/// A cylinder group header: counts and both bitmaps, in one block (one bitmap buffer per group,
/// as the soft updates paper assumes). The bitmaps live in the block buffer itself; `CgHeader`
/// is the decoded fixed part and `CgView`/`CgViewMut` give bit access over the raw buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgHeader {
    pub cg: u32,
    pub nblocks: u32,
    pub ninodes: u32,
    pub free_blocks: u32,
    pub free_inodes: u32,
    pub ndirs: u32,
    /// Allocation rotors: where the last block / inode search ended.
    pub block_rotor: u32,
    pub inode_rotor: u32,
    /// Inodes whose blocks are initialized (zeroed), from the start of the inode table: a
    /// multiple of inodes per block (UFS2's `cg_initediblk`). Blocks past it hold anything and
    /// are never read; the allocator initializes them as it reaches them. Zero, and meaningless,
    /// in a version 1 image (`Superblock::initialized_inodes`).
    pub initialized: u32,
}

const CG_O_MAGIC: usize = 0;
const CG_O_CG: usize = 4;
const CG_O_NBLOCKS: usize = 8;
const CG_O_NINODES: usize = 12;
const CG_O_FREEB: usize = 16;
const CG_O_FREEI: usize = 20;
const CG_O_NDIRS: usize = 24;
const CG_O_BROTOR: usize = 28;
const CG_O_IROTOR: usize = 32;
const CG_O_INITED: usize = 36;
const CG_O_CRC: usize = 60;

impl CgHeader {
    /// Byte offset of the inode bitmap in the header block.
    pub fn inode_map_offset() -> usize {
        CG_HDR_SIZE
    }
    /// Byte offset of the block bitmap in the header block.
    pub fn block_map_offset(ipg: u32) -> usize {
        CG_HDR_SIZE + (ipg as usize).div_ceil(8)
    }

    /// Writes the fixed fields; the bitmaps are left as they are. The CRC covers the whole
    /// block and is set by `seal` when the block is written.
    pub fn encode(&self, buf: &mut [u8]) {
        put_u32(buf, CG_O_MAGIC, CG_MAGIC);
        put_u32(buf, CG_O_CG, self.cg);
        put_u32(buf, CG_O_NBLOCKS, self.nblocks);
        put_u32(buf, CG_O_NINODES, self.ninodes);
        put_u32(buf, CG_O_FREEB, self.free_blocks);
        put_u32(buf, CG_O_FREEI, self.free_inodes);
        put_u32(buf, CG_O_NDIRS, self.ndirs);
        put_u32(buf, CG_O_BROTOR, self.block_rotor);
        put_u32(buf, CG_O_IROTOR, self.inode_rotor);
        put_u32(buf, CG_O_INITED, self.initialized);
    }

    pub fn decode(buf: &[u8], cg: u32) -> Result<CgHeader, FormatError> {
        let magic = get_u32(buf, CG_O_MAGIC);
        if magic != CG_MAGIC {
            return Err(FormatError::BadCg { cg, what: format!("bad magic {magic:#x}") });
        }
        let stored = get_u32(buf, CG_O_CRC);
        let computed = cg_crc(buf);
        if stored != computed {
            return Err(FormatError::BadCg {
                cg,
                what: format!("checksum mismatch (stored {stored:#x}, computed {computed:#x})"),
            });
        }
        let h = CgHeader {
            cg: get_u32(buf, CG_O_CG),
            nblocks: get_u32(buf, CG_O_NBLOCKS),
            ninodes: get_u32(buf, CG_O_NINODES),
            free_blocks: get_u32(buf, CG_O_FREEB),
            free_inodes: get_u32(buf, CG_O_FREEI),
            ndirs: get_u32(buf, CG_O_NDIRS),
            block_rotor: get_u32(buf, CG_O_BROTOR),
            inode_rotor: get_u32(buf, CG_O_IROTOR),
            initialized: get_u32(buf, CG_O_INITED),
        };
        if h.cg != cg {
            return Err(FormatError::BadCg { cg, what: format!("header says group {}", h.cg) });
        }
        Ok(h)
    }

    /// Stamps the checksum of a header block about to be written.
    pub fn seal(buf: &mut [u8]) {
        let crc = cg_crc(buf);
        put_u32(buf, CG_O_CRC, crc);
    }
}

fn cg_crc(buf: &[u8]) -> u32 {
    let c = crc32c::crc32c(&buf[..CG_O_CRC]);
    crc32c::crc32c_append(c, &buf[CG_O_CRC + 4..])
}

// Counter access over a raw header buffer, for the allocator which works on the cached block.
pub fn cg_get_free_blocks(buf: &[u8]) -> u32 {
    get_u32(buf, CG_O_FREEB)
}
pub fn cg_set_free_blocks(buf: &mut [u8], v: u32) {
    put_u32(buf, CG_O_FREEB, v)
}
pub fn cg_get_free_inodes(buf: &[u8]) -> u32 {
    get_u32(buf, CG_O_FREEI)
}
pub fn cg_set_free_inodes(buf: &mut [u8], v: u32) {
    put_u32(buf, CG_O_FREEI, v)
}
pub fn cg_get_ndirs(buf: &[u8]) -> u32 {
    get_u32(buf, CG_O_NDIRS)
}
pub fn cg_set_ndirs(buf: &mut [u8], v: u32) {
    put_u32(buf, CG_O_NDIRS, v)
}
pub fn cg_get_initialized(buf: &[u8]) -> u32 {
    get_u32(buf, CG_O_INITED)
}
pub fn cg_set_initialized(buf: &mut [u8], v: u32) {
    put_u32(buf, CG_O_INITED, v)
}
pub fn cg_get_rotors(buf: &[u8]) -> (u32, u32) {
    (get_u32(buf, CG_O_BROTOR), get_u32(buf, CG_O_IROTOR))
}
pub fn cg_set_rotors(buf: &mut [u8], block: u32, inode: u32) {
    put_u32(buf, CG_O_BROTOR, block);
    put_u32(buf, CG_O_IROTOR, inode);
}

pub fn bit_get(map: &[u8], i: usize) -> bool {
    map[i / 8] & (1 << (i % 8)) != 0
}
pub fn bit_set(map: &mut [u8], i: usize, v: bool) {
    if v {
        map[i / 8] |= 1 << (i % 8);
    } else {
        map[i / 8] &= !(1 << (i % 8));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cg_round_trip_and_checksum() {
        let h = CgHeader {
            cg: 5,
            nblocks: 16000,
            ninodes: 4096,
            free_blocks: 12,
            free_inodes: 13,
            ndirs: 2,
            block_rotor: 7,
            inode_rotor: 8,
            initialized: 32,
        };
        let mut buf = vec![0u8; 4096];
        h.encode(&mut buf);
        bit_set(&mut buf[CgHeader::block_map_offset(4096)..], 17, true);
        CgHeader::seal(&mut buf);
        assert_eq!(CgHeader::decode(&buf, 5).unwrap(), h);
        assert!(CgHeader::decode(&buf, 4).is_err());
        buf[CgHeader::block_map_offset(4096) + 100] ^= 4;
        assert!(CgHeader::decode(&buf, 5).is_err());
    }
}
