//! Removal of stale UDP conntrack entries after a sync (upstream `pkg/proxy/conntrack/cleanup.go`).
//! UDP has no connection to break: without this, a client keeps sending to an endpoint that is
//! gone (its entry is refreshed by every packet), or keeps hitting the reject of a Service that
//! has since got endpoints.
//!
//! Differs: upstream talks netlink and filters the conntrack table itself; this runs `conntrack -D`
//! with upstream's filters, one command per flow set.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use crate::endpointschangetracker::EndpointsUpdateResult;
use crate::exec::Exec;
use crate::servicechangetracker::{Protocol, ServicePortMap, ServiceUpdateResult};

/// The `conntrack` arguments of each deletion a sync calls for (pure).
pub fn stale_flow_filters(
    services: &ServicePortMap,
    svc_result: &ServiceUpdateResult,
    ep_result: &EndpointsUpdateResult,
) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut seen = HashSet::new();
    let mut push = |args: Vec<String>| {
        if seen.insert(args.clone()) {
            out.push(args);
        }
    };
    let udp = |more: Vec<String>| {
        let mut v = vec!["-D".to_string(), "-p".to_string(), "udp".to_string()];
        v.extend(more);
        v
    };
    for ip in &svc_result.deleted_udp_cluster_ips {
        push(udp(vec!["--orig-dst".into(), ip.to_string()]));
    }
    // Entries of a Service that had no endpoints (they lead nowhere).
    for spn in &ep_result.newly_active_udp_services {
        let Some(svc) = services.get(spn) else {
            continue;
        };
        for ip in std::iter::once(&svc.cluster_ip)
            .chain(svc.external_ips.iter())
            .chain(svc.load_balancer_vips.iter())
        {
            push(udp(vec![
                "--orig-dst".into(),
                ip.to_string(),
                "--orig-port-dst".into(),
                svc.port.to_string(),
            ]));
        }
        if svc.node_port != 0 {
            push(udp(vec![
                "--orig-port-dst".into(),
                svc.node_port.to_string(),
            ]));
        }
    }
    // Entries DNATed to an endpoint that went away.
    for (spn, ep) in &ep_result.deleted_udp_endpoints {
        if spn.protocol != Protocol::Udp {
            continue;
        }
        let Some(svc) = services.get(spn) else {
            // The whole Service went: its cluster IP entries are cleared above when it was UDP.
            push(udp(vec!["--reply-src".into(), ep.to_string()]));
            continue;
        };
        let ep_s = ep.to_string();
        for ip in std::iter::once(&svc.cluster_ip)
            .chain(svc.external_ips.iter())
            .chain(svc.load_balancer_vips.iter())
        {
            push(udp(vec![
                "--orig-dst".into(),
                ip.to_string(),
                "--dst-nat".into(),
                ep_s.clone(),
            ]));
        }
        if svc.node_port != 0 {
            push(udp(vec![
                "--orig-port-dst".into(),
                svc.node_port.to_string(),
                "--dst-nat".into(),
                ep_s.clone(),
            ]));
        }
    }
    out
}

/// Runs the deletions; "0 flow entries have been deleted" is an error exit of `conntrack` and
/// means nothing to clear. Returns how many commands failed otherwise.
pub fn clear(exec: &Exec, filters: &[Vec<String>]) -> usize {
    let mut failed = 0;
    for f in filters {
        let args: Vec<&str> = f.iter().map(|s| s.as_str()).collect();
        match exec.run("conntrack", &args, None) {
            Ok(_) => {}
            Err(crate::exec::ExecError::Failed { stderr, .. })
                if stderr.contains("0 flow entries") => {}
            Err(e) => {
                failed += 1;
                tracing::warn!(error = %e, "conntrack cleanup failed");
            }
        }
    }
    failed
}

/// Convenience for callers that know an address only.
pub fn ip_filter(ip: Ipv4Addr) -> Vec<String> {
    vec![
        "-D".into(),
        "-p".into(),
        "udp".into(),
        "--orig-dst".into(),
        ip.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpointschangetracker::tests::slice;
    use crate::endpointschangetracker::{
        apply_endpoints_changes, EndpointsChangeTracker, EndpointsMap,
    };
    use crate::servicechangetracker::tests::svc;
    use crate::servicechangetracker::{apply_service_changes, ServiceChangeTracker};

    #[test]
    fn removed_udp_endpoint_and_newly_active_service_are_cleared() {
        let mut st = ServiceChangeTracker::default();
        st.update(
            None,
            Some(&svc(
                "kube-system",
                "dns",
                "10.96.0.10",
                &[("dns", 53, "UDP")],
            )),
        );
        let mut services = ServicePortMap::new();
        let sr = apply_service_changes(&mut services, &mut st);
        let mut et = EndpointsChangeTracker::new("n");
        let two = slice(
            "kube-system",
            "dns",
            "dns-1",
            ("dns", 53, "UDP"),
            &[
                ("10.1.0.1", "", true, true, false),
                ("10.1.0.2", "", true, true, false),
            ],
        );
        et.endpoint_slice_update(&two, false);
        let mut eps = EndpointsMap::new();
        let er = apply_endpoints_changes(&mut eps, &mut et);
        let f = stale_flow_filters(&services, &sr, &er);
        assert_eq!(
            f,
            vec![vec![
                "-D",
                "-p",
                "udp",
                "--orig-dst",
                "10.96.0.10",
                "--orig-port-dst",
                "53"
            ]]
        );
        let one = slice(
            "kube-system",
            "dns",
            "dns-1",
            ("dns", 53, "UDP"),
            &[("10.1.0.1", "", true, true, false)],
        );
        et.endpoint_slice_update(&one, false);
        let er = apply_endpoints_changes(&mut eps, &mut et);
        let f = stale_flow_filters(&services, &Default::default(), &er);
        assert_eq!(
            f,
            vec![vec![
                "-D",
                "-p",
                "udp",
                "--orig-dst",
                "10.96.0.10",
                "--dst-nat",
                "10.1.0.2"
            ]]
        );
    }
}
