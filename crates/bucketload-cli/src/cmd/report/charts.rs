//! The report's four charts, built from the runs; a chart no log has data for is skipped with a
//! note saying which keys it needs.

use std::collections::BTreeMap;

use super::log::{RunLog, mean};
use super::svg::{BarChart, BarSeries, Line, LineChart, RefLine, color, short_number};

/// A drawn chart.
#[derive(Debug, Clone)]
pub enum Figure {
    Bar(BarChart),
    Line(LineChart),
}

impl Figure {
    /// The chart as SVG; `standalone` for a file, not for inline HTML.
    pub fn to_svg(&self, standalone: bool) -> String {
        match self {
            Figure::Bar(c) => c.to_svg(standalone),
            Figure::Line(c) => c.to_svg(standalone),
        }
    }
}

/// One chart of the report, or the note that replaces it.
#[derive(Debug, Clone)]
pub struct Section {
    /// File stem of the PNG: `epochs`, `throughput`, `checkpoints`, `requests`.
    pub slug: &'static str,
    pub title: &'static str,
    /// How to read the chart, or why it is missing.
    pub caption: String,
    /// `None` when no log has the chart's data.
    pub figure: Option<Figure>,
}

/// All four sections, in page order.
pub fn sections(runs: &[RunLog]) -> Vec<Section> {
    vec![
        epochs(runs),
        throughput(runs),
        checkpoints(runs),
        requests(runs),
    ]
}

fn skipped(slug: &'static str, title: &'static str, needs: &str) -> Section {
    Section {
        slug,
        title,
        caption: format!("Not drawn: no log has {needs}."),
        figure: None,
    }
}

/// (1) Seconds per epoch per run, with the "streamed every epoch" reference.
fn epochs(runs: &[RunLog]) -> Section {
    const TITLE: &str = "Epoch time per run";
    let with_epochs: Vec<&RunLog> = runs.iter().filter(|r| !r.epochs().is_empty()).collect();
    if with_epochs.is_empty() {
        return skipped("epochs", TITLE, "epoch times (t_epoch_1, t_epoch_2, …)");
    }
    let any_cached = with_epochs.iter().any(|r| r.cached());
    let mut chart = LineChart {
        title: TITLE.into(),
        x_label: "epoch".into(),
        y_label: "seconds per epoch".into(),
        ref_label: "streamed every epoch".into(),
        ..LineChart::default()
    };
    for (i, run) in with_epochs.iter().enumerate() {
        let times = run.epochs();
        let cache = if run.cached() { "cached" } else { "uncached" };
        chart.lines.push(Line {
            name: format!("{} ({cache})", run.label()),
            color: color(i),
            points: (1..).map(f64::from).zip(times.iter().copied()).collect(),
            dashed: !run.cached(),
        });
        // The reference matters where a cache changed later epochs; without any cache, every
        // multi-epoch run gets one.
        if times.len() > 1 && (run.cached() || !any_cached) {
            chart.refs.push(RefLine {
                y: times[0],
                color: color(i),
                tooltip: format!("{}: streamed every epoch ({:.2} s)", run.label(), times[0]),
            });
        }
    }
    Section {
        slug: "epochs",
        title: TITLE,
        caption: "Seconds per epoch. The hollow marker is the first epoch, which reads every \
            sample from the store (and fills the cache); filled markers are later epochs. \
            Solid lines are cached runs, dashed lines uncached runs. The dotted line repeats a \
            run's first epoch: what every epoch would take if it streamed from the store again; \
            the gap below it is what the cache saved."
            .into(),
        figure: Some(Figure::Line(chart)),
    }
}

/// Keys in order of first appearance.
fn ordered<'a>(keys: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for key in keys {
        if !out.iter().any(|k| k == key) {
            out.push(key.to_string());
        }
    }
    out
}

/// (2) Samples per second per workload, one bar per tool.
fn throughput(runs: &[RunLog]) -> Section {
    const TITLE: &str = "Samples per second per workload";
    let measured: Vec<&RunLog> = runs
        .iter()
        .filter(|r| r.samples_per_second.is_some())
        .collect();
    if measured.is_empty() {
        return skipped("throughput", TITLE, "samples_per_second");
    }
    let configs: Vec<String> = {
        let labels: Vec<String> = measured.iter().map(|r| r.workload_label()).collect();
        ordered(labels.iter().map(String::as_str))
    };
    let mut tools = ordered(measured.iter().map(|r| r.tool()));
    tools.sort_by_key(|t| t != "bucketload"); // bucketload first, peers after
    let series = tools
        .iter()
        .map(|tool| BarSeries {
            name: tool.clone(),
            values: configs
                .iter()
                .map(|config| {
                    measured
                        .iter()
                        .filter(|r| r.tool() == tool && &r.workload_label() == config)
                        .filter_map(|r| r.samples_per_second)
                        .reduce(f64::max)
                })
                .collect(),
        })
        .collect();
    // Above each workload, how busy bucketload's fastest run of it kept the emulated
    // accelerator, when it emulated one.
    let notes: Vec<String> = configs
        .iter()
        .map(|config| {
            measured
                .iter()
                .filter(|r| r.tool() == "bucketload" && &r.workload_label() == config)
                .filter_map(|r| Some((r.samples_per_second?, r)))
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, r)| r)
                .and_then(|r| r.utilization())
                .map_or_else(String::new, |u| format!("accelerator {:.0}%", u * 100.0))
        })
        .collect();
    let noted = notes.iter().any(|n| !n.is_empty());
    let chart = BarChart {
        title: TITLE.into(),
        y_label: "samples/s".into(),
        categories: configs,
        series,
        notes: if noted { notes } else { Vec::new() },
        ..BarChart::default()
    };
    Section {
        slug: "throughput",
        title: TITLE,
        caption: "Samples per second over the whole run, one group per workload (format · cache \
            · decoded into images or raw bytes) and one bar per tool; taller is faster. Where \
            several runs of a tool share a workload (other concurrency or batch size), the best \
            one is shown; the table below has each run's settings. Above a workload, how busy \
            that run kept the emulated accelerator (compute time ÷ wall time), when it \
            emulated one."
            .into(),
        figure: Some(Figure::Bar(chart)),
    }
}

/// Orders checkpoint labels object store first, then disk; sync before async.
fn ckpt_rank(label: &str) -> (u8, String) {
    let rank = match label {
        "s3 · sync" => 0,
        "s3 · async" => 1,
        "disk · sync" => 2,
        "disk · async" => 3,
        _ => 4,
    };
    (rank, label.to_string())
}

/// (3) Mean checkpoint save (and load) seconds per target and mode.
fn checkpoints(runs: &[RunLog]) -> Section {
    const TITLE: &str = "Checkpoint time: object store vs disk, sync vs async";
    let measured: Vec<(&RunLog, String)> = runs
        .iter()
        .filter(|r| r.ckpt_save_mean().is_some())
        .map(|r| (r, r.ckpt_label().unwrap_or_else(|| "unknown".into())))
        .collect();
    if measured.is_empty() {
        return skipped(
            "checkpoints",
            TITLE,
            "checkpoint times (ckpt.times or t_ckpt_1, …)",
        );
    }
    let mut labels = ordered(measured.iter().map(|(_, l)| l.as_str()));
    labels.sort_by_key(|l| ckpt_rank(l));
    let tools = ordered(measured.iter().map(|(r, _)| r.tool()));
    let mut series = Vec::new();
    for tool in &tools {
        let pick = |label: &String, f: fn(&RunLog) -> Option<f64>| {
            let values: Vec<f64> = measured
                .iter()
                .filter(|(r, l)| r.tool() == tool && l == label)
                .filter_map(|(r, _)| f(r))
                .collect();
            mean(&values)
        };
        let saves = labels
            .iter()
            .map(|l| pick(l, RunLog::ckpt_save_mean))
            .collect();
        series.push(BarSeries {
            name: format!("{tool} save"),
            values: saves,
        });
        let loads: Vec<_> = labels
            .iter()
            .map(|l| pick(l, RunLog::ckpt_load_mean))
            .collect();
        if loads.iter().any(Option::is_some) {
            series.push(BarSeries {
                name: format!("{tool} load"),
                values: loads,
            });
        }
    }
    let chart = BarChart {
        title: TITLE.into(),
        y_label: "seconds per checkpoint".into(),
        categories: labels,
        series,
        ..BarChart::default()
    };
    Section {
        slug: "checkpoints",
        title: TITLE,
        caption: "Mean seconds per checkpoint, grouped by where it went (s3: object store, disk) \
            and how (sync: training waits for the whole write; async: training waits only for \
            the snapshot while the upload runs behind it). Shorter is better; loads appear when \
            the run measured them."
            .into(),
        figure: Some(Figure::Bar(chart)),
    }
}

/// (4) Requests by kind per run, stacked, with the estimated cost above each bar.
fn requests(runs: &[RunLog]) -> Section {
    const TITLE: &str = "Requests by kind and estimated cost per run";
    let measured: Vec<&RunLog> = runs
        .iter()
        .filter(|r| r.requests.as_ref().is_some_and(|q| !q.is_empty()))
        .collect();
    if measured.is_empty() {
        return skipped("requests", TITLE, "request counts (requests: {GET: n, …})");
    }
    let mut totals: BTreeMap<&str, f64> = BTreeMap::new();
    for (kind, n) in measured.iter().flat_map(|r| r.requests.iter().flatten()) {
        *totals.entry(kind).or_default() += n;
    }
    let mut kinds: Vec<(&str, f64)> = totals.into_iter().collect();
    kinds.sort_by(|a, b| b.1.total_cmp(&a.1)); // the biggest at the bottom of each stack
    let series = kinds
        .iter()
        .map(|(kind, _)| BarSeries {
            name: (*kind).to_string(),
            values: measured
                .iter()
                .map(|r| r.requests.as_ref().and_then(|q| q.get(*kind)).copied())
                .collect(),
        })
        .collect();
    let chart = BarChart {
        title: TITLE.into(),
        y_label: "requests".into(),
        categories: measured.iter().map(|r| r.label().to_string()).collect(),
        series,
        stacked: true,
        notes: measured.iter().map(|r| requests_note(r)).collect(),
    };
    Section {
        slug: "requests",
        title: TITLE,
        caption: "Requests each run sent to the object store, stacked by kind (GET, LIST, HEAD, \
            PUT, UploadPart, …). Above each bar: the run's total requests and its estimated \
            request and transfer cost in US dollars from the price table."
            .into(),
        figure: Some(Figure::Bar(chart)),
    }
}

/// The total requests and, below it, the cost: readable even where a bar is too short to see.
fn requests_note(run: &RunLog) -> String {
    let total = run.requests_total().map_or_else(String::new, short_number);
    match run.cost_usd {
        Some(cost) => format!("{total}\n{}", usd(cost)),
        None => total,
    }
}

/// Dollars with enough digits to tell small costs apart.
pub fn usd(v: f64) -> String {
    if v >= 1.0 {
        format!("${v:.2}")
    } else {
        format!("${v:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(json: &str) -> RunLog {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn charts_without_data_are_skipped_with_a_note() {
        let sections = sections(&[run(r#"{"name":"a","samples_per_second":5}"#)]);
        let drawn: Vec<_> = sections.iter().map(|s| s.figure.is_some()).collect();
        assert_eq!(drawn, vec![false, true, false, false]);
        assert!(sections[0].caption.contains("t_epoch_1"));
    }

    #[test]
    fn cached_runs_get_the_streamed_reference() {
        let runs = [
            run(r#"{"name":"c","t_epoch_1":10,"t_epoch_2":2,"config":{"cache":true}}"#),
            run(r#"{"name":"u","t_epoch_1":9,"t_epoch_2":9,"config":{"cache":false}}"#),
        ];
        let Some(Figure::Line(chart)) = &epochs(&runs).figure else {
            panic!("epochs not drawn");
        };
        assert_eq!(chart.refs.len(), 1);
        assert_eq!(chart.refs[0].y, 10.0);
        assert!(chart.lines[1].dashed && !chart.lines[0].dashed);
    }

    #[test]
    fn throughput_groups_by_configuration_and_tool() {
        let runs = [
            run(
                r#"{"tool":"s3torchconnector","samples_per_second":3,"config":{"format":"files"}}"#,
            ),
            run(r#"{"samples_per_second":5,"config":{"format":"files"}}"#),
            run(r#"{"samples_per_second":7,"config":{"format":"files"}}"#),
        ];
        let Some(Figure::Bar(chart)) = &throughput(&runs).figure else {
            panic!("throughput not drawn");
        };
        assert_eq!(chart.categories, vec!["files"]);
        assert_eq!(chart.series[0].name, "bucketload");
        assert_eq!(chart.series[0].values, vec![Some(7.0)]);
        assert_eq!(chart.series[1].values, vec![Some(3.0)]);
        assert!(
            chart.notes.is_empty(),
            "no compute emulated: {:?}",
            chart.notes
        );
    }

    #[test]
    fn throughput_notes_how_busy_the_accelerator_was() {
        let runs = [
            run(r#"{"samples_per_second":5,"accelerator_utilization":0.62,
                    "config":{"format":"files","compute_ms":8.33}}"#),
            run(r#"{"samples_per_second":9,"accelerator_utilization":0.81,
                    "config":{"format":"shards","compute_ms":8.33}}"#),
            run(r#"{"samples_per_second":4,"accelerator_utilization":0.0,
                    "config":{"format":"indexed","compute_ms":0.0}}"#),
        ];
        let Some(Figure::Bar(chart)) = &throughput(&runs).figure else {
            panic!("throughput not drawn");
        };
        assert_eq!(chart.categories, vec!["files", "shards", "indexed"]);
        assert_eq!(
            chart.notes,
            vec!["accelerator 62%", "accelerator 81%", ""],
            "a run without compute has no note"
        );
    }

    #[test]
    fn checkpoints_order_store_before_disk() {
        let runs = [
            run(r#"{"ckpt":{"target":"disk","mode":"sync","times":[1,3]}}"#),
            run(r#"{"ckpt":{"target":"s3","mode":"async","times":[4],"load_times":[6]}}"#),
        ];
        let Some(Figure::Bar(chart)) = &checkpoints(&runs).figure else {
            panic!("checkpoints not drawn");
        };
        assert_eq!(chart.categories, vec!["s3 · async", "disk · sync"]);
        assert_eq!(chart.series[0].values, vec![Some(4.0), Some(2.0)]);
        assert_eq!(chart.series[1].values, vec![Some(6.0), None]);
    }
}
