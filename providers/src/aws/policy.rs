//! IAM policy documents as values: the document model (statements with their actions,
//! resources, principals and conditions, read in every form IAM accepts: a string or a
//! list, `Action` or `NotAction`, `"*"` principals), the trust presets `iam_role`'s
//! `trust` names (`"eks"`, `"ec2"`, `"sagemaker"`, `"eks-capabilities"`, `"eks-pods"`)
//! and the catalog of AWS managed policies the checks and the sandbox read.
//!
//! The catalog is `providers/data/aws-managed-policies.json`: the EKS, ECR, SageMaker,
//! S3, CSI-driver and job-function policies, copied with `scripts/managed-policies.py`
//! from the catalog moto ships, whose version and sha256 the file records. A policy
//! outside it is unknown to the checks, which then say less, never more.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::schema::Fields;

/// The policy language version every document terrain writes declares.
pub const VERSION: &str = "2012-10-17";

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Allow,
    Deny,
}

/// Who a statement of a trust (resource) policy applies to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Principals {
    /// `"Principal": "*"` (or `{"AWS": "*"}`): anyone.
    pub anyone: bool,
    /// `Service` principals (`eks.amazonaws.com`).
    pub services: Vec<String>,
    /// `AWS` principals (account ids, `arn:aws:iam::111122223333:root`, role ARNs).
    pub aws: Vec<String>,
    /// `Federated` principals (an OIDC provider's ARN).
    pub federated: Vec<String>,
}

/// One condition: `operator` (`StringEquals`, `ForAnyValue:StringLike`,
/// `ArnLikeIfExists`…) on `key` with `values`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub operator: String,
    pub key: String,
    pub values: Vec<String>,
}

/// One statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub sid: Option<String>,
    pub effect: Effect,
    /// `Principal` (trust policies); `None` in identity policies.
    pub principal: Option<Principals>,
    /// `NotPrincipal`.
    pub not_principal: Option<Principals>,
    /// `Action` patterns; empty when the statement uses `NotAction`.
    pub actions: Vec<String>,
    pub not_actions: Vec<String>,
    /// `Resource` patterns; both empty in a trust policy (the role is the resource).
    pub resources: Vec<String>,
    pub not_resources: Vec<String>,
    /// Every condition must hold.
    pub conditions: Vec<Condition>,
}

/// A policy document.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Document {
    pub statements: Vec<Statement>,
}

/// A string or a list of strings, as IAM writes single values.
fn strings(v: &Value, what: &str) -> Result<Vec<String>, String> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok(s.clone()),
                Value::Bool(b) => Ok(b.to_string()),
                Value::Number(n) => Ok(n.to_string()),
                _ => Err(format!("{what} must be strings")),
            })
            .collect(),
        Value::Bool(b) => Ok(vec![b.to_string()]),
        Value::Number(n) => Ok(vec![n.to_string()]),
        _ => Err(format!("{what} must be a string or a list of strings")),
    }
}

fn principals(v: &Value) -> Result<Principals, String> {
    match v {
        Value::String(s) if s == "*" => Ok(Principals {
            anyone: true,
            ..Principals::default()
        }),
        Value::Object(map) => {
            let mut p = Principals::default();
            for (k, v) in map {
                let values = strings(v, "principals")?;
                match k.as_str() {
                    "Service" => p.services = values,
                    "AWS" => {
                        p.anyone |= values.iter().any(|v| v == "*");
                        p.aws = values;
                    }
                    "Federated" => p.federated = values,
                    "CanonicalUser" => {}
                    other => return Err(format!("unknown principal type `{other}`")),
                }
            }
            Ok(p)
        }
        _ => Err("Principal must be \"*\" or a table of principal types".to_string()),
    }
}

fn conditions(v: &Value) -> Result<Vec<Condition>, String> {
    let Value::Object(ops) = v else {
        return Err("Condition must be a table of operators".to_string());
    };
    let mut out = Vec::new();
    for (operator, keys) in ops {
        let Value::Object(keys) = keys else {
            return Err(format!("condition `{operator}` must be a table of keys"));
        };
        for (key, values) in keys {
            out.push(Condition {
                operator: operator.clone(),
                key: key.clone(),
                values: strings(values, "condition values")?,
            });
        }
    }
    Ok(out)
}

impl Statement {
    /// One statement as IAM's JSON has it.
    pub fn parse(v: &Value) -> Result<Statement, String> {
        let Value::Object(map) = v else {
            return Err("a statement must be a table".to_string());
        };
        let list = |key: &str| -> Result<Vec<String>, String> {
            map.get(key).map_or(Ok(Vec::new()), |v| strings(v, key))
        };
        let effect = match map.get("Effect").and_then(Value::as_str) {
            Some("Allow") => Effect::Allow,
            Some("Deny") => Effect::Deny,
            Some(other) => return Err(format!("Effect must be Allow or Deny, not `{other}`")),
            None => return Err("a statement needs an Effect".to_string()),
        };
        let actions = list("Action")?;
        let not_actions = list("NotAction")?;
        if actions.is_empty() == not_actions.is_empty() {
            return Err("a statement needs exactly one of Action and NotAction".to_string());
        }
        Ok(Statement {
            sid: map.get("Sid").and_then(Value::as_str).map(str::to_string),
            effect,
            principal: map.get("Principal").map(principals).transpose()?,
            not_principal: map.get("NotPrincipal").map(principals).transpose()?,
            actions,
            not_actions,
            resources: list("Resource")?,
            not_resources: list("NotResource")?,
            conditions: map
                .get("Condition")
                .map(conditions)
                .transpose()?
                .unwrap_or_default(),
        })
    }

    /// The statement as IAM's JSON: single values as strings, as the console shows them.
    pub fn to_value(&self) -> Value {
        let one_or_many = |v: &[String]| {
            if v.len() == 1 {
                Value::String(v[0].clone())
            } else {
                json!(v)
            }
        };
        let mut m = Map::new();
        if let Some(sid) = &self.sid {
            m.insert("Sid".into(), json!(sid));
        }
        m.insert(
            "Effect".into(),
            json!(match self.effect {
                Effect::Allow => "Allow",
                Effect::Deny => "Deny",
            }),
        );
        let principal = |p: &Principals| {
            if p.anyone && p.services.is_empty() && p.federated.is_empty() {
                return json!("*");
            }
            let mut pm = Map::new();
            if !p.aws.is_empty() {
                pm.insert("AWS".into(), one_or_many(&p.aws));
            }
            if !p.federated.is_empty() {
                pm.insert("Federated".into(), one_or_many(&p.federated));
            }
            if !p.services.is_empty() {
                pm.insert("Service".into(), one_or_many(&p.services));
            }
            Value::Object(pm)
        };
        if let Some(p) = &self.principal {
            m.insert("Principal".into(), principal(p));
        }
        if let Some(p) = &self.not_principal {
            m.insert("NotPrincipal".into(), principal(p));
        }
        if !self.actions.is_empty() {
            m.insert("Action".into(), one_or_many(&self.actions));
        }
        if !self.not_actions.is_empty() {
            m.insert("NotAction".into(), one_or_many(&self.not_actions));
        }
        if !self.resources.is_empty() {
            m.insert("Resource".into(), one_or_many(&self.resources));
        }
        if !self.not_resources.is_empty() {
            m.insert("NotResource".into(), one_or_many(&self.not_resources));
        }
        if !self.conditions.is_empty() {
            let mut ops: Map<String, Value> = Map::new();
            for c in &self.conditions {
                let keys = ops
                    .entry(c.operator.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(keys) = keys {
                    keys.insert(c.key.clone(), one_or_many(&c.values));
                }
            }
            m.insert("Condition".into(), Value::Object(ops));
        }
        Value::Object(m)
    }
}

impl Document {
    /// A document as IAM's JSON has it (`{"Version": …, "Statement": [...]}`; one
    /// statement may stand without its list).
    pub fn parse(v: &Value) -> Result<Document, String> {
        let Value::Object(map) = v else {
            return Err("a policy document must be a JSON object".to_string());
        };
        let statements = match map.get("Statement") {
            Some(Value::Array(items)) => items
                .iter()
                .map(Statement::parse)
                .collect::<Result<_, _>>()?,
            Some(one @ Value::Object(_)) => vec![Statement::parse(one)?],
            _ => return Err("a policy document needs a Statement".to_string()),
        };
        Ok(Document { statements })
    }

    /// A document from its JSON text (IAM answers URL-encoded text; decode first).
    pub fn parse_text(text: &str) -> Result<Document, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        Self::parse(&v)
    }

    /// The document as IAM's JSON.
    pub fn to_value(&self) -> Value {
        json!({
            "Version": VERSION,
            "Statement": self.statements.iter().map(Statement::to_value).collect::<Vec<_>>(),
        })
    }
}

/// A statement of `iam_role`'s inline policy as the stack writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct StatementSpec {
    /// Actions allowed (or denied), `service:Action`; `*` matches any characters.
    pub actions: Vec<String>,
    /// Resource ARNs the actions apply to; `*` matches any characters.
    #[serde(default = "every_resource")]
    pub resources: Vec<String>,
    /// `Allow` or `Deny`.
    #[serde(default = "allow")]
    pub effect: String,
    /// Conditions, as IAM writes them: `{ StringEquals = { "iam:PassedToService" =
    /// "sagemaker.amazonaws.com" } }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[terrain(any)]
    pub condition: Option<Value>,
}

fn every_resource() -> Vec<String> {
    vec!["*".to_string()]
}

fn allow() -> String {
    "Allow".to_string()
}

impl StatementSpec {
    /// The statement in the policy model; `Err` says what is wrong with it.
    pub fn statement(&self) -> Result<Statement, String> {
        let mut v = json!({
            "Effect": self.effect,
            "Action": self.actions,
            "Resource": self.resources,
        });
        if let Some(c) = &self.condition {
            v["Condition"] = c.clone();
        }
        Statement::parse(&v)
    }
}

/// The document of an inline policy made of `statements`.
pub fn inline_document(statements: &[StatementSpec]) -> Result<Document, String> {
    Ok(Document {
        statements: statements
            .iter()
            .map(StatementSpec::statement)
            .collect::<Result<_, _>>()?,
    })
}

/// A service a trust preset names, and the actions that service uses on the role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    pub name: &'static str,
    pub service: &'static str,
    pub actions: &'static [&'static str],
}

/// The trust presets: the service principal each AWS service assumes roles as, with
/// the actions it calls (EKS, its capabilities and pod identity also tag the session).
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "eks",
        service: "eks.amazonaws.com",
        actions: &["sts:AssumeRole", "sts:TagSession"],
    },
    Preset {
        name: "ec2",
        service: "ec2.amazonaws.com",
        actions: &["sts:AssumeRole"],
    },
    Preset {
        name: "sagemaker",
        service: "sagemaker.amazonaws.com",
        actions: &["sts:AssumeRole"],
    },
    Preset {
        name: "eks-capabilities",
        service: "capabilities.eks.amazonaws.com",
        actions: &["sts:AssumeRole", "sts:TagSession"],
    },
    Preset {
        name: "eks-pods",
        service: "pods.eks.amazonaws.com",
        actions: &["sts:AssumeRole", "sts:TagSession"],
    },
];

/// The preset named `name`.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The preset whose service is `service`.
pub fn preset_for_service(service: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.service == service)
}

/// `iam_role`'s `trust`: a preset's name, a list of them, or a table of explicit
/// principals (`services`, `accounts`, `federated`) with `actions` and an optional
/// `condition`, made into the role's trust policy.
pub fn trust_document(trust: &Value) -> Result<Document, String> {
    let from_preset = |name: &str| -> Result<Statement, String> {
        let p = preset(name).ok_or_else(|| {
            format!(
                "unknown trust `{name}`; one of {}, or a table {{ services = [...], actions = [...] }}",
                PRESETS
                    .iter()
                    .map(|p| format!("`{}`", p.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
        Ok(Statement {
            sid: None,
            effect: Effect::Allow,
            principal: Some(Principals {
                services: vec![p.service.to_string()],
                ..Principals::default()
            }),
            not_principal: None,
            actions: p.actions.iter().map(|a| a.to_string()).collect(),
            not_actions: Vec::new(),
            resources: Vec::new(),
            not_resources: Vec::new(),
            conditions: Vec::new(),
        })
    };
    let statements = match trust {
        Value::String(name) => vec![from_preset(name)?],
        Value::Array(names) => names
            .iter()
            .map(|n| {
                n.as_str()
                    .ok_or_else(|| "a list of trust presets holds names".to_string())
                    .and_then(from_preset)
            })
            .collect::<Result<_, _>>()?,
        Value::Object(map) => {
            for k in map.keys() {
                if !matches!(
                    k.as_str(),
                    "services" | "accounts" | "federated" | "actions" | "condition"
                ) {
                    return Err(format!(
                        "unknown trust key `{k}`; one of `services`, `accounts`, `federated`, `actions`, `condition`"
                    ));
                }
            }
            let list = |k: &str| -> Result<Vec<String>, String> {
                map.get(k).map_or(Ok(Vec::new()), |v| strings(v, k))
            };
            let aws = list("accounts")?
                .into_iter()
                .map(|a| {
                    if a.len() == 12 && a.bytes().all(|b| b.is_ascii_digit()) {
                        format!("arn:aws:iam::{a}:root")
                    } else {
                        a
                    }
                })
                .collect::<Vec<_>>();
            let p = Principals {
                anyone: aws.iter().any(|a| a == "*"),
                services: list("services")?,
                aws,
                federated: list("federated")?,
            };
            if p.services.is_empty() && p.aws.is_empty() && p.federated.is_empty() {
                return Err(
                    "a trust table names at least one of `services`, `accounts`, `federated`"
                        .to_string(),
                );
            }
            let mut actions = list("actions")?;
            if actions.is_empty() {
                actions = vec![if p.federated.is_empty() {
                    "sts:AssumeRole".to_string()
                } else {
                    "sts:AssumeRoleWithWebIdentity".to_string()
                }];
            }
            vec![Statement {
                sid: None,
                effect: Effect::Allow,
                principal: Some(p),
                not_principal: None,
                actions,
                not_actions: Vec::new(),
                resources: Vec::new(),
                not_resources: Vec::new(),
                conditions: map
                    .get("condition")
                    .map(conditions)
                    .transpose()?
                    .unwrap_or_default(),
            }]
        }
        _ => return Err("trust is a preset's name, a list of them, or a table".to_string()),
    };
    Ok(Document { statements })
}

/// An AWS managed policy of the catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct Managed {
    pub name: String,
    /// `/`, `/service-role/`, `/aws-service-role/`.
    pub path: String,
    pub version: String,
    pub document: Document,
}

impl Managed {
    /// `arn:aws:iam::aws:policy<path><name>`.
    pub fn arn(&self) -> String {
        format!("arn:aws:iam::aws:policy{}{}", self.path, self.name)
    }
}

/// Where the catalog came from, as its file records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    pub source: String,
    pub moto: String,
    pub sha256: String,
}

struct Catalog {
    provenance: Provenance,
    policies: BTreeMap<String, Managed>,
}

static CATALOG_TEXT: &str = include_str!("../../data/aws-managed-policies.json");

static CATALOG: LazyLock<Catalog> = LazyLock::new(|| {
    // A copy checked in next to this file; a test proves every entry reads.
    let v: Value = serde_json::from_str(CATALOG_TEXT).unwrap_or(Value::Null);
    let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut policies = BTreeMap::new();
    if let Some(Value::Object(map)) = v.get("policies") {
        for (name, p) in map {
            let Some(document) = p.get("document").and_then(|d| Document::parse(d).ok()) else {
                continue;
            };
            let field = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            policies.insert(
                name.clone(),
                Managed {
                    name: name.clone(),
                    path: field("path"),
                    version: field("version"),
                    document,
                },
            );
        }
    }
    Catalog {
        provenance: Provenance {
            source: text("source"),
            moto: text("moto"),
            sha256: text("sha256"),
        },
        policies,
    }
});

/// The AWS managed policy named `name_or_arn` (`AmazonEKSClusterPolicy`, or its ARN).
pub fn managed(name_or_arn: &str) -> Option<&'static Managed> {
    let name = name_or_arn
        .strip_prefix("arn:aws:iam::aws:policy/")
        .map_or(name_or_arn, |rest| rest.rsplit('/').next().unwrap_or(rest));
    CATALOG
        .policies
        .get(name)
        .filter(|m| !name_or_arn.starts_with("arn:") || m.arn() == name_or_arn)
}

/// Every managed policy's name, for did-you-means.
pub fn managed_names() -> impl Iterator<Item = &'static str> {
    CATALOG.policies.keys().map(String::as_str)
}

/// Where the catalog came from.
pub fn provenance() -> &'static Provenance {
    &CATALOG.provenance
}

/// The ARN `iam:AttachRolePolicy` takes for `name_or_arn`: an ARN as written, a name of
/// the catalog as its ARN; `Err` for a name the catalog does not know (with a
/// did-you-mean when one is close).
pub fn policy_arn(name_or_arn: &str) -> Result<String, String> {
    if name_or_arn.starts_with("arn:") {
        return if is_policy_arn(name_or_arn) {
            Ok(name_or_arn.to_string())
        } else {
            Err(format!(
                "`{name_or_arn}` is not a policy ARN (arn:aws:iam::<account or aws>:policy/<name>)"
            ))
        };
    }
    if let Some(m) = managed(name_or_arn) {
        return Ok(m.arn());
    }
    let names: Vec<&str> = managed_names().collect();
    let close = crate::kubernetes::catalog::did_you_mean(name_or_arn, &names);
    Err(format!(
        "`{name_or_arn}` is not an AWS managed policy terrain knows{}; write its ARN to attach another policy",
        close.map_or(String::new(), |c| format!(" (did you mean `{c}`?)"))
    ))
}

/// Whether `arn` is shaped as a policy ARN.
pub fn is_policy_arn(arn: &str) -> bool {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    parts.len() == 6
        && parts[0] == "arn"
        && parts[2] == "iam"
        && (parts[4] == "aws"
            || (parts[4].len() == 12 && parts[4].bytes().all(|b| b.is_ascii_digit())))
        && parts[5].starts_with("policy/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catalog_entry_reads_and_records_its_source() {
        let raw: Value = serde_json::from_str(CATALOG_TEXT).expect("json");
        let listed = raw["policies"].as_object().expect("policies").len();
        assert_eq!(CATALOG.policies.len(), listed, "every policy parses");
        assert!(listed > 50);
        let p = provenance();
        assert_eq!(p.source, "moto/iam/aws_managed_policies.py");
        assert_eq!(p.sha256.len(), 64);
        for name in [
            "AmazonEKSClusterPolicy",
            "AmazonEKSWorkerNodePolicy",
            "AmazonEKS_CNI_Policy",
            "AmazonEC2ContainerRegistryReadOnly",
            "AmazonEC2ContainerRegistryPullOnly",
            "AmazonSageMakerFullAccess",
            "AmazonS3FullAccess",
        ] {
            assert!(managed(name).is_some(), "{name}");
        }
    }

    #[test]
    fn policy_names_become_arns_with_their_paths() {
        assert_eq!(
            policy_arn("AmazonEKSClusterPolicy").expect("known"),
            "arn:aws:iam::aws:policy/AmazonEKSClusterPolicy"
        );
        let arn = "arn:aws:iam::aws:policy/AmazonEKSClusterPolicy";
        assert_eq!(
            managed(arn).map(|m| m.name.as_str()),
            Some("AmazonEKSClusterPolicy")
        );
        assert_eq!(policy_arn(arn).expect("arn"), arn);
        let own = "arn:aws:iam::111122223333:policy/team/ReadData";
        assert_eq!(policy_arn(own).expect("arn"), own);
        let e = policy_arn("AmazonEKSClusterPolicyy").expect_err("unknown");
        assert!(e.contains("did you mean `AmazonEKSClusterPolicy`"), "{e}");
        let e = policy_arn("arn:aws:iam::123:role/x").expect_err("not a policy");
        assert!(e.contains("not a policy ARN"), "{e}");
        // A service-role policy's ARN carries its path.
        let sr = managed("AmazonEKSServiceRolePolicy").expect("known");
        assert!(sr.arn().contains("/aws-service-role/"), "{}", sr.arn());
    }

    #[test]
    fn documents_read_every_form_and_write_back() {
        let d = Document::parse(&json!({
            "Version": VERSION,
            "Statement": {"Effect": "Allow", "Principal": {"Service": "eks.amazonaws.com"},
                          "Action": ["sts:AssumeRole", "sts:TagSession"]}
        }))
        .expect("parses");
        assert_eq!(d.statements.len(), 1);
        assert_eq!(
            d.statements[0]
                .principal
                .as_ref()
                .map(|p| p.services.clone()),
            Some(vec!["eks.amazonaws.com".to_string()])
        );
        let again = Document::parse(&d.to_value()).expect("round trip");
        assert_eq!(again, d);
        let e =
            Document::parse(&json!({"Statement": [{"Effect": "Allow"}]})).expect_err("no action");
        assert!(e.contains("Action"), "{e}");
        let e = Document::parse(&json!({"Statement": [{"Effect": "Permit", "Action": "*"}]}))
            .expect_err("effect");
        assert!(e.contains("Allow or Deny"), "{e}");
    }

    #[test]
    fn trust_presets_and_tables_make_trust_policies() {
        let eks = trust_document(&json!("eks")).expect("preset");
        let s = &eks.statements[0];
        assert_eq!(s.actions, vec!["sts:AssumeRole", "sts:TagSession"]);
        let both = trust_document(&json!(["ec2", "eks-pods"])).expect("presets");
        assert_eq!(both.statements.len(), 2);
        let table = trust_document(&json!({"accounts": ["111122223333"]})).expect("table");
        assert_eq!(
            table.statements[0]
                .principal
                .as_ref()
                .map(|p| p.aws.clone()),
            Some(vec!["arn:aws:iam::111122223333:root".to_string()])
        );
        assert_eq!(table.statements[0].actions, vec!["sts:AssumeRole"]);
        let e = trust_document(&json!("ekz")).expect_err("unknown");
        assert!(e.contains("`eks`"), "{e}");
        let e = trust_document(&json!({"service": ["x"]})).expect_err("key");
        assert!(e.contains("unknown trust key `service`"), "{e}");
    }

    #[test]
    fn statement_specs_default_to_allow_on_everything() {
        let s: StatementSpec =
            serde_json::from_value(json!({"actions": ["s3:GetObject"]})).expect("decodes");
        let st = s.statement().expect("valid");
        assert_eq!(st.effect, Effect::Allow);
        assert_eq!(st.resources, vec!["*"]);
    }
}
