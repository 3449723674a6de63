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

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use clap::Parser;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use terrain::engine::{Engine, EngineError, Event, Observer, Quiet, Settings};
use terrain::plan::Action;
use terrain::stack::{self, BackendConfig, LoadOptions, Stack};
use terrain::state::local::LocalBackend;
use terrain::state::{Backend, LockInfo, ResourceState, State, StateError};
use terrain::walk::Cancel;
use terrain_providers::testing::{TestCloud, ThingOutputs, ThingSpec};
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
/// Said when VmHWM could not be reset between phases.
const NO_PEAK_RESET: &str = "peaks could not be reset between phases (/proc/self/clear_refs): each peak also covers the phases before it in its process";
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
    /// Seconds an apply may run before it is stopped (as by Ctrl-C) and the rest of it
    /// projected; keeps the full bench at about five minutes.
    #[arg(long, default_value_t = 100)]
    apply_budget: u64,
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
    /// Creates done; less than N when the apply budget stopped it.
    applied: usize,
    complete: bool,
    /// The projected time of the whole apply, when it was stopped.
    projected_secs: Option<f64>,
    /// Where the applied state differs from the synthetic one (should be nowhere).
    mismatch: Option<String>,
    /// The micro-benchmark on the state of all N resources.
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
    /// VmRSS after loading the stack, and that plus what giving the simulated cloud its
    /// N objects added, in KiB.
    rss_loaded_kib: Option<u64>,
    rss_seeded_kib: Option<u64>,
}

// ---------------------------------------------------------------------------------------
// Children.

#[derive(Clone, Copy)]
enum Child {
    One,
    Replan,
}

fn child(args: &Args, nl: &[u64], which: Child) -> Result<()> {
    let [n, latency_ms] = nl else {
        bail!("expected N and LATENCY_MS")
    };
    let n = usize::try_from(*n).context("N does not fit in usize")?;
    let latency = Duration::from_millis(*latency_ms);
    let dir = args
        .dir
        .clone()
        .context("--dir is required with --one and --replan")?;
    let parallelism = usize::from(args.parallelism);
    let chain = usize::from(args.chain);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    let line = match which {
        Child::One => serde_json::to_string(&runtime.block_on(run_one(
            n,
            latency,
            parallelism,
            chain,
            Duration::from_secs(args.apply_budget),
            &dir,
        ))?)?,
        Child::Replan => {
            serde_json::to_string(&runtime.block_on(run_replan(n, latency, parallelism, &dir))?)?
        }
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

fn engine(
    stack: Stack,
    registry: Registry,
    backend: Arc<dyn Backend>,
    parallelism: usize,
) -> Engine {
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

async fn run_one(
    n: usize,
    latency: Duration,
    parallelism: usize,
    chain: usize,
    budget: Duration,
    dir: &Path,
) -> Result<OneResult> {
    let stack_dir = write_stack(dir, n, chain)?;
    let cloud = cloud(latency);
    let registry = cloud.registry();
    let mut peak_reset = true;

    let started = Instant::now();
    let stack = load_stack(&stack_dir, &registry)?;
    let load = end_phase(started, &mut peak_reset);

    let backend = Arc::new(CountingBackend::new(LocalBackend::new(state_path(&stack))));
    let progress = Arc::new(Progress::new(n));
    let mut engine = engine(stack, registry, backend.clone(), parallelism);
    engine.observer = progress.clone();
    let stack_path = stack_dir.display().to_string();

    let started = Instant::now();
    let (plan, state) = engine
        .plan(false, &[], &stack_path, &[])
        .await
        .context("first plan")?;
    let plan_phase = end_phase(started, &mut peak_reset);
    let creates = plan
        .changes
        .iter()
        .filter(|c| c.action == Action::Create)
        .count();
    if creates != n || plan.changes.len() != n {
        bail!(
            "first plan: expected {n} creates, got {creates} of {} changes",
            plan.changes.len()
        );
    }

    // Past the budget, start nothing new (as a first Ctrl-C does): the apply returns
    // `Interrupted` once the operations in flight finish.
    let cancel = engine.cancel.clone();
    let stop = tokio::spawn(async move {
        tokio::time::sleep(budget).await;
        cancel.cancel();
    });
    let started = Instant::now();
    progress.start();
    let applied = engine.apply(&plan, state).await;
    let apply = end_phase(started, &mut peak_reset);
    stop.abort();
    let done = progress.done();
    let complete = match applied {
        Ok(report) if report.created == n => true,
        Ok(report) => bail!("apply: expected {n} creates, made {}", report.created),
        Err(EngineError::Interrupted { .. }) if engine.cancel.is_cancelled() => false,
        Err(e) => return Err(e).context("apply"),
    };
    let (saves, save_total_secs, save_max_secs) = backend.stats();
    drop(plan);

    // The state a complete apply leaves, built directly: checked against the real one
    // when the apply completed, and written in place of the partial one when it did not,
    // so the re-plan always refreshes all N.
    let synthetic = synthetic_resources(n, chain)?;
    let mut state = backend.load().await?.context("no state after apply")?;
    let mismatch = if complete {
        first_difference(&state.resources, &synthetic)
    } else {
        None
    };
    state.resources = synthetic;
    if !complete {
        backend.save(&state).await?;
    }
    let bench = save_bench(&state, dir).await?;
    Ok(OneResult {
        load,
        plan: plan_phase,
        apply,
        peak_reset,
        applied: done,
        complete,
        projected_secs: if complete { None } else { progress.project() },
        mismatch,
        saves,
        save_total_secs,
        save_max_secs,
        state_bytes: bench.bytes,
        clone_secs: bench.clone_secs,
        serialize_secs: bench.serialize_secs,
        save_secs: bench.save_secs,
    })
}

/// Counts finished operations and records (seconds, done) along the way, to project
/// the whole apply when the budget stops it; drops every event otherwise, like
/// [`terrain::engine::Quiet`].
struct Progress {
    n: usize,
    every: usize,
    done: AtomicUsize,
    started: Mutex<Option<Instant>>,
    samples: Mutex<Vec<(f64, f64)>>,
}

impl Progress {
    fn new(n: usize) -> Self {
        Self {
            n,
            every: (n / 100).max(1),
            done: AtomicUsize::new(0),
            started: Mutex::new(None),
            samples: Mutex::new(Vec::new()),
        }
    }

    fn start(&self) {
        *self.started.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    fn done(&self) -> usize {
        self.done.load(Ordering::Relaxed)
    }

    /// The time a whole apply would take: `t(k) = a·k + b·k²` fitted by least squares
    /// to the progress recorded (the per-operation cost grows with the state, hence the
    /// square term), evaluated at k = N.
    fn project(&self) -> Option<f64> {
        let samples = self
            .samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let total = self.n as f64;
        if samples.len() < 3 {
            return None;
        }
        let (mut k2, mut k3, mut k4, mut tk, mut tk2) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for &(t, k) in &samples {
            k2 += k * k;
            k3 += k * k * k;
            k4 += k * k * k * k;
            tk += t * k;
            tk2 += t * k * k;
        }
        let det = k2 * k4 - k3 * k3;
        if det.abs() < f64::EPSILON {
            return None;
        }
        let a = (tk * k4 - tk2 * k3) / det;
        let b = (k2 * tk2 - k3 * tk) / det;
        Some(a * total + b * total * total)
    }
}

impl Observer for Progress {
    fn event(&self, event: Event) {
        if let Event::Finished { .. } = event {
            let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
            // A sample every 1% of N (`%` would want `is_multiple_of`, newer than the MSRV).
            if done / self.every * self.every == done {
                if let Some(started) = *self.started.lock().unwrap_or_else(PoisonError::into_inner)
                {
                    let t = started.elapsed().as_secs_f64();
                    self.samples
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((t, done as f64));
                }
            }
        }
    }
}

async fn run_replan(
    n: usize,
    latency: Duration,
    parallelism: usize,
    dir: &Path,
) -> Result<ReplanResult> {
    let stack_dir = dir.join("stack");
    let cloud = cloud(latency);
    let registry = cloud.registry();
    let mut peak_reset = true;

    let started = Instant::now();
    let stack = load_stack(&stack_dir, &registry)?;
    let load = end_phase(started, &mut peak_reset);
    let rss_loaded_kib = vm_rss_kib();

    // The cloud lives in memory: give this process's cloud the objects `--one` made,
    // exactly as the state records them, so the refresh finds every one in sync.
    let backend: Arc<dyn Backend> = Arc::new(LocalBackend::new(state_path(&stack)));
    let recorded = backend.load().await?.context("no state: run --one first")?;
    if recorded.resources.len() != n {
        bail!(
            "the state holds {} resources, expected {n}",
            recorded.resources.len()
        );
    }
    let rss_before_seed = vm_rss_kib();
    for r in recorded.resources.values() {
        let id =
            r.id.as_deref()
                .context("a resource in the state has no id")?;
        cloud.set_live(id, r.spec.clone());
    }
    let rss_seeded_kib = vm_rss_kib();
    drop(recorded);
    peak_reset &= reset_peak();

    let engine = engine(stack, registry, backend, parallelism);
    let stack_path = stack_dir.display().to_string();
    let started = Instant::now();
    let (plan, state) = engine
        .plan(false, &[], &stack_path, &[])
        .await
        .context("re-plan")?;
    let plan_phase = end_phase(started, &mut peak_reset);
    let changes = plan
        .changes
        .iter()
        .filter(|c| c.action != Action::NoOp || c.drift.is_some())
        .count();
    Ok(ReplanResult {
        load,
        plan: plan_phase,
        peak_reset,
        reads: state.resources.len(),
        changes,
        rss_loaded_kib,
        rss_seeded_kib: rss_seeded_kib
            .zip(rss_before_seed)
            .zip(rss_loaded_kib)
            .map(|((s, b), l)| l + s.saturating_sub(b)),
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
/// Each figure is the median of [`SAVE_ROUNDS`] rounds.
async fn save_bench(state: &State, dir: &Path) -> Result<SaveBench> {
    let mut clone = Vec::new();
    for _ in 0..SAVE_ROUNDS {
        let started = Instant::now();
        std::hint::black_box(state.clone());
        clone.push(started.elapsed().as_secs_f64());
    }

    let mut bytes = 0;
    let mut serialize = Vec::new();
    for _ in 0..SAVE_ROUNDS {
        let started = Instant::now();
        bytes = std::hint::black_box(serde_json::to_vec_pretty(state)?).len();
        serialize.push(started.elapsed().as_secs_f64());
    }

    let backend = LocalBackend::new(dir.join("save-bench").join("state.json"));
    // One save first so that every timed save also keeps a backup, as in an apply.
    backend.save(state).await?;
    let mut save = Vec::new();
    for _ in 0..SAVE_ROUNDS {
        let started = Instant::now();
        backend.save(state).await?;
        save.push(started.elapsed().as_secs_f64());
    }
    Ok(SaveBench {
        bytes,
        clone_secs: median(clone),
        serialize_secs: median(serialize),
        save_secs: median(save),
    })
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The peak resident set size so far (VmHWM), in KiB.
fn vm_hwm_kib() -> Option<u64> {
    proc_status_kib("VmHWM:")
}

/// The resident set size now (VmRSS), in KiB.
fn vm_rss_kib() -> Option<u64> {
    proc_status_kib("VmRSS:")
}

/// A `kB` line of `/proc/self/status`.
fn proc_status_kib(key: &str) -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix(key))?;
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
        (
            self.saves.load(Ordering::Relaxed),
            secs(&self.save_nanos),
            secs(&self.max_nanos),
        )
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

/// Zones cycled through by chain.
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// Resource `i` (1-based) of the synthetic stack as the cloud ends up holding it: the
/// stack writes the same fields, with `value` referring to the previous resource's
/// `arn` for every resource after the first of its chain.
fn thing_spec(i: usize, chain: usize) -> ThingSpec {
    let at = (i - 1) % chain;
    let c = (i - 1) / chain;
    ThingSpec {
        name: name(i),
        value: Some(if at == 0 {
            format!("root-{i:05}")
        } else {
            format!("test:thing/{}", name(i - 1))
        }),
        size: i64::try_from(i % 7 + 1).unwrap_or(1),
        tags: Some(BTreeMap::from([
            ("team".to_string(), "ml".to_string()),
            ("chain".to_string(), format!("c-{c:04}")),
            ("depth".to_string(), at.to_string()),
        ])),
        secret: Some(format!("s3cret-{i:05}")),
        items: Some(vec![format!("a-{i:05}"), format!("b-{i:05}")]),
        zone: Some(ZONES[c % ZONES.len()].to_string()),
    }
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
    let mut text = String::new();
    for i in 1..=n {
        let spec = thing_spec(i, chain);
        let t = &spec.name;
        let value = if (i - 1) % chain == 0 {
            spec.value.clone().unwrap_or_default()
        } else {
            format!("${{test_thing.{}.arn}}", name(i - 1))
        };
        let tags = spec
            .tags
            .iter()
            .flatten()
            .map(|(k, v)| format!("{k} = \"{v}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let items = spec
            .items
            .iter()
            .flatten()
            .map(|v| format!("\"{v}\""))
            .collect::<Vec<_>>()
            .join(", ");
        writeln!(
            text,
            "[test_thing.{t}]\nname = \"{t}\"\nvalue = \"{value}\"\nsize = {}\nzone = \"{}\"\nsecret = \"{}\"\ntags = {{ {tags} }}\nitems = [{items}]\n",
            spec.size,
            spec.zone.as_deref().unwrap_or_default(),
            spec.secret.as_deref().unwrap_or_default(),
        )?;
        if i % PER_FILE == 0 || i == n {
            let file = stack_dir.join(format!("things-{:03}.toml", (i - 1) / PER_FILE));
            fs::write(&file, &text).with_context(|| format!("write {}", file.display()))?;
            text.clear();
        }
    }
    Ok(stack_dir)
}

/// The resources a complete apply of the synthetic stack records in the state, built
/// without running it.
fn synthetic_resources(n: usize, chain: usize) -> Result<BTreeMap<String, ResourceState>> {
    let mut out = BTreeMap::new();
    for i in 1..=n {
        let spec = thing_spec(i, chain);
        let t = spec.name.clone();
        let outputs = ThingOutputs {
            arn: format!("test:thing/{t}"),
            version: 1,
            endpoint: format!("https://{t}.test"),
        };
        let dependencies = if (i - 1) % chain == 0 {
            Vec::new()
        } else {
            vec![format!("test_thing.{}", name(i - 1))]
        };
        out.insert(
            format!("test_thing.{t}"),
            ResourceState {
                kind: "test_thing".to_string(),
                provider: "test".to_string(),
                id: Some(t),
                spec: serde_json::to_value(&spec)?,
                outputs: serde_json::to_value(&outputs)?,
                dependencies,
                sensitive_paths: vec!["spec.secret".to_string()],
                pending: None,
                deposed: Vec::new(),
                tainted: false,
            },
        );
    }
    Ok(out)
}

/// The first resource where `real` and `synthetic` differ, if any.
fn first_difference(
    real: &BTreeMap<String, ResourceState>,
    synthetic: &BTreeMap<String, ResourceState>,
) -> Option<String> {
    if real.len() != synthetic.len() {
        return Some(format!(
            "{} resources applied, {} synthetic",
            real.len(),
            synthetic.len()
        ));
    }
    real.iter()
        .zip(synthetic)
        .find(|((ka, a), (kb, b))| ka != kb || a != b)
        .map(|((ka, a), (_, b))| format!("{ka}: applied {a:?}, synthetic {b:?}"))
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
            let dir =
                std::env::temp_dir().join(format!("terrain-bench-{}-{n}-{l}", std::process::id()));
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
                    "--apply-budget".to_string(),
                    args.apply_budget.to_string(),
                ]
            };
            eprintln!("  … N = {n}, latency {l} ms: plan + apply");
            let one: Result<OneResult> = run_child(&exe, &common("--one"));
            let replan: Option<Result<ReplanResult>> = one.as_ref().ok().map(|_| {
                eprintln!("  … N = {n}, latency {l} ms: re-plan");
                run_child(&exe, &common("--replan"))
            });
            // Measured here, not in the re-plan child, where the freed copy would stay
            // resident and inflate the peak being measured.
            let state_copy_kib = if l == 0 {
                state_copy_kib(&dir.join("stack").join("state.json"))
            } else {
                None
            };
            let _ = fs::remove_dir_all(&dir);
            let cfg = Config { n, l, p, chain };
            match one {
                Ok(one) => {
                    print_one(&cfg, &one, &mut targets);
                    if !one.peak_reset {
                        notes.push(NO_PEAK_RESET.to_string());
                    }
                    notes.extend(one_notes(&cfg, &one));
                }
                Err(e) => println!("{n:>6}  {l:>4} ms  FAILED: {e:#}"),
            }
            match replan {
                Some(Ok(re)) => {
                    print_replan(&cfg, &re, &mut targets);
                    if l == 0 {
                        notes.extend(replan_memory_note(&cfg, &re, state_copy_kib));
                    }
                    if re.changes != 0 {
                        notes.push(format!(
                            "N = {n}, {l} ms: the re-plan proposed {} changes; expected none",
                            re.changes
                        ));
                    }
                    if !re.peak_reset {
                        notes.push(NO_PEAK_RESET.to_string());
                    }
                }
                Some(Err(e)) => println!("{n:>6}  {l:>4} ms  re-plan FAILED: {e:#}"),
                None => {}
            }
        }
    }
    println!();
    if !notes.is_empty() {
        let mut seen = std::collections::BTreeSet::new();
        notes.retain(|n| seen.insert(n.clone()));
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

/// How much resident memory one in-memory copy of the state file at `path` takes: the
/// VmRSS growth from cloning it once it is loaded (the file's bytes, one large block,
/// are returned to the system before). None when it cannot be read.
fn state_copy_kib(path: &Path) -> Option<u64> {
    let state: State = serde_json::from_slice(&fs::read(path).ok()?).ok()?;
    let before = vm_rss_kib()?;
    let copy = std::hint::black_box(state.clone());
    let after = vm_rss_kib()?;
    drop(copy);
    Some(after.saturating_sub(before))
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
    let per_res = per
        .filter(|&k| k > 0)
        .map_or_else(|| "-".to_string(), |k| fmt_secs(p.secs / k as f64));
    let (ideal_s, ratio_s) = match ideal {
        Some(i) if i > 0.0 => (fmt_secs(i), format!("{:.2}×", p.secs / i)),
        _ => ("-".to_string(), "-".to_string()),
    };
    let peak = p.peak_kib.map_or_else(
        || "?".to_string(),
        |k| format!("{:.1} MiB", k as f64 / 1024.0),
    );
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
/// The plan target for a plan phase, when this configuration is the one it is about.
/// `harness_kib` is memory the harness holds that a real run would not (the simulated
/// cloud's objects), shown beside the raw verdict.
fn plan_target(
    cfg: &Config,
    what: &str,
    p: Phase,
    harness_kib: Option<u64>,
    targets: &mut Vec<String>,
) -> String {
    if cfg.n != PLAN_TARGET_N || cfg.l != 0 {
        return String::new();
    }
    let time_ok = p.secs < PLAN_TARGET_SECS;
    let mib = p.peak_kib.map(|k| k as f64 / 1024.0);
    let (mem_cell, mem_line) = match mib {
        Some(m) => {
            let ok = pass(m < PLAN_TARGET_MIB);
            let without = harness_kib.map_or_else(String::new, |h| {
                let rest = m - h as f64 / 1024.0;
                format!(
                    " (≈ {rest:.1} MiB without the simulated cloud's objects: {})",
                    pass(rest < PLAN_TARGET_MIB)
                )
            });
            (
                format!("< {PLAN_TARGET_MIB} MiB {ok}"),
                format!("peak {m:.1} MiB (target < {PLAN_TARGET_MIB} MiB) {ok}{without}"),
            )
        }
        None => (
            format!("< {PLAN_TARGET_MIB} MiB ?"),
            "peak unknown (no VmHWM)".to_string(),
        ),
    };
    targets.push(format!(
        "{what} of {} at 0 ms: {} (target < {PLAN_TARGET_SECS} s) {}; {mem_line}",
        cfg.n,
        fmt_secs(p.secs),
        pass(time_ok)
    ));
    format!("< {PLAN_TARGET_SECS} s {}, {mem_cell}", pass(time_ok))
}

fn ratio_target(
    cfg: &Config,
    what: &str,
    secs: f64,
    ideal: Option<f64>,
    targets: &mut Vec<String>,
) -> String {
    let Some(ideal) = ideal.filter(|i| *i > 0.0) else {
        return String::new();
    };
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
    let t = plan_target(cfg, "first plan", one.plan, None, targets);
    row(cfg, "plan", one.plan, Some(cfg.n), None, &t);
    if one.complete {
        let t = ratio_target(cfg, "apply", one.apply.secs, cfg.ideal_apply(), targets);
        row(cfg, "apply", one.apply, Some(cfg.n), cfg.ideal_apply(), &t);
    } else {
        // Stopped at the budget: the row shows the part done; the target is judged on
        // the projection.
        let projected = one.projected_secs.unwrap_or(f64::INFINITY);
        let t = ratio_target(
            cfg,
            "apply (projected)",
            projected,
            cfg.ideal_apply(),
            targets,
        );
        let t = if t.is_empty() {
            "stopped, see below".to_string()
        } else {
            format!("{t} (projected)")
        };
        row(cfg, "apply*", one.apply, Some(one.applied), None, &t);
    }
}

fn print_replan(cfg: &Config, re: &ReplanResult, targets: &mut Vec<String>) {
    let harness = re
        .rss_seeded_kib
        .zip(re.rss_loaded_kib)
        .map(|(s, l)| s.saturating_sub(l));
    let mut t = plan_target(cfg, "re-plan", re.plan, harness, targets);
    let r = ratio_target(cfg, "re-plan", re.plan.secs, cfg.ideal_refresh(), targets);
    if !r.is_empty() {
        t = r;
    }
    row(
        cfg,
        "re-plan",
        re.plan,
        Some(re.reads),
        cfg.ideal_refresh(),
        &t,
    );
}

/// Where the re-plan's peak memory comes from.
fn replan_memory_note(
    cfg: &Config,
    re: &ReplanResult,
    state_copy_kib: Option<u64>,
) -> Option<String> {
    let mib = |k: u64| k as f64 / 1024.0;
    let (loaded, seeded, peak) = (re.rss_loaded_kib?, re.rss_seeded_kib?, re.plan.peak_kib?);
    let added = peak.saturating_sub(seeded);
    let copies = state_copy_kib
        .filter(|&c| c > 0)
        .map_or_else(String::new, |c| {
            format!(
                " ≈ {:.1} × the {:.1} MiB of one in-memory copy of the state",
                added as f64 / c as f64,
                mib(c)
            )
        });
    Some(format!(
        "N = {:>5}: re-plan memory: {:.1} MiB resident after loading the stack, + {:.1} MiB for the simulated cloud's {} objects \
         (in-process only because the cloud is simulated); peak {:.1} MiB, so the plan itself added {:.1} MiB{copies}",
        cfg.n,
        mib(loaded),
        mib(seeded.saturating_sub(loaded)),
        cfg.n,
        mib(peak),
        mib(added),
    ))
}

/// The extra lines about state saves for one configuration.
fn one_notes(cfg: &Config, one: &OneResult) -> Vec<String> {
    let mut out = Vec::new();
    if !one.complete {
        out.push(format!(
            "* N = {:>5}, {:>2} ms: apply stopped at the budget after {} of {} creates in {}; whole apply projected at {} (a·k + b·k² fitted to its progress){}",
            cfg.n,
            cfg.l,
            one.applied,
            cfg.n,
            fmt_secs(one.apply.secs),
            one.projected_secs.map_or_else(|| "?".to_string(), fmt_secs),
            cfg.ideal_apply().map_or_else(String::new, |i| format!(" = {:.1}× the ideal {}", one.projected_secs.unwrap_or(f64::NAN) / i, fmt_secs(i))),
        ));
    }
    if let Some(m) = &one.mismatch {
        out.push(format!(
            "N = {}, {} ms: the applied state differs from the synthetic one: {m}",
            cfg.n, cfg.l
        ));
    }
    let mean = if one.saves > 0 {
        one.save_total_secs / one.saves as f64
    } else {
        0.0
    };
    out.push(format!(
        "N = {:>5}, {:>2} ms: apply made {} state saves (group commit; {:.1} creates per save), mean {}, max {}, total {} = {:.0}% of the apply",
        cfg.n,
        cfg.l,
        one.saves,
        one.applied as f64 / one.saves.max(1) as f64,
        fmt_secs(mean),
        fmt_secs(one.save_max_secs),
        fmt_secs(one.save_total_secs),
        100.0 * one.save_total_secs / one.apply.secs.max(f64::EPSILON)
    ));
    if cfg.l == 0 {
        // Each save clones the whole state once (Persister::persist hands the backend a
        // snapshot); the state grows from 0 to N, so on average half size.
        let clones = one.saves as f64;
        out.push(format!(
            "N = {:>5}: state of {} resources is {:.2} MiB; LocalBackend::save {} (serialize {}); State::clone+drop {} → ≈ {} for the {} save snapshots of an apply",
            cfg.n,
            cfg.n,
            one.state_bytes as f64 / (1024.0 * 1024.0),
            fmt_secs(one.save_secs),
            fmt_secs(one.serialize_secs),
            fmt_secs(one.clone_secs),
            fmt_secs(clones * one.clone_secs / 2.0),
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
