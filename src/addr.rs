//! Resource addresses: `kind.name`, with the instance key of a resource that has
//! `count` (`kubernetes_job.shard[0]`) or `for_each` (`gke_node_pool.gpu["t4"]`), under
//! the module calls that made it (`module.gpu_pool["eu"].gke_node_pool.main`). Every
//! error, plan line and state entry is keyed by one.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which instance of a resource or module with `count` (an index) or `for_each` (a
/// key).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    Index(usize),
    Name(String),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Index(i) => write!(f, "[{i}]"),
            // A JSON string is a valid quoted key, escapes and all.
            Key::Name(k) => write!(
                f,
                "[{}]",
                serde_json::to_string(k).unwrap_or_else(|_| format!("\"{k}\""))
            ),
        }
    }
}

/// One module call on the way to a resource: `module.NAME` or `module.NAME[KEY]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModuleStep {
    pub name: String,
    pub key: Option<Key>,
}

impl fmt::Display for ModuleStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "module.{}", self.name)?;
        if let Some(k) = &self.key {
            write!(f, "{k}")?;
        }
        Ok(())
    }
}

/// The address of a resource in a stack: its kind, its name, the module calls it sits
/// under (none for the stack's own) and its instance key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Address {
    pub kind: String,
    pub name: String,
    /// Boxed, and absent for most: addresses key every map a plan keeps, so one costs
    /// a pointer more than `kind.name`, not the size of what few have.
    place: Option<Box<Place>>,
}

/// The stack's own resources first, then each module call's; within them by kind,
/// name and instance (indexes in numeric order, then keys).
impl Ord for Address {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.module()
            .cmp(other.module())
            .then_with(|| self.kind.cmp(&other.kind))
            .then_with(|| self.name.cmp(&other.name))
            .then_with(|| self.key().cmp(&other.key()))
    }
}

impl PartialOrd for Address {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Where an address is besides its kind and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
struct Place {
    module: Vec<ModuleStep>,
    key: Option<Key>,
}

/// Why a string is not an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a resource address; addresses look like `kind.name` (e.g. `local_file.config`), `kind.name[0]`, `kind.name[\"key\"]` or `module.NAME.kind.name`"
)]
pub struct BadAddress(pub String);

/// A piece of a dotted path with an optional bracket: `name`, `name[0]`, `name["k"]`,
/// `name[*]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub name: String,
    pub bracket: Option<Bracket>,
}

/// What a `[…]` after a name holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bracket {
    Key(Key),
    /// `[*]`: every instance.
    Splat,
}

/// Splits `a.b["x.y"].c[0]` into segments; `None` when it is malformed (an empty
/// segment, an unclosed bracket or string, text after a bracket).
pub fn segments(s: &str) -> Option<Vec<Segment>> {
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        let end = rest.find(['.', '[']).unwrap_or(rest.len());
        let name = &rest[..end];
        if name.is_empty() {
            return None;
        }
        rest = &rest[end..];
        let mut bracket = None;
        if let Some(inner) = rest.strip_prefix('[') {
            let (b, after) = parse_bracket(inner)?;
            bracket = Some(b);
            rest = after;
        }
        out.push(Segment {
            name: name.to_string(),
            bracket,
        });
        if rest.is_empty() {
            return Some(out);
        }
        rest = rest.strip_prefix('.')?;
    }
}

/// The inside of `[…]` (after the `[`) and what follows the `]`.
fn parse_bracket(s: &str) -> Option<(Bracket, &str)> {
    if let Some(after) = s.strip_prefix("*]") {
        return Some((Bracket::Splat, after));
    }
    if s.starts_with('"') {
        // The closing quote is the first one not escaped.
        let bytes = s.as_bytes();
        let mut i = 1;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => i += 2,
                b'"' => break,
                _ => i += 1,
            }
        }
        let quoted = s.get(..=i)?;
        let key: String = serde_json::from_str(quoted).ok()?;
        let after = s.get(i + 1..)?.strip_prefix(']')?;
        return Some((Bracket::Key(Key::Name(key)), after));
    }
    let close = s.find(']')?;
    let digits = &s[..close];
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some((
        Bracket::Key(Key::Index(digits.parse().ok()?)),
        &s[close + 1..],
    ))
}

impl Address {
    /// The address of resource `name` of `kind`, in the stack itself, not an instance.
    pub fn new(kind: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            name: name.into(),
            place: None,
        }
    }

    /// The module calls this resource sits under, outermost first.
    pub fn module(&self) -> &[ModuleStep] {
        self.place.as_deref().map_or(&[], |p| p.module.as_slice())
    }

    /// The instance key, for a block with `count` or `for_each`.
    pub fn key(&self) -> Option<&Key> {
        self.place.as_deref().and_then(|p| p.key.as_ref())
    }

    fn set(mut self, module: Vec<ModuleStep>, key: Option<Key>) -> Self {
        self.place = (!module.is_empty() || key.is_some()).then(|| Box::new(Place { module, key }));
        self
    }

    /// This address with instance key `key`.
    pub fn with_key(self, key: Option<Key>) -> Self {
        let module = self.module().to_vec();
        self.set(module, key)
    }

    /// This address under module calls `outer` (prefixed to its own).
    pub fn within(self, outer: &[ModuleStep]) -> Self {
        if outer.is_empty() {
            return self;
        }
        let module: Vec<ModuleStep> = outer.iter().chain(self.module()).cloned().collect();
        let key = self.key().cloned();
        self.set(module, key)
    }

    /// This address with its module calls replaced by `module`.
    pub fn with_module(self, module: Vec<ModuleStep>) -> Self {
        let key = self.key().cloned();
        self.set(module, key)
    }

    /// The resource block this is an instance of: the address without its key.
    pub fn resource(&self) -> Address {
        self.clone().with_key(None)
    }

    /// Whether this address, used as a target or in `depends_on`, covers `other`: the
    /// same address, or one without a key naming every instance of a block.
    pub fn covers(&self, other: &Address) -> bool {
        self == other
            || (self.key().is_none()
                && other.kind == self.kind
                && other.name == self.name
                && other.module() == self.module())
    }

    /// Parses `module.M[K].kind.name[K]` (module calls and keys optional).
    pub fn parse(s: &str) -> Result<Self, BadAddress> {
        let bad = || BadAddress(s.to_string());
        let segs = segments(s).ok_or_else(bad)?;
        let mut module = Vec::new();
        let mut i = 0;
        while segs.len() - i > 2 && segs[i].name == "module" && segs[i].bracket.is_none() {
            let call = &segs[i + 1];
            if !is_identifier(&call.name) {
                return Err(bad());
            }
            let key = match &call.bracket {
                None => None,
                Some(Bracket::Key(k)) => Some(k.clone()),
                Some(Bracket::Splat) => return Err(bad()),
            };
            module.push(ModuleStep {
                name: call.name.clone(),
                key,
            });
            i += 2;
        }
        let [kind, name] = &segs[i..] else {
            return Err(bad());
        };
        if kind.bracket.is_some()
            || !is_identifier(&kind.name)
            || !is_identifier(&name.name)
            || kind.name == "module"
        {
            return Err(bad());
        }
        let key = match &name.bracket {
            None => None,
            Some(Bracket::Key(k)) => Some(k.clone()),
            Some(Bracket::Splat) => return Err(bad()),
        };
        Ok(Self::new(&kind.name, &name.name).set(module, key))
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
        for step in self.module() {
            write!(f, "{step}.")?;
        }
        write!(f, "{}.{}", self.kind, self.name)?;
        if let Some(k) = self.key() {
            write!(f, "{k}")?;
        }
        Ok(())
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
    fn instance_keys_and_module_calls_round_trip() {
        for s in [
            "kubernetes_job.shard[0]",
            "gke_node_pool.gpu[\"t4\"]",
            "gke_node_pool.gpu[\"a.b]c\\\"d\"]",
            "module.gpu_pool.gke_node_pool.main",
            "module.region[\"eu\"].module.pool[1].gke_node_pool.main[\"l4\"]",
        ] {
            let a = Address::parse(s).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(a.to_string(), s);
        }
        let a = Address::parse("module.m[2].kubernetes_job.shard[10]").expect("valid");
        assert_eq!(
            a.module(),
            [ModuleStep {
                name: "m".into(),
                key: Some(Key::Index(2))
            }]
        );
        assert_eq!(a.key(), Some(&Key::Index(10)));
        assert_eq!(
            std::mem::size_of::<Address>(),
            56,
            "an address is kind, name and a pointer"
        );
    }

    #[test]
    fn a_block_address_covers_its_instances() {
        let block = Address::parse("kubernetes_job.shard").expect("valid");
        let one = Address::parse("kubernetes_job.shard[1]").expect("valid");
        assert!(block.covers(&one));
        assert!(!one.covers(&block));
        assert!(!block.covers(&Address::parse("kubernetes_job.other[1]").expect("valid")));
    }

    #[test]
    fn instances_sort_by_index_then_key() {
        let mut v: Vec<Address> = ["a.b[10]", "a.b[2]", "a.b", "module.m.a.b", "a.b[\"x\"]"]
            .iter()
            .map(|s| Address::parse(s).expect("valid"))
            .collect();
        v.sort();
        let shown: Vec<String> = v.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            ["a.b", "a.b[2]", "a.b[10]", "a.b[\"x\"]", "module.m.a.b"]
        );
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "local_file",
            ".x",
            "x.",
            "a.b.c",
            "1a.b",
            "a b.c",
            "a.b[",
            "a.b[x]",
            "a.b[*]",
            "a[0].b",
            "a.b[0]x",
            "a.b[\"x]",
            "module.m.a",
            "module.a.b",
        ] {
            assert!(Address::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
