//! OAuth access tokens for Google APIs: Application Default Credentials through
//! `google-cloud-auth` (which caches and refreshes tokens), an explicit key file, or a
//! static token from gcloud's `access_token_file` / `GOOGLE_OAUTH_ACCESS_TOKEN`.
//!
//! Credentials are built on first use, so `validate` and plans that touch no API never
//! need any. Tokens are never formatted into errors or logs.

use google_cloud_auth::credentials::{self, service_account, user_account, AccessTokenCredentials};
use tokio::sync::OnceCell;

use super::config::CredentialSource;
use crate::ProviderError;

const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// A source of bearer tokens.
pub struct Tokens {
    source: CredentialSource,
    adc: OnceCell<AccessTokenCredentials>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The source may hold a token: show only its kind.
        let kind = match &self.source {
            CredentialSource::Adc { .. } => "adc",
            CredentialSource::TokenFile(_) => "token file",
            CredentialSource::Token(_) => "token",
        };
        f.debug_struct("Tokens")
            .field("source", &kind)
            .finish_non_exhaustive()
    }
}

/// What to do about missing credentials, ending every credentials error: the ways to
/// give terrain an account, and `--sandbox` for trying a stack without one.
const HOW_TO: &str = "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, run `gcloud auth application-default login`, set `credentials` in [providers.gcp], or run with --sandbox to try the stack without an account";

impl Tokens {
    pub fn new(source: CredentialSource) -> Self {
        Self {
            source,
            adc: OnceCell::new(),
        }
    }

    /// A current access token.
    ///
    /// Fails when no credentials can be found or the token exchange fails; the error
    /// says which variable or file to set.
    pub async fn token(&self) -> Result<String, ProviderError> {
        match &self.source {
            CredentialSource::Token(t) => Ok(t.clone()),
            CredentialSource::TokenFile(path) => {
                let text = tokio::fs::read_to_string(path)
                    .await
                    .map_err(|e| ProviderError::io("read access token file", path.clone(), e))?;
                let token = text.trim();
                if token.is_empty() {
                    return Err(ProviderError::Config(format!(
                        "access token file {path} is empty"
                    )));
                }
                Ok(token.to_string())
            }
            CredentialSource::Adc { key_file } => {
                let creds = self
                    .adc
                    .get_or_try_init(|| async { build(key_file.as_deref()).await })
                    .await?;
                let token = creds.access_token().await.map_err(|e| {
                    if key_file.is_none() && adc_file().is_none() {
                        // Nothing configured: the library fell back to the metadata
                        // server, which only exists on Google Cloud machines.
                        ProviderError::Config(format!(
                            "no Google credentials found: GOOGLE_APPLICATION_CREDENTIALS is not set, there is no gcloud application-default file, and no metadata server answered; {HOW_TO}"
                        ))
                    } else {
                        ProviderError::Config(format!("could not get a Google access token: {}; {HOW_TO}", crate::failure::chain(&e)))
                    }
                })?;
                Ok(token.token)
            }
        }
    }
}

/// The Application Default Credentials file in use, if any: the one
/// GOOGLE_APPLICATION_CREDENTIALS names, else gcloud's `application-default login` file.
fn adc_file() -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS").filter(|p| !p.is_empty())
    {
        return Some(path.into());
    }
    let dir = std::env::var_os("CLOUDSDK_CONFIG")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| std::path::Path::new(&h).join(".config").join("gcloud"))
        })?;
    let file = dir.join("application_default_credentials.json");
    file.exists().then_some(file)
}

async fn build(key_file: Option<&str>) -> Result<AccessTokenCredentials, ProviderError> {
    let built = match key_file {
        None => credentials::Builder::default()
            .with_scopes([SCOPE])
            .build_access_token_credentials(),
        Some(path) => {
            let text = tokio::fs::read_to_string(path)
                .await
                .map_err(|e| ProviderError::io("read credentials file", path, e))?;
            let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                ProviderError::Config(format!("credentials file {path} is not JSON: {e}"))
            })?;
            match json.get("type").and_then(|t| t.as_str()) {
                Some("service_account") => service_account::Builder::new(json)
                    .with_access_specifier(service_account::AccessSpecifier::from_scopes([SCOPE]))
                    .build_access_token_credentials(),
                Some("authorized_user") => user_account::Builder::new(json).with_scopes([SCOPE]).build_access_token_credentials(),
                other => {
                    return Err(ProviderError::Config(format!(
                        "credentials file {path} has type {other:?}; expected a service_account key or an authorized_user file"
                    )))
                }
            }
        }
    };
    built.map_err(|e| {
        ProviderError::Config(format!(
            "no usable Google credentials: {}; {HOW_TO}",
            crate::failure::chain(&e)
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn how_to_names_the_ways_to_an_account_and_the_sandbox() {
        for want in [
            "GOOGLE_APPLICATION_CREDENTIALS",
            "gcloud auth application-default login",
            "[providers.gcp]",
            "or run with --sandbox to try the stack without an account",
        ] {
            assert!(HOW_TO.contains(want), "{want} missing from: {HOW_TO}");
        }
        // It ends sentences that start elsewhere, so it is one clause list, no period.
        assert!(!HOW_TO.contains(". ") && !HOW_TO.ends_with('.'), "{HOW_TO}");
    }
}
