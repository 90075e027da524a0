//! Fatal signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS) leave a line in the proxy's log
//! before the process dies of them, as nutcracker's `signal 11 (SIGSEGV) received, core dumping`
//! does: a supervisor's operator then finds why the proxy went away in the log it reads, not only
//! in the supervisor's "killed by signal 11".
//!
//! The line is the log's own form as far as a signal handler can make it (the time from
//! `clock_gettime`, formatted by hand; `ERROR`; the target `shardring::fatal`; the message in
//! nutcracker's words; a `signal` field as every other signal line has), text or JSON as
//! `--log-format` says, written with one `write(2)` to the log: the `-o` file, or stderr.
//!
//! Then the process dies of the same signal, with its default action (a core dump where the limits
//! allow one), so that a supervisor, `WIFSIGNALED` and a core file see exactly what they would
//! without the handler. A thread's stack overflow still gets Rust's own message on stderr and ends
//! in its abort (SIGABRT), as without the handler; the log names the SIGSEGV it began with
//! ([`handler`] says why).
//!
//! Why this module has `unsafe`: `sigaction(2)` has no safe form in any crate of ours (nix's and
//! libc's are `unsafe`; signal-hook, not a dependency, refuses to register these signals at all,
//! since returning from a real fault's handler is undefined), and a handler can only read its
//! `siginfo_t` through a raw pointer. The descriptor the line goes to is kept with safe rustix
//! calls.

#![allow(
    unsafe_code,
    reason = "sigaction(2) and the handler it installs have no safe form; each block says why it is sound"
)]
#![warn(clippy::undocumented_unsafe_blocks)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use nix::libc;

/// The signals that end the process with a line in the log, by number and by name.
const FATAL: [(libc::c_int, &str); 6] = [
    (libc::SIGSEGV, "SIGSEGV"),
    (libc::SIGBUS, "SIGBUS"),
    (libc::SIGILL, "SIGILL"),
    (libc::SIGFPE, "SIGFPE"),
    (libc::SIGABRT, "SIGABRT"),
    (libc::SIGSYS, "SIGSYS"),
];

/// The descriptor the handler writes to: a duplicate of the log's, made at [`install`] and never
/// closed, so that the number the handler reads always names an open file. A log reopen (SIGHUP)
/// points it at the new file with `dup2(2)`, which swaps what the number refers to atomically: a
/// handler running at that moment writes to the old file or the new one, never to a closed or reused
/// descriptor (a client's socket). -1 until installed.
static LOG_FD: AtomicI32 = AtomicI32::new(-1);

/// The duplicate behind [`LOG_FD`], owned here for the `dup2` of [`follow`] (never dropped).
static LOG_DUP: Mutex<Option<OwnedFd>> = Mutex::new(None);

/// `--log-format json`: the line is a JSON object, as the other lines are.
static JSON: AtomicBool = AtomicBool::new(false);

/// The handler that was in place for a signal before ours (Rust's own, for SIGSEGV and SIGBUS), to
/// chain to on a real fault: its address, 0 for none, `SIG_DFL` or `SIG_IGN`.
struct Previous {
    handler: AtomicUsize,
    /// It takes `siginfo_t` (`SA_SIGINFO`), else only the signal's number.
    siginfo: AtomicBool,
}

impl Previous {
    const fn none() -> Previous {
        Previous {
            handler: AtomicUsize::new(0),
            siginfo: AtomicBool::new(false),
        }
    }
}

/// [`Previous`] of SIGSEGV and of SIGBUS, the two signals Rust's runtime handles.
static PREVIOUS_SEGV: Previous = Previous::none();
static PREVIOUS_BUS: Previous = Previous::none();

fn previous(signal: libc::c_int) -> Option<&'static Previous> {
    match signal {
        libc::SIGSEGV => Some(&PREVIOUS_SEGV),
        libc::SIGBUS => Some(&PREVIOUS_BUS),
        _ => None,
    }
}

/// Installs the handler of every fatal signal, writing to `log` (the log file, or stderr) in the
/// text or JSON form. Call it once, before the threads start; [`follow`] after every log reopen.
///
/// # Errors
/// When the log's descriptor cannot be duplicated or a handler cannot be installed; the signals
/// then keep the action they had.
pub fn install(log: impl AsFd, json: bool) -> io::Result<()> {
    let dup = rustix::io::fcntl_dupfd_cloexec(log, 3)?;
    JSON.store(json, Ordering::Relaxed);
    LOG_FD.store(dup.as_raw_fd(), Ordering::Release);
    *LOG_DUP.lock().unwrap_or_else(PoisonError::into_inner) = Some(dup);
    for (signal, _) in FATAL {
        install_one(signal)?;
    }
    Ok(())
}

/// Points the handler at `log`, the file a reopen (SIGHUP) just opened, so that a crash after
/// logrotate is logged in the new file. Nothing to do before [`install`].
///
/// # Errors
/// When `dup2` fails; the handler then writes to the old file.
pub fn follow(log: impl AsFd) -> io::Result<()> {
    let mut dup = LOG_DUP.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(dup) = dup.as_mut() else {
        return Ok(());
    };
    rustix::io::dup2(log, dup)?;
    // dup2 clears close-on-exec on the new descriptor.
    rustix::io::fcntl_setfd(&*dup, rustix::io::FdFlags::CLOEXEC)?;
    Ok(())
}

/// Remembers `signal`'s current action (for [`handler`] to chain to), then installs [`handler`].
fn install_one(signal: libc::c_int) -> io::Result<()> {
    // SAFETY: an all-zero `sigaction` is a valid value of the C struct (no handler, empty mask, no
    // flags); it is only an output buffer here.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only reads the current one into `old`, a live, writable struct.
    if unsafe { libc::sigaction(signal, std::ptr::null(), &mut old) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Stored before ours is installed, so the handler never reads it half set.
    if let Some(previous) = previous(signal) {
        previous.handler.store(old.sa_sigaction, Ordering::Release);
        previous
            .siginfo
            .store(old.sa_flags & libc::SA_SIGINFO != 0, Ordering::Release);
    }
    // SAFETY: as above, an all-zero `sigaction` is valid; every field that matters is set below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as extern "C" fn(_, _, _) as libc::sighandler_t;
    // SA_ONSTACK: a stack overflow faults with no stack left but the alternate one Rust's runtime
    // gives every thread it starts. SA_RESETHAND: a fault inside the handler itself kills the
    // process at once instead of looping. SA_SIGINFO: who sent the signal (`si_code`).
    action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESETHAND;
    // SAFETY: `sa_mask` is a live `sigset_t` of `action`.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: `action` is fully initialised and names `handler`, an `extern "C"` function with the
    // three-argument signature SA_SIGINFO calls, which only makes async-signal-safe calls.
    if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The handler: writes the line, chains to Rust's own handler on a real SIGSEGV or SIGBUS (for its
/// stack-overflow message), and lets the signal kill the process with its default action.
///
/// Why it chains only on a real fault: Rust's runtime handles SIGSEGV and SIGBUS to tell a thread
/// that overflowed its stack (it prints `thread '…' has overflowed its stack` on stderr and aborts).
/// On any other fault it restores the default action and returns, so that the faulting instruction
/// runs again and kills the process; for a signal sent with kill(2) (`si_code` ≤ 0) nothing runs
/// again, and the process would carry on as if nothing had happened (as `kill -SEGV` did to the
/// proxy before this handler). So a sent signal is never chained, and in every case the handler
/// ends by restoring the default action and raising the signal again: it is delivered (blocked
/// until the handler returns) before anything else runs, and the process dies of the signal it
/// received, with a core dump where the limits allow one.
///
/// Why the line comes first and SIGABRT is set back to its default before chaining: a stack
/// overflow is handled on the thread's alternate signal stack, a few kilobytes that hold one
/// signal frame and Rust's handler but not a second frame for SIGABRT's handler (the CPU's saved
/// state alone is several kilobytes with AVX-512). Run nested there, that handler would overflow
/// the alternate stack too and the process would die of SIGSEGV with nothing logged. So a stack
/// overflow is logged as the SIGSEGV it is, and Rust's abort then ends the process with SIGABRT, as
/// it does without this handler.
///
/// Only async-signal-safe calls: `clock_gettime`, `write`, `sigaction`, `raise`; no allocation, no
/// lock, nothing that can panic.
extern "C" fn handler(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    write_line(signal);
    // SAFETY: with SA_SIGINFO the kernel passes a valid `siginfo_t` for the duration of the handler;
    // it is checked for null all the same.
    let code = unsafe { info.as_ref() }.map_or(0, |i| i.si_code);
    if code > 0 {
        if let Some(previous) = previous(signal) {
            set_default(libc::SIGABRT);
            chain(previous, signal, info, context);
        }
    }
    set_default(signal);
    // SAFETY: raise is async-signal-safe and takes any signal number.
    unsafe { libc::raise(signal) };
}

/// Restores `signal`'s default action.
fn set_default(signal: libc::c_int) {
    // SAFETY: an all-zero `sigaction` is valid; with `SIG_DFL` (0) as its handler it restores the
    // default action.
    let mut default: libc::sigaction = unsafe { std::mem::zeroed() };
    default.sa_sigaction = libc::SIG_DFL;
    // SAFETY: `default` is fully initialised; sigaction is async-signal-safe.
    unsafe { libc::sigaction(signal, &default, std::ptr::null_mut()) };
}

/// Calls the handler that was in place before ours (Rust's runtime's), if there was one.
fn chain(
    previous: &Previous,
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    let address = previous.handler.load(Ordering::Acquire);
    if address == 0 || address == libc::SIG_DFL || address == libc::SIG_IGN {
        return;
    }
    if previous.siginfo.load(Ordering::Acquire) {
        // SAFETY: `address` is the `sa_sigaction` of an action installed with SA_SIGINFO (read by
        // sigaction(2) in `install_one`), so it is a function of this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(address) };
        f(signal, info, context);
    } else {
        // SAFETY: `address` is the `sa_handler` of an action installed without SA_SIGINFO, so it
        // is a function taking only the signal's number.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(address) };
        f(signal);
    }
}

/// The signal's name, as [`FATAL`] has it.
fn name(signal: libc::c_int) -> &'static str {
    FATAL
        .iter()
        .find(|(s, _)| *s == signal)
        .map_or("?", |(_, name)| name)
}

/// Writes the line naming `signal` to the log, in one `write(2)` (the file is `O_APPEND`, so it
/// lands whole after the last line, even if another thread is logging).
fn write_line(signal: libc::c_int) {
    let fd = LOG_FD.load(Ordering::Acquire);
    if fd < 0 {
        return;
    }
    let mut line = Line::new();
    format_line(&mut line, now(), signal, JSON.load(Ordering::Relaxed));
    let bytes = line.bytes();
    // SAFETY: `fd` is the duplicate this module keeps open for the life of the process; `bytes` is
    // a live buffer of `bytes.len()` bytes. write(2) is async-signal-safe; a short or failed write
    // loses (part of) the line, nothing more: the process is dying either way.
    unsafe {
        libc::write(fd, bytes.as_ptr().cast(), bytes.len());
    }
}

/// The time now, since the Unix epoch, as (seconds, microseconds).
fn now() -> (i64, u32) {
    // SAFETY: all-zero is a valid `timespec`, an output buffer here.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a live, writable `timespec`; clock_gettime is async-signal-safe.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) } != 0 {
        return (0, 0);
    }
    #[allow(
        clippy::useless_conversion,
        reason = "time_t is not i64 on every target"
    )]
    let secs = i64::from(ts.tv_sec);
    let micros = u32::try_from(ts.tv_nsec / 1000).unwrap_or(0);
    (secs, micros)
}

/// Formats the line naming `signal` at `time` (seconds and microseconds since the epoch) into `out`,
/// as the log's text or JSON lines look:
///
/// `2026-12-05T12:25:18.907878Z ERROR shardring::fatal: signal 11 (SIGSEGV) received, core dumping signal="SIGSEGV"`
fn format_line(out: &mut Line, time: (i64, u32), signal: libc::c_int, json: bool) {
    let name = name(signal).as_bytes();
    if json {
        out.push(b"{\"timestamp\":\"");
        timestamp(out, time);
        out.push(b"\",\"level\":\"ERROR\",\"fields\":{\"message\":\"");
    } else {
        timestamp(out, time);
        out.push(b" ERROR shardring::fatal: ");
    }
    out.push(b"signal ");
    out.number(i64::from(signal), 1);
    out.push(b" (");
    out.push(name);
    out.push(b") received, core dumping");
    if json {
        out.push(b"\",\"signal\":\"");
        out.push(name);
        out.push(b"\"},\"target\":\"shardring::fatal\"}\n");
    } else {
        out.push(b" signal=\"");
        out.push(name);
        out.push(b"\"\n");
    }
}

/// `time` as RFC 3339 in UTC with microseconds, as the log's other lines have it:
/// `2026-12-05T12:25:18.907878Z`.
fn timestamp(out: &mut Line, (secs, micros): (i64, u32)) {
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    out.number(year, 4);
    out.push(b"-");
    out.number(month, 2);
    out.push(b"-");
    out.number(day, 2);
    out.push(b"T");
    out.number(of_day / 3600, 2);
    out.push(b":");
    out.number(of_day % 3600 / 60, 2);
    out.push(b":");
    out.number(of_day % 60, 2);
    out.push(b".");
    out.number(i64::from(micros), 6);
    out.push(b"Z");
}

/// The proleptic Gregorian (year, month, day) of `days` since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`): plain arithmetic, safe in a signal handler where no time library is.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A line built on the stack: a signal handler may not allocate. What does not fit is cut.
struct Line {
    buf: [u8; 256],
    len: usize,
}

impl Line {
    fn new() -> Line {
        Line {
            buf: [0; 256],
            len: 0,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        let free = self.buf.get_mut(self.len..).unwrap_or_default();
        let n = bytes.len().min(free.len());
        for (to, from) in free.iter_mut().zip(bytes) {
            *to = *from;
        }
        self.len += n;
    }

    /// `n` in decimal, zero-padded to `width` digits (a minus sign first when negative).
    fn number(&mut self, n: i64, width: usize) {
        if n < 0 {
            self.push(b"-");
        }
        let mut n = n.unsigned_abs();
        let mut digits = [b'0'; 20];
        let mut count = 0;
        for d in digits.iter_mut().rev() {
            // A digit: n % 10 < 10.
            *d = b'0' + (n % 10) as u8;
            n /= 10;
            count += 1;
            if n == 0 && count >= width {
                break;
            }
        }
        self.push(digits.get(digits.len() - count..).unwrap_or_default());
    }

    fn bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;

    fn formatted(time: (i64, u32), signal: libc::c_int, json: bool) -> String {
        let mut line = Line::new();
        format_line(&mut line, time, signal, json);
        String::from_utf8(line.bytes().to_vec()).unwrap()
    }

    #[test]
    fn the_line_reads_like_the_logs_other_lines_and_like_nutcrackers() {
        // 2026-12-05T12:25:18.907878Z
        let time = (1_796_473_518, 907_878);
        assert_eq!(
            formatted(time, libc::SIGSEGV, false),
            format!(
                "2026-12-05T12:25:18.907878Z ERROR shardring::fatal: signal {} (SIGSEGV) received, \
                 core dumping signal=\"SIGSEGV\"\n",
                libc::SIGSEGV
            )
        );
        let json = formatted(time, libc::SIGABRT, true);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["timestamp"], "2026-12-05T12:25:18.907878Z");
        assert_eq!(v["level"], "ERROR");
        assert_eq!(v["target"], "shardring::fatal");
        assert_eq!(
            v["fields"]["message"],
            format!("signal {} (SIGABRT) received, core dumping", libc::SIGABRT)
        );
        assert_eq!(v["fields"]["signal"], "SIGABRT");
    }

    #[test]
    fn timestamps_match_the_calendar() {
        let stamp = |secs: i64, micros: u32| {
            let mut line = Line::new();
            timestamp(&mut line, (secs, micros));
            String::from_utf8(line.bytes().to_vec()).unwrap()
        };
        assert_eq!(stamp(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(stamp(951_782_400, 1), "2000-02-29T00:00:00.000001Z");
        assert_eq!(stamp(4_107_542_399, 999_999), "2100-02-28T23:59:59.999999Z");
        assert_eq!(stamp(-1, 0), "1969-12-31T23:59:59.000000Z");
    }

    #[test]
    fn a_line_too_long_is_cut_not_a_panic() {
        let mut line = Line::new();
        for _ in 0..100 {
            line.push(b"0123456789");
        }
        line.number(i64::MIN, 30);
        assert_eq!(line.bytes().len(), 256);
    }

    /// The environment variable that makes [`crash_child`] crash, and how.
    const CRASH: &str = "SHARDRING_FATAL_TEST_CRASH";

    /// Runs this test binary again as a child that installs the handlers (logging to `log`) and
    /// crashes as `how` says; returns its exit status and stderr.
    fn crash(how: &str, log: &std::path::Path) -> (std::process::ExitStatus, String) {
        let out = Command::new("sh")
            .arg("-c")
            // No core file from the crashes this test makes on purpose.
            .arg("ulimit -c 0; exec \"$0\" \"$@\"")
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", "fatal::tests::crash_child", "--nocapture"])
            .env(CRASH, how)
            .env("SHARDRING_FATAL_TEST_LOG", log)
            .output()
            .unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Not a test by itself: the child of [`crash`] (returns at once without its variable).
    #[test]
    fn crash_child() {
        let Ok(how) = std::env::var(CRASH) else {
            return;
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(std::env::var("SHARDRING_FATAL_TEST_LOG").unwrap())
            .unwrap();
        install(&log, false).unwrap();
        match how.as_str() {
            "overflow" => {
                let t = std::thread::spawn(|| overflow(0));
                let _ = t.join();
            }
            "fault" => {
                let p = std::hint::black_box(std::ptr::null::<u64>());
                // SAFETY: not sound, on purpose: a real SIGSEGV (a read of address 0).
                let v = unsafe { std::ptr::read_volatile(p) };
                std::hint::black_box(v);
            }
            _ => {}
        }
        unreachable!("the child should have died of a signal");
    }

    /// Recurses until the thread's stack overflows.
    fn overflow(depth: u64) -> u64 {
        let frame = std::hint::black_box([depth; 64]);
        if std::hint::black_box(depth) == u64::MAX {
            return 0;
        }
        overflow(depth + 1) + frame[0]
    }

    #[test]
    fn a_real_fault_is_logged_and_kills_with_its_signal() {
        let dir = test_support::TempDir::new("fatal-fault");
        let log = dir.path().join("log");
        let (status, stderr) = crash("fault", &log);
        assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status:?} {stderr}");
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            logged.contains(&format!(
                "signal {} (SIGSEGV) received, core dumping",
                libc::SIGSEGV
            )),
            "{logged}"
        );
    }

    #[test]
    fn a_stack_overflow_is_logged_and_still_gets_rusts_message_and_abort() {
        let dir = test_support::TempDir::new("fatal-overflow");
        let log = dir.path().join("log");
        let (status, stderr) = crash("overflow", &log);
        assert!(stderr.contains("has overflowed its stack"), "{stderr}");
        assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?} {stderr}");
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(
            logged,
            format!(
                "{} ERROR shardring::fatal: signal {} (SIGSEGV) received, core dumping \
                 signal=\"SIGSEGV\"\n",
                logged.split(' ').next().unwrap_or_default(),
                libc::SIGSEGV
            ),
        );
    }
}
