//! `#[derive(Fields)]`: a kind's schema written from its types, so a field's name, type,
//! doc, default and flags are stated once, on the field.
//!
//! For each named field of a struct it produces a `terrain_providers::schema::Field`:
//! - the name is the field's, or its `#[serde(rename = "…")]`;
//! - the type comes from the Rust type through `schema::Described` (`String` is a
//!   string, `Vec<T>` a list, `BTreeMap<String, T>` a table of T, `Option<T>` an optional
//!   T, a struct deriving `Fields` a table with those fields, `serde_json::Value` any
//!   value), or `#[terrain(any)]` for a typed value users write free-form;
//! - the doc is the doc comment, its lines joined by spaces (`#[terrain(doc = EXPR)]`
//!   for a sentence shared by several kinds);
//! - a field is required unless its type is an `Option` or serde has a default for it;
//! - the default is serde's own (`#[serde(default = "f")]` calls `f`, `#[serde(default)]`
//!   takes the type's or the struct's `Default`), serialized, so serde and the schema
//!   cannot disagree;
//! - `#[terrain(force_new)]`, `#[terrain(sensitive)]` and
//!   `#[terrain(derived_from = ["share.name"])]` set the flags of the same names;
//!   `#[serde(skip)]` and `#[terrain(skip)]` leave a field out.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::quote;
use syn::punctuated::Punctuated;
use syn::{
    parse_macro_input, Attribute, Data, DeriveInput, Expr, Fields as SynFields, LitStr, Token,
};

/// Derives `schema::Fields` and `schema::Described` for a struct with named fields.
#[proc_macro_derive(Fields, attributes(terrain))]
pub fn derive_fields(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// What serde says about a field or a struct.
#[derive(Default)]
struct Serde {
    rename: Option<String>,
    /// `#[serde(default)]`.
    default: bool,
    /// `#[serde(default = "path")]`.
    default_fn: Option<syn::ExprPath>,
    skip: bool,
}

fn serde_of(attrs: &[Attribute]) -> syn::Result<Serde> {
    let mut out = Serde::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename") {
                let lit: LitStr = meta.value()?.parse()?;
                out.rename = Some(lit.value());
            } else if meta.path.is_ident("default") {
                if meta.input.peek(Token![=]) {
                    let lit: LitStr = meta.value()?.parse()?;
                    out.default_fn = Some(lit.parse()?);
                } else {
                    out.default = true;
                }
            } else if meta.path.is_ident("skip") || meta.path.is_ident("skip_deserializing") {
                out.skip = true;
            } else if meta.input.peek(Token![=]) {
                // Other settings (`skip_serializing_if = "…"`, `rename_all = "…"`) do not
                // change what a stack may write.
                let _: Expr = meta.value()?.parse()?;
            }
            Ok(())
        })?;
    }
    Ok(out)
}

/// What `#[terrain(…)]` says about a field.
#[derive(Default)]
struct Terrain {
    force_new: bool,
    sensitive: bool,
    any: bool,
    skip: bool,
    derived_from: Option<Vec<LitStr>>,
    doc: Option<Expr>,
}

fn terrain_of(attrs: &[Attribute]) -> syn::Result<Terrain> {
    let mut out = Terrain::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("terrain")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("force_new") {
                out.force_new = true;
            } else if meta.path.is_ident("sensitive") {
                out.sensitive = true;
            } else if meta.path.is_ident("any") {
                out.any = true;
            } else if meta.path.is_ident("skip") {
                out.skip = true;
            } else if meta.path.is_ident("doc") {
                out.doc = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("derived_from") {
                let value = meta.value()?;
                let content;
                syn::bracketed!(content in value);
                let items: Punctuated<LitStr, Token![,]> =
                    content.parse_terminated(|p| p.parse::<LitStr>(), Token![,])?;
                out.derived_from = Some(items.into_iter().collect());
            } else {
                return Err(meta.error(
                    "unknown terrain attribute; use force_new, sensitive, any, skip, doc = …, derived_from = [\"…\"]",
                ));
            }
            Ok(())
        })?;
    }
    Ok(out)
}

/// The doc comment's lines, each without the one space after `///`, trimmed and joined
/// by single spaces.
fn doc_of(attrs: &[Attribute]) -> Option<String> {
    let mut lines = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("doc")) {
        if let syn::Meta::NameValue(nv) = &attr.meta {
            if let Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) = &nv.value
            {
                let line = s.value();
                let line = line.trim();
                if !line.is_empty() {
                    lines.push(line.to_string());
                }
            }
        }
    }
    (!lines.is_empty()).then(|| lines.join(" "))
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    let name = &input.ident;
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            name,
            "Fields derives only for structs; give an enum a `Described` impl",
        ));
    };
    let SynFields::Named(named) = &data.fields else {
        return Err(syn::Error::new_spanned(
            name,
            "Fields derives only for structs with named fields",
        ));
    };
    let container = serde_of(&input.attrs)?;
    let root = quote!(::terrain_providers::schema);
    let mut fields = Vec::new();
    for field in &named.named {
        let serde = serde_of(&field.attrs)?;
        let terrain = terrain_of(&field.attrs)?;
        if serde.skip || terrain.skip {
            continue;
        }
        let Some(ident) = &field.ident else {
            continue;
        };
        let key = serde.rename.clone().unwrap_or_else(|| {
            let s = ident.to_string();
            s.strip_prefix("r#").map(str::to_string).unwrap_or(s)
        });
        let ty = &field.ty;
        let doc: Tokens = match (&terrain.doc, doc_of(&field.attrs)) {
            (Some(expr), _) => quote!(#expr),
            (None, Some(text)) => quote!(#text),
            (None, None) => {
                return Err(syn::Error::new_spanned(
                    ident,
                    "a field needs a doc comment: it is the sentence `terrain validate` and the docs show for it",
                ))
            }
        };
        let schema_ty = if terrain.any {
            quote!(#root::Type::Any)
        } else {
            quote!(<#ty as #root::Described>::ty())
        };
        let has_default = serde.default || serde.default_fn.is_some() || container.default;
        let default = if let Some(f) = &serde.default_fn {
            quote!(#root::default_of(&#f()))
        } else if serde.default {
            quote!(#root::default_of(&<#ty as ::core::default::Default>::default()))
        } else if container.default {
            quote!(#root::default_of(&<#name as ::core::default::Default>::default().#ident))
        } else {
            quote!(::core::option::Option::None)
        };
        let force_new = terrain.force_new;
        let sensitive = terrain.sensitive;
        let derived_from = match &terrain.derived_from {
            Some(items) => quote!(::core::option::Option::Some(&[#(#items),*])),
            None => quote!(::core::option::Option::None),
        };
        fields.push(quote! {
            #root::Field {
                name: #key,
                ty: #schema_ty,
                required: !#has_default && !<#ty as #root::Described>::OPTIONAL,
                force_new: #force_new,
                sensitive: #sensitive,
                default: #default,
                doc: #doc,
                derived_from: #derived_from,
            }
        });
    }
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_generics #root::Fields for #name #ty_generics #where_clause {
            fn fields() -> ::std::vec::Vec<#root::Field> {
                ::std::vec![#(#fields),*]
            }
        }

        impl #impl_generics #root::Described for #name #ty_generics #where_clause {
            fn ty() -> #root::Type {
                #root::Type::Object(<Self as #root::Fields>::fields())
            }
        }
    })
}
