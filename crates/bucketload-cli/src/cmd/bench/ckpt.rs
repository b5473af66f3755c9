//! `bench --ckpt-steps N`: a checkpoint of `--ckpt-size` bytes every N training steps, to
//! `--ckpt-to`, synchronously (the step waits for the save) or with `--async-ckpt` in the
//! background (the step waits for the in-memory snapshot only). The stalls are the
//! `t_ckpt_<n>` of the log.

use std::time::Instant;

use anyhow::Context;
use bucketload::checkpoint::{Checkpoints, SaveHandle};
use bytes::Bytes;

use super::log::CkptLog;

/// Checkpoints of one run.
pub struct Checkpointer {
    ckpt: Checkpoints,
    /// The "model": bytes that do not compress.
    state: Bytes,
    every: u64,
    asynchronous: bool,
    steps: u64,
    stalls: Vec<f64>,
    durable: Vec<f64>,
    pending: Vec<(Instant, SaveHandle)>,
    names: Vec<String>,
}

impl Checkpointer {
    /// A checkpoint of `size` bytes every `every` steps into `ckpt`.
    pub fn new(
        ckpt: Checkpoints,
        size: u64,
        every: u64,
        asynchronous: bool,
    ) -> anyhow::Result<Self> {
        let size = usize::try_from(size).context("--ckpt-size does not fit in memory")?;
        Ok(Checkpointer {
            ckpt,
            state: model_bytes(size),
            every: every.max(1),
            asynchronous,
            steps: 0,
            stalls: Vec::new(),
            durable: Vec::new(),
            pending: Vec::new(),
            names: Vec::new(),
        })
    }

    /// Called after every training step; saves when due. Returns the seconds the step stalled.
    pub async fn after_step(&mut self) -> anyhow::Result<f64> {
        self.steps += 1;
        if !self.steps.is_multiple_of(self.every) {
            return Ok(0.0);
        }
        let name = format!("bench-step-{}.bin", self.steps);
        let started = Instant::now();
        if self.asynchronous {
            // The snapshot a training loop takes before training on: one copy.
            let snapshot = Bytes::copy_from_slice(&self.state);
            let handle = self.ckpt.save_background(&name, snapshot).await?;
            self.pending.push((started, handle));
            self.collect_finished().await?;
        } else {
            let saved = self.ckpt.save(&name, self.state.clone()).await?;
            self.durable.push(saved.seconds);
        }
        let stall = started.elapsed().as_secs_f64();
        self.stalls.push(stall);
        self.names.push(name);
        Ok(stall)
    }

    async fn collect_finished(&mut self) -> anyhow::Result<()> {
        let mut still = Vec::new();
        for (started, handle) in std::mem::take(&mut self.pending) {
            if handle.is_finished() {
                handle.wait().await?;
                self.durable.push(started.elapsed().as_secs_f64());
            } else {
                still.push((started, handle));
            }
        }
        self.pending = still;
        Ok(())
    }

    /// Waits for the saves still running, deletes the run's checkpoints, and returns the log.
    pub async fn finish(mut self) -> anyhow::Result<CkptLog> {
        for (started, handle) in std::mem::take(&mut self.pending) {
            handle.wait().await?;
            self.durable.push(started.elapsed().as_secs_f64());
        }
        for name in &self.names {
            self.ckpt
                .delete(name)
                .await
                .with_context(|| format!("cannot delete {}", self.ckpt.uri_of(name)))?;
        }
        Ok(CkptLog {
            target: match self.ckpt.store() {
                Some(_) => "s3".to_owned(),
                None => "disk".to_owned(),
            },
            mode: match self.asynchronous {
                true => "async".to_owned(),
                false => "sync".to_owned(),
            },
            uri: self.ckpt.uri().to_owned(),
            size_bytes: self.state.len() as u64,
            times: self.stalls,
            durable_times: self.durable,
        })
    }
}

/// Bytes that do not compress or deduplicate (xorshift), like trained weights.
pub fn model_bytes(size: usize) -> Bytes {
    let mut out = vec![0u8; size];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for chunk in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    Bytes::from(out)
}
