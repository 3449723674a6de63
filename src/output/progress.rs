//! Apply progress: on a terminal, a spinner per operation in flight with its elapsed
//! time and latest message; otherwise plain lines, plus a "still creating" line every
//! 10 seconds for long operations, so logs show progress without control codes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::Style;
use crate::addr::Address;
use crate::engine::{Event, Observer};
use crate::plan::Step;

fn verbs(step: Step) -> (&'static str, &'static str) {
    match step {
        Step::Create => ("creating", "creation"),
        Step::Update => ("modifying", "modifications"),
        Step::Delete => ("destroying", "destruction"),
        Step::DeleteDeposed => ("destroying old object", "destruction of old object"),
    }
}

fn secs(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

struct InFlight {
    step: Step,
    started: Instant,
    bar: Option<ProgressBar>,
    last_tick: u64,
    /// The progress line printed last (plain output), so a poll that has nothing new
    /// to say prints nothing.
    last_message: String,
}

/// Prints engine events as they come.
pub struct Progress {
    style: Style,
    multi: Option<MultiProgress>,
    inflight: Mutex<BTreeMap<Address, InFlight>>,
}

impl Progress {
    /// A progress printer; spinners when `style.tty`.
    pub fn new(style: Style) -> Arc<Self> {
        let multi = style
            .tty
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stdout()));
        let p = Arc::new(Self {
            style,
            multi,
            inflight: Mutex::new(BTreeMap::new()),
        });
        if !style.tty {
            let weak = Arc::downgrade(&p);
            std::thread::spawn(move || ticker(weak));
        }
        p
    }

    fn line(&self, text: &str) {
        match &self.multi {
            Some(m) => {
                let _ = m.println(text);
            }
            None => super::print(&format!("{text}\n")),
        }
    }

    fn inflight(&self) -> std::sync::MutexGuard<'_, BTreeMap<Address, InFlight>> {
        self.inflight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Prints "still creating" lines for long operations until the printer is dropped.
fn ticker(p: Weak<Progress>) {
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let Some(p) = p.upgrade() else { return };
        let mut lines = Vec::new();
        for (addr, f) in p.inflight().iter_mut() {
            let tens = f.started.elapsed().as_secs() / 10;
            if tens > f.last_tick {
                f.last_tick = tens;
                lines.push(format!(
                    "{addr}: still {}... [{}s elapsed]",
                    verbs(f.step).0,
                    tens * 10
                ));
            }
        }
        for l in lines {
            p.line(&l);
        }
    }
}

impl Observer for Progress {
    fn event(&self, event: Event) {
        match event {
            Event::Refreshing { .. } => {}
            Event::Started { address, step, .. } => {
                let bar = self.multi.as_ref().map(|m| {
                    let b = m.add(ProgressBar::new_spinner());
                    b.set_style(
                        ProgressStyle::with_template("{spinner} {prefix}: {msg} [{elapsed}]")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    b.set_prefix(address.to_string());
                    b.set_message(format!("{}...", verbs(step).0));
                    b.enable_steady_tick(Duration::from_millis(120));
                    b
                });
                if bar.is_none() {
                    self.line(&format!("{address}: {}...", verbs(step).0));
                }
                self.inflight().insert(
                    address,
                    InFlight {
                        step,
                        started: Instant::now(),
                        bar,
                        last_tick: 0,
                        last_message: String::new(),
                    },
                );
            }
            Event::Progress { address, message } => {
                let bar = {
                    let mut inflight = self.inflight();
                    match inflight.get_mut(&address) {
                        Some(f) if f.bar.is_none() && f.last_message == message => return,
                        Some(f) => {
                            f.last_message.clone_from(&message);
                            f.bar.clone()
                        }
                        None => None,
                    }
                };
                match bar {
                    Some(b) => b.set_message(message),
                    None => self.line(&format!("{address}: {message}")),
                }
            }
            Event::Finished {
                address,
                step,
                elapsed,
                id,
            } => {
                if let Some(f) = self.inflight().remove(&address) {
                    if let Some(b) = f.bar {
                        b.finish_and_clear();
                    }
                }
                let id = id
                    .map(|i| format!(" [id={}]", short_id(&i)))
                    .unwrap_or_default();
                let done = self
                    .style
                    .paint("32", &format!("{} complete", verbs(step).1));
                self.line(&format!("{address}: {done} after {}{id}", secs(elapsed)));
            }
            Event::Failed {
                address,
                step,
                error,
            } => {
                if let Some(f) = self.inflight().remove(&address) {
                    if let Some(b) = f.bar {
                        b.finish_and_clear();
                    }
                }
                let failed = self.style.paint("31", &format!("{} failed", verbs(step).1));
                self.line(&format!("{address}: {failed}: {error}"));
            }
            Event::Skipped { address, because } => {
                self.line(&format!("{address}: not attempted: {because} failed"));
            }
            Event::Warning(w) => {
                let label = self.style.paint("33", "Warning:");
                self.line(&format!("{label} {w}"));
            }
        }
    }
}

/// How many parts of a composite id (a manifest's objects, comma-separated) a progress
/// line shows; the state and `terrain state show` keep the whole id.
const ID_PARTS_SHOWN: usize = 3;

/// `id`, or its first parts and how many more there are when it lists many objects.
fn short_id(id: &str) -> String {
    let parts: Vec<&str> = id.split(',').collect();
    if parts.len() <= ID_PARTS_SHOWN + 1 {
        return id.to_string();
    }
    format!(
        "{},… {} more",
        parts[..ID_PARTS_SHOWN].join(","),
        parts.len() - ID_PARTS_SHOWN
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_composite_ids_are_shortened_in_progress_lines() {
        assert_eq!(short_id("a,b,c,d"), "a,b,c,d");
        assert_eq!(short_id("a,b,c,d,e,f"), "a,b,c,… 3 more");
        assert_eq!(short_id("projects/p/zones/z"), "projects/p/zones/z");
    }
}
