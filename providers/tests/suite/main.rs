//! The provider crate's integration tests, one binary: the GCP kinds of a batch workload,
//! the Kubernetes kinds, Kubeflow Pipelines and the data kinds against the sandbox, the AWS kinds against
//! the sandbox and moto. Each test's contexts carry their own environment (the AWS test
//! keys among it, `support::aws::ctx`); none is set on the process.

#[path = "../support/mod.rs"]
mod support;

mod aws_eks;
mod aws_iam_kms;
mod aws_network;
mod aws_s3;
mod aws_sagemaker;
mod gcp_batch;
mod gcp_iam;
mod kfp;
mod kubernetes;
mod kubernetes_data;
