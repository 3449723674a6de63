//! Compute Engine's list `filter` parameter, as far as clients send it: comparisons
//! `field eq regex` / `field ne regex` (RE2, matched against the whole value — what
//! gcloud rewrites `--filter` into) and `field = value` / `field != value` (`*` as a
//! wildcard) / `field : value` (contains), combined by juxtaposition or `AND`, `OR`,
//! `NOT`/`-` and parentheses. Fields are dotted paths into the listed resource. The
//! regular expressions are the subset of RE2 such filters use: literals and escapes,
//! `.`, classes, groups, alternation, the usual quantifiers, `^`, `$` and `\b`.

use serde_json::Value;

/// A parsed filter.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Filter {
    All(Vec<Filter>),
    Any(Vec<Filter>),
    Not(Box<Filter>),
    Compare {
        field: String,
        op: Op,
        value: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// RE2 full match.
    Eq,
    Ne,
    /// Equality with `*` wildcards.
    Equals,
    NotEquals,
    /// Case-insensitive containment.
    Has,
}

impl Filter {
    /// Parses a filter; `Err` carries nothing more than that it is not one, which is all
    /// Compute Engine says.
    pub(crate) fn parse(text: &str) -> Result<Filter, ()> {
        let tokens = tokenize(text)?;
        let mut p = Parser { tokens, at: 0 };
        let f = p.or()?;
        if p.at != p.tokens.len() {
            return Err(());
        }
        // Every regex must compile, so a bad one is refused rather than matching nothing.
        f.check()?;
        Ok(f)
    }

    fn check(&self) -> Result<(), ()> {
        match self {
            Filter::All(fs) | Filter::Any(fs) => fs.iter().try_for_each(Filter::check),
            Filter::Not(f) => f.check(),
            Filter::Compare {
                op: Op::Eq | Op::Ne,
                value,
                ..
            } => Regex::parse(value).map(|_| ()),
            Filter::Compare { .. } => Ok(()),
        }
    }

    /// Whether `item` passes the filter.
    pub(crate) fn matches(&self, item: &Value) -> bool {
        match self {
            Filter::All(fs) => fs.iter().all(|f| f.matches(item)),
            Filter::Any(fs) => fs.iter().any(|f| f.matches(item)),
            Filter::Not(f) => !f.matches(item),
            Filter::Compare { field, op, value } => {
                let mut at = item;
                for part in field.split('.') {
                    at = &at[part];
                }
                let have = match at {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                match op {
                    Op::Eq => Regex::parse(value).is_ok_and(|r| r.full_match(&have)),
                    Op::Ne => Regex::parse(value).is_ok_and(|r| !r.full_match(&have)),
                    Op::Equals => crate::capacity::glob(value, &have),
                    Op::NotEquals => !crate::capacity::glob(value, &have),
                    Op::Has => have.to_lowercase().contains(&value.to_lowercase()),
                }
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Open,
    Close,
    Word(String),
    /// A quoted string (never a keyword or operator).
    Quoted(String),
}

fn tokenize(text: &str) -> Result<Vec<Token>, ()> {
    let chars: Vec<char> = text.chars().collect();
    let mut out: Vec<Token> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        // A value after an operator runs to whitespace whatever it holds (a URL has a
        // `:`, a regex may have `=`).
        let value_next = matches!(out.last(), Some(Token::Word(w)) if ["eq", "ne", "=", "!=", ":"].contains(&w.as_str()))
            && out.len() >= 2;
        if c.is_whitespace() {
            i += 1;
        } else if c == '(' && !value_next {
            out.push(Token::Open);
            i += 1;
        } else if c == ')' {
            out.push(Token::Close);
            i += 1;
        } else if c == '"' || c == '\'' {
            let mut s = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err(()),
                    Some(&q) if q == c => break,
                    Some('\\') if chars.get(i + 1) == Some(&c) => {
                        s.push(c);
                        i += 2;
                        continue;
                    }
                    Some(&other) => s.push(other),
                }
                i += 1;
            }
            out.push(Token::Quoted(s));
            i += 1;
        } else if !value_next
            && (c == '=' || c == ':' || (c == '!' && chars.get(i + 1) == Some(&'=')))
        {
            let op = if c == '!' {
                "!="
            } else if c == '=' {
                "="
            } else {
                ":"
            };
            out.push(Token::Word(op.to_string()));
            i += op.len();
        } else {
            // A bare word runs to whitespace, a parenthesis that closes a group, or an
            // operator; parentheses inside a regex stay when balanced.
            let mut s = String::new();
            let mut depth = 0usize;
            while let Some(&d) = chars.get(i) {
                if d.is_whitespace() || (d == ')' && depth == 0) {
                    break;
                }
                if depth == 0
                    && !value_next
                    && (d == '=' || d == ':' || (d == '!' && chars.get(i + 1) == Some(&'=')))
                {
                    break;
                }
                if d == '(' {
                    depth += 1;
                } else if d == ')' {
                    depth -= 1;
                } else if d == '\\' {
                    if let Some(&e) = chars.get(i + 1) {
                        s.push(d);
                        s.push(e);
                        i += 2;
                        continue;
                    }
                }
                s.push(d);
                i += 1;
            }
            out.push(Token::Word(s));
        }
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn keyword(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Token::Word(w)) if w == word)
    }

    fn or(&mut self) -> Result<Filter, ()> {
        let mut terms = vec![self.and()?];
        while self.keyword("OR") {
            self.at += 1;
            terms.push(self.and()?);
        }
        Ok(if terms.len() == 1 {
            terms.remove(0)
        } else {
            Filter::Any(terms)
        })
    }

    fn and(&mut self) -> Result<Filter, ()> {
        let mut terms = vec![self.unary()?];
        loop {
            if self.keyword("AND") {
                self.at += 1;
            } else if matches!(self.peek(), None | Some(Token::Close)) || self.keyword("OR") {
                break;
            }
            terms.push(self.unary()?);
        }
        Ok(if terms.len() == 1 {
            terms.remove(0)
        } else {
            Filter::All(terms)
        })
    }

    fn unary(&mut self) -> Result<Filter, ()> {
        if self.keyword("NOT") {
            self.at += 1;
            return Ok(Filter::Not(Box::new(self.unary()?)));
        }
        if let Some(Token::Word(w)) = self.peek() {
            if let Some(rest) = w.strip_prefix('-').filter(|r| !r.is_empty()) {
                let rest = rest.to_string();
                self.tokens[self.at] = Token::Word(rest);
                return Ok(Filter::Not(Box::new(self.unary()?)));
            }
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Filter, ()> {
        match self.peek().cloned() {
            Some(Token::Open) => {
                self.at += 1;
                let inner = self.or()?;
                if self.peek() != Some(&Token::Close) {
                    return Err(());
                }
                self.at += 1;
                Ok(inner)
            }
            Some(Token::Word(field)) => {
                self.at += 1;
                let op = match self.peek() {
                    Some(Token::Word(w)) => match w.as_str() {
                        "eq" => Op::Eq,
                        "ne" => Op::Ne,
                        "=" => Op::Equals,
                        "!=" => Op::NotEquals,
                        ":" => Op::Has,
                        _ => return Err(()),
                    },
                    _ => return Err(()),
                };
                self.at += 1;
                let value = match self.peek() {
                    Some(Token::Word(w) | Token::Quoted(w)) => w.clone(),
                    _ => return Err(()),
                };
                self.at += 1;
                Ok(Filter::Compare { field, op, value })
            }
            _ => Err(()),
        }
    }
}

// ---------------------------------------------------------------- regular expressions

#[derive(Debug, Clone)]
enum Node {
    Char(char),
    Any,
    Class {
        ranges: Vec<(char, char)>,
        negated: bool,
    },
    Start,
    End,
    WordBoundary,
    Group(Vec<Vec<Node>>),
    Repeat {
        node: Box<Node>,
        min: usize,
        max: Option<usize>,
    },
}

/// A compiled RE2-subset expression.
#[derive(Debug, Clone)]
pub(crate) struct Regex {
    alternatives: Vec<Vec<Node>>,
}

impl Regex {
    pub(crate) fn parse(pattern: &str) -> Result<Regex, ()> {
        let chars: Vec<char> = pattern.chars().collect();
        let mut at = 0;
        let alternatives = parse_alt(&chars, &mut at)?;
        if at != chars.len() {
            return Err(());
        }
        Ok(Regex { alternatives })
    }

    /// Whether the expression matches all of `text`.
    pub(crate) fn full_match(&self, text: &str) -> bool {
        let s: Vec<char> = text.chars().collect();
        let end = s.len();
        match_alt(&self.alternatives, &s, 0, &mut |i| i == end)
    }
}

fn parse_alt(p: &[char], at: &mut usize) -> Result<Vec<Vec<Node>>, ()> {
    let mut alts = vec![parse_seq(p, at)?];
    while p.get(*at) == Some(&'|') {
        *at += 1;
        alts.push(parse_seq(p, at)?);
    }
    Ok(alts)
}

fn parse_seq(p: &[char], at: &mut usize) -> Result<Vec<Node>, ()> {
    let mut seq = Vec::new();
    while let Some(&c) = p.get(*at) {
        if c == '|' || c == ')' {
            break;
        }
        let atom = parse_atom(p, at)?;
        let atom = parse_quantifier(p, at, atom)?;
        seq.push(atom);
    }
    Ok(seq)
}

fn class_of(c: char) -> Option<(Vec<(char, char)>, bool)> {
    let digits = vec![('0', '9')];
    let word = vec![('a', 'z'), ('A', 'Z'), ('0', '9'), ('_', '_')];
    let space = vec![
        (' ', ' '),
        ('\t', '\t'),
        ('\n', '\n'),
        ('\r', '\r'),
        ('\x0c', '\x0c'),
    ];
    match c {
        'd' => Some((digits, false)),
        'D' => Some((digits, true)),
        'w' => Some((word, false)),
        'W' => Some((word, true)),
        's' => Some((space, false)),
        'S' => Some((space, true)),
        _ => None,
    }
}

fn parse_atom(p: &[char], at: &mut usize) -> Result<Node, ()> {
    let c = p[*at];
    *at += 1;
    match c {
        '.' => Ok(Node::Any),
        '^' => Ok(Node::Start),
        '$' => Ok(Node::End),
        '*' | '+' | '?' | '{' => Err(()),
        '(' => {
            // `(?:…)` groups the same way for matching purposes.
            if p.get(*at) == Some(&'?') && p.get(*at + 1) == Some(&':') {
                *at += 2;
            }
            let inner = parse_alt(p, at)?;
            if p.get(*at) != Some(&')') {
                return Err(());
            }
            *at += 1;
            Ok(Node::Group(inner))
        }
        '[' => {
            let negated = p.get(*at) == Some(&'^');
            if negated {
                *at += 1;
            }
            let mut ranges = Vec::new();
            let mut first = true;
            loop {
                let Some(&c) = p.get(*at) else {
                    return Err(());
                };
                *at += 1;
                if c == ']' && !first {
                    break;
                }
                first = false;
                let lo = if c == '\\' {
                    let Some(&e) = p.get(*at) else {
                        return Err(());
                    };
                    *at += 1;
                    if let Some((class, false)) = class_of(e) {
                        ranges.extend(class);
                        continue;
                    }
                    e
                } else {
                    c
                };
                if p.get(*at) == Some(&'-') && p.get(*at + 1).is_some_and(|n| *n != ']') {
                    let hi = p[*at + 1];
                    *at += 2;
                    ranges.push((lo, hi));
                } else {
                    ranges.push((lo, lo));
                }
            }
            Ok(Node::Class { ranges, negated })
        }
        '\\' => {
            let Some(&e) = p.get(*at) else {
                return Err(());
            };
            *at += 1;
            if e == 'b' {
                return Ok(Node::WordBoundary);
            }
            Ok(match class_of(e) {
                Some((ranges, negated)) => Node::Class { ranges, negated },
                None => Node::Char(e),
            })
        }
        other => Ok(Node::Char(other)),
    }
}

fn parse_quantifier(p: &[char], at: &mut usize, atom: Node) -> Result<Node, ()> {
    let (min, max) = match p.get(*at) {
        Some('*') => (0, None),
        Some('+') => (1, None),
        Some('?') => (0, Some(1)),
        Some('{') => {
            let close = p[*at..].iter().position(|c| *c == '}').ok_or(())? + *at;
            let inner: String = p[*at + 1..close].iter().collect();
            let num = |s: &str| s.trim().parse::<usize>().map_err(|_| ());
            let bounds = match inner.split_once(',') {
                None => {
                    let n = num(&inner)?;
                    (n, Some(n))
                }
                Some((lo, "")) => (num(lo)?, None),
                Some((lo, hi)) => (num(lo)?, Some(num(hi)?)),
            };
            *at = close;
            bounds
        }
        _ => return Ok(atom),
    };
    *at += 1;
    // A lazy marker changes which match is found, never whether one exists.
    if p.get(*at) == Some(&'?') {
        *at += 1;
    }
    Ok(Node::Repeat {
        node: Box::new(atom),
        min,
        max,
    })
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn match_alt(alts: &[Vec<Node>], s: &[char], i: usize, k: &mut dyn FnMut(usize) -> bool) -> bool {
    alts.iter().any(|seq| match_seq(seq, s, i, k))
}

fn match_seq(seq: &[Node], s: &[char], i: usize, k: &mut dyn FnMut(usize) -> bool) -> bool {
    match seq.split_first() {
        None => k(i),
        Some((first, rest)) => match_node(first, s, i, &mut |j| match_seq(rest, s, j, k)),
    }
}

fn match_node(node: &Node, s: &[char], i: usize, k: &mut dyn FnMut(usize) -> bool) -> bool {
    match node {
        Node::Char(c) => s.get(i) == Some(c) && k(i + 1),
        Node::Any => s.get(i).is_some_and(|c| *c != '\n') && k(i + 1),
        Node::Class { ranges, negated } => {
            s.get(i)
                .is_some_and(|c| ranges.iter().any(|(lo, hi)| lo <= c && c <= hi) != *negated)
                && k(i + 1)
        }
        Node::Start => i == 0 && k(i),
        Node::End => i == s.len() && k(i),
        Node::WordBoundary => {
            let before = i > 0 && is_word(s[i - 1]);
            let after = s.get(i).is_some_and(|c| is_word(*c));
            before != after && k(i)
        }
        Node::Group(alts) => match_alt(alts, s, i, k),
        Node::Repeat { node, min, max } => match_repeat(node, *min, *max, 0, s, i, k),
    }
}

fn match_repeat(
    node: &Node,
    min: usize,
    max: Option<usize>,
    count: usize,
    s: &[char],
    i: usize,
    k: &mut dyn FnMut(usize) -> bool,
) -> bool {
    // Greedy: one more repetition first. A repetition that consumes nothing cannot help
    // (and would loop), except to reach the minimum.
    if max.is_none_or(|m| count < m)
        && match_node(node, s, i, &mut |j| {
            (j != i || count < min) && match_repeat(node, min, max, count + 1, s, j, k)
        })
    {
        return true;
    }
    count >= min && k(i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn re(p: &str, s: &str) -> bool {
        Regex::parse(p).expect("valid regex").full_match(s)
    }

    #[test]
    fn regexes_match_whole_values_like_re2() {
        assert!(re("nvidia-tesla-t4", "nvidia-tesla-t4"));
        assert!(!re("nvidia-tesla-t4", "nvidia-tesla-t4-vws"));
        assert!(re("nvidia-tesla-t4.*", "nvidia-tesla-t4-vws"));
        assert!(re(
            r".*\bus\-central1\-a\b.*",
            "https://x/zones/us-central1-a"
        ));
        assert!(!re(
            r".*\bus\-central1\-a\b.*",
            "https://x/zones/us-central1-ab"
        ));
        assert!(re("(nvidia-l4|nvidia-tesla-t4)", "nvidia-l4"));
        assert!(Filter::parse("(name eq (nvidia-l4|nvidia-tesla-t4))")
            .is_ok_and(|f| f.matches(&serde_json::json!({"name": "nvidia-l4"}))));
        assert!(
            Filter::parse("zone eq https://x/zones/us-central1-a").is_ok_and(
                |f| f.matches(&serde_json::json!({"zone": "https://x/zones/us-central1-a"}))
            )
        );
        assert!(re("a[0-9]+b?", "a123"));
        assert!(re("[^x]{2,3}", "abc"));
        assert!(!re("[^x]{2,3}", "abcd"));
        assert!(re(r"\d\d", "42"));
        assert!(re("(a*)*b", "aaab"), "nested stars terminate");
        assert!(Regex::parse("a(b").is_err());
        assert!(Regex::parse("*a").is_err());
    }

    #[test]
    fn filters_combine_comparisons() {
        let item = json!({"name": "nvidia-tesla-t4", "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a", "maximumCardsPerInstance": 4});
        let yes = [
            "name eq nvidia-tesla-t4",
            "name eq 'nvidia-tesla-t.*'",
            "(name eq nvidia.*) (zone eq .*us-central1-a)",
            "name = nvidia-*",
            "name != nvidia-l4",
            "zone : us-central1-a",
            "name eq nvidia-l4 OR name eq nvidia-tesla-t4",
            "NOT name eq nvidia-l4",
            "-name = nvidia-l4",
            "maximumCardsPerInstance = 4",
            r#"name = "nvidia-tesla-t4" AND zone:us-central1"#,
        ];
        for f in yes {
            let parsed = Filter::parse(f).unwrap_or_else(|()| panic!("{f} parses"));
            assert!(parsed.matches(&item), "{f}");
        }
        let no = [
            "name ne nvidia-tesla-t4",
            "name eq nvidia",
            "zone : europe-west4",
        ];
        for f in no {
            let parsed = Filter::parse(f).unwrap_or_else(|()| panic!("{f} parses"));
            assert!(!parsed.matches(&item), "{f}");
        }
        for bad in [
            "name",
            "name eq",
            "(name eq x",
            "name like x",
            "name eq a(b",
        ] {
            assert!(Filter::parse(bad).is_err(), "{bad}");
        }
    }
}
