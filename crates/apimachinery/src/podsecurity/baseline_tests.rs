//! The cases of upstream's `check_*_test.go` for the baseline checks, with their exact texts.

use serde_json::{json, Value};

use super::*;

type Check = fn(&Value, &Value) -> Option<Violation>;

#[track_caller]
fn forbids(check: Check, meta: Value, spec: Value, reason: &str, detail: &str) {
    let got = check(&meta, &spec).expect("expected a violation");
    assert_eq!(got.reason, reason);
    assert_eq!(got.detail, detail);
}

#[track_caller]
fn allows(check: Check, meta: Value, spec: Value) {
    assert_eq!(check(&meta, &spec), None);
}

fn sc(name: &str, sc: Value) -> Value {
    json!({"name": name, "securityContext": sc})
}

const AA: &str = "container.apparmor.security.beta.kubernetes.io/";

#[test]
fn app_armor() {
    let f = app_armor_profile_1_0;
    for annotations in [
        json!({format!("{AA}test"): "runtime/default", "env": "prod"}),
        json!({format!("{AA}test"): "localhost/sec-profile01"}),
        json!({format!("{AA}a"): ""}),
        json!({}),
    ] {
        allows(f, json!({"annotations": annotations}), json!({}));
    }
    allows(
        f,
        json!({}),
        json!({"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
            "containers": [sc("a", json!({"appArmorProfile": {"type": "Localhost", "localhostProfile": "p"}}))]}),
    );
    forbids(
        f,
        json!({}),
        json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}),
        "forbidden AppArmor profile",
        r#"pod must not set AppArmor profile type to "Unconfined""#,
    );
    forbids(
        f,
        json!({}),
        json!({"containers": [{"name": "foo"}],
            "initContainers": [sc("bar", json!({"appArmorProfile": {"type": "Unconfined"}}))]}),
        "forbidden AppArmor profile",
        r#"container "bar" must not set AppArmor profile type to "Unconfined""#,
    );
    forbids(
        f,
        json!({"annotations": {
            AA: "bogus",
            format!("{AA}a"): "",
            format!("{AA}b"): "runtime/default",
            format!("{AA}c"): "localhost/",
            format!("{AA}d"): "localhost/foo",
            format!("{AA}e"): "unconfined",
            format!("{AA}f"): "unknown",
        }}),
        json!({}),
        "forbidden AppArmor profiles",
        &format!(
            r#"annotations must not set AppArmor profile type to "{AA}="bogus"", "{AA}e="unconfined"", "{AA}f="unknown"""#
        ),
    );
    // Field and annotation together.
    forbids(
        f,
        json!({"annotations": {format!("{AA}c"): "unconfined"}}),
        json!({"containers": [sc("c", json!({"appArmorProfile": {"type": "Unconfined"}}))]}),
        "forbidden AppArmor profiles",
        &format!(
            r#"container "c" and annotation must not set AppArmor profile type to "Unconfined", "{AA}c="unconfined"""#
        ),
    );
}

#[test]
fn capabilities_baseline() {
    let add = |caps: &[&str]| json!({"capabilities": {"add": caps}});
    forbids(
        capabilities_baseline_1_0,
        json!({}),
        json!({"containers": [sc("a", add(&["FOO", "BAR"])), sc("b", add(&["BAR", "BAZ"])),
            sc("c", add(&["NET_BIND_SERVICE", "CHOWN"]))]}),
        "non-default capabilities",
        r#"containers "a", "b" must not include "BAR", "BAZ", "FOO" in securityContext.capabilities.add"#,
    );
    allows(
        capabilities_baseline_1_0,
        json!({}),
        json!({"containers": [sc("a", add(&["AUDIT_WRITE", "SYS_CHROOT"]))]}),
    );
}

#[test]
fn host_namespaces() {
    forbids(
        host_namespaces_1_0,
        json!({}),
        json!({"hostNetwork": true, "hostIPC": true, "hostPID": true}),
        "host namespaces",
        "hostNetwork=true, hostPID=true, hostIPC=true",
    );
    forbids(
        host_namespaces_1_0,
        json!({}),
        json!({"hostPID": true, "hostIPC": false}),
        "host namespaces",
        "hostPID=true",
    );
    allows(
        host_namespaces_1_0,
        json!({}),
        json!({"hostNetwork": false}),
    );
}

#[test]
fn host_path_volumes() {
    forbids(
        host_path_volumes_1_0,
        json!({}),
        json!({"volumes": [{"name": "a", "hostPath": {"path": ""}},
            {"name": "b", "hostPath": {"path": ""}}, {"name": "c", "emptyDir": {}}]}),
        "hostPath volumes",
        r#"volumes "a", "b""#,
    );
    forbids(
        host_path_volumes_1_0,
        json!({}),
        json!({"volumes": [{"name": "a", "hostPath": {"path": "/"}}]}),
        "hostPath volumes",
        r#"volume "a""#,
    );
}

#[test]
fn host_ports() {
    forbids(
        host_ports_1_0,
        json!({}),
        json!({"containers": [{"name": "a", "ports": [{"hostPort": 0}]},
            {"name": "b", "ports": [{"hostPort": 0}, {"hostPort": 20}]}]}),
        "hostPort",
        r#"container "b" uses hostPort 20"#,
    );
    forbids(
        host_ports_1_0,
        json!({}),
        json!({"containers": [{"name": "a", "ports": [{"hostPort": 0}]},
            {"name": "b", "ports": [{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 20}]},
            {"name": "c", "ports": [{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 30}]}]}),
        "hostPort",
        r#"containers "b", "c" use hostPorts 10, 20, 30"#,
    );
    // Upstream sorts the ports as text.
    forbids(
        host_ports_1_0,
        json!({}),
        json!({"initContainers": [{"name": "i", "ports": [{"hostPort": 9}, {"hostPort": 80}]}]}),
        "hostPort",
        r#"container "i" uses hostPorts 80, 9"#,
    );
}

#[test]
fn host_probes_and_lifecycle() {
    let f = host_probes_and_host_lifecycle_1_34;
    forbids(
        f,
        json!({}),
        json!({"containers": [
            {"name": "b", "livenessProbe": {"httpGet": {"host": "h1", "port": 80}},
                "lifecycle": {"preStop": {"tcpSocket": {"host": "h2", "port": 1}}}},
            {"name": "a", "startupProbe": {"tcpSocket": {"host": "h1", "port": 1}}},
            {"name": "ok", "readinessProbe": {"httpGet": {"host": "", "port": 80}}},
        ]}),
        "probe or lifecycle host",
        r#"containers "a", "b" use probe or lifecycle hosts "h1", "h2""#,
    );
    allows(
        f,
        json!({}),
        json!({"containers": [{"name": "a", "livenessProbe": {"httpGet": {"port": 80}}}]}),
    );
}

#[test]
fn privileged() {
    forbids(
        privileged_1_0,
        json!({}),
        json!({"containers": [{"name": "a"}, sc("b", json!({})),
            sc("c", json!({"privileged": false})), sc("d", json!({"privileged": true})),
            sc("e", json!({"privileged": true}))]}),
        "privileged",
        r#"containers "d", "e" must not set securityContext.privileged=true"#,
    );
}

fn proc_mount_spec(host_users: bool) -> Value {
    json!({"hostUsers": host_users, "containers": [{"name": "a"}, sc("b", json!({})),
        sc("c", json!({"procMount": "Default"})), sc("d", json!({"procMount": "Unmasked"})),
        sc("e", json!({"procMount": "other"}))]})
}

const PROC_MOUNT: &str =
    r#"containers "d", "e" must not set securityContext.procMount to "Unmasked", "other""#;

#[test]
fn proc_mount() {
    forbids(
        proc_mount_1_35_baseline,
        json!({}),
        proc_mount_spec(true),
        "procMount",
        PROC_MOUNT,
    );
    allows(proc_mount_1_35_baseline, json!({}), proc_mount_spec(false));
    // The strict revision (also restricted's procMount_restricted) ignores user namespaces.
    for host_users in [true, false] {
        forbids(
            proc_mount_1_0,
            json!({}),
            proc_mount_spec(host_users),
            "procMount",
            PROC_MOUNT,
        );
    }
}

#[test]
fn se_linux_options() {
    let f = se_linux_options_1_31;
    let ok = || {
        [
            "container_t",
            "container_init_t",
            "container_kvm_t",
            "container_engine_t",
        ]
        .iter()
        .zip(["a", "b", "c", "d"])
        .map(|(t, n)| sc(n, json!({"seLinuxOptions": {"type": t}})))
        .collect::<Vec<_>>()
    };
    let bad = || {
        vec![
            sc("e", json!({"seLinuxOptions": {"type": "bar"}})),
            sc("f", json!({"seLinuxOptions": {"user": "bar"}})),
            sc("g", json!({"seLinuxOptions": {"role": "baz"}})),
        ]
    };
    let pod_bad = json!({"seLinuxOptions": {"type": "foo", "user": "bar", "role": "baz"}});
    let mut all = ok();
    all.extend(bad());
    forbids(
        f,
        json!({}),
        json!({"securityContext": pod_bad, "containers": all}),
        "seLinuxOptions",
        r#"pod and containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: types "bar", "foo"; user may not be set; role may not be set"#,
    );
    forbids(
        f,
        json!({}),
        json!({"securityContext": pod_bad, "containers": ok()}),
        "seLinuxOptions",
        r#"pod set forbidden securityContext.seLinuxOptions: type "foo"; user may not be set; role may not be set"#,
    );
    let mut all = ok();
    all.extend(bad());
    forbids(
        f,
        json!({}),
        json!({"securityContext": {"seLinuxOptions": {}}, "containers": all}),
        "seLinuxOptions",
        r#"containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: type "bar"; user may not be set; role may not be set"#,
    );
    for (opts, detail) in [
        (json!({"type": "bad"}), r#"type "bad""#),
        (json!({"user": "bad"}), "user may not be set"),
        (json!({"role": "bad"}), "role may not be set"),
    ] {
        forbids(
            f,
            json!({}),
            json!({"securityContext": {"seLinuxOptions": opts}}),
            "seLinuxOptions",
            &format!("pod set forbidden securityContext.seLinuxOptions: {detail}"),
        );
    }
    // container_engine_t is allowed from 1.31 only.
    let engine =
        json!({"containers": [sc("d", json!({"seLinuxOptions": {"type": "container_engine_t"}}))]});
    allows(f, json!({}), engine.clone());
    forbids(
        se_linux_options_1_0,
        json!({}),
        engine,
        "seLinuxOptions",
        r#"container "d" set forbidden securityContext.seLinuxOptions: type "container_engine_t""#,
    );
}

const SA: &str = "seccomp.security.alpha.kubernetes.io/pod";
const SCP: &str = "container.seccomp.security.alpha.kubernetes.io/";

#[test]
fn seccomp_baseline_annotations() {
    let f = seccomp_profile_baseline_1_0;
    let abc = json!({"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]});
    forbids(
        f,
        json!({"annotations": {SA: "unconfined"}}),
        json!({}),
        "seccompProfile",
        r#"forbidden annotation seccomp.security.alpha.kubernetes.io/pod="unconfined""#,
    );
    forbids(
        f,
        json!({"annotations": {SA: "unconfined", format!("{SCP}a"): "unconfined",
            format!("{SCP}b"): "unknown", format!("{SCP}c"): "localhost/p", format!("{SCP}z"): "bad"}}),
        abc,
        "seccompProfile",
        &format!(
            r#"forbidden annotations {SCP}a="unconfined", {SCP}b="unknown", {SA}="unconfined""#
        ),
    );
    allows(
        f,
        json!({"annotations": {SA: "runtime/default"}}),
        json!({}),
    );
}

fn seccomp_containers() -> Value {
    let c = |n: &str, t: &str| sc(n, json!({"seccompProfile": {"type": t}}));
    json!([{"name": "a"}, sc("b", json!({})), c("c", "Unconfined"), c("d", "Unconfined"),
        c("e", "RuntimeDefault"), c("f", "Localhost")])
}

#[test]
fn seccomp_baseline_fields() {
    let f = seccomp_profile_baseline_1_19;
    forbids(
        f,
        json!({}),
        json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}, "containers": [{"name": "a"}]}),
        "seccompProfile",
        r#"pod must not set securityContext.seccompProfile.type to "Unconfined""#,
    );
    forbids(
        f,
        json!({}),
        json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}, "containers": seccomp_containers()}),
        "seccompProfile",
        r#"containers "c", "d" must not set securityContext.seccompProfile.type to "Unconfined""#,
    );
    forbids(
        f,
        json!({}),
        json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}, "containers": seccomp_containers()}),
        "seccompProfile",
        r#"pod and containers "c", "d" must not set securityContext.seccompProfile.type to "Unconfined""#,
    );
    // Unset is fine at baseline.
    allows(f, json!({}), json!({"containers": [{"name": "a"}]}));
}

#[test]
fn sysctls() {
    let pod = |names: &[&str]| {
        let list: Vec<Value> = names
            .iter()
            .map(|n| json!({"name": n, "value": "1"}))
            .collect();
        json!({"securityContext": {"sysctls": list}})
    };
    forbids(
        sysctls_1_0,
        json!({}),
        pod(&["a", "b"]),
        "forbidden sysctls",
        "a, b",
    );
    let reserved = pod(&["net.ipv4.ip_local_reserved_ports"]);
    forbids(
        sysctls_1_0,
        json!({}),
        reserved.clone(),
        "forbidden sysctls",
        "net.ipv4.ip_local_reserved_ports",
    );
    allows(sysctls_1_27, json!({}), reserved);
    let keepalive = pod(&["net.ipv4.tcp_keepalive_time", "kernel.shm_rmid_forced"]);
    forbids(
        sysctls_1_27,
        json!({}),
        keepalive.clone(),
        "forbidden sysctls",
        "net.ipv4.tcp_keepalive_time",
    );
    allows(sysctls_1_29, json!({}), keepalive);
    let rmem = pod(&["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"]);
    forbids(
        sysctls_1_29,
        json!({}),
        rmem.clone(),
        "forbidden sysctls",
        "net.ipv4.tcp_rmem, net.ipv4.tcp_wmem",
    );
    allows(sysctls_1_32, json!({}), rmem);
}

#[test]
fn windows_host_process() {
    let wo = |hp: Value| json!({"windowsOptions": {"hostProcess": hp}});
    forbids(
        windows_host_process_1_0,
        json!({}),
        json!({"securityContext": wo(json!(true)), "containers": [{"name": "a"}, sc("b", json!({})),
            sc("c", json!({"windowsOptions": {}})), sc("d", wo(json!(false))),
            sc("e", wo(json!(true))), sc("f", wo(json!(true)))]}),
        "hostProcess",
        r#"pod and containers "e", "f" must not set securityContext.windowsOptions.hostProcess=true"#,
    );
    forbids(
        windows_host_process_1_0,
        json!({}),
        json!({"containers": [sc("e", wo(json!(true)))]}),
        "hostProcess",
        r#"container "e" must not set securityContext.windowsOptions.hostProcess=true"#,
    );
}
