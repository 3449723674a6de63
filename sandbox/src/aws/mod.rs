//! The AWS side of the sandbox: EKS (REST-JSON), S3 (REST-XML), SageMaker (JSON 1.1),
//! IAM roles and STS (the query protocol), KMS keys (JSON 1.1), EC2 (the query
//! protocol: VPC networking, and the instance type offerings and Availability Zones a
//! plan reads) and Service Quotas (JSON 1.1) — all served at the sandbox's root URL the
//! way a `--endpoint-url` client reaches them.
//! AWS clients sign every request with SigV4, and the credential scope in that signature
//! (`…/us-east-1/eks/aws4_request`) names the service and region: that is how one port
//! tells an EKS `GET /clusters` from an S3 `GET /clusters` (a bucket named `clusters`).
//! IAM is global (clients sign it for us-east-1) and its roles are one set whatever the
//! region; KMS keys, like EKS clusters, belong to the region they were signed for.
//! This file owns the transport-neutral request and response values, the routing by
//! signature and the persisted AWS world (the configured capacity included); `error.rs`
//! the error formats, `query.rs` the query protocol's parameters and envelope, `eks.rs`,
//! `s3/`, `sagemaker.rs`, `ec2.rs`, `vpc.rs`, `servicequotas.rs`, `iam.rs`, `sts.rs` and
//! `kms.rs` the services (`iam.rs` also what a role is to the others: found by ARN,
//! trusting a service or not), `ack.rs` the ACK SageMaker controller that runs inside emulated EKS
//! clusters, `kube.rs` what EKS is to the Kubernetes emulator.

pub(crate) mod ack;
pub(crate) mod capabilities;
pub(crate) mod ec2;
pub(crate) mod eks;
pub(crate) mod error;
pub(crate) mod iam;
pub(crate) mod instances;
pub(crate) mod kms;
pub(crate) mod kube;
pub(crate) mod pod_identity;
pub(crate) mod query;
pub(crate) mod s3;
pub(crate) mod sagemaker;
pub(crate) mod servicequotas;
pub(crate) mod sts;
pub(crate) mod vpc;
pub(crate) mod xml;

use axum::http::Method;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::faults::Faults;
use crate::http::{parse_query, percent_decode};
pub(crate) use error::AwsError;

/// The account every emulated resource belongs to (the one moto and LocalStack use).
pub(crate) const ACCOUNT: &str = "123456789012";

/// An AWS service the sandbox emulates, named by its SigV4 signing name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Service {
    Eks,
    S3,
    SageMaker,
    Ec2,
    /// Service Quotas (signing name `servicequotas`).
    Quotas,
    Iam,
    Sts,
    Kms,
}

impl Service {
    /// The service whose signing name is `name` (`eks`, `s3`, `sagemaker`, `ec2`,
    /// `servicequotas`, `iam`, `sts`, `kms`).
    pub(crate) fn from_signing_name(name: &str) -> Option<Service> {
        match name {
            "eks" => Some(Service::Eks),
            "s3" => Some(Service::S3),
            "sagemaker" => Some(Service::SageMaker),
            "ec2" => Some(Service::Ec2),
            "servicequotas" => Some(Service::Quotas),
            "iam" => Some(Service::Iam),
            "sts" => Some(Service::Sts),
            "kms" => Some(Service::Kms),
            _ => None,
        }
    }

    /// The signing name, which the traffic log records as the `api`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Service::Eks => "eks",
            Service::S3 => "s3",
            Service::SageMaker => "sagemaker",
            Service::Ec2 => "ec2",
            Service::Quotas => "servicequotas",
            Service::Iam => "iam",
            Service::Sts => "sts",
            Service::Kms => "kms",
        }
    }
}

/// Who signed a request and for what: from the `Authorization` header, or from the
/// `X-Amz-Credential` query parameter of a presigned URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Signature {
    pub access_key: String,
    pub region: String,
    pub service: String,
}

/// One AWS request as a service emulator sees it.
#[derive(Debug, Clone)]
pub(crate) struct AwsRequest {
    pub method: Method,
    /// The path from the root, still percent-encoded, starting with `/`.
    pub path: String,
    /// Decoded query pairs; a bare `?versioning` is `("versioning", "")`.
    pub query: Vec<(String, String)>,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The region the request was signed for.
    pub region: String,
}

impl AwsRequest {
    /// A request for unit tests and internal callers: `path_and_query` as on the wire,
    /// headers as `(name, value)`.
    #[cfg(test)]
    pub(crate) fn new(
        method: Method,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Self {
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        AwsRequest {
            method,
            path: path.to_string(),
            query: parse_query(query),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
                .collect(),
            body: body.to_vec(),
            region: "us-east-1".to_string(),
        }
    }

    /// The first value of header `name` (any case).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The first value of query parameter `name`.
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the query names `name`, with or without a value (`?versioning`).
    pub(crate) fn has_param(&self, name: &str) -> bool {
        self.query.iter().any(|(k, _)| k == name)
    }

    /// Decoded path segments; `/b/a%2Fb` is `["b", "a/b"]`.
    pub(crate) fn segments(&self) -> Vec<String> {
        self.path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(percent_decode)
            .collect()
    }

    /// The body as JSON (`Value::Null` when empty), or a 400 in the service's terms.
    pub(crate) fn json(&self) -> Result<Value, AwsError> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&self.body).map_err(|e| {
            AwsError::new(
                400,
                "SerializationException",
                format!("the request body is not valid JSON: {e}"),
            )
        })
    }
}

/// What a service emulator answers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AwsResponse {
    pub status: u16,
    /// Header names as sent; `content-type` included when there is a body.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl AwsResponse {
    /// A JSON answer with the given content type (`application/json`,
    /// `application/x-amz-json-1.1`).
    pub(crate) fn json(status: u16, content_type: &str, value: &Value) -> Self {
        AwsResponse {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            body: value.to_string().into_bytes(),
        }
    }

    /// An XML answer; `xml` is the document without its declaration.
    pub(crate) fn xml(status: u16, xml: &str) -> Self {
        AwsResponse {
            status,
            headers: vec![("content-type".into(), "application/xml".into())],
            body: format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{xml}").into_bytes(),
        }
    }

    /// No body.
    pub(crate) fn empty(status: u16) -> Self {
        AwsResponse {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Adds a header.
    pub(crate) fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    /// The first value of header `name` (any case).
    #[cfg(test)]
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON, when it is JSON.
    #[cfg(test)]
    pub(crate) fn json_body(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// What a service handler gets besides the request: the sandbox clock, the time scale of
/// simulated durations and the fault switches (for failing operations on purpose).
pub(crate) struct AwsCtx<'a> {
    pub now: DateTime<Utc>,
    /// Multiplies every simulated duration; 0 = instant.
    pub scale: f64,
    pub faults: &'a Faults,
}

/// Everything the AWS emulators hold, persisted with the rest of the sandbox.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct AwsWorld {
    #[serde(default)]
    pub eks: eks::Eks,
    #[serde(default)]
    pub s3: s3::S3,
    #[serde(default)]
    pub sagemaker: sagemaker::SageMaker,
    /// EC2's VPC networking of every region touched.
    #[serde(default)]
    pub network: vpc::Network,
    /// The quotas, stockouts and subnet zones configured at `/_sandbox/capacity`, which
    /// EKS node groups run into and EC2 and Service Quotas report.
    #[serde(default)]
    pub capacity: crate::capacity::AwsCapacity,
    #[serde(default)]
    pub iam: iam::Iam,
    #[serde(default)]
    pub kms: kms::Kms,
}

impl AwsWorld {
    /// Moves every running operation to where the clock says it is.
    pub(crate) fn settle(&mut self, now: DateTime<Utc>) {
        self.eks.settle(now);
        self.sagemaker.settle(now);
        self.kms.settle(now);
        self.network.settle(now);
    }

    /// One line per resource the AWS emulators hold (see `Sandbox::inventory`).
    pub(crate) fn inventory(&self, out: &mut Vec<String>) {
        self.eks.inventory(out);
        self.s3.inventory(out);
        self.sagemaker.inventory(out);
        self.iam.inventory(out);
        self.kms.inventory(out);
        self.network.inventory(out);
    }

    /// Serves one request of `service`.
    pub(crate) fn handle(
        &mut self,
        service: Service,
        req: &AwsRequest,
        ctx: &AwsCtx,
    ) -> AwsResponse {
        // EC2 requests touch their region in `ec2_request`.
        if matches!(service, Service::Eks) {
            self.network.touch(&req.region, &self.capacity);
        }
        if matches!(service, Service::Eks | Service::Iam) {
            self.iam.adopt(&self.capacity, ctx.now);
        }
        let result = match service {
            Service::Eks => {
                let around = eks::Around {
                    capacity: &self.capacity,
                    network: &self.network,
                    iam: &self.iam,
                };
                self.eks.handle(req, ctx, &around)
            }
            Service::S3 => self.s3.handle(req, ctx),
            Service::SageMaker => self.sagemaker.handle(req, ctx, &self.iam),
            Service::Ec2 => {
                let eks_subnets = self.eks.subnets_in_use(&req.region);
                ec2_request(req, ctx, &mut self.network, &self.capacity, &eks_subnets)
            }
            Service::Quotas => servicequotas::handle(req, &self.capacity),
            Service::Iam => self.iam.handle(req, ctx.now),
            Service::Sts => sts::handle(req),
            Service::Kms => self.kms.handle(req, ctx.now),
        };
        result.unwrap_or_else(|e| e.response(service, req))
    }
}

/// The signature of a request: from `Authorization: AWS4-HMAC-SHA256 Credential=AKID/DATE/REGION/SERVICE/aws4_request, …`
/// or a presigned URL's `X-Amz-Credential`. `None` for unsigned requests.
pub(crate) fn signature(authorization: Option<&str>, query: &str) -> Option<Signature> {
    let credential = match authorization {
        Some(auth) if auth.starts_with("AWS4-HMAC-SHA256") => auth
            .split([' ', ','])
            .find_map(|part| part.trim().strip_prefix("Credential="))
            .map(str::to_string)?,
        _ => parse_query(query)
            .into_iter()
            .find(|(k, _)| k == "X-Amz-Credential")
            .map(|(_, v)| v)?,
    };
    let parts: Vec<&str> = credential.split('/').collect();
    match parts.as_slice() {
        [key, _date, region, service, "aws4_request"] if !key.is_empty() => Some(Signature {
            access_key: (*key).to_string(),
            region: (*region).to_string(),
            service: (*service).to_string(),
        }),
        _ => None,
    }
}

/// The answer to a request a fault stopped, as each service throttles or fails.
pub(crate) fn injected(
    service: Service,
    req: &AwsRequest,
    status: u16,
    retry_after: Option<u32>,
) -> AwsResponse {
    let (status, code, message) = match (service, status) {
        (Service::S3, 429 | 503) => (503, "SlowDown", "Please reduce your request rate."),
        (Service::S3, _) => (
            500,
            "InternalError",
            "We encountered an internal error. Please try again.",
        ),
        (Service::Eks, 429) => (429, "ThrottlingException", "Rate exceeded"),
        (Service::SageMaker, 429) => (400, "ThrottlingException", "Rate exceeded"),
        (Service::Eks, 503) => (503, "ServiceUnavailableException", "Service unavailable"),
        (Service::SageMaker, 503) => (503, "ServiceUnavailable", "Service unavailable"),
        (Service::Eks, s) => (s, "ServerException", "Internal server error"),
        (Service::SageMaker, s) => (s, "InternalFailure", "Internal failure"),
        // EC2 throttles with 503 RequestLimitExceeded.
        (Service::Ec2, 429 | 503) => (503, "RequestLimitExceeded", "Request limit exceeded."),
        (Service::Ec2, _) => (500, "InternalError", "An internal error has occurred"),
        (Service::Quotas, 429) => (400, "TooManyRequestsException", "Rate exceeded"),
        (Service::Quotas, s) => (s, "ServiceException", "Something went wrong."),
        // IAM and STS throttle with 400 Throttling, KMS with 400 ThrottlingException.
        (Service::Iam | Service::Sts, 429) => (400, "Throttling", "Rate exceeded"),
        (Service::Iam | Service::Sts, 503) => (503, "ServiceUnavailable", "Service is unavailable"),
        (Service::Iam, s) => (
            s,
            "ServiceFailure",
            "Request processing has failed due to an unknown error, exception or failure.",
        ),
        (Service::Sts, s) => (s, "InternalFailure", "An internal error occurred."),
        (Service::Kms, 429) => (400, "ThrottlingException", "Rate exceeded"),
        (Service::Kms, 503) => (503, "ServiceUnavailableException", "Service unavailable"),
        (Service::Kms, s) => (s, "KMSInternalException", "An internal error occurred."),
    };
    let response = AwsError::new(status, code, message).response(service, req);
    match retry_after {
        Some(secs) => response.with_header("retry-after", secs.to_string()),
        None => response,
    }
}

/// Whether `token` is what `aws eks get-token` produces: `k8s-aws-v1.` and the unpadded
/// base64url of a presigned STS `GetCallerIdentity` URL whose signature covers the
/// `x-k8s-aws-id` header (the cluster name). The signature itself cannot be checked
/// without the caller's secret key, exactly as EKS cannot without calling STS.
pub(crate) fn eks_token_valid(token: &str) -> Result<(), String> {
    use base64::Engine as _;
    let Some(encoded) = token.strip_prefix("k8s-aws-v1.") else {
        return Err(
            "the token is not an EKS token (k8s-aws-v1.…); get one with `aws eks get-token`".into(),
        );
    };
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded.trim_end_matches('='))
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or("the EKS token does not decode to a presigned URL")?;
    let query = parse_query(url.split_once('?').map(|(_, q)| q).unwrap_or(""));
    let get = |k: &str| {
        query
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.as_str())
    };
    if get("Action") != Some("GetCallerIdentity") {
        return Err("the EKS token is not a presigned sts:GetCallerIdentity request".into());
    }
    if !get("X-Amz-SignedHeaders").is_some_and(|h| h.split(';').any(|h| h == "x-k8s-aws-id")) {
        return Err(
            "the EKS token's signature does not cover the x-k8s-aws-id header naming the cluster"
                .into(),
        );
    }
    if get("X-Amz-Credential").is_none() || get("X-Amz-Signature").is_none() {
        return Err("the EKS token is not signed".into());
    }
    Ok(())
}

/// A token of the shape [`eks_token_valid`] accepts, for kubeconfigs the sandbox writes
/// (kubectl then needs no AWS credentials).
pub(crate) fn sandbox_eks_token(region: &str, cluster: &str) -> String {
    use base64::Engine as _;
    let url = format!(
        "https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=SANDBOX%2F20260101%2F{region}%2Fsts%2Faws4_request&X-Amz-Date=20260101T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id&X-Amz-Signature=sandbox-{cluster}"
    );
    format!(
        "k8s-aws-v1.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url)
    )
}

/// Serves one EC2 query-protocol request: the capacity reads (`ec2.rs`), else VPC
/// networking (`vpc.rs`). The signed region is touched first (its default VPC made, the
/// configured subnets of `capacity` made real); `eks_subnets` are the subnets EKS has
/// network interfaces in, which cannot be deleted.
pub(crate) fn ec2_request(
    req: &AwsRequest,
    ctx: &AwsCtx,
    network: &mut vpc::Network,
    capacity: &crate::capacity::AwsCapacity,
    eks_subnets: &std::collections::BTreeSet<String>,
) -> Result<AwsResponse, AwsError> {
    let params = query::params(req);
    let region = req.region.as_str();
    network.touch(region, capacity);
    let action = query::param(&params, "Action").unwrap_or_default();
    if let Some(answer) = ec2::capacity_read(action, region, &params) {
        return answer;
    }
    if action.is_empty() {
        return Err(AwsError::new(
            400,
            "MissingAction",
            "The request must contain the parameter Action",
        ));
    }
    network
        .handle(action, region, &params, ctx, eks_subnets)
        .unwrap_or_else(|| {
            Err(AwsError::new(
                400,
                "InvalidAction",
                format!("The action {action} is not valid for this web service."),
            ))
        })
}

/// `secs` of simulated time at the sandbox's scale (and any slow-operations fault).
pub(crate) fn duration(ctx: &AwsCtx, secs: f64) -> chrono::Duration {
    let ms = secs * 1000.0 * ctx.scale * ctx.faults.slow_factor();
    if ms.is_finite() && ms > 0.0 {
        chrono::Duration::milliseconds(ms.round() as i64)
    } else {
        chrono::Duration::zero()
    }
}

/// Whether an operation due at `until` is done by `now`.
pub(crate) fn due(until: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    until.is_some_and(|u| now >= u)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_name_service_and_region() {
        let auth = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261121/eu-west-1/eks/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc";
        assert_eq!(
            signature(Some(auth), ""),
            Some(Signature {
                access_key: "AKIDEXAMPLE".into(),
                region: "eu-west-1".into(),
                service: "eks".into()
            })
        );
        let presigned = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20261121%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature=x";
        assert_eq!(
            signature(None, presigned).map(|s| s.service),
            Some("s3".to_string())
        );
        assert_eq!(signature(Some("Bearer abc"), ""), None);
        assert_eq!(signature(Some("AWS4-HMAC-SHA256 Credential=bad"), ""), None);
        assert_eq!(
            Service::from_signing_name("sagemaker"),
            Some(Service::SageMaker)
        );
        assert_eq!(Service::from_signing_name("sts"), Some(Service::Sts));
        assert_eq!(Service::from_signing_name("iam"), Some(Service::Iam));
        assert_eq!(Service::from_signing_name("kms"), Some(Service::Kms));
        assert_eq!(Service::from_signing_name("lambda"), None);
    }

    #[test]
    fn eks_tokens_must_be_presigned_get_caller_identity() {
        assert_eq!(
            eks_token_valid(&sandbox_eks_token("us-west-2", "ml")),
            Ok(())
        );
        assert!(eks_token_valid("ya29.google").is_err());
        assert!(eks_token_valid("k8s-aws-v1.!!!").is_err());
        use base64::Engine as _;
        let unsigned_header = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode("https://sts.amazonaws.com/?Action=GetCallerIdentity&X-Amz-SignedHeaders=host&X-Amz-Credential=a&X-Amz-Signature=b");
        assert!(eks_token_valid(&format!("k8s-aws-v1.{unsigned_header}"))
            .expect_err("the signature must cover x-k8s-aws-id")
            .contains("x-k8s-aws-id"));
    }

    #[test]
    fn requests_split_paths_and_queries() {
        let r = AwsRequest::new(
            Method::PUT,
            "/bkt/a%2Fb.json?versioning",
            &[("X-Amz-Target", "t")],
            b"",
        );
        assert_eq!(r.segments(), ["bkt", "a/b.json"]);
        assert!(r.has_param("versioning"));
        assert_eq!(r.header("x-amz-target"), Some("t"));
        assert_eq!(r.json().ok(), Some(Value::Null));
    }
}
