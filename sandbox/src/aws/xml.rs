//! The XML of the REST-XML service (S3): request bodies read with `roxmltree` (a
//! maintained parser of XML 1.0 with namespaces: elements, attributes, character and
//! entity references, CDATA, comments, processing instructions) into [`Element`] trees,
//! and answers written from them. Nothing can expand: document type declarations are
//! refused, as S3 refuses them, and so is text mixed with child elements and nesting
//! deeper than 64 levels. Element names lose their namespace prefix (`<s3:Key>` is
//! `Key`), which is how S3 matches them. The tree is serde-serializable so a validated
//! document (a lifecycle configuration) can be stored as sent and rendered back. One
//! check the parser leaves out is made here: a character reference to a surrogate code
//! point, which it reads as U+FFFD, is refused as S3 refuses it.

use serde::{Deserialize, Serialize};

use super::error::escape;

/// Deeper documents are refused: no S3 request body nests more than a handful of levels,
/// and the reader recurses once per level.
const MAX_DEPTH: usize = 64;

/// One element: its local name, attributes, child elements, and the text of a leaf.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Element {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attrs: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Element>,
    /// The character data of an element without children (empty otherwise), unescaped
    /// and untrimmed: an object key may start or end with a space.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
}

/// Why a document is not well-formed, and where (a byte offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct XmlError {
    pub offset: usize,
    pub reason: String,
}

impl std::fmt::Display for XmlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.reason, self.offset)
    }
}

impl Element {
    /// An element without content.
    pub(crate) fn new(name: &str) -> Self {
        Element {
            name: name.to_string(),
            ..Element::default()
        }
    }

    /// A leaf element holding `text`.
    pub(crate) fn leaf(name: &str, text: impl Into<String>) -> Self {
        Element {
            name: name.to_string(),
            text: text.into(),
            ..Element::default()
        }
    }

    /// Adds an attribute (builder style).
    pub(crate) fn attr(mut self, name: &str, value: &str) -> Self {
        self.attrs.push((name.to_string(), value.to_string()));
        self
    }

    /// Adds a child (builder style).
    pub(crate) fn with(mut self, child: Element) -> Self {
        self.children.push(child);
        self
    }

    /// Adds a child.
    pub(crate) fn push(&mut self, child: Element) {
        self.children.push(child);
    }

    /// Adds a leaf child.
    pub(crate) fn push_leaf(&mut self, name: &str, text: impl Into<String>) {
        self.children.push(Element::leaf(name, text));
    }

    /// The first child named `name`.
    pub(crate) fn find(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// Every child named `name`, in document order.
    pub(crate) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The text of the first child named `name`.
    pub(crate) fn text_of(&self, name: &str) -> Option<&str> {
        self.find(name).map(|c| c.text.as_str())
    }

    /// The element as XML text, without a declaration; an element without content is
    /// written self-closing.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        out.push('<');
        out.push_str(&self.name);
        for (k, v) in &self.attrs {
            out.push_str(&format!(" {k}=\"{}\"", escape(v)));
        }
        if self.children.is_empty() && self.text.is_empty() {
            out.push_str("/>");
            return;
        }
        out.push('>');
        if self.children.is_empty() {
            out.push_str(&escape(&self.text));
        }
        for child in &self.children {
            child.write(out);
        }
        out.push_str("</");
        out.push_str(&self.name);
        out.push('>');
    }

    /// Parses a whole document (optional declaration, comments, exactly one root element).
    /// Fails on anything not well-formed, on a DTD, on text mixed with child elements and
    /// on nesting deeper than 64 levels.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Element, XmlError> {
        let text = std::str::from_utf8(bytes).map_err(|e| XmlError {
            offset: e.valid_up_to(),
            reason: "the document is not UTF-8".into(),
        })?;
        let (text, start) = match text.strip_prefix('\u{feff}') {
            Some(rest) => (rest, 3),
            None => (text, 0),
        };
        if let Some(at) = surrogate_reference(text) {
            return Err(XmlError {
                offset: start + at,
                reason: "a character reference to a surrogate code point".into(),
            });
        }
        // DTDs stay refused (the parser's default): nothing in a body can expand.
        let doc = roxmltree::Document::parse(text).map_err(|e| {
            let pos = e.pos();
            XmlError {
                offset: start + byte_offset(text, pos.row, pos.col),
                reason: e.to_string(),
            }
        })?;
        let root = doc.root_element();
        element(root, None, 0).map_err(|(node, reason)| XmlError {
            offset: start + node.range().start,
            reason,
        })
    }
}

/// Where `text` refers to a surrogate code point (`&#xD800;`), outside CDATA sections:
/// not an XML character, which the parser reads as U+FFFD where S3 refuses the body.
fn surrogate_reference(text: &str) -> Option<usize> {
    let mut at = 0;
    while let Some(found) = text[at..].find(['&', '<']) {
        let i = at + found;
        let rest = &text[i..];
        if let Some(cdata) = rest.strip_prefix("<![CDATA[") {
            at = i + 9 + cdata.find("]]>").unwrap_or(cdata.len());
            continue;
        }
        if let Some(reference) = rest.strip_prefix("&#") {
            let end = reference.find(';').unwrap_or(reference.len());
            let body = &reference[..end];
            let code = match body.strip_prefix('x') {
                Some(hex) => u32::from_str_radix(hex, 16).ok(),
                None => body.parse::<u32>().ok(),
            };
            if code.is_some_and(|c| (0xD800..=0xDFFF).contains(&c)) {
                return Some(i);
            }
        }
        at = i + 1;
    }
    None
}

/// The byte offset of a 1-based row and column (in characters) of `text`.
fn byte_offset(text: &str, row: u32, col: u32) -> usize {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(row.saturating_sub(1) as usize)
        .map(str::len)
        .sum();
    let line = &text[line_start.min(text.len())..];
    line_start
        + line
            .char_indices()
            .nth(col.saturating_sub(1) as usize)
            .map_or(line.len(), |(i, _)| i)
}

/// `node` as an [`Element`]: its local name, its attributes with the namespaces it
/// declares (as `xmlns`/`xmlns:p` attributes, as they were written), and either its
/// child elements or its text.
fn element<'a, 'input>(
    node: roxmltree::Node<'a, 'input>,
    parent: Option<roxmltree::Node<'a, 'input>>,
    depth: usize,
) -> Result<Element, (roxmltree::Node<'a, 'input>, String)> {
    if depth >= MAX_DEPTH {
        return Err((
            node,
            format!("elements nest deeper than {MAX_DEPTH} levels"),
        ));
    }
    let mut out = Element::new(node.tag_name().name());
    let inherited: Vec<(Option<&str>, &str)> = parent
        .map(|p| p.namespaces().map(|n| (n.name(), n.uri())).collect())
        .unwrap_or_default();
    for ns in node.namespaces() {
        let declared = (ns.name(), ns.uri());
        if ns.uri() == "http://www.w3.org/XML/1998/namespace" || inherited.contains(&declared) {
            continue;
        }
        let name = ns
            .name()
            .map_or("xmlns".to_string(), |p| format!("xmlns:{p}"));
        out.attrs.push((name, ns.uri().to_string()));
    }
    for a in node.attributes() {
        out.attrs
            .push((a.name().to_string(), a.value().to_string()));
    }
    let mut text = String::new();
    let mut has_children = false;
    for child in node.children() {
        if child.is_element() {
            has_children = true;
            out.children.push(element(child, Some(node), depth + 1)?);
        } else if child.is_text() {
            text.push_str(child.text().unwrap_or_default());
        }
    }
    if has_children {
        if !text.trim().is_empty() {
            return Err((node, "text mixed with child elements".to_string()));
        }
    } else {
        out.text = text;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Element, XmlError> {
        Element::parse(s.as_bytes())
    }

    #[test]
    fn reads_what_sdks_send() {
        let doc = r#"<?xml version="1.0" encoding="UTF-8"?>
<!-- a comment -->
<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Object><Key> a&amp;b &lt;c&gt; &#x263A;&#65;</Key><VersionId>v1</VersionId></Object>
  <Object><s3:Key xmlns:s3="x"><![CDATA[raw <text> & stuff]]></s3:Key></Object>
  <Quiet>true</Quiet>
</Delete>"#;
        let root = parse(doc).expect("well-formed");
        assert_eq!(root.name, "Delete");
        assert_eq!(
            root.attrs,
            [(
                "xmlns".to_string(),
                "http://s3.amazonaws.com/doc/2006-03-01/".to_string()
            )]
        );
        let objects: Vec<&Element> = root.all("Object").collect();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0].text_of("Key"), Some(" a&b <c> ☺A"));
        assert_eq!(objects[0].text_of("VersionId"), Some("v1"));
        assert_eq!(objects[1].text_of("Key"), Some("raw <text> & stuff"));
        assert_eq!(root.text_of("Quiet"), Some("true"));
        // Whitespace between child elements is not text.
        assert!(root.text.is_empty());
        assert_eq!(parse("<A/>").map(|e| e.name), Ok("A".to_string()));
        assert_eq!(
            parse("\u{feff}<A x='1' y=\"&quot;\"></A >").map(|e| e.attrs),
            Ok(vec![
                ("x".to_string(), "1".to_string()),
                ("y".to_string(), "\"".to_string())
            ])
        );
    }

    #[test]
    fn refuses_what_is_not_well_formed() {
        let bad = [
            "",
            "   ",
            "text",
            "<A>",
            "<A></B>",
            "<A><B></A></B>",
            "<A/><B/>",
            "<A/>trailing",
            "<A>&unknown;</A>",
            "<A>&amp</A>",
            "<A>&#0;</A>",
            "<A>&#xD800;</A>",
            "<A x='1' x='2'/>",
            "<A x=1/>",
            "<A x='1'y='2'/>",
            "<A x='<'/>",
            "<1A/>",
            "<A>text<B/></A>",
            "<A><!-- a -- b --></A>",
            "<A><![CDATA[never closed</A>",
            "<!DOCTYPE A [<!ENTITY e 'boom'>]><A>&e;</A>",
            "<A/><?xml version='1.0'?>",
            "<A><!ELEMENT x ANY></A>",
        ];
        for doc in bad {
            assert!(parse(doc).is_err(), "{doc:?} should be refused");
        }
        assert!(Element::parse(b"<A>\xff</A>").is_err());
        let deep = "<A>".repeat(MAX_DEPTH + 1) + &"</A>".repeat(MAX_DEPTH + 1);
        assert!(parse(&deep).is_err());
        let fine = "<A>".repeat(MAX_DEPTH - 1) + &"</A>".repeat(MAX_DEPTH - 1);
        assert!(parse(&fine).is_ok());
        // The offset is where the offending end tag starts.
        let offset = parse("<A>\n  <B></C>\n</A>").err().map(|e| e.offset);
        assert_eq!(offset, Some(9));
        let offset = parse("<A>&#xD800;</A>").err().map(|e| e.offset);
        assert_eq!(offset, Some(3));
        // A surrogate reference inside CDATA is text, not a reference.
        assert!(parse("<A><![CDATA[&#xD800;]]></A>").is_ok());
    }

    #[test]
    fn writes_and_reads_back() {
        let doc = Element::new("ListBucketResult")
            .attr("xmlns", "http://s3.amazonaws.com/doc/2006-03-01/")
            .with(Element::leaf("Name", "b"))
            .with(Element::leaf("Prefix", ""))
            .with(Element::new("Contents").with(Element::leaf("ETag", "\"abc\"")))
            .with(Element::leaf("Key", "<&>' "));
        let text = doc.render();
        assert_eq!(
            text,
            "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name><Prefix/><Contents><ETag>&quot;abc&quot;</ETag></Contents><Key>&lt;&amp;&gt;&apos; </Key></ListBucketResult>"
        );
        assert_eq!(parse(&text), Ok(doc));
    }
}
