//! Per-bucket settings that S3 stores and returns: the public access block, object ownership
//! and the versioning state, in `.bucketload/bucket-config/<bucket>.json`. With one key pair and no public
//! access of any kind, every setting of both holds as stated: nothing is public to block, and
//! the bucket owner owns every object.

use std::fs;
use std::path::PathBuf;

use s3s::S3Error;
use serde::{Deserialize, Serialize};

use super::{INTERNAL_DIR, Storage, internal, is_missing, rename_into};

/// A bucket's stored settings; `None` fields were never set (or were deleted).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct BucketConfig {
    /// BlockPublicAcls, IgnorePublicAcls, BlockPublicPolicy, RestrictPublicBuckets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) public_access_block: Option<[bool; 4]>,
    /// `BucketOwnerEnforced`, `BucketOwnerPreferred` or `ObjectWriter`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ownership: Option<String>,
    /// `Enabled` or `Suspended`; `None` while versioning was never enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) versioning: Option<String>,
}

impl Storage {
    fn bucket_config_path(&self, bucket: &str) -> PathBuf {
        self.root
            .join(INTERNAL_DIR)
            .join("bucket-config")
            .join(format!("{bucket}.json"))
    }

    /// The bucket's settings (404 NoSuchBucket when it does not exist).
    pub(crate) fn bucket_config(&self, bucket: &str) -> Result<BucketConfig, S3Error> {
        self.bucket_dir(bucket)?;
        match fs::read(self.bucket_config_path(bucket)) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| internal(e.into())),
            Err(e) if is_missing(&e) => Ok(BucketConfig::default()),
            Err(e) => Err(internal(e)),
        }
    }

    /// Changes the bucket's settings with `change`, under the commit lock.
    pub(crate) fn update_bucket_config(
        &self,
        bucket: &str,
        change: impl FnOnce(&mut BucketConfig),
    ) -> Result<BucketConfig, S3Error> {
        let _commits = self.lock_commits();
        let mut config = self.bucket_config(bucket)?;
        change(&mut config);
        let path = self.bucket_config_path(bucket);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(internal)?;
        }
        let temp = self.temp_path();
        let json = serde_json::to_vec(&config).map_err(|e| internal(e.into()))?;
        fs::write(&temp, json).map_err(internal)?;
        rename_into(&temp, &path).map_err(|e| {
            let _ = fs::remove_file(&temp);
            internal(e)
        })?;
        // Still under the lock, so no write sees the old state once the new one is stored.
        self.versioning_lock().insert(
            bucket.to_owned(),
            super::Versioning::from_status(config.versioning.as_deref()),
        );
        Ok(config)
    }

    /// Forgets a deleted bucket's settings.
    pub(crate) fn forget_bucket_config(&self, bucket: &str) {
        let _ = fs::remove_file(self.bucket_config_path(bucket));
        self.versioning_lock().remove(bucket);
    }
}
