//! The `aws_account` kind: the AWS account the provider's credentials belong to, as STS
//! `GetCallerIdentity` answers it. It makes nothing: create and read ask who is calling,
//! destroy forgets. Stacks write `${aws_account.current.account_id}` (in an ARN, a
//! bucket name) instead of taking the account id as a variable, so the account is the
//! one the stack is really applied to.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::signed::{Signed, STS};
use super::xml::Xml;
use crate::failure::{self, Cloud};
use crate::schema::Fields;
use crate::{Ctx, Kind, Live, ProviderError};

/// The kind `aws_account`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AwsAccount;

/// The STS API version the call speaks.
const VERSION: &str = "2011-06-15";
const CALL: &str = "sts:GetCallerIdentity";

/// What a stack writes for an `aws_account`: nothing (`[resources.aws_account.current]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Spec {}

/// What `aws_account` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Fields)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The 12-digit account id.
    pub account_id: String,
    /// The ARN of the identity calling (a user, or an assumed role's session).
    pub arn: String,
    /// The calling identity's unique id (AIDA… for a user, AROA…:SESSION for a role).
    pub user_id: String,
    /// The partition the account is in: aws, aws-cn or aws-us-gov.
    pub partition: String,
}

/// The identity in a GetCallerIdentity answer.
pub fn identity_of(root: &Xml) -> Result<Outputs, ProviderError> {
    let result = root.find("GetCallerIdentityResult");
    let text = |k: &str| {
        result
            .and_then(|r| r.text(k))
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    let (account_id, arn, user_id) = (text("Account"), text("Arn"), text("UserId"));
    let malformed = |what: String| failure::malformed(CALL, Cloud::Aws, 200, &what, None);
    if account_id.len() != 12 || !account_id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed(format!(
            "the answer's Account {account_id:?} is not a 12-digit account id"
        )));
    }
    let partition = arn
        .strip_prefix("arn:")
        .and_then(|rest| rest.split(':').next())
        .filter(|p| !p.is_empty())
        .ok_or_else(|| malformed(format!("the answer's Arn {arn:?} is not an ARN")))?
        .to_string();
    Ok(Outputs {
        account_id,
        arn,
        user_id,
        partition,
    })
}

/// Who the provider's credentials are.
async fn caller(ctx: &Ctx) -> Result<Live<AwsAccount>, ProviderError> {
    let signed = Signed::for_run(ctx, "ask STS who is calling", u32::MAX).await?;
    let root = signed
        .query(&STS, signed.region(), "GetCallerIdentity", VERSION, &[])
        .await?;
    let outputs = identity_of(&root)?;
    Ok(Live {
        id: outputs.account_id.clone(),
        spec: Spec {},
        outputs,
    })
}

#[async_trait]
impl Kind for AwsAccount {
    type Spec = Spec;
    type Outputs = Outputs;
    const KIND: &'static str = "aws_account";
    const PROVIDER: &'static str = "aws";
    const WRITES: crate::protocol::Writes = crate::protocol::Writes::FromId;

    async fn read(
        &self,
        ctx: &Ctx,
        _id: &str,
        _prior: Option<&Spec>,
    ) -> Result<Option<Live<Self>>, ProviderError> {
        // The account always exists for credentials that can call STS; credentials of
        // another account read as that account, and the change shows in the plan.
        caller(ctx).await.map(Some)
    }

    async fn create(&self, ctx: &Ctx, _spec: &Spec) -> Result<Live<Self>, ProviderError> {
        caller(ctx).await
    }

    async fn update(
        &self,
        ctx: &Ctx,
        _id: &str,
        _prior: &Spec,
        _spec: &Spec,
    ) -> Result<Live<Self>, ProviderError> {
        caller(ctx).await
    }

    async fn delete(
        &self,
        _ctx: &Ctx,
        _id: &str,
        _prior: Option<&Spec>,
    ) -> Result<(), ProviderError> {
        // Nothing was made; the account stays.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::schema_mismatches;

    fn answer(account: &str, arn: &str) -> Xml {
        Xml::parse(&format!(
            r#"<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <GetCallerIdentityResult>
    <Arn>{arn}</Arn>
    <UserId>AIDACKCEVSQ6C2EXAMPLE</UserId>
    <Account>{account}</Account>
  </GetCallerIdentityResult>
  <ResponseMetadata><RequestId>01234567-89ab-cdef-0123-456789abcdef</RequestId></ResponseMetadata>
</GetCallerIdentityResponse>"#
        ))
        .expect("xml")
    }

    #[test]
    fn schema_matches_spec_and_outputs() {
        let outputs = identity_of(&answer("123456789012", "arn:aws:iam::123456789012:user/ml"))
            .expect("an identity");
        assert_eq!(
            schema_mismatches::<AwsAccount>(&Spec {}, &outputs),
            Vec::<String>::new()
        );
        assert!(AwsAccount::schema().fields.is_empty());
    }

    #[test]
    fn the_identity_and_its_partition_come_from_the_answer() {
        let id = identity_of(&answer(
            "123456789012",
            "arn:aws-cn:sts::123456789012:assumed-role/ci/run-1",
        ))
        .expect("an identity");
        assert_eq!(id.account_id, "123456789012");
        assert_eq!(id.partition, "aws-cn");
        assert_eq!(id.user_id, "AIDACKCEVSQ6C2EXAMPLE");
        let e = identity_of(&answer("1234", "arn:aws:iam::1234:root")).expect_err("short");
        assert!(e.to_string().contains("not a 12-digit account id"), "{e}");
        let e = identity_of(&answer("123456789012", "root")).expect_err("no arn");
        assert!(e.to_string().contains("is not an ARN"), "{e}");
    }
}
