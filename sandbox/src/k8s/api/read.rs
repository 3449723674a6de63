//! Get and list: partial-object metadata and table views, selectors, paging with
//! continue tokens.

use super::*;

pub(super) fn partial_metadata(req: &KubeRequest) -> bool {
    req.accept().contains("as=PartialObjectMetadata")
}

pub(super) fn table_include(req: &KubeRequest) -> Option<Include> {
    table::wants_table(req.accept()).then(|| Include::parse(req.param("includeObject")))
}

pub(super) fn get(
    cluster: &ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let stored = cluster
        .store
        .get(&t.key())
        .ok_or_else(|| StatusError::not_found(&t.rt.group, &t.rt.plural, t.name()))?;
    let obj = view(&t.rt, stored);
    if let Some(include) = table_include(req) {
        let meta = json!({"resourceVersion": resource_version_of(&obj).unwrap_or_default()});
        return Ok(ok(200, table::table(&t.rt, &[obj], now, include, meta)));
    }
    if partial_metadata(req) {
        return Ok(ok(
            200,
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}),
        ));
    }
    Ok(ok(200, obj))
}

/// The objects of a list, in key order, after selectors.
pub(super) fn matching<'a>(
    cluster: &'a ClusterState,
    t: &Target,
    selectors: &Selectors,
) -> Vec<(&'a ObjKey, &'a Value)> {
    cluster
        .store
        .list(&t.rt.storage_group, &t.rt.plural, t.namespace.as_deref())
        .into_iter()
        .filter(|(_, o)| selectors.matches(o))
        .collect()
}

pub(super) fn list(
    cluster: &ClusterState,
    t: &Target,
    req: &KubeRequest,
    now: DateTime<Utc>,
) -> Result<Outcome, StatusError> {
    let selectors = Selectors::parse(req, &t.rt)?;
    let all = matching(cluster, t, &selectors);
    let rv = cluster.store.resource_version.to_string();
    let start = match req.param("continue").filter(|c| !c.is_empty()) {
        Some(token) => decode_continue(token)?,
        None => String::new(),
    };
    let after: Vec<(&ObjKey, &Value)> = all
        .into_iter()
        .filter(|(k, _)| start.is_empty() || format!("{}/{}", k.namespace, k.name) > start)
        .collect();
    let limit = req
        .param("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let (page, more) = match limit {
        Some(l) if after.len() > l => (&after[..l], after.len() - l),
        _ => (&after[..], 0),
    };
    let items: Vec<Value> = page.iter().map(|(_, o)| view(&t.rt, o)).collect();
    let mut meta = json!({"resourceVersion": rv});
    if more > 0 {
        if let Some((k, _)) = page.last() {
            meta["continue"] = json!(encode_continue(&format!("{}/{}", k.namespace, k.name)));
            meta["remainingItemCount"] = json!(more);
        }
    }
    if let Some(include) = table_include(req) {
        return Ok(ok(200, table::table(&t.rt, &items, now, include, meta)));
    }
    if partial_metadata(req) {
        let items: Vec<Value> = items
            .iter()
            .map(|o| json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}))
            .collect();
        return Ok(ok(
            200,
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": items}),
        ));
    }
    Ok(ok(
        200,
        json!({"kind": t.rt.list_kind(), "apiVersion": t.rt.api_version(), "metadata": meta, "items": items}),
    ))
}

pub(super) fn encode_continue(start: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!({"start": start}).to_string())
}

pub(super) fn decode_continue(token: &str) -> Result<String, StatusError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v["start"].as_str().map(str::to_string))
        .ok_or_else(|| StatusError::bad_request("the provided continue parameter is invalid"))
}
