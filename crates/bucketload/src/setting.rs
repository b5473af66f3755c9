//! [`Setting`]: the settings an engine message may tell the user to change, named in the
//! engine's words so that each front end can put its own in their place.

/// A setting named in an error message or a report, e.g. "set `label_from` to \"none\"".
/// Messages hold its [`Display`](std::fmt::Display), the engine's name between backquotes
/// (the field of the options struct, and the Python keyword argument); the CLI replaces it
/// with its flag (`--label-from`), Python keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// How a dataset is read: files, shards, indexed or auto.
    Format,
    /// Where shard labels come from.
    LabelFrom,
    /// The bytes per shard when sharding.
    ShardSize,
    /// The samples per shard when sharding by count.
    SamplesPerShard,
    /// One slice of a sharding run.
    Part,
    /// Start a sharding run over, deleting what an earlier one left.
    Overwrite,
    /// The MD5 of every shard.
    Md5,
    /// Samples of a generated dataset.
    Samples,
    /// Classes of a generated dataset.
    Classes,
    /// Bytes per generated image.
    Size,
    /// Requests in flight.
    Concurrency,
    /// The transform of decoded images: training or evaluation.
    Augment,
    /// Side of the square crop of decoded images.
    ImageSize,
    /// Shorter side of the evaluation transform's resize.
    Resize,
    /// Channel means of the normalisation.
    Mean,
    /// Channel standard deviations of the normalisation.
    Std,
    /// Area range of the training transform's random crop.
    Scale,
    /// Aspect-ratio range of the training transform's random crop.
    Ratio,
    /// Read a dataset through its manifest (else list it).
    UseManifest,
    /// Compare a dataset's manifest with a listing before reading.
    CheckManifest,
    /// Read a dataset whose own run record says it is unfinished.
    AllowIncomplete,
}

impl Setting {
    /// Every setting.
    pub const ALL: [Setting; 21] = [
        Setting::Format,
        Setting::LabelFrom,
        Setting::ShardSize,
        Setting::SamplesPerShard,
        Setting::Part,
        Setting::Overwrite,
        Setting::Md5,
        Setting::Samples,
        Setting::Classes,
        Setting::Size,
        Setting::Concurrency,
        Setting::Augment,
        Setting::ImageSize,
        Setting::Resize,
        Setting::Mean,
        Setting::Std,
        Setting::Scale,
        Setting::Ratio,
        Setting::UseManifest,
        Setting::CheckManifest,
        Setting::AllowIncomplete,
    ];

    /// The engine's name: `label_from`.
    pub fn name(self) -> &'static str {
        match self {
            Setting::Format => "format",
            Setting::LabelFrom => "label_from",
            Setting::ShardSize => "shard_size",
            Setting::SamplesPerShard => "samples_per_shard",
            Setting::Part => "part",
            Setting::Overwrite => "overwrite",
            Setting::Md5 => "md5",
            Setting::Samples => "samples",
            Setting::Classes => "classes",
            Setting::Size => "size",
            Setting::Concurrency => "concurrency",
            Setting::Augment => "augment",
            Setting::ImageSize => "image_size",
            Setting::Resize => "resize",
            Setting::Mean => "mean",
            Setting::Std => "std",
            Setting::Scale => "scale",
            Setting::Ratio => "ratio",
            Setting::UseManifest => "use_manifest",
            Setting::CheckManifest => "check_manifest",
            Setting::AllowIncomplete => "allow_incomplete",
        }
    }

    /// `text` with every setting it names worded by `words` (left as it is where `words`
    /// gives `None`).
    pub fn reword(text: &str, words: impl Fn(Setting) -> Option<String>) -> String {
        Setting::ALL
            .iter()
            .fold(text.to_owned(), |text, setting| match words(*setting) {
                Some(own) => text.replace(&setting.to_string(), &own),
                None => text,
            })
    }
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}`", self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::Setting;

    #[test]
    fn messages_name_settings_in_backquotes_for_front_ends_to_reword() {
        let text = format!(
            "raise {} or use {}",
            Setting::ShardSize,
            Setting::SamplesPerShard
        );
        assert_eq!(text, "raise `shard_size` or use `samples_per_shard`");
        let cli = Setting::reword(&text, |s| Some(format!("--{}", s.name().replace('_', "-"))));
        assert_eq!(cli, "raise --shard-size or use --samples-per-shard");
        // `samples` is a prefix of `samples_per_shard`: the backquotes keep them apart.
        let samples = format!("{} and {}", Setting::Samples, Setting::SamplesPerShard);
        let only = Setting::reword(&samples, |s| (s == Setting::Samples).then(|| "N".into()));
        assert_eq!(only, "N and `samples_per_shard`");
    }
}
