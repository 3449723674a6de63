//! Every built-in kind's schema, checked in: the fields, their types, docs, defaults and
//! flags, and the attributes it reports, as `terrain validate`, plans, `import --write`
//! and the plan's JSON Schema read them. A change to a kind's types shows here as a
//! reviewed diff (`UPDATE_EXPECTED=1` rewrites the files).

use crate::common::expect_file;

#[test]
fn every_kinds_schema_is_the_checked_in_one() {
    let registry = terrain_providers::registry::builtin();
    let names: Vec<&str> = registry.names().collect();
    assert!(names.len() >= 19, "{names:?}");
    for name in names {
        let kind = registry.get(name).expect("a registered kind");
        expect_file(
            &format!("schemas/{name}.txt"),
            &format!("{:#?}\n", kind.schema()),
        );
    }
}
