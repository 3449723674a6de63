//! `gcp_service_account` and `gcp_iam_member` against the sandbox's IAM, through the
//! untyped face the engine drives: a new account is waited for until IAM lets it be
//! read; grants racing on one policy each land (a stale etag starts the write again
//! from the read) and never drop another writer's member, nor a binding someone made
//! by hand; destroy takes away only its own member; a Kubernetes service account is
//! granted as the Workload Identity principal of the project's pool.

use serde_json::{json, Value};
use terrain_providers::Ctx;
use terrain_sandbox::{Sandbox, Timing};

const PROJECT: &str = "iam-project";
const BUCKET: &str = "iam-project-runs";

struct Env {
    sandbox: Sandbox,
    gcp: Value,
    _dir: tempfile::TempDir,
}

use crate::support::gcp::kind;

impl Env {
    async fn start(timing: Timing) -> Env {
        let started = crate::support::gcp::start(timing, PROJECT).await;
        Env {
            sandbox: started.sandbox,
            gcp: started.table,
            _dir: started.dir,
        }
    }

    fn ctx(&self, address: &str) -> Ctx {
        Ctx::new(address, self.gcp.clone())
    }

    async fn create(
        &self,
        kind_name: &str,
        address: &str,
        spec: Value,
    ) -> terrain_providers::Observed {
        let k = kind(kind_name);
        let spec = k.schema().with_defaults(&spec);
        k.create(&self.ctx(address), &spec)
            .await
            .unwrap_or_else(|e| panic!("{address} is created: {e}"))
    }

    /// The bucket's policy, as the API answers it.
    async fn bucket_policy(&self) -> Value {
        let url = format!(
            "{}storage/v1/b/{BUCKET}/iam",
            self.sandbox.gcp_endpoints().storage
        );
        reqwest::Client::new()
            .get(url)
            .bearer_auth("sandbox-token")
            .send()
            .await
            .expect("policy read")
            .json()
            .await
            .expect("policy JSON")
    }

    async fn set_bucket_policy(&self, policy: &Value) {
        let url = format!(
            "{}storage/v1/b/{BUCKET}/iam",
            self.sandbox.gcp_endpoints().storage
        );
        let answer = reqwest::Client::new()
            .put(url)
            .bearer_auth("sandbox-token")
            .json(policy)
            .send()
            .await
            .expect("policy written");
        assert!(answer.status().is_success(), "{answer:?}");
    }
}

/// The members of `role` in `policy`.
fn members(policy: &Value, role: &str) -> Vec<String> {
    let mut out: Vec<String> = policy["bindings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["role"] == role)
        .flat_map(|b| b["members"].as_array().cloned().unwrap_or_default())
        .filter_map(|m| m.as_str().map(str::to_string))
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_service_account_is_waited_for_until_iam_can_read_it() {
    // At time scale 1 a new account is unreadable for 2 s, as IAM's are for a moment.
    let env = Env::start(Timing::default()).await;
    let made = env
        .create(
            "gcp_service_account",
            "gcp_service_account.runner",
            json!({"account_id": "pipeline-runner", "display_name": "Runner"}),
        )
        .await;
    assert_eq!(
        made.outputs["email"],
        format!("pipeline-runner@{PROJECT}.iam.gserviceaccount.com")
    );
    assert_eq!(
        made.outputs["member"],
        format!("serviceAccount:pipeline-runner@{PROJECT}.iam.gserviceaccount.com")
    );
    let traffic = env.sandbox.traffic();
    let misses = traffic
        .iter()
        .filter(|x| x.api == "iam" && x.method == "GET" && x.status == 404)
        .count();
    assert!(
        misses > 0,
        "the create read the account before IAM showed it"
    );
    // A create whose answer was lost finds the account there and takes it back.
    let again = env
        .create(
            "gcp_service_account",
            "gcp_service_account.runner",
            json!({"account_id": "pipeline-runner", "display_name": "Runner"}),
        )
        .await;
    assert_eq!(again.id, made.id);
    // One that is someone else's (another display name) is refused, naming the import.
    let k = kind("gcp_service_account");
    let spec = k
        .schema()
        .with_defaults(&json!({"account_id": "pipeline-runner", "display_name": "Theirs"}));
    let err = k
        .create(&env.ctx("gcp_service_account.theirs"), &spec)
        .await
        .expect_err("not ours");
    assert!(
        err.to_string()
            .contains("terrain import gcp_service_account.NAME"),
        "{err}"
    );
    env.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grants_racing_on_one_policy_all_land_and_keep_everyone_elses() {
    let env = Env::start(Timing::instant()).await;
    env.create(
        "gcs_bucket",
        "gcs_bucket.runs",
        json!({"name": BUCKET, "location": "us-central1"}),
    )
    .await;
    // Someone's binding, made by hand.
    let mut policy = env.bucket_policy().await;
    policy["bindings"].as_array_mut().expect("bindings").push(
        json!({"role": "roles/storage.objectViewer", "members": ["user:auditor@example.com"]}),
    );
    env.set_bucket_policy(&policy).await;
    let grant = |i: usize| json!({"role": "roles/storage.objectUser", "member": format!("user:u{i}@example.com"), "bucket": BUCKET});
    let k = kind("gcp_iam_member");
    let creates = (0..8).map(|i| {
        let k = k.clone();
        let spec = k.schema().with_defaults(&grant(i));
        let ctx = env.ctx(&format!("gcp_iam_member.u{i}"));
        async move { k.create(&ctx, &spec).await.expect("granted") }
    });
    let made = futures::future::join_all(creates).await;
    let policy = env.bucket_policy().await;
    let expected: Vec<String> = (0..8).map(|i| format!("user:u{i}@example.com")).collect();
    assert_eq!(
        members(&policy, "roles/storage.objectUser"),
        expected,
        "{policy}"
    );
    assert_eq!(
        members(&policy, "roles/storage.objectViewer"),
        ["user:auditor@example.com"]
    );
    let races = env
        .sandbox
        .traffic()
        .iter()
        .filter(|x| x.api == "storage" && x.method == "PUT" && x.status == 412)
        .count();
    eprintln!("{races} writes lost a race and started again from the read");
    // Each reads back as there; half are destroyed at once, and only they go.
    for (i, m) in made.iter().enumerate() {
        let read = k
            .read(&env.ctx("r"), &m.id, &m.spec)
            .await
            .expect("read")
            .unwrap_or_else(|| panic!("u{i} is granted"));
        assert_eq!(read.outputs["member"], format!("user:u{i}@example.com"));
    }
    let deletes = made.iter().take(4).map(|m| {
        let k = k.clone();
        let ctx = env.ctx("d");
        async move { k.delete(&ctx, &m.id, &m.spec).await.expect("revoked") }
    });
    futures::future::join_all(deletes).await;
    let policy = env.bucket_policy().await;
    assert_eq!(
        members(&policy, "roles/storage.objectUser"),
        expected[4..].to_vec()
    );
    assert_eq!(
        members(&policy, "roles/storage.objectViewer"),
        ["user:auditor@example.com"]
    );
    assert!(k
        .read(&env.ctx("r"), &made[0].id, &made[0].spec)
        .await
        .expect("read")
        .is_none());
    // Deleting again finds nothing to take away.
    k.delete(&env.ctx("d"), &made[0].id, &made[0].spec)
        .await
        .expect("idempotent");
    env.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_service_account_is_granted_as_the_projects_pool_principal() {
    let env = Env::start(Timing::instant()).await;
    let k = kind("gcp_iam_member");
    let spec = k.schema().with_defaults(&json!({
        "role": "roles/container.defaultNodeServiceAccount",
        "kubernetes_service_account": {"cluster": {"project": PROJECT}, "namespace": "kubeflow", "name": "pipeline-runner"},
    }));
    let made = k
        .create(&env.ctx("gcp_iam_member.runner"), &spec)
        .await
        .expect("granted");
    let member = made.outputs["member"].as_str().expect("member").to_string();
    let number = member
        .strip_prefix("principal://iam.googleapis.com/projects/")
        .and_then(|rest| rest.split('/').next())
        .expect("the project number");
    assert!(
        number.len() == 12 && number.chars().all(|c| c.is_ascii_digit()),
        "{member}"
    );
    assert!(
        member.ends_with(&format!("/locations/global/workloadIdentityPools/{PROJECT}.svc.id.goog/subject/ns/kubeflow/sa/pipeline-runner")),
        "{member}"
    );
    // On the project's policy, beside the owner's binding.
    let url = format!(
        "{}v3/projects/{PROJECT}:getIamPolicy",
        env.sandbox.gcp_endpoints().cloudresourcemanager
    );
    let policy: Value = reqwest::Client::new()
        .post(url)
        .bearer_auth("sandbox-token")
        .json(&json!({}))
        .send()
        .await
        .expect("policy read")
        .json()
        .await
        .expect("policy JSON");
    assert_eq!(
        members(&policy, "roles/container.defaultNodeServiceAccount"),
        [member]
    );
    assert_eq!(members(&policy, "roles/owner"), ["user:owner@example.com"]);
    env.sandbox.shutdown().await;
}
