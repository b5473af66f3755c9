//! The binding to libjpeg-turbo's region decoder (`csrc/jpeg_region.c`), and one of the three
//! places this crate uses `unsafe` (with `simd.rs` and `hugepages.rs`): calls into C with
//! buffers whose lengths are passed along. libjpeg's fatal errors longjmp inside the C file
//! and come back as a status and a message, so no unwinding or jump ever crosses a Rust
//! frame.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uchar, c_uint};

const OK: c_int = 0;
const UNSUPPORTED: c_int = 2;
/// Room for libjpeg's longest message (`JMSG_LENGTH_MAX` is 200).
const MESSAGE_LEN: usize = 256;

#[repr(C)]
#[derive(Debug, Default)]
struct RawHeader {
    width: c_uint,
    height: c_uint,
    components: c_uint,
}

#[repr(C)]
#[derive(Debug)]
struct RawRequest {
    x: c_uint,
    y: c_uint,
    width: c_uint,
    height: c_uint,
    scale_num: c_uint,
}

#[repr(C)]
#[derive(Debug, Default)]
struct RawRegion {
    x: c_uint,
    y: c_uint,
    width: c_uint,
    height: c_uint,
    scaled_width: c_uint,
    scaled_height: c_uint,
}

unsafe extern "C" {
    fn bl_jpeg_header(
        data: *const c_uchar,
        len: usize,
        header: *mut RawHeader,
        message: *mut c_char,
        message_len: usize,
    ) -> c_int;

    fn bl_jpeg_decode(
        data: *const c_uchar,
        len: usize,
        request: *const RawRequest,
        out: *mut c_uchar,
        out_len: usize,
        region: *mut RawRegion,
        message: *mut c_char,
        message_len: usize,
    ) -> c_int;
}

/// What a JPEG header declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub width: u32,
    pub height: u32,
    /// CMYK and YCCK, which this decoder does not convert to RGB.
    pub cmyk: bool,
}

/// A region of an image at a DCT scale, in the coordinates of the scaled image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Region {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

/// What [`decode`] produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// `region` (widened to iMCU columns) of the image scaled to `scaled`, as RGB rows of
    /// `region.width * 3` bytes.
    Region { region: Region, scaled: (u32, u32) },
    /// CMYK or YCCK: not decoded.
    Unsupported,
}

fn message(raw: &[c_char]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Reads the header of the JPEG `data`.
pub(crate) fn header(data: &[u8]) -> Result<Header, String> {
    let mut raw = RawHeader::default();
    let mut text = [0 as c_char; MESSAGE_LEN];
    // SAFETY: `data` is valid for `data.len()` bytes and only read; `raw` and `text` are valid
    // for writes of their own sizes, which are the sizes passed; the C side keeps no pointer
    // after returning.
    let status = unsafe {
        bl_jpeg_header(
            data.as_ptr(),
            data.len(),
            &mut raw,
            text.as_mut_ptr(),
            text.len(),
        )
    };
    if status != OK {
        return Err(message(&text));
    }
    Ok(Header {
        width: raw.width,
        height: raw.height,
        cmyk: raw.components == 4,
    })
}

/// Decodes `want` (in the coordinates of the image scaled by `scale_num / 8`, whose width is
/// `scaled_width`) of the JPEG `data` into the start of `out`, grown when too short: rows of
/// `region.width * 3` bytes. `out` is never shrunk, so a thread's buffer is reused.
pub(crate) fn decode(
    data: &[u8],
    want: Region,
    scale_num: u32,
    scaled_width: u32,
    out: &mut Vec<u8>,
) -> Result<Decoded, String> {
    // The region is widened to iMCU boundaries, at most the scaled image's width.
    let len = scaled_width as usize * 3 * want.height as usize;
    if out.len() < len {
        out.resize(len, 0);
    }
    let request = RawRequest {
        x: want.x,
        y: want.y,
        width: want.width,
        height: want.height,
        scale_num,
    };
    let mut region = RawRegion::default();
    let mut text = [0 as c_char; MESSAGE_LEN];
    // SAFETY: `data` is valid for reads of `data.len()` bytes; `out` for writes of `out.len()`
    // bytes, the length passed (the C side checks every row it writes against it); `request`,
    // `region` and `text` are valid for their own sizes; nothing is kept after the call.
    let status = unsafe {
        bl_jpeg_decode(
            data.as_ptr(),
            data.len(),
            &request,
            out.as_mut_ptr(),
            out.len(),
            &mut region,
            text.as_mut_ptr(),
            text.len(),
        )
    };
    match status {
        OK => Ok(Decoded::Region {
            region: Region {
                x: region.x,
                y: region.y,
                width: region.width,
                height: region.height,
            },
            scaled: (region.scaled_width, region.scaled_height),
        }),
        UNSUPPORTED => Ok(Decoded::Unsupported),
        _ => Err(message(&text)),
    }
}
