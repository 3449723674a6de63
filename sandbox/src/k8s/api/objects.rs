//! How objects are kept and shown: stored versus served views (`events.k8s.io` field
//! names), kind and name checks, the metadata the server owns on create and update,
//! CRD registration checks, namespaces that must exist, and the insert/update steps
//! every write ends in.

use super::*;

/// An event as events.k8s.io/v1 names its fields, against the core/v1 name it is stored under.
pub(super) const EVENT_FIELDS: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

pub(super) fn rename_fields(obj: &mut Value, to_v1: bool) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    for (core, v1) in EVENT_FIELDS {
        let (from, to) = if to_v1 { (core, v1) } else { (v1, core) };
        if let Some(v) = m.remove(*from) {
            m.insert(to.to_string(), v);
        }
    }
}

/// The stored object as the requested type shows it.
pub(super) fn view(rt: &ResourceType, stored: &Value) -> Value {
    let mut v = stored.clone();
    if rt.is_events_v1() {
        rename_fields(&mut v, true);
    }
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), json!(rt.api_version()));
        m.insert("kind".into(), json!(rt.kind));
    }
    v
}

/// A requested-type object in the form it is stored in.
pub(super) fn to_storage(rt: &ResourceType, object: Value) -> Value {
    let mut v = object;
    if rt.is_events_v1() {
        rename_fields(&mut v, false);
        v["apiVersion"] = json!("v1");
    }
    v
}

pub(super) fn check_kind(t: &Target, body: &Value) -> Result<(), StatusError> {
    if !body.is_object() {
        return Err(StatusError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    let kind = body["kind"].as_str().unwrap_or("");
    let api_version = body["apiVersion"].as_str().unwrap_or("");
    if (!kind.is_empty() && kind != t.rt.kind)
        || (!api_version.is_empty() && api_version != t.rt.api_version())
    {
        return Err(StatusError::bad_request(
            if !kind.is_empty() && kind != t.rt.kind {
                format!(
                    "the kind in the data ({kind}) does not match the expected kind ({})",
                    t.rt.kind
                )
            } else {
                format!(
                "the API version in the data ({api_version}) does not match the expected API version ({})",
                t.rt.api_version()
            )
            },
        ));
    }
    Ok(())
}

pub(super) fn name_rule(rt: &ResourceType) -> fn(&str) -> Option<String> {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "namespaces" | "services") => dns_label,
        ("rbac.authorization.k8s.io", _) => path_segment,
        _ => dns_subdomain,
    }
}

pub(super) fn dns_label(name: &str) -> Option<String> {
    if name.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-';
    (!ok).then(|| "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into())
}

pub(super) fn dns_subdomain(name: &str) -> Option<String> {
    if name.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    let ok = !name.is_empty()
        && name.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        });
    (!ok).then(|| "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into())
}

pub(super) fn path_segment(name: &str) -> Option<String> {
    match name {
        "" => Some("name or generateName is required".into()),
        "." | ".." => Some(format!("may not be '{name}'")),
        _ if name.contains('/') => Some("may not contain '/'".into()),
        _ if name.contains('%') => Some("may not contain '%'".into()),
        _ => None,
    }
}

/// A value as the API server quotes it in field errors.
pub(super) fn quoted(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => format!("{s:?}"),
        Some(other) => other.to_string(),
        None => "null".into(),
    }
}

/// The value at a dotted field path with `[i]` indexes (`spec.template.spec.containers[0]`).
pub(super) fn dotted<'a>(obj: &'a Value, field: &str) -> Option<&'a Value> {
    let mut v = obj;
    for part in field.split('.').filter(|p| !p.is_empty()) {
        let (name, indexes) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            v = v.get(name)?;
        }
        for idx in indexes.split('[').filter(|s| !s.is_empty()) {
            let idx = idx.trim_end_matches(']');
            v = match idx.parse::<usize>() {
                Ok(i) => v.get(i)?,
                Err(_) => v.get(idx.trim_matches('"'))?,
            };
        }
    }
    Some(v)
}

pub(super) fn invalid(t: &Target, name: &str, causes: Vec<Cause>) -> StatusError {
    StatusError::invalid(&t.rt.kind, &t.rt.group, name, causes)
}

pub(super) fn invalid_name(t: &Target, name: &str, message: String) -> StatusError {
    invalid(
        t,
        name,
        vec![Cause {
            reason: "FieldValueInvalid",
            field: "metadata.name".into(),
            message: format!("Invalid value: {name:?}: {message}"),
        }],
    )
}

/// The causes `defaults` reported, as a 422 Invalid Status.
pub(super) fn defaults_invalid(
    t: &Target,
    name: &str,
    object: &Value,
    causes: Vec<defaults::Cause>,
) -> StatusError {
    let causes = causes
        .into_iter()
        .map(|(field, message)| {
            let kind = CAUSE_KINDS
                .iter()
                .find(|(prefix, _)| message.starts_with(prefix));
            match kind {
                Some((_, reason)) => Cause {
                    reason,
                    message,
                    field,
                },
                // A bare detail ("field is immutable") gets the value it is about.
                None => Cause {
                    reason: "FieldValueInvalid",
                    message: format!(
                        "Invalid value: {}: {message}",
                        quoted(dotted(object, &field))
                    ),
                    field,
                },
            }
        })
        .collect();
    invalid(t, name, causes)
}

/// The cause reason each kind of field error message stands for.
pub(super) const CAUSE_KINDS: &[(&str, &str)] = &[
    ("Invalid value", "FieldValueInvalid"),
    ("Required value", "FieldValueRequired"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Forbidden", "FieldValueForbidden"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Not found", "FieldValueNotFound"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
];

pub(super) fn generated_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let prefix: String = prefix.chars().take(58).collect();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{prefix}{suffix}")
}

pub(super) fn resource_version_of(obj: &Value) -> Option<&str> {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .filter(|s| !s.is_empty())
}

/// Keeps what clients cannot set: identity, timestamps, the deletion state.
pub(super) fn restore_server_fields(old: &Value, new: &mut Value) {
    if !new["metadata"].is_object() {
        new["metadata"] = json!({});
    }
    for key in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "resourceVersion",
    ] {
        match old["metadata"].get(key) {
            Some(v) => new["metadata"][key] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(key);
                }
            }
        }
    }
    if let Some(m) = new["metadata"].as_object_mut() {
        m.remove("selfLink");
    }
}

pub(super) fn strip_create_metadata(obj: &mut Value) {
    if let Some(m) = obj["metadata"].as_object_mut() {
        for key in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "selfLink",
            "managedFields",
        ] {
            m.remove(key);
        }
    }
}

/// What the API server's per-type strategies do to a new object's status.
pub(super) fn prepare_status_for_create(rt: &ResourceType, obj: &mut Value, now: DateTime<Utc>) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    if rt.has("status") && !(rt.group.is_empty() && rt.plural == "nodes") {
        m.remove("status");
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "namespaces") => {
            m.insert("status".into(), json!({"phase": "Active"}));
            let spec = m.entry("spec").or_insert_with(|| json!({}));
            if spec.is_object() && spec.get("finalizers").is_none() {
                spec["finalizers"] = json!(["kubernetes"]);
            }
        }
        ("", "persistentvolumes") => {
            m.insert("status".into(), json!({"phase": "Pending"}));
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => crd_status(obj, now),
        _ => {}
    }
}

/// Checks a CustomResourceDefinition and fills what the API server does: defaulted
/// names, and the status that makes it served at once.
pub(super) fn check_crd(t: &Target, name: &str, crd: &mut Value) -> Result<(), StatusError> {
    let spec = crd["spec"].clone();
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let (group, plural, kind) = (
        text(&spec["group"]),
        text(&spec["names"]["plural"]),
        text(&spec["names"]["kind"]),
    );
    let mut causes = Vec::new();
    let mut require = |ok: bool, field: &str, message: &str| {
        if !ok {
            causes.push(Cause {
                reason: "FieldValueRequired",
                field: field.into(),
                message: message.into(),
            });
        }
    };
    require(!group.is_empty(), "spec.group", "Required value");
    require(!plural.is_empty(), "spec.names.plural", "Required value");
    require(!kind.is_empty(), "spec.names.kind", "Required value");
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    require(
        !versions.is_empty(),
        "spec.versions",
        "Required value: must have exactly one version marked as storage version",
    );
    let storage = versions
        .iter()
        .filter(|v| v["storage"] == Value::Bool(true))
        .count();
    if !versions.is_empty() && storage != 1 {
        causes.push(Cause {
            reason: "FieldValueInvalid",
            field: "spec.versions".into(),
            message: "Invalid value: must have exactly one version marked as storage version"
                .into(),
        });
    }
    let scope = spec["scope"].as_str().unwrap_or("");
    if scope != "Namespaced" && scope != "Cluster" {
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: "spec.scope".into(),
            message: format!(
                "Unsupported value: {scope:?}: supported values: \"Cluster\", \"Namespaced\""
            ),
        });
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause {
            reason: "FieldValueInvalid",
            field: "metadata.name".into(),
            message: format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
        });
    }
    if !causes.is_empty() {
        return Err(invalid(t, name, causes));
    }
    let names = &mut crd["spec"]["names"];
    if names["singular"].as_str().is_none_or(str::is_empty) {
        names["singular"] = json!(kind.to_lowercase());
    }
    if names["listKind"].as_str().is_none_or(str::is_empty) {
        names["listKind"] = json!(format!("{kind}List"));
    }
    Ok(())
}

pub(super) fn crd_status(crd: &mut Value, now: DateTime<Utc>) {
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"] == Value::Bool(true))
        .map(|v| v["name"].clone())
        .collect();
    let at = timestamp(now);
    crd["status"] = json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": at,
             "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": at,
             "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
        ],
        "acceptedNames": crd["spec"]["names"].clone(),
        "storedVersions": stored,
    });
}

pub(super) fn is_crd(rt: &ResourceType) -> bool {
    rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions"
}

pub(super) fn dry_run(req: &KubeRequest) -> bool {
    req.param("dryRun") == Some("All")
}

pub(super) fn check_namespace(cluster: &ClusterState, t: &Target) -> Result<(), StatusError> {
    if !t.rt.namespaced {
        return Ok(());
    }
    let ns = cluster
        .store
        .get(&ObjKey::new("", "namespaces", "", t.ns()));
    match ns {
        None => Err(StatusError::not_found("", "namespaces", t.ns())),
        Some(ns) if ns["metadata"].get("deletionTimestamp").is_some() => Err(StatusError::forbidden(format!(
            "{} is forbidden: unable to create new content in namespace {} because it is being terminated",
            status::qualified(&t.rt.group, &t.rt.plural, t.name()),
            t.ns()
        ))),
        Some(_) => Ok(()),
    }
}

/// Stores a new object (or, dry, shows what would be stored) after defaulting.
pub(super) fn insert(
    cluster: &mut ClusterState,
    t: &Target,
    mut object: Value,
    dry: bool,
    now: DateTime<Utc>,
) -> Result<Value, StatusError> {
    let key = t.key();
    let name = key.name.clone();
    object = to_storage(&t.rt, object);
    if let Err(causes) = defaults::on_create(&key, &mut object, cluster) {
        return Err(defaults_invalid(t, &name, &object, causes));
    }
    let stored = if dry {
        let meta = &mut object["metadata"];
        if !meta["uid"].is_string() {
            meta["uid"] = json!(new_uid());
        }
        meta["creationTimestamp"] = json!(timestamp(now));
        meta["generation"] = json!(1);
        object
    } else {
        cluster.store.insert_new(key, object, now)
    };
    Ok(view(&t.rt, &stored))
}

/// Replaces a stored object (or, dry, shows the result) after defaulting and checks.
pub(super) fn store_update(
    cluster: &mut ClusterState,
    t: &Target,
    old_stored: &Value,
    new_view: Value,
    dry: bool,
) -> Result<Value, StatusError> {
    let key = t.key();
    let mut object = to_storage(&t.rt, new_view);
    if let Err(causes) = defaults::on_update(&key, old_stored, &mut object, cluster) {
        return Err(defaults_invalid(t, &key.name, &object, causes));
    }
    if dry {
        return Ok(view(&t.rt, &object));
    }
    let stored = cluster.store.update(&key, object);
    if stored["metadata"].get("deletionTimestamp").is_some() {
        // Removing the last finalizer of an object being deleted deletes it now.
        cluster.store.finish_deletions();
    }
    Ok(view(&t.rt, &stored))
}
