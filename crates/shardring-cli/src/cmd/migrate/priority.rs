//! `--nice`: the copy's CPU priority. A migration is background work on machines it shares with
//! servers, proxies and their clients; the CPU it takes at the wrong moment is latency the live
//! traffic sees.

use std::fmt;
use std::str::FromStr;

use anyhow::{Context, Result};

/// The CPU priority `shardring migrate` runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Linux's `SCHED_IDLE` class (`chrt --idle 0`): the command runs only on a CPU nothing else
    /// wants and never preempts a live process when it wakes. A nice value lowers the share of a
    /// busy CPU but still lets each wake-up of the copy (a few hundred a second) cut in front of the
    /// proxy or a server.
    Idle,
    /// A nice value, 0 to 19 (0: as started).
    Nice(i32),
}

impl Priority {
    /// Applies the priority to the calling thread; threads started afterwards inherit it (Linux keeps
    /// the class and the nice value per thread), so this runs before the runtime starts.
    ///
    /// # Errors
    /// When the system refuses the change.
    pub fn apply(self) -> Result<()> {
        match self {
            Priority::Nice(0) => Ok(()),
            Priority::Nice(n) => rustix::process::nice(n)
                .map(drop)
                .context("lowering the CPU priority (--nice)"),
            Priority::Idle => set_idle_class().context("entering the idle CPU class (--nice idle)"),
        }
    }
}

/// `sched_setscheduler(0, SCHED_IDLE, {0})` for the calling thread.
#[cfg(target_os = "linux")]
fn set_idle_class() -> std::io::Result<()> {
    let param = nix::libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a live, initialised `sched_param` for the whole call, which only reads
    // it; pid 0 names the calling thread. No Rust crate of ours exposes this call safely (rustix
    // and nix do not have it). It pays: BENCHMARKS.md, "migrate: the copy in the idle CPU class".
    #[allow(unsafe_code)]
    let rc = unsafe { nix::libc::sched_setscheduler(0, nix::libc::SCHED_IDLE, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Other systems have no idle class: the lowest nice value stands for it.
#[cfg(not(target_os = "linux"))]
fn set_idle_class() -> std::io::Result<()> {
    rustix::process::nice(19).map(drop).map_err(Into::into)
}

impl FromStr for Priority {
    type Err = String;

    fn from_str(text: &str) -> Result<Priority, String> {
        if text.eq_ignore_ascii_case("idle") {
            return Ok(Priority::Idle);
        }
        match text.parse::<i32>() {
            Ok(n) if (0..=19).contains(&n) => Ok(Priority::Nice(n)),
            _ => Err(format!(
                "{text:?}: a nice value from 0 to 19, or `idle` (the idle CPU class)"
            )),
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Priority::Idle => f.write_str("idle"),
            Priority::Nice(n) => write!(f, "{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_idle_and_nice_values_and_refuses_the_rest() {
        assert_eq!("idle".parse(), Ok(Priority::Idle));
        assert_eq!("IDLE".parse(), Ok(Priority::Idle));
        assert_eq!("0".parse(), Ok(Priority::Nice(0)));
        assert_eq!("19".parse(), Ok(Priority::Nice(19)));
        for bad in ["20", "-1", "", "low", "1.5"] {
            let err = bad.parse::<Priority>().unwrap_err();
            assert!(err.contains("0 to 19"), "{bad}: {err}");
        }
        for p in [Priority::Idle, Priority::Nice(7)] {
            assert_eq!(p.to_string().parse(), Ok(p));
        }
    }

    /// The thread's scheduling policy and nice value, fields 41 and 19 of its `stat`.
    #[cfg(target_os = "linux")]
    fn policy_and_nice() -> (u32, i32) {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        // The fields after the parenthesised command name, which may hold spaces: field 3 first.
        let rest: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
        (rest[41 - 3].parse().unwrap(), rest[19 - 3].parse().unwrap())
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn idle_enters_the_idle_class_and_a_nice_value_lowers_the_priority_and_new_threads_inherit() {
        const SCHED_IDLE: u32 = 5;
        // On threads of their own: a priority cannot be raised back without privileges.
        let idle = std::thread::spawn(|| {
            Priority::Idle.apply().unwrap();
            std::thread::spawn(policy_and_nice).join().unwrap()
        });
        assert_eq!(idle.join().unwrap().0, SCHED_IDLE);
        let nice = std::thread::spawn(|| {
            let before = policy_and_nice();
            Priority::Nice(3).apply().unwrap();
            (before, std::thread::spawn(policy_and_nice).join().unwrap())
        });
        let ((policy, before), after) = nice.join().unwrap();
        assert_eq!(after, (policy, (before + 3).min(19)));
    }
}
