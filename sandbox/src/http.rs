//! Transport-neutral request and response values the emulators work on, plus the small
//! URL helpers (percent coding, query strings) they need; the axum wiring in `server/`
//! converts to and from these so every emulator can be unit-tested without a socket.

use axum::http::Method;
use serde_json::Value;

/// One API request as an emulator sees it: the path is relative to the API root and still
/// percent-encoded, because object names may contain an encoded `/`.
#[derive(Debug, Clone)]
pub(crate) struct ApiRequest {
    pub method: Method,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

impl ApiRequest {
    /// A request with an optional JSON body, for unit tests and internal callers.
    #[cfg(test)]
    pub(crate) fn new(method: Method, path_and_query: &str, body: Option<Value>) -> Self {
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        ApiRequest {
            method,
            path: path.to_string(),
            query: parse_query(query),
            content_type: body.as_ref().map(|_| "application/json".to_string()),
            body: body.map(|b| b.to_string().into_bytes()).unwrap_or_default(),
        }
    }

    /// The first value of a query parameter.
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Decoded path segments; a trailing slash yields no empty segment.
    pub(crate) fn segments(&self) -> Vec<String> {
        self.path
            .trim_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
            .map(percent_decode)
            .collect()
    }

    /// Whether the request can change state; only these are subject to `fail_after_effect`.
    pub(crate) fn is_mutating(&self) -> bool {
        !matches!(self.method, Method::GET | Method::HEAD | Method::OPTIONS)
    }

    /// The body parsed as JSON, or `None` when it is empty or not JSON (media uploads).
    pub(crate) fn json(&self) -> Option<Value> {
        if self.body.is_empty() {
            return None;
        }
        serde_json::from_slice(&self.body).ok()
    }
}

/// What an emulator answers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Body {
    Json(Value),
    Empty,
    Bytes { content_type: String, data: Vec<u8> },
}

/// An emulator's answer before it is turned into an HTTP response.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiResponse {
    pub status: u16,
    pub body: Body,
    pub retry_after: Option<u32>,
}

impl ApiResponse {
    pub(crate) fn ok(value: Value) -> Self {
        ApiResponse {
            status: 200,
            body: Body::Json(value),
            retry_after: None,
        }
    }

    pub(crate) fn json(status: u16, value: Value) -> Self {
        ApiResponse {
            status,
            body: Body::Json(value),
            retry_after: None,
        }
    }

    pub(crate) fn no_content() -> Self {
        ApiResponse {
            status: 204,
            body: Body::Empty,
            retry_after: None,
        }
    }

    /// The JSON body, if there is one (what the traffic log records).
    pub(crate) fn json_body(&self) -> Option<&Value> {
        match &self.body {
            Body::Json(v) => Some(v),
            _ => None,
        }
    }
}

/// Decodes `%XX` escapes; invalid escapes are kept literally and invalid UTF-8 is replaced,
/// which is enough for resource names.
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Encodes everything but RFC 3986 unreserved characters, as Google's selfLinks do for
/// object names.
pub(crate) fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Parses `a=1&b=x%20y`; `+` means space as in HTML forms, which Google's clients rely on.
pub(crate) fn parse_query(raw: &str) -> Vec<(String, String)> {
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (
                percent_decode(&k.replace('+', " ")),
                percent_decode(&v.replace('+', " ")),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_and_encodes_object_names() {
        assert_eq!(percent_decode("a%2Fb%20c"), "a/b c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_encode("a/b c"), "a%2Fb%20c");
        assert_eq!(percent_decode(&percent_encode("dir/ü.txt")), "dir/ü.txt");
    }

    #[test]
    fn parses_queries() {
        let q = parse_query("name=a%2Fb&uploadType=media&x=&flag&s=a+b");
        assert_eq!(
            q,
            vec![
                ("name".to_string(), "a/b".to_string()),
                ("uploadType".to_string(), "media".to_string()),
                ("x".to_string(), String::new()),
                ("flag".to_string(), String::new()),
                ("s".to_string(), "a b".to_string()),
            ]
        );
    }

    #[test]
    fn splits_segments_after_decoding_each() {
        let r = ApiRequest::new(Method::GET, "storage/v1/b/x/o/a%2Fb?alt=json", None);
        assert_eq!(r.segments(), vec!["storage", "v1", "b", "x", "o", "a/b"]);
        assert_eq!(r.param("alt"), Some("json"));
    }
}
