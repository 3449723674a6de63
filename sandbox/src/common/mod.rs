//! What every emulated API shares and no cloud owns: identifiers ([`ids`]), content hashes
//! ([`hash`]), the timestamp formats the APIs write ([`time`]) and the certificate
//! authority each emulated cluster gets ([`ca`]).

pub(crate) mod ca;
pub(crate) mod hash;
pub(crate) mod ids;
pub(crate) mod time;
