//! The IAM chain checked at plan, across the stack's resources: whether each role a
//! cluster, node group or pipeline runs as trusts the service that assumes it, holds
//! the policies that service needs, and (for SageMaker) may read the definition's
//! inputs, write its outputs and use the bucket's KMS key; and whether a pipeline may
//! pass its steps' role. Roles, buckets and keys are usually created by the same stack,
//! so their ARNs are unknown at plan: a role is followed through the reference that
//! names it (`${iam_role.exec.arn}`), a bucket through its name as written.
//!
//! A role of the stack is judged on its own policies (terrain converges them, so they
//! are all of them): a request its policies deny is an error at the role's field to
//! change, naming the resource that needs it and the statement to add. A role that
//! also holds a policy outside the catalog, or a request turning on a condition the
//! plan cannot settle, gives a warning instead. A role given as a literal ARN is
//! outside the stack and not judged.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::access::{evaluate, Decision, Principal, Request};
use super::policy::{self, Document};
use crate::protocol::{is_unknown, StackFinding, StackResource};

/// The account id standing in for one not known until apply: every account id has
/// this shape, so the wildcards of a policy match it as they would the real one.
pub const ACCOUNT_STAND_IN: &str = "000000000000";

/// The region in a KMS key's stand-in ARN (any region matches a policy the same way).
const KMS_REGION_STAND_IN: &str = "us-east-1";

/// A key id standing in for one KMS makes at apply, unique per resource name.
fn key_id_stand_in(name: &str) -> String {
    format!("terrain-planned-{name}")
}

/// The stack's resources by address.
pub struct View<'a> {
    by_address: BTreeMap<&'a str, &'a StackResource>,
}

impl<'a> View<'a> {
    pub fn new(resources: &'a [StackResource]) -> Self {
        Self {
            by_address: resources.iter().map(|r| (r.address.as_str(), r)).collect(),
        }
    }

    pub fn get(&self, address: &str) -> Option<&'a StackResource> {
        self.by_address.get(address).copied()
    }

    pub fn of_kind(&self, kind: &'a str) -> impl Iterator<Item = &'a StackResource> + '_ {
        self.by_address
            .values()
            .copied()
            .filter(move |r| r.kind == kind)
    }

    /// The resource of kind `kind` the value at `path` of `r` references.
    pub fn linked(&self, r: &StackResource, path: &str, kind: &str) -> Option<&'a StackResource> {
        let (address, _) = r.referenced(path)?;
        self.get(address).filter(|t| t.kind == kind)
    }

    /// The resources of kind `kind` that any value of `r` references.
    pub fn referenced_of_kind(&self, r: &StackResource, kind: &str) -> Vec<&'a StackResource> {
        let mut out: Vec<&'a StackResource> = Vec::new();
        for written in r.refs.values() {
            let mut rest = written.as_str();
            while let Some(i) = rest.find("${") {
                let after = &rest[i + 2..];
                let Some(end) = after.find('}') else { break };
                let inner = &after[..end];
                let target = self
                    .by_address
                    .iter()
                    .filter(|(a, t)| t.kind == kind && inner.starts_with(&format!("{a}.")))
                    .max_by_key(|(a, _)| a.len())
                    .map(|(_, t)| *t);
                if let Some(t) = target {
                    if !out.iter().any(|o| o.address == t.address) {
                        out.push(t);
                    }
                }
                rest = &after[end + 1..];
            }
        }
        out
    }

    /// The value at `path` of `r` as text, with references to other resources replaced
    /// by their values where the stack knows them (their spec), an account id by
    /// [`ACCOUNT_STAND_IN`]; `None` when a piece stays unknown.
    pub fn text(&self, r: &StackResource, path: &str) -> Option<String> {
        self.text_at(r, path, 0)
    }

    fn text_at(&self, r: &StackResource, path: &str, depth: usize) -> Option<String> {
        let value = lookup(&r.spec, path);
        if let Some(Value::String(s)) = value {
            if !is_unknown(&Value::String(s.clone())) {
                return Some(s.clone());
            }
        }
        if depth > 8 {
            return None;
        }
        let written = r.refs.get(path)?;
        let mut out = String::new();
        let mut rest = written.as_str();
        while let Some(i) = rest.find("${") {
            out.push_str(&rest[..i]);
            let after = &rest[i + 2..];
            let end = after.find('}')?;
            out.push_str(&self.reference(&after[..end], depth)?);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Some(out.replace("$${", "${"))
    }

    /// The value of one reference `addr.attr` (module and keyed addresses included).
    fn reference(&self, inner: &str, depth: usize) -> Option<String> {
        let (target, attr) = self
            .by_address
            .iter()
            .filter(|(a, _)| inner.starts_with(&format!("{a}.")))
            .max_by_key(|(a, _)| a.len())
            .map(|(a, r)| (*r, &inner[a.len() + 1..]))?;
        if let Some(known) = self.text_at(target, attr, depth + 1) {
            return Some(known);
        }
        self.stand_in(target, attr, depth)
    }

    /// An output not known until apply whose shape the checks know, made from what is
    /// known: the same resource always gets the same stand-in, on every side of a check.
    fn stand_in(&self, target: &StackResource, attr: &str, depth: usize) -> Option<String> {
        let field = |f: &str| self.text_at(target, f, depth + 1);
        let name = target.address.rsplit('.').next().unwrap_or(&target.address);
        match (target.kind.as_str(), attr) {
            ("aws_account", "account_id") => Some(ACCOUNT_STAND_IN.to_string()),
            ("s3_bucket", "arn") => Some(format!("arn:aws:s3:::{}", field("name")?)),
            ("iam_role", "arn") => Some(format!(
                "arn:aws:iam::{ACCOUNT_STAND_IN}:role{}{}",
                field("path").unwrap_or_else(|| "/".to_string()),
                field("name")?
            )),
            ("iam_role", "name") => field("name"),
            ("kms_key", "arn") => Some(format!(
                "arn:aws:kms:{}:{ACCOUNT_STAND_IN}:key/{}",
                KMS_REGION_STAND_IN,
                key_id_stand_in(name)
            )),
            ("kms_key", "key_id") => Some(key_id_stand_in(name)),
            _ => None,
        }
    }
}

/// The value at dotted `path` of `v`.
pub fn lookup<'v>(v: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(v, |v, k| match v {
        Value::Object(m) => m.get(k),
        Value::Array(items) => k.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

/// A role as the checks know it.
struct Role<'a> {
    resource: &'a StackResource,
    name: String,
    arn: String,
    trust: Option<Document>,
    /// (name, document) of every policy it holds that the checks can read.
    policies: Vec<(String, Document)>,
    /// Policies it holds that the checks cannot read (outside the catalog).
    unread: Vec<String>,
    /// The managed policies it holds, by name.
    managed: BTreeSet<String>,
}

impl<'a> Role<'a> {
    fn of(view: &View<'a>, r: &'a StackResource) -> Option<Role<'a>> {
        let name = view.text(r, "name")?;
        let path = view.text(r, "path").unwrap_or_else(|| "/".to_string());
        let trust = r
            .spec
            .get("trust")
            .filter(|t| !is_unknown(t))
            .and_then(|t| policy::trust_document(t).ok());
        let mut policies = Vec::new();
        let mut unread = Vec::new();
        let mut managed = BTreeSet::new();
        let count = |k: &str| r.spec.get(k).and_then(Value::as_array).map_or(0, Vec::len);
        for i in 0..count("managed_policies") {
            let Some(p) = view.text(r, &format!("managed_policies.{i}")) else {
                unread.push(format!("managed_policies.{i}"));
                continue;
            };
            match policy::managed(&p) {
                Some(m) => {
                    managed.insert(m.name.clone());
                    policies.push((m.name.clone(), m.document.clone()));
                }
                None => unread.push(p),
            }
        }
        match statements(view, r) {
            Some(doc) => policies.push((format!("{}.statements", r.address), doc)),
            None => unread.push(format!("{}.statements", r.address)),
        }
        Some(Role {
            resource: r,
            arn: format!("arn:aws:iam::{ACCOUNT_STAND_IN}:role{path}{name}"),
            name,
            trust,
            policies,
            unread,
            managed,
        })
    }

    fn address(&self) -> &str {
        &self.resource.address
    }

    fn may(&self, req: &Request) -> Decision {
        let docs: Vec<(&str, &Document)> =
            self.policies.iter().map(|(n, d)| (n.as_str(), d)).collect();
        evaluate(&docs, req)
    }

    /// Whether the role lets `service` call `action` on it.
    fn trusts(&self, service: &str, action: &str) -> Option<bool> {
        let trust = self.trust.as_ref()?;
        let req = Request::new(action, &self.arn).by(Principal::Service(service.to_string()));
        Some(evaluate(&[("trust", trust)], &req).allowed())
    }
}

/// A role's inline statements with their references followed (`${s3_bucket.b.arn}/*`);
/// `None` when a value stays unknown.
fn statements(view: &View<'_>, r: &StackResource) -> Option<Document> {
    let list = r.spec.get("statements").and_then(Value::as_array)?;
    let mut specs = Vec::new();
    for (i, s) in list.iter().enumerate() {
        let strings = |k: &str| -> Option<Vec<String>> {
            let n = s.get(k).and_then(Value::as_array).map_or(0, Vec::len);
            (0..n)
                .map(|j| view.text(r, &format!("statements.{i}.{k}.{j}")))
                .collect()
        };
        let condition = s.get("condition").filter(|c| !c.is_null()).cloned();
        if condition.as_ref().is_some_and(is_unknown) {
            return None;
        }
        specs.push(policy::StatementSpec {
            actions: strings("actions")?,
            resources: strings("resources")?,
            effect: view.text(r, &format!("statements.{i}.effect"))?,
            condition,
        });
    }
    policy::inline_document(&specs).ok()
}

/// The role a resource's field names, when it is one of the stack's.
fn role_at<'a>(view: &View<'a>, r: &StackResource, path: &str) -> Option<Role<'a>> {
    if let Some(role) = view.linked(r, path, "iam_role") {
        return Role::of(view, role);
    }
    role_named(view, lookup(&r.spec, path)?.as_str()?)
}

/// The stack's role a literal ARN names (by its name: the account is not known).
fn role_named<'a>(view: &View<'a>, arn: &str) -> Option<Role<'a>> {
    let name = arn.strip_prefix("arn:aws:iam::")?.split_once(":role")?.1;
    let name = name.rsplit('/').next()?;
    view.of_kind("iam_role")
        .filter_map(|r| Role::of(view, r))
        .find(|role| role.name == name)
}

/// The stack's checks of its IAM chains.
pub fn check(resources: &[StackResource]) -> Vec<StackFinding> {
    let view = View::new(resources);
    let mut out = Vec::new();
    for cluster in view.of_kind("eks_cluster") {
        if let Some(role) = role_at(&view, cluster, "role_arn") {
            cluster_role(&role, cluster, &mut out);
        }
    }
    for group in view.of_kind("eks_node_group") {
        if let Some(role) = role_at(&view, group, "node_role_arn") {
            node_role(&role, group, &mut out);
        }
    }
    for pipeline in view.of_kind("sagemaker_pipeline") {
        super::pipeline_access::check(&view, pipeline, &mut out);
    }
    out
}

/// A trust the role lacks, as a finding at its `trust`.
pub(super) fn trust_finding(
    role_address: &str,
    user: &str,
    service: &str,
    action: &str,
    why: &str,
) -> StackFinding {
    let preset = policy::preset_for_service(service)
        .map(|p| format!("trust = \"{}\"", p.name))
        .unwrap_or_else(|| format!("trust = {{ services = [\"{service}\"] }}"));
    StackFinding::error(
        role_address,
        "trust",
        format!(
            "{user} needs {service} to assume this role ({why}), but its trust does not allow `{action}` for {service}; use `{preset}`"
        ),
    )
}

/// Checks that `role` trusts `service` for each of `actions` (the first required, the
/// rest warned about).
fn trusts_service(
    role: &Role<'_>,
    user: &str,
    service: &str,
    actions: &[&str],
    why: &str,
    out: &mut Vec<StackFinding>,
) {
    for (i, action) in actions.iter().enumerate() {
        match role.trusts(service, action) {
            Some(false) if i == 0 => {
                out.push(trust_finding(role.address(), user, service, action, why));
                return;
            }
            Some(false) => out.push(StackFinding::warning(
                role.address(),
                "trust",
                format!(
                    "{user}: {service} also calls `{action}` on its roles, which this trust does not allow; add it to the trust's actions (the `{}` preset has it)",
                    policy::preset_for_service(service).map_or(service, |p| p.name)
                ),
            )),
            _ => {}
        }
    }
}

/// A role, for the other check files.
pub(super) struct RoleView<'a>(Role<'a>);

impl<'a> RoleView<'a> {
    pub(super) fn at(view: &View<'a>, r: &StackResource, path: &str) -> Option<RoleView<'a>> {
        role_at(view, r, path).map(RoleView)
    }
    /// The stack's role a literal ARN names.
    pub(super) fn named(view: &View<'a>, arn: &str) -> Option<RoleView<'a>> {
        role_named(view, arn).map(RoleView)
    }
    pub(super) fn address(&self) -> &str {
        self.0.address()
    }
    pub(super) fn arn(&self) -> &str {
        &self.0.arn
    }
    pub(super) fn may(&self, req: &Request) -> Decision {
        self.0.may(req)
    }
    /// Policies it holds that the checks cannot read: a denial may be granted there.
    pub(super) fn unread(&self) -> &[String] {
        &self.0.unread
    }
    /// Checks that the role trusts `service` for `actions` (the first required).
    pub(super) fn trusts_service(
        &self,
        user: &str,
        service: &str,
        actions: &[&str],
        why: &str,
        out: &mut Vec<StackFinding>,
    ) {
        trusts_service(&self.0, user, service, actions, why, out);
    }
}

fn cluster_role(role: &Role<'_>, cluster: &StackResource, out: &mut Vec<StackFinding>) {
    trusts_service(
        role,
        &cluster.address,
        "eks.amazonaws.com",
        &["sts:AssumeRole", "sts:TagSession"],
        "the cluster role",
        out,
    );
    if !role.managed.contains("AmazonEKSClusterPolicy") {
        out.push(StackFinding::error(
            role.address(),
            "managed_policies",
            format!(
                "{} runs as this role, which does not hold AmazonEKSClusterPolicy: EKS needs it to manage the cluster's network interfaces, security groups and load balancers; add \"AmazonEKSClusterPolicy\" to managed_policies",
                cluster.address
            ),
        ));
    }
}

fn node_role(role: &Role<'_>, group: &StackResource, out: &mut Vec<StackFinding>) {
    trusts_service(
        role,
        &group.address,
        "ec2.amazonaws.com",
        &["sts:AssumeRole"],
        "the node role",
        out,
    );
    if !role.managed.contains("AmazonEKSWorkerNodePolicy") {
        out.push(StackFinding::error(
            role.address(),
            "managed_policies",
            format!(
                "{}'s nodes run as this role, which does not hold AmazonEKSWorkerNodePolicy: without it a node cannot join the cluster; add \"AmazonEKSWorkerNodePolicy\" to managed_policies",
                group.address
            ),
        ));
    }
    let pull = [
        "ecr:GetAuthorizationToken",
        "ecr:BatchGetImage",
        "ecr:GetDownloadUrlForLayer",
    ];
    let repository = format!("arn:aws:ecr:*:{ACCOUNT_STAND_IN}:repository/*");
    let denied: Vec<&str> = pull
        .iter()
        .copied()
        .filter(|a| {
            let resource = if *a == "ecr:GetAuthorizationToken" {
                "*"
            } else {
                repository.as_str()
            };
            role.may(&Request::new(a, resource)).denied()
        })
        .collect();
    if !denied.is_empty() {
        let message = format!(
            "{}'s nodes run as this role, which may not pull images from ECR ({} denied): the VPC CNI and every image from ECR fail to start; add \"AmazonEC2ContainerRegistryPullOnly\" (or AmazonEC2ContainerRegistryReadOnly) to managed_policies",
            group.address,
            denied.join(", ")
        );
        out.push(if role.unread.is_empty() {
            StackFinding::error(role.address(), "managed_policies", message)
        } else {
            StackFinding::warning(role.address(), "managed_policies", message)
        });
    }
    if !role.managed.contains("AmazonEKS_CNI_Policy") {
        out.push(StackFinding::warning(
            role.address(),
            "managed_policies",
            format!(
                "{}'s nodes run as this role, which does not hold AmazonEKS_CNI_Policy: pods get no IP addresses unless the aws-node service account has it through pod identity or IRSA",
                group.address
            ),
        ));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn resource(
        kind: &str,
        name: &str,
        spec: Value,
        refs: &[(&str, &str)],
    ) -> StackResource {
        let mut links = BTreeMap::new();
        for (path, text) in refs {
            if let Some(inner) = text.strip_prefix("${").and_then(|t| t.strip_suffix('}')) {
                if !inner.contains("${") {
                    let mut parts: Vec<&str> = inner.split('.').collect();
                    let attr = parts.split_off(2).join(".");
                    links.insert(path.to_string(), (parts.join("."), attr));
                }
            }
        }
        StackResource {
            kind: kind.to_string(),
            address: format!("{kind}.{name}"),
            spec,
            config: Value::Null,
            refs: refs
                .iter()
                .map(|(p, t)| (p.to_string(), t.to_string()))
                .collect(),
            links,
        }
    }

    const U: &str = crate::protocol::UNKNOWN;

    fn role(name: &str, trust: Value, managed: &[&str]) -> StackResource {
        resource(
            "iam_role",
            name,
            json!({"name": name, "path": "/", "trust": trust, "managed_policies": managed,
                   "statements": []}),
            &[],
        )
    }

    fn cluster(role: &str) -> StackResource {
        resource(
            "eks_cluster",
            "ml",
            json!({"name": "ml", "role_arn": U}),
            &[("role_arn", &format!("${{iam_role.{role}.arn}}"))],
        )
    }

    fn group(role: &str) -> StackResource {
        resource(
            "eks_node_group",
            "gpu",
            json!({"name": "gpu", "node_role_arn": U}),
            &[("node_role_arn", &format!("${{iam_role.{role}.arn}}"))],
        )
    }

    fn shown(found: &[StackFinding]) -> Vec<String> {
        found
            .iter()
            .map(|f| format!("{:?} {}.{}: {}", f.severity, f.address, f.path, f.message))
            .collect()
    }

    #[test]
    fn a_cluster_role_created_by_the_stack_must_trust_eks_and_hold_the_cluster_policy() {
        let ok = [
            role("cluster", json!("eks"), &["AmazonEKSClusterPolicy"]),
            cluster("cluster"),
        ];
        assert!(check(&ok).is_empty(), "{:?}", shown(&check(&ok)));
        let wrong = [role("cluster", json!("ec2"), &[]), cluster("cluster")];
        let found = shown(&check(&wrong));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].starts_with(
                "Error iam_role.cluster.trust: eks_cluster.ml needs eks.amazonaws.com"
            ),
            "{found:?}"
        );
        assert!(found[0].contains("use `trust = \"eks\"`"), "{found:?}");
        assert!(found[1].contains("AmazonEKSClusterPolicy"), "{found:?}");
        // Without TagSession it works today, but eksctl writes it and auto mode needs it.
        let no_tag = [
            role(
                "cluster",
                json!({"services": ["eks.amazonaws.com"]}),
                &["AmazonEKSClusterPolicy"],
            ),
            cluster("cluster"),
        ];
        let found = check(&no_tag);
        assert_eq!(found.len(), 1, "{:?}", shown(&found));
        assert_eq!(found[0].severity, crate::Severity::Warning);
        assert!(found[0].message.contains("sts:TagSession"));
    }

    #[test]
    fn a_node_role_needs_the_worker_policy_and_registry_read_and_is_warned_about_cni() {
        let full = [
            role(
                "nodes",
                json!("ec2"),
                &[
                    "AmazonEKSWorkerNodePolicy",
                    "AmazonEKS_CNI_Policy",
                    "AmazonEC2ContainerRegistryPullOnly",
                ],
            ),
            group("nodes"),
        ];
        assert!(check(&full).is_empty(), "{:?}", shown(&check(&full)));
        let bare = [
            role("nodes", json!("ec2"), &["AmazonEKSWorkerNodePolicy"]),
            group("nodes"),
        ];
        let found = shown(&check(&bare));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].starts_with("Error iam_role.nodes.managed_policies"),
            "{found:?}"
        );
        assert!(found[0].contains("ecr:BatchGetImage"), "{found:?}");
        assert!(
            found[1].starts_with("Warning iam_role.nodes.managed_policies"),
            "{found:?}"
        );
        // An inline statement granting the pulls does as well as the managed policy.
        let mut inline = role(
            "nodes",
            json!("ec2"),
            &["AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy"],
        );
        inline.spec["statements"] =
            json!([{"actions": ["ecr:*"], "resources": ["*"], "effect": "Allow"}]);
        assert!(check(&[inline, group("nodes")]).is_empty());
        // A policy outside the catalog may grant it: a warning, not an error.
        let custom = [
            role(
                "nodes",
                json!("ec2"),
                &[
                    "AmazonEKSWorkerNodePolicy",
                    "AmazonEKS_CNI_Policy",
                    "arn:aws:iam::111122223333:policy/pull",
                ],
            ),
            group("nodes"),
        ];
        let found = check(&custom);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].severity, crate::Severity::Warning);
    }

    #[test]
    fn literal_role_arns_outside_the_stack_are_not_judged() {
        let c = resource(
            "eks_cluster",
            "ml",
            json!({"name": "ml", "role_arn": "arn:aws:iam::111122223333:role/made-by-hand"}),
            &[],
        );
        assert!(check(&[c]).is_empty());
    }

    #[test]
    fn values_follow_references_with_a_stand_in_account() {
        let account = resource("aws_account", "current", json!({}), &[]);
        let bucket = resource(
            "s3_bucket",
            "data",
            json!({"name": U}),
            &[("name", "ml-pipelines-${aws_account.current.account_id}")],
        );
        let run = resource(
            "sagemaker_pipeline_execution",
            "run",
            json!({"parameters": {"BucketUri": U}}),
            &[("parameters.BucketUri", "s3://${s3_bucket.data.name}")],
        );
        let all = [account, bucket, run];
        let view = View::new(&all);
        assert_eq!(
            view.text(&all[2], "parameters.BucketUri").as_deref(),
            Some("s3://ml-pipelines-000000000000")
        );
    }
}
