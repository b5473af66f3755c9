//! The summary table: one row of key numbers per run, as text for stdout and as HTML.

use std::fmt::Write as _;

use super::charts::usd;
use super::log::{RunLog, mean};
use super::svg::{escape, short_number};

const HEADERS: [&str; 14] = [
    "run",
    "tool",
    "configuration",
    "epochs",
    "epoch 1 s",
    "later s",
    "train s",
    "samples/s",
    "wait p50/p99 ms",
    "accel util",
    "cache hits",
    "ckpt s",
    "requests",
    "cost",
];

/// "–" for a number the log does not have.
fn or_dash(v: Option<f64>, show: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "–".into(), show)
}

fn seconds(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// A fraction (0–1) or a percentage as a percentage.
fn percent(v: f64) -> String {
    let p = if v <= 1.0 { v * 100.0 } else { v };
    format!("{p:.0}%")
}

fn row(run: &RunLog) -> [String; 14] {
    let epochs = run.epochs();
    let wait = run.data_wait_ms.as_ref().map(|w| {
        let p = |v: Option<f64>| or_dash(v, |x| format!("{x:.1}"));
        format!("{}/{}", p(w.p50), p(w.p99))
    });
    [
        run.label().to_string(),
        run.tool().to_string(),
        run.config_words().unwrap_or_else(|| "–".into()),
        if epochs.is_empty() {
            "–".into()
        } else {
            epochs.len().to_string()
        },
        or_dash(epochs.first().copied(), seconds),
        or_dash(epochs.get(1..).and_then(mean), seconds),
        or_dash(run.training_time, seconds),
        or_dash(run.samples_per_second, |v| format!("{v:.1}")),
        wait.unwrap_or_else(|| "–".into()),
        or_dash(run.utilization(), percent),
        or_dash(run.cache_hit_rate, percent),
        or_dash(run.ckpt_save_mean(), seconds),
        or_dash(run.requests_total(), short_number),
        or_dash(run.cost_usd, usd),
    ]
}

/// The table as aligned text columns.
pub fn text(runs: &[RunLog]) -> String {
    let rows: Vec<[String; 14]> = runs.iter().map(row).collect();
    let widths: Vec<usize> = (0..HEADERS.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([HEADERS[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let header: Vec<String> = HEADERS.iter().map(|h| (*h).to_string()).collect();
    for cells in std::iter::once(header).chain(rows.into_iter().map(Vec::from)) {
        let line: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| pad(cell, *w, c >= 3))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

/// Left-aligns text columns, right-aligns numbers.
fn pad(cell: &str, width: usize, right: bool) -> String {
    let fill = " ".repeat(width.saturating_sub(cell.chars().count()));
    if right {
        format!("{fill}{cell}")
    } else {
        format!("{cell}{fill}")
    }
}

/// The table as an HTML `<table>`.
pub fn html(runs: &[RunLog]) -> String {
    let mut out = String::from("<table class=\"summary\">\n<thead><tr>");
    for h in HEADERS {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for run in runs {
        out.push_str("<tr>");
        for (c, cell) in row(run).iter().enumerate() {
            let class = if c >= 3 { " class=\"num\"" } else { "" };
            let _ = write!(out, "<td{class}>{}</td>", escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_show_key_numbers_and_dashes() {
        let run: RunLog = serde_json::from_str(
            r#"{"name":"a","t_epoch_1":10,"t_epoch_2":2,"t_epoch_3":4,"samples_per_second":812.34,
                "accelerator_utilization":0.93,"requests":{"GET":1000,"LIST":2},"cost_usd":0.0123,
                "data_wait_ms":{"p50":1.25,"p99":40}}"#,
        )
        .unwrap();
        let cells = row(&run);
        assert_eq!(cells[3], "3");
        assert_eq!(cells[4], "10.00");
        assert_eq!(cells[5], "3.00");
        assert_eq!(cells[6], "–");
        assert_eq!(cells[7], "812.3");
        assert_eq!(cells[8], "1.2/40.0");
        assert_eq!(cells[9], "93%");
        assert_eq!(cells[12], "1002");
        assert_eq!(cells[13], "$0.0123");
        let text = text(&[run]);
        assert_eq!(text.lines().count(), 2);
        assert!(text.starts_with("run  tool"));
    }
}
