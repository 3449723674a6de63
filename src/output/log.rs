//! `TERRAIN_LOG_PATH=FILE`: every engine event appended to FILE as one JSON object per
//! line, for CI logs and post-mortems. Each line is one write with O_APPEND, so lines
//! from concurrent operations never interleave and survive the process being killed.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::json;

use crate::engine::{Event, Observer};
use crate::plan::Step;

/// Sends events to `inner` and appends them to a log file.
pub struct JsonLog {
    file: Mutex<File>,
    inner: Arc<dyn Observer>,
}

impl JsonLog {
    /// Wraps `inner`, appending to `path` (created 0600 if missing).
    ///
    /// Fails when the file cannot be opened.
    pub fn open(path: &Path, inner: Arc<dyn Observer>) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        Ok(Self {
            file: Mutex::new(file),
            inner,
        })
    }
}

fn step_name(s: Step) -> &'static str {
    match s {
        Step::Create => "create",
        Step::Update => "update",
        Step::Delete => "delete",
        Step::DeleteDeposed => "delete_deposed",
    }
}

impl Observer for JsonLog {
    fn event(&self, event: Event) {
        let time = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let line = match &event {
            Event::Refreshing { address, id } => {
                json!({"time": time, "event": "refreshing", "address": address.to_string(), "id": id})
            }
            Event::Started {
                address,
                step,
                adopts,
            } => {
                let mut line = json!({"time": time, "event": "started", "address": address.to_string(), "step": step_name(*step)});
                if let Some(id) = adopts {
                    line["adopts"] = json!(id);
                }
                line
            }
            Event::Progress { address, message } => {
                json!({"time": time, "event": "progress", "address": address.to_string(), "message": message})
            }
            Event::Finished {
                address,
                step,
                elapsed,
                id,
            } => {
                json!({"time": time, "event": "finished", "address": address.to_string(), "step": step_name(*step), "elapsed_ms": elapsed.as_millis() as u64, "id": id})
            }
            Event::Failed {
                address,
                step,
                error,
            } => {
                json!({"time": time, "event": "failed", "address": address.to_string(), "step": step_name(*step), "error": error})
            }
            Event::Skipped { address, because } => {
                json!({"time": time, "event": "skipped", "address": address.to_string(), "because": because.to_string()})
            }
            Event::Warning(w) => json!({"time": time, "event": "warning", "message": w}),
        };
        if let Ok(mut f) = self.file.lock() {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
        self.inner.event(event);
    }
}
