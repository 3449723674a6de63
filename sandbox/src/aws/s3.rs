//! Amazon S3 (REST-XML, path-style addressing).

use serde::{Deserialize, Serialize};

use super::{AwsCtx, AwsError, AwsRequest, AwsResponse};

/// Every emulated bucket and object.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct S3 {}

impl S3 {
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
}
