//! The volume snapshot's exception store (`volume`): its header block and the exception areas'
//! `(origin, store index)` entries, in device-mapper's persistent layout.

use super::*;

/// "SUFSVSNP": the header of a volume snapshot's exception store (`volume`).
pub const VOL_MAGIC: u64 = 0x504E_5356_5346_5553;
pub const VOL_VERSION: u32 = 1;
/// Store kinds.
pub const VOL_STORE_RESERVED: u32 = 1;
pub const VOL_STORE_BR: u32 = 2;
/// Why a snapshot is invalid (0: it is valid).
pub const VOL_INVALID_FULL: u32 = 1;
/// One exception: the origin block and the store index holding its old contents.
pub const VOL_ENTRY_SIZE: usize = 16;

/// The first block of an exception store, as device-mapper's persistent store has one: then come
/// exception areas, each a metadata block of `(origin, store index)` entries (an origin of
/// `u64::MAX` ends the list) followed by the data blocks those entries name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeHeader {
    pub kind: u32,
    pub invalid: u32,
    /// Blocks of the origin (the file system) the snapshot covers.
    pub origin_blocks: u64,
    pub created: i64,
}

const VH_MAGIC: usize = 0;
const VH_VERSION: usize = 8;
const VH_KIND: usize = 12;
const VH_INVALID: usize = 16;
const VH_ORIGIN: usize = 24;
const VH_CREATED: usize = 32;

impl VolumeHeader {
    pub fn encode(&self, b: &mut [u8]) {
        b.fill(0);
        put_u64(b, VH_MAGIC, VOL_MAGIC);
        put_u32(b, VH_VERSION, VOL_VERSION);
        put_u32(b, VH_KIND, self.kind);
        put_u32(b, VH_INVALID, self.invalid);
        put_u64(b, VH_ORIGIN, self.origin_blocks);
        put_i64(b, VH_CREATED, self.created);
    }
    /// None if the block is not a store header (no snapshot there).
    pub fn decode(b: &[u8]) -> Option<VolumeHeader> {
        if b.len() < 40 || get_u64(b, VH_MAGIC) != VOL_MAGIC || get_u32(b, VH_VERSION) != VOL_VERSION {
            return None;
        }
        Some(VolumeHeader {
            kind: get_u32(b, VH_KIND),
            invalid: get_u32(b, VH_INVALID),
            origin_blocks: get_u64(b, VH_ORIGIN),
            created: get_i64(b, VH_CREATED),
        })
    }
}

/// Entry `i` of an exception area block: `(origin block, store index)`, None past the end.
pub fn vol_entry_get(b: &[u8], i: usize) -> Option<(u64, u64)> {
    let o = i * VOL_ENTRY_SIZE;
    let origin = get_u64(b, o);
    (origin != u64::MAX).then(|| (origin, get_u64(b, o + 8)))
}

pub fn vol_entry_set(b: &mut [u8], i: usize, origin: u64, index: u64) {
    let o = i * VOL_ENTRY_SIZE;
    put_u64(b, o, origin);
    put_u64(b, o + 8, index);
}

/// An empty exception area block.
pub fn vol_area_init(b: &mut [u8]) {
    b.fill(0xff);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_header_and_area_round_trip() {
        let h = VolumeHeader { kind: VOL_STORE_BR, invalid: 0, origin_blocks: 12345, created: -3 };
        let mut b = vec![0u8; 4096];
        h.encode(&mut b);
        assert_eq!(VolumeHeader::decode(&b), Some(h));
        b[0] ^= 1;
        assert_eq!(VolumeHeader::decode(&b), None);
        vol_area_init(&mut b);
        assert_eq!(vol_entry_get(&b, 0), None);
        vol_entry_set(&mut b, 0, 7, 9);
        vol_entry_set(&mut b, 255, 0, 1);
        assert_eq!(
            (vol_entry_get(&b, 0), vol_entry_get(&b, 1), vol_entry_get(&b, 255)),
            (Some((7, 9)), None, Some((0, 1)))
        );
    }
}
