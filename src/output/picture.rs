//! Pictures of the dependency graph, laid out in-process (no Graphviz binary):
//! `terrain graph --format svg` and `--format html`.
//!
//! The layout is layout-rs's (a layered, Sugiyama-style layout: ranks, crossing
//! reduction, Brandes–Köpf placement), top to bottom with each resource above what
//! needs it. Boxes are sized to their labels (whole addresses, in a monospace font of
//! 0.6 em advance) and kept apart, so labels fit and never overlap; edges are drawn here,
//! straight up through each row they cross (where layout-rs keeps them a place) and
//! as vertical-tangent Bézier curves between rows, ending in an arrow at the
//! dependency. The SVG is written here rather than by layout-rs's writer, so that it
//! is deterministic (coordinates rounded to a tenth, no hash-ordered parts) and each
//! node is a `<g class="node" id="node-…">` holding `<title>ADDRESS</title>`, each
//! edge a `<g class="edge">` holding `<title>FROM -> TO</title>` (FROM depends on TO,
//! as in the DOT output).
//!
//! The HTML page holds that SVG inline, each node filled by its planned action
//! (create green, update yellow, replace orange, delete red and dashed, no-op grey;
//! resources the plan deletes are drawn too), a legend and the plan's summary line,
//! with no scripts and nothing loaded from elsewhere (fonts, stylesheets, images).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};

use layout::core::base::Orientation;
use layout::core::format::{ClipHandle, RenderBackend};
use layout::core::geometry::{Point, Position};
use layout::core::style::StyleAttr;
use layout::std_shapes::shapes::{Arrow, Element, ShapeKind};
use layout::topo::layout::VisualGraph;

use crate::addr::Address;
use crate::graph::Deps;
use crate::plan::{Action, Plan};

/// The labels' font size, in pixels.
const FONT_SIZE: f64 = 12.0;
/// The advance of one character of a monospace font at [`FONT_SIZE`] (0.6 em, as in
/// DejaVu Sans Mono, Menlo, SF Mono and Courier).
const CHAR_WIDTH: f64 = 7.2;
/// The fonts of the labels: monospace, so [`CHAR_WIDTH`] holds.
const FONT_FAMILY: &str = concat!(
    "ui-monospace, SFMono-Regular, Menlo, Consolas, ",
    "'DejaVu Sans Mono', 'Liberation Mono', monospace"
);
/// Space between a label and the sides of its box.
const PAD_X: f64 = 10.0;
/// A box's height.
const BOX_HEIGHT: f64 = 26.0;
/// Space kept free beside each box in its row, and between rows (for the edges).
const GAP_X: f64 = 28.0;
const GAP_Y: f64 = 56.0;
/// Space between the drawing and the picture's border.
const MARGIN: f64 = 8.0;
/// How far from a box's corners edges may end, and how far apart edges at one side of
/// a box are (at most).
const INSET: f64 = 8.0;
const PORT_SPACING: f64 = 14.0;

/// Fill and stroke of nodes without a planned action (the plain SVG).
const PLAIN: (&str, &str) = ("#f6f8fa", "#57606a");
const TEXT: &str = "#1f2328";
/// The module part of an address is printed lighter than the resource's own.
const MODULE_TEXT: &str = "#6e7781";
const EDGE: &str = "#57606a";

/// The picture could not be laid out (a fault in the layout library).
#[derive(Debug, thiserror::Error)]
#[error("could not lay out the graph: {0}")]
pub struct LayoutError(String);

/// The graph as an SVG picture.
pub fn svg(name: &str, deps: &Deps) -> Result<String, LayoutError> {
    render(name, deps, &BTreeMap::new())
}

/// A self-contained HTML page: the graph with each resource coloured by `plan`'s
/// action for it, a legend and the plan's summary line. Resources in the plan but not
/// in `deps` (deletions) are added with the dependencies the plan records for them.
pub fn html(name: &str, deps: &Deps, plan: &Plan) -> Result<String, LayoutError> {
    let mut deps = deps.clone();
    let mut actions: BTreeMap<Address, Action> = BTreeMap::new();
    for c in &plan.changes {
        deps.entry(c.address.clone())
            .or_insert_with(|| c.dependencies.clone());
        actions.insert(c.address.clone(), c.action);
    }
    // Resources the plan leaves out (outside its targets) are not changed by it.
    for a in deps.keys() {
        actions.entry(a.clone()).or_insert(Action::NoOp);
    }
    let picture = render(name, &deps, &actions)?;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for a in actions.values() {
        *counts.entry(action_name(*a)).or_default() += 1;
    }
    let summary = if plan.has_changes() {
        super::plan::summary_line(plan)
    } else {
        "No changes. Live infrastructure matches the stack.".to_string()
    };
    let mut page = String::new();
    page.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(page, "<title>{} — terrain plan graph</title>", escape(name));
    page.push_str(concat!(
        "<style>\n",
        "body { margin: 24px; color: #1f2328; background: #ffffff;",
        " font-family: system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; }\n",
        "h1 { font-size: 20px; margin: 0 0 8px; }\n",
        "p.summary { font-weight: 600; margin: 0 0 8px; }\n",
        "ul.warnings { color: #9a6700; margin: 0 0 8px; padding-left: 20px; }\n",
        "ul.legend { list-style: none; padding: 0; margin: 0 0 16px; display: flex; flex-wrap: wrap; gap: 16px; }\n",
        "ul.legend li { display: flex; align-items: center; gap: 6px; font-size: 14px; }\n",
        "ul.legend .swatch { display: inline-block; width: 14px; height: 14px; border-radius: 3px;",
        " border: 1.5px solid; box-sizing: border-box; }\n",
        "figure { margin: 0; overflow: auto; }\n",
        "</style>\n</head>\n<body>\n",
    ));
    let _ = writeln!(page, "<h1>{}</h1>", escape(name));
    let _ = writeln!(page, "<p class=\"summary\">{}</p>", escape(&summary));
    if !plan.warnings.is_empty() {
        page.push_str("<ul class=\"warnings\">\n");
        for w in &plan.warnings {
            let _ = writeln!(page, "<li>Warning: {}</li>", escape(w));
        }
        page.push_str("</ul>\n");
    }
    page.push_str("<ul class=\"legend\">\n");
    for action in LEGEND {
        let (fill, stroke) = colours(Some(action));
        let name = action_name(action);
        let _ = writeln!(
            page,
            "<li class=\"{name}\"><span class=\"swatch\" style=\"background: {fill}; border-color: {stroke}\"></span>{} ({})</li>",
            legend_label(action),
            counts.get(name).copied().unwrap_or(0)
        );
    }
    page.push_str("</ul>\n<figure>\n");
    page.push_str(&picture);
    page.push_str("</figure>\n</body>\n</html>\n");
    Ok(page)
}

/// The legend's order.
const LEGEND: [Action; 5] = [
    Action::Create,
    Action::Update,
    Action::Replace,
    Action::Delete,
    Action::NoOp,
];

/// An action's class name on nodes and in the legend.
fn action_name(a: Action) -> &'static str {
    match a {
        Action::Create => "create",
        Action::Update => "update",
        Action::Replace => "replace",
        Action::Delete => "delete",
        Action::NoOp => "no-op",
    }
}

fn legend_label(a: Action) -> &'static str {
    match a {
        Action::Create => "create",
        Action::Update => "update in place",
        Action::Replace => "replace",
        Action::Delete => "delete",
        Action::NoOp => "no change",
    }
}

/// Fill and stroke of a node by its planned action.
fn colours(a: Option<Action>) -> (&'static str, &'static str) {
    match a {
        None => PLAIN,
        Some(Action::Create) => ("#d3f5dc", "#1a7f37"),
        Some(Action::Update) => ("#fff1b8", "#9a6700"),
        Some(Action::Replace) => ("#ffdcbf", "#bc4c00"),
        Some(Action::Delete) => ("#ffd8d6", "#cf222e"),
        Some(Action::NoOp) => ("#eaeef2", "#8c959f"),
    }
}

/// The SVG of `deps`, nodes coloured by `actions` (plain when it has none for them).
fn render(
    name: &str,
    deps: &Deps,
    actions: &BTreeMap<Address, Action>,
) -> Result<String, LayoutError> {
    // Every address named, as a node of its own (DOT makes one for a dependency that
    // is not a key too); every dependency once.
    let mut all: BTreeSet<&Address> = deps.keys().collect();
    all.extend(deps.values().flatten());
    let addrs: Vec<&Address> = all.into_iter().collect();
    let index: BTreeMap<&Address, usize> = addrs.iter().enumerate().map(|(i, a)| (*a, i)).collect();
    let labels: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    let edges: Vec<(usize, usize)> = deps
        .iter()
        .flat_map(|(a, ds)| ds.iter().map(move |d| (a, d)))
        .filter_map(|(a, d)| Some((*index.get(a)?, *index.get(d)?)))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let laid = lay_out(&labels, &edges)?;

    let mut s = String::new();
    let (w, h) = (num(laid.width), num(laid.height));
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{}\" font-family=\"{FONT_FAMILY}\" font-size=\"{}\">",
        escape(&format!("The dependencies of the stack {name}")),
        num(FONT_SIZE)
    );
    let _ = writeln!(
        s,
        "<defs><marker id=\"terrain-arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"{EDGE}\"/></marker></defs>"
    );
    let _ = writeln!(
        s,
        "<rect class=\"background\" width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>"
    );
    // Edges first, so boxes and labels are drawn over them.
    for (&(from, to), path) in edges.iter().zip(&laid.paths) {
        let _ = writeln!(
            s,
            "<g class=\"edge\"><title>{} -&gt; {}</title><path d=\"{path}\" fill=\"none\" stroke=\"{EDGE}\" stroke-width=\"1.2\" marker-end=\"url(#terrain-arrow)\"/></g>",
            escape(&labels[from]),
            escape(&labels[to]),
        );
    }
    let ids = node_ids(&labels);
    for (i, label) in labels.iter().enumerate() {
        let b = laid.boxes[i];
        let action = actions.get(addrs[i]).copied();
        let (fill, stroke) = colours(action);
        let (class, data) = match action {
            Some(a) => (
                format!("node {}", action_name(a)),
                format!(" data-action=\"{}\"", action_name(a)),
            ),
            None => ("node".to_string(), String::new()),
        };
        let dash = if action == Some(Action::Delete) {
            " stroke-dasharray=\"4,2\""
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "<g class=\"{class}\" id=\"{}\"{data}><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"4\" fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"1.2\"{dash}/><text x=\"{}\" y=\"{}\" text-anchor=\"middle\" dominant-baseline=\"central\" fill=\"{TEXT}\">{}</text></g>",
            ids[i],
            escape(label),
            num(b.x),
            num(b.y),
            num(b.w),
            num(b.h),
            num(b.x + b.w / 2.0),
            num(b.y + b.h / 2.0),
            label_text(addrs[i], label),
        );
    }
    s.push_str("</svg>\n");
    Ok(s)
}

/// A node's label: the module part (`module.share.`) lighter than the resource's own.
fn label_text(addr: &Address, label: &str) -> String {
    let resource = addr.clone().with_module(Vec::new()).to_string();
    match label.strip_suffix(&resource) {
        Some(module) if !module.is_empty() => format!(
            "<tspan fill=\"{MODULE_TEXT}\">{}</tspan>{}",
            escape(module),
            escape(&resource)
        ),
        _ => escape(label),
    }
}

/// `node-ADDRESS` for each label, with what an XML id cannot hold (`[`, `"`, …) turned
/// into `_`; a clash (`a["x"]` and `a[x]` both `a_x_`) numbered on.
fn node_ids(labels: &[String]) -> Vec<String> {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    labels
        .iter()
        .map(|l| {
            let base: String = l
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let mut id = format!("node-{base}");
            let mut n = 2;
            while !seen.insert(id.clone()) {
                id = format!("node-{base}-{n}");
                n += 1;
            }
            id
        })
        .collect()
}

/// Escapes text for XML content and attribute values.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A coordinate rounded to a tenth, without a trailing `.0` or a negative zero.
fn num(v: f64) -> String {
    let tenths = (v * 10.0).round();
    if tenths == 0.0 || !tenths.is_finite() {
        return "0".to_string();
    }
    let r = tenths / 10.0;
    if tenths % 10.0 == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// One node's box: its top-left corner and size.
#[derive(Debug, Clone, Copy)]
struct Boxed {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
}

impl Boxed {
    fn centre(&self) -> (f64, f64) {
        (self.x + self.w / 2.0, self.y + self.h / 2.0)
    }
}

/// The laid-out picture: a box per label, a path (SVG `d`) per edge, and the size.
struct Laid {
    boxes: Vec<Boxed>,
    paths: Vec<String>,
    width: f64,
    height: f64,
}

/// Lays out `labels` (a box each) and `edges` (dependent, dependency).
fn lay_out(labels: &[String], edges: &[(usize, usize)]) -> Result<Laid, LayoutError> {
    if labels.is_empty() {
        return Ok(Laid {
            boxes: Vec::new(),
            paths: Vec::new(),
            width: 2.0 * MARGIN,
            height: 2.0 * MARGIN,
        });
    }
    let (mut boxes, bends) =
        catch_unwind(AssertUnwindSafe(|| place(labels, edges))).map_err(|panic| {
            LayoutError(
                panic
                    .downcast_ref::<&str>()
                    .map(ToString::to_string)
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "the layout library failed".to_string()),
            )
        })?;
    // Each edge's points: leaving the dependent's top side, straight up through each
    // row it crosses (where layout-rs kept it a free place), into the dependency's
    // bottom side.
    let (tops, bottoms) = ports(&boxes, edges, &bends);
    let mut lines: Vec<Vec<(f64, f64)>> = edges
        .iter()
        .enumerate()
        .map(|(i, &(from, to))| {
            let mut points = vec![(tops[i], boxes[from].y)];
            for &(x, y) in &bends[i] {
                points.push((x, y + BOX_HEIGHT / 2.0));
                points.push((x, y - BOX_HEIGHT / 2.0));
            }
            points.push((bottoms[i], boxes[to].y + boxes[to].h));
            points
        })
        .collect();
    // Everything moved so the drawing starts at the margin.
    let (mut min_x, mut min_y, mut max_x, mut max_y) = (
        f64::INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NEG_INFINITY,
    );
    let corners = boxes
        .iter()
        .flat_map(|b| [(b.x, b.y), (b.x + b.w, b.y + b.h)]);
    for (x, y) in corners.chain(lines.iter().flatten().copied()) {
        min_x = min_x.min(x);
        min_y = min_y.min(y);
        max_x = max_x.max(x);
        max_y = max_y.max(y);
    }
    let (dx, dy) = (MARGIN - min_x, MARGIN - min_y);
    for b in &mut boxes {
        b.x += dx;
        b.y += dy;
    }
    for p in lines.iter_mut().flatten() {
        p.0 += dx;
        p.1 += dy;
    }
    Ok(Laid {
        boxes,
        paths: lines.iter().map(|l| curve(l)).collect(),
        width: max_x - min_x + 2.0 * MARGIN,
        height: max_y - min_y + 2.0 * MARGIN,
    })
}

/// Where each edge leaves its dependent's top side and enters its dependency's bottom
/// side (x coordinates): the edges at one side spread along it, a few pixels apart
/// around its middle, in the order of where they come from, so arrowheads do not pile
/// up and edges do not cross at the box.
fn ports(
    boxes: &[Boxed],
    edges: &[(usize, usize)],
    bends: &[Vec<(f64, f64)>],
) -> (Vec<f64>, Vec<f64>) {
    // Per box, the edges at its top and at its bottom, with the x they come from.
    let mut top: BTreeMap<usize, Vec<(f64, usize)>> = BTreeMap::new();
    let mut bottom: BTreeMap<usize, Vec<(f64, usize)>> = BTreeMap::new();
    for (i, &(from, to)) in edges.iter().enumerate() {
        let up = bends[i].first().map_or(boxes[to].centre().0, |b| b.0);
        let down = bends[i].last().map_or(boxes[from].centre().0, |b| b.0);
        top.entry(from).or_default().push((up, i));
        bottom.entry(to).or_default().push((down, i));
    }
    let spread = |sides: BTreeMap<usize, Vec<(f64, usize)>>| {
        let mut xs = vec![0.0; edges.len()];
        for (b, mut side) in sides {
            side.sort_by(|p, q| p.0.total_cmp(&q.0).then(p.1.cmp(&q.1)));
            let (cx, _) = boxes[b].centre();
            let room = (boxes[b].w - 2.0 * INSET).max(0.0);
            let k = side.len();
            let step = if k > 1 {
                PORT_SPACING.min(room / (k - 1) as f64)
            } else {
                0.0
            };
            for (j, (_, i)) in side.into_iter().enumerate() {
                xs[i] = cx + (j as f64 - (k - 1) as f64 / 2.0) * step;
            }
        }
        xs
    };
    (spread(top), spread(bottom))
}

/// An SVG path through `points`: a straight line where it runs straight up, elsewhere
/// a cubic Bézier leaving and arriving vertically, so the curve is smooth through every
/// bend and never overshoots sideways.
fn curve(points: &[(f64, f64)]) -> String {
    // In the tenths written, with the middle of each straight vertical run dropped.
    let tenth = |v: f64| (v * 10.0).round() / 10.0;
    let mut kept: Vec<(f64, f64)> = Vec::with_capacity(points.len());
    for &(x, y) in points {
        let p = (tenth(x), tenth(y));
        if let [.., a, b] = kept.as_slice() {
            if a.0 == b.0 && b.0 == p.0 {
                kept.pop();
            }
        }
        kept.push(p);
    }
    let mut d = String::new();
    let Some(&(x0, y0)) = kept.first() else {
        return d;
    };
    let _ = write!(d, "M{},{}", num(x0), num(y0));
    for pair in kept.windows(2) {
        let ((x1, y1), (x2, y2)) = (pair[0], pair[1]);
        if x1 == x2 {
            let _ = write!(d, " L{},{}", num(x2), num(y2));
            continue;
        }
        let mid = (y1 + y2) / 2.0;
        let _ = write!(
            d,
            " C{},{} {},{} {},{}",
            num(x1),
            num(mid),
            num(x2),
            num(mid),
            num(x2),
            num(y2)
        );
    }
    d
}

/// layout-rs's part: each box's place, and each edge's bends (the centres of the
/// invisible nodes it passes through between rows), from the dependent upwards.
fn place(labels: &[String], edges: &[(usize, usize)]) -> (Vec<Boxed>, Vec<Vec<(f64, f64)>>) {
    let orientation = Orientation::TopToBottom;
    let mut vg = VisualGraph::new(orientation);
    let handles: Vec<_> = labels
        .iter()
        .map(|label| {
            let width = label.chars().count() as f64 * CHAR_WIDTH + 2.0 * PAD_X;
            vg.add_node(Element {
                shape: ShapeKind::Box(String::new()),
                pos: Position::new(
                    Point::zero(),
                    Point::new(width, BOX_HEIGHT),
                    Point::zero(),
                    Point::new(GAP_X, GAP_Y),
                ),
                look: StyleAttr::simple(),
                orientation,
                properties: None,
            })
        })
        .collect();
    for (i, &(from, to)) in edges.iter().enumerate() {
        // A dependency is laid out above what needs it. (No edge is its own: a cycle
        // fails the stack's checks before anything is drawn.)
        if from != to {
            vg.add_edge(
                Arrow::simple_with_properties("", i.to_string()),
                handles[to],
                handles[from],
            );
        }
    }
    let mut recorder = Recorder {
        bends: vec![Vec::new(); edges.len()],
    };
    vg.do_it(false, false, false, &mut recorder);
    let boxes = handles
        .iter()
        .map(|&h| {
            let pos = vg.pos(h);
            let (top_left, _) = pos.bbox(false);
            let size = pos.size(false);
            Boxed {
                x: top_left.x,
                y: top_left.y,
                w: size.x,
                h: size.y,
            }
        })
        .collect();
    (boxes, recorder.bends)
}

/// A layout-rs backend that draws nothing and keeps each edge's bends.
struct Recorder {
    bends: Vec<Vec<(f64, f64)>>,
}

impl RenderBackend for Recorder {
    fn draw_rect(
        &mut self,
        _: Point,
        _: Point,
        _: &StyleAttr,
        _: Option<String>,
        _: Option<ClipHandle>,
    ) {
    }

    fn draw_line(&mut self, _: Point, _: Point, _: &StyleAttr, _: Option<String>) {}

    fn draw_circle(&mut self, _: Point, _: Point, _: &StyleAttr, _: Option<String>) {}

    fn draw_text(&mut self, _: Point, _: &str, _: &StyleAttr) {}

    fn create_clip(&mut self, _: Point, _: Point, _: usize) -> ClipHandle {
        0
    }

    fn draw_arrow(
        &mut self,
        path: &[(Point, Point)],
        _dashed: bool,
        head: (bool, bool),
        _look: &StyleAttr,
        properties: Option<String>,
        _text: &str,
    ) {
        let Some(bends) = properties
            .and_then(|p| p.parse::<usize>().ok())
            .and_then(|i| self.bends.get_mut(i))
        else {
            return;
        };
        // The path's pairs after the first are (control, point); the points between
        // the first and the last are the invisible nodes'.
        let inner = path.len().saturating_sub(1);
        let mut points: Vec<(f64, f64)> = path
            .iter()
            .take(inner)
            .skip(1)
            .map(|(_, p)| (p.x, p.y))
            .collect();
        // Drawn from the dependency down to the dependent (the arrowhead at the end),
        // unless layout-rs turned the edge round: kept from the dependent up.
        if head.1 {
            points.reverse();
        }
        *bends = points;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Address {
        Address::parse(s).expect("valid address")
    }

    #[test]
    fn numbers_are_rounded_to_tenths() {
        assert_eq!(num(0.04), "0");
        assert_eq!(num(-0.04), "0");
        assert_eq!(num(12.0), "12");
        assert_eq!(num(12.345), "12.3");
        assert_eq!(num(-3.96), "-4");
    }

    #[test]
    fn ids_hold_only_id_characters_and_never_clash() {
        let ids = node_ids(&[
            "module.m[\"x\"].t.a".to_string(),
            "module.m[_x_].t.a".to_string(),
        ]);
        assert_eq!(ids, ["node-module.m__x__.t.a", "node-module.m__x__.t.a-2"]);
    }

    #[test]
    fn every_node_and_edge_is_drawn_once_and_the_same_each_time() {
        let mut deps = Deps::new();
        deps.insert(a("module.m[\"x\"].t.b"), vec![a("t.c[0]"), a("t.d")]);
        deps.insert(a("t.c[0]"), vec![a("t.d")]);
        deps.insert(a("t.d"), vec![]);
        let svg = svg("s", &deps).expect("laid out");
        assert_eq!(svg.matches("<g class=\"node\"").count(), 3, "{svg}");
        assert_eq!(svg.matches("<g class=\"edge\"").count(), 3, "{svg}");
        assert!(svg.contains("<title>module.m[&quot;x&quot;].t.b -&gt; t.c[0]</title>"));
        assert!(svg.contains("<tspan fill=\"#6e7781\">module.m[&quot;x&quot;].</tspan>t.b</text>"));
        assert_eq!(svg, super::svg("s", &deps).expect("laid out"));
    }

    #[test]
    fn curves_run_straight_up_through_rows_and_bend_between_them() {
        let d = curve(&[
            (10.0, 100.0),
            (30.0, 80.0),
            (30.0, 60.0),
            (30.0, 40.0),
            (20.0, 20.0),
        ]);
        assert_eq!(d, "M10,100 C10,90 30,90 30,80 L30,40 C30,30 20,30 20,20");
    }

    #[test]
    fn an_empty_graph_is_an_empty_picture() {
        let svg = svg("s", &Deps::new()).expect("laid out");
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>\n"));
        assert!(!svg.contains("class=\"node"));
    }
}
