//! STS (the query protocol, `Version=2011-06-15`): `GetCallerIdentity`, which every AWS
//! tool calls first to learn its account. Every caller is the sandbox's IAM user
//! `sandbox` in the sandbox's account, whatever access key it signs with, as moto
//! answers. (Presigned `GetCallerIdentity` URLs in EKS tokens are checked in `mod.rs`.)

use super::query::{param, params, respond};
use super::xml::Element;
use super::{AwsError, AwsRequest, AwsResponse, ACCOUNT};

const XMLNS: &str = "https://sts.amazonaws.com/doc/2011-06-15/";
/// The caller's IAM user id (`AIDA` and 17 upper-case letters and digits).
const USER_ID: &str = "AIDASANDBOXUSER000001";

/// Serves one STS request (a form body, or a query string as presigned URLs carry it).
pub(crate) fn handle(req: &AwsRequest) -> Result<AwsResponse, AwsError> {
    let p = params(req);
    match param(&p, "Action").unwrap_or_default() {
        "GetCallerIdentity" => Ok(respond(
            XMLNS,
            "GetCallerIdentity",
            Some(vec![
                Element::leaf("Arn", format!("arn:aws:iam::{ACCOUNT}:user/sandbox")),
                Element::leaf("UserId", USER_ID),
                Element::leaf("Account", ACCOUNT),
            ]),
        )),
        "" => Err(AwsError::new(
            400,
            "MissingAction",
            "The request must contain the parameter Action",
        )),
        other => Err(AwsError::new(
            400,
            "InvalidAction",
            format!("Could not find operation {other} for version 2011-06-15"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    #[test]
    fn every_caller_is_the_sandbox_user() {
        let req = AwsRequest::new(
            Method::POST,
            "/",
            &[],
            b"Action=GetCallerIdentity&Version=2011-06-15",
        );
        let resp = handle(&req).expect("answered");
        let xml = Element::parse(&resp.body).expect("well-formed");
        let result = xml
            .find("GetCallerIdentityResult")
            .cloned()
            .unwrap_or_default();
        assert_eq!(result.text_of("Account"), Some(ACCOUNT));
        assert_eq!(
            result.text_of("Arn"),
            Some("arn:aws:iam::123456789012:user/sandbox")
        );
        let id = result.text_of("UserId").unwrap_or_default();
        assert!(
            id.len() == 21
                && id.starts_with("AIDA")
                && id
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()),
            "{id}"
        );
        let presigned = AwsRequest::new(Method::GET, "/?Action=GetCallerIdentity", &[], b"");
        assert!(handle(&presigned).is_ok());
        let other = AwsRequest::new(Method::POST, "/", &[], b"Action=AssumeRole");
        assert_eq!(
            handle(&other).expect_err("not served").code,
            "InvalidAction"
        );
    }
}
