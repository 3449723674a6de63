//! Helpers shared by the CLI tests: a [`Sandbox`] (a temporary working directory holding
//! a copy of a fixture stack) that runs the real `terrain` binary with a clean,
//! deterministic environment and captures its output, and [`expect_file`], which
//! compares output with `tests/expected/<name>` after normalising what varies between
//! runs (the temporary directory, timestamps, UUIDs, random hex ids, durations).
//!
//! `UPDATE_EXPECTED=1 cargo test …` rewrites the expected files instead of comparing.
//! The expected files are the specification: review every change to them by eye.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The user name the binary sees, so lock holders read `terrain-tester@<host>`.
pub const TEST_USER: &str = "terrain-tester";

/// The directory of this package (`tests/` lives under it).
pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tests/fixtures/<name>`.
pub fn fixture_path(name: &str) -> PathBuf {
    manifest_dir().join("tests").join("fixtures").join(name)
}

/// The machine's host name as `gethostname` reports it, when it can be read.
pub fn hostname() -> Option<String> {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// What one run of the binary did.
#[derive(Debug, Clone)]
pub struct Run {
    /// The exit code; `None` when a signal ended the process.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The command line, for failure messages.
    pub args: Vec<String>,
}

impl Run {
    /// Where `what` first appears in stdout (to compare the order of progress lines);
    /// fails the test, showing stdout, when it does not.
    #[track_caller]
    pub fn at(&self, what: &str) -> usize {
        self.stdout
            .find(what)
            .unwrap_or_else(|| panic!("{what} in:\n{}", self.stdout))
    }

    fn from_output(args: Vec<String>, out: std::process::Output) -> Self {
        Self {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            args,
        }
    }

    /// Panics (showing both streams) unless the run exited with `code`.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "`terrain {}` exited with {:?}, expected {code}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.args.join(" "),
            self.code,
            self.stdout,
            self.stderr
        );
        self
    }

    /// Exit code 0.
    #[track_caller]
    pub fn success(&self) -> &Self {
        self.expect_code(0)
    }

    /// Exit code 1 (the code of every error).
    #[track_caller]
    pub fn failure(&self) -> &Self {
        self.expect_code(1)
    }

    /// Both streams, for checks that something appears nowhere.
    pub fn all_output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// A temporary working directory for one test; removed when dropped.
pub struct Sandbox {
    dir: tempfile::TempDir,
    /// `TERRAIN_LOG_PATH` for every run, when set.
    log: Option<PathBuf>,
    /// Whether its sandbox's projects start as new ones do, every API but Cloud Storage
    /// off (see [`Sandbox::fresh_projects`]); otherwise they have every API terrain
    /// calls on, as a project set up by hand.
    fresh: bool,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Sandbox {
    /// An empty working directory.
    pub fn new() -> Self {
        Self {
            dir: tempfile::Builder::new()
                .prefix("terrain-test-")
                .tempdir()
                .expect("create a temporary working directory"),
            log: None,
            fresh: false,
        }
    }

    /// Makes the sandbox's projects start as new Google Cloud projects do: every API
    /// but Cloud Storage and Service Usage off until the stack turns it on.
    pub fn fresh_projects(mut self) -> Self {
        self.fresh = true;
        self
    }

    /// A working directory holding a copy of `tests/fixtures/<name>`: every file of a
    /// fixture directory, or the one fixture file (under its own name).
    pub fn with_fixture(name: &str) -> Self {
        let sb = Self::new();
        sb.add_fixture(name);
        sb
    }

    /// Copies `tests/fixtures/<name>` into the working directory (see [`Self::with_fixture`]).
    pub fn add_fixture(&self, name: &str) {
        self.add_fixture_at(name, "");
    }

    /// Copies `tests/fixtures/<name>` into `rel` under the working directory.
    pub fn add_fixture_at(&self, name: &str, rel: &str) {
        let src = fixture_path(name);
        let dst = self.join(rel);
        if src.is_dir() {
            copy_dir(&src, &dst);
        } else {
            fs::create_dir_all(&dst).unwrap_or_else(|e| panic!("create {}: {e}", dst.display()));
            let file_name = src.file_name().expect("a fixture file has a name");
            fs::copy(&src, dst.join(file_name))
                .unwrap_or_else(|e| panic!("copy fixture {}: {e}", src.display()));
        }
    }

    /// Makes every later run append its engine events to `path` (`TERRAIN_LOG_PATH`).
    pub fn set_log(&mut self, path: PathBuf) {
        self.log = Some(path);
    }

    /// The working directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `rel` inside the working directory.
    pub fn join(&self, rel: &str) -> PathBuf {
        self.path().join(rel)
    }

    /// A command running the binary in the working directory: stdin closed (no
    /// terminal), `TERRAIN_*` variables removed, `NO_COLOR=1`, a fixed user name.
    pub fn command(&self, args: &[&str], envs: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_terrain"));
        cmd.args(args).current_dir(self.path()).stdin(Stdio::null());
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if k.starts_with("TERRAIN_")
                || k == "CLICOLOR_FORCE"
                || k == "FORCE_COLOR"
                || k == "COLUMNS"
            {
                cmd.env_remove(&key);
            }
        }
        cmd.env("NO_COLOR", "1")
            .env("USER", TEST_USER)
            .env("LOGNAME", TEST_USER);
        if let Some(log) = &self.log {
            cmd.env("TERRAIN_LOG_PATH", log);
        }
        if !self.fresh {
            cmd.env("TERRAIN_SANDBOX_ENABLED_APIS", "all");
        }
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs `terrain ARGS` to completion.
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_env(args, &[])
    }

    /// Runs `terrain ARGS` to completion with extra environment variables.
    pub fn run_env(&self, args: &[&str], envs: &[(&str, &str)]) -> Run {
        let out = self
            .command(args, envs)
            .output()
            .unwrap_or_else(|e| panic!("run terrain {}: {e}", args.join(" ")));
        Run::from_output(args.iter().map(ToString::to_string).collect(), out)
    }

    /// Starts `terrain ARGS` without waiting, output captured.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args, &[])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start terrain {}: {e}", args.join(" ")))
    }

    /// Waits for a child started with [`Self::spawn`] and collects its output.
    pub fn finish(&self, child: Child, args: &[&str]) -> Run {
        let out = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("wait for terrain {}: {e}", args.join(" ")));
        Run::from_output(args.iter().map(ToString::to_string).collect(), out)
    }

    /// Writes `rel` (creating parent directories).
    pub fn write(&self, rel: &str, content: &str) {
        let p = self.join(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("create {}: {e}", parent.display()));
        }
        fs::write(&p, content).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    }

    /// The content of `rel`.
    #[track_caller]
    pub fn read(&self, rel: &str) -> String {
        let p = self.join(rel);
        fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
    }

    /// Whether `rel` exists.
    pub fn exists(&self, rel: &str) -> bool {
        self.join(rel).exists()
    }

    /// Replaces the one occurrence of `from` in `rel` by `to` (an edit to a stack file).
    #[track_caller]
    pub fn edit(&self, rel: &str, from: &str, to: &str) {
        let text = self.read(rel);
        assert_eq!(
            text.matches(from).count(),
            1,
            "{rel} must contain `{from}` exactly once"
        );
        self.write(rel, &text.replacen(from, to, 1));
    }

    /// Changes the value of `key` in `rel` from `old` to `new`: [`set_value`] on the file.
    #[track_caller]
    pub fn set_value(&self, rel: &str, key: &str, old: &str, new: &str) {
        let text = self.read(rel);
        self.write(rel, &set_value(&text, key, old, new));
    }

    /// Every file under the working directory (not directories), relative, sorted.
    pub fn files(&self) -> Vec<String> {
        let mut out = Vec::new();
        list_files(self.path(), self.path(), &mut out);
        out.sort();
        out
    }

    /// The permission bits of `rel`.
    #[track_caller]
    pub fn mode(&self, rel: &str) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        let p = self.join(rel);
        fs::metadata(&p)
            .unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
            .permissions()
            .mode()
            & 0o7777
    }

    /// The JSON in `rel` (a state file, a lock file, a plan).
    #[track_caller]
    pub fn json(&self, rel: &str) -> serde_json::Value {
        let text = self.read(rel);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{rel} is not JSON ({e}):\n{text}"))
    }

    /// The addresses in the state file `rel`, sorted.
    #[track_caller]
    pub fn state_addresses(&self, rel: &str) -> Vec<String> {
        let state = self.json(rel);
        let resources = state
            .get("resources")
            .and_then(serde_json::Value::as_object)
            .expect("a state has a `resources` map");
        resources.keys().cloned().collect()
    }

    /// `text` with this sandbox's directory replaced by `$DIR`, then [`normalise`]d.
    pub fn normalise(&self, text: &str) -> String {
        let mut text = text.to_string();
        let mut dirs = vec![self.path().to_path_buf()];
        if let Ok(canonical) = self.path().canonicalize() {
            dirs.push(canonical);
        }
        // Longest first, so a canonical path containing the raw one is replaced whole.
        dirs.sort_by_key(|d| std::cmp::Reverse(d.as_os_str().len()));
        for d in dirs {
            text = text.replace(&*d.to_string_lossy(), "$DIR");
        }
        normalise(&text)
    }

    /// [`expect_file`] after replacing this sandbox's directory by `$DIR`.
    #[track_caller]
    pub fn expect(&self, name: &str, actual: &str) {
        expect_normalised(name, &self.normalise(actual));
    }

    /// Polls `check` every few milliseconds until it returns `Some`, or panics after
    /// `timeout` with `what`.
    #[track_caller]
    pub fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut() -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = check() {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The sandbox configuration (`TERRAIN_SANDBOX_CAPACITY`) under which the two subnet ids
/// and the two roles the hand-written EKS fixtures name exist in the sandbox's account,
/// the subnets one per zone, the roles trusting EKS and EC2: EKS refuses subnets and
/// roles the account does not have, as in the cloud.
pub const HAND_NAMED_ACCOUNT: &str = r#"{"aws": {"subnets": {"subnet-0a1b2c3d4e5f60001": "us-east-1a", "subnet-0a1b2c3d4e5f60002": "us-east-1b"}, "roles": {"eks-cluster": "eks.amazonaws.com", "eks-nodes": "ec2.amazonaws.com"}}}"#;

/// The four scenario stacks under `stacks/`.
#[allow(dead_code)]
pub const SCENARIO_STACKS: [&str; 4] = [
    "gke-batch-ml",
    "gke-gpu-pipelines",
    "eks-sagemaker",
    "gke-accelerators",
];

/// A work directory holding `stacks/<name>` for each of `names` (example stacks,
/// `modules`, `policies`), copied from the repository.
#[allow(dead_code)]
pub fn with_stacks(names: &[&str]) -> Sandbox {
    let root = manifest_dir();
    let work = Sandbox::new();
    for s in names {
        copy_dir(
            &root.join("stacks").join(s),
            &work.join(&format!("stacks/{s}")),
        );
    }
    work
}

/// `text` (a stack's TOML) with the value of `key` changed from `old` to `new`, however
/// the file is laid out: `terrain fmt` aligns the `=` of neighbouring keys, so a test
/// that edits `key = old` by its exact text breaks whenever the alignment changes.
///
/// `key` must start a line (after any indentation) or an inline-table entry (after `{`
/// or `,`), be followed by `=` with any spaces or tabs around it, and then by `old`, which
/// must be the whole value: what follows it ends the line, the entry or the table. Only
/// `old` is replaced, so the key's own spacing, and with it the alignment, stays.
///
/// Panics, naming `key` and `old` and showing the lines where `key` is set, unless
/// exactly one `key = old` is found: an edit that no longer applies fails its test
/// instead of silently testing an unedited stack.
#[track_caller]
pub fn set_value(text: &str, key: &str, old: &str, new: &str) -> String {
    assert!(
        !key.is_empty() && !old.is_empty(),
        "set_value needs a key and a value"
    );
    let bytes = text.as_bytes();
    let is_blank = |b: u8| b == b' ' || b == b'\t';
    // The byte offset of `old` after each `key = ` that holds it.
    let mut found = Vec::new();
    // The lines (1-based) where `key` is set at all, for the failure message.
    let mut keyed = Vec::new();
    for (at, _) in text.match_indices(key) {
        let mut before = at;
        while before > 0 && is_blank(bytes[before - 1]) {
            before -= 1;
        }
        if !(before == 0 || matches!(bytes[before - 1], b'\n' | b'{' | b',')) {
            continue;
        }
        let mut i = at + key.len();
        while i < bytes.len() && is_blank(bytes[i]) {
            i += 1;
        }
        if bytes.get(i) != Some(&b'=') {
            continue;
        }
        i += 1;
        while i < bytes.len() && is_blank(bytes[i]) {
            i += 1;
        }
        let line = text[..at].matches('\n').count() + 1;
        keyed.push(line);
        if !text[i..].starts_with(old) {
            continue;
        }
        let end = i + old.len();
        let mut after = end;
        while after < bytes.len() && is_blank(bytes[after]) {
            after += 1;
        }
        if after == bytes.len() || matches!(bytes[after], b'\n' | b'\r' | b',' | b'}' | b'#') {
            found.push((i, line));
        }
    }
    let shown = |lines: &[usize]| -> String {
        let all: Vec<&str> = text.lines().collect();
        lines
            .iter()
            .map(|&n| format!("\n  {n}: {}", all.get(n - 1).copied().unwrap_or("")))
            .collect()
    };
    match found.as_slice() {
        [(start, _)] => {
            let mut out = String::with_capacity(text.len() + new.len());
            out.push_str(&text[..*start]);
            out.push_str(new);
            out.push_str(&text[start + old.len()..]);
            out
        }
        [] => panic!(
            "set_value: no `{key} = {old}` in the stack; `{key}` is set on {} line(s):{}",
            keyed.len(),
            shown(&keyed)
        ),
        many => panic!(
            "set_value: `{key} = {old}` is ambiguous: it is set on {} lines:{}",
            many.len(),
            shown(&many.iter().map(|(_, line)| *line).collect::<Vec<_>>())
        ),
    }
}

/// Makes gke-accelerators' GPU pool take its machine type from a sensitive variable
/// (`gpu_machine`, defaulting to the type it had), on the cluster the same stack
/// creates: what every "a secret never shows" test of that stack starts from.
#[allow(dead_code)]
pub fn gpu_machine_from_a_secret(work: &Sandbox) {
    let stack = work.join("stacks/gke-accelerators/stack.toml");
    let text = std::fs::read_to_string(&stack).expect("read the stack");
    let text = set_value(
        &text,
        "machine_type",
        "\"g2-standard-24\"",
        "\"${var.gpu_machine}\"",
    );
    let text = text.replacen(
        "[variables.zone]",
        "[variables.gpu_machine]\ndefault = \"g2-standard-24\"\nsensitive = true\n\n[variables.zone]",
        1,
    );
    std::fs::write(&stack, text).expect("write the stack");
}

/// Copies the directory `src` to `dst`, recursively.
pub fn copy_dir(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap_or_else(|e| panic!("create {}: {e}", dst.display()));
    let entries = fs::read_dir(src).unwrap_or_else(|e| panic!("list {}: {e}", src.display()));
    for entry in entries {
        let entry = entry.unwrap_or_else(|e| panic!("list {}: {e}", src.display()));
        let from = entry.path();
        let to = dst.join(entry.file_name());
        if from.is_dir() {
            copy_dir(&from, &to);
        } else {
            fs::copy(&from, &to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
        }
    }
}

fn list_files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let p = entry.path();
        if p.is_dir() {
            list_files(root, &p, out);
        } else if let Ok(rel) = p.strip_prefix(root) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

/// Compares `actual`, normalised, with `tests/expected/<name>`; with
/// `UPDATE_EXPECTED=1`, writes it there instead.
#[track_caller]
pub fn expect_file(name: &str, actual: &str) {
    expect_normalised(name, &normalise(actual));
}

#[track_caller]
fn expect_normalised(name: &str, actual: &str) {
    let path = manifest_dir().join("tests").join("expected").join(name);
    if std::env::var_os("UPDATE_EXPECTED").is_some_and(|v| v == "1") {
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("create {}: {e}", parent.display()));
        }
        fs::write(&path, actual).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        return;
    }
    let expected = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => panic!(
            "read expected output {}: {e}\nrun with UPDATE_EXPECTED=1 to create it; the actual output was:\n{actual}",
            path.display()
        ),
    };
    if expected != actual {
        panic!(
            "output differs from tests/expected/{name} (UPDATE_EXPECTED=1 rewrites it; review the change)\n{}\n--- expected ---\n{expected}\n--- actual ---\n{actual}",
            first_difference(&expected, actual)
        );
    }
}

fn first_difference(expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    for i in 0..e.len().max(a.len()) {
        let (el, al) = (e.get(i), a.get(i));
        if el != al {
            return format!(
                "first difference at line {}:\n  expected: {}\n  actual:   {}",
                i + 1,
                el.map_or("<end of file>".to_string(), |l| format!("{l:?}")),
                al.map_or("<end of file>".to_string(), |l| format!("{l:?}"))
            );
        }
    }
    "the texts differ only in their final newline".to_string()
}

/// Replaces what differs between runs: RFC 3339 timestamps by `<TIME>`, UUIDs by
/// `<UUID>`, lowercase hex words of 8 to 16 characters (random ids) by `<HEX>`, and
/// `after 3s` by `after Ns`. Longer hex words (SHA-256 digests of fixed content) stay.
pub fn normalise(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let boundary = i == 0 || !is_word(b[i - 1]);
        if boundary {
            if let Some(len) = timestamp_len(&b[i..]) {
                out.push_str("<TIME>");
                i += len;
                continue;
            }
            if let Some(len) = uuid_len(&b[i..]) {
                out.push_str("<UUID>");
                i += len;
                continue;
            }
            if b[i..].starts_with(b"after ") {
                let digits = b[i + 6..].iter().take_while(|c| c.is_ascii_digit()).count();
                let end = i + 6 + digits;
                if digits > 0
                    && b.get(end) == Some(&b's')
                    && b.get(end + 1).is_none_or(|c| !is_word(*c))
                {
                    out.push_str("after Ns");
                    i = end + 1;
                    continue;
                }
            }
            if b[i].is_ascii_alphanumeric() {
                let len = b[i..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .count();
                let word = &text[i..i + len];
                let ends_word = b.get(i + len).is_none_or(|c| *c != b'_');
                if (8..=16).contains(&len)
                    && ends_word
                    && word
                        .bytes()
                        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
                {
                    out.push_str("<HEX>");
                } else {
                    out.push_str(word);
                }
                i += len;
                continue;
            }
        }
        // Copy one whole character.
        let ch_len = text[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&text[i..i + ch_len]);
        i += ch_len;
    }
    out
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// `YYYY-MM-DDTHH:MM:SS[.fff][Z|±HH:MM]` at the start of `b`.
fn timestamp_len(b: &[u8]) -> Option<usize> {
    const SHAPE: &[u8] = b"dddd-dd-ddTdd:dd:dd";
    if b.len() < SHAPE.len() {
        return None;
    }
    for (c, s) in b.iter().zip(SHAPE) {
        let ok = if *s == b'd' {
            c.is_ascii_digit()
        } else {
            c == s
        };
        if !ok {
            return None;
        }
    }
    let mut n = SHAPE.len();
    if b.get(n) == Some(&b'.') {
        let frac = b[n + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if frac > 0 {
            n += 1 + frac;
        }
    }
    match b.get(n) {
        Some(b'Z') => n += 1,
        Some(b'+' | b'-')
            if b.len() >= n + 6
                && b[n + 3] == b':'
                && [1, 2, 4, 5].iter().all(|k| b[n + k].is_ascii_digit()) =>
        {
            n += 6
        }
        _ => {}
    }
    Some(n)
}

/// A UUID (`8-4-4-4-12` hex digits) at the start of `b`.
fn uuid_len(b: &[u8]) -> Option<usize> {
    let mut n = 0;
    for (k, group) in [8usize, 4, 4, 4, 12].iter().enumerate() {
        if k > 0 {
            if b.get(n) != Some(&b'-') {
                return None;
            }
            n += 1;
        }
        let hex = b.get(n..n + group)?;
        if !hex.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        n += group;
    }
    b.get(n).is_none_or(|c| !is_word(*c)).then_some(n)
}

/// Replaces what differs between runs but not between correct outputs: uids and the
/// sandbox's ports.
pub fn stable(text: &str) -> String {
    let mut out = String::new();
    for word in text.split_inclusive(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
        let core = word.trim_end_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '-'));
        let is_uid = core.len() == 36
            && core.chars().enumerate().all(|(i, c)| {
                if [8, 13, 18, 23].contains(&i) {
                    c == '-'
                } else {
                    c.is_ascii_hexdigit()
                }
            });
        if is_uid {
            out.push_str("<uid>");
            out.push_str(&word[core.len()..]);
        } else {
            out.push_str(word);
        }
    }
    let mut result = String::new();
    let mut rest = out.as_str();
    while let Some(i) = rest.find("127.0.0.1:") {
        result.push_str(&rest[..i + 10]);
        rest = &rest[i + 10..];
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 {
            result.push_str("PORT");
        }
        rest = &rest[digits..];
    }
    result.push_str(rest);
    result
}

/// The Redis list `list` as the redis-server at `addr` holds it (read with redis-cli).
pub fn redis_list(addr: std::net::SocketAddr, list: &str) -> Vec<String> {
    let out = Command::new("redis-cli")
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(["--raw", "LRANGE", list, "0", "-1"])
        .output()
        .expect("run redis-cli (installed with redis-server by scripts/deps.sh)");
    assert!(
        out.status.success(),
        "redis-cli failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// A stack named `name` holding scenario 1's cluster and share
/// (`tests/fixtures/by-hand/cloud.toml`), which its guide makes with gcloud.
pub fn by_hand_stack(name: &str) -> String {
    let cloud =
        fs::read_to_string(fixture_path("by-hand/cloud.toml")).expect("read by-hand/cloud.toml");
    format!("[stack]\nname = \"{name}\"\n\n{cloud}")
}

/// Builds scenario 1's workload by hand on the sandbox cluster whose kubeconfig `terrain
/// sandbox serve` writes at `kubeconfig` (waited for): the NFS volume at the share
/// `ip` (the scenario's `sed`), its claim, the Redis pod and its Service with `kubectl
/// apply`, the Job with `kubectl create` (`tests/fixtures/by-hand/`). Panics with
/// kubectl's output when it fails.
pub fn build_by_hand(kubeconfig: &Path, ip: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !kubeconfig.exists() {
        assert!(
            Instant::now() < deadline,
            "serve wrote {}",
            kubeconfig.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let dir = tempfile::tempdir().expect("a directory for the YAML");
    let volume = fs::read_to_string(fixture_path("by-hand/volume-and-redis.yaml"))
        .expect("read the volume's YAML");
    let volume = volume.replace("<FILESTORE_IP_ADDRESS>", ip);
    fs::write(dir.path().join("volume-and-redis.yaml"), volume).expect("write the YAML");
    let job = fixture_path("by-hand/job.yaml");
    for (verb, file) in [
        ("apply", dir.path().join("volume-and-redis.yaml")),
        ("create", job),
    ] {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([verb, "-f"])
            .arg(&file)
            .output()
            .expect("run kubectl");
        assert!(
            out.status.success(),
            "kubectl {verb} -f {}\n{}{}",
            file.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::normalise;

    #[test]
    fn normalises_what_varies() {
        assert_eq!(normalise("id=2026-11-21T00:03:19Z x"), "id=<TIME> x");
        assert_eq!(normalise("at 2026-11-21T00:03:19.123+02:00."), "at <TIME>.");
        assert_eq!(
            normalise("lock 6e26ba75-a61c-41a6-914b-42b00f6aa26a;"),
            "lock <UUID>;"
        );
        assert_eq!(
            normalise("[id=63ae07aec399] run-76f27205.txt"),
            "[id=<HEX>] run-<HEX>.txt"
        );
        assert_eq!(
            normalise("complete after 0s [id=x], after 12s"),
            "complete after Ns [id=x], after Ns"
        );
        let sha = "853ff93762a06ddbf722c4ebe9ddd66d8f63ddaea97f521c3ecc20da7c976020";
        assert_eq!(normalise(sha), sha);
        assert_eq!(
            normalise("local_file.greeting deadline 1234567"),
            "local_file.greeting deadline 1234567"
        );
    }
}

/// Runs `kubernetes-validate --strict` for Kubernetes 1.31 over `files` (installed by
/// `scripts/deps.sh`); fails naming `what` with the validator's output.
pub fn kubernetes_validate_strict(files: &[PathBuf], what: &str) {
    let out = Command::new("kubernetes-validate")
        .args(["--strict", "--kubernetes-version", "1.31.0", "--no-warn"])
        .args(files)
        .output()
        .expect("kubernetes-validate runs (scripts/deps.sh installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "kubernetes-validate --strict rejected {what}:\n{text}"
    );
}

/// Checks that each of `files` in `dir` has the sha256 its row (`| \`FILE\` | …`) of
/// `dir/README.md` states, so an edit of a kept manifest is a re-rendering the README
/// records.
pub fn assert_readme_sha256(dir: &Path, files: &[&str]) {
    use sha2::{Digest, Sha256};
    let readme = fs::read_to_string(dir.join("README.md")).expect("README");
    for file in files {
        let bytes = fs::read(dir.join(file)).expect("read");
        let sum = hex::encode(Sha256::digest(&bytes));
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{file}` |")))
            .unwrap_or_else(|| panic!("the README lists {file}"));
        assert!(
            row.contains(&sum),
            "{file}: sha256 {sum} is not the README's:\n{row}"
        );
    }
}
