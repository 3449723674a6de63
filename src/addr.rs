//! Resource addresses: `kind.name`. Every error, plan line and state entry is keyed by one.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The address of a resource in a stack: its kind and its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Address {
    pub kind: String,
    pub name: String,
}

/// Why a string is not an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a resource address; addresses look like `kind.name` (e.g. `local_file.config`)"
)]
pub struct BadAddress(pub String);

impl Address {
    /// The address of resource `name` of `kind`.
    pub fn new(kind: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            name: name.into(),
        }
    }

    /// Parses `kind.name`.
    pub fn parse(s: &str) -> Result<Self, BadAddress> {
        let (kind, name) = s.split_once('.').ok_or_else(|| BadAddress(s.to_string()))?;
        if !is_identifier(kind) || !is_identifier(name) {
            return Err(BadAddress(s.to_string()));
        }
        Ok(Self::new(kind, name))
    }
}

/// Names of kinds, resources, variables and outputs: a letter or `_`, then letters,
/// digits, `_` or `-`.
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.kind, self.name)
    }
}

impl TryFrom<String> for Address {
    type Error = BadAddress;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<Address> for String {
    fn from(a: Address) -> String {
        a.to_string()
    }
}

impl std::str::FromStr for Address {
    type Err = BadAddress;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let a = Address::parse("local_file.config").expect("valid address");
        assert_eq!(a.kind, "local_file");
        assert_eq!(a.name, "config");
        assert_eq!(a.to_string(), "local_file.config");
    }

    #[test]
    fn rejects_malformed() {
        for bad in ["", "local_file", ".x", "x.", "a.b.c", "1a.b", "a b.c"] {
            assert!(Address::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
