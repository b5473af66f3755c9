//! Reads image dimensions from a JPEG header without decoding the image.
//!
//! Pure and synchronous: bytes in, [`JpegInfo`] out. The parser walks the marker segments from
//! SOI to the first start-of-frame (SOF0–SOF15 except DHT/JPG/DAC), so the first few KiB of a file
//! are enough for any ordinary JPEG (EXIF thumbnails can push the SOF further; 64 KiB covers them).

/// What the frame header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct JpegInfo {
    /// Width in pixels.
    pub width: u16,
    /// Height in pixels.
    pub height: u16,
    /// Number of colour components (1 grey, 3 YCbCr/RGB, 4 CMYK).
    pub components: u8,
    /// True for a progressive JPEG (SOF2/SOF6/SOF10/SOF14).
    pub progressive: bool,
}

/// Why a header could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// The data does not start with the SOI marker.
    #[error("not a JPEG file (no start-of-image marker)")]
    NotJpeg,
    /// The data ended before a frame header.
    #[error("no frame header in the first {0} bytes")]
    Truncated(usize),
    /// A segment is malformed.
    #[error("malformed marker segment at byte {0}")]
    Malformed(usize),
}

const SOI: u8 = 0xD8;
const EOI: u8 = 0xD9;
const SOS: u8 = 0xDA;

/// Reads the dimensions from the start of a JPEG file.
pub fn parse_header(data: &[u8]) -> Result<JpegInfo, HeaderError> {
    if data.len() < 2 || data[0] != 0xFF || data[1] != SOI {
        return Err(HeaderError::NotJpeg);
    }
    let mut pos = 2;
    loop {
        let marker = next_marker(data, &mut pos)?;
        match marker {
            // Standalone markers carry no length.
            0x01 | 0xD0..=0xD7 => continue,
            EOI | SOS => return Err(HeaderError::Malformed(pos)),
            m if is_sof(m) => return read_frame(data, pos, m),
            _ => pos = skip_segment(data, pos)?,
        }
    }
}

/// Finds the next marker from `pos`, skipping fill bytes, and leaves `pos` after it.
fn next_marker(data: &[u8], pos: &mut usize) -> Result<u8, HeaderError> {
    if *pos >= data.len() {
        return Err(HeaderError::Truncated(data.len()));
    }
    if data[*pos] != 0xFF {
        return Err(HeaderError::Malformed(*pos));
    }
    while *pos < data.len() && data[*pos] == 0xFF {
        *pos += 1;
    }
    let marker = *data.get(*pos).ok_or(HeaderError::Truncated(data.len()))?;
    *pos += 1;
    Ok(marker)
}

/// SOF0..SOF15 without DHT (C4), JPG (C8) and DAC (CC).
fn is_sof(marker: u8) -> bool {
    matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC)
}

fn segment_len(data: &[u8], pos: usize) -> Result<usize, HeaderError> {
    let bytes = data
        .get(pos..pos + 2)
        .ok_or(HeaderError::Truncated(data.len()))?;
    let len = usize::from(u16::from_be_bytes([bytes[0], bytes[1]]));
    if len < 2 {
        return Err(HeaderError::Malformed(pos));
    }
    Ok(len)
}

fn skip_segment(data: &[u8], pos: usize) -> Result<usize, HeaderError> {
    Ok(pos + segment_len(data, pos)?)
}

/// Frame header: length(2) precision(1) height(2) width(2) components(1).
fn read_frame(data: &[u8], pos: usize, marker: u8) -> Result<JpegInfo, HeaderError> {
    if segment_len(data, pos)? < 8 {
        return Err(HeaderError::Malformed(pos));
    }
    let f = data
        .get(pos..pos + 8)
        .ok_or(HeaderError::Truncated(data.len()))?;
    let height = u16::from_be_bytes([f[3], f[4]]);
    let width = u16::from_be_bytes([f[5], f[6]]);
    if width == 0 {
        return Err(HeaderError::Malformed(pos));
    }
    Ok(JpegInfo {
        width,
        height,
        components: f[7],
        progressive: matches!(marker, 0xC2 | 0xC6 | 0xCA | 0xCE),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(width: u16, height: u16) -> Vec<u8> {
        let pixels = vec![128u8; usize::from(width) * usize::from(height) * 3];
        let mut out = Vec::new();
        let encoder = jpeg_encoder::Encoder::new(&mut out, 80);
        encoder
            .encode(&pixels, width, height, jpeg_encoder::ColorType::Rgb)
            .unwrap();
        out
    }

    #[test]
    fn reads_dimensions_of_an_encoded_image() {
        let info = parse_header(&encode(37, 21)).unwrap();
        assert_eq!(
            (info.width, info.height, info.components, info.progressive),
            (37, 21, 3, false)
        );
    }

    #[test]
    fn reads_a_progressive_frame_after_app_segments() {
        // SOI, APP0 (len 4), fill byte, SOF2 with 1 component of 640x480.
        let data = [
            0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0xAA, 0xBB, 0xFF, 0xFF, 0xC2, 0x00, 0x0B, 0x08,
            0x01, 0xE0, 0x02, 0x80, 0x01, 0x01, 0x11, 0x00,
        ];
        let info = parse_header(&data).unwrap();
        assert_eq!(
            (info.width, info.height, info.components, info.progressive),
            (640, 480, 1, true)
        );
    }

    #[test]
    fn rejects_non_jpeg_and_truncated_data() {
        assert_eq!(parse_header(b"\x89PNG\r\n"), Err(HeaderError::NotJpeg));
        assert_eq!(parse_header(&[]), Err(HeaderError::NotJpeg));
        let full = encode(16, 16);
        assert!(matches!(
            parse_header(&full[..20]),
            Err(HeaderError::Truncated(_))
        ));
        assert!(matches!(
            parse_header(&[0xFF, 0xD8, 0xFF, 0xE0, 0x00]),
            Err(HeaderError::Truncated(_))
        ));
    }

    #[test]
    fn rejects_malformed_segments() {
        assert!(matches!(
            parse_header(&[0xFF, 0xD8, 0x00, 0x00]),
            Err(HeaderError::Malformed(2))
        ));
        assert!(matches!(
            parse_header(&[0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x01]),
            Err(HeaderError::Malformed(4))
        ));
        assert!(matches!(
            parse_header(&[0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x08]),
            Err(HeaderError::Malformed(_))
        ));
    }
}
