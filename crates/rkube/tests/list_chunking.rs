//! Paged LISTs and Table output, as upstream's conformance tests check them
//! (test/e2e/apimachinery/chunking.go and table_conversion.go): `limit`/`continue`, the continue token,
//! `remainingItemCount`, one resourceVersion for every page, the 410 with a fresh token when the
//! first page's revision has been compacted, malformed tokens, Table chunks, `includeObject`, and the
//! 406 of an endpoint that cannot print a Table. Every test runs on SQLite and on etcd.

mod support;

use std::time::Duration;

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplate};
use kube::api::{Api, ListParams, PostParams};
use prost::Message;
use serde_json::{json, Value};
use support::{runtime, Backend, Cluster};

const TOTAL: usize = 400;
const TABLE_V1BETA1: &str = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";

fn template(name: &str, labels: Value) -> PodTemplate {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": name, "labels": labels},
        "template": {"spec": {"containers": [{"name": "test", "image": "test2"}]}}
    }))
    .expect("pod template")
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let obj = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    ns.create(&PostParams::default(), &obj)
        .await
        .expect("namespace");
}

/// `template-0000` ... in `ns`, 20 at a time as upstream's BeforeEach; even ones labelled `parity=even`.
async fn create_templates(client: &kube::Client, ns: &str, n: usize) {
    let api: Api<PodTemplate> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(0..n)
        .for_each_concurrent(20, |i| {
            let api = api.clone();
            async move {
                let parity = if i % 2 == 0 { "even" } else { "odd" };
                api.create(
                    &PostParams::default(),
                    &template(&format!("template-{i:04}"), json!({"parity": parity})),
                )
                .await
                .unwrap_or_else(|e| panic!("create template {i}: {e}"));
            }
        })
        .await;
}

/// A raw GET: status and JSON body.
async fn get(client: &kube::Client, path: &str, accept: Option<&str>) -> (u16, Value) {
    let (status, body) = get_bytes(client, path, accept).await;
    let value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("GET {path}: {e}: {}", String::from_utf8_lossy(&body)));
    (status, value)
}

async fn get_bytes(client: &kube::Client, path: &str, accept: Option<&str>) -> (u16, Vec<u8>) {
    let mut req = http::Request::get(path);
    if let Some(accept) = accept {
        req = req.header("Accept", accept);
    }
    let req = req.body(Vec::new()).unwrap();
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .expect(path);
    let status = resp.status().as_u16();
    let body = resp.into_body().collect_bytes().await.expect(path).to_vec();
    (status, body)
}

fn token_json(token: &str) -> Value {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .expect("continue tokens are unpadded URL-safe base64");
    serde_json::from_slice(&raw).expect("continue tokens are JSON")
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// Pages through `path` (a list URL with its query, without `limit`/`continue`) with page sizes from
/// `sizes`; checks the invariants of chunking.go and returns the names seen, in order.
async fn page_through(
    client: &kube::Client,
    path: &str,
    sizes: &mut dyn FnMut() -> usize,
    total: Option<usize>,
) -> Vec<String> {
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut first_rv: Option<String> = None;
    loop {
        let limit = sizes();
        let url = match &token {
            Some(t) => format!("{path}{sep}limit={limit}&continue={t}"),
            None => format!("{path}{sep}limit={limit}"),
        };
        let (status, list) = get(client, &url, None).await;
        assert_eq!(status, 200, "GET {url}: {list}");
        let items = names(&list);
        assert!(
            items.len() <= limit,
            "{} items for limit {limit}",
            items.len()
        );
        let rv = list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        let first_rv = first_rv.get_or_insert_with(|| rv.clone());
        assert_eq!(
            &rv, first_rv,
            "every page is read at the first page's revision"
        );
        let next = list["metadata"]["continue"].as_str().map(str::to_string);
        let remaining = list["metadata"].get("remainingItemCount");
        match (&next, total) {
            (None, _) => assert!(
                remaining.is_none(),
                "no remainingItemCount on the last page"
            ),
            (Some(t), Some(total)) => {
                let remaining = remaining
                    .and_then(Value::as_u64)
                    .expect("remainingItemCount");
                assert_eq!(remaining as usize + items.len() + seen.len(), total);
                // Upstream's token: the revision and the last key, then NUL.
                let tok = token_json(t);
                assert_eq!(tok["v"], "meta.k8s.io/v1");
                assert_eq!(tok["rv"].to_string(), rv);
                let last = tok["start"].as_str().unwrap();
                assert!(last.ends_with('\0'), "start {last:?}");
                assert!(last
                    .trim_end_matches('\0')
                    .ends_with(items.last().unwrap().as_str()));
            }
            // Selectors: upstream cannot count what remains.
            (Some(_), None) => assert!(remaining.is_none(), "remainingItemCount with selectors"),
        }
        seen.extend(items);
        match next {
            Some(t) => token = Some(t),
            None => return seen,
        }
    }
}

fn expected_names(range: impl Iterator<Item = usize>) -> Vec<String> {
    range.map(|i| format!("template-{i:04}")).collect()
}

/// chunking.go "should return chunks of results for list calls", and the same through selectors,
/// across namespaces and through the kube crate.
fn chunks_of_results_for_list_calls(backend: Backend) {
    let c = Cluster::start(backend);
    runtime().block_on(async {
        let client = c.client().await;
        create_namespace(&client, "chunking").await;
        create_namespace(&client, "other").await;
        create_templates(&client, "chunking", TOTAL).await;
        create_templates(&client, "other", 30).await;
        let path = "/api/v1/namespaces/chunking/podtemplates";

        // Random page sizes in 1..=40, three times.
        let mut seed = 12345u64;
        let mut random = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((seed >> 33) % (TOTAL as u64 / 10)) as usize + 1
        };
        for _ in 0..3 {
            let seen = page_through(&client, path, &mut random, Some(TOTAL)).await;
            assert_eq!(seen, expected_names(0..TOTAL));
        }
        // All at once.
        let (_, all) = get(&client, &format!("{path}?limit={}", TOTAL + 1), None).await;
        assert_eq!(names(&all).len(), TOTAL);
        assert!(all["metadata"].get("continue").is_none());
        assert!(all["metadata"].get("remainingItemCount").is_none());
        // A limit of exactly the number of items: no continue.
        let (_, exact) = get(&client, &format!("{path}?limit={TOTAL}"), None).await;
        assert_eq!(names(&exact).len(), TOTAL);
        assert!(exact["metadata"].get("continue").is_none());
        // resourceVersion=0 is served from the cache, whole, as upstream's cache ignores the limit.
        let (_, cached) = get(&client, &format!("{path}?limit=5&resourceVersion=0"), None).await;
        assert_eq!(names(&cached).len(), TOTAL);
        assert!(cached["metadata"].get("continue").is_none());

        // Across namespaces: keys are `<namespace>/<name>`.
        let mut sevens = || 7;
        let seen = page_through(&client, "/api/v1/podtemplates", &mut sevens, Some(TOTAL + 30)).await;
        assert_eq!(seen.len(), TOTAL + 30);
        let (_, first) = get(&client, "/api/v1/podtemplates?limit=3", None).await;
        let start = token_json(first["metadata"]["continue"].as_str().unwrap())["start"].clone();
        assert_eq!(start, "chunking/template-0002\u{0}");

        // Label and field selectors: pages fill up with matches, and no remainingItemCount.
        let seen = page_through(&client, &format!("{path}?labelSelector=parity%3Deven"), &mut sevens, None).await;
        assert_eq!(seen, expected_names((0..TOTAL).step_by(2)));
        let seen = page_through(
            &client,
            &format!("{path}?fieldSelector=metadata.name%21%3Dtemplate-0001"),
            &mut sevens,
            None,
        )
        .await;
        assert_eq!(seen.len(), TOTAL - 1);
        // A selector that matches only near the end still pages correctly.
        let mut ones = || 1;
        let seen = page_through(
            &client,
            "/api/v1/podtemplates?fieldSelector=metadata.namespace%3Dother,metadata.name%3Dtemplate-0029",
            &mut ones,
            None,
        )
        .await;
        assert_eq!(seen, vec!["template-0029".to_string()]);

        // resourceVersion with a limit reads at that revision (the legacy exact match).
        let (_, page) = get(&client, &format!("{path}?limit=10"), None).await;
        let rv = page["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        let api: Api<PodTemplate> = Api::namespaced(client.clone(), "chunking");
        api.create(&PostParams::default(), &template("template-9999", json!({})))
            .await
            .unwrap();
        let (_, at) = get(&client, &format!("{path}?limit=500&resourceVersion={rv}"), None).await;
        assert_eq!(at["metadata"]["resourceVersion"], rv.as_str());
        assert_eq!(names(&at).len(), TOTAL);
        let (_, exact) = get(
            &client,
            &format!("{path}?resourceVersion={rv}&resourceVersionMatch=Exact"),
            None,
        )
        .await;
        assert_eq!(names(&exact).len(), TOTAL);
        // NotOlderThan: the latest state.
        let (_, newer) = get(
            &client,
            &format!("{path}?limit=500&resourceVersion={rv}&resourceVersionMatch=NotOlderThan"),
            None,
        )
        .await;
        assert_eq!(names(&newer).len(), TOTAL + 1);

        // Through the kube crate (protobuf-free JSON client, as client libraries page).
        let mut lp = ListParams::default().limit(150);
        let mut count = 0;
        loop {
            let page = api.list(&lp).await.expect("page");
            count += page.items.len();
            match page.metadata.continue_ {
                Some(t) if !t.is_empty() => {
                    assert_eq!(
                        page.metadata.remaining_item_count,
                        Some((TOTAL + 1 - count) as i64)
                    );
                    lp = lp.continue_token(&t);
                }
                _ => break,
            }
        }
        assert_eq!(count, TOTAL + 1);
    });
}

/// chunking.go "should support continue listing from the last key if the original version has been
/// compacted away, though the list is inconsistent".
fn continue_past_compaction_is_inconsistent(backend: Backend) {
    let c = Cluster::start_with(backend, &["--compaction-interval", "1s"]);
    runtime().block_on(async {
        let client = c.client().await;
        create_namespace(&client, "chunking").await;
        create_templates(&client, "chunking", TOTAL).await;
        let path = "/api/v1/namespaces/chunking/podtemplates";
        let one_tenth = TOTAL / 10;

        let (_, first) = get(&client, &format!("{path}?limit={one_tenth}"), None).await;
        let first_token = first["metadata"]["continue"].as_str().unwrap().to_string();
        let first_rv = first["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        assert_eq!(
            first["metadata"]["remainingItemCount"].as_u64().unwrap() as usize + one_tenth,
            TOTAL
        );
        assert_eq!(names(&first), expected_names(0..one_tenth));

        // Writes elsewhere move the revision on; compaction then catches up with the first page's.
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let url = format!("{path}?limit={one_tenth}&continue={first_token}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let status = loop {
            let cm = serde_json::from_value(json!({"metadata": {"generateName": "tick-"}})).unwrap();
            cms.create(&PostParams::default(), &cm).await.unwrap();
            let (code, body) = get(&client, &url, None).await;
            if code == 410 {
                break body;
            }
            assert_eq!(code, 200, "{body}");
            assert!(tokio::time::Instant::now() < deadline, "the token never expired");
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "Expired");
        assert_eq!(status["code"], 410);
        assert_eq!(
            status["message"],
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
        );
        assert!(status.get("details").is_none());
        let inconsistent = status["metadata"]["continue"].as_str().expect("a fresh token").to_string();
        let tok = token_json(&inconsistent);
        assert_eq!(tok["rv"], -1, "the latest revision");
        assert_eq!(tok["start"], token_json(&first_token)["start"]);

        // The same 410 in protobuf (client-go's format for built-in kinds), token included.
        let (code, bytes) = get_bytes(&client, &url, Some("application/vnd.kubernetes.protobuf")).await;
        assert_eq!(code, 410);
        assert_eq!(&bytes[..4], b"k8s\0");
        let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(&bytes[4..]).unwrap();
        let pb = k8s_pb::apimachinery::pkg::apis::meta::v1::Status::decode(unknown.raw.as_deref().unwrap_or_default()).unwrap();
        assert_eq!(pb.code, Some(410));
        assert_eq!(pb.reason.as_deref(), Some("Expired"));
        assert!(pb.metadata.and_then(|m| m.r#continue).is_some_and(|t| !t.is_empty()));

        // Continuing with it: the rest, at a newer revision.
        let (code, second) = get(&client, &format!("{path}?limit={one_tenth}&continue={inconsistent}"), None).await;
        assert_eq!(code, 200, "{second}");
        let second_rv = second["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        assert_ne!(second_rv, first_rv);
        assert_eq!(names(&second), expected_names(one_tenth..2 * one_tenth));
        let mut found = 2 * one_tenth;
        assert_eq!(
            second["metadata"]["remainingItemCount"].as_u64().unwrap() as usize + found,
            TOTAL
        );
        let mut token = second["metadata"]["continue"].as_str().unwrap().to_string();
        loop {
            let (code, page) = get(&client, &format!("{path}?limit={one_tenth}&continue={token}"), None).await;
            assert_eq!(code, 200, "{page}");
            assert_eq!(page["metadata"]["resourceVersion"], second_rv.as_str());
            let items = names(&page);
            assert_eq!(items, expected_names(found..found + items.len()));
            found += items.len();
            match page["metadata"]["continue"].as_str() {
                Some(t) => {
                    assert_eq!(
                        page["metadata"]["remainingItemCount"].as_u64().unwrap() as usize + found,
                        TOTAL
                    );
                    token = t.to_string();
                }
                None => {
                    assert!(page["metadata"].get("remainingItemCount").is_none());
                    break;
                }
            }
        }
        assert_eq!(found, TOTAL);

        // An exact list at the compacted revision is 410 too.
        let (code, gone) = get(
            &client,
            &format!("{path}?resourceVersion={first_rv}&resourceVersionMatch=Exact"),
            None,
        )
        .await;
        assert_eq!(code, 410);
        assert_eq!(gone["message"], "The resourceVersion for the provided list is too old.");
    });
}

/// Writes between pages do not show in the continuation: every page shows the first page's
/// revision (upstream 1.33+ serves them from the watch cache's snapshot, rkube rebuilds it from the
/// cache's event ring), and an exact list at that revision shows the same state.
fn writes_between_pages_stay_out_of_the_continuation(backend: Backend) {
    let c = Cluster::start(backend);
    runtime().block_on(async {
        let client = c.client().await;
        create_namespace(&client, "snapshot").await;
        create_templates(&client, "snapshot", 40).await;
        let path = "/api/v1/namespaces/snapshot/podtemplates";
        let (code, first) = get(&client, &format!("{path}?limit=10"), None).await;
        assert_eq!(code, 200, "{first}");
        assert_eq!(names(&first), expected_names(0..10));
        let rv = first["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        let mut token = first["metadata"]["continue"].as_str().unwrap().to_string();

        // After the first page: a delete, a relabel and a create inside the rest of the range.
        let api: Api<PodTemplate> = Api::namespaced(client.clone(), "snapshot");
        api.delete("template-0015", &Default::default())
            .await
            .unwrap();
        let patch = json!({"metadata": {"labels": {"parity": "changed"}}});
        api.patch(
            "template-0025",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
        api.create(
            &PostParams::default(),
            &template("template-0030a", json!({})),
        )
        .await
        .unwrap();

        let mut seen = names(&first);
        loop {
            let (code, page) =
                get(&client, &format!("{path}?limit=10&continue={token}"), None).await;
            assert_eq!(code, 200, "{page}");
            assert_eq!(page["metadata"]["resourceVersion"], rv.as_str());
            for item in page["items"].as_array().unwrap() {
                if item["metadata"]["name"] == "template-0025" {
                    assert_eq!(item["metadata"]["labels"]["parity"], "odd", "{item}");
                }
            }
            seen.extend(names(&page));
            match page["metadata"]["continue"].as_str() {
                Some(t) => {
                    assert_eq!(
                        page["metadata"]["remainingItemCount"].as_u64().unwrap() as usize
                            + seen.len(),
                        40
                    );
                    token = t.to_string();
                }
                None => break,
            }
        }
        assert_eq!(seen, expected_names(0..40));

        // The same state whole, by an exact list at the first page's revision; the latest differs.
        let (code, exact) = get(
            &client,
            &format!("{path}?resourceVersion={rv}&resourceVersionMatch=Exact"),
            None,
        )
        .await;
        assert_eq!(code, 200, "{exact}");
        assert_eq!(names(&exact), expected_names(0..40));
        let (_, latest) = get(&client, path, None).await;
        let latest = names(&latest);
        assert_eq!(latest.len(), 40);
        assert!(!latest.contains(&"template-0015".to_string()));
        assert!(latest.contains(&"template-0030a".to_string()));
    });
}

/// Bad tokens and options: upstream's codes and texts.
fn malformed_continue_tokens_are_rejected(backend: Backend) {
    let c = Cluster::start(backend);
    runtime().block_on(async {
        let client = c.client().await;
        create_templates(&client, "default", 5).await;
        let path = "/api/v1/namespaces/default/podtemplates";
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let cases = [
            ("garbage!".to_string(), "invalid continue token: continue key is not valid: illegal base64 data at input byte 7"),
            (b64("not json"), "invalid continue token: continue key is not valid: invalid character 'o' in literal null (expecting 'u')"),
            (b64(r#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#), "invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"),
            (b64(r#"{"v":"meta.k8s.io/v1","rv":5,"start":""}"#), "invalid continue token: continue key is not valid: encoded start key empty (version meta.k8s.io/v1)"),
            (b64(r#"{"v":"meta.k8s.io/v2","rv":5,"start":"a"}"#), "invalid continue token: continue key is not valid: server does not recognize this encoded version meta.k8s.io/v2"),
            (b64(r#"{"v":"meta.k8s.io/v1","rv":5,"start":"../../secrets/"}"#), "invalid continue token: continue key is not valid: ../../secrets/"),
            (b64(r#"{"v":"meta.k8s.io/v1","rv":9223372036854775808,"start":"a"}"#), "invalid continue token: continue key is not valid: json: cannot unmarshal number 9223372036854775808 into Go struct field continueToken.rv of type int64"),
            (b64(r#"{"v":"meta.k8s.io/v1","rv":"5","start":"a"}"#), "invalid continue token: continue key is not valid: json: cannot unmarshal string into Go struct field continueToken.rv of type int64"),
        ];
        for (token, message) in cases {
            let (code, status) = get(&client, &format!("{path}?limit=2&continue={token}"), None).await;
            assert_eq!(code, 400, "{token}: {status}");
            assert_eq!(status["reason"], "BadRequest");
            if token.starts_with("bm90") {
                // Go's JSON error for "not json"; ours may word the middle differently.
                assert!(status["message"].as_str().unwrap().starts_with("invalid continue token: continue key is not valid: "));
            } else {
                assert_eq!(status["message"], message, "{token}");
            }
        }
        let (_, first) = get(&client, &format!("{path}?limit=2"), None).await;
        let token = first["metadata"]["continue"].as_str().unwrap();
        let (code, status) = get(&client, &format!("{path}?limit=2&continue={token}&resourceVersion=1"), None).await;
        assert_eq!(code, 400);
        assert_eq!(status["message"], "specifying resource version is not allowed when using continue");
        // resourceVersion=0 is allowed with a continue token.
        let (code, _) = get(&client, &format!("{path}?limit=2&continue={token}&resourceVersion=0"), None).await;
        assert_eq!(code, 200);
        let (code, status) = get(&client, &format!("{path}?continue={token}&resourceVersion=1&resourceVersionMatch=NotOlderThan"), None).await;
        assert_eq!(code, 422);
        assert_eq!(status["message"], "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided");
        let (code, status) = get(&client, &format!("{path}?resourceVersionMatch=Exact"), None).await;
        assert_eq!(code, 422);
        assert_eq!(status["message"], "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided");
        // A negative revision is upstream's "inconsistent continuation": the latest state, from the
        // key on (the token the 410 hands out). Not an error, and the page says the revision served.
        let (code, latest) = get(&client, &format!("{path}?limit=2&continue={}", b64(r#"{"v":"meta.k8s.io/v1","rv":-7,"start":"template-0002\u0000"}"#)), None).await;
        assert_eq!(code, 200, "{latest}");
        assert_eq!(names(&latest), ["template-0003", "template-0004"]);
        let revision = |list: &Value| list["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse::<i64>().ok());
        assert!(revision(&latest) >= revision(&first), "{latest}");
        // A revision the server has not reached: the cache waits, then upstream's 504.
        let (code, status) = get(&client, &format!("{path}?limit=2&continue={}", b64(r#"{"v":"meta.k8s.io/v1","rv":9223372036854775807,"start":"a"}"#)), None).await;
        assert_eq!(code, 504, "{status}");
        assert_eq!(status["reason"], "Timeout");
        assert!(status["message"].as_str().unwrap().starts_with("Too large resource version: 9223372036854775807"), "{status}");
        // A token from one namespace continues in another from the same name.
        let (code, other) = get(&client, &format!("/api/v1/namespaces/kube-system/podtemplates?limit=2&continue={token}"), None).await;
        assert_eq!(code, 200, "{other}");
    });
}

/// table_conversion.go: pod details, chunks of table results, nodes across namespaces, the 406, and
/// `includeObject`.
fn tables(backend: Backend) {
    let c = Cluster::start(backend);
    runtime().block_on(async {
        let client = c.client().await;
        create_namespace(&client, "tables").await;
        create_templates(&client, "tables", 20).await;
        let path = "/api/v1/namespaces/tables/podtemplates";

        // "should return chunks of table results for list calls"
        let (code, t) = get(&client, &format!("{path}?limit=2"), Some(TABLE_V1BETA1)).await;
        assert_eq!(code, 200, "{t}");
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1beta1");
        let rows = t["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["cells"][0], "template-0000");
        assert_eq!(rows[1]["cells"][0], "template-0001");
        assert_ne!(t["metadata"]["resourceVersion"], "");
        assert_eq!(t["metadata"]["remainingItemCount"], 18);
        let token = t["metadata"]["continue"].as_str().expect("continue").to_string();
        // Rows carry PartialObjectMetadata in the Table's version by default.
        assert_eq!(rows[0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(rows[0]["object"]["apiVersion"], "meta.k8s.io/v1beta1");
        let (code, t2) = get(&client, &format!("{path}?continue={token}"), Some(TABLE_V1BETA1)).await;
        assert_eq!(code, 200, "{t2}");
        assert_eq!(t2["rows"][0]["cells"][0], "template-0002");
        assert_eq!(t2["rows"].as_array().unwrap().len(), 18);
        assert!(t2["metadata"].get("continue").is_none());
        assert_eq!(t2["metadata"]["resourceVersion"], t["metadata"]["resourceVersion"]);

        // includeObject.
        let (_, none) = get(&client, &format!("{path}?limit=1&includeObject=None"), Some(TABLE_V1BETA1)).await;
        assert!(none["rows"][0].get("object").is_none(), "{none}");
        let (_, whole) = get(&client, &format!("{path}?limit=1&includeObject=Object"), Some(TABLE_V1BETA1)).await;
        assert_eq!(whole["rows"][0]["object"]["kind"], "PodTemplate");
        assert_eq!(whole["rows"][0]["object"]["template"]["spec"]["containers"][0]["image"], "test2");
        let (_, meta) = get(&client, &format!("{path}?limit=1&includeObject=Metadata"), Some("application/json;as=Table;v=v1;g=meta.k8s.io")).await;
        assert_eq!(meta["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(meta["rows"][0]["object"]["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(meta["rows"][0]["object"]["metadata"]["name"], "template-0000");
        let (code, bad) = get(&client, &format!("{path}?includeObject=Everything"), Some(TABLE_V1BETA1)).await;
        assert_eq!(code, 400);
        assert_eq!(bad["message"], "Unable to convert to Table as requested: includeObject: Invalid value: \"Everything\": must be 'Metadata', 'Object', 'None', or empty");

        // Metadata-only lists page too.
        let (_, partial) = get(&client, &format!("{path}?limit=3"), Some("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io")).await;
        assert_eq!(partial["kind"], "PartialObjectMetadataList");
        assert_eq!(partial["items"].as_array().unwrap().len(), 3);
        assert_eq!(partial["metadata"]["remainingItemCount"], 17);
        assert!(partial["metadata"]["continue"].is_string());

        // "should return pod details"
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "tables");
        let pod = serde_json::from_value(json!({"metadata": {"name": "pod-1"}, "spec": {"restartPolicy": "Never",
            "containers": [{"name": "agnhost", "image": "agnhost", "args": ["porter"], "ports": [{"containerPort": 8080}],
            "env": [{"name": "SERVE_PORT_8080", "value": "foo"}]}]}}))
        .unwrap();
        // The namespace's `default` ServiceAccount (which admission wants) may still be on its way.
        let mut tries = 0;
        while let Err(e) = pods.create(&PostParams::default(), &pod).await {
            tries += 1;
            assert!(tries < 50, "pod: {e}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (code, t) = get(&client, "/api/v1/namespaces/tables/pods/pod-1", Some(TABLE_V1BETA1)).await;
        assert_eq!(code, 200, "{t}");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1beta1");
        let columns = t["columnDefinitions"].as_array().unwrap();
        assert!(columns.len() > 2);
        assert_eq!(columns[0]["name"], "Name");
        assert_eq!(t["rows"].as_array().unwrap().len(), 1);
        assert_eq!(t["rows"][0]["cells"].as_array().unwrap().len(), columns.len());
        assert_eq!(t["rows"][0]["cells"][0], "pod-1");

        // "should return generic metadata details across all namespaces for nodes"
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
        let node = serde_json::from_value(json!({"metadata": {"name": "node-1"}})).unwrap();
        nodes.create(&PostParams::default(), &node).await.expect("node");
        let (code, t) = get(&client, "/api/v1/nodes", Some(TABLE_V1BETA1)).await;
        assert_eq!(code, 200, "{t}");
        let columns = t["columnDefinitions"].as_array().unwrap();
        assert!(columns.len() >= 2);
        assert_eq!(columns[0]["name"], "Name");
        assert!(!t["rows"].as_array().unwrap().is_empty());
        assert_eq!(t["rows"][0]["cells"].as_array().unwrap().len(), columns.len());
        assert_ne!(t["metadata"]["resourceVersion"], "");

        // "should return a 406 for a backend which does not implement metadata"
        let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"nonResourceAttributes": {"path": "/", "verb": "get"}}});
        let req = http::Request::post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
            .header("Content-Type", "application/json")
            .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
            .body(serde_json::to_vec(&sar).unwrap())
            .unwrap();
        let resp = client.send(req.map(kube::client::Body::from)).await.unwrap();
        assert_eq!(resp.status().as_u16(), 406);
        let body: Value = serde_json::from_slice(&resp.into_body().collect_bytes().await.unwrap()).unwrap();
        assert_eq!(body["reason"], "NotAcceptable");
        assert_eq!(body["code"], 406);
        // Without the Table, the same review is answered.
        let req = http::Request::post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&sar).unwrap())
            .unwrap();
        let resp = client.send(req.map(kube::client::Body::from)).await.unwrap();
        assert_eq!(resp.status().as_u16(), 201);
        // An eviction cannot print itself either: 406, and the pod stays.
        let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "pod-1"}});
        let req = http::Request::post("/api/v1/namespaces/tables/pods/pod-1/eviction")
            .header("Content-Type", "application/json")
            .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
            .body(serde_json::to_vec(&eviction).unwrap())
            .unwrap();
        let resp = client.send(req.map(kube::client::Body::from)).await.unwrap();
        assert_eq!(resp.status().as_u16(), 406);
        assert!(pods.get("pod-1").await.is_ok());
    });
}

on_both_backends!(
    chunks_of_results_for_list_calls,
    writes_between_pages_stay_out_of_the_continuation,
    continue_past_compaction_is_inconsistent,
    malformed_continue_tokens_are_rejected,
    tables,
);
