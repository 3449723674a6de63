//! The AWS kinds against moto and the sandbox, one binary. The AWS SDK's default
//! credential chain reads the process environment, so these tests share one fixed test
//! environment (`support::aws::env`) in a binary of their own.

#[path = "../support/mod.rs"]
mod support;

mod aws_eks;
mod aws_s3;
mod aws_sagemaker;
