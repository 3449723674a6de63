//! The README's examples are produced by the binary: the quickstart plan shown there
//! must be exactly what `terrain plan` prints, and every command of the first-ten-minutes
//! walk (scenario 1 on the sandbox, with kubectl, gcloud and the aws CLI) is run and its
//! output compared with what the README shows, so the README cannot go stale.

use crate::common;

use std::io::BufRead as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The fenced block that follows the line containing `marker`.
fn block_after(readme: &str, marker: &str) -> String {
    let start = readme
        .find(marker)
        .unwrap_or_else(|| panic!("README has `{marker}`"));
    let rest = &readme[start..];
    let fence = rest.find("```").expect("a fenced block follows");
    let open = fence + rest[fence..].find('\n').expect("the fence line ends") + 1;
    let close = rest[open..].find("```").expect("the block closes") + open;
    rest[open..close].to_string()
}

#[test]
fn readme_quickstart_plan_is_what_terrain_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README");
    let work = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_terrain"))
        .args(["plan", "-s"])
        .arg(root.join("stacks/quickstart"))
        .current_dir(work.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("run terrain");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        block_after(&readme, "`cargo run -- plan -s stacks/quickstart`")
    );
}

#[test]
fn readme_stack_is_the_quickstart_stack() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README");
    let shown = block_after(
        &readme,
        "`stacks/quickstart/stack.toml` needs no cloud account",
    );
    let file =
        std::fs::read_to_string(root.join("stacks/quickstart/stack.toml")).expect("read stack");
    // The README shows the stack without its comments.
    let uncommented: String = file
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .replace("\n\n\n", "\n\n");
    let strip = |s: &str| {
        s.lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let shown_lines = strip(&shown);
    let file_lines: Vec<String> = strip(&uncommented)
        .into_iter()
        .filter(|l| !l.starts_with("description ="))
        .collect();
    assert_eq!(shown_lines, file_lines);
}

/// The README's AWS example is `stacks/eks-sagemaker` shortened: every line it shows
/// (without its trailing comment) is a line of the stack, so the example cannot drift
/// from what the end-to-end tests apply.
#[test]
fn readme_aws_example_is_the_eks_sagemaker_stack_shortened() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README");
    let shown = block_after(&readme, "Scenario 3, shortened from");
    let file =
        std::fs::read_to_string(root.join("stacks/eks-sagemaker/stack.toml")).expect("read stack");
    let words = |l: &str| l.split_whitespace().collect::<Vec<_>>().join(" ");
    let lines: std::collections::BTreeSet<String> = file.lines().map(words).collect();
    let mut shown_lines = 0;
    for line in shown.lines() {
        // A trailing comment is the README's; a `#` inside a string is not one.
        let code = match line.find(" #") {
            Some(at) if line[..at].matches('"').count() % 2 == 0 => &line[..at],
            _ => line,
        };
        let code = words(code);
        if code.is_empty() || code.starts_with('#') {
            continue;
        }
        shown_lines += 1;
        assert!(
            lines.contains(&code),
            "the README shows {code:?}, which stacks/eks-sagemaker/stack.toml does not hold"
        );
    }
    assert!(
        shown_lines > 30,
        "the example is shown ({shown_lines} lines)"
    );
}

#[test]
fn readme_error_example_is_what_terrain_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README");
    let fixture = root.join("tests/fixtures/readme-typo");
    let shown_stack = block_after(&readme, "For this stack:");
    assert_eq!(
        shown_stack,
        std::fs::read_to_string(fixture.join("stack.toml")).expect("read fixture")
    );
    let out = Command::new(env!("CARGO_BIN_EXE_terrain"))
        .args(["validate", "-s", "stack.toml"])
        .current_dir(&fixture)
        .env("NO_COLOR", "1")
        .output()
        .expect("run terrain");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        block_after(&readme, "`terrain validate -s stack.toml` prints:")
    );
}

/// One `console` block of the walk: the command after `$ ` and the output shown.
struct Shown {
    command: String,
    output: Vec<String>,
}

/// The `console` blocks of the README section headed `heading`.
fn console_blocks(readme: &str, heading: &str) -> Vec<Shown> {
    let start = readme
        .find(heading)
        .unwrap_or_else(|| panic!("README has `{heading}`"));
    let section = &readme[start + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let mut blocks = Vec::new();
    let mut rest = section;
    while let Some(open) = rest.find("```console\n") {
        let body = &rest[open + "```console\n".len()..];
        let close = body.find("```").expect("the block closes");
        let mut lines = body[..close].lines();
        let command = lines
            .next()
            .and_then(|l| l.strip_prefix("$ "))
            .expect("a console block starts with `$ command`")
            .to_string();
        blocks.push(Shown {
            command,
            output: lines.map(str::to_string).collect(),
        });
        rest = &body[close + 3..];
    }
    blocks
}

/// What may differ between the README and a correct run: ports, ids, times, durations,
/// ages, the random suffix of a Job's pod.
fn comparable(line: &str) -> String {
    let line = common::normalise(&common::stable(line));
    line.split_inclusive(' ')
        .map(|word| {
            let core = word.trim_end();
            let tail = &word[core.len()..];
            let (lead, inner) = match core.find(|c: char| c.is_ascii_digit()) {
                Some(i) if core[..i].chars().all(|c| "([".contains(c)) => core.split_at(i),
                _ => ("", core),
            };
            let inner_trim = inner.trim_end_matches([')', ']', ',']);
            let closing = &inner[inner_trim.len()..];
            if is_duration(inner_trim) {
                format!("{lead}<T>{closing}{tail}")
            } else if let Some((name, suffix)) = core.rsplit_once('-') {
                // Pod names end in five characters of Kubernetes' random alphabet.
                let random = suffix.len() == 5
                    && suffix
                        .chars()
                        .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c));
                if random {
                    format!("{name}-<RND>{tail}")
                } else {
                    word.to_string()
                }
            } else {
                word.to_string()
            }
        })
        .collect::<String>()
        .trim_end()
        .to_string()
}

/// `12s`, `0.8s`, `3m4s`, `2h`.
fn is_duration(word: &str) -> bool {
    let mut rest = word;
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 || digits == rest.len() {
            return false;
        }
        // Not a byte slice: what follows the digits may be any character (`0–4`).
        let Some(unit) = rest[digits..]
            .chars()
            .next()
            .filter(|c| "smhd".contains(*c))
        else {
            return false;
        };
        rest = &rest[digits + unit.len_utf8()..];
        parts += 1;
    }
    parts > 0
}

/// Whether `actual` is what the README shows: the shown lines, split at `…` lines into
/// runs that must appear whole and in order (anchored at either end unless a `…` is
/// there), after [`comparable`].
fn check_shown(shown: &Shown, actual: &str) {
    let actual: Vec<String> = actual.lines().map(comparable).collect();
    let lines: Vec<String> = shown.output.iter().map(|l| comparable(l)).collect();
    let runs: Vec<&[String]> = lines.split(|l| l == "…").collect();
    let fail = |why: &str| -> ! {
        panic!(
            "README block `$ {}` is not what the command printed ({why})\n--- shown ---\n{}\n--- printed ---\n{}",
            shown.command,
            shown.output.join("\n"),
            actual.join("\n")
        )
    };
    let mut at = 0;
    for (i, run) in runs.iter().enumerate() {
        if run.is_empty() {
            continue;
        }
        let anchored = i == 0;
        let found = (at..=actual.len().saturating_sub(run.len()))
            .find(|&j| actual.len() >= j + run.len() && &actual[j..j + run.len()] == *run);
        match found {
            Some(j) if !anchored || j == 0 => at = j + run.len(),
            _ => fail(&format!("these lines, in order: {run:#?}")),
        }
    }
    if runs.last().is_some_and(|r| !r.is_empty()) && at != actual.len() {
        fail("the output goes on after the last line shown");
    }
}

/// Runs each `terrain` block of a README section in `work` (with `envs`), each of which
/// must succeed and print what the README shows.
fn run_terrain_blocks(work: &common::Sandbox, blocks: &[Shown], envs: &[(&str, &str)]) {
    for shown in blocks {
        let words: Vec<&str> = shown.command.split_whitespace().collect();
        assert_eq!(words[0], "terrain", "{}", shown.command);
        let run = work.run_env(&words[1..], envs);
        run.success();
        check_shown(shown, &run.stdout);
    }
}

/// The README's walk through scenario 1, every command run as the README shows it.
#[test]
fn readme_walkthrough_is_what_terrain_and_kubectl_print() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README");
    let blocks = console_blocks(&readme, "## Your first ten minutes");
    assert!(blocks.len() >= 8, "the walk has its commands");
    // A new user's sandbox: its projects start with their APIs off.
    let work = common::Sandbox::new().fresh_projects();
    common::copy_dir(
        &root.join("stacks/gke-batch-ml"),
        &work.join("stacks/gke-batch-ml"),
    );
    common::copy_dir(&root.join("stacks/modules"), &work.join("stacks/modules"));
    let kubectl_runs = Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success());

    // The first block is the sandbox kept running in a second terminal.
    let serve = &blocks[0];
    assert_eq!(serve.command, "terrain sandbox serve");
    let mut child = work
        .command(&["sandbox", "serve"], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start terrain sandbox serve");
    let printed = Arc::new(Mutex::new(Vec::<String>::new()));
    let stdout = child.stdout.take().expect("piped stdout");
    let sink = printed.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            sink.lock().expect("lock").push(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while printed.lock().expect("lock").len() < serve.output.len() {
        assert!(Instant::now() < deadline, "serve printed its banner");
        std::thread::sleep(Duration::from_millis(20));
    }
    let banner = printed.lock().expect("lock")[..serve.output.len()].join("\n");
    // The README shows the clone as /home/you/terrain: the banner's paths are absolute.
    let banner = banner.replace(&work.path().display().to_string(), "/home/you/terrain");
    check_shown(serve, &banner);

    // gcloud and the aws CLI run with what the banner exports, the aws CLI at the
    // sandbox's port (the README shows the one it was written with), from a config of
    // their own.
    let exports: Vec<(String, String)> = printed.lock().expect("lock")[..serve.output.len()]
        .iter()
        .filter_map(|l| l.trim().strip_prefix("export "))
        .flat_map(|l| l.split_whitespace())
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let url = printed.lock().expect("lock")[0]
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .expect("the banner names the sandbox's URL")
        .to_string();
    let home = tempfile::tempdir().expect("a home for the clients");
    let installed = |program: &str| {
        Command::new(program)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    for shown in &blocks[1..] {
        let words: Vec<&str> = shown.command.split_whitespace().collect();
        let output = match words[0] {
            "terrain" => {
                let run = work.run(&words[1..]);
                run.success();
                run.stdout
            }
            "gcloud" | "aws" if !installed(words[0]) => {
                eprintln!(
                    "{} is not installed; skipping `{}`",
                    words[0], shown.command
                );
                continue;
            }
            "gcloud" | "aws" => {
                let args: Vec<String> = words[1..]
                    .iter()
                    .map(|w| {
                        if w.starts_with("http://127.0.0.1:") {
                            url.clone()
                        } else {
                            w.to_string()
                        }
                    })
                    .collect();
                let out = Command::new(words[0])
                    .args(&args)
                    .envs(exports.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                    .env("HOME", home.path())
                    .env("CLOUDSDK_CONFIG", home.path().join("gcloud"))
                    .env("CLOUDSDK_CORE_DISABLE_PROMPTS", "1")
                    .env("AWS_CONFIG_FILE", home.path().join("aws-config"))
                    .env(
                        "AWS_SHARED_CREDENTIALS_FILE",
                        home.path().join("aws-credentials"),
                    )
                    .current_dir(work.path())
                    .output()
                    .expect("run the cloud CLI");
                assert!(
                    out.status.success(),
                    "{}: {}",
                    shown.command,
                    String::from_utf8_lossy(&out.stderr)
                );
                String::from_utf8_lossy(&out.stdout).into_owned()
            }
            "kubectl" if !kubectl_runs => {
                eprintln!("kubectl not runnable; skipping `{}`", shown.command);
                continue;
            }
            "kubectl" if words.contains(&"port-forward") => port_forward(&work, &words[1..]),
            "kubectl" => {
                let out = Command::new("kubectl")
                    .args(&words[1..])
                    .current_dir(work.path())
                    .output()
                    .expect("run kubectl");
                assert!(
                    out.status.success(),
                    "{}: {}",
                    shown.command,
                    String::from_utf8_lossy(&out.stderr)
                );
                String::from_utf8_lossy(&out.stdout).into_owned()
            }
            other => panic!("the walk runs terrain, kubectl, gcloud and aws, not {other}"),
        };
        check_shown(shown, &output);
    }

    // Ctrl-C stops the sandbox; what it held is kept.
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait for serve").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("terrain sandbox serve did not stop on SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!work.exists("state/sandbox/serve.json"), "serve cleans up");
}

/// Runs `kubectl port-forward` as the README shows it until it says it forwards, then
/// talks to Redis through the forwarded port (PING answers PONG) and stops it as Ctrl-C
/// would. Returns what it printed.
fn port_forward(work: &common::Sandbox, args: &[&str]) -> String {
    use std::io::{Read as _, Write as _};
    // The README's local port may be taken on this machine: a free one stands in for it
    // (ports are compared as PORT).
    let local = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free local port")
        .port();
    let args: Vec<String> = args
        .iter()
        .map(|a| match a.split_once(':') {
            Some((l, remote)) if l.parse::<u16>().is_ok() => format!("{local}:{remote}"),
            _ => a.to_string(),
        })
        .collect();
    let mut child = Command::new("kubectl")
        .args(&args)
        .current_dir(work.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kubectl port-forward");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(30));
    let Ok(first) = first else {
        let _ = child.kill();
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        panic!("kubectl port-forward printed nothing: {err}");
    };
    let mut conn =
        std::net::TcpStream::connect(("127.0.0.1", local)).expect("connect to the forwarded port");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    conn.write_all(b"*1\r\n$4\r\nPING\r\n").expect("send PING");
    let mut reply = [0u8; 7];
    conn.read_exact(&mut reply)
        .expect("Redis answers through the tunnel");
    assert_eq!(&reply, b"+PONG\r\n");
    drop(conn);
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let mut lines = vec![first];
    lines.extend(rx.try_iter());
    lines.join("\n") + "\n"
}

#[test]
fn readme_comparisons_catch_what_they_should() {
    // Regression: a range with an en dash (`0–4`) panicked the duration check.
    assert_eq!(comparable("0–4 nodes"), "0–4 nodes");
    assert_eq!(
        comparable("redis-leader     1/1     Running     0          21s"),
        comparable("redis-leader     1/1     Running     0          5s")
    );
    assert_eq!(
        comparable("workload-sjgn7   0/1     Completed   0          2s"),
        comparable("workload-bxkzq   0/1     Completed   0          10s")
    );
    assert_eq!(
        comparable("Progress: 25% (0.8s)"),
        comparable("Progress: 25% (0.0s)")
    );
    assert_ne!(
        comparable("kubernetes_job.workload           ready      Complete (1/1 succeeded)"),
        comparable("kubernetes_job.workload           ready      Failed (0/1 succeeded)")
    );
    let shown = Shown {
        command: "x".into(),
        output: vec!["a".into(), "…".into(), "c".into()],
    };
    check_shown(&shown, "a\nb\nc");
    let missing = std::panic::catch_unwind(|| check_shown(&shown, "a\nb\nd"));
    assert!(missing.is_err(), "a line not printed fails");
    let unordered = std::panic::catch_unwind(|| check_shown(&shown, "c\na"));
    assert!(unordered.is_err(), "order matters");
}

/// The README's team walk: `stacks/team` on the sandbox, its state in the sandbox's S3,
/// every command run as the README shows it.
#[test]
fn readme_team_walk_is_what_terrain_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README");
    let blocks = console_blocks(&readme, "## Working as a team");
    assert!(blocks.len() >= 4, "the walk has its commands");
    let shown_stack = block_after(&readme, "`stacks/team` keeps it in S3");
    let stack = std::fs::read_to_string(root.join("stacks/team/stack.toml")).expect("read stack");
    for line in shown_stack.lines().filter(|l| !l.is_empty()) {
        assert!(
            stack.lines().any(|s| s == line),
            "README shows `{line}`, which stacks/team/stack.toml does not have"
        );
    }
    let work = common::Sandbox::new();
    common::copy_dir(&root.join("stacks/team"), &work.join("stacks/team"));
    run_terrain_blocks(&work, &blocks, &[]);
}

/// The README's cost section: its commands print what it shows, and the budget it
/// shows is one a stack takes.
#[test]
fn readme_cost_walk_is_what_terrain_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README");
    let blocks = console_blocks(&readme, "## What will it cost?");
    assert!(blocks.len() >= 3, "the walk has its commands");
    let work = common::Sandbox::new();
    common::copy_dir(
        &root.join("stacks/gke-accelerators"),
        &work.join("stacks/gke-accelerators"),
    );
    common::copy_dir(&root.join("stacks/modules"), &work.join("stacks/modules"));
    run_terrain_blocks(&work, &blocks, &[]);
    let budget = block_after(&readme, "names what drives the cost:");
    let stack = work.join("stacks/gke-accelerators/stack.toml");
    let text = std::fs::read_to_string(&stack).expect("read the stack");
    let table = budget
        .trim()
        .strip_prefix("[stack]\n")
        .expect("a [stack] table");
    std::fs::write(
        &stack,
        text.replacen("[stack]\n", &format!("[stack]\n{table}\n"), 1),
    )
    .expect("write the stack");
    let run = work.run(&["plan", "-s", "stacks/gke-accelerators", "--sandbox"]);
    run.expect_code(1);
    assert!(
        run.stderr.contains("over the stack's budget"),
        "{}",
        run.stderr
    );
}

/// The README's section on capacity: a warning for a quota enough only to start, and a
/// plan stopped by a T4 quota of 0, set in the sandbox as the README says.
#[test]
fn readme_capacity_walk_is_what_terrain_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README");
    let blocks = console_blocks(&readme, "## Will it fit?");
    assert!(blocks.len() >= 2, "the walk has its commands");
    let work = common::Sandbox::new();
    for s in ["gke-accelerators", "gke-gpu-pipelines"] {
        common::copy_dir(
            &root.join("stacks").join(s),
            &work.join(&format!("stacks/{s}")),
        );
    }
    common::copy_dir(&root.join("stacks/modules"), &work.join("stacks/modules"));
    for shown in &blocks {
        // `VAR='value' terrain …`: the value is the sandbox's capacity.
        let (envs, command) = match shown.command.strip_prefix("TERRAIN_SANDBOX_CAPACITY='") {
            Some(rest) => {
                let (value, command) = rest.split_once("' ").expect("a quoted value");
                (vec![("TERRAIN_SANDBOX_CAPACITY", value)], command)
            }
            None => (Vec::new(), shown.command.as_str()),
        };
        let words: Vec<&str> = command.split_whitespace().collect();
        assert_eq!(words[0], "terrain", "{}", shown.command);
        let run = work.run_env(&words[1..], &envs);
        if shown
            .output
            .first()
            .is_some_and(|l| l.starts_with("Error:"))
        {
            run.expect_code(1);
            check_shown(shown, &run.stderr);
        } else {
            run.success();
            check_shown(shown, &run.stdout);
        }
    }
    // The fallback the section shows is a valid pool on a cluster the stack makes.
    let section = &readme[readme.find("## Will it fit?").expect("section")..];
    let open = section.find("```toml\n").expect("a TOML block") + "```toml\n".len();
    let snippet = &section[open..open + section[open..].find("```").expect("it closes")];
    assert!(snippet.contains("fallback = {"), "{snippet}");
    work.write(
        "fallback/stack.toml",
        &format!(
            "[providers.gcp]\nproject = \"ml-project\"\nregion = \"us-central1\"\n\n[gke_cluster.ml]\nname = \"ml\"\nlocation = \"us-central1-a\"\nmode = \"standard\"\n\n{snippet}"
        ),
    );
    work.run(&["validate", "-s", "fallback"]).success();
}

/// The README's section on guardrails and reviews: the shipped policies' tests, a plan
/// held to them with its warning, the deny shown when a taint is taken away, and the
/// pull-request comment's opening, each what terrain prints.
#[test]
fn readme_guardrails_walk_is_what_terrain_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README");
    let heading = "## Guardrails and reviews";
    let blocks = console_blocks(&readme, heading);
    assert!(blocks.len() >= 2, "the walk has its commands");
    let work = common::Sandbox::new();
    for s in [
        "gke-accelerators",
        "gke-batch-ml",
        "gke-gpu-pipelines",
        "modules",
        "policies",
    ] {
        common::copy_dir(
            &root.join("stacks").join(s),
            &work.join(&format!("stacks/{s}")),
        );
    }
    run_terrain_blocks(&work, &blocks, &[]);

    // The deny, as the README shows it.
    let denied = block_after(&readme, "preemptible pool and the plan stops:");
    work.set_value(
        "stacks/gke-gpu-pipelines/stack.toml",
        "taints",
        "[\"preemptible=true:NoSchedule\"]",
        "[]",
    );
    let run = work.run(&[
        "plan",
        "-s",
        "stacks/gke-gpu-pipelines",
        "--sandbox",
        "--policy",
        "stacks/policies",
    ]);
    run.expect_code(1);
    assert_eq!(run.stderr, denied, "README shows the deny terrain prints");

    // The comment's opening, with its elisions.
    let section = &readme[readme.find(heading).expect("section")..];
    let open = section.find("````markdown\n").expect("a Markdown block") + "````markdown\n".len();
    let close = open + section[open..].find("````").expect("it closes");
    let shown = Shown {
        command: "terrain plan -s stacks/gke-batch-ml --sandbox --markdown".to_string(),
        output: section[open..close].lines().map(str::to_string).collect(),
    };
    let run = work.run(&[
        "plan",
        "-s",
        "stacks/gke-batch-ml",
        "--sandbox",
        "--markdown",
    ]);
    run.success();
    check_shown(&shown, &run.stdout);
}

/// The README's section on count, for_each, modules and provider instances: its TOML
/// is `stacks/multi-region-gpu`'s, or `stacks/eks-sagemaker`'s for the switch between
/// its two ACK controllers (the moved entry is the engine tests' to prove), and its
/// commands print what it shows.
#[test]
fn readme_reuse_walk_is_what_terrain_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README");
    let heading = "## Stacks that scale";
    let blocks = console_blocks(&readme, heading);
    assert_eq!(blocks.len(), 2, "the walk has its commands");
    let stack = std::fs::read_to_string(root.join("stacks/multi-region-gpu/stack.toml"))
        .expect("read stack");
    let switch =
        std::fs::read_to_string(root.join("stacks/eks-sagemaker/stack.toml")).expect("read stack");
    let section = &readme[readme.find(heading).expect("section")..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut rest = section;
    let mut snippets = 0;
    while let Some(open) = rest.find("```toml\n") {
        let body = &rest[open + "```toml\n".len()..];
        let close = body.find("```").expect("the block closes");
        let snippet = &body[..close];
        if !snippet.contains("[[moved]]") {
            let (name, text) = if snippet.contains("ack_controller") {
                ("eks-sagemaker", &switch)
            } else {
                ("multi-region-gpu", &stack)
            };
            for line in snippet.lines().filter(|l| !l.is_empty()) {
                assert!(
                    text.lines().any(|s| s == line),
                    "README shows `{line}`, which stacks/{name}/stack.toml does not have"
                );
            }
            snippets += 1;
        }
        rest = &body[close + 3..];
    }
    assert_eq!(
        snippets, 4,
        "count/for_each, switch, module and provider snippets"
    );
    let work = common::Sandbox::new();
    common::copy_dir(
        &root.join("stacks/multi-region-gpu"),
        &work.join("stacks/multi-region-gpu"),
    );
    common::copy_dir(&root.join("stacks/modules"), &work.join("stacks/modules"));
    run_terrain_blocks(&work, &blocks, &[("TERRAIN_SANDBOX_TIME_SCALE", "0.2")]);
}

/// The README's adoption walk: scenario 1 built by hand (the cluster and share by a
/// stack of their own, standing in for gcloud; the workload with kubectl, as its guide
/// has it) on a running sandbox, then every command of the section as shown, the
/// blocks and the Job's YAML as the README shows them, and `fmt --check` over the
/// example stacks.
#[test]
fn readme_adoption_walk_is_what_terrain_prints() {
    let kubectl_runs = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !kubectl_runs {
        eprintln!("kubectl is not installed here: the adoption walk was NOT run");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README");
    let heading = "## Adopting what was built by hand";
    let blocks = console_blocks(&readme, heading);
    assert!(blocks.len() >= 6, "the walk has its commands");
    let work = common::Sandbox::new();
    common::copy_dir(&root.join("stacks"), &work.join("stacks"));
    work.write(
        "adopted/stack.toml",
        &block_after(
            &readme,
            "The\nstack that adopts it starts with its provider only:",
        ),
    );
    work.write("by-gcloud/stack.toml", &common::by_hand_stack("by-gcloud"));
    struct Serving(std::process::Child);
    impl Drop for Serving {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut serve = work
        .command(
            &["sandbox", "serve"],
            &[("TERRAIN_SANDBOX_TIME_SCALE", "0")],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start terrain sandbox serve");
    let stdout = serve.stdout.take().expect("piped stdout");
    let _serving = Serving(serve);
    let mut lines = std::io::BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        if line
            .expect("a banner line")
            .contains("<cluster>.kubeconfig")
        {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    work.run(&[
        "apply",
        "-s",
        "by-gcloud",
        "--sandbox",
        "--auto-approve",
        "--state",
        "state/by-gcloud.json",
    ])
    .success();
    let made = work.json("state/sandbox/by-gcloud.json");
    let ip = made["resources"]["filestore_instance.nfs"]["outputs"]["ip_address"]
        .as_str()
        .unwrap_or_else(|| panic!("the share has an IP: {made:#}"))
        .to_string();
    common::build_by_hand(&work.join("state/sandbox/kube/batch-aiml.kubeconfig"), &ip);

    run_terrain_blocks(&work, &blocks, &[]);

    let stack = work.read("adopted/stack.toml");
    let shown = block_after(&readme, "The blocks it wrote:");
    assert!(
        stack.ends_with(&shown),
        "README shows the blocks import wrote\n--- shown ---\n{shown}\n--- written ---\n{stack}"
    );
    assert_eq!(
        work.read("adopted/manifests/job-workload.yaml"),
        block_after(&readme, "The Job, `adopted/manifests/job-workload.yaml`:"),
        "README shows the Job's YAML import wrote"
    );
}

/// The README's "Running terrain in the cluster" walk, run as written: `terrain sandbox
/// serve` in one terminal, the block of commands in another (bash, `set -e`), from a
/// directory holding the repository's `deploy/`. The bucket the approved plan makes is
/// then in the sandbox.
#[test]
fn readme_running_terrain_in_the_cluster_walk_runs_on_the_sandbox() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README");
    let section = &readme[readme
        .find("## Running terrain in the cluster")
        .expect("the section")..];
    assert_eq!(
        block_after(section, "In one terminal:").trim(),
        "terrain sandbox serve"
    );
    let walk = block_after(section, "In another, from the repository's root:");
    let work = tempfile::tempdir().expect("temp dir");
    common::copy_dir(&root.join("deploy"), &work.path().join("deploy"));
    let bin = Path::new(env!("CARGO_BIN_EXE_terrain"))
        .parent()
        .expect("bin dir")
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut serve = Command::new(env!("CARGO_BIN_EXE_terrain"))
        .args(["sandbox", "serve"])
        .current_dir(work.path())
        .env("TERRAIN_SANDBOX_TIME_SCALE", "0.01")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("terrain sandbox serve");
    let served = work.path().join("state/sandbox/serve.json");
    let start = Instant::now();
    while !served.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the sandbox serves"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let script =
        format!("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{walk}");
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(work.path())
        .env("PATH", &path)
        .env("NO_COLOR", "1")
        .output()
        .expect("bash");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = Command::new(env!("CARGO_BIN_EXE_terrain"))
        .args(["sandbox", "list"])
        .current_dir(work.path())
        .output()
        .expect("terrain sandbox list");
    let _ = serve.kill();
    let _ = serve.wait();
    assert!(
        out.status.success(),
        "the walk failed:\n{text}\nthe operator's log:\n{}",
        std::fs::read_to_string(work.path().join("state/operator.log")).unwrap_or_default()
    );
    assert!(
        text.contains("Approved plan sha256:")
            && text.contains("Ready        True")
            && text.contains("+ gcs_bucket.data will be created"),
        "{text}"
    );
    let inventory = String::from_utf8_lossy(&listed.stdout);
    assert!(inventory.contains("ops-data-bucket"), "{inventory}");
}
