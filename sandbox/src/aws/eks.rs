//! Amazon EKS (REST-JSON): clusters and managed node groups.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{AwsCtx, AwsError, AwsRequest, AwsResponse};
use crate::k8s::CloudCluster;

/// Every emulated EKS cluster and node group.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct Eks {}

impl Eks {
    pub(crate) fn settle(&mut self, _now: DateTime<Utc>) {}

    pub(crate) fn handle(
        &mut self,
        req: &AwsRequest,
        _ctx: &AwsCtx,
    ) -> Result<AwsResponse, AwsError> {
        Err(AwsError::new(
            501,
            "NotImplemented",
            format!("{} {}", req.method, req.path),
        ))
    }

    /// The clusters with a Kubernetes API, keyed `eks/<region>/<name>`.
    pub(crate) fn kube_clusters(&self) -> Vec<CloudCluster> {
        Vec::new()
    }

    /// Points a cluster's `endpoint` at its emulated API server.
    pub(crate) fn set_endpoint(&mut self, _key: &str, _endpoint: &str) {}
}
