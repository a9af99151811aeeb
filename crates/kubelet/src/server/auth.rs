//! Who may use the kubelet's HTTPS server (upstream `pkg/kubelet/server/auth.go`, `server.go`'s
//! `InstallAuthFilter`, and `k8s.io/apiserver`'s delegating authenticator and authorizer).
//!
//! Authentication, first match wins: a client certificate from `--client-ca-file` (user = its CN,
//! groups = its Os); a bearer token reviewed by the API server (`TokenReview`, with
//! `--authentication-token-webhook`), its answer cached for `--authentication-token-webhook-cache-ttl`;
//! else `system:anonymous` in `system:unauthenticated` when `--anonymous-auth` allows, else 401. A
//! token the API server rejects is 401 even with anonymous access on (upstream's fail-on-error union).
//! Authenticated users get `system:authenticated`.
//!
//! Authorization (`--authorization-mode`): `AlwaysAllow`, or `Webhook`: a `SubjectAccessReview` per
//! request attribute set ([`request_attributes`]: verb from the HTTP method, resource `nodes`, name
//! the node, subresource by path), answers cached (allowed 5 min, denied 30 s by default); allowed
//! when any of the path's subresources is. 403 with upstream's message otherwise, 500 when the API
//! server cannot be asked.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::{HeaderMap, Method};
use serde_json::{json, Value};

/// `--authorization-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthorizationMode {
    AlwaysAllow,
    Webhook,
}

impl FromStr for AuthorizationMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
            "Webhook" => Ok(AuthorizationMode::Webhook),
            other => Err(format!(
                "unsupported authorization mode {other:?}: AlwaysAllow or Webhook"
            )),
        }
    }
}

/// The server's `authentication` and `authorization` settings (upstream `KubeletConfiguration`).
#[derive(Clone, Debug)]
pub struct AuthConfig {
    /// `authentication.anonymous.enabled` (`--anonymous-auth`).
    pub anonymous: bool,
    /// `authentication.webhook.enabled` (`--authentication-token-webhook`).
    pub token_webhook: bool,
    /// `authentication.webhook.cacheTTL`.
    pub token_webhook_cache_ttl: Duration,
    /// `authorization.mode`.
    pub mode: AuthorizationMode,
    /// `authorization.webhook.cacheAuthorizedTTL`.
    pub cache_authorized_ttl: Duration,
    /// `authorization.webhook.cacheUnauthorizedTTL`.
    pub cache_unauthorized_ttl: Duration,
}

impl Default for AuthConfig {
    /// Upstream's command-line defaults: anonymous on, no token webhook, AlwaysAllow.
    fn default() -> Self {
        AuthConfig {
            anonymous: true,
            token_webhook: false,
            token_webhook_cache_ttl: Duration::from_secs(120),
            mode: AuthorizationMode::AlwaysAllow,
            cache_authorized_ttl: Duration::from_secs(300),
            cache_unauthorized_ttl: Duration::from_secs(30),
        }
    }
}

impl AuthConfig {
    /// The settings of a kubelet as kubeadm and k3s run it: no anonymous access, tokens reviewed by
    /// the API server, every request authorized by it.
    pub fn webhook() -> Self {
        AuthConfig {
            anonymous: false,
            token_webhook: true,
            mode: AuthorizationMode::Webhook,
            ..AuthConfig::default()
        }
    }

    /// Refuses settings that need an API server when there is none (upstream fails at start too).
    pub fn check(&self, has_client: bool) -> Result<(), String> {
        if has_client {
            return Ok(());
        }
        if self.mode == AuthorizationMode::Webhook {
            return Err("no API server client: cannot use webhook authorization".into());
        }
        if self.token_webhook {
            return Err("no API server client: cannot use webhook authentication".into());
        }
        Ok(())
    }
}

/// An authenticated user (upstream `user.Info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

const ANONYMOUS: &str = "system:anonymous";
const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
const ALL_AUTHENTICATED: &str = "system:authenticated";

impl User {
    fn anonymous() -> User {
        User {
            name: ANONYMOUS.into(),
            groups: vec![ALL_UNAUTHENTICATED.into()],
            ..User::default()
        }
    }

    /// Upstream's `AuthenticatedGroupAdder`.
    fn with_authenticated_group(mut self) -> User {
        if !self
            .groups
            .iter()
            .any(|g| g == ALL_AUTHENTICATED || g == ALL_UNAUTHENTICATED)
        {
            self.groups.push(ALL_AUTHENTICATED.into());
        }
        self
    }

    /// The user of a verified client certificate (DER): CN and Os (upstream
    /// `CommonNameUserConversion`); `None` without a CN.
    pub fn from_certificate(der: &[u8]) -> Option<User> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let subject = cert.subject();
        let name = subject
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())?
            .to_string();
        if name.is_empty() {
            return None;
        }
        let groups = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_string))
            .collect();
        Some(User {
            name,
            groups,
            ..User::default()
        })
    }
}

/// What a request asks of the node, for the authorizer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    pub verb: &'static str,
    /// Subresources of `nodes/<node>` tried in order; any one allowing is enough.
    pub subresources: Vec<&'static str>,
}

/// Upstream `isSubpath`: `path` (trailing `/` dropped) or below it.
fn is_subpath(subpath: &str, path: &str) -> bool {
    let path = path.trim_end_matches('/');
    subpath == path
        || (subpath.starts_with(path) && subpath.as_bytes().get(path.len()) == Some(&b'/'))
}

/// Upstream `GetRequestAttributes` (KubeletFineGrainedAuthz on, its default since 1.33): verb from
/// the method; `/pods` and `/runningpods/` try `pods` then `proxy`, `/healthz`, `/configz` and
/// `/statusz` their own name then `proxy`; `/stats` is `stats`, `/metrics` `metrics`, `/logs/`
/// `log`, `/checkpoint` `checkpoint`; anything else (exec, attach, portForward, containerLogs, run,
/// ...) `proxy`.
pub fn request_attributes(method: &Method, path: &str) -> Attributes {
    let verb = match *method {
        Method::POST => "create",
        Method::GET => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    };
    let mut subresources = Vec::with_capacity(2);
    if is_subpath(path, "/pods") {
        subresources.push("pods");
    } else if is_subpath(path, "/healthz") {
        subresources.push("healthz");
    } else if is_subpath(path, "/configz") {
        subresources.push("configz");
    } else if is_subpath(path, "/statusz") {
        subresources.push("statusz");
    } else if is_subpath(path, "/runningpods/") {
        subresources.push("pods");
    }
    subresources.push(if is_subpath(path, "/stats/") {
        "stats"
    } else if is_subpath(path, "/metrics") {
        "metrics"
    } else if is_subpath(path, "/logs/") {
        "log"
    } else if is_subpath(path, "/checkpoint") {
        "checkpoint"
    } else {
        "proxy"
    });
    Attributes { verb, subresources }
}

/// Why a request is refused: the status and upstream's text.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal(pub u16, pub String);

impl Refusal {
    fn unauthorized() -> Refusal {
        Refusal(401, "Unauthorized".into())
    }
}

/// Answers kept for a while, bounded in number.
struct TtlCache<V> {
    entries: HashMap<String, (Instant, V)>,
}

const CACHE_MAX: usize = 10_000;

impl<V: Clone> TtlCache<V> {
    fn new() -> Self {
        TtlCache {
            entries: HashMap::new(),
        }
    }

    fn get(&self, key: &str, now: Instant) -> Option<V> {
        self.entries
            .get(key)
            .filter(|(until, _)| *until > now)
            .map(|(_, v)| v.clone())
    }

    fn put(&mut self, key: String, value: V, ttl: Duration, now: Instant) {
        if ttl.is_zero() {
            return;
        }
        if self.entries.len() >= CACHE_MAX {
            self.entries.retain(|_, (until, _)| *until > now);
            if self.entries.len() >= CACHE_MAX {
                self.entries.clear();
            }
        }
        self.entries.insert(key, (now + ttl, value));
    }
}

/// How long the API server is given to answer a review (upstream's webhook timeouts).
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// The server's authenticator and authorizer.
pub struct Auth {
    config: AuthConfig,
    node_name: String,
    client: Option<kube::Client>,
    /// Token -> the user, or `None` when the API server said the token is nobody.
    tokens: Mutex<TtlCache<Option<User>>>,
    /// The review's spec (JSON) -> allowed.
    decisions: Mutex<TtlCache<bool>>,
}

impl Auth {
    pub fn new(config: AuthConfig, node_name: &str, client: Option<kube::Client>) -> Auth {
        Auth {
            config,
            node_name: node_name.to_string(),
            client,
            tokens: Mutex::new(TtlCache::new()),
            decisions: Mutex::new(TtlCache::new()),
        }
    }

    /// Authenticates and authorizes a request: its user, or why it is refused. `cert_user` is the
    /// user of the connection's verified client certificate.
    pub async fn check(
        &self,
        cert_user: Option<&User>,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
    ) -> Result<User, Refusal> {
        let user = self.authenticate(cert_user, headers).await?;
        let attrs = request_attributes(method, path);
        self.authorize(&user, &attrs).await?;
        Ok(user)
    }

    async fn authenticate(
        &self,
        cert_user: Option<&User>,
        headers: &HeaderMap,
    ) -> Result<User, Refusal> {
        if let Some(user) = cert_user {
            return Ok(user.clone().with_authenticated_group());
        }
        if self.config.token_webhook {
            if let Some(token) = bearer_token(headers) {
                let Some(token) = token else {
                    return Err(Refusal::unauthorized());
                };
                return match self.review_token(token).await {
                    Ok(Some(user)) => Ok(user.with_authenticated_group()),
                    Ok(None) => Err(Refusal::unauthorized()),
                    Err(e) => {
                        tracing::warn!(error = %e, "kubelet server: cannot review a bearer token");
                        Err(Refusal::unauthorized())
                    }
                };
            }
        }
        if self.config.anonymous {
            return Ok(User::anonymous());
        }
        Err(Refusal::unauthorized())
    }

    async fn review_token(&self, token: &str) -> Result<Option<User>, String> {
        if let Some(hit) = lock(&self.tokens).get(token, Instant::now()) {
            return Ok(hit);
        }
        let client = self.client.as_ref().ok_or("no API server client")?;
        let review = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        });
        let answer = post(
            client,
            "/apis/authentication.k8s.io/v1/tokenreviews",
            &review,
        )
        .await?;
        let status = &answer["status"];
        let user = if status["authenticated"].as_bool() == Some(true) {
            let u = &status["user"];
            let strings = |v: &Value| -> Vec<String> {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            };
            Some(User {
                name: u["username"].as_str().unwrap_or("").to_string(),
                uid: u["uid"].as_str().unwrap_or("").to_string(),
                groups: strings(&u["groups"]),
                extra: u["extra"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), strings(v)))
                    .collect(),
            })
        } else {
            None
        };
        // Both answers are kept for the cache TTL (upstream's delegating authenticator).
        lock(&self.tokens).put(
            token.to_string(),
            user.clone(),
            self.config.token_webhook_cache_ttl,
            Instant::now(),
        );
        Ok(user)
    }

    async fn authorize(&self, user: &User, attrs: &Attributes) -> Result<(), Refusal> {
        if self.config.mode == AuthorizationMode::AlwaysAllow {
            return Ok(());
        }
        for subresource in &attrs.subresources {
            match self.review_access(user, attrs.verb, subresource).await {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(error = %e, user = %user.name, verb = attrs.verb, subresource, "kubelet server: authorization error");
                    return Err(Refusal(
                        500,
                        format!(
                            "Authorization error (user={}, verb={}, resource=nodes, subresource={subresource})",
                            user.name, attrs.verb
                        ),
                    ));
                }
            }
        }
        tracing::debug!(user = %user.name, verb = attrs.verb, subresources = ?attrs.subresources, "kubelet server: forbidden");
        Err(Refusal(403, forbidden_message(user, attrs)))
    }

    /// A SubjectAccessReview for `nodes/<subresource>` of this node, cached.
    async fn review_access(
        &self,
        user: &User,
        verb: &str,
        subresource: &str,
    ) -> Result<bool, String> {
        let mut spec = json!({
            "user": user.name,
            "groups": user.groups,
            "resourceAttributes": {
                "namespace": "",
                "verb": verb,
                "group": "",
                "version": "v1",
                "resource": "nodes",
                "subresource": subresource,
                "name": self.node_name,
            },
        });
        if !user.uid.is_empty() {
            spec["uid"] = user.uid.clone().into();
        }
        if !user.extra.is_empty() {
            spec["extra"] = json!(user.extra);
        }
        let key = spec.to_string();
        if let Some(allowed) = lock(&self.decisions).get(&key, Instant::now()) {
            return Ok(allowed);
        }
        let client = self.client.as_ref().ok_or("no API server client")?;
        let review = json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        });
        let answer = post(
            client,
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            &review,
        )
        .await?;
        let allowed = answer["status"]["allowed"].as_bool() == Some(true);
        let ttl = if allowed {
            self.config.cache_authorized_ttl
        } else {
            self.config.cache_unauthorized_ttl
        };
        lock(&self.decisions).put(key, allowed, ttl, Instant::now());
        Ok(allowed)
    }
}

/// Upstream's 403 text: `Forbidden (user=U, verb=V, resource=nodes, subresource(s)=[a b])`.
pub fn forbidden_message(user: &User, attrs: &Attributes) -> String {
    format!(
        "Forbidden (user={}, verb={}, resource=nodes, subresource(s)=[{}])\n",
        user.name,
        attrs.verb,
        attrs.subresources.join(" ")
    )
}

/// The bearer token of `Authorization: Bearer <token>`: `None` when there is no such header (or
/// another scheme), `Some(None)` when the token is empty (upstream's invalid bearer token).
fn bearer_token(headers: &HeaderMap) -> Option<Option<&str>> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let value = value.trim();
    let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    Some((!token.is_empty()).then_some(token))
}

async fn post(client: &kube::Client, path: &str, body: &Value) -> Result<Value, String> {
    let request = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(body).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(REVIEW_TIMEOUT, client.request::<Value>(request)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("POST {path}: {e}")),
        Err(_) => Err(format!("POST {path}: timed out")),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: Method, path: &str) -> (&'static str, Vec<&'static str>) {
        let a = request_attributes(&method, path);
        (a.verb, a.subresources)
    }

    #[test]
    fn attributes_follow_upstreams_table() {
        assert_eq!(attrs(Method::GET, "/pods"), ("get", vec!["pods", "proxy"]));
        assert_eq!(attrs(Method::GET, "/pods/"), ("get", vec!["pods", "proxy"]));
        assert_eq!(
            attrs(Method::GET, "/runningpods/"),
            ("get", vec!["pods", "proxy"])
        );
        assert_eq!(
            attrs(Method::GET, "/healthz"),
            ("get", vec!["healthz", "proxy"])
        );
        assert_eq!(
            attrs(Method::GET, "/healthz/ping"),
            ("get", vec!["healthz", "proxy"])
        );
        assert_eq!(
            attrs(Method::GET, "/configz"),
            ("get", vec!["configz", "proxy"])
        );
        assert_eq!(
            attrs(Method::GET, "/statusz"),
            ("get", vec!["statusz", "proxy"])
        );
        assert_eq!(attrs(Method::GET, "/stats"), ("get", vec!["stats"]));
        assert_eq!(attrs(Method::GET, "/stats/summary"), ("get", vec!["stats"]));
        assert_eq!(attrs(Method::GET, "/metrics"), ("get", vec!["metrics"]));
        assert_eq!(
            attrs(Method::GET, "/metrics/cadvisor"),
            ("get", vec!["metrics"])
        );
        assert_eq!(attrs(Method::GET, "/logs/"), ("get", vec!["log"]));
        assert_eq!(attrs(Method::GET, "/logs/syslog"), ("get", vec!["log"]));
        assert_eq!(
            attrs(Method::POST, "/checkpoint/default/p/c"),
            ("create", vec!["checkpoint"])
        );
        for path in [
            "/exec/default/p/c",
            "/attach/default/p/c",
            "/portForward/default/p",
            "/containerLogs/default/p/c",
            "/run/default/p/c",
            "/spec/",
            "/",
            "/podsx",
            "/statsx",
        ] {
            assert_eq!(
                attrs(Method::POST, path),
                ("create", vec!["proxy"]),
                "{path}"
            );
        }
        assert_eq!(attrs(Method::PUT, "/x").0, "update");
        assert_eq!(attrs(Method::PATCH, "/x").0, "patch");
        assert_eq!(attrs(Method::DELETE, "/x").0, "delete");
        assert_eq!(attrs(Method::HEAD, "/x").0, "");
    }

    #[test]
    fn forbidden_text_is_upstreams() {
        let user = User {
            name: "alice".into(),
            ..User::default()
        };
        assert_eq!(
            forbidden_message(&user, &request_attributes(&Method::GET, "/pods")),
            "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
        );
    }

    #[test]
    fn bearer_tokens() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        h.insert(http::header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert_eq!(bearer_token(&h), Some(Some("abc")));
        h.insert(http::header::AUTHORIZATION, "bearer  abc ".parse().unwrap());
        assert_eq!(bearer_token(&h), Some(Some("abc")));
        h.insert(http::header::AUTHORIZATION, "Bearer ".parse().unwrap());
        assert_eq!(bearer_token(&h), Some(None));
        h.insert(http::header::AUTHORIZATION, "Basic eDp5".parse().unwrap());
        assert_eq!(bearer_token(&h), None);
    }

    #[tokio::test]
    async fn authentication_without_an_api_server() {
        let headers = HeaderMap::new();
        let cert = User {
            name: "kube-apiserver-kubelet-client".into(),
            groups: vec!["system:masters".into()],
            ..User::default()
        };
        // Upstream's defaults: anonymous, AlwaysAllow.
        let open = Auth::new(AuthConfig::default(), "n1", None);
        let user = open
            .check(None, &Method::GET, "/pods", &headers)
            .await
            .unwrap();
        assert_eq!(user, User::anonymous());
        let user = open
            .check(Some(&cert), &Method::GET, "/pods", &headers)
            .await
            .unwrap();
        assert_eq!(
            user.groups,
            ["system:masters", "system:authenticated"],
            "certificate users are authenticated"
        );
        // No anonymous access: no credential is 401.
        let closed = Auth::new(
            AuthConfig {
                anonymous: false,
                ..AuthConfig::default()
            },
            "n1",
            None,
        );
        assert_eq!(
            closed.check(None, &Method::GET, "/pods", &headers).await,
            Err(Refusal::unauthorized())
        );
        // Webhook authorization needs an API server.
        assert!(AuthConfig::webhook().check(false).is_err());
        assert!(AuthConfig::webhook().check(true).is_ok());
        assert!(AuthConfig::default().check(false).is_ok());
    }

    #[test]
    fn caches_expire() {
        let mut c = TtlCache::new();
        let now = Instant::now();
        c.put("a".into(), true, Duration::from_secs(30), now);
        assert_eq!(c.get("a", now), Some(true));
        assert_eq!(c.get("a", now + Duration::from_secs(31)), None);
        c.put("b".into(), true, Duration::ZERO, now);
        assert_eq!(c.get("b", now), None);
    }

    #[test]
    fn modes_parse() {
        assert_eq!(
            "Webhook".parse::<AuthorizationMode>(),
            Ok(AuthorizationMode::Webhook)
        );
        assert_eq!(
            "AlwaysAllow".parse::<AuthorizationMode>(),
            Ok(AuthorizationMode::AlwaysAllow)
        );
        assert!("RBAC".parse::<AuthorizationMode>().is_err());
    }
}
