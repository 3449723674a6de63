//! The digests S3 checks request bodies with (`Content-MD5`, flexible checksums) and its
//! ETags: the hashes from the RustCrypto crates, the CRCs (a table each) here.

/// The digest of `data` with the `x-amz-checksum-<algorithm>` algorithm, when the
/// sandbox can compute it.
pub(super) fn compute(algorithm: &str, data: &[u8]) -> Option<Vec<u8>> {
    Some(match algorithm {
        "crc32" => crc32(data, 0xEDB8_8320).to_be_bytes().to_vec(),
        "crc32c" => crc32(data, 0x82F6_3B78).to_be_bytes().to_vec(),
        "crc64nvme" => crc64(data, 0x9A6C_9329_AC4B_C9B5).to_be_bytes().to_vec(),
        "sha1" => sha1(data).to_vec(),
        "sha256" => sha256(data).to_vec(),
        "md5" => md5(data).to_vec(),
        _ => return None,
    })
}

/// A reflected CRC-32 with initial value and final XOR all ones (CRC-32 with
/// 0xEDB88320, CRC-32C with 0x82F63B78).
pub(super) fn crc32(data: &[u8], poly: u32) -> u32 {
    let mut table = [0u32; 256];
    for (i, slot) in table.iter_mut().enumerate() {
        let mut c = i as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ poly } else { c >> 1 };
        }
        *slot = c;
    }
    !data.iter().fold(!0u32, |c, b| {
        table[((c ^ u32::from(*b)) & 0xFF) as usize] ^ (c >> 8)
    })
}

/// The reflected CRC-64 of the same shape (CRC-64/NVME with 0x9A6C9329AC4BC9B5).
pub(super) fn crc64(data: &[u8], poly: u64) -> u64 {
    let mut table = [0u64; 256];
    for (i, slot) in table.iter_mut().enumerate() {
        let mut c = i as u64;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ poly } else { c >> 1 };
        }
        *slot = c;
    }
    !data.iter().fold(!0u64, |c, b| {
        table[((c ^ u64::from(*b)) & 0xFF) as usize] ^ (c >> 8)
    })
}

/// MD5, for `Content-MD5` and ETags.
pub(super) fn md5(data: &[u8]) -> [u8; 16] {
    use md5::Digest as _;
    md5::Md5::digest(data).into()
}

/// SHA-1, for `x-amz-checksum-sha1`.
pub(super) fn sha1(data: &[u8]) -> [u8; 20] {
    use sha1::Digest as _;
    sha1::Sha1::digest(data).into()
}

/// SHA-256, for `x-amz-checksum-sha256`.
pub(super) fn sha256(data: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(data).into()
}

#[cfg(test)]
mod tests {
    use super::super::digest;
    use super::super::format::hex;

    #[test]
    fn digests_match_published_test_vectors() {
        assert_eq!(hex(&digest::md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(
            hex(&digest::md5(b"abc")),
            "900150983cd24fb0d6963f7d28e17f72"
        );
        let long =
            b"12345678901234567890123456789012345678901234567890123456789012345678901234567890";
        assert_eq!(hex(&digest::md5(long)), "57edf4a22be3c955ac49da2e2107b67a");
        assert_eq!(
            hex(&digest::sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            hex(&digest::sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(&digest::sha256(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        assert_eq!(digest::crc32(b"123456789", 0xEDB8_8320), 0xCBF4_3926);
        assert_eq!(digest::crc32(b"123456789", 0x82F6_3B78), 0xE306_9283);
        assert_eq!(
            digest::crc64(b"123456789", 0x9A6C_9329_AC4B_C9B5),
            0xAE8B_1486_0A79_9888
        );
    }
}
