//! Where pods' volumes live on the host (NFS shares behind PersistentVolumes, emptyDirs),
//! and what exec and port-forward reach for a pod.
//!
//! Layout under the sandbox's data directory: an NFS share is `nfs/<server>/<path>` (the
//! same directory for every pod and cluster that mounts it, as a Filestore share is),
//! a hostPath is `hostpath/<cluster>/<path>`, a volume of another kind behind a
//! PersistentVolume is `volumes/<cluster>/<pv>`, and a pod's own volumes (emptyDir,
//! configMap, secret) are `pods/<pod uid>/<volume>`.

use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};

use base64::Engine as _;
use serde_json::Value;

use super::controllers::{is_redis_pod, redis_container};
use super::obj;
use super::processes::Processes;
use super::store::ObjKey;
use super::{ClusterState, Mount};

/// `base` joined with the relative parts of `path`: a path from a manifest can never
/// reach outside `base` (no `..`, no root).
fn confined(base: &Path, path: &str) -> PathBuf {
    let mut out = base.to_path_buf();
    for c in Path::new(path).components() {
        if let Component::Normal(part) = c {
            out.push(part);
        }
    }
    out
}

fn nfs_dir(data_dir: &Path, source: &Value) -> PathBuf {
    let server = source["server"].as_str().unwrap_or_default();
    confined(
        &confined(&data_dir.join("nfs"), server),
        source["path"].as_str().unwrap_or_default(),
    )
}

fn host_path_dir(cluster: &ClusterState, data_dir: &Path, path: &str) -> PathBuf {
    confined(&confined(&data_dir.join("hostpath"), &cluster.name), path)
}

/// The directory behind a PersistentVolume.
fn volume_dir(cluster: &ClusterState, data_dir: &Path, pv: &Value) -> PathBuf {
    let spec = &pv["spec"];
    if !spec["nfs"].is_null() {
        nfs_dir(data_dir, &spec["nfs"])
    } else if let Some(path) = spec["hostPath"]["path"]
        .as_str()
        .or_else(|| spec["local"]["path"].as_str())
    {
        host_path_dir(cluster, data_dir, path)
    } else {
        confined(
            &confined(&data_dir.join("volumes"), &cluster.name),
            obj::name(pv),
        )
    }
}

fn create(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("could not create volume directory {}: {e}", dir.display()))
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        create(parent)?;
    }
    std::fs::write(path, bytes).map_err(|e| format!("could not write {}: {e}", path.display()))
}

/// Writes a ConfigMap's or Secret's keys as files (all keys, or the listed `items`).
fn materialize(dir: &Path, files: Vec<(String, Vec<u8>)>, items: &Value) -> Result<(), String> {
    create(dir)?;
    let listed: Vec<(&str, &str)> = obj::items(items)
        .iter()
        .filter_map(|i| Some((i["key"].as_str()?, i["path"].as_str()?)))
        .collect();
    for (key, bytes) in files {
        let target = if listed.is_empty() {
            Some(key.as_str())
        } else {
            listed.iter().find(|(k, _)| *k == key).map(|(_, p)| *p)
        };
        if let Some(target) = target {
            write(&confined(dir, target), &bytes)?;
        }
    }
    Ok(())
}

/// The keys of a ConfigMap or Secret and their contents.
fn source_files(
    cluster: &ClusterState,
    namespace: &str,
    resource: &str,
    name: &str,
    optional: bool,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    let Some(object) = cluster
        .store
        .get(&ObjKey::new("", resource, namespace, name))
    else {
        if optional {
            return Ok(Vec::new());
        }
        let kind = if resource == "configmaps" {
            "configmap"
        } else {
            "secret"
        };
        return Err(format!("{kind} \"{name}\" not found"));
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut files = Vec::new();
    let decoded = resource == "secrets";
    if let Some(data) = object["data"].as_object() {
        for (k, v) in data {
            let text = v.as_str().unwrap_or_default();
            let bytes = if decoded {
                b64.decode(text)
                    .unwrap_or_else(|_| text.as_bytes().to_vec())
            } else {
                text.as_bytes().to_vec()
            };
            files.push((k.clone(), bytes));
        }
    }
    for field in ["binaryData", "stringData"] {
        if let Some(data) = object[field].as_object() {
            for (k, v) in data {
                let text = v.as_str().unwrap_or_default();
                let bytes = if field == "binaryData" {
                    b64.decode(text).unwrap_or_default()
                } else {
                    text.as_bytes().to_vec()
                };
                files.push((k.clone(), bytes));
            }
        }
    }
    Ok(files)
}

/// The host directory of one of the pod's volumes, and whether the volume itself is read-only.
fn pod_volume(
    cluster: &ClusterState,
    data_dir: &Path,
    pod: &Value,
    volume: &Value,
) -> Result<(PathBuf, bool), String> {
    let namespace = obj::str_at(pod, &["metadata", "namespace"]).unwrap_or_default();
    let own = confined(
        &confined(&data_dir.join("pods"), obj::uid(pod)),
        volume["name"].as_str().unwrap_or_default(),
    );
    if let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str() {
        let pvc = cluster
            .store
            .get(&ObjKey::new("", "persistentvolumeclaims", namespace, claim))
            .ok_or_else(|| format!("persistentvolumeclaim \"{claim}\" not found"))?;
        let pv_name = pvc["spec"]["volumeName"]
            .as_str()
            .filter(|_| pvc["status"]["phase"] == "Bound")
            .ok_or_else(|| format!("persistentvolumeclaim \"{claim}\" is not bound"))?;
        let pv = cluster
            .store
            .get(&ObjKey::new("", "persistentvolumes", "", pv_name))
            .ok_or_else(|| format!("persistentvolume \"{pv_name}\" not found"))?;
        return Ok((
            volume_dir(cluster, data_dir, pv),
            volume["persistentVolumeClaim"]["readOnly"] == true,
        ));
    }
    if !volume["nfs"].is_null() {
        return Ok((
            nfs_dir(data_dir, &volume["nfs"]),
            volume["nfs"]["readOnly"] == true,
        ));
    }
    if let Some(path) = volume["hostPath"]["path"].as_str() {
        return Ok((host_path_dir(cluster, data_dir, path), false));
    }
    for (field, resource, name_field) in [
        ("configMap", "configmaps", "name"),
        ("secret", "secrets", "secretName"),
    ] {
        let source = &volume[field];
        if source.is_null() {
            continue;
        }
        let name = source[name_field].as_str().unwrap_or_default();
        let files = source_files(
            cluster,
            namespace,
            resource,
            name,
            source["optional"] == true,
        )?;
        materialize(&own, files, &source["items"])?;
        return Ok((own, true));
    }
    Ok((own, false))
}

/// The pod and its container, or why exec cannot reach them.
fn running_container<'a>(
    cluster: &'a ClusterState,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
) -> Result<(&'a Value, &'a Value), String> {
    let object = cluster
        .store
        .get(&ObjKey::new("", "pods", namespace, pod))
        .ok_or_else(|| format!("pods \"{pod}\" not found"))?;
    let containers = obj::items(&object["spec"]["containers"]);
    let spec = match container {
        Some(name) => containers.iter().find(|c| c["name"] == name),
        None => containers.first(),
    }
    .ok_or_else(|| {
        format!(
            "container {} is not valid for pod {pod}",
            container.unwrap_or_default()
        )
    })?;
    let phase = object["status"]["phase"].as_str().unwrap_or("Pending");
    if matches!(phase, "Succeeded" | "Failed") {
        return Err(format!(
            "cannot exec into a container in a completed pod; current phase is {phase}"
        ));
    }
    if phase != "Running" {
        return Err(format!("pod {pod} is not running"));
    }
    Ok((object, spec))
}

/// The mounts of a pod's container (`None`: the first container), or why there are none
/// (no such pod, not running, no such container).
pub(crate) fn mounts(
    cluster: &ClusterState,
    data_dir: &Path,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
) -> Result<Vec<Mount>, String> {
    let (object, spec) = running_container(cluster, namespace, pod, container)?;
    container_mounts(cluster, data_dir, object, spec)
}

/// The mounts of container `spec` of pod `object`, the pod as given (a kubelet pass
/// holds a newer copy than the store's).
pub(crate) fn container_mounts(
    cluster: &ClusterState,
    data_dir: &Path,
    object: &Value,
    spec: &Value,
) -> Result<Vec<Mount>, String> {
    let pod = obj::name(object);
    let volumes = obj::items(&object["spec"]["volumes"]);
    let mut mounts = Vec::new();
    for m in obj::items(&spec["volumeMounts"]) {
        let name = m["name"].as_str().unwrap_or_default();
        let volume = volumes
            .iter()
            .find(|v| v["name"] == name)
            .ok_or_else(|| format!("volume \"{name}\" is not defined in pod {pod}"))?;
        let (mut host, read_only_source) = pod_volume(cluster, data_dir, object, volume)?;
        if let Some(sub) = m["subPath"].as_str().filter(|s| !s.is_empty()) {
            if Path::new(sub)
                .components()
                .any(|c| matches!(c, Component::ParentDir | Component::RootDir))
            {
                return Err(format!(
                    "subPath {sub:?} must be a relative path without '..'"
                ));
            }
            host = confined(&host, sub);
        }
        create(&host)?;
        mounts.push(Mount {
            path: m["mountPath"].as_str().unwrap_or_default().to_string(),
            host,
            read_only: read_only_source || m["readOnly"] == true,
        });
    }
    Ok(mounts)
}

/// A running Redis pod.
fn redis_pod<'a>(cluster: &'a ClusterState, namespace: &str, pod: &str) -> Option<&'a Value> {
    cluster
        .store
        .get(&ObjKey::new("", "pods", namespace, pod))
        .filter(|p| p["status"]["phase"] == "Running" && is_redis_pod(p))
}

/// The address behind a pod's port, when a process listens there.
pub(crate) fn port_target(
    cluster: &ClusterState,
    processes: &Processes,
    namespace: &str,
    pod: &str,
    port: u16,
) -> Option<SocketAddr> {
    let object = redis_pod(cluster, namespace, pod)?;
    let declared = redis_container(object)
        .map(|c| {
            obj::items(&c["ports"])
                .iter()
                .any(|p| p["containerPort"] == port)
        })
        .unwrap_or_default();
    if port != 6379 && !declared {
        return None;
    }
    processes.redis_addr(obj::uid(object))
}

/// The redis-server behind a pod, when it has one.
pub(crate) fn redis_of(
    cluster: &ClusterState,
    processes: &Processes,
    namespace: &str,
    pod: &str,
) -> Option<SocketAddr> {
    let object = redis_pod(cluster, namespace, pod)?;
    processes.redis_addr(obj::uid(object))
}

#[cfg(test)]
mod tests {
    use super::super::controllers::testkit::{self, Harness};
    use super::*;
    use serde_json::json;

    fn scenario() -> Harness {
        let mut h = Harness::standard(vec![testkit::pool("default-pool", 1, 1)]);
        h.create(
            "",
            "persistentvolumes",
            "",
            testkit::nfs_pv("fileserver", "203.0.113.54", "/NFSVol", "1Ti"),
        );
        h.create("", "persistentvolumeclaims", "default", json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "fileserver-claim"},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "resources": {"requests": {"storage": "1Ti"}}},
        }));
        h.create("", "configmaps", "default", json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"app.conf": "x=1"},
        }));
        h.create("", "pods", "default", json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "worker"},
            "spec": {
                "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"], "volumeMounts": [
                    {"name": "share", "mountPath": "/mnt/fileserver"},
                    {"name": "share", "mountPath": "/out", "subPath": "output"},
                    {"name": "scratch", "mountPath": "/tmp/scratch"},
                    {"name": "cfg", "mountPath": "/etc/app"},
                    {"name": "share", "mountPath": "/ro", "readOnly": true},
                ]}],
                "volumes": [
                    {"name": "share", "persistentVolumeClaim": {"claimName": "fileserver-claim"}},
                    {"name": "scratch", "emptyDir": {}},
                    {"name": "cfg", "configMap": {"name": "cfg"}},
                ],
            },
        }));
        h
    }

    #[test]
    fn mounts_map_volumes_to_host_directories() {
        let mut h = scenario();
        h.settle();
        assert_eq!(
            mounts(&h.cluster, h.dir.path(), "default", "worker", None),
            Err("pod worker is not running".to_string()),
            "not running yet"
        );
        h.run_for(3.0);
        let data = h.dir.path().to_path_buf();
        let uid = obj::uid(&h.get("", "pods", "default", "worker")).to_string();
        let got = mounts(&h.cluster, &data, "default", "worker", Some("main"))
            .expect("mounts of a running pod");
        let share = data.join("nfs/203.0.113.54/NFSVol");
        let want = vec![
            Mount {
                path: "/mnt/fileserver".into(),
                host: share.clone(),
                read_only: false,
            },
            Mount {
                path: "/out".into(),
                host: share.join("output"),
                read_only: false,
            },
            Mount {
                path: "/tmp/scratch".into(),
                host: data.join("pods").join(&uid).join("scratch"),
                read_only: false,
            },
            Mount {
                path: "/etc/app".into(),
                host: data.join("pods").join(&uid).join("cfg"),
                read_only: true,
            },
            Mount {
                path: "/ro".into(),
                host: share.clone(),
                read_only: true,
            },
        ];
        assert_eq!(got, want);
        assert!(share.join("output").is_dir(), "created on demand");
        assert_eq!(
            std::fs::read_to_string(data.join("pods").join(&uid).join("cfg/app.conf"))
                .ok()
                .as_deref(),
            Some("x=1")
        );
    }

    #[test]
    fn the_same_share_is_the_same_directory_everywhere() {
        let h = Harness::standard(vec![]);
        let other = ClusterState {
            name: "other".into(),
            ..h.cluster.clone()
        };
        let pv = testkit::nfs_pv("a", "10.0.0.2", "/vol/../../etc", "1Gi");
        assert_eq!(
            volume_dir(&h.cluster, h.dir.path(), &pv),
            volume_dir(&other, h.dir.path(), &pv)
        );
        assert_eq!(
            volume_dir(&h.cluster, h.dir.path(), &pv),
            h.dir.path().join("nfs/10.0.0.2/vol/etc"),
            "never outside the data directory"
        );
        let host = json!({"metadata": {"name": "h"}, "spec": {"hostPath": {"path": "/data"}}});
        assert_ne!(
            volume_dir(&h.cluster, h.dir.path(), &host),
            volume_dir(&other, h.dir.path(), &host)
        );
    }

    #[test]
    fn errors_read_like_the_api_servers() {
        let mut h = scenario();
        h.run_for(3.0);
        let dir = h.dir.path().to_path_buf();
        let cases = [
            ("nope", None, "pods \"nope\" not found"),
            (
                "worker",
                Some("side"),
                "container side is not valid for pod worker",
            ),
        ];
        for (pod, container, want) in cases {
            assert_eq!(
                mounts(&h.cluster, &dir, "default", pod, container),
                Err(want.to_string())
            );
        }
        let mut bad = h.get("", "pods", "default", "worker");
        obj::set(&mut bad, &["metadata", "name"], json!("escape"));
        obj::set(
            &mut bad,
            &["spec", "containers"],
            json!([{"name": "main", "image": "busybox",
            "volumeMounts": [{"name": "scratch", "mountPath": "/x", "subPath": "../../etc"}]}]),
        );
        h.cluster
            .store
            .insert_new(ObjKey::new("", "pods", "default", "escape"), bad, h.now);
        assert!(mounts(&h.cluster, &dir, "default", "escape", None)
            .is_err_and(|e| e.contains("subPath")));
    }

    #[test]
    fn only_redis_pods_have_a_port_target() {
        let mut h = scenario();
        h.run_for(3.0);
        assert_eq!(
            port_target(&h.cluster, &h.processes, "default", "worker", 6379),
            None
        );
        assert_eq!(
            redis_of(&h.cluster, &h.processes, "default", "worker"),
            None
        );
    }
}
