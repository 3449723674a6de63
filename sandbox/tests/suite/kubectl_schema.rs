//! The real `kubectl` against the sandbox's schemas and server-side apply: `kubectl
//! explain` (built-in kinds, a CRD, `--recursive`) from `/openapi/v3`, `/openapi/v2` as
//! JSON, `--validate=strict` answered by the server, and client-side apply followed by
//! server-side apply with managers and conflicts as a real API server records them.
//! Skipped (with a message) when kubectl is not installed.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use terrain_sandbox::{Options, Sandbox, Timing};

use crate::common;
use common::{gke_cluster, Kubectl, KUBECTL};

const PROJECT: &str = "kubectl-schema-proj";

/// A sandbox with one GKE cluster and the kubeconfig for it, in a temp home.
async fn cluster() -> (Sandbox, tempfile::TempDir, PathBuf) {
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Options::google_apis_on()
    })
    .await
    .expect("sandbox starts");
    let home = tempfile::tempdir().expect("temp dir");
    let kubeconfig = gke_cluster(&sandbox, PROJECT, "schemas", home.path()).await;
    let written = sandbox.kubeconfig(home.path()).expect("kubeconfig");
    assert_eq!(
        written.len(),
        1,
        "one kubeconfig per cluster, got {written:?}"
    );
    (sandbox, home, kubeconfig)
}

fn assert_contains(text: &str, wants: &[&str]) {
    for want in wants {
        assert!(text.contains(want), "{want:?} in:\n{text}");
    }
}

#[tokio::test]
async fn kubectl_explains_served_kinds_from_the_servers_schemas() {
    if !Path::new(KUBECTL).is_file() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return;
    }
    let (sandbox, home, kubeconfig) = cluster().await;
    let kubectl = Kubectl {
        kubeconfig: &kubeconfig,
        home: home.path(),
    };

    let containers = kubectl.ok(&["explain", "pods.spec.containers"]).await;
    assert_contains(
        &containers.stdout,
        &[
            "KIND:       Pod\n",
            "VERSION:    v1\n",
            "FIELD: containers <[]Container>",
            "DESCRIPTION:",
            "List of containers belonging to the pod.",
            "FIELDS:",
            "  image\t<string>",
            "Container image name.",
            "  ports\t<[]ContainerPort>",
            "  name\t<string> -required-",
        ],
    );

    let job = kubectl
        .ok(&[
            "explain",
            "jobs.spec.template.spec",
            "--api-version=batch/v1",
        ])
        .await;
    assert_contains(
        &job.stdout,
        &[
            "GROUP:      batch\n",
            "KIND:       Job\n",
            "VERSION:    v1\n",
            "FIELD: spec <PodSpec>",
            "  containers\t<[]Container> -required-",
            "  restartPolicy\t<string>",
        ],
    );

    let pvc = kubectl.ok(&["explain", "persistentvolumeclaims"]).await;
    assert_contains(
        &pvc.stdout,
        &[
            "KIND:       PersistentVolumeClaim\n",
            "PersistentVolumeClaim is a user's request for and claim to a persistent",
            "  spec\t<PersistentVolumeClaimSpec>",
            "  metadata\t<ObjectMeta>",
        ],
    );
    assert!(
        !pvc.stdout.contains("metadata\t<ObjectMeta> -required-"),
        "metadata is optional, as the real schema has it:\n{}",
        pvc.stdout
    );

    let recursive = kubectl
        .ok(&["explain", "deployments.spec", "--recursive"])
        .await;
    assert_contains(
        &recursive.stdout,
        &[
            "GROUP:      apps\n",
            "FIELD: spec <DeploymentSpec>",
            "  template\t<PodTemplateSpec> -required-",
            "    spec\t<PodSpec>",
            "      containers\t<[]Container> -required-",
            "        image\t<string>",
        ],
    );

    // A custom resource: its CRD's openAPIV3Schema, with the metadata the server adds.
    let crd = terrain_contracts::path("ack-sagemaker/sagemaker.services.k8s.aws_pipelines.yaml");
    let crd = crd.to_string_lossy().into_owned();
    kubectl.ok(&["create", "-f", &crd]).await;
    let pipelines = kubectl.ok(&["explain", "pipelines.spec"]).await;
    assert_contains(
        &pipelines.stdout,
        &[
            "GROUP:      sagemaker.services.k8s.aws\n",
            "KIND:       Pipeline\n",
            "VERSION:    v1alpha1\n",
            "  pipelineName\t<string> -required-",
            "  roleARN\t<string> -required-",
            "  tags\t<[]Object>",
        ],
    );
    let meta = kubectl.ok(&["explain", "pipelines.metadata.name"]).await;
    assert_contains(
        &meta.stdout,
        &["FIELD: name <string>", "Name must be unique"],
    );

    let raw = kubectl.ok(&["get", "--raw", "/openapi/v2"]).await;
    let swagger: Value = serde_json::from_str(&raw.stdout).expect("/openapi/v2 is JSON");
    assert_eq!(swagger["swagger"], "2.0");
    assert_eq!(
        swagger["definitions"]["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"],
        json!([{"group": "", "kind": "Pod", "version": "v1"}])
    );
    assert_eq!(
        swagger["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
            ["x-kubernetes-patch-merge-key"],
        "name"
    );

    // kubectl asks for v2 only as protobuf, which the sandbox cannot encode: the 406 is
    // reported, not a crash, and everything above ran on v3.
    let v2 = kubectl
        .fails(&["explain", "pods", "--output", "plaintext-openapiv2"])
        .await;
    assert!(
        v2.stderr
            .contains("Error from server (NotAcceptable): the server was unable to respond with a content type that the client supports"),
        "{}",
        v2.stderr
    );
    sandbox.shutdown().await;
}

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: IMAGE
        ports:
        - containerPort: PORT
        env:
        - name: MODE
          value: demo
";

fn deployment(dir: &Path, file: &str, image: &str, port: u16, replicas: u8) -> String {
    let path = dir.join(file);
    std::fs::write(
        &path,
        DEPLOYMENT
            .replace("IMAGE", image)
            .replace("PORT", &port.to_string())
            .replace("replicas: 1", &format!("replicas: {replicas}")),
    )
    .expect("manifest");
    path.to_string_lossy().into_owned()
}

/// `(manager, operation)` of each managedFields entry.
fn managers(object: &Value) -> Vec<(String, String)> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or_default().to_string(),
                e["operation"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn fields_of<'a>(object: &'a Value, manager: &str) -> &'a Value {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["manager"] == manager)
        .map(|e| &e["fieldsV1"])
        .unwrap_or(&Value::Null)
}

#[tokio::test]
async fn kubectl_apply_validates_strictly_and_moves_from_client_side_to_server_side_apply() {
    if !Path::new(KUBECTL).is_file() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return;
    }
    let (sandbox, home, kubeconfig) = cluster().await;
    let kubectl = Kubectl {
        kubeconfig: &kubeconfig,
        home: home.path(),
    };
    let dir = home.path();

    // --validate=strict (kubectl's default) leaves validation to the server, which
    // rejects an undeclared field as the real one does.
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        DEPLOYMENT
            .replace("IMAGE", "nginx")
            .replace("PORT", "80")
            .replace("        env:\n", "        bogus: 1\n        env:\n"),
    )
    .expect("manifest");
    let bad = bad.to_string_lossy().into_owned();
    let refused = kubectl
        .fails(&["apply", "--validate=strict", "-f", &bad])
        .await;
    assert_contains(
        &refused.stderr,
        &[
            "Error from server (BadRequest)",
            "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"spec.template.spec.containers[0].bogus\"",
        ],
    );
    let refused = kubectl
        .fails(&["apply", "--server-side", "--validate=strict", "-f", &bad])
        .await;
    assert_contains(
        &refused.stderr,
        &[".spec.template.spec.containers[name=\"web\"].bogus: field not declared in schema"],
    );
    kubectl.fails(&["get", "deployment", "web"]).await;

    // Client-side apply creates it (manager kubectl-client-side-apply, an Update)...
    let v1 = deployment(dir, "web.yaml", "nginx:1.27", 80, 1);
    let created = kubectl.ok(&["apply", "--validate=strict", "-f", &v1]).await;
    assert_eq!(created.stdout.trim(), "deployment.apps/web created");
    // ...and patches it from the v3 schemas' patch strategies without complaint.
    let scaled = deployment(dir, "scaled.yaml", "nginx:1.27", 80, 2);
    let patched = kubectl.ok(&["apply", "-f", &scaled]).await;
    assert_eq!(patched.stdout.trim(), "deployment.apps/web configured");
    assert!(
        !patched.stderr.contains("warning"),
        "no fallback from the v3 schemas:\n{}",
        patched.stderr
    );

    // Server-side apply of the same file with the port changed: the port list is keyed
    // by containerPort and protocol, so the new port is a new item, not a conflict.
    let v2 = deployment(dir, "web-8080.yaml", "nginx:1.27", 8080, 2);
    let applied = kubectl.ok(&["apply", "--server-side", "-f", &v2]).await;
    assert_eq!(
        applied.stdout.trim(),
        "deployment.apps/web serverside-applied"
    );
    let yaml = kubectl
        .ok(&[
            "get",
            "deployment",
            "web",
            "-o",
            "yaml",
            "--show-managed-fields",
        ])
        .await;
    let object: Value = serde_yaml_ng::from_str(&yaml.stdout).expect("YAML");
    // kubectl moves what client-side apply owned to its own manager (a patch of
    // managedFields alone, which the server takes as a change) and records the
    // last-applied annotation's owner, as against a real API server.
    let entries = managers(&object);
    assert_eq!(
        entries,
        [
            ("kubectl".to_string(), "Apply".to_string()),
            ("kubectl-last-applied".to_string(), "Apply".to_string()),
        ],
        "{entries:?}"
    );
    let ssa = fields_of(&object, "kubectl");
    let container = &ssa["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"];
    assert!(
        container["f:ports"]["k:{\"containerPort\":8080,\"protocol\":\"TCP\"}"].is_object(),
        "kubectl owns the new port by its key: {ssa}"
    );
    let ports: Vec<&Value> = object["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| &p["containerPort"])
        .collect();
    assert_eq!(
        ports,
        [&json!(8080)],
        "the port the file no longer has is gone"
    );

    // Another manager changing a value others own conflicts, worded as the API server
    // words it; --force-conflicts takes the field.
    let other = deployment(dir, "web-other.yaml", "nginx:1.28", 8080, 2);
    let conflict = kubectl
        .fails(&[
            "apply",
            "--server-side",
            "--field-manager=other",
            "-f",
            &other,
        ])
        .await;
    assert_contains(
        &conflict.stderr,
        &[
            "Apply failed with",
            "with \"kubectl\"",
            ".spec.template.spec.containers[name=\"web\"].image",
            "--force-conflicts",
        ],
    );
    kubectl
        .ok(&[
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
            &other,
        ])
        .await;
    let yaml = kubectl
        .ok(&[
            "get",
            "deployment",
            "web",
            "-o",
            "yaml",
            "--show-managed-fields",
        ])
        .await;
    let object: Value = serde_yaml_ng::from_str(&yaml.stdout).expect("YAML");
    assert_eq!(
        object["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.28"
    );
    let theirs = fields_of(&object, "other");
    assert!(
        theirs["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"]["f:image"]
            .is_object(),
        "other owns the image now: {theirs}"
    );
    let ours = fields_of(&object, "kubectl");
    assert!(
        ours["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"]
            .get("f:image")
            .is_none(),
        "kubectl lost it: {ours}"
    );

    // kubectl create and patch name themselves through fieldManager.
    // (`kubectl create configmap NAME` would send protobuf, which the sandbox does not
    // read; `create -f` sends JSON.)
    let cm = dir.join("settings.yaml");
    std::fs::write(
        &cm,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: b\n",
    )
    .expect("manifest");
    kubectl.ok(&["create", "-f", &cm.to_string_lossy()]).await;
    kubectl
        .ok(&[
            "patch",
            "configmap",
            "settings",
            "-p",
            "{\"data\":{\"c\":\"d\"}}",
        ])
        .await;
    let yaml = kubectl
        .ok(&[
            "get",
            "configmap",
            "settings",
            "-o",
            "yaml",
            "--show-managed-fields",
        ])
        .await;
    let object: Value = serde_yaml_ng::from_str(&yaml.stdout).expect("YAML");
    assert_eq!(
        managers(&object),
        [
            ("kubectl-create".to_string(), "Update".to_string()),
            ("kubectl-patch".to_string(), "Update".to_string())
        ]
    );
    sandbox.shutdown().await;
}
