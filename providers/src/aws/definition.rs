//! Offline validation of SageMaker pipeline definitions (the JSON document a pipeline
//! runs), so that a bad definition fails at plan time with its place in the file rather
//! than minutes later as an ACK `Terminal` condition.
//!
//! The rules follow the pipeline definition JSON schema published with the SageMaker
//! Python SDK (<https://aws-sagemaker-mlops.github.io/sagemaker-model-building-pipeline-definition-JSON-schema/>)
//! and the API's own constraints, without loading the schema: syntax (with line and
//! column), `Version`, `Parameters`, step names, types and required arguments,
//! `DependsOn` (existing steps, no cycles), and every `{"Get": …}`, `Std:Join` and
//! `Std:JsonGet` naming a declared parameter, an existing step or an execution
//! variable. Condition steps hold their branches as nested steps (`IfSteps`,
//! `ElseSteps`), which share the name space of the top-level ones.
//!
//! Also owns the definition's canonical text (the file's own text without insignificant
//! whitespace, so key order and number spelling survive) and its pretty form for diffs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

/// The only definition version SageMaker accepts.
pub const VERSION: &str = "2020-12-01";

/// Step types SageMaker runs, as the `Type` of a step. `Model` is the CreateModel step.
pub const STEP_TYPES: &[&str] = &[
    "Training",
    "Processing",
    "Transform",
    "Model",
    "RegisterModel",
    "Condition",
    "Fail",
    "Lambda",
    "Callback",
    "QualityCheck",
    "ClarifyCheck",
    "EMR",
    "Tuning",
    "AutoML",
    "Endpoint",
    "EndpointConfig",
];

/// Parameter types.
pub const PARAMETER_TYPES: &[&str] = &["String", "Integer", "Float", "Boolean"];

/// The execution variables a `{"Get": "Execution.…"}` may name.
const EXECUTION_VARIABLES: &[&str] = &[
    "CurrentDateTime",
    "StartDateTime",
    "PipelineName",
    "PipelineArn",
    "PipelineExecutionId",
    "PipelineExecutionArn",
    "TrainingJobName",
    "ProcessingJobName",
];

/// Condition types a Condition step may test.
const CONDITION_TYPES: &[&str] = &[
    "Equals",
    "NotEquals",
    "GreaterThan",
    "GreaterThanOrEqualTo",
    "LessThan",
    "LessThanOrEqualTo",
    "In",
    "NotIn",
    "Not",
    "Or",
];

/// Condition types comparing two values.
const BINARY_CONDITIONS: &[&str] = &[
    "Equals",
    "NotEquals",
    "GreaterThan",
    "GreaterThanOrEqualTo",
    "LessThan",
    "LessThanOrEqualTo",
];

/// Keys a definition may have at its top level (`PipelineExperimentConfig` is what the
/// SDK writes by default, although the published schema predates it).
const TOP_LEVEL_KEYS: &[&str] = &[
    "Version",
    "Metadata",
    "Parameters",
    "PipelineExperimentConfig",
    "Steps",
];

/// What a step of each type must have in `Arguments`: the members the matching create
/// call requires (CreateTrainingJob, CreateProcessingJob, …) that a pipeline does not
/// generate itself (job names are generated), as the schema and the API models list them.
fn required_arguments(step_type: &str) -> &'static [&'static str] {
    match step_type {
        "Training" => &[
            "AlgorithmSpecification",
            "OutputDataConfig",
            "ResourceConfig",
            "StoppingCondition",
            "RoleArn",
        ],
        "Processing" => &["ProcessingResources", "AppSpecification", "RoleArn"],
        "Transform" => &[
            "ModelName",
            "TransformInput",
            "TransformOutput",
            "TransformResources",
        ],
        "Model" => &["ExecutionRoleArn"],
        "Condition" => &["Conditions"],
        "Tuning" => &["HyperParameterTuningJobConfig"],
        "EMR" => &["ClusterId", "StepConfig"],
        "AutoML" => &[
            "AutoMLJobConfig",
            "InputDataConfig",
            "OutputDataConfig",
            "RoleArn",
        ],
        "Endpoint" => &["EndpointConfigName"],
        "EndpointConfig" => &["ProductionVariants"],
        _ => &[],
    }
}

/// What a step of each type must have beside `Arguments`.
fn required_step_fields(step_type: &str) -> &'static [&'static str] {
    match step_type {
        "Lambda" => &["FunctionArn"],
        "Callback" => &["SqsQueueUrl"],
        "QualityCheck" | "ClarifyCheck" => &["CheckType"],
        _ => &[],
    }
}

/// Whether steps of this type carry their work in an `Arguments` object (Lambda and
/// Callback steps may leave it out).
fn needs_arguments(step_type: &str) -> bool {
    !matches!(step_type, "Lambda" | "Callback")
}

/// One problem with a definition: where (a JSON pointer, `/Steps/0/Arguments`; empty for
/// the whole document) and, for syntax errors, the line and column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub pointer: String,
    pub message: String,
    /// 1-based line and column, for syntax errors.
    pub position: Option<(usize, usize)>,
}

impl Problem {
    fn at(pointer: &str, message: impl Into<String>) -> Self {
        Self {
            pointer: pointer.to_string(),
            message: message.into(),
            position: None,
        }
    }

    /// The problem as a user reads it, in the file `source`:
    /// `pipeline.json:7:12: EOF while parsing a string` or
    /// `pipeline.json: /Steps/0/Arguments: missing RoleArn`.
    pub fn describe(&self, source: &str) -> String {
        match (self.position, self.pointer.is_empty()) {
            (Some((line, column)), _) => format!("{source}:{line}:{column}: {}", self.message),
            (None, true) => format!("{source}: {}", self.message),
            (None, false) => format!("{source}: {}: {}", self.pointer, self.message),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe("definition"))
    }
}

/// Every problem, one per line, in the file `source`.
pub fn describe_all(problems: &[Problem], source: &str) -> String {
    problems
        .iter()
        .map(|p| p.describe(source))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Parses and checks a definition; the document when it is valid, else every problem
/// found (a syntax error alone, since nothing else can be checked then).
pub fn validate(text: &str) -> Result<Value, Vec<Problem>> {
    let value: Value = serde_json::from_str(text).map_err(|e| vec![syntax_problem(text, &e)])?;
    let problems = check(&value);
    if problems.is_empty() {
        Ok(value)
    } else {
        Err(problems)
    }
}

/// serde_json's message without its trailing ` at line L column C`, which the problem
/// carries as its position instead. A string left open is reported where it starts:
/// serde_json notices it only at the next line break (or the end of the file), which
/// points past the mistake.
fn syntax_problem(text: &str, e: &serde_json::Error) -> Problem {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
    if message.ends_with("while parsing a string") {
        if let Some((start, ends)) = open_string(text) {
            return Problem {
                pointer: String::new(),
                message: format!("unterminated string: the string that starts here {ends}"),
                position: Some(start),
            };
        }
    }
    Problem {
        pointer: String::new(),
        message,
        position: Some((e.line(), e.column())),
    }
}

/// Where the first string that breaks JSON's rules starts (1-based line and column), and
/// how it breaks them: it runs into a line break or other control character, or to the
/// end of the text.
fn open_string(text: &str) -> Option<((usize, usize), &'static str)> {
    let (mut line, mut column) = (1, 0);
    let mut start = None;
    let mut escaped = false;
    for c in text.chars() {
        if c == '\n' {
            if start.is_some() {
                return start.map(|s| (s, "does not end on its line"));
            }
            line += 1;
            column = 0;
            continue;
        }
        column += 1;
        if start.is_some() {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                start = None;
            } else if u32::from(c) < 0x20 {
                return start.map(|s| (s, "holds a control character; escape it"));
            }
        } else if c == '"' {
            start = Some((line, column));
        }
    }
    start.map(|s| (s, "runs to the end of the file"))
}

/// The definition's canonical text: the text as written without the whitespace between
/// tokens. Key order and number spelling are kept, so the text is the file's own, and
/// compacting twice changes nothing. Meant for text that parses as JSON.
pub fn compact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    out
}

/// The definition indented for reading, as plans show it in diffs; the text itself when
/// it does not parse (a diff is still worth showing).
pub fn pretty(text: &str) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(value) => {
            let mut out = serde_json::to_string_pretty(&value).unwrap_or_else(|_| text.into());
            out.push('\n');
            out
        }
        Err(_) => text.to_string(),
    }
}

/// A JSON pointer token (`~` and `/` escaped).
fn token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Whether `name` is a valid step or parameter name (`^[A-Za-z0-9\-_]{1,64}$`).
pub fn is_step_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// A step found in the definition, top-level or nested in a Condition step's branches.
struct Step<'a> {
    pointer: String,
    value: &'a Map<String, Value>,
    name: Option<&'a str>,
    step_type: Option<&'a str>,
    /// The Condition step whose branch holds this one.
    parent: Option<&'a str>,
}

/// Checks a parsed definition; empty when it is valid.
pub fn check(definition: &Value) -> Vec<Problem> {
    let mut out = Vec::new();
    let Some(top) = definition.as_object() else {
        out.push(Problem::at(
            "",
            "a pipeline definition is a JSON object with Version, Parameters and Steps",
        ));
        return out;
    };
    for key in top.keys() {
        if !TOP_LEVEL_KEYS.contains(&key.as_str()) {
            out.push(Problem::at(
                &format!("/{}", token(key)),
                format!(
                    "unknown key {key:?}; a definition has {}",
                    TOP_LEVEL_KEYS.join(", ")
                ),
            ));
        }
    }
    match top.get("Version") {
        Some(Value::String(v)) if v == VERSION => {}
        Some(other) => out.push(Problem::at(
            "/Version",
            format!("is {other}; SageMaker accepts only \"{VERSION}\""),
        )),
        None => out.push(Problem::at(
            "",
            format!("missing Version; set \"Version\": \"{VERSION}\""),
        )),
    }
    if let Some(metadata) = top.get("Metadata") {
        if !metadata.is_object() {
            out.push(Problem::at("/Metadata", "must be an object"));
        }
    }
    let parameters = check_parameters(top.get("Parameters"), &mut out);

    let mut steps = Vec::new();
    match top.get("Steps") {
        None => out.push(Problem::at(
            "",
            "missing Steps; a pipeline needs at least one step",
        )),
        Some(Value::Array(items)) if items.is_empty() => out.push(Problem::at(
            "/Steps",
            "is empty; a pipeline needs at least one step",
        )),
        Some(Value::Array(items)) => collect_steps(items, "/Steps", None, &mut steps, &mut out),
        Some(_) => out.push(Problem::at("/Steps", "must be an array of steps")),
    }

    let mut names: BTreeMap<&str, &str> = BTreeMap::new();
    for step in &steps {
        if let Some(name) = step.name {
            if let Some(first) = names.get(name) {
                out.push(Problem::at(
                    &format!("{}/Name", step.pointer),
                    format!("step name {name:?} is already used by the step at {first}"),
                ));
            } else {
                names.insert(name, &step.pointer);
            }
        }
    }

    // Dependencies, explicit (DependsOn) and through data (a Get of another step's
    // properties), for the cycle check.
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for step in &steps {
        check_step(step, &names, &parameters, &mut edges, &mut out);
    }
    if let Some(experiment) = top.get("PipelineExperimentConfig") {
        let mut refs = Vec::new();
        walk_refs(experiment, "/PipelineExperimentConfig", &mut refs, &mut out);
        for (pointer, target) in refs {
            check_ref(&pointer, &target, None, &names, &parameters, &mut out);
        }
    }
    if let Some(cycle) = find_cycle(&edges) {
        let first = cycle.first().copied().unwrap_or_default();
        let at = names.get(first).copied().unwrap_or("/Steps");
        out.push(Problem::at(
            at,
            format!(
                "steps depend on each other in a cycle: {}",
                cycle.join(" → ")
            ),
        ));
    }
    out
}

/// Checks `Parameters` and returns the declared names.
fn check_parameters(parameters: Option<&Value>, out: &mut Vec<Problem>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let Some(parameters) = parameters else {
        return names;
    };
    let Some(items) = parameters.as_array() else {
        out.push(Problem::at(
            "/Parameters",
            "must be an array of {Name, Type, DefaultValue}",
        ));
        return names;
    };
    for (i, parameter) in items.iter().enumerate() {
        let at = format!("/Parameters/{i}");
        let Some(p) = parameter.as_object() else {
            out.push(Problem::at(
                &at,
                "must be an object {Name, Type, DefaultValue}",
            ));
            continue;
        };
        for key in p.keys() {
            if !matches!(
                key.as_str(),
                "Name" | "Type" | "DefaultValue" | "Description" | "EnumValues"
            ) {
                out.push(Problem::at(
                    &format!("{at}/{}", token(key)),
                    format!("unknown parameter key {key:?}; use Name, Type, DefaultValue"),
                ));
            }
        }
        match p.get("Name").and_then(Value::as_str) {
            Some(name) if is_step_name(name) => {
                if !names.insert(name.to_string()) {
                    out.push(Problem::at(
                        &format!("{at}/Name"),
                        format!("parameter {name:?} is declared twice"),
                    ));
                }
            }
            Some(name) => out.push(Problem::at(
                &format!("{at}/Name"),
                format!("{name:?} is not a parameter name: 1 to 64 letters, digits, '-' or '_'"),
            )),
            None => out.push(Problem::at(&at, "missing Name")),
        }
        let ty = p.get("Type").and_then(Value::as_str);
        match ty {
            Some(t) if PARAMETER_TYPES.contains(&t) => {}
            Some(t) => out.push(Problem::at(
                &format!("{at}/Type"),
                format!(
                    "unknown parameter type {t:?}; use {}",
                    PARAMETER_TYPES.join(", ")
                ),
            )),
            None => out.push(Problem::at(
                &at,
                format!("missing Type; use {}", PARAMETER_TYPES.join(", ")),
            )),
        }
        if let (Some(t), Some(default)) = (ty, p.get("DefaultValue")) {
            let fits = match t {
                "String" => default.is_string(),
                "Integer" => default.is_i64() || default.is_u64(),
                "Float" => default.is_number(),
                "Boolean" => default.is_boolean(),
                _ => true,
            };
            if !fits {
                out.push(Problem::at(
                    &format!("{at}/DefaultValue"),
                    format!("{default} is not a {t}"),
                ));
            }
        }
    }
    names
}

/// Collects the steps of `items` and, recursively, of Condition steps' branches.
fn collect_steps<'a>(
    items: &'a [Value],
    at: &str,
    parent: Option<&'a str>,
    steps: &mut Vec<Step<'a>>,
    out: &mut Vec<Problem>,
) {
    for (i, item) in items.iter().enumerate() {
        let pointer = format!("{at}/{i}");
        let Some(value) = item.as_object() else {
            out.push(Problem::at(
                &pointer,
                "a step must be an object with Name, Type and Arguments",
            ));
            continue;
        };
        let name = value.get("Name").and_then(Value::as_str);
        let step_type = value.get("Type").and_then(Value::as_str);
        steps.push(Step {
            pointer: pointer.clone(),
            value,
            name,
            step_type,
            parent,
        });
        if step_type == Some("Condition") {
            for branch in ["IfSteps", "ElseSteps"] {
                match value.get("Arguments").and_then(|a| a.get(branch)) {
                    None => {}
                    Some(Value::Array(nested)) => collect_steps(
                        nested,
                        &format!("{pointer}/Arguments/{branch}"),
                        name,
                        steps,
                        out,
                    ),
                    Some(_) => out.push(Problem::at(
                        &format!("{pointer}/Arguments/{branch}"),
                        "must be an array of steps",
                    )),
                }
            }
        }
    }
}

/// Checks one step: its name, type, arguments and references, and records the steps it
/// depends on in `edges` (for the cycle check).
fn check_step<'a>(
    step: &Step<'a>,
    names: &BTreeMap<&'a str, &str>,
    parameters: &BTreeSet<String>,
    edges: &mut BTreeMap<&'a str, BTreeSet<&'a str>>,
    out: &mut Vec<Problem>,
) {
    check_step_name(step, out);
    if let Some(t) = checked_step_type(step, out) {
        check_step_arguments(step, t, out);
    }
    let mut depends = declared_dependencies(step, names, out);
    referenced_dependencies(step, names, parameters, &mut depends, out);
    // A step reusing another's name is reported as such; its edges would only add
    // cycles that are not there.
    if let Some(name) = step
        .name
        .filter(|n| names.get(n) == Some(&step.pointer.as_str()))
    {
        edges.entry(name).or_default().extend(depends);
    }
}

/// Checks that a step has a valid `Name`.
fn check_step_name(step: &Step<'_>, out: &mut Vec<Problem>) {
    let at = &step.pointer;
    match (step.value.get("Name"), step.name) {
        (None, _) => out.push(Problem::at(at, "missing Name")),
        (Some(_), Some(name)) if is_step_name(name) => {}
        (Some(_), Some(name)) => out.push(Problem::at(
            &format!("{at}/Name"),
            format!("{name:?} is not a step name: 1 to 64 letters, digits, '-' or '_'"),
        )),
        (Some(other), None) => out.push(Problem::at(
            &format!("{at}/Name"),
            format!("must be a string, got {other}"),
        )),
    }
}

/// The step's `Type` when it is one of [`STEP_TYPES`]; `None` when it is missing or
/// not one (reported).
fn checked_step_type<'a>(step: &Step<'a>, out: &mut Vec<Problem>) -> Option<&'a str> {
    let at = &step.pointer;
    match (step.value.get("Type"), step.step_type) {
        (None, _) => {
            out.push(Problem::at(
                at,
                format!("missing Type; use one of {}", STEP_TYPES.join(", ")),
            ));
            None
        }
        (Some(_), Some(t)) if STEP_TYPES.contains(&t) => Some(t),
        (Some(_), Some(t)) => {
            let hint = if t == "CreateModel" {
                "; a CreateModel step has Type \"Model\"".to_string()
            } else {
                format!("; use one of {}", STEP_TYPES.join(", "))
            };
            out.push(Problem::at(
                &format!("{at}/Type"),
                format!("unknown step type {t:?}{hint}"),
            ));
            None
        }
        (Some(other), None) => {
            out.push(Problem::at(
                &format!("{at}/Type"),
                format!("must be a string, got {other}"),
            ));
            None
        }
    }
}

/// Checks the `Arguments` a step of type `t` needs (a Condition's conditions among
/// them) and the other fields it needs.
fn check_step_arguments(step: &Step<'_>, t: &str, out: &mut Vec<Problem>) {
    let at = &step.pointer;
    let value = step.value;
    match value.get("Arguments") {
        None if needs_arguments(t) => out.push(Problem::at(
            at,
            format!("missing Arguments; a {t} step needs an Arguments object"),
        )),
        None => {}
        Some(Value::Object(arguments)) => {
            for required in required_arguments(t) {
                if !arguments.contains_key(*required) {
                    out.push(Problem::at(
                        &format!("{at}/Arguments"),
                        format!("missing {required}, which a {t} step needs"),
                    ));
                }
            }
            if t == "Condition" {
                check_conditions(
                    arguments.get("Conditions"),
                    &format!("{at}/Arguments/Conditions"),
                    out,
                );
            }
        }
        Some(other) => out.push(Problem::at(
            &format!("{at}/Arguments"),
            format!("must be an object, got {other}"),
        )),
    }
    for required in required_step_fields(t) {
        if !value.contains_key(*required) {
            out.push(Problem::at(
                at,
                format!("missing {required}, which a {t} step needs"),
            ));
        }
    }
}

/// The steps a step depends on by its place (a branch, on its Condition step) and by
/// its `DependsOn`, each checked against the step names.
fn declared_dependencies<'a>(
    step: &Step<'a>,
    names: &BTreeMap<&'a str, &str>,
    out: &mut Vec<Problem>,
) -> BTreeSet<&'a str> {
    let at = &step.pointer;
    let mut depends = BTreeSet::new();
    if let Some(parent) = step.parent {
        // A branch runs after its Condition step has evaluated.
        depends.insert(parent);
    }
    match step.value.get("DependsOn") {
        None => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let item_at = format!("{at}/DependsOn/{i}");
                match item.as_str() {
                    Some(dep) if Some(dep) == step.name => {
                        out.push(Problem::at(&item_at, "a step cannot depend on itself"))
                    }
                    Some(dep) => match names.get_key_value(dep) {
                        Some((known, _)) => {
                            depends.insert(known);
                        }
                        None => out.push(Problem::at(
                            &item_at,
                            format!("names no step: there is no step {dep:?}"),
                        )),
                    },
                    None => out.push(Problem::at(
                        &item_at,
                        format!("must be a step name, got {item}"),
                    )),
                }
            }
        }
        Some(_) => out.push(Problem::at(
            &format!("{at}/DependsOn"),
            "must be an array of step names",
        )),
    }
    depends
}

/// Checks the references anywhere in a step, except in a Condition's branches (steps
/// of their own, checked as such), and adds the steps they read to `depends`.
fn referenced_dependencies<'a>(
    step: &Step<'a>,
    names: &BTreeMap<&'a str, &str>,
    parameters: &BTreeSet<String>,
    depends: &mut BTreeSet<&'a str>,
    out: &mut Vec<Problem>,
) {
    let at = &step.pointer;
    let mut refs = Vec::new();
    for (key, child) in step.value {
        let child_at = format!("{at}/{}", token(key));
        if key == "Arguments" && step.step_type == Some("Condition") {
            if let Some(arguments) = child.as_object() {
                for (arg, v) in arguments {
                    if arg != "IfSteps" && arg != "ElseSteps" {
                        walk_refs(v, &format!("{child_at}/{}", token(arg)), &mut refs, out);
                    }
                }
            }
            continue;
        }
        walk_refs(child, &child_at, &mut refs, out);
    }
    for (pointer, target) in refs {
        if let Some(dep) = check_ref(&pointer, &target, step.name, names, parameters, out) {
            if let Some((known, _)) = names.get_key_value(dep.as_str()) {
                depends.insert(known);
            }
        }
    }
}

/// Checks a Condition step's `Conditions`.
fn check_conditions(conditions: Option<&Value>, at: &str, out: &mut Vec<Problem>) {
    let Some(conditions) = conditions else {
        return;
    };
    let Some(items) = conditions.as_array() else {
        out.push(Problem::at(at, "must be an array of conditions"));
        return;
    };
    for (i, condition) in items.iter().enumerate() {
        let item_at = format!("{at}/{i}");
        let Some(c) = condition.as_object() else {
            out.push(Problem::at(
                &item_at,
                "a condition must be an object with a Type",
            ));
            continue;
        };
        match c.get("Type").and_then(Value::as_str) {
            Some(t) if BINARY_CONDITIONS.contains(&t) => {
                for side in ["LeftValue", "RightValue"] {
                    if !c.contains_key(side) {
                        out.push(Problem::at(
                            &item_at,
                            format!("missing {side}, which a {t} condition compares"),
                        ));
                    }
                }
            }
            Some(t) if CONDITION_TYPES.contains(&t) => {}
            Some(t) => out.push(Problem::at(
                &format!("{item_at}/Type"),
                format!(
                    "unknown condition type {t:?}; use one of {}",
                    CONDITION_TYPES.join(", ")
                ),
            )),
            None => out.push(Problem::at(&item_at, "missing Type")),
        }
    }
}

/// Collects every `{"Get": …}` under `value` as (pointer, target), checking the shape of
/// `Std:Join` and `Std:JsonGet` on the way.
fn walk_refs(value: &Value, at: &str, refs: &mut Vec<(String, String)>, out: &mut Vec<Problem>) {
    match value {
        Value::Object(map) => {
            if let Some(get) = map.get("Get") {
                match get.as_str() {
                    Some(target) if map.len() == 1 => {
                        refs.push((format!("{at}/Get"), target.to_string()));
                    }
                    Some(_) => out.push(Problem::at(at, "a Get is an object with the one key Get")),
                    None => out.push(Problem::at(
                        &format!("{at}/Get"),
                        format!("must be a string such as \"Parameters.Name\", got {get}"),
                    )),
                }
                return;
            }
            if let Some(join) = map.get("Std:Join") {
                let join_at = format!("{at}/Std:Join");
                match join.as_object() {
                    Some(j) if j.get("Values").is_some_and(Value::is_array) => {
                        if j.get("On").is_some_and(|on| !on.is_string()) {
                            out.push(Problem::at(
                                &format!("{join_at}/On"),
                                "must be a string (the separator)",
                            ));
                        }
                    }
                    _ => out.push(Problem::at(
                        &join_at,
                        "must be an object {\"On\": separator, \"Values\": [...]}",
                    )),
                }
            }
            if let Some(json_get) = map.get("Std:JsonGet") {
                let at_get = format!("{at}/Std:JsonGet");
                match json_get.as_object() {
                    Some(j) => {
                        if !j.get("Path").is_some_and(Value::is_string) {
                            out.push(Problem::at(&at_get, "missing Path, the JSON path to read"));
                        }
                        if !j.contains_key("PropertyFile") && !j.contains_key("S3Uri") {
                            out.push(Problem::at(
                                &at_get,
                                "missing PropertyFile (or S3Uri), the JSON document to read",
                            ));
                        }
                    }
                    None => out.push(Problem::at(
                        &at_get,
                        "must be an object {\"PropertyFile\": …, \"Path\": …}",
                    )),
                }
            }
            for (key, child) in map {
                walk_refs(child, &format!("{at}/{}", token(key)), refs, out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                walk_refs(child, &format!("{at}/{i}"), refs, out);
            }
        }
        _ => {}
    }
}

/// Checks what a Get names; returns the step it reads from, if any.
fn check_ref(
    pointer: &str,
    target: &str,
    own: Option<&str>,
    names: &BTreeMap<&str, &str>,
    parameters: &BTreeSet<String>,
    out: &mut Vec<Problem>,
) -> Option<String> {
    let (root, rest) = target.split_once('.').unwrap_or((target, ""));
    match root {
        "Parameters" => {
            if !parameters.contains(rest) {
                out.push(Problem::at(
                    pointer,
                    format!(
                        "{target:?} names no declared parameter; declare {rest:?} in Parameters"
                    ),
                ));
            }
            None
        }
        "Steps" => {
            let (step, property) = rest.split_once('.').unwrap_or((rest, ""));
            if !names.contains_key(step) {
                out.push(Problem::at(
                    pointer,
                    format!("{target:?} names no step: there is no step {step:?}"),
                ));
                None
            } else if Some(step) == own {
                out.push(Problem::at(
                    pointer,
                    format!("{target:?}: a step cannot read its own properties"),
                ));
                None
            } else if property.is_empty() {
                out.push(Problem::at(
                    pointer,
                    format!("{target:?} names a step but no property (Steps.{step}.<property>, as in Steps.{step}.ModelArtifacts.S3ModelArtifacts)"),
                ));
                None
            } else {
                Some(step.to_string())
            }
        }
        "Execution" => {
            if !EXECUTION_VARIABLES.contains(&rest) {
                out.push(Problem::at(
                    pointer,
                    format!(
                        "{target:?} is not an execution variable; use Execution.{}",
                        EXECUTION_VARIABLES.join(", Execution.")
                    ),
                ));
            }
            None
        }
        _ => {
            out.push(Problem::at(
                pointer,
                format!("{target:?} reads nothing known; a Get starts with Parameters., Steps. or Execution."),
            ));
            None
        }
    }
}

/// A cycle among the steps, as the names along it (the first repeated at the end).
fn find_cycle<'a>(edges: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Option<Vec<&'a str>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Visiting,
        Done,
    }
    fn visit<'a>(
        node: &'a str,
        edges: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        marks: &mut BTreeMap<&'a str, Mark>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<&'a str>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Visiting) => {
                let start = path.iter().position(|n| *n == node).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(node);
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node, Mark::Visiting);
        path.push(node);
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks.insert(node, Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in edges.keys() {
        let mut path = Vec::new();
        if let Some(cycle) = visit(node, edges, &mut marks, &mut path) {
            return Some(cycle);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The XGBoost training pipeline of the SageMaker examples, trimmed: two parameters,
    /// one training step reading them, a condition on its metric with a nested step.
    fn xgboost() -> Value {
        json!({
            "Version": "2020-12-01",
            "Metadata": {},
            "Parameters": [
                {"Name": "InputData", "Type": "String", "DefaultValue": "s3://ml-data/abalone/train.csv"},
                {"Name": "TrainingInstanceType", "Type": "String", "DefaultValue": "ml.m5.xlarge"},
                {"Name": "MaxDepth", "Type": "Integer", "DefaultValue": 5},
                {"Name": "MseThreshold", "Type": "Float", "DefaultValue": 6.0},
            ],
            "Steps": [
                {
                    "Name": "TrainAbalone",
                    "Type": "Training",
                    "Arguments": {
                        "AlgorithmSpecification": {
                            "TrainingImage": "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1",
                            "TrainingInputMode": "File",
                        },
                        "OutputDataConfig": {"S3OutputPath": "s3://ml-artifacts/abalone/model"},
                        "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
                        "ResourceConfig": {
                            "InstanceCount": 1,
                            "InstanceType": {"Get": "Parameters.TrainingInstanceType"},
                            "VolumeSizeInGB": 30,
                        },
                        "RoleArn": "arn:aws:iam::123456789012:role/SageMakerExecution",
                        "InputDataConfig": [{
                            "ChannelName": "train",
                            "DataSource": {"S3DataSource": {
                                "S3DataType": "S3Prefix",
                                "S3Uri": {"Get": "Parameters.InputData"},
                                "S3DataDistributionType": "FullyReplicated",
                            }},
                            "ContentType": "text/csv",
                        }],
                        "HyperParameters": {
                            "objective": "reg:linear",
                            "num_round": "50",
                            "max_depth": "5",
                        },
                    },
                },
                {
                    "Name": "CheckMse",
                    "Type": "Condition",
                    "DependsOn": ["TrainAbalone"],
                    "Arguments": {
                        "Conditions": [{
                            "Type": "LessThanOrEqualTo",
                            "LeftValue": {"Get": "Steps.TrainAbalone.FinalMetricDataList['validation:mse'].Value"},
                            "RightValue": {"Get": "Parameters.MseThreshold"},
                        }],
                        "IfSteps": [],
                        "ElseSteps": [{
                            "Name": "MseTooHigh",
                            "Type": "Fail",
                            "Arguments": {"ErrorMessage": "the model's MSE is above the threshold"},
                        }],
                    },
                },
            ],
        })
    }

    /// `xgboost()` changed by `edit`.
    fn edited(edit: impl FnOnce(&mut Value)) -> Value {
        let mut d = xgboost();
        edit(&mut d);
        d
    }

    fn remove_argument(name: &'static str) -> impl FnOnce(&mut Value) {
        move |d: &mut Value| {
            if let Some(args) = d["Steps"][0]["Arguments"].as_object_mut() {
                args.remove(name);
            }
        }
    }

    /// One row of the table: its name, the definition, and the problems expected as
    /// (pointer, message fragment); no problems means valid.
    type Case = (&'static str, Value, Vec<(&'static str, &'static str)>);

    /// The table of definitions and their problems.
    fn table() -> Vec<Case> {
        vec![
            ("xgboost training pipeline", xgboost(), vec![]),
            (
                "a Lambda step without Arguments",
                edited(|d| {
                    d["Steps"][1]["Arguments"]["IfSteps"] = json!([]);
                    if let Some(steps) = d["Steps"].as_array_mut() {
                        steps.push(json!({"Name": "Notify", "Type": "Lambda", "DependsOn": ["CheckMse"], "FunctionArn": "arn:aws:lambda:us-east-1:123456789012:function:notify"}));
                    }
                }),
                vec![],
            ),
            (
                "wrong Version",
                edited(|d| d["Version"] = json!("2021-01-01")),
                vec![("/Version", "SageMaker accepts only \"2020-12-01\"")],
            ),
            (
                "no Version",
                edited(|d| {
                    if let Some(m) = d.as_object_mut() {
                        m.remove("Version");
                    }
                }),
                vec![("", "missing Version")],
            ),
            (
                "no Steps",
                edited(|d| {
                    if let Some(m) = d.as_object_mut() {
                        m.remove("Steps");
                    }
                }),
                vec![("", "missing Steps")],
            ),
            (
                "empty Steps",
                edited(|d| d["Steps"] = json!([])),
                vec![("/Steps", "is empty")],
            ),
            (
                "not an object",
                json!(["Steps"]),
                vec![("", "a pipeline definition is a JSON object")],
            ),
            (
                "unknown top-level key",
                edited(|d| d["Stepz"] = json!([])),
                vec![("/Stepz", "unknown key \"Stepz\"")],
            ),
            (
                "duplicate step name",
                edited(|d| {
                    d["Steps"][1]["Arguments"]["ElseSteps"][0]["Name"] = json!("TrainAbalone")
                }),
                vec![(
                    "/Steps/1/Arguments/ElseSteps/0/Name",
                    "\"TrainAbalone\" is already used by the step at /Steps/0",
                )],
            ),
            (
                "bad step name",
                edited(|d| {
                    d["Steps"][1]["Arguments"]["ElseSteps"][0]["Name"] = json!("mse too high")
                }),
                vec![("/Steps/1/Arguments/ElseSteps/0/Name", "is not a step name")],
            ),
            (
                "unknown Type",
                edited(|d| d["Steps"][0]["Type"] = json!("Train")),
                vec![(
                    "/Steps/0/Type",
                    "unknown step type \"Train\"; use one of Training,",
                )],
            ),
            (
                "CreateModel is spelled Model",
                edited(|d| d["Steps"][0]["Type"] = json!("CreateModel")),
                vec![("/Steps/0/Type", "a CreateModel step has Type \"Model\"")],
            ),
            (
                "step without Arguments",
                edited(|d| {
                    if let Some(s) = d["Steps"][0].as_object_mut() {
                        s.remove("Arguments");
                    }
                }),
                vec![(
                    "/Steps/0",
                    "missing Arguments; a Training step needs an Arguments object",
                )],
            ),
            (
                "Arguments not an object",
                edited(|d| d["Steps"][0]["Arguments"] = json!([])),
                vec![("/Steps/0/Arguments", "must be an object")],
            ),
            (
                "Training without AlgorithmSpecification",
                edited(remove_argument("AlgorithmSpecification")),
                vec![(
                    "/Steps/0/Arguments",
                    "missing AlgorithmSpecification, which a Training step needs",
                )],
            ),
            (
                "Training without OutputDataConfig",
                edited(remove_argument("OutputDataConfig")),
                vec![("/Steps/0/Arguments", "missing OutputDataConfig")],
            ),
            (
                "Training without ResourceConfig",
                edited(remove_argument("ResourceConfig")),
                vec![("/Steps/0/Arguments", "missing ResourceConfig")],
            ),
            (
                "Training without StoppingCondition",
                edited(remove_argument("StoppingCondition")),
                vec![("/Steps/0/Arguments", "missing StoppingCondition")],
            ),
            (
                "Training without RoleArn",
                edited(remove_argument("RoleArn")),
                vec![("/Steps/0/Arguments", "missing RoleArn")],
            ),
            (
                "Lambda without FunctionArn",
                edited(|d| {
                    if let Some(steps) = d["Steps"].as_array_mut() {
                        steps.push(json!({"Name": "Notify", "Type": "Lambda"}));
                    }
                }),
                vec![("/Steps/2", "missing FunctionArn")],
            ),
            (
                "DependsOn unknown step",
                edited(|d| d["Steps"][1]["DependsOn"] = json!(["Train"])),
                vec![("/Steps/1/DependsOn/0", "there is no step \"Train\"")],
            ),
            (
                "DependsOn itself",
                edited(|d| d["Steps"][1]["DependsOn"] = json!(["CheckMse"])),
                vec![("/Steps/1/DependsOn/0", "cannot depend on itself")],
            ),
            (
                "a cycle through DependsOn and a Get",
                edited(|d| d["Steps"][0]["DependsOn"] = json!(["CheckMse"])),
                vec![("/Steps/1", "cycle: CheckMse → TrainAbalone → CheckMse")],
            ),
            (
                "Get of an undeclared parameter",
                edited(|d| {
                    d["Steps"][0]["Arguments"]["ResourceConfig"]["InstanceType"] =
                        json!({"Get": "Parameters.InstanceType"})
                }),
                vec![(
                    "/Steps/0/Arguments/ResourceConfig/InstanceType/Get",
                    "\"Parameters.InstanceType\" names no declared parameter",
                )],
            ),
            (
                "Get of an unknown step",
                edited(|d| {
                    d["Steps"][1]["Arguments"]["Conditions"][0]["LeftValue"] =
                        json!({"Get": "Steps.Train.FinalMetricDataList['validation:mse'].Value"})
                }),
                vec![(
                    "/Steps/1/Arguments/Conditions/0/LeftValue/Get",
                    "there is no step \"Train\"",
                )],
            ),
            (
                "Get of its own step",
                edited(|d| {
                    d["Steps"][0]["Arguments"]["OutputDataConfig"]["S3OutputPath"] =
                        json!({"Get": "Steps.TrainAbalone.ModelArtifacts.S3ModelArtifacts"})
                }),
                vec![(
                    "/Steps/0/Arguments/OutputDataConfig/S3OutputPath/Get",
                    "cannot read its own properties",
                )],
            ),
            (
                "Get inside Std:Join of an undeclared parameter",
                edited(
                    |d| d["Steps"][0]["Arguments"]["OutputDataConfig"]["S3OutputPath"] = json!({"Std:Join": {"On": "/", "Values": ["s3://ml-artifacts", {"Get": "Parameters.Prefix"}]}}),
                ),
                vec![(
                    "/Steps/0/Arguments/OutputDataConfig/S3OutputPath/Std:Join/Values/1/Get",
                    "\"Parameters.Prefix\" names no declared parameter",
                )],
            ),
            (
                "Std:JsonGet of an unknown step, without Path",
                edited(
                    |d| d["Steps"][1]["Arguments"]["Conditions"][0]["LeftValue"] = json!({"Std:JsonGet": {"PropertyFile": {"Get": "Steps.Evaluate.PropertyFiles.Report"}}}),
                ),
                vec![
                    (
                        "/Steps/1/Arguments/Conditions/0/LeftValue/Std:JsonGet",
                        "missing Path",
                    ),
                    (
                        "/Steps/1/Arguments/Conditions/0/LeftValue/Std:JsonGet/PropertyFile/Get",
                        "there is no step \"Evaluate\"",
                    ),
                ],
            ),
            (
                "unknown execution variable",
                edited(|d| {
                    d["Steps"][0]["Arguments"]["OutputDataConfig"]["S3OutputPath"] =
                        json!({"Get": "Execution.RunId"})
                }),
                vec![(
                    "/Steps/0/Arguments/OutputDataConfig/S3OutputPath/Get",
                    "is not an execution variable",
                )],
            ),
            (
                "parameter of an unknown type, with a mistyped default",
                edited(|d| {
                    d["Parameters"][2]["Type"] = json!("Int");
                    d["Parameters"][3]["DefaultValue"] = json!("six");
                }),
                vec![
                    ("/Parameters/2/Type", "unknown parameter type \"Int\""),
                    ("/Parameters/3/DefaultValue", "\"six\" is not a Float"),
                ],
            ),
            (
                "condition without its right side",
                edited(|d| {
                    if let Some(c) = d["Steps"][1]["Arguments"]["Conditions"][0].as_object_mut() {
                        c.remove("RightValue");
                    }
                }),
                vec![("/Steps/1/Arguments/Conditions/0", "missing RightValue")],
            ),
        ]
    }

    #[test]
    fn definitions_table() {
        for (name, definition, want) in table() {
            let got = check(&definition);
            if want.is_empty() {
                assert!(got.is_empty(), "{name}: expected valid, got {got:?}");
                continue;
            }
            for (pointer, fragment) in &want {
                assert!(
                    got.iter()
                        .any(|p| p.pointer == *pointer && p.message.contains(fragment)),
                    "{name}: want {pointer}: {fragment}, got {got:?}"
                );
            }
            assert_eq!(got.len(), want.len(), "{name}: {got:?}");
        }
    }

    #[test]
    fn accepted_definitions_are_valid_under_the_official_schema() {
        // The published schema (kept in `contracts/`), checked by Python's `jsonschema`,
        // which `scripts/deps.sh` installs (the test fails rather than pass vacuously
        // without it).
        let schema = terrain_contracts::path("sagemaker/pipeline-definition.schema.json");
        let accepted: Vec<Value> = table()
            .into_iter()
            .filter(|(_, _, want)| want.is_empty())
            .map(|(_, d, _)| d)
            .collect();
        assert!(accepted.len() >= 2);
        let script = r#"
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
failures = []
for i, d in enumerate(json.load(sys.stdin)):
    errors = list(jsonschema.Draft7Validator(schema).iter_errors(d))
    if errors:
        failures.append(f"definition {i}: " + "; ".join(e.message[:300] for e in errors))
print("\n".join(failures))
sys.exit(1 if failures else 0)
"#;
        let mut child = std::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(&schema)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin
                .write_all(
                    serde_json::to_string(&accepted)
                        .expect("encodes")
                        .as_bytes(),
                )
                .expect("writes");
        }
        let output = child.wait_with_output().expect("python3 finishes");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !stderr.contains("No module named 'jsonschema'"),
            "the schema check needs Python's jsonschema (pip install jsonschema)"
        );
        assert!(
            output.status.success(),
            "accepted definitions fail the official schema:\n{}{stderr}",
            String::from_utf8_lossy(&output.stdout)
        );
        // The checker does catch what the schema forbids, so its silence means something.
        let mut broken = xgboost();
        broken["Steps"][0]["Type"] = json!("Train");
        let mut child = std::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(&schema)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3 runs");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin
                .write_all(
                    serde_json::to_string(&[broken])
                        .expect("encodes")
                        .as_bytes(),
                )
                .expect("writes");
        }
        let output = child.wait_with_output().expect("python3 finishes");
        assert!(
            !output.status.success(),
            "the schema rejects an unknown step type"
        );
    }

    #[test]
    fn syntax_errors_give_line_and_column() {
        // An unterminated string on line 7 (the role ARN lacks its closing quote).
        let text = "{\n  \"Version\": \"2020-12-01\",\n  \"Steps\": [\n    {\n      \"Name\": \"Train\",\n      \"Type\": \"Training\",\n      \"Arguments\": {\"RoleArn\": \"arn:aws:iam::1:role/r}\n    }\n  ]\n}\n";
        let problems = validate(text).expect_err("unterminated string");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(
            problems[0].describe("definition.json"),
            "definition.json:7:32: unterminated string: the string that starts here does not end on its line"
        );
        // The same mistake on the last line of a file.
        let last = validate("{\"Version\": \"2020-12-01").expect_err("unterminated");
        assert_eq!(
            last[0].describe("d.json"),
            "d.json:1:13: unterminated string: the string that starts here runs to the end of the file"
        );
        // Other syntax errors keep serde_json's position and message, without repeating
        // the position in words.
        let trailing = validate("{\n\"Version\": \"2020-12-01\",}").expect_err("trailing comma");
        assert_eq!(trailing[0].position, Some((2, 25)));
        let line = trailing[0].describe("d.json");
        assert!(line.starts_with("d.json:2:25: trailing comma"), "{line}");
        assert!(!line.contains(" at line "), "{line}");
    }

    #[test]
    fn problems_read_with_their_place() {
        let problems =
            validate(&serde_json::to_string(&edited(remove_argument("RoleArn"))).expect("encodes"))
                .expect_err("no RoleArn");
        assert_eq!(
            describe_all(&problems, "pipeline.json"),
            "pipeline.json: /Steps/0/Arguments: missing RoleArn, which a Training step needs"
        );
        let whole = Problem::at("", "missing Steps");
        assert_eq!(whole.describe("p.json"), "p.json: missing Steps");
        assert_eq!(token("a/b~c"), "a~1b~0c");
    }

    #[test]
    fn compact_keeps_the_text_but_not_its_layout() {
        let text = "{\n  \"b\": \"x y\\\" z\",\n\t\"a\": [1.50, 2e3 ]\r\n}\n";
        let compacted = compact(text);
        assert_eq!(compacted, "{\"b\":\"x y\\\" z\",\"a\":[1.50,2e3]}");
        assert_eq!(
            compact(&compacted),
            compacted,
            "compacting twice changes nothing"
        );
        let parsed: Value = serde_json::from_str(&compacted).expect("still JSON");
        assert_eq!(parsed, serde_json::from_str::<Value>(text).expect("JSON"));
        assert!(pretty(&compacted).contains("\n  \"b\": \"x y\\\" z\",\n"));
        assert_eq!(pretty("{oops"), "{oops");
    }

    #[test]
    fn step_names_follow_the_api_pattern() {
        for ok in ["Train", "train-1", "A_b", &"x".repeat(64)] {
            assert!(is_step_name(ok), "{ok}");
        }
        for bad in ["", "a b", "a.b", &"x".repeat(65), "é"] {
            assert!(!is_step_name(bad), "{bad}");
        }
    }
}
