//! Progress on stderr: a bar with an ETA on a terminal, plain lines
//! (`[3/12] ... ETA 0:40`) otherwise.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Instant;

/// Counts runs (perf runs; tenant jobs) and estimates the time left.
pub struct Progress {
    bar: Option<ProgressBar>,
    total: u64,
    done: u64,
    started: Instant,
    /// Expected seconds per run before any has finished.
    per_run: f64,
}

fn hms(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

impl Progress {
    /// `bar`: draw an indicatif bar (use it when stderr is a terminal).
    pub fn new(total: u64, per_run: f64, bar: bool) -> Progress {
        let bar = bar.then(|| {
            let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} runs, ETA {eta} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            b.set_style(style);
            b.set_message(format!("(about {})", hms(total as f64 * per_run)));
            b
        });
        if bar.is_none() {
            eprintln!(
                "sweep: {total} runs, about {} in all",
                hms(total as f64 * per_run)
            );
        }
        Progress {
            bar,
            total,
            done: 0,
            started: Instant::now(),
            per_run,
        }
    }

    /// Seconds left: the measured pace once a run has finished.
    pub fn eta(&self) -> f64 {
        let left = self.total.saturating_sub(self.done) as f64;
        if self.done == 0 {
            left * self.per_run
        } else {
            left * self.started.elapsed().as_secs_f64() / self.done as f64
        }
    }

    /// One run finished.
    pub fn step(&mut self, what: &str) {
        self.done += 1;
        match &self.bar {
            Some(b) => {
                b.set_message(what.to_owned());
                b.inc(1);
            }
            None => eprintln!(
                "[{}/{}] {what} (ETA {})",
                self.done,
                self.total,
                hms(self.eta())
            ),
        }
    }

    /// A line that does not disturb the bar.
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// Clears the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_format_and_eta() {
        assert_eq!(hms(59.6), "1:00");
        assert_eq!(hms(3725.0), "1:02:05");
        let p = Progress::new(10, 2.0, false);
        assert_eq!(p.eta(), 20.0);
    }
}
