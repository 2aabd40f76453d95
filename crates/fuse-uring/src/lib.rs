//! FUSE over io_uring for file systems written with `fuser`: the kernel hands requests to the
//! server through io_uring commands on /dev/fuse instead of read(2) and takes replies back
//! without write(2). The ring (this file) knows nothing of the FUSE operations: it moves whole
//! requests, as /dev/fuse's read would give them, to a `Handler`, and the handler's replies, as
//! /dev/fuse's writev would take them, back to the kernel. `transport` is the glue to fuser:
//! the choice between the ring and /dev/fuse (`Transport`), the INIT negotiation
//! (`Negotiated`), and `run`, which serves a `fuser::Session` on the ring by handing its
//! requests to fuser's dispatcher (README.md says how to use it).
//!
//! The kernel keeps one queue per possible CPU and puts a request on the queue of the CPU its
//! caller runs on. Each queue is served here by one or more threads, bound to that CPU
//! (`transport::run` says why), and each thread owns its own io_uring (128-byte SQEs, for the
//! 80-byte command area) and one ring entry: a header buffer and a payload buffer registered
//! with `FUSE_IO_URING_CMD_REGISTER`. A request arrives as the completion of that entry's
//! command; the thread rebuilds the request, the handler serves it, and the reply goes back
//! with `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`, which also hands the entry back for the next
//! request: one `io_uring_enter` per request, where /dev/fuse costs a read and a write. A
//! thread with one entry is never held up by a request another thread serves: a slow request
//! (a device read under the file system's lock) delays only the requests that would have had
//! to wait for its thread anyway.
//!
//! What the kernel still sends through /dev/fuse (FORGET, INTERRUPT), the requests sent before
//! every queue has an entry, and notifications stay with the classic reader.
//!
//! Lifecycle: `start` after the FUSE INIT reply (the kernel needs the negotiated sizes; it
//! answers EAGAIN before), registers every thread's entry and returns once each has been
//! taken. At the unmount the kernel completes every entry with ENOTCONN and the threads end;
//! `Rings::stop` also wakes them through an eventfd, for an end without an unmount.

mod abi;
pub mod transport;

pub use transport::{max_pages_limit, refusal, run, uring_enabled, Negotiated, Transport, MAX_WRITE, URING_PARAMETER};

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

/// How many queues, threads and bytes.
#[derive(Debug, Clone)]
pub struct Config {
    /// The kernel's queues: one per possible CPU (`/sys/devices/system/cpu/possible`); the
    /// kernel uses the ring only once every queue has an entry.
    pub queues: usize,
    /// Threads (each with one entry) per queue.
    pub threads_per_queue: usize,
    /// Bytes of each payload buffer: at least the kernel's largest request or reply payload,
    /// `max(8192, max_write, max_pages * page size)` of the INIT negotiation.
    pub payload_size: usize,
    /// Bind each queue's threads to its CPU (as libfuse does), where the process may run there.
    pub pin: bool,
}

impl Config {
    /// The kernel's queue count: the possible CPUs.
    pub fn possible_cpus() -> usize {
        std::fs::read_to_string("/sys/devices/system/cpu/possible")
            .ok()
            .and_then(|s| parse_cpu_list(s.trim()))
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

/// The number of CPUs in a list such as "0-1" or "0,2-5" (the highest one plus one: the kernel
/// numbers its queues by CPU).
fn parse_cpu_list(s: &str) -> Option<usize> {
    let mut top = None;
    for part in s.split(',') {
        let last = part.rsplit('-').next()?.trim().parse::<usize>().ok()?;
        top = Some(top.map_or(last, |t: usize| t.max(last)));
    }
    top.map(|t| t + 1)
}

/// Serves requests: `request` is one whole request (`fuse_in_header`, then its arguments),
/// `reply` takes its answer, now or later, from any thread.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, request: &[u8], reply: Reply);
}

/// The reply to one request: `send` it once. Dropped unsent, it answers EIO, so that the
/// entry goes back to the kernel whatever the handler did.
#[derive(Debug)]
pub struct Reply {
    slot: Arc<Slot>,
    /// The request this reply answers (the slot moves on to the next one after it).
    unique: u64,
}

impl Reply {
    /// The reply as /dev/fuse's writev would take it: the `fuse_out_header`, then the
    /// arguments, in as many slices as the caller likes.
    pub fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        let mut st = self.slot.lock();
        if st.unique != self.unique || st.replied {
            return Err(io::Error::other(format!("request {} was answered already", self.unique)));
        }
        let SlotState { header, payload, .. } = &mut *st;
        write_reply(header, payload, data, self.unique);
        st.replied = true;
        self.slot.answered.notify_one();
        Ok(())
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        let mut st = self.slot.lock();
        if st.unique == self.unique && !st.replied {
            log::error!("request {} dropped unanswered: EIO", self.unique);
            let SlotState { header, payload, .. } = &mut *st;
            write_error(header, payload, -libc::EIO, self.unique);
            st.replied = true;
            self.slot.answered.notify_one();
        }
    }
}

/// An entry's buffers and the state of the request in them, shared by its thread and the
/// request's `Reply`. The kernel writes the buffers only while the entry is its own (between
/// a submission and its completion), when neither of those touches them.
#[derive(Debug)]
struct Slot {
    state: Mutex<SlotState>,
    /// Signalled when the request is answered.
    answered: Condvar,
}

#[derive(Debug)]
struct SlotState {
    /// `struct fuse_uring_req_header` (`abi::HEADER_SIZE` bytes).
    header: Box<[u8]>,
    /// The payload buffer.
    payload: Box<[u8]>,
    /// The request being served (its commit id).
    unique: u64,
    /// Whether it has been answered.
    replied: bool,
}

impl Slot {
    fn new(payload_size: usize) -> Slot {
        let state = SlotState {
            header: vec![0u8; abi::HEADER_SIZE].into_boxed_slice(),
            payload: vec![0u8; payload_size.max(abi::MIN_PAYLOAD)].into_boxed_slice(),
            unique: 0,
            replied: true,
        };
        Slot { state: Mutex::new(state), answered: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A request the kernel put in an entry that does not add up: its id, and why.
#[derive(Debug, PartialEq, Eq)]
struct Malformed {
    unique: u64,
    why: String,
}

/// Rebuilds the request in `header` and `payload` as /dev/fuse would give it, into `out`:
/// the `fuse_in_header`, the per-op header the kernel put in `op_in` (its size is what the
/// header's length leaves), then the payload. Returns the commit id.
fn assemble(header: &[u8], payload: &[u8], out: &mut Vec<u8>) -> Result<u64, Malformed> {
    let unique = abi::get_u64(header, abi::ENT_COMMIT_ID);
    let bad = |why: String| Malformed { unique, why };
    let len = abi::get_u32(header, abi::IN_OUT) as usize;
    let payload_sz = abi::get_u32(header, abi::ENT_PAYLOAD_SZ) as usize;
    if payload_sz > payload.len() {
        return Err(bad(format!("payload of {payload_sz} bytes in a buffer of {}", payload.len())));
    }
    let op_sz = len
        .checked_sub(abi::IN_HEADER_SIZE + payload_sz)
        .ok_or_else(|| bad(format!("length {len} shorter than its header and {payload_sz}-byte payload")))?;
    if op_sz > abi::OP_IN_SIZE {
        return Err(bad(format!("per-op header of {op_sz} bytes")));
    }
    if abi::get_u64(header, abi::IN_OUT + 8) != unique {
        return Err(bad("commit id is not the request's id".into()));
    }
    out.clear();
    out.extend_from_slice(&header[abi::IN_OUT..abi::IN_OUT + abi::IN_HEADER_SIZE]);
    out.extend_from_slice(&header[abi::OP_IN..abi::OP_IN + op_sz]);
    out.extend_from_slice(&payload[..payload_sz]);
    debug_assert_eq!(out.len(), len);
    Ok(unique)
}

/// Puts a reply (`fuse_out_header`, then the arguments) where the kernel reads it: the header
/// in `in_out`, the arguments in the payload buffer, their size in `payload_sz`. A reply too
/// large for the buffer becomes EIO.
fn write_reply(header: &mut [u8], payload: &mut [u8], data: &[IoSlice<'_>], unique: u64) {
    let total: usize = data.iter().map(|s| s.len()).sum();
    if total < abi::OUT_HEADER_SIZE || total - abi::OUT_HEADER_SIZE > payload.len() {
        log::error!("reply of {total} bytes to request {unique} does not fit: EIO");
        return write_error(header, payload, -libc::EIO, unique);
    }
    let mut at = 0;
    for s in data {
        for (i, &b) in s.iter().enumerate() {
            let pos = at + i;
            if pos < abi::OUT_HEADER_SIZE {
                header[abi::IN_OUT + pos] = b;
            } else {
                payload[pos - abi::OUT_HEADER_SIZE] = b;
            }
        }
        at += s.len();
    }
    abi::put_u32(header, abi::ENT_PAYLOAD_SZ, (total - abi::OUT_HEADER_SIZE) as u32);
    debug_assert_eq!(abi::get_u64(header, abi::IN_OUT + 8), unique, "a reply names its request");
}

/// An error reply with no arguments.
fn write_error(header: &mut [u8], payload: &mut [u8], errno: i32, unique: u64) {
    debug_assert!(errno < 0);
    let h = abi::out_header(abi::OUT_HEADER_SIZE as u32, errno, unique);
    write_reply(header, payload, &[IoSlice::new(&h)], unique);
}

/// Every queue's threads, running.
pub struct Rings {
    threads: Vec<JoinHandle<io::Result<()>>>,
    /// Written to end the threads without an unmount.
    stop: OwnedFd,
}

/// Registers the entries of every queue on `dev` (the session's /dev/fuse, after INIT) and
/// serves their requests with `handler`. Returns once every entry is registered, or the first
/// error (with the threads that did start stopped).
pub fn start(dev: BorrowedFd<'_>, config: &Config, handler: Arc<dyn Handler>) -> io::Result<Rings> {
    assert!(config.queues > 0 && config.threads_per_queue > 0);
    let dev = Arc::new(dev.try_clone_to_owned()?);
    // SAFETY: eventfd returns a new descriptor or -1.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if efd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: efd is a new descriptor nobody else owns.
    let stop = unsafe { OwnedFd::from_raw_fd(efd) };
    let (tx, rx) = std::sync::mpsc::channel();
    let mut rings = Rings { threads: Vec::new(), stop };
    for qid in 0..config.queues {
        for n in 0..config.threads_per_queue {
            let (dev, handler, tx, config) = (dev.clone(), handler.clone(), tx.clone(), config.clone());
            let stop_fd = rings.stop.as_raw_fd();
            let t = std::thread::Builder::new()
                .name(format!("sufs-ring{qid}.{n}"))
                .spawn(move || Queue::serve(qid as u16, dev.as_raw_fd(), stop_fd, &config, handler.as_ref(), tx))?;
            rings.threads.push(t);
        }
    }
    drop(tx);
    for _ in 0..rings.threads.len() {
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                rings.stop();
                return Err(e);
            }
            Err(_) => {
                rings.stop();
                return Err(io::Error::other("a ring thread ended before registering"));
            }
        }
    }
    Ok(rings)
}

impl Rings {
    /// Wakes every thread to end and waits for them. Their entries are given back to the
    /// kernel when their rings close; after the unmount the threads have ended already.
    pub fn stop(self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to the eventfd.
        if unsafe { libc::write(self.stop.as_raw_fd(), one.as_ptr().cast(), 8) } != 8 {
            log::error!("waking the ring threads: {}", io::Error::last_os_error());
        }
        for t in self.threads {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => log::error!("a ring thread ended with {e}"),
                Err(_) => log::error!("a ring thread panicked"),
            }
        }
    }
}

/// The `user_data` of an entry's command and of the stop poll.
const ENTRY: u64 = 1;
const STOP: u64 = 2;

/// One thread's ring and entry.
struct Queue {
    qid: u16,
    dev: RawFd,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    slot: Arc<Slot>,
    /// The two buffers' iovecs for REGISTER (the kernel reads them when it takes the command).
    iov: Box<[libc::iovec; 2]>,
    /// The command last given for the entry (resubmitted on EAGAIN) and its commit id.
    last: (u32, u64),
}

// SAFETY: the iovecs point into the slot's buffers, which the Arc keeps alive and in place.
unsafe impl Send for Queue {}

impl Queue {
    /// A thread's whole life: sets up, registers (reporting the outcome on `ready`), then
    /// serves requests until the kernel ends the entry or `stop_fd` is written.
    fn serve(
        qid: u16,
        dev: RawFd,
        stop_fd: RawFd,
        config: &Config,
        handler: &dyn Handler,
        ready: std::sync::mpsc::Sender<io::Result<()>>,
    ) -> io::Result<()> {
        if config.pin {
            pin_to_cpu(qid as usize);
        }
        let mut q = match Queue::register(qid, dev, stop_fd, config.payload_size) {
            Ok(q) => q,
            Err(e) => {
                let _ = ready.send(Err(io::Error::new(e.kind(), format!("queue {qid}: {e}"))));
                return Ok(());
            }
        };
        let early = q.completions();
        if let Some(e) = early.iter().find(|c| c.0 == ENTRY && c.1 < 0) {
            let err = io::Error::from_raw_os_error(-e.1);
            let _ = ready.send(Err(io::Error::new(err.kind(), format!("queue {qid}: registering: {err}"))));
            return Ok(());
        }
        let _ = ready.send(Ok(()));
        q.run(handler, early)
    }

    /// A ring with the entry's REGISTER and the stop poll submitted.
    fn register(qid: u16, dev: RawFd, stop_fd: RawFd, payload_size: usize) -> io::Result<Queue> {
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(4)?;
        let slot = Arc::new(Slot::new(payload_size));
        let iov = {
            let mut st = slot.lock();
            Box::new([
                libc::iovec { iov_base: st.header.as_mut_ptr().cast(), iov_len: st.header.len() },
                libc::iovec { iov_base: st.payload.as_mut_ptr().cast(), iov_len: st.payload.len() },
            ])
        };
        let mut q = Queue { qid, dev, ring, slot, iov, last: (abi::CMD_REGISTER, 0) };
        let poll = opcode::PollAdd::new(types::Fd(stop_fd), libc::POLLIN as u32).build().user_data(STOP);
        q.push(squeue::Entry128::from(poll))?;
        q.push_command(abi::CMD_REGISTER, 0)?;
        q.ring.submit()?;
        Ok(q)
    }

    /// Serves requests until the session or the transport ends.
    fn run(&mut self, handler: &dyn Handler, mut pending: Vec<(u64, i32)>) -> io::Result<()> {
        let mut request = Vec::with_capacity(abi::HEADER_SIZE + self.iov[1].iov_len);
        loop {
            for (what, res) in std::mem::take(&mut pending) {
                match (what, res) {
                    (STOP, _) => return Ok(()),
                    (_, 0) => {
                        let unique = self.serve_one(handler, &mut request);
                        self.push_command(abi::CMD_COMMIT_AND_FETCH, unique)?;
                    }
                    (_, e) if e == -libc::EAGAIN || e == -libc::EINTR => self.push_command(self.last.0, self.last.1)?,
                    // The session is over (unmount, abort): the kernel gave the entry back.
                    (_, e) if e == -libc::ENOTCONN || e == -libc::ECONNABORTED || e == -libc::ENODEV => return Ok(()),
                    (_, e) => {
                        let err = io::Error::from_raw_os_error(-e);
                        return Err(io::Error::new(err.kind(), format!("queue {}: {err}", self.qid)));
                    }
                }
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(e),
            }
            pending = self.completions();
        }
    }

    /// The completions waiting, as (user_data, result).
    fn completions(&mut self) -> Vec<(u64, i32)> {
        self.ring.completion().map(|c| (c.user_data(), c.result())).collect()
    }

    /// Hands the request in the entry to the handler and waits for its reply (answering EIO
    /// for one that does not add up). Returns its commit id.
    fn serve_one(&self, handler: &dyn Handler, request: &mut Vec<u8>) -> u64 {
        let unique = {
            let mut st = self.slot.lock();
            let SlotState { header, payload, .. } = &mut *st;
            match assemble(header, payload, request) {
                Ok(unique) => {
                    st.unique = unique;
                    st.replied = false;
                    unique
                }
                Err(m) => {
                    log::error!("queue {}: request {}: {}: EIO", self.qid, m.unique, m.why);
                    write_error(header, payload, -libc::EIO, m.unique);
                    st.unique = m.unique;
                    st.replied = true;
                    return m.unique;
                }
            }
        };
        handler.handle(request, Reply { slot: self.slot.clone(), unique });
        let mut st = self.slot.lock();
        while !st.replied {
            st = self.slot.answered.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        debug_assert_eq!(st.unique, unique);
        unique
    }

    /// Queues the entry's command: REGISTER (with the buffers) or COMMIT_AND_FETCH.
    fn push_command(&mut self, cmd: u32, commit_id: u64) -> io::Result<()> {
        let mut e = opcode::UringCmd80::new(types::Fd(self.dev), cmd).cmd(abi::cmd_req(commit_id, self.qid));
        if cmd == abi::CMD_REGISTER {
            e = e.addr(Some(self.iov.as_ptr() as u64));
        }
        let mut sqe = e.build().user_data(ENTRY);
        if cmd == abi::CMD_REGISTER {
            sqe = with_len(sqe, 2);
        }
        self.last = (cmd, commit_id);
        self.push(sqe)
    }

    fn push(&mut self, sqe: squeue::Entry128) -> io::Result<()> {
        // SAFETY: what the entry points to (the iovecs, the buffers) outlives the ring.
        unsafe { self.ring.submission().push(&sqe) }.map_err(|_| io::Error::other("submission queue full"))
    }
}

/// Sets an SQE's `len` (REGISTER's iovec count, which the crate's `UringCmd80` has no field
/// for): bytes 24-27 of `struct io_uring_sqe`.
fn with_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    const LEN: usize = 24;
    // SAFETY: Entry128 is repr(C), 128 bytes, every byte initialised (built from zeroes).
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    raw[LEN..LEN + 4].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: the same bytes back, one field changed.
    unsafe { std::mem::transmute(raw) }
}

/// Binds the calling thread to `cpu`, if it may run there now: a server started with fewer
/// CPUs (taskset, a cpuset) keeps to them, its threads of the other queues left unbound.
/// Returns whether it did.
fn pin_to_cpu(cpu: usize) -> bool {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: a zeroed cpu_set_t is an empty set; the CPU_* macros stay inside it for
    // cpu < 1024, and the affinity calls read or write exactly `size` bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= 1024 || libc::sched_getaffinity(0, size, &mut set) != 0 || !libc::CPU_ISSET(cpu, &set) {
            return false;
        }
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size, &set) != 0 {
            log::warn!("binding a ring thread to CPU {cpu}: {}", io::Error::last_os_error());
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header buffer as the kernel fills it for a request of `op` bytes of per-op header and
    /// `payload` bytes of payload.
    fn kernel_request(unique: u64, opcode: u32, op: &[u8], payload: &[u8], buf: &mut [u8]) -> Vec<u8> {
        let mut header = vec![0u8; abi::HEADER_SIZE];
        let len = (abi::IN_HEADER_SIZE + op.len() + payload.len()) as u32;
        header[0..4].copy_from_slice(&len.to_ne_bytes());
        header[4..8].copy_from_slice(&opcode.to_ne_bytes());
        header[8..16].copy_from_slice(&unique.to_ne_bytes());
        header[16..24].copy_from_slice(&7u64.to_ne_bytes()); // nodeid
        header[abi::OP_IN..abi::OP_IN + op.len()].copy_from_slice(op);
        header[abi::ENT_COMMIT_ID..abi::ENT_COMMIT_ID + 8].copy_from_slice(&unique.to_ne_bytes());
        header[abi::ENT_PAYLOAD_SZ..abi::ENT_PAYLOAD_SZ + 4].copy_from_slice(&(payload.len() as u32).to_ne_bytes());
        buf[..payload.len()].copy_from_slice(payload);
        header
    }

    #[test]
    fn a_request_is_rebuilt_as_dev_fuse_gives_it() {
        let mut payload = vec![0u8; 8192];
        // A WRITE: a 40-byte fuse_write_in, then the data.
        let op = [9u8; 40];
        let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let header = kernel_request(42, 16, &op, &data, &mut payload);
        let mut out = Vec::new();
        assert_eq!(assemble(&header, &payload, &mut out), Ok(42));
        assert_eq!(out.len(), 40 + 40 + 5000);
        assert_eq!(&out[..40], &header[..40]);
        assert_eq!(&out[40..80], &op);
        assert_eq!(&out[80..], &data[..]);
    }

    #[test]
    fn a_request_without_a_per_op_header_keeps_only_its_payload() {
        let mut payload = vec![0u8; 8192];
        let header = kernel_request(5, 1, &[], b"name\0", &mut payload); // LOOKUP
        let mut out = Vec::new();
        assert_eq!(assemble(&header, &payload, &mut out), Ok(5));
        assert_eq!(&out[40..], b"name\0");
    }

    #[test]
    fn a_request_that_does_not_add_up_is_refused() {
        let mut payload = vec![0u8; 8192];
        let mut out = Vec::new();
        let mut header = kernel_request(9, 1, &[], b"x\0", &mut payload);
        header[abi::ENT_PAYLOAD_SZ..abi::ENT_PAYLOAD_SZ + 4].copy_from_slice(&9000u32.to_ne_bytes());
        assert_eq!(assemble(&header, &payload, &mut out).unwrap_err().unique, 9);
        let mut header = kernel_request(9, 1, &[], b"x\0", &mut payload);
        header[0..4].copy_from_slice(&10u32.to_ne_bytes()); // shorter than its own header
        assert!(assemble(&header, &payload, &mut out).is_err());
        let header = kernel_request(9, 1, &[0u8; 128], b"x\0", &mut payload);
        let mut long = header.clone();
        long[0..4].copy_from_slice(&(40u32 + 129 + 2).to_ne_bytes()); // a 129-byte op header
        assert!(assemble(&long, &payload, &mut out).is_err());
        let mut other = header;
        other[abi::ENT_COMMIT_ID..abi::ENT_COMMIT_ID + 8].copy_from_slice(&10u64.to_ne_bytes());
        assert!(assemble(&other, &payload, &mut out).is_err(), "commit id differs from the unique id");
    }

    #[test]
    fn a_reply_splits_into_header_and_payload_however_it_is_sliced() {
        let h = abi::out_header(16 + 6, 0, 77);
        let body = *b"abcdef";
        let whole: Vec<u8> = h.iter().chain(body.iter()).copied().collect();
        for cut in [0, 3, 16, 19, 22] {
            let (mut header, mut payload) = (vec![0u8; abi::HEADER_SIZE], vec![0u8; 64]);
            let (a, b) = whole.split_at(cut);
            write_reply(&mut header, &mut payload, &[IoSlice::new(a), IoSlice::new(b)], 77);
            assert_eq!(&header[..16], &h);
            assert_eq!(abi::get_u32(&header, abi::ENT_PAYLOAD_SZ), 6);
            assert_eq!(&payload[..6], b"abcdef");
        }
    }

    #[test]
    fn a_reply_too_large_becomes_eio() {
        let (mut header, mut payload) = (vec![0u8; abi::HEADER_SIZE], vec![0u8; 4]);
        let h = abi::out_header(16 + 5, 0, 3);
        write_reply(&mut header, &mut payload, &[IoSlice::new(&h), IoSlice::new(b"12345")], 3);
        assert_eq!(abi::get_u32(&header, 4) as i32, -libc::EIO);
        assert_eq!(abi::get_u64(&header, 8), 3);
        assert_eq!(abi::get_u32(&header, abi::ENT_PAYLOAD_SZ), 0);
    }

    #[test]
    fn a_reply_answers_once_and_a_dropped_one_answers_eio() {
        let slot = Arc::new(Slot::new(8192));
        {
            let mut st = slot.lock();
            st.unique = 11;
            st.replied = false;
        }
        let r = Reply { slot: slot.clone(), unique: 11 };
        let h = abi::out_header(16, 0, 11);
        r.send(&[IoSlice::new(&h)]).unwrap();
        assert!(r.send(&[IoSlice::new(&h)]).is_err(), "a second answer is refused");
        drop(r);
        assert_eq!(abi::get_u32(&slot.lock().header, 4), 0, "the answer stays");
        {
            let mut st = slot.lock();
            st.unique = 12;
            st.replied = false;
        }
        drop(Reply { slot: slot.clone(), unique: 12 });
        let st = slot.lock();
        assert!(st.replied);
        assert_eq!(abi::get_u32(&st.header, 4) as i32, -libc::EIO);
        assert_eq!(abi::get_u64(&st.header, 8), 12);
    }

    #[test]
    fn a_stale_reply_does_not_touch_the_next_request() {
        let slot = Arc::new(Slot::new(8192));
        let old = Reply { slot: slot.clone(), unique: 1 };
        {
            let mut st = slot.lock();
            st.unique = 2;
            st.replied = false;
        }
        let h = abi::out_header(16, 0, 1);
        assert!(old.send(&[IoSlice::new(&h)]).is_err());
        drop(old);
        assert!(!slot.lock().replied, "request 2 is still to be answered");
    }

    /// The CPUs the calling thread may run on.
    fn allowed() -> Vec<usize> {
        // SAFETY: as in `pin_to_cpu`.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
            (0..1024).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
        }
    }

    /// A thread is bound to a CPU it may run on, and left as it is for one it may not.
    #[test]
    fn a_ring_thread_is_bound_only_to_a_cpu_it_may_use() {
        std::thread::spawn(|| {
            let cpus = allowed();
            assert!(pin_to_cpu(cpus[0]));
            assert_eq!(allowed(), [cpus[0]]);
            if let Some(&other) = cpus.get(1) {
                assert!(!pin_to_cpu(other), "CPU {other} is no longer allowed");
                assert_eq!(allowed(), [cpus[0]]);
            }
            assert!(!pin_to_cpu(1024));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn cpu_lists_count_to_the_highest_cpu() {
        assert_eq!(parse_cpu_list("0-1"), Some(2));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0,2-5"), Some(6));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn the_sqe_len_lands_in_the_kernels_field() {
        let sqe = opcode::UringCmd80::new(types::Fd(3), abi::CMD_REGISTER).addr(Some(0x1000)).build();
        let raw: [u8; 128] = unsafe { std::mem::transmute(with_len(sqe, 2)) };
        assert_eq!(raw[0], io_uring::opcode::UringCmd80::CODE);
        assert_eq!(u64::from_ne_bytes(raw[16..24].try_into().unwrap()), 0x1000, "addr");
        assert_eq!(u32::from_ne_bytes(raw[24..28].try_into().unwrap()), 2, "len");
    }
}
