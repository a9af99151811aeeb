//! The lease endpoint reconciler (upstream `--endpoint-reconciler-type=lease`, its default): every API
//! server keeps a record of its advertised address under `/masterleases/<ip>` that lives `ttl`
//! unless renewed, and writes the `default/kubernetes` Endpoints and EndpointSlice so that they list
//! the address of every server whose record is alive, on its own port. A server that dies drops out
//! once its record expires; one that stops cleanly removes its record at once ([`Handle::leave`]).
//!
//! Upstream gives the records an etcd lease, which the SQLite store has no counterpart for: here a
//! record carries its expiry time, readers skip expired records and each reconciling server deletes
//! the expired ones it sees (only if unchanged since read), so both backends behave alike.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::{objects, ApiServer};

/// Where the records live (upstream's key, under the store's prefix).
const PREFIX: &str = "/masterleases/";
/// The annotation of a record holding its expiry (RFC 3339).
const EXPIRES: &str = "rkube.io/expires";
/// At most this many records are read: far more API servers than any cluster runs.
const MAX_RECORDS: usize = 1000;
const NAME: &str = "kubernetes";
const NAMESPACE: &str = "default";

#[derive(Clone, Debug)]
pub struct ReconcilerConfig {
    /// How often the record is renewed and the endpoints reconciled (upstream 10 s).
    pub interval: Duration,
    /// How long a record lives without renewal (upstream 15 s).
    pub ttl: Duration,
}

impl Default for ReconcilerConfig {
    fn default() -> ReconcilerConfig {
        ReconcilerConfig {
            interval: Duration::from_secs(10),
            ttl: Duration::from_secs(15),
        }
    }
}

/// The running reconciler of one server.
pub struct Handle {
    api: Arc<ApiServer>,
    ip: IpAddr,
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Handle {
    /// Stops reconciling, removes this server's record and writes the endpoints without it (upstream
    /// does this when it shuts down).
    pub async fn leave(self) {
        self.task.abort();
        let key = format!("{PREFIX}{}", self.ip);
        if let Err(e) = self.api.store.delete(&key, None).await {
            if !e.is_not_found() {
                tracing::warn!(error = %e, "cannot remove this server's endpoint record");
            }
        }
        if let Err(e) = reconcile_endpoints(&self.api, None, self.port).await {
            tracing::warn!(error = %e, "cannot remove this server from the kubernetes endpoints");
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts renewing this server's record (`ip`, `port`) and reconciling the endpoints.
pub fn start(api: Arc<ApiServer>, config: ReconcilerConfig, ip: IpAddr, port: u16) -> Handle {
    let task = {
        let api = api.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(config.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = reconcile_once(&api, &config, ip, port).await {
                    tracing::warn!(error = %e, "cannot reconcile the kubernetes endpoints");
                }
            }
        })
    };
    Handle {
        api,
        ip,
        port,
        task,
    }
}

async fn reconcile_once(
    api: &Arc<ApiServer>,
    config: &ReconcilerConfig,
    ip: IpAddr,
    port: u16,
) -> Result<(), String> {
    let expires =
        chrono::Utc::now() + chrono::Duration::from_std(config.ttl).map_err(|e| e.to_string())?;
    let record = record(ip, expires);
    let key = format!("{PREFIX}{ip}");
    let value = objects::encode_for_storage(&record);
    match api.store.update(&key, value.clone(), None).await {
        Ok(_) => {}
        Err(e) if e.is_not_found() => {
            api.store
                .create(&key, value)
                .await
                .map(|_| ())
                .or_else(|e| if e.is_conflict() { Ok(()) } else { Err(e) })
                .map_err(|e| e.to_string())?;
        }
        Err(e) => return Err(e.to_string()),
    }
    reconcile_endpoints(api, Some(ip), port).await
}

/// A record: upstream stores an Endpoints object named after the address.
fn record(ip: IpAddr, expires: chrono::DateTime<chrono::Utc>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {
            "name": ip.to_string(),
            "annotations": {EXPIRES: expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)},
        },
        "subsets": [{"addresses": [{"ip": ip.to_string()}]}],
    })
}

/// The address of a record still alive at `now`.
fn live_address(record: &Value, now: chrono::DateTime<chrono::Utc>) -> Option<IpAddr> {
    let expires = record
        .pointer(&format!(
            "/metadata/annotations/{}",
            EXPIRES.replace('/', "~1")
        ))
        .and_then(Value::as_str)
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())?;
    if expires < now {
        return None;
    }
    objects::name(record).parse().ok()
}

/// The addresses of the live servers (with `own`, which may not be written yet), sorted; expired
/// records are deleted on the way.
async fn live_addresses(api: &Arc<ApiServer>, own: Option<IpAddr>) -> Result<Vec<IpAddr>, String> {
    let page = api
        .store
        .list(storage::ListOptions {
            prefix: PREFIX,
            limit: Some(MAX_RECORDS),
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    let now = chrono::Utc::now();
    let mut ips = Vec::new();
    for kv in page.items {
        let record: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
        match live_address(&record, now) {
            Some(ip) if Some(ip) != own => ips.push(ip),
            Some(_) => {}
            None => {
                if let Err(e) = api.store.delete(&kv.key, Some(kv.mod_revision)).await {
                    if !e.is_not_found() && !e.is_conflict() {
                        tracing::warn!(key = %kv.key, error = %e, "cannot delete an expired endpoint record");
                    }
                }
            }
        }
    }
    ips.extend(own);
    ips.sort();
    ips.dedup();
    Ok(ips)
}

/// `subsets` of the Endpoints for `ips` on `port` (upstream's one subset, port named `https`).
fn endpoints_subsets(ips: &[IpAddr], port: u16) -> Value {
    if ips.is_empty() {
        return json!([]);
    }
    let addresses: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip.to_string()})).collect();
    json!([{"addresses": addresses, "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}])
}

/// The EndpointSlice's `addressType`, `endpoints` and `ports` for `ips` (of the first address's
/// family, as upstream's adapter writes one slice).
fn slice_fields(ips: &[IpAddr], port: u16) -> (Value, Value, Value) {
    let v6 = ips.first().is_some_and(IpAddr::is_ipv6);
    let endpoints: Vec<Value> = ips
        .iter()
        .filter(|ip| ip.is_ipv6() == v6)
        .map(|ip| json!({"addresses": [ip.to_string()], "conditions": {"ready": true}}))
        .collect();
    (
        json!(if v6 { "IPv6" } else { "IPv4" }),
        json!(endpoints),
        json!([{"name": "https", "port": port, "protocol": "TCP"}]),
    )
}

/// Writes `default/kubernetes` Endpoints and EndpointSlice for the live servers, `own` among them.
async fn reconcile_endpoints(
    api: &Arc<ApiServer>,
    own: Option<IpAddr>,
    port: u16,
) -> Result<(), String> {
    let ips = live_addresses(api, own).await?;
    let subsets = endpoints_subsets(&ips, port);
    let endpoints = json!({
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            // The mirroring controller must not make a second slice of these.
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"},
        },
        "subsets": subsets,
    });
    ensure(api, ("", "v1", "endpoints"), endpoints, |current| {
        let mut updated = current.clone();
        updated["subsets"] = subsets.clone();
        updated["metadata"]["labels"]["endpointslice.kubernetes.io/skip-mirror"] = json!("true");
        updated
    })
    .await?;
    let (address_type, endpoints, ports) = slice_fields(&ips, port);
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": NAME},
        },
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": ports,
    });
    ensure(
        api,
        ("discovery.k8s.io", "v1", "endpointslices"),
        slice,
        |current| {
            let mut updated = current.clone();
            // addressType cannot change: a slice of the other family is replaced by the next pass.
            updated["endpoints"] = endpoints.clone();
            updated["ports"] = ports.clone();
            updated["metadata"]["labels"]["kubernetes.io/service-name"] = json!(NAME);
            updated
        },
    )
    .await
}

/// Creates `wanted` (through the API's create path) or, if it exists and `update` changes it, writes
/// the change validated as an update, conditional on the revision read.
async fn ensure(
    api: &Arc<ApiServer>,
    gvr: (&str, &str, &str),
    wanted: Value,
    update: impl Fn(&Value) -> Value,
) -> Result<(), String> {
    let (group, version, plural) = gvr;
    let resource = api
        .registry
        .get(group, version, plural)
        .ok_or_else(|| format!("no resource {plural}.{group}/{version}"))?;
    let key = format!("/{}/{NAMESPACE}/{NAME}", resource.storage);
    let Some(kv) = api.store.get(&key).await.map_err(|e| e.to_string())? else {
        return match crate::rest::create_internal(api, gvr, Some(NAMESPACE), wanted).await {
            Ok(()) => Ok(()),
            Err(e) if e.code == 409 => Ok(()),
            Err(e) => Err(format!("cannot create {plural}/{NAME}: {e}")),
        };
    };
    let current: Value = serde_json::from_slice(&kv.value).map_err(|e| e.to_string())?;
    if group == "discovery.k8s.io" && current.get("addressType") != wanted.get("addressType") {
        // The family changed (a new first server): replace the slice.
        let _ = api.store.delete(&key, Some(kv.mod_revision)).await;
        return Ok(());
    }
    let updated = update(&current);
    if updated == current {
        return Ok(());
    }
    let kind = wanted["kind"].as_str().unwrap_or_default();
    let errors = apimachinery::validation::validate_update(group, kind, &updated, &current);
    if !errors.is_empty() {
        return Err(format!("{plural}/{NAME} would be invalid: {errors:?}"));
    }
    match api
        .store
        .update(
            &key,
            objects::encode_for_storage(&updated),
            Some(kv.mod_revision),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Another server wrote it in between: the next pass sees its version.
        Err(e) if e.is_conflict() || e.is_not_found() => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_live_until_they_expire() {
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let now = chrono::Utc::now();
        let r = record(ip, now + chrono::Duration::seconds(15));
        assert_eq!(live_address(&r, now), Some(ip));
        assert_eq!(live_address(&r, now + chrono::Duration::seconds(16)), None);
        assert_eq!(live_address(&json!({"metadata": {"name": "x"}}), now), None);
    }

    #[test]
    fn endpoints_list_every_address_on_one_port() {
        let ips: Vec<IpAddr> = vec!["192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap()];
        let subsets = endpoints_subsets(&ips, 6443);
        assert_eq!(subsets[0]["addresses"][1]["ip"], "192.0.2.2");
        assert_eq!(
            subsets[0]["ports"][0],
            json!({"name": "https", "port": 6443, "protocol": "TCP"})
        );
        assert_eq!(endpoints_subsets(&[], 6443), json!([]));
        let (kind, endpoints, _) = slice_fields(&ips, 6443);
        assert_eq!(kind, "IPv4");
        assert_eq!(endpoints.as_array().unwrap().len(), 2);
        assert_eq!(endpoints[0]["conditions"]["ready"], true);
    }
}
