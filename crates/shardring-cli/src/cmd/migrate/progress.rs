//! The copy's progress: a bar with rate and ETA on a terminal (indicatif), nothing while it runs
//! otherwise; in both cases one summary line at the end.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use shardring_migrate::{Progress, Report};

/// A running display of `progress` out of `total` keys.
#[derive(Debug)]
pub(super) struct Display {
    bar: ProgressBar,
    ticker: tokio::task::JoinHandle<()>,
}

impl Display {
    /// Starts drawing (on stderr, when it is a terminal).
    pub fn start(progress: Arc<Progress>, total: u64) -> Display {
        let bar = if std::io::stderr().is_terminal() {
            ProgressBar::new(total)
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} keys  {per_sec}  ETA {eta}  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let shown = bar.clone();
        let ticker = tokio::spawn(async move {
            loop {
                let r = progress.report();
                shown.set_length(total.max(r.moving));
                shown.set_position(done(&r));
                shown.set_message(format!(
                    "{} copied, {} there already, {} failed",
                    r.copied, r.skipped, r.failed
                ));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Display { bar, ticker }
    }

    /// Stops drawing.
    pub fn finish(self) {
        self.ticker.abort();
        self.bar.finish_and_clear();
    }
}

/// Keys settled one way or another.
fn done(r: &Report) -> u64 {
    r.copied + r.skipped + r.gone + r.failed
}

/// The one-line summary of a copy that took `secs`.
pub(super) fn summary(r: &Report, secs: f64) -> String {
    let secs = secs.max(1e-3);
    format!(
        "copied {} keys ({}) in {secs:.1} s ({:.0} keys/s, {:.1} MB/s); {} already there (newer, \
         or copied before), {} gone meanwhile, {} copied again after a change, {} failed",
        r.copied,
        super::plan::bytes(r.bytes),
        r.copied as f64 / secs,
        r.bytes as f64 / secs / 1e6,
        r.skipped,
        r.gone,
        r.recopied,
        r.failed
    )
}
