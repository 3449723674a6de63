//! What the AWS tests share (here and in the root crate's tests): test credentials in
//! each context's environment, a moto server, and a proxy in front of it.

#![allow(dead_code)]

pub mod aws;
pub mod moto_proxy;
