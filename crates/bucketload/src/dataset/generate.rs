//! Uploads a synthetic image-classification dataset.
//!
//! Sample `i` belongs to class `i % classes` and is stored at `class_CCC/NNNNNN.jpg` (zero-padded,
//! `N` = `i`). The image shape is searched once for the requested size ([`ImageShape::search`]),
//! then every sample is rendered from its own seeded RNG on a blocking thread — at most one encode
//! per core at a time — and PUT with up to `concurrency` requests in flight. The stream of
//! samples is pulled lazily, so memory holds at most `concurrency` encoded files.

use std::sync::Arc;
use std::time::Instant;

use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::Semaphore;

use super::pad_width;
use super::synth::{ImageShape, NoiseTable, encode_sample};
use crate::Setting;
use crate::base::{Location, Progress};
use crate::error::{Error, Result};

/// Default number of PUTs in flight.
const DEFAULT_PUTS_IN_FLIGHT: usize = 64;

/// What to generate. Build with [`GenSpec::builder`].
#[derive(Debug, Clone)]
pub struct GenSpec {
    samples: u64,
    classes: usize,
    size: u64,
    seed: u64,
    concurrency: usize,
}

/// Builder of [`GenSpec`].
#[derive(Debug, Clone)]
pub struct GenSpecBuilder {
    spec: GenSpec,
}

impl GenSpec {
    /// Starts a spec: 1,000 samples, 10 classes, 100 KB each, seed 0, 64 PUTs in flight.
    pub fn builder() -> GenSpecBuilder {
        GenSpecBuilder {
            spec: GenSpec {
                samples: 1000,
                classes: 10,
                size: 100_000,
                seed: 0,
                concurrency: DEFAULT_PUTS_IN_FLIGHT,
            },
        }
    }

    /// Number of samples.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// Target size of each file in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Seed of the generator.
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

impl GenSpecBuilder {
    /// Number of samples (default 1,000).
    pub fn with_samples(mut self, n: u64) -> Self {
        self.spec.samples = n;
        self
    }

    /// Number of classes (default 10).
    pub fn with_classes(mut self, n: usize) -> Self {
        self.spec.classes = n;
        self
    }

    /// Target size of each file in bytes (default 100,000); files land within about ±10%.
    pub fn with_size(mut self, bytes: u64) -> Self {
        self.spec.size = bytes;
        self
    }

    /// Seed (default 0): the same seed gives the same bytes.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.spec.seed = seed;
        self
    }

    /// PUT requests in flight (default 64).
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.spec.concurrency = n;
        self
    }

    /// Checks the spec and reports every problem at once.
    pub fn build(self) -> Result<GenSpec> {
        let s = &self.spec;
        let mut problems = Vec::new();
        if s.samples == 0 {
            problems.push(format!("{} must be at least 1", Setting::Samples));
        }
        if s.classes == 0 {
            problems.push(format!("{} must be at least 1", Setting::Classes));
        }
        if s.classes as u64 > s.samples.max(1) {
            problems.push(format!(
                "{} ({}) must not exceed {} ({})",
                Setting::Classes,
                s.classes,
                Setting::Samples,
                s.samples
            ));
        }
        // Below ~1 KB the JPEG headers alone exceed the budget; above 64 MiB one image would
        // need more than 16,384 pixels a side.
        if !(1_000..=64 << 20).contains(&s.size) {
            problems.push(format!(
                "{} must be between 1KB and 64MiB, not {} bytes",
                Setting::Size,
                s.size
            ));
        }
        if s.concurrency == 0 {
            problems.push(format!("{} must be at least 1", Setting::Concurrency));
        }
        if problems.is_empty() {
            Ok(self.spec)
        } else {
            Err(Error::invalid_input(problems.join("; ")))
        }
    }
}

/// What [`generate`] did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GenReport {
    /// Objects written.
    pub objects: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Wall-clock seconds, including the size search.
    pub seconds: f64,
    /// Shape of every image.
    pub shape: ImageShape,
}

/// Name of class `class` when there are `classes` classes: `class_000`, `class_001`, ...
pub fn class_name(class: usize, classes: usize) -> String {
    format!(
        "class_{class:0width$}",
        width = pad_width(classes as u64, 3)
    )
}

/// Key of sample `index` of a dataset of `samples` samples in `classes` classes.
pub fn sample_key(index: u64, samples: u64, classes: usize) -> Path {
    let class = (index % classes.max(1) as u64) as usize;
    let width = pad_width(samples, 6);
    Path::from(format!(
        "{}/{index:0width$}.jpg",
        class_name(class, classes)
    ))
}

/// Generates the dataset described by `spec` under `location`.
pub async fn generate(
    location: &Location,
    spec: &GenSpec,
    progress: &dyn Progress,
) -> Result<GenReport> {
    let started = Instant::now();
    let table = Arc::new(NoiseTable::new());
    let shape = search_shape(Arc::clone(&table), spec.size, spec.classes).await?;
    tracing::info!(
        ?shape,
        samples = spec.samples,
        classes = spec.classes,
        "generating dataset"
    );
    progress.set_total(spec.samples, Some(spec.samples * spec.size));
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let encoders = Arc::new(Semaphore::new(cores));
    let bytes = futures::stream::iter(0..spec.samples)
        .map(|index| {
            put_sample(
                location,
                spec,
                shape,
                Arc::clone(&table),
                Arc::clone(&encoders),
                index,
            )
        })
        .buffer_unordered(spec.concurrency)
        .try_fold(0u64, |total, len| {
            progress.advance(1, len);
            futures::future::ok(total + len)
        })
        .await;
    progress.finish();
    let bytes = bytes?;
    Ok(GenReport {
        objects: spec.samples,
        bytes,
        seconds: started.elapsed().as_secs_f64(),
        shape,
    })
}

async fn search_shape(table: Arc<NoiseTable>, size: u64, classes: usize) -> Result<ImageShape> {
    tokio::task::spawn_blocking(move || ImageShape::search(&table, size, classes))
        .await
        .map_err(|e| Error::Task {
            reason: e.to_string(),
        })?
}

async fn put_sample(
    location: &Location,
    spec: &GenSpec,
    shape: ImageShape,
    table: Arc<NoiseTable>,
    encoders: Arc<Semaphore>,
    index: u64,
) -> Result<u64> {
    let (seed, classes) = (spec.seed, spec.classes);
    let class = (index % classes as u64) as usize;
    let data = {
        let _permit = encoders.acquire_owned().await.map_err(|e| Error::Task {
            reason: e.to_string(),
        })?;
        tokio::task::spawn_blocking(move || {
            encode_sample(&table, shape, seed, index, class, classes)
        })
        .await
        .map_err(|e| Error::Task {
            reason: e.to_string(),
        })??
    };
    let key = sample_key(index, spec.samples, classes);
    let len = data.len() as u64;
    location
        .store()
        .put(&key, PutPayload::from(data))
        .await
        .map_err(|e| location.error(&key, e))?;
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_zero_padded_to_the_count() {
        assert_eq!(class_name(3, 10), "class_003");
        assert_eq!(class_name(42, 1500), "class_0042");
        assert_eq!(sample_key(7, 2000, 10).as_ref(), "class_007/000007.jpg");
        assert_eq!(sample_key(12, 2000, 10).as_ref(), "class_002/000012.jpg");
        assert_eq!(
            sample_key(5, 10_000_000, 1).as_ref(),
            "class_000/0000005.jpg"
        );
    }

    #[test]
    fn build_reports_every_problem() {
        let err = GenSpec::builder()
            .with_samples(0)
            .with_classes(0)
            .with_size(10)
            .build()
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("`samples`") && text.contains("`classes`") && text.contains("`size`"),
            "{text}"
        );
        assert!(
            GenSpec::builder()
                .with_classes(20)
                .with_samples(10)
                .build()
                .is_err()
        );
        assert!(GenSpec::builder().build().is_ok());
    }
}
