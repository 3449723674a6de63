//! The state journal: the records an apply appends beside the snapshot instead of
//! rewriting the whole state after each operation. One record per changed resource
//! (its whole new entry, or its removal) or per outputs change, each on one line with
//! its own checksum, the state's lineage and the serial it brings the state to.
//! Loading a state is the snapshot plus the replay of its journal ([`replay`]);
//! compaction (a whole save) folds the journal into a new snapshot and empties it.
//!
//! Format version 1, one record per line:
//!
//! ```text
//! 1f0c3a9e {"journal":1,"lineage":"…","serial":43,"put":{"address":"gke_cluster.main","resource":{…}}}
//! ```
//!
//! The first field is the CRC-32 (IEEE) of the JSON text, as 8 lowercase hex digits.
//! `state/README.md` documents the records, checksums and compaction.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{OutputState, ResourceState, State};

/// The journal format this build writes and reads.
pub const JOURNAL_FORMAT: u32 = 1;

/// One journal record: a change to the state and the serial it brings the state to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The record format version ([`JOURNAL_FORMAT`]).
    pub journal: u32,
    /// The lineage of the state the record belongs to.
    pub lineage: String,
    /// The state's serial once this record is applied: one more than the record before
    /// it (or than the snapshot's, for the first record after a compaction).
    pub serial: u64,
    #[serde(flatten)]
    pub change: Change,
}

/// What a record changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// The resource's entry is now this (an intent with its `pending`, or a result).
    Put {
        address: String,
        resource: Box<ResourceState>,
    },
    /// The resource is no longer in the state.
    Remove { address: String },
    /// The stack's outputs are now these.
    Outputs {
        outputs: BTreeMap<String, OutputState>,
    },
}

impl Change {
    /// The resource address the change is about (`None` for outputs).
    pub fn address(&self) -> Option<&str> {
        match self {
            Change::Put { address, .. } | Change::Remove { address } => Some(address),
            Change::Outputs { .. } => None,
        }
    }
}

/// Why a journal cannot be replayed onto its snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    #[error("record {line} belongs to state lineage {found}, not {expected} (the snapshot's)")]
    Lineage {
        line: usize,
        found: String,
        expected: String,
    },
    #[error("record {line} has serial {found} where {expected} was due: records are missing")]
    Gap {
        line: usize,
        found: u64,
        expected: u64,
    },
    #[error(
        "record {line} is damaged ({reason}) and records after it are intact: the file was altered"
    )]
    Corrupt { line: usize, reason: String },
    #[error("record {line} has journal format {found}; this terrain reads up to {supported}: upgrade terrain")]
    Format {
        line: usize,
        found: u32,
        supported: u32,
    },
}

/// One record as a journal line: checksum, space, JSON, newline.
pub fn encode(record: &Record) -> Result<Vec<u8>, serde_json::Error> {
    let json = serde_json::to_vec(record)?;
    let mut line = format!("{:08x} ", crc32fast::hash(&json)).into_bytes();
    line.extend_from_slice(&json);
    line.push(b'\n');
    Ok(line)
}

/// What reading a journal found.
#[derive(Debug, Default)]
pub struct Read {
    /// The intact records, in order.
    pub records: Vec<Record>,
    /// The length of the journal up to the end of its last intact record: what an
    /// appender truncates a torn tail back to.
    pub good_len: u64,
    /// Why the bytes after `good_len` were not read (a write cut short by a crash).
    pub torn: Option<String>,
}

/// Reads a journal's records. A damaged last record (a write cut short, a bad
/// checksum) ends the journal: that is what a crash during an append leaves. A damaged
/// record with intact ones after it is refused: no crash leaves that.
pub fn read(bytes: &[u8]) -> Result<Read, JournalError> {
    let mut out = Read::default();
    let mut at = 0usize;
    let mut line_no = 0usize;
    while at < bytes.len() {
        line_no += 1;
        let (line, next, complete) = match bytes[at..].iter().position(|b| *b == b'\n') {
            Some(end) => (&bytes[at..at + end], at + end + 1, true),
            None => (&bytes[at..], bytes.len(), false),
        };
        let parsed = if complete {
            parse_line(line)
        } else {
            Err("the line was cut short".to_string())
        };
        match parsed {
            Ok(record) => {
                if record.journal > JOURNAL_FORMAT {
                    return Err(JournalError::Format {
                        line: line_no,
                        found: record.journal,
                        supported: JOURNAL_FORMAT,
                    });
                }
                out.records.push(record);
                out.good_len = next as u64;
                at = next;
            }
            Err(reason) => {
                // Only the last line may be damaged.
                let rest = &bytes[next..];
                if rest.split(|b| *b == b'\n').any(|l| parse_line(l).is_ok()) {
                    return Err(JournalError::Corrupt {
                        line: line_no,
                        reason,
                    });
                }
                out.torn = Some(format!("record {line_no}: {reason}"));
                break;
            }
        }
    }
    Ok(out)
}

fn parse_line(line: &[u8]) -> Result<Record, String> {
    if line.len() < 10 || line[8] != b' ' {
        return Err("no checksum".to_string());
    }
    let sum = std::str::from_utf8(&line[..8])
        .ok()
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or_else(|| "no checksum".to_string())?;
    let json = &line[9..];
    if crc32fast::hash(json) != sum {
        return Err("checksum mismatch".to_string());
    }
    serde_json::from_slice(json).map_err(|e| format!("undecodable: {e}"))
}

/// Applies `records` to `state` (the snapshot they follow): records at or below the
/// snapshot's serial were folded into it by a compaction whose clean-up was cut short,
/// and are skipped; the rest must continue its serial one by one, in its lineage.
/// Returns how many records were applied.
pub fn replay(state: &mut State, records: Vec<Record>) -> Result<usize, JournalError> {
    let mut applied = 0;
    for (i, record) in records.into_iter().enumerate() {
        let line = i + 1;
        if record.lineage != state.lineage {
            return Err(JournalError::Lineage {
                line,
                found: record.lineage,
                expected: state.lineage.clone(),
            });
        }
        if record.serial <= state.serial && applied == 0 {
            continue;
        }
        if record.serial != state.serial + 1 {
            return Err(JournalError::Gap {
                line,
                found: record.serial,
                expected: state.serial + 1,
            });
        }
        apply(state, record.change);
        state.serial = record.serial;
        applied += 1;
    }
    Ok(applied)
}

/// Applies one change to `state`.
pub fn apply(state: &mut State, change: Change) {
    match change {
        Change::Put { address, resource } => {
            state.resources.insert(address, *resource);
        }
        Change::Remove { address } => {
            state.resources.remove(&address);
        }
        Change::Outputs { outputs } => state.outputs = outputs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Pending, PendingOp};
    use serde_json::json;

    fn entry(id: Option<&str>) -> ResourceState {
        ResourceState {
            kind: "test_thing".into(),
            provider: "test".into(),
            id: id.map(str::to_string),
            spec: json!({"name": "a"}),
            outputs: json!({}),
            dependencies: Vec::new(),
            sensitive_paths: Vec::new(),
            pending: None,
            deposed: Vec::new(),
            tainted: false,
        }
    }

    fn put(state: &State, serial: u64, address: &str, r: ResourceState) -> Record {
        Record {
            journal: JOURNAL_FORMAT,
            lineage: state.lineage.clone(),
            serial,
            change: Change::Put {
                address: address.into(),
                resource: Box::new(r),
            },
        }
    }

    fn journal(records: &[Record]) -> Vec<u8> {
        records
            .iter()
            .flat_map(|r| encode(r).expect("encode"))
            .collect()
    }

    #[test]
    fn records_round_trip_and_replay_in_order() {
        let mut state = State::new();
        state.serial = 4;
        let mut intent = entry(None);
        intent.pending = Some(Pending {
            op: PendingOp::Create,
            started_at: "2026-11-25T00:00:00Z".into(),
            planned_id: Some("a".into()),
            spec: json!({"name": "a"}),
        });
        let records = vec![
            put(&state, 5, "test_thing.a", intent),
            put(&state, 6, "test_thing.a", entry(Some("a"))),
            put(&state, 7, "test_thing.b", entry(Some("b"))),
            Record {
                journal: JOURNAL_FORMAT,
                lineage: state.lineage.clone(),
                serial: 8,
                change: Change::Remove {
                    address: "test_thing.b".into(),
                },
            },
        ];
        let bytes = journal(&records);
        let read = read(&bytes).expect("read");
        assert_eq!(read.records, records);
        assert_eq!(read.good_len, bytes.len() as u64);
        assert_eq!(read.torn, None);
        assert_eq!(replay(&mut state, read.records), Ok(4));
        assert_eq!(state.serial, 8);
        assert_eq!(state.resources.len(), 1);
        assert_eq!(state.resources["test_thing.a"], entry(Some("a")));
    }

    #[test]
    fn a_torn_last_record_is_dropped_and_the_rest_kept() {
        let state = State::new();
        let records = vec![
            put(&state, 1, "test_thing.a", entry(Some("a"))),
            put(&state, 2, "test_thing.b", entry(Some("b"))),
        ];
        let bytes = journal(&records);
        let first_len = encode(&records[0]).expect("encode").len();
        // Every cut inside the second record leaves the first one.
        for cut in first_len..bytes.len() - 1 {
            let read = read(&bytes[..cut]).expect("a torn tail is not an error");
            assert_eq!(read.records, records[..1], "cut at {cut}");
            assert_eq!(read.good_len, first_len as u64);
            assert_eq!(read.torn.is_some(), cut > first_len, "cut at {cut}");
        }
        // A flipped byte in the last record: bad checksum, dropped.
        let mut flipped = bytes.clone();
        let last = flipped.len() - 5;
        flipped[last] ^= 0x01;
        let read = read(&flipped).expect("read");
        assert_eq!(read.records, records[..1]);
        assert!(read.torn.as_deref().is_some_and(|t| t.contains("checksum")));
    }

    #[test]
    fn a_damaged_record_before_intact_ones_is_refused() {
        let state = State::new();
        let records = vec![
            put(&state, 1, "test_thing.a", entry(Some("a"))),
            put(&state, 2, "test_thing.b", entry(Some("b"))),
        ];
        let mut bytes = journal(&records);
        bytes[12] ^= 0x01;
        assert!(matches!(
            read(&bytes),
            Err(JournalError::Corrupt { line: 1, .. })
        ));
    }

    #[test]
    fn another_lineage_is_refused() {
        let mut state = State::new();
        let other = State::new();
        let records = vec![put(&other, 1, "test_thing.a", entry(Some("a")))];
        let err = replay(&mut state, records).expect_err("foreign lineage");
        assert!(matches!(err, JournalError::Lineage { line: 1, .. }));
        assert!(state.resources.is_empty());
    }

    #[test]
    fn records_already_in_the_snapshot_are_skipped_and_gaps_refused() {
        // A compaction wrote serial 3 (records 1 and 2 folded in, bumped) and was killed
        // before emptying the journal.
        let mut state = State::new();
        state.serial = 3;
        let stale = vec![
            put(&state, 1, "test_thing.a", entry(None)),
            put(&state, 2, "test_thing.a", entry(Some("a"))),
        ];
        let mut all = stale.clone();
        all.push(put(&state, 4, "test_thing.b", entry(Some("b"))));
        let mut s = state.clone();
        assert_eq!(replay(&mut s, all), Ok(1));
        assert_eq!(s.serial, 4);
        assert!(!s.resources.contains_key("test_thing.a"));

        let mut s = state.clone();
        let gap = vec![put(&state, 5, "test_thing.b", entry(Some("b")))];
        assert_eq!(
            replay(&mut s, gap),
            Err(JournalError::Gap {
                line: 1,
                found: 5,
                expected: 4
            })
        );
    }

    #[test]
    fn a_newer_journal_format_asks_for_an_upgrade() {
        let state = State::new();
        let mut r = put(&state, 1, "test_thing.a", entry(Some("a")));
        r.journal = JOURNAL_FORMAT + 1;
        let bytes = journal(&[r]);
        assert!(matches!(read(&bytes), Err(JournalError::Format { .. })));
    }
}
