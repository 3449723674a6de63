//! `terrain-bench`: the hand-run performance benchmark of the engine, quoted in release
//! notes. This file owns the whole benchmark: generating synthetic stacks, running
//! plan → apply → re-plan against [`TestCloud`] with a [`LocalBackend`] state (a
//! snapshot plus the journal an apply appends to, compacted into a new snapshot at the
//! end), measuring wall time and peak RSS, and printing the report table. It prints
//! figures and PASS/MISS against the targets for information only; a missed target
//! never makes it fail (only a broken run does).
//!
//! Each (N, latency) configuration runs in child processes (the binary re-executes
//! itself with the hidden `--one`, `--replan` and `--plan-only` arguments) so that peak
//! RSS (`VmHWM`) does not accumulate across runs: `--one` loads, plans and applies,
//! counting the journal appends and the compactions; `--replan` is a fresh process,
//! like a later `terrain plan`, that refreshes all N resources, run twice: with list
//! calls (the default, one call lists every `test_thing`) and with `--per-object`
//! (`Settings::batch_refresh` off, one read per object); `--plan-only` loads and plans
//! a stack of 100,000 with no state, the scale check of a first plan.
//!
//! ```text
//! cargo build --release --bin terrain-bench
//! target/release/terrain-bench [--quick] [--parallelism P] [--chain C] [--apply-budget SECS]
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
use terrain::plan::{Action, Plan};
use terrain::stack::{self, BackendConfig, LoadOptions, Stack};
use terrain::state::journal::Record;
use terrain::state::local::LocalBackend;
use terrain::state::{Backend, LockInfo, ResourceState, State, StateError};
use terrain::walk::Cancel;
use terrain_providers::testing::{Op, TestCloud, ThingOutputs, ThingSpec};
use terrain_providers::Registry;

/// The allocator of the `terrain` binary, so that the figures are its figures.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Resource counts of a full run.
const SIZES: [usize; 3] = [100, 1_000, 10_000];
/// Resource counts of a `--quick` run.
const QUICK_SIZES: [usize; 2] = [100, 1_000];
/// Resource count of the first-plan-only run that follows the full run's sizes.
const PLAN_ONLY_N: usize = 100_000;
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

/// What a target is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
    /// The first plan (empty state, all creates).
    FirstPlan,
    /// The apply of that plan (judged on its projection when the budget stopped it).
    Apply,
    /// The re-plan that refreshes with list calls (the default).
    ListReplan,
}

/// What a target asks of its measure.
#[derive(Debug, Clone, Copy)]
enum Goal {
    /// Wall time at most this multiple of the ideal.
    Ratio(f64),
    /// Wall time under `secs`, and peak RSS under `mib` when given.
    Under { secs: f64, mib: Option<f64> },
}

/// One target: a goal for a measure at N resources and a latency (ms per call).
struct Target {
    measure: Measure,
    n: usize,
    l: u64,
    goal: Goal,
}

/// The targets, in the order the `targets` section lists them. Informational: a MISS
/// is reported, never a failure.
const TARGETS: [Target; 7] = [
    Target {
        measure: Measure::Apply,
        n: 1_000,
        l: 20,
        goal: Goal::Ratio(1.10),
    },
    Target {
        measure: Measure::Apply,
        n: 10_000,
        l: 20,
        goal: Goal::Ratio(1.15),
    },
    Target {
        measure: Measure::Apply,
        n: 10_000,
        l: 0,
        goal: Goal::Under {
            secs: 5.0,
            mib: None,
        },
    },
    Target {
        measure: Measure::FirstPlan,
        n: 10_000,
        l: 0,
        goal: Goal::Under {
            secs: 2.0,
            mib: Some(200.0),
        },
    },
    Target {
        measure: Measure::ListReplan,
        n: 10_000,
        l: 0,
        goal: Goal::Under {
            secs: 1.0,
            mib: Some(150.0),
        },
    },
    Target {
        measure: Measure::ListReplan,
        n: 10_000,
        l: 20,
        goal: Goal::Under {
            secs: 2.0,
            mib: None,
        },
    },
    Target {
        measure: Measure::FirstPlan,
        n: PLAN_ONLY_N,
        l: 0,
        goal: Goal::Under {
            secs: 3.0,
            mib: Some(1024.0),
        },
    },
];

#[derive(Parser, Debug)]
#[command(
    name = "terrain-bench",
    about = "Benchmarks terrain's plan, apply and refresh on synthetic stacks of 100 to 10,000 resources, and a first plan of 100,000"
)]
struct Args {
    /// Only N = 100 and 1,000 (a minute or less; no 100,000 plan).
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
    /// Child, with `--replan`: refresh each object with its own read
    /// (`Settings::batch_refresh` off) instead of list calls.
    #[arg(long, hide = true, requires = "replan")]
    per_object: bool,
    /// Child: write a stack of N resources, load it and plan it with no state (at 0 ms),
    /// print the result line.
    #[arg(long, hide = true, value_name = "N")]
    plan_only: Option<u64>,
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
    let result = if let Some(one) = &args.one {
        child(&args, one, Child::One)
    } else if let Some(replan) = &args.replan {
        child(&args, replan, Child::Replan)
    } else if let Some(n) = args.plan_only {
        child(&args, &[n, 0], Child::PlanOnly)
    } else {
        parent(&args)
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
    /// `Backend::append` calls during the apply (journal writes, group commit), the
    /// records they carried, and the journal's largest size in bytes.
    appends: Writes,
    append_records: u64,
    journal_max_bytes: u64,
    /// `Backend::save` calls during the apply: compactions (the whole state written as
    /// the new snapshot, the journal emptied).
    saves: Writes,
    /// Creates done; less than N when the apply budget stopped it.
    applied: usize,
    complete: bool,
    /// The projected time of the whole apply, when it was stopped.
    projected_secs: Option<f64>,
    /// Where the applied state differs from the synthetic one (should be nowhere).
    mismatch: Option<String>,
    /// The micro-benchmark of one compaction on the state of all N resources.
    state_bytes: usize,
    clone_secs: f64,
    serialize_secs: f64,
    save_secs: f64,
}

/// Calls of one kind of state write, and the time spent in them.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct Writes {
    count: u64,
    total_secs: f64,
    max_secs: f64,
}

impl Writes {
    fn mean_secs(&self) -> f64 {
        if self.count > 0 {
            self.total_secs / self.count as f64
        } else {
            0.0
        }
    }
}

/// What `--replan` measured.
#[derive(Debug, Serialize, Deserialize)]
struct ReplanResult {
    load: Phase,
    plan: Phase,
    peak_reset: bool,
    /// Whether refresh used list calls (`Settings::batch_refresh`).
    batch: bool,
    /// Resources refreshed.
    refreshed: usize,
    /// Provider calls the refresh made: list calls, and reads of one object.
    list_calls: usize,
    read_calls: usize,
    /// Changes the re-plan proposed (0 when all is in sync, as it should be).
    changes: usize,
    /// VmRSS after loading the stack, and that plus what giving the simulated cloud its
    /// N objects added, in KiB.
    rss_loaded_kib: Option<u64>,
    rss_seeded_kib: Option<u64>,
}

/// What `--plan-only` measured.
#[derive(Debug, Serialize, Deserialize)]
struct PlanOnlyResult {
    load: Phase,
    plan: Phase,
    peak_reset: bool,
}

// ---------------------------------------------------------------------------------------
// Children.

#[derive(Clone, Copy)]
enum Child {
    One,
    Replan,
    PlanOnly,
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
        .context("--dir is required with --one, --replan and --plan-only")?;
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
        Child::Replan => serde_json::to_string(&runtime.block_on(run_replan(
            n,
            latency,
            parallelism,
            !args.per_object,
            &dir,
        ))?)?,
        Child::PlanOnly => {
            serde_json::to_string(&runtime.block_on(run_plan_only(n, parallelism, chain, &dir))?)?
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
        var_files: &[],
        environment: terrain::stack::DEFAULT_ENVIRONMENT,
        env: &env,
        registry,
    })?;
    Ok(stack)
}

/// The synthetic stack keeps its state in a local file (its `[stack] backend`).
fn state_path(stack: &Stack) -> PathBuf {
    match &stack.backend {
        BackendConfig::Local { path } => path.clone(),
        BackendConfig::S3(_) | BackendConfig::Gcs(_) => stack.dir.join("state.json"),
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
    check_first_plan(&plan, n)?;

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
    let (appends, append_records, journal_max_bytes, saves) = backend.stats();
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
        appends,
        append_records,
        journal_max_bytes,
        saves,
        state_bytes: bench.bytes,
        clone_secs: bench.clone_secs,
        serialize_secs: bench.serialize_secs,
        save_secs: bench.save_secs,
    })
}

/// Fails unless `plan` is the first plan of the synthetic stack: N creates, nothing
/// else.
fn check_first_plan(plan: &Plan, n: usize) -> Result<()> {
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
    Ok(())
}

/// Loads and plans a stack of `n` with no state at 0 ms, as `terrain plan` does on a
/// new stack: the scale check of the first plan, without the apply that would take
/// the other runs' time again.
async fn run_plan_only(
    n: usize,
    parallelism: usize,
    chain: usize,
    dir: &Path,
) -> Result<PlanOnlyResult> {
    let stack_dir = write_stack(dir, n, chain)?;
    let cloud = cloud(Duration::ZERO);
    let registry = cloud.registry();
    let mut peak_reset = true;

    let started = Instant::now();
    let stack = load_stack(&stack_dir, &registry)?;
    let load = end_phase(started, &mut peak_reset);

    let backend: Arc<dyn Backend> = Arc::new(LocalBackend::new(state_path(&stack)));
    let engine = engine(stack, registry, backend, parallelism);
    let stack_path = stack_dir.display().to_string();
    let started = Instant::now();
    let (plan, _state) = engine
        .plan(false, &[], &stack_path, &[])
        .await
        .context("first plan")?;
    let plan_phase = end_phase(started, &mut peak_reset);
    check_first_plan(&plan, n)?;
    Ok(PlanOnlyResult {
        load,
        plan: plan_phase,
        peak_reset,
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

/// Re-plans the stack and state `--one` left in `dir`, refreshing with list calls when
/// `batch`, else with one read per object.
async fn run_replan(
    n: usize,
    latency: Duration,
    parallelism: usize,
    batch: bool,
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
    // The calls are counted from the cloud's log, so the ideal follows the calls really
    // made: one entry per call (a single one for a list re-plan; N small ones, about
    // 2 MiB at 10,000, in the per-object re-plan's peak).
    cloud.set_recording(true);
    peak_reset &= reset_peak();

    let mut engine = engine(stack, registry, backend, parallelism);
    engine.settings.batch_refresh = batch;
    let stack_path = stack_dir.display().to_string();
    let started = Instant::now();
    let (plan, _) = engine
        .plan(false, &[], &stack_path, &[])
        .await
        .context("re-plan")?;
    let plan_phase = end_phase(started, &mut peak_reset);
    let calls = cloud.calls();
    let count = |op: Op| calls.iter().filter(|c| c.op == op).count();
    let (list_calls, read_calls) = (count(Op::List), count(Op::Read));
    let other = calls.len() - list_calls - read_calls;
    if other != 0 {
        bail!("re-plan: {other} provider calls other than reads and lists");
    }
    let changes = plan
        .changes
        .iter()
        .filter(|c| c.action != Action::NoOp || c.drift.is_some())
        .count();
    Ok(ReplanResult {
        load,
        plan: plan_phase,
        peak_reset,
        batch,
        refreshed: plan.refreshed.len(),
        list_calls,
        read_calls,
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

/// Times, on `state`, what one compaction is made of: cloning the state (the engine
/// snapshots it under its lock), serializing it, and a whole `LocalBackend::save`
/// (serialize, write a temp file, fsync, keep the backup, rename, fsync the directory,
/// empty the journal). Each figure is the median of [`SAVE_ROUNDS`] rounds.
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

/// Call count and time of one kind of state write, updated from concurrent tasks.
#[derive(Default)]
struct WriteCounter {
    count: AtomicU64,
    nanos: AtomicU64,
    max_nanos: AtomicU64,
}

impl WriteCounter {
    fn add(&self, started: Instant) {
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
        self.max_nanos.fetch_max(nanos, Ordering::Relaxed);
    }

    fn writes(&self) -> Writes {
        let secs = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed)).as_secs_f64();
        Writes {
            count: self.count.load(Ordering::Relaxed),
            total_secs: secs(&self.nanos),
            max_secs: secs(&self.max_nanos),
        }
    }
}

/// A [`LocalBackend`] that counts and times its journal appends and its saves
/// (compactions) apart: during an apply the engine appends, and saves only to compact.
struct CountingBackend {
    inner: LocalBackend,
    appends: WriteCounter,
    records: AtomicU64,
    journal_max_bytes: AtomicU64,
    saves: WriteCounter,
}

impl CountingBackend {
    fn new(inner: LocalBackend) -> Self {
        Self {
            inner,
            appends: WriteCounter::default(),
            records: AtomicU64::new(0),
            journal_max_bytes: AtomicU64::new(0),
            saves: WriteCounter::default(),
        }
    }

    /// Appends so far, the records they carried, the journal's largest size in bytes,
    /// and saves so far.
    fn stats(&self) -> (Writes, u64, u64, Writes) {
        (
            self.appends.writes(),
            self.records.load(Ordering::Relaxed),
            self.journal_max_bytes.load(Ordering::Relaxed),
            self.saves.writes(),
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
        self.saves.add(started);
        result
    }
    fn journals(&self) -> bool {
        self.inner.journals()
    }
    async fn append(&self, records: &[Record]) -> Result<u64, StateError> {
        let started = Instant::now();
        let result = self.inner.append(records).await;
        self.appends.add(started);
        let count = u64::try_from(records.len()).unwrap_or(u64::MAX);
        self.records.fetch_add(count, Ordering::Relaxed);
        if let Ok(bytes) = &result {
            self.journal_max_bytes.fetch_max(*bytes, Ordering::Relaxed);
        }
        result
    }
    async fn journal(&self) -> Result<Vec<Record>, StateError> {
        self.inner.journal().await
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

    print_preamble(args, p, chain);
    let mut notes = Vec::new();
    let mut verdicts: Vec<Option<Verdict>> = TARGETS.iter().map(|_| None).collect();
    for &n in sizes {
        for &l in &LATENCIES_MS {
            let cfg = Config { n, l, p, chain };
            measure_configuration(&exe, args, &cfg, &mut notes, &mut verdicts)?;
        }
    }
    if !args.quick {
        let cfg = Config {
            n: PLAN_ONLY_N,
            l: 0,
            p,
            chain,
        };
        measure_first_plan(&exe, &cfg, &mut notes, &mut verdicts)?;
    }
    println!();
    print_notes(notes);
    print_targets(args, sizes, &verdicts, bench_started);
    Ok(())
}

/// Prints what the benchmark measures and how, and the table's header.
fn print_preamble(args: &Args, p: usize, chain: usize) {
    println!(
        "terrain-bench {} — parallelism P = {p}, dependency chains of {chain}, `test_thing` on TestCloud (call log off, but in re-plans to count calls),",
        env!("CARGO_PKG_VERSION")
    );
    println!("local state: a snapshot plus the journal the engine appends to as it applies (group commit), compacted at the end; each (N, latency) in fresh child processes.");
    println!("plan = first plan (empty state, all creates); apply = that plan; re-plan = a fresh process refreshing all N: (list) with list calls, one lists every test_thing;");
    println!("(reads) with one read per object (Settings::batch_refresh off).");
    println!("ideal: apply max(ceil(N/P), chain)·L; re-plan (list) ceil(calls/P)·L over the calls it made; re-plan (reads) ceil(N/P)·L; ratio = wall / ideal; peak = VmHWM during the phase.");
    if !args.quick {
        println!(
            "last: load and first plan only (no apply) of {} at 0 ms.",
            fmt_count(PLAN_ONLY_N)
        );
    }
    println!();
    let header = format!(
        "{:>6}  {:>7}  {:<15}  {:>9}  {:>10}  {:>9}  {:>6}  {:>9}  {}",
        "N", "latency", "phase", "wall", "per res.", "ideal", "ratio", "peak RSS", "target"
    );
    println!("{header}");
    println!("{}", "-".repeat(header.len() + 24));
}

/// Runs one (N, latency) configuration in its children (plan + apply, then both
/// re-plans) and prints its rows, adding to `notes` and `verdicts`.
fn measure_configuration(
    exe: &Path,
    args: &Args,
    cfg: &Config,
    notes: &mut Vec<String>,
    verdicts: &mut [Option<Verdict>],
) -> Result<()> {
    let Config { n, l, p, chain } = *cfg;
    let dir = work_dir(&format!("{n}-{l}"))?;
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
    let one: Result<OneResult> = run_child(exe, &common("--one"));
    // Both re-plans read the state `--one` left (a plan writes none), each in
    // its own process so that neither peak covers the other.
    let replans: Vec<Result<ReplanResult>> = if one.is_ok() {
        eprintln!("  … N = {n}, latency {l} ms: re-plan (list)");
        let list = run_child(exe, &common("--replan"));
        eprintln!("  … N = {n}, latency {l} ms: re-plan (reads)");
        let mut per_object = common("--replan");
        per_object.push("--per-object".to_string());
        let reads = run_child(exe, &per_object);
        vec![list, reads]
    } else {
        Vec::new()
    };
    // Measured here, not in the re-plan child, where the freed copy would stay
    // resident and inflate the peak being measured.
    let state_copy_kib = if l == 0 {
        state_copy_kib(&dir.join("stack").join("state.json"))
    } else {
        None
    };
    let _ = fs::remove_dir_all(&dir);
    match one {
        Ok(one) => {
            print_one(cfg, &one, verdicts);
            if !one.peak_reset {
                notes.push(NO_PEAK_RESET.to_string());
            }
            notes.extend(one_notes(cfg, &one));
        }
        Err(e) => println!("{n:>6}  {l:>4} ms  FAILED: {e:#}"),
    }
    for (replan, label) in replans.into_iter().zip(["(list)", "(reads)"]) {
        match replan {
            Ok(re) => {
                print_replan(cfg, &re, verdicts);
                if l == 0 && re.batch {
                    notes.extend(replan_memory_note(cfg, &re, state_copy_kib));
                }
                notes.extend(replan_notes(cfg, &re));
                if !re.peak_reset {
                    notes.push(NO_PEAK_RESET.to_string());
                }
            }
            Err(e) => println!("{n:>6}  {l:>4} ms  re-plan {label} FAILED: {e:#}"),
        }
    }
    Ok(())
}

/// Runs the load and first plan of `cfg.n` resources (no apply) in its child and
/// prints its row, adding to `notes` and `verdicts`.
fn measure_first_plan(
    exe: &Path,
    cfg: &Config,
    notes: &mut Vec<String>,
    verdicts: &mut [Option<Verdict>],
) -> Result<()> {
    let Config { n, p, chain, .. } = *cfg;
    let dir = work_dir(&format!("{n}-plan"))?;
    eprintln!("  … N = {n}, latency 0 ms: load + first plan only");
    let child_args = vec![
        "--plan-only".to_string(),
        n.to_string(),
        "--dir".to_string(),
        dir.display().to_string(),
        "--parallelism".to_string(),
        p.to_string(),
        "--chain".to_string(),
        chain.to_string(),
    ];
    let result: Result<PlanOnlyResult> = run_child(exe, &child_args);
    let _ = fs::remove_dir_all(&dir);
    match result {
        Ok(r) => {
            print_plan_only(cfg, &r, verdicts);
            if !r.peak_reset {
                notes.push(NO_PEAK_RESET.to_string());
            }
        }
        Err(e) => println!("{n:>6}  {:>4} ms  first plan FAILED: {e:#}", 0),
    }
    Ok(())
}

/// Prints the runs' notes, each once, in the order they were first made.
fn print_notes(mut notes: Vec<String>) {
    if !notes.is_empty() {
        let mut seen = std::collections::BTreeSet::new();
        notes.retain(|n| seen.insert(n.clone()));
        for note in &notes {
            println!("{note}");
        }
        println!();
    }
}

/// Prints each target's verdict (or why it was not measured) and the tally.
fn print_targets(
    args: &Args,
    sizes: &[usize],
    verdicts: &[Option<Verdict>],
    bench_started: Instant,
) {
    println!("targets (informational: a MISS never fails the run):");
    for (t, v) in TARGETS.iter().zip(verdicts) {
        match v {
            Some(v) => println!("  {}: {}", t.describe(), v.line),
            None => {
                let ran = if t.n == PLAN_ONLY_N && t.measure == Measure::FirstPlan {
                    !args.quick
                } else {
                    sizes.contains(&t.n) && LATENCIES_MS.contains(&t.l)
                };
                let why = if ran {
                    "its run failed (see above)"
                } else {
                    "not run (--quick)"
                };
                println!("  {}: not measured, {why}", t.describe());
            }
        }
    }
    let measured = verdicts.iter().flatten().count();
    let passed = verdicts.iter().flatten().filter(|v| v.pass).count();
    println!(
        "  {passed} of {measured} measured PASS ({} not measured); bench took {}",
        TARGETS.len() - measured,
        fmt_secs(bench_started.elapsed().as_secs_f64())
    );
}

/// A fresh working directory for one configuration's children, `name` telling it
/// apart.
fn work_dir(name: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("terrain-bench-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    Ok(dir)
}

struct Config {
    n: usize,
    l: u64,
    p: usize,
    chain: usize,
}

impl Config {
    /// Rounds of `calls` provider calls, P at a time.
    fn rounds(&self, calls: usize) -> usize {
        calls.div_ceil(self.p)
    }
    fn latency_secs(&self) -> f64 {
        self.l as f64 / 1000.0
    }
    /// N creates, P at a time, and no faster than one chain one create after another.
    fn ideal_apply(&self) -> Option<f64> {
        (self.l > 0).then(|| self.rounds(self.n).max(self.chain) as f64 * self.latency_secs())
    }
    /// N reads, P at a time.
    fn ideal_reads(&self) -> Option<f64> {
        (self.l > 0).then(|| self.rounds(self.n) as f64 * self.latency_secs())
    }
    /// The `calls` a list re-plan made (its lists, and any reads of one object), P at
    /// a time: for `test_thing`, one list, so L. A lower bound: a read that confirms an
    /// object a list did not show comes after that list, not beside it.
    fn ideal_calls(&self, calls: usize) -> Option<f64> {
        (self.l > 0).then(|| self.rounds(calls) as f64 * self.latency_secs())
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
        "{:>6}  {:>4} ms  {:<15}  {:>9}  {:>10}  {:>9}  {:>6}  {:>9}  {}",
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

impl Target {
    /// The target as the `targets` section names it: `apply of 10,000 at 20 ms/call,
    /// ≤ 1.15× ideal`.
    fn describe(&self) -> String {
        let what = match self.measure {
            Measure::FirstPlan => "first plan",
            Measure::Apply => "apply",
            Measure::ListReplan => "re-plan (list)",
        };
        let goal = match self.goal {
            Goal::Ratio(max) => format!("≤ {max:.2}× ideal"),
            Goal::Under { secs, mib: None } => format!("< {secs} s"),
            Goal::Under {
                secs,
                mib: Some(mib),
            } => format!("< {secs} s and peak < {}", fmt_mib_limit(mib)),
        };
        format!(
            "{what} of {} at {} ms/call, {goal}",
            fmt_count(self.n),
            self.l
        )
    }
}

/// One target's result: its line in the `targets` section, and whether every part of
/// it passed.
struct Verdict {
    line: String,
    pass: bool,
}

/// A phase's figures, as a target judges them.
struct Measured {
    /// Wall time (the projection, for an apply the budget stopped).
    secs: f64,
    projected: bool,
    peak_kib: Option<u64>,
    ideal: Option<f64>,
    /// Memory the harness holds that a real run would not (the simulated cloud's
    /// objects), shown beside the raw verdict.
    harness_kib: Option<u64>,
    /// Said after the verdict (what the calls were, the load time).
    extra: String,
}

impl Measured {
    fn of(phase: Phase) -> Self {
        Self {
            secs: phase.secs,
            projected: false,
            peak_kib: phase.peak_kib,
            ideal: None,
            harness_kib: None,
            extra: String::new(),
        }
    }
}

/// Judges `m` against the target for `measure` at this configuration, if there is one:
/// records its line in `verdicts` and returns the table's target cell (empty when no
/// target is about this configuration).
fn judge(verdicts: &mut [Option<Verdict>], measure: Measure, cfg: &Config, m: &Measured) -> String {
    let Some((i, target)) = TARGETS
        .iter()
        .enumerate()
        .find(|(_, t)| t.measure == measure && t.n == cfg.n && t.l == cfg.l)
    else {
        return String::new();
    };
    let how = if m.projected { " (projected)" } else { "" };
    let (cell, line, ok) = match target.goal {
        Goal::Ratio(max) => match m.ideal.filter(|i| *i > 0.0) {
            Some(ideal) => {
                let ratio = m.secs / ideal;
                let ok = ratio <= max;
                (
                    format!("≤ {max:.2}× {}", pass(ok)),
                    format!(
                        "{ratio:.2}× ideal ({}{how} for an ideal {}) {}",
                        fmt_secs(m.secs),
                        fmt_secs(ideal),
                        pass(ok)
                    ),
                    ok,
                )
            }
            None => (
                format!("≤ {max:.2}× ?"),
                "no ideal at this latency".to_string(),
                false,
            ),
        },
        Goal::Under { secs, mib } => {
            let time_ok = m.secs < secs;
            let mut cell = format!("< {secs} s {}", pass(time_ok));
            let mut line = format!("{}{how} {}", fmt_secs(m.secs), pass(time_ok));
            let mut ok = time_ok;
            if let Some(limit) = mib {
                match m.peak_kib {
                    Some(kib) => {
                        let got = kib as f64 / 1024.0;
                        let mem_ok = got < limit;
                        ok &= mem_ok;
                        let _ = write!(cell, ", < {} {}", fmt_mib_limit(limit), pass(mem_ok));
                        let _ = write!(line, "; peak {got:.1} MiB {}", pass(mem_ok));
                        if let Some(h) = m.harness_kib {
                            let rest = got - h as f64 / 1024.0;
                            let _ = write!(
                                line,
                                " (≈ {rest:.1} MiB without the simulated cloud's objects: {})",
                                pass(rest < limit)
                            );
                        }
                    }
                    None => {
                        ok = false;
                        let _ = write!(cell, ", < {} ?", fmt_mib_limit(limit));
                        line.push_str("; peak unknown (no VmHWM)");
                    }
                }
            }
            (cell, line, ok)
        }
    };
    verdicts[i] = Some(Verdict {
        line: format!("{line}{}", m.extra),
        pass: ok,
    });
    cell
}

fn print_one(cfg: &Config, one: &OneResult, verdicts: &mut [Option<Verdict>]) {
    row(cfg, "load", one.load, Some(cfg.n), None, "");
    let t = judge(verdicts, Measure::FirstPlan, cfg, &Measured::of(one.plan));
    row(cfg, "plan", one.plan, Some(cfg.n), None, &t);
    let ideal = cfg.ideal_apply();
    if one.complete {
        let m = Measured {
            ideal,
            ..Measured::of(one.apply)
        };
        let t = judge(verdicts, Measure::Apply, cfg, &m);
        row(cfg, "apply", one.apply, Some(cfg.n), ideal, &t);
    } else {
        // Stopped at the budget: the row shows the part done; the target is judged on
        // the projection (a miss when there is none).
        let m = Measured {
            secs: one.projected_secs.unwrap_or(f64::INFINITY),
            projected: true,
            ideal,
            extra: if one.projected_secs.is_none() {
                " (too little progress to project)".to_string()
            } else {
                String::new()
            },
            ..Measured::of(one.apply)
        };
        let t = judge(verdicts, Measure::Apply, cfg, &m);
        let t = if t.is_empty() {
            "stopped, see below".to_string()
        } else {
            format!("{t} (projected)")
        };
        row(cfg, "apply*", one.apply, Some(one.applied), None, &t);
    }
}

fn print_replan(cfg: &Config, re: &ReplanResult, verdicts: &mut [Option<Verdict>]) {
    if !re.batch {
        // No target: the per-object re-plan is the comparison, against the old ideal.
        row(
            cfg,
            "re-plan (reads)",
            re.plan,
            Some(re.refreshed),
            cfg.ideal_reads(),
            "",
        );
        return;
    }
    let ideal = cfg.ideal_calls(re.list_calls + re.read_calls);
    let harness = re
        .rss_seeded_kib
        .zip(re.rss_loaded_kib)
        .map(|(s, l)| s.saturating_sub(l));
    let m = Measured {
        ideal,
        harness_kib: harness,
        extra: format!(
            " ({} list and {} single-object read calls)",
            re.list_calls, re.read_calls
        ),
        ..Measured::of(re.plan)
    };
    let t = judge(verdicts, Measure::ListReplan, cfg, &m);
    row(
        cfg,
        "re-plan (list)",
        re.plan,
        Some(re.refreshed),
        ideal,
        &t,
    );
}

fn print_plan_only(cfg: &Config, r: &PlanOnlyResult, verdicts: &mut [Option<Verdict>]) {
    row(cfg, "load", r.load, Some(cfg.n), None, "");
    // Judged on the plan phase, as the first plan of 10,000 is; load + plan (what
    // `terrain plan` takes on a new stack) is said beside it.
    let m = Measured {
        extra: format!(
            " (plan phase; load {}, load + plan {})",
            fmt_secs(r.load.secs),
            fmt_secs(r.load.secs + r.plan.secs)
        ),
        ..Measured::of(r.plan)
    };
    let t = judge(verdicts, Measure::FirstPlan, cfg, &m);
    row(cfg, "plan", r.plan, Some(cfg.n), None, &t);
}

/// Checks on what a re-plan did: no changes, and the calls its mode should make.
fn replan_notes(cfg: &Config, re: &ReplanResult) -> Vec<String> {
    let mut out = Vec::new();
    let label = if re.batch { "(list)" } else { "(reads)" };
    if re.changes != 0 {
        out.push(format!(
            "N = {}, {} ms: the re-plan {label} proposed {} changes; expected none",
            cfg.n, cfg.l, re.changes
        ));
    }
    // All things share one batch key, so a list re-plan makes one list call and no
    // reads; more means lists failed or left objects out (the engine then reads them).
    let expected = if re.batch { (1, 0) } else { (0, re.refreshed) };
    if (re.list_calls, re.read_calls) != expected {
        out.push(format!(
            "N = {}, {} ms: the re-plan {label} made {} list and {} read calls for {} resources; expected {} and {}",
            cfg.n, cfg.l, re.list_calls, re.read_calls, re.refreshed, expected.0, expected.1
        ));
    }
    out
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
    let share = |w: &Writes| 100.0 * w.total_secs / one.apply.secs.max(f64::EPSILON);
    out.push(format!(
        "N = {:>5}, {:>2} ms: apply made {} journal appends (group commit: {} records, {:.1} per append), mean {}, max {}, total {} = {:.0}% of the apply; journal peaked at {:.2} MiB",
        cfg.n,
        cfg.l,
        one.appends.count,
        one.append_records,
        one.append_records as f64 / one.appends.count.max(1) as f64,
        fmt_secs(one.appends.mean_secs()),
        fmt_secs(one.appends.max_secs),
        fmt_secs(one.appends.total_secs),
        share(&one.appends),
        one.journal_max_bytes as f64 / (1024.0 * 1024.0),
    ));
    out.push(format!(
        "N = {:>5}, {:>2} ms: {} compactions (whole snapshot written, journal emptied), mean {}, max {}, total {} = {:.0}% of the apply",
        cfg.n,
        cfg.l,
        one.saves.count,
        fmt_secs(one.saves.mean_secs()),
        fmt_secs(one.saves.max_secs),
        fmt_secs(one.saves.total_secs),
        share(&one.saves),
    ));
    if cfg.l == 0 {
        // What a whole save per operation would cost (the format before the journal):
        // a clone and a save of a state that grows from 0 to N, on average half size.
        out.push(format!(
            "N = {:>5}: state of {} resources is {:.2} MiB; one compaction = LocalBackend::save {} (serialize {}) + State::clone {}; saving the whole state instead of appending would cost ≈ {} over the {} writes of this apply",
            cfg.n,
            cfg.n,
            one.state_bytes as f64 / (1024.0 * 1024.0),
            fmt_secs(one.save_secs),
            fmt_secs(one.serialize_secs),
            fmt_secs(one.clone_secs),
            fmt_secs(one.appends.count as f64 * (one.save_secs + one.clone_secs) / 2.0),
            one.appends.count,
        ));
    }
    out
}

/// A count with thousands separators: `10,000`.
fn fmt_count(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A memory limit in MiB as a target states it: `150 MiB`, `1 GiB`.
fn fmt_mib_limit(mib: f64) -> String {
    if mib >= 1024.0 && (mib / 1024.0).fract() == 0.0 {
        format!("{} GiB", mib / 1024.0)
    } else {
        format!("{mib} MiB")
    }
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
