//! `bucketload report LOGS… --out DIR`: charts of benchmark logs as PNG files and one
//! self-contained HTML page.
//!
//! Data flow: [`log`] reads the logs leniently (every key optional) → [`charts`] turns the runs
//! into up to four chart descriptions → [`svg`] draws each as SVG text → the page ([`html`])
//! embeds that SVG inline and [`raster`] turns the same text into `<slug>.png`. [`table`] writes
//! the per-run summary for the page and for stdout. What each chart shows is in `docs/REPORT.md`.

mod charts;
mod html;
mod log;
mod raster;
mod svg;
mod table;

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// Arguments of `bucketload report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Benchmark logs (JSON written by `bucketload bench` or the peers in benchmarks/peers/), or
    /// folders of them (every *.json inside).
    #[arg(required = true, value_name = "LOGS")]
    logs: Vec<PathBuf>,
    /// Folder for index.html and the PNG charts (created if missing; files there are replaced).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// What `report` wrote.
#[derive(Debug)]
struct Written {
    page: PathBuf,
    pngs: Vec<PathBuf>,
    skipped: Vec<&'static str>,
    summary: String,
}

/// Runs `bucketload report`; the drawing runs off the async workers.
pub async fn report(args: ReportArgs) -> anyhow::Result<()> {
    let written = tokio::task::spawn_blocking(move || write_report(&args.logs, &args.out))
        .await
        .context("the report task failed")??;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", written.page.display())?;
    for png in &written.pngs {
        writeln!(stdout, "{}", png.display())?;
    }
    for title in &written.skipped {
        writeln!(stdout, "skipped (no data): {title}")?;
    }
    writeln!(stdout)?;
    write!(stdout, "{}", written.summary)?;
    Ok(())
}

fn write_report(logs: &[PathBuf], out: &Path) -> anyhow::Result<Written> {
    let files = log::log_files(logs)?;
    let mut runs = Vec::new();
    for file in &files {
        runs.extend(log::read_log(file)?);
    }
    tracing::info!(
        files = files.len(),
        runs = runs.len(),
        "read benchmark logs"
    );
    let sections = charts::sections(&runs);
    std::fs::create_dir_all(out)
        .with_context(|| format!("cannot create the output folder {}", out.display()))?;
    let rasterizer = raster::Rasterizer::new();
    let mut pngs = Vec::new();
    for section in &sections {
        let Some(figure) = &section.figure else {
            continue;
        };
        let png = rasterizer
            .png(&figure.to_svg(true))
            .with_context(|| format!("cannot draw the chart {}", section.title))?;
        let path = out.join(format!("{}.png", section.slug));
        std::fs::write(&path, png).with_context(|| format!("cannot write {}", path.display()))?;
        pngs.push(path);
    }
    let page = out.join("index.html");
    std::fs::write(&page, html::page(&runs, files.len(), &sections))
        .with_context(|| format!("cannot write {}", page.display()))?;
    Ok(Written {
        page,
        pngs,
        skipped: sections
            .iter()
            .filter(|s| s.figure.is_none())
            .map(|s| s.title)
            .collect(),
        summary: table::text(&runs),
    })
}
