//! Checksums of uploaded bodies: a PUT or an UploadPart that declares `x-amz-checksum-crc32`,
//! `-crc32c`, `-crc64nvme`, `-sha1` or `-sha256` is hashed as it arrives and refused with
//! 400 BadDigest when the body does not match, before anything is stored — as S3 does.

use s3s::checksum::ChecksumHasher;
use s3s::crypto::{Crc32, Crc32c, Crc64Nvme, Sha1, Sha256};
use s3s::dto::Checksum;
use s3s::{S3Result, s3_error};

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
}
