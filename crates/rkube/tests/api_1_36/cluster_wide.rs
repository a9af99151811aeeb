//! Cluster-wide checks of rkube's Kubernetes 1.36 API: discovery as kubectl shows it, the
//! ComponentStatuses, and the informers a 1.36 kube-scheduler and kube-controller-manager start.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use serde_json::json;

use super::support::Cluster;
use super::wire::{self, Format, Http, Watch, FORMATS};
use super::{kinds, DEADLINE};

/// Upstream 1.36's `kubectl api-resources -o wide`, one line per resource: name (short names),
/// group/version, scope, kind, then `verbs=` unless the verbs are the usual eight ([`STANDARD_VERBS`]) and
/// `categories=` when there are categories. The `metrics.k8s.io` lines are metrics-server's (rkube
/// serves that group itself), as in a cluster running it.
pub const UPSTREAM_API_RESOURCES: &str = "\
bindings v1 namespaced Binding verbs=create
componentstatuses (cs) v1 cluster ComponentStatus verbs=get,list
configmaps (cm) v1 namespaced ConfigMap
endpoints (ep) v1 namespaced Endpoints
events (ev) v1 namespaced Event
limitranges (limits) v1 namespaced LimitRange
namespaces (ns) v1 cluster Namespace verbs=create,delete,get,list,patch,update,watch
nodes (no) v1 cluster Node
persistentvolumeclaims (pvc) v1 namespaced PersistentVolumeClaim
persistentvolumes (pv) v1 cluster PersistentVolume
pods (po) v1 namespaced Pod categories=all
podtemplates v1 namespaced PodTemplate
replicationcontrollers (rc) v1 namespaced ReplicationController categories=all
resourcequotas (quota) v1 namespaced ResourceQuota
secrets v1 namespaced Secret
serviceaccounts (sa) v1 namespaced ServiceAccount
services (svc) v1 namespaced Service categories=all
mutatingadmissionpolicies admissionregistration.k8s.io/v1 cluster MutatingAdmissionPolicy categories=api-extensions
mutatingadmissionpolicybindings admissionregistration.k8s.io/v1 cluster MutatingAdmissionPolicyBinding categories=api-extensions
mutatingwebhookconfigurations admissionregistration.k8s.io/v1 cluster MutatingWebhookConfiguration categories=api-extensions
validatingadmissionpolicies admissionregistration.k8s.io/v1 cluster ValidatingAdmissionPolicy categories=api-extensions
validatingadmissionpolicybindings admissionregistration.k8s.io/v1 cluster ValidatingAdmissionPolicyBinding categories=api-extensions
validatingwebhookconfigurations admissionregistration.k8s.io/v1 cluster ValidatingWebhookConfiguration categories=api-extensions
customresourcedefinitions (crd,crds) apiextensions.k8s.io/v1 cluster CustomResourceDefinition categories=api-extensions
apiservices apiregistration.k8s.io/v1 cluster APIService categories=api-extensions
controllerrevisions apps/v1 namespaced ControllerRevision
daemonsets (ds) apps/v1 namespaced DaemonSet categories=all
deployments (deploy) apps/v1 namespaced Deployment categories=all
replicasets (rs) apps/v1 namespaced ReplicaSet categories=all
statefulsets (sts) apps/v1 namespaced StatefulSet categories=all
selfsubjectreviews authentication.k8s.io/v1 cluster SelfSubjectReview verbs=create
tokenreviews authentication.k8s.io/v1 cluster TokenReview verbs=create
localsubjectaccessreviews authorization.k8s.io/v1 namespaced LocalSubjectAccessReview verbs=create
selfsubjectaccessreviews authorization.k8s.io/v1 cluster SelfSubjectAccessReview verbs=create
selfsubjectrulesreviews authorization.k8s.io/v1 cluster SelfSubjectRulesReview verbs=create
subjectaccessreviews authorization.k8s.io/v1 cluster SubjectAccessReview verbs=create
horizontalpodautoscalers (hpa) autoscaling/v2 namespaced HorizontalPodAutoscaler categories=all
cronjobs (cj) batch/v1 namespaced CronJob categories=all
jobs batch/v1 namespaced Job categories=all
certificatesigningrequests (csr) certificates.k8s.io/v1 cluster CertificateSigningRequest
leases coordination.k8s.io/v1 namespaced Lease
endpointslices discovery.k8s.io/v1 namespaced EndpointSlice
events (ev) events.k8s.io/v1 namespaced Event
flowschemas flowcontrol.apiserver.k8s.io/v1 cluster FlowSchema
prioritylevelconfigurations flowcontrol.apiserver.k8s.io/v1 cluster PriorityLevelConfiguration
nodes metrics.k8s.io/v1beta1 cluster NodeMetrics verbs=get,list
pods metrics.k8s.io/v1beta1 namespaced PodMetrics verbs=get,list
ingressclasses networking.k8s.io/v1 cluster IngressClass
ingresses (ing) networking.k8s.io/v1 namespaced Ingress
ipaddresses (ip) networking.k8s.io/v1 cluster IPAddress
networkpolicies (netpol) networking.k8s.io/v1 namespaced NetworkPolicy
servicecidrs networking.k8s.io/v1 cluster ServiceCIDR
runtimeclasses node.k8s.io/v1 cluster RuntimeClass
poddisruptionbudgets (pdb) policy/v1 namespaced PodDisruptionBudget
clusterrolebindings rbac.authorization.k8s.io/v1 cluster ClusterRoleBinding
clusterroles rbac.authorization.k8s.io/v1 cluster ClusterRole
rolebindings rbac.authorization.k8s.io/v1 namespaced RoleBinding
roles rbac.authorization.k8s.io/v1 namespaced Role
deviceclasses resource.k8s.io/v1 cluster DeviceClass
resourceclaims resource.k8s.io/v1 namespaced ResourceClaim
resourceclaimtemplates resource.k8s.io/v1 namespaced ResourceClaimTemplate
resourceslices resource.k8s.io/v1 cluster ResourceSlice
priorityclasses (pc) scheduling.k8s.io/v1 cluster PriorityClass
csidrivers storage.k8s.io/v1 cluster CSIDriver
csinodes storage.k8s.io/v1 cluster CSINode
csistoragecapacities storage.k8s.io/v1 namespaced CSIStorageCapacity
storageclasses (sc) storage.k8s.io/v1 cluster StorageClass
volumeattachments storage.k8s.io/v1 cluster VolumeAttachment
volumeattributesclasses (vac) storage.k8s.io/v1 cluster VolumeAttributesClass";

pub const UPSTREAM_API_VERSIONS: &str = "admissionregistration.k8s.io/v1 apiextensions.k8s.io/v1 \
apiregistration.k8s.io/v1 apps/v1 authentication.k8s.io/v1 authorization.k8s.io/v1 autoscaling/v1 \
autoscaling/v2 batch/v1 certificates.k8s.io/v1 coordination.k8s.io/v1 discovery.k8s.io/v1 \
events.k8s.io/v1 flowcontrol.apiserver.k8s.io/v1 metrics.k8s.io/v1beta1 networking.k8s.io/v1 node.k8s.io/v1 policy/v1 \
rbac.authorization.k8s.io/v1 resource.k8s.io/v1 scheduling.k8s.io/v1 storage.k8s.io/v1 v1";

pub const STANDARD_VERBS: &str = "create,delete,deletecollection,get,list,patch,update,watch";
/// One row of `kubectl api-resources -o wide` in the form of [`UPSTREAM_API_RESOURCES`].
fn api_resource_rows(table: &str) -> Vec<String> {
    let mut lines = table.lines();
    let header = lines.next().expect("a header line");
    let columns = [
        "NAME",
        "SHORTNAMES",
        "APIVERSION",
        "NAMESPACED",
        "KIND",
        "VERBS",
        "CATEGORIES",
    ];
    let starts: Vec<usize> = columns
        .iter()
        .map(|c| {
            header
                .find(c)
                .unwrap_or_else(|| panic!("no column {c} in {header:?}"))
        })
        .collect();
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let cell = |i: usize| {
                let end = starts
                    .get(i + 1)
                    .copied()
                    .unwrap_or(usize::MAX)
                    .min(line.len());
                line.get(starts[i].min(line.len())..end)
                    .unwrap_or("")
                    .trim()
                    .to_string()
            };
            let mut row = cell(0);
            if !cell(1).is_empty() {
                row += &format!(" ({})", cell(1));
            }
            row += &format!(
                " {} {}",
                cell(2),
                if cell(3) == "true" {
                    "namespaced"
                } else {
                    "cluster"
                }
            );
            row += &format!(" {}", cell(4));
            let verbs = cell(5).trim_matches(['[', ']']).replace(' ', ",");
            if verbs != STANDARD_VERBS {
                row += &format!(" verbs={verbs}");
            }
            if !cell(6).is_empty() {
                row += &format!(
                    " categories={}",
                    cell(6).trim_matches(['[', ']']).replace(' ', ",")
                );
            }
            row
        })
        .collect()
}

/// Each difference between two lists of lines, in words.
fn differences(got: &[String], want: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for line in want {
        if !got.contains(line) {
            out.push(format!("missing or different: {line}"));
        }
    }
    for line in got {
        if !want.contains(line) {
            out.push(format!("served but not upstream's: {line}"));
        }
    }
    if out.is_empty() && got != want {
        out.push(format!("same lines in another order: {got:#?}"));
    }
    out
}

pub fn api_resources(c: &Cluster) {
    let table = c.kubectl(&["api-resources", "-o", "wide"]);
    let got = api_resource_rows(&table);
    let want: Vec<String> = UPSTREAM_API_RESOURCES.lines().map(str::to_string).collect();
    let diff = differences(&got, &want);
    assert!(
        diff.is_empty(),
        "kubectl api-resources -o wide differs from upstream 1.36's:\n{}\n(table:\n{table})",
        diff.join("\n")
    );
}

pub fn api_versions(c: &Cluster) {
    let got: Vec<String> = c
        .kubectl(&["api-versions"])
        .lines()
        .map(str::to_string)
        .collect();
    let want: Vec<String> = UPSTREAM_API_VERSIONS
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let diff = differences(&got, &want);
    assert!(
        diff.is_empty(),
        "kubectl api-versions differs from upstream 1.36's:\n{}",
        diff.join("\n")
    );
}

pub async fn component_statuses(c: &Cluster, http: &Http) {
    const NAMES: [&str; 3] = ["controller-manager", "etcd-0", "scheduler"];
    let path = "/api/v1/componentstatuses";
    let mut lists = Vec::new();
    for format in FORMATS {
        let answer = http.call(Method::GET, path, format, None).await;
        answer.expect(StatusCode::OK, &format!("GET {path} in {}", format.name()));
        let list = format.read(&answer, "v1", "ComponentStatusList", None);
        if format == Format::Protobuf {
            kinds::roundtrip::<k8s_pb::api::core::v1::ComponentStatusList>(
                &wire::open_envelope(&answer.body).1,
            )
            .unwrap_or_else(|e| panic!("GET {path} in protobuf: {e}"));
        }
        lists.push(list);
    }
    for list in &lists {
        let names: BTreeSet<&str> = list["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter_map(|i| i["metadata"]["name"].as_str())
            .collect();
        assert_eq!(names, NAMES.into_iter().collect(), "names listed: {list}");
        for item in list["items"].as_array().unwrap() {
            assert_eq!(item["conditions"][0]["type"], "Healthy", "{item}");
            assert!(
                matches!(
                    item["conditions"][0]["status"].as_str(),
                    Some("True" | "False" | "Unknown")
                ),
                "{item}"
            );
        }
    }
    for name in NAMES {
        for format in FORMATS {
            let answer = http
                .call(Method::GET, &format!("{path}/{name}"), format, None)
                .await;
            answer.expect(
                StatusCode::OK,
                &format!("GET {path}/{name} in {}", format.name()),
            );
            let object = format.read(&answer, "v1", "ComponentStatus", None);
            assert_eq!(object["metadata"]["name"], name, "{object}");
            assert_eq!(object["conditions"][0]["type"], "Healthy", "{object}");
        }
    }
    // What `kubectl get componentstatuses` shows.
    let shown = c.kubectl(&["get", "componentstatuses", "-o", "name"]);
    assert_eq!(
        shown.lines().collect::<Vec<_>>(),
        NAMES.map(|n| format!("componentstatus/{n}")),
        "kubectl get componentstatuses"
    );
    // Storage answers here, whatever the backend.
    let etcd = http
        .json(Method::GET, &format!("{path}/etcd-0"), None)
        .await
        .1;
    assert_eq!(etcd["conditions"][0]["status"], "True", "etcd-0: {etcd}");

    // Not a creatable resource: 405 MethodNotAllowed, as upstream's go-restful routes answer.
    let object = json!({"apiVersion": "v1", "kind": "ComponentStatus", "metadata": {"name": "mine"}, "conditions": [{"type": "Healthy", "status": "True"}]});
    let (status, body) = http.json(Method::POST, path, Some(&object)).await;
    assert_eq!(
        status,
        StatusCode::METHOD_NOT_ALLOWED,
        "POST {path}: {body}"
    );
    assert_eq!(
        (
            body["kind"].as_str(),
            body["reason"].as_str(),
            body["code"].as_u64()
        ),
        (Some("Status"), Some("MethodNotAllowed"), Some(405)),
        "POST {path}: {body}"
    );
}

/// The list/watch resources of upstream 1.36: (collection path, apiVersion, kind).
fn list_watch_resources() -> Vec<(String, String, String)> {
    UPSTREAM_API_RESOURCES
        .lines()
        .filter(|line| {
            let verbs = line
                .split(' ')
                .find_map(|w| w.strip_prefix("verbs="))
                .unwrap_or(STANDARD_VERBS);
            verbs.split(',').any(|v| v == "list") && verbs.split(',').any(|v| v == "watch")
        })
        .map(|line| {
            let words: Vec<&str> = line.split(' ').filter(|w| !w.starts_with('(')).collect();
            let (plural, api_version, kind) = (words[0], words[1], words[3]);
            let path = if api_version == "v1" {
                format!("/api/v1/{plural}")
            } else {
                format!("/apis/{api_version}/{plural}")
            };
            (path, api_version.to_string(), kind.to_string())
        })
        .collect()
}

/// What a client-go reflector does for each informer of a 1.36 kube-scheduler and
/// kube-controller-manager: a protobuf LIST (`resourceVersion=0`, `limit=500`, pages followed), then a
/// protobuf WATCH with bookmarks from the list's resourceVersion. Every informer must sync (the list
/// succeeds in protobuf, with upstream's message framing) and its watch must stay open without an
/// ERROR event.
pub async fn informers(http: &Http) {
    let resources = list_watch_resources();
    assert_eq!(resources.len(), 59, "list/watch resources of upstream 1.36");
    let mut failures = Vec::new();
    let mut watches = Vec::new();
    for (path, api_version, kind) in &resources {
        let mut query = "resourceVersion=0&limit=500".to_string();
        let mut revision = String::new();
        let mut items = 0;
        loop {
            let answer = http
                .call(
                    Method::GET,
                    &format!("{path}?{query}"),
                    Format::Protobuf,
                    None,
                )
                .await;
            if answer.status != StatusCode::OK {
                failures.push(format!(
                    "LIST {path}?{query}: {} {}",
                    answer.status,
                    answer.text()
                ));
                break;
            }
            match wire::generic_list(&answer, api_version, &format!("{kind}List")) {
                Ok((rv, count, next)) => {
                    items += count;
                    revision = rv;
                    match next {
                        Some(token) => query = format!("limit=500&continue={token}"),
                        None => break,
                    }
                }
                Err(e) => {
                    failures.push(format!("LIST {path}: {e}"));
                    break;
                }
            }
        }
        if revision.is_empty() {
            if failures.last().is_none_or(|f| !f.contains(path.as_str())) {
                failures.push(format!("LIST {path}: no resourceVersion ({items} items)"));
            }
            continue;
        }
        let watch_path = format!("{path}?allowWatchBookmarks=true&resourceVersion={revision}&timeoutSeconds=300&watch=true");
        match Watch::open(http, Format::Protobuf, &watch_path).await {
            Ok(watch) => watches.push((watch_path, watch)),
            Err(e) => failures.push(e),
        }
    }
    // A watch from a resourceVersion the server cannot serve ends at once, or sends an ERROR event
    // (410 Gone): give every watch a moment to do so.
    let window = Instant::now() + Duration::from_millis(1500);
    let checks = watches.iter_mut().map(|(path, watch)| async move {
        match watch.errors_until(window).await {
            Ok(()) => None,
            Err(e) => Some(format!("WATCH {path}: {e}")),
        }
    });
    failures.extend(
        futures::future::join_all(checks)
            .await
            .into_iter()
            .flatten(),
    );
    assert!(
        failures.is_empty(),
        "{} of {} informers did not sync:\n{}",
        failures.len(),
        resources.len(),
        failures.join("\n")
    );
}

/// The same informers with client-go's WatchList: a protobuf WATCH with `sendInitialEvents=true`
/// whose initial events end with a bookmark annotated `k8s.io/initial-events-end`.
pub async fn streaming_lists(http: &Http) {
    let mut failures = Vec::new();
    for (path, _, kind) in list_watch_resources() {
        let watch_path = format!("{path}?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds=300&watch=true");
        let result = async {
            let mut watch = Watch::open(http, Format::Protobuf, &watch_path).await?;
            watch
                .initial_events_end(&kind, Instant::now() + DEADLINE)
                .await
        }
        .await;
        if let Err(e) = result {
            failures.push(format!("WATCH {watch_path}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} streaming lists failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
