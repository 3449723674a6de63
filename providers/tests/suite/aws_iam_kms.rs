//! The `iam_role`, `kms_key` and `aws_account` kinds end to end against moto (the
//! third-party AWS emulator), through hand-signed IAM (query protocol), KMS (JSON 1.1)
//! and STS (query protocol) calls.
//!
//! iam_role: create → read (trust and policies as written) → update (a policy attached
//! and one detached, the inline policy changed, the description and session length) →
//! read → delete → read is None → delete again Ok; a role with a policy attached outside
//! terrain is deleted all the same; a create whose answer was lost (create twice)
//! adopts the role instead of making another, and a same-named role terrain did not make
//! is refused. kms_key: create with an alias and rotation → read → update (rotation off,
//! the alias renamed, tags) → delete schedules the deletion and says until when it can be
//! cancelled → read is None → delete again Ok; an interrupted create is adopted, by its
//! alias and by its tags alone. aws_account: moto's account.

use crate::support::aws as support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{json, Value};
use terrain_providers::aws::aws_account::AwsAccount;
use terrain_providers::aws::iam_role::{IamRole, Spec as RoleSpec};
use terrain_providers::aws::kms_key::{KmsKey, Spec as KeySpec};
use terrain_providers::aws::signed::{Signed, IAM, KMS};
use terrain_providers::{Ctx, Kind, ProviderError};

/// moto's fixed account id.
const ACCOUNT: &str = "123456789012";

/// A context that keeps the progress messages it is sent.
fn recording(address: &str, url: &str) -> (Ctx, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let ctx =
        support::ctx(address, support::config(url)).with_reporter(Arc::new(move |m: &str| {
            sink.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(m.to_string())
        }));
    (ctx, seen)
}

fn role_spec(name: &str) -> RoleSpec {
    serde_json::from_value(json!({
        "name": name,
        "path": "/ml/",
        "description": "the EKS control plane",
        "trust": "eks",
        "managed_policies": ["AmazonEKSClusterPolicy", "AmazonEKSVPCResourceController"],
        "statements": [{"actions": ["s3:GetObject"], "resources": ["arn:aws:s3:::data/*"]}],
        "max_session": "1h",
        "tags": {"team": "ml"},
    }))
    .expect("a role spec")
}

fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn signed(ctx: &Ctx) -> Arc<Signed> {
    Signed::for_run(ctx, "test", 3).await.expect("a client")
}

/// The managed policies IAM lists on `role`, by ARN, sorted.
async fn attached(ctx: &Ctx, role: &str) -> Vec<String> {
    let s = signed(ctx).await;
    let root = s
        .query(
            &IAM,
            "us-east-1",
            "ListAttachedRolePolicies",
            "2010-05-08",
            &params(&[("RoleName", role)]),
        )
        .await
        .expect("listed");
    let mut out: Vec<String> = root
        .find_at(&["ListAttachedRolePoliciesResult", "AttachedPolicies"])
        .map(|l| {
            l.all("member")
                .filter_map(|m| m.text("PolicyArn").map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[tokio::test]
async fn iam_roles_against_moto() -> Result<(), ProviderError> {
    let moto = support::Moto::start_with_managed_policies();
    let (ctx, _) = recording("iam_role.cluster", &moto.url);
    let spec = role_spec("ml-cluster");

    let created = IamRole.create(&ctx, &spec).await?;
    assert_eq!(created.id, "ml-cluster");
    assert_eq!(created.spec, spec);
    assert_eq!(
        created.outputs.arn,
        format!("arn:aws:iam::{ACCOUNT}:role/ml/ml-cluster")
    );
    assert_eq!(created.outputs.name, "ml-cluster");
    assert!(
        created.outputs.unique_id.starts_with("AROA"),
        "{:?}",
        created.outputs
    );

    // Read in the stack's own spelling: the preset, the policy names, the statements.
    let read = IamRole
        .read(&ctx, "ml-cluster", Some(&spec))
        .await?
        .expect("the role exists");
    assert_eq!(read.spec, spec, "read equals spec");
    assert_eq!(read.outputs, created.outputs);
    // On import, with nothing to spell by, the same role reads the same way.
    let imported = IamRole
        .read(&ctx, "ml-cluster", None)
        .await?
        .expect("the role exists");
    assert_eq!(imported.spec.trust, json!("eks"));
    assert_eq!(
        imported.spec.managed_policies,
        vec!["AmazonEKSClusterPolicy", "AmazonEKSVPCResourceController"]
    );
    assert_eq!(imported.spec.statements, spec.statements);

    // In place: a policy attached and one detached, the inline policy, description,
    // session length, trust and tags.
    let mut changed = spec.clone();
    changed.description = Some("the EKS control plane, with pods".into());
    changed.trust = json!(["eks", "eks-pods"]);
    changed.managed_policies = vec![
        "AmazonEKSClusterPolicy".into(),
        "arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess".into(),
    ];
    changed.statements = serde_json::from_value(json!([
        {"actions": ["s3:GetObject", "s3:ListBucket"], "resources": ["arn:aws:s3:::data", "arn:aws:s3:::data/*"]},
        {"actions": ["kms:Decrypt"], "effect": "Allow"},
    ]))
    .expect("statements");
    changed.max_session = "4h".into();
    changed.tags = BTreeMap::from([("stage".to_string(), "prod".to_string())]);
    let updated = IamRole.update(&ctx, "ml-cluster", &spec, &changed).await?;
    assert_eq!(updated.spec, changed);
    assert_eq!(updated.outputs, created.outputs, "the same role");
    assert_eq!(
        attached(&ctx, "ml-cluster").await,
        vec![
            "arn:aws:iam::aws:policy/AmazonEKSClusterPolicy",
            "arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess",
        ]
    );
    let read = IamRole
        .read(&ctx, "ml-cluster", Some(&changed))
        .await?
        .expect("the role exists");
    assert_eq!(read.spec, changed, "read equals the updated spec");

    // Drift made outside terrain reads as what it is.
    let s = signed(&ctx).await;
    s.query(
        &IAM,
        "us-east-1",
        "AttachRolePolicy",
        "2010-05-08",
        &params(&[
            ("RoleName", "ml-cluster"),
            (
                "PolicyArn",
                "arn:aws:iam::aws:policy/AmazonEKSServicePolicy",
            ),
        ]),
    )
    .await?;
    let drifted = IamRole
        .read(&ctx, "ml-cluster", Some(&changed))
        .await?
        .expect("the role exists");
    assert_eq!(
        drifted.spec.managed_policies,
        vec![
            "AmazonEKSClusterPolicy",
            "arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess",
            "AmazonEKSServicePolicy",
        ]
    );
    // Applying the stack again detaches it.
    IamRole
        .update(&ctx, "ml-cluster", &changed, &changed)
        .await?;
    assert_eq!(attached(&ctx, "ml-cluster").await.len(), 2);

    // Delete, with a policy attached outside terrain and an inline one of another name.
    s.query(
        &IAM,
        "us-east-1",
        "AttachRolePolicy",
        "2010-05-08",
        &params(&[
            ("RoleName", "ml-cluster"),
            (
                "PolicyArn",
                "arn:aws:iam::aws:policy/AmazonEKSServicePolicy",
            ),
        ]),
    )
    .await?;
    s.query(
        &IAM,
        "us-east-1",
        "PutRolePolicy",
        "2010-05-08",
        &params(&[
            ("RoleName", "ml-cluster"),
            ("PolicyName", "by-hand"),
            (
                "PolicyDocument",
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:ListAllMyBuckets","Resource":"*"}]}"#,
            ),
        ]),
    )
    .await?;
    IamRole.delete(&ctx, "ml-cluster", Some(&changed)).await?;
    assert!(IamRole
        .read(&ctx, "ml-cluster", Some(&changed))
        .await?
        .is_none());
    IamRole.delete(&ctx, "ml-cluster", Some(&changed)).await?;
    IamRole.delete(&ctx, "ml-cluster", None).await?;
    Ok(())
}

#[tokio::test]
async fn an_interrupted_role_create_adopts_rather_than_duplicates() -> Result<(), ProviderError> {
    let moto = support::Moto::start_with_managed_policies();
    let (ctx, seen) = recording("iam_role.nodes", &moto.url);
    let spec = role_spec("ml-nodes");
    let first = IamRole.create(&ctx, &spec).await?;
    // The answer was lost: the engine creates again, with the spec changed meanwhile.
    let mut again = spec.clone();
    again.managed_policies = vec!["AmazonEKSWorkerNodePolicy".into()];
    let second = IamRole.create(&ctx, &again).await?;
    assert_eq!(second.outputs, first.outputs, "the same role, adopted");
    assert!(
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|m| m.contains("adopting the role")),
        "{seen:?}"
    );
    assert_eq!(
        attached(&ctx, "ml-nodes").await,
        vec!["arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy"]
    );
    let read = IamRole
        .read(&ctx, "ml-nodes", Some(&again))
        .await?
        .expect("exists");
    assert_eq!(read.spec, again);

    // Another address's create of the same name is refused, naming the import.
    let (other, _) = recording("iam_role.other", &moto.url);
    let e = IamRole.create(&other, &spec).await.expect_err("not ours");
    let text = e.to_string();
    assert!(
        text.contains("role ml-nodes already exists and was not created by iam_role.other")
            && text.contains("terrain import iam_role.other ml-nodes"),
        "{text}"
    );
    IamRole.delete(&ctx, "ml-nodes", Some(&again)).await?;
    Ok(())
}

fn key_spec(alias: &str) -> KeySpec {
    serde_json::from_value(json!({
        "description": "training data",
        "deletion_window_days": 7,
        "rotation": true,
        "alias": alias,
        "tags": {"team": "ml"},
    }))
    .expect("a key spec")
}

async fn key_state(ctx: &Ctx, id: &str) -> String {
    let s = signed(ctx).await;
    let answer = s
        .json11(&KMS, "us-east-1", "DescribeKey", &json!({"KeyId": id}))
        .await
        .expect("described");
    answer["KeyMetadata"]["KeyState"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn aliases(ctx: &Ctx) -> Vec<(String, Option<String>)> {
    let s = signed(ctx).await;
    let answer = s
        .json11(&KMS, "us-east-1", "ListAliases", &json!({}))
        .await
        .expect("listed");
    let mut out: Vec<(String, Option<String>)> = answer["Aliases"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|a| {
                    let name = a["AliasName"].as_str()?;
                    // moto lists the AWS managed keys' aliases too.
                    (!name.starts_with("alias/aws/")).then(|| {
                        (
                            name.to_string(),
                            a["TargetKeyId"].as_str().map(str::to_string),
                        )
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[tokio::test]
async fn kms_keys_against_moto() -> Result<(), ProviderError> {
    let moto = support::Moto::start();
    let (ctx, seen) = recording("kms_key.data", &moto.url);
    // Written without its prefix: read keeps the stack's spelling.
    let spec = key_spec("ml/data");

    let created = KmsKey.create(&ctx, &spec).await?;
    let id = created.id.clone();
    assert_eq!(created.outputs.key_id, id);
    assert_eq!(
        created.outputs.arn,
        format!("arn:aws:kms:us-east-1:{ACCOUNT}:key/{id}")
    );
    assert_eq!(
        created.outputs.alias_arn.as_deref(),
        Some(format!("arn:aws:kms:us-east-1:{ACCOUNT}:alias/ml/data").as_str())
    );
    let read = KmsKey.read(&ctx, &id, Some(&spec)).await?.expect("exists");
    assert_eq!(read.spec, spec, "read equals spec");
    assert_eq!(read.outputs, created.outputs);
    assert_eq!(
        aliases(&ctx).await,
        vec![("alias/ml/data".to_string(), Some(id.clone()))]
    );

    // In place: rotation off, the alias renamed, description and tags.
    let mut changed = spec.clone();
    changed.rotation = false;
    changed.alias = Some("alias/ml/datasets".into());
    changed.description = "training datasets".into();
    changed.tags = BTreeMap::from([("stage".to_string(), "prod".to_string())]);
    let updated = KmsKey.update(&ctx, &id, &spec, &changed).await?;
    assert_eq!(updated.spec, changed);
    assert_eq!(
        updated.outputs.alias_arn.as_deref(),
        Some(format!("arn:aws:kms:us-east-1:{ACCOUNT}:alias/ml/datasets").as_str())
    );
    let read = KmsKey
        .read(&ctx, &id, Some(&changed))
        .await?
        .expect("exists");
    assert_eq!(read.spec, changed, "read equals the updated spec");
    assert_eq!(
        aliases(&ctx).await,
        vec![("alias/ml/datasets".to_string(), Some(id.clone()))],
        "renamed, not duplicated"
    );

    // Delete schedules the deletion after the window and says until when.
    KmsKey.delete(&ctx, &id, Some(&changed)).await?;
    assert_eq!(key_state(&ctx, &id).await, "PendingDeletion");
    assert!(aliases(&ctx).await.is_empty(), "the alias went first");
    let said = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert!(
        said.iter().any(
            |m| m.contains(&format!("key {id} is scheduled for deletion on 20"))
                && m.contains(&format!("aws kms cancel-key-deletion --key-id {id}"))
        ),
        "{said:?}"
    );
    assert!(KmsKey.read(&ctx, &id, Some(&changed)).await?.is_none());
    KmsKey.delete(&ctx, &id, Some(&changed)).await?;
    KmsKey
        .delete(&ctx, "00000000-0000-0000-0000-000000000000", None)
        .await?;
    Ok(())
}

#[tokio::test]
async fn an_interrupted_key_create_adopts_rather_than_duplicates() -> Result<(), ProviderError> {
    let moto = support::Moto::start();
    let (ctx, _) = recording("kms_key.models", &moto.url);
    // Found by its alias.
    let spec = key_spec("models");
    let first = KmsKey.create(&ctx, &spec).await?;
    let second = KmsKey.create(&ctx, &spec).await?;
    assert_eq!(second.id, first.id, "adopted by its alias");
    // Found by its tags alone, when the alias was never made.
    let (bare_ctx, _) = recording("kms_key.bare", &moto.url);
    let bare: KeySpec =
        serde_json::from_value(json!({"rotation": false})).expect("a bare key spec");
    let one = KmsKey.create(&bare_ctx, &bare).await?;
    let again = KmsKey.create(&bare_ctx, &bare).await?;
    assert_eq!(again.id, one.id, "adopted by its tags");
    // A key pending deletion is not adopted: a new one is made.
    KmsKey.delete(&bare_ctx, &one.id, Some(&bare)).await?;
    let fresh = KmsKey.create(&bare_ctx, &bare).await?;
    assert_ne!(fresh.id, one.id);

    // Another address's alias is not taken over.
    let (other, _) = recording("kms_key.other", &moto.url);
    let e = KmsKey
        .create(&other, &key_spec("models"))
        .await
        .expect_err("the alias is another key's");
    assert!(
        e.to_string().contains("alias/models already names key"),
        "{e}"
    );
    // A key of this address pending deletion gives its alias up to the new key.
    KmsKey.delete(&ctx, &first.id, Some(&spec)).await?;
    let replaced = KmsKey.create(&ctx, &spec).await?;
    assert_ne!(replaced.id, first.id);
    assert!(aliases(&ctx)
        .await
        .contains(&("alias/models".to_string(), Some(replaced.id.clone()))));
    Ok(())
}

#[tokio::test]
async fn the_account_is_the_one_the_credentials_belong_to() -> Result<(), ProviderError> {
    let moto = support::Moto::start();
    let ctx = support::ctx("aws_account.current", support::config(&moto.url));
    let spec: terrain_providers::aws::aws_account::Spec =
        serde_json::from_value(Value::Object(Default::default())).expect("an empty table");
    let created = AwsAccount.create(&ctx, &spec).await?;
    assert_eq!(created.id, ACCOUNT);
    assert_eq!(created.outputs.account_id, ACCOUNT);
    assert_eq!(created.outputs.partition, "aws");
    assert!(
        created.outputs.arn.starts_with(&format!("arn:aws:")),
        "{:?}",
        created.outputs
    );
    let read = AwsAccount
        .read(&ctx, ACCOUNT, Some(&spec))
        .await?
        .expect("the account");
    assert_eq!(read.outputs, created.outputs);
    AwsAccount.delete(&ctx, ACCOUNT, Some(&spec)).await?;
    assert!(AwsAccount.read(&ctx, ACCOUNT, None).await?.is_some());
    Ok(())
}
