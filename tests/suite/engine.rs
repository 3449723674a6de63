//! The engine against the call-recording test provider: which calls it makes, in what
//! order, and what the state holds after injected failures, interruptions and drift.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use terrain::addr::Address;
use terrain::engine::{Base, Engine, EngineError, Event, Observer, Quiet, Settings};
use terrain::plan::{Action, Plan};
use terrain::stack::{self, LoadOptions};
use terrain::state::{Backend, LockInfo, Pending, PendingOp, ResourceState, State, StateError};
use terrain::walk::Cancel;
use terrain_providers::protocol::is_unknown;
use terrain_providers::testing::{Call, Op, TestCloud};

/// A state backend in memory that keeps every saved version.
#[derive(Default, Clone)]
struct MemBackend {
    saves: Arc<Mutex<Vec<State>>>,
    lock: Arc<Mutex<Option<LockInfo>>>,
}

impl MemBackend {
    fn history(&self) -> Vec<State> {
        self.saves.lock().expect("lock").clone()
    }
    fn set(&self, s: State) {
        self.saves.lock().expect("lock").push(s);
    }
}

#[async_trait]
impl Backend for MemBackend {
    fn location(&self) -> String {
        "memory".into()
    }
    async fn load(&self) -> Result<Option<State>, StateError> {
        Ok(self.saves.lock().expect("lock").last().cloned())
    }
    async fn save(&self, state: &State) -> Result<(), StateError> {
        self.saves.lock().expect("lock").push(state.clone());
        Ok(())
    }
    async fn lock(&self, info: &LockInfo) -> Result<(), StateError> {
        let mut l = self.lock.lock().expect("lock");
        if let Some(holder) = l.clone() {
            return Err(StateError::LockHeld {
                location: "memory".into(),
                holder: Box::new(holder),
            });
        }
        *l = Some(info.clone());
        Ok(())
    }
    async fn unlock(&self, _id: &str) -> Result<(), StateError> {
        *self.lock.lock().expect("lock") = None;
        Ok(())
    }
    async fn lock_info(&self) -> Result<Option<LockInfo>, StateError> {
        Ok(self.lock.lock().expect("lock").clone())
    }
    async fn force_unlock(&self, _id: &str) -> Result<(), StateError> {
        *self.lock.lock().expect("lock") = None;
        Ok(())
    }
}

/// Collects events, and cancels the walk after `cancel_after` finished operations.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<Event>>,
    cancel_after: Option<(usize, Cancel)>,
}

impl Observer for Recorder {
    fn event(&self, e: Event) {
        let mut ev = self.events.lock().expect("lock");
        ev.push(e);
        if let Some((n, cancel)) = &self.cancel_after {
            if ev
                .iter()
                .filter(|e| matches!(e, Event::Finished { .. }))
                .count()
                >= *n
            {
                cancel.cancel();
            }
        }
    }
}

struct Fixture {
    cloud: TestCloud,
    backend: MemBackend,
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        Self {
            cloud: TestCloud::new(),
            backend: MemBackend::default(),
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn engine(&self, toml: &str) -> Engine {
        self.engine_with(toml, Arc::new(Quiet), 4)
    }

    /// Writes `toml` as the fixture's stack and loads it.
    fn load(&self, toml: &str) -> Result<terrain::stack::Stack, terrain::stack::StackErrors> {
        let path = self.dir.path().join("stack.toml");
        std::fs::write(&path, toml).expect("write stack");
        let env = |_: &str| None;
        stack::load(&LoadOptions {
            path: &path,
            vars: &[],
            var_files: &[],
            environment: terrain::stack::DEFAULT_ENVIRONMENT,
            env: &env,
            registry: &self.cloud.registry(),
        })
    }

    fn engine_with(&self, toml: &str, observer: Arc<dyn Observer>, parallelism: usize) -> Engine {
        let stack = self
            .load(toml)
            .unwrap_or_else(|e| panic!("stack loads: {e}"));
        Engine {
            stack,
            registry: self.cloud.registry(),
            backend: Arc::new(self.backend.clone()),
            settings: Settings {
                parallelism,
                ..Settings::default()
            },
            observer,
            cancel: Cancel::new(),
        }
    }
}

impl Fixture {
    /// The problems loading `toml` reports, rendered as a user sees them.
    fn load_errors(&self, toml: &str) -> String {
        let err = self.load(toml).expect_err("the stack is refused");
        err.diagnostics
            .iter()
            .map(|d| {
                let at = d.span.map(|s| err.sources.locate(s)).unwrap_or_default();
                format!("{at}: {}", d.message)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

async fn plan(e: &Engine) -> (Plan, Base) {
    e.plan(false, &[], "stack.toml", &[]).await.expect("plan")
}

async fn converge(e: &Engine) -> Plan {
    let (p, s) = plan(e).await;
    e.apply(&p, s).await.expect("apply");
    p
}

fn actions(p: &Plan) -> BTreeMap<String, Action> {
    p.changes
        .iter()
        .map(|c| (c.address.to_string(), c.action))
        .collect()
}

fn calls_of(cloud: &TestCloud, op: Op) -> Vec<String> {
    cloud
        .calls()
        .into_iter()
        .filter(|c: &Call| c.op == op)
        .map(|c| c.id)
        .collect()
}

const CHAIN: &str = r#"
[test_thing.a]
name = "a"
value = "first"

[test_thing.b]
name = "b"
value = "${test_thing.a.arn}"

[test_thing.c]
name = "c"
value = "${test_thing.b.endpoint}"

[test_thing.d]
name = "d"
"#;

#[tokio::test]
async fn creates_in_dependency_order_then_plans_nothing() {
    let f = Fixture::new();
    let e = f.engine_with(CHAIN, Arc::new(Quiet), 1);
    let p = converge(&e).await;
    assert!(actions(&p).values().all(|a| *a == Action::Create));
    // Ready operations start in address order, so the order is the same every run.
    assert_eq!(calls_of(&f.cloud, Op::Create), vec!["a", "b", "c", "d"]);
    assert_eq!(f.cloud.objects()["b"]["value"], json!("test:thing/a"));
    assert_eq!(f.cloud.objects()["c"]["value"], json!("https://b.test"));

    f.cloud.clear_calls();
    let (p, _) = plan(&e).await;
    assert!(!p.has_changes(), "second plan is clean: {:?}", actions(&p));
    let ops: Vec<Op> = f.cloud.calls().iter().map(|c| c.op).collect();
    assert_eq!(
        ops,
        vec![Op::List],
        "a no-op plan reads the four things with one list call"
    );
}

#[tokio::test]
async fn failed_step_error_is_not_nested_in_the_report() {
    let f = Fixture::new();
    f.cloud.fail(Op::Create, "a", 1);
    let e = f.engine("[test_thing.a]\nname = \"a\"\n");
    let (p, s) = plan(&e).await;
    let err = e.apply(&p, s).await.expect_err("a fails").to_string();
    assert_eq!(err.matches("apply finished").count(), 1, "{err}");
    assert!(
        err.starts_with(
            "apply finished with 1 error(s):\n  test_thing.a: test.things.create failed"
        ),
        "{err}"
    );
}

#[tokio::test]
async fn failed_create_stops_its_dependents_only() {
    let f = Fixture::new();
    f.cloud.fail(Op::Create, "b", 1);
    let e = f.engine(CHAIN);
    let (p, s) = plan(&e).await;
    let err = e.apply(&p, s).await.expect_err("b fails");
    let EngineError::Apply(errors) = &err else {
        panic!("unexpected error {err}")
    };
    let failed: Vec<String> = errors.iter().map(|(a, _)| a.to_string()).collect();
    assert_eq!(failed, vec!["test_thing.b", "test_thing.c"]);
    assert!(
        errors[0]
            .1
            .contains("test.things.create failed: 500 INTERNAL"),
        "{}",
        errors[0].1
    );
    assert!(
        errors[1].1.contains("not attempted: test_thing.b failed"),
        "{}",
        errors[1].1
    );
    let state = f.backend.load().await.expect("load").expect("state");
    assert_eq!(
        state.resources.keys().collect::<Vec<_>>(),
        vec!["test_thing.a", "test_thing.d"]
    );
    assert!(state.resources.values().all(|r| r.pending.is_none()));

    // The re-run creates only what is missing.
    converge(&e).await;
    for name in ["a", "b", "c", "d"] {
        assert_eq!(f.cloud.creates_of(name), 1, "{name} created once");
    }
}

#[tokio::test]
async fn every_create_is_recorded_before_its_call() {
    let f = Fixture::new();
    let e = f.engine(CHAIN);
    converge(&e).await;
    for addr in [
        "test_thing.a",
        "test_thing.b",
        "test_thing.c",
        "test_thing.d",
    ] {
        let intent = f.backend.history().iter().any(|s| {
            s.resources.get(addr).is_some_and(|r| {
                r.id.is_none()
                    && r.pending
                        .as_ref()
                        .is_some_and(|p| p.op == PendingOp::Create)
            })
        });
        assert!(intent, "{addr}: a saved state holds its create intent");
    }
    let serials: Vec<u64> = f.backend.history().iter().map(|s| s.serial).collect();
    assert!(
        serials.windows(2).all(|w| w[1] > w[0]),
        "serial grows with every save: {serials:?}"
    );
}

/// What a run that died during `test.things.create` of `name` left in the state: the
/// write-ahead intent, no id.
fn pending_create(name: &str, spec: serde_json::Value) -> ResourceState {
    ResourceState {
        kind: "test_thing".into(),
        provider: "test".into(),
        id: None,
        spec: json!(null),
        outputs: json!(null),
        dependencies: vec![],
        sensitive_paths: vec![],
        pending: Some(Pending {
            op: PendingOp::Create,
            started_at: "2026-01-01T00:00:00Z".into(),
            planned_id: Some(name.into()),
            spec,
        }),
        deposed: vec![],
        tainted: false,
    }
}

#[tokio::test]
async fn interrupted_create_found_live_is_adopted_not_created_again() {
    let f = Fixture::new();
    let e = f.engine(CHAIN);
    // A run died after test.things.create for `a` went through but before its result was
    // recorded: the state has only the write-ahead intent.
    let mut s = State::new();
    s.serial = 3;
    s.resources.insert(
        "test_thing.a".into(),
        pending_create("a", json!({"name": "a", "value": "first", "size": 1})),
    );
    f.backend.set(s);
    f.cloud.set_made_by(
        "a",
        json!({"name": "a", "value": "first", "size": 1}),
        "test_thing.a",
    );
    let (p, s) = plan(&e).await;
    // The create resumes: the object may still be coming up, so its outputs are
    // unknown until apply has waited for it.
    let a = p
        .changes
        .iter()
        .find(|c| c.address.to_string() == "test_thing.a")
        .expect("a planned");
    assert_eq!(a.action, Action::Create, "the interrupted create resumes");
    assert!(
        a.notes
            .iter()
            .any(|n| n.contains("adopting the interrupted create of a")),
        "{:?}",
        a.notes
    );
    assert!(
        p.warnings.iter().any(|w| w.contains("found a")),
        "{:?}",
        p.warnings
    );
    e.apply(&p, s).await.expect("apply");
    assert_eq!(
        f.cloud.creates_of("a"),
        0,
        "a is adopted, never created again"
    );
    let state = f.backend.load().await.expect("load").expect("state");
    let a = &state.resources["test_thing.a"];
    assert_eq!(a.id.as_deref(), Some("a"));
    assert!(a.pending.is_none(), "the intent is settled");
    assert!(a.deposed.is_empty(), "the adopted object is not deposed");
    assert_eq!(a.outputs["arn"], json!("test:thing/a"));
}

/// Bug: a kill during a cluster create left the stack unable to plan until the cloud
/// finished: the interrupted create's outputs resolved to null instead of "known after
/// apply", and dependents' plans failed on them.
#[tokio::test]
async fn kill_during_create_then_plan_and_apply_adopt_and_wait() {
    let f = Fixture::new();
    let e = f.engine(CHAIN);
    let mut s = State::new();
    s.serial = 1;
    s.resources.insert(
        "test_thing.a".into(),
        pending_create("a", json!({"name": "a", "value": "first", "size": 1})),
    );
    f.backend.set(s);
    // The object exists (still being made); its outputs are not there yet.
    f.cloud.set_made_by(
        "a",
        json!({"name": "a", "value": "first", "size": 1}),
        "test_thing.a",
    );
    let (p, s) = plan(&e).await;
    let b = p
        .changes
        .iter()
        .find(|c| c.address.to_string() == "test_thing.b")
        .expect("b planned");
    let after = b.after.as_ref().expect("b has a desired spec");
    assert!(
        terrain_providers::protocol::is_unknown(after),
        "b's reference to a is known after apply, not null: {after}"
    );
    e.apply(&p, s).await.expect("apply");
    let (again, _) = plan(&e).await;
    assert!(!again.has_changes(), "converged: {:?}", actions(&again));
    assert_eq!(f.cloud.creates_of("a"), 0);
    assert_eq!(f.cloud.creates_of("b"), 1);
}

#[tokio::test]
async fn interrupted_create_that_made_nothing_is_created_once() {
    let f = Fixture::new();
    let e = f.engine("[test_thing.a]\nname = \"a\"\n");
    let mut s = State::new();
    s.resources.insert(
        "test_thing.a".into(),
        pending_create("a", json!({"name": "a"})),
    );
    f.backend.set(s);
    let p = converge(&e).await;
    assert_eq!(actions(&p)["test_thing.a"], Action::Create);
    assert_eq!(f.cloud.creates_of("a"), 1);
}

fn wide_stack(n: usize) -> String {
    (0..n)
        .map(|i| {
            let dep = if i % 4 == 0 {
                String::new()
            } else {
                format!("value = \"${{test_thing.t{}.arn}}\"\n", i - 1)
            };
            format!("[test_thing.t{i}]\nname = \"t{i}\"\n{dep}\n")
        })
        .collect()
}

#[tokio::test]
async fn aborted_apply_reruns_without_duplicates_or_losses() {
    for abort_ms in [30u64, 70, 110] {
        let f = Fixture::new();
        f.cloud.set_latency(Duration::from_millis(10));
        let toml = wide_stack(24);
        let e = Arc::new(f.engine(&toml));
        let (p, s) = plan(&e).await;
        let task = {
            let e = e.clone();
            tokio::spawn(async move { e.apply(&p, s).await })
        };
        tokio::time::sleep(Duration::from_millis(abort_ms)).await;
        task.abort();
        let _ = task.await;
        // Like a killed process: whatever reached the backend is all there is.
        let e2 = f.engine(&toml);
        converge(&e2).await;
        let (p, _) = plan(&e2).await;
        assert!(!p.has_changes(), "abort at {abort_ms}ms: converged");
        for i in 0..24 {
            assert_eq!(
                f.cloud.creates_of(&format!("t{i}")),
                1,
                "abort at {abort_ms}ms: t{i} created exactly once"
            );
        }
        let state = f.backend.load().await.expect("load").expect("state");
        assert_eq!(state.resources.len(), 24);
        assert!(state
            .resources
            .values()
            .all(|r| r.pending.is_none() && r.id.is_some()));
    }
}

#[tokio::test]
async fn cancel_finishes_in_flight_and_starts_nothing_new() {
    let f = Fixture::new();
    let toml = wide_stack(12);
    let cancel = Cancel::new();
    let recorder = Arc::new(Recorder {
        events: Mutex::new(Vec::new()),
        cancel_after: Some((2, cancel.clone())),
    });
    let mut e = f.engine_with(&toml, recorder.clone(), 2);
    e.cancel = cancel;
    let (p, s) = plan(&e).await;
    let err = e.apply(&p, s).await.expect_err("interrupted");
    assert!(matches!(err, EngineError::Interrupted { .. }), "{err}");
    let started = recorder
        .events
        .lock()
        .expect("lock")
        .iter()
        .filter(|e| matches!(e, Event::Started { .. }))
        .count();
    let finished = recorder
        .events
        .lock()
        .expect("lock")
        .iter()
        .filter(|e| matches!(e, Event::Finished { .. }))
        .count();
    assert_eq!(started, finished, "everything started also finished");
    assert!(finished < 12);
    let state = f.backend.load().await.expect("load").expect("state");
    assert_eq!(
        state.resources.len(),
        finished,
        "every finished create is saved"
    );
    let e = f.engine(&toml);
    converge(&e).await;
    for i in 0..12 {
        assert_eq!(f.cloud.creates_of(&format!("t{i}")), 1);
    }
}

#[tokio::test]
async fn in_place_update_and_replace_with_reason() {
    let f = Fixture::new();
    let base = "[test_thing.a]\nname = \"a\"\nvalue = \"v1\"\nzone = \"z1\"\n[test_thing.b]\nname = \"b\"\nvalue = \"${test_thing.a.zone}\"\n";
    converge(&f.engine(base)).await;
    f.cloud.clear_calls();

    let e = f.engine(&base.replace("v1", "v2"));
    let p = converge(&e).await;
    assert_eq!(actions(&p)["test_thing.a"], Action::Update);
    assert_eq!(actions(&p)["test_thing.b"], Action::NoOp);
    assert_eq!(calls_of(&f.cloud, Op::Update), vec!["a"]);
    f.cloud.clear_calls();

    let e = f.engine(&base.replace("v1", "v2").replace("z1", "z2"));
    let (p, s) = plan(&e).await;
    let a = p
        .changes
        .iter()
        .find(|c| c.address.name == "a")
        .expect("a planned");
    assert_eq!(a.action, Action::Replace);
    assert_eq!(a.replace_because, vec!["zone"]);
    assert_eq!(
        actions(&p)["test_thing.b"],
        Action::Update,
        "b follows a's zone"
    );
    e.apply(&p, s).await.expect("apply");
    let ops: Vec<(Op, String)> = f
        .cloud
        .calls()
        .into_iter()
        .filter(|c| c.op != Op::Read && c.op != Op::List)
        .map(|c| (c.op, c.id))
        .collect();
    assert_eq!(
        ops,
        vec![
            (Op::Delete, "a".into()),
            (Op::Create, "a".into()),
            (Op::Update, "b".into())
        ]
    );
    assert_eq!(f.cloud.objects()["b"]["value"], json!("z2"));
}

#[tokio::test]
async fn create_before_destroy_keeps_the_old_object_until_the_new_one_exists() {
    let f = Fixture::new();
    // The id is the name, so a replacement needs a new name to coexist with the old one.
    let v1 = "[test_thing.a]\nname = \"a1\"\nlifecycle = { create_before_destroy = true }\n";
    converge(&f.engine(v1)).await;
    f.cloud.clear_calls();
    let e = f.engine(&v1.replace("a1", "a2"));
    converge(&e).await;
    let ops: Vec<(Op, String)> = f
        .cloud
        .calls()
        .into_iter()
        .filter(|c| c.op != Op::Read && c.op != Op::List)
        .map(|c| (c.op, c.id))
        .collect();
    assert_eq!(
        ops,
        vec![(Op::Create, "a2".into()), (Op::Delete, "a1".into())]
    );
    let state = f.backend.load().await.expect("load").expect("state");
    assert!(state.resources["test_thing.a"].deposed.is_empty());
    // While the old object waited for deletion, it was recorded as deposed.
    assert!(f.backend.history().iter().any(|s| s
        .resources
        .get("test_thing.a")
        .is_some_and(|r| r.deposed.iter().any(|d| d.id == "a1"))));
}

#[tokio::test]
async fn failed_delete_of_deposed_object_is_retried_next_run() {
    let f = Fixture::new();
    let v1 = "[test_thing.a]\nname = \"a1\"\nlifecycle = { create_before_destroy = true }\n";
    converge(&f.engine(v1)).await;
    f.cloud.fail(Op::Delete, "a1", 1);
    let e = f.engine(&v1.replace("a1", "a2"));
    let (p, s) = plan(&e).await;
    assert!(e.apply(&p, s).await.is_err());
    assert!(
        f.cloud.objects().contains_key("a1"),
        "old object still there"
    );
    let (p, s) = plan(&e).await;
    assert!(
        p.has_changes(),
        "leftover old object is planned for deletion"
    );
    e.apply(&p, s).await.expect("apply");
    assert!(!f.cloud.objects().contains_key("a1"));
    assert!(f.cloud.objects().contains_key("a2"));
}

#[tokio::test]
async fn a_replan_in_sync_holds_each_spec_once_and_rewrites_no_state() {
    // Regression (re-plan memory): a re-plan of objects in sync kept the stored state,
    // the refreshed one and a desired spec per no-op, three copies of every spec.
    let f = Fixture::new();
    let e = f.engine_with(CHAIN, Arc::new(Quiet), 1);
    converge(&e).await;
    let saves = f.backend.history().len();
    let (p, base) = plan(&e).await;
    assert!(!base.learned, "refresh found every object as recorded");
    assert!(
        base.state.resources.is_empty(),
        "the stored entries moved into the plan"
    );
    for c in &p.changes {
        assert_eq!(c.action, Action::NoOp);
        assert!(
            c.before.is_none() && c.after.is_none(),
            "{} copies a spec",
            c.address
        );
        let refreshed = &p.refreshed[&c.address.to_string()].spec;
        assert_eq!(p.before(c), Some(refreshed));
        // The live spec has nulls for the optional fields the stack leaves out; the
        // desired spec has no such keys.
        assert!(refreshed["tags"].is_null());
        let after = p.after(c).expect("after").into_owned();
        assert!(after.get("tags").is_none(), "{}: {after}", c.address);
        assert_eq!(after["name"], refreshed["name"]);
    }
    e.apply(&p, base).await.expect("apply");
    assert_eq!(
        f.backend.history().len(),
        saves,
        "a no-op apply writes no state"
    );

    // One object drifts: only its entry is new, and apply records it.
    f.cloud
        .set_live("d", json!({"name": "d", "value": "edited", "size": 1}));
    let (p, base) = plan(&e).await;
    assert!(base.learned);
    let d = p
        .changes
        .iter()
        .find(|c| c.address.to_string() == "test_thing.d")
        .expect("d");
    assert_eq!(d.action, Action::Update);
    assert!(d.after.is_some() && d.before.is_some());
}

#[tokio::test]
async fn drift_is_shown_and_corrected() {
    let f = Fixture::new();
    let e = f.engine("[test_thing.a]\nname = \"a\"\nvalue = \"v1\"\n");
    converge(&e).await;
    f.cloud
        .set_live("a", json!({"name": "a", "value": "hacked", "size": 1}));
    let (p, s) = plan(&e).await;
    let c = &p.changes[0];
    assert_eq!(c.action, Action::Update);
    let drift = c.drift.as_ref().expect("drift recorded");
    assert_eq!(
        drift.live.as_ref().expect("still exists")["value"],
        json!("hacked")
    );
    e.apply(&p, s).await.expect("apply");
    assert_eq!(f.cloud.objects()["a"]["value"], json!("v1"));

    f.cloud.remove_live("a");
    let (p, _) = plan(&e).await;
    assert_eq!(p.changes[0].action, Action::Create);
    assert!(p.changes[0]
        .drift
        .as_ref()
        .is_some_and(|d| d.live.is_none()));
}

#[tokio::test]
async fn ignore_changes_leaves_outside_edits_alone() {
    let f = Fixture::new();
    let e = f.engine("[test_thing.a]\nname = \"a\"\nvalue = \"v1\"\ntags = { team = \"ml\" }\nlifecycle = { ignore_changes = [\"tags\"] }\n");
    converge(&e).await;
    f.cloud.set_live(
        "a",
        json!({"name": "a", "value": "v1", "tags": {"team": "ops"}, "size": 1}),
    );
    let (p, _) = plan(&e).await;
    assert_eq!(p.changes[0].action, Action::NoOp);
}

#[tokio::test]
async fn destroy_runs_dependents_first_and_counts_gone_as_done() {
    let f = Fixture::new();
    let e = f.engine_with(CHAIN, Arc::new(Quiet), 1);
    converge(&e).await;
    f.cloud.remove_live("d");
    f.cloud.clear_calls();
    let (p, s) = e.plan(true, &[], "stack.toml", &[]).await.expect("plan");
    e.apply(&p, s).await.expect("destroy");
    assert_eq!(calls_of(&f.cloud, Op::Delete), vec!["c", "b", "a"]);
    assert!(f.cloud.objects().is_empty());
    let state = f.backend.load().await.expect("load").expect("state");
    assert!(state.resources.is_empty());
}

#[tokio::test]
async fn prevent_destroy_fails_the_plan_naming_the_resource() {
    let f = Fixture::new();
    let e = f.engine("[test_thing.a]\nname = \"a\"\nlifecycle = { prevent_destroy = true }\n");
    converge(&e).await;
    let err = e
        .plan(true, &[], "stack.toml", &[])
        .await
        .expect_err("refused");
    assert!(
        err.to_string()
            .starts_with("test_thing.a: lifecycle.prevent_destroy is set"),
        "{err}"
    );
    assert!(f.cloud.objects().contains_key("a"));
}

#[tokio::test]
async fn targets_pull_in_dependencies_and_destroy_targets_dependents() {
    let f = Fixture::new();
    let e = f.engine(CHAIN);
    let (p, s) = e
        .plan(false, &[Address::new("test_thing", "b")], "stack.toml", &[])
        .await
        .expect("plan");
    let acts = actions(&p);
    assert_eq!(acts["test_thing.a"], Action::Create);
    assert_eq!(acts["test_thing.b"], Action::Create);
    assert_eq!(acts["test_thing.c"], Action::NoOp);
    assert_eq!(acts["test_thing.d"], Action::NoOp);
    e.apply(&p, s).await.expect("apply");
    converge(&e).await;
    let (p, _) = e
        .plan(true, &[Address::new("test_thing", "b")], "stack.toml", &[])
        .await
        .expect("plan");
    let deleted: Vec<String> = p
        .changes
        .iter()
        .filter(|c| c.action == Action::Delete)
        .map(|c| c.address.to_string())
        .collect();
    assert_eq!(deleted, vec!["test_thing.c", "test_thing.b"]);
}

#[tokio::test]
async fn resources_removed_from_the_stack_are_deleted() {
    let f = Fixture::new();
    converge(&f.engine(CHAIN)).await;
    let e =
        f.engine("[test_thing.a]\nname = \"a\"\nvalue = \"first\"\n[test_thing.d]\nname = \"d\"\n");
    let p = converge(&e).await;
    assert_eq!(actions(&p)["test_thing.c"], Action::Delete);
    assert_eq!(actions(&p)["test_thing.b"], Action::Delete);
    let dels = calls_of(&f.cloud, Op::Delete);
    assert_eq!(
        dels,
        vec!["c", "b"],
        "dependents first, from the state's record of dependencies"
    );
}

#[tokio::test]
async fn secrets_stay_out_of_plans_but_are_marked_in_state() {
    let f = Fixture::new();
    let e = f.engine("[variables.pw]\ndefault = \"hunter2\"\nsensitive = true\n[test_thing.a]\nname = \"a\"\nsecret = \"${var.pw}\"\nvalue = \"user:${var.pw}\"\n");
    let (p, s) = plan(&e).await;
    let human = terrain::output::plan::render(
        &p,
        terrain::output::Style {
            tty: false,
            color: false,
        },
    );
    let doc = terrain::output::plan::to_json(&p);
    let json = doc.to_string();
    assert!(!human.contains("hunter2"), "{human}");
    assert!(!json.contains("hunter2"), "{json}");
    assert!(human.contains("(sensitive value)"));
    // JSON has nulls where the secrets were, marked beside them, and no marker text.
    assert!(!json.contains("(sensitive value)"), "{json}");
    let a = &doc["changes"][0];
    assert_eq!(a["after"]["secret"], serde_json::Value::Null, "{a}");
    assert_eq!(
        a["after"]["value"],
        serde_json::Value::Null,
        "derived from a secret: {a}"
    );
    assert_eq!(a["after"]["name"], "a");
    assert_eq!(a["after_sensitive"], json!({"secret": true, "value": true}));
    e.apply(&p, s).await.expect("apply");
    let state = f.backend.load().await.expect("load").expect("state");
    let r = &state.resources["test_thing.a"];
    assert!(r.sensitive_paths.contains(&"spec.secret".to_string()));
    assert!(
        r.sensitive_paths.contains(&"spec.value".to_string()),
        "derived from a secret: {:?}",
        r.sensitive_paths
    );
}

#[tokio::test]
async fn saved_plan_is_refused_once_the_state_moved_on() {
    let f = Fixture::new();
    let e = f.engine(CHAIN);
    let (p, _) = plan(&e).await;
    converge(&e).await;
    let state = e.load_state().await.expect("load");
    let err = e.check_fresh(&p, Some(&state)).expect_err("stale");
    assert!(err.to_string().contains("the saved plan is stale"), "{err}");
}

/// The engine with every setting of `engine_with` but `batch_refresh` off.
fn per_object(f: &Fixture, toml: &str) -> Engine {
    let mut e = f.engine_with(toml, Arc::new(Quiet), 10);
    e.settings.batch_refresh = false;
    e
}

#[tokio::test]
async fn batch_refresh_lists_once_and_still_sees_drift_and_deletes_per_object() {
    let f = Fixture::new();
    let e = f.engine_with(CHAIN, Arc::new(Quiet), 2);
    converge(&e).await;
    f.cloud
        .set_live("b", json!({"name": "b", "value": "hacked", "size": 1}));
    f.cloud.remove_live("d");
    f.cloud.clear_calls();
    let (p, _) = plan(&e).await;
    let acts = actions(&p);
    assert_eq!(acts["test_thing.a"], Action::NoOp);
    assert_eq!(
        acts["test_thing.b"],
        Action::Update,
        "drift seen in the list"
    );
    assert_eq!(acts["test_thing.d"], Action::Create, "gone from the list");
    let b = p
        .changes
        .iter()
        .find(|c| c.address.name == "b")
        .expect("b planned");
    assert_eq!(
        b.drift
            .as_ref()
            .and_then(|d| d.live.as_ref())
            .map(|l| l["value"].clone()),
        Some(json!("hacked"))
    );
    // One list for all four; the one it did not show is read alone before it is called
    // gone (a list may lag behind a create).
    let calls: Vec<(Op, String)> = f.cloud.calls().into_iter().map(|c| (c.op, c.id)).collect();
    assert_eq!(calls, vec![(Op::List, "*".into()), (Op::Read, "d".into())]);
}

#[tokio::test]
async fn a_failed_list_falls_back_to_one_read_each_with_a_warning() {
    let f = Fixture::new();
    let e = f.engine_with(CHAIN, Arc::new(Quiet), 2);
    converge(&e).await;
    f.cloud.clear_calls();
    f.cloud.fail(Op::List, "*", 1);
    let (p, _) = plan(&e).await;
    assert!(!p.has_changes(), "{:?}", actions(&p));
    let mut reads = calls_of(&f.cloud, Op::Read);
    reads.sort();
    assert_eq!(reads, vec!["a", "b", "c", "d"]);
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("listing 4 objects failed")
                && w.contains("injected failure")
                && w.contains("each was read alone")),
        "{:?}",
        p.warnings
    );
}

#[tokio::test]
async fn per_object_refresh_reads_each_object_alone() {
    let f = Fixture::new();
    converge(&f.engine_with(CHAIN, Arc::new(Quiet), 2)).await;
    f.cloud.clear_calls();
    let e = per_object(&f, CHAIN);
    let (p, _) = plan(&e).await;
    assert!(!p.has_changes());
    let ops: Vec<Op> = f.cloud.calls().iter().map(|c| c.op).collect();
    assert_eq!(ops, vec![Op::Read; 4]);
}

#[tokio::test]
async fn refresh_failure_names_the_address_and_call() {
    let f = Fixture::new();
    let e = f.engine("[test_thing.a]\nname = \"a\"\n");
    converge(&e).await;
    f.cloud.fail(Op::Read, "a", 1);
    let err = e
        .plan(false, &[], "s", &[])
        .await
        .expect_err("refresh fails");
    assert_eq!(
        err.to_string(),
        "test_thing.a: refresh: test.things.get failed: 500 INTERNAL: injected failure"
    );
}

#[tokio::test]
async fn stack_file_unused_helper_paths_exist() {
    // Guards the fixture itself: the stack file is where the engine was told.
    let f = Fixture::new();
    let _ = f.engine("[test_thing.a]\nname = \"a\"\n");
    assert!(Path::new(&f.dir.path().join("stack.toml")).exists());
}

/// A node pool and what runs on it: `job` is placed on the pool through its force-new
/// `zone`, and `watch` reads the outputs that follow other parts of the pool.
const POOL: &str = r#"
[test_pool.gpu]
name = "gpu"
machine = "a100"
machine_labels = { team = "ml" }
autoscaling = { min = 0, max = 2 }

[test_thing.job]
name = "job"
zone = "${test_pool.gpu.placement}"
value = "${test_pool.gpu.cluster}"

[test_thing.watch]
name = "watch"
value = "max ${test_pool.gpu.max_nodes}"
size = "${test_pool.gpu.generation}"
"#;

/// The planned spec of `address`.
fn planned(p: &Plan, address: &str) -> serde_json::Value {
    p.changes
        .iter()
        .find(|c| c.address.to_string() == address)
        .and_then(|c| p.after(c))
        .map(std::borrow::Cow::into_owned)
        .unwrap_or_else(|| panic!("{address} has a planned spec"))
}

#[tokio::test]
async fn pool_autoscaling_edit_does_not_replace_jobs_placed_on_it() {
    // Regression: editing a node pool's autoscaling made every job placed on it plan
    // as a replace, because the pool's outputs all became "known after apply".
    let f = Fixture::new();
    converge(&f.engine(POOL)).await;
    assert_eq!(f.cloud.objects()["job"]["zone"], json!("gpu/a100"));
    f.cloud.clear_calls();

    let e = f.engine(&POOL.replace("max = 2", "max = 4"));
    let (p, s) = plan(&e).await;
    let acts = actions(&p);
    assert_eq!(acts["test_pool.gpu"], Action::Update);
    assert_eq!(
        acts["test_thing.job"],
        Action::NoOp,
        "placement is unchanged"
    );
    assert_eq!(planned(&p, "test_thing.job")["zone"], json!("gpu/a100"));
    // max_nodes follows autoscaling.max and generation follows everything.
    assert_eq!(acts["test_thing.watch"], Action::Update);
    assert!(is_unknown(&planned(&p, "test_thing.watch")["value"]));
    assert!(is_unknown(&planned(&p, "test_thing.watch")["size"]));
    assert_eq!(
        p.changes.iter().filter(|c| c.is_change()).count(),
        2,
        "{acts:?}"
    );
    e.apply(&p, s).await.expect("apply");
    assert_eq!(calls_of(&f.cloud, Op::Update), vec!["gpu", "watch"]);
    assert!(calls_of(&f.cloud, Op::Create).is_empty());
    assert!(calls_of(&f.cloud, Op::Delete).is_empty());
    assert_eq!(f.cloud.objects()["watch"]["value"], json!("max 4"));
    assert_eq!(f.cloud.objects()["watch"]["size"], json!(2));
    let (p, _) = plan(&e).await;
    assert!(!p.has_changes(), "converged: {:?}", actions(&p));
}

#[tokio::test]
async fn an_update_the_kind_refuses_fails_the_plan_and_changes_nothing() {
    let f = Fixture::new();
    let large = POOL.replace("machine = \"a100\"", "machine = \"large\"");
    converge(&f.engine(&large)).await;
    f.cloud.clear_calls();

    let small = large.replace("machine = \"large\"", "machine = \"small\"");
    let e = f.engine(&small);
    let err = e
        .plan(false, &[], "s", &[])
        .await
        .expect_err("the kind refuses the change");
    assert_eq!(
        err.to_string(),
        "test_pool.gpu: cannot be updated in place: machine: large machines cannot shrink to small in place; rename the pool to replace it"
    );
    assert!(calls_of(&f.cloud, Op::Update).is_empty());
    assert!(calls_of(&f.cloud, Op::Create).is_empty());
    assert!(calls_of(&f.cloud, Op::Delete).is_empty());

    // A replace starts afresh, so the same edit with a new name is planned.
    let e = f.engine(&small.replace("name = \"gpu\"", "name = \"gpu2\""));
    let (p, _) = plan(&e).await;
    assert_eq!(actions(&p)["test_pool.gpu"], Action::Replace);
}

#[tokio::test]
async fn edits_to_fields_an_output_does_not_follow_keep_it_known() {
    let f = Fixture::new();
    converge(&f.engine(POOL)).await;
    f.cloud.clear_calls();

    // A sibling of the followed `autoscaling.max` is not taken for it: max_nodes stays
    // known (only watch's size, from generation, waits for the update).
    let e = f.engine(&POOL.replace("min = 0", "min = 1"));
    let (p, s) = plan(&e).await;
    let acts = actions(&p);
    assert_eq!(acts["test_pool.gpu"], Action::Update);
    assert_eq!(acts["test_thing.job"], Action::NoOp);
    assert_eq!(planned(&p, "test_thing.watch")["value"], json!("max 2"));
    assert!(is_unknown(&planned(&p, "test_thing.watch")["size"]));
    e.apply(&p, s).await.expect("apply");

    // Nor is a field whose name merely starts with the followed `machine`.
    let e = f.engine(
        &POOL
            .replace("min = 0", "min = 1")
            .replace("team = \"ml\"", "team = \"ops\""),
    );
    let (p, s) = plan(&e).await;
    assert_eq!(actions(&p)["test_pool.gpu"], Action::Update);
    assert_eq!(actions(&p)["test_thing.job"], Action::NoOp);
    e.apply(&p, s).await.expect("apply");

    assert_eq!(
        calls_of(&f.cloud, Op::Update),
        vec!["gpu", "watch", "gpu", "watch"]
    );
    assert_eq!(f.cloud.creates_of("job"), 1);
    assert_eq!(
        f.cloud.objects()["gpu"]["machine_labels"],
        json!({"team": "ops"})
    );
}

#[tokio::test]
async fn edits_to_a_followed_field_make_the_output_unknown() {
    let f = Fixture::new();
    converge(&f.engine(POOL)).await;
    f.cloud.clear_calls();

    // placement follows machine: the job placed on the pool must move, and its zone
    // forces a replace.
    let e = f.engine(&POOL.replace("a100", "h100"));
    let (p, s) = plan(&e).await;
    let acts = actions(&p);
    assert_eq!(acts["test_pool.gpu"], Action::Update);
    let job = p
        .changes
        .iter()
        .find(|c| c.address.to_string() == "test_thing.job")
        .expect("job planned");
    assert_eq!(job.action, Action::Replace);
    assert_eq!(job.replace_because, vec!["zone"]);
    assert!(is_unknown(&planned(&p, "test_thing.job")["zone"]));
    // cluster follows nothing, so it stays known even through this update.
    assert_eq!(
        planned(&p, "test_thing.job")["value"],
        json!("test-cluster")
    );
    // max_nodes follows only autoscaling.max, which did not change.
    assert_eq!(planned(&p, "test_thing.watch")["value"], json!("max 2"));
    e.apply(&p, s).await.expect("apply");
    assert_eq!(f.cloud.objects()["job"]["zone"], json!("gpu/h100"));
    assert_eq!(f.cloud.creates_of("job"), 2, "replaced once");
    assert_eq!(f.cloud.creates_of("gpu"), 1, "the pool updated in place");

    // Adding autoscaling where there was none changes the table as a whole, which
    // covers the followed autoscaling.max inside it.
    let bare = POOL.replace("autoscaling = { min = 0, max = 2 }\n", "");
    converge(&f.engine(&bare.replace("a100", "h100"))).await;
    assert_eq!(f.cloud.objects()["watch"]["value"], json!("max 1"));
    let e = f.engine(&POOL.replace("a100", "h100"));
    let (p, _) = plan(&e).await;
    assert_eq!(actions(&p)["test_pool.gpu"], Action::Update);
    assert_eq!(actions(&p)["test_thing.job"], Action::NoOp);
    assert!(is_unknown(&planned(&p, "test_thing.watch")["value"]));
}

#[tokio::test]
async fn outputs_without_a_declaration_are_unknown_after_any_update() {
    let f = Fixture::new();
    // test_thing's outputs declare nothing: b's value waits for a's update.
    converge(&f.engine(CHAIN)).await;
    let e = f.engine(&CHAIN.replace("value = \"first\"", "value = \"second\""));
    let (p, s) = plan(&e).await;
    let acts = actions(&p);
    assert_eq!(acts["test_thing.a"], Action::Update);
    assert_eq!(acts["test_thing.b"], Action::Update);
    assert!(is_unknown(&planned(&p, "test_thing.b")["value"]));
    assert_eq!(acts["test_thing.d"], Action::NoOp);
    e.apply(&p, s).await.expect("apply");
    // The value came back the same, so the next plan is clean.
    assert_eq!(f.cloud.objects()["b"]["value"], json!("test:thing/a"));
    let (p, _) = plan(&e).await;
    assert!(!p.has_changes(), "{:?}", actions(&p));
}

#[tokio::test]
async fn a_create_that_fails_after_making_its_object_is_kept_tainted_and_replaced() {
    // A run that fails (a Job out of retries, a pipeline execution that failed) exists
    // once its create returns: forgetting it left an orphan, and the next apply adopted
    // the failed run instead of starting a new one.
    let f = Fixture::new();
    f.cloud.fail_after_create("run", 1);
    let stack = "[test_thing.run]\nname = \"run\"\n\n[test_thing.after]\nname = \"after\"\nvalue = \"${test_thing.run.id}\"\n";
    let e = f.engine(stack);
    let (p, s) = plan(&e).await;
    let err = e.apply(&p, s).await.expect_err("the create fails");
    let message = err.to_string();
    assert!(
        message.contains(
            "test_thing.run: test.things.create failed: injected: the object came out broken"
        ),
        "{message}"
    );
    assert!(
        message.contains("kept as tainted; the next apply replaces it"),
        "{message}"
    );
    let state = e.load_state().await.expect("state");
    let run = &state.resources["test_thing.run"];
    assert!(run.tainted);
    assert_eq!(run.id.as_deref(), Some("run"));
    assert!(run.pending.is_none());
    assert!(!state.resources.contains_key("test_thing.after"));

    let (p, s) = plan(&e).await;
    let acts = actions(&p);
    assert_eq!(acts["test_thing.run"], Action::Replace);
    assert_eq!(acts["test_thing.after"], Action::Create);
    let text = terrain::output::plan::render(
        &p,
        terrain::output::Style {
            tty: false,
            color: false,
        },
    );
    assert!(
        text.contains("-/+ test_thing.run is tainted, so must be replaced\n"),
        "{text}"
    );
    f.cloud.clear_calls();
    e.apply(&p, s).await.expect("the replace succeeds");
    assert_eq!(calls_of(&f.cloud, Op::Delete), vec!["run"]);
    assert_eq!(f.cloud.creates_of("run"), 2);
    let state = e.load_state().await.expect("state");
    assert!(!state.resources["test_thing.run"].tainted);
    let (p, _) = plan(&e).await;
    assert!(!p.has_changes(), "converged: {:?}", actions(&p));
}

/// A provider that answers a create with something other than what the plan promised
/// fails the apply, naming the field (the object is still recorded as reported).
#[tokio::test]
async fn provider_result_inconsistent_with_the_plan_fails_naming_the_field() {
    let f = Fixture::new();
    let e = f.engine(CHAIN);
    f.cloud.misreport("d", json!({"size": 7}));
    let (p, s) = plan(&e).await;
    let err = e
        .apply(&p, s)
        .await
        .expect_err("the provider broke its promise");
    let text = err.to_string();
    assert!(text.contains("test_thing.d"), "{text}");
    assert!(
        text.contains("inconsistent result") && text.contains("size: planned 1, got 7"),
        "{text}"
    );
    let state = f.backend.load().await.expect("load").expect("state");
    assert_eq!(
        state.resources["test_thing.d"].id.as_deref(),
        Some("d"),
        "what the provider made is not lost"
    );
    // The others are unaffected.
    assert_eq!(state.resources["test_thing.c"].id.as_deref(), Some("c"));
}

/// A stack of `test_thing`s: one per key of `pools` (a variable), `shards` numbered
/// copies, and one thing reading from both.
fn instances_stack(pools: &str, shards: usize) -> String {
    format!(
        r#"
[variables.pools]
default = {pools}

[test_thing.pool]
for_each = "${{var.pools}}"
name = "pool-${{each.key}}"
size = "${{each.value.size}}"

[test_thing.shard]
count = {shards}
name = "shard-${{count.index}}"
value = "${{test_thing.pool[\"a\"].arn}}"

[test_thing.all]
name = "all"
items = "${{test_thing.shard[*].name}}"
"#
    )
}

#[tokio::test]
async fn count_and_for_each_make_one_object_per_instance_and_a_removed_key_destroys_only_it() {
    let f = Fixture::new();
    let e = f.engine(&instances_stack(
        "{ a = { size = 2 }, b = { size = 3 } }",
        2,
    ));
    let p = converge(&e).await;
    assert_eq!(
        actions(&p).keys().cloned().collect::<Vec<_>>(),
        [
            "test_thing.all",
            "test_thing.pool[\"a\"]",
            "test_thing.pool[\"b\"]",
            "test_thing.shard[0]",
            "test_thing.shard[1]",
        ]
    );
    let objects = f.cloud.objects();
    assert_eq!(objects["pool-b"]["size"], json!(3));
    assert_eq!(objects["shard-1"]["value"], json!("test:thing/pool-a"));
    assert_eq!(objects["all"]["items"], json!(["shard-0", "shard-1"]));
    let state = f.backend.load().await.expect("load").expect("state");
    assert!(state.resources.contains_key("test_thing.pool[\"b\"]"));

    // Removing key b and one shard destroys exactly those; the splat follows.
    let e = f.engine(&instances_stack("{ a = { size = 2 } }", 1));
    f.cloud.clear_calls();
    let (p, s) = plan(&e).await;
    let changed: BTreeMap<String, Action> = actions(&p)
        .into_iter()
        .filter(|(_, a)| *a != Action::NoOp)
        .collect();
    assert_eq!(
        changed,
        BTreeMap::from([
            ("test_thing.all".to_string(), Action::Update),
            ("test_thing.pool[\"b\"]".to_string(), Action::Delete),
            ("test_thing.shard[1]".to_string(), Action::Delete),
        ])
    );
    e.apply(&p, s).await.expect("apply");
    let mut deleted = calls_of(&f.cloud, Op::Delete);
    deleted.sort();
    assert_eq!(deleted, vec!["pool-b", "shard-1"]);
    // Adding a key creates exactly one.
    let e = f.engine(&instances_stack(
        "{ a = { size = 2 }, c = { size = 1 } }",
        1,
    ));
    f.cloud.clear_calls();
    converge(&e).await;
    assert_eq!(calls_of(&f.cloud, Op::Create), vec!["pool-c"]);
    let (p, _) = plan(&e).await;
    assert!(!p.has_changes(), "{:?}", actions(&p));
}

#[tokio::test]
async fn a_target_without_a_key_covers_every_instance() {
    let f = Fixture::new();
    let e = f.engine(&instances_stack(
        "{ a = { size = 2 }, b = { size = 3 } }",
        3,
    ));
    let target = Address::parse("test_thing.shard").expect("address");
    let (p, _) = e
        .plan(false, &[target], "stack.toml", &[])
        .await
        .expect("plan");
    let planned: Vec<String> = p
        .changes
        .iter()
        .filter(|c| c.is_change())
        .map(|c| c.address.to_string())
        .collect();
    assert_eq!(
        planned,
        [
            "test_thing.pool[\"a\"]",
            "test_thing.shard[0]",
            "test_thing.shard[1]",
            "test_thing.shard[2]"
        ]
    );
}

#[test]
fn a_count_known_only_after_apply_is_refused_naming_the_field() {
    let f = Fixture::new();
    let err = f.load_errors(
        "[test_thing.a]\nname = \"a\"\n\n[test_thing.b]\ncount = \"${test_thing.a.version}\"\nname = \"b\"\n",
    );
    assert!(
        err.contains("stack.toml:5:10: test_thing.b.count must be known at plan: `${test_thing.a.version}` may be known only after apply"),
        "{err}"
    );
}

#[test]
fn for_each_over_a_sensitive_variable_is_refused_without_showing_it() {
    let f = Fixture::new();
    let err = f.load_errors(
        "[variables.keys]\ndefault = [\"hunter2\"]\nsensitive = true\n\n[test_thing.a]\nfor_each = \"${var.keys}\"\nname = \"${each.key}\"\n",
    );
    assert!(err.contains("variable `keys` is sensitive"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

#[test]
fn references_to_instances_are_checked_against_the_keys() {
    let f = Fixture::new();
    let err = f.load_errors(&format!(
        "{}\n[test_thing.bad]\nname = \"${{test_thing.pool[\\\"z\\\"].name}}\"\nvalue = \"${{test_thing.shard.name}}\"\nzone = \"${{test_thing.shard[5].name}}\"\nitems = \"${{test_thing.all[*].name}}\"\n",
        instances_stack("{ a = { size = 2 } }", 2)
    ));
    for want in [
        "test_thing.bad: `test_thing.pool` has no instance [\"z\"]",
        "test_thing.bad: `test_thing.shard` has count = 2, so a reference names one instance",
        "test_thing.bad: `test_thing.shard` has count = 2, so it has no instance [5]",
        "test_thing.bad: `test_thing.all` has neither `count` nor `for_each`, so it has no `[*]`",
    ] {
        assert!(err.contains(want), "{want}:\n{err}");
    }
}

#[tokio::test]
async fn a_moved_block_keeps_its_objects_and_plans_no_replace() {
    let f = Fixture::new();
    let e = f.engine("[test_thing.single]\nname = \"one\"\n\n[test_thing.old]\ncount = 2\nname = \"old-${count.index}\"\n");
    converge(&e).await;
    f.cloud.clear_calls();
    // A hand-written resource becomes instance [0] of a block; a block is renamed.
    let e = f.engine(
        "[test_thing.single]\ncount = 1\nname = \"one\"\n\n[test_thing.new]\ncount = 2\nname = \"old-${count.index}\"\n\n[[moved]]\nfrom = \"test_thing.single\"\nto = \"test_thing.single[0]\"\n\n[[moved]]\nfrom = \"test_thing.old\"\nto = \"test_thing.new\"\n",
    );
    let (p, s) = plan(&e).await;
    assert!(
        p.changes.iter().all(|c| c.action == Action::NoOp),
        "{:?}",
        actions(&p)
    );
    let moved: Vec<(String, String)> = p
        .moved
        .iter()
        .map(|m| (m.from.clone(), m.to.clone()))
        .collect();
    assert_eq!(
        moved,
        [
            (
                "test_thing.old[0]".to_string(),
                "test_thing.new[0]".to_string()
            ),
            (
                "test_thing.old[1]".to_string(),
                "test_thing.new[1]".to_string()
            ),
            (
                "test_thing.single".to_string(),
                "test_thing.single[0]".to_string()
            ),
        ]
    );
    assert!(p.has_changes(), "a move changes the state");
    e.apply(&p, s).await.expect("apply");
    assert!(calls_of(&f.cloud, Op::Create).is_empty());
    assert!(calls_of(&f.cloud, Op::Delete).is_empty());
    let state = f.backend.load().await.expect("load").expect("state");
    let keys: Vec<&String> = state.resources.keys().collect();
    assert_eq!(
        keys,
        [
            "test_thing.new[0]",
            "test_thing.new[1]",
            "test_thing.single[0]"
        ]
    );
    let (p, _) = plan(&e).await;
    assert!(!p.has_changes(), "moves are done once: {:?}", p.moved);
}

#[test]
fn a_moved_entry_whose_source_is_still_in_the_stack_is_refused() {
    let f = Fixture::new();
    let err = f.load_errors(
        "[test_thing.a]\nname = \"a\"\n\n[test_thing.b]\nname = \"b\"\n\n[[moved]]\nfrom = \"test_thing.a\"\nto = \"test_thing.b\"\n\n[[moved]]\nfrom = \"test_thing.a\"\nto = \"test_pool.a\"\n",
    );
    assert!(
        err.contains("stack.toml:8:9: moved test_thing.a → test_thing.b: `test_thing.a` is still in the stack; remove its block"),
        "{err}"
    );
    assert!(
        err.contains("a test_thing cannot become a test_pool"),
        "{err}"
    );
}

impl Fixture {
    /// Writes `files` (path relative to the fixture's directory, content).
    fn write(&self, files: &[(&str, &str)]) {
        for (path, text) in files {
            let path = self.dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
    }
}

/// A module making `replicas` things named after its `prefix`, with an inner module
/// call for a tag, and outputs of both.
const POOL_MODULE: &str = r#"
[variables]
prefix = "pool"
replicas = 1
token = { sensitive = true, default = "none" }

[module.tag]
source = "../tag"
text = "${var.prefix}"

[test_thing.node]
count = "${var.replicas}"
name = "${var.prefix}-${count.index}"
value = "${module.tag.value}"

[test_thing.key]
name = "${var.prefix}-key"
secret = "${var.token}"
depends_on = ["test_thing.node"]

[outputs.first]
value = "${test_thing.node[0].arn}"

[outputs.names]
value = "${test_thing.node[*].name}"
"#;

const TAG_MODULE: &str = r#"
[variables]
text = { type = "string" }

[test_thing.tag]
name = "tag-${var.text}"

[outputs.value]
value = "${test_thing.tag.endpoint}"
"#;

fn module_stack(calls: &str) -> String {
    format!(
        r#"
[variables.token]
default = "hunter2"
sensitive = true

{calls}

[test_thing.user]
name = "user"
value = '${{module.gpu["a"].first}}'
items = '${{module.gpu["b"].names}}'
"#
    )
}

#[tokio::test]
async fn modules_nest_their_outputs_reach_the_stack_and_keys_add_or_remove_one_instance() {
    let f = Fixture::new();
    f.write(&[
        ("modules/pool/main.toml", POOL_MODULE),
        ("modules/tag/main.toml", TAG_MODULE),
    ]);
    let calls = |keys: &str| {
        format!(
            "[module.gpu]\nsource = \"modules/pool\"\nfor_each = {keys}\nprefix = \"gpu-${{each.key}}\"\nreplicas = \"${{each.value}}\"\ntoken = \"${{var.token}}\"\n"
        )
    };
    let e = f.engine(&module_stack(&calls("{ a = 1, b = 2 }")));
    let p = converge(&e).await;
    let addrs: Vec<String> = actions(&p).keys().cloned().collect();
    for want in [
        "module.gpu[\"a\"].module.tag.test_thing.tag",
        "module.gpu[\"a\"].test_thing.key",
        "module.gpu[\"a\"].test_thing.node[0]",
        "module.gpu[\"b\"].test_thing.node[1]",
        "test_thing.user",
    ] {
        assert!(addrs.iter().any(|a| a == want), "{want}: {addrs:?}");
    }
    let objects = f.cloud.objects();
    assert_eq!(objects["user"]["value"], json!("test:thing/gpu-a-0"));
    assert_eq!(objects["user"]["items"], json!(["gpu-b-0", "gpu-b-1"]));
    assert_eq!(objects["gpu-b-1"]["value"], json!("https://tag-gpu-b.test"));
    // A sensitive module variable keeps the field it fills secret.
    let key = p
        .changes
        .iter()
        .find(|c| c.address.to_string() == "module.gpu[\"a\"].test_thing.key")
        .expect("key planned");
    assert!(
        key.sensitive_paths.iter().any(|s| s == "secret"),
        "{:?}",
        key.sensitive_paths
    );

    // Dropping key b destroys exactly b's instances (and nothing of a).
    let e = f.engine(
        &module_stack(&calls("{ a = 1 }")).replace("items = '${module.gpu[\"b\"].names}'", ""),
    );
    f.cloud.clear_calls();
    converge(&e).await;
    let mut deleted = calls_of(&f.cloud, Op::Delete);
    deleted.sort();
    assert_eq!(deleted, ["gpu-b-0", "gpu-b-1", "gpu-b-key", "tag-gpu-b"]);
    assert!(calls_of(&f.cloud, Op::Create).is_empty());
    let (p, _) = plan(&e).await;
    assert!(!p.has_changes(), "{:?}", actions(&p));
}

#[test]
fn a_problem_inside_a_module_is_located_in_the_module_file_and_named_by_the_call() {
    let f = Fixture::new();
    f.write(&[
        (
            "modules/pool/main.toml",
            &POOL_MODULE.replace(
                "name = \"${var.prefix}-key\"",
                "name = \"${var.prefx}-key\"",
            ),
        ),
        ("modules/tag/main.toml", TAG_MODULE),
    ]);
    let err = f.load_errors(&module_stack(
        "[module.gpu]\nsource = \"modules/pool\"\nfor_each = [\"a\", \"b\"]\nreplicas = \"two\"\n\n[module.bad]\nsource = \"modules/pool\"\ncolour = \"red\"\n",
    ));
    for want in [
        "modules/pool/main.toml:17:9: module.gpu[\"a\"].test_thing.key: the module has no variable `prefx`",
        "stack.toml:9:13: module.gpu[\"a\"].test_thing.node.count: expected a whole number ≥ 0 or a test, found a string",
        "stack.toml:13:1: module.bad: the module has no variable `colour`",
    ] {
        assert!(err.contains(want), "{want}:\n{err}");
    }
    // A call with wrong arguments is reported once, at the call: nothing inside it
    // or downstream of its outputs piles up.
    assert_eq!(err.matches("module.bad").count(), 1, "{err}");
    assert!(!err.contains("not in the stack"), "{err}");
}

/// A module that makes its thing only when asked: a test of a module variable in
/// `count`, and a choice between two names.
const SWITCH_MODULE: &str = r#"
[variables]
mode = "on"

[test_thing.only]
count = "${var.mode == 'on'}"
name  = "${var.mode != 'on' ? 'never' : 'switched-on'}"
"#;

#[tokio::test]
async fn a_test_of_a_variable_picks_which_blocks_exist_and_which_string_a_field_takes() {
    let f = Fixture::new();
    f.write(&[("modules/switch/main.toml", SWITCH_MODULE)]);
    let stack = |mode: &str| {
        format!(
            "[variables.mode]\ndefault = \"{mode}\"\nallowed = [\"a\", \"b\"]\n\n[test_thing.a]\ncount = \"${{var.mode == 'a'}}\"\nname  = \"${{var.mode == 'a' ? 'first' : 'second'}}\"\n\n[test_thing.b]\ncount = \"${{var.mode != 'a'}}\"\nname  = \"b-${{env}}\"\n\n[module.on]\nsource = \"modules/switch\"\n\n[module.off]\nsource = \"modules/switch\"\nmode   = \"${{var.mode}}\"\n"
        )
    };
    let e = f.engine(&stack("a"));
    converge(&e).await;
    let mut created = calls_of(&f.cloud, Op::Create);
    created.sort();
    assert_eq!(created, ["first", "switched-on"]);
    f.cloud.clear_calls();
    // The other value: test_thing.a[0] goes, test_thing.b[0] comes; the module passed
    // the variable through decides on the stack's value, the other keeps its default.
    let e = f.engine(&stack("b"));
    converge(&e).await;
    assert_eq!(calls_of(&f.cloud, Op::Delete), ["first"]);
    assert_eq!(calls_of(&f.cloud, Op::Create), ["b-default"]);
    let (p, _) = plan(&e).await;
    assert!(!p.has_changes(), "{:?}", actions(&p));
    // A value the variable does not allow is refused where it is written, with the
    // nearest allowed one; `count` says nothing more about it.
    let err = f.load_errors(&stack("c"));
    assert!(
        err.contains("stack.toml:2:12: variables.mode: \"c\" (as its default) is not one of its allowed values: \"a\", \"b\""),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // A secret cannot decide the instances (keys are shown in every address).
    let err = f.load_errors(
        "[variables.mode]\ndefault = \"a\"\nsensitive = true\n\n[test_thing.a]\ncount = \"${var.mode == 'a'}\"\nname = \"x\"\n",
    );
    assert!(
        err.contains("stack.toml:6:10: test_thing.a.count must be known at plan: `${var.mode == 'a'}` tests a sensitive variable"),
        "{err}"
    );
    assert!(!err.contains("\"a\" "), "the secret's value shows: {err}");
    // Only what is known at plan can be tested.
    let err = f.load_errors(
        "[test_thing.a]\nname = \"x\"\n\n[test_thing.b]\nname = \"${test_thing.a.name == 'x'}\"\n",
    );
    assert!(
        err.contains("stack.toml:5:9: `${test_thing.a.name == 'x'}` is not a test: `test_thing.a.name` may be known only after apply"),
        "{err}"
    );
}

#[tokio::test]
async fn a_resource_moved_into_a_module_keeps_its_object() {
    let f = Fixture::new();
    f.write(&[("modules/tag/main.toml", TAG_MODULE)]);
    let e = f.engine("[test_thing.tag]\nname = \"tag-x\"\n");
    converge(&e).await;
    f.cloud.clear_calls();
    let e = f.engine(
        "[module.t]\nsource = \"modules/tag\"\ntext = \"x\"\n\n[[moved]]\nfrom = \"test_thing.tag\"\nto = \"module.t.test_thing.tag\"\n",
    );
    let (p, s) = plan(&e).await;
    assert_eq!(p.moved.len(), 1);
    assert!(
        p.changes.iter().all(|c| c.action == Action::NoOp),
        "{:?}",
        actions(&p)
    );
    e.apply(&p, s).await.expect("apply");
    assert!(calls_of(&f.cloud, Op::Create).is_empty() && calls_of(&f.cloud, Op::Delete).is_empty());
    let state = f.backend.load().await.expect("load").expect("state");
    assert!(state.resources.contains_key("module.t.test_thing.tag"));
}

#[tokio::test]
async fn for_each_over_a_written_table_takes_values_known_only_after_apply() {
    let f = Fixture::new();
    let e = f.engine(
        r#"
[variables.token]
default = "hunter2"
sensitive = true

[test_thing.cluster]
for_each = ["us", "eu"]
name = "cluster-${each.key}"

[test_thing.job]
for_each = { us = { endpoint = "${test_thing.cluster[\"us\"].endpoint}", size = 2 }, eu = { endpoint = "${test_thing.cluster[\"eu\"].endpoint}", size = 3 } }
name = "job-${each.key}"
value = "${each.value.endpoint}"
size = "${each.value.size}"
secret = "${var.token}"
"#,
    );
    let (p, s) = plan(&e).await;
    let job = p
        .changes
        .iter()
        .find(|c| c.address.to_string() == "test_thing.job[\"eu\"]")
        .expect("planned");
    assert_eq!(job.dependencies.len(), 1, "{:?}", job.dependencies);
    assert_eq!(
        job.dependencies[0].to_string(),
        "test_thing.cluster[\"eu\"]"
    );
    e.apply(&p, s).await.expect("apply");
    let objects = f.cloud.objects();
    assert_eq!(objects["job-eu"]["value"], json!("https://cluster-eu.test"));
    assert_eq!(objects["job-us"]["size"], json!(2));
    let (p, _) = plan(&e).await;
    assert!(!p.has_changes(), "{:?}", actions(&p));
}
