//! A shorter CPU time slice for the proxy's threads, so that a proxy sharing its cores with its servers
//! and clients runs soon after its sockets wake it.
//!
//! Every request crosses the proxy twice, so each moment it waits for a CPU behind a backend or a client
//! that is mid-slice delays every request it holds. Linux's fair scheduler (EEVDF, kernel 6.6+) orders
//! runnable threads by a virtual deadline that a shorter requested slice brings closer; from 6.12 a thread
//! can request its slice (`sched_setattr` with `sched_runtime` for `SCHED_OTHER`, no privilege needed;
//! clamped by the kernel to 0.1–100 ms), and one woken with a shorter slice than the running thread's may
//! take the CPU at once. It runs no longer in total: the same fair share, in shorter turns.
//!
//! Applied per thread (the scheduler's attributes are a thread's): the runtime's threads are asked for it
//! as they start ([`crate::workers::runtime`]). Where the kernel does not know custom slices, or the thread
//! runs under another policy (`chrt`, a real-time one), nothing changes, and [`request`] says so.

use std::io;
use std::time::Duration;

/// The slice the proxy asks for by default: about a tenth of the kernel's default (~3 ms), long enough to
/// drain a burst of ready sockets in one turn.
pub const DEFAULT_SLICE: Duration = Duration::from_micros(300);

/// What [`request`] did to the calling thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The thread now runs with this slice (as the kernel reports it back, after its clamping).
    Applied(Duration),
    /// The kernel keeps no custom slice for this thread (older than 6.12, or not a `SCHED_OTHER` thread):
    /// it is left as it was.
    Unsupported,
}

/// Asks the scheduler to run the calling thread in turns of `slice`, keeping its policy and nice value.
///
/// # Errors
/// When the kernel refuses the call (e.g. a seccomp filter without `sched_setattr`); the thread is left as
/// it was.
pub fn request(slice: Duration) -> io::Result<Outcome> {
    imp::request(slice)
}

#[cfg(target_os = "linux")]
#[allow(
    unsafe_code,
    reason = "sched_getattr and sched_setattr have no wrapper in std or libc, only the raw syscall; the \
              slice measured better p99 and throughput against nutcracker (BENCHMARKS.md, proxy)"
)]
mod imp {
    use std::io;
    use std::time::Duration;

    use super::Outcome;

    /// The kernel's bounds on a requested slice (`kernel/sched/syscalls.c`: 0.1 ms to 100 ms).
    const MIN_SLICE_NS: u64 = 100_000;
    const MAX_SLICE_NS: u64 = 100_000_000;

    /// `sched_attr` as far as the kernel's first version of it (48 bytes); the size field tells the
    /// kernel which fields are present.
    fn empty_attr() -> libc::sched_attr {
        libc::sched_attr {
            size: std::mem::size_of::<libc::sched_attr>() as u32,
            sched_policy: 0,
            sched_flags: 0,
            sched_nice: 0,
            sched_priority: 0,
            sched_runtime: 0,
            sched_deadline: 0,
            sched_period: 0,
        }
    }

    fn get_attr() -> io::Result<libc::sched_attr> {
        let mut attr = empty_attr();
        // SAFETY: `sched_getattr(0, attr, size, 0)` writes at most `size` bytes into `attr`, a live,
        // properly aligned `sched_attr` of exactly that size; thread 0 is the calling thread.
        let r = unsafe {
            libc::syscall(
                libc::SYS_sched_getattr,
                0,
                &mut attr as *mut libc::sched_attr,
                std::mem::size_of::<libc::sched_attr>() as libc::c_uint,
                0,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(attr)
    }

    pub(super) fn request(slice: Duration) -> io::Result<Outcome> {
        let mut attr = get_attr()?;
        if attr.sched_policy != libc::SCHED_OTHER as u32 {
            return Ok(Outcome::Unsupported);
        }
        attr.size = std::mem::size_of::<libc::sched_attr>() as u32;
        attr.sched_flags = 0;
        attr.sched_runtime = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: `sched_setattr(0, attr, 0)` only reads `attr.size` bytes from `attr`, a live
        // `sched_attr` whose size field is its own size; thread 0 is the calling thread. The policy and
        // nice value written back are the ones just read, so only the slice changes.
        let r = unsafe {
            libc::syscall(
                libc::SYS_sched_setattr,
                0,
                &attr as *const libc::sched_attr,
                0,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        // A kernel without custom slices accepts the call and ignores the runtime: it reports back 0
        // (before 6.6) or its own slice. One that keeps it reports it, clamped to its bounds.
        let wanted = attr.sched_runtime.clamp(MIN_SLICE_NS, MAX_SLICE_NS);
        match get_attr()?.sched_runtime {
            ns if ns == wanted => Ok(Outcome::Applied(Duration::from_nanos(ns))),
            _ => Ok(Outcome::Unsupported),
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::io;
    use std::time::Duration;

    use super::Outcome;

    pub(super) fn request(_slice: Duration) -> io::Result<Outcome> {
        Ok(Outcome::Unsupported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_gets_the_slice_it_asks_for_or_is_left_alone() {
        // On its own thread: the test harness's threads are shared.
        std::thread::spawn(|| {
            let kernel_has_slices = std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .and_then(|r| {
                    let mut v = r.split(['.', '-']).map(|n| n.parse::<u32>().unwrap_or(0));
                    Some((v.next()?, v.next()?))
                })
                .is_some_and(|v| v >= (6, 12));
            match request(Duration::from_micros(500)).unwrap() {
                Outcome::Applied(got) => assert_eq!(got, Duration::from_micros(500)),
                Outcome::Unsupported => assert!(!kernel_has_slices, "6.12+ keeps custom slices"),
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_kernel_clamps_a_slice_below_its_floor() {
        std::thread::spawn(|| {
            if let Outcome::Applied(got) = request(Duration::from_nanos(1)).unwrap() {
                assert_eq!(got, Duration::from_micros(100));
            }
        })
        .join()
        .unwrap();
    }
}
