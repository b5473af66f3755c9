//! The decode flags of `read --decode` and `bench`: the loader's samples decoded and augmented
//! into batches (RandomResizedCrop, horizontal flip, normalise; with `--augment eval`: resize,
//! centre crop, normalise), as a training or validation loop would receive them. The engine's
//! decode bridge ([`bucketload::decode`]) does the work; this module only turns the flags into
//! its [`DecodeConfig`].

use anyhow::Context;
use bucketload::decode::{Augmentation, DecodeConfig, Decoder, TransformSettings};
use bucketload_image::JpegDecode;
use clap::{Args, ValueEnum};

/// Flags of `read` that turn decoding on.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Decode (images into batches)")]
pub struct DecodeArgs {
    /// Decode every sample's image (.jpg, .jpeg or .png member) and augment it into batches:
    /// RandomResizedCrop, horizontal flip, normalise (--augment eval: resize, centre crop,
    /// normalise)
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
    /// Batch element type: f32 (CHW, normalised with --mean and --std) or u8 (HWC)
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
    #[command(flatten)]
    pub transform: TransformArgs,
}

/// The transform of each decoded image, shared by `read --decode` and `bench`.
#[derive(Debug, Clone, Default, Args)]
pub struct TransformArgs {
    /// Transform: train (RandomResizedCrop, horizontal flip) or eval (resize the shorter side
    /// to --resize, centre crop to --image-size, no flip)
    #[arg(long, value_enum, default_value_t = AugmentArg::Train)]
    pub augment: AugmentArg,
    /// Shorter side the eval transform resizes to [default: round(image size / 0.875), 256 for
    /// 224]
    #[arg(long, value_name = "PX")]
    pub resize: Option<u32>,
    /// Channel means subtracted from f32 batches [default: ImageNet's 0.485,0.456,0.406]
    #[arg(long, value_parser = parse_rgb, value_name = "R,G,B")]
    pub mean: Option<[f32; 3]>,
    /// Channel standard deviations dividing f32 batches [default: ImageNet's
    /// 0.229,0.224,0.225]
    #[arg(long, value_parser = parse_rgb, value_name = "R,G,B")]
    pub std: Option<[f32; 3]>,
    /// Range of the train crop's share of the image area [default: 0.08,1]
    #[arg(long, value_parser = parse_range, value_name = "LO,HI")]
    pub crop_scale: Option<(f64, f64)>,
    /// Range of the train crop's width / height [default: 0.75,1.3333]
    #[arg(long, value_parser = parse_range, value_name = "LO,HI")]
    pub crop_ratio: Option<(f64, f64)>,
}

/// `--augment`.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum AugmentArg {
    /// RandomResizedCrop and a horizontal flip
    #[default]
    Train,
    /// Resize the shorter side, then centre crop
    Eval,
}

/// `R,G,B`: three numbers.
fn parse_rgb(text: &str) -> Result<[f32; 3], String> {
    let values = parse_numbers(text)?;
    <[f32; 3]>::try_from(values.as_slice())
        .map_err(|_| format!("{text:?} has {} values; give three, R,G,B", values.len()))
}

/// `LO,HI`: two numbers.
fn parse_range(text: &str) -> Result<(f64, f64), String> {
    let values = parse_numbers(text)?;
    match values.as_slice() {
        [lo, hi] => Ok((f64::from(*lo), f64::from(*hi))),
        _ => Err(format!(
            "{text:?} has {} values; give two, LO,HI",
            values.len()
        )),
    }
}

fn parse_numbers(text: &str) -> Result<Vec<f32>, String> {
    text.split(',')
        .map(|v| {
            v.trim()
                .parse::<f32>()
                .map_err(|_| format!("{v:?} in {text:?} is not a number"))
        })
        .collect()
}

impl TransformArgs {
    /// The transform settings given.
    fn settings(&self) -> TransformSettings {
        TransformSettings {
            augmentation: match self.augment {
                AugmentArg::Train => Augmentation::TRAIN,
                AugmentArg::Eval => Augmentation::EVAL,
            },
            resize: self.resize,
            mean: self.mean,
            std: self.std,
            scale: self.crop_scale,
            ratio: self.crop_ratio,
        }
    }
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
    let dtype = match args.dtype {
        Dtype::F32 => bucketload::decode::Dtype::F32,
        Dtype::U8 => bucketload::decode::Dtype::U8,
    };
    let (augmentation, mean, std) = args.transform.settings().resolve(dtype)?;
    let config = DecodeConfig {
        image_size: args.image_size,
        augmentation,
        mean,
        std,
        batch_size: args.batch_size,
        dtype,
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
