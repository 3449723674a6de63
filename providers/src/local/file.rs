//! The `local_file` kind: a file on this machine with given content and permissions.
//! Its id is its path (relative paths are relative to terrain's working directory);
//! writes are atomic (temporary file in the same directory, then rename), so a reader
//! never sees half a file and an interrupted apply leaves the old content or the new.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::schema::Fields;
use crate::{Ctx, Invalid, Kind, Live, ProviderError};

/// The kind `local_file`.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalFile;

const DEFAULT_MODE: &str = "0644";
const DEFAULT_DIRECTORY_MODE: &str = "0755";

fn default_mode() -> String {
    DEFAULT_MODE.to_string()
}

fn default_directory_mode() -> String {
    DEFAULT_DIRECTORY_MODE.to_string()
}

/// What a stack writes for a `local_file`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Where the file is; relative paths start at the working directory.
    #[terrain(force_new)]
    pub path: String,
    /// The file's content (set this or sensitive_content).
    pub content: Option<String>,
    /// The file's content, kept out of plans and logs (set this or content).
    #[terrain(sensitive)]
    pub sensitive_content: Option<String>,
    /// The file's permissions, as octal digits ("0644").
    #[serde(default = "default_mode")]
    pub mode: String,
    /// Permissions of parent directories terrain creates, as octal digits ("0755").
    #[serde(default = "default_directory_mode")]
    pub directory_mode: String,
}

/// What `local_file` reports after apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The SHA-256 of the content, in hex.
    pub sha256: String,
    /// The content's size in bytes.
    pub size: i64,
}

impl Outputs {
    fn of(bytes: &[u8]) -> Self {
        Self {
            sha256: hex::encode(Sha256::digest(bytes)),
            size: i64::try_from(bytes.len()).unwrap_or(i64::MAX),
        }
    }
}

/// Permission bits from `"644"` or `"0644"`: three or four octal digits.
fn parse_mode(text: &str) -> Option<u32> {
    if !(3..=4).contains(&text.len()) || !text.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return None;
    }
    u32::from_str_radix(text, 8).ok()
}

fn format_mode(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

/// Says what is wrong with a mode; the field's name is added by whoever reports it.
fn mode_problem(text: &str) -> String {
    format!("{text:?} is not a file mode; use 3 or 4 octal digits, e.g. \"0644\"")
}

/// The mode in `field`, for create and update, which validation has already vetted;
/// this error only fires if that step was skipped.
fn mode_of_field(field: &str, text: &str) -> Result<u32, ProviderError> {
    parse_mode(text)
        .ok_or_else(|| ProviderError::Unsupported(format!("{field}: {}", mode_problem(text))))
}

impl Spec {
    /// The content to write, whichever field holds it.
    fn desired(&self) -> Result<&str, ProviderError> {
        match (&self.content, &self.sensitive_content) {
            (Some(c), None) | (None, Some(c)) => Ok(c),
            _ => Err(ProviderError::Unsupported(
                "local_file: set exactly one of content and sensitive_content".to_string(),
            )),
        }
    }
}

#[async_trait]
impl Kind for LocalFile {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "local_file";
    const PROVIDER: &'static str = "local";

    fn validate(spec: &Spec, _config: &serde_json::Value) -> Vec<Invalid> {
        let mut problems = Vec::new();
        if spec.path.is_empty() {
            problems.push(Invalid::at("path", "must not be empty"));
        }
        match (&spec.content, &spec.sensitive_content) {
            (None, None) => {
                problems.push(Invalid::at("", "set one of content or sensitive_content"))
            }
            (Some(_), Some(_)) => problems.push(Invalid::at(
                "sensitive_content",
                "content and sensitive_content are both set; set only one",
            )),
            _ => {}
        }
        for (field, text) in [
            ("mode", &spec.mode),
            ("directory_mode", &spec.directory_mode),
        ] {
            if parse_mode(text).is_none() {
                problems.push(Invalid::at(field, mode_problem(text)));
            }
        }
        problems
    }

    fn planned_id(spec: &Spec, _config: &serde_json::Value) -> Option<String> {
        Some(spec.path.clone())
    }

    async fn read(
        &self,
        _ctx: &Ctx,
        id: &str,
        prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        let path = id.to_string();
        let Some(OnDisk { bytes, mode }) =
            blocking(id, move || read_file(Path::new(&path))).await?
        else {
            return Ok(None);
        };
        // Not UTF-8 reads back lossy, which differs from any desired content and so
        // shows as a change to rewrite, rather than failing the whole refresh.
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let sensitive = prior.is_some_and(|p| p.content.is_none() && p.sensitive_content.is_some());
        let (content, sensitive_content) = if sensitive {
            (None, Some(text))
        } else {
            (Some(text), None)
        };
        let mode = match (prior, mode) {
            // Keep the stack's spelling ("644") when the bits agree, so it is no diff.
            (Some(p), Some(m)) if parse_mode(&p.mode) == Some(m) => p.mode.clone(),
            (_, Some(m)) => format_mode(m),
            (Some(p), None) => p.mode.clone(),
            (None, None) => default_mode(),
        };
        let spec = Spec {
            path: id.to_string(),
            content,
            sensitive_content,
            mode,
            // Only used when creating directories, so the prior is the only truth there is.
            directory_mode: prior.map_or_else(default_directory_mode, |p| p.directory_mode.clone()),
        };
        Ok(Some(Live {
            id: id.to_string(),
            spec,
            outputs: Outputs::of(&bytes),
        }))
    }

    async fn create(&self, _ctx: &Ctx, spec: &Spec) -> Result<Live<Self>, ProviderError> {
        let content = spec.desired()?.as_bytes().to_vec();
        let mode = mode_of_field("mode", &spec.mode)?;
        let directory_mode = mode_of_field("directory_mode", &spec.directory_mode)?;
        let path = PathBuf::from(&spec.path);
        let outputs = Outputs::of(&content);
        blocking(&spec.path, move || {
            create_parents(&path, directory_mode)?;
            write_atomic(&path, &content, mode)
        })
        .await?;
        Ok(Live {
            id: spec.path.clone(),
            spec: spec.clone(),
            outputs,
        })
    }

    async fn update(
        &self,
        _ctx: &Ctx,
        id: &str,
        _prior: &Spec,
        spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        let content = spec.desired()?.as_bytes().to_vec();
        let mode = mode_of_field("mode", &spec.mode)?;
        let directory_mode = mode_of_field("directory_mode", &spec.directory_mode)?;
        let path = PathBuf::from(id);
        let outputs = Outputs::of(&content);
        // Compared with the file itself rather than `prior`, so an edit made outside
        // terrain is undone even when the stack did not change.
        blocking(id, move || match read_file(&path)? {
            Some(current) if current.bytes != content => write_atomic(&path, &content, mode),
            Some(current) if current.mode.is_some_and(|m| m != mode) => set_mode(&path, mode),
            Some(_) => Ok(()),
            None => {
                create_parents(&path, directory_mode)?;
                write_atomic(&path, &content, mode)
            }
        })
        .await?;
        Ok(Live {
            id: id.to_string(),
            spec: spec.clone(),
            outputs,
        })
    }

    async fn delete(
        &self,
        _ctx: &Ctx,
        id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        let path = PathBuf::from(id);
        blocking(id, move || match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(ProviderError::io("remove", display(&path), e))
            }
            _ => Ok(()),
        })
        .await
    }
}

/// Runs file I/O off the async workers, which the engine shares among many resources.
async fn blocking<T: Send + 'static>(
    path: &str,
    f: impl FnOnce() -> Result<T, ProviderError> + Send + 'static,
) -> Result<T, ProviderError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(ProviderError::io("file task", path, io::Error::other(e))),
    }
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

/// A file as found on disk.
struct OnDisk {
    bytes: Vec<u8>,
    /// Permission bits; `None` where the platform has none.
    mode: Option<u32>,
}

/// The file at `path`; `None` when there is no file.
fn read_file(path: &Path) -> Result<Option<OnDisk>, ProviderError> {
    let err = |e| ProviderError::io("read", display(path), e);
    let mut file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(e)),
    };
    // Metadata from the open handle, so bytes and mode describe the same file even if
    // it is replaced meanwhile.
    let mode = mode_bits(&file.metadata().map_err(err)?);
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(err)?;
    Ok(Some(OnDisk { bytes, mode }))
}

/// Creates the missing parent directories of `path`, each with `mode` exactly (set
/// explicitly, because the mode given at creation is narrowed by the umask).
fn create_parents(path: &Path, mode: u32) -> Result<(), ProviderError> {
    let mut missing = Vec::new();
    let mut dir = path.parent();
    while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        missing.push(d.to_path_buf());
        dir = d.parent();
    }
    for d in missing.iter().rev() {
        match fs::create_dir(d) {
            Ok(()) => set_mode(d, mode)?,
            // Another resource creating a sibling file got there first.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && d.is_dir() => {}
            Err(e) => return Err(ProviderError::io("create directory", display(d), e)),
        }
    }
    Ok(())
}

/// Replaces `path` with `content` and `mode` in one rename.
fn write_atomic(path: &Path, content: &[u8], mode: u32) -> Result<(), ProviderError> {
    let err = |e| ProviderError::io("write", display(path), e);
    let name = path.file_name().ok_or_else(|| {
        err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path names no file",
        ))
    })?;
    // The same directory as the target, so the rename cannot cross filesystems; a
    // random suffix, so concurrent writers never share a temporary file.
    let tmp = path.with_file_name(format!(
        ".{}.terrain-{:016x}.tmp",
        name.to_string_lossy(),
        rand::random::<u64>()
    ));
    let written = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        file.write_all(content)?;
        set_handle_mode(&file, mode)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        // Best effort: the write error is what the user needs to see.
        let _ = fs::remove_file(&tmp);
        return Err(err(e));
    }
    Ok(())
}

#[cfg(unix)]
fn mode_bits(meta: &fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    Some(meta.permissions().mode() & 0o7777)
}

#[cfg(not(unix))]
fn mode_bits(_meta: &fs::Metadata) -> Option<u32> {
    None
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> Result<(), ProviderError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| ProviderError::io("chmod", display(path), e))
}

#[cfg(not(unix))]
fn set_mode(_path: &Path, _mode: u32) -> Result<(), ProviderError> {
    Ok(())
}

#[cfg(unix)]
fn set_handle_mode(file: &fs::File, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_handle_mode(_file: &fs::File, _mode: u32) -> io::Result<()> {
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::testing::schema_mismatches;
    use crate::{Adapter, Resource};
    use serde_json::json;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn ctx() -> Ctx {
        Ctx::new("local_file.f", json!({}))
    }

    fn spec(path: &Path, content: &str) -> Spec {
        Spec {
            path: display(path),
            content: Some(content.to_string()),
            sensitive_content: None,
            mode: default_mode(),
            directory_mode: default_directory_mode(),
        }
    }

    fn mode_on_disk(path: &Path) -> u32 {
        fs::metadata(path)
            .expect("file exists")
            .permissions()
            .mode()
            & 0o7777
    }

    fn inode(path: &Path) -> u64 {
        fs::metadata(path).expect("file exists").ino()
    }

    #[test]
    fn schema_agrees_with_serde() {
        let full = Spec {
            path: "out/a.txt".into(),
            content: Some("a".into()),
            sensitive_content: Some("b".into()),
            mode: "0600".into(),
            directory_mode: "0700".into(),
        };
        assert_eq!(
            schema_mismatches::<LocalFile>(&full, &Outputs::of(b"a")),
            Vec::<String>::new()
        );
    }

    #[test]
    fn only_path_forces_replacement_and_sensitive_content_is_secret() {
        let schema = LocalFile::schema();
        let forcing: Vec<_> = schema
            .fields
            .iter()
            .filter(|f| f.force_new)
            .map(|f| f.name)
            .collect();
        assert_eq!(forcing, ["path"]);
        let secret: Vec<_> = schema
            .fields
            .iter()
            .filter(|f| f.sensitive)
            .map(|f| f.name)
            .collect();
        assert_eq!(secret, ["sensitive_content"]);
    }

    #[test]
    fn validate_wants_exactly_one_content() {
        let mut s = spec(Path::new("a"), "x");
        assert!(LocalFile::validate(&s, &serde_json::Value::Null).is_empty());
        s.content = Some(String::new());
        assert!(
            LocalFile::validate(&s, &serde_json::Value::Null).is_empty(),
            "empty content is still content"
        );
        s.sensitive_content = Some("y".into());
        assert_eq!(
            LocalFile::validate(&s, &serde_json::Value::Null),
            vec![Invalid::at(
                "sensitive_content",
                "content and sensitive_content are both set; set only one"
            )]
        );
        s.content = None;
        assert!(LocalFile::validate(&s, &serde_json::Value::Null).is_empty());
        s.sensitive_content = None;
        assert_eq!(
            LocalFile::validate(&s, &serde_json::Value::Null),
            vec![Invalid::at("", "set one of content or sensitive_content")]
        );
    }

    #[test]
    fn validate_checks_modes_and_path() {
        let mut s = spec(Path::new("a"), "x");
        for ok in ["644", "0644", "0600", "4755", "000"] {
            s.mode = ok.into();
            assert!(
                LocalFile::validate(&s, &serde_json::Value::Null).is_empty(),
                "{ok}"
            );
        }
        for bad in ["", "64", "06444", "0x44", "888", "rw-", "-644"] {
            s.mode = bad.into();
            let problems = LocalFile::validate(&s, &serde_json::Value::Null);
            assert_eq!(problems.len(), 1, "{bad:?}");
            assert_eq!(problems[0].path, ["mode"]);
            assert!(
                problems[0].message.contains("3 or 4 octal digits"),
                "{}",
                problems[0].message
            );
        }
        s.mode = default_mode();
        s.directory_mode = "rwx".into();
        assert_eq!(
            LocalFile::validate(&s, &serde_json::Value::Null)[0].path,
            ["directory_mode"]
        );
        s.directory_mode = default_directory_mode();
        s.path = String::new();
        assert_eq!(
            LocalFile::validate(&s, &serde_json::Value::Null),
            vec![Invalid::at("path", "must not be empty")]
        );
    }

    #[test]
    fn planned_id_is_the_path() {
        assert_eq!(
            LocalFile::planned_id(&spec(Path::new("out/a.txt"), "x"), &serde_json::Value::Null)
                .as_deref(),
            Some("out/a.txt")
        );
    }

    #[tokio::test]
    async fn create_makes_parents_writes_and_sets_modes() -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("a/b/c.txt");
        let mut s = spec(&path, "hello");
        s.mode = "0600".into();
        s.directory_mode = "0750".into();
        let live = LocalFile.create(&ctx(), &s).await?;
        assert_eq!(live.id, display(&path));
        assert_eq!(live.spec, s);
        assert_eq!(
            live.outputs,
            Outputs {
                sha256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824".into(),
                size: 5
            }
        );
        assert_eq!(fs::read_to_string(&path).expect("written"), "hello");
        assert_eq!(mode_on_disk(&path), 0o600);
        assert_eq!(mode_on_disk(&dir.path().join("a")), 0o750);
        assert_eq!(mode_on_disk(&dir.path().join("a/b")), 0o750);
        let leftovers: Vec<_> = fs::read_dir(dir.path().join("a/b"))
            .expect("dir exists")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(
            leftovers,
            [std::ffi::OsString::from("c.txt")],
            "no temporary file is left behind"
        );
        Ok(())
    }

    #[tokio::test]
    async fn create_leaves_existing_parent_modes_alone() -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().expect("temp dir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o711)).expect("chmod");
        let mut s = spec(&dir.path().join("f"), "x");
        s.directory_mode = "0700".into();
        LocalFile.create(&ctx(), &s).await?;
        assert_eq!(mode_on_disk(dir.path()), 0o711);
        Ok(())
    }

    #[tokio::test]
    async fn read_reports_the_file_as_it_is() -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f");
        let id = display(&path);
        assert!(
            LocalFile.read(&ctx(), &id, None).await?.is_none(),
            "a missing file is None"
        );

        let mut s = spec(&path, "one");
        s.mode = "644".into();
        s.directory_mode = "0700".into();
        LocalFile.create(&ctx(), &s).await?;
        let live = LocalFile
            .read(&ctx(), &id, Some(&s))
            .await?
            .expect("exists");
        assert_eq!(
            live.spec, s,
            "same bits spelled \"644\" read back as written"
        );
        assert_eq!(live.outputs, Outputs::of(b"one"));

        fs::write(&path, "two").expect("edit outside terrain");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        let live = LocalFile
            .read(&ctx(), &id, Some(&s))
            .await?
            .expect("exists");
        assert_eq!(live.spec.content.as_deref(), Some("two"));
        assert_eq!(live.spec.mode, "0600");
        assert_eq!(live.spec.directory_mode, "0700");
        assert_eq!(live.outputs, Outputs::of(b"two"));

        let imported = LocalFile.read(&ctx(), &id, None).await?.expect("exists");
        assert_eq!(
            imported.spec,
            Spec {
                path: id.clone(),
                content: Some("two".into()),
                sensitive_content: None,
                mode: "0600".into(),
                directory_mode: default_directory_mode(),
            }
        );
        Ok(())
    }

    #[tokio::test]
    async fn read_keeps_sensitive_content_sensitive() -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("secret");
        let s = Spec {
            content: None,
            sensitive_content: Some("hunter2".into()),
            ..spec(&path, "")
        };
        LocalFile.create(&ctx(), &s).await?;
        let live = LocalFile
            .read(&ctx(), &display(&path), Some(&s))
            .await?
            .expect("exists");
        assert_eq!(live.spec, s);
        Ok(())
    }

    #[tokio::test]
    async fn read_of_non_utf8_is_lossy_so_it_diffs() -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("bin");
        fs::write(&path, [b'a', 0xff, b'b']).expect("write");
        let live = LocalFile
            .read(&ctx(), &display(&path), None)
            .await?
            .expect("exists");
        assert_eq!(live.spec.content.as_deref(), Some("a\u{fffd}b"));
        assert_eq!(
            live.outputs,
            Outputs::of(&[b'a', 0xff, b'b']),
            "outputs describe the real bytes"
        );
        Ok(())
    }

    #[tokio::test]
    async fn update_rewrites_only_when_content_differs_and_chmods_in_place(
    ) -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f");
        let id = display(&path);
        let s = spec(&path, "one");
        LocalFile.create(&ctx(), &s).await?;
        let before = inode(&path);

        let mut chmod = s.clone();
        chmod.mode = "0640".into();
        LocalFile.update(&ctx(), &id, &s, &chmod).await?;
        assert_eq!(
            inode(&path),
            before,
            "a mode change does not rewrite the file"
        );
        assert_eq!(mode_on_disk(&path), 0o640);

        let mut moved = chmod.clone();
        moved.content = None;
        moved.sensitive_content = Some("one".into());
        LocalFile.update(&ctx(), &id, &chmod, &moved).await?;
        assert_eq!(
            inode(&path),
            before,
            "same bytes in the other field is no rewrite"
        );

        let mut changed = chmod.clone();
        changed.content = Some("two".into());
        let live = LocalFile.update(&ctx(), &id, &moved, &changed).await?;
        assert_eq!(fs::read_to_string(&path).expect("written"), "two");
        assert_eq!(mode_on_disk(&path), 0o640);
        assert_eq!(live.outputs, Outputs::of(b"two"));
        assert_eq!(live.spec, changed);
        Ok(())
    }

    #[tokio::test]
    async fn update_restores_a_file_deleted_outside_terrain() -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("d/f");
        let s = spec(&path, "x");
        LocalFile.update(&ctx(), &display(&path), &s, &s).await?;
        assert_eq!(fs::read_to_string(&path).expect("written"), "x");
        Ok(())
    }

    #[tokio::test]
    async fn delete_is_idempotent() -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f");
        let s = spec(&path, "x");
        LocalFile.create(&ctx(), &s).await?;
        LocalFile.delete(&ctx(), &display(&path), Some(&s)).await?;
        assert!(!path.exists());
        LocalFile.delete(&ctx(), &display(&path), None).await?;
        Ok(())
    }

    #[tokio::test]
    async fn io_errors_name_the_call_and_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let blocker = dir.path().join("plain");
        fs::write(&blocker, "").expect("write");
        let path = blocker.join("f");
        let err = LocalFile
            .create(&ctx(), &spec(&path, "x"))
            .await
            .expect_err("parent is a file");
        let message = err.to_string();
        assert!(
            message.starts_with("write ") && message.contains(&display(&path)),
            "{message}"
        );
    }

    #[tokio::test]
    async fn adapter_fills_defaults_from_the_schema() -> Result<(), ProviderError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = display(&dir.path().join("f"));
        let adapter = Adapter::new(LocalFile);
        let observed = adapter
            .create(&ctx(), &json!({"path": path, "content": "x"}))
            .await?;
        assert_eq!(
            observed.spec,
            json!({"path": path, "content": "x", "sensitive_content": null, "mode": "0644", "directory_mode": "0755"})
        );
        assert_eq!(observed.outputs["size"], json!(1));
        Ok(())
    }
}
