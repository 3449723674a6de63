//! The certificate authority each emulated cluster gets, whichever cloud made it: the API
//! server's serving certificate is signed by it and kubeconfigs trust it.

/// A fresh self-signed CA for `cluster`: its PEM certificate and PEM private key.
pub(crate) fn cluster_ca(cluster: &str) -> Result<(String, String), rcgen::Error> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    // A random prefix: two clusters of one name (made, deleted, made again) get CAs
    // a client cannot confuse.
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("{}-{cluster}", super::ids::random_hex(8)),
    );
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}
