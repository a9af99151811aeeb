//! The manifest URL source (upstream `config/http.go`): every `httpCheckFrequency` the URL is fetched
//! (with `--manifest-url-header` headers); the body is one Pod or a v1 PodList, YAML or JSON. Pods get
//! the static-pod defaults of [`super::file::static_pod`] (UID hashed from the URL).
//!
//! Difference: only `http://` URLs (no TLS client here); an `https://` URL is reported at start.

use std::time::Duration;

use super::SourceSet;

/// Parses a manifest URL body into pods.
pub fn parse_body(
    body: &str,
    node_name: &str,
    url: &str,
) -> Result<Vec<k8s_openapi::api::core::v1::Pod>, String> {
    let value: serde_json::Value =
        serde_yaml_ng::from_str(body).map_err(|e| format!("{url}: not YAML or JSON: {e}"))?;
    match value["kind"].as_str() {
        Some("PodList") => value["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|item| {
                let mut item = item.clone();
                item["kind"] = "Pod".into();
                item["apiVersion"] = "v1".into();
                super::file::static_pod_from_value(item, node_name, url, false)
            })
            .collect(),
        _ => Ok(vec![super::file::static_pod_from_value(
            value, node_name, url, false,
        )?]),
    }
}

async fn fetch(url: &str, headers: &[(String, String)]) -> Result<String, String> {
    use http_body_util::BodyExt;
    let uri: hyper::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let host = uri
        .host()
        .ok_or_else(|| format!("{url}: no host"))?
        .to_string();
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("{url}: {e}"))?;
    tokio::spawn(conn);
    let mut req = hyper::Request::get(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header("host", format!("{host}:{port}"));
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| format!("{url}: {e}"))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{url}: {e}"))?
        .to_bytes();
    if !status.is_success() {
        return Err(format!("{url}: {status}"));
    }
    String::from_utf8(body.to_vec()).map_err(|_| format!("{url}: body is not UTF-8"))
}

pub async fn run(
    url: String,
    headers: Vec<(String, String)>,
    node_name: String,
    check_frequency: Duration,
    updates: tokio::sync::mpsc::Sender<SourceSet>,
) {
    if !url.starts_with("http://") {
        tracing::error!(%url, "manifest URL: only http:// URLs are supported; the source is off");
        let _ = updates.send(SourceSet(Vec::new())).await;
        return;
    }
    loop {
        // Upstream keeps the last good set when a fetch fails.
        match fetch(&url, &headers)
            .await
            .and_then(|b| parse_body(&b, &node_name, &url))
        {
            Ok(pods) => {
                if updates.send(SourceSet(pods)).await.is_err() {
                    return;
                }
            }
            Err(e) => tracing::warn!(error = %e, "manifest URL"),
        }
        tokio::time::sleep(check_frequency).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies() {
        let one = "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}";
        let pods = parse_body(one, "n", "http://x/").unwrap();
        assert_eq!(pods[0].metadata.name.as_deref(), Some("a-n"));
        assert!(pods[0].spec.as_ref().unwrap().node_name.is_none());
        let list = "kind: PodList\napiVersion: v1\nitems:\n- metadata: {name: a}\n  spec: {containers: [{name: c, image: i}]}\n- metadata: {name: b}\n  spec: {containers: [{name: c, image: i}]}\n";
        assert_eq!(parse_body(list, "n", "http://x/").unwrap().len(), 2);
        assert!(parse_body("kind: Service", "n", "u").is_err());
    }
}
