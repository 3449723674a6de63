//! The Kubernetes streaming protocols over WebSocket (`v5.channel.k8s.io`,
//! `v4.channel.k8s.io`): `exec` runs a command against the pod's volumes, `portforward`
//! connects to the process behind a pod port.

use std::net::SocketAddr;

use axum::extract::ws::WebSocket;

use super::Mount;

/// The negotiated subprotocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    V4,
    V5,
}

/// What an exec runs and sees.
#[derive(Debug, Clone)]
pub(crate) struct ExecTarget {
    pub command: Vec<String>,
    pub mounts: Vec<Mount>,
    /// The redis-server behind the pod, for `redis-cli`.
    pub redis: Option<SocketAddr>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// Serves one exec session until the command exits.
pub(crate) async fn exec(ws: WebSocket, protocol: Protocol, target: ExecTarget) {
    let _ = (ws, protocol, target);
}

/// Serves one port-forward session: `ports` pairs each requested pod port with the
/// address behind it (`None`: nothing listens there).
pub(crate) async fn portforward(ws: WebSocket, protocol: Protocol, ports: Vec<(u16, Option<SocketAddr>)>) {
    let _ = (ws, protocol, ports);
}
