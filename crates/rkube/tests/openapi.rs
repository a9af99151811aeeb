//! `/openapi/v2` and `/openapi/v3` read by the real kubectl: `kubectl explain` (fields, nested fields,
//! `--recursive`, `--api-version`, and from v2 with `--output=plaintext-openapiv2`), validation of
//! unknown fields, `kubectl create -f` of kinds whose v3 document has no PATCH (kubectl then reads v2
//! in protobuf), custom resources' schemas, and the documents' size, caching, negotiation and
//! compression.

mod support;

use std::time::Instant;

use serde_json::Value;
use support::{Backend, Cluster};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names:
    plural: crontabs
    singular: crontab
    kind: CronTab
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: The schedule of the job.
            properties:
              cronSpec:
                type: string
                description: When to run, in cron syntax.
              replicas:
                type: integer
"#;

/// GETs `path` with the admin client; returns the body, its time and the Cache-Control header.
fn get(c: &Cluster, path: &str) -> (Vec<u8>, std::time::Duration, Option<String>) {
    support::runtime().block_on(async {
        let client = c.client().await;
        let req = http::Request::get(path).body(Vec::new()).unwrap();
        let started = Instant::now();
        let resp = client
            .send(req.map(kube::client::Body::from))
            .await
            .expect(path);
        let cache = resp
            .headers()
            .get(http::header::CACHE_CONTROL)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let status = resp.status();
        let body = resp.into_body().collect_bytes().await.expect(path).to_vec();
        assert!(status.is_success(), "GET {path}: {status}");
        (body, started.elapsed(), cache)
    })
}

/// GETs `path` with `headers`; returns the status, the response headers and the (raw) body.
fn request(
    c: &Cluster,
    path: &str,
    headers: &[(&str, &str)],
) -> (http::StatusCode, http::HeaderMap, Vec<u8>) {
    support::runtime().block_on(async {
        let client = c.client().await;
        let mut req = http::Request::get(path);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Vec::new()).unwrap();
        let resp = client
            .send(req.map(kube::client::Body::from))
            .await
            .expect(path);
        let (status, headers) = (resp.status(), resp.headers().clone());
        let body = resp.into_body().collect_bytes().await.expect(path).to_vec();
        (status, headers, body)
    })
}

const PROTOBUF_ACCEPT: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

#[test]
fn openapi_v2_is_negotiated_as_upstream() {
    let c = Cluster::start(Backend::Sqlite);
    let (status, h, proto) = request(&c, "/openapi/v2", &[("Accept", PROTOBUF_ACCEPT)]);
    assert_eq!(status, 200);
    assert_eq!(
        h["content-type"],
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    // Document { swagger (1): "2.0", ... }
    assert!(
        proto.starts_with(&[0x0a, 3, b'2', b'.', b'0']),
        "{:?}",
        &proto[..16]
    );
    let etag = h["etag"].to_str().unwrap().to_string();
    assert!(etag.len() == 130 && etag.starts_with('"'), "{etag}");
    let vary: Vec<&str> = h
        .get_all("vary")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert!(vary.contains(&"Accept"), "{vary:?}");

    // The JSON form shares the tag; the newer protobuf media type is served too.
    let (status, h, json) = request(&c, "/openapi/v2", &[("Accept", "application/json")]);
    assert_eq!(status, 200);
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["etag"].to_str().unwrap(), etag);
    assert!(json.len() > proto.len());
    let accept = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
    let (_, _, again) = request(&c, "/openapi/v2", &[("Accept", accept)]);
    assert_eq!(again, proto);

    // A current copy is not sent again; what upstream cannot serve is 406.
    let (status, _, body) = request(
        &c,
        "/openapi/v2",
        &[("Accept", PROTOBUF_ACCEPT), ("If-None-Match", &etag)],
    );
    assert_eq!(status, 304);
    assert!(body.is_empty());
    let (status, _, _) = request(&c, "/openapi/v2", &[("Accept", "application/yaml")]);
    assert_eq!(status, 406);

    // Compressed for clients that accept gzip.
    let (status, h, gz) = request(
        &c,
        "/openapi/v2",
        &[("Accept", PROTOBUF_ACCEPT), ("Accept-Encoding", "gzip")],
    );
    assert_eq!(status, 200);
    assert_eq!(h["content-encoding"], "gzip");
    assert!(gz.starts_with(&[0x1f, 0x8b]) && gz.len() < proto.len() / 2);
}

#[test]
fn kubectl_creates_kinds_without_patch_with_validation_on() {
    let c = Cluster::start(Backend::Sqlite);
    c.kubectl(&["create", "serviceaccount", "reviewer"]);
    let token = c.kubectl(&["create", "token", "reviewer"]);
    // Default validation (strict): kubectl looks for the kinds' PATCH in v3, then in v2 (protobuf).
    let review = format!(
        "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: {}\n",
        token.trim()
    );
    let out = c.kubectl_output(&["create", "-f", "-", "-o", "json"], Some(&review));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("openapi"), "{stderr}");
    let review: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(review["status"]["authenticated"], true, "{review}");
    assert_eq!(
        review["status"]["user"]["username"],
        "system:serviceaccount:default:reviewer"
    );

    let sar = "apiVersion: authorization.k8s.io/v1\nkind: SubjectAccessReview\nspec:\n  user: someone\n  groups: [\"system:masters\"]\n  resourceAttributes:\n    namespace: default\n    verb: get\n    resource: pods\n";
    let out = c.kubectl_in(
        &["create", "-f", "-", "-o", "jsonpath={.status.allowed}"],
        Some(sar),
    );
    assert_eq!(out, "true");
    // kubectl finds no PATCH (so no `fieldValidation`) for these kinds in either document, so it
    // validates them itself, with the v2 schemas, as against upstream.
    let bad = "apiVersion: authorization.k8s.io/v1\nkind: SelfSubjectAccessReview\nspec:\n  bogus: 1\n  resourceAttributes:\n    verb: get\n    resource: pods\n";
    let err = c.kubectl_fails(&["create", "-f", "-"], Some(bad));
    assert!(
        err.contains("ValidationError(SelfSubjectAccessReview.spec): unknown field \"bogus\" in io.k8s.api.authorization.v1.SelfSubjectAccessReviewSpec"),
        "{err}"
    );
}

#[test]
fn kubectl_explain_reads_openapi_v2() {
    let c = Cluster::start(Backend::Sqlite);
    let out = c.kubectl(&["explain", "pods.spec", "--output=plaintext-openapiv2"]);
    for want in [
        "KIND:     Pod",
        "VERSION:  v1",
        "RESOURCE: spec <Object>",
        "   containers\t<[]Object> -required-",
        "   hostNetwork\t<boolean>",
        "   nodeSelector\t<map[string]string>",
    ] {
        assert!(out.contains(want), "{want:?} in:\n{out}");
    }
    let out = c.kubectl(&[
        "explain",
        "deployment.spec.strategy.rollingUpdate.maxSurge",
        "--output=plaintext-openapiv2",
    ]);
    assert!(out.contains("FIELD:    maxSurge <string>"), "{out}");

    // Custom resources appear once their CRD is established (kubectl's cache revalidates by ETag).
    c.kubectl_in(&["apply", "-f", "-"], Some(CRD));
    c.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/crontabs.stable.example.com",
        "--timeout=30s",
    ]);
    let out = c.kubectl(&["explain", "crontabs.spec", "--output=plaintext-openapiv2"]);
    assert!(out.contains("KIND:     CronTab"), "{out}");
    assert!(out.contains("   cronSpec\t<string>"), "{out}");
    assert!(out.contains("When to run, in cron syntax."), "{out}");
    assert!(out.contains("   replicas\t<integer>"), "{out}");
}

#[test]
fn openapi_documents_are_cached_by_hash() {
    let c = Cluster::start(Backend::Sqlite);
    let (root, _, _) = get(&c, "/openapi/v3");
    let root: Value = serde_json::from_slice(&root).unwrap();
    let url = root["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(url.starts_with("/openapi/v3/api/v1?hash="), "{url}");
    let (first, t1, cache) = get(&c, &url);
    let (second, t2, _) = get(&c, &url);
    assert_eq!(first, second);
    assert_eq!(cache.as_deref(), Some("public, immutable"));
    let doc: Value = serde_json::from_slice(&first).unwrap();
    assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"].is_object());
    let (v2, t3, _) = get(&c, "/openapi/v2");
    let (_, t4, _) = get(&c, "/openapi/v2");
    let v2doc: Value = serde_json::from_slice(&v2).unwrap();
    assert_eq!(v2doc["swagger"], "2.0");
    eprintln!(
        "/openapi/v3/api/v1: {} bytes, first {t1:?}, cached {t2:?}; /openapi/v2: {} bytes, first {t3:?}, cached {t4:?}",
        first.len(),
        v2.len()
    );
    // Larger than a pipe's buffer, which the harness's kubectl reads only at exit: read it as it comes.
    let out = std::process::Command::new("kubectl")
        .args(["get", "--raw", "/openapi/v2"])
        .env("KUBECONFIG", &c.kubeconfig)
        .env("HOME", c.data_dir())
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.starts_with(b"{\"swagger\":\"2.0\""));
    let raw: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        raw["definitions"]["io.k8s.api.apps.v1.Deployment"]["x-kubernetes-group-version-kind"][0]
            ["kind"],
        "Deployment"
    );
}

#[test]
fn kubectl_explain_reads_the_schemas() {
    let c = Cluster::start(Backend::Sqlite);
    let out = c.kubectl(&["explain", "pods"]);
    for want in [
        "KIND:       Pod",
        "VERSION:    v1",
        "DESCRIPTION:",
        "FIELDS:",
        "  spec\t<PodSpec>",
        "  metadata\t<ObjectMeta>\n",
    ] {
        assert!(out.contains(want), "{want:?} in:\n{out}");
    }

    let out = c.kubectl(&["explain", "pod.spec.containers.ports"]);
    assert!(out.contains("FIELD: ports <[]ContainerPort>"), "{out}");
    assert!(
        out.contains("  containerPort\t<integer> -required-"),
        "{out}"
    );
    assert!(out.contains("  protocol\t<string>"), "{out}");

    let out = c.kubectl(&["explain", "deployment", "--recursive"]);
    assert!(out.contains("KIND:       Deployment"), "{out}");
    assert!(out.contains("        maxSurge\t<string>"), "{out}");
    assert!(
        out.contains("        containers\t<[]Container> -required-"),
        "{out}"
    );

    let out = c.kubectl(&[
        "explain",
        "deployments.spec.replicas",
        "--api-version=apps/v1",
    ]);
    assert!(out.contains("GROUP:      apps"), "{out}");
    assert!(out.contains("FIELD: replicas <integer>"), "{out}");
    assert!(out.contains("Number of desired pods."), "{out}");

    let err = c.kubectl_fails(&["explain", "pods.spec.nope"], None);
    assert!(err.contains("field \"nope\" does not exist"), "{err}");

    let out = c.kubectl(&["explain", "hpa.spec", "--api-version=autoscaling/v1"]);
    assert!(out.contains("targetCPUUtilizationPercentage"), "{out}");
}

#[test]
fn unknown_fields_are_rejected_by_strict_validation() {
    let c = Cluster::start(Backend::Sqlite);
    let cm =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\nbogusField: 1\ndata:\n  a: b\n";
    let err = c.kubectl_fails(&["create", "--validate=strict", "-f", "-"], Some(cm));
    assert!(err.contains("unknown field \"bogusField\""), "{err}");
    c.kubectl_in(&["create", "--validate=false", "-f", "-"], Some(cm));
}

#[test]
fn kubectl_explain_reads_custom_resource_schemas() {
    let c = Cluster::start(Backend::Sqlite);
    c.kubectl_in(&["apply", "-f", "-"], Some(CRD));
    c.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/crontabs.stable.example.com",
        "--timeout=30s",
    ]);
    let out = c.kubectl(&["explain", "crontabs.spec"]);
    assert!(out.contains("GROUP:      stable.example.com"), "{out}");
    assert!(out.contains("KIND:       CronTab"), "{out}");
    assert!(out.contains("  cronSpec\t<string>"), "{out}");
    assert!(out.contains("When to run, in cron syntax."), "{out}");
    let out = c.kubectl(&["explain", "crontabs"]);
    assert!(out.contains("  metadata\t<ObjectMeta>"), "{out}");
}
