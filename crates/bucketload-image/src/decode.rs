//! Decoding JPEG and PNG bytes into 8-bit RGB pixels.
//!
//! JPEG goes through libjpeg-turbo (the system library, through the small C file
//! `csrc/jpeg_region.c` and the `turbo` module): baseline and progressive, restart intervals,
//! any chroma subsampling, grayscale; the pixels are those Pillow decodes. The same decoder
//! decodes only a region of the image, at a DCT scale of M/8 if asked, for the pipeline
//! ([`JpegDecode`](crate::JpegDecode)). CMYK and YCCK, which libjpeg-turbo does not convert to
//! RGB, go through `zune-jpeg` (pure Rust). PNG goes through the `png` crate: palette,
//! grayscale and alpha are expanded and 16-bit samples are reduced to 8 bits; alpha is
//! dropped (as Pillow's `convert("RGB")` does). docs/BENCHMARKS.md has the measurements
//! behind the choice of decoder.
//!
//! The header is read first and the declared pixel count checked against a limit before any
//! pixel buffer is allocated, so a decompression bomb costs a few hundred bytes of parsing.

use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;

use crate::error::{Error, Result};
use crate::turbo::{self, Region};

/// Default limit on `width * height` of one image: 89.5 Mpx, Pillow's `MAX_IMAGE_PIXELS`, so a
/// dataset Pillow opens without a warning also decodes here.
pub const DEFAULT_MAX_PIXELS: u64 = 89_478_485;

const JPEG_MAGIC: [u8; 2] = [0xFF, 0xD8];
const PNG_MAGIC: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];

/// An image format this crate decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ImageFormat {
    /// JPEG (JFIF/Exif/Adobe), baseline or progressive.
    Jpeg,
    /// PNG.
    Png,
}

impl ImageFormat {
    /// The format whose signature `bytes` starts with.
    pub fn sniff(bytes: &[u8]) -> Option<ImageFormat> {
        if bytes.starts_with(&JPEG_MAGIC) {
            Some(ImageFormat::Jpeg)
        } else if bytes.starts_with(&PNG_MAGIC) {
            Some(ImageFormat::Png)
        } else {
            None
        }
    }
}

/// Interleaved 8-bit RGB pixels, row-major, `width * height * 3` bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RgbImage {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `width * height * 3` bytes, R, G, B for each pixel.
    pub pixels: Vec<u8>,
}

impl RgbImage {
    /// The three bytes of pixel (`x`, `y`).
    ///
    /// # Panics
    /// If the pixel lies outside the image.
    pub fn pixel(&self, x: u32, y: u32) -> [u8; 3] {
        let at = (y as usize * self.width as usize + x as usize) * 3;
        [self.pixels[at], self.pixels[at + 1], self.pixels[at + 2]]
    }
}

/// Decodes `bytes` (JPEG or PNG) of sample `key` to RGB, refusing images whose declared
/// `width * height` exceeds `max_pixels`.
pub fn decode(key: &str, bytes: &[u8], max_pixels: u64) -> Result<RgbImage> {
    let mut image = RgbImage::default();
    decode_into(key, bytes, max_pixels, &mut image)?;
    Ok(image)
}

/// Like [`decode`], reusing `image`'s buffer (a decode loop then allocates only when an image
/// is larger than every one before it).
pub fn decode_into(key: &str, bytes: &[u8], max_pixels: u64, image: &mut RgbImage) -> Result<()> {
    match ImageFormat::sniff(bytes) {
        Some(ImageFormat::Jpeg) => decode_jpeg(key, bytes, max_pixels, image),
        Some(ImageFormat::Png) => decode_png(key, bytes, max_pixels, image),
        None => Err(Error::UnknownFormat {
            key: key.to_owned(),
            magic: bytes.iter().take(4).copied().collect(),
        }),
    }
}

fn check_limit(key: &str, width: u32, height: u32, limit: u64) -> Result<()> {
    let pixels = u64::from(width) * u64::from(height);
    if pixels > limit {
        return Err(Error::TooLarge {
            key: key.to_owned(),
            width,
            height,
            pixels,
            limit,
        });
    }
    if pixels == 0 {
        return Err(Error::corrupt(key, "the header declares an empty image"));
    }
    Ok(())
}

fn decode_jpeg(key: &str, bytes: &[u8], max_pixels: u64, image: &mut RgbImage) -> Result<()> {
    let Some((width, height)) = jpeg_size(key, bytes, max_pixels)? else {
        return decode_jpeg_zune(key, bytes, max_pixels, image);
    };
    let whole = Region {
        x: 0,
        y: 0,
        width,
        height,
    };
    match decode_jpeg_region(key, bytes, (width, height), whole, 8, &mut image.pixels)? {
        Some(_) => {
            image.pixels.truncate(width as usize * height as usize * 3);
            image.width = width;
            image.height = height;
            Ok(())
        }
        None => decode_jpeg_zune(key, bytes, max_pixels, image),
    }
}

/// The size of the JPEG `bytes`, checked against `max_pixels`; `None` for CMYK and YCCK,
/// which [`decode_jpeg_region`] does not decode.
pub(crate) fn jpeg_size(key: &str, bytes: &[u8], max_pixels: u64) -> Result<Option<(u32, u32)>> {
    let header = turbo::header(bytes).map_err(|e| Error::corrupt(key, e))?;
    check_limit(key, header.width, header.height, max_pixels)?;
    Ok((!header.cmyk).then_some((header.width, header.height)))
}

/// Decodes `want`, in the coordinates of the JPEG (of `size`, from [`jpeg_size`]) scaled by
/// `scale_num / 8` (1..=8), with libjpeg-turbo into the start of `buf`; returns the region
/// decoded (`want` widened to whole iMCU columns, rows of `width * 3` bytes), or `None` for
/// CMYK and YCCK.
///
/// Rows below the region are not decoded, so a stream cut short there would go unnoticed; a
/// stream that does not end with an end-of-image marker is therefore decoded to its last row,
/// where the decoder reports the truncation.
pub(crate) fn decode_jpeg_region(
    key: &str,
    bytes: &[u8],
    size: (u32, u32),
    mut want: Region,
    scale_num: u32,
    buf: &mut Vec<u8>,
) -> Result<Option<Region>> {
    let (scaled_width, scaled_height) = (scaled(size.0, scale_num), scaled(size.1, scale_num));
    if !ends_with_eoi(bytes) {
        want.height = scaled_height - want.y;
    }
    match turbo::decode(bytes, want, scale_num, scaled_width, buf) {
        Ok(turbo::Decoded::Region { region, .. }) => Ok(Some(region)),
        Ok(turbo::Decoded::Unsupported) => Ok(None),
        Err(e) => Err(Error::corrupt(key, e)),
    }
}

/// libjpeg's size of `v` pixels scaled by `scale_num / 8`, rounded up.
pub(crate) fn scaled(v: u32, scale_num: u32) -> u32 {
    // v < 2^16 (JPEG dimensions are 16-bit) and scale_num <= 8, so this fits.
    (v * scale_num).div_ceil(8)
}

/// Whether the last bytes hold an end-of-image marker (a few bytes of padding after it are
/// common). In entropy-coded data `FF` is always followed by `00` or a restart marker, so
/// `FF D9` there can only be the marker.
fn ends_with_eoi(bytes: &[u8]) -> bool {
    // Encoders and cameras pad after the marker by a few bytes at most.
    const TAIL: usize = 64;
    bytes[bytes.len().saturating_sub(TAIL)..]
        .windows(2)
        .any(|w| w == [0xFF, 0xD9])
}

/// CMYK and YCCK JPEGs, which libjpeg-turbo does not convert to RGB, go through zune-jpeg.
fn decode_jpeg_zune(key: &str, bytes: &[u8], max_pixels: u64, image: &mut RgbImage) -> Result<()> {
    let options = DecoderOptions::new_fast()
        .jpeg_set_out_colorspace(ColorSpace::RGB)
        // JPEG dimensions are 16-bit; our own limit applies instead of zune's default.
        .set_max_width(usize::from(u16::MAX))
        .set_max_height(usize::from(u16::MAX))
        // Strict: a truncated or damaged stream is an error (as in Pillow), not grey pixels.
        .set_strict_mode(true);
    let mut decoder = zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    decoder
        .decode_headers()
        .map_err(|e| Error::corrupt(key, e))?;
    let info = decoder
        .info()
        .ok_or_else(|| Error::corrupt(key, "no frame header"))?;
    let (width, height) = (u32::from(info.width), u32::from(info.height));
    check_limit(key, width, height, max_pixels)?;
    let len = decoder
        .output_buffer_size()
        .ok_or_else(|| Error::corrupt(key, "no frame header"))?;
    image.pixels.resize(len, 0);
    decoder
        .decode_into(&mut image.pixels)
        .map_err(|e| Error::corrupt(key, e))?;
    image.width = width;
    image.height = height;
    Ok(())
}

fn decode_png(key: &str, bytes: &[u8], max_pixels: u64, image: &mut RgbImage) -> Result<()> {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().map_err(|e| Error::corrupt(key, e))?;
    let (width, height) = reader.info().size();
    check_limit(key, width, height, max_pixels)?;
    let len = reader
        .output_buffer_size()
        .ok_or_else(|| Error::corrupt(key, "image too large for this platform"))?;
    let mut raw = vec![0u8; len];
    let frame = reader
        .next_frame(&mut raw)
        .map_err(|e| Error::corrupt(key, e))?;
    raw.truncate(frame.buffer_size());
    let channels = frame.color_type.samples();
    image.width = width;
    image.height = height;
    image.pixels.clear();
    image.pixels.reserve(width as usize * height as usize * 3);
    to_rgb(&raw, channels, &mut image.pixels);
    Ok(())
}

/// Appends the RGB of each pixel of `raw` (`channels` 8-bit samples per pixel: gray,
/// gray+alpha, RGB or RGBA) to `out`.
fn to_rgb(raw: &[u8], channels: usize, out: &mut Vec<u8>) {
    match channels {
        1 | 2 => out.extend(raw.chunks_exact(channels).flat_map(|p| [p[0]; 3])),
        3 => out.extend_from_slice(raw),
        _ => out.extend(raw.chunks_exact(channels).flat_map(|p| [p[0], p[1], p[2]])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_signatures() {
        assert_eq!(
            ImageFormat::sniff(&[0xFF, 0xD8, 0xFF]),
            Some(ImageFormat::Jpeg)
        );
        assert_eq!(ImageFormat::sniff(&PNG_MAGIC), Some(ImageFormat::Png));
        assert_eq!(ImageFormat::sniff(b"GIF89a"), None);
        assert_eq!(ImageFormat::sniff(&[]), None);
    }

    #[test]
    fn empty_and_garbage_name_the_key() {
        for bytes in [&b""[..], b"hello", &[0xFF, 0xD8, 0xFF, 0xE0, 0x00]] {
            let err = decode("train/0001.jpg", bytes, DEFAULT_MAX_PIXELS).unwrap_err();
            assert_eq!(err.key(), Some("train/0001.jpg"));
            assert!(err.to_string().contains("train/0001.jpg"), "{err}");
        }
    }

    #[test]
    fn scaled_sizes_round_up_as_libjpeg() {
        assert_eq!(scaled(500, 8), 500);
        assert_eq!(scaled(375, 4), 188);
        assert_eq!(scaled(375, 1), 47);
        assert_eq!(scaled(1, 1), 1);
    }

    #[test]
    fn end_of_image_marker_is_found_near_the_end_only() {
        assert!(ends_with_eoi(&[0xFF, 0xD8, 1, 2, 0xFF, 0xD9]));
        assert!(ends_with_eoi(&[0xFF, 0xD9, 0, 0, 0]));
        assert!(!ends_with_eoi(&[0xFF, 0xD8, 1, 2, 3]));
        let mut far = vec![0xFF, 0xD9];
        far.extend([0u8; 100]);
        assert!(!ends_with_eoi(&far));
    }

    #[test]
    fn gray_and_alpha_expand_to_rgb() {
        let mut out = Vec::new();
        to_rgb(&[7, 9], 1, &mut out);
        to_rgb(&[5, 255], 2, &mut out);
        to_rgb(&[1, 2, 3, 4], 4, &mut out);
        assert_eq!(out, [7, 7, 7, 9, 9, 9, 5, 5, 5, 1, 2, 3]);
    }
}
