//! The one error type providers return; the engine prefixes it with the resource address.

use std::time::Duration;

use crate::failure::Hint;

/// Why a provider call failed. Messages name the API call so that, prefixed with the
/// address by the engine, a user reads `kind.name: call failed: reason`.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The spec could not be turned into the kind's typed spec (a bug in a schema, or a
    /// state file written by another version).
    #[error("decode {what}: {source}")]
    Decode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// An API answered with an error, or could not be reached (status 0). Built by
    /// [`crate::failure`] for cloud calls: `request_id` when the service gave one, `hint`
    /// saying what to do about the common causes.
    #[error("{call} failed: {}{}{}", fmt_answer(*status, code, message), fmt_request_id(request_id.as_deref()), fmt_hint(hint.as_ref()))]
    Api {
        call: String,
        status: u16,
        code: String,
        message: String,
        request_id: Option<String>,
        hint: Option<Hint>,
    },
    /// A local file operation failed.
    #[error("{call} {path}: {source}")]
    Io {
        call: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Waiting for an object to become ready (or gone) took longer than allowed.
    #[error("{call}: timed out after {}s waiting for {waiting_for}", after.as_secs())]
    Timeout {
        call: String,
        waiting_for: String,
        after: Duration,
    },
    /// A local input the spec names (a definition file, a manifest, a dataset
    /// directory) is unusable: found offline by `prepare`, at the spec field `field`
    /// (dotted), so the problem is reported at that value in the stack.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// The provider's `[providers.<name>]` configuration is unusable.
    #[error("provider configuration: {0}")]
    Config(String),
    /// The kind cannot do what was asked (e.g. import of a kind with no remote object).
    #[error("{0}")]
    Unsupported(String),
    /// The object reached a state it cannot leave on its own (a Job that exhausted its
    /// retries); the message says why, with what the workload last printed.
    #[error("{call} failed: {message}")]
    Failed { call: String, message: String },
    /// The object was made, but did not come out right (a Job that exhausted its
    /// retries, a pipeline run that failed): the engine records it as tainted, and the
    /// next plan replaces it rather than adopting it as it is. `error` says what went
    /// wrong.
    #[error("{error}")]
    Tainted {
        id: String,
        error: Box<ProviderError>,
    },
    /// Another writer owns fields this apply sets (a server-side apply conflict); the
    /// message names the other managers, the fields and the remedy.
    #[error("{call} failed: 409 Conflict: {message}")]
    Conflict { call: String, message: String },
}

/// `403 AccessDenied: message`; an error with no HTTP status (0: the SDK reports one
/// that came without a response, or inside a 200 such as DeleteObjects' per-key errors)
/// starts at its code.
fn fmt_answer(status: u16, code: &str, message: &str) -> String {
    let answer = format!("{status}{}{}", fmt_code(code), fmt_message(message));
    if status == 0 {
        answer
            .trim_start_matches('0')
            .trim_start_matches(' ')
            .trim_start_matches(": ")
            .to_string()
    } else {
        answer
    }
}

fn fmt_request_id(id: Option<&str>) -> String {
    id.map_or(String::new(), |id| format!(" (request id {id})"))
}

fn fmt_hint(hint: Option<&Hint>) -> String {
    hint.map_or(String::new(), |h| format!("; {h}"))
}

fn fmt_code(code: &str) -> String {
    if code.is_empty() {
        String::new()
    } else {
        format!(" {code}")
    }
}

fn fmt_message(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

impl ProviderError {
    /// A problem with the local input named by the spec field `field` (dotted).
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.to_string(),
            message: message.into(),
        }
    }

    /// `error`, after the object `id` was made: see [`ProviderError::Tainted`].
    pub fn tainted(id: impl Into<String>, error: ProviderError) -> Self {
        match error {
            ProviderError::Tainted { .. } => error,
            error => ProviderError::Tainted {
                id: id.into(),
                error: Box::new(error),
            },
        }
    }

    /// An API error with its HTTP status, the API's own code and message.
    pub fn api(
        call: impl Into<String>,
        status: u16,
        code: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::Api {
            call: call.into(),
            status,
            code: code.into(),
            message: message.into(),
            request_id: None,
            hint: None,
        }
    }

    /// The same error with `hint` saying what to do (an API error; any other is returned
    /// as it is).
    pub fn with_hint(mut self, new: Hint) -> Self {
        if let ProviderError::Api { hint, .. } = &mut self {
            *hint = Some(new);
        }
        self
    }

    /// The hint of an API error, if it has one.
    pub fn hint(&self) -> Option<&Hint> {
        match self {
            ProviderError::Api { hint, .. } => hint.as_ref(),
            ProviderError::Tainted { error, .. } => error.hint(),
            _ => None,
        }
    }

    /// A local I/O failure on `path` during `call`.
    pub fn io(call: &'static str, path: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            call,
            path: path.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_error_reads_like_the_style_guide() {
        let e = ProviderError::api(
            "file.instances.create",
            409,
            "ALREADY_EXISTS",
            "instance exists",
        );
        assert_eq!(
            e.to_string(),
            "file.instances.create failed: 409 ALREADY_EXISTS: instance exists"
        );
    }

    #[test]
    fn an_error_without_a_status_starts_at_its_code() {
        let e = ProviderError::api("s3:DeleteObjects", 0, "AccessDenied", "key a/b");
        assert_eq!(
            e.to_string(),
            "s3:DeleteObjects failed: AccessDenied: key a/b"
        );
        let bare = ProviderError::api("s3:DeleteObjects", 0, "", "connection reset");
        assert_eq!(
            bare.to_string(),
            "s3:DeleteObjects failed: connection reset"
        );
    }

    #[test]
    fn a_tainted_error_reads_as_what_went_wrong() {
        let inner = ProviderError::Failed {
            call: "kubernetes wait jobs.batch/x".into(),
            message: "BackoffLimitExceeded".into(),
        };
        let e = ProviderError::tainted("batch/v1/Job/default/x", inner);
        assert_eq!(
            e.to_string(),
            "kubernetes wait jobs.batch/x failed: BackoffLimitExceeded"
        );
        // Tainting twice keeps the first id.
        let again = ProviderError::tainted("other", e);
        assert!(
            matches!(again, ProviderError::Tainted { ref id, .. } if id == "batch/v1/Job/default/x")
        );
    }
}
