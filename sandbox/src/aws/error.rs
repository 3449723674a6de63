//! AWS errors in each protocol's wire format: REST-JSON (EKS) puts the code in the
//! `x-amzn-ErrorType` header and `{"message": …}` in the body; JSON 1.1 (SageMaker,
//! Service Quotas) puts `{"__type": code, "message": …}` in the body; REST-XML (S3)
//! answers `<Error><Code/><Message/><RequestId/></Error>`, with no body at all for HEAD;
//! the EC2 query protocol answers `<Response><Errors><Error><Code/><Message/></Error>
//! </Errors><RequestID/></Response>`; IAM's and STS's query protocol `<ErrorResponse>
//! <Error><Type/><Code/><Message/></Error><RequestId/></ErrorResponse>`. KMS is JSON 1.1.

use serde_json::json;

use super::{AwsRequest, AwsResponse, Service};

/// An error a service answers: HTTP status, the service's error code, a message, and for
/// S3 the extra elements the real service adds (`BucketName`, `Key`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AwsError {
    pub status: u16,
    pub code: String,
    pub message: String,
    pub extra: Vec<(String, String)>,
}

impl AwsError {
    pub(crate) fn new(status: u16, code: impl Into<String>, message: impl Into<String>) -> Self {
        AwsError {
            status,
            code: code.into(),
            message: message.into(),
            extra: Vec::new(),
        }
    }

    /// Adds an element to an S3 error document (`BucketName`, `Key`, `Condition`).
    pub(crate) fn with(mut self, name: &str, value: impl Into<String>) -> Self {
        self.extra.push((name.to_string(), value.into()));
        self
    }

    /// The answer in `service`'s wire format.
    pub(crate) fn response(&self, service: Service, req: &AwsRequest) -> AwsResponse {
        let request_id = crate::common::ids::random_hex(16).to_uppercase();
        match service {
            Service::Eks => AwsResponse::json(
                self.status,
                "application/json",
                &json!({"message": self.message}),
            )
            .with_header("x-amzn-ErrorType", format!("{}:", self.code))
            .with_header("x-amzn-RequestId", request_id),
            Service::SageMaker | Service::Quotas | Service::Kms => AwsResponse::json(
                self.status,
                "application/x-amz-json-1.1",
                &json!({"__type": self.code, "message": self.message}),
            )
            .with_header("x-amzn-RequestId", request_id),
            Service::Ec2 => {
                let xml = format!(
                    "<Response><Errors><Error><Code>{}</Code><Message>{}</Message></Error></Errors><RequestID>{}</RequestID></Response>",
                    escape(&self.code),
                    escape(&self.message),
                    crate::common::ids::new_uid()
                );
                AwsResponse::xml(self.status, &xml)
            }
            Service::Iam | Service::Sts => {
                let xmlns = if service == Service::Iam {
                    "https://iam.amazonaws.com/doc/2010-05-08/"
                } else {
                    "https://sts.amazonaws.com/doc/2011-06-15/"
                };
                // Sender: the caller's fault; Receiver: the service's.
                let fault = if self.status < 500 {
                    "Sender"
                } else {
                    "Receiver"
                };
                let xml = format!(
                    "<ErrorResponse xmlns=\"{xmlns}\"><Error><Type>{fault}</Type><Code>{}</Code><Message>{}</Message></Error><RequestId>{}</RequestId></ErrorResponse>",
                    escape(&self.code),
                    escape(&self.message),
                    crate::common::ids::new_uid()
                );
                AwsResponse::xml(self.status, &xml)
            }
            Service::S3 => {
                if req.method == axum::http::Method::HEAD {
                    return AwsResponse::empty(self.status)
                        .with_header("x-amz-request-id", request_id);
                }
                let mut xml = format!(
                    "<Error><Code>{}</Code><Message>{}</Message>",
                    escape(&self.code),
                    escape(&self.message)
                );
                for (k, v) in &self.extra {
                    xml.push_str(&format!("<{k}>{}</{k}>", escape(v)));
                }
                xml.push_str(&format!("<RequestId>{request_id}</RequestId></Error>"));
                AwsResponse::xml(self.status, &xml).with_header("x-amz-request-id", request_id)
            }
        }
    }
}

/// Escapes text for an XML element or attribute.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    #[test]
    fn each_protocol_has_its_format() {
        let e = AwsError::new(
            404,
            "ResourceNotFoundException",
            "No cluster found for name: x.",
        );
        let req = AwsRequest::new(Method::GET, "/clusters/x", &[], b"");
        let eks = e.response(Service::Eks, &req);
        assert_eq!(
            eks.header("x-amzn-errortype"),
            Some("ResourceNotFoundException:")
        );
        assert_eq!(
            eks.json_body().map(|b| b["message"].clone()),
            Some(json!("No cluster found for name: x."))
        );
        let sm = AwsError::new(400, "ResourceNotFound", "nope").response(Service::SageMaker, &req);
        assert_eq!(
            sm.json_body().map(|b| b["__type"].clone()),
            Some(json!("ResourceNotFound"))
        );
        let s3 = AwsError::new(404, "NoSuchBucket", "The specified bucket does not exist")
            .with("BucketName", "b&c");
        let body = String::from_utf8(s3.response(Service::S3, &req).body).unwrap_or_default();
        assert!(
            body.contains("<Code>NoSuchBucket</Code>")
                && body.contains("<BucketName>b&amp;c</BucketName>"),
            "{body}"
        );
        let iam = AwsError::new(
            409,
            "EntityAlreadyExists",
            "Role with name r already exists.",
        )
        .response(Service::Iam, &req);
        let body = String::from_utf8(iam.body).unwrap_or_default();
        assert_eq!(iam.status, 409);
        assert!(
            body.contains("<ErrorResponse xmlns=\"https://iam.amazonaws.com/doc/2010-05-08/\"><Error><Type>Sender</Type><Code>EntityAlreadyExists</Code>")
                && body.contains("<RequestId>"),
            "{body}"
        );
        let kms = AwsError::new(400, "NotFoundException", "nope").response(Service::Kms, &req);
        assert_eq!(
            kms.json_body().map(|b| b["__type"].clone()),
            Some(json!("NotFoundException"))
        );
        let head = AwsRequest::new(Method::HEAD, "/b", &[], b"");
        assert!(s3.response(Service::S3, &head).body.is_empty());
    }
}
