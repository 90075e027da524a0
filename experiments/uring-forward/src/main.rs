//! `uring-forward`: one minimal memcached forwarding data path on two I/O runtimes, to measure whether
//! io_uring lowers a proxy's CPU per request against epoll (issue #16). See README.md.
//!
//! ```text
//! uring-forward --io epoll|uring|uring-tuned|monoio-epoll --listen 127.0.0.1:PORT --backend HOST:PORT [--backend …]
//! ```

mod epoll;
mod forward;
mod io;
mod protocol;
mod route;
mod uring;

use std::net::SocketAddr;
use std::process::ExitCode;

/// The runtime chosen with `--io`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Io {
    /// tokio, current thread, epoll.
    Epoll,
    /// monoio on io_uring (epoll where io_uring is unavailable).
    Uring,
    /// monoio on io_uring with single-issuer, deferred-task-work setup flags (epoll where unavailable).
    UringTuned,
    /// monoio forced onto its epoll driver.
    MonoioEpoll,
}

/// The command line.
#[derive(Debug)]
struct Args {
    /// Which runtime serves.
    io: Io,
    /// Where clients connect.
    listen: SocketAddr,
    /// The memcached servers, in routing order.
    backends: Vec<SocketAddr>,
}

const USAGE: &str = "usage: uring-forward --io epoll|uring|uring-tuned|monoio-epoll --listen ADDR --backend ADDR [--backend ADDR ...]";

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut io, mut listen, mut backends) = (None, None, Vec::new());
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let addr = || {
            value
                .parse::<SocketAddr>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--io" => {
                io = Some(match value.as_str() {
                    "epoll" => Io::Epoll,
                    "uring" => Io::Uring,
                    "uring-tuned" => Io::UringTuned,
                    "monoio-epoll" => Io::MonoioEpoll,
                    other => {
                        return Err(format!(
                            "--io {other}: epoll, uring, uring-tuned or monoio-epoll"
                        ))
                    }
                })
            }
            "--listen" => listen = Some(addr()?),
            "--backend" => backends.push(addr()?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if backends.is_empty() {
        return Err("at least one --backend".into());
    }
    Ok(Args {
        io: io.ok_or("--io is required")?,
        listen: listen.ok_or("--listen is required")?,
        backends,
    })
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let served = match args.io {
        Io::Epoll => epoll::run(args.listen, args.backends),
        Io::Uring => uring::run(args.listen, args.backends, uring::Driver::UringOrFallback),
        Io::UringTuned => uring::run(
            args.listen,
            args.backends,
            uring::Driver::UringTunedOrFallback,
        ),
        Io::MonoioEpoll => uring::run(args.listen, args.backends, uring::Driver::Epoll),
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uring-forward: {e}");
            ExitCode::FAILURE
        }
    }
}
