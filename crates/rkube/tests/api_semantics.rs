//! Upstream semantics beyond plain CRUD, through the kube crate against `rkube server`: graceful pod
//! deletion and binding, finalizers and propagation policy, namespace lifecycle, watch selection
//! transitions and bookmarks, dry run, deletecollection, status subresource, Table output, and
//! Service IP/port allocation. Every test runs on SQLite and on etcd.

mod support;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::{json, Value};
use support::{runtime, Backend, Cluster};

fn from<T: k8s_openapi::serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

fn code(err: kube::Error) -> u16 {
    match err {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn pod(name: &str) -> Pod {
    from(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "p"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    )
}

fn pods_are_deleted_gracefully_once_bound(backend: Backend) {
    let c = Cluster::start(backend);
    runtime().block_on(async {
        let pods: Api<Pod> = Api::namespaced(c.client().await, "default");
        let created = pods.create(&PostParams::default(), &pod("loose")).await.expect("create");
        let status = created.status.expect("status");
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));
        // Unscheduled: deleted at once.
        pods.delete("loose", &DeleteParams::default()).await.expect("delete");
        assert_eq!(code(pods.get("loose").await.expect_err("gone")), 404);

        pods.create(&PostParams::default(), &pod("bound")).await.expect("create");
        let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "bound"}, "target": {"kind": "Node", "name": "node-1"}});
        pods.create_subresource::<Value, Value>("binding", "bound", &PostParams::default(), &binding)
            .await
            .expect("bind");
        let p = pods.get("bound").await.expect("get");
        assert_eq!(p.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some("node-1"));
        let conditions = p.status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(conditions.iter().any(|c| c.type_ == "PodScheduled" && c.status == "True"));
        let again = pods.create_subresource::<Value, Value>("binding", "bound", &PostParams::default(), &binding).await;
        assert_eq!(code(again.expect_err("second bind")), 409);

        // The older `bindings` resource binds too.
        pods.create(&PostParams::default(), &pod("old-style")).await.expect("create");
        let req = http::Request::post("/api/v1/namespaces/default/bindings")
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "old-style"}, "target": {"kind": "Node", "name": "node-2"}})).unwrap())
            .unwrap();
        c.client().await.request_text(req).await.expect("POST bindings");
        let p = pods.get("old-style").await.expect("get");
        assert_eq!(p.spec.and_then(|s| s.node_name).as_deref(), Some("node-2"));
        // Eviction deletes (gracefully, as the pod is bound).
        let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "old-style"}});
        pods.create_subresource::<Value, Value>("eviction", "old-style", &PostParams::default(), &eviction)
            .await
            .expect("evict");
        assert!(pods.get("old-style").await.expect("terminating").metadata.deletion_timestamp.is_some());

        // Bound: the delete only marks it; the node's grace-0 delete removes it.
        pods.delete("bound", &DeleteParams::default()).await.expect("delete");
        let p = pods.get("bound").await.expect("still there");
        assert!(p.metadata.deletion_timestamp.is_some());
        assert_eq!(p.metadata.deletion_grace_period_seconds, Some(30));
        pods.delete("bound", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() })
            .await
            .expect("force delete");
        assert_eq!(code(pods.get("bound").await.expect_err("gone")), 404);
    });
}

fn finalizers_and_propagation_policy(backend: Backend) {
    let c = Cluster::start(backend);
    runtime().block_on(async {
        let cms: Api<ConfigMap> = Api::namespaced(c.client().await, "default");
        let held: ConfigMap =
            from(json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}));
        cms.create(&PostParams::default(), &held)
            .await
            .expect("create");
        cms.delete("held", &DeleteParams::default())
            .await
            .expect("delete");
        let cm = cms.get("held").await.expect("kept by its finalizer");
        assert!(cm.metadata.deletion_timestamp.is_some());
        let err = cms
            .patch(
                "held",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"finalizers": ["example.com/hold", "example.com/new"]}}),
                ),
            )
            .await;
        assert_eq!(
            code(err.expect_err("no new finalizers while deleting")),
            422
        );
        cms.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("remove finalizer");
        assert_eq!(
            code(
                cms.get("held")
                    .await
                    .expect_err("gone with its last finalizer")
            ),
            404
        );

        for (name, policy, finalizer) in [
            ("fg", "Foreground", "foregroundDeletion"),
            ("orph", "Orphan", "orphan"),
        ] {
            cms.create(
                &PostParams::default(),
                &from(json!({"metadata": {"name": name}})),
            )
            .await
            .expect("create");
            let dp = DeleteParams {
                propagation_policy: Some(if policy == "Orphan" {
                    kube::api::PropagationPolicy::Orphan
                } else {
                    kube::api::PropagationPolicy::Foreground
                }),
                ..Default::default()
            };
            cms.delete(name, &dp).await.expect("delete");
            let cm = cms.get(name).await.expect("kept for the garbage collector");
            assert_eq!(
                cm.metadata.finalizers,
                Some(vec![finalizer.to_string()]),
                "{policy}"
            );
        }
    });
}

fn namespace_lifecycle(backend: Backend) {
    let c = Cluster::start(backend);
    runtime().block_on(async {
        let client = c.client().await;
        let nss: Api<Namespace> = Api::all(client.clone());
        let ns = nss
            .create(
                &PostParams::default(),
                &from(json!({"metadata": {"name": "doomed"}})),
            )
            .await
            .expect("create ns");
        assert_eq!(
            ns.spec.and_then(|s| s.finalizers),
            Some(vec!["kubernetes".to_string()])
        );
        assert_eq!(
            ns.metadata.labels.unwrap()["kubernetes.io/metadata.name"],
            "doomed"
        );
        nss.delete("doomed", &DeleteParams::default())
            .await
            .expect("delete ns");
        let ns = nss.get("doomed").await.expect("terminating");
        assert_eq!(
            ns.status.and_then(|s| s.phase).as_deref(),
            Some("Terminating")
        );
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
        let err = cms
            .create(
                &PostParams::default(),
                &from(json!({"metadata": {"name": "late"}})),
            )
            .await;
        assert_eq!(code(err.expect_err("terminating namespace")), 403);
        let missing: Api<ConfigMap> = Api::namespaced(client.clone(), "missing");
        let err = missing
            .create(
                &PostParams::default(),
                &from(json!({"metadata": {"name": "x"}})),
            )
            .await;
        assert_eq!(code(err.expect_err("no such namespace")), 404);
        // What the namespace controller does at the end: empty spec.finalizers through /finalize.
        let mut ns = nss.get("doomed").await.expect("get");
        ns.spec = Some(Default::default());
        nss.replace_subresource("finalize", "doomed", &PostParams::default(), &ns)
            .await
            .expect("finalize");
        assert_eq!(code(nss.get("doomed").await.expect_err("gone")), 404);
    });
}

fn watch_sees_objects_enter_and_leave_a_selection(backend: Backend) {
    let c = Cluster::start(backend);
    runtime().block_on(async {
        let cms: Api<ConfigMap> = Api::namespaced(c.client().await, "default");
        let start = cms
            .list(&ListParams::default())
            .await
            .expect("list")
            .metadata
            .resource_version
            .unwrap();
        let mut stream = cms
            .watch(&WatchParams::default().labels("app=a"), &start)
            .await
            .expect("watch")
            .boxed();
        cms.create(
            &PostParams::default(),
            &from(json!({"metadata": {"name": "m", "labels": {"app": "a"}}})),
        )
        .await
        .expect("create");
        let relabel = |v: &str| Patch::Merge(json!({"metadata": {"labels": {"app": v}}}));
        cms.patch("m", &PatchParams::default(), &relabel("b"))
            .await
            .expect("leave");
        cms.patch("m", &PatchParams::default(), &relabel("a"))
            .await
            .expect("enter");
        cms.delete("m", &DeleteParams::default())
            .await
            .expect("delete");
        let mut kinds = Vec::new();
        while kinds.len() < 4 {
            let ev = tokio::time::timeout(Duration::from_secs(20), stream.try_next())
                .await
                .expect("watch stalled")
                .expect("watch error")
                .expect("watch ended");
            kinds.push(match ev {
                WatchEvent::Added(_) => "ADDED",
                WatchEvent::Modified(_) => "MODIFIED",
                WatchEvent::Deleted(_) => "DELETED",
                WatchEvent::Bookmark(_) => continue,
                WatchEvent::Error(e) => panic!("{e:?}"),
            });
        }
        assert_eq!(kinds, ["ADDED", "DELETED", "ADDED", "DELETED"]);
    });
}

fn watch_bookmarks_carry_the_current_revision(backend: Backend) {
    let c = Cluster::start_with(backend, &["--bookmark-interval", "1s"]);
    runtime().block_on(async {
        let cms: Api<ConfigMap> = Api::namespaced(c.client().await, "default");
        let start = cms
            .list(&ListParams::default())
            .await
            .expect("list")
            .metadata
            .resource_version
            .unwrap();
        let mut stream = cms
            .watch(
                &WatchParams {
                    bookmarks: true,
                    ..Default::default()
                },
                &start,
            )
            .await
            .expect("watch")
            .boxed();
        // A write elsewhere moves the revision; the bookmark of this idle watch reports it.
        let other: Api<Service> = Api::namespaced(c.client().await, "default");
        let svc = other
            .create(
                &PostParams::default(),
                &from(json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})),
            )
            .await
            .expect("create");
        let written: i64 = svc.metadata.resource_version.unwrap().parse().unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let ev = tokio::time::timeout_at(deadline, stream.try_next())
                .await
                .expect("no bookmark within 15 s")
                .expect("watch error")
                .expect("watch ended");
            if let WatchEvent::Bookmark(b) = ev {
                let rv: i64 = b.metadata.resource_version.parse().unwrap();
                if rv >= written {
                    break;
                }
            }
        }
    });
}

fn dry_run_deletecollection_and_tables(backend: Backend) {
    let c = Cluster::start(backend);
    runtime().block_on(async {
        let client = c.client().await;
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let made = cms
            .create(&dry, &from(json!({"metadata": {"name": "dry"}})))
            .await
            .expect("dry run");
        assert_eq!(made.metadata.name.as_deref(), Some("dry"));
        assert_eq!(
            code(cms.get("dry").await.expect_err("dry run stores nothing")),
            404
        );
        for (name, tier) in [("a", "x"), ("b", "x"), ("c", "y")] {
            cms.create(
                &PostParams::default(),
                &from(json!({"metadata": {"name": name, "labels": {"tier": tier}}})),
            )
            .await
            .expect("create");
        }
        cms.delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("tier=x"),
        )
        .await
        .expect("deletecollection");
        let left: Vec<String> = cms
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect();
        assert_eq!(left, ["c"]);

        let req = http::Request::get("/api/v1/namespaces/default/configmaps")
            .header(
                "Accept",
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
            )
            .body(Vec::new())
            .unwrap();
        let table: Value =
            serde_json::from_str(&client.request_text(req).await.expect("table")).unwrap();
        assert_eq!(table["kind"], "Table");
        let columns: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(columns, ["Name", "Data", "Age"]);
        assert_eq!(table["rows"][0]["cells"][0], "c");
        assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    });
}

fn status_is_a_separate_subresource(backend: Backend) {
    let c = Cluster::start(backend);
    runtime().block_on(async {
        let deploys: Api<Deployment> = Api::namespaced(c.client().await, "default");
        let d: Deployment = from(json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}));
        deploys.create(&PostParams::default(), &d).await.expect("create");
        let status = Patch::Merge(json!({"status": {"replicas": 7}, "spec": {"replicas": 9}}));
        let after = deploys.patch_status("d", &PatchParams::default(), &status).await.expect("status patch");
        assert_eq!(after.status.unwrap().replicas, Some(7));
        assert_eq!(after.spec.as_ref().unwrap().replicas, Some(1), "spec ignored on /status");
        assert_eq!(after.metadata.generation, Some(1));
        let main = Patch::Merge(json!({"status": {"replicas": 0}, "spec": {"replicas": 3}}));
        let after = deploys.patch("d", &PatchParams::default(), &main).await.expect("patch");
        assert_eq!(after.status.unwrap().replicas, Some(7), "status ignored on the main resource");
        assert_eq!(after.spec.unwrap().replicas, Some(3));
        assert_eq!(after.metadata.generation, Some(2));
    });
}

fn services_get_unique_addresses_and_ports(backend: Backend) {
    let c = Cluster::start(backend);
    runtime().block_on(async {
        let svcs: Api<Service> = Api::namespaced(c.client().await, "default");
        let mut ips = std::collections::HashSet::new();
        let mut ports = std::collections::HashSet::new();
        for i in 0..20 {
            let s: Service = from(json!({"metadata": {"name": format!("s{i}")}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}}));
            let s = svcs.create(&PostParams::default(), &s).await.expect("create");
            let spec = s.spec.unwrap();
            let ip = spec.cluster_ip.unwrap();
            assert!(ip.starts_with("10.9") || ip.starts_with("10.10") || ip.starts_with("10.11"), "{ip} in 10.96.0.0/12");
            assert!(ips.insert(ip), "duplicate ClusterIP");
            let port = spec.ports.unwrap()[0].node_port.unwrap();
            assert!((30000..=32767).contains(&port));
            assert!(ports.insert(port), "duplicate NodePort");
        }
        let taken = *ports.iter().next().unwrap();
        let s: Service = from(json!({"metadata": {"name": "clash"}, "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": taken}]}}));
        assert_eq!(code(svcs.create(&PostParams::default(), &s).await.expect_err("port taken")), 422);
        // Released on delete, so it can be asked for again.
        let owner = svcs.list(&ListParams::default()).await.unwrap().items.into_iter()
            .find(|s| s.spec.as_ref().and_then(|sp| sp.ports.as_ref()).is_some_and(|p| p[0].node_port == Some(taken)))
            .unwrap();
        svcs.delete(owner.metadata.name.as_deref().unwrap(), &DeleteParams::default()).await.expect("delete");
        svcs.create(&PostParams::default(), &s).await.expect("port free again");

        // Type changes take and free addresses and ports, as upstream (kubectl patch of the type alone).
        let spec_of = |s: Service| s.spec.unwrap();
        c.kubectl(&["create", "service", "clusterip", "flip", "--tcp=80:80"]);
        let ip = spec_of(svcs.get("flip").await.unwrap()).cluster_ip.unwrap();
        c.kubectl(&["patch", "service", "flip", "-p", r#"{"spec":{"type":"NodePort"}}"#]);
        let np = spec_of(svcs.get("flip").await.unwrap());
        assert_eq!(np.cluster_ip.as_deref(), Some(ip.as_str()), "the address is kept");
        let node_port = np.ports.unwrap()[0].node_port.expect("a node port is allocated");
        assert!((30000..=32767).contains(&node_port) && !ports.contains(&node_port), "{node_port}");
        c.kubectl(&["patch", "service", "flip", "-p",
            r#"{"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local"}}"#]);
        let lb = spec_of(svcs.get("flip").await.unwrap());
        assert_eq!(lb.ports.unwrap()[0].node_port, Some(node_port), "the node port is kept");
        let hc = lb.health_check_node_port.expect("a health check node port is allocated");
        assert!((30000..=32767).contains(&hc) && hc != node_port, "{hc}");
        let want = |name: &str, port: i32| -> Service {
            from(json!({"metadata": {"name": name}, "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": port}]}}))
        };
        for taken in [node_port, hc] {
            assert_eq!(code(svcs.create(&PostParams::default(), &want("want", taken)).await.expect_err("taken")), 422);
        }
        c.kubectl(&["patch", "service", "flip", "-p", r#"{"spec":{"type":"ClusterIP"}}"#]);
        let back = spec_of(svcs.get("flip").await.unwrap());
        assert_eq!(back.cluster_ip.as_deref(), Some(ip.as_str()));
        assert_eq!(back.ports.unwrap()[0].node_port, None, "node port dropped");
        assert_eq!(back.health_check_node_port, None, "health check port dropped");
        assert_eq!(back.external_traffic_policy, None);
        // Both ports are free again.
        svcs.create(&PostParams::default(), &want("want-np", node_port)).await.expect("node port freed");
        svcs.create(&PostParams::default(), &want("want-hc", hc)).await.expect("health check port freed");
        // To ExternalName frees the address; back to ClusterIP takes one.
        c.kubectl(&["patch", "service", "flip", "-p",
            r#"{"spec":{"type":"ExternalName","externalName":"example.com"}}"#]);
        assert_eq!(spec_of(svcs.get("flip").await.unwrap()).cluster_ip, None);
        let gone = c.kubectl_output(&["get", "ipaddress", &ip], None);
        assert!(!gone.status.success(), "the IPAddress of {ip} is deleted");
        c.kubectl(&["patch", "service", "flip", "-p",
            r#"{"spec":{"type":"ClusterIP","externalName":null,"ports":[{"port":80}]}}"#]);
        let again = spec_of(svcs.get("flip").await.unwrap()).cluster_ip.expect("an address again");
        assert_ne!(again, "None");
        c.kubectl(&["get", "ipaddress", &again]);
    });
}

/// The review resources answer at once and store nothing (the admin is in system:masters: allowed).
fn reviews_answer_without_storing(backend: Backend) {
    let c = Cluster::start(backend);
    runtime().block_on(async {
        let client = c.client().await;
        let post = |path: &str, body: Value| {
            let req = http::Request::post(path)
                .header("Content-Type", "application/json")
                .body(serde_json::to_vec(&body).unwrap())
                .unwrap();
            let client = client.clone();
            async move { serde_json::from_str::<Value>(&client.request_text(req).await.expect("review")).unwrap() }
        };
        let me = post("/apis/authentication.k8s.io/v1/selfsubjectreviews", json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})).await;
        assert_eq!(me["status"]["userInfo"]["username"], "kubernetes-admin");
        assert!(me["status"]["userInfo"]["groups"].as_array().unwrap().iter().any(|g| g == "system:masters"));
        let access = post(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": {"verb": "create", "resource": "pods", "namespace": "default"}}}),
        )
        .await;
        assert_eq!(access["status"]["allowed"], true);
        let token = post("/apis/authentication.k8s.io/v1/tokenreviews", json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "nope"}})).await;
        assert_eq!(token["status"]["authenticated"], false);
        let req = http::Request::get("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews").body(Vec::new()).unwrap();
        assert_eq!(code(client.request_text(req).await.expect_err("not listable")), 405);
    });
}

on_both_backends!(
    reviews_answer_without_storing,
    pods_are_deleted_gracefully_once_bound,
    finalizers_and_propagation_policy,
    namespace_lifecycle,
    watch_sees_objects_enter_and_leave_a_selection,
    watch_bookmarks_carry_the_current_revision,
    dry_run_deletecollection_and_tables,
    status_is_a_separate_subresource,
    services_get_unique_addresses_and_ports,
);
