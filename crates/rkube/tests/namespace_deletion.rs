//! The namespace controller of `rkube server`, driven by kubectl: `kubectl delete ns` of a namespace
//! holding objects of twenty-odd kinds (a custom resource included) ends with the namespace gone and
//! nothing left; an object with a custom finalizer keeps the namespace `Terminating` with the
//! `NamespaceFinalizersRemaining` condition until the finalizer is removed.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

fn wait_until(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

/// One object of each kind, all in namespace `doomed`.
const CONTENT: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: cm}
data: {k: v}
---
apiVersion: v1
kind: Secret
metadata: {name: secret}
stringData: {k: v}
---
apiVersion: v1
kind: Service
metadata: {name: svc}
spec:
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: nginx}]}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: rs}
spec:
  replicas: 1
  selector: {matchLabels: {app: rs}}
  template:
    metadata: {labels: {app: rs}}
    spec: {containers: [{name: c, image: nginx}]}
---
apiVersion: v1
kind: Pod
metadata: {name: pod}
spec: {containers: [{name: c, image: nginx}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: job}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: cron}
spec:
  schedule: "0 0 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: sa}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: role}
rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: rb}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: role}
subjects: [{kind: ServiceAccount, name: sa}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: ep}
subsets: [{addresses: [{ip: 10.0.0.1}], ports: [{port: 80}]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: slice}
addressType: IPv4
endpoints: [{addresses: [10.0.0.1]}]
ports: [{port: 80}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: pvc}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: pdb}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
---
apiVersion: v1
kind: LimitRange
metadata: {name: limits}
spec:
  limits: [{type: Container, default: {cpu: 500m}}]
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: quota}
spec:
  hard: {pods: "100"}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: lease}
spec: {holderIdentity: me}
---
apiVersion: v1
kind: Event
metadata: {name: ev}
involvedObject: {kind: Pod, name: pod, namespace: doomed}
reason: Testing
message: hello
type: Normal
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: np}
spec:
  podSelector: {}
  policyTypes: [Ingress]
---
apiVersion: apps/v1
kind: ControllerRevision
metadata: {name: rev}
revision: 1
data: {}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: hpa}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 3
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: widget}
spec: {size: 3}
"#;

const KINDS: &[&str] = &[
    "configmaps",
    "secrets",
    "services",
    "deployments.apps",
    "replicasets.apps",
    "pods",
    "jobs.batch",
    "cronjobs.batch",
    "serviceaccounts",
    "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
    "endpoints",
    "endpointslices.discovery.k8s.io",
    "persistentvolumeclaims",
    "poddisruptionbudgets.policy",
    "limitranges",
    "resourcequotas",
    "leases.coordination.k8s.io",
    "events",
    "networkpolicies.networking.k8s.io",
    "controllerrevisions.apps",
    "horizontalpodautoscalers.autoscaling",
    "widgets.example.com",
];

fn listed(c: &Cluster, kind: &str, ns: &str) -> String {
    c.kubectl(&["get", kind, "-n", ns, "-o", "name"])
}

#[test]
fn deleting_a_namespace_removes_everything_in_it() {
    let c = Cluster::start_all(Backend::Sqlite, &["--disable-scheduler"]);
    c.kubectl_in(&["apply", "-f", "-"], Some(CRD));
    c.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ]);
    c.kubectl(&["create", "namespace", "doomed"]);
    c.kubectl_in(&["apply", "-n", "doomed", "-f", "-"], Some(CONTENT));
    // The Deployment's ReplicaSet, both ReplicaSets' pods and the Job's pod exist before the deletion
    // (with the bare pod: four).
    wait_until(
        Duration::from_secs(30),
        "controllers to create pods",
        || listed(&c, "pods", "doomed").lines().count() == 4,
    );
    for kind in KINDS {
        assert!(
            !listed(&c, kind, "doomed").trim().is_empty(),
            "no {kind} created"
        );
    }

    c.kubectl(&["delete", "namespace", "doomed", "--timeout=50s"]);
    assert!(c
        .kubectl(&[
            "get",
            "namespace",
            "doomed",
            "--ignore-not-found",
            "-o",
            "name"
        ])
        .trim()
        .is_empty());
    for kind in KINDS {
        assert_eq!(listed(&c, kind, "doomed").trim(), "", "{kind} left behind");
    }
}

#[test]
fn a_finalizer_keeps_the_namespace_terminating_until_removed() {
    let c = Cluster::start_all(Backend::Sqlite, &["--disable-scheduler"]);
    c.kubectl(&["create", "namespace", "held"]);
    c.kubectl_in(
        &["apply", "-n", "held", "-f", "-"],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pinned\n  finalizers: [example.com/hold]\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: free\n"),
    );
    c.kubectl(&["delete", "namespace", "held", "--wait=false"]);
    let condition = |t: &str| {
        c.kubectl(&[
            "get",
            "namespace",
            "held",
            "-o",
            &format!(
                "jsonpath={{.status.phase}}|{{.status.conditions[?(@.type==\"{t}\")].status}}|{{.status.conditions[?(@.type==\"{t}\")].reason}}|{{.status.conditions[?(@.type==\"{t}\")].message}}"
            ),
        ])
    };
    wait_until(
        Duration::from_secs(20),
        "NamespaceFinalizersRemaining",
        || {
            condition("NamespaceFinalizersRemaining")
            == "Terminating|True|SomeFinalizerRemain|Some finalizers are remaining: example.com/hold in 1 resource instances"
        },
    );
    assert_eq!(
        condition("NamespaceContentRemaining"),
        "Terminating|True|SomeResourcesRemain|Some resources are remaining: configmaps. has 1 resource instances"
    );
    assert_eq!(
        condition("NamespaceDeletionDiscoveryFailure"),
        "Terminating|False|ResourcesDiscovered|All resources successfully discovered"
    );
    assert_eq!(
        condition("NamespaceDeletionContentFailure"),
        "Terminating|False|ContentDeleted|All content successfully deleted, may be waiting on finalization"
    );
    // Everything without a finalizer is gone; the held object waits, deleting.
    assert_eq!(listed(&c, "configmaps", "held").trim(), "configmap/pinned");
    assert!(!c
        .kubectl(&[
            "get",
            "cm",
            "pinned",
            "-n",
            "held",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}"
        ])
        .is_empty());

    c.kubectl(&[
        "patch",
        "configmap",
        "pinned",
        "-n",
        "held",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    wait_until(Duration::from_secs(30), "the namespace to go", || {
        c.kubectl(&[
            "get",
            "namespace",
            "held",
            "--ignore-not-found",
            "-o",
            "name",
        ])
        .trim()
        .is_empty()
    });
}
