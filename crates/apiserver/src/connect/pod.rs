//! Pod logs, exec, attach and port-forward (upstream `pkg/registry/core/pod/rest` `LogREST`,
//! `ExecREST`, `AttachREST`, `PortForwardREST` and the `*Location` functions of
//! `pkg/registry/core/pod/strategy.go`): the options are read from the query as upstream's parameter
//! codec does, checked, and turned into the kubelet URL of the pod's node.

use std::sync::Arc;

use apimachinery::status::{ApiError, Qualified};
use apimachinery::validation::field::{FieldError, FieldPath};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Incoming;
use serde_json::Value;

use super::{upgrade, PodSub};
use crate::request::{encode_query, query_pairs};
use crate::response::{self, Body};
use crate::ApiServer;

/// Query parameters, repeated keys kept.
struct Params(Vec<(String, String)>);

impl Params {
    fn parse(raw: Option<&str>) -> Params {
        Params(query_pairs(raw))
    }

    fn first(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn all(&self, key: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Upstream's query conversion for booleans: absent is false, "0" and "false" are false, any
    /// other value (even empty) is true.
    fn flag(&self, key: &str) -> bool {
        match self.first(key) {
            None => false,
            Some(v) => !(v == "0" || v.eq_ignore_ascii_case("false")),
        }
    }

    /// An optional integer; an empty value is unset.
    fn int(&self, key: &str) -> Result<Option<i64>, ApiError> {
        match self.first(key) {
            None | Some("") => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                ApiError::bad_request(format!(
                    "strconv.ParseInt: parsing {v:?}: invalid syntax (query parameter {key})"
                ))
            }),
        }
    }
}

/// `PodLogOptions`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub container: String,
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub since_seconds: Option<i64>,
    /// RFC 3339, normalised to UTC seconds.
    pub since_time: Option<String>,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
    pub insecure_skip_tls_verify_backend: bool,
}

fn parse_log_options(q: &Params) -> Result<LogOptions, ApiError> {
    let since_time = match q.first("sinceTime") {
        None | Some("") => None,
        Some(v) => {
            let t = chrono::DateTime::parse_from_rfc3339(v).map_err(|e| {
                ApiError::bad_request(format!(
                    "parsing time {v:?} as \"2006-01-02T15:04:05Z07:00\": {e}"
                ))
            })?;
            Some(
                t.with_timezone(&chrono::Utc)
                    .format("%Y-%m-%dT%H:%M:%SZ")
                    .to_string(),
            )
        }
    };
    Ok(LogOptions {
        container: q.first("container").unwrap_or("").to_string(),
        follow: q.flag("follow"),
        previous: q.flag("previous"),
        timestamps: q.flag("timestamps"),
        since_seconds: q.int("sinceSeconds")?,
        since_time,
        tail_lines: q.int("tailLines")?,
        limit_bytes: q.int("limitBytes")?,
        insecure_skip_tls_verify_backend: q.flag("insecureSkipTLSVerifyBackend"),
    })
}

/// Upstream `ValidatePodLogOptions`.
fn validate_log_options(opts: &LogOptions) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(t) = opts.tail_lines.filter(|t| *t < 0) {
        errs.push(FieldError::invalid(
            &FieldPath::root("tailLines"),
            t,
            "must be greater than or equal to 0",
        ));
    }
    if let Some(l) = opts.limit_bytes.filter(|l| *l < 1) {
        errs.push(FieldError::invalid(
            &FieldPath::root("limitBytes"),
            l,
            "must be greater than 0",
        ));
    }
    match (opts.since_seconds, &opts.since_time) {
        (Some(_), Some(_)) => errs.push(FieldError::forbidden(
            &FieldPath::root(""),
            "at most one of `sinceTime` or `sinceSeconds` may be specified",
        )),
        (Some(s), None) if s < 1 => errs.push(FieldError::invalid(
            &FieldPath::root("sinceSeconds"),
            s,
            "must be greater than 0",
        )),
        _ => {}
    }
    errs
}

/// The kubelet query for logs (upstream `LogLocation`, keys sorted as `url.Values.Encode`).
fn log_query(opts: &LogOptions) -> String {
    let mut p: Vec<(&str, String)> = Vec::new();
    if opts.follow {
        p.push(("follow", "true".into()));
    }
    if opts.previous {
        p.push(("previous", "true".into()));
    }
    if opts.timestamps {
        p.push(("timestamps", "true".into()));
    }
    if let Some(s) = opts.since_seconds {
        p.push(("sinceSeconds", s.to_string()));
    }
    if let Some(t) = &opts.since_time {
        p.push(("sinceTime", t.clone()));
    }
    if let Some(t) = opts.tail_lines {
        p.push(("tailLines", t.to_string()));
    }
    if let Some(l) = opts.limit_bytes {
        p.push(("limitBytes", l.to_string()));
    }
    encode_query(&p)
}

/// Container names in upstream's `VisitContainers` order: init, regular, ephemeral.
fn container_names(pod: &Value) -> Vec<String> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|field| {
            pod.pointer(&format!("/spec/{field}"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// The container a request is about (upstream `validateContainer`): the only one when none is named.
pub fn validate_container(pod: &Value, container: &str) -> Result<String, ApiError> {
    let name = crate::objects::name(pod);
    if container.is_empty() {
        let regular = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        return match regular {
            [one] => Ok(one
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()),
            [] => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}"
            ))),
            _ => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                container_names(pod).join(" ")
            ))),
        };
    }
    if container_names(pod).iter().any(|c| c == container) {
        Ok(container.to_string())
    } else {
        Err(ApiError::bad_request(format!(
            "container {container} is not valid for pod {name}"
        )))
    }
}

fn node_name(pod: &Value) -> &str {
    pod.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Upstream's `GenericHttpResponseChecker` reads at most this much of an error body.
const MAX_ERROR_BODY: usize = 50_000;

/// `GET pods/<name>/log`: the kubelet's log stream of one container.
pub async fn log(
    api: &Arc<ApiServer>,
    namespace: &str,
    name: &str,
    raw_query: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let opts = parse_log_options(&Params::parse(raw_query))?;
    let errs = validate_log_options(&opts);
    if !errs.is_empty() {
        return Err(ApiError::invalid(
            &Qualified::new("", "PodLogOptions"),
            name,
            &errs,
        ));
    }
    let pod = super::get_object(api, "pods", Some(namespace), name).await?;
    let container = validate_container(&pod, &opts.container)?;
    let node = node_name(&pod);
    if node.is_empty() {
        // No node, no logs: upstream streams nothing and answers 204.
        let mut resp = Response::new(response::full(Bytes::new()));
        *resp.status_mut() = StatusCode::NO_CONTENT;
        return Ok(resp);
    }
    let info = api.kubelet.connection_info(api, node).await?;
    let backend = api
        .kubelet
        .backend(&info, opts.insecure_skip_tls_verify_backend);
    let query = log_query(&opts);
    let mut path = format!("/containerLogs/{namespace}/{name}/{container}");
    if !query.is_empty() {
        path = format!("{path}?{query}");
    }
    let req = Request::get(path.as_str())
        .body(Empty::<Bytes>::new())
        .map_err(ApiError::internal)?;
    let resp = backend.send(req).await.map_err(|e| {
        let cause = match e {
            httpstream::proxy::ProxyError::Dial(m) | httpstream::proxy::ProxyError::Request(m) => m,
        };
        super::unknown_error(format!("Get {:?}: {cause}", backend.url(&path)))
    })?;
    let status = resp.status().as_u16();
    if !(200..=206).contains(&status) {
        let body = Limited::new(resp.into_body(), MAX_ERROR_BODY)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&body).into_owned();
        return Err(match status {
            500 => ApiError::internal(text),
            400 => ApiError::bad_request(text),
            code => super::generic_server_response(code, "pods/log", name, &text),
        });
    }
    let mut out = Response::new(httpstream::proxy::stream_body(resp.into_body()));
    out.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    Ok(out)
}

/// `PodExecOptions` / `PodAttachOptions`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct StreamOptions {
    container: String,
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

impl StreamOptions {
    fn parse(q: &Params) -> StreamOptions {
        StreamOptions {
            container: q.first("container").unwrap_or("").to_string(),
            command: q.all("command"),
            stdin: q.flag("stdin"),
            stdout: q.flag("stdout"),
            stderr: q.flag("stderr"),
            tty: q.flag("tty"),
        }
    }

    /// The kubelet query (upstream `streamParams`): flags as "1", one `command` per argument.
    fn query(&self, with_command: bool) -> String {
        let mut p: Vec<(&str, String)> = Vec::new();
        for (key, on) in [
            ("stdin", self.stdin),
            ("stdout", self.stdout),
            ("stderr", self.stderr),
            ("tty", self.tty),
        ] {
            if on {
                p.push((key, "1".into()));
            }
        }
        if with_command {
            for c in &self.command {
                p.push(("command", c.clone()));
            }
        }
        encode_query(&p)
    }
}

/// Upstream `PodPortForwardOptions.Ports`.
fn parse_ports(q: &Params) -> Result<Vec<u16>, ApiError> {
    q.all("ports")
        .iter()
        .flat_map(|v| v.split(',').map(str::to_string).collect::<Vec<_>>())
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| {
                    ApiError::bad_request(format!("invalid port {v:?} in the ports parameter"))
                })
        })
        .collect()
}

/// `exec`, `attach` and `portforward`: a connection upgraded end to end to the pod's kubelet, with
/// `v5.channel.k8s.io` WebSockets translated to SPDY and port-forward WebSockets tunnelling SPDY.
pub async fn stream(
    api: &Arc<ApiServer>,
    namespace: &str,
    name: &str,
    sub: PodSub,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let params = Params::parse(req.uri().query());
    let pod = super::get_object(api, "pods", Some(namespace), name).await?;
    let (path, options) = match sub {
        PodSub::PortForward => {
            let ports = parse_ports(&params)?;
            let mut query: Vec<(&str, String)> = Vec::new();
            if !ports.is_empty() {
                let list: Vec<String> = ports.iter().map(u16::to_string).collect();
                query.push(("port", list.join(",")));
            }
            let mut path = format!("/portForward/{namespace}/{name}");
            if !query.is_empty() {
                path = format!("{path}?{}", encode_query(&query));
            }
            (path, None)
        }
        _ => {
            let opts = StreamOptions::parse(&params);
            let container = validate_container(&pod, &opts.container)?;
            let verb = if sub == PodSub::Exec {
                "exec"
            } else {
                "attach"
            };
            let query = opts.query(sub == PodSub::Exec);
            (
                format!("/{verb}/{namespace}/{name}/{container}?{query}"),
                Some(opts),
            )
        }
    };
    let node = node_name(&pod);
    if node.is_empty() {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let info = api.kubelet.connection_info(api, node).await?;
    let backend = api.kubelet.backend(&info, false);
    let headers = req.headers().clone();
    if let Some(opts) = &options {
        if httpstream::wsstream::is_stream_close_request(&headers) {
            let opts = httpstream::remotecommand::Options {
                stdin: opts.stdin,
                stdout: opts.stdout,
                stderr: opts.stderr,
                tty: opts.tty,
            };
            return Ok(upgrade::translate(backend, path, req, opts));
        }
    } else if upgrade::is_tunneling_request(&headers) {
        return Ok(upgrade::tunnel(backend, path, req).await);
    }
    if !httpstream::proxy::is_upgrade(&headers) {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    Ok(upgrade::pass_through(backend, path, req).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn log_options_from_the_query() {
        let opts = parse_log_options(&Params::parse(Some(
            "container=c&follow=true&previous=1&timestamps=false&tailLines=10&limitBytes=&sinceTime=2024-01-02T03:04:05%2B01:00",
        )))
        .unwrap();
        assert_eq!(
            opts,
            LogOptions {
                container: "c".into(),
                follow: true,
                previous: true,
                timestamps: false,
                tail_lines: Some(10),
                since_time: Some("2024-01-02T02:04:05Z".into()),
                ..Default::default()
            }
        );
        assert_eq!(
            log_query(&opts),
            "follow=true&previous=true&sinceTime=2024-01-02T02%3A04%3A05Z&tailLines=10"
        );
        assert!(parse_log_options(&Params::parse(Some("tailLines=abc"))).is_err());
        assert!(parse_log_options(&Params::parse(Some("sinceTime=yesterday"))).is_err());
    }

    #[test]
    fn log_option_validation() {
        let cases: Vec<(LogOptions, Vec<&str>)> = vec![
            (LogOptions::default(), vec![]),
            (
                LogOptions {
                    tail_lines: Some(-1),
                    ..Default::default()
                },
                vec!["tailLines"],
            ),
            (
                LogOptions {
                    limit_bytes: Some(0),
                    since_seconds: Some(0),
                    ..Default::default()
                },
                vec!["limitBytes", "sinceSeconds"],
            ),
            (
                LogOptions {
                    since_seconds: Some(5),
                    since_time: Some("2024-01-01T00:00:00Z".into()),
                    ..Default::default()
                },
                vec![""],
            ),
        ];
        for (opts, fields) in cases {
            let got: Vec<String> = validate_log_options(&opts)
                .iter()
                .map(|e| e.field.to_string())
                .collect();
            assert_eq!(got, fields, "{opts:?}");
        }
    }

    #[test]
    fn containers_are_chosen_as_upstream() {
        let one = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app"}]}});
        let two = json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "init"}],
            "containers": [{"name": "a"}, {"name": "b"}],
        }});
        assert_eq!(validate_container(&one, "").unwrap(), "app");
        assert_eq!(validate_container(&two, "init").unwrap(), "init");
        assert_eq!(
            validate_container(&two, "").unwrap_err().message,
            "a container name must be specified for pod p, choose one of: [init a b]"
        );
        assert_eq!(
            validate_container(&one, "nope").unwrap_err().message,
            "container nope is not valid for pod p"
        );
        let none = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        assert_eq!(
            validate_container(&none, "").unwrap_err().message,
            "a container name must be specified for pod p"
        );
    }

    #[test]
    fn stream_queries_for_the_kubelet() {
        let opts = StreamOptions::parse(&Params::parse(Some(
            "command=sh&command=-c&command=echo+hi&container=c&stdin=true&stdout=true&tty=false",
        )));
        assert_eq!(
            opts.query(true),
            "command=sh&command=-c&command=echo+hi&stdin=1&stdout=1"
        );
        assert_eq!(opts.query(false), "stdin=1&stdout=1");
        assert_eq!(
            parse_ports(&Params::parse(Some("ports=80,443&ports=8080"))).unwrap(),
            [80, 443, 8080]
        );
        assert!(parse_ports(&Params::parse(Some("ports=http"))).is_err());
    }
}
