//! The report's one drawing path: bar and line charts written as SVG text.
//!
//! The HTML page embeds the SVG inline; [`super::raster`] turns the same text into PNG, so both
//! show the same picture. Text widths are estimated (0.6 em a character, DejaVu Sans' average),
//! which is enough to truncate labels that would overlap.

use std::fmt::Write as _;

/// Width of every chart, in CSS pixels.
pub const WIDTH: u32 = 880;
/// Height of every chart, in CSS pixels.
pub const HEIGHT: u32 = 440;
/// The text face: embedded for PNG, the browser's sans-serif otherwise.
const FONT: &str = "DejaVu Sans, Verdana, sans-serif";
/// Okabe–Ito colours: told apart by colour-blind readers too.
const PALETTE: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#7F7F7F", "#000000",
];
/// The right-hand column that holds the legend.
const LEGEND_WIDTH: f64 = 220.0;
/// Average advance of a DejaVu Sans character, in em (measured on chart labels).
const EM_PER_CHAR: f64 = 0.56;

/// The colour of series `i`.
pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// One named series of a bar chart: a value (or a gap) per category.
#[derive(Debug, Clone)]
pub struct BarSeries {
    pub name: String,
    pub values: Vec<Option<f64>>,
}

/// Bars per category, grouped side by side or stacked.
#[derive(Debug, Clone, Default)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    pub series: Vec<BarSeries>,
    pub stacked: bool,
    /// A note above each category's bars (e.g. its cost); empty for none.
    pub notes: Vec<String>,
}

/// One polyline of a line chart.
#[derive(Debug, Clone)]
pub struct Line {
    pub name: String,
    pub color: &'static str,
    /// `(x, y)` points; x is a 1-based integer position.
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
}

/// A horizontal reference segment from x = 1 to the last x.
#[derive(Debug, Clone)]
pub struct RefLine {
    pub y: f64,
    pub color: &'static str,
    pub tooltip: String,
}

/// Lines over integer x positions, with optional reference lines.
#[derive(Debug, Clone, Default)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub lines: Vec<Line>,
    pub refs: Vec<RefLine>,
    /// The legend entry explaining the reference lines.
    pub ref_label: String,
}

/// How a legend entry is drawn.
#[derive(Debug, Clone, Copy)]
enum Key {
    Swatch,
    Stroke(Option<&'static str>),
}

/// The plot area and the y scale.
#[derive(Debug, Clone, Copy)]
struct Plot {
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    y_top: f64,
}

impl Plot {
    fn new(y_max: f64) -> (Plot, f64) {
        let (step, y_top) = nice_scale(y_max);
        let plot = Plot {
            left: 72.0,
            right: f64::from(WIDTH) - LEGEND_WIDTH,
            top: 48.0,
            bottom: f64::from(HEIGHT) - 64.0,
            y_top,
        };
        (plot, step)
    }

    fn y(&self, v: f64) -> f64 {
        self.bottom - (v / self.y_top) * (self.bottom - self.top)
    }

    fn width(&self) -> f64 {
        self.right - self.left
    }
}

/// A tick step of 1, 2 or 5 × 10ⁿ giving at most six ticks, and the top of the axis.
pub fn nice_scale(max: f64) -> (f64, f64) {
    if !max.is_finite() || max <= 0.0 {
        return (1.0, 5.0);
    }
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    (step, (max / step).ceil() * step)
}

/// A number for an axis or a label: `1.5k`, `12`, `0.25`.
pub fn short_number(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{}G", trim(v / 1e9))
    } else if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let digits = if v.abs() >= 100.0 || v == v.trunc() {
        0
    } else if v.abs() >= 1.0 {
        2
    } else {
        3
    };
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Escapes text for SVG and HTML.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// Characters of `size` px text that fit in `width` px.
fn chars_in(width: f64, size: f64) -> usize {
    (width / (EM_PER_CHAR * size)).floor().max(1.0) as usize
}

/// Shortens `text` to about `width` pixels at `size` px.
fn fit(text: &str, width: f64, size: f64) -> String {
    let max = chars_in(width, size);
    if text.chars().count() <= max {
        return text.to_string();
    }
    let kept: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{kept}…")
}

/// `text` on up to `max_lines` lines broken after spaces or hyphens; the last is shortened.
fn wrap(text: &str, width: f64, size: f64, max_lines: usize) -> Vec<String> {
    let max = chars_in(width, size);
    let mut rest: Vec<char> = text.chars().collect();
    let mut lines = Vec::new();
    while rest.len() > max && lines.len() + 1 < max_lines {
        // A space just past the limit is a fine break (it is trimmed); a hyphen is kept.
        let breaks = |(i, c): &(usize, &char)| **c == ' ' || (**c == '-' && *i < max);
        let Some((cut, _)) = rest[..=max].iter().enumerate().rfind(breaks) else {
            break;
        };
        let line: String = rest[..=cut].iter().collect();
        lines.push(line.trim_end().to_string());
        rest.drain(..=cut);
    }
    let last: String = rest.iter().collect();
    lines.push(fit(last.trim_start(), width, size));
    lines
}

/// SVG text being written; `standalone` adds the XML namespace a file needs (inline SVG in HTML
/// does without, so the page holds no URL at all).
struct Svg {
    out: String,
}

impl Svg {
    fn new(title: &str, standalone: bool) -> Svg {
        let ns = if standalone {
            r#" xmlns="http://www.w3.org/2000/svg""#
        } else {
            ""
        };
        let mut out = String::new();
        let _ = write!(
            out,
            r#"<svg class="chart"{ns} width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{t}" font-family="{FONT}" font-size="12">"#,
            t = escape(title)
        );
        let _ = write!(
            out,
            r##"<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>"##
        );
        let mut svg = Svg { out };
        svg.text(f64::from(WIDTH) / 2.0, 26.0, "middle", 16.0, title);
        svg
    }

    fn finish(mut self) -> String {
        self.out.push_str("</svg>");
        self.out
    }

    fn text(&mut self, x: f64, y: f64, anchor: &str, size: f64, text: &str) {
        let _ = write!(
            self.out,
            r##"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}" font-size="{size}" fill="#222222">{}</text>"##,
            escape(text)
        );
    }

    fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), stroke: &str, extra: &str) {
        let _ = write!(
            self.out,
            r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{stroke}" {extra}/>"#
        );
    }

    fn rect(&mut self, (x, y, w, h): (f64, f64, f64, f64), fill: &str, tooltip: &str) {
        let _ = write!(
            self.out,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{fill}"><title>{}</title></rect>"#,
            escape(tooltip)
        );
    }

    /// Grid lines, tick labels and the y-axis title.
    fn y_axis(&mut self, plot: &Plot, step: f64, label: &str) {
        let ticks = (plot.y_top / step).round() as usize;
        for i in 0..=ticks {
            let v = step * i as f64;
            let y = plot.y(v);
            let color = if i == 0 { "#444444" } else { "#e3e3e3" };
            self.line((plot.left, y), (plot.right, y), color, "");
            self.text(plot.left - 8.0, y + 4.0, "end", 11.0, &short_number(v));
        }
        let mid = (plot.top + plot.bottom) / 2.0;
        let _ = write!(
            self.out,
            r##"<text x="18" y="{mid:.1}" text-anchor="middle" font-size="12" fill="#222222" transform="rotate(-90 18 {mid:.1})">{}</text>"##,
            escape(label)
        );
    }

    /// The legend in the right-hand column; entries past its height become "+N more".
    fn legend(&mut self, plot: &Plot, entries: &[(String, &str, Key)]) {
        let x = plot.right + 20.0;
        let room = ((f64::from(HEIGHT) - plot.top) / 20.0) as usize - 1;
        let shown = if entries.len() > room {
            room - 1
        } else {
            entries.len()
        };
        if shown < entries.len() {
            let y = plot.top + 4.0 + 20.0 * shown as f64;
            let more = format!("+{} more (hover the chart)", entries.len() - shown);
            self.text(x, y, "start", 12.0, &more);
        }
        for (i, (label, color, key)) in entries.iter().take(shown).enumerate() {
            let y = plot.top + 4.0 + 20.0 * i as f64;
            match key {
                Key::Swatch => self.rect((x, y - 9.0, 14.0, 10.0), color, label),
                Key::Stroke(dash) => {
                    let extra = dash.map_or(String::from(r#"stroke-width="2.5""#), |d| {
                        format!(r#"stroke-width="2.5" stroke-dasharray="{d}""#)
                    });
                    self.line((x, y - 4.0), (x + 18.0, y - 4.0), color, &extra);
                }
            }
            let width = LEGEND_WIDTH - 46.0;
            self.text(x + 24.0, y, "start", 12.0, &fit(label, width, 12.0));
        }
    }
}

impl BarChart {
    /// The chart as SVG.
    pub fn to_svg(&self, standalone: bool) -> String {
        let mut svg = Svg::new(&self.title, standalone);
        let (plot, step) = Plot::new(self.y_max());
        svg.y_axis(&plot, step, &self.y_label);
        let n = self.categories.len().max(1);
        let group = plot.width() / n as f64;
        for (c, category) in self.categories.iter().enumerate() {
            let x0 = plot.left + group * c as f64;
            self.draw_group(&mut svg, &plot, c, x0 + group * 0.1, group * 0.8);
            for (i, line) in wrap(category, group - 4.0, 11.0, 3).iter().enumerate() {
                let y = plot.bottom + 18.0 + 14.0 * i as f64;
                svg.text(x0 + group / 2.0, y, "middle", 11.0, line);
            }
            let note = self.notes.get(c).map_or("", String::as_str);
            let lines: Vec<&str> = note.lines().collect();
            let top = plot.y(self.category_top(c)) - 6.0;
            for (i, line) in lines.iter().enumerate() {
                let y = top - 13.0 * (lines.len() - 1 - i) as f64;
                svg.text(x0 + group / 2.0, y, "middle", 11.0, &fit(line, group, 11.0));
            }
        }
        let entries: Vec<_> = self
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), color(i), Key::Swatch))
            .collect();
        svg.legend(&plot, &entries);
        svg.finish()
    }

    fn draw_group(&self, svg: &mut Svg, plot: &Plot, c: usize, x: f64, width: f64) {
        let bar = if self.stacked {
            width
        } else {
            width / self.series.len().max(1) as f64
        };
        let mut base = 0.0;
        for (i, series) in self.series.iter().enumerate() {
            let Some(v) = series.values.get(c).copied().flatten().filter(|v| *v > 0.0) else {
                continue; // a gap, or a bar of no height
            };
            let (left, from) = if self.stacked {
                (x, base)
            } else {
                (x + bar * i as f64, 0.0)
            };
            let (top, bottom) = (plot.y(from + v), plot.y(from));
            let tooltip = format!(
                "{} — {}: {}",
                series.name,
                self.categories[c],
                short_number(v)
            );
            // At least a tenth of a pixel: a zero-height rect is invalid SVG.
            let height = (bottom - top).max(0.1);
            svg.rect(
                (left, bottom - height, bar.max(1.0), height),
                color(i),
                &tooltip,
            );
            base += v;
        }
    }

    fn category_top(&self, c: usize) -> f64 {
        let values = self
            .series
            .iter()
            .filter_map(|s| s.values.get(c).copied().flatten());
        if self.stacked {
            values.sum()
        } else {
            values.fold(0.0, f64::max)
        }
    }

    fn y_max(&self) -> f64 {
        (0..self.categories.len())
            .map(|c| self.category_top(c))
            .fold(0.0, f64::max)
            * 1.15 // room for the notes above the bars
    }
}

impl LineChart {
    /// The chart as SVG.
    pub fn to_svg(&self, standalone: bool) -> String {
        let mut svg = Svg::new(&self.title, standalone);
        let (plot, step) = Plot::new(self.y_max());
        svg.y_axis(&plot, step, &self.y_label);
        let x_max = self.x_max();
        let x =
            |v: f64| plot.left + 30.0 + (v - 1.0) / (x_max - 1.0).max(1.0) * (plot.width() - 60.0);
        self.x_axis(&mut svg, &plot, x_max, &x);
        for r in &self.refs {
            let _ = write!(
                svg.out,
                r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{}" stroke-width="1.5" stroke-dasharray="2 4"><title>{}</title></line>"#,
                x(1.0),
                x(x_max),
                r.color,
                escape(&r.tooltip),
                y = plot.y(r.y)
            );
        }
        for line in &self.lines {
            draw_line(&mut svg, &plot, line, &x);
        }
        svg.legend(&plot, &self.legend_entries());
        svg.finish()
    }

    fn x_axis(&self, svg: &mut Svg, plot: &Plot, x_max: f64, x: &impl Fn(f64) -> f64) {
        let every = (x_max / 12.0).ceil().max(1.0) as usize;
        for n in (1..=x_max as usize).step_by(every) {
            svg.text(
                x(n as f64),
                plot.bottom + 18.0,
                "middle",
                11.0,
                &n.to_string(),
            );
        }
        let mid = (plot.left + plot.right) / 2.0;
        svg.text(mid, plot.bottom + 40.0, "middle", 12.0, &self.x_label);
    }

    fn legend_entries(&self) -> Vec<(String, &'static str, Key)> {
        let mut entries: Vec<_> = self
            .lines
            .iter()
            .map(|l| {
                (
                    l.name.clone(),
                    l.color,
                    Key::Stroke(l.dashed.then_some("7 4")),
                )
            })
            .collect();
        if !self.refs.is_empty() {
            entries.push((self.ref_label.clone(), "#7F7F7F", Key::Stroke(Some("2 4"))));
        }
        entries
    }

    fn x_max(&self) -> f64 {
        self.lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.0))
            .fold(1.0, f64::max)
    }

    fn y_max(&self) -> f64 {
        let lines = self.lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
        lines
            .chain(self.refs.iter().map(|r| r.y))
            .fold(0.0, f64::max)
            * 1.05
    }
}

/// A polyline with a marker per point; the first point's marker is hollow.
fn draw_line(svg: &mut Svg, plot: &Plot, line: &Line, x: &impl Fn(f64) -> f64) {
    let points: Vec<String> = line
        .points
        .iter()
        .map(|&(px, py)| format!("{:.1},{:.1}", x(px), plot.y(py)))
        .collect();
    let dash = if line.dashed {
        r#" stroke-dasharray="7 4""#
    } else {
        ""
    };
    let _ = write!(
        svg.out,
        r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2.5"{dash}/>"#,
        points.join(" "),
        line.color
    );
    for (i, &(px, py)) in line.points.iter().enumerate() {
        let (r, fill) = if i == 0 {
            (5.5, "#ffffff")
        } else {
            (3.5, line.color)
        };
        let _ = write!(
            svg.out,
            r#"<circle cx="{:.1}" cy="{:.1}" r="{r}" fill="{fill}" stroke="{}" stroke-width="2"><title>{} — epoch {px}: {} s</title></circle>"#,
            x(px),
            plot.y(py),
            line.color,
            escape(&line.name),
            short_number(py)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_are_round() {
        assert_eq!(nice_scale(9.3), (2.0, 10.0));
        assert_eq!(nice_scale(0.42), (0.1, 0.5));
        assert_eq!(nice_scale(1234.0), (500.0, 1500.0));
        assert_eq!(nice_scale(0.0), (1.0, 5.0));
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(short_number(12.0), "12");
        assert_eq!(short_number(0.25), "0.25");
        assert_eq!(short_number(45_000.0), "45k");
        assert_eq!(short_number(2_500_000.0), "2.5M");
        assert_eq!(short_number(2.5049), "2.5");
    }

    #[test]
    fn labels_are_escaped_and_fitted() {
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(fit("abcdefghij", 6.0 * EM_PER_CHAR * 10.0, 10.0), "abcde…");
        let width = 8.0 * EM_PER_CHAR * 10.0;
        assert_eq!(
            wrap("files · uncached", width, 10.0, 3),
            ["files ·", "uncached"]
        );
        assert_eq!(wrap("ckpt-s3-async", width, 10.0, 3), ["ckpt-s3-", "async"]);
        assert_eq!(wrap("abcdefghijkl", width, 10.0, 3), ["abcdefg…"]);
        assert_eq!(wrap("a b", width, 10.0, 3), ["a b"]);
        assert_eq!(wrap("abcdefgh-xyz", width, 10.0, 3), ["abcdefg…"]);
        let long = "shards · uncached · c16 · b64";
        assert_eq!(
            wrap(long, width, 10.0, 3),
            ["shards ·", "uncached", "· c16 ·…"]
        );
        assert_eq!(fit("abc", 100.0, 10.0), "abc");
    }

    #[test]
    fn long_legends_end_in_a_count() {
        let series = (0..40)
            .map(|i| BarSeries {
                name: format!("series {i}"),
                values: vec![Some(1.0)],
            })
            .collect();
        let chart = BarChart {
            categories: vec!["a".into()],
            series,
            ..BarChart::default()
        };
        let svg = chart.to_svg(true);
        assert!(svg.contains(">+23 more (hover the chart)<"), "{svg}");
        assert!(svg.contains(">series 16<") && !svg.contains(">series 17<"));
    }

    #[test]
    fn inline_svg_has_no_namespace_url() {
        let chart = BarChart {
            title: "t".into(),
            categories: vec!["a".into()],
            series: vec![BarSeries {
                name: "s".into(),
                values: vec![Some(1.0)],
            }],
            ..BarChart::default()
        };
        assert!(!chart.to_svg(false).contains("http"));
        assert!(chart.to_svg(true).contains("xmlns"));
    }
}
