//! What the test files share: the binary under test, a child process killed on drop, and signals.

use std::process::{Child, Command as StdCommand};

use assert_cmd::Command;

/// The `shardring` binary of this build, as an `assert_cmd` command.
pub fn shardring() -> Command {
    Command::cargo_bin("shardring").unwrap()
}

/// A child process killed (and reaped) on drop, so a failed assertion leaves no proxy running.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends `sig` (`-HUP`, `-TERM`, `-USR1`) to process `pid` with kill(1).
pub fn signal(sig: &str, pid: &str) {
    assert!(StdCommand::new("kill")
        .args([sig, pid])
        .status()
        .unwrap()
        .success());
}
