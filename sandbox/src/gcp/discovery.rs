//! The official discovery documents of the Google APIs the sandbox serves request bodies
//! on (container v1, file v1, storage v1, serviceusage v1, iam v1, cloudresourcemanager
//! v3), embedded in the binary from
//! `contracts/gcp/` — `terrain sandbox serve` runs without the source tree — and read
//! once, on first use, into the message descriptions of `schema.rs` with the additions
//! of `tables.rs`. Compute Engine and Cloud TPU are only read from, so theirs are not
//! embedded.

use std::io::Read;
use std::sync::OnceLock;

use serde_json::Value;

use super::schema::{Document, DocumentError, Profile};
use super::tables;

/// One embedded document: the API, the contract it is (`gcp/container.v1.json`) and its
/// bytes as stored there (gzipped when the name ends so).
struct Embedded {
    profile: &'static Profile,
    contract: &'static str,
    stored: &'static str,
    raw: &'static [u8],
    read: &'static OnceLock<Result<Document, DocumentError>>,
}

static CONTAINER: OnceLock<Result<Document, DocumentError>> = OnceLock::new();
static FILE: OnceLock<Result<Document, DocumentError>> = OnceLock::new();
static STORAGE: OnceLock<Result<Document, DocumentError>> = OnceLock::new();
static SERVICEUSAGE: OnceLock<Result<Document, DocumentError>> = OnceLock::new();
static IAM: OnceLock<Result<Document, DocumentError>> = OnceLock::new();
static RESOURCEMANAGER: OnceLock<Result<Document, DocumentError>> = OnceLock::new();

const EMBEDDED: [Embedded; 6] = [
    Embedded {
        profile: &tables::CONTAINER,
        contract: "gcp/container.v1.json",
        stored: "container.v1.json.gz",
        raw: include_bytes!("../../../contracts/gcp/container.v1.json.gz"),
        read: &CONTAINER,
    },
    Embedded {
        profile: &tables::FILE,
        contract: "gcp/file.v1.json",
        stored: "file.v1.json",
        raw: include_bytes!("../../../contracts/gcp/file.v1.json"),
        read: &FILE,
    },
    Embedded {
        profile: &tables::STORAGE,
        contract: "gcp/storage.v1.json",
        stored: "storage.v1.json.gz",
        raw: include_bytes!("../../../contracts/gcp/storage.v1.json.gz"),
        read: &STORAGE,
    },
    Embedded {
        profile: &tables::SERVICEUSAGE,
        contract: "gcp/serviceusage.v1.json",
        stored: "serviceusage.v1.json.gz",
        raw: include_bytes!("../../../contracts/gcp/serviceusage.v1.json.gz"),
        read: &SERVICEUSAGE,
    },
    Embedded {
        profile: &tables::IAM,
        contract: "gcp/iam.v1.json",
        stored: "iam.v1.json.gz",
        raw: include_bytes!("../../../contracts/gcp/iam.v1.json.gz"),
        read: &IAM,
    },
    Embedded {
        profile: &tables::RESOURCEMANAGER,
        contract: "gcp/cloudresourcemanager.v3.json",
        stored: "cloudresourcemanager.v3.json.gz",
        raw: include_bytes!("../../../contracts/gcp/cloudresourcemanager.v3.json.gz"),
        read: &RESOURCEMANAGER,
    },
];

fn embedded(api: &str) -> Result<&'static Embedded, DocumentError> {
    EMBEDDED
        .iter()
        .find(|e| e.profile.api == api)
        .ok_or_else(|| DocumentError::Unknown {
            api: api.to_string(),
        })
}

/// The APIs whose documents are embedded, with the contract each one is
/// (`("container", "gcp/container.v1.json")`).
pub fn apis() -> Vec<(&'static str, &'static str)> {
    EMBEDDED
        .iter()
        .map(|e| (e.profile.api, e.contract))
        .collect()
}

/// API `api`'s embedded document as Google publishes it (inflated).
pub fn source(api: &str) -> Result<Vec<u8>, DocumentError> {
    let e = embedded(api)?;
    inflate(e)
}

fn inflate(e: &Embedded) -> Result<Vec<u8>, DocumentError> {
    if !e.stored.ends_with(".gz") {
        return Ok(e.raw.to_vec());
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(e.raw)
        .read_to_end(&mut out)
        .map_err(|source| DocumentError::Inflate {
            api: e.profile.api,
            source,
        })?;
    Ok(out)
}

fn read(e: &Embedded) -> Result<Document, DocumentError> {
    let raw = inflate(e)?;
    let doc: Value = serde_json::from_slice(&raw).map_err(|source| DocumentError::Json {
        api: e.profile.api,
        source,
    })?;
    Document::from_json(*e.profile, &doc)
}

/// API `api`'s document, read on first use.
pub fn document(api: &str) -> Result<&'static Document, DocumentError> {
    let e = embedded(api)?;
    e.read
        .get_or_init(|| read(e))
        .as_ref()
        .map_err(|error| DocumentError::Unreadable {
            api: e.profile.api,
            reason: error.to_string(),
        })
}

/// Checks `value` against message `message` of API `api` as a response must conform
/// (see [`Document::conforms`]).
pub fn conforms(api: &str, message: &str, value: &Value) -> Result<(), Vec<String>> {
    document(api)
        .map_err(|e| vec![e.to_string()])?
        .conforms(message, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_document_reads_with_its_methods() {
        for (api, _) in apis() {
            let doc = document(api).expect("the embedded document reads");
            assert!(doc.messages.len() > 5, "{api}");
            assert!(!doc.methods.is_empty(), "{api}");
        }
        let container = document("container").expect("container");
        let update = &container.methods["container.projects.locations.clusters.update"];
        assert_eq!(update.request.as_deref(), Some("UpdateClusterRequest"));
        assert_eq!(update.http_method, "PUT");
        assert!(document("compute").is_err());
    }
}
