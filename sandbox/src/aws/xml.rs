//! A small XML reader and writer for the REST-XML service (S3): enough of XML 1.0 for the
//! request bodies AWS SDKs and CLIs send — elements, attributes, character and entity
//! references, CDATA, comments, processing instructions — and nothing that can expand:
//! document type declarations are refused, as S3 refuses them. Element names lose their
//! namespace prefix (`<s3:Key>` is `Key`), which is how S3 matches them. The tree is
//! serde-serializable so a validated document (a lifecycle configuration) can be stored
//! as sent and rendered back.

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
        let mut reader = Reader {
            s: text,
            pos: 0,
            base: start,
        };
        reader.misc()?;
        if !reader.rest().starts_with('<') {
            return Err(reader.error("the document has no root element"));
        }
        let root = reader.element(0)?;
        reader.misc()?;
        if reader.pos != reader.s.len() {
            return Err(reader.error("content after the root element"));
        }
        Ok(root)
    }
}

struct Reader<'a> {
    s: &'a str,
    pos: usize,
    /// Bytes stripped before `s` (a byte order mark), so offsets count from the input.
    base: usize,
}

impl<'a> Reader<'a> {
    fn rest(&self) -> &'a str {
        &self.s[self.pos..]
    }

    fn error(&self, reason: impl Into<String>) -> XmlError {
        XmlError {
            offset: self.base + self.pos,
            reason: reason.into(),
        }
    }

    fn skip_whitespace(&mut self) -> bool {
        let rest = self.rest();
        let trimmed = rest.trim_start_matches([' ', '\t', '\r', '\n']);
        self.pos += rest.len() - trimmed.len();
        trimmed.len() != rest.len()
    }

    /// Moves past `end`, which must come before the end of input.
    fn skip_past(&mut self, end: &str, what: &str) -> Result<&'a str, XmlError> {
        match self.rest().find(end) {
            Some(i) => {
                let skipped = &self.rest()[..i];
                self.pos += i + end.len();
                Ok(skipped)
            }
            None => Err(self.error(format!("unterminated {what}"))),
        }
    }

    /// Whitespace, comments and processing instructions around the root element.
    fn misc(&mut self) -> Result<(), XmlError> {
        loop {
            self.skip_whitespace();
            let rest = self.rest();
            if rest.starts_with("<?") {
                self.processing_instruction()?;
            } else if rest.starts_with("<!--") {
                self.comment()?;
            } else if rest.starts_with("<!") {
                return Err(self.error("document type declarations are not accepted"));
            } else {
                return Ok(());
            }
        }
    }

    fn processing_instruction(&mut self) -> Result<(), XmlError> {
        let at = self.pos;
        self.pos += 2;
        let body = self.skip_past("?>", "processing instruction")?;
        let target = body.split([' ', '\t', '\r', '\n']).next().unwrap_or("");
        // The declaration may only open the document.
        if target.eq_ignore_ascii_case("xml") && at != 0 {
            self.pos = at;
            return Err(self.error("an XML declaration is only allowed at the start"));
        }
        if target.is_empty() {
            self.pos = at;
            return Err(self.error("a processing instruction without a target"));
        }
        Ok(())
    }

    fn comment(&mut self) -> Result<(), XmlError> {
        self.pos += 4;
        let body = self.skip_past("-->", "comment")?;
        if body.contains("--") {
            return Err(self.error("`--` inside a comment"));
        }
        Ok(())
    }

    fn name(&mut self) -> Result<&'a str, XmlError> {
        let rest = self.rest();
        let len = rest
            .char_indices()
            .find(|(_, c)| !is_name_char(*c))
            .map(|(i, _)| i)
            .unwrap_or(rest.len());
        let name = &rest[..len];
        match name.chars().next() {
            Some(c) if !c.is_ascii_digit() && c != '-' && c != '.' => {
                self.pos += len;
                Ok(name)
            }
            _ => Err(self.error("expected a name")),
        }
    }

    fn element(&mut self, depth: usize) -> Result<Element, XmlError> {
        if depth >= MAX_DEPTH {
            return Err(self.error(format!("elements nested deeper than {MAX_DEPTH} levels")));
        }
        self.pos += 1; // '<'
        let qualified = self.name()?;
        let mut element = Element::new(local(qualified));
        loop {
            let spaced = self.skip_whitespace();
            let rest = self.rest();
            if let Some(after) = rest.strip_prefix("/>") {
                self.pos = self.s.len() - after.len();
                return Ok(element);
            }
            if rest.starts_with('>') {
                self.pos += 1;
                break;
            }
            if rest.is_empty() {
                return Err(self.error(format!("unterminated start tag <{qualified}>")));
            }
            if !spaced {
                return Err(self.error("expected whitespace before an attribute"));
            }
            let name = self.name()?;
            self.skip_whitespace();
            if !self.rest().starts_with('=') {
                return Err(self.error(format!("expected `=` after attribute {name}")));
            }
            self.pos += 1;
            self.skip_whitespace();
            let quote = match self.rest().chars().next() {
                Some(q @ ('"' | '\'')) => q,
                _ => return Err(self.error("expected a quoted attribute value")),
            };
            self.pos += 1;
            let raw = match self.rest().find(quote) {
                Some(i) => &self.rest()[..i],
                None => return Err(self.error("unterminated attribute value")),
            };
            if raw.contains('<') {
                return Err(self.error("`<` in an attribute value"));
            }
            let value = self.unescape(raw)?;
            self.pos += raw.len() + 1;
            if element.attrs.iter().any(|(k, _)| k == name) {
                return Err(self.error(format!("duplicate attribute {name}")));
            }
            element.attrs.push((name.to_string(), value));
        }
        let mut text = String::new();
        loop {
            let rest = self.rest();
            if rest.starts_with("</") {
                self.pos += 2;
                let closing = self.name()?;
                if closing != qualified {
                    return Err(self.error(format!("</{closing}> does not close <{qualified}>")));
                }
                self.skip_whitespace();
                if !self.rest().starts_with('>') {
                    return Err(self.error(format!("unterminated end tag </{closing}>")));
                }
                self.pos += 1;
                break;
            } else if rest.starts_with("<!--") {
                self.comment()?;
            } else if rest.starts_with("<![CDATA[") {
                self.pos += 9;
                text.push_str(self.skip_past("]]>", "CDATA section")?);
            } else if rest.starts_with("<?") {
                self.processing_instruction()?;
            } else if rest.starts_with("<!") {
                return Err(self.error("declarations are not allowed inside elements"));
            } else if rest.starts_with('<') {
                element.children.push(self.element(depth + 1)?);
            } else if rest.is_empty() {
                return Err(self.error(format!("unclosed element <{qualified}>")));
            } else {
                let len = rest.find('<').unwrap_or(rest.len());
                let raw = &rest[..len];
                text.push_str(&self.unescape(raw)?);
                self.pos += len;
            }
        }
        if element.children.is_empty() {
            element.text = text;
        } else if !text.trim().is_empty() {
            return Err(self.error(format!("<{qualified}> mixes text with child elements")));
        }
        Ok(element)
    }

    /// Replaces the five predefined entities and character references.
    fn unescape(&self, raw: &str) -> Result<String, XmlError> {
        let mut out = String::with_capacity(raw.len());
        let mut rest = raw;
        while let Some(i) = rest.find('&') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            let Some(end) = after.find(';') else {
                return Err(self.error("`&` that starts no reference"));
            };
            let reference = &after[..end];
            let c = match reference {
                "lt" => '<',
                "gt" => '>',
                "amp" => '&',
                "quot" => '"',
                "apos" => '\'',
                _ => {
                    let code = if let Some(hex) = reference
                        .strip_prefix("#x")
                        .or_else(|| reference.strip_prefix("#X"))
                    {
                        u32::from_str_radix(hex, 16).ok()
                    } else if let Some(dec) = reference.strip_prefix('#') {
                        dec.parse::<u32>().ok()
                    } else {
                        return Err(self.error(format!("unknown entity &{reference};")));
                    };
                    match code.and_then(char::from_u32) {
                        Some(c) if c != '\0' => c,
                        _ => {
                            return Err(
                                self.error(format!("invalid character reference &{reference};"))
                            )
                        }
                    }
                }
            };
            out.push(c);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric()
        || matches!(c, '_' | '-' | '.' | ':')
        || (!c.is_ascii() && !c.is_whitespace())
}

/// The name without its namespace prefix.
fn local(qualified: &str) -> &str {
    qualified
        .rsplit_once(':')
        .map(|(_, l)| l)
        .unwrap_or(qualified)
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
        let offset = parse("<A>\n  <B></C>\n</A>").err().map(|e| e.offset);
        assert_eq!(offset, Some(12));
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
