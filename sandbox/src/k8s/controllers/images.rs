//! What a container's image is to the kubelet and the workers: its reference as the
//! container runtime reports it, and whether it is Redis (which a real redis-server then
//! backs). Below both, so neither imports the other for it.

use serde_json::Value;

use crate::k8s::obj;

/// Whether an image is Redis (`redis`, `redis:7.2`, `docker.io/library/redis:6.0.5`,
/// `bitnami/redis`), which a real redis-server then backs.
pub(crate) fn is_redis_image(image: &str) -> bool {
    let repo = image.split('@').next().unwrap_or(image);
    let last = repo.rsplit('/').next().unwrap_or(repo);
    let name = last.split(':').next().unwrap_or(last);
    name.contains("redis") && !name.contains("exporter")
}

pub(crate) fn is_redis_pod(pod: &Value) -> bool {
    redis_container(pod).is_some()
}

pub(crate) fn redis_container(pod: &Value) -> Option<&Value> {
    obj::items(&pod["spec"]["containers"])
        .iter()
        .find(|c| c["image"].as_str().is_some_and(is_redis_image))
}

/// The image reference as the container runtime reports it.
pub(crate) fn normalize_image(image: &str) -> String {
    let (repo, tag) = match image.split_once('@') {
        Some((r, d)) => (r.to_string(), format!("@{d}")),
        None => match image.rsplit_once(':') {
            Some((r, t)) if !t.contains('/') => (r.to_string(), format!(":{t}")),
            _ => (image.to_string(), ":latest".to_string()),
        },
    };
    let first = repo.split('/').next().unwrap_or_default();
    let repo = if !repo.contains('/') {
        format!("docker.io/library/{repo}")
    } else if first.contains('.') || first.contains(':') || first == "localhost" {
        repo
    } else {
        format!("docker.io/{repo}")
    };
    format!("{repo}{tag}")
}
