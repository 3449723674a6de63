//! Contract checks against the official API descriptions kept in `contracts/`: the GCP
//! discovery documents and the Kubernetes OpenAPI document.

#![allow(dead_code)]

pub mod discovery;
pub mod openapi;
