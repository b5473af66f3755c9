//! Checksums of uploaded bodies: a PUT or an UploadPart that declares `x-amz-checksum-crc32`,
//! `-crc32c`, `-crc64nvme`, `-sha1` or `-sha256` is hashed as it arrives and refused with
//! 400 BadDigest when the body does not match, before anything is stored — as S3 does.
//!
//! The checksum is stored with the object and returned as S3 returns it (GET and HEAD with
//! `x-amz-checksum-mode: ENABLED`, GetObjectAttributes, CompleteMultipartUpload). An object
//! a multipart upload made carries the upload's algorithm: `COMPOSITE`, the checksum of the
//! parts' binary checksums followed by `-N`, or `FULL_OBJECT` (CRC algorithms only), the CRC
//! of the whole object, combined from the parts' CRCs without reading the bytes again.

use s3s::checksum::ChecksumHasher;
use s3s::crypto::{Crc32, Crc32c, Crc64Nvme, Sha1, Sha256};
use s3s::dto::Checksum;
use s3s::{S3Error, S3Result, s3_error};
use serde::{Deserialize, Serialize};

/// The checksums a request declared, in the order crc32, crc32c, crc64nvme, sha1, sha256 (the
/// fields of PutObject and UploadPart).
pub(crate) fn declared(sums: [Option<String>; 5]) -> Checksum {
    let [crc32, crc32c, crc64nvme, sha1, sha256] = sums;
    Checksum {
        checksum_crc32: crc32,
        checksum_crc32c: crc32c,
        checksum_crc64nvme: crc64nvme,
        checksum_sha1: sha1,
        checksum_sha256: sha256,
        ..Default::default()
    }
}

/// A hasher for every algorithm `declared` names; `None` when it names none.
pub(crate) fn hasher_for(declared: &Checksum) -> Option<ChecksumHasher> {
    let d = declared;
    let any = d.checksum_crc32.is_some()
        || d.checksum_crc32c.is_some()
        || d.checksum_crc64nvme.is_some()
        || d.checksum_sha1.is_some()
        || d.checksum_sha256.is_some();
    any.then(|| ChecksumHasher {
        crc32: d.checksum_crc32.as_ref().map(|_| Crc32::default()),
        crc32c: d.checksum_crc32c.as_ref().map(|_| Crc32c::default()),
        sha1: d.checksum_sha1.as_ref().map(|_| Sha1::default()),
        sha256: d.checksum_sha256.as_ref().map(|_| Sha256::default()),
        crc64nvme: d.checksum_crc64nvme.as_ref().map(|_| Crc64Nvme::default()),
    })
}

/// Refuses a body whose computed checksum differs from the declared one.
pub(crate) fn verify(declared: &Checksum, computed: &Checksum) -> S3Result<()> {
    let pairs = [
        ("crc32", &declared.checksum_crc32, &computed.checksum_crc32),
        (
            "crc32c",
            &declared.checksum_crc32c,
            &computed.checksum_crc32c,
        ),
        (
            "crc64nvme",
            &declared.checksum_crc64nvme,
            &computed.checksum_crc64nvme,
        ),
        ("sha1", &declared.checksum_sha1, &computed.checksum_sha1),
        (
            "sha256",
            &declared.checksum_sha256,
            &computed.checksum_sha256,
        ),
    ];
    for (name, want, got) in pairs {
        if let (Some(want), Some(got)) = (want, got)
            && want != got
        {
            return Err(s3_error!(
                BadDigest,
                "the body's {name} checksum is {got}, but x-amz-checksum-{name} says {want}: \
                 the body was corrupted on the way; send it again"
            ));
        }
    }
    Ok(())
}

/// S3's checksum algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Algorithm {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

impl Algorithm {
    pub(crate) const ALL: [Self; 5] = [
        Self::Crc32,
        Self::Crc32c,
        Self::Crc64Nvme,
        Self::Sha1,
        Self::Sha256,
    ];

    /// The algorithm S3 names `name` (`CRC32`, `crc64nvme`...).
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name))
    }

    /// S3's name: `CRC32`, `CRC32C`, `CRC64NVME`, `SHA1`, `SHA256`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Crc32 => "CRC32",
            Self::Crc32c => "CRC32C",
            Self::Crc64Nvme => "CRC64NVME",
            Self::Sha1 => "SHA1",
            Self::Sha256 => "SHA256",
        }
    }

    /// This algorithm's value in `sums`.
    pub(crate) fn value(self, sums: &Checksum) -> Option<&String> {
        match self {
            Self::Crc32 => sums.checksum_crc32.as_ref(),
            Self::Crc32c => sums.checksum_crc32c.as_ref(),
            Self::Crc64Nvme => sums.checksum_crc64nvme.as_ref(),
            Self::Sha1 => sums.checksum_sha1.as_ref(),
            Self::Sha256 => sums.checksum_sha256.as_ref(),
        }
    }

    /// A [`Checksum`] holding `value` under this algorithm.
    pub(crate) fn checksum(self, value: String) -> Checksum {
        let mut sums = Checksum::default();
        let slot = match self {
            Self::Crc32 => &mut sums.checksum_crc32,
            Self::Crc32c => &mut sums.checksum_crc32c,
            Self::Crc64Nvme => &mut sums.checksum_crc64nvme,
            Self::Sha1 => &mut sums.checksum_sha1,
            Self::Sha256 => &mut sums.checksum_sha256,
        };
        *slot = Some(value);
        sums
    }

    /// `(width, reflected polynomial)` of a CRC algorithm; `None` for the SHAs.
    fn crc(self) -> Option<(u32, u64)> {
        match self {
            Self::Crc32 => Some((32, 0xEDB8_8320)),
            Self::Crc32c => Some((32, 0x82F6_3B78)),
            Self::Crc64Nvme => Some((64, 0x9A6C_9329_AC4B_C9B5)),
            Self::Sha1 | Self::Sha256 => None,
        }
    }

    /// This algorithm's base64 checksum of `data`.
    pub(crate) fn of(self, data: &[u8]) -> String {
        let mut hasher = hasher_for(&self.checksum(String::new())).unwrap_or_default();
        hasher.update(data);
        let sums = hasher.finalize();
        self.value(&sums).cloned().unwrap_or_default()
    }
}

/// `FULL_OBJECT` or `COMPOSITE`, as S3 names the two kinds of object checksum.
pub(crate) const FULL_OBJECT: &str = "FULL_OBJECT";
pub(crate) const COMPOSITE: &str = "COMPOSITE";

/// An object's checksum, stored in its sidecar.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Stored {
    /// S3's name of the algorithm (`CRC64NVME`...).
    pub(crate) algorithm: String,
    /// The base64 value; a composite one ends in `-N`.
    pub(crate) value: String,
    /// [`FULL_OBJECT`] or [`COMPOSITE`].
    pub(crate) kind: String,
    /// The parts' checksums (base64), for an object a multipart upload made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) parts: Vec<String>,
}

impl Stored {
    /// The checksum of a body written whole, from the checksums computed of it (the first of
    /// those the request declared; S3 takes one).
    pub(crate) fn of_body(computed: &Checksum) -> Option<Self> {
        Algorithm::ALL.into_iter().find_map(|a| {
            a.value(computed).map(|v| Self {
                algorithm: a.name().to_owned(),
                value: v.clone(),
                kind: FULL_OBJECT.to_owned(),
                parts: Vec::new(),
            })
        })
    }

    pub(crate) fn algorithm(&self) -> Option<Algorithm> {
        Algorithm::from_name(&self.algorithm)
    }

    /// The whole object's checksum, as a [`Checksum`].
    pub(crate) fn whole(&self) -> Checksum {
        self.algorithm()
            .map(|a| a.checksum(self.value.clone()))
            .unwrap_or_default()
    }

    /// Part `number`'s checksum (1-based), as a [`Checksum`].
    pub(crate) fn part(&self, number: usize) -> Checksum {
        match (
            self.algorithm(),
            number.checked_sub(1).and_then(|i| self.parts.get(i)),
        ) {
            (Some(a), Some(v)) => a.checksum(v.clone()),
            _ => Checksum::default(),
        }
    }
}

/// The checksum type a multipart upload declared, or S3's default for the algorithm
/// (`FULL_OBJECT` for CRC64NVME, `COMPOSITE` otherwise); a full-object SHA or a composite
/// CRC64NVME is refused, as S3 refuses them.
pub(crate) fn upload_kind(algorithm: Algorithm, declared: Option<&str>) -> S3Result<String> {
    let kind = declared.unwrap_or(if algorithm == Algorithm::Crc64Nvme {
        FULL_OBJECT
    } else {
        COMPOSITE
    });
    let ok = match kind {
        FULL_OBJECT => algorithm.crc().is_some(),
        COMPOSITE => algorithm != Algorithm::Crc64Nvme,
        _ => false,
    };
    if !ok {
        return Err(s3_error!(
            InvalidRequest,
            "The {} checksum type cannot be used with the {} checksum algorithm",
            kind,
            algorithm.name()
        ));
    }
    Ok(kind.to_owned())
}

/// The checksum of an object made of parts with these checksums (base64) and sizes.
pub(crate) fn of_parts(
    algorithm: Algorithm,
    kind: &str,
    parts: &[(&str, u64)],
) -> Result<String, S3Error> {
    let decode = |v: &str| {
        base64_decode(v).ok_or_else(|| s3_error!(InternalError, "corrupt part checksum {v:?}"))
    };
    if kind == FULL_OBJECT {
        let Some((width, poly)) = algorithm.crc() else {
            return Err(s3_error!(InternalError, "full-object checksum of a SHA"));
        };
        let mut crc = 0u64;
        for (i, (value, size)) in parts.iter().enumerate() {
            let part = decode(value)?
                .iter()
                .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
            crc = if i == 0 {
                part
            } else {
                crc_combine(crc, part, *size, poly, width)
            };
        }
        let bytes = crc.to_be_bytes();
        return Ok(base64_encode(&bytes[8 - (width as usize / 8)..]));
    }
    let mut joined = Vec::new();
    for (value, _) in parts {
        joined.extend(decode(value)?);
    }
    Ok(format!("{}-{}", algorithm.of(&joined), parts.len()))
}

/// The CRC of A‖B from crc(A), crc(B) and B's length, for a reflected CRC of `width` bits
/// with polynomial `poly` (reflected), initial value and final xor all ones — CRC-32,
/// CRC-32C and CRC-64/NVME (zlib's `crc32_combine`, generalised).
fn crc_combine(crc1: u64, crc2: u64, len2: u64, poly: u64, width: u32) -> u64 {
    fn times(mat: &[u64; 64], mut vec: u64) -> u64 {
        let mut sum = 0;
        let mut i = 0;
        while vec != 0 {
            if vec & 1 == 1 {
                sum ^= mat[i];
            }
            vec >>= 1;
            i += 1;
        }
        sum
    }
    fn square(square: &mut [u64; 64], mat: &[u64; 64], width: usize) {
        for n in 0..width {
            square[n] = times(mat, mat[n]);
        }
    }
    if len2 == 0 {
        return crc1;
    }
    let w = width as usize;
    let mut even = [0u64; 64];
    let mut odd = [0u64; 64];
    // The operator for one zero bit.
    odd[0] = poly;
    let mut row = 1u64;
    for slot in odd.iter_mut().take(w).skip(1) {
        *slot = row;
        row <<= 1;
    }
    square(&mut even, &odd, w); // two zero bits
    square(&mut odd, &even, w); // four zero bits
    let (mut crc1, mut len2) = (crc1, len2);
    loop {
        // Apply zero bytes: the first square makes the operator for one byte.
        square(&mut even, &odd, w);
        if len2 & 1 == 1 {
            crc1 = times(&even, crc1);
        }
        len2 >>= 1;
        if len2 == 0 {
            break;
        }
        square(&mut odd, &even, w);
        if len2 & 1 == 1 {
            crc1 = times(&odd, crc1);
        }
        len2 >>= 1;
        if len2 == 0 {
            break;
        }
    }
    crc1 ^ crc2
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Standard base64 with padding; `None` when malformed.
pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    for (c, chunk) in text.chunks(4).enumerate() {
        let last = c + 1 == text.len() / 4;
        let mut n = 0u32;
        let mut pad = 0;
        for (i, &ch) in chunk.iter().enumerate() {
            let v = if ch == b'=' && last && i >= 2 {
                pad += 1;
                0
            } else if pad > 0 {
                return None;
            } else {
                BASE64.iter().position(|&b| b == ch)? as u32
            };
            n |= v << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn declared_crc64(value: &str) -> Checksum {
        Checksum {
            checksum_crc64nvme: Some(value.to_owned()),
            ..Default::default()
        }
    }

    #[test]
    fn a_matching_body_passes_and_a_flipped_one_is_refused() {
        let mut h = hasher_for(&declared_crc64("x")).unwrap();
        h.update(b"checkpoint bytes");
        let good = h.finalize();
        let want = good.checksum_crc64nvme.clone().unwrap();
        assert!(verify(&declared_crc64(&want), &good).is_ok());
        let mut h = hasher_for(&declared_crc64(&want)).unwrap();
        h.update(b"checkpoint bytez");
        let err = verify(&declared_crc64(&want), &h.finalize()).unwrap_err();
        assert_eq!(err.code().as_str(), "BadDigest");
        assert!(hasher_for(&Checksum::default()).is_none());
    }

    #[test]
    fn base64_round_trips() {
        for data in [&b""[..], b"f", b"fo", b"foo", b"foob", b"fooba", b"foobar"] {
            assert_eq!(base64_decode(&base64_encode(data)).unwrap(), data);
        }
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert!(base64_decode("bad").is_none());
        assert!(base64_decode("Zm=v").is_none());
    }

    #[test]
    fn crcs_combine_as_if_computed_over_the_whole() {
        let a: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        let b: Vec<u8> = (0..3001u32).map(|i| (i * 13 % 241) as u8).collect();
        let c = b"tail".to_vec();
        let whole = [a.clone(), b.clone(), c.clone()].concat();
        for algorithm in [Algorithm::Crc32, Algorithm::Crc32c, Algorithm::Crc64Nvme] {
            let parts = [algorithm.of(&a), algorithm.of(&b), algorithm.of(&c)];
            let sized = [
                (parts[0].as_str(), a.len() as u64),
                (parts[1].as_str(), b.len() as u64),
                (parts[2].as_str(), c.len() as u64),
            ];
            assert_eq!(
                of_parts(algorithm, FULL_OBJECT, &sized).unwrap(),
                algorithm.of(&whole),
                "{algorithm:?}"
            );
        }
    }

    #[test]
    fn composite_checksums_are_of_the_part_checksums() {
        // From S3's documentation's example and the s3-tests suite: one 1024-byte part of 'A'.
        let part = Algorithm::Sha256.of(&[b'A'; 1024]);
        assert_eq!(part, "arcu6553sHVAiX4MjW0j7I7vD4w6R+Gz9Ok0Q9lTa+0=");
        assert_eq!(
            of_parts(Algorithm::Sha256, COMPOSITE, &[(part.as_str(), 1024)]).unwrap(),
            "Ok6Cs5b96ux6+MWQkJO7UBT5sKPBeXBLwvj/hK89smg=-1"
        );
        assert!(upload_kind(Algorithm::Sha256, Some(FULL_OBJECT)).is_err());
        assert!(upload_kind(Algorithm::Crc64Nvme, Some(COMPOSITE)).is_err());
        assert_eq!(
            upload_kind(Algorithm::Crc64Nvme, None).unwrap(),
            FULL_OBJECT
        );
        assert_eq!(upload_kind(Algorithm::Crc32, None).unwrap(), COMPOSITE);
    }
}
