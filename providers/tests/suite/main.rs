//! The provider crate's integration tests against the sandbox, one binary: the GCP kinds
//! of a batch workload, the Kubernetes kinds and the data kinds. The AWS kinds, which use
//! the AWS credential chain of the process environment, are in `aws_chain`.

mod gcp_batch;
mod kubernetes;
mod kubernetes_data;
