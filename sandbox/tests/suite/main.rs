//! The sandbox's integration tests, one binary: its Google, AWS and Kubernetes APIs as
//! the official clients (gcloud, the aws CLI, kubectl) and the providers see them, checked
//! against the official contracts in `contracts/`. Each test starts its own sandbox.

#[path = "../common/mod.rs"]
mod common;

mod aws_eks_sagemaker;
mod aws_iam_kms;
mod aws_s3;
mod aws_vpc;
mod capacity;
mod discovery_fields;
mod gcloud;
mod gcp_api;
mod k8s_api;
mod kubectl;
mod kubectl_schema;
