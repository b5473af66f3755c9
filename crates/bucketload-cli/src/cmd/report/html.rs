//! The report page: one self-contained HTML file (inline CSS, inline SVG, no URL anywhere).
//!
//! A short inline script checks that every chart laid out with a non-empty bounding box and then
//! sets `data-rendered` on `<body>` to the number of charts (or `failed`), so a headless browser
//! can prove the page renders.

use std::fmt::Write as _;

use super::charts::Section;
use super::log::RunLog;
use super::svg::escape;
use super::table;

const STYLE: &str = "
body { font-family: 'DejaVu Sans', Verdana, sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #222; padding: 0 1rem; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
table.summary { border-collapse: collapse; font-size: 0.8rem; }
table.summary th, table.summary td { border-bottom: 1px solid #ddd; padding: 0.25rem 0.5rem; }
table.summary th { text-align: left; background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 0; } figure svg { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption, p.skipped { font-size: 0.9rem; color: #444; max-width: 880px; }
p.skipped { font-style: italic; }
";

const SCRIPT: &str = "
(function () {
  var charts = document.querySelectorAll('svg.chart');
  var drawn = 0;
  charts.forEach(function (svg) {
    var box = svg.getBBox();
    if (box.width > 0 && box.height > 0) { drawn += 1; }
  });
  document.body.dataset.rendered = drawn === charts.length ? String(drawn) : 'failed';
})();
";

/// The whole page.
pub fn page(runs: &[RunLog], files: usize, sections: &[Section]) -> String {
    let mut out =
        String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str("<title>bucketload benchmark report</title>\n");
    let _ = write!(out, "<style>{STYLE}</style>\n</head>\n<body>\n");
    out.push_str("<h1>bucketload benchmark report</h1>\n");
    let _ = writeln!(
        out,
        "<p>{} run{} from {files} log file{}.</p>",
        runs.len(),
        plural(runs.len()),
        plural(files)
    );
    out.push_str("<h2>Summary</h2>\n");
    out.push_str(&table::html(runs));
    for section in sections {
        section_html(&mut out, section);
    }
    let _ = write!(out, "<script>{SCRIPT}</script>\n</body>\n</html>\n");
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn section_html(out: &mut String, section: &Section) {
    let _ = writeln!(
        out,
        "<section id=\"{}\">\n<h2>{}</h2>",
        section.slug,
        escape(section.title)
    );
    match &section.figure {
        Some(figure) => {
            let _ = writeln!(
                out,
                "<figure>\n{}\n<figcaption>{} <span class=\"png\">(PNG: {}.png)</span></figcaption>\n</figure>",
                figure.to_svg(false),
                escape(&section.caption),
                section.slug
            );
        }
        None => {
            let _ = writeln!(out, "<p class=\"skipped\">{}</p>", escape(&section.caption));
        }
    }
    out.push_str("</section>\n");
}
