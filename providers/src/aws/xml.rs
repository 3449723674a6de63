//! The one reader of the AWS query protocol's XML answers (IAM, STS, EC2): the document
//! as a tree of elements, each with its local name (namespaces dropped: each service
//! puts every element in one), its text when it holds no elements (trimmed), and its
//! child elements. Leaves and lists share names in these answers (IAM's `member` is a
//! policy name in one and a tag in another; EC2's `item` is in every set), so the whole
//! document is read and each caller picks what it knows.

use std::collections::BTreeMap;

/// An element of a query-protocol answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Xml {
    pub name: String,
    pub text: String,
    pub children: Vec<Xml>,
}

impl Xml {
    /// The document's root element.
    pub fn parse(text: &str) -> Result<Xml, String> {
        let doc = roxmltree::Document::parse(text).map_err(|e| e.to_string())?;
        Ok(Self::of(doc.root_element()))
    }

    fn of(el: roxmltree::Node<'_, '_>) -> Xml {
        let children: Vec<Xml> = el
            .children()
            .filter(|c| c.is_element())
            .map(Self::of)
            .collect();
        let text = if children.is_empty() {
            el.children()
                .filter_map(|c| c.text())
                .collect::<String>()
                .trim()
                .to_string()
        } else {
            String::new()
        };
        Xml {
            name: el.tag_name().name().to_string(),
            text,
            children,
        }
    }

    /// The first child element named `name`.
    pub fn find(&self, name: &str) -> Option<&Xml> {
        self.children.iter().find(|c| c.name == name)
    }

    /// Every child element named `name`.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Xml> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The element at a path of child names (`["GetRoleResult", "Role"]`).
    pub fn find_at(&self, path: &[&str]) -> Option<&Xml> {
        path.iter().try_fold(self, |node, name| node.find(name))
    }

    /// The text of the first child named `name`.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.find(name).map(|c| c.text.as_str())
    }

    /// The text at a path of child names (`["enableDnsSupport", "value"]`).
    pub fn at(&self, path: &[&str]) -> Option<&str> {
        self.find_at(path).map(|n| n.text.as_str())
    }

    /// The text of the first of `names` that is a child and not empty.
    pub fn first_text(&self, names: &[&str]) -> Option<&str> {
        names
            .iter()
            .find_map(|n| self.text(n).filter(|t| !t.is_empty()))
    }

    /// EC2's `item`s of the child list `set` (`routeSet`), none when it is absent.
    pub fn items<'a>(&'a self, set: &'a str) -> impl Iterator<Item = &'a Xml> + 'a {
        self.find(set).into_iter().flat_map(|s| s.all("item"))
    }

    /// EC2's `tagSet` as a map.
    pub fn tags(&self) -> BTreeMap<String, String> {
        self.items("tagSet")
            .filter_map(|t| {
                Some((
                    t.text("key")?.to_string(),
                    t.text("value").unwrap_or_default().to_string(),
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_read_as_a_tree_with_trimmed_text_at_the_leaves() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeVpcsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>r-1</requestId>
    <vpcSet>
        <item>
            <vpcId> vpc-0a1b
            </vpcId><cidrBlock>10.0.0.0/16</cidrBlock>
            <tagSet><item><key>Name</key><value>main &amp; more</value></item><item><key>empty</key><value/></item></tagSet>
        </item>
    </vpcSet>
</DescribeVpcsResponse>"#;
        let root = Xml::parse(xml).expect("xml");
        assert_eq!(root.name, "DescribeVpcsResponse");
        let vpc = root.items("vpcSet").next().expect("one vpc");
        assert_eq!(vpc.text("vpcId"), Some("vpc-0a1b"));
        assert_eq!(vpc.first_text(&["subnetId", "vpcId"]), Some("vpc-0a1b"));
        assert_eq!(
            vpc.tags(),
            BTreeMap::from([
                ("Name".to_string(), "main & more".to_string()),
                ("empty".to_string(), String::new()),
            ])
        );
        assert_eq!(
            root.at(&["vpcSet", "item", "cidrBlock"]),
            Some("10.0.0.0/16")
        );
        assert_eq!(
            root.find_at(&["vpcSet", "item"]).map(|i| i.children.len()),
            Some(3)
        );
        assert_eq!(root.items("subnetSet").count(), 0);
        assert!(Xml::parse("<a><b></a>").is_err());
    }
}
