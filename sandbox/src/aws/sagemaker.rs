//! Amazon SageMaker (JSON 1.1): pipelines and pipeline executions.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{AwsCtx, AwsError, AwsRequest, AwsResponse};

/// Every emulated pipeline and execution.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct SageMaker {}

impl SageMaker {
    pub(crate) fn settle(&mut self, _now: DateTime<Utc>) {}

    pub(crate) fn handle(
        &mut self,
        req: &AwsRequest,
        _ctx: &AwsCtx,
    ) -> Result<AwsResponse, AwsError> {
        Err(AwsError::new(
            501,
            "NotImplemented",
            format!("{} {:?}", req.method, req.header("x-amz-target")),
        ))
    }
}
