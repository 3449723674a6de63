//! The local file backend: state in one JSON file (the snapshot), replaced atomically on
//! every save with the previous version kept as `{file}.backup`; the journal of changes
//! since, appended to `{file}.journal` and removed by each save (a compaction); locked
//! with an OS file lock (`flock`) on `{file}.lock` so a lock dies with the process that
//! held it.
//!
//! The crash tests stop a run between two of these writes with the
//! `TERRAIN_FAULT_ABORT_AT` hook ([`abort_point`]).

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions, Permissions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use async_trait::async_trait;

use super::journal::{self, JournalError, Record};
use super::{Backend, LockInfo, State, StateError};

/// State files hold secrets (sensitive spec values, provider outputs).
const FILE_MODE: u32 = 0o600;

/// How often `lock` reopens the lock file when the one it locked was unlinked meanwhile
/// (an unlock or force-unlock racing with it). Each round means another process just
/// released or broke the lock, so a handful is plenty.
const LOCK_ATTEMPTS: usize = 8;

/// How many temp names a save tries before giving up. Names repeat across runs (pid 1
/// in every container, the counter restarts), so leftovers of a crashed save can collide.
const TEMP_NAME_ATTEMPTS: usize = 64;

/// Makes temp names unique within this process, across backends and concurrent saves.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// State in a file on the local filesystem.
#[derive(Debug)]
pub struct LocalBackend {
    path: PathBuf,
    /// The lock this backend holds: its record and the open lock file carrying the flock.
    /// Dropping the file releases the flock.
    held: Mutex<Option<(LockInfo, File)>>,
    /// The journal as this backend opened it for appending (shared with the blocking
    /// tasks that write it), or `None` until the first append.
    appender: Arc<Mutex<Option<Appender>>>,
}

/// The journal open for appending, and its length.
#[derive(Debug)]
struct Appender {
    file: File,
    len: u64,
}

impl LocalBackend {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            held: Mutex::new(None),
            appender: Arc::new(Mutex::new(None)),
        }
    }

    fn journal_path(&self) -> PathBuf {
        sibling(&self.path, ".journal")
    }

    fn lock_path(&self) -> PathBuf {
        sibling(&self.path, ".lock")
    }

    fn held(&self) -> MutexGuard<'_, Option<(LockInfo, File)>> {
        // The guarded value is a plain record plus a file handle; a panic elsewhere while
        // holding the mutex cannot leave it half-updated, so poisoning is not a concern.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_err(&self, source: io::Error) -> StateError {
        write_error(&self.path, source)
    }

    fn lock_err(&self, source: io::Error) -> StateError {
        StateError::Lock {
            location: self.location(),
            source,
        }
    }

    fn lock_held(&self, holder: LockInfo) -> StateError {
        StateError::LockHeld {
            location: self.location(),
            holder: Box::new(holder),
        }
    }

    /// Writes `bytes` to a new temp file next to the state file and syncs it; returns its
    /// path. Created 0600 so the secrets in it are never readable by others, not even
    /// briefly (the umask can only remove bits).
    /// The blocking part of a save: temp file, fsync, backup link, rename, directory fsync.
    /// `compacting`: a save that folds the journal in (the crash tests stop it before
    /// its rename), rather than the first snapshot a journal starts from.
    fn write_file(&self, bytes: &[u8], compacting: bool) -> io::Result<()> {
        let dir = parent_dir(&self.path);
        fs::create_dir_all(&dir)?;
        let tmp = self.write_temp(&dir, bytes)?;
        if compacting {
            abort_point("compact.before_rename");
        }
        let replaced = self
            .keep_backup(&dir)
            .and_then(|()| fs::rename(&tmp, &self.path));
        if let Err(e) = replaced {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        // Both renames are only durable once the directory itself is synced.
        File::open(&dir).and_then(|d| d.sync_all())
    }

    fn write_temp(&self, dir: &Path, bytes: &[u8]) -> io::Result<PathBuf> {
        let mut attempts = 0;
        loop {
            let tmp = temp_name(&self.path, dir, "tmp");
            let opened = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(FILE_MODE)
                .open(&tmp);
            let mut file = match opened {
                Ok(file) => file,
                Err(e)
                    if e.kind() == io::ErrorKind::AlreadyExists
                        && attempts < TEMP_NAME_ATTEMPTS =>
                {
                    attempts += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let written = file.write_all(bytes).and_then(|()| file.sync_all());
            return match written {
                Ok(()) => Ok(tmp),
                Err(e) => {
                    let _ = fs::remove_file(&tmp);
                    Err(e)
                }
            };
        }
    }

    /// Makes `{file}.backup` the current state file, leaving the current file in place.
    /// A hard link under a temp name renamed over the backup costs no copy, and the
    /// current file exists throughout. Does nothing when there is no current file yet.
    fn keep_backup(&self, dir: &Path) -> io::Result<()> {
        let backup = sibling(&self.path, ".backup");
        let mut attempts = 0;
        let link = loop {
            let link = temp_name(&self.path, dir, "backup");
            match fs::hard_link(&self.path, &link) {
                Ok(()) => break link,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e)
                    if e.kind() == io::ErrorKind::AlreadyExists
                        && attempts < TEMP_NAME_ATTEMPTS =>
                {
                    attempts += 1;
                }
                // Some filesystems have no hard links, and Linux refuses to link a file
                // owned by someone else (protected_hardlinks): copying is the fallback.
                Err(_) => return self.copy_backup(dir, &backup),
            }
        };
        let result = restrict_mode(&link).and_then(|()| fs::rename(&link, &backup));
        if result.is_err() {
            let _ = fs::remove_file(&link);
        }
        result
    }

    /// The slow path of [`Self::keep_backup`]: a full copy written like a save.
    fn copy_backup(&self, dir: &Path, backup: &Path) -> io::Result<()> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let tmp = self.write_temp(dir, &bytes)?;
        let renamed = fs::rename(&tmp, backup);
        if renamed.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        renamed
    }

    /// Opens the lock file for reading the record of whoever holds its flock.
    fn open_lock_file(&self, create: bool) -> io::Result<File> {
        let mut options = OpenOptions::new();
        options.read(true);
        if create {
            // Never truncate here: the file may carry the current holder's record.
            options.write(true).create(true).mode(FILE_MODE);
        }
        options.open(self.lock_path())
    }

    /// Whether the lock file path still names the file behind `file`. False once the lock
    /// was released or broken: the path is unlinked (and possibly recreated), while the
    /// flock stays on the old inode where it no longer excludes anyone.
    fn is_current(&self, file: &File) -> io::Result<bool> {
        let ours = file.metadata()?;
        match fs::metadata(self.lock_path()) {
            Ok(now) => Ok(now.dev() == ours.dev() && now.ino() == ours.ino()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The record of the live lock on the lock file, if any: a lock file whose flock
    /// nobody holds is debris from a killed run, not a lock.
    fn live_lock(&self) -> io::Result<Option<(LockInfo, File)>> {
        for _ in 0..LOCK_ATTEMPTS {
            let file = match self.open_lock_file(false) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            };
            // Dropping `file` releases the probe's flock at once.
            if try_lock_briefly(&file)? {
                return Ok(None);
            }
            // Locked, but maybe an old inode a force-unlock already detached: look again.
            if !self.is_current(&file)? {
                continue;
            }
            let info = read_lock_info(&file);
            return Ok(Some((info, file)));
        }
        Err(io::Error::other(
            "the lock file kept being replaced while reading it",
        ))
    }

    /// Releases the lock this backend holds. Unlinks first: a locker that opens the path
    /// after this creates a fresh file; one that opened it before sees the unlink and
    /// retries. Dropping the handle then lifts the flock.
    fn release(&self, held: &mut Option<(LockInfo, File)>) -> io::Result<()> {
        let removed = fs::remove_file(self.lock_path());
        *held = None;
        match removed {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Drops the held lock record and handle if a force-unlock from elsewhere took the lock
    /// file away from under it; returns whether this backend still holds the lock.
    fn still_holding(&self, held: &mut Option<(LockInfo, File)>) -> io::Result<bool> {
        let Some((_, file)) = held.as_ref() else {
            return Ok(false);
        };
        if self.is_current(file)? {
            return Ok(true);
        }
        *held = None;
        Ok(false)
    }
}

#[async_trait]
impl Backend for LocalBackend {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    async fn put_beside(&self, name: &str, bytes: Vec<u8>) -> Result<String, StateError> {
        let dir = PathBuf::from(format!("{}.plans", self.path.display()));
        let file = dir.join(name);
        let write = || -> io::Result<()> {
            fs::create_dir_all(&dir)?;
            fs::set_permissions(&dir, Permissions::from_mode(0o700))?;
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(FILE_MODE)
                .open(&file)?;
            f.write_all(&bytes)?;
            f.sync_all()
        };
        write().map_err(|e| self.write_err(e))?;
        Ok(file.display().to_string())
    }

    async fn get_beside(&self, name: &str) -> Result<Option<Vec<u8>>, StateError> {
        let file = PathBuf::from(format!("{}.plans", self.path.display())).join(name);
        match fs::read(&file) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StateError::Read {
                location: file.display().to_string(),
                source,
            }),
        }
    }

    async fn load(&self) -> Result<Option<State>, StateError> {
        read_state(&self.path)
    }

    async fn save(&self, state: &State) -> Result<(), StateError> {
        let mut bytes = serde_json::to_vec_pretty(state)
            .map_err(|e| self.write_err(io::Error::new(io::ErrorKind::InvalidData, e)))?;
        bytes.push(b'\n');
        // The writes and fsyncs block for milliseconds; off the async threads, other
        // operations of an apply keep going.
        let writer = LocalBackend::new(self.path.clone());
        let journal = self.journal_path();
        let appender = Arc::clone(&self.appender);
        let compact = move || {
            writer.write_file(&bytes, true)?;
            // The snapshot now holds what the journal held. A kill right here leaves
            // records the snapshot already has: loading skips them by their serial.
            abort_point("compact.after_rename");
            let mut open = lock_appender(&appender);
            *open = None;
            remove_journal(&journal)
        };
        match tokio::task::spawn_blocking(compact).await {
            Ok(result) => result.map_err(|e| self.write_err(e)),
            Err(e) => Err(self.write_err(io::Error::other(e))),
        }
    }

    fn journals(&self) -> bool {
        true
    }

    async fn append(&self, records: &[Record]) -> Result<u64, StateError> {
        let Some(first) = records.first() else {
            return Ok(lock_appender(&self.appender).as_ref().map_or(0, |a| a.len));
        };
        let mut bytes = Vec::new();
        for record in records {
            let line = journal::encode(record)
                .map_err(|e| self.write_err(io::Error::new(io::ErrorKind::InvalidData, e)))?;
            bytes.extend_from_slice(&line);
        }
        // The state the journal starts from, written first when there is none yet.
        let start = State {
            lineage: first.lineage.clone(),
            serial: first.serial.saturating_sub(1),
            ..State::new()
        };
        let path = self.path.clone();
        let appender = Arc::clone(&self.appender);
        let write = move || -> Result<u64, StateError> {
            let mut open = lock_appender(&appender);
            if open.is_none() {
                *open = Some(open_appender(&path, &start)?);
            }
            let Some(a) = open.as_mut() else {
                return Err(write_error(&path, io::Error::other("journal not open")));
            };
            if abort_point("journal.append.torn") {
                // Half a record reaches the disk, then the process dies.
                let _ = a.file.write_all(&bytes[..bytes.len() / 2]);
                let _ = a.file.sync_data();
                std::process::abort();
            }
            let written = a.file.write_all(&bytes).and_then(|()| {
                abort_point("journal.append.before_sync");
                a.file.sync_data()
            });
            match written {
                Ok(()) => {
                    a.len += bytes.len() as u64;
                    Ok(a.len)
                }
                Err(e) => {
                    // Part of a record may be on disk: the next append reopens the
                    // journal and cuts it back to its last whole record.
                    *open = None;
                    Err(write_error(&path, e))
                }
            }
        };
        match tokio::task::spawn_blocking(write).await {
            Ok(result) => result,
            Err(e) => Err(self.write_err(io::Error::other(e))),
        }
    }

    async fn journal(&self) -> Result<Vec<Record>, StateError> {
        Ok(read_journal(&self.journal_path())?.records)
    }

    async fn lock(&self, info: &LockInfo) -> Result<(), StateError> {
        let mut held = self.held();
        if self
            .still_holding(&mut held)
            .map_err(|e| self.lock_err(e))?
        {
            if let Some((own, _)) = held.as_ref() {
                return Err(self.lock_held(own.clone()));
            }
        }
        fs::create_dir_all(parent_dir(&self.path)).map_err(|e| self.lock_err(e))?;
        for _ in 0..LOCK_ATTEMPTS {
            let mut file = self.open_lock_file(true).map_err(|e| self.lock_err(e))?;
            let locked = try_lock_briefly(&file).map_err(|e| self.lock_err(e))?;
            // Whether we won or lost, the verdict only counts for the file the path names
            // now: an unlock or force-unlock may have unlinked the one we opened.
            if !self.is_current(&file).map_err(|e| self.lock_err(e))? {
                continue;
            }
            if !locked {
                return Err(self.lock_held(read_lock_info(&file)));
            }
            let record = serde_json::to_vec_pretty(info)
                .map_err(|e| self.lock_err(io::Error::new(io::ErrorKind::InvalidData, e)))?;
            let written = file
                .set_len(0)
                .and_then(|()| file.write_all(&record))
                // A lock file left by an older tool may be world-readable.
                .and_then(|()| file.set_permissions(Permissions::from_mode(FILE_MODE)));
            if let Err(e) = written {
                // Leave no lock file without a record behind us; dropping `file` unlocks.
                let _ = fs::remove_file(self.lock_path());
                return Err(self.lock_err(e));
            }
            *held = Some((info.clone(), file));
            return Ok(());
        }
        // Other runs kept taking and releasing the lock all the while: it is busy, which
        // is what LockHeld says (and what `--lock-timeout` waits out), not a failure.
        match self.open_lock_file(false) {
            Ok(file) => Err(self.lock_held(read_lock_info(&file))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(self.lock_held(unknown_holder())),
            Err(e) => Err(self.lock_err(e)),
        }
    }

    async fn unlock(&self, id: &str) -> Result<(), StateError> {
        {
            let mut held = self.held();
            if self
                .still_holding(&mut held)
                .map_err(|e| self.lock_err(e))?
            {
                if let Some((own, _)) = held.as_ref() {
                    if own.id != id {
                        return Err(StateError::LockMismatch {
                            location: self.location(),
                            given: id.to_string(),
                            found: own.id.clone(),
                        });
                    }
                }
                return self.release(&mut held).map_err(|e| self.lock_err(e));
            }
        }
        // Not ours (or broken by a force-unlock meanwhile): whoever holds it now is
        // someone else, and only the id they were given may release it, as on backends
        // with no process-local state.
        self.force_unlock(id).await
    }

    async fn lock_info(&self) -> Result<Option<LockInfo>, StateError> {
        {
            // Our own lock needs no probe (which would only wait out its own flock).
            let mut held = self.held();
            if self
                .still_holding(&mut held)
                .map_err(|e| self.lock_err(e))?
            {
                return Ok(held.as_ref().map(|(own, _)| own.clone()));
            }
        }
        let live = self.live_lock().map_err(|e| self.lock_err(e))?;
        Ok(live.map(|(info, _)| info))
    }

    async fn force_unlock(&self, id: &str) -> Result<(), StateError> {
        {
            let mut held = self.held();
            let ours = self
                .still_holding(&mut held)
                .map_err(|e| self.lock_err(e))?;
            if ours && held.as_ref().is_some_and(|(own, _)| own.id == id) {
                return self.release(&mut held).map_err(|e| self.lock_err(e));
            }
        }
        let Some((info, file)) = self.live_lock().map_err(|e| self.lock_err(e))? else {
            return Err(StateError::NotLocked {
                location: self.location(),
            });
        };
        if info.id != id {
            return Err(StateError::LockMismatch {
                location: self.location(),
                given: id.to_string(),
                found: info.id,
            });
        }
        // The holder keeps its flock on the unlinked file; the next locker creates a new
        // one. Re-check right before unlinking so a lock taken since is left alone.
        if !self.is_current(&file).map_err(|e| self.lock_err(e))? {
            return Err(StateError::NotLocked {
                location: self.location(),
            });
        }
        match fs::remove_file(self.lock_path()) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(self.lock_err(e)),
            _ => Ok(()),
        }
    }
}

/// Reads the state stored at `path`: the snapshot, with its journal replayed over it.
/// `None` when there is no state yet.
///
/// The journal is read before the snapshot, so that a reader without the lock never
/// sees a state older than it should while a run compacts: records read before a
/// compaction are either replayed over the old snapshot or, if the new one was read,
/// skipped by their serial; a journal removed by a compaction was preceded by the new
/// snapshot's rename.
pub fn read_state(path: &Path) -> Result<Option<State>, StateError> {
    let journal_path = sibling(path, ".journal");
    let read = read_journal(&journal_path)?;
    let snapshot = match fs::read(path) {
        Ok(bytes) => Some(decode_state(&bytes, path)?),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(source) => return Err(read_error(path, source)),
    };
    if read.records.is_empty() {
        return Ok(snapshot);
    }
    let Some(mut state) = snapshot else {
        return Err(StateError::JournalWithoutSnapshot {
            location: journal_path.display().to_string(),
        });
    };
    journal::replay(&mut state, read.records).map_err(|e| journal_error(&journal_path, e))?;
    Ok(Some(state))
}

/// The journal at `journal_path` as read (no records when there is none).
fn read_journal(journal_path: &Path) -> Result<journal::Read, StateError> {
    match fs::read(journal_path) {
        Ok(bytes) => journal::read(&bytes).map_err(|e| journal_error(journal_path, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(journal::Read::default()),
        Err(source) => Err(read_error(journal_path, source)),
    }
}

/// Decodes a snapshot read from `path`.
fn decode_state(bytes: &[u8], path: &Path) -> Result<State, StateError> {
    super::decode(bytes, &path.display().to_string())
}

/// Opens the journal beside `path` for appending: writes `start` as the snapshot first
/// if there is none (a journal is always replayed over one), and cuts a torn last
/// record (a crash during an append) back to the last whole one, so new records never
/// follow a damaged one.
fn open_appender(path: &Path, start: &State) -> Result<Appender, StateError> {
    let writer = LocalBackend::new(path.to_path_buf());
    if !path.exists() {
        let mut bytes = serde_json::to_vec_pretty(start)
            .map_err(|e| write_error(path, io::Error::new(io::ErrorKind::InvalidData, e)))?;
        bytes.push(b'\n');
        writer
            .write_file(&bytes, false)
            .map_err(|e| write_error(path, e))?;
    }
    let journal_path = sibling(path, ".journal");
    let created = !journal_path.exists();
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(FILE_MODE)
        .open(&journal_path)
        .map_err(|e| write_error(&journal_path, e))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| write_error(&journal_path, e))?;
    let read = journal::read(&bytes).map_err(|e| journal_error(&journal_path, e))?;
    // Records of another state must not be continued with ours.
    if let Some(i) = read.records.iter().position(|r| r.lineage != start.lineage) {
        let foreign = JournalError::Lineage {
            line: i + 1,
            found: read.records[i].lineage.clone(),
            expected: start.lineage.clone(),
        };
        return Err(journal_error(&journal_path, foreign));
    }
    if read.good_len < bytes.len() as u64 {
        file.set_len(read.good_len)
            .and_then(|()| file.sync_all())
            .map_err(|e| write_error(&journal_path, e))?;
    }
    if created {
        // The new file's name is only durable once its directory is synced.
        File::open(parent_dir(&journal_path))
            .and_then(|d| d.sync_all())
            .map_err(|e| write_error(&journal_path, e))?;
    }
    restrict_mode(&journal_path).map_err(|e| write_error(&journal_path, e))?;
    Ok(Appender {
        file,
        len: read.good_len,
    })
}

/// Removes the journal at `path`, if there is one: between runs the snapshot alone is
/// the state. The removal is not made durable on its own: a journal that comes back
/// after a power cut holds only records the new snapshot has, which loading skips by
/// their serial.
fn remove_journal(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn lock_appender(appender: &Mutex<Option<Appender>>) -> MutexGuard<'_, Option<Appender>> {
    // A file handle and a length: a panic elsewhere cannot leave them inconsistent in a
    // way the next append does not repair (it rescans the journal when reopened).
    appender.lock().unwrap_or_else(PoisonError::into_inner)
}

fn read_error(path: &Path, source: io::Error) -> StateError {
    StateError::Read {
        location: path.display().to_string(),
        source,
    }
}

fn write_error(path: &Path, source: io::Error) -> StateError {
    StateError::Write {
        location: path.display().to_string(),
        source,
    }
}

fn journal_error(path: &Path, source: JournalError) -> StateError {
    StateError::Journal {
        location: path.display().to_string(),
        source,
    }
}

/// Test hook for the crash tests: with `TERRAIN_FAULT_ABORT_AT=POINT` (or `POINT:N`),
/// the process ends on the spot, with no clean-up (as a SIGKILL would), the first (or
/// N-th) time it reaches POINT: `journal.append.before_sync`, `compact.before_rename`,
/// `compact.after_rename`. For `journal.append.torn` it answers true instead, and the
/// caller writes half a record before ending the process. No timing could stop a run
/// between two of these writes reliably.
pub(crate) fn abort_point(point: &str) -> bool {
    static WANTED: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static REACHED: AtomicU64 = AtomicU64::new(0);
    let wanted = WANTED.get_or_init(|| {
        let value = std::env::var("TERRAIN_FAULT_ABORT_AT").ok()?;
        let (name, nth) = match value.split_once(':') {
            Some((name, n)) => (name.to_string(), n.parse().ok()?),
            None => (value, 1),
        };
        Some((name, nth))
    });
    let Some((name, nth)) = wanted else {
        return false;
    };
    if name != point {
        return false;
    }
    if REACHED.fetch_add(1, Ordering::SeqCst) + 1 != *nth {
        return false;
    }
    if point == "journal.append.torn" {
        return true;
    }
    std::process::abort();
}

/// How often a contended flock or an unreadable lock record is looked at again, and how
/// long to wait in between. Both states can be momentary: a `lock_info` probe holds the
/// flock for microseconds, and a new holder writes its record just after taking it.
const GLANCES: usize = 3;
const GLANCE_PAUSE: std::time::Duration = std::time::Duration::from_millis(2);

/// Takes the flock on `file` without waiting for a real holder; false if someone has it.
/// A few quick retries keep a passing `lock_info` probe from looking like a lock holder
/// (and a dead holder's leftover record from being reported as the live one).
fn try_lock_briefly(file: &File) -> io::Result<bool> {
    for glance in 1..=GLANCES {
        match file.try_lock() {
            Ok(()) => return Ok(true),
            Err(TryLockError::WouldBlock) if glance < GLANCES => std::thread::sleep(GLANCE_PAUSE),
            Err(TryLockError::WouldBlock) => return Ok(false),
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
    Ok(false)
}

/// The record in a locked lock file. The holder writes it just after taking the flock,
/// so it can be missing or half-written for a moment; the refusal still needs a holder.
fn read_lock_info(mut file: &File) -> LockInfo {
    for glance in 1..=GLANCES {
        let mut bytes = Vec::new();
        let read = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.read_to_end(&mut bytes));
        if let Some(info) = read.ok().and_then(|_| serde_json::from_slice(&bytes).ok()) {
            return info;
        }
        if glance < GLANCES {
            std::thread::sleep(GLANCE_PAUSE);
        }
    }
    unknown_holder()
}

/// The holder of a lock whose record cannot be read.
fn unknown_holder() -> LockInfo {
    LockInfo {
        id: "unknown".to_string(),
        who: "unknown".to_string(),
        pid: 0,
        operation: "unknown".to_string(),
        created: "unknown".to_string(),
        lease: None,
    }
}

/// Tightens a file (a backup link shares the old state file's inode) to 0600 if needed.
fn restrict_mode(path: &Path) -> io::Result<()> {
    if fs::metadata(path)?.mode() & 0o777 != FILE_MODE {
        fs::set_permissions(path, Permissions::from_mode(FILE_MODE))?;
    }
    Ok(())
}

/// The directory holding `path`; `.` for a bare file name, so it can be opened and synced.
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `{file}{suffix}` next to `path`.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// A hidden, process-unique name in `dir` for a file on its way to replacing another.
fn temp_name(path: &Path, dir: &Path, what: &str) -> PathBuf {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut name = OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(format!(".{what}.{}.{n}", std::process::id()));
    dir.join(name)
}
