//! The kernel's FUSE-over-io_uring ABI (include/uapi/linux/fuse.h of Linux 6.14 and later),
//! as byte offsets into the buffers the kernel and sufs share. Each ring entry has two
//! buffers: the header buffer (`struct fuse_uring_req_header`) and the payload buffer.
//!
//! ```text
//! struct fuse_uring_req_header {        offset
//!     char in_out[128];                  0    fuse_in_header (request) / fuse_out_header (reply)
//!     char op_in[128];                   128  the request's first argument, its per-op header
//!     struct fuse_uring_ent_in_out {     256
//!         u64 flags;                     256
//!         u64 commit_id;                 264  the request's unique id, given back at commit
//!         u32 payload_sz;                272  bytes used in the payload buffer
//!         u32 padding; u64 reserved;
//!     } ring_ent_in_out;
//! };                                     288 bytes
//! struct fuse_uring_cmd_req {            (in the SQE's 80-byte command area)
//!     u64 flags; u64 commit_id; u16 qid; u8 padding[6];
//! };
//! ```

/// `FUSE_IO_URING_CMD_REGISTER`: hands the kernel an entry's two buffers for queue `qid`.
pub const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: the reply to request `commit_id`, and the entry back
/// for the next request, in one submission.
pub const CMD_COMMIT_AND_FETCH: u32 = 2;

/// Size of `fuse_uring_req_header`: the kernel refuses a smaller header buffer.
pub const HEADER_SIZE: usize = 288;
/// Offset and size of `in_out`.
pub const IN_OUT: usize = 0;
pub const IN_OUT_SIZE: usize = 128;
/// Offset and size of `op_in`.
pub const OP_IN: usize = 128;
pub const OP_IN_SIZE: usize = 128;
/// Offsets of `ring_ent_in_out`'s fields.
pub const ENT_COMMIT_ID: usize = 264;
pub const ENT_PAYLOAD_SZ: usize = 272;

/// `sizeof(struct fuse_in_header)` and `sizeof(struct fuse_out_header)`.
pub const IN_HEADER_SIZE: usize = 40;
pub const OUT_HEADER_SIZE: usize = 16;

// Both headers fit in `in_out`.
const _: () = assert!(IN_HEADER_SIZE <= IN_OUT_SIZE && OUT_HEADER_SIZE <= IN_OUT_SIZE);

/// `FUSE_MIN_READ_BUFFER`: the smallest payload buffer the kernel takes.
pub const MIN_PAYLOAD: usize = 8192;

/// `fuse_uring_cmd_req` for the SQE's command area.
pub fn cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    cmd
}

pub fn get_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

pub fn get_u64(buf: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

pub fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

/// A `fuse_out_header`: the reply's length, its error (0 or a negated errno) and the id of the
/// request it answers.
pub fn out_header(len: u32, error: i32, unique: u64) -> [u8; OUT_HEADER_SIZE] {
    let mut h = [0u8; OUT_HEADER_SIZE];
    h[0..4].copy_from_slice(&len.to_ne_bytes());
    h[4..8].copy_from_slice(&error.to_ne_bytes());
    h[8..16].copy_from_slice(&unique.to_ne_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_layout_is_the_kernels() {
        assert_eq!(IN_OUT + IN_OUT_SIZE, OP_IN);
        assert_eq!(OP_IN + OP_IN_SIZE, 256);
        assert_eq!(ENT_COMMIT_ID, 256 + 8);
        assert_eq!(ENT_PAYLOAD_SZ, 256 + 16);
        assert_eq!(HEADER_SIZE, 256 + 32);
    }

    #[test]
    fn the_command_carries_commit_id_and_queue() {
        let c = cmd_req(0x1122_3344_5566_7788, 3);
        assert_eq!(get_u64(&c, 0), 0, "flags");
        assert_eq!(get_u64(&c, 8), 0x1122_3344_5566_7788);
        assert_eq!(u16::from_ne_bytes([c[16], c[17]]), 3);
        assert!(c[18..].iter().all(|&b| b == 0));
    }

    #[test]
    fn an_out_header_reads_back() {
        let h = out_header(16, -2, 77);
        assert_eq!(get_u32(&h, 0), 16);
        assert_eq!(get_u32(&h, 4) as i32, -2);
        assert_eq!(get_u64(&h, 8), 77);
    }
}
