//! The network side of one emulated cluster's API server (the Kubernetes emulator in
//! `k8s/` is transport-neutral; this file serves it through the sandbox's pipeline): a loopback TLS listener with a
//! serving certificate signed by the cluster CA (HTTP/1.1 only, so WebSocket upgrades
//! work), and per request the sandbox's fault injection, bearer-token check, traffic
//! record, then `api.rs` under the state lock — or, for watches, followed logs, exec and
//! port-forward, the stream that follows once the lock is released.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts as _, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::{bearer_token_present, App, Call};
use crate::faults::Injected;
use crate::http::{parse_query, ApiResponse, Body as ApiBody};
use crate::k8s::api::{self, LogFollow, Outcome, Watch};
use crate::k8s::request::KubeRequest;
use crate::k8s::spdy;
use crate::k8s::status::StatusError;
use crate::k8s::stream::{self, Protocol};
use crate::k8s::volumes;
use crate::k8s::CloudSide;
use crate::persist::World;
use crate::Exchange;

/// Request bodies beyond this are refused. Room for the 32 MiB pipeline packages KFP's
/// upload takes through the service proxy (and its multipart framing), so KFP's own
/// size check is the one a client meets.
const MAX_BODY: usize = 40 * 1024 * 1024;

/// How often watches and followed logs look for news.
const POLL: Duration = Duration::from_millis(100);

/// The WebSocket subprotocols exec and port-forward speak, in order of preference.
const SUBPROTOCOLS: [&str; 3] = [
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "portforward.k8s.io",
];

/// The port-forward protocol SPDY carries, plainly upgraded or tunnelled.
const PORTFORWARD_PROTOCOL: &str = "portforward.k8s.io";

/// The WebSocket subprotocol of SPDY/3.1 port-forward tunnelled in binary messages
/// (KEP-4006), kubectl's default since 1.31.
const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";

/// A running API server listener; dropping it stops the listener and its connections.
#[derive(Debug)]
pub(crate) struct Listener {
    pub port: u16,
    task: Option<JoinHandle<()>>,
}

impl Listener {
    /// Stops the listener and waits until its port is released.
    pub(crate) async fn close(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            // The task was aborted: the JoinError says nothing new.
            let _ = task.await;
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// What every request of one listener shares.
struct Ctx {
    app: Weak<App>,
    key: String,
    name: String,
    cloud: Arc<dyn CloudSide>,
}

/// Binds `127.0.0.1:<port>` (any free port when 0 or when that one is taken) and serves
/// the cluster `key` there. Must run inside a tokio runtime.
pub(crate) fn start(
    app: Weak<App>,
    key: &str,
    name: &str,
    cloud: Arc<dyn CloudSide>,
    port: u16,
    ca_cert_pem: &str,
    ca_key_pem: &str,
) -> Result<Listener, String> {
    let config = tls_config(ca_cert_pem, ca_key_pem)?;
    let std_listener = std::net::TcpListener::bind(("127.0.0.1", port))
        .or_else(|_| std::net::TcpListener::bind(("127.0.0.1", 0)))
        .map_err(|e| format!("could not listen on 127.0.0.1 for cluster {name}: {e}"))?;
    std_listener
        .set_nonblocking(true)
        .map_err(|e| format!("could not configure the listener of cluster {name}: {e}"))?;
    let port = std_listener
        .local_addr()
        .map_err(|e| format!("could not read the address of cluster {name}'s listener: {e}"))?
        .port();
    let listener = tokio::net::TcpListener::from_std(std_listener)
        .map_err(|e| format!("could not register the listener of cluster {name}: {e}"))?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let router = Router::new().fallback(handle).with_state(Arc::new(Ctx {
        app,
        key: key.to_string(),
        name: name.to_string(),
        cloud,
    }));
    let task = tokio::spawn(async move {
        // Owned here, so stopping the listener also ends its connections (and watches).
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((tcp, _)) = accepted else {
                        // Out of descriptors or similar: back off instead of spinning.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let acceptor = acceptor.clone();
                    let router = router.clone();
                    connections.spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let service = hyper_util::service::TowerToHyperService::new(router);
                        // A client that goes away mid-request is no concern of the server.
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                            .with_upgrades()
                            .await;
                    });
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
    });
    Ok(Listener {
        port,
        task: Some(task),
    })
}

/// The serving configuration: a fresh certificate for 127.0.0.1, `localhost` and
/// `kubernetes.default`, issued by the cluster CA.
fn tls_config(ca_cert_pem: &str, ca_key_pem: &str) -> Result<rustls::ServerConfig, String> {
    let fail = |e: rcgen::Error| format!("could not issue the API server certificate: {e}");
    let ca_key = rcgen::KeyPair::from_pem(ca_key_pem).map_err(fail)?;
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params.distinguished_name = pem_to_der(ca_cert_pem)
        .as_deref()
        .and_then(subject_dn)
        .ok_or("the cluster CA certificate could not be read")?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().map_err(fail)?;
    let mut params = rcgen::CertificateParams::new(vec![
        "127.0.0.1".to_string(),
        "localhost".to_string(),
        "kubernetes.default".to_string(),
    ])
    .map_err(fail)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kube-apiserver");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    let cert = params.signed_by(&key, &issuer).map_err(fail)?;
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("could not configure TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key_der)
        .map_err(|e| format!("could not configure TLS: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn pem_to_der(pem: &str) -> Option<Vec<u8>> {
    let body: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN CERTIFICATE-----"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .map(str::trim)
        .collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

/// One DER element: `(tag, content, rest)`.
fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |l, b| (l << 8) | usize::from(*b));
        rest = &rest[n..];
        len
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The subject of a certificate, re-encodable byte for byte by rcgen, so certificates
/// issued with it chain to the CA (issuer and subject names are compared as bytes).
fn subject_dn(cert_der: &[u8]) -> Option<rcgen::DistinguishedName> {
    let (_, cert, _) = der_element(cert_der)?;
    let (_, tbs, _) = der_element(cert)?;
    let mut rest = tbs;
    let (tag, _, after_version) = der_element(rest)?;
    if tag == 0xa0 {
        rest = after_version;
    }
    // serial, signature algorithm, issuer, validity, then the subject.
    for _ in 0..4 {
        rest = der_element(rest)?.2;
    }
    let (_, mut rdns, _) = der_element(rest)?;
    let mut dn = rcgen::DistinguishedName::new();
    while !rdns.is_empty() {
        let (_, mut set, next) = der_element(rdns)?;
        rdns = next;
        while !set.is_empty() {
            let (_, atv, next) = der_element(set)?;
            set = next;
            let (_, oid, value) = der_element(atv)?;
            let (value_tag, value, _) = der_element(value)?;
            let text = String::from_utf8(value.to_vec()).ok()?;
            let ty = match oid {
                [0x55, 0x04, 0x03] => rcgen::DnType::CommonName,
                [0x55, 0x04, 0x06] => rcgen::DnType::CountryName,
                [0x55, 0x04, 0x07] => rcgen::DnType::LocalityName,
                [0x55, 0x04, 0x08] => rcgen::DnType::StateOrProvinceName,
                [0x55, 0x04, 0x0a] => rcgen::DnType::OrganizationName,
                [0x55, 0x04, 0x0b] => rcgen::DnType::OrganizationalUnitName,
                _ => return None,
            };
            let value = if value_tag == 0x13 {
                rcgen::DnValue::PrintableString(text.try_into().ok()?)
            } else {
                rcgen::DnValue::Utf8String(text)
            };
            dn.push(ty, value);
        }
    }
    Some(dn)
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn status_response(e: &StatusError) -> Response {
    to_http(e.response())
}

fn to_http(response: ApiResponse) -> Response {
    let status = StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let (content_type, data) = match response.body {
        ApiBody::Json(v) => ("application/json".to_string(), v.to_string().into_bytes()),
        ApiBody::Bytes { content_type, data } => (content_type, data),
        ApiBody::Empty => return status.into_response(),
    };
    let mut out = (status, data).into_response();
    if let Ok(v) = HeaderValue::from_str(&content_type) {
        out.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    if let Some(secs) = response.retry_after {
        out.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    out
}

async fn handle(State(ctx): State<Arc<Ctx>>, request: Request) -> Response {
    let Some(app) = ctx.app.upgrade() else {
        return status_response(&StatusError::unavailable("the sandbox is shutting down"));
    };
    let (mut parts, body) = request.into_parts();
    // A plain SPDY upgrade (kubectl's port-forward fallback) is hyper's to carry out.
    let spdy_upgrade = header_str(&parts.headers, header::UPGRADE).is_some_and(|u| {
        u.split(',')
            .any(|p| p.trim().eq_ignore_ascii_case(spdy::UPGRADE_PROTOCOL))
    });
    let on_spdy_upgrade = if spdy_upgrade {
        parts.extensions.remove::<hyper::upgrade::OnUpgrade>()
    } else {
        None
    };
    let bytes: Bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(e) => {
            return status_response(&StatusError::bad_request(format!(
                "could not read the request body: {e}"
            )))
        }
    };
    let mut req = KubeRequest {
        method: parts.method.clone(),
        path: parts.uri.path().to_string(),
        query: parse_query(parts.uri.query().unwrap_or("")),
        content_type: header_str(&parts.headers, header::CONTENT_TYPE),
        accept: header_str(&parts.headers, header::ACCEPT),
        user_agent: header_str(&parts.headers, header::USER_AGENT),
        body: bytes.to_vec(),
        port_streams: false,
    };
    let answer = |app: &App, mut exchange: Exchange, response: ApiResponse| {
        exchange.status = response.status;
        exchange.response = response.json_body().cloned();
        app.record(exchange);
        to_http(response)
    };
    let authorization = header_str(&parts.headers, header::AUTHORIZATION);
    let wants_upgrade = parts.headers.contains_key(header::UPGRADE);
    let upgrade = if wants_upgrade && !spdy_upgrade {
        WebSocketUpgrade::from_request_parts(&mut parts, &())
            .await
            .ok()
    } else {
        None
    };
    let tunnel = upgrade
        .as_ref()
        .is_some_and(|ws| ws.requested_protocols().any(|p| p == TUNNEL_PROTOCOL));
    let spdy_portforward = (spdy_upgrade || tunnel) && pod_of_portforward(&req.path).is_some();
    // SPDY names each stream's port in its headers, so the query has none.
    req.port_streams = spdy_portforward;
    let call = KubeCall {
        ctx: &ctx,
        req: &req,
        authorization: authorization.as_deref(),
    };
    let (outcome, injected) = app.pass(&call);
    let mut exchange = call.exchange(&outcome, injected);
    match outcome {
        Outcome::Done(response) => answer(&app, exchange, response),
        Outcome::Watch(watch, initial) => {
            exchange.status = 200;
            app.record(exchange);
            streaming(
                "application/json",
                watch_body(ctx.app.clone(), ctx.key.clone(), watch, initial),
            )
        }
        Outcome::FollowLog(follow) => {
            exchange.status = 200;
            app.record(exchange);
            streaming(
                "text/plain",
                follow_body(ctx.app.clone(), ctx.key.clone(), follow),
            )
        }
        Outcome::Exec(target) => match negotiate(upgrade) {
            Ok((ws, protocol)) => {
                exchange.status = 101;
                app.record(exchange);
                ws.on_upgrade(move |socket| stream::exec(socket, protocol, target))
            }
            Err(e) => answer(&app, exchange, e.response()),
        },
        Outcome::PortForward(_) if spdy_portforward => {
            let resolve = pod_port_resolver(ctx.app.clone(), ctx.key.clone(), &req.path);
            match (resolve, on_spdy_upgrade, upgrade) {
                (Some(resolve), Some(on_upgrade), _) => {
                    match spdy_handshake(&parts.headers) {
                        Ok(response) => {
                            exchange.status = 101;
                            app.record(exchange);
                            tokio::spawn(async move {
                                // The client may leave before the switch completes.
                                if let Ok(upgraded) = on_upgrade.await {
                                    let io = hyper_util::rt::TokioIo::new(upgraded);
                                    spdy::serve(io, resolve).await;
                                }
                            });
                            response
                        }
                        Err(e) => answer(&app, exchange, e.response()),
                    }
                }
                (Some(resolve), None, Some(ws)) => {
                    exchange.status = 101;
                    app.record(exchange);
                    ws.protocols([TUNNEL_PROTOCOL])
                        .on_upgrade(move |socket| spdy::serve_tunnel(socket, resolve))
                }
                _ => answer(
                    &app,
                    exchange,
                    StatusError::bad_request(
                        "unable to upgrade connection: the connection cannot be upgraded",
                    )
                    .response(),
                ),
            }
        }
        Outcome::PortForward(ports) => match negotiate(upgrade) {
            Ok((ws, protocol)) => {
                exchange.status = 101;
                app.record(exchange);
                ws.on_upgrade(move |socket| stream::portforward(socket, protocol, ports))
            }
            Err(e) => answer(&app, exchange, e.response()),
        },
    }
}

/// One request to a cluster's API server, through the sandbox's one pipeline. The
/// exchange is recorded by [`handle`] once it knows how a stream upgrade went.
struct KubeCall<'a> {
    ctx: &'a Ctx,
    req: &'a KubeRequest,
    authorization: Option<&'a str>,
}

impl Call for KubeCall<'_> {
    type Response = Outcome;

    fn injected(&self, injected: Injected) -> Outcome {
        Outcome::Done(StatusError::injected(injected.status, injected.retry_after).response())
    }

    fn authenticate(&self) -> Option<Outcome> {
        // Each cloud checks its own tokens (EKS: a presigned STS request).
        let token = self
            .authorization
            .filter(|a| bearer_token_present(Some(a)))
            .and_then(|h| h.split_once(' '))
            .map(|(_, t)| t.trim());
        match token {
            Some(token) if self.ctx.cloud.accepts_token(token) => None,
            _ => Some(Outcome::Done(StatusError::unauthorized().response())),
        }
    }

    fn run(&self, app: &App, world: &mut World, now: DateTime<Utc>) -> Outcome {
        app.on_cluster(world, &self.ctx.key, now, |cluster, settle| {
            api::handle(cluster, self.req, settle)
        })
        .unwrap_or_else(|| {
            Outcome::Done(
                StatusError::unavailable(format!("cluster {} is being deleted", self.ctx.name))
                    .response(),
            )
        })
    }

    fn unsaved(&self, message: String) -> Outcome {
        Outcome::Done(StatusError::internal(message).response())
    }

    fn may_lose_response(&self) -> bool {
        // Lost responses model a flaky cloud front end; the clusters' API servers are
        // reached directly.
        false
    }

    fn exchange(&self, response: &Outcome, injected: bool) -> Exchange {
        let (status, body) = match response {
            Outcome::Done(r) => (r.status, r.json_body().cloned()),
            Outcome::Watch(..) | Outcome::FollowLog(_) => (200, None),
            Outcome::Exec(_) | Outcome::PortForward(_) => (101, None),
        };
        Exchange {
            api: "kubernetes".into(),
            method: self.req.method.to_string(),
            path: format!("{}{}", self.ctx.name, self.req.path),
            query: self
                .req
                .query
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("&"),
            request: request_json(self.req),
            status,
            response: body,
            injected,
        }
    }
}

/// The request body for the traffic log: JSON as is, YAML (apply patches) as JSON.
fn request_json(req: &KubeRequest) -> Option<Value> {
    if req.body.is_empty() {
        return None;
    }
    serde_json::from_slice(&req.body)
        .ok()
        .or_else(|| serde_yaml_ng::from_slice(&req.body).ok())
}

/// `(namespace, pod)` of a pod's `portforward` subresource path.
fn pod_of_portforward(path: &str) -> Option<(String, String)> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api", "v1", "namespaces", ns, "pods", pod, "portforward"] => {
            Some(((*ns).to_string(), (*pod).to_string()))
        }
        _ => None,
    }
}

/// Finds what listens behind a port of the pod a SPDY port-forward names, per stream:
/// under the state lock, as `api::handle` does for ports in the query.
fn pod_port_resolver(app: Weak<App>, key: String, path: &str) -> Option<spdy::Resolver> {
    let (namespace, pod) = pod_of_portforward(path)?;
    Some(Arc::new(move |port| {
        let app = app.upgrade()?;
        app.with_cluster(&key, |cluster, settle| {
            volumes::port_target(cluster, settle.processes, &namespace, &pod, port)
        })
        .and_then(Result::ok)
        .flatten()
    }))
}

/// The answer to a SPDY/3.1 port-forward upgrade, as the kubelet's `httpstream.Handshake`
/// and SPDY upgrader give it: 101 with the negotiated `X-Stream-Protocol-Version`, or 403
/// when the client offers only protocols this server does not speak.
fn spdy_handshake(headers: &HeaderMap) -> Result<Response, StatusError> {
    let offered: Vec<&str> = headers
        .get_all(spdy::PROTOCOL_VERSION_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    if !offered.is_empty() && !offered.contains(&PORTFORWARD_PROTOCOL) {
        return Err(StatusError::forbidden(format!(
            "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports [{PORTFORWARD_PROTOCOL:?}]"
        )));
    }
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(
        header::UPGRADE,
        HeaderValue::from_static(spdy::UPGRADE_PROTOCOL),
    );
    // Old clients that offer no version get none back, as from the kubelet.
    if !offered.is_empty() {
        headers.insert(
            spdy::PROTOCOL_VERSION_HEADER,
            HeaderValue::from_static(PORTFORWARD_PROTOCOL),
        );
    }
    Ok(response)
}

/// Picks the subprotocol of an exec or port-forward upgrade; anything but a WebSocket
/// upgrade (SPDY) is refused.
fn negotiate(
    upgrade: Option<WebSocketUpgrade>,
) -> Result<(WebSocketUpgrade, Protocol), StatusError> {
    let Some(ws) = upgrade else {
        return Err(StatusError::bad_request(
            "unable to upgrade connection: only WebSocket streaming (v5.channel.k8s.io, v4.channel.k8s.io) is supported by this server",
        ));
    };
    let ws = ws.protocols(SUBPROTOCOLS);
    let protocol = match ws.selected_protocol().and_then(|p| p.to_str().ok()) {
        Some("v5.channel.k8s.io") => Protocol::V5,
        Some("v4.channel.k8s.io" | "portforward.k8s.io") => Protocol::V4,
        _ => {
            return Err(StatusError::bad_request(format!(
                "unable to upgrade connection: no supported WebSocket subprotocol requested (supported: {})",
                SUBPROTOCOLS.join(", ")
            )))
        }
    };
    Ok((ws, protocol))
}

fn streaming(content_type: &'static str, body: Body) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Newline-delimited watch events: the initial ones, then whatever the change log
/// shows on each poll, until the timeout, an ERROR event, or the cluster going away.
fn watch_body(app: Weak<App>, key: String, watch: Box<Watch>, initial: Vec<Value>) -> Body {
    let deadline = Instant::now() + watch.timeout;
    let state = (app, key, watch, VecDeque::from(initial), deadline);
    let events = futures::stream::unfold(
        state,
        |(app, key, mut watch, mut pending, deadline)| async move {
            loop {
                if let Some(event) = pending.pop_front() {
                    let mut line = event.to_string();
                    line.push('\n');
                    let chunk: Result<Bytes, Infallible> = Ok(Bytes::from(line));
                    return Some((chunk, (app, key, watch, pending, deadline)));
                }
                let now = Instant::now();
                if watch.finished || now >= deadline {
                    return None;
                }
                tokio::time::sleep(POLL.min(deadline - now)).await;
                let app = app.upgrade()?;
                match app.with_cluster(&key, |cluster, ctx| watch.poll(cluster, ctx.now)) {
                    Some(Ok(events)) => pending.extend(events),
                    _ => return None,
                }
            }
        },
    );
    Body::from_stream(events)
}

/// A followed pod log: the log so far, then new output, until the pod finishes.
fn follow_body(app: Weak<App>, key: String, follow: LogFollow) -> Body {
    let first = follow.initial.clone();
    let state = (app, key, follow, Some(first), false);
    let chunks = futures::stream::unfold(
        state,
        |(app, key, mut follow, mut pending, mut done)| async move {
            loop {
                if let Some(text) = pending.take().filter(|t| !t.is_empty()) {
                    let chunk: Result<Bytes, Infallible> = Ok(Bytes::from(text));
                    return Some((chunk, (app, key, follow, None, done)));
                }
                if done {
                    return None;
                }
                tokio::time::sleep(POLL).await;
                let app = app.upgrade()?;
                match app.with_cluster(&key, |cluster, ctx| {
                    api::follow_poll(cluster, &mut follow, ctx.now)
                }) {
                    Some(Ok((text, finished))) => {
                        pending = Some(text);
                        done = finished;
                    }
                    _ => return None,
                }
            }
        },
    );
    Body::from_stream(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca() -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "0123abcd-cluster");
        let cert = params.self_signed(&key).expect("self-signed");
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn the_ca_subject_is_read_back() {
        let (pem, _) = ca();
        let der = pem_to_der(&pem).expect("PEM decodes");
        let dn = subject_dn(&der).expect("subject parses");
        assert_eq!(
            dn.get(&rcgen::DnType::CommonName),
            Some(&rcgen::DnValue::Utf8String("0123abcd-cluster".into()))
        );
        assert!(
            subject_dn(&der[..20]).is_none(),
            "truncated input is refused"
        );
        assert!(pem_to_der("not a pem").is_some_and(|d| d.is_empty()));
    }

    #[tokio::test]
    async fn serving_certificates_chain_to_the_cluster_ca() {
        let (pem, key) = ca();
        let server = tls_config(&pem, &key).expect("TLS config");
        assert_eq!(server.alpn_protocols, vec![b"http/1.1".to_vec()]);
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls::pki_types::CertificateDer::from(
                pem_to_der(&pem).expect("der"),
            ))
            .expect("root");
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        for host in ["127.0.0.1", "localhost", "kubernetes.default"] {
            let (a, b) = tokio::io::duplex(64 * 1024);
            let name = rustls::pki_types::ServerName::try_from(host.to_string()).expect("name");
            let (server_side, client_side) =
                tokio::join!(acceptor.accept(a), connector.connect(name, b));
            assert!(client_side.is_ok(), "{host}: {:?}", client_side.err());
            assert!(server_side.is_ok(), "{host}");
        }
        let (other_pem, _) = ca();
        assert!(
            tls_config(&other_pem, &key).is_ok(),
            "a mismatched pair still builds; clients then refuse it"
        );
        assert!(tls_config("garbage", &key).is_err());
    }
}
