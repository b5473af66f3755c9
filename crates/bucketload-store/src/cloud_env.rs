//! How Google Cloud and Azure users configure their tools, read into object_store's builders:
//!
//! - Google Cloud: the `GOOGLE_*` variables object_store knows (`GOOGLE_APPLICATION_CREDENTIALS`
//!   with a service-account or authorized-user file, `GOOGLE_SERVICE_ACCOUNT_KEY`…), plus the
//!   Cloud SDKs' emulator variable `STORAGE_EMULATOR_HOST` (requests go there, unsigned).
//!   Plain HTTP is allowed for an `http://` emulator or with `GOOGLE_ALLOW_HTTP=true`.
//! - Azure: the `AZURE_*` variables object_store knows, plus `AZURE_STORAGE_CONNECTION_STRING`
//!   (the Azure SDKs' and Azurite's, including `UseDevelopmentStorage=true`), whose settings the
//!   explicit variables override. Plain HTTP is allowed for an `http://` endpoint, the emulator,
//!   or with `AZURE_ALLOW_HTTP=true`.
//!
//! Each store's own settings decide; another store's (an `http://` S3 endpoint) never do.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// `true`, `1`, `yes` or `on`, in any case.
pub(crate) fn truthy(value: Option<&String>) -> bool {
    value.is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "true" | "1" | "yes" | "on"
        )
    })
}

/// Google Cloud Storage settings beyond object_store's `GOOGLE_*` keys.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Gcs {
    /// Where requests go (an emulator), when not Google's service.
    pub(crate) base_url: Option<String>,
    /// Send requests without credentials (an emulator).
    pub(crate) unsigned: bool,
    pub(crate) allow_http: bool,
}

pub(crate) fn gcs(vars: &HashMap<String, String>) -> Gcs {
    let emulator = vars
        .get("STORAGE_EMULATOR_HOST")
        .map(|h| h.trim().trim_end_matches('/'))
        .filter(|h| !h.is_empty())
        .map(|h| match h.contains("://") {
            true => h.to_owned(),
            false => format!("http://{h}"),
        });
    let base_url = emulator.clone().or_else(|| {
        ["GOOGLE_BASE_URL"]
            .iter()
            .find_map(|k| vars.get(*k).filter(|v| !v.is_empty()).cloned())
    });
    Gcs {
        allow_http: truthy(vars.get("GOOGLE_ALLOW_HTTP"))
            || base_url
                .as_deref()
                .is_some_and(|u| u.starts_with("http://")),
        unsigned: emulator.is_some(),
        base_url,
    }
}

/// Whether any Google credential source is configured (variables or the gcloud
/// application-default file); without one, object_store would ask the metadata server.
pub(crate) fn gcs_has_credentials(vars: &HashMap<String, String>) -> bool {
    let set = |k: &str| vars.get(k).is_some_and(|v| !v.is_empty());
    let adc_file = vars.get("HOME").is_some_and(|home| {
        std::path::Path::new(home)
            .join(".config/gcloud/application_default_credentials.json")
            .is_file()
    });
    [
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_SERVICE_ACCOUNT",
        "GOOGLE_SERVICE_ACCOUNT_PATH",
        "GOOGLE_SERVICE_ACCOUNT_KEY",
        "GOOGLE_BEARER_TOKEN",
    ]
    .iter()
    .any(|k| set(k))
        || truthy(vars.get("GOOGLE_SKIP_SIGNATURE"))
        || adc_file
}

/// Whether the GCE metadata server answers within a moment (on a Google Cloud VM it does).
pub(crate) fn gce_metadata_reachable(vars: &HashMap<String, String>) -> bool {
    let host = vars
        .get("GCE_METADATA_HOST")
        .cloned()
        .unwrap_or_else(|| "169.254.169.254:80".to_owned());
    let host = match host.contains(':') {
        true => host,
        false => format!("{host}:80"),
    };
    let addrs: Vec<SocketAddr> = host
        .to_socket_addrs()
        .map(|a| a.collect())
        .unwrap_or_default();
    addrs
        .iter()
        .any(|a| TcpStream::connect_timeout(a, Duration::from_millis(500)).is_ok())
}

/// What to set when no Google credentials are found.
pub(crate) const GCS_NO_CREDENTIALS: &str = "no Google Cloud credentials were found: set \
GOOGLE_APPLICATION_CREDENTIALS to a service-account or authorized-user JSON file (or run `gcloud \
auth application-default login`), or GOOGLE_SERVICE_ACCOUNT_KEY; for an emulator set \
STORAGE_EMULATOR_HOST";

/// Azure settings as object_store configuration pairs (`azure_storage_account_name`...), from
/// `AZURE_STORAGE_CONNECTION_STRING`; the explicit `AZURE_*` variables are applied after them.
pub(crate) fn azure_connection_string(vars: &HashMap<String, String>) -> Vec<(String, String)> {
    let Some(text) = vars
        .get("AZURE_STORAGE_CONNECTION_STRING")
        .filter(|v| !v.is_empty())
    else {
        return Vec::new();
    };
    let fields: HashMap<String, String> = text
        .split(';')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut pairs = Vec::new();
    if truthy(fields.get("usedevelopmentstorage")) {
        pairs.push(("azure_storage_use_emulator".to_owned(), "true".to_owned()));
        return pairs;
    }
    let account = fields.get("accountname");
    if let Some(account) = account {
        pairs.push(("azure_storage_account_name".to_owned(), account.clone()));
    }
    if let Some(key) = fields.get("accountkey") {
        pairs.push(("azure_storage_account_key".to_owned(), key.clone()));
    }
    if let Some(sas) = fields.get("sharedaccesssignature") {
        pairs.push(("azure_storage_sas_key".to_owned(), sas.clone()));
    }
    let endpoint = fields.get("blobendpoint").cloned().or_else(|| {
        let protocol = fields
            .get("defaultendpointsprotocol")
            .map_or("https", String::as_str);
        let suffix = fields
            .get("endpointsuffix")
            .map_or("core.windows.net", String::as_str);
        account.map(|a| format!("{protocol}://{a}.blob.{suffix}"))
    });
    if let Some(endpoint) = endpoint {
        pairs.push((
            "azure_storage_endpoint".to_owned(),
            endpoint.trim_end_matches('/').to_owned(),
        ));
    }
    pairs
}

/// Whether an Azure store configured by `pairs` (connection string, then variables) may use
/// plain HTTP.
pub(crate) fn azure_allow_http(pairs: &[(String, String)]) -> bool {
    let last = |names: &[&str]| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| names.contains(&k.as_str()))
            .map(|(_, v)| v.clone())
    };
    truthy(last(&["azure_allow_http"]).as_ref())
        || truthy(last(&["azure_storage_use_emulator", "azure_use_emulator"]).as_ref())
        || last(&["azure_storage_endpoint", "azure_endpoint"])
            .is_some_and(|e| e.to_ascii_lowercase().starts_with("http://"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn storage_emulator_host_points_gcs_at_the_emulator() {
        let g = gcs(&vars(&[("STORAGE_EMULATOR_HOST", "localhost:4443")]));
        assert_eq!(g.base_url.as_deref(), Some("http://localhost:4443"));
        assert!(g.unsigned && g.allow_http);
        let g = gcs(&vars(&[("GOOGLE_ALLOW_HTTP", "TRUE")]));
        assert!(g.allow_http && !g.unsigned && g.base_url.is_none());
        // Another store's endpoint never allows HTTP here.
        assert!(!gcs(&vars(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")])).allow_http);
    }

    #[test]
    fn azure_connection_strings() {
        let dev = azure_connection_string(&vars(&[(
            "AZURE_STORAGE_CONNECTION_STRING",
            "UseDevelopmentStorage=true",
        )]));
        assert_eq!(
            dev,
            vec![("azure_storage_use_emulator".to_owned(), "true".to_owned())]
        );
        assert!(azure_allow_http(&dev));
        let full = azure_connection_string(&vars(&[(
            "AZURE_STORAGE_CONNECTION_STRING",
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;\
             BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;",
        )]));
        let get = |k: &str| full.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("azure_storage_account_name"), Some("devstoreaccount1"));
        assert_eq!(get("azure_storage_account_key"), Some("a2V5"));
        assert_eq!(
            get("azure_storage_endpoint"),
            Some("http://127.0.0.1:10000/devstoreaccount1")
        );
        assert!(azure_allow_http(&full));
        let cloud = azure_connection_string(&vars(&[(
            "AZURE_STORAGE_CONNECTION_STRING",
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net",
        )]));
        assert!(cloud.contains(&(
            "azure_storage_endpoint".to_owned(),
            "https://acct.blob.core.windows.net".to_owned()
        )));
        assert!(!azure_allow_http(&cloud));
        assert!(azure_allow_http(&[(
            "azure_allow_http".to_owned(),
            "true".to_owned()
        )]));
    }
}
