//! `eks_cluster` and `eks_node_group` end to end, driven through the untyped adapter as
//! the engine drives them: against moto (the third-party AWS emulator, so the SDK calls
//! and their shapes are checked against someone else's idea of EKS) and against the
//! sandbox's EKS, which also serves each cluster's Kubernetes API — so the cluster's
//! `kubernetes` output, with its EKS token, must really connect.
//!
//! Lifecycle in both: create cluster → read back equals the spec → update logging and
//! tags → create a Spot GPU node group with a taint → update scaling, labels and taints
//! → read back → a cluster delete is refused while the group exists, naming it → delete
//! the group → delete the cluster → read is None; deleting again is Ok.
//!
//! `eks_capability` against the sandbox alone (moto has no capabilities): a cluster moved
//! to access entries in place (its authentication mode one step at a time, never back),
//! an ACK capability on it with a role trusting capabilities.eks.amazonaws.com, its role
//! and settings changed in place, then deleted.
//!
//! `eks_addon` and `eks_pod_identity_association` against the sandbox alone: the pod
//! identity agent add-on on a cluster with access entries, an association for a role
//! trusting pods.eks.amazonaws.com, its role changed in place, a second association for
//! the same service account refused naming `terrain import`, then both deleted.

use crate::support::aws as support;

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{json, Value};
use terrain_providers::aws::eks_addon::EksAddon;
use terrain_providers::aws::eks_capability::EksCapability;
use terrain_providers::aws::eks_cluster::EksCluster;
use terrain_providers::aws::eks_node_group::EksNodeGroup;
use terrain_providers::aws::eks_pod_identity_association::EksPodIdentityAssociation;
use terrain_providers::{Adapter, Ctx, ProviderError, Resource};

fn cluster_kind() -> Adapter<EksCluster> {
    Adapter::new(EksCluster)
}

fn node_group_kind() -> Adapter<EksNodeGroup> {
    Adapter::new(EksNodeGroup)
}

fn capability_kind() -> Adapter<EksCapability> {
    Adapter::new(EksCapability)
}

fn addon_kind() -> Adapter<EksAddon> {
    Adapter::new(EksAddon)
}

fn association_kind() -> Adapter<EksPodIdentityAssociation> {
    Adapter::new(EksPodIdentityAssociation)
}

/// A context that keeps the progress messages it is sent.
fn recording(address: &str, config: &Value) -> (Ctx, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let ctx = support::ctx(address, config.clone()).with_reporter(Arc::new(move |m: &str| {
        sink.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(m.to_string())
    }));
    (ctx, seen)
}

/// A spec as plans compare it: defaults filled, absent and null the same.
fn planned(kind: &dyn Resource, spec: &Value) -> Value {
    without_nulls(&kind.schema().with_defaults(spec))
}

fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

fn cluster_spec() -> Value {
    json!({
        "name": "ml",
        "version": "1.31",
        "role_arn": "arn:aws:iam::123456789012:role/eks-cluster",
        "subnet_ids": ["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"],
        "tags": {"team": "ml"},
    })
}

fn node_group_spec() -> Value {
    json!({
        "cluster_name": "ml",
        "name": "gpu",
        "node_role_arn": "arn:aws:iam::123456789012:role/eks-node",
        "subnet_ids": ["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"],
        "instance_types": ["g5.xlarge"],
        "capacity_type": "SPOT",
        "scaling": {"min": 0, "max": 2, "desired": 1},
        "labels": {"workload": "training", "team": "ml"},
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
    })
}

/// Reads `id` and checks the live spec is what the stack asked for.
async fn read_back(
    kind: &dyn Resource,
    ctx: &Ctx,
    id: &str,
    spec: &Value,
) -> Result<Value, ProviderError> {
    let wanted = kind.schema().with_defaults(spec);
    let observed = kind
        .read(ctx, id, &wanted)
        .await?
        .unwrap_or_else(|| panic!("{id} exists"));
    assert_eq!(observed.id, id);
    assert_eq!(
        without_nulls(&observed.spec),
        planned(kind, spec),
        "{id} reads back as its spec"
    );
    Ok(observed.outputs)
}

/// What the lifecycle leaves for emulator-specific checks.
struct Lifecycle {
    cluster_outputs: Value,
    node_group_outputs: Value,
}

/// The shared lifecycle up to the updated node group (both objects still exist).
async fn create_and_update(config: &Value) -> Result<Lifecycle, ProviderError> {
    let clusters = cluster_kind();
    let groups = node_group_kind();
    let (ctx, progress) = recording("eks_cluster.ml", config);

    let spec = cluster_spec();
    assert!(clusters
        .validate(&clusters.schema().with_defaults(&spec), config)
        .is_empty());
    assert_eq!(
        clusters.planned_id(&clusters.schema().with_defaults(&spec), config),
        Some("ml".to_string())
    );
    let created = clusters
        .create(&ctx, &clusters.schema().with_defaults(&spec))
        .await?;
    assert_eq!(created.id, "ml");
    assert_eq!(without_nulls(&created.spec), planned(&clusters, &spec));
    assert_eq!(created.outputs["status"], "ACTIVE");
    assert!(
        created.outputs["arn"]
            .as_str()
            .is_some_and(|a| a.starts_with("arn:aws:eks:us-east-1:") && a.ends_with(":cluster/ml")),
        "{}",
        created.outputs["arn"]
    );
    assert!(progress
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .all(|m| m.starts_with("creating EKS cluster ml")));
    read_back(&clusters, &ctx, "ml", &spec).await?;

    // Creating it again from the same address adopts it; from another, it is refused.
    let again = clusters
        .create(&ctx, &clusters.schema().with_defaults(&spec))
        .await?;
    assert_eq!(again.id, "ml");
    let stranger = clusters
        .create(
            &support::ctx("eks_cluster.other", config.clone()),
            &clusters.schema().with_defaults(&spec),
        )
        .await
        .expect_err("not ours");
    assert!(
        stranger
            .to_string()
            .contains("terrain import eks_cluster.other ml"),
        "{stranger}"
    );

    // Logging and tags change in place.
    let mut updated = cluster_spec();
    updated["logging"] = json!(["api", "audit"]);
    updated["tags"] = json!({"team": "ml", "cost-center": "research"});
    let after = clusters
        .update(
            &ctx,
            "ml",
            &clusters.schema().with_defaults(&spec),
            &clusters.schema().with_defaults(&updated),
        )
        .await?;
    assert_eq!(without_nulls(&after.spec), planned(&clusters, &updated));
    let cluster_outputs = read_back(&clusters, &ctx, "ml", &updated).await?;

    // A GPU node group on Spot capacity, tainted for GPU work.
    let ng_ctx = support::ctx("eks_node_group.gpu", config.clone());
    let ng = node_group_spec();
    assert!(groups
        .validate(&groups.schema().with_defaults(&ng), config)
        .is_empty());
    let made = groups
        .create(&ng_ctx, &groups.schema().with_defaults(&ng))
        .await?;
    assert_eq!(made.id, "ml/gpu");
    assert_eq!(without_nulls(&made.spec), planned(&groups, &ng));
    assert_eq!(
        made.outputs["placement"],
        json!({
            "pool": "gpu",
            "node_selector": {"eks.amazonaws.com/nodegroup": "gpu"},
            "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
            "accelerator": {"type": "g5.xlarge", "count": 1},
            "tpu": null,
            "spot": true,
        })
    );
    read_back(&groups, &ng_ctx, "ml/gpu", &ng).await?;

    // Scaling, labels and taints change in place in one update.
    let mut ng2 = node_group_spec();
    ng2["scaling"] = json!({"min": 1, "max": 3, "desired": 2});
    ng2["labels"] = json!({"workload": "inference", "tier": "gpu"});
    ng2["taints"] = json!([
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"},
        {"key": "dedicated", "effect": "NO_EXECUTE"},
    ]);
    let changed = groups
        .update(
            &ng_ctx,
            "ml/gpu",
            &groups.schema().with_defaults(&ng),
            &groups.schema().with_defaults(&ng2),
        )
        .await?;
    assert_eq!(without_nulls(&changed.spec), planned(&groups, &ng2));
    let node_group_outputs = read_back(&groups, &ng_ctx, "ml/gpu", &ng2).await?;
    assert_eq!(
        node_group_outputs["placement"]["taints"],
        json!([
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "dedicated", "value": null, "effect": "NoExecute"},
        ])
    );
    Ok(Lifecycle {
        cluster_outputs,
        node_group_outputs,
    })
}

/// The shared teardown: the cluster refuses to go while the group exists, then both go,
/// and deleting again succeeds.
async fn tear_down(config: &Value) -> Result<(), ProviderError> {
    let clusters = cluster_kind();
    let groups = node_group_kind();
    let ctx = support::ctx("eks_cluster.ml", config.clone());
    let ng_ctx = support::ctx("eks_node_group.gpu", config.clone());
    let spec = clusters.schema().with_defaults(&cluster_spec());
    let ng = groups.schema().with_defaults(&node_group_spec());

    let refused = clusters
        .delete(&ctx, "ml", &spec)
        .await
        .expect_err("node groups remain");
    let m = refused.to_string();
    assert!(
        m.starts_with("eks:DeleteCluster failed:") && m.contains("ResourceInUseException"),
        "{m}"
    );
    assert!(m.contains("still has node groups gpu"), "{m}");

    groups.delete(&ng_ctx, "ml/gpu", &ng).await?;
    assert!(groups.read(&ng_ctx, "ml/gpu", &ng).await?.is_none());
    groups.delete(&ng_ctx, "ml/gpu", &ng).await?;

    clusters.delete(&ctx, "ml", &spec).await?;
    assert!(clusters.read(&ctx, "ml", &spec).await?.is_none());
    clusters.delete(&ctx, "ml", &spec).await?;
    // The group of a deleted cluster is gone too, and deleting it stays idempotent.
    assert!(groups.read(&ng_ctx, "ml/gpu", &ng).await?.is_none());
    groups.delete(&ng_ctx, "ml/gpu", &ng).await?;
    Ok(())
}

#[tokio::test]
async fn eks_lifecycle_against_moto() -> Result<(), ProviderError> {
    let moto = support::Moto::start();
    let config = support::config(&moto.url);

    let life = create_and_update(&config).await?;
    // moto makes clusters ACTIVE at once, answers UpdateClusterConfig with the cluster
    // rather than an update to follow, reports its node group updates Successful at
    // once and has no UpdateClusterVersion: version upgrades and waiting on real
    // transitions are checked against the sandbox only. Its CA data is random text, not
    // a certificate, so the connection itself is checked there too.
    let k = &life.cluster_outputs["kubernetes"];
    assert_eq!(k["flavor"], "eks");
    assert_eq!(k["name"], "ml");
    assert_eq!(
        k["auth"],
        json!({"type": "aws", "cluster_name": "ml", "region": "us-east-1", "sts_endpoint": moto.url})
    );
    assert!(
        k["host"]
            .as_str()
            .is_some_and(|h| h.starts_with("https://")),
        "{k}"
    );
    assert_eq!(life.node_group_outputs["status"], "ACTIVE");

    tear_down(&config).await
}

#[tokio::test]
async fn eks_lifecycle_against_the_sandbox() -> Result<(), ProviderError> {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, ListParams};
    use terrain_providers::kubernetes::connect;
    use terrain_sandbox::{Options, Sandbox, Timing};
    let sandbox = Sandbox::start(Options {
        timing: Timing::scaled(0.01),
        ..Default::default()
    })
    .await
    .expect("sandbox starts");
    sandbox
        .set_capacity(support::hand_named_account())
        .expect("capacity set");
    let config = support::config(&sandbox.url());

    let life = create_and_update(&config).await?;

    // The `kubernetes` output connects: the client signs an EKS token, which the
    // sandbox's API server checks, and the node group's nodes are there.
    let k = &life.cluster_outputs["kubernetes"];
    assert!(
        k["ca_certificate"]
            .as_str()
            .is_some_and(|c| c.starts_with("-----BEGIN CERTIFICATE-----")),
        "{k}"
    );
    let client = connect::client(&support::ctx("eks_cluster.ml", serde_json::json!({})), k).await?;
    let nodes: Api<Node> = Api::all(client.kube());
    let listed = nodes
        .list(&ListParams::default().labels("eks.amazonaws.com/nodegroup=gpu"))
        .await
        .map_err(|e| ProviderError::api("kubernetes list nodes", 0, "", e.to_string()))?;
    assert_eq!(listed.items.len(), 2, "desired = 2 after the update");
    for node in &listed.items {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels
                .get("eks.amazonaws.com/capacityType")
                .map(String::as_str),
            Some("SPOT")
        );
        assert_eq!(labels.get("tier").map(String::as_str), Some("gpu"));
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(
            taints
                .iter()
                .any(|t| t.key == "dedicated" && t.effect == "NoExecute"),
            "{taints:?}"
        );
        let gpus = node
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("nvidia.com/gpu"))
            .map(|q| q.0.clone());
        assert_eq!(gpus.as_deref(), Some("1"), "a g5.xlarge has one GPU");
    }

    // Version upgrades go one minor version at a time, refused before any call
    // otherwise, and followed to the end with progress.
    let clusters = cluster_kind();
    let (ctx, progress) = recording("eks_cluster.ml", &config);
    let mut current = cluster_spec();
    current["logging"] = json!(["api", "audit"]);
    current["tags"] = json!({"team": "ml", "cost-center": "research"});
    let mut skip = current.clone();
    skip["version"] = json!("1.33");
    let refused = clusters
        .update(
            &ctx,
            "ml",
            &clusters.schema().with_defaults(&current),
            &clusters.schema().with_defaults(&skip),
        )
        .await
        .expect_err("two minor versions at once");
    assert!(
        refused.to_string().contains("set version = \"1.32\""),
        "{refused}"
    );
    read_back(&clusters, &ctx, "ml", &current).await?;
    let mut next = current.clone();
    next["version"] = json!("1.32");
    let upgraded = clusters
        .update(
            &ctx,
            "ml",
            &clusters.schema().with_defaults(&current),
            &clusters.schema().with_defaults(&next),
        )
        .await?;
    assert_eq!(upgraded.spec["version"], "1.32");
    assert!(
        progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|m| m.starts_with("upgrading 1.31 → 1.32")),
        "progress names the upgrade"
    );
    let health = clusters
        .health(&ctx, "ml", &clusters.schema().with_defaults(&next))
        .await?;
    assert!(health.ready, "{health:?}");

    tear_down(&config).await?;
    sandbox.shutdown().await;
    Ok(())
}

/// A capability on a cluster with access entries, its role and settings changed in
/// place, then deleted; the cluster's authentication mode moves one step forward in
/// place and is refused going back.
#[tokio::test]
async fn eks_capability_lifecycle_against_the_sandbox() -> Result<(), ProviderError> {
    use terrain_sandbox::{Options, Sandbox, Timing};
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Default::default()
    })
    .await
    .expect("sandbox starts");
    // The capability's roles trust EKS's capabilities principal, as EKS requires.
    let mut account = support::hand_named_account();
    for role in ["ack-capability", "ack-capability-next"] {
        account["aws"]["roles"][role] = json!("capabilities.eks.amazonaws.com");
    }
    sandbox.set_capacity(account).expect("capacity set");
    let config = support::config(&sandbox.url());
    let clusters = cluster_kind();
    let caps = capability_kind();
    let cluster_full = |v: &Value| clusters.schema().with_defaults(v);
    let cap_full = |v: &Value| caps.schema().with_defaults(v);

    // A cluster with access entries, then API only: one step, in place.
    let ctx = support::ctx("eks_cluster.ml", config.clone());
    let mut both = cluster_spec();
    both["authentication_mode"] = json!("API_AND_CONFIG_MAP");
    let created = clusters.create(&ctx, &cluster_full(&both)).await?;
    assert_eq!(created.spec["authentication_mode"], "API_AND_CONFIG_MAP");
    read_back(&clusters, &ctx, "ml", &both).await?;
    let mut api = cluster_spec();
    api["authentication_mode"] = json!("API");
    assert!(clusters
        .validate_change(&cluster_full(&both), &cluster_full(&api))
        .is_empty());
    let moved = clusters
        .update(&ctx, "ml", &cluster_full(&both), &cluster_full(&api))
        .await?;
    assert_eq!(moved.spec["authentication_mode"], "API");
    read_back(&clusters, &ctx, "ml", &api).await?;
    let back = clusters.validate_change(&cluster_full(&api), &cluster_full(&both));
    assert!(
        matches!(back.as_slice(), [p] if p.path == ["authentication_mode"] && p.message.contains("cannot take a cluster back from API to API_AND_CONFIG_MAP")),
        "{back:?}"
    );

    // An ACK capability: created ACTIVE, read back as written.
    let cap_ctx = support::ctx("eks_capability.ack", config.clone());
    let cap = json!({
        "cluster": "ml",
        "name": "ack",
        "role_arn": "arn:aws:iam::123456789012:role/ack-capability",
        "tags": {"team": "ml"},
    });
    assert!(caps.validate(&cap_full(&cap), &config).is_empty());
    assert_eq!(
        caps.planned_id(&cap_full(&cap), &config),
        Some("ml/ack".to_string())
    );
    let made = caps.create(&cap_ctx, &cap_full(&cap)).await?;
    assert_eq!(made.id, "ml/ack");
    assert_eq!(without_nulls(&made.spec), planned(&caps, &cap));
    assert_eq!(made.outputs["status"], "ACTIVE");
    assert!(
        made.outputs["arn"]
            .as_str()
            .is_some_and(|a| a.starts_with("arn:aws:eks:us-east-1:")
                && a.ends_with(":capability/ml/ack/ack")),
        "{}",
        made.outputs["arn"]
    );
    let outputs = read_back(&caps, &cap_ctx, "ml/ack", &cap).await?;
    assert_eq!(outputs["status"], "ACTIVE");
    assert_eq!(outputs["arn"], made.outputs["arn"]);

    // Creating it again from the same address adopts it; a second ACK capability under
    // another name is refused, naming the first.
    let again = caps.create(&cap_ctx, &cap_full(&cap)).await?;
    assert_eq!(again.id, "ml/ack");
    let mut second = cap.clone();
    second["name"] = json!("ack-two");
    let refused = caps
        .create(
            &support::ctx("eks_capability.two", config.clone()),
            &cap_full(&second),
        )
        .await
        .expect_err("one capability of each type per cluster");
    let m = refused.to_string();
    assert!(
        m.starts_with("eks:CreateCapability failed:")
            && m.contains("cluster ml already has an ACK capability, ack"),
        "{m}"
    );

    // The role and ACK's settings change in place.
    let mut next = cap.clone();
    next["role_arn"] = json!("arn:aws:iam::123456789012:role/ack-capability-next");
    next["configuration"] =
        json!({"ack": {"enable_cross_namespace": true, "disabled_services": ["ec2"]}});
    let changed = caps
        .update(&cap_ctx, "ml/ack", &cap_full(&cap), &cap_full(&next))
        .await?;
    assert_eq!(without_nulls(&changed.spec), planned(&caps, &next));
    read_back(&caps, &cap_ctx, "ml/ack", &next).await?;
    let health = caps.health(&cap_ctx, "ml/ack", &cap_full(&next)).await?;
    assert!(health.ready, "{health:?}");

    // The cluster goes only once its capability has.
    let held = clusters
        .delete(&ctx, "ml", &cluster_full(&api))
        .await
        .expect_err("a capability remains")
        .to_string();
    assert!(
        held.starts_with("eks:DeleteCluster failed:")
            && held.contains("ResourceInUseException")
            && held.contains("capabilities"),
        "{held}"
    );
    caps.delete(&cap_ctx, "ml/ack", &cap_full(&next)).await?;
    assert!(caps
        .read(&cap_ctx, "ml/ack", &cap_full(&next))
        .await?
        .is_none());
    caps.delete(&cap_ctx, "ml/ack", &cap_full(&next)).await?;
    clusters.delete(&ctx, "ml", &cluster_full(&api)).await?;
    // A capability of a deleted cluster is gone too, and deleting it stays idempotent.
    assert!(caps
        .read(&cap_ctx, "ml/ack", &cap_full(&next))
        .await?
        .is_none());
    caps.delete(&cap_ctx, "ml/ack", &cap_full(&next)).await?;
    sandbox.shutdown().await;
    Ok(())
}

/// EKS Pod Identity: the agent add-on made ACTIVE (and adopted again from its own
/// address, refused from another's), an association giving a service account a role
/// trusting pods.eks.amazonaws.com, its role changed in place, a second association for
/// the same service account refused naming `terrain import`, then both deleted. UpdateAddon
/// is not emulated, so add-on updates are not driven here.
#[tokio::test]
async fn eks_pod_identity_lifecycle_against_the_sandbox() -> Result<(), ProviderError> {
    use terrain_sandbox::{Options, Sandbox, Timing};
    let sandbox = Sandbox::start(Options {
        timing: Timing::instant(),
        ..Default::default()
    })
    .await
    .expect("sandbox starts");
    // The associations' roles trust EKS Pod Identity's principal, as EKS requires.
    let mut account = support::hand_named_account();
    for role in ["trainer", "trainer-next"] {
        account["aws"]["roles"][role] = json!("pods.eks.amazonaws.com");
    }
    sandbox.set_capacity(account).expect("capacity set");
    let config = support::config(&sandbox.url());
    let clusters = cluster_kind();
    let addons = addon_kind();
    let assocs = association_kind();
    let cluster_full = |v: &Value| clusters.schema().with_defaults(v);
    let addon_full = |v: &Value| addons.schema().with_defaults(v);
    let assoc_full = |v: &Value| assocs.schema().with_defaults(v);

    let ctx = support::ctx("eks_cluster.ml", config.clone());
    let mut cluster = cluster_spec();
    cluster["authentication_mode"] = json!("API");
    clusters.create(&ctx, &cluster_full(&cluster)).await?;

    // The agent add-on: ACTIVE, at the version EKS picks, read back without one.
    let addon_ctx = support::ctx("eks_addon.pod_identity", config.clone());
    let agent = json!({
        "cluster": "ml",
        "name": "eks-pod-identity-agent",
        "tags": {"team": "ml"},
    });
    assert!(addons.validate(&addon_full(&agent), &config).is_empty());
    assert_eq!(
        addons.planned_id(&addon_full(&agent), &config).as_deref(),
        Some("ml/eks-pod-identity-agent")
    );
    let made = addons.create(&addon_ctx, &addon_full(&agent)).await?;
    assert_eq!(made.id, "ml/eks-pod-identity-agent");
    assert_eq!(without_nulls(&made.spec), planned(&addons, &agent));
    assert_eq!(made.outputs["status"], "ACTIVE");
    assert!(
        made.outputs["version"]
            .as_str()
            .is_some_and(|v| v.starts_with('v')),
        "{}",
        made.outputs["version"]
    );
    assert!(
        made.outputs["arn"]
            .as_str()
            .is_some_and(|a| a.starts_with("arn:aws:eks:us-east-1:")
                && a.contains(":addon/ml/eks-pod-identity-agent/")),
        "{}",
        made.outputs["arn"]
    );
    let outputs = read_back(&addons, &addon_ctx, "ml/eks-pod-identity-agent", &agent).await?;
    assert_eq!(outputs, made.outputs);
    let health = addons
        .health(&addon_ctx, "ml/eks-pod-identity-agent", &addon_full(&agent))
        .await?;
    assert!(health.ready, "{health:?}");
    // Again from its own address: adopted; from another: refused, naming import.
    let again = addons.create(&addon_ctx, &addon_full(&agent)).await?;
    assert_eq!(again.id, "ml/eks-pod-identity-agent");
    let stranger = addons
        .create(
            &support::ctx("eks_addon.other", config.clone()),
            &addon_full(&agent),
        )
        .await
        .expect_err("another address's add-on")
        .to_string();
    assert!(
        stranger.starts_with("eks:CreateAddon failed:")
            && stranger.contains("terrain import eks_addon.other ml/eks-pod-identity-agent"),
        "{stranger}"
    );
    // An add-on EKS does not publish is refused in EKS's words.
    let mut unknown = agent.clone();
    unknown["name"] = json!("no-such-addon");
    let refused = addons
        .create(
            &support::ctx("eks_addon.unknown", config.clone()),
            &addon_full(&unknown),
        )
        .await
        .expect_err("an add-on EKS does not publish")
        .to_string();
    assert!(
        refused.starts_with("eks:CreateAddon failed: 400 InvalidParameterException")
            && refused.contains("Addon no-such-addon specified is not supported"),
        "{refused}"
    );

    // An association: its id is EKS's, known once made; read back as written.
    let assoc_ctx = support::ctx("eks_pod_identity_association.trainer", config.clone());
    let assoc = json!({
        "cluster": "ml",
        "namespace": "training",
        "service_account": "trainer",
        "role_arn": "arn:aws:iam::123456789012:role/trainer",
        "tags": {"team": "ml"},
    });
    assert!(assocs.validate(&assoc_full(&assoc), &config).is_empty());
    assert_eq!(assocs.planned_id(&assoc_full(&assoc), &config), None);
    let made = assocs.create(&assoc_ctx, &assoc_full(&assoc)).await?;
    let association_id = made.outputs["association_id"]
        .as_str()
        .expect("an association id")
        .to_string();
    assert!(association_id.starts_with("a-"), "{association_id}");
    let id = format!("ml/{association_id}");
    assert_eq!(made.id, id);
    assert_eq!(without_nulls(&made.spec), planned(&assocs, &assoc));
    assert!(
        made.outputs["association_arn"]
            .as_str()
            .is_some_and(|a| a.ends_with(&format!(":podidentityassociation/{id}"))),
        "{}",
        made.outputs["association_arn"]
    );
    let outputs = read_back(&assocs, &assoc_ctx, &id, &assoc).await?;
    assert_eq!(outputs, made.outputs);

    // The role changes in place.
    let mut next = assoc.clone();
    next["role_arn"] = json!("arn:aws:iam::123456789012:role/trainer-next");
    let changed = assocs
        .update(&assoc_ctx, &id, &assoc_full(&assoc), &assoc_full(&next))
        .await?;
    assert_eq!(changed.id, id);
    assert_eq!(without_nulls(&changed.spec), planned(&assocs, &next));
    read_back(&assocs, &assoc_ctx, &id, &next).await?;
    let health = assocs.health(&assoc_ctx, &id, &assoc_full(&next)).await?;
    assert!(
        health.ready && health.summary.ends_with("role/trainer-next"),
        "{health:?}"
    );

    // Again from its own address: adopted; for the same service account from another
    // address: refused, naming the association and `terrain import`.
    let again = assocs.create(&assoc_ctx, &assoc_full(&next)).await?;
    assert_eq!(again.id, id);
    let refused = assocs
        .create(
            &support::ctx("eks_pod_identity_association.other", config.clone()),
            &assoc_full(&next),
        )
        .await
        .expect_err("one association per service account")
        .to_string();
    assert!(
        refused.starts_with("eks:CreatePodIdentityAssociation failed:")
            && refused.contains(&format!(
                "`terrain import eks_pod_identity_association.other {id}`"
            )),
        "{refused}"
    );

    // Deleted: gone at once, and deleting again is fine.
    assocs.delete(&assoc_ctx, &id, &assoc_full(&next)).await?;
    assert!(assocs
        .read(&assoc_ctx, &id, &assoc_full(&next))
        .await?
        .is_none());
    assocs.delete(&assoc_ctx, &id, &assoc_full(&next)).await?;
    addons
        .delete(&addon_ctx, "ml/eks-pod-identity-agent", &addon_full(&agent))
        .await?;
    assert!(addons
        .read(&addon_ctx, "ml/eks-pod-identity-agent", &addon_full(&agent))
        .await?
        .is_none());
    addons
        .delete(&addon_ctx, "ml/eks-pod-identity-agent", &addon_full(&agent))
        .await?;
    clusters.delete(&ctx, "ml", &cluster_full(&cluster)).await?;
    sandbox.shutdown().await;
    Ok(())
}
