//! The request side of the AWS query protocol (EC2, IAM, STS): form-encoded parameters in
//! the body and the query string together, `Prefix.N` lists (EC2's `ZoneName.1`),
//! `Prefix.member.N` lists and lists of structures (IAM's `Tags.member.1.Key`), and the
//! answer envelope IAM and STS share (`<OpResponse><OpResult/><ResponseMetadata/>`).

use std::collections::BTreeMap;

use super::xml::Element;
use super::{AwsRequest, AwsResponse};
use crate::http::parse_query;

/// The request's parameters: the form body and the query string together.
pub(crate) fn params(req: &AwsRequest) -> Vec<(String, String)> {
    let mut out = req.query.clone();
    if let Ok(body) = std::str::from_utf8(&req.body) {
        out.extend(parse_query(body.trim()));
    }
    out
}

/// The first value of parameter `name`.
pub(crate) fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// `Prefix.N` lists (`ZoneName.1`, `ZoneName.2`; `TagKeys.member.1` with the prefix
/// `TagKeys.member`), in index order.
pub(crate) fn list(params: &[(String, String)], prefix: &str) -> Vec<String> {
    let mut items: BTreeMap<u32, String> = BTreeMap::new();
    for (k, v) in params {
        if let Some(n) = k
            .strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('.'))
            .and_then(|n| n.parse().ok())
        {
            items.insert(n, v.clone());
        }
    }
    items.into_values().collect()
}

/// `Prefix.N.Field` lists of structures (`Tags.member.1.Key`, `Tags.member.1.Value`),
/// in index order, each as its fields.
pub(crate) fn structs(params: &[(String, String)], prefix: &str) -> Vec<BTreeMap<String, String>> {
    let mut items: BTreeMap<u32, BTreeMap<String, String>> = BTreeMap::new();
    for (k, v) in params {
        let Some((n, field)) = k
            .strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('.'))
            .and_then(|r| r.split_once('.'))
        else {
            continue;
        };
        if let Ok(n) = n.parse::<u32>() {
            items
                .entry(n)
                .or_default()
                .insert(field.to_string(), v.clone());
        }
    }
    items.into_values().collect()
}

/// The answer to `action` in IAM's and STS's envelope: the result wrapper (when the
/// operation has an output) and the request id. `result` `None` leaves the wrapper out,
/// as for operations without output (`DeleteRole`).
pub(crate) fn respond(xmlns: &str, action: &str, result: Option<Vec<Element>>) -> AwsResponse {
    let mut root = Element::new(&format!("{action}Response")).attr("xmlns", xmlns);
    if let Some(children) = result {
        let mut wrapper = Element::new(&format!("{action}Result"));
        for child in children {
            wrapper.push(child);
        }
        root.push(wrapper);
    }
    root.push(
        Element::new("ResponseMetadata")
            .with(Element::leaf("RequestId", crate::common::ids::new_uid())),
    );
    AwsResponse::xml(200, &root.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_structures_come_in_index_order() {
        let p = parse_query(
            "Tags.member.2.Key=b&Tags.member.1.Key=a&Tags.member.1.Value=1&TagKeys.member.10=z&TagKeys.member.2=y&Other=x",
        );
        assert_eq!(list(&p, "TagKeys.member"), ["y", "z"]);
        let tags = structs(&p, "Tags.member");
        assert_eq!(tags.len(), 2);
        assert_eq!(tags[0].get("Key").map(String::as_str), Some("a"));
        assert_eq!(tags[0].get("Value").map(String::as_str), Some("1"));
        assert_eq!(tags[1].get("Value"), None);
        assert_eq!(param(&p, "Other"), Some("x"));
    }

    #[test]
    fn the_envelope_wraps_the_result_and_carries_a_request_id() {
        let r = respond("urn:x", "GetRole", Some(vec![Element::leaf("A", "1")]));
        let xml = Element::parse(&r.body).expect("well-formed");
        assert_eq!(xml.name, "GetRoleResponse");
        assert_eq!(
            xml.find("GetRoleResult").and_then(|r| r.text_of("A")),
            Some("1")
        );
        assert!(xml
            .find("ResponseMetadata")
            .and_then(|m| m.text_of("RequestId"))
            .is_some_and(|id| !id.is_empty()));
        let none = Element::parse(&respond("urn:x", "DeleteRole", None).body).expect("xml");
        assert!(none.find("DeleteRoleResult").is_none());
    }
}
