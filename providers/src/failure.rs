//! The one place a failed call to a cloud API becomes terrain's error
//! ([`ProviderError::Api`]): every AWS call (the SDK clients' in [`crate::aws::sdk_error`],
//! the hand-signed ones in `aws/signed.rs`, the S3 state's) and every Google call (the
//! kinds' and the GCS state's, through `gcp/client.rs`) ends here.
//!
//! An error names the call, the HTTP status, the service's code and message, the request
//! id when the service gave one, and a [`Hint`] for the common causes: an endpoint that
//! cannot be reached, credentials that were refused, a permission that is missing, an API
//! that is not enabled, throttling that outlasted the retries, an answer that does not
//! follow the API. It never holds a Rust debug struct (SDK errors print theirs in their
//! `Debug` form and in some `Display` texts) nor a raw response body, which may quote the
//! request and the credentials in it.

use std::error::Error as StdError;
use std::fmt;

use crate::ProviderError;

/// Whose API was called: the hints differ (`aws sts get-caller-identity` or `gcloud auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cloud {
    Aws,
    Google,
}

/// Why nothing answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreachable {
    /// The host answered with a refused connection: nothing listens at that port.
    Refused,
    /// The host name does not resolve.
    Dns,
    /// No answer in time (connect or whole request).
    Timeout,
    /// The TLS handshake failed (certificate, protocol).
    Tls,
    /// The connection closed before an answer came.
    Reset,
    /// Another failure on the way.
    Other,
}

impl Unreachable {
    fn says(self) -> &'static str {
        match self {
            Unreachable::Refused => "connection refused",
            Unreachable::Dns => "the host name does not resolve",
            Unreachable::Timeout => "timed out",
            Unreachable::Tls => "the TLS handshake failed",
            Unreachable::Reset => "the connection closed before an answer came",
            Unreachable::Other => "the request could not be sent",
        }
    }
}

/// What to do about a failed call, for the causes users meet most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    /// Nothing answered at `endpoint`.
    Unreachable {
        cloud: Cloud,
        how: Unreachable,
        endpoint: Option<String>,
    },
    /// The service refused the credentials themselves (unknown key, bad signature,
    /// expired token).
    Credentials(Cloud),
    /// The credentials are good but their identity may not make the call.
    Permission { cloud: Cloud, call: String },
    /// The Google API is not enabled in the project.
    ApiDisabled { service: Option<String> },
    /// The service kept throttling after the retries (`attempts` when known).
    Throttled { attempts: Option<u32> },
    /// The answer did not follow the API (an S3-compatible store or a proxy).
    NonConforming { cloud: Cloud },
    /// An S3 bucket lives in another region than the one called.
    WrongRegion { region: String },
    /// What the caller, knowing more than the answer, says to do (`create the bucket
    /// with …`).
    Do(String),
}

impl fmt::Display for Hint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The endpoint is in the message already ("cannot reach …").
            Hint::Unreachable { cloud, how, .. } => {
                let setting = match cloud {
                    Cloud::Aws => "the provider's or backend's endpoint and region settings, AWS_ENDPOINT_URL",
                    Cloud::Google => "the provider's endpoint settings",
                };
                match how {
                    Unreachable::Dns => write!(f, "check the host name ({setting}) and this machine's DNS"),
                    Unreachable::Tls => f.write_str("check that the endpoint speaks TLS with a certificate this machine trusts (a proxy that re-signs traffic needs its CA in the system store)"),
                    _ => write!(f, "check that the endpoint is right ({setting}) and reachable from this machine (network, proxy, VPN); terrain retried before giving up"),
                }
            }
            Hint::Credentials(Cloud::Aws) => f.write_str("the credentials were refused: check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN or the profile (`aws sts get-caller-identity` shows whether they work; `aws sso login` renews SSO sessions)"),
            Hint::Credentials(Cloud::Google) => f.write_str("the credentials were refused: run `gcloud auth application-default login`, or point GOOGLE_APPLICATION_CREDENTIALS at a valid key file"),
            Hint::Permission { cloud: Cloud::Aws, call } => write!(f, "the identity behind the credentials may not call {call} here: grant it in an IAM policy (`aws sts get-caller-identity` shows which identity that is)"),
            Hint::Permission { cloud: Cloud::Google, call } => write!(f, "the account behind the credentials lacks the permission for {call}: grant it a role that includes it (`gcloud auth list` shows which account that is)"),
            Hint::ApiDisabled { service: Some(s) } => write!(f, "enable the API: `gcloud services enable {s}`, or a gcp_project_service in the stack"),
            Hint::ApiDisabled { service: None } => f.write_str("enable the API in the project (`gcloud services enable …`)"),
            Hint::Throttled { attempts: Some(n) } => write!(f, "the service kept throttling after {n} attempts: lower --parallelism, or retry later"),
            Hint::Throttled { attempts: None } => f.write_str("the service kept throttling after terrain's retries: lower --parallelism, or retry later"),
            Hint::NonConforming { cloud: Cloud::Aws } => f.write_str("the endpoint answered in a form the AWS API does not use: a proxy in the way, or a compatible store (S3-compatible ones) that does not implement this call as AWS does"),
            Hint::NonConforming { cloud: Cloud::Google } => f.write_str("the endpoint answered in a form the Google API does not use: a proxy in the way, or the wrong endpoint"),
            Hint::WrongRegion { region } => write!(f, "the bucket is in {region}: set region = \"{region}\""),
            Hint::Do(what) => f.write_str(what),
        }
    }
}

/// A failure to get any answer: what went wrong on the way to `endpoint`, classified,
/// with the hint for it.
pub fn unreachable(
    call: impl Into<String>,
    cloud: Cloud,
    endpoint: Option<&str>,
    err: &(dyn StdError + 'static),
) -> ProviderError {
    let how = classify(err);
    let endpoint = endpoint.map(without_query);
    let cause = deepest(err);
    let message = match &endpoint {
        Some(e) => format!("cannot reach {e}: {}", said(how, &cause)),
        None => format!("cannot reach the service: {}", said(how, &cause)),
    };
    ProviderError::Api {
        call: call.into(),
        status: 0,
        code: String::new(),
        message,
        request_id: None,
        hint: Some(Hint::Unreachable {
            cloud,
            how,
            endpoint,
        }),
    }
}

/// `connection refused (tcp connect error: Connection refused (os error 111))`: the class
/// in words, then the lowest cause the libraries gave when it adds something.
fn said(how: Unreachable, cause: &str) -> String {
    let lower = cause.to_ascii_lowercase();
    if cause.is_empty() {
        how.says().to_string()
    } else if lower.starts_with(how.says()) {
        lower
    } else {
        format!("{} ({cause})", how.says())
    }
}

/// An answer the service gave: its status, code and message, the request id, and the
/// hint its status and code call for. `attempts` is how many times the call was tried
/// (a throttling answer after retries says so).
pub fn answered(
    call: impl Into<String>,
    cloud: Cloud,
    status: u16,
    code: impl Into<String>,
    message: &str,
    request_id: Option<String>,
    attempts: Option<u32>,
) -> ProviderError {
    let call = call.into();
    let code = code.into();
    let message = clean(message);
    let hint = hint_for(cloud, &call, status, &code, &message, attempts);
    ProviderError::Api {
        call,
        status,
        code,
        message,
        request_id: request_id.filter(|r| !r.is_empty()),
        hint,
    }
}

/// An answer that could not be read as the call's response (a body that is not the
/// API's format): `what` says what the reader found wrong, cleaned of debug structs.
pub fn malformed(
    call: impl Into<String>,
    cloud: Cloud,
    status: u16,
    what: &str,
    request_id: Option<String>,
) -> ProviderError {
    let call = call.into();
    let what = clean(what);
    let message = if what.is_empty() {
        "the answer could not be read".to_string()
    } else {
        format!("the answer could not be read: {what}")
    };
    ProviderError::Api {
        call,
        status,
        code: String::new(),
        message,
        request_id,
        hint: Some(Hint::NonConforming { cloud }),
    }
}

/// What an error answer that is not in the API's error format is, without quoting it
/// (the body of a proxy's or a store's error page may echo the request).
pub fn unreadable(body: &str) -> String {
    let trimmed = body.trim_start();
    let what = if trimmed.is_empty() {
        return "an error answer with an empty body".to_string();
    } else if trimmed.starts_with("<!DOCTYPE")
        || trimmed.starts_with("<html")
        || trimmed.starts_with("<HTML")
    {
        "an HTML page"
    } else if trimmed.starts_with('<') {
        "an XML document"
    } else if trimmed.starts_with('{') || trimmed.starts_with('[') {
        "a JSON document"
    } else {
        "text"
    };
    format!(
        "an error answer not in the API's error format ({what}, {} bytes)",
        body.len()
    )
}

/// The hint for an answer, by its status and code.
fn hint_for(
    cloud: Cloud,
    call: &str,
    status: u16,
    code: &str,
    message: &str,
    attempts: Option<u32>,
) -> Option<Hint> {
    const AWS_CREDENTIALS: &[&str] = &[
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "SignatureDoesNotMatch",
        "InvalidAccessKeyId",
        "ExpiredToken",
        "ExpiredTokenException",
        "AuthFailure",
        "InvalidToken",
        "IncompleteSignature",
        "MissingAuthenticationToken",
    ];
    const AWS_PERMISSION: &[&str] = &[
        "AccessDenied",
        "AccessDeniedException",
        "UnauthorizedOperation",
        "Forbidden",
    ];
    const THROTTLED: &[&str] = &[
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestThrottled",
        "SlowDown",
        "RESOURCE_EXHAUSTED",
        "rateLimitExceeded",
        "userRateLimitExceeded",
    ];
    if THROTTLED.contains(&code) || status == 429 {
        return Some(Hint::Throttled { attempts });
    }
    match cloud {
        Cloud::Aws => {
            if AWS_CREDENTIALS.contains(&code) || (status == 401) {
                Some(Hint::Credentials(cloud))
            } else if AWS_PERMISSION.contains(&code) || status == 403 {
                Some(Hint::Permission {
                    cloud,
                    call: call.to_string(),
                })
            } else {
                None
            }
        }
        Cloud::Google => {
            let disabled = code == "SERVICE_DISABLED"
                || code == "accessNotConfigured"
                || message.contains("has not been used in project")
                || message.contains("it is disabled");
            if status == 403 && disabled {
                Some(Hint::ApiDisabled {
                    service: service_named(message),
                })
            } else if status == 401 || code == "UNAUTHENTICATED" {
                Some(Hint::Credentials(cloud))
            } else if status == 403 || code == "PERMISSION_DENIED" {
                Some(Hint::Permission {
                    cloud,
                    call: call.to_string(),
                })
            } else {
                None
            }
        }
    }
}

/// `container.googleapis.com` from Google's "Kubernetes Engine API has not been used in
/// project … before or it is disabled. Enable it by visiting …/apis/api/container.googleapis.com/overview…".
fn service_named(message: &str) -> Option<String> {
    let at = message.find("/apis/api/")? + "/apis/api/".len();
    let rest = &message[at..];
    let end = rest.find(['/', '?', ' ']).unwrap_or(rest.len());
    let name = &rest[..end];
    name.ends_with(".googleapis.com").then(|| name.to_string())
}

/// How `err` failed to reach the service, from the kinds of its causes.
pub fn classify(err: &(dyn StdError + 'static)) -> Unreachable {
    let mut text = String::new();
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            match io.kind() {
                K::ConnectionRefused => return Unreachable::Refused,
                K::TimedOut => return Unreachable::Timeout,
                K::ConnectionReset | K::ConnectionAborted | K::UnexpectedEof | K::BrokenPipe => {
                    return Unreachable::Reset
                }
                _ => {}
            }
        }
        if let Some(r) = e.downcast_ref::<reqwest::Error>() {
            if r.is_timeout() {
                return Unreachable::Timeout;
            }
        }
        text.push_str(&e.to_string().to_ascii_lowercase());
        text.push('\n');
        current = e.source();
    }
    if text.contains("dns error")
        || text.contains("failed to lookup address")
        || text.contains("name or service not known")
        || text.contains("no such host")
        || text.contains("name resolution")
    {
        Unreachable::Dns
    } else if text.contains("connection refused") {
        Unreachable::Refused
    } else if text.contains("timed out") || text.contains("timeout") {
        Unreachable::Timeout
    } else if text.contains("certificate") || text.contains("tls") || text.contains("ssl") {
        Unreachable::Tls
    } else if text.contains("connection reset")
        || text.contains("connection closed")
        || text.contains("incomplete message")
    {
        Unreachable::Reset
    } else {
        Unreachable::Other
    }
}

/// The lowest cause in `err`'s chain that reads as a sentence (cleaned): the one that
/// says what happened (`Connection refused (os error 111)`), where the upper ones say
/// where (`dispatch failure`, `io error`, `client error (Connect)`).
fn deepest(err: &(dyn StdError + 'static)) -> String {
    let mut last = String::new();
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        let text = clean(&e.to_string());
        if !text.is_empty() {
            last = text;
        }
        current = e.source();
    }
    last
}

/// The causes of `err`, top to bottom, cleaned and without repeats: for errors that
/// are not calls (credential chains, configuration), where every level may say
/// something.
pub fn chain(err: &(dyn StdError + 'static)) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        let text = clean(&e.to_string());
        if !text.is_empty() && !out.iter().any(|o| o.contains(&text)) {
            out.push(text);
        }
        current = e.source();
    }
    out.join(": ")
}

/// `url` without its query string (a presigned URL's signature lives there).
fn without_query(url: &str) -> String {
    url.split(['?', '#']).next().unwrap_or(url).to_string()
}

/// `text` on one line, cut where a Rust debug struct starts (`StartEl { … }`,
/// `DispatchFailure(…)`), with access key ids and bearer tokens masked, and at most 300
/// characters.
pub fn clean(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut = match debug_struct_at(&one_line) {
        Some(at) => {
            let kept = one_line[..at].trim_end_matches([' ', '(', ':', ',']);
            if kept.is_empty() {
                String::new()
            } else {
                format!("{kept} …")
            }
        }
        None => one_line,
    };
    let masked = mask_secrets(&cut);
    match masked.char_indices().nth(300) {
        Some((at, _)) => format!("{}…", &masked[..at]),
        None => masked,
    }
}

/// Where the first `Name { ` or `Name(Name(`/`Name(Name {`/`Name("` of a Rust debug
/// rendering starts.
fn debug_struct_at(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let ident_end = |from: usize| (from..b.len()).find(|&j| !ident(b[j])).unwrap_or(b.len());
    let mut i = 0;
    while i < b.len() {
        let boundary = i == 0 || !ident(b[i - 1]);
        if !(boundary && b[i].is_ascii_uppercase()) {
            i += 1;
            continue;
        }
        let j = ident_end(i);
        let rest = &text[j..];
        if rest.starts_with(" { ") || rest.starts_with(" {}") {
            return Some(i);
        }
        if rest.starts_with('(') {
            match b.get(j + 1) {
                Some(b'"') => return Some(i),
                Some(c) if c.is_ascii_uppercase() => {
                    let after = &text[ident_end(j + 1)..];
                    if after.starts_with('(') || after.starts_with(" {") {
                        return Some(i);
                    }
                }
                _ => {}
            }
        }
        i = j;
    }
    None
}

/// Access key ids (`AKIA…`, `ASIA…`) and Google access tokens (`ya29.…`) replaced by
/// what they are.
fn mask_secrets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (n, word) in text.split(' ').enumerate() {
        if n > 0 {
            out.push(' ');
        }
        let trimmed = word.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '.');
        let key_id = (trimmed.starts_with("AKIA") || trimmed.starts_with("ASIA"))
            && trimmed.len() >= 16
            && trimmed
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
        if key_id {
            out.push_str(&word.replace(trimmed, "(an access key id)"));
        } else if trimmed.starts_with("ya29.") {
            out.push_str(&word.replace(trimmed, "(an access token)"));
        } else {
            out.push_str(word);
        }
    }
    out
}

/// A response header that carries the request id, by the names AWS services use.
pub const AWS_REQUEST_ID_HEADERS: &[&str] =
    &["x-amzn-requestid", "x-amz-request-id", "x-amzn-request-id"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_structs_are_cut() {
        let sdk = "error parsing XML: encountered invalid XML root: expected VersioningConfiguration but got StartEl { name: Name { prefix: \"\", local: \"GetBucketVersioningResponse\" }, attributes: [] }. This is likely a bug in the SDK.";
        assert_eq!(
            clean(sdk),
            "error parsing XML: encountered invalid XML root: expected VersioningConfiguration but got …"
        );
        let dispatch = "dispatch failure (DispatchFailure(DispatchFailure { source: ConnectorError { kind: Io } }))";
        assert_eq!(clean(dispatch), "dispatch failure …");
        // Sentences with capitals and parentheses are kept.
        for ok in [
            "Connection refused (os error 111)",
            "client error (Connect)",
            "The specified bucket does not exist",
            "Not found: projects/p/locations/l/clusters/c.",
        ] {
            assert_eq!(clean(ok), ok);
        }
    }

    #[test]
    fn secrets_are_masked() {
        let m = clean(
            "The AWS Access Key Id AKIAIOSFODNN7EXAMPLE you provided; token ya29.a0AfH6SM-abc.",
        );
        assert!(!m.contains("AKIAIOSFODNN7EXAMPLE"), "{m}");
        assert!(!m.contains("ya29.a0AfH6SM"), "{m}");
        assert!(m.contains("(an access key id)"), "{m}");
    }

    #[test]
    fn hints_follow_status_and_code() {
        let h = |cloud, status, code: &str, message: &str| {
            hint_for(cloud, "x:Y", status, code, message, Some(3))
        };
        assert_eq!(
            h(Cloud::Aws, 403, "InvalidClientTokenId", ""),
            Some(Hint::Credentials(Cloud::Aws))
        );
        assert!(matches!(
            h(Cloud::Aws, 403, "AccessDenied", ""),
            Some(Hint::Permission { .. })
        ));
        assert_eq!(
            h(Cloud::Aws, 400, "ThrottlingException", ""),
            Some(Hint::Throttled { attempts: Some(3) })
        );
        assert_eq!(h(Cloud::Aws, 404, "NoSuchBucket", ""), None);
        assert_eq!(
            h(
                Cloud::Google,
                403,
                "PERMISSION_DENIED",
                "Kubernetes Engine API has not been used in project 12 before or it is disabled. Enable it by visiting https://console.developers.google.com/apis/api/container.googleapis.com/overview?project=12 then retry."
            ),
            Some(Hint::ApiDisabled { service: Some("container.googleapis.com".into()) })
        );
        assert!(matches!(
            h(Cloud::Google, 403, "PERMISSION_DENIED", "denied"),
            Some(Hint::Permission { .. })
        ));
        assert_eq!(
            h(Cloud::Google, 401, "UNAUTHENTICATED", ""),
            Some(Hint::Credentials(Cloud::Google))
        );
    }

    #[test]
    fn an_unreachable_endpoint_is_classified_from_the_io_error() {
        #[derive(Debug)]
        struct Wrap(std::io::Error);
        impl fmt::Display for Wrap {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("client error (Connect)")
            }
        }
        impl StdError for Wrap {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let e = Wrap(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let err = unreachable(
            "s3.GetObject",
            Cloud::Aws,
            Some("http://127.0.0.1:9/?X-Amz-Signature=abc"),
            &e,
        );
        let text = err.to_string();
        assert!(
            text.starts_with(
                "s3.GetObject failed: cannot reach http://127.0.0.1:9/: connection refused;"
            ),
            "{text}"
        );
        assert!(!text.contains("Signature"), "{text}");
        assert!(
            text.contains("; check that the endpoint is right"),
            "{text}"
        );
    }
}
