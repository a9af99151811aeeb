use super::proto::*;
use super::*;
use serde_json::json;
use std::collections::BTreeSet;

/// A driver that hands out one device per claim, CDI ID `example.com/gpu=gpu-0`.
#[derive(Default)]
struct ExampleDriver {
    endpoint: String,
    registered: Mutex<Vec<RegistrationStatus>>,
    prepared: Mutex<Vec<String>>,
    unprepared: Mutex<Vec<String>>,
}

impl Driver for ExampleDriver {
    fn info(&self) -> PluginInfo {
        PluginInfo {
            r#type: DRA_PLUGIN_TYPE.into(),
            name: "gpu.example.com".into(),
            endpoint: self.endpoint.clone(),
            supported_versions: vec!["v1beta1.DRAPlugin".into(), "v1.DRAPlugin".into()],
        }
    }
    fn registration_status(&self, status: RegistrationStatus) {
        lock(&self.registered).push(status);
    }
    fn prepare(&self, claims: Vec<Claim>) -> NodePrepareResourcesResponse {
        let mut out = NodePrepareResourcesResponse::default();
        for c in claims {
            lock(&self.prepared).push(c.name.clone());
            let devices = vec![Device {
                request_names: vec!["gpu".into()],
                pool_name: "node-a".into(),
                device_name: "gpu-0".into(),
                cdi_device_ids: vec!["example.com/gpu=gpu-0".into()],
            }];
            out.claims.insert(
                c.uid,
                NodePrepareResourceResponse {
                    devices,
                    error: String::new(),
                },
            );
        }
        out
    }
    fn unprepare(&self, claims: Vec<Claim>) -> NodeUnprepareResourcesResponse {
        let mut out = NodeUnprepareResourcesResponse::default();
        for c in claims {
            lock(&self.unprepared).push(c.name.clone());
            out.claims
                .insert(c.uid, NodeUnprepareResourceResponse::default());
        }
        out
    }
}

fn listen(driver: &Arc<ExampleDriver>, path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let listener = tokio::net::UnixListener::bind(path).unwrap();
    let driver: Arc<dyn Driver> = driver.clone();
    tokio::spawn(serve(listener, driver));
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "trainer", "namespace": "ns", "uid": "pod-1"},
        "spec": {"containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}},
                                {"name": "other"}]}}))
    .unwrap()
}

fn claim(driver: &str, reserved_for: &str) -> ResourceClaim {
    serde_json::from_value(json!({
        "metadata": {"name": "trainer-gpu-x", "namespace": "ns", "uid": "claim-1"},
        "spec": {"devices": {"requests": []}},
        "status": {
            "allocation": {"devices": {"results": [
                {"request": "gpu", "driver": driver, "pool": "node-a", "device": "gpu-0"}]}},
            "reservedFor": [{"resource": "pods", "name": "trainer", "uid": reserved_for}]}}))
    .unwrap()
}

#[test]
fn plugin_validation() {
    let mut info = PluginInfo {
        r#type: DRA_PLUGIN_TYPE.into(),
        name: "gpu.example.com".into(),
        endpoint: "/var/lib/kubelet/plugins/gpu/dra.sock".into(),
        supported_versions: vec!["v1beta1.DRAPlugin".into(), "v1.DRAPlugin".into()],
    };
    assert_eq!(validate(&info), Ok("v1.DRAPlugin"));
    info.supported_versions = vec!["v1alpha4.DRAPlugin".into()];
    assert!(validate(&info)
        .unwrap_err()
        .starts_with("none of the versions specified"));
    info.supported_versions = vec!["v1.DRAPlugin".into()];
    info.endpoint = "dra.sock".into();
    assert!(validate(&info).is_err());
    info.r#type = "CSIPlugin".into();
    assert_eq!(
        validate(&info).unwrap_err(),
        "no handler registered for plugin type: CSIPlugin"
    );
}

#[test]
fn devices_serve_requests() {
    let dev = |names: &[&str]| -> Vec<String> { names.iter().map(|s| s.to_string()).collect() };
    assert!(serves_request(&dev(&["gpu"]), None));
    assert!(serves_request(&dev(&[]), Some("gpu")));
    assert!(serves_request(&dev(&["gpu"]), Some("gpu")));
    assert!(serves_request(&dev(&["gpu/big"]), Some("gpu")));
    assert!(!serves_request(&dev(&["nic"]), Some("gpu")));
}

#[tokio::test]
async fn register_prepare_inject_unprepare() {
    let root = tempfile::tempdir().unwrap();
    let cdi_dir = root.path().join("cdi");
    std::fs::create_dir_all(&cdi_dir).unwrap();
    std::fs::write(
        cdi_dir.join("gpu.json"),
        r#"{"cdiVersion": "0.6.0", "kind": "example.com/gpu",
            "devices": [{"name": "gpu-0", "containerEdits": {"env": ["EXAMPLE_GPU=gpu-0"]}}]}"#,
    )
    .unwrap();
    let endpoint = root.path().join("plugins/gpu/dra.sock");
    let driver = Arc::new(ExampleDriver {
        endpoint: endpoint.display().to_string(),
        ..Default::default()
    });
    let reg = root
        .path()
        .join(REGISTRY_DIR)
        .join("gpu.example.com-reg.sock");
    listen(&driver, &reg);
    listen(&driver, &endpoint);

    let m = Arc::new(Manager::new(root.path(), vec![cdi_dir]));
    assert_eq!(m.register(&reg).await.unwrap(), "gpu.example.com");
    assert_eq!(m.drivers(), ["gpu.example.com"]);
    assert_eq!(
        *lock(&driver.registered),
        [RegistrationStatus {
            plugin_registered: true,
            error: String::new()
        }]
    );

    let p = pod();
    // Not reserved for this pod: refused before any driver call.
    assert_eq!(
        m.prepare_claims(&p, &[claim("gpu.example.com", "someone-else")])
            .await,
        Err(PrepareError::NotReserved {
            pod: "ns/trainer".into(),
            claim: "ns/trainer-gpu-x".into()
        })
    );
    // A driver nobody registered.
    assert_eq!(
        m.prepare_claims(&p, &[claim("nic.example.com", "pod-1")])
            .await,
        Err(PrepareError::NoPlugin("nic.example.com".into()))
    );
    m.prepare_claims(&p, &[claim("gpu.example.com", "pod-1")])
        .await
        .unwrap();
    // Prepared once however often the pod syncs.
    m.prepare_claims(&p, &[claim("gpu.example.com", "pod-1")])
        .await
        .unwrap();
    assert_eq!(*lock(&driver.prepared), ["trainer-gpu-x"]);

    let names = HashMap::from([("gpu".to_string(), "trainer-gpu-x".to_string())]);
    let containers = &p.spec.as_ref().unwrap().containers;
    assert_eq!(
        m.container_cdi_ids("ns", &containers[0], &names),
        ["example.com/gpu=gpu-0"]
    );
    assert_eq!(
        m.container_env("ns", &containers[0], &names).unwrap(),
        [("EXAMPLE_GPU".to_string(), "gpu-0".to_string())]
    );
    assert!(m
        .container_env("ns", &containers[1], &names)
        .unwrap()
        .is_empty());

    m.unprepare_pod("pod-1").await.unwrap();
    assert_eq!(*lock(&driver.unprepared), ["trainer-gpu-x"]);
    assert!(m.prepared("ns", "trainer-gpu-x").is_none());
}

#[tokio::test]
async fn the_watcher_registers_and_forgets_sockets() {
    let root = tempfile::tempdir().unwrap();
    let endpoint = root.path().join("plugins/gpu/dra.sock");
    let driver = Arc::new(ExampleDriver {
        endpoint: endpoint.display().to_string(),
        ..Default::default()
    });
    listen(&driver, &endpoint);
    let m = Arc::new(Manager::new(root.path(), Vec::new()));
    let watcher = tokio::spawn(m.clone().watch());
    let reg = root.path().join(REGISTRY_DIR).join("gpu-reg.sock");
    listen(&driver, &reg);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while m.drivers().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "not registered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    std::fs::remove_file(&reg).unwrap();
    while !m.drivers().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "not unregistered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    watcher.abort();
}

/// A driver and a manager registered with it, on `root`.
async fn registered(root: &Path) -> (Arc<ExampleDriver>, Manager) {
    let endpoint = root.join("plugins/gpu/dra.sock");
    let driver = Arc::new(ExampleDriver {
        endpoint: endpoint.display().to_string(),
        ..Default::default()
    });
    let reg = root.join(REGISTRY_DIR).join("gpu.example.com-reg.sock");
    if !endpoint.exists() {
        listen(&driver, &endpoint);
        listen(&driver, &reg);
    }
    let m = Manager::new(root, Vec::new());
    m.register(&reg).await.unwrap();
    (driver, m)
}

#[tokio::test]
async fn a_restarted_manager_keeps_prepared_claims_and_releases_gone_pods() {
    let root = tempfile::tempdir().unwrap();
    let (driver, m) = registered(root.path()).await;
    let p = pod();
    m.prepare_claims(&p, &[claim("gpu.example.com", "pod-1")])
        .await
        .unwrap();
    assert!(root.path().join(checkpoint::FILE_NAME).exists());
    drop(m);

    // The kubelet restarts: the claim is known, prepared, with its devices.
    let m = Manager::new(root.path(), Vec::new());
    let known = m.prepared("ns", "trainer-gpu-x").unwrap();
    assert!(known.prepared);
    assert_eq!(known.pod_uids, BTreeSet::from(["pod-1".to_string()]));
    let names = HashMap::from([("gpu".to_string(), "trainer-gpu-x".to_string())]);
    let containers = &p.spec.as_ref().unwrap().containers;
    assert_eq!(
        m.container_cdi_ids("ns", &containers[0], &names),
        ["example.com/gpu=gpu-0"]
    );
    // The driver is not registered yet with the new manager: a pod sync fails as upstream's
    // (driver missing), and nothing is unprepared while the pod is active.
    m.reconcile(&HashSet::from(["pod-1".to_string()]))
        .await
        .unwrap();
    let reg = root
        .path()
        .join(REGISTRY_DIR)
        .join("gpu.example.com-reg.sock");
    m.register(&reg).await.unwrap();
    m.prepare_claims(&p, &[claim("gpu.example.com", "pod-1")])
        .await
        .unwrap();
    assert_eq!(
        *lock(&driver.prepared),
        ["trainer-gpu-x"],
        "not prepared twice"
    );

    // The pod was deleted while the kubelet was down: the reconcile unprepares its claim.
    drop(m);
    let m = Manager::new(root.path(), Vec::new());
    m.register(&reg).await.unwrap();
    assert!(m.has_pod("pod-1"));
    m.reconcile(&HashSet::new()).await.unwrap();
    assert_eq!(*lock(&driver.unprepared), ["trainer-gpu-x"]);
    assert!(m.prepared("ns", "trainer-gpu-x").is_none());
    drop(m);
    assert!(Manager::new(root.path(), Vec::new())
        .prepared("ns", "trainer-gpu-x")
        .is_none());
}

#[tokio::test]
async fn unprepare_without_the_driver_is_retried() {
    let root = tempfile::tempdir().unwrap();
    let (driver, m) = registered(root.path()).await;
    m.prepare_claims(&pod(), &[claim("gpu.example.com", "pod-1")])
        .await
        .unwrap();
    drop(m);
    let m = Manager::new(root.path(), Vec::new());
    // Gone pod, driver not registered (yet): kept, and the error says why.
    assert_eq!(
        m.unprepare_pod("pod-1").await,
        Err(PrepareError::UnprepareFailed {
            claim: "ns/trainer-gpu-x".into(),
            message: "plugin name gpu.example.com not found in the list of registered DRA plugins"
                .into()
        })
    );
    assert!(m.prepared("ns", "trainer-gpu-x").is_some());
    let reg = root
        .path()
        .join(REGISTRY_DIR)
        .join("gpu.example.com-reg.sock");
    m.register(&reg).await.unwrap();
    m.reconcile(&HashSet::new()).await.unwrap();
    assert_eq!(*lock(&driver.unprepared), ["trainer-gpu-x"]);
}

#[tokio::test]
async fn a_claim_recreated_under_the_same_name_is_refused_while_the_old_one_is_prepared() {
    let root = tempfile::tempdir().unwrap();
    let (_driver, m) = registered(root.path()).await;
    m.prepare_claims(&pod(), &[claim("gpu.example.com", "pod-1")])
        .await
        .unwrap();
    let mut newer = claim("gpu.example.com", "pod-1");
    newer.metadata.uid = Some("claim-2".into());
    assert_eq!(
        m.prepare_claims(&pod(), &[newer]).await,
        Err(PrepareError::StaleClaim {
            claim: "trainer-gpu-x".into(),
            old_uid: "claim-1".into()
        })
    );
}

#[test]
fn a_corrupt_checkpoint_is_set_aside_and_taken_as_empty() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join(checkpoint::FILE_NAME);
    std::fs::write(&path, br#"{"Data": "{}", "Checksum": 1}"#).unwrap();
    let m = Manager::new(root.path(), Vec::new());
    assert!(m.prepared("ns", "trainer-gpu-x").is_none());
    assert!(!path.exists());
    assert!(path.with_extension("corrupt").exists());
}
