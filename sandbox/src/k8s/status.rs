//! The `metav1.Status` objects the emulated API server answers errors with (and the
//! `Success` Status of some deletes), shaped the way the real API server words them so
//! clients that match on `reason`, `code` or the message keep working.

use serde_json::{json, Map, Value};

use crate::http::ApiResponse;

/// A failed request as a Kubernetes Status: HTTP code, machine-readable reason, message
/// and optional `details`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StatusError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// Boxed: errors travel in every `Result` of the handlers and should stay small.
    pub details: Option<Box<Value>>,
    /// Seconds for a `Retry-After` header (throttling and unavailability).
    pub retry_after: Option<u32>,
}

/// One `details.causes` entry of an Invalid Status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldManagerConflict`…
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

/// `{name, group, kind}` as the API server fills `details` for errors about one object;
/// `kind` holds the plural resource, as the real server does.
fn object_details(group: &str, resource: &str, name: &str) -> Value {
    let mut d = Map::new();
    d.insert("name".into(), json!(name));
    if !group.is_empty() {
        d.insert("group".into(), json!(group));
    }
    d.insert("kind".into(), json!(resource));
    Value::Object(d)
}

/// `configmaps "x"` or `jobs.batch "x"`.
pub(crate) fn qualified(group: &str, resource: &str, name: &str) -> String {
    if group.is_empty() {
        format!("{resource} \"{name}\"")
    } else {
        format!("{resource}.{group} \"{name}\"")
    }
}

impl StatusError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> StatusError {
        StatusError {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    pub(crate) fn not_found(group: &str, resource: &str, name: &str) -> StatusError {
        let mut e = StatusError::new(
            404,
            "NotFound",
            format!("{} not found", qualified(group, resource, name)),
        );
        e.details = Some(Box::new(object_details(group, resource, name)));
        e
    }

    /// A path the server does not serve at all (unknown resource or API).
    pub(crate) fn no_route() -> StatusError {
        let mut e = StatusError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
        e.details = Some(Box::new(json!({})));
        e
    }

    pub(crate) fn already_exists(group: &str, resource: &str, name: &str) -> StatusError {
        let mut e = StatusError::new(
            409,
            "AlreadyExists",
            format!("{} already exists", qualified(group, resource, name)),
        );
        e.details = Some(Box::new(object_details(group, resource, name)));
        e
    }

    /// A write against a stale `resourceVersion` (or another failed precondition).
    pub(crate) fn conflict(group: &str, resource: &str, name: &str, why: &str) -> StatusError {
        let mut e = StatusError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {}: {why}",
                qualified(group, resource, name)
            ),
        );
        e.details = Some(Box::new(object_details(group, resource, name)));
        e
    }

    /// The stale-resourceVersion conflict, worded as the API server does.
    pub(crate) fn stale(group: &str, resource: &str, name: &str) -> StatusError {
        StatusError::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid: `Job.batch "x" is invalid: spec.template: Invalid value: …`.
    pub(crate) fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> StatusError {
        let what = if group.is_empty() {
            format!("{kind} \"{name}\"")
        } else {
            format!("{kind}.{group} \"{name}\"")
        };
        let rendered: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let summary = match rendered.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let mut details = Map::new();
        details.insert("name".into(), json!(name));
        if !group.is_empty() {
            details.insert("group".into(), json!(group));
        }
        details.insert("kind".into(), json!(kind));
        details.insert(
            "causes".into(),
            Value::Array(
                causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect(),
            ),
        );
        let mut e = StatusError::new(422, "Invalid", format!("{what} is invalid: {summary}"));
        e.details = Some(Box::new(Value::Object(details)));
        e
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> StatusError {
        StatusError::new(400, "BadRequest", message)
    }

    pub(crate) fn unauthorized() -> StatusError {
        StatusError::new(401, "Unauthorized", "Unauthorized")
    }

    pub(crate) fn forbidden(message: impl Into<String>) -> StatusError {
        StatusError::new(403, "Forbidden", message)
    }

    pub(crate) fn method_not_allowed(method: &str) -> StatusError {
        StatusError::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    pub(crate) fn unsupported_media_type(content_type: &str) -> StatusError {
        StatusError::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {content_type:?})"),
        )
    }

    /// 410 for a watch or continue token older than the change log reaches.
    pub(crate) fn expired(message: impl Into<String>) -> StatusError {
        StatusError::new(410, "Expired", message)
    }

    /// What an injected fault answers: 429 TooManyRequests, 500 InternalError, anything
    /// else ServiceUnavailable; always with a Retry-After (1 s unless the fault says).
    pub(crate) fn injected(code: u16, retry_after: Option<u32>) -> StatusError {
        let (reason, message) = match code {
            429 => (
                "TooManyRequests",
                "the server has received too many requests and has asked us to try again later",
            ),
            500 => (
                "InternalError",
                "an error on the server has prevented the request from succeeding",
            ),
            _ => (
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
        };
        // The API server always says when to come back; clients wait that long.
        let retry_after = retry_after.unwrap_or(1);
        let mut e = StatusError::new(code, reason, message);
        e.details = Some(Box::new(json!({"retryAfterSeconds": retry_after})));
        e.retry_after = Some(retry_after);
        e
    }

    pub(crate) fn unavailable(message: impl Into<String>) -> StatusError {
        StatusError::new(503, "ServiceUnavailable", message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> StatusError {
        StatusError::new(500, "InternalError", message)
    }

    /// The same error, worded differently.
    pub(crate) fn with_message(mut self, message: impl Into<String>) -> StatusError {
        self.message = message.into();
        self
    }

    /// The Status object.
    pub(crate) fn to_value(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        });
        if let Some(d) = &self.details {
            v["details"] = (**d).clone();
        }
        v["code"] = json!(self.code);
        v
    }

    pub(crate) fn response(&self) -> ApiResponse {
        let mut r = ApiResponse::json(self.code, self.to_value());
        r.retry_after = self.retry_after;
        r
    }
}

/// The `Success` Status some deletes answer with.
pub(crate) fn success(group: &str, resource: &str, name: &str, uid: &str) -> Value {
    let mut details = object_details(group, resource, name);
    details["uid"] = json!(uid);
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_carry_the_api_server_wording() {
        let cases: Vec<(StatusError, u16, &str, &str)> = vec![
            (
                StatusError::not_found("batch", "jobs", "x"),
                404,
                "NotFound",
                "jobs.batch \"x\" not found",
            ),
            (
                StatusError::not_found("", "configmaps", "c"),
                404,
                "NotFound",
                "configmaps \"c\" not found",
            ),
            (
                StatusError::already_exists("", "pods", "p"),
                409,
                "AlreadyExists",
                "pods \"p\" already exists",
            ),
            (
                StatusError::stale("apps", "deployments", "d"),
                409,
                "Conflict",
                "Operation cannot be fulfilled on deployments.apps \"d\": the object has been modified; please apply your changes to the latest version and try again",
            ),
            (
                StatusError::unauthorized(),
                401,
                "Unauthorized",
                "Unauthorized",
            ),
            (
                StatusError::injected(429, Some(3)),
                429,
                "TooManyRequests",
                "the server has received too many requests and has asked us to try again later",
            ),
            (
                StatusError::injected(503, None),
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
        ];
        for (err, code, reason, message) in cases {
            let v = err.to_value();
            assert_eq!(v["kind"], "Status");
            assert_eq!(v["apiVersion"], "v1");
            assert_eq!(v["status"], "Failure");
            assert_eq!(
                (v["code"].as_u64(), v["reason"].as_str()),
                (Some(u64::from(code)), Some(reason))
            );
            assert_eq!(v["message"], message);
        }
    }

    #[test]
    fn not_found_details_name_the_group_and_resource() {
        let v = StatusError::not_found("batch", "jobs", "x").to_value();
        assert_eq!(
            v["details"],
            json!({"name": "x", "group": "batch", "kind": "jobs"})
        );
        let v = StatusError::not_found("", "pods", "p").to_value();
        assert_eq!(v["details"], json!({"name": "p", "kind": "pods"}));
    }

    #[test]
    fn invalid_lists_every_cause() {
        let one = StatusError::invalid(
            "Job",
            "batch",
            "x",
            vec![Cause {
                reason: "FieldValueInvalid",
                field: "spec.template".into(),
                message: "Invalid value: {}: field is immutable".into(),
            }],
        );
        assert_eq!(one.code, 422);
        assert_eq!(
            one.message,
            "Job.batch \"x\" is invalid: spec.template: Invalid value: {}: field is immutable"
        );
        let v = one.to_value();
        assert_eq!(v["details"]["causes"][0]["reason"], "FieldValueInvalid");
        assert_eq!(v["details"]["causes"][0]["field"], "spec.template");
        let two = StatusError::invalid(
            "ConfigMap",
            "",
            "c",
            vec![
                Cause {
                    reason: "FieldValueInvalid",
                    field: "a".into(),
                    message: "m1".into(),
                },
                Cause {
                    reason: "FieldValueRequired",
                    field: "b".into(),
                    message: "m2".into(),
                },
            ],
        );
        assert_eq!(two.message, "ConfigMap \"c\" is invalid: [a: m1, b: m2]");
    }

    #[test]
    fn success_names_the_deleted_object() {
        let v = success("", "configmaps", "c", "u-1");
        assert_eq!(v["status"], "Success");
        assert_eq!(v["details"]["uid"], "u-1");
        assert_eq!(v["details"]["kind"], "configmaps");
    }
}
