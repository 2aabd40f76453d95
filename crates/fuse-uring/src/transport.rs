//! How requests reach a fuser file system: the classic way, each request a read(2) of
//! /dev/fuse and each reply a writev(2), or FUSE over io_uring (the ring, `crate::start`),
//! where the kernel hands requests to registered buffers and takes the reply to one and the
//! wish for the next in one submission. Both go through the same decoding and dispatch
//! (fuser's, `fuser::Dispatcher` for the ring's requests), and the classic reader runs in
//! both: the kernel still sends FORGET and INTERRUPT that way, and everything until the ring
//! is ready.
//!
//! A file system takes part twice: at INIT (`Negotiated::negotiate`, from its
//! `Filesystem::init`), where io_uring is asked for and the buffers' size settled, and when
//! the session runs (`run`), which starts the ring once INIT is answered.
//!
//! The kernel offers io_uring only when root has switched it on
//! (`echo Y > /sys/module/fuse/parameters/enable_uring`); nothing here changes that.

use std::fmt;
use std::io;
use std::os::fd::AsFd;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use fuser::{InitFlags, KernelConfig};

use crate as uring;

/// The largest write the kernel may send (and so the ring's payload buffers): 1 MiB, what
/// the kernel's default page limit allows anyway (`fs.fuse.max_pages_limit`, 256 pages).
pub const MAX_WRITE: u32 = 1 << 20;

/// Where the module parameter lives.
pub const URING_PARAMETER: &str = "/sys/module/fuse/parameters/enable_uring";

/// The mount's choice (a program's `--transport`, `-o transport=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Transport {
    /// io_uring when the kernel offers it, else classic; the mount log says which.
    #[default]
    Auto,
    /// io_uring, or no mount.
    Uring,
    /// read(2) and writev(2) on /dev/fuse.
    Classic,
}

impl FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Transport, String> {
        match s {
            "auto" => Ok(Transport::Auto),
            "uring" | "io_uring" => Ok(Transport::Uring),
            "classic" => Ok(Transport::Classic),
            _ => Err(format!("transport must be auto, uring or classic, not {s:?}")),
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Auto => "auto",
            Transport::Uring => "uring",
            Transport::Classic => "classic",
        })
    }
}

/// What the FUSE INIT exchange settled, for the mount to read once the session is up:
/// whether the kernel offered io_uring (and sufs accepted it), and the payload size the
/// ring's buffers need.
#[derive(Debug, Default)]
pub struct Negotiated {
    /// io_uring asked for (set before the session starts).
    pub wanted: AtomicBool,
    /// The kernel offered it and INIT accepted it.
    pub offered: AtomicBool,
    /// `max(8192, max_write, max_pages * page size)`.
    pub payload_size: AtomicUsize,
}

impl Negotiated {
    pub fn new(transport: Transport) -> Arc<Negotiated> {
        let n = Negotiated::default();
        n.wanted.store(transport != Transport::Classic, Ordering::Relaxed);
        Arc::new(n)
    }

    /// The file system's side of INIT (call it from `Filesystem::init`): writes of at most
    /// `MAX_WRITE` (the kernel's page limit allows no more by default), so that the ring's
    /// payload buffers are that large; and FUSE over io_uring if wanted and offered (`run`
    /// starts it once INIT is answered).
    pub fn negotiate(&self, config: &mut KernelConfig) {
        let _ = config.set_max_write(MAX_WRITE);
        if let Err(max) = config.set_max_readahead(MAX_WRITE) {
            let _ = config.set_max_readahead(max);
        }
        let page = 4096;
        let pages = (MAX_WRITE as usize).div_ceil(page).min(max_pages_limit());
        self.payload_size.store((MAX_WRITE as usize).max(pages * page).max(8192), Ordering::Relaxed);
        if self.wanted.load(Ordering::Relaxed) {
            self.offered.store(config.add_capabilities(InitFlags::FUSE_OVER_IO_URING).is_ok(), Ordering::Relaxed);
        }
    }
}

/// The kernel's page limit per request (`fs.fuse.max_pages_limit`, 256 by default).
pub fn max_pages_limit() -> usize {
    std::fs::read_to_string("/proc/sys/fs/fuse/max_pages_limit").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(256)
}

/// Whether root has switched FUSE over io_uring on (None: this kernel has no such parameter).
pub fn uring_enabled() -> Option<bool> {
    std::fs::read_to_string(URING_PARAMETER).ok().map(|s| s.trim() == "Y")
}

/// Why the kernel's offer does not do for `transport` (io_uring asked for, not offered).
pub fn refusal(transport: Transport, negotiated: &Negotiated) -> Option<String> {
    (transport == Transport::Uring && !negotiated.offered.load(Ordering::Relaxed)).then(not_offered)
}

fn not_offered() -> String {
    match uring_enabled() {
        None => "this kernel has no FUSE over io_uring".to_string(),
        Some(false) => format!("the kernel does not offer FUSE over io_uring (as root: echo Y > {URING_PARAMETER})"),
        Some(true) => "the kernel did not offer FUSE over io_uring at INIT".to_string(),
    }
}

/// Serves the session on the transport chosen, until the unmount. `threads` is the number of
/// request threads: the classic reader's, or each queue's on the ring (a queue serves the
/// requests of one CPU's callers: with two threads, a request waiting for the device holds up
/// none of them). `log` says which transport serves.
pub fn run<FS: fuser::Filesystem>(
    session: fuser::Session<FS>,
    transport: Transport,
    negotiated: &Negotiated,
    threads: usize,
    log: &mut dyn FnMut(&str),
) -> io::Result<()> {
    let offered = negotiated.offered.load(Ordering::Relaxed);
    if transport == Transport::Classic {
        log("transport: classic /dev/fuse");
        return session.run();
    }
    if !offered {
        let why = not_offered();
        if transport == Transport::Uring {
            return Err(io::Error::new(io::ErrorKind::Unsupported, why));
        }
        log(&format!("transport: classic /dev/fuse ({why})"));
        return session.run();
    }
    let config = ring_config(negotiated, threads);
    let dev = session.as_fd().try_clone_to_owned()?;
    session.run_with(|dispatcher| {
        let handler = Arc::new(Dispatch(dispatcher));
        match uring::start(dev.as_fd(), &config, handler) {
            Ok(rings) => {
                log(&format!(
                    "transport: io_uring, {} queue(s) of {} thread(s), {} KiB payload buffers",
                    config.queues,
                    config.threads_per_queue,
                    config.payload_size >> 10
                ));
                Ok(Box::new(move || rings.stop()))
            }
            Err(e) if transport == Transport::Auto => {
                log(&format!("transport: classic /dev/fuse (io_uring did not start: {e})"));
                Ok(Box::new(|| ()))
            }
            Err(e) => Err(e),
        }
    })
}

/// The ring `run` starts: a queue per possible CPU, `threads` threads each, bound to the
/// queue's CPU. The kernel queues a request on its caller's CPU; a thread free to run anywhere
/// is woken where it last ran, so a queue's second thread, which takes a request while the
/// first still serves the RELEASE that close(2) sent without waiting, settles on the idle CPU
/// and every round trip it serves then wakes the other CPU twice. Bound, a queue's threads
/// share their callers' CPU.
fn ring_config(negotiated: &Negotiated, threads: usize) -> uring::Config {
    uring::Config {
        queues: uring::Config::possible_cpus(),
        threads_per_queue: threads.max(1),
        payload_size: negotiated.payload_size.load(Ordering::Relaxed),
        pin: true,
    }
}

/// The ring's requests, dispatched by fuser as /dev/fuse's are.
struct Dispatch<FS: fuser::Filesystem>(fuser::Dispatcher<FS>);

impl<FS: fuser::Filesystem> uring::Handler for Dispatch<FS> {
    fn handle(&self, request: &[u8], reply: uring::Reply) {
        if let Err(e) = self.0.dispatch(request, Arc::new(reply)) {
            log::error!("a request from the ring: {e}");
        }
    }
}

impl fuser::ReplySink for uring::Reply {
    fn send(&self, data: &[io::IoSlice<'_>]) -> io::Result<()> {
        uring::Reply::send(self, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each queue's threads serve on its CPU, as libfuse's do.
    #[test]
    fn the_ring_binds_its_threads_to_their_queues_cpus() {
        let c = ring_config(&Negotiated::default(), 0);
        assert!(c.pin);
        assert_eq!(c.threads_per_queue, 1);
        assert_eq!(c.queues, uring::Config::possible_cpus());
    }

    #[test]
    fn transports_parse_and_print() {
        for t in [Transport::Auto, Transport::Uring, Transport::Classic] {
            assert_eq!(t.to_string().parse::<Transport>(), Ok(t));
        }
        assert_eq!("io_uring".parse::<Transport>(), Ok(Transport::Uring));
        assert!("fast".parse::<Transport>().is_err());
    }
}
