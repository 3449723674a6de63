//! Cloud TPU (tpu v2), as far as capacity planning reads it: which TPU accelerator types
//! each zone offers (`projects.locations.acceleratorTypes.list/get`) and the locations
//! (`projects.locations.list/get`). Served under the `/tpu/` root at `v2/…` (the
//! discovery document's `servicePath` is empty), and at `v1/…` for `gcloud compute tpus
//! accelerator-types`, whose v1 AcceleratorType has only `name` and `type`. The table is a snapshot of Google's
//! TPU regions: v5e (`v5litepod-*`) in us-central1-a, us-east1-c and europe-west4-b,
//! v5p in us-central1-a and europe-west4-b, v6e in us-central1-b, us-east1-d and
//! europe-west4-a, v4 in us-central2-b only, v2 and v3 in a few older zones.

use serde_json::{json, Value};

use super::error::ApiError;
use crate::http::{ApiRequest, ApiResponse};

/// A TPU generation: its name prefix, its `AcceleratorConfig.type`, and the slices a zone
/// offers, as (accelerator type suffix, topology).
struct Generation {
    prefix: &'static str,
    config_type: &'static str,
    slices: &'static [(u32, &'static str)],
}

const V2: Generation = Generation {
    prefix: "v2",
    config_type: "V2",
    slices: &[
        (8, "2x2"),
        (32, "4x4"),
        (128, "8x8"),
        (256, "8x16"),
        (512, "16x16"),
    ],
};
const V3: Generation = Generation {
    prefix: "v3",
    config_type: "V3",
    slices: &[
        (8, "2x2"),
        (32, "4x4"),
        (64, "4x8"),
        (128, "8x8"),
        (256, "8x16"),
        (512, "16x16"),
        (1024, "16x32"),
        (2048, "32x32"),
    ],
};
/// v4 and v5p names count TensorCores, two per chip.
const V4: Generation = Generation {
    prefix: "v4",
    config_type: "V4",
    slices: &[
        (8, "2x2x1"),
        (16, "2x2x2"),
        (32, "2x2x4"),
        (64, "2x4x4"),
        (128, "4x4x4"),
        (256, "4x4x8"),
        (512, "4x8x8"),
        (1024, "8x8x8"),
    ],
};
const V5P: Generation = Generation {
    prefix: "v5p",
    config_type: "V5P",
    slices: &[
        (8, "2x2x1"),
        (16, "2x2x2"),
        (32, "2x2x4"),
        (64, "2x4x4"),
        (128, "4x4x4"),
        (256, "4x4x8"),
        (512, "4x8x8"),
        (1024, "8x8x8"),
    ],
};
/// v5e and v6e names count chips.
const V5E: Generation = Generation {
    prefix: "v5litepod",
    config_type: "V5LITE_POD",
    slices: &[
        (1, "1x1"),
        (4, "2x2"),
        (8, "2x4"),
        (16, "4x4"),
        (32, "4x8"),
        (64, "8x8"),
        (128, "8x16"),
        (256, "16x16"),
    ],
};
const V6E: Generation = Generation {
    prefix: "v6e",
    config_type: "V6E",
    slices: &[
        (1, "1x1"),
        (4, "2x2"),
        (8, "2x4"),
        (16, "4x4"),
        (32, "4x8"),
        (64, "8x8"),
        (128, "8x16"),
        (256, "16x16"),
    ],
};

/// Every zone Cloud TPU knows and the generations it offers there; a zone listed with
/// none has no TPUs (its list is empty, as Cloud TPU answers for such zones).
const ZONES: &[(&str, &[&Generation])] = &[
    ("us-central1-a", &[&V3, &V5E, &V5P]),
    ("us-central1-b", &[&V2, &V3, &V6E]),
    ("us-central1-c", &[&V2]),
    ("us-central1-f", &[&V2, &V3]),
    ("us-central2-b", &[&V4]),
    ("us-east1-b", &[]),
    ("us-east1-c", &[&V5E]),
    ("us-east1-d", &[&V6E]),
    ("europe-west4-a", &[&V2, &V3, &V6E]),
    ("europe-west4-b", &[&V5E, &V5P]),
    ("europe-west4-c", &[]),
];

fn zone(location: &str) -> Option<&'static [&'static Generation]> {
    ZONES.iter().find(|(z, _)| *z == location).map(|(_, g)| *g)
}

fn accelerator_types(
    project: &str,
    location: &str,
    generations: &[&Generation],
    v1: bool,
) -> Vec<Value> {
    generations
        .iter()
        .flat_map(|g| {
            g.slices.iter().map(move |(n, topology)| {
                let name = format!("{}-{n}", g.prefix);
                let mut t = json!({
                    "name": format!("projects/{project}/locations/{location}/acceleratorTypes/{name}"),
                    "type": name,
                });
                if !v1 {
                    t["acceleratorConfigs"] = json!([{"type": g.config_type, "topology": topology}]);
                }
                t
            })
        })
        .collect()
}

fn location_not_found(project: &str, location: &str) -> ApiError {
    ApiError::not_found(format!(
        "Location projects/{project}/locations/{location} is not found or access is unauthorized."
    ))
}

fn render_location(project: &str, location: &str) -> Value {
    json!({
        "name": format!("projects/{project}/locations/{location}"),
        "locationId": location,
        "labels": {"cloud.googleapis.com/region": super::compute::region_of(location)},
    })
}

/// Serves one Cloud TPU request; only reads.
pub(crate) fn handle(req: &ApiRequest) -> Result<ApiResponse, ApiError> {
    let segments = req.segments();
    let s: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = req.method.as_str();
    if method != "GET" {
        return Err(ApiError::no_route(method, &req.path));
    }
    let Some((&version, rest)) = s.split_first().filter(|(v, _)| **v == "v1" || **v == "v2") else {
        return Err(ApiError::no_route(method, &req.path));
    };
    let v1 = version == "v1";
    let body = match rest {
        ["projects", project, "locations"] => {
            let locations: Vec<Value> = ZONES
                .iter()
                .map(|(z, _)| render_location(project, z))
                .collect();
            json!({"locations": locations})
        }
        ["projects", project, "locations", location] => {
            zone(location).ok_or_else(|| location_not_found(project, location))?;
            render_location(project, location)
        }
        ["projects", project, "locations", location, "acceleratorTypes"] => {
            let generations =
                zone(location).ok_or_else(|| location_not_found(project, location))?;
            let mut types = accelerator_types(project, location, generations, v1);
            // `filter` takes `type=…` (the one field worth filtering on); other filters
            // are not applied, as a client filtering locally still gets its answer.
            if let Some(wanted) = req
                .param("filter")
                .and_then(|f| f.trim().strip_prefix("type="))
                .map(|v| v.trim().trim_matches('"'))
            {
                types.retain(|t| {
                    crate::capacity::glob(wanted, t["type"].as_str().unwrap_or_default())
                });
            }
            // proto3 JSON leaves an empty list out.
            if types.is_empty() {
                json!({})
            } else {
                json!({"acceleratorTypes": types})
            }
        }
        ["projects", project, "locations", location, "acceleratorTypes", name] => {
            let generations =
                zone(location).ok_or_else(|| location_not_found(project, location))?;
            accelerator_types(project, location, generations, v1)
                .into_iter()
                .find(|t| t["type"] == *name)
                .ok_or_else(|| {
                    ApiError::not_found(format!(
                        "Resource 'projects/{project}/locations/{location}/acceleratorTypes/{name}' was not found"
                    ))
                })?
        }
        _ => return Err(ApiError::no_route(method, &req.path)),
    };
    Ok(ApiResponse::ok(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    fn get(path: &str) -> Result<Value, ApiError> {
        handle(&ApiRequest::new(Method::GET, path, None))
            .map(|r| r.json_body().cloned().unwrap_or(Value::Null))
    }

    fn types(list: &Value) -> Vec<String> {
        list["acceleratorTypes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["type"].as_str().map(str::to_string))
            .collect()
    }

    #[test]
    fn tpu_generations_are_offered_where_google_sells_them() {
        let a =
            types(&get("v2/projects/p/locations/us-central1-a/acceleratorTypes").expect("list"));
        assert!(
            a.contains(&"v5litepod-4".to_string()) && a.contains(&"v5p-8".to_string()),
            "{a:?}"
        );
        assert!(!a.iter().any(|t| t.starts_with("v6e-")), "{a:?}");
        let c =
            types(&get("v2/projects/p/locations/us-central1-c/acceleratorTypes").expect("list"));
        assert!(
            !c.iter().any(|t| t.starts_with("v5litepod-")),
            "no v5e in us-central1-c: {c:?}"
        );
        let eu =
            types(&get("v2/projects/p/locations/europe-west4-b/acceleratorTypes").expect("list"));
        assert!(eu.contains(&"v5litepod-8".to_string()), "{eu:?}");
        let v4 =
            types(&get("v2/projects/p/locations/us-central2-b/acceleratorTypes").expect("list"));
        assert_eq!(v4.first().map(String::as_str), Some("v4-8"));
        assert_eq!(
            get("v2/projects/p/locations/us-east1-b/acceleratorTypes").expect("empty"),
            json!({})
        );
        let one = get("v2/projects/p/locations/us-central1-a/acceleratorTypes/v5litepod-16")
            .expect("get");
        assert_eq!(
            one,
            json!({"name": "projects/p/locations/us-central1-a/acceleratorTypes/v5litepod-16", "type": "v5litepod-16",
                   "acceleratorConfigs": [{"type": "V5LITE_POD", "topology": "4x4"}]})
        );
        let v4_32 =
            get("v2/projects/p/locations/us-central2-b/acceleratorTypes/v4-32").expect("get");
        assert_eq!(
            v4_32["acceleratorConfigs"][0],
            json!({"type": "V4", "topology": "2x2x4"})
        );
        let filtered =
            get("v2/projects/p/locations/us-central1-a/acceleratorTypes?filter=type%3Dv5p-*")
                .expect("list");
        assert!(types(&filtered).iter().all(|t| t.starts_with("v5p-")));
        assert!(get("v2/projects/p/locations/us-central1-a/acceleratorTypes/v6e-8").is_err());
        assert!(get("v2/projects/p/locations/mars-1a/acceleratorTypes").is_err());
        let v1 =
            get("v1/projects/p/locations/us-central1-a/acceleratorTypes/v5litepod-16").expect("v1");
        assert_eq!(
            v1,
            json!({"name": "projects/p/locations/us-central1-a/acceleratorTypes/v5litepod-16", "type": "v5litepod-16"})
        );
        assert!(get("v3/projects/p/locations").is_err());
        let locations = get("v2/projects/p/locations").expect("locations");
        assert_eq!(locations["locations"][0]["locationId"], "us-central1-a");
    }
}
