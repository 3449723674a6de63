//! The Filestore emulator (file v1): instances and their `google.longrunning` operations.
//! Enforces the rules that bite in practice: per-tier capacity ranges, no shrinking on
//! BASIC tiers, no tier or share-name changes, exactly one file share, zonal versus
//! regional tiers, and one operation per instance at a time. Instance lists are paged
//! (`pageSize`, `pageToken` → `nextPageToken`) in name order.

use std::time::Duration;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::error::{ApiError, Code};
use super::machines::is_zone;
use super::operation::{Lro, OpCtx};
use super::schema::{snake, Rules};
use super::{int_of, operation_id, parse_body, set_or_remove, str_of, Api};
use crate::common::ids::random_hex;
use crate::common::time::time_nanos;
use crate::http::{ApiRequest, ApiResponse};

const CREATE: Duration = Duration::from_secs(4);
const UPDATE: Duration = Duration::from_secs(2);
const DELETE: Duration = Duration::from_secs(2);

/// The Filestore emulator's persisted state.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct State {
    #[serde(default)]
    instances: Vec<InstanceRecord>,
    #[serde(default)]
    operations: Vec<Op>,
    /// Allocates each instance its own /29 so IP addresses are distinct.
    #[serde(default)]
    next_block: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InstanceRecord {
    project: String,
    location: String,
    id: String,
    instance: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Op {
    /// Full name: `projects/p/locations/l/operations/operation-…`.
    name: String,
    project: String,
    location: String,
    /// The instance's full name.
    target: String,
    verb: String,
    lro: Lro,
    action: Action,
    /// The operation's `response` once it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    response: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum Action {
    Create,
    Update { patch: Value },
    Delete,
}

/// The capacity range of a tier in GB, from Filestore's service tiers page.
fn capacity_range(tier: &str) -> Option<(i64, i64)> {
    match tier {
        "BASIC_HDD" | "STANDARD" => Some((1024, 65434)),
        "BASIC_SSD" | "PREMIUM" => Some((2560, 65434)),
        "HIGH_SCALE_SSD" => Some((10240, 102400)),
        "ZONAL" | "REGIONAL" | "ENTERPRISE" => Some((1024, 102400)),
        _ => None,
    }
}

/// Tiers whose capacity can only grow.
fn grow_only(tier: &str) -> bool {
    matches!(tier, "BASIC_HDD" | "BASIC_SSD" | "STANDARD" | "PREMIUM")
}

/// Tiers whose instances live in a region rather than a zone.
fn regional(tier: &str) -> bool {
    matches!(tier, "REGIONAL" | "ENTERPRISE")
}

impl State {
    /// One line per instance the emulator holds, for `Sandbox::inventory`; an instance
    /// being deleted is still held until its operation completes.
    pub(crate) fn inventory(&self, out: &mut Vec<String>) {
        for i in &self.instances {
            out.push(format!(
                "filestore instance {}/{}/{}",
                i.project, i.location, i.id
            ));
        }
    }

    pub(crate) fn handle(
        &mut self,
        req: &ApiRequest,
        ctx: &OpCtx,
    ) -> Result<ApiResponse, ApiError> {
        let segments = req.segments();
        let s: Vec<&str> = segments.iter().map(String::as_str).collect();
        let method = req.method.as_str();
        let ["v1", "projects", project, "locations", location, rest @ ..] = s.as_slice() else {
            return Err(ApiError::no_route(method, &req.path));
        };
        let (project, location): (&str, &str) = (project, location);
        match (method, rest) {
            ("GET", ["instances"]) => self.list(project, location, req),
            ("POST", ["instances"]) => self.create(project, location, req, ctx),
            ("GET", ["instances", id]) => self.get(project, location, id),
            ("PATCH", ["instances", id]) => self.update(project, location, id, req, ctx),
            ("DELETE", ["instances", id]) => self.delete(project, location, id, ctx),
            ("GET", ["operations"]) => Ok(self.list_operations(project, location)),
            ("GET", ["operations", id]) => self.get_operation(project, location, id),
            _ => Err(ApiError::no_route(method, &req.path)),
        }
    }

    /// One page of the instances under `projects/{project}/locations/{location}` (every
    /// location for `-`), in name order: at most `pageSize` of them (all when it is
    /// absent or 0), after the instance `pageToken` names; `nextPageToken` is set while
    /// more remain, and names the page's last instance, so a page never skips or repeats
    /// an instance when others are created or deleted between pages.
    fn list(
        &self,
        project: &str,
        location: &str,
        req: &ApiRequest,
    ) -> Result<ApiResponse, ApiError> {
        let parent = format!("projects/{project}/locations/{location}");
        let page_size = match req.param("pageSize") {
            None | Some("") => 0,
            Some(text) => match text.parse::<i32>() {
                Ok(n) if n >= 0 => usize::try_from(n).unwrap_or(0),
                Ok(_) => return Err(ApiError::invalid("page_size must not be negative.")),
                Err(_) => {
                    return Err(ApiError::invalid(format!(
                        "Invalid value at 'page_size' (TYPE_INT32), \"{text}\""
                    )))
                }
            },
        };
        let after = match req.param("pageToken").filter(|t| !t.is_empty()) {
            None => None,
            Some(token) => Some(page_after(token, &parent)?),
        };
        let mut names: Vec<(&str, &Value)> = self
            .instances
            .iter()
            .filter(|i| i.project == project && (location == "-" || i.location == location))
            .map(|i| (str_of(&i.instance, "name"), &i.instance))
            .filter(|(name, _)| after.as_deref().is_none_or(|a| *name > a))
            .collect();
        names.sort_by(|a, b| a.0.cmp(b.0));
        let more = page_size > 0 && names.len() > page_size;
        if more {
            names.truncate(page_size);
        }
        let mut out = json!({});
        set_or_remove(
            &mut out,
            "instances",
            Value::Array(names.iter().map(|(_, i)| (*i).clone()).collect()),
        );
        if let (true, Some((last, _))) = (more, names.last()) {
            out["nextPageToken"] = json!(page_token(&parent, last));
        }
        Ok(ApiResponse::ok(out))
    }

    fn get(&self, project: &str, location: &str, id: &str) -> Result<ApiResponse, ApiError> {
        let i = self.index(project, location, id)?;
        Ok(ApiResponse::ok(self.instances[i].instance.clone()))
    }

    fn create(
        &mut self,
        project: &str,
        location: &str,
        req: &ApiRequest,
        ctx: &OpCtx,
    ) -> Result<ApiResponse, ApiError> {
        let body = parse_body(req, Api::File, "Instance", "instance", Rules::PROTO3)?;
        let id = req.param("instanceId").unwrap_or("");
        check_id(id)?;
        if location == "-" {
            return Err(ApiError::invalid(
                "Location \"-\" is not valid for creating an instance.",
            ));
        }
        let name = instance_name(project, location, id);
        if self.find(project, location, id).is_some() {
            return Err(ApiError::exists(format!(
                "Resource '{name}' already exists"
            )));
        }
        let tier = str_of(&body, "tier");
        if tier.is_empty() {
            return Err(ApiError::invalid("instance.tier is required."));
        }
        if regional(tier) == is_zone(location) {
            let want = if regional(tier) { "a region" } else { "a zone" };
            return Err(ApiError::invalid(format!(
                "Tier {tier} instances must be created in {want}, not \"{location}\"."
            )));
        }
        let shares = body
            .get("fileShares")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let [share] = shares.as_slice() else {
            return Err(ApiError::invalid(format!(
                "instance.file_shares must contain exactly one file share, got {}.",
                shares.len()
            )));
        };
        check_share(tier, share)?;
        let networks = body
            .get("networks")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let [network] = networks.as_slice() else {
            return Err(ApiError::invalid(format!(
                "instance.networks must contain exactly one network, got {}.",
                networks.len()
            )));
        };
        if str_of(network, "network").is_empty() {
            return Err(ApiError::invalid(
                "instance.networks[0].network is required.",
            ));
        }
        let block = self.next_block;
        self.next_block += 1;
        let network = fill_network(network, block);

        let mut instance = Map::new();
        instance.insert("name".into(), json!(name));
        if let Some(d) = body.get("description") {
            instance.insert("description".into(), d.clone());
        }
        instance.insert("state".into(), json!("CREATING"));
        instance.insert("createTime".into(), json!(time_nanos(ctx.now)));
        instance.insert("tier".into(), json!(tier));
        if let Some(labels) = body.get("labels") {
            instance.insert("labels".into(), labels.clone());
        }
        instance.insert("fileShares".into(), json!([share]));
        instance.insert("networks".into(), json!([network]));
        if let Some(protocol) = body.get("protocol") {
            instance.insert("protocol".into(), protocol.clone());
        }
        instance.insert("etag".into(), json!(random_hex(16)));
        self.instances.push(InstanceRecord {
            project: project.to_string(),
            location: location.to_string(),
            id: id.to_string(),
            instance: Value::Object(instance),
        });
        Ok(ApiResponse::ok(self.start(
            project,
            location,
            &name,
            "create",
            CREATE,
            Action::Create,
            ctx,
        )))
    }

    fn update(
        &mut self,
        project: &str,
        location: &str,
        id: &str,
        req: &ApiRequest,
        ctx: &OpCtx,
    ) -> Result<ApiResponse, ApiError> {
        let body = parse_body(req, Api::File, "Instance", "instance", Rules::PROTO3)?;
        let i = self.index(project, location, id)?;
        let mask = req.param("updateMask").unwrap_or("");
        if mask.trim().is_empty() {
            return Err(ApiError::invalid(
                "update_mask is required: list the fields to change.",
            ));
        }
        self.check_idle(&instance_name(project, location, id))?;
        let current = &self.instances[i].instance;
        let tier = str_of(current, "tier");
        let mut patch = Map::new();
        for path in mask.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match snake(path).as_str() {
                "description" | "labels" => {
                    let key = path.to_string();
                    patch.insert(key.clone(), body.get(&key).cloned().unwrap_or(Value::Null));
                }
                "file_shares" => {
                    let shares = body.get("fileShares").and_then(Value::as_array).cloned().unwrap_or_default();
                    let [share] = shares.as_slice() else {
                        return Err(ApiError::invalid(format!(
                            "instance.file_shares must contain exactly one file share, got {}.",
                            shares.len()
                        )));
                    };
                    let old = &current["fileShares"][0];
                    if str_of(share, "name") != str_of(old, "name") {
                        return Err(ApiError::invalid(format!(
                            "Changing the file share name is not supported: the instance has \"{}\", the request has \"{}\".",
                            str_of(old, "name"),
                            str_of(share, "name")
                        )));
                    }
                    check_share(tier, share)?;
                    let (before, after) = (int_of(old, "capacityGb"), int_of(share, "capacityGb"));
                    if grow_only(tier) && after < before {
                        return Err(ApiError::invalid(format!(
                            "Shrinking a {tier} instance is not supported: capacity {before} GB cannot become {after} GB."
                        )));
                    }
                    patch.insert("fileShares".into(), json!([share]));
                }
                "tier" => {
                    return Err(ApiError::invalid(
                        "Changing the tier of an instance is not supported; update_mask must not contain \"tier\".",
                    ))
                }
                other => {
                    return Err(ApiError::invalid(format!(
                        "update_mask path \"{other}\" is not supported; supported paths are description, labels and file_shares."
                    )))
                }
            }
        }
        let name = instance_name(project, location, id);
        let op = self.start(
            project,
            location,
            &name,
            "update",
            UPDATE,
            Action::Update {
                patch: Value::Object(patch),
            },
            ctx,
        );
        Ok(ApiResponse::ok(op))
    }

    fn delete(
        &mut self,
        project: &str,
        location: &str,
        id: &str,
        ctx: &OpCtx,
    ) -> Result<ApiResponse, ApiError> {
        let i = self.index(project, location, id)?;
        let name = instance_name(project, location, id);
        self.check_idle(&name)?;
        self.instances[i].instance["state"] = json!("DELETING");
        Ok(ApiResponse::ok(self.start(
            project,
            location,
            &name,
            "delete",
            DELETE,
            Action::Delete,
            ctx,
        )))
    }

    fn list_operations(&self, project: &str, location: &str) -> ApiResponse {
        let ops: Vec<Value> = self
            .operations
            .iter()
            .filter(|o| o.project == project && (location == "-" || o.location == location))
            .map(render_op)
            .collect();
        let mut out = json!({});
        set_or_remove(&mut out, "operations", Value::Array(ops));
        ApiResponse::ok(out)
    }

    fn get_operation(
        &self,
        project: &str,
        location: &str,
        id: &str,
    ) -> Result<ApiResponse, ApiError> {
        let name = format!("projects/{project}/locations/{location}/operations/{id}");
        self.operations
            .iter()
            .find(|o| o.name == name)
            .map(|o| ApiResponse::ok(render_op(o)))
            .ok_or_else(|| ApiError::not_found(format!("Resource '{name}' was not found")))
    }

    #[allow(clippy::too_many_arguments)]
    fn start(
        &mut self,
        project: &str,
        location: &str,
        target: &str,
        verb: &str,
        base: Duration,
        action: Action,
        ctx: &OpCtx,
    ) -> Value {
        let op = Op {
            name: format!(
                "projects/{project}/locations/{location}/operations/{}",
                operation_id(ctx.now)
            ),
            project: project.to_string(),
            location: location.to_string(),
            target: target.to_string(),
            verb: verb.to_string(),
            lro: ctx.start(Api::File, base),
            action,
            response: None,
        };
        let rendered = render_op(&op);
        self.operations.push(op);
        rendered
    }

    /// Applies every operation that has finished by `now`, in the order they finished.
    pub(crate) fn settle(&mut self, now: DateTime<Utc>) {
        let mut due: Vec<usize> = (0..self.operations.len())
            .filter(|&i| self.operations[i].lro.due(now))
            .collect();
        due.sort_by_key(|&i| self.operations[i].lro.end());
        for i in due {
            self.operations[i].lro.settled = true;
            let op = self.operations[i].clone();
            self.operations[i].response = self.complete(&op);
        }
    }

    /// Applies one finished operation and returns its `response`.
    fn complete(&mut self, op: &Op) -> Option<Value> {
        let i = self
            .instances
            .iter()
            .position(|r| str_of(&r.instance, "name") == op.target)?;
        let failed = op.lro.failure.is_some();
        match (&op.action, failed) {
            (Action::Create, true) | (Action::Delete, false) => {
                self.instances.remove(i);
                return (!failed)
                    .then(|| json!({"@type": "type.googleapis.com/google.protobuf.Empty"}));
            }
            (Action::Update { patch }, false) => {
                let instance = &mut self.instances[i].instance;
                if let Some(map) = patch.as_object() {
                    for (k, v) in map {
                        set_or_remove(instance, k, v.clone());
                    }
                }
                instance["etag"] = json!(random_hex(16));
            }
            _ => {}
        }
        let instance = &mut self.instances[i].instance;
        instance["state"] = json!("READY");
        if failed {
            return None;
        }
        let mut response =
            json!({"@type": "type.googleapis.com/google.cloud.filestore.v1.Instance"});
        if let (Some(out), Some(fields)) = (response.as_object_mut(), instance.as_object()) {
            out.extend(fields.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        Some(response)
    }

    fn find(&self, project: &str, location: &str, id: &str) -> Option<usize> {
        self.instances
            .iter()
            .position(|r| r.project == project && r.location == location && r.id == id)
    }

    fn index(&self, project: &str, location: &str, id: &str) -> Result<usize, ApiError> {
        self.find(project, location, id).ok_or_else(|| {
            ApiError::not_found(format!(
                "Resource '{}' was not found",
                instance_name(project, location, id)
            ))
        })
    }

    /// Filestore runs one operation per instance at a time; the sandbox answers a second
    /// one with ABORTED, the canonical code for a concurrency conflict, so clients retry.
    fn check_idle(&self, target: &str) -> Result<(), ApiError> {
        match self
            .operations
            .iter()
            .find(|o| !o.lro.settled && o.target == target)
        {
            Some(op) => Err(ApiError::new(
                Code::Aborted,
                format!(
                    "Operation {} is in progress on {target}; retry when it has finished.",
                    op.name
                ),
            )),
            None => Ok(()),
        }
    }
}

/// The page token for the page after the instance `last` of the list of `parent`: both,
/// base64url-encoded, so the token is opaque and only valid for its own list.
fn page_token(parent: &str, last: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{parent}|{last}"))
}

/// The last instance of the previous page, from a `page_token` of the list of `parent`.
fn page_after(token: &str, parent: &str) -> Result<String, ApiError> {
    let invalid = || ApiError::invalid(format!("The page token {token:?} is not valid."));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| invalid())?;
    let text = String::from_utf8(bytes).map_err(|_| invalid())?;
    match text.split_once('|') {
        Some((p, last)) if p == parent => Ok(last.to_string()),
        _ => Err(invalid()),
    }
}

fn instance_name(project: &str, location: &str, id: &str) -> String {
    format!("projects/{project}/locations/{location}/instances/{id}")
}

fn render_op(op: &Op) -> Value {
    let done = op.lro.settled;
    let mut metadata = json!({
        "@type": "type.googleapis.com/google.cloud.common.OperationMetadata",
        "createTime": time_nanos(op.lro.start),
    });
    if done {
        metadata["endTime"] = json!(time_nanos(op.lro.end()));
    }
    metadata["target"] = json!(op.target);
    metadata["verb"] = json!(op.verb);
    metadata["cancelRequested"] = json!(false);
    metadata["apiVersion"] = json!("v1");
    let mut out = json!({"name": op.name, "metadata": metadata, "done": done});
    if let Some(error) = op.lro.error() {
        out["error"] = json!({"code": error.code, "message": error.message});
    } else if let Some(response) = &op.response {
        out["response"] = response.clone();
    }
    out
}

fn check_id(id: &str) -> Result<(), ApiError> {
    let b = id.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.last().is_some_and(|c| *c != b'-');
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "Invalid instance_id \"{id}\": it must be 1-63 lowercase letters, digits or hyphens, start with a letter and not end with a hyphen."
        )))
    }
}

fn check_share(tier: &str, share: &Value) -> Result<(), ApiError> {
    let name = str_of(share, "name");
    let b = name.as_bytes();
    let valid_name = !b.is_empty()
        && b.len() <= 16
        && b[0].is_ascii_alphabetic()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_');
    if !valid_name {
        return Err(ApiError::invalid(format!(
            "Invalid file share name \"{name}\": it must be 1-16 letters, digits or underscores and start with a letter."
        )));
    }
    let capacity = int_of(share, "capacityGb");
    let Some((min, max)) = capacity_range(tier) else {
        return Err(ApiError::invalid(format!("Tier {tier} is not supported.")));
    };
    if capacity < min || capacity > max {
        return Err(ApiError::invalid(format!(
            "Requested capacity {capacity} GB for tier {tier} is outside the supported range {min}-{max} GB."
        )));
    }
    Ok(())
}

/// Completes a network config with what Filestore allocates: the mode, the connect mode,
/// a /29 reserved range and the instance's address in it.
fn fill_network(network: &Value, block: u32) -> Value {
    let mut out = network.clone();
    if out.get("modes").is_none() {
        out["modes"] = json!(["MODE_IPV4"]);
    }
    // 10.200.0.0/16 split into /29s, one per instance.
    let base = (10u32 << 24) | (200 << 16) | ((block % 8192) * 8);
    let range = match parse_cidr(str_of(network, "reservedIpRange")) {
        Some(net) => net,
        None => {
            if out.get("reservedIpRange").is_none() {
                out["reservedIpRange"] = json!(format!("{}/29", ipv4(base)));
            }
            base
        }
    };
    out["ipAddresses"] = json!([ipv4(range + 2)]);
    if out.get("connectMode").is_none() {
        out["connectMode"] = json!("DIRECT_PEERING");
    }
    out
}

fn parse_cidr(s: &str) -> Option<u32> {
    let (addr, _) = s.split_once('/')?;
    let octets: Vec<u32> = addr
        .split('.')
        .map(|o| o.parse().ok())
        .collect::<Option<_>>()?;
    let [a, b, c, d] = octets.as_slice() else {
        return None;
    };
    if [a, b, c, d].iter().any(|o| **o > 255) {
        return None;
    }
    Some((a << 24) | (b << 16) | (c << 8) | d)
}

fn ipv4(n: u32) -> String {
    format!(
        "{}.{}.{}.{}",
        n >> 24,
        (n >> 16) & 255,
        (n >> 8) & 255,
        n & 255
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Faults;
    use crate::gcp::discovery::conforms;
    use axum::http::Method;

    const ROOT: &str = "v1/projects/p/locations/us-central1-a";

    /// The emulator and a test clock; every request settles first, as the server does,
    /// and every response must conform to the official resource shapes.
    #[derive(Default)]
    struct Harness {
        state: State,
        faults: Faults,
        now: i64,
    }

    impl Harness {
        fn at(&mut self, secs: i64) -> &mut Self {
            self.now = secs;
            self
        }

        fn send(
            &mut self,
            method: Method,
            path: &str,
            body: Option<Value>,
        ) -> Result<Value, ApiError> {
            let now =
                DateTime::<Utc>::from_timestamp(1_700_000_000 + self.now, 0).expect("valid time");
            let ctx = OpCtx {
                now,
                scale: 1.0,
                faults: &self.faults,
            };
            self.state.settle(now);
            let req = ApiRequest::new(method, path, body);
            let body = self
                .state
                .handle(&req, &ctx)?
                .json_body()
                .cloned()
                .unwrap_or(Value::Null);
            let operation = req.method != Method::GET || req.path.contains("/operations/");
            let msg = if operation {
                "Operation"
            } else if req.path.ends_with("/operations") {
                "ListOperationsResponse"
            } else if req.path.ends_with("/instances") {
                "ListInstancesResponse"
            } else {
                "Instance"
            };
            assert_eq!(conforms("file", msg, &body), Ok(()), "{body}");
            if operation {
                let metadata = without_type(&body["metadata"]);
                assert_eq!(conforms("file", "OperationMetadata", &metadata), Ok(()));
                if body["response"]["@type"]
                    .as_str()
                    .is_some_and(|t| t.ends_with(".Instance"))
                {
                    assert_eq!(
                        conforms("file", "Instance", &without_type(&body["response"])),
                        Ok(())
                    );
                }
            }
            Ok(body)
        }

        fn get(&mut self, path: &str) -> Result<Value, ApiError> {
            self.send(Method::GET, path, None)
        }

        fn create(&mut self, id: &str, body: Value) -> Result<Value, ApiError> {
            self.send(
                Method::POST,
                &format!("{ROOT}/instances?instanceId={id}"),
                Some(body),
            )
        }

        fn patch(&mut self, mask: &str, body: Value) -> Result<Value, ApiError> {
            self.send(
                Method::PATCH,
                &format!("{ROOT}/instances/nfs?updateMask={mask}"),
                Some(body),
            )
        }

        fn op(&mut self, op: &Value) -> Value {
            self.get(&format!("v1/{}", str_of(op, "name")))
                .expect("operation")
        }
    }

    fn without_type(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("@type");
        }
        v
    }

    fn instance(tier: &str, capacity: i64) -> Value {
        json!({"tier": tier, "fileShares": [{"name": "vol1", "capacityGb": capacity}],
            "networks": [{"network": "default"}], "labels": {"team": "ml"}})
    }

    #[test]
    fn instance_lifecycle_with_operations() {
        let mut h = Harness::default();
        let nfs = format!("{ROOT}/instances/nfs");
        let op = h
            .at(0)
            .create("nfs", instance("BASIC_HDD", 1024))
            .expect("create");
        assert_eq!(op["done"], false);
        assert_eq!(op["metadata"]["verb"], "create");
        assert_eq!(
            op["metadata"]["target"],
            "projects/p/locations/us-central1-a/instances/nfs"
        );
        let i = h.at(1).get(&nfs).expect("get");
        assert_eq!(i["state"], "CREATING");
        assert_eq!(i["fileShares"][0]["capacityGb"], "1024");
        assert_eq!(i["networks"][0]["ipAddresses"], json!(["10.200.0.2"]));
        assert_eq!(i["networks"][0]["modes"], json!(["MODE_IPV4"]));
        let done = h.at(4).op(&op);
        assert_eq!(done["done"], true);
        assert_eq!(
            done["response"]["@type"],
            "type.googleapis.com/google.cloud.filestore.v1.Instance"
        );
        assert_eq!(done["response"]["state"], "READY");

        // The tier in the body is ignored: only masked fields change.
        let grow = json!({"fileShares": [{"name": "vol1", "capacityGb": "2048"}], "tier": "ZONAL"});
        h.at(5).patch("fileShares", grow).expect("grow");
        let busy = h.at(6).send(Method::DELETE, &nfs, None).expect_err("busy");
        assert_eq!(busy.code, Code::Aborted);
        let i = h.at(7).get(&nfs).expect("get");
        assert_eq!(i["fileShares"][0]["capacityGb"], "2048");
        assert_eq!(i["tier"], "BASIC_HDD");

        let op = h.at(8).send(Method::DELETE, &nfs, None).expect("delete");
        assert_eq!(h.at(9).get(&nfs).expect("deleting")["state"], "DELETING");
        let done = h.at(10).op(&op);
        assert_eq!(
            done["response"]["@type"],
            "type.googleapis.com/google.protobuf.Empty"
        );
        let gone = h.get(&nfs).expect_err("gone");
        assert_eq!(
            gone.message,
            "Resource 'projects/p/locations/us-central1-a/instances/nfs' was not found"
        );
    }

    #[test]
    fn filestore_rules_are_enforced() {
        let mut h = Harness::default();
        let no_shares =
            json!({"tier": "BASIC_HDD", "fileShares": [], "networks": [{"network": "default"}]});
        let cases: Vec<(&str, Value, &str)> = vec![
            ("a", instance("BASIC_HDD", 512), "outside the supported range 1024-65434 GB"),
            ("a", instance("BASIC_SSD", 2048), "outside the supported range 2560-65434 GB"),
            (
                "a",
                instance("FAST", 2048),
                "Invalid value at 'instance.tier' (type.googleapis.com/google.cloud.filestore.v1.Instance.Tier), \"FAST\"",
            ),
            ("a", instance("REGIONAL", 2048), "must be created in a region"),
            ("Bad", instance("BASIC_HDD", 1024), "Invalid instance_id"),
            ("a", no_shares, "exactly one file share"),
            (
                "a",
                json!({"tier": "BASIC_HDD", "bogus": 1}),
                "Unknown name \"bogus\" at 'instance': Cannot find field.",
            ),
        ];
        for (id, body, message) in cases {
            let err = h.create(id, body).expect_err("rejected");
            assert_eq!(err.code, Code::InvalidArgument);
            assert!(err.message.contains(message), "{}", err.message);
        }
        h.create("nfs", instance("BASIC_HDD", 2048))
            .expect("create");
        let dup = h
            .create("nfs", instance("BASIC_HDD", 2048))
            .expect_err("dup");
        assert_eq!(dup.code, Code::AlreadyExists);
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "fileShares",
                json!({"fileShares": [{"name": "vol1", "capacityGb": 1024}]}),
                "Shrinking a BASIC_HDD instance",
            ),
            (
                "fileShares",
                json!({"fileShares": [{"name": "other", "capacityGb": 4096}]}),
                "Changing the file share name",
            ),
            ("tier", json!({"tier": "BASIC_SSD"}), "Changing the tier"),
            (
                "networks",
                json!({}),
                "update_mask path \"networks\" is not supported",
            ),
            ("", json!({}), "update_mask is required"),
        ];
        for (mask, body, message) in cases {
            let err = h.at(10).patch(mask, body).expect_err("rejected");
            assert_eq!(err.code, Code::InvalidArgument);
            assert!(err.message.contains(message), "{}", err.message);
        }
        h.patch("labels,description", json!({"description": "d"}))
            .expect("patch");
        let i = h.at(20).get(&format!("{ROOT}/instances/nfs")).expect("get");
        assert!(
            i.get("labels").is_none(),
            "labels in the mask but not the body are cleared"
        );
        assert_eq!(i["description"], "d");
    }

    #[test]
    fn failed_create_leaves_no_instance_and_lists_span_locations() {
        let mut h = Harness::default();
        h.faults
            .fail_next_operation("file", "capacity exhausted in zone");
        let op = h
            .at(0)
            .create("a", instance("BASIC_HDD", 1024))
            .expect("create");
        let regional = "v1/projects/p/locations/us-east1/instances?instanceId=b";
        h.send(Method::POST, regional, Some(instance("REGIONAL", 1024)))
            .expect("create regional");
        let op = h.at(10).op(&op);
        assert_eq!(
            op["error"],
            json!({"code": 13, "message": "capacity exhausted in zone"})
        );
        assert!(op.get("response").is_none());
        let all = h.get("v1/projects/p/locations/-/instances").expect("list");
        let names: Vec<&str> = all["instances"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|i| str_of(i, "name"))
            .collect();
        assert_eq!(names, ["projects/p/locations/us-east1/instances/b"]);
        let ops = h.get("v1/projects/p/locations/-/operations").expect("ops");
        assert_eq!(ops["operations"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn lists_are_paged_in_name_order() {
        let mut h = Harness::default();
        for id in ["c", "a", "b"] {
            h.at(0)
                .create(id, instance("BASIC_HDD", 1024))
                .expect("create");
        }
        let names = |page: &Value| -> Vec<String> {
            page["instances"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|i| {
                    str_of(i, "name")
                        .rsplit('/')
                        .next()
                        .unwrap_or("")
                        .to_string()
                })
                .collect()
        };
        let list = format!("{ROOT}/instances");
        let first = h.get(&format!("{list}?pageSize=2")).expect("page 1");
        assert_eq!(names(&first), ["a", "b"]);
        let token = str_of(&first, "nextPageToken").to_string();
        assert!(!token.is_empty(), "{first}");
        // An instance created between pages after the token's place shows on the next.
        h.create("bb", instance("BASIC_HDD", 1024)).expect("create");
        let second = h
            .get(&format!("{list}?pageSize=2&pageToken={token}"))
            .expect("page 2");
        assert_eq!(names(&second), ["bb", "c"]);
        assert!(second.get("nextPageToken").is_none(), "{second}");
        let all = h.get(&format!("{list}?pageSize=0")).expect("all");
        assert_eq!(names(&all), ["a", "b", "bb", "c"]);
        assert!(all.get("nextPageToken").is_none());
        assert_eq!(names(&h.get(&list).expect("unpaged")), names(&all));
        // A token only pages its own list; garbage and negative sizes are refused.
        let elsewhere =
            format!("v1/projects/p/locations/us-central1-b/instances?pageToken={token}");
        for bad in [
            elsewhere,
            format!("{list}?pageToken=not-a-token"),
            format!("{list}?pageSize=-1"),
            format!("{list}?pageSize=two"),
        ] {
            let err = h.get(&bad).expect_err(&bad);
            assert_eq!(err.code, Code::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn reserved_ranges_give_addresses() {
        let n = fill_network(
            &json!({"network": "vpc", "reservedIpRange": "10.1.2.0/29"}),
            0,
        );
        assert_eq!(n["ipAddresses"], json!(["10.1.2.2"]));
        let n = fill_network(&json!({"network": "vpc"}), 1);
        assert_eq!(n["reservedIpRange"], "10.200.0.8/29");
        assert_eq!(n["ipAddresses"], json!(["10.200.0.10"]));
    }
}
