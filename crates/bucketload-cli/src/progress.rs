//! Progress bars on stderr (only when stderr is a terminal): objects, objects/s and MB/s.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bucketload::base::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A [`Progress`] drawn with indicatif; silent when stderr is not a terminal.
#[derive(Debug)]
pub struct Bar {
    bar: Option<ProgressBar>,
    started: Instant,
    bytes: AtomicU64,
}

impl Bar {
    /// A bar labelled `verb` ("generating", "copying", ...).
    pub fn new(verb: &str) -> Bar {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(style(false));
            bar.set_prefix(verb.to_string());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Bar {
            bar,
            started: Instant::now(),
            bytes: AtomicU64::new(0),
        }
    }
}

/// Template when the total is known.
const WITH_TOTAL: &str = "{prefix} [{bar:30}] {pos}/{len} objects, {msg} ({eta})";
/// Template while the total is unknown (listing).
const WITHOUT_TOTAL: &str = "{spinner} {prefix} {pos} objects, {msg}";

fn style(known_total: bool) -> ProgressStyle {
    let template = if known_total {
        WITH_TOTAL
    } else {
        WITHOUT_TOTAL
    };
    // The templates are constants checked by the unit test below.
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

impl Progress for Bar {
    fn set_total(&self, objects: u64, _bytes: Option<u64>) {
        if let Some(bar) = &self.bar {
            bar.set_length(objects);
            bar.set_style(style(true));
        }
    }

    fn advance(&self, objects: u64, bytes: u64) {
        let total = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if let Some(bar) = &self.bar {
            bar.inc(objects);
            let secs = self.started.elapsed().as_secs_f64().max(1e-3);
            let rate = bar.position() as f64 / secs;
            bar.set_message(format!(
                "{rate:.0} objects/s, {:.1} MB/s",
                total as f64 / 1e6 / secs
            ));
        }
    }

    fn restart(&self) {
        self.bytes.store(0, Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            bar.reset();
            bar.set_length(0);
            bar.set_style(style(false));
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_valid() {
        assert!(ProgressStyle::with_template(WITH_TOTAL).is_ok());
        assert!(ProgressStyle::with_template(WITHOUT_TOTAL).is_ok());
    }
}
