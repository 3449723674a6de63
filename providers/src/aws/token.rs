//! The bearer token EKS's Kubernetes API accepts: the one `aws eks get-token` prints.
//!
//! It is `k8s-aws-v1.` followed by the unpadded base64url of a presigned STS
//! `GetCallerIdentity` URL whose SigV4 signature covers the `x-k8s-aws-id` header naming
//! the cluster. The API server's authenticator replays that request against STS to
//! learn who is calling, so the token proves an identity without carrying a secret; it is
//! accepted for 15 minutes after signing. Tokens are never logged nor put in messages.

use std::time::{Duration, SystemTime};

use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
};
use aws_sigv4::sign::v4::SigningParams;
use aws_smithy_runtime_api::client::identity::Identity;
use base64::Engine;
use serde_json::json;

use super::config::{sdk_config, AwsConfig};
use crate::ProviderError;

/// The prefix EKS expects before the encoded URL.
pub const TOKEN_PREFIX: &str = "k8s-aws-v1.";
/// The header naming the cluster, which the signature must cover.
pub const CLUSTER_HEADER: &str = "x-k8s-aws-id";
/// How long STS accepts the presigned request (what the AWS CLI uses); EKS itself
/// accepts the token for 15 minutes from the signing time.
const PRESIGN_EXPIRES: Duration = Duration::from_secs(60);

/// The STS endpoint of `region`: `https://sts.<region>.amazonaws.com`, or `.com.cn` in
/// the China regions.
pub fn sts_url(region: &str) -> String {
    if region.starts_with("cn-") {
        format!("https://sts.{region}.amazonaws.com.cn")
    } else {
        format!("https://sts.{region}.amazonaws.com")
    }
}

/// Percent-encodes a query or form value the way SigV4 canonicalises it (everything but
/// the unreserved characters), so the service recomputes the same canonical request.
pub(crate) fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The presigned `GetCallerIdentity` URL for `cluster_name`, signed with `identity` at
/// `time` for `region`; against `sts_endpoint` when given.
///
/// Fails when the endpoint is not a URL or the identity holds no AWS credentials.
pub fn presigned_url(
    cluster_name: &str,
    region: &str,
    sts_endpoint: Option<&str>,
    identity: &Identity,
    time: SystemTime,
) -> Result<String, ProviderError> {
    let base = sts_endpoint
        .map(|e| e.trim_end_matches('/').to_string())
        .unwrap_or_else(|| sts_url(region));
    let url = format!("{base}/?Action=GetCallerIdentity&Version=2011-06-15");
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(PRESIGN_EXPIRES);
    let params = SigningParams::builder()
        .identity(identity)
        .region(region)
        .name("sts")
        .time(time)
        .settings(settings)
        .build()
        .map_err(|e| ProviderError::Config(format!("eks token: signing parameters: {e}")))?
        .into();
    let request = SignableRequest::new(
        "GET",
        url.as_str(),
        [(CLUSTER_HEADER, cluster_name)].into_iter(),
        SignableBody::Bytes(&[]),
    )
    .map_err(|e| {
        ProviderError::Config(format!(
            "eks token: the STS endpoint {base:?} is not a URL: {e}"
        ))
    })?;
    let (instructions, _signature) = sign(request, &params)
        .map_err(|e| ProviderError::Config(format!("eks token: signing failed: {e}")))?
        .into_parts();
    let mut signed = url;
    for (name, value) in instructions.params() {
        signed.push('&');
        signed.push_str(name);
        signed.push('=');
        signed.push_str(&encode(value));
    }
    Ok(signed)
}

/// The token for a presigned URL.
pub fn token_of_url(url: &str) -> String {
    format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url)
    )
}

/// Credentials from `provider`, or a configuration error saying where the chain looks.
pub async fn credentials(
    provider: &impl ProvideCredentials,
    cluster_name: &str,
) -> Result<Credentials, ProviderError> {
    provider.provide_credentials().await.map_err(|e| {
        ProviderError::Config(format!(
            "no AWS credentials to sign the token for EKS cluster {cluster_name}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (plus AWS_SESSION_TOKEN for temporary keys), or AWS_PROFILE naming a profile in ~/.aws/credentials or ~/.aws/config (run `aws sso login` for SSO profiles), or run where a role is attached (ECS, EC2 instance profile, EKS pod identity): {}; or run with --sandbox to try the stack without an account",
            crate::failure::chain(&e)
        ))
    })
}

/// The token `aws eks get-token --cluster-name <cluster_name>` prints, signed with the
/// credentials of the SDK's default chain (environment, `profile`, SSO, container and
/// instance roles) for `region` (the sandbox's fixed credentials when `sandbox`); the
/// presigned URL points at `sts_endpoint` when given.
///
/// Fails with `Config` when no credentials are found or the endpoint is not a URL.
pub async fn eks_token(
    session: &crate::Session,
    env: &crate::EnvFn,
    cluster_name: &str,
    region: &str,
    profile: Option<&str>,
    sts_endpoint: Option<&str>,
    sandbox: bool,
) -> Result<String, ProviderError> {
    // The provider table's loader, so credentials are cached with the clients'.
    let cfg =
        AwsConfig::from_ctx(&json!({"region": region, "profile": profile, "sandbox": sandbox}))?;
    let sdk = sdk_config(session, env, &cfg).await?;
    let provider = sdk.credentials_provider().ok_or_else(|| {
        ProviderError::Config(format!(
            "no AWS credentials provider to sign the token for EKS cluster {cluster_name}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE; or run with --sandbox to try the stack without an account"
        ))
    })?;
    let creds = credentials(&provider, cluster_name).await?;
    let identity = Identity::from(creds);
    let url = presigned_url(
        cluster_name,
        region,
        sts_endpoint,
        &identity,
        SystemTime::now(),
    )?;
    Ok(token_of_url(&url))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_credential_types::provider::error::CredentialsError;
    use aws_credential_types::provider::future;

    fn identity(session: Option<&str>) -> Identity {
        Identity::from(Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            session.map(str::to_string),
            None,
            "test",
        ))
    }

    /// The decoded query of a token: (name, value) pairs, values percent-decoded.
    fn query_of(token: &str) -> (String, Vec<(String, String)>) {
        let encoded = token.strip_prefix(TOKEN_PREFIX).expect("prefix");
        assert!(!encoded.contains('='), "no padding");
        let url = String::from_utf8(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(encoded)
                .expect("base64url"),
        )
        .expect("utf-8");
        let (base, query) = url.split_once('?').expect("a query");
        let pairs = query
            .split('&')
            .map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                (k.to_string(), decode(v))
            })
            .collect();
        (base.to_string(), pairs)
    }

    fn decode(v: &str) -> String {
        let bytes = v.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' && i + 2 < bytes.len() {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).expect("hex");
                out.push(u8::from_str_radix(hex, 16).expect("hex digit"));
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).expect("utf-8")
    }

    fn get<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn token_is_a_presigned_get_caller_identity() {
        let url = presigned_url("ml", "us-west-2", None, &identity(None), SystemTime::now())
            .expect("signed");
        let token = token_of_url(&url);
        let (base, q) = query_of(&token);
        assert_eq!(base, "https://sts.us-west-2.amazonaws.com/");
        assert_eq!(get(&q, "Action"), Some("GetCallerIdentity"));
        assert_eq!(get(&q, "Version"), Some("2011-06-15"));
        assert_eq!(get(&q, "X-Amz-Expires"), Some("60"));
        assert_eq!(get(&q, "X-Amz-Algorithm"), Some("AWS4-HMAC-SHA256"));
        let credential = get(&q, "X-Amz-Credential").expect("credential");
        assert!(credential.starts_with("AKIDEXAMPLE/"), "{credential}");
        assert!(
            credential.ends_with("/us-west-2/sts/aws4_request"),
            "{credential}"
        );
        let signed = get(&q, "X-Amz-SignedHeaders").expect("signed headers");
        assert!(signed.split(';').any(|h| h == "x-k8s-aws-id"), "{signed}");
        assert!(signed.split(';').any(|h| h == "host"), "{signed}");
        let signature = get(&q, "X-Amz-Signature").expect("signature");
        assert_eq!(signature.len(), 64, "a hex SHA-256 HMAC");
        assert!(
            !token.contains("wJalrXUtnFEMI"),
            "the secret key never appears"
        );
    }

    #[test]
    fn signature_depends_on_the_cluster_name() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let sig = |cluster: &str| {
            let url =
                presigned_url(cluster, "us-east-1", None, &identity(None), at).expect("signed");
            let (_, q) = query_of(&token_of_url(&url));
            get(&q, "X-Amz-Signature").map(str::to_string)
        };
        assert_eq!(sig("a"), sig("a"), "deterministic for a fixed time");
        assert_ne!(sig("a"), sig("b"), "the cluster header is signed");
    }

    #[test]
    fn endpoint_override_and_session_tokens() {
        let url = presigned_url(
            "ml",
            "us-east-1",
            Some("http://127.0.0.1:4566/"),
            &identity(Some("FwoG/session+token=")),
            SystemTime::now(),
        )
        .expect("signed");
        let (base, q) = query_of(&token_of_url(&url));
        assert_eq!(base, "http://127.0.0.1:4566/");
        assert_eq!(get(&q, "X-Amz-Security-Token"), Some("FwoG/session+token="));
        assert_eq!(
            sts_url("cn-north-1"),
            "https://sts.cn-north-1.amazonaws.com.cn"
        );
    }

    #[derive(Debug)]
    struct NoCredentials;

    impl ProvideCredentials for NoCredentials {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            future::ProvideCredentials::ready(Err(CredentialsError::not_loaded(
                "no providers in chain provided credentials",
            )))
        }
    }

    #[tokio::test]
    async fn missing_credentials_say_what_to_set() {
        let e = credentials(&NoCredentials, "ml")
            .await
            .expect_err("no credentials");
        assert!(matches!(e, ProviderError::Config(_)), "{e:?}");
        let m = e.to_string();
        for want in [
            "EKS cluster ml",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_PROFILE",
            "~/.aws/credentials",
            "; or run with --sandbox to try the stack without an account",
        ] {
            assert!(m.contains(want), "{want} missing from: {m}");
        }
    }
}
