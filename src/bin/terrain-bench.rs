//! `terrain-bench`: the hand-run performance benchmark of the engine, quoted in release
//! notes. This file owns the whole benchmark: generating synthetic stacks, running
//! plan → apply → re-plan against [`TestCloud`] with a [`LocalBackend`] state file,
//! measuring wall time and peak RSS, and printing the report table. It prints figures
//! and PASS/MISS against the targets for information only; a missed target never
//! makes it fail (only a broken run does).
//!
//! Each (N, latency) configuration runs in child processes (the binary re-executes
//! itself with the hidden `--one` and `--replan` arguments) so that peak RSS (`VmHWM`)
//! does not accumulate across runs: `--one` loads, plans and applies; `--replan` is a
//! fresh process, like a later `terrain plan`, that refreshes all N resources.
//!
//! ```text
//! cargo build --release --bin terrain-bench
//! target/release/terrain-bench [--quick] [--parallelism P]
//! ```

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use clap::Parser;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use terrain::engine::{Engine, Quiet, Settings};
use terrain::plan::Action;
use terrain::stack::{self, BackendConfig, LoadOptions, Stack};
use terrain::state::local::LocalBackend;
use terrain::state::{Backend, LockInfo, State, StateError};
use terrain::walk::Cancel;
use terrain_providers::testing::TestCloud;
use terrain_providers::Registry;

/// Resource counts of a full run.
const SIZES: [usize; 3] = [100, 1_000, 10_000];
/// Resource counts of a `--quick` run.
const QUICK_SIZES: [usize; 2] = [100, 1_000];
/// Simulated latency of every provider call, in milliseconds.
const LATENCIES_MS: [u64; 2] = [0, 20];
/// Resources per generated stack file.
const PER_FILE: usize = 1_000;
/// Rounds of the state save micro-benchmark.
const SAVE_ROUNDS: u32 = 5;
/// Marks the child's result line on its stdout.
const RESULT_PREFIX: &str = "@terrain-bench-result ";

/// Targets (informational).
const PLAN_TARGET_N: usize = 10_000;
const PLAN_TARGET_SECS: f64 = 2.0;
const PLAN_TARGET_MIB: f64 = 200.0;
const LATENCY_TARGET_RATIO: f64 = 1.3;

#[derive(Parser, Debug)]
#[command(
    name = "terrain-bench",
    about = "Benchmarks terrain's plan, apply and refresh on synthetic stacks of 100 to 10,000 resources"
)]
struct Args {
    /// Only N = 100 and 1,000 (a minute or less).
    #[arg(long)]
    quick: bool,
    /// Provider operations in flight at once (as `terrain apply --parallelism`).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    parallelism: u16,
    /// Length of each dependency chain in the generated stack (its graph depth).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    chain: u16,
    /// Child: load, plan and apply N resources at LATENCY_MS, print the result line.
    #[arg(long, hide = true, num_args = 2, value_names = ["N", "LATENCY_MS"])]
    one: Option<Vec<u64>>,
    /// Child: re-plan (full refresh) the stack and state `--one` left in `--dir`.
    #[arg(long, hide = true, num_args = 2, value_names = ["N", "LATENCY_MS"])]
    replan: Option<Vec<u64>>,
    /// Child: the working directory the parent made for this configuration.
    #[arg(long, hide = true)]
    dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match (&args.one, &args.replan) {
        (None, None) => parent(&args),
        (Some(one), _) => child(&args, one, Child::One),
        (None, Some(replan)) => child(&args, replan, Child::Replan),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("terrain-bench: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Results passed from child to parent (one JSON line on the child's stdout).

/// One measured phase: wall time and the peak RSS reached during it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Phase {
    secs: f64,
    /// VmHWM at the end of the phase, in KiB; the high-water mark is reset between
    /// phases when the kernel allows it (see `peak_reset`).
    peak_kib: Option<u64>,
}

/// What `--one` measured.
#[derive(Debug, Serialize, Deserialize)]
struct OneResult {
    load: Phase,
    plan: Phase,
    apply: Phase,
    /// Whether `/proc/self/clear_refs` reset the peak between phases; when false each
    /// phase's peak also covers the phases before it.
    peak_reset: bool,
    /// `Backend::save` calls during the apply, and the time spent in them.
    saves: u64,
    save_total_secs: f64,
    save_max_secs: f64,
    /// The micro-benchmark on the applied state.
    state_bytes: usize,
    clone_secs: f64,
    serialize_secs: f64,
    save_secs: f64,
}

/// What `--replan` measured.
#[derive(Debug, Serialize, Deserialize)]
struct ReplanResult {
    load: Phase,
    plan: Phase,
    peak_reset: bool,
    /// Resources refreshed (provider reads).
    reads: usize,
    /// Changes the re-plan proposed (0 when all is in sync, as it should be).
    changes: usize,
}

// ---------------------------------------------------------------------------------------
// Children.

#[derive(Clone, Copy)]
enum Child {
    One,
    Replan,
}

fn child(args: &Args, nl: &[u64], which: Child) -> Result<()> {
    let [n, latency_ms] = nl else { bail!("expected N and LATENCY_MS") };
    let n = usize::try_from(*n).context("N does not fit in usize")?;
    let latency = Duration::from_millis(*latency_ms);
    let dir = args.dir.clone().context("--dir is required with --one and --replan")?;
    let parallelism = usize::from(args.parallelism);
    let chain = usize::from(args.chain);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    let line = match which {
        Child::One => serde_json::to_string(&runtime.block_on(run_one(n, latency, parallelism, chain, &dir))?)?,
        Child::Replan => serde_json::to_string(&runtime.block_on(run_replan(n, latency, parallelism, &dir))?)?,
    };
    println!("{RESULT_PREFIX}{line}");
    Ok(())
}

/// A cloud with `latency` per call and call recording off (the log's growth is not
/// what is measured).
fn cloud(latency: Duration) -> TestCloud {
    let cloud = TestCloud::new();
    cloud.set_recording(false);
    cloud.set_latency(latency);
    cloud
}

fn load_stack(stack_dir: &Path, registry: &Registry) -> Result<Stack> {
    let env = |k: &str| std::env::var(k).ok();
    let stack = stack::load(&LoadOptions {
        path: stack_dir,
        vars: &[],
        env: &env,
        registry,
    })?;
    Ok(stack)
}

fn state_path(stack: &Stack) -> PathBuf {
    match &stack.backend {
        BackendConfig::Local { path } => path.clone(),
    }
}

fn engine(stack: Stack, registry: Registry, backend: Arc<dyn Backend>, parallelism: usize) -> Engine {
    Engine {
        stack,
        registry,
        backend,
        settings: Settings {
            parallelism,
            ..Settings::default()
        },
        observer: Arc::new(Quiet),
        cancel: Cancel::new(),
    }
}

/// Ends a phase started at `started`: its wall time, then its peak RSS, then resets the
/// peak for the next phase.
fn end_phase(started: Instant, peak_reset: &mut bool) -> Phase {
    let secs = started.elapsed().as_secs_f64();
    let peak_kib = vm_hwm_kib();
    *peak_reset &= reset_peak();
    Phase { secs, peak_kib }
}

async fn run_one(n: usize, latency: Duration, parallelism: usize, chain: usize, dir: &Path) -> Result<OneResult> {
    let stack_dir = write_stack(dir, n, chain)?;
    let cloud = cloud(latency);
    let registry = cloud.registry();
    let mut peak_reset = true;

    let started = Instant::now();
    let stack = load_stack(&stack_dir, &registry)?;
    let load = end_phase(started, &mut peak_reset);

    let backend = Arc::new(CountingBackend::new(LocalBackend::new(state_path(&stack))));
    let engine = engine(stack, registry, backend.clone(), parallelism);
    let stack_path = stack_dir.display().to_string();

    let started = Instant::now();
    let (plan, state) = engine.plan(false, &[], &stack_path, &[]).await.context("first plan")?;
    let plan_phase = end_phase(started, &mut peak_reset);
    let creates = plan.changes.iter().filter(|c| c.action == Action::Create).count();
    if creates != n || plan.changes.len() != n {
        bail!("first plan: expected {n} creates, got {creates} of {} changes", plan.changes.len());
    }

    let started = Instant::now();
    let report = engine.apply(&plan, state).await.context("apply")?;
    let apply = end_phase(started, &mut peak_reset);
    if report.created != n {
        bail!("apply: expected {n} creates, made {}", report.created);
    }
    let (saves, save_total_secs, save_max_secs) = backend.stats();
    drop(plan);

    // What one state save costs at this size, and its parts.
    let state = backend.load().await?.context("no state after apply")?;
    let bench = save_bench(&state, dir).await?;
    Ok(OneResult {
        load,
        plan: plan_phase,
        apply,
        peak_reset,
        saves,
        save_total_secs,
        save_max_secs,
        state_bytes: bench.bytes,
        clone_secs: bench.clone_secs,
        serialize_secs: bench.serialize_secs,
        save_secs: bench.save_secs,
    })
}

async fn run_replan(n: usize, latency: Duration, parallelism: usize, dir: &Path) -> Result<ReplanResult> {
    let stack_dir = dir.join("stack");
    let cloud = cloud(latency);
    let registry = cloud.registry();
    let mut peak_reset = true;

    let started = Instant::now();
    let stack = load_stack(&stack_dir, &registry)?;
    let load = end_phase(started, &mut peak_reset);

    // The cloud lives in memory: give this process's cloud the objects `--one` made,
    // exactly as the state records them, so the refresh finds every one in sync.
    let backend: Arc<dyn Backend> = Arc::new(LocalBackend::new(state_path(&stack)));
    let recorded = backend.load().await?.context("no state: run --one first")?;
    if recorded.resources.len() != n {
        bail!("the state holds {} resources, expected {n}", recorded.resources.len());
    }
    for r in recorded.resources.values() {
        let id = r.id.as_deref().context("a resource in the state has no id")?;
        cloud.set_live(id, r.spec.clone());
    }
    drop(recorded);
    peak_reset &= reset_peak();

    let engine = engine(stack, registry, backend, parallelism);
    let stack_path = stack_dir.display().to_string();
    let started = Instant::now();
    let (plan, state) = engine.plan(false, &[], &stack_path, &[]).await.context("re-plan")?;
    let plan_phase = end_phase(started, &mut peak_reset);
    let changes = plan.changes.iter().filter(|c| c.action != Action::NoOp || c.drift.is_some()).count();
    Ok(ReplanResult {
        load,
        plan: plan_phase,
        peak_reset,
        reads: state.resources.len(),
        changes,
    })
}

struct SaveBench {
    bytes: usize,
    clone_secs: f64,
    serialize_secs: f64,
    save_secs: f64,
}

/// Times, on `state`, what a state save is made of: cloning the state (the engine
/// snapshots it under its lock), serializing it, and a whole `LocalBackend::save`
/// (serialize, write a temp file, fsync, keep the backup, rename, fsync the directory).
async fn save_bench(state: &State, dir: &Path) -> Result<SaveBench> {
    let rounds = f64::from(SAVE_ROUNDS);
    let started = Instant::now();
    for _ in 0..SAVE_ROUNDS {
        std::hint::black_box(state.clone());
    }
    let clone_secs = started.elapsed().as_secs_f64() / rounds;

    let mut bytes = 0;
    let started = Instant::now();
    for _ in 0..SAVE_ROUNDS {
        bytes = std::hint::black_box(serde_json::to_vec_pretty(state)?).len();
    }
    let serialize_secs = started.elapsed().as_secs_f64() / rounds;

    let backend = LocalBackend::new(dir.join("save-bench").join("state.json"));
    // One save first so that every timed save also keeps a backup, as in an apply.
    backend.save(state).await?;
    let started = Instant::now();
    for _ in 0..SAVE_ROUNDS {
        backend.save(state).await?;
    }
    let save_secs = started.elapsed().as_secs_f64() / rounds;
    Ok(SaveBench {
        bytes,
        clone_secs,
        serialize_secs,
        save_secs,
    })
}

/// The peak resident set size so far (VmHWM), in KiB.
fn vm_hwm_kib() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}

/// Resets VmHWM to the current RSS (Linux ≥ 4.0); false where not allowed.
fn reset_peak() -> bool {
    fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// A [`LocalBackend`] that counts and times its saves.
struct CountingBackend {
    inner: LocalBackend,
    saves: AtomicU64,
    save_nanos: AtomicU64,
    max_nanos: AtomicU64,
}

impl CountingBackend {
    fn new(inner: LocalBackend) -> Self {
        Self {
            inner,
            saves: AtomicU64::new(0),
            save_nanos: AtomicU64::new(0),
            max_nanos: AtomicU64::new(0),
        }
    }

    /// Saves so far, total seconds in them, longest one in seconds.
    fn stats(&self) -> (u64, f64, f64) {
        let secs = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed)).as_secs_f64();
        (self.saves.load(Ordering::Relaxed), secs(&self.save_nanos), secs(&self.max_nanos))
    }
}

#[async_trait]
impl Backend for CountingBackend {
    fn location(&self) -> String {
        self.inner.location()
    }
    async fn load(&self) -> Result<Option<State>, StateError> {
        self.inner.load().await
    }
    async fn save(&self, state: &State) -> Result<(), StateError> {
        let started = Instant::now();
        let result = self.inner.save(state).await;
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.saves.fetch_add(1, Ordering::Relaxed);
        self.save_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.max_nanos.fetch_max(nanos, Ordering::Relaxed);
        result
    }
    async fn lock(&self, info: &LockInfo) -> Result<(), StateError> {
        self.inner.lock(info).await
    }
    async fn unlock(&self, id: &str) -> Result<(), StateError> {
        self.inner.unlock(id).await
    }
    async fn lock_info(&self) -> Result<Option<LockInfo>, StateError> {
        self.inner.lock_info().await
    }
    async fn force_unlock(&self, id: &str) -> Result<(), StateError> {
        self.inner.force_unlock(id).await
    }
}

// ---------------------------------------------------------------------------------------
// The synthetic stack.

/// The name of resource `i` (1-based): `t-00001`.
fn name(i: usize) -> String {
    format!("t-{i:05}")
}

/// Writes a stack of `n` `test_thing`s into `dir/stack` (files of [`PER_FILE`]
/// resources) and returns that directory. Resources form chains of `chain`: each one
/// after a chain's first takes the previous one's `arn` as its `value`, so the graph is
/// `chain` deep and `n / chain` wide. The state file is `dir/stack/state.json`.
fn write_stack(dir: &Path, n: usize, chain: usize) -> Result<PathBuf> {
    let stack_dir = dir.join("stack");
    fs::create_dir_all(&stack_dir).with_context(|| format!("create {}", stack_dir.display()))?;
    let main = "[stack]\nname = \"bench\"\ndescription = \"terrain-bench synthetic stack\"\nbackend = { type = \"local\", path = \"state.json\" }\n";
    fs::write(stack_dir.join("main.toml"), main).context("write main.toml")?;
    let zones = ["zone-a", "zone-b", "zone-c"];
    let mut text = String::new();
    for i in 1..=n {
        let at = (i - 1) % chain;
        let c = (i - 1) / chain;
        let t = name(i);
        let value = if at == 0 {
            format!("root-{i:05}")
        } else {
            format!("${{test_thing.{}.arn}}", name(i - 1))
        };
        let zone = zones[c % zones.len()];
        writeln!(
            text,
            "[test_thing.{t}]\nname = \"{t}\"\nvalue = \"{value}\"\nsize = {size}\nzone = \"{zone}\"\nsecret = \"s3cret-{i:05}\"\ntags = {{ team = \"ml\", chain = \"c-{c:04}\", depth = \"{at}\" }}\nitems = [\"a-{i:05}\", \"b-{i:05}\"]\n",
            size = i % 7 + 1,
        )?;
        if i % PER_FILE == 0 || i == n {
            let file = stack_dir.join(format!("things-{:03}.toml", (i - 1) / PER_FILE));
            fs::write(&file, &text).with_context(|| format!("write {}", file.display()))?;
            text.clear();
        }
    }
    Ok(stack_dir)
}

// ---------------------------------------------------------------------------------------
// The parent: run the children, print the table.

fn parent(args: &Args) -> Result<()> {
    let sizes: &[usize] = if args.quick { &QUICK_SIZES } else { &SIZES };
    let p = usize::from(args.parallelism);
    let chain = usize::from(args.chain);
    let exe = std::env::current_exe().context("find this executable to re-run it")?;
    let bench_started = Instant::now();

    println!(
        "terrain-bench {} — parallelism P = {p}, dependency chains of {chain}, `test_thing` on TestCloud (recording off),",
        env!("CARGO_PKG_VERSION")
    );
    println!("local state file saved by the engine as it applies; each (N, latency) in fresh child processes.");
    println!("plan = first plan (empty state, all creates); apply = that plan; re-plan = a fresh process refreshing all N.");
    println!("ideal: apply max(ceil(N/P), chain)·L, re-plan ceil(N/P)·L; ratio = wall / ideal; peak = VmHWM during the phase.");
    println!();
    let header = format!(
        "{:>6}  {:>7}  {:<7}  {:>9}  {:>10}  {:>9}  {:>6}  {:>9}  {}",
        "N", "latency", "phase", "wall", "per res.", "ideal", "ratio", "peak RSS", "target"
    );
    println!("{header}");
    println!("{}", "-".repeat(header.len() + 24));

    let mut notes = Vec::new();
    let mut targets = Vec::new();
    for &n in sizes {
        for &l in &LATENCIES_MS {
            let dir = std::env::temp_dir().join(format!("terrain-bench-{}-{n}-{l}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
            let common = |flag: &str| {
                vec![
                    flag.to_string(),
                    n.to_string(),
                    l.to_string(),
                    "--dir".to_string(),
                    dir.display().to_string(),
                    "--parallelism".to_string(),
                    p.to_string(),
                    "--chain".to_string(),
                    chain.to_string(),
                ]
            };
            eprintln!("  … N = {n}, latency {l} ms: plan + apply");
            let one: Result<OneResult> = run_child(&exe, &common("--one"));
            let replan: Option<Result<ReplanResult>> = one.as_ref().ok().map(|_| {
                eprintln!("  … N = {n}, latency {l} ms: re-plan");
                run_child(&exe, &common("--replan"))
            });
            let _ = fs::remove_dir_all(&dir);
            let cfg = Config { n, l, p, chain };
            match one {
                Ok(one) => {
                    print_one(&cfg, &one, &mut targets);
                    notes.extend(one_notes(&cfg, &one));
                }
                Err(e) => println!("{n:>6}  {l:>4} ms  FAILED: {e:#}"),
            }
            match replan {
                Some(Ok(re)) => {
                    print_replan(&cfg, &re, &mut targets);
                    if re.changes != 0 {
                        notes.push(format!("N = {n}, {l} ms: the re-plan proposed {} changes; expected none", re.changes));
                    }
                    if !re.peak_reset {
                        notes.push("peaks could not be reset between phases (/proc/self/clear_refs); each peak covers the phases before it in its process".to_string());
                    }
                }
                Some(Err(e)) => println!("{n:>6}  {l:>4} ms  re-plan FAILED: {e:#}"),
                None => {}
            }
        }
    }
    println!();
    if !notes.is_empty() {
        notes.dedup();
        for note in &notes {
            println!("{note}");
        }
        println!();
    }
    println!("targets (informational):");
    if !sizes.contains(&PLAN_TARGET_N) {
        println!("  plan of {PLAN_TARGET_N} at 0 ms < {PLAN_TARGET_SECS} s and < {PLAN_TARGET_MIB} MiB: not measured (--quick)");
    }
    for t in &targets {
        println!("  {t}");
    }
    let misses = targets.iter().filter(|t| t.contains("MISS")).count();
    println!(
        "  {} of {} PASS; bench took {}",
        targets.len() - misses,
        targets.len(),
        fmt_secs(bench_started.elapsed().as_secs_f64())
    );
    Ok(())
}

struct Config {
    n: usize,
    l: u64,
    p: usize,
    chain: usize,
}

impl Config {
    fn rounds(&self) -> usize {
        self.n.div_ceil(self.p)
    }
    fn ideal_apply(&self) -> Option<f64> {
        (self.l > 0).then(|| self.rounds().max(self.chain) as f64 * self.l as f64 / 1000.0)
    }
    fn ideal_refresh(&self) -> Option<f64> {
        (self.l > 0).then(|| self.rounds() as f64 * self.l as f64 / 1000.0)
    }
}

/// Runs this binary with `args` and returns the result line it printed.
fn run_child<T: DeserializeOwned>(exe: &Path, args: &[String]) -> Result<T> {
    let out = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("run {}", exe.display()))?;
    if !out.status.success() {
        bail!("child `{}` exited with {}", args.join(" "), out.status);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(RESULT_PREFIX))
        .with_context(|| format!("child `{}` printed no result", args.join(" ")))?;
    serde_json::from_str(line).context("decode the child's result")
}

fn row(cfg: &Config, phase: &str, p: Phase, per: Option<usize>, ideal: Option<f64>, target: &str) {
    let per_res = per.filter(|&k| k > 0).map_or_else(|| "-".to_string(), |k| fmt_secs(p.secs / k as f64));
    let (ideal_s, ratio_s) = match ideal {
        Some(i) if i > 0.0 => (fmt_secs(i), format!("{:.2}×", p.secs / i)),
        _ => ("-".to_string(), "-".to_string()),
    };
    let peak = p.peak_kib.map_or_else(|| "?".to_string(), |k| format!("{:.1} MiB", k as f64 / 1024.0));
    println!(
        "{:>6}  {:>4} ms  {:<7}  {:>9}  {:>10}  {:>9}  {:>6}  {:>9}  {}",
        cfg.n,
        cfg.l,
        phase,
        fmt_secs(p.secs),
        per_res,
        ideal_s,
        ratio_s,
        peak,
        target
    );
}

fn pass(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

/// The plan target for a plan phase, when this configuration is the one it is about.
fn plan_target(cfg: &Config, what: &str, p: Phase, targets: &mut Vec<String>) -> String {
    if cfg.n != PLAN_TARGET_N || cfg.l != 0 {
        return String::new();
    }
    let mib = p.peak_kib.map(|k| k as f64 / 1024.0);
    let time_ok = p.secs < PLAN_TARGET_SECS;
    let mem = match mib {
        Some(m) => format!("< {PLAN_TARGET_MIB} MiB {}", pass(m < PLAN_TARGET_MIB)),
        None => format!("< {PLAN_TARGET_MIB} MiB ? (no VmHWM)"),
    };
    let cell = format!("< {PLAN_TARGET_SECS} s {}, {mem}", pass(time_ok));
    targets.push(format!("{what} of {} at 0 ms: {} (target < {PLAN_TARGET_SECS} s) {}; peak {} {}", cfg.n, fmt_secs(p.secs), pass(time_ok),
        mib.map_or_else(|| "?".to_string(), |m| format!("{m:.1} MiB")),
        mib.map_or("?", |m| pass(m < PLAN_TARGET_MIB))));
    cell
}

fn ratio_target(cfg: &Config, what: &str, secs: f64, ideal: Option<f64>, targets: &mut Vec<String>) -> String {
    let Some(ideal) = ideal.filter(|i| *i > 0.0) else { return String::new() };
    let ratio = secs / ideal;
    let ok = ratio <= LATENCY_TARGET_RATIO;
    targets.push(format!(
        "{what} of {} at {} ms: {:.2}× ideal (target ≤ {LATENCY_TARGET_RATIO}×) {}",
        cfg.n,
        cfg.l,
        ratio,
        pass(ok)
    ));
    format!("≤ {LATENCY_TARGET_RATIO}× {}", pass(ok))
}

fn print_one(cfg: &Config, one: &OneResult, targets: &mut Vec<String>) {
    row(cfg, "load", one.load, Some(cfg.n), None, "");
    let t = plan_target(cfg, "first plan", one.plan, targets);
    row(cfg, "plan", one.plan, Some(cfg.n), None, &t);
    let t = ratio_target(cfg, "apply", one.apply.secs, cfg.ideal_apply(), targets);
    row(cfg, "apply", one.apply, Some(cfg.n), cfg.ideal_apply(), &t);
}

fn print_replan(cfg: &Config, re: &ReplanResult, targets: &mut Vec<String>) {
    let mut t = plan_target(cfg, "re-plan", re.plan, targets);
    let r = ratio_target(cfg, "re-plan", re.plan.secs, cfg.ideal_refresh(), targets);
    if !r.is_empty() {
        t = r;
    }
    row(cfg, "re-plan", re.plan, Some(re.reads), cfg.ideal_refresh(), &t);
}

/// The extra lines about state saves for one configuration.
fn one_notes(cfg: &Config, one: &OneResult) -> Vec<String> {
    let mut out = Vec::new();
    let mean = if one.saves > 0 { one.save_total_secs / one.saves as f64 } else { 0.0 };
    out.push(format!(
        "N = {:>5}, {:>2} ms: apply made {} state saves (group commit; {:.1} creates per save), mean {}, max {}, total {} = {:.0}% of the apply",
        cfg.n,
        cfg.l,
        one.saves,
        cfg.n as f64 / one.saves.max(1) as f64,
        fmt_secs(mean),
        fmt_secs(one.save_max_secs),
        fmt_secs(one.save_total_secs),
        100.0 * one.save_total_secs / one.apply.secs.max(f64::EPSILON)
    ));
    if cfg.l == 0 {
        // Every create step snapshots the whole state (ApplyScope), and every save clones it again.
        let clones = cfg.n as f64 + one.saves as f64;
        out.push(format!(
            "N = {:>5}: state of {} resources is {:.2} MiB; LocalBackend::save {} (serialize {}), State::clone {} → ~{} in {} whole-state clones per apply",
            cfg.n,
            cfg.n,
            one.state_bytes as f64 / (1024.0 * 1024.0),
            fmt_secs(one.save_secs),
            fmt_secs(one.serialize_secs),
            fmt_secs(one.clone_secs),
            fmt_secs(clones * one.clone_secs),
            clones as u64,
        ));
    }
    out
}

/// Seconds with a unit that keeps 3 significant figures: `812 µs`, `12.3 ms`, `1.23 s`.
fn fmt_secs(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1e-2 {
        format!("{:.2} ms", s * 1e3)
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else if s < 100.0 {
        format!("{s:.2} s")
    } else {
        format!("{s:.0} s")
    }
}
