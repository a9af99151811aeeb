//! Admission webhooks end to end: the test serves a webhook itself (HTTPS, its own CA, see
//! `admission_webhooks/server.rs`), registers it with Mutating/ValidatingWebhookConfigurations by
//! `url` (and once by `service`) with `caBundle`, and checks through kubectl what upstream does:
//! a mutating webhook labels pods (JSONPatch) and an earlier `IfNeeded` webhook is called again;
//! a validating webhook denies a ConfigMap with upstream's message (also on a server dry run);
//! namespace and object selectors decide which requests reach a webhook; a webhook's warning
//! reaches kubectl's stderr, and a false `matchConditions` expression skips the webhook; with the webhook down (or too slow) `failurePolicy: Ignore` lets the
//! request through and `Fail` refuses it with upstream's message.

mod support;

#[path = "admission_webhooks/server.rs"]
mod server;

use std::time::{Duration, Instant};

use server::WebhookServer;
use support::{Backend, Cluster};

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A namespace with labels, once pods can be created in it.
fn namespace(c: &Cluster, name: &str, labels: &str) {
    c.kubectl_in(
        &["create", "-f", "-"],
        Some(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels: {{{labels}}}\n"
        )),
    );
    wait_for("the default ServiceAccount", || {
        c.kubectl_output(&["get", "serviceaccount", "default", "-n", name], None)
            .status
            .success()
    });
}

/// Creates a configuration and waits until the server's caches (which webhooks are read from)
/// have it: a consistent list is served once the caches reached the store's revision.
fn configure(c: &Cluster, manifest: &str) {
    c.kubectl_in(&["create", "-f", "-"], Some(manifest));
    c.kubectl(&[
        "get",
        "mutatingwebhookconfigurations,validatingwebhookconfigurations",
    ]);
}

fn webhook(name: &str, client_config: &str, extra: &str) -> String {
    format!(
        "- name: {name}
  clientConfig:
{client_config}
  admissionReviewVersions: [v1]
  sideEffects: None
{extra}"
    )
}

fn url_config(hook: &WebhookServer, path: &str) -> String {
    format!(
        "    url: {}\n    caBundle: {}",
        hook.url(path),
        hook.ca_bundle()
    )
}

fn configmap(name: &str, labels: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels: {{{labels}}}\ndata:\n  k: v\n")
}

fn pod(name: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: c\n    image: busybox\n")
}

fn create(c: &Cluster, ns: &str, manifest: &str) -> std::process::Output {
    c.kubectl_output(&["create", "-n", ns, "-f", "-"], Some(manifest))
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn admission_webhooks() {
    let hook = WebhookServer::start();
    let c = Cluster::start(Backend::Sqlite);
    namespace(&c, "hooked", "webhooks: \"on\"");
    namespace(&c, "plain", "");

    mutating_webhooks_label_pods_and_are_reinvoked(&c, &hook);
    validating_webhook_denies_with_upstreams_message(&c, &hook);
    warnings_reach_kubectl(&c, &hook);
    failure_policies_with_the_webhook_down(&c, &hook);
    service_references_resolve_to_endpoints(&c, &hook);
}

fn mutating_webhooks_label_pods_and_are_reinvoked(c: &Cluster, hook: &WebhookServer) {
    let rules = "  rules:\n  - {operations: [CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [pods]}\n  namespaceSelector: {matchLabels: {webhooks: \"on\"}}\n";
    let hooks = [
        webhook(
            "annotate.example.com",
            &url_config(hook, "/annotate-pods"),
            &format!("{rules}  reinvocationPolicy: IfNeeded\n"),
        ),
        webhook("label.example.com", &url_config(hook, "/label-pods"), rules),
    ];
    configure(
        c,
        &format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: pod-labeler\nwebhooks:\n{}",
            hooks.concat()
        ),
    );

    let out = create(c, "hooked", &pod("labelled"));
    assert!(out.status.success(), "{}", stderr(&out));
    let labels = c.kubectl(&[
        "get",
        "pod",
        "labelled",
        "-n",
        "hooked",
        "-o",
        "jsonpath={.metadata.labels}",
    ]);
    assert!(
        labels.contains(r#""webhook.example.com/mutated":"true""#),
        "{labels}"
    );
    // The label webhook changed the pod after the annotating one ran, so that one (IfNeeded) was
    // called again and saw the label.
    assert_eq!(hook.count("/annotate-pods"), 2);
    assert_eq!(hook.count("/label-pods"), 1);
    let annotations = c.kubectl(&[
        "get",
        "pod",
        "labelled",
        "-n",
        "hooked",
        "-o",
        "jsonpath={.metadata.annotations}",
    ]);
    assert!(
        annotations.contains(r#""webhook.example.com/labelled":"true""#),
        "{annotations}"
    );

    // What the webhook was sent.
    let review = hook.last("/label-pods").expect("a review");
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    let req = &review["request"];
    assert_eq!(req["operation"], "CREATE");
    assert_eq!(req["namespace"], "hooked");
    assert_eq!(req["name"], "labelled");
    assert_eq!(req["resource"]["resource"], "pods");
    assert_eq!(req["kind"]["kind"], "Pod");
    assert_eq!(req["requestKind"]["kind"], "Pod");
    assert_eq!(req["dryRun"], false);
    assert_eq!(req["object"]["metadata"]["name"], "labelled");
    assert!(req["oldObject"].is_null());
    assert!(
        req["userInfo"]["username"]
            .as_str()
            .is_some_and(|u| !u.is_empty()),
        "{req}"
    );

    // The namespace selector keeps the webhooks away from other namespaces.
    let out = create(c, "plain", &pod("unlabelled"));
    assert!(out.status.success(), "{}", stderr(&out));
    let labels = c.kubectl(&[
        "get",
        "pod",
        "unlabelled",
        "-n",
        "plain",
        "-o",
        "jsonpath={.metadata.labels}",
    ]);
    assert!(!labels.contains("webhook.example.com"), "{labels}");
    assert_eq!(hook.count("/label-pods"), 1);
}

fn validating_webhook_denies_with_upstreams_message(c: &Cluster, hook: &WebhookServer) {
    configure(
        c,
        &format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: cm-policy\nwebhooks:\n{}",
            webhook(
                "deny.example.com",
                &url_config(hook, "/deny-configmaps"),
                "  rules:\n  - {operations: [CREATE, UPDATE], apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps]}\n  namespaceSelector: {matchLabels: {webhooks: \"on\"}}\n  objectSelector: {matchExpressions: [{key: skip-validation, operator: DoesNotExist}]}\n",
            )
        ),
    );
    let denied = r#"admission webhook "deny.example.com" denied the request: configmap "bad-one" is not allowed"#;
    let out = create(c, "hooked", &configmap("bad-one", ""));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            r#"Error from server: error when creating "STDIN": {denied}"#
        )),
        "{err}"
    );
    // A server-side dry run is sent to the webhook too (its sideEffects are None), marked as such.
    let out = c.kubectl_output(
        &["create", "-n", "hooked", "--dry-run=server", "-f", "-"],
        Some(&configmap("bad-one", "")),
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains(denied), "{}", stderr(&out));
    let review = hook.last("/deny-configmaps").expect("a review");
    assert_eq!(review["request"]["dryRun"], true);
    assert_eq!(review["request"]["options"]["dryRun"][0], "All");

    let calls = hook.count("/deny-configmaps");
    let out = create(c, "hooked", &configmap("good-one", ""));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(hook.count("/deny-configmaps"), calls + 1);
    // Not sent: another namespace, or an object the object selector leaves out.
    let out = create(c, "plain", &configmap("bad-elsewhere", ""));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = create(
        c,
        "hooked",
        &configmap("bad-but-skipped", "skip-validation: \"yes\""),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(hook.count("/deny-configmaps"), calls + 1);
    // An update is reviewed with the old object.
    let out = c.kubectl_output(
        &["label", "configmap", "good-one", "-n", "hooked", "extra=1"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let review = hook.last("/deny-configmaps").expect("a review");
    assert_eq!(review["request"]["operation"], "UPDATE");
    assert_eq!(
        review["request"]["oldObject"]["metadata"]["name"],
        "good-one"
    );
    assert_eq!(
        review["request"]["object"]["metadata"]["labels"]["extra"],
        "1"
    );
}

fn warnings_reach_kubectl(c: &Cluster, hook: &WebhookServer) {
    configure(
        c,
        &format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: cm-warn\nwebhooks:\n{}",
            webhook(
                "warn.example.com",
                &url_config(hook, "/warn"),
                "  rules:\n  - {operations: [CREATE], apiGroups: [\"\"], apiVersions: [\"*\"], resources: [\"*\"], scope: Namespaced}\n  objectSelector: {matchLabels: {warn: \"yes\"}}\n  matchConditions:\n  - {name: not-excluded, expression: \"object.metadata.name != 'excluded' && request.operation == 'CREATE'\"}\n",
            )
        ),
    );
    let out = create(c, "plain", &configmap("warned", "warn: \"yes\""));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Warning: ConfigMap warned is looked at by warn.example.com"),
        "{}",
        stderr(&out)
    );
    let out = create(c, "plain", &configmap("quiet", ""));
    assert!(!stderr(&out).contains("Warning:"), "{}", stderr(&out));
    // A false match condition skips the webhook.
    let calls = hook.count("/warn");
    let out = create(c, "plain", &configmap("excluded", "warn: \"yes\""));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("Warning:"), "{}", stderr(&out));
    assert_eq!(hook.count("/warn"), calls);
}

fn failure_policies_with_the_webhook_down(c: &Cluster, hook: &WebhookServer) {
    namespace(c, "down-ignore", "down: ignore");
    namespace(c, "down-fail", "down: fail");
    namespace(c, "slow", "slow: \"yes\"");
    // A port nothing listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dead_url = format!("https://{dead}/never");
    let down = |name: &str, policy: &str, label: &str| {
        webhook(
            name,
            &format!("    url: {dead_url}\n    caBundle: {}", hook.ca_bundle()),
            &format!("  rules:\n  - {{operations: [CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps]}}\n  failurePolicy: {policy}\n  namespaceSelector: {{matchLabels: {{down: {label}}}}}\n"),
        )
    };
    let slow = webhook(
        "slow.example.com",
        &url_config(hook, "/slow"),
        "  rules:\n  - {operations: [CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps]}\n  timeoutSeconds: 1\n  namespaceSelector: {matchLabels: {slow: \"yes\"}}\n",
    );
    configure(
        c,
        &format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: down\nwebhooks:\n{}{}{slow}",
            down("ignore.example.com", "Ignore", "ignore"),
            down("fail.example.com", "Fail", "fail"),
        ),
    );
    let out = create(c, "down-ignore", &configmap("through", ""));
    assert!(out.status.success(), "{}", stderr(&out));

    let out = create(c, "down-fail", &configmap("refused", ""));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            r#"Error from server (InternalError): error when creating "STDIN": Internal error occurred: failed calling webhook "fail.example.com": failed to call webhook: Post "https://{dead}/never?timeout=10s": dial tcp {dead}: connect: connection refused"#
        )),
        "{err}"
    );
    let started = Instant::now();
    let out = create(c, "slow", &configmap("too-slow", ""));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!(
            r#"failed calling webhook "slow.example.com": failed to call webhook: Post "{}?timeout=1s": context deadline exceeded"#,
            hook.url("/slow")
        )),
        "{}",
        stderr(&out)
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // Configurations themselves never go through webhooks, so a broken one can be removed.
    c.kubectl(&["delete", "validatingwebhookconfiguration", "down"]);
    c.kubectl(&["get", "validatingwebhookconfigurations"]);
    let out = create(c, "down-fail", &configmap("after-removal", ""));
    assert!(out.status.success(), "{}", stderr(&out));
}

fn service_references_resolve_to_endpoints(c: &Cluster, hook: &WebhookServer) {
    namespace(c, "via-service", "via: service");
    let port = hook.addr.port();
    c.kubectl_in(
        &["create", "-f", "-"],
        Some(&format!(
            "apiVersion: v1
kind: Service
metadata: {{name: hook, namespace: default}}
spec:
  ports: [{{name: https, port: 443, targetPort: {port}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: hook-1
  namespace: default
  labels: {{kubernetes.io/service-name: hook}}
addressType: IPv4
ports: [{{name: https, port: {port}, protocol: TCP}}]
endpoints: [{{addresses: [127.0.0.1], conditions: {{ready: true}}}}]
"
        )),
    );
    configure(
        c,
        &format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: by-service\nwebhooks:\n{}",
            webhook(
                "svc-deny.example.com",
                &format!(
                    "    service: {{namespace: default, name: hook, path: /deny-configmaps}}\n    caBundle: {}",
                    hook.ca_bundle()
                ),
                "  rules:\n  - {operations: [CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps]}\n  namespaceSelector: {matchLabels: {via: service}}\n",
            )
        ),
    );
    let out = create(c, "via-service", &configmap("bad-via-service", ""));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            r#"admission webhook "svc-deny.example.com" denied the request: configmap "bad-via-service" is not allowed"#
        ),
        "{}",
        stderr(&out)
    );
}

/// Serves the webhook for `scripts/bench-admission.sh` (not a test): with
/// `RKUBE_BENCH_WEBHOOK_DIR` set, writes `ca.crt` and `url` (the `/allow` endpoint) there and
/// serves until killed.
#[test]
#[ignore = "a webhook server for scripts/bench-admission.sh"]
fn serve_webhook_for_bench() {
    let Some(dir) = std::env::var_os("RKUBE_BENCH_WEBHOOK_DIR") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let hook = WebhookServer::start();
    std::fs::write(dir.join("ca.crt"), &hook.ca_pem).expect("write ca.crt");
    std::fs::write(dir.join("url"), hook.url("/allow")).expect("write url");
    loop {
        std::thread::park();
    }
}
