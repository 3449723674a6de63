//! The command jail of `kubectl exec`: an emulated pod has no filesystem of its own, only
//! its volume mounts, so a command is checked before anything runs. Only programs from a
//! short list run (`ls`, `cat`, `cp`, `tar`, `find`, `redis-cli`, `env`, `sh -c` scripts
//! of those, …); every path argument is translated through the mounts (refused outside
//! them, and for writes in read-only ones), options that would run other programs or
//! reach the host are refused, and what is left is a [`Plan`]: a host program and its
//! arguments, or the exit the command ends with.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::processes::redis_cli_program;
use super::Mount;

/// `sleep` longer than this is cut short: a sandbox session should not hang on it.
const SLEEP_CAP_SECS: f64 = 60.0;

/// Directories a container's `PATH` covers: `/bin/tar` is `tar`.
const BIN_DIRS: &[&str] = &[
    "/bin",
    "/usr/bin",
    "/usr/local/bin",
    "/sbin",
    "/usr/sbin",
    "/usr/local/sbin",
];

/// A command checked against the pod's mounts.
#[derive(Debug, PartialEq)]
pub(super) enum Plan {
    Run(Run),
    /// Ends without running anything, as the command itself would have.
    Exit {
        code: i32,
        stderr: String,
    },
    /// The program does not exist in the container.
    NotFound(String),
}

#[derive(Debug, PartialEq)]
pub(super) struct Run {
    /// The program's name as the container knows it, for messages.
    pub(super) name: String,
    pub(super) program: OsString,
    pub(super) args: Vec<OsString>,
    /// Whether stdout is text naming files (host paths are mapped back) or data (`cat`, `tar`).
    pub(super) rewrite_stdout: bool,
}

/// Why a command is refused before it runs.
#[derive(Debug, PartialEq)]
pub(super) enum Refusal {
    /// Outside every mount (or leaving them through a symlink): the container cannot see it.
    Missing(String),
    ReadOnly(String),
    /// Something the sandbox does not do, such as an option that would run another program.
    Unsupported(String),
}

/// The pod's mounts, normalized for lookups.
pub(super) struct View {
    pub(super) mounts: Vec<ViewMount>,
    /// The first mount's container path: relative paths resolve against it, as the
    /// command runs in its host directory.
    cwd: Option<String>,
}

pub(super) struct ViewMount {
    pub(super) path: String,
    pub(super) host: PathBuf,
    /// The canonical host directory, when it exists.
    pub(super) real: Option<PathBuf>,
    pub(super) read_only: bool,
}

/// A container path translated to the host.
#[derive(Debug)]
pub(super) struct Resolved {
    host: OsString,
    read_only: bool,
}

impl View {
    pub(super) fn new(mounts: &[Mount]) -> View {
        let mounts: Vec<ViewMount> = mounts
            .iter()
            .map(|m| ViewMount {
                path: normalize(&format!("/{}", m.path)),
                host: m.host.clone(),
                real: m.host.canonicalize().ok(),
                read_only: m.read_only,
            })
            .collect();
        let cwd = mounts.first().map(|m| m.path.clone());
        View { mounts, cwd }
    }

    fn cwd(&self) -> Option<&str> {
        self.cwd.as_deref()
    }

    pub(super) fn first_host(&self) -> Option<&Path> {
        self.mounts.first().map(|m| m.host.as_path())
    }

    /// Translates `arg` (absolute, or relative to `base`) to the host path behind it.
    fn resolve(&self, arg: &str, base: Option<&str>) -> Result<Resolved, Refusal> {
        let missing = || Refusal::Missing(arg.to_string());
        let absolute = if arg.starts_with('/') {
            arg.to_string()
        } else {
            format!("{}/{arg}", base.ok_or_else(missing)?)
        };
        let path = normalize(&absolute);
        let mount = self
            .mounts
            .iter()
            .filter(|m| within(&path, &m.path))
            .max_by_key(|m| m.path.len())
            .ok_or_else(missing)?;
        let rest = path[mount.path.len()..].trim_start_matches('/');
        let mut host = mount.host.clone();
        if !rest.is_empty() {
            host.push(rest);
        }
        let read_only = self.confine(mount, &host).ok_or_else(missing)?;
        let mut host = host.into_os_string();
        // `dir/.` and `dir/` mean something to cp and tar: keep them.
        if arg == "." || arg.ends_with("/.") {
            host.push("/.");
        } else if arg.ends_with('/') && !path.ends_with('/') {
            host.push("/");
        }
        Ok(Resolved { host, read_only })
    }

    /// Whether writing to `host` is refused, or `None` when a symlink leads it outside
    /// every mount (the container would not see what is there).
    fn confine(&self, mount: &ViewMount, host: &Path) -> Option<bool> {
        // A mount whose directory does not exist has nothing below it, symlinks included.
        if mount.real.is_none() {
            return Some(mount.read_only);
        }
        let existing = host.ancestors().find(|a| a.symlink_metadata().is_ok())?;
        let real = existing.canonicalize().ok()?;
        let landing = self
            .mounts
            .iter()
            .filter_map(|m| Some((m, m.real.as_ref()?)))
            .filter(|(_, r)| real.starts_with(r))
            .max_by_key(|(_, r)| r.as_os_str().len())?;
        Some(mount.read_only || landing.0.read_only)
    }

    fn writable(&self, arg: &str, base: Option<&str>) -> Result<(), Refusal> {
        if self.resolve(arg, base)?.read_only {
            Err(Refusal::ReadOnly(arg.to_string()))
        } else {
            Ok(())
        }
    }
}

/// `/a/./b//c/../d` → `/a/b/d`; `..` at the root stays at the root.
pub(super) fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

pub(super) fn within(path: &str, mount: &str) -> bool {
    mount == "/"
        || path == mount
        || path
            .strip_prefix(mount)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Checks a command against the pod's mounts.
pub(super) fn plan(command: &[String], view: &View, redis: Option<SocketAddr>) -> Plan {
    plan_in(command, view, redis, None)
}

/// `shell`: the command comes from `sh -c`, which reports missing programs itself.
pub(super) fn plan_in(
    command: &[String],
    view: &View,
    redis: Option<SocketAddr>,
    shell: Option<&str>,
) -> Plan {
    let Some((first, args)) = command.split_first() else {
        return Plan::NotFound(String::new());
    };
    let not_found = |name: &str| match shell {
        Some("bash") => Plan::Exit {
            code: 127,
            stderr: format!("bash: line 1: {name}: command not found\n"),
        },
        Some(sh) => Plan::Exit {
            code: 127,
            stderr: format!("{sh}: 1: {name}: not found\n"),
        },
        None => Plan::NotFound(name.to_string()),
    };
    let name = match first.rsplit_once('/') {
        Some((dir, base)) if BIN_DIRS.contains(&dir) => base,
        Some(_) => return not_found(first),
        None => first.as_str(),
    };
    let Some(kind) = kind_of(name) else {
        return not_found(first);
    };
    let translated = match kind {
        Kind::Shell => return plan_shell(name, args, view, redis),
        Kind::RedisCli => match redis {
            Some(addr) => redis_cli_args(args, addr, view),
            None if shell.is_some() => return not_found(first),
            None => {
                return Plan::Exit {
                    code: 127,
                    stderr: "redis-cli: not found\n".into(),
                }
            }
        },
        Kind::Verbatim => Ok(args.iter().map(OsString::from).collect()),
        Kind::Sleep => Ok(capped_sleep(args)),
        Kind::Env => env_args(args),
        Kind::Test => args
            .iter()
            .map(|a| {
                if a.starts_with('/') {
                    view.resolve(a, None).map(|r| r.host)
                } else {
                    Ok(a.into())
                }
            })
            .collect(),
        Kind::Find => find_args(args, view),
        Kind::Tar => tar_args(args, view),
        Kind::Files(spec) => file_args(args, spec, view),
    };
    match translated {
        Ok(args) => Plan::Run(Run {
            name: name.to_string(),
            program: match kind {
                Kind::RedisCli => redis_cli_program().into_os_string(),
                _ => name.into(),
            },
            args,
            rewrite_stdout: kind.rewrites_stdout(),
        }),
        Err(Refusal::Missing(path)) => Plan::Exit {
            code: 1,
            stderr: format!("{name}: {path}: No such file or directory\n"),
        },
        Err(Refusal::ReadOnly(path)) => Plan::Exit {
            code: 1,
            stderr: format!("{name}: {path}: Read-only file system\n"),
        },
        Err(Refusal::Unsupported(why)) => Plan::Exit {
            code: 126,
            stderr: format!("{name}: {why}\n"),
        },
    }
}

/// How a supported program's arguments are checked and translated.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    /// No argument is a path.
    Verbatim,
    Sleep,
    Env,
    Test,
    Find,
    Tar,
    RedisCli,
    Shell,
    /// Operands are files; options follow the spec.
    Files(&'static Spec),
}

impl Kind {
    fn rewrites_stdout(self) -> bool {
        match self {
            Kind::Files(spec) => spec.rewrite_stdout,
            Kind::Find | Kind::Test => true,
            _ => false,
        }
    }
}

pub(super) fn kind_of(name: &str) -> Option<Kind> {
    Some(match name {
        "echo" | "true" => Kind::Verbatim,
        "sleep" => Kind::Sleep,
        "env" => Kind::Env,
        "test" => Kind::Test,
        "find" => Kind::Find,
        "tar" => Kind::Tar,
        "redis-cli" => Kind::RedisCli,
        "sh" | "bash" => Kind::Shell,
        "ls" => Kind::Files(&LS),
        "cat" => Kind::Files(&CAT),
        "mkdir" => Kind::Files(&MKDIR),
        "rm" => Kind::Files(&RM),
        "cp" => Kind::Files(&CP),
        "mv" => Kind::Files(&MV),
        "du" => Kind::Files(&DU),
        "stat" => Kind::Files(&STAT),
        "sha256sum" | "md5sum" => Kind::Files(&CHECKSUM),
        "wc" => Kind::Files(&WC),
        "head" => Kind::Files(&HEAD),
        "tail" => Kind::Files(&TAIL),
        "touch" => Kind::Files(&TOUCH),
        _ => return None,
    })
}

/// The options of a program whose operands are files.
pub(super) struct Spec {
    /// Short options taking a value (`-n 5`, `-n5`).
    short_values: &'static str,
    /// Long options taking a value (`--lines 5`, `--lines=5`).
    long_values: &'static [&'static str],
    /// Options (short or long) whose value is a path.
    path_options: &'static [&'static str],
    /// Options (short or long) that would read names from a file or reach the host.
    refused: &'static [&'static str],
    writes: Writes,
    rewrite_stdout: bool,
}

/// Which paths a program writes to, checked against read-only mounts.
#[derive(Clone, Copy)]
pub(super) enum Writes {
    Nothing,
    Operands,
    /// The destination: the `-t` directory or the last operand (`cp`).
    Destination,
    /// The destination and every source (`mv`).
    DestinationAndSources,
}

pub(super) const NO_OPTIONS: Spec = Spec {
    short_values: "",
    long_values: &[],
    path_options: &[],
    refused: &[],
    writes: Writes::Nothing,
    rewrite_stdout: true,
};
pub(super) const LS: Spec = Spec {
    short_values: "ITw",
    long_values: &[
        "ignore",
        "width",
        "tabsize",
        "hide",
        "block-size",
        "format",
        "quoting-style",
        "sort",
        "time",
        "time-style",
        "indicator-style",
    ],
    ..NO_OPTIONS
};
pub(super) const CAT: Spec = Spec {
    rewrite_stdout: false,
    ..NO_OPTIONS
};
pub(super) const MKDIR: Spec = Spec {
    short_values: "m",
    long_values: &["mode"],
    writes: Writes::Operands,
    ..NO_OPTIONS
};
pub(super) const RM: Spec = Spec {
    writes: Writes::Operands,
    ..NO_OPTIONS
};
pub(super) const CP: Spec = Spec {
    short_values: "tS",
    long_values: &["target-directory", "suffix"],
    path_options: &["t", "target-directory"],
    writes: Writes::Destination,
    ..NO_OPTIONS
};
pub(super) const MV: Spec = Spec {
    writes: Writes::DestinationAndSources,
    ..CP
};
pub(super) const DU: Spec = Spec {
    short_values: "dBtX",
    long_values: &[
        "max-depth",
        "block-size",
        "threshold",
        "exclude-from",
        "exclude",
        "time-style",
    ],
    path_options: &["X", "exclude-from"],
    refused: &["files0-from"],
    ..NO_OPTIONS
};
pub(super) const STAT: Spec = Spec {
    short_values: "c",
    long_values: &["format", "printf"],
    ..NO_OPTIONS
};
/// `--check` would open the names listed in a file, which are not translated.
pub(super) const CHECKSUM: Spec = Spec {
    refused: &["c", "check"],
    ..NO_OPTIONS
};
pub(super) const WC: Spec = Spec {
    refused: &["files0-from"],
    ..NO_OPTIONS
};
pub(super) const HEAD: Spec = Spec {
    short_values: "nc",
    long_values: &["lines", "bytes"],
    rewrite_stdout: false,
    ..NO_OPTIONS
};
pub(super) const TAIL: Spec = Spec {
    short_values: "ncs",
    long_values: &[
        "lines",
        "bytes",
        "sleep-interval",
        "pid",
        "max-unchanged-stats",
    ],
    ..HEAD
};
pub(super) const TOUCH: Spec = Spec {
    short_values: "drt",
    long_values: &["date", "reference"],
    path_options: &["r", "reference"],
    writes: Writes::Operands,
    ..NO_OPTIONS
};

/// Whether `--given` names the long option `full` (getopt accepts unambiguous prefixes).
pub(super) fn long_is(given: &str, full: &str) -> bool {
    given == full || (given.len() >= 3 && full.starts_with(given))
}

pub(super) fn listed_long(name: &str, list: &[&str]) -> bool {
    list.iter().any(|o| o.len() > 1 && long_is(name, o))
}

pub(super) fn listed_short(c: char, list: &[&str]) -> bool {
    list.iter().any(|o| o.len() == 1 && o.starts_with(c))
}

pub(super) fn unsupported_option(option: &str) -> Refusal {
    Refusal::Unsupported(format!("option '{option}' is not supported in the sandbox"))
}

/// Translates the arguments of a program whose operands are files, and checks its writes.
pub(super) fn file_args(
    args: &[String],
    spec: &Spec,
    view: &View,
) -> Result<Vec<OsString>, Refusal> {
    let cwd = view.cwd();
    let mut out: Vec<OsString> = Vec::new();
    let mut operands: Vec<&str> = Vec::new();
    let mut destination: Option<&str> = None;
    let mut only_operands = false;
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        if only_operands || arg == "-" || !arg.starts_with('-') {
            if arg == "-" {
                out.push(arg.into());
            } else {
                out.push(view.resolve(arg, cwd)?.host);
                operands.push(arg);
            }
            continue;
        }
        if arg == "--" {
            only_operands = true;
            out.push(arg.into());
            continue;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (long, None),
            };
            if listed_long(name, spec.refused) {
                return Err(unsupported_option(&format!("--{name}")));
            }
            let value = match inline {
                Some(v) => Some(v),
                None if listed_long(name, spec.long_values) => {
                    i += 1;
                    args.get(i - 1).map(String::as_str)
                }
                None => None,
            };
            match value {
                Some(v) if listed_long(name, spec.path_options) => {
                    let mut option = OsString::from(format!("--{name}="));
                    option.push(view.resolve(v, cwd)?.host);
                    out.push(option);
                    destination = Some(v);
                }
                Some(v) => out.push(format!("--{name}={v}").into()),
                None => out.push(arg.into()),
            }
            continue;
        }
        let cluster = &arg[1..];
        if cluster.bytes().all(|b| b.is_ascii_digit()) {
            // `head -5`: a count, not options.
            out.push(arg.into());
            continue;
        }
        for (pos, c) in cluster.char_indices() {
            if listed_short(c, spec.refused) {
                return Err(unsupported_option(&format!("-{c}")));
            }
            out.push(format!("-{c}").into());
            if spec.short_values.contains(c) {
                let attached = &cluster[pos + c.len_utf8()..];
                let value = if attached.is_empty() {
                    i += 1;
                    args.get(i - 1).map(String::as_str)
                } else {
                    Some(attached)
                };
                match value {
                    Some(v) if listed_short(c, spec.path_options) => {
                        out.push(view.resolve(v, cwd)?.host);
                        destination = Some(v);
                    }
                    Some(v) => out.push(v.into()),
                    None => {}
                }
                break;
            }
        }
    }
    match spec.writes {
        Writes::Nothing => {}
        Writes::Operands => operands.iter().try_for_each(|p| view.writable(p, cwd))?,
        Writes::Destination | Writes::DestinationAndSources => {
            let sources = match destination {
                Some(_) => &operands[..],
                None => {
                    destination = operands.last().copied();
                    &operands[..operands.len().saturating_sub(1)]
                }
            };
            if let Some(d) = destination {
                view.writable(d, cwd)?;
            }
            if matches!(spec.writes, Writes::DestinationAndSources) {
                sources.iter().try_for_each(|p| view.writable(p, cwd))?;
            }
        }
    }
    Ok(out)
}

/// `find`: start paths, then an expression whose file arguments and absolute patterns are
/// translated; actions that run programs or write files elsewhere are refused.
pub(super) fn find_args(args: &[String], view: &View) -> Result<Vec<OsString>, Refusal> {
    const REFUSED: &[&str] = &[
        "-exec",
        "-execdir",
        "-ok",
        "-okdir",
        "-fprint",
        "-fprint0",
        "-fprintf",
        "-fls",
        "-files0-from",
    ];
    const FILE_TESTS: &[&str] = &["-newer", "-anewer", "-cnewer", "-samefile"];
    let cwd = view.cwd();
    let mut out: Vec<OsString> = Vec::new();
    let mut i = 0;
    // Leading options: -H -L -P, -D debugopts, -O3.
    while let Some(arg) = args.get(i) {
        match arg.as_str() {
            "-H" | "-L" | "-P" => out.push(arg.into()),
            "-D" => {
                out.push(arg.into());
                i += 1;
                if let Some(v) = args.get(i) {
                    out.push(v.into());
                }
            }
            a if a.starts_with("-O") => out.push(arg.into()),
            _ => break,
        }
        i += 1;
    }
    let mut starts: Vec<&str> = Vec::new();
    while let Some(arg) = args.get(i) {
        if (arg.starts_with('-') && arg.len() > 1) || ["(", ")", "!", ","].contains(&arg.as_str()) {
            break;
        }
        out.push(view.resolve(arg, cwd)?.host);
        starts.push(arg);
        i += 1;
    }
    let mut deletes = false;
    let mut file_value = false;
    for arg in &args[i..] {
        if REFUSED.contains(&arg.as_str()) {
            return Err(unsupported_option(arg));
        }
        deletes |= arg == "-delete";
        if file_value || arg.starts_with('/') {
            out.push(view.resolve(arg, cwd)?.host);
            file_value = false;
        } else {
            // `-newerXY` compares with a file unless Y is `t` (a date).
            file_value = FILE_TESTS.contains(&arg.as_str())
                || arg
                    .strip_prefix("-newer")
                    .is_some_and(|xy| xy.len() == 2 && !xy.ends_with('t'));
            out.push(arg.into());
        }
    }
    if deletes {
        if starts.is_empty() {
            view.writable(".", cwd)?;
        }
        starts.iter().try_for_each(|p| view.writable(p, cwd))?;
    }
    Ok(out)
}

pub(super) const TAR_SHORT_VALUES: &str = "fCTXgKNbLVHIF";
/// Options that run other programs, or write outside the target directory.
pub(super) const TAR_SHORT_REFUSED: &str = "IFP";
pub(super) const TAR_LONG_REFUSED: &[&str] = &[
    "use-compress-program",
    "to-command",
    "info-script",
    "new-volume-script",
    "rsh-command",
    "rmt-command",
    "checkpoint-action",
    "absolute-names",
];
pub(super) const TAR_LONG_VALUES: &[&str] = &[
    "file",
    "directory",
    "files-from",
    "exclude-from",
    "listed-incremental",
    "index-file",
    "volno-file",
    "exclude",
    "transform",
    "xform",
    "owner",
    "group",
    "mode",
    "mtime",
    "newer",
    "after-date",
    "newer-mtime",
    "format",
    "blocking-factor",
    "record-size",
    "strip-components",
    "label",
    "suffix",
    "starting-file",
    "tape-length",
    "sparse-version",
    "exclude-tag",
    "exclude-tag-under",
    "exclude-tag-all",
    "add-file",
    "hole-detection",
    "quoting-style",
    "quote-chars",
    "no-quote-chars",
    "level",
    "owner-map",
    "group-map",
    "pax-option",
    "warning",
];
/// Long options naming a file, relative to where tar starts.
pub(super) const TAR_LONG_PATHS: &[&str] = &[
    "files-from",
    "exclude-from",
    "listed-incremental",
    "index-file",
    "volno-file",
    "owner-map",
    "group-map",
];
pub(super) const TAR_LONG_MODES: &[(&str, char)] = &[
    ("create", 'c'),
    ("extract", 'x'),
    ("get", 'x'),
    ("list", 't'),
    ("append", 'r'),
    ("update", 'u'),
    ("diff", 'd'),
    ("compare", 'd'),
    ("delete", 'D'),
    ("concatenate", 'A'),
    ("catenate", 'A'),
];

/// One argument of a translated tar command line; operands wait until the mode is known.
pub(super) enum TarPiece {
    Done(OsString),
    Operand { text: String, dir: Option<String> },
}

/// Old-style `tar xzf file` → `tar -x -z -f file`.
pub(super) fn expand_old_tar(args: &[String]) -> Vec<String> {
    let Some((first, rest)) = args.split_first() else {
        return Vec::new();
    };
    if first.starts_with('-') || first.is_empty() {
        return args.to_vec();
    }
    let mut rest = rest.iter();
    let mut out = Vec::new();
    for c in first.chars() {
        out.push(format!("-{c}"));
        if TAR_SHORT_VALUES.contains(c) {
            out.extend(rest.next().cloned());
        }
    }
    out.extend(rest.cloned());
    out
}

/// A tar command line being translated; operands wait until the mode is known.
pub(super) struct TarLine<'a> {
    view: &'a View,
    /// The container directory relative operands and `-C`s are taken from.
    dir: Option<String>,
    pieces: Vec<TarPiece>,
    mode: Option<char>,
    archive: Option<String>,
    /// Every `-C` directory, as container paths.
    dirs: Vec<String>,
    remove_files: bool,
}

impl TarLine<'_> {
    /// Applies one option (`name` without dashes) with its value, if any.
    fn option(&mut self, name: &str, long: bool, value: Option<&str>) -> Result<(), Refusal> {
        let shown = if long {
            format!("--{name}")
        } else {
            format!("-{name}")
        };
        let is = |short: &str, full: &str| {
            if long {
                long_is(name, full)
            } else {
                name == short
            }
        };
        if (long && listed_long(name, TAR_LONG_REFUSED))
            || (!long && TAR_SHORT_REFUSED.contains(name))
        {
            return Err(unsupported_option(&shown));
        }
        if long {
            if let Some(&(_, mode)) = TAR_LONG_MODES.iter().find(|(full, _)| long_is(name, full)) {
                self.mode = Some(mode);
            }
            self.remove_files |= name == "remove-files";
        } else if "cxtrudA".contains(name) {
            self.mode = name.chars().next();
        }
        let Some(value) = value else {
            self.pieces.push(TarPiece::Done(shown.into()));
            return Ok(());
        };
        let cwd = self.view.cwd();
        let translated = if is("C", "directory") {
            let resolved = self.view.resolve(value, self.dir.as_deref())?;
            let base = self.dir.as_deref().unwrap_or("/");
            let next = normalize(&if value.starts_with('/') {
                value.to_string()
            } else {
                format!("{base}/{value}")
            });
            self.dirs.push(next.clone());
            self.dir = Some(next);
            resolved.host
        } else if is("f", "file") {
            self.archive = Some(value.to_string());
            if value == "-" {
                value.into()
            } else {
                self.view.resolve(value, cwd)?.host
            }
        } else if (!long && "TXg".contains(name)) || (long && listed_long(name, TAR_LONG_PATHS)) {
            self.view.resolve(value, cwd)?.host
        } else {
            value.into()
        };
        if long {
            let mut joined = OsString::from(format!("{shown}="));
            joined.push(translated);
            self.pieces.push(TarPiece::Done(joined));
        } else {
            self.pieces.push(TarPiece::Done(shown.into()));
            self.pieces.push(TarPiece::Done(translated));
        }
        Ok(())
    }
}

/// `tar`: `-C` directories, the archive and list files are translated; members named on
/// the command line are translated when creating (absolute ones with a transform that
/// stores them under their container names), left alone otherwise.
pub(super) fn tar_args(args: &[String], view: &View) -> Result<Vec<OsString>, Refusal> {
    let args = expand_old_tar(args);
    let cwd = view.cwd();
    let mut line = TarLine {
        view,
        dir: cwd.map(str::to_string),
        pieces: Vec::new(),
        mode: None,
        archive: None,
        dirs: Vec::new(),
        remove_files: false,
    };
    let mut only_operands = false;
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        if only_operands || arg == "-" || !arg.starts_with('-') {
            line.pieces.push(TarPiece::Operand {
                text: arg.clone(),
                dir: line.dir.clone(),
            });
        } else if arg == "--" {
            only_operands = true;
            line.pieces.push(TarPiece::Done(arg.into()));
        } else if let Some(long) = arg.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None if listed_long(long, TAR_LONG_VALUES) => {
                    i += 1;
                    (long, args.get(i - 1).map(String::as_str))
                }
                None => (long, None),
            };
            line.option(name, true, value)?;
        } else {
            let cluster = &arg[1..];
            for (pos, c) in cluster.char_indices() {
                let name = &cluster[pos..pos + c.len_utf8()];
                if TAR_SHORT_VALUES.contains(c) {
                    let attached = &cluster[pos + c.len_utf8()..];
                    let value = if attached.is_empty() {
                        i += 1;
                        args.get(i - 1).map(String::as_str)
                    } else {
                        Some(attached)
                    };
                    line.option(name, false, value)?;
                    break;
                }
                line.option(name, false, None)?;
            }
        }
    }

    let creating = matches!(line.mode, Some('c' | 'r' | 'u'));
    let mut out: Vec<OsString> = Vec::new();
    let mut transforms: Vec<OsString> = Vec::new();
    let mut absolute: Vec<String> = Vec::new();
    for piece in line.pieces {
        match piece {
            TarPiece::Done(arg) => out.push(arg),
            TarPiece::Operand { text, .. } if creating && text.starts_with('/') => {
                let resolved = view.resolve(&text, None)?;
                transforms.extend(member_transform(&resolved.host, &normalize(&text)));
                out.push(resolved.host);
                absolute.push(text);
            }
            TarPiece::Operand { text, dir } => {
                if creating && text.split('/').any(|part| part == "..") {
                    view.resolve(&text, dir.as_deref())?;
                }
                out.push(text.into());
            }
        }
    }
    if !transforms.is_empty() {
        transforms.push("--show-transformed-names".into());
        transforms.extend(out);
        out = transforms;
    }

    if line.mode == Some('x') || line.remove_files {
        if line.dirs.is_empty() && cwd.is_some() {
            view.writable(".", cwd)?;
        }
        line.dirs.iter().try_for_each(|d| view.writable(d, None))?;
    }
    if line.remove_files {
        absolute.iter().try_for_each(|p| view.writable(p, None))?;
    }
    let writes_archive = matches!(line.mode, Some('c' | 'r' | 'u' | 'A' | 'D'));
    if let Some(file) = line.archive.filter(|f| writes_archive && f != "-") {
        view.writable(&file, cwd)?;
    }
    Ok(out)
}

/// A `--transform` storing members under `host` with their container names (tar strips
/// the leading `/` first); none for a host path that is not UTF-8.
pub(super) fn member_transform(host: &std::ffi::OsStr, container: &str) -> Option<OsString> {
    let host = host
        .to_str()?
        .trim_start_matches('/')
        .trim_end_matches(['/', '.']);
    let container = container.trim_start_matches('/');
    let escape = |s: &str, special: &str| {
        s.chars().fold(String::new(), |mut out, c| {
            if special.contains(c) {
                out.push('\\');
            }
            out.push(c);
            out
        })
    };
    Some(
        format!(
            "--transform=s|^{}|{}|",
            escape(host, "\\.[]*^$|"),
            escape(container, "\\&|")
        )
        .into(),
    )
}

/// `redis-cli` always talks to the pod's own server: `-h`/`-p` are replaced, and options
/// reaching elsewhere or writing host files are refused.
pub(super) fn redis_cli_args(
    args: &[String],
    addr: SocketAddr,
    view: &View,
) -> Result<Vec<OsString>, Refusal> {
    const VALUES: &[&str] = &[
        "-a",
        "-r",
        "-i",
        "-n",
        "-d",
        "-D",
        "--user",
        "--pass",
        "--pipe-timeout",
        "--memkeys-samples",
        "--pattern",
        "--quoted-pattern",
        "--count",
        "--intrinsic-latency",
        "--lru-test",
        "--cluster",
    ];
    const REFUSED: &[&str] = &[
        "-s",
        "-u",
        "--rdb",
        "--functions-rdb",
        "--tls",
        "--cacert",
        "--cacertdir",
        "--cert",
        "--key",
        "--sni",
    ];
    let mut out: Vec<OsString> = vec![
        "-h".into(),
        addr.ip().to_string().into(),
        "-p".into(),
        addr.port().to_string().into(),
    ];
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        match arg.as_str() {
            "-h" | "-p" => i += 1,
            a if REFUSED.contains(&a) => return Err(unsupported_option(a)),
            "--eval" => {
                out.push(arg.into());
                if let Some(script) = args.get(i) {
                    out.push(view.resolve(script, view.cwd())?.host);
                }
                i += 1;
            }
            a if VALUES.contains(&a) => {
                out.push(arg.into());
                out.extend(args.get(i).map(OsString::from));
                i += 1;
            }
            a if a.starts_with('-') => out.push(arg.into()),
            // The command and its arguments, which may well look like options.
            _ => {
                out.extend(args[i - 1..].iter().map(OsString::from));
                break;
            }
        }
    }
    Ok(out)
}

/// `sleep` for at most a minute.
pub(super) fn capped_sleep(args: &[String]) -> Vec<OsString> {
    let seconds = |arg: &String| -> Option<f64> {
        let (number, unit) = match arg.char_indices().last()? {
            (i, 's') => (&arg[..i], 1.0),
            (i, 'm') => (&arg[..i], 60.0),
            (i, 'h') => (&arg[..i], 3600.0),
            (i, 'd') => (&arg[..i], 86400.0),
            _ => (arg.as_str(), 1.0),
        };
        let value: f64 = number.parse().ok()?;
        (value.is_finite() && value >= 0.0).then_some(value * unit)
    };
    if args.iter().any(|a| a.starts_with('-')) {
        // `--help`, or a negative time sleep rejects itself.
        return args.iter().map(OsString::from).collect();
    }
    match args.iter().map(seconds).sum::<Option<f64>>() {
        Some(total) if total <= SLEEP_CAP_SECS => args.iter().map(OsString::from).collect(),
        _ => vec![OsString::from(format!("{SLEEP_CAP_SECS}"))],
    }
}

/// `env` prints the environment; running a command through it is not offered.
pub(super) fn env_args(args: &[String]) -> Result<Vec<OsString>, Refusal> {
    if args.iter().all(|a| a == "-0" || a == "--null") {
        Ok(args.iter().map(OsString::from).collect())
    } else {
        Err(Refusal::Unsupported(
            "the sandbox runs env without a command only".into(),
        ))
    }
}

/// `sh -c '<command>'`: a single simple command is run as if exec'd directly.
pub(super) fn plan_shell(
    sh: &str,
    args: &[String],
    view: &View,
    redis: Option<SocketAddr>,
) -> Plan {
    let single_only = || {
        Plan::Exit {
        code: 126,
        stderr: format!(
            "{sh}: the sandbox runs single commands only: pipes, lists, redirections, expansions and globs are not supported\n"
        ),
    }
    };
    let mut rest = args.iter();
    let script = loop {
        match rest.next().map(String::as_str) {
            Some("-o") => {
                rest.next();
            }
            Some(flags) if flags.len() > 1 && flags.starts_with('-') => {
                if !flags[1..].chars().all(|c| "ceilux".contains(c)) {
                    return single_only();
                }
                if flags.contains('c') {
                    match rest.next() {
                        Some(script) => break script,
                        None => {
                            return Plan::Exit {
                                code: 2,
                                stderr: format!("{sh}: -c: option requires an argument\n"),
                            };
                        }
                    }
                }
            }
            // A script file, or a script on stdin.
            _ => return single_only(),
        }
    };
    match split_script(script) {
        Ok(words) => {
            let words = match words.split_first() {
                Some((first, rest)) if first == "exec" => rest.to_vec(),
                _ => words,
            };
            if words.is_empty() {
                return Plan::Exit {
                    code: 0,
                    stderr: String::new(),
                };
            }
            plan_in(&words, view, redis, Some(sh))
        }
        Err(ScriptError::Unsupported) => single_only(),
        Err(ScriptError::Unterminated) => Plan::Exit {
            code: 2,
            stderr: format!("{sh}: 1: Syntax error: Unterminated quoted string\n"),
        },
    }
}

#[derive(Debug, PartialEq)]
pub(super) enum ScriptError {
    /// Pipes, lists, redirections, expansions, globs, assignments.
    Unsupported,
    Unterminated,
}

/// Splits a shell script that is one simple command into its words.
pub(super) fn split_script(script: &str) -> Result<Vec<String>, ScriptError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = script.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
                // A second line is a second command.
                if chars.clone().any(|c| !c.is_whitespace()) {
                    return Err(ScriptError::Unsupported);
                }
            }
            '#' if !in_word => break,
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(ScriptError::Unterminated),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('$' | '`') => return Err(ScriptError::Unsupported),
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(ScriptError::Unterminated),
                        },
                        Some(c) => word.push(c),
                        None => return Err(ScriptError::Unterminated),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') | None => {}
                    Some(c) => word.push(c),
                }
            }
            '|' | '&' | ';' | '<' | '>' | '(' | ')' | '`' | '$' | '*' | '?' | '[' => {
                return Err(ScriptError::Unsupported);
            }
            '~' if !in_word => return Err(ScriptError::Unsupported),
            c => {
                if c == '='
                    && words.is_empty()
                    && !word.is_empty()
                    && word.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
                {
                    // `NAME=value command`: an assignment.
                    return Err(ScriptError::Unsupported);
                }
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(path: &str, host: &Path, read_only: bool) -> Mount {
        Mount {
            path: path.to_string(),
            host: host.to_path_buf(),
            read_only,
        }
    }

    #[derive(Debug, PartialEq)]
    enum Expect {
        Run(&'static str, Vec<&'static str>),
        Exit(i32, &'static str),
        NotFound(&'static str),
    }

    fn summarize(plan: Plan) -> String {
        match plan {
            Plan::Run(run) => {
                let args: Vec<String> = run
                    .args
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect();
                let program = Path::new(&run.program)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned());
                format!("run {} {}", program.unwrap_or_default(), args.join(" "))
            }
            Plan::Exit { code, stderr } => format!("exit {code} {stderr}"),
            Plan::NotFound(name) => format!("not found {name}"),
        }
    }

    fn render(expect: &Expect) -> String {
        match expect {
            Expect::Run(program, args) => format!("run {program} {}", args.join(" ")),
            Expect::Exit(code, stderr) => format!("exit {code} {stderr}"),
            Expect::NotFound(name) => format!("not found {name}"),
        }
    }

    #[test]
    fn commands_are_translated_through_the_mounts() {
        use Expect::*;
        // Host directories that do not exist: translation is lexical, and nothing below
        // a missing directory can be a symlink.
        let view = View::new(&[
            mount("/data", Path::new("/h/data"), false),
            mount("/mnt/ro/", Path::new("/h/ro"), true),
            mount("/data/nested", Path::new("/h/nested"), false),
        ]);
        let redis: Option<SocketAddr> = Some(SocketAddr::from(([127, 0, 0, 1], 7000)));
        let cases: Vec<(&[&str], Expect)> = vec![
            (&["ls", "-la", "/data/x"], Run("ls", vec!["-l", "-a", "/h/data/x"])),
            (&["/bin/ls", "/data/nested/y"], Run("ls", vec!["/h/nested/y"])),
            (&["ls", "/outside"], Exit(1, "ls: /outside: No such file or directory\n")),
            (&["cat", "/data/../etc/passwd"], Exit(1, "cat: /data/../etc/passwd: No such file or directory\n")),
            (&["cat", "x", "-"], Run("cat", vec!["/h/data/x", "-"])),
            (&["cat", "../../etc/passwd"], Exit(1, "cat: ../../etc/passwd: No such file or directory\n")),
            (&["head", "-5", "/data/x"], Run("head", vec!["-5", "/h/data/x"])),
            (&["head", "-n", "3", "/data/x"], Run("head", vec!["-n", "3", "/h/data/x"])),
            (&["tail", "--lines", "3", "/data/x"], Run("tail", vec!["--lines=3", "/h/data/x"])),
            (&["mkdir", "-pm755", "/data/x"], Run("mkdir", vec!["-p", "-m", "755", "/h/data/x"])),
            (&["mkdir", "-p", "/mnt/ro/x"], Exit(1, "mkdir: /mnt/ro/x: Read-only file system\n")),
            (&["rm", "-rf", "/data/x"], Run("rm", vec!["-r", "-f", "/h/data/x"])),
            (&["rm", "/mnt/ro/x"], Exit(1, "rm: /mnt/ro/x: Read-only file system\n")),
            (&["touch", "-r", "/mnt/ro/a", "/data/b"], Run("touch", vec!["-r", "/h/ro/a", "/h/data/b"])),
            (&["cp", "-r", "/mnt/ro/a", "/data/b/"], Run("cp", vec!["-r", "/h/ro/a", "/h/data/b/"])),
            (&["cp", "/data/a/.", "/data/b"], Run("cp", vec!["/h/data/a/.", "/h/data/b"])),
            (&["cp", "/data/a", "/mnt/ro/b"], Exit(1, "cp: /mnt/ro/b: Read-only file system\n")),
            (&["cp", "-t", "/mnt/ro", "/data/a"], Exit(1, "cp: /mnt/ro: Read-only file system\n")),
            (&["cp", "--target-directory=/data/d", "/mnt/ro/a"], Run("cp", vec!["--target-directory=/h/data/d", "/h/ro/a"])),
            (&["mv", "/mnt/ro/a", "/data/b"], Exit(1, "mv: /mnt/ro/a: Read-only file system\n")),
            (&["mv", "/data/a", "/data/b"], Run("mv", vec!["/h/data/a", "/h/data/b"])),
            (&["du", "-sh", "/mnt/ro"], Run("du", vec!["-s", "-h", "/h/ro"])),
            (&["sha256sum", "-c", "/data/SUMS"], Exit(126, "sha256sum: option '-c' is not supported in the sandbox\n")),
            (&["wc", "--files0-from=/data/l"], Exit(126, "wc: option '--files0-from' is not supported in the sandbox\n")),
            (&["stat", "-c", "%s", "/data/x"], Run("stat", vec!["-c", "%s", "/h/data/x"])),
            (&["test", "-d", "/data/x"], Run("test", vec!["-d", "/h/data/x"])),
            (&["test", "-n", "word"], Run("test", vec!["-n", "word"])),
            (&["find", "/data", "-name", "*.txt"], Run("find", vec!["/h/data", "-name", "*.txt"])),
            (&["find", "-L", ".", "-newer", "/data/ref", "-newermt", "2024-01-01"], Run("find", vec!["-L", "/h/data/.", "-newer", "/h/data/ref", "-newermt", "2024-01-01"])),
            (&["find", "/data", "-exec", "rm", "{}", ";"], Exit(126, "find: option '-exec' is not supported in the sandbox\n")),
            (&["find", "/mnt/ro", "-delete"], Exit(1, "find: /mnt/ro: Read-only file system\n")),
            (&["tar", "-xzf", "-", "-C", "/data/sub"], Run("tar", vec!["-x", "-z", "-f", "-", "-C", "/h/data/sub"])),
            (&["tar", "xf", "/mnt/ro/a.tar", "-C", "/data"], Run("tar", vec!["-x", "-f", "/h/ro/a.tar", "-C", "/h/data"])),
            (&["tar", "--directory=/data", "--extract"], Run("tar", vec!["--directory=/h/data", "--extract"])),
            (&["tar", "-x", "-C", "/mnt/ro"], Exit(1, "tar: /mnt/ro: Read-only file system\n")),
            (&["tar", "-C", "/mnt/ro", "-x"], Exit(1, "tar: /mnt/ro: Read-only file system\n")),
            (&["tar", "-C", "/data", "-C", "sub", "-x", "member"], Run("tar", vec!["-C", "/h/data", "-C", "/h/data/sub", "-x", "member"])),
            (&["tar", "-cf", "-", "-C", "/mnt/ro", "."], Run("tar", vec!["-c", "-f", "-", "-C", "/h/ro", "."])),
            (&["tar", "-cf", "/mnt/ro/out.tar", "x"], Exit(1, "tar: /mnt/ro/out.tar: Read-only file system\n")),
            (&["tar", "-c", "-C", "/data", "../../etc"], Exit(1, "tar: ../../etc: No such file or directory\n")),
            (&["tar", "-cf", "-", "/data/x"], Run("tar", vec!["--transform=s|^h/data/x|data/x|", "--show-transformed-names", "-c", "-f", "-", "/h/data/x"])),
            (&["tar", "--to-command=sh", "-x"], Exit(126, "tar: option '--to-command' is not supported in the sandbox\n")),
            (&["tar", "-xP"], Exit(126, "tar: option '-P' is not supported in the sandbox\n")),
            (&["tar", "-I", "sh", "-xf", "a"], Exit(126, "tar: option '-I' is not supported in the sandbox\n")),
            (&["sleep", "3600"], Run("sleep", vec!["60"])),
            (&["sleep", "1m", "1s"], Run("sleep", vec!["60"])),
            (&["sleep", "infinity"], Run("sleep", vec!["60"])),
            (&["sleep", "0.5"], Run("sleep", vec!["0.5"])),
            (&["echo", "/outside"], Run("echo", vec!["/outside"])),
            (&["env"], Run("env", vec![])),
            (&["env", "bash"], Exit(126, "env: the sandbox runs env without a command only\n")),
            (&["frobnicate"], NotFound("frobnicate")),
            (&["/opt/tool"], NotFound("/opt/tool")),
            (&[], NotFound("")),
            (&["sh", "-c", "ls /data"], Run("ls", vec!["/h/data"])),
            (&["/bin/bash", "-lc", "exec cat \"/data/a b\" 'x'"], Run("cat", vec!["/h/data/a b", "/h/data/x"])),
            (&["sh", "-c", "ls /data | wc -l"], Exit(126, "sh: the sandbox runs single commands only: pipes, lists, redirections, expansions and globs are not supported\n")),
            (&["bash", "-c", "echo $HOME"], Exit(126, "bash: the sandbox runs single commands only: pipes, lists, redirections, expansions and globs are not supported\n")),
            (&["sh", "-c", "ls > /data/x"], Exit(126, "sh: the sandbox runs single commands only: pipes, lists, redirections, expansions and globs are not supported\n")),
            (&["sh", "-c", "nosuch arg"], Exit(127, "sh: 1: nosuch: not found\n")),
            (&["bash", "-c", "nosuch"], Exit(127, "bash: line 1: nosuch: command not found\n")),
            (&["sh", "-c", "'open"], Exit(2, "sh: 1: Syntax error: Unterminated quoted string\n")),
            (&["sh", "-c", ""], Exit(0, "")),
            (&["sh", "script.sh"], Exit(126, "sh: the sandbox runs single commands only: pipes, lists, redirections, expansions and globs are not supported\n")),
            (&["redis-cli", "-h", "localhost", "-p", "6379", "SET", "k", "-h"], Run("redis-cli", vec!["-h", "127.0.0.1", "-p", "7000", "SET", "k", "-h"])),
            (&["redis-cli", "-n", "2", "--raw", "GET", "k"], Run("redis-cli", vec!["-h", "127.0.0.1", "-p", "7000", "-n", "2", "--raw", "GET", "k"])),
            (&["redis-cli", "--rdb", "/data/dump.rdb"], Exit(126, "redis-cli: option '--rdb' is not supported in the sandbox\n")),
        ];
        for (command, expected) in cases {
            let command: Vec<String> = command.iter().map(|s| s.to_string()).collect();
            let got = summarize(plan(&command, &view, redis));
            assert_eq!(got, render(&expected), "{command:?}");
        }
        let got = summarize(plan(&["redis-cli".to_string()], &view, None));
        assert_eq!(got, "exit 127 redis-cli: not found\n");
    }

    #[test]
    fn symlinks_out_of_the_mounts_are_not_followed() {
        let volume = tempfile::tempdir().expect("temp dir");
        let outside = tempfile::tempdir().expect("temp dir");
        std::fs::write(outside.path().join("secret"), "s").expect("write");
        #[cfg(unix)]
        std::os::unix::fs::symlink(outside.path(), volume.path().join("link")).expect("symlink");
        let view = View::new(&[mount("/data", volume.path(), false)]);
        assert!(matches!(
            view.resolve("/data/link/secret", None),
            Err(Refusal::Missing(_))
        ));
        assert!(view.resolve("/data/plain/file", None).is_ok());
    }

    #[test]
    fn scripts_split_into_words() {
        let cases: Vec<(&str, Result<Vec<&str>, ScriptError>)> = vec![
            ("ls -l /data", Ok(vec!["ls", "-l", "/data"])),
            (
                "  cat   'a b'  \"c d\" e\\ f  ",
                Ok(vec!["cat", "a b", "c d", "e f"]),
            ),
            ("echo \"say \\\"hi\\\"\"", Ok(vec!["echo", "say \"hi\""])),
            ("echo a # comment", Ok(vec!["echo", "a"])),
            ("echo 'a;b|c'", Ok(vec!["echo", "a;b|c"])),
            ("ls\n", Ok(vec!["ls"])),
            ("ls; rm x", Err(ScriptError::Unsupported)),
            ("ls && rm x", Err(ScriptError::Unsupported)),
            ("ls\nrm x", Err(ScriptError::Unsupported)),
            ("cat < x", Err(ScriptError::Unsupported)),
            ("echo \"$HOME\"", Err(ScriptError::Unsupported)),
            ("ls *.txt", Err(ScriptError::Unsupported)),
            ("ls ~", Err(ScriptError::Unsupported)),
            ("FOO=1 ls", Err(ScriptError::Unsupported)),
            ("echo 'open", Err(ScriptError::Unterminated)),
            ("echo \"open", Err(ScriptError::Unterminated)),
        ];
        for (script, expected) in cases {
            let expected =
                expected.map(|words| words.into_iter().map(String::from).collect::<Vec<_>>());
            assert_eq!(split_script(script), expected, "{script:?}");
        }
    }
}
