//! Contract tests of the fields the Google emulators accept: the discovery documents the
//! sandbox embeds are the ones kept in `contracts/gcp/`, byte for byte.

use terrain_sandbox::gcp::discovery;

#[test]
fn embedded_discovery_documents_are_the_contracts() {
    let apis = discovery::apis();
    assert_eq!(apis.len(), 4, "{apis:?}");
    for (api, contract) in apis {
        let embedded = discovery::source(api).expect("the embedded document inflates");
        assert!(
            embedded == terrain_contracts::bytes(contract),
            "{api}: the embedded document differs from contract {contract}"
        );
    }
}
