//! Tests of defaulting: the seed-003 workloads (the `pi` Job, the `nginx-sts` StatefulSet with its
//! headless Service, the `nginx-ds` DaemonSet) and a Deployment get the fields upstream showed for them
//! and then validate clean; then the rules of each kind.

use serde_json::{json, Value};

use super::{apply_defaults, default_job_selector, default_pull_policy, pod_qos_class};
use crate::validation::{validate_create, validate_update};

fn defaulted(group: &str, kind: &str, mut obj: Value) -> Value {
    apply_defaults(group, kind, &mut obj);
    obj
}

fn assert_valid(group: &str, kind: &str, obj: &Value) {
    let errs: Vec<String> = validate_create(group, kind, obj)
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert!(errs.is_empty(), "{kind} should be valid: {errs:#?}");
}

/// The pod template spec seed 003 shows for a single `nginx` container.
fn nginx_template_spec() -> Value {
    json!({
        "containers": [{
            "image": "nginx",
            "imagePullPolicy": "Always",
            "name": "nginx",
            "resources": {},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File"
        }],
        "dnsPolicy": "ClusterFirst",
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "terminationGracePeriodSeconds": 30
    })
}

#[test]
fn seed_pi_job() {
    let uid = "b89bbfc4-a2fc-410a-ab5e-859e83c4aef6";
    let mut job = defaulted(
        "batch",
        "Job",
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "pi", "namespace": "default"},
            "spec": {"parallelism": 2, "completions": 5, "template": {"spec": {
                "containers": [{"name": "pi", "image": "perl", "command": ["perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"]}],
                "restartPolicy": "OnFailure"}}}
        }),
    );
    default_job_selector(&mut job, uid);
    let labels = json!({
        "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "pi",
        "controller-uid": uid, "job-name": "pi"
    });
    let expected_spec = json!({
        "backoffLimit": 6,
        "completionMode": "NonIndexed",
        "completions": 5,
        "parallelism": 2,
        "podReplacementPolicy": "TerminatingOrFailed",
        "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
        "suspend": false,
        "template": {
            "metadata": {"creationTimestamp": null, "labels": labels},
            "spec": {
                "containers": [{
                    "command": ["perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"],
                    "image": "perl",
                    "imagePullPolicy": "Always",
                    "name": "pi",
                    "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File"
                }],
                "dnsPolicy": "ClusterFirst",
                "restartPolicy": "OnFailure",
                "schedulerName": "default-scheduler",
                "securityContext": {},
                "terminationGracePeriodSeconds": 30
            }
        }
    });
    assert_eq!(job["spec"], expected_spec);
    assert_eq!(job["metadata"]["labels"], labels);
    assert_eq!(job["metadata"]["uid"], uid);
    assert!(job["spec"].get("manualSelector").is_none());
    assert_valid("batch", "Job", &job);
}

#[test]
fn seed_nginx_sts_and_headless_service() {
    let sts = defaulted(
        "apps",
        "StatefulSet",
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "nginx-sts", "namespace": "default"},
            "spec": {"serviceName": "nginx-sts", "replicas": 1, "selector": {"matchLabels": {"app": "nginx-sts"}},
                "template": {"metadata": {"labels": {"app": "nginx-sts"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}
        }),
    );
    let expected = json!({
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
        "podManagementPolicy": "OrderedReady",
        "replicas": 1,
        "revisionHistoryLimit": 10,
        "selector": {"matchLabels": {"app": "nginx-sts"}},
        "serviceName": "nginx-sts",
        "template": {"metadata": {"creationTimestamp": null, "labels": {"app": "nginx-sts"}}, "spec": nginx_template_spec()},
        "updateStrategy": {"rollingUpdate": {"partition": 0}, "type": "RollingUpdate"}
    });
    assert_eq!(sts["spec"], expected);
    assert_valid("apps", "StatefulSet", &sts);

    let svc = defaulted(
        "",
        "Service",
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "nginx-sts", "namespace": "default", "labels": {"app": "nginx-sts"}},
            "spec": {"ports": [{"port": 80}], "clusterIP": "None", "selector": {"app": "nginx-sts"}}
        }),
    );
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    assert_eq!(svc["spec"]["sessionAffinity"], "None");
    assert_eq!(svc["spec"]["internalTrafficPolicy"], "Cluster");
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"port": 80, "protocol": "TCP", "targetPort": 80}])
    );
    assert!(svc["spec"].get("externalTrafficPolicy").is_none());
    assert_eq!(svc["status"], json!({"loadBalancer": {}}));
    assert_valid("", "Service", &svc);
}

#[test]
fn seed_nginx_ds() {
    let ds = defaulted(
        "apps",
        "DaemonSet",
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "nginx-ds", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "nginx"}},
                "template": {"metadata": {"labels": {"app": "nginx"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}
        }),
    );
    let expected = json!({
        "revisionHistoryLimit": 10,
        "selector": {"matchLabels": {"app": "nginx"}},
        "template": {"metadata": {"creationTimestamp": null, "labels": {"app": "nginx"}}, "spec": nginx_template_spec()},
        "updateStrategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}, "type": "RollingUpdate"}
    });
    assert_eq!(ds["spec"], expected);
    assert_eq!(ds["status"]["numberReady"], 0);
    assert_valid("apps", "DaemonSet", &ds);
}

#[test]
fn simple_deployment() {
    let d = defaulted(
        "apps",
        "Deployment",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}]}}}
        }),
    );
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(
        d["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
    );
    assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(c["ports"][0]["protocol"], "TCP");
    assert!(
        d["spec"]["template"]["spec"]
            .get("enableServiceLinks")
            .is_none(),
        "pod-only default"
    );
    assert!(
        d["spec"]["template"]["spec"].get("tolerations").is_none(),
        "admission adds tolerations to pods only"
    );
    assert_eq!(d["status"], json!({}));
    assert_valid("apps", "Deployment", &d);
    let recreate = defaulted(
        "apps",
        "Deployment",
        json!({"spec": {"strategy": {"type": "Recreate"}}}),
    );
    assert!(recreate["spec"]["strategy"].get("rollingUpdate").is_none());
}

#[test]
fn seed_pod_gets_admission_and_strategy_fields() {
    let pod = defaulted(
        "",
        "Pod",
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "nginx-sts-0", "namespace": "default", "labels": {"app": "nginx-sts"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx",
                    "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access-45cfx", "readOnly": true}]}],
                "hostname": "nginx-sts-0", "subdomain": "nginx-sts",
                "volumes": [{"name": "kube-api-access-45cfx", "projected": {"sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
                    {"downwardAPI": {"items": [{"fieldRef": {"fieldPath": "metadata.namespace"}, "path": "namespace"}]}}]}}]}
        }),
    );
    let spec = &pod["spec"];
    assert_eq!(spec["enableServiceLinks"], true);
    assert_eq!(spec["preemptionPolicy"], "PreemptLowerPriority");
    assert_eq!(spec["priority"], 0);
    assert_eq!(spec["serviceAccount"], "default");
    assert_eq!(spec["serviceAccountName"], "default");
    assert_eq!(
        spec["tolerations"],
        json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        ])
    );
    let projected = &spec["volumes"][0]["projected"];
    assert_eq!(projected["defaultMode"], 420);
    assert_eq!(
        projected["sources"][0]["serviceAccountToken"]["expirationSeconds"],
        3607
    );
    assert_eq!(
        projected["sources"][2]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"],
        "v1"
    );
    assert_eq!(
        pod["status"],
        json!({"phase": "Pending", "qosClass": "BestEffort"})
    );
    assert_valid("", "Pod", &pod);
    // Defaulting twice changes nothing.
    assert_eq!(defaulted("", "Pod", pod.clone()), pod);
}

#[test]
fn pull_policy_from_image() {
    let cases = [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("nginx:1.25", "IfNotPresent"),
        (
            "nginx@sha256:08bc36ad52474e528cc1ea3426b5e3f4bad8a130318e3140d6cfe29c8892c7ef",
            "IfNotPresent",
        ),
        ("localhost:5000/app", "Always"),
        ("localhost:5000/app:v1", "IfNotPresent"),
        ("registry.k8s.io/pause:3.10", "IfNotPresent"),
        ("Nginx", "IfNotPresent"),
        ("", "IfNotPresent"),
    ];
    for (image, policy) in cases {
        assert_eq!(default_pull_policy(image), policy, "{image}");
    }
}

#[test]
fn pod_spec_nested_defaults() {
    let pod = defaulted(
        "",
        "Pod",
        json!({"metadata": {"name": "p"}, "spec": {
            "hostNetwork": true,
            "containers": [{"name": "c", "image": "busybox:1", "ports": [{"containerPort": 8080}],
                "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                "livenessProbe": {"httpGet": {"port": 8080}},
                "readinessProbe": {"grpc": {"port": 9000}, "periodSeconds": 5},
                "lifecycle": {"preStop": {"httpGet": {"port": 80, "path": "/stop"}}},
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
            "volumes": [{"name": "scratch"}, {"name": "cfg", "configMap": {"name": "cfg"}}, {"name": "s", "secret": {"secretName": "s", "defaultMode": 256}},
                {"name": "h", "hostPath": {"path": "/tmp"}}]
        }}),
    );
    let c = &pod["spec"]["containers"][0];
    assert_eq!(
        c["ports"][0],
        json!({"containerPort": 8080, "protocol": "TCP", "hostPort": 8080})
    );
    assert_eq!(c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
    assert_eq!(
        c["livenessProbe"],
        json!({"httpGet": {"port": 8080, "path": "/", "scheme": "HTTP"},
        "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
    );
    assert_eq!(c["readinessProbe"]["periodSeconds"], 5);
    assert_eq!(c["readinessProbe"]["grpc"]["service"], "");
    assert_eq!(c["lifecycle"]["preStop"]["httpGet"]["scheme"], "HTTP");
    assert_eq!(
        c["resources"]["requests"],
        json!({"cpu": "1", "memory": "1Gi"})
    );
    let vols = &pod["spec"]["volumes"];
    assert_eq!(vols[0]["emptyDir"], json!({}));
    assert_eq!(vols[1]["configMap"]["defaultMode"], 420);
    assert_eq!(vols[2]["secret"]["defaultMode"], 256);
    assert_eq!(vols[3]["hostPath"]["type"], "");
    assert_eq!(pod["status"]["qosClass"], "Guaranteed");
}

#[test]
fn qos_classes() {
    let pod = |res: Value| json!({"spec": {"containers": [{"name": "a", "resources": res}]}});
    assert_eq!(pod_qos_class(&pod(json!({}))), "BestEffort");
    assert_eq!(
        pod_qos_class(&pod(json!({"requests": {"cpu": "100m"}}))),
        "Burstable"
    );
    assert_eq!(
        pod_qos_class(&pod(
            json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1000m", "memory": "1Gi"}})
        )),
        "Guaranteed"
    );
    assert_eq!(
        pod_qos_class(&pod(
            json!({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}})
        )),
        "Burstable"
    );
}

#[test]
fn pod_priority_and_existing_tolerations() {
    let pod = defaulted(
        "",
        "Pod",
        json!({"spec": {"priorityClassName": "system-node-critical", "serviceAccount": "builder",
        "tolerations": [{"operator": "Exists"}], "containers": [{"name": "a", "image": "a"}]}}),
    );
    assert_eq!(pod["spec"]["priority"], 2_000_001_000);
    assert_eq!(pod["spec"]["serviceAccountName"], "builder");
    assert_eq!(pod["spec"]["tolerations"], json!([{"operator": "Exists"}]));
    let custom = defaulted(
        "",
        "Pod",
        json!({"spec": {"priorityClassName": "high", "containers": []}}),
    );
    assert!(
        custom["spec"].get("priority").is_none(),
        "the server resolves other classes"
    );
}

#[test]
fn service_defaults() {
    let np = defaulted(
        "",
        "Service",
        json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "targetPort": "http"}]}}),
    );
    assert_eq!(np["spec"]["externalTrafficPolicy"], "Cluster");
    assert_eq!(np["spec"]["ports"][0]["targetPort"], "http");
    let lb = defaulted(
        "",
        "Service",
        json!({"spec": {"type": "LoadBalancer", "sessionAffinity": "ClientIP", "ports": [{"port": 443}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}}),
    );
    assert_eq!(lb["spec"]["allocateLoadBalancerNodePorts"], true);
    assert_eq!(
        lb["spec"]["sessionAffinityConfig"],
        json!({"clientIP": {"timeoutSeconds": 10800}})
    );
    assert_eq!(lb["status"]["loadBalancer"]["ingress"][0]["ipMode"], "VIP");
    let en = defaulted(
        "",
        "Service",
        json!({"spec": {"type": "ExternalName", "externalName": "example.com"}}),
    );
    assert!(en["spec"].get("internalTrafficPolicy").is_none());
    assert!(en["spec"].get("externalTrafficPolicy").is_none());
}

#[test]
fn namespace_secret_and_volumes() {
    let ns = defaulted("", "Namespace", json!({"metadata": {"name": "team-a"}}));
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team-a"
    );
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(ns["status"]["phase"], "Active");
    let terminating = defaulted(
        "",
        "Namespace",
        json!({"metadata": {"name": "x", "deletionTimestamp": "2024-01-01T00:00:00Z"}, "spec": {}}),
    );
    assert!(terminating["spec"].get("finalizers").is_none());

    let secret = defaulted(
        "",
        "Secret",
        json!({"metadata": {"name": "s"}, "data": {"a": "YQ=="}, "stringData": {"user": "admin"}}),
    );
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(secret["data"], json!({"a": "YQ==", "user": "YWRtaW4="}));
    assert!(secret.get("stringData").is_none());

    let pvc = defaulted(
        "",
        "PersistentVolumeClaim",
        json!({"spec": {"accessModes": ["ReadWriteOnce"]}}),
    );
    assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
    assert_eq!(pvc["status"]["phase"], "Pending");
    let pv = defaulted(
        "",
        "PersistentVolume",
        json!({"spec": {"hostPath": {"path": "/data"}}}),
    );
    assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Retain");
    assert_eq!(pv["spec"]["volumeMode"], "Filesystem");
    assert_eq!(pv["spec"]["hostPath"]["type"], "");
    assert_eq!(pv["status"]["phase"], "Pending");

    let ep = defaulted(
        "",
        "Endpoints",
        json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]}),
    );
    assert_eq!(ep["subsets"][0]["ports"][0]["protocol"], "TCP");
    let node = defaulted("", "Node", json!({"status": {"capacity": {"cpu": "4"}}}));
    assert_eq!(node["status"]["allocatable"], json!({"cpu": "4"}));
    let cm = defaulted("", "ConfigMap", json!({"data": {"a": "b"}}));
    assert_eq!(cm, json!({"data": {"a": "b"}}));
}

#[test]
fn replication_controller_and_pod_template() {
    let rc = defaulted(
        "",
        "ReplicationController",
        json!({"metadata": {"name": "rc"},
        "spec": {"template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "a", "image": "a"}]}}}}),
    );
    assert_eq!(rc["spec"]["replicas"], 1);
    assert_eq!(rc["spec"]["selector"], json!({"app": "a"}));
    assert_eq!(rc["metadata"]["labels"], json!({"app": "a"}));
    assert_eq!(rc["spec"]["template"]["spec"]["dnsPolicy"], "ClusterFirst");
    let pt = defaulted(
        "",
        "PodTemplate",
        json!({"template": {"spec": {"containers": [{"name": "a", "image": "a"}]}}}),
    );
    assert_eq!(
        pt["template"]["metadata"],
        json!({"creationTimestamp": null})
    );
    assert_eq!(pt["template"]["spec"]["restartPolicy"], "Always");
}

#[test]
fn job_defaults_variants() {
    let only_parallelism = defaulted("batch", "Job", json!({"spec": {"parallelism": 3}}));
    assert!(only_parallelism["spec"].get("completions").is_none());
    let per_index = defaulted(
        "batch",
        "Job",
        json!({"spec": {"completionMode": "Indexed", "completions": 3, "backoffLimitPerIndex": 1}}),
    );
    assert_eq!(per_index["spec"]["backoffLimit"], 2147483647);
    assert_eq!(per_index["spec"]["parallelism"], 1);
    let with_policy = defaulted(
        "batch",
        "Job",
        json!({"spec": {"podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}}}),
    );
    assert_eq!(with_policy["spec"]["podReplacementPolicy"], "Failed");
    assert_eq!(
        with_policy["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["status"],
        "True"
    );

    let mut manual = defaulted(
        "batch",
        "Job",
        json!({"metadata": {"name": "m"}, "spec": {"manualSelector": true,
        "selector": {"matchLabels": {"x": "y"}}, "template": {"metadata": {"labels": {"x": "y"}}}}}),
    );
    default_job_selector(&mut manual, "u1");
    assert_eq!(
        manual["spec"]["selector"],
        json!({"matchLabels": {"x": "y"}})
    );
    assert_eq!(
        manual["spec"]["template"]["metadata"]["labels"],
        json!({"x": "y"})
    );

    let mut labelled = defaulted(
        "batch",
        "Job",
        json!({"metadata": {"name": "l"}, "spec": {"template": {"metadata": {"labels": {"app": "l"}}}}}),
    );
    default_job_selector(&mut labelled, "u2");
    assert_eq!(
        labelled["metadata"]["labels"],
        json!({"app": "l"}),
        "labels copied at create are kept"
    );
}

#[test]
fn cron_job_defaults() {
    let cj = defaulted(
        "batch",
        "CronJob",
        json!({"metadata": {"name": "c"}, "spec": {"schedule": "*/1 * * * *",
        "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "busybox"}], "restartPolicy": "OnFailure"}}}}}}),
    );
    let spec = &cj["spec"];
    assert_eq!(spec["concurrencyPolicy"], "Allow");
    assert_eq!(spec["suspend"], false);
    assert_eq!(spec["successfulJobsHistoryLimit"], 3);
    assert_eq!(spec["failedJobsHistoryLimit"], 1);
    assert_eq!(
        spec["jobTemplate"]["metadata"],
        json!({"creationTimestamp": null})
    );
    assert!(
        spec["jobTemplate"]["spec"].get("backoffLimit").is_none(),
        "Job defaults do not apply to job templates"
    );
    assert_eq!(
        spec["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "Always"
    );
    assert_valid("batch", "CronJob", &cj);
}

#[test]
fn stateful_set_claim_templates_and_strategies() {
    let sts = defaulted(
        "apps",
        "StatefulSet",
        json!({"spec": {"updateStrategy": {"type": "RollingUpdate"},
        "volumeClaimTemplates": [{"metadata": {"name": "www"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}),
    );
    assert!(
        sts["spec"]["updateStrategy"].get("rollingUpdate").is_none(),
        "an explicit type gets no rollingUpdate"
    );
    let t = &sts["spec"]["volumeClaimTemplates"][0];
    assert_eq!(t["apiVersion"], "v1");
    assert_eq!(t["kind"], "PersistentVolumeClaim");
    assert_eq!(
        t["metadata"],
        json!({"name": "www", "creationTimestamp": null})
    );
    assert_eq!(t["spec"]["volumeMode"], "Filesystem");
    assert_eq!(t["status"], json!({"phase": "Pending"}));
    let on_delete = defaulted(
        "apps",
        "DaemonSet",
        json!({"spec": {"updateStrategy": {"type": "OnDelete"}}}),
    );
    assert!(on_delete["spec"]["updateStrategy"]
        .get("rollingUpdate")
        .is_none());
}

#[test]
fn other_groups() {
    let np = defaulted(
        "networking.k8s.io",
        "NetworkPolicy",
        json!({"spec": {"podSelector": {},
        "ingress": [{"ports": [{"port": 80}]}], "egress": [{}]}}),
    );
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(np["spec"]["ingress"][0]["ports"][0]["protocol"], "TCP");
    let pc = defaulted("scheduling.k8s.io", "PriorityClass", json!({"value": 10}));
    assert_eq!(pc["preemptionPolicy"], "PreemptLowerPriority");
    let sc = defaulted(
        "storage.k8s.io",
        "StorageClass",
        json!({"provisioner": "x.io/y"}),
    );
    assert_eq!(
        (sc["reclaimPolicy"].clone(), sc["volumeBindingMode"].clone()),
        (json!("Delete"), json!("Immediate"))
    );
    let es = defaulted(
        "discovery.k8s.io",
        "EndpointSlice",
        json!({"ports": [{"port": 80}]}),
    );
    assert_eq!(
        es["ports"][0],
        json!({"port": 80, "name": "", "protocol": "TCP"})
    );
    let rb = defaulted(
        "rbac.authorization.k8s.io",
        "RoleBinding",
        json!({"subjects": [
        {"kind": "User", "name": "jane"}, {"kind": "ServiceAccount", "name": "sa", "namespace": "d"}]}),
    );
    assert_eq!(rb["subjects"][0]["apiGroup"], "rbac.authorization.k8s.io");
    assert!(rb["subjects"][1].get("apiGroup").is_none());
    let hpa = defaulted(
        "autoscaling",
        "HorizontalPodAutoscaler",
        json!({"apiVersion": "autoscaling/v2",
        "spec": {"maxReplicas": 5, "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}}),
    );
    assert_eq!(hpa["spec"]["minReplicas"], 1);
    assert_eq!(
        hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        80
    );
    assert_eq!(
        hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"],
        60
    );
    assert_eq!(hpa["spec"]["behavior"]["scaleDown"]["selectPolicy"], "Max");
    assert_eq!(
        hpa["spec"]["behavior"]["scaleUp"]["policies"][0],
        json!({"type": "Pods", "value": 4, "periodSeconds": 15})
    );
    let only_up = defaulted(
        "autoscaling",
        "HorizontalPodAutoscaler",
        json!({"apiVersion": "autoscaling/v2",
        "spec": {"maxReplicas": 5, "behavior": {"scaleUp": {"stabilizationWindowSeconds": 5}}}}),
    );
    // The scale-down window stays unset (the controller's flag decides), as upstream's defaults.
    assert_eq!(
        only_up["spec"]["behavior"]["scaleDown"],
        json!({"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]})
    );
    let crd = defaulted(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        json!({"spec": {"names": {"kind": "Widget", "plural": "widgets"}}}),
    );
    assert_eq!(crd["spec"]["names"]["singular"], "widget");
    assert_eq!(crd["spec"]["names"]["listKind"], "WidgetList");
    assert_eq!(crd["spec"]["conversion"], json!({"strategy": "None"}));
    let unknown = defaulted("example.com", "Widget", json!({"spec": {}}));
    assert_eq!(unknown, json!({"spec": {}}));
}

#[test]
fn defaulted_update_of_seed_deployment_is_valid() {
    let old = defaulted(
        "apps",
        "Deployment",
        json!({"metadata": {"name": "web", "namespace": "default", "uid": "1"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}}),
    );
    let mut new = old.clone();
    new["spec"]["replicas"] = json!(3);
    new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27");
    let errs = validate_update("apps", "Deployment", &new, &old);
    assert!(errs.is_empty(), "{errs:?}");
}
