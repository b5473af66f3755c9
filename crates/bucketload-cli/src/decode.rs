//! The decode flags of `read --decode` and `bench`: the loader's samples decoded and augmented
//! into batches (RandomResizedCrop, horizontal flip, normalise), as a training loop would
//! receive them. The engine's decode bridge ([`bucketload::decode`]) does the work; this
//! module only turns the flags into its [`DecodeConfig`].

use anyhow::Context;
use bucketload::decode::{DecodeConfig, Decoder};
use bucketload_image::JpegDecode;
use clap::{Args, ValueEnum};

/// Flags of `read` that turn decoding on.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Decode (images into batches)")]
pub struct DecodeArgs {
    /// Decode every sample's image (.jpg, .jpeg or .png member) and augment it into batches:
    /// RandomResizedCrop, horizontal flip, normalise
    #[arg(long)]
    pub decode: bool,
    /// Side of the square crop, in pixels
    #[arg(long, default_value_t = 224, value_name = "PX")]
    pub image_size: u32,
    /// Images per batch
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub batch_size: usize,
    /// Decode threads [default: the cores available]
    #[arg(long, value_name = "N")]
    pub decode_threads: Option<usize>,
    /// Batch element type: f32 (CHW, normalised with ImageNet's mean and std) or u8 (HWC)
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    pub dtype: Dtype,
    /// Drop the last batch of an epoch when it is short
    #[arg(long)]
    pub drop_last: bool,
    /// Leave out images that cannot be decoded (counted and reported) instead of stopping
    #[arg(long)]
    pub skip_corrupt: bool,
    /// How much of each JPEG to decode: region (only the crop box; the pixels of a whole
    /// decode), region-scaled (the crop box at a 1/2, 1/4 or 1/8 DCT scale when it is that many
    /// times the output: faster, not pixel-identical to torchvision) or whole
    #[arg(long, value_enum, default_value_t = JpegMode::Region)]
    pub jpeg_decode: JpegMode,
}

/// `--jpeg-decode`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum JpegMode {
    /// Only the rows and columns the crop box needs, at full resolution
    Region,
    /// The crop box, DCT-scaled when it is at least twice the output
    RegionScaled,
    /// The whole image
    Whole,
}

/// `--dtype`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Dtype {
    /// 32-bit floats, channels first
    F32,
    /// Bytes, channels last
    U8,
}

/// The decoder of `args`; `None` when `--decode` was not given.
pub fn decoder(args: &DecodeArgs, seed: u64) -> anyhow::Result<Option<Decoder>> {
    if !args.decode {
        return Ok(None);
    }
    let config = DecodeConfig {
        image_size: args.image_size,
        batch_size: args.batch_size,
        dtype: match args.dtype {
            Dtype::F32 => bucketload::decode::Dtype::F32,
            Dtype::U8 => bucketload::decode::Dtype::U8,
        },
        jpeg: match args.jpeg_decode {
            JpegMode::Region => JpegDecode::Region,
            JpegMode::RegionScaled => JpegDecode::RegionScaled,
            JpegMode::Whole => JpegDecode::Whole,
        },
        threads: args.decode_threads,
        drop_last: args.drop_last,
        skip_corrupt: args.skip_corrupt,
        seed,
    };
    let decoder = Decoder::new(&config).context("invalid decode settings")?;
    Ok(Some(decoder))
}
