//! Checkpoint transfer flags, shared by `ckpt`, `bench` and `ckpt-bench`, and the checkpoint
//! prefix they open.

use bucketload::checkpoint::{
    CheckpointConfig, Checkpoints, DEFAULT_PART_SIZE, DEFAULT_PARTS_IN_FLIGHT,
};
use clap::Args;

use crate::args::store::{StoreArgs, should_create_bucket};

/// Parallelism of checkpoint saves and loads; the part size is the global `--part-size`
/// (16 MiB for checkpoints when not given).
#[derive(Debug, Clone, Args)]
pub struct TransferArgs {
    /// Parts uploaded, or ranged GETs read, at once per checkpoint
    #[arg(long, default_value_t = DEFAULT_PARTS_IN_FLIGHT, value_name = "N")]
    pub parts_in_flight: usize,
}

impl TransferArgs {
    /// The checkpoint configuration of these flags and the global `--part-size`.
    pub fn config(&self, store: &StoreArgs) -> CheckpointConfig {
        CheckpointConfig::default()
            .with_part_size(store.part_size.unwrap_or(DEFAULT_PART_SIZE))
            .with_parts_in_flight(self.parts_in_flight)
    }
}

/// Opens the checkpoint prefix `uri`, registered for `--metrics`.
pub fn open_prefix(
    store: &StoreArgs,
    uri: &str,
    config: CheckpointConfig,
) -> anyhow::Result<Checkpoints> {
    let ckpt = Checkpoints::open(uri, &store.config(), config)?;
    if let Some(s) = ckpt.store() {
        crate::metrics::register(s);
    }
    Ok(ckpt)
}

/// Creates the bucket of `ckpt` when the endpoint is on this machine (as `gen` and `cp` do).
pub async fn create_local_bucket(store: &StoreArgs, ckpt: &Checkpoints) -> anyhow::Result<()> {
    if let Some(s) = ckpt.store()
        && should_create_bucket(false, &store.config())
    {
        s.create_bucket().await?;
    }
    Ok(())
}
