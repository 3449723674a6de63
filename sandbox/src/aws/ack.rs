//! The ACK SageMaker controller, as it behaves inside an emulated EKS cluster.

use chrono::{DateTime, Utc};

use super::sagemaker::SageMaker;
use crate::k8s::ClusterState;

/// One controller pass over a cluster's `Pipeline` and `PipelineExecution` objects.
pub(crate) fn settle(
    _cluster: &mut ClusterState,
    _sagemaker: &mut SageMaker,
    _region: &str,
    _now: DateTime<Utc>,
    _scale: f64,
) {
}
