//! `--metrics` and `--price-table`: every store a command opens is registered here, priced
//! with the chosen table, and summarised on stderr when the command ends.

use std::io::Write;
use std::sync::{Mutex, OnceLock};

use anyhow::Context;
use bucketload_store::{MetricsSnapshot, PriceTable, Scheme, Store};

static OPENED: Mutex<Vec<Store>> = Mutex::new(Vec::new());
static PRICES: OnceLock<PriceTable> = OnceLock::new();

/// Reads the `--price-table` file, if any, before any store is opened.
pub fn load_price_table(path: Option<&std::path::Path>) -> anyhow::Result<()> {
    let Some(path) = path else { return Ok(()) };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the price table {}", path.display()))?;
    let table = PriceTable::from_json(&text)
        .with_context(|| format!("{}: not a valid price table", path.display()))?;
    let _ = PRICES.set(table);
    Ok(())
}

/// Remembers `store` so its metrics can be reported, and applies the price table.
pub fn register(store: &Store) {
    if let Some(prices) = PRICES.get() {
        store.metrics().set_price_table(prices.clone());
    }
    // A poisoned lock only means another thread panicked while pushing; the list is still usable.
    let mut opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
    opened.push(store.clone());
}

/// Writes one block per store that made requests.
pub fn report(out: &mut impl Write) -> std::io::Result<()> {
    let opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
    for store in opened.iter() {
        let snap = store.metrics().snapshot();
        if snap.requests.total() > 0 {
            let priced = !matches!(store.uri().scheme(), Scheme::File | Scheme::Memory);
            write_snapshot(out, &store.to_string(), &snap, priced)?;
        }
    }
    Ok(())
}

fn write_snapshot(
    out: &mut impl Write,
    name: &str,
    s: &MetricsSnapshot,
    priced: bool,
) -> std::io::Result<()> {
    let r = &s.requests;
    writeln!(out, "requests to {name}")?;
    let kinds = [
        ("GET", r.get),
        ("ranged GET", r.ranged_get),
        ("HEAD", r.head),
        ("PUT", r.put),
        ("multipart create", r.multipart_create),
        ("multipart part", r.multipart_part),
        ("multipart complete", r.multipart_complete),
        ("multipart abort", r.multipart_abort),
        ("LIST", r.list),
        ("DELETE", r.delete),
        ("COPY", r.copy),
    ];
    let counts: Vec<String> = kinds
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    writeln!(out, "  requests  {} ({})", r.total(), counts.join(", "))?;
    writeln!(
        out,
        "  bytes     {} in, {} out; {} HTTP attempts, {} retries",
        crate::common::human(s.bytes_in),
        crate::common::human(s.bytes_out),
        s.http_attempts,
        s.retries
    )?;
    let e = &s.errors;
    let errors = e.not_found + e.permission + e.throttled + e.server + e.network + e.other;
    if errors > 0 {
        writeln!(
            out,
            "  errors    {errors} (not found {}, permission {}, throttled {}, server {}, network {}, other {})",
            e.not_found, e.permission, e.throttled, e.server, e.network, e.other
        )?;
    }
    let (fb, total) = (&s.latency.first_byte_ms, &s.latency.total_ms);
    if fb.count > 0 {
        writeln!(
            out,
            "  first byte p50 {:.1} ms  p90 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
            fb.p50, fb.p90, fb.p99, fb.max
        )?;
    }
    if total.count > 0 {
        writeln!(
            out,
            "  total      p50 {:.1} ms  p90 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
            total.p50, total.p90, total.p99, total.max
        )?;
    }
    if !priced {
        return Ok(());
    }
    writeln!(
        out,
        "  cost      ${:.6} (requests ${:.6}, transfer ${:.6})",
        s.cost.total_usd, s.cost.requests_usd, s.cost.transfer_usd
    )
}
