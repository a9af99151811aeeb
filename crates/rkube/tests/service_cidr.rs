//! ClusterIP allocation on ServiceCIDRs and IPAddresses, as upstream 1.36: the default `kubernetes`
//! ServiceCIDR, one IPAddress per Service address (created with the Service, deleted with it),
//! upstream's errors for taken and foreign addresses, a second ServiceCIDR extending the range, a
//! deleted ServiceCIDR kept by its finalizer while addresses use it, and two API servers on one etcd
//! never handing out the same address or node port.

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::Api;
use serde_json::json;
use support::{Backend, Cluster};

const CONTROLLERS: &[&str] = &[
    "--disable-scheduler",
    "--controllers=serviceaccount-controller,service-cidr-controller",
];

/// Polls `check` until it returns `Some`, failing after `secs` seconds with `what`.
async fn eventually<T, F, Fut>(secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn ready(sc: &ServiceCIDR) -> Option<(String, String, String)> {
    let c = sc
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn has_finalizer(sc: &ServiceCIDR) -> bool {
    sc.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == "networking.k8s.io/service-cidr-finalizer")
}

fn service(name: &str, spec: serde_json::Value) -> Service {
    let mut spec = spec;
    if spec.get("ports").is_none() {
        spec["ports"] = json!([{"port": 80}]);
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn cluster_ip(svc: &Service) -> String {
    svc.spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .unwrap_or_default()
}

fn default_servicecidr_and_ipaddresses(backend: Backend) {
    let mut c = Cluster::start_all(backend, CONTROLLERS);
    support::runtime().block_on(async {
        let client = c.client().await;
        let cidrs: Api<ServiceCIDR> = Api::all(client.clone());
        let ips: Api<IPAddress> = Api::all(client.clone());
        let services: Api<Service> = Api::namespaced(client.clone(), "default");

        // The default ServiceCIDR, Ready, protected by the controller's finalizer.
        let default = eventually(30, "the default ServiceCIDR to be Ready", || async {
            let sc = cidrs.get_opt("kubernetes").await.unwrap()?;
            (ready(&sc).is_some_and(|r| r.0 == "True") && has_finalizer(&sc)).then_some(sc)
        })
        .await;
        assert_eq!(
            default.spec.as_ref().unwrap().cidrs,
            Some(vec!["10.96.0.0/12".to_string()])
        );
        let out = c.kubectl(&["get", "servicecidr", "kubernetes"]);
        assert!(out.contains("10.96.0.0/12"), "{out}");

        // The `kubernetes` Service's address is held by an IPAddress.
        let kube_ip = ips.get("10.96.0.1").await.unwrap();
        let parent = kube_ip.spec.parent_ref;
        assert_eq!(
            (parent.resource.as_str(), parent.namespace.as_deref(), parent.name.as_str()),
            ("services", Some("default"), "kubernetes")
        );

        // A new Service's address gets its IPAddress before the Service is stored.
        c.kubectl(&["create", "service", "clusterip", "web", "--tcp=80:80"]);
        let ip = cluster_ip(&services.get("web").await.unwrap());
        assert!(ip.starts_with("10."), "{ip}");
        let table = c.kubectl(&["get", "ipaddress", &ip]);
        assert!(table.contains("services/default/web"), "{table}");
        let obj = ips.get(&ip).await.unwrap();
        let labels = obj.metadata.labels.clone().unwrap();
        assert_eq!(labels["ipaddress.kubernetes.io/ip-family"], "IPv4");
        assert_eq!(labels["ipaddress.kubernetes.io/managed-by"], "ipallocator.k8s.io");
        assert!(obj.metadata.uid.is_some() && obj.metadata.creation_timestamp.is_some());

        // Upstream's messages for a taken and a foreign address.
        let err = c.kubectl_fails(
            &["create", "service", "clusterip", "taken", "--tcp=80:80", "--clusterip", &ip],
            None,
        );
        assert!(
            err.contains(&format!(
                "spec.clusterIPs: Invalid value: [\"{ip}\"]: failed to allocate IP {ip}: provided IP is already allocated"
            )),
            "{err}"
        );
        let err = c.kubectl_fails(
            &["create", "service", "clusterip", "far", "--tcp=80:80", "--clusterip", "192.168.7.7"],
            None,
        );
        assert!(
            err.contains("failed to allocate IP 192.168.7.7: the provided network does not match the current range"),
            "{err}"
        );
        // An explicit free address is taken as given.
        c.kubectl(&["create", "service", "clusterip", "dns", "--tcp=53:53", "--clusterip", "10.96.0.10"]);
        assert_eq!(cluster_ip(&services.get("dns").await.unwrap()), "10.96.0.10");
        assert!(ips.get_opt("10.96.0.10").await.unwrap().is_some());

        // A failed create (the name exists) leaves no address behind.
        let before = ips.list(&ListParams::default()).await.unwrap().items.len();
        let dup = services
            .create(&PostParams::default(), &service("web", json!({})))
            .await;
        assert!(matches!(dup, Err(kube::Error::Api(ref e)) if e.code == 409), "{dup:?}");
        assert_eq!(ips.list(&ListParams::default()).await.unwrap().items.len(), before);

        // Deleting the Service deletes its IPAddress.
        services.delete("web", &DeleteParams::default()).await.unwrap();
        eventually(30, "the IPAddress of a deleted Service to go", || async {
            ips.get_opt(&ip).await.unwrap().is_none().then_some(())
        })
        .await;

        // A Service without its IPAddress (a store written before IPAddresses existed) gets it
        // back from the repair pass at start, before the server serves.
        c.kubectl(&["delete", "ipaddress", "10.96.0.10"]);
        c.restart();
        let ips: Api<IPAddress> = Api::all(c.client().await);
        let parent = ips.get("10.96.0.10").await.unwrap().spec.parent_ref;
        assert_eq!((parent.namespace.as_deref(), parent.name.as_str()), (Some("default"), "dns"));
    });
}

fn second_servicecidr_extends_the_range(backend: Backend) {
    let mut args = CONTROLLERS.to_vec();
    args.extend(["--service-cluster-ip-range", "10.96.0.0/28"]);
    let c = Cluster::start_all(backend, &args);
    support::runtime().block_on(async {
        let client = c.client().await;
        let cidrs: Api<ServiceCIDR> = Api::all(client.clone());
        let ips: Api<IPAddress> = Api::all(client.clone());
        let services: Api<Service> = Api::namespaced(client.clone(), "default");

        // 14 usable addresses, the first is the `kubernetes` Service's.
        for i in 0..13 {
            services
                .create(&PostParams::default(), &service(&format!("s{i}"), json!({})))
                .await
                .unwrap();
        }
        let full = services
            .create(&PostParams::default(), &service("one-too-many", json!({})))
            .await;
        match full {
            Err(kube::Error::Api(e)) => assert!(
                e.message.contains("failed to allocate a serviceIP: range is full"),
                "{}",
                e.message
            ),
            other => panic!("expected a full range, got {other:?}"),
        }

        c.kubectl_in(
            &["apply", "-f", "-"],
            Some("apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata:\n  name: extra\nspec:\n  cidrs: [10.97.0.0/28]\n"),
        );
        eventually(30, "the new ServiceCIDR to be Ready", || async {
            let sc = cidrs.get("extra").await.unwrap();
            (ready(&sc).is_some_and(|r| r.0 == "True") && has_finalizer(&sc)).then_some(())
        })
        .await;
        let svc = services
            .create(&PostParams::default(), &service("extended", json!({})))
            .await
            .unwrap();
        let ip = cluster_ip(&svc);
        assert!(ip.starts_with("10.97.0."), "{ip}");
        assert!(ips.get_opt(&ip).await.unwrap().is_some());

        // Deleting it while the address is in use: it stays, Ready=False, reason Terminating.
        cidrs.delete("extra", &DeleteParams::default()).await.unwrap();
        let (status, reason, message) = eventually(30, "the ServiceCIDR to be blocked", || async {
            let sc = cidrs.get("extra").await.unwrap();
            assert!(sc.metadata.deletion_timestamp.is_some());
            assert!(has_finalizer(&sc));
            ready(&sc).filter(|r| r.0 == "False")
        })
        .await;
        assert_eq!(status, "False");
        assert_eq!(reason, "Terminating");
        assert_eq!(
            message,
            "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR"
        );
        // A terminating ServiceCIDR hands out nothing.
        let refused = services
            .create(&PostParams::default(), &service("refused", json!({})))
            .await;
        assert!(refused.is_err(), "{refused:?}");
        // Still there well past the grace period while the address is used.
        let until = Instant::now() + Duration::from_secs(12);
        while Instant::now() < until {
            let sc = cidrs.get("extra").await.unwrap();
            assert!(has_finalizer(&sc), "the finalizer went while an address is in use");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }

        // Once the address is released, the finalizer goes and so does the ServiceCIDR.
        services.delete("extended", &DeleteParams::default()).await.unwrap();
        eventually(60, "the deleted ServiceCIDR to go", || async {
            cidrs.get_opt("extra").await.unwrap().is_none().then_some(())
        })
        .await;
    });
}

on_both_backends!(
    default_servicecidr_and_ipaddresses,
    second_servicecidr_extends_the_range
);

/// Two `rkube server`s on one etcd create 2 x 120 NodePort Services at once from a /24: every
/// ClusterIP and node port is distinct, and every address has exactly its Service's IPAddress.
#[test]
fn two_servers_on_one_etcd_allocate_distinct_addresses() {
    let etcd = storage::etcd_process::EtcdProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let common = [
        "--storage",
        "etcd",
        "--etcd-servers",
        etcd.endpoint.as_str(),
        "--service-cluster-ip-range",
        "10.96.0.0/24",
        "--disable-scheduler",
    ];
    let mut a_args = common.to_vec();
    a_args.push("--controllers=serviceaccount-controller,service-cidr-controller");
    let a = Cluster::start_all(Backend::Sqlite, &a_args);
    let mut b_args = common.to_vec();
    b_args.push("--disable-controllers");
    let b = Cluster::start_all(Backend::Sqlite, &b_args);
    support::runtime().block_on(async {
        let (ca, cb) = (a.client().await, b.client().await);
        let per_server = 120;
        let create = |client: kube::Client, prefix: &'static str| async move {
            let api: Api<Service> = Api::namespaced(client, "default");
            futures::stream::iter(0..per_server)
                .for_each_concurrent(16, |i| {
                    let api = api.clone();
                    async move {
                        let svc = service(&format!("{prefix}-{i}"), json!({"type": "NodePort"}));
                        api.create(&PostParams::default(), &svc)
                            .await
                            .unwrap_or_else(|e| panic!("{prefix}-{i}: {e}"));
                    }
                })
                .await;
        };
        tokio::join!(create(ca.clone(), "a"), create(cb.clone(), "b"));

        let services: Api<Service> = Api::namespaced(ca.clone(), "default");
        let list = services.list(&ListParams::default()).await.unwrap().items;
        assert_eq!(
            list.len(),
            2 * per_server + 1,
            "the Services and `kubernetes`"
        );
        let addrs: HashSet<String> = list.iter().map(cluster_ip).collect();
        assert_eq!(addrs.len(), list.len(), "duplicate ClusterIPs");
        let ports: Vec<i32> = list
            .iter()
            .flat_map(|s| s.spec.as_ref().unwrap().ports.clone().unwrap_or_default())
            .filter_map(|p| p.node_port)
            .collect();
        assert_eq!(ports.len(), 2 * per_server);
        assert_eq!(
            ports.iter().collect::<HashSet<_>>().len(),
            ports.len(),
            "duplicate node ports"
        );
        let ips: Api<IPAddress> = Api::all(cb.clone());
        let objects = ips.list(&ListParams::default()).await.unwrap().items;
        assert_eq!(objects.len(), list.len());
        for svc in &list {
            let ip = cluster_ip(svc);
            let obj = objects
                .iter()
                .find(|o| o.metadata.name.as_deref() == Some(ip.as_str()))
                .unwrap_or_else(|| panic!("no IPAddress for {ip}"));
            let parent = &obj.spec.parent_ref;
            assert_eq!(Some(parent.name.as_str()), svc.metadata.name.as_deref());
        }
    });
    drop((a, b));
    drop(etcd);
}
