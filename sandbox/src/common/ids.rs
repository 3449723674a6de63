//! Identifiers the emulated APIs hand out: random hex (request ids, suffixes, OIDC ids)
//! and the RFC 4122 uids Kubernetes objects and EKS node groups carry.

/// `n` random lowercase hex digits.
pub(crate) fn random_hex(n: usize) -> String {
    let mut out = String::with_capacity(n + 16);
    while out.len() < n {
        out.push_str(&format!("{:016x}", rand::random::<u64>()));
    }
    out.truncate(n);
    out
}

/// A random RFC 4122 version-4 uid, as the API server assigns.
pub(crate) fn new_uid() -> String {
    let a: u128 = rand::random();
    // Version nibble 4 and variant bits 10, as RFC 4122 section 4.4 sets them.
    let b = (a & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
    let h = format!("{b:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_hex_has_the_length_asked_for() {
        for n in [0, 1, 8, 16, 17, 32] {
            let h = random_hex(n);
            assert_eq!(h.len(), n);
            assert!(h
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        }
    }

    #[test]
    fn uids_are_version_4_with_the_rfc_variant() {
        let uid = new_uid();
        let parts: Vec<&str> = uid.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "{uid}");
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{uid}");
    }
}
