//! What the API server does to an object on write besides storing it: defaulting
//! (Job selectors and labels, Service cluster IPs, pod defaults) and the checks of
//! immutable fields.

use serde_json::Value;

use super::{ClusterState, ObjKey};

/// A field problem, reported as a 422 Invalid Status cause: `(field path, message)`,
/// e.g. `("spec.template", "field is immutable")`.
pub(crate) type Cause = (String, String);

/// Fills defaults on a new object (before it is stored) and checks it.
pub(crate) fn on_create(key: &ObjKey, object: &mut Value, cluster: &ClusterState) -> Result<(), Vec<Cause>> {
    let _ = (key, object, cluster);
    Ok(())
}

/// Fills defaults on a changed object and refuses changes to immutable fields.
pub(crate) fn on_update(key: &ObjKey, old: &Value, object: &mut Value, cluster: &ClusterState) -> Result<(), Vec<Cause>> {
    let _ = (key, old, object, cluster);
    Ok(())
}
