//! The static description of a kind's fields: types, which are required, which force
//! replacement, which are secret, and the attributes the kind reports after apply.
//!
//! The engine validates stacks against it offline (unknown keys, wrong types, bad
//! references) and uses it to decide update-in-place versus replace.
//!
//! A kind writes it once, on its `Spec` and `Outputs` types: [`Fields`] (derived by
//! `#[derive(Fields)]`, the `terrain-derive` crate) lists a struct's fields from their
//! names, doc comments, serde defaults and `#[terrain(…)]` flags, and [`Described`] maps a
//! Rust type to its [`Type`].

use serde_json::Value;

/// The type of a field's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Type {
    String,
    Int,
    Float,
    Bool,
    List(Box<Type>),
    /// A table with free-form keys and values of one type (labels, tags).
    Map(Box<Type>),
    /// A table with known keys.
    Object(Vec<Field>),
    /// Anything JSON can hold (inline manifests).
    Any,
}

impl Type {
    /// A short name for error messages: `string`, `list of string`, `table`.
    pub fn describe(&self) -> String {
        match self {
            Type::String => "string".into(),
            Type::Int => "integer".into(),
            Type::Float => "number".into(),
            Type::Bool => "boolean".into(),
            Type::List(t) => format!("list of {}", t.describe()),
            Type::Map(t) => format!("table of {}", t.describe()),
            Type::Object(_) => "table".into(),
            Type::Any => "any value".into(),
        }
    }

    /// Whether `value` fits this type (integers are accepted where numbers are).
    pub fn accepts(&self, value: &Value) -> bool {
        match (self, value) {
            (Type::Any, _) => true,
            (Type::String, Value::String(_)) => true,
            (Type::Int, Value::Number(n)) => n.is_i64() || n.is_u64(),
            (Type::Float, Value::Number(_)) => true,
            (Type::Bool, Value::Bool(_)) => true,
            (Type::List(t), Value::Array(items)) => items.iter().all(|v| t.accepts(v)),
            (Type::Map(t), Value::Object(map)) => map.values().all(|v| t.accepts(v)),
            (Type::Object(fields), Value::Object(map)) => map.iter().all(|(k, v)| {
                fields
                    .iter()
                    .find(|f| f.name == k)
                    .is_some_and(|f| f.ty.accepts(v))
            }),
            _ => false,
        }
    }
}

/// One field of a spec (or one reported attribute).
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: &'static str,
    pub ty: Type,
    pub required: bool,
    /// Changing this field cannot be done in place: the object is replaced.
    pub force_new: bool,
    /// The value is a secret: never printed, recorded as a sensitive path in state.
    pub sensitive: bool,
    /// The value used when the stack leaves the field out.
    pub default: Option<Value>,
    /// One sentence shown in `terrain validate` errors and docs.
    pub doc: &'static str,
    /// For outputs: the spec fields the value follows. An in-place update that changes
    /// none of them keeps the value, so plans show dependents unchanged instead of
    /// "known after apply" (and replaced). `None`: any update may change it.
    pub derived_from: Option<&'static [&'static str]>,
}

impl Field {
    /// An optional, in-place-updatable field.
    pub fn new(name: &'static str, ty: Type, doc: &'static str) -> Self {
        Self {
            name,
            ty,
            required: false,
            force_new: false,
            sensitive: false,
            default: None,
            doc,
            derived_from: None,
        }
    }

    /// Declares which spec fields an output follows (see [`Field::derived_from`]); an
    /// empty list means no in-place update changes it.
    pub fn derived_from(mut self, fields: &'static [&'static str]) -> Self {
        self.derived_from = Some(fields);
        self
    }

    /// Marks the field required.
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// Marks the field as forcing replacement when it changes.
    pub fn force_new(mut self) -> Self {
        self.force_new = true;
        self
    }

    /// Marks the field secret.
    pub fn sensitive(mut self) -> Self {
        self.sensitive = true;
        self
    }

    /// Sets the value used when the field is left out.
    pub fn default(mut self, value: Value) -> Self {
        self.default = Some(value);
        self
    }
}

/// The fields of a kind's spec and the attributes it reports once applied.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Schema {
    pub fields: Vec<Field>,
    /// Attributes known only after apply (`id`, `endpoint`, `ip_address`…).
    pub outputs: Vec<Field>,
}

impl Schema {
    /// Looks up a spec field by name.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Looks up a reported attribute by name.
    pub fn output(&self, name: &str) -> Option<&Field> {
        self.outputs.iter().find(|f| f.name == name)
    }

    /// The field at a dotted path (`share.capacity_gb`), descending into objects.
    pub fn field_at(&self, path: &[&str]) -> Option<&Field> {
        let (first, rest) = path.split_first()?;
        let mut field = self.field(first)?;
        for part in rest {
            match &field.ty {
                Type::Object(fields) => field = fields.iter().find(|f| f.name == *part)?,
                _ => return Some(field),
            }
        }
        Some(field)
    }

    /// Fills in defaults for fields the spec leaves out (top level and nested objects).
    pub fn with_defaults(&self, spec: &Value) -> Value {
        fill_defaults(&self.fields, spec)
    }
}

impl Schema {
    /// The schema of a kind whose stack table is `S` and whose reported attributes are
    /// `O`, both deriving [`Fields`]. Reported attributes are never required and have no
    /// default, whatever their types say: they are read, not written.
    pub fn of<S: Fields, O: Fields>() -> Schema {
        Schema {
            fields: S::fields(),
            outputs: O::fields().into_iter().map(as_output).collect(),
        }
    }
}

fn as_output(mut field: Field) -> Field {
    field.required = false;
    field.default = None;
    field.ty = output_type(field.ty);
    field
}

fn output_type(ty: Type) -> Type {
    match ty {
        Type::Object(fields) => Type::Object(fields.into_iter().map(as_output).collect()),
        Type::List(t) => Type::List(Box::new(output_type(*t))),
        Type::Map(t) => Type::Map(Box::new(output_type(*t))),
        other => other,
    }
}

/// The fields of a struct a stack writes (or a kind reports), in order: written by
/// `#[derive(Fields)]` from the struct's fields, their doc comments, serde's defaults
/// and `#[terrain(…)]` flags (see the `terrain-derive` crate).
pub trait Fields {
    fn fields() -> Vec<Field>;
}

pub use terrain_derive::Fields;

/// How a field of a Rust type is described: its [`Type`], and whether a stack may leave
/// it out (`Option`). Structs get it from `#[derive(Fields)]`.
pub trait Described {
    /// Whether a field of this type may be left out.
    const OPTIONAL: bool = false;
    fn ty() -> Type;
}

macro_rules! described {
    ($ty:expr => $($t:ty),+) => {
        $(impl Described for $t {
            fn ty() -> Type {
                $ty
            }
        })+
    };
}

described!(Type::String => String);
described!(Type::Int => i64, i32, i16, i8, u64, u32, u16, u8, usize);
described!(Type::Float => f64, f32);
described!(Type::Bool => bool);
described!(Type::Any => Value);

impl<T: Described> Described for Option<T> {
    const OPTIONAL: bool = true;
    fn ty() -> Type {
        T::ty()
    }
}

impl<T: Described> Described for Box<T> {
    const OPTIONAL: bool = T::OPTIONAL;
    fn ty() -> Type {
        T::ty()
    }
}

impl<T: Described> Described for Vec<T> {
    fn ty() -> Type {
        Type::List(Box::new(T::ty()))
    }
}

impl<T: Described> Described for std::collections::BTreeMap<String, T> {
    fn ty() -> Type {
        Type::Map(Box::new(T::ty()))
    }
}

impl<T: Described, S> Described for std::collections::HashMap<String, T, S> {
    fn ty() -> Type {
        Type::Map(Box::new(T::ty()))
    }
}

/// A free-form table (a kind reporting whatever the API answered) has no known fields.
impl Fields for Value {
    fn fields() -> Vec<Field> {
        Vec::new()
    }
}

/// A default as the schema states it: serde's default value, serialized; `None` when it
/// serializes to nothing (an `Option` left out).
pub fn default_of<T: serde::Serialize>(value: &T) -> Option<Value> {
    match serde_json::to_value(value) {
        Ok(Value::Null) | Err(_) => None,
        Ok(v) => Some(v),
    }
}

fn fill_defaults(fields: &[Field], value: &Value) -> Value {
    let Value::Object(map) = value else {
        return value.clone();
    };
    let mut out = map.clone();
    for field in fields {
        match out.get(&field.name.to_string()) {
            None | Some(Value::Null) => {
                if let Some(d) = &field.default {
                    out.insert(field.name.to_string(), d.clone());
                }
            }
            Some(v) => {
                let filled = fill_type(&field.ty, v);
                out.insert(field.name.to_string(), filled);
            }
        }
    }
    Value::Object(out)
}

/// Defaults inside a value of type `ty`: tables with known keys, and such tables in
/// lists and maps (a Job's `volumes = [{claim, mount_path}]` gets `read_only = false`).
fn fill_type(ty: &Type, value: &Value) -> Value {
    match (ty, value) {
        (Type::Object(sub), Value::Object(_)) => fill_defaults(sub, value),
        (Type::List(item), Value::Array(items)) => {
            Value::Array(items.iter().map(|v| fill_type(item, v)).collect())
        }
        (Type::Map(item), Value::Object(map)) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill_type(item, v)))
                .collect(),
        ),
        _ => value.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    fn mode() -> String {
        "0644".to_string()
    }

    /// A nested table whose struct-level default fills its fields.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
    #[serde(default)]
    struct Share {
        /// The share's name.
        #[terrain(force_new)]
        name: String,
        /// Its size
        /// in GB.
        capacity_gb: i64,
    }

    impl Default for Share {
        fn default() -> Self {
            Share {
                name: "vol".into(),
                capacity_gb: 1024,
            }
        }
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Fields)]
    struct Example {
        /// Required: no default, not an Option.
        #[terrain(force_new)]
        name: String,
        /// A default from a function.
        #[serde(default = "mode")]
        mode: String,
        /// The type's default.
        #[serde(default)]
        tags: std::collections::BTreeMap<String, String>,
        /// Optional.
        #[terrain(sensitive)]
        token: Option<String>,
        /// Renamed.
        #[serde(rename = "type")]
        kind: Option<String>,
        /// A table.
        share: Option<Share>,
        /// Tables in a list.
        #[serde(default)]
        shares: Vec<Share>,
        /// Typed, written free-form.
        #[terrain(any)]
        shape: Option<Share>,
        /// Anything.
        #[terrain(derived_from = ["name", "share.name"])]
        raw: serde_json::Value,
        #[serde(skip)]
        cache: Option<String>,
    }

    #[test]
    fn the_derive_reads_types_docs_defaults_and_flags() {
        let share = Type::Object(vec![
            Field::new("name", Type::String, "The share's name.")
                .force_new()
                .default(json!("vol")),
            Field::new("capacity_gb", Type::Int, "Its size in GB.").default(json!(1024)),
        ]);
        let want = vec![
            Field::new("name", Type::String, "Required: no default, not an Option.")
                .required()
                .force_new(),
            Field::new("mode", Type::String, "A default from a function.").default(json!("0644")),
            Field::new(
                "tags",
                Type::Map(Box::new(Type::String)),
                "The type's default.",
            )
            .default(json!({})),
            Field::new("token", Type::String, "Optional.").sensitive(),
            Field::new("type", Type::String, "Renamed."),
            Field::new("share", share.clone(), "A table."),
            Field::new("shares", Type::List(Box::new(share)), "Tables in a list.")
                .default(json!([])),
            Field::new("shape", Type::Any, "Typed, written free-form."),
            Field::new("raw", Type::Any, "Anything.")
                .required()
                .derived_from(&["name", "share.name"]),
        ];
        assert_eq!(Example::fields(), want);
        // Reported attributes are neither required nor defaulted, at any depth.
        let outputs = Schema::of::<Example, Example>().outputs;
        assert!(outputs.iter().all(|f| !f.required && f.default.is_none()));
        let Some(Type::Object(inner)) = outputs.iter().find(|f| f.name == "share").map(|f| &f.ty)
        else {
            panic!("share is a table: {outputs:?}");
        };
        assert!(inner.iter().all(|f| f.default.is_none()), "{inner:?}");
    }

    #[test]
    fn defaults_fill_tables_inside_lists_as_serde_would() {
        // Regression: a Job's volume without `read_only` planned a replace on every run,
        // because the live spec reported the default and the desired spec lacked it.
        let schema = Schema {
            fields: vec![Field::new(
                "volumes",
                Type::List(Box::new(Type::Object(vec![
                    Field::new("claim", Type::String, "").required(),
                    Field::new("read_only", Type::Bool, "").default(json!(false)),
                ]))),
                "",
            )],
            outputs: vec![],
        };
        let filled = schema.with_defaults(
            &json!({"volumes": [{"claim": "a"}, {"claim": "b", "read_only": true}]}),
        );
        assert_eq!(
            filled,
            json!({"volumes": [{"claim": "a", "read_only": false}, {"claim": "b", "read_only": true}]})
        );
    }

    fn schema() -> Schema {
        Schema {
            fields: vec![
                Field::new("name", Type::String, "").required().force_new(),
                Field::new("mode", Type::String, "").default(json!("0644")),
                Field::new(
                    "share",
                    Type::Object(vec![
                        Field::new("name", Type::String, "").force_new(),
                        Field::new("capacity_gb", Type::Int, "").default(json!(1024)),
                    ]),
                    "",
                ),
            ],
            outputs: vec![Field::new("id", Type::String, "")],
        }
    }

    #[test]
    fn defaults_fill_top_level_and_nested() {
        let got = schema().with_defaults(&json!({"name": "a", "share": {"name": "NFSVol"}}));
        assert_eq!(
            got,
            json!({"name": "a", "mode": "0644", "share": {"name": "NFSVol", "capacity_gb": 1024}})
        );
    }

    #[test]
    fn field_at_descends_into_objects() {
        let s = schema();
        assert!(s.field_at(&["share", "name"]).is_some_and(|f| f.force_new));
        assert!(s
            .field_at(&["share", "capacity_gb"])
            .is_some_and(|f| !f.force_new));
        assert!(s.field_at(&["nope"]).is_none());
    }

    #[test]
    fn accepts_checks_nested_types() {
        assert!(Type::List(Box::new(Type::Int)).accepts(&json!([1, 2])));
        assert!(!Type::List(Box::new(Type::Int)).accepts(&json!([1, "2"])));
        assert!(Type::Float.accepts(&json!(3)));
        assert!(!Type::Int.accepts(&json!(3.5)));
    }
}
