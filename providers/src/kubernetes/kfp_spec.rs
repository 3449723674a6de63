//! Compiled Kubeflow Pipelines, checked offline: the YAML the `kfp` compiler writes for
//! a pipeline, a PipelineSpec document (`pipelineInfo`, `components`, `root`,
//! `deploymentSpec`, `schemaVersion`) optionally followed by the Kubernetes platform
//! spec (`platforms.kubernetes.deploymentSpec.executors.*`: node selectors,
//! tolerations, secrets, volumes). A bad pipeline fails at plan with the place in the
//! file (`pipeline.yaml:41:9: …`) rather than when KFP's driver runs the step.
//!
//! Checked: the two documents' shapes; every component is a DAG or names an executor
//! that `deploymentSpec` has; parameter and artifact types; every task's component,
//! the tasks it depends on (existing, no cycles), the inputs it takes from the
//! enclosing DAG's inputs and from other tasks' outputs (which must exist, with the
//! producer among its dependencies), its required inputs, the types of its constants,
//! its retry policy; executors' images and accelerators; the platform spec's executors,
//! node selectors and tolerations. Also owns what the checks of runs and placement
//! need: the pipeline's root inputs, a run's parameters against them, and each task's
//! accelerator and scheduling (its `resourceType`/`resourceCount`, which may be run
//! parameters, substituted).
//!
//! Field names follow KFP 2.17's `pipeline_spec.proto` and
//! `kubernetes_executor_config.proto` as protojson writes them (camelCase).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// The IR versions the KFP 2.x backends run.
pub const SCHEMA_VERSIONS: &[&str] = &["2.0.0", "2.1.0"];

/// `parameterType` values (`ParameterTypeEnum`).
pub const PARAMETER_TYPES: &[&str] = &[
    "NUMBER_DOUBLE",
    "NUMBER_INTEGER",
    "STRING",
    "BOOLEAN",
    "LIST",
    "STRUCT",
    "TASK_FINAL_STATUS",
    "TASK_CONFIG",
];

const PIPELINE_KEYS: &[&str] = &[
    "pipelineInfo",
    "deploymentSpec",
    "sdkVersion",
    "schemaVersion",
    "components",
    "root",
    "defaultPipelineRoot",
];

const TOLERATION_OPERATORS: &[&str] = &["Equal", "Exists"];
const TOLERATION_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// One problem with a compiled pipeline: where (the document, 0 or 1, and a JSON
/// pointer in it) and, once located, the line and column in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub document: usize,
    pub pointer: String,
    pub message: String,
    /// 1-based line and column.
    pub position: Option<(usize, usize)>,
}

impl Problem {
    fn at(document: usize, pointer: &str, message: impl Into<String>) -> Self {
        Self {
            document,
            pointer: pointer.to_string(),
            message: message.into(),
            position: None,
        }
    }

    /// The problem as a user reads it, in the file `source`: `pipeline.yaml:7:12: …`,
    /// or with the pointer when the place is not in the file (a key that is missing).
    pub fn describe(&self, source: &str) -> String {
        match self.position {
            Some((line, column)) => format!("{source}:{line}:{column}: {}", self.message),
            None if self.pointer.is_empty() => format!("{source}: {}", self.message),
            None => format!("{source}: {}: {}", self.pointer, self.message),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe("pipeline"))
    }
}

/// A compiled pipeline: the PipelineSpec and, when compiled with `kfp-kubernetes`, the
/// platform spec.
#[derive(Debug, Clone, PartialEq)]
pub struct Compiled {
    pub spec: Value,
    pub platform: Option<Value>,
}

/// A JSON pointer token (`~` and `/` escaped).
fn token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn join(pointer: &str, key: &str) -> String {
    format!("{pointer}/{}", token(key))
}

/// Parses and checks a compiled pipeline; every problem located in `text`.
pub fn parse(text: &str) -> Result<Compiled, Vec<Problem>> {
    let mut documents = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        match <Value as serde::Deserialize>::deserialize(document) {
            Ok(v) if v.is_null() => {}
            Ok(v) => documents.push(v),
            Err(e) => {
                let position = e.location().map(|l| (l.line(), l.column()));
                let full = e.to_string();
                let message = match position {
                    Some((line, column)) => {
                        full.replacen(&format!(" at line {line} column {column}"), "", 1)
                    }
                    None => full,
                };
                return Err(vec![Problem {
                    document: documents.len(),
                    pointer: String::new(),
                    message,
                    position,
                }]);
            }
        }
    }
    let mut problems = Vec::new();
    let compiled = match documents.len() {
        1 | 2 => {
            let mut docs = documents.into_iter();
            Compiled {
                spec: docs.next().unwrap_or(Value::Null),
                platform: docs.next(),
            }
        }
        0 => {
            return Err(vec![Problem::at(
                0,
                "",
                "the file holds no pipeline: compile one with kfp's `compiler.Compiler().compile(pipeline, \"pipeline.yaml\")`",
            )])
        }
        n => {
            return Err(vec![Problem::at(
                2,
                "",
                format!("a compiled pipeline is one PipelineSpec document and at most one platform document; this file has {n} documents"),
            )])
        }
    };
    problems.extend(check(&compiled));
    if problems.is_empty() {
        return Ok(compiled);
    }
    let positions = locate(text);
    for p in &mut problems {
        p.position = positions.find(p.document, &p.pointer);
    }
    problems.sort_by_key(|p| (p.position.is_none(), p.position, p.document));
    Err(problems)
}

/// Every problem of a parsed pipeline, unlocated.
pub fn check(compiled: &Compiled) -> Vec<Problem> {
    let mut c = Checker {
        out: Vec::new(),
        spec: &compiled.spec,
    };
    c.pipeline();
    if let Some(platform) = &compiled.platform {
        c.platform(platform);
    }
    c.out
}

struct Checker<'a> {
    out: Vec<Problem>,
    spec: &'a Value,
}

/// What a component declares: its input and output parameters and artifacts.
#[derive(Default)]
struct Interface<'a> {
    inputs: BTreeMap<&'a str, &'a Value>,
    input_artifacts: BTreeSet<&'a str>,
    outputs: BTreeSet<&'a str>,
    output_artifacts: BTreeSet<&'a str>,
}

fn interface(component: &Value) -> Interface<'_> {
    fn names(v: &Value) -> BTreeSet<&str> {
        v.as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }
    Interface {
        inputs: component["inputDefinitions"]["parameters"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.as_str(), v)).collect())
            .unwrap_or_default(),
        input_artifacts: names(&component["inputDefinitions"]["artifacts"]),
        outputs: names(&component["outputDefinitions"]["parameters"]),
        output_artifacts: names(&component["outputDefinitions"]["artifacts"]),
    }
}

/// Whether `value` is a constant of parameter type `ty` (protobuf Values carry every
/// number as a double, so an integer may be written `3.0`).
fn fits(ty: &str, value: &Value) -> bool {
    match ty {
        "NUMBER_INTEGER" => value.as_f64().is_some_and(|f| f.fract() == 0.0),
        "NUMBER_DOUBLE" => value.is_number(),
        "STRING" => value.is_string(),
        "BOOLEAN" => value.is_boolean(),
        "LIST" => value.is_array(),
        "STRUCT" => value.is_object(),
        _ => true,
    }
}

/// A placeholder the compiler writes for a value known at run time.
fn is_placeholder(value: &Value) -> bool {
    value.as_str().is_some_and(|s| s.contains("{{$."))
}

impl<'a> Checker<'a> {
    fn problem(&mut self, pointer: &str, message: impl Into<String>) {
        self.out.push(Problem::at(0, pointer, message));
    }

    fn pipeline(&mut self) {
        let spec = self.spec;
        let Some(top) = spec.as_object() else {
            self.problem("", "a compiled pipeline's first document is a PipelineSpec: a mapping with pipelineInfo, components, deploymentSpec and root");
            return;
        };
        for key in top.keys() {
            if !PIPELINE_KEYS.contains(&key.as_str()) {
                self.problem(
                    &join("", key),
                    format!(
                        "unknown key {key:?}; a PipelineSpec has {}",
                        PIPELINE_KEYS.join(", ")
                    ),
                );
            }
        }
        match spec["pipelineInfo"]["name"].as_str() {
            Some(name) if !name.trim().is_empty() => {}
            _ => self.problem("/pipelineInfo", "needs a `name`"),
        }
        match spec["schemaVersion"].as_str() {
            Some(v) if SCHEMA_VERSIONS.contains(&v) => {}
            Some(v) => self.problem(
                "/schemaVersion",
                format!(
                    "{v:?} is not an IR version KFP 2 runs ({})",
                    SCHEMA_VERSIONS.join(", ")
                ),
            ),
            None => self.problem("", "missing schemaVersion (the compiler writes \"2.1.0\")"),
        }
        let executors = spec["deploymentSpec"]["executors"].as_object();
        if executors.is_none() {
            self.problem(
                "/deploymentSpec",
                "needs `executors`, one per container component",
            );
        }
        if let Some(executors) = executors {
            for (label, executor) in executors {
                self.executor(
                    &format!("/deploymentSpec/executors/{}", token(label)),
                    executor,
                );
            }
        }
        let components = spec["components"].as_object();
        if let Some(components) = components {
            for (name, component) in components {
                self.component(&join("/components", name), component);
            }
        } else if !spec["components"].is_null() {
            self.problem(
                "/components",
                "must be a mapping of component names to components",
            );
        }
        if !spec["root"].is_object() {
            self.problem("", "missing `root`, the pipeline's own DAG");
            return;
        }
        if spec["root"]["dag"].is_null() {
            self.problem("/root", "the root component needs a `dag` of tasks");
        }
        self.component("/root", &spec["root"]);
    }

    fn parameters(&mut self, pointer: &str, params: &Value, outputs: bool) {
        let Some(params) = params.as_object() else {
            return;
        };
        for (name, p) in params {
            let at = join(pointer, name);
            let ty = p["parameterType"].as_str();
            match ty {
                Some(t) if PARAMETER_TYPES.contains(&t) => {}
                Some(t) => self.problem(
                    &format!("{at}/parameterType"),
                    format!(
                        "{t:?} is not a parameter type; use one of {}",
                        PARAMETER_TYPES.join(", ")
                    ),
                ),
                None if p["type"].is_string() => {}
                None => self.problem(&at, "needs a `parameterType`"),
            }
            if outputs {
                continue;
            }
            if let (Some(t), Some(default)) = (ty, p.get("defaultValue")) {
                if !fits(t, default) {
                    self.problem(
                        &format!("{at}/defaultValue"),
                        format!("{default} is not a {t} value"),
                    );
                }
            }
        }
    }

    fn artifacts(&mut self, pointer: &str, artifacts: &Value) {
        let Some(artifacts) = artifacts.as_object() else {
            return;
        };
        for (name, a) in artifacts {
            let ty = &a["artifactType"];
            if !(ty["schemaTitle"].is_string()
                || ty["instanceSchema"].is_string()
                || ty["schemaUri"].is_string())
            {
                self.problem(
                    &join(pointer, name),
                    "needs an `artifactType` with a `schemaTitle` (e.g. system.Dataset)",
                );
            }
        }
    }

    fn component(&mut self, pointer: &str, component: &'a Value) {
        if !component.is_object() {
            self.problem(
                pointer,
                "a component is a mapping with a `dag` or an `executorLabel`",
            );
            return;
        }
        for (side, outputs) in [("inputDefinitions", false), ("outputDefinitions", true)] {
            self.parameters(
                &format!("{pointer}/{side}/parameters"),
                &component[side]["parameters"],
                outputs,
            );
            self.artifacts(
                &format!("{pointer}/{side}/artifacts"),
                &component[side]["artifacts"],
            );
        }
        match (&component["dag"], &component["executorLabel"]) {
            (Value::Null, Value::String(label)) => {
                if self.spec["deploymentSpec"]["executors"]
                    .get(label)
                    .is_none()
                {
                    let known = self.spec["deploymentSpec"]["executors"]
                        .as_object()
                        .map(|m| m.keys().cloned().collect::<Vec<_>>().join(", "))
                        .unwrap_or_default();
                    self.problem(
                        &format!("{pointer}/executorLabel"),
                        format!(
                            "no executor {label:?} in deploymentSpec.executors (it has: {known})"
                        ),
                    );
                }
            }
            (Value::Null, Value::Null) => {
                self.problem(pointer, "a component needs a `dag` or an `executorLabel`");
            }
            (dag, Value::Null) => self.dag(&format!("{pointer}/dag"), dag, component),
            _ => self.problem(
                pointer,
                "a component has a `dag` or an `executorLabel`, not both",
            ),
        }
    }

    fn dag(&mut self, pointer: &str, dag: &'a Value, owner: &'a Value) {
        let Some(tasks) = dag["tasks"].as_object() else {
            self.problem(pointer, "a DAG needs `tasks`");
            return;
        };
        let enclosing = interface(owner);
        let mut edges: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (name, task) in tasks {
            let at = join(&format!("{pointer}/tasks"), name);
            let deps: Vec<&str> = task["dependentTasks"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for (i, dep) in deps.iter().enumerate() {
                if *dep == name {
                    self.problem(
                        &format!("{at}/dependentTasks/{i}"),
                        format!("task {name:?} depends on itself"),
                    );
                } else if !tasks.contains_key(*dep) {
                    self.problem(
                        &format!("{at}/dependentTasks/{i}"),
                        format!(
                            "no task {dep:?} in this DAG (it has: {})",
                            tasks.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    );
                }
            }
            edges.insert(name, deps.clone());
            self.task(&at, name, task, tasks, &enclosing, &deps);
        }
        if let Some(cycle) = find_cycle(&edges) {
            self.problem(
                &format!(
                    "{}/dependentTasks",
                    join(&format!("{pointer}/tasks"), cycle[0])
                ),
                format!(
                    "tasks depend on each other in a cycle: {}",
                    cycle.join(" → ")
                ),
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn task(
        &mut self,
        at: &str,
        name: &str,
        task: &'a Value,
        tasks: &'a Map<String, Value>,
        enclosing: &Interface<'a>,
        deps: &[&str],
    ) {
        let components = &self.spec["components"];
        let Some(component_name) = task["componentRef"]["name"].as_str() else {
            self.problem(at, format!("task {name:?} needs `componentRef.name`"));
            return;
        };
        let Some(component) = components.get(component_name) else {
            self.problem(
                &format!("{at}/componentRef/name"),
                format!("no component {component_name:?} in `components`"),
            );
            return;
        };
        let own = interface(component);
        let producer_interface = |producer: &str| -> Option<Interface<'a>> {
            let c = tasks.get(producer)?["componentRef"]["name"].as_str()?;
            Some(interface(components.get(c)?))
        };
        let given = task["inputs"]["parameters"].as_object();
        if let Some(given) = given {
            for (key, input) in given {
                let p = format!("{at}/inputs/parameters/{}", token(key));
                if let Some(source) = input["componentInputParameter"].as_str() {
                    if !enclosing.inputs.contains_key(source) {
                        self.problem(
                            &format!("{p}/componentInputParameter"),
                            format!("the enclosing DAG has no input parameter {source:?}"),
                        );
                    }
                } else if let Some(out) = input.get("taskOutputParameter") {
                    let producer = out["producerTask"].as_str().unwrap_or_default();
                    let key = out["outputParameterKey"].as_str().unwrap_or_default();
                    self.output_ref(
                        &format!("{p}/taskOutputParameter"),
                        producer,
                        key,
                        deps,
                        producer_interface(producer).map(|i| i.outputs),
                        tasks,
                        "output parameter",
                    );
                } else if let Some(constant) = input.get("runtimeValue").map(|r| &r["constant"]) {
                    if let Some(ty) = own
                        .inputs
                        .get(key.as_str())
                        .and_then(|d| d["parameterType"].as_str())
                    {
                        if !is_placeholder(constant) && !fits(ty, constant) {
                            self.problem(
                                &format!("{p}/runtimeValue/constant"),
                                format!("{constant} is not a {ty} value, which input {key:?} of {component_name} takes"),
                            );
                        }
                    }
                } else if let Some(status) = input.get("taskFinalStatus") {
                    let producer = status["producerTask"].as_str().unwrap_or_default();
                    if !tasks.contains_key(producer) {
                        self.problem(
                            &format!("{p}/taskFinalStatus/producerTask"),
                            format!("no task {producer:?} in this DAG"),
                        );
                    }
                } else if !input.get("runtimeParameter").is_some_and(Value::is_string) {
                    self.problem(&p, "an input parameter comes from componentInputParameter, taskOutputParameter, runtimeValue or taskFinalStatus");
                }
            }
        }
        for (input, definition) in &own.inputs {
            let optional = definition["isOptional"].as_bool().unwrap_or(false)
                || definition.get("defaultValue").is_some()
                || definition["parameterType"] == "TASK_FINAL_STATUS";
            if !optional && !given.is_some_and(|g| g.contains_key(*input)) {
                self.problem(
                    &format!("{at}/inputs"),
                    format!("task {name:?} does not give {component_name}'s required input parameter {input:?}"),
                );
            }
        }
        if let Some(artifacts) = task["inputs"]["artifacts"].as_object() {
            for (key, input) in artifacts {
                let p = format!("{at}/inputs/artifacts/{}", token(key));
                if let Some(source) = input["componentInputArtifact"].as_str() {
                    if !enclosing.input_artifacts.contains(source) {
                        self.problem(
                            &format!("{p}/componentInputArtifact"),
                            format!("the enclosing DAG has no input artifact {source:?}"),
                        );
                    }
                } else if let Some(out) = input.get("taskOutputArtifact") {
                    let producer = out["producerTask"].as_str().unwrap_or_default();
                    let key = out["outputArtifactKey"].as_str().unwrap_or_default();
                    self.output_ref(
                        &format!("{p}/taskOutputArtifact"),
                        producer,
                        key,
                        deps,
                        producer_interface(producer).map(|i| i.output_artifacts),
                        tasks,
                        "output artifact",
                    );
                } else {
                    self.problem(
                        &p,
                        "an input artifact comes from taskOutputArtifact or componentInputArtifact",
                    );
                }
            }
        }
        if let Some(retry) = task.get("retryPolicy") {
            let count = &retry["maxRetryCount"];
            if !count.is_null() && count.as_i64().is_none_or(|n| n < 0) {
                self.problem(
                    &format!("{at}/retryPolicy/maxRetryCount"),
                    format!("{count} is not a number of retries (0 or more)"),
                );
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn output_ref(
        &mut self,
        p: &str,
        producer: &str,
        key: &str,
        deps: &[&str],
        outputs: Option<BTreeSet<&str>>,
        tasks: &Map<String, Value>,
        what: &str,
    ) {
        if !tasks.contains_key(producer) {
            self.problem(
                &format!("{p}/producerTask"),
                format!("no task {producer:?} in this DAG"),
            );
            return;
        }
        match outputs {
            Some(outputs) if !outputs.contains(key) => self.problem(
                p,
                format!(
                    "task {producer:?} has no {what} {key:?} (it has: {})",
                    outputs.into_iter().collect::<Vec<_>>().join(", ")
                ),
            ),
            _ => {}
        }
        if !deps.contains(&producer) {
            self.problem(
                p,
                format!("the input comes from task {producer:?}, which is not in dependentTasks"),
            );
        }
    }

    fn executor(&mut self, pointer: &str, executor: &Value) {
        let Some(container) = executor.get("container") else {
            if !(executor.get("importer").is_some()
                || executor.get("resolver").is_some()
                || executor.get("customJob").is_some())
            {
                self.problem(
                    pointer,
                    "an executor is a container, an importer or a resolver",
                );
            }
            return;
        };
        match container["image"].as_str() {
            Some(image) if !image.trim().is_empty() => {}
            _ => self.problem(&format!("{pointer}/container"), "needs an `image`"),
        }
        let accelerator = &container["resources"]["accelerator"];
        if accelerator.is_null() {
            return;
        }
        let at = format!("{pointer}/container/resources/accelerator");
        let ty = accelerator["resourceType"]
            .as_str()
            .or(accelerator["type"].as_str());
        if ty.is_none_or(|t| t.trim().is_empty()) {
            self.problem(
                &at,
                "an accelerator needs a `resourceType` (e.g. nvidia.com/gpu)",
            );
        }
        let count = accelerator
            .get("resourceCount")
            .or(accelerator.get("count"));
        match count {
            Some(c) if is_placeholder(c) => {}
            Some(c) if count_of(c).is_some_and(|n| n > 0) => {}
            Some(c) => self.problem(&at, format!("{c} is not a number of accelerators")),
            None => self.problem(&at, "an accelerator needs a `resourceCount`"),
        }
    }

    fn platform(&mut self, platform: &Value) {
        let Some(top) = platform.as_object() else {
            self.out.push(Problem::at(
                1,
                "",
                "the second document is a platform spec: `platforms: {kubernetes: …}`",
            ));
            return;
        };
        for key in top.keys().filter(|k| *k != "platforms") {
            self.out.push(Problem::at(
                1,
                &join("", key),
                format!("unknown key {key:?}; the platform document has `platforms`"),
            ));
        }
        let Some(executors) =
            platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"].as_object()
        else {
            return;
        };
        for (label, config) in executors {
            let at = format!(
                "/platforms/kubernetes/deploymentSpec/executors/{}",
                token(label)
            );
            if self.spec["deploymentSpec"]["executors"]
                .get(label)
                .is_none()
            {
                self.out.push(Problem::at(
                    1,
                    &at,
                    format!("no executor {label:?} in the PipelineSpec's deploymentSpec"),
                ));
            }
            if let Some(labels) = config["nodeSelector"]["labels"].as_object() {
                for (k, v) in labels {
                    if !v.is_string() {
                        self.out.push(Problem::at(
                            1,
                            &format!("{at}/nodeSelector/labels/{}", token(k)),
                            format!("node selector {k:?} must be a string, got {v}"),
                        ));
                    }
                }
            }
            for (i, t) in config["tolerations"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let tp = format!("{at}/tolerations/{i}");
                if t.get("tolerationJson").is_some() {
                    continue;
                }
                let operator = t["operator"].as_str().unwrap_or("Equal");
                if !TOLERATION_OPERATORS.contains(&operator) {
                    self.out.push(Problem::at(
                        1,
                        &format!("{tp}/operator"),
                        format!("{operator:?} is not a toleration operator (Equal, Exists)"),
                    ));
                }
                if let Some(effect) = t["effect"].as_str().filter(|e| !e.is_empty()) {
                    if !TOLERATION_EFFECTS.contains(&effect) {
                        self.out.push(Problem::at(
                            1,
                            &format!("{tp}/effect"),
                            format!(
                                "{effect:?} is not a taint effect ({})",
                                TOLERATION_EFFECTS.join(", ")
                            ),
                        ));
                    }
                }
                if operator == "Exists" && t["value"].as_str().is_some_and(|v| !v.is_empty()) {
                    self.out.push(Problem::at(
                        1,
                        &format!("{tp}/value"),
                        "a toleration with operator Exists takes no value",
                    ));
                }
            }
        }
    }
}

/// A count written as a number or, for int64 fields, a string.
fn count_of(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_str()?.trim().parse().ok())
}

/// A cycle among `edges` (task → tasks it depends on), as the names around it.
fn find_cycle<'e>(edges: &BTreeMap<&'e str, Vec<&'e str>>) -> Option<Vec<&'e str>> {
    fn visit<'e>(
        n: &'e str,
        edges: &BTreeMap<&'e str, Vec<&'e str>>,
        state: &mut BTreeMap<&'e str, u8>,
        path: &mut Vec<&'e str>,
    ) -> Option<Vec<&'e str>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let start = path.iter().position(|p| *p == n).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(n);
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(n, 1);
        path.push(n);
        for d in edges.get(n).into_iter().flatten() {
            if edges.contains_key(d) {
                if let Some(c) = visit(d, edges, state, path) {
                    return Some(c);
                }
            }
        }
        path.pop();
        state.insert(n, 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if let Some(c) = visit(n, edges, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

/// One input of the pipeline, as a run gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct RootInput {
    pub parameter_type: String,
    pub default: Option<Value>,
    pub optional: bool,
}

/// The pipeline's input parameters (`root.inputDefinitions.parameters`).
pub fn root_inputs(spec: &Value) -> BTreeMap<String, RootInput> {
    spec["root"]["inputDefinitions"]["parameters"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, d)| {
                    (
                        k.clone(),
                        RootInput {
                            parameter_type: d["parameterType"]
                                .as_str()
                                .unwrap_or("STRING")
                                .to_string(),
                            default: d.get("defaultValue").cloned(),
                            optional: d["isOptional"].as_bool().unwrap_or(false),
                        },
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A run's `parameters` against the pipeline's inputs: each problem with the parameter
/// it is about (empty for a missing one, which has no place in the stack).
pub fn check_parameters(spec: &Value, parameters: &Map<String, Value>) -> Vec<(String, String)> {
    let inputs = root_inputs(spec);
    let mut out = Vec::new();
    for (name, value) in parameters {
        match inputs.get(name) {
            None => {
                let known: Vec<&str> = inputs.keys().map(String::as_str).collect();
                let hint = crate::kubernetes::catalog::did_you_mean(name, &known)
                    .map(|s| format!("; did you mean {s:?}?"))
                    .unwrap_or_else(|| format!(" (it takes: {})", known.join(", ")));
                out.push((
                    name.clone(),
                    format!("the pipeline has no input {name:?}{hint}"),
                ));
            }
            Some(input)
                if !crate::protocol::is_unknown(value) && !fits(&input.parameter_type, value) =>
            {
                out.push((
                    name.clone(),
                    format!(
                        "{value} is not a {} value, which input {name:?} takes",
                        input.parameter_type
                    ),
                ));
            }
            _ => {}
        }
    }
    for (name, input) in &inputs {
        if !input.optional && input.default.is_none() && !parameters.contains_key(name) {
            out.push((
                String::new(),
                format!(
                    "the pipeline's input {name:?} ({}) has no default: give it in `parameters`",
                    input.parameter_type
                ),
            ));
        }
    }
    out
}

/// Where one task runs: what it asks of a node, and how it is steered there.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskPlacement {
    /// The task's name in its DAG (`train`), and its path for nested DAGs.
    pub task: String,
    /// The accelerator's Kubernetes resource name (`nvidia.com/gpu`), substituted.
    pub resource_type: Option<String>,
    pub count: Option<i64>,
    pub node_selector: BTreeMap<String, String>,
    /// `{key, operator, value, effect}` as a pod's tolerations.
    pub tolerations: Vec<Value>,
    /// A value that stays unknown: a run parameter the plan does not know yet.
    pub unresolved: Vec<String>,
}

/// `{{$.inputs.parameters['NAME']}}` → `NAME`.
fn placeholder_name(text: &str) -> Option<&str> {
    let inner = text
        .trim()
        .strip_prefix("{{$.inputs.parameters[")?
        .strip_suffix("]}}")?;
    Some(inner.trim_matches(|c| c == '\'' || c == '"'))
}

/// Each container task's accelerator and scheduling, with run `parameters` (and the
/// pipeline's defaults) substituted where the compiler left placeholders.
pub fn placements(compiled: &Compiled, parameters: &Map<String, Value>) -> Vec<TaskPlacement> {
    let spec = &compiled.spec;
    let root_defaults = root_inputs(spec);
    let root_value = |name: &str| -> Option<Value> {
        parameters
            .get(name)
            .cloned()
            .or_else(|| root_defaults.get(name)?.default.clone())
    };
    let mut out = Vec::new();
    let mut stack: Vec<(String, &Value, Box<dyn Fn(&str) -> Option<Value> + '_>)> = Vec::new();
    stack.push((String::new(), &spec["root"], Box::new(root_value)));
    // Nested DAGs resolve their own inputs through the parent task's inputs; only the
    // root's are run parameters, so a nested placeholder resolves when it is wired
    // straight through (componentInputParameter) or given a constant.
    while let Some((prefix, component, resolve)) = stack.pop() {
        let Some(tasks) = component["dag"]["tasks"].as_object() else {
            continue;
        };
        for (name, task) in tasks {
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            let input_value = |key: &str| -> Option<Value> {
                let input = &task["inputs"]["parameters"][key];
                if let Some(source) = input["componentInputParameter"].as_str() {
                    return resolve(source);
                }
                input.get("runtimeValue").map(|r| r["constant"].clone())
            };
            let Some(child) = task["componentRef"]["name"]
                .as_str()
                .and_then(|c| spec["components"].get(c))
            else {
                continue;
            };
            if child["dag"].is_object() {
                let values: BTreeMap<String, Option<Value>> = task["inputs"]["parameters"]
                    .as_object()
                    .map(|m| m.keys().map(|k| (k.clone(), input_value(k))).collect())
                    .unwrap_or_default();
                let defaults = interface(child)
                    .inputs
                    .iter()
                    .map(|(k, d)| (k.to_string(), d.get("defaultValue").cloned()))
                    .collect::<BTreeMap<_, _>>();
                stack.push((
                    path,
                    child,
                    Box::new(move |k: &str| {
                        values
                            .get(k)
                            .cloned()
                            .flatten()
                            .or_else(|| defaults.get(k).cloned().flatten())
                    }),
                ));
                continue;
            }
            let Some(label) = child["executorLabel"].as_str() else {
                continue;
            };
            let mut placement = TaskPlacement {
                task: path,
                ..TaskPlacement::default()
            };
            let mut substitute = |v: &Value| -> Option<String> {
                let text = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    _ => return None,
                };
                match placeholder_name(&text) {
                    Some(key) => match input_value(key) {
                        Some(Value::String(s))
                            if !crate::protocol::is_unknown(&Value::String(s.clone())) =>
                        {
                            Some(s)
                        }
                        Some(Value::Number(n)) => Some(n.to_string()),
                        _ => {
                            placement
                                .unresolved
                                .push(key.trim_start_matches("pipelinechannel--").to_string());
                            None
                        }
                    },
                    None => Some(text),
                }
            };
            let accelerator = &spec["deploymentSpec"]["executors"][label]["container"]["resources"]
                ["accelerator"];
            if !accelerator.is_null() {
                let ty = accelerator.get("resourceType").or(accelerator.get("type"));
                let count = accelerator
                    .get("resourceCount")
                    .or(accelerator.get("count"));
                placement.resource_type = ty.and_then(&mut substitute).filter(|t| !t.is_empty());
                placement.count = count
                    .and_then(&mut substitute)
                    .and_then(|c| c.trim().parse::<f64>().ok())
                    .map(|f| f as i64);
            }
            if let Some(k8s) = compiled
                .platform
                .as_ref()
                .map(|p| &p["platforms"]["kubernetes"]["deploymentSpec"]["executors"][label])
            {
                if let Some(labels) = k8s["nodeSelector"]["labels"].as_object() {
                    placement.node_selector = labels
                        .iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect();
                }
                placement.tolerations = k8s["tolerations"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter(|t| t.get("tolerationJson").is_none())
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
            }
            out.push(placement);
        }
    }
    out.sort_by(|a, b| a.task.cmp(&b.task));
    out
}

/// Where each node of a YAML text starts, by document and JSON pointer: mapping values
/// where their value starts, and keys where the key is (`…/name#key`), so a problem
/// about a value points at it and one about a missing key at its mapping.
#[derive(Debug, Default)]
pub struct Positions {
    at: BTreeMap<(usize, String), (usize, usize)>,
}

impl Positions {
    /// The place of `pointer` in document `document`, or of the nearest enclosing node.
    pub fn find(&self, document: usize, pointer: &str) -> Option<(usize, usize)> {
        let mut p = pointer.to_string();
        loop {
            if let Some(found) = self.at.get(&(document, p.clone())) {
                return Some(*found);
            }
            let cut = p.rfind('/')?;
            p.truncate(cut);
        }
    }
}

enum Frame {
    /// A mapping; `key` is the key whose value comes next, with where the key is.
    Map {
        pointer: String,
        key: Option<(String, Marker)>,
    },
    Seq {
        pointer: String,
        next: usize,
    },
}

struct Locator {
    document: usize,
    stack: Vec<Frame>,
    out: Positions,
}

impl Locator {
    /// The pointer of the node starting now and, for a mapping's value, where its key
    /// is; advances the enclosing frame. `None` when the node is a mapping key.
    fn place(&mut self) -> Option<(String, Option<Marker>)> {
        match self.stack.last_mut() {
            None => Some((String::new(), None)),
            Some(Frame::Seq { pointer, next }) => {
                let p = format!("{pointer}/{next}");
                *next += 1;
                Some((p, None))
            }
            Some(Frame::Map { pointer, key }) => {
                key.take().map(|(k, mark)| (join(pointer, &k), Some(mark)))
            }
        }
    }

    fn record(&mut self, pointer: &str, mark: Marker) {
        self.out
            .at
            .entry((self.document, pointer.to_string()))
            .or_insert((mark.line(), mark.col() + 1));
    }
}

impl MarkedEventReceiver for Locator {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        match ev {
            Event::DocumentEnd => {
                self.document += 1;
                self.stack.clear();
            }
            // A scalar value is placed where it is written.
            Event::Scalar(text, ..) => match self.place() {
                Some((p, _)) => self.record(&p, mark),
                None => {
                    if let Some(Frame::Map { key, .. }) = self.stack.last_mut() {
                        *key = Some((text, mark));
                    }
                }
            },
            Event::Alias(_) => {
                if let Some((p, _)) = self.place() {
                    self.record(&p, mark);
                }
            }
            // A block collection's start mark is past its first key, so a mapping or list
            // that is a value is placed at its key.
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let (p, key) = self.place().unwrap_or_default();
                self.record(&p, key.unwrap_or(mark));
                self.stack.push(if matches!(ev, Event::MappingStart(..)) {
                    Frame::Map {
                        pointer: p,
                        key: None,
                    }
                } else {
                    Frame::Seq {
                        pointer: p,
                        next: 0,
                    }
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            _ => {}
        }
    }
}

/// The positions of every node of `text` (empty past a syntax error).
pub fn locate(text: &str) -> Positions {
    let mut locator = Locator {
        document: 0,
        stack: Vec::new(),
        out: Positions::default(),
    };
    let _ = Parser::new_from_str(text).load(&mut locator, true);
    locator.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GPU_PIPELINE: &str = include_str!("../../tests/fixtures/kfp/gpu_pipeline.yaml");

    fn problems(text: &str) -> Vec<String> {
        match parse(text) {
            Ok(_) => Vec::new(),
            Err(p) => p.iter().map(|p| p.describe("p.yaml")).collect(),
        }
    }

    /// The fixture with `from` replaced by `to` (which must be there once).
    fn edited(from: &str, to: &str) -> String {
        assert_eq!(
            GPU_PIPELINE.matches(from).count(),
            1,
            "{from:?} once in the fixture"
        );
        GPU_PIPELINE.replacen(from, to, 1)
    }

    /// The 1-based line of the first line holding `needle` in `text`.
    fn line_of(text: &str, needle: &str) -> usize {
        text.lines()
            .position(|l| l.contains(needle))
            .expect("in the text")
            + 1
    }

    #[test]
    fn the_codelab_pipeline_is_valid_with_its_platform_spec() {
        let compiled = parse(GPU_PIPELINE).expect("valid");
        assert!(compiled.platform.is_some());
        let inputs = root_inputs(&compiled.spec);
        assert_eq!(
            inputs.keys().collect::<Vec<_>>(),
            ["epochs", "gpus", "rows"]
        );
        assert_eq!(inputs["gpus"].default, Some(json!("1")));
    }

    #[test]
    fn a_task_naming_a_missing_component_is_located() {
        let text = edited(
            "          name: comp-train\n",
            "          name: comp-trian\n",
        );
        let found = problems(&text);
        let line = line_of(&text, "name: comp-trian");
        assert_eq!(
            found,
            [format!(
                "p.yaml:{line}:17: no component \"comp-trian\" in `components`"
            )]
        );
    }

    #[test]
    fn dependencies_outputs_and_cycles_are_checked() {
        let text = edited(
            "        dependentTasks:\n        - preprocess\n",
            "        dependentTasks:\n        - prepare\n",
        );
        let found = problems(&text).join("\n");
        assert!(
            found.contains("no task \"prepare\" in this DAG (it has: preprocess, train)"),
            "{found}"
        );
        assert!(
            found.contains(
                "the input comes from task \"preprocess\", which is not in dependentTasks"
            ),
            "{found}"
        );
        let text = edited(
            "                outputArtifactKey: dataset\n",
            "                outputArtifactKey: data\n",
        );
        let found = problems(&text).join("\n");
        assert!(
            found.contains("task \"preprocess\" has no output artifact \"data\" (it has: dataset)"),
            "{found}"
        );
        let cyclic = edited(
            "        componentRef:\n          name: comp-preprocess\n",
            "        componentRef:\n          name: comp-preprocess\n        dependentTasks:\n        - train\n",
        );
        let found = problems(&cyclic).join("\n");
        assert!(
            found.contains("cycle: preprocess → train → preprocess"),
            "{found}"
        );
    }

    #[test]
    fn missing_inputs_wrong_constants_and_types_are_refused() {
        let text = edited(
            "            epochs:\n              componentInputParameter: epochs\n",
            "",
        );
        let found = problems(&text).join("\n");
        assert!(
            found.contains(
                "task \"train\" does not give comp-train's required input parameter \"epochs\""
            ),
            "{found}"
        );
        let text = edited(
            "            epochs:\n              componentInputParameter: epochs\n",
            "            epochs:\n              runtimeValue:\n                constant: three\n",
        );
        let found = problems(&text);
        let line = line_of(&text, "constant: three");
        assert_eq!(found, [format!("p.yaml:{line}:27: \"three\" is not a NUMBER_INTEGER value, which input \"epochs\" of comp-train takes")]);
        let text = edited("          parameterType: NUMBER_INTEGER\n    outputDefinitions:\n      artifacts:\n        model:", "          parameterType: INTEGER\n    outputDefinitions:\n      artifacts:\n        model:");
        let found = problems(&text).join("\n");
        assert!(
            found.contains("\"INTEGER\" is not a parameter type"),
            "{found}"
        );
        let text = edited(
            "    executorLabel: exec-train\n",
            "    executorLabel: exec-training\n",
        );
        let found = problems(&text).join("\n");
        assert!(
            found.contains("no executor \"exec-training\" in deploymentSpec.executors"),
            "{found}"
        );
    }

    #[test]
    fn the_platform_spec_is_checked_against_the_executors() {
        let text = edited(
            "        exec-train:\n          nodeSelector:",
            "        exec-trainer:\n          nodeSelector:",
        );
        let found = problems(&text);
        let line = line_of(&text, "exec-trainer:");
        assert_eq!(found, [format!("p.yaml:{line}:9: no executor \"exec-trainer\" in the PipelineSpec's deploymentSpec")]);
        let text = edited(
            "            operator: Equal\n",
            "            operator: Equals\n",
        );
        let found = problems(&text).join("\n");
        assert!(
            found.contains("\"Equals\" is not a toleration operator"),
            "{found}"
        );
    }

    #[test]
    fn syntax_errors_and_extra_documents_are_located() {
        let found = problems("root: [unclosed\n");
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("p.yaml:2:"), "{found:?}");
        let found = problems(&format!("{GPU_PIPELINE}\n---\nextra: 1\n"));
        assert!(found[0].contains("this file has 3 documents"), "{found:?}");
        assert!(problems("").iter().any(|p| p.contains("holds no pipeline")));
    }

    #[test]
    fn run_parameters_are_checked_against_the_root_inputs() {
        let compiled = parse(GPU_PIPELINE).expect("valid");
        let params = |v: Value| v.as_object().cloned().expect("an object");
        assert!(
            check_parameters(&compiled.spec, &params(json!({"epochs": 5, "gpus": "2"}))).is_empty()
        );
        let found = check_parameters(&compiled.spec, &params(json!({"epoch": 5, "rows": "many"})));
        assert_eq!(
            found,
            [
                (
                    "epoch".to_string(),
                    "the pipeline has no input \"epoch\"; did you mean \"epochs\"?".to_string()
                ),
                (
                    "rows".to_string(),
                    "\"many\" is not a NUMBER_INTEGER value, which input \"rows\" takes"
                        .to_string()
                ),
            ]
        );
        let required = edited(
            "      rows:\n        defaultValue: 1000.0\n        isOptional: true\n",
            "      rows:\n",
        );
        let compiled = parse(&required).expect("valid");
        let found = check_parameters(&compiled.spec, &Map::new());
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .1
                .contains("\"rows\" (NUMBER_INTEGER) has no default"),
            "{found:?}"
        );
    }

    #[test]
    fn placements_substitute_run_parameters_into_accelerators() {
        let compiled = parse(GPU_PIPELINE).expect("valid");
        let found = placements(&compiled, &Map::new());
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].task, "preprocess");
        assert_eq!(found[0].resource_type, None);
        let train = &found[1];
        assert_eq!(train.resource_type.as_deref(), Some("nvidia.com/gpu"));
        assert_eq!(train.count, Some(1), "the pipeline's default");
        assert_eq!(
            train.node_selector["cloud.google.com/gke-accelerator"],
            "nvidia-tesla-t4"
        );
        assert_eq!(train.tolerations[0]["key"], "preemptible");
        let two = placements(&compiled, json!({"gpus": "2"}).as_object().expect("object"));
        assert_eq!(two[1].count, Some(2));
        let unknown = placements(
            &compiled,
            json!({"gpus": crate::protocol::UNKNOWN})
                .as_object()
                .expect("object"),
        );
        assert_eq!(unknown[1].count, None);
        assert_eq!(unknown[1].unresolved, ["gpus"]);
    }

    #[test]
    fn positions_point_at_values_by_document_and_pointer() {
        let p = locate("a:\n  b: [1, 2]\n---\nc:\n  d: x\n");
        assert_eq!(p.find(0, "/a/b/1"), Some((2, 10)));
        assert_eq!(p.find(1, "/c/d"), Some((5, 6)));
        assert_eq!(
            p.find(1, "/c/missing"),
            Some((4, 1)),
            "the enclosing mapping, at its key"
        );
    }
}
