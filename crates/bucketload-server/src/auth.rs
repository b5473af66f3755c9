//! Request authentication beyond what the S3 request layer checks, as S3 answers it: an
//! unknown access key is 403 `InvalidAccessKeyId`; presigned URLs may live at most 7 days
//! (400 `AuthorizationQueryParametersError`) and an expired one is 403 `AccessDenied`;
//! Signature Version 2, which S3 refuses for buckets made since 2020, is refused unless the
//! server allows it (`--allow-sigv2`).

use s3s::auth::{S3Auth, SecretKey, SimpleAuth};
use s3s::{S3Result, s3_error};

/// S3's longest presigned URL lifetime (seconds).
pub(crate) const MAX_PRESIGNED_EXPIRES: u64 = 7 * 24 * 3600;

/// The one key pair of the server.
pub(crate) struct SingleKey(SimpleAuth);

impl SingleKey {
    pub(crate) fn new(access_key: String, secret_key: String) -> Self {
        Self(SimpleAuth::from_single(access_key, secret_key))
    }
}

#[async_trait::async_trait]
impl S3Auth for SingleKey {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        self.0.get_secret_key(access_key).await.map_err(|_| {
            s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )
        })
    }
}

/// Why a request is refused before its signature is checked: `(status, code, message)`.
pub(crate) fn refuse(
    query: &str,
    headers: &http::HeaderMap,
    allow_sigv2: bool,
    now: std::time::SystemTime,
) -> Option<(u16, &'static str, String)> {
    let param = |name: &str| {
        query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name).then_some(v)
        })
    };
    let sigv2 = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("AWS "))
        || (param("AWSAccessKeyId").is_some() && param("Signature").is_some());
    if sigv2 && !allow_sigv2 {
        return Some((
            400,
            "InvalidRequest",
            "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256. (bucketload serve --allow-sigv2 accepts Signature Version 2.)".into(),
        ));
    }
    param("X-Amz-Algorithm")?;
    let expires = param("X-Amz-Expires")?;
    let Ok(expires) = expires.parse::<u64>() else {
        return Some((
            400,
            "AuthorizationQueryParametersError",
            format!("X-Amz-Expires should be a number, not {expires:?}"),
        ));
    };
    if expires > MAX_PRESIGNED_EXPIRES {
        return Some((
            400,
            "AuthorizationQueryParametersError",
            format!(
                "X-Amz-Expires must be less than a week (in seconds) that is {MAX_PRESIGNED_EXPIRES}"
            ),
        ));
    }
    let signed = amz_date(param("X-Amz-Date")?)?;
    let age = now.duration_since(signed).ok()?;
    (age.as_secs() > expires).then(|| (403, "AccessDenied", "Request has expired".to_owned()))
}

/// SigV4 dates a request by `X-Amz-Date`, or by `Date` when that is absent (a client that sets
/// `Date` signs it instead). The request layer reads only `X-Amz-Date`, so a header-signed
/// request dated by `Date` alone gets an `X-Amz-Date` holding the same instant; it is not among
/// the signed headers, so the signature is unchanged.
pub(crate) fn date_as_amz_date(headers: &mut http::HeaderMap) {
    let sigv4 = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("AWS4-HMAC-SHA256"));
    if !sigv4 || headers.contains_key("x-amz-date") {
        return;
    }
    let Some(amz) = headers
        .get(http::header::DATE)
        .and_then(|v| v.to_str().ok())
        .and_then(http_date_as_amz_date)
    else {
        return;
    };
    if let Ok(value) = http::HeaderValue::from_str(&amz) {
        headers.insert("x-amz-date", value);
    }
}

/// An HTTP date (`Thu, 26 Nov 2026 19:00:00 GMT`, RFC 7231's IMF-fixdate) as `YYYYMMDDTHHMMSSZ`.
fn http_date_as_amz_date(text: &str) -> Option<String> {
    let mut words = text.split_ascii_whitespace();
    let _weekday = words.next()?.strip_suffix(',')?;
    let day: u32 = words.next()?.parse().ok()?;
    let month = match words.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: u32 = words.next()?.parse().ok()?;
    let mut clock = words.next()?.split(':').map(|n| n.parse::<u32>().ok());
    let (hour, minute, second) = (clock.next()??, clock.next()??, clock.next()??);
    if !matches!(words.next()?, "GMT" | "UTC" | "+0000" | "-0000") || words.next().is_some() {
        return None;
    }
    let amz = format!("{year:04}{month:02}{day:02}T{hour:02}{minute:02}{second:02}Z");
    amz_date(&amz).map(|_| amz)
}

/// `YYYYMMDDTHHMMSSZ` as a time; `None` when malformed (the signature check reports it).
fn amz_date(text: &str) -> Option<std::time::SystemTime> {
    let b = text.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<u64>().ok();
    let (year, month, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hour, minute, second) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    // Days since 1970-01-01 (civil-from-days inverse, proleptic Gregorian).
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn amz_dates() {
        let t = amz_date("20130524T000000Z").unwrap();
        assert_eq!(
            t.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            1_369_353_600
        );
        let t = amz_date("20000301T010203Z").unwrap();
        assert_eq!(t.duration_since(UNIX_EPOCH).unwrap().as_secs(), 951_872_523);
        assert!(amz_date("2013-05-24").is_none());
    }

    #[test]
    fn http_dates_become_amz_dates() {
        assert_eq!(
            http_date_as_amz_date("Thu, 26 Nov 2026 19:04:05 GMT").as_deref(),
            Some("20261126T190405Z")
        );
        assert!(http_date_as_amz_date("Thu, 26 Nov 2026 19:04:05 CET").is_none());
        assert!(http_date_as_amz_date("Thu, 32 Nov 2026 19:04:05 GMT").is_none());
        assert!(http_date_as_amz_date("").is_none());
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::DATE,
            "Thu, 26 Nov 2026 19:04:05 GMT".parse().unwrap(),
        );
        date_as_amz_date(&mut h);
        assert!(!h.contains_key("x-amz-date"), "unsigned: left alone");
        h.insert(
            http::header::AUTHORIZATION,
            "AWS4-HMAC-SHA256 Credential=k/20261126/us-east-1/s3/aws4_request"
                .parse()
                .unwrap(),
        );
        date_as_amz_date(&mut h);
        assert_eq!(h["x-amz-date"], "20261126T190405Z");
        h.insert("x-amz-date", "20261126T000000Z".parse().unwrap());
        date_as_amz_date(&mut h);
        assert_eq!(h["x-amz-date"], "20261126T000000Z", "X-Amz-Date wins");
    }

    #[test]
    fn presigned_limits_and_sigv2() {
        let h = http::HeaderMap::new();
        let now = UNIX_EPOCH + Duration::from_secs(1_369_353_600 + 100);
        let q = |exp: &str| {
            format!(
                "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20130524T000000Z&X-Amz-Expires={exp}"
            )
        };
        assert_eq!(refuse(&q("604801"), &h, false, now).unwrap().0, 400);
        assert_eq!(refuse(&q("50"), &h, false, now).unwrap().0, 403);
        assert!(refuse(&q("604800"), &h, false, now).is_none());
        let v2 = "AWSAccessKeyId=k&Expires=1&Signature=s";
        assert_eq!(refuse(v2, &h, false, now).unwrap().1, "InvalidRequest");
        assert!(refuse(v2, &h, true, now).is_none());
    }
}
