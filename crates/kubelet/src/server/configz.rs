//! `GET /configz` (upstream `component-base/configz`): `{"kubeletconfig": {...}}`, the
//! KubeletConfiguration in its `kubelet.config.k8s.io/v1beta1` JSON names. Upstream converts its
//! internal configuration without type metadata, so there is no `kind`/`apiVersion`; only the
//! fields this kubelet has (or fixes, like `cgroupDriver`) are listed, durations in Go's
//! `time.Duration` format (`1m0s`), as `metav1.Duration` marshals them.

use std::time::Duration;

use serde_json::{json, Map, Value};

use super::auth::AuthorizationMode;
use crate::config::KubeletConfig;

/// Go's `time.Duration.String()` for the whole-millisecond durations the configuration holds.
pub fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000_000_000 {
        // Go switches to ms/µs/ns below a second.
        let (unit, div) = if nanos >= 1_000_000 {
            ("ms", 1_000_000u128)
        } else if nanos >= 1_000 {
            ("µs", 1_000)
        } else {
            ("ns", 1)
        };
        return format!("{}{unit}", fraction(nanos, div));
    }
    let secs = d.as_secs();
    let (h, m) = (secs / 3600, (secs % 3600) / 60);
    let s = fraction(nanos % 60_000_000_000, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, m) => format!("{m}m{s}s"),
        (h, m) => format!("{h}h{m}m{s}s"),
    }
}

/// `n / div` with the fraction's trailing zeros cut, as Go prints it.
fn fraction(n: u128, div: u128) -> String {
    let (whole, rest) = (n / div, n % div);
    if rest == 0 {
        return whole.to_string();
    }
    let width = div.to_string().len() - 1;
    let frac = format!("{rest:0width$}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

/// The `kubeletconfig` object of `/configz`.
pub fn kubelet_configuration(c: &KubeletConfig) -> Value {
    let d = |d: Duration| json!(go_duration(d));
    let auth = &c.server.auth;
    let mut v = json!({
        "enableServer": true,
        "podLogsDir": c.pod_logs_dir.display().to_string(),
        "syncFrequency": d(c.sync_frequency),
        "fileCheckFrequency": d(c.file_check_frequency),
        "httpCheckFrequency": d(c.http_check_frequency),
        "address": c.server.address.to_string(),
        "port": c.port,
        "authentication": {
            "x509": {},
            "webhook": {
                "enabled": auth.token_webhook,
                "cacheTTL": d(auth.token_webhook_cache_ttl),
            },
            "anonymous": {"enabled": auth.anonymous},
        },
        "authorization": {
            "mode": match auth.mode {
                AuthorizationMode::AlwaysAllow => "AlwaysAllow",
                AuthorizationMode::Webhook => "Webhook",
            },
            "webhook": {
                "cacheAuthorizedTTL": d(auth.cache_authorized_ttl),
                "cacheUnauthorizedTTL": d(auth.cache_unauthorized_ttl),
            },
        },
        "clusterDomain": c.cluster_domain,
        "nodeStatusUpdateFrequency": d(c.node_status_update_frequency),
        "nodeStatusReportFrequency": d(c.node_status_report_frequency),
        "nodeLeaseDurationSeconds": c.node_lease_duration_seconds,
        // The image GC threshold is fixed here (85 %, see `Kubelet::image_gc`).
        "imageGCHighThresholdPercent": 85,
        "imageMinimumGCAge": "2m0s",
        "cgroupRoot": c.cgroup_root,
        "cgroupDriver": "cgroupfs",
        "maxPods": c.max_pods,
        "containerRuntimeEndpoint": c.runtime_endpoint,
        "seccompDefault": c.seccomp_default,
    });
    let m: &mut Map<String, Value> = v.as_object_mut().expect("an object");
    if let Some(p) = &c.pod_manifest_path {
        m.insert("staticPodPath".into(), json!(p.display().to_string()));
    }
    if let Some(url) = &c.manifest_url {
        m.insert("staticPodURL".into(), json!(url));
        if !c.manifest_url_headers.is_empty() {
            let mut headers: Map<String, Value> = Map::new();
            for (k, val) in &c.manifest_url_headers {
                let e = headers.entry(k.clone()).or_insert_with(|| json!([]));
                if let Some(a) = e.as_array_mut() {
                    a.push(json!(val));
                }
            }
            m.insert("staticPodURLHeader".into(), Value::Object(headers));
        }
    }
    if let Some(ca) = &c.server.client_ca_file {
        v["authentication"]["x509"]["clientCAFile"] = json!(ca.display().to_string());
    }
    if let Some(f) = &c.server.tls_cert_file {
        v["tlsCertFile"] = json!(f.display().to_string());
    }
    if let Some(f) = &c.server.tls_private_key_file {
        v["tlsPrivateKeyFile"] = json!(f.display().to_string());
    }
    if !c.cluster_dns.is_empty() {
        v["clusterDNS"] = json!(c.cluster_dns);
    }
    if !c.allowed_unsafe_sysctls.is_empty() {
        v["allowedUnsafeSysctls"] = json!(c.allowed_unsafe_sysctls);
    }
    v
}

/// The whole `/configz` body.
pub fn body(c: &KubeletConfig) -> Value {
    json!({ "kubeletconfig": kubelet_configuration(c) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_go_does() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(20), "20s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(300), "5m0s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(3725), "1h2m5s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(100), "100ms"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(7), "7ns"),
        ];
        for (d, want) in cases {
            assert_eq!(go_duration(d), want, "{d:?}");
        }
    }

    #[test]
    fn the_body_has_upstreams_shape_and_names() {
        let mut c = KubeletConfig::new("n", "10.0.0.1".parse().unwrap(), "unix:///run/c.sock");
        c.cluster_dns = vec!["10.43.0.10".into()];
        c.pod_manifest_path = Some("/etc/kubernetes/manifests".into());
        c.manifest_url = Some("http://h/m".into());
        c.manifest_url_headers = vec![("A".into(), "1".into()), ("A".into(), "2".into())];
        let b = body(&c);
        let k = &b["kubeletconfig"];
        assert!(b.get("kind").is_none() && k.get("kind").is_none());
        assert_eq!(k["syncFrequency"], "1m0s");
        assert_eq!(k["nodeStatusReportFrequency"], "5m0s");
        assert_eq!(k["maxPods"], 110);
        assert_eq!(k["clusterDomain"], "cluster.local");
        assert_eq!(k["clusterDNS"], json!(["10.43.0.10"]));
        assert_eq!(k["staticPodPath"], "/etc/kubernetes/manifests");
        assert_eq!(k["staticPodURLHeader"], json!({"A": ["1", "2"]}));
        assert_eq!(k["containerRuntimeEndpoint"], "unix:///run/c.sock");
        assert_eq!(k["authentication"]["anonymous"]["enabled"], true);
        assert_eq!(k["authorization"]["mode"], "AlwaysAllow");
        assert_eq!(k["port"], 10250);
        assert!(k.get("allowedUnsafeSysctls").is_none());
    }
}
