//! What the provider tests share (here and in the root crate's tests): for AWS, test
//! credentials in each context's environment, a moto server, and a proxy in front of
//! it; for GCP, a sandbox with its provider table.

#![allow(dead_code)]

pub mod aws;
pub mod gcp;
pub mod moto_proxy;
