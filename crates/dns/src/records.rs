//! The answer to one question, computed from a [`Snapshot`] without I/O: CoreDNS
//! `plugin/kubernetes/handler.go` (`ServeDNS`: NXDOMAIN vs NODATA with the zone's SOA), `parse.go`
//! (`parseRequest`), `kubernetes.go` (`Records`, `findServices`, `findPods` in `pods insecure` mode,
//! `dns-version`, `ns.dns`), `reverse.go` (PTR for cluster IPs and endpoint IPs) and
//! `plugin/backend_lookup.go` (`A`, `AAAA`, `SRV`, `CNAME`, `PTR`: weights, targets, extra records).
//!
//! Differs from CoreDNS: names outside the cluster domain, and reverse names that match no cluster IP
//! or endpoint (CoreDNS's `fallthrough in-addr.arpa ip6.arpa`), are [`Answer::Forward`]; the server
//! resolves an ExternalName's CNAME target (CoreDNS's `Upstream`) rather than this function; the
//! multicluster and zonal name forms and `pods verified` are not implemented.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use crate::snapshot::{labels_of, Kind, Port, ServiceEntry, Snapshot};

/// Version of the Kubernetes DNS specification served at `dns-version.<zone>` (TXT).
pub const DNS_SCHEMA_VERSION: &str = "1.1.0";

#[derive(Clone, Debug)]
pub struct Query {
    pub name: Name,
    pub qtype: RecordType,
}

impl Query {
    pub fn new(name: Name, qtype: RecordType) -> Query {
        Query { name, qtype }
    }
}

#[derive(Debug)]
pub enum Answer {
    /// Not a cluster name: ask the upstream resolvers.
    Forward,
    /// An authoritative answer.
    Local(Response),
}

#[derive(Debug, Default)]
pub struct Response {
    pub rcode: ResponseCode,
    pub answers: Vec<Record>,
    pub authorities: Vec<Record>,
    pub additionals: Vec<Record>,
    /// An A/AAAA question answered with a CNAME (ExternalName): the target to resolve and append.
    pub chase: Option<Name>,
}

/// Why a name does not exist (CoreDNS's `errNoItems` / `errInvalidRequest`: both NXDOMAIN).
struct NoSuchName;

/// A parsed cluster name (CoreDNS `recordRequest`); empty strings are absent parts.
#[derive(Debug, Default, PartialEq)]
struct Request {
    port: String,
    protocol: String,
    endpoint: String,
    service: String,
    namespace: String,
    pod: bool,
}

/// What a name resolves to before it is shaped into records of the asked type.
struct Target {
    host: Host,
    port: Option<u16>,
    /// The name this target is published under (an SRV record's target): labels under the zone.
    key: Vec<String>,
}

enum Host {
    Ip(IpAddr),
    Alias(String),
}

pub fn answer(snap: &Snapshot, q: &Query) -> Answer {
    let labels = labels_of(&q.name);
    if let Some(rel) = strip_suffix(&labels, &snap.zone_labels) {
        return Answer::Local(cluster_answer(snap, q, rel));
    }
    let reverse = strip_suffix(&labels, &["in-addr".into(), "arpa".into()])
        .and_then(parse_reverse_v4)
        .or_else(|| {
            strip_suffix(&labels, &["ip6".into(), "arpa".into()]).and_then(parse_reverse_v6)
        });
    match reverse {
        Some(ip) if q.qtype == RecordType::PTR => match reverse_answer(snap, q, ip) {
            Some(r) => Answer::Local(r),
            None => Answer::Forward,
        },
        _ => Answer::Forward,
    }
}

/// `labels` without `suffix`, if it ends with it.
fn strip_suffix<'a>(labels: &'a [String], suffix: &[String]) -> Option<&'a [String]> {
    if labels.len() < suffix.len() {
        return None;
    }
    let (head, tail) = labels.split_at(labels.len() - suffix.len());
    (tail == suffix).then_some(head)
}

fn cluster_answer(snap: &Snapshot, q: &Query, rel: &[String]) -> Response {
    let ttl = snap.config.ttl;
    let zone = &snap.config.zone;
    // The zone apex: SOA and NS exist, everything else is NODATA.
    if rel.is_empty() {
        return match q.qtype {
            RecordType::SOA => ok(vec![soa(snap)], Vec::new()),
            RecordType::NS => {
                let ns = ns_name(zone);
                let extra = ns_addresses(snap, &ns, None);
                let rec = Record::from_rdata(q.name.clone(), ttl, RData::NS(NS(ns)));
                ok(vec![rec], extra)
            }
            _ => no_data(snap),
        };
    }
    if rel == ["dns-version"] {
        return match q.qtype {
            RecordType::TXT => {
                let txt = TXT::new(vec![DNS_SCHEMA_VERSION.to_string()]);
                ok(
                    vec![Record::from_rdata(q.name.clone(), 28800, RData::TXT(txt))],
                    Vec::new(),
                )
            }
            _ => no_data(snap),
        };
    }
    if rel == ["ns", "dns"] {
        let recs = match q.qtype {
            RecordType::A | RecordType::AAAA => ns_addresses(snap, &q.name, Some(q.qtype)),
            _ => Vec::new(),
        };
        return if recs.is_empty() {
            no_data(snap)
        } else {
            ok(recs, Vec::new())
        };
    }
    let targets = match parse(rel) {
        Err(NoSuchName) => return name_error(snap),
        Ok(None) => Ok(Vec::new()),
        Ok(Some(r)) if r.pod => find_pod(&r),
        Ok(Some(r)) => find_services(snap, &r),
    };
    let targets = match targets {
        Err(NoSuchName) => return name_error(snap),
        Ok(t) => t,
    };
    let mut resp = Response::default();
    match q.qtype {
        RecordType::A | RecordType::AAAA => {
            for t in &targets {
                match &t.host {
                    Host::Ip(ip) => resp
                        .answers
                        .extend(address(&q.name, *ip, ttl, Some(q.qtype))),
                    Host::Alias(target) => {
                        if let Ok(target) = Name::from_ascii(fqdn_text(target)) {
                            resp.answers.push(Record::from_rdata(
                                q.name.clone(),
                                ttl,
                                RData::CNAME(CNAME(target.clone())),
                            ));
                            resp.chase = Some(target);
                        }
                    }
                }
            }
        }
        RecordType::CNAME => {
            for t in &targets {
                if let Host::Alias(target) = &t.host {
                    if let Ok(target) = Name::from_ascii(fqdn_text(target)) {
                        resp.answers.push(Record::from_rdata(
                            q.name.clone(),
                            ttl,
                            RData::CNAME(CNAME(target)),
                        ));
                    }
                }
            }
        }
        RecordType::SRV => {
            // ExternalName Services have no SRV records (CoreDNS: "not yet implemented").
            let internal: Vec<&Target> = targets
                .iter()
                .filter(|t| matches!(t.host, Host::Ip(_)))
                .collect();
            // Every record of one priority shares 100 (CoreDNS weights: floor(100 / n)).
            let weight = u16::try_from(100 / internal.len().max(1)).unwrap_or(0);
            for t in internal {
                let (Host::Ip(ip), Some(port)) = (&t.host, t.port) else {
                    continue;
                };
                let Ok(target) = key_name(&t.key, zone) else {
                    continue;
                };
                resp.answers.push(Record::from_rdata(
                    q.name.clone(),
                    ttl,
                    RData::SRV(SRV::new(0, weight, port, target.clone())),
                ));
                resp.additionals.extend(address(&target, *ip, ttl, None));
            }
        }
        // Other types: the name exists (or not) as its A lookup says; no data of this type.
        _ => {}
    }
    dedup(&mut resp.answers);
    dedup(&mut resp.additionals);
    if resp.answers.is_empty() {
        return no_data(snap);
    }
    resp
}

/// CoreDNS `parseRequest` (neither multicluster nor zonal): `Ok(None)` for the `svc`/`pod` apexes
/// and `<ns>.svc`-style names whose parts are missing (NODATA), an error for names that cannot be
/// cluster names (NXDOMAIN).
fn parse(rel: &[String]) -> Result<Option<Request>, NoSuchName> {
    let mut segs = rel.iter().rev();
    let mut r = Request::default();
    match segs.next().map(String::as_str) {
        Some("svc") => {}
        Some("pod") => r.pod = true,
        _ => return Err(NoSuchName),
    }
    let Some(ns) = segs.next() else {
        return Ok(None);
    };
    r.namespace = ns.clone();
    let Some(svc) = segs.next() else {
        return Ok(Some(r));
    };
    r.service = svc.clone();
    let rest: Vec<&String> = segs.collect();
    match rest.as_slice() {
        [] => {}
        [endpoint] => r.endpoint = (*endpoint).clone(),
        [protocol, port] => {
            r.protocol = strip_underscore(protocol).to_string();
            r.port = strip_underscore(port).to_string();
        }
        _ => return Err(NoSuchName),
    }
    Ok(Some(r))
}

fn strip_underscore(s: &str) -> &str {
    s.strip_prefix('_').unwrap_or(s)
}

/// `pods insecure`: `1-2-3-4.<ns>.pod.<zone>` is 1.2.3.4 whether or not such a pod exists.
fn find_pod(r: &Request) -> Result<Vec<Target>, NoSuchName> {
    if r.service.is_empty() {
        return Ok(Vec::new());
    }
    let name = &r.service;
    let text = if name.matches('-').count() == 3 && !name.contains("--") {
        name.replace('-', ".")
    } else {
        name.replace('-', ":")
    };
    let ip: IpAddr = text.parse().map_err(|_| NoSuchName)?;
    Ok(vec![Target {
        host: Host::Ip(ip),
        port: None,
        key: vec![name.clone(), r.namespace.clone(), "pod".into()],
    }])
}

/// CoreDNS `matchPortAndProtocol`: an absent requested part matches anything.
fn port_matches(r: &Request, p: &Port) -> bool {
    (r.port.is_empty() || r.port.eq_ignore_ascii_case(&p.name))
        && (r.protocol.is_empty() || r.protocol.eq_ignore_ascii_case(&p.protocol))
}

fn find_services(snap: &Snapshot, r: &Request) -> Result<Vec<Target>, NoSuchName> {
    if r.service.is_empty() {
        // `<ns>.svc.<zone>`: every namespace is exposed, so the name exists without data.
        return Ok(Vec::new());
    }
    let svc: &ServiceEntry = snap.service(&r.namespace, &r.service).ok_or(NoSuchName)?;
    let base = || vec![svc.name.clone(), svc.namespace.clone(), "svc".to_string()];
    let mut found = false;
    let mut out = Vec::new();
    match &svc.kind {
        Kind::ExternalName(target) => {
            // An endpoint of an ExternalName Service does not exist; an IP is no CNAME target.
            if !r.endpoint.is_empty() || target.is_empty() || target.parse::<IpAddr>().is_ok() {
                return Err(NoSuchName);
            }
            return Ok(vec![Target {
                host: Host::Alias(target.clone()),
                port: None,
                key: base(),
            }]);
        }
        kind if matches!(kind, Kind::Headless) || !r.endpoint.is_empty() => {
            for e in &svc.endpoints {
                if !r.endpoint.is_empty() && !r.endpoint.eq_ignore_ascii_case(&e.hostname) {
                    continue;
                }
                for p in e.ports.iter().filter(|p| port_matches(r, p)) {
                    found = true;
                    let mut key = vec![e.hostname.clone()];
                    key.extend(base());
                    out.push(Target {
                        host: Host::Ip(e.ip),
                        port: p.port,
                        key,
                    });
                }
            }
        }
        Kind::ClusterIp(ips) => {
            for p in svc.ports.iter().filter(|p| port_matches(r, p)) {
                found = true;
                for ip in ips {
                    out.push(Target {
                        host: Host::Ip(*ip),
                        port: p.port,
                        key: base(),
                    });
                }
            }
        }
        Kind::Headless => {}
    }
    if found {
        Ok(out)
    } else {
        Err(NoSuchName)
    }
}

/// PTR for a cluster IP (`svc.ns.svc.<zone>`), else for endpoint IPs (`host.svc.ns.svc.<zone>`);
/// `None` when the IP is neither, so the question goes upstream.
fn reverse_answer(snap: &Snapshot, q: &Query, ip: IpAddr) -> Option<Response> {
    let zone = &snap.config.zone;
    let mut names: Vec<Name> = Vec::new();
    if let Some(svcs) = snap.by_cluster_ip.get(&ip) {
        names.extend(svcs.iter().filter_map(|(ns, name)| {
            key_name(&[name.clone(), ns.clone(), "svc".into()], zone).ok()
        }));
    }
    if names.is_empty() {
        if let Some(eps) = snap.by_endpoint_ip.get(&ip) {
            names.extend(eps.iter().filter_map(|(host, ns, name)| {
                key_name(
                    &[host.clone(), name.clone(), ns.clone(), "svc".into()],
                    zone,
                )
                .ok()
            }));
        }
    }
    if names.is_empty() {
        return None;
    }
    let mut answers: Vec<Record> = names
        .into_iter()
        .map(|n| Record::from_rdata(q.name.clone(), snap.config.ttl, RData::PTR(PTR(n))))
        .collect();
    dedup(&mut answers);
    Some(ok(answers, Vec::new()))
}

/// `4.3.2.1` (labels before `in-addr.arpa`) -> 1.2.3.4; partial names are no address.
fn parse_reverse_v4(rel: &[String]) -> Option<IpAddr> {
    if rel.len() != 4 {
        return None;
    }
    let mut octets = [0u8; 4];
    for (i, l) in rel.iter().rev().enumerate() {
        if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        octets[i] = l.parse().ok()?;
    }
    Some(IpAddr::V4(Ipv4Addr::from(octets)))
}

/// 32 nibble labels before `ip6.arpa`, least significant first.
fn parse_reverse_v6(rel: &[String]) -> Option<IpAddr> {
    if rel.len() != 32 {
        return None;
    }
    let mut value: u128 = 0;
    for l in rel.iter().rev() {
        if l.len() != 1 {
            return None;
        }
        let nibble = u128::from(l.chars().next()?.to_digit(16)?);
        value = (value << 4) | nibble;
    }
    Some(IpAddr::V6(Ipv6Addr::from(value)))
}

/// `labels` under the zone as a name.
fn key_name(labels: &[String], zone: &Name) -> Result<Name, hickory_proto::ProtoError> {
    let mut text = labels.join(".");
    text.push('.');
    Name::from_ascii(&text)?.append_domain(zone)
}

fn fqdn_text(name: &str) -> String {
    if name.ends_with('.') {
        name.to_string()
    } else {
        format!("{name}.")
    }
}

/// An A or AAAA record for `ip` (if `only` allows its family).
fn address(owner: &Name, ip: IpAddr, ttl: u32, only: Option<RecordType>) -> Option<Record> {
    match ip {
        IpAddr::V4(v4) if only.is_none_or(|t| t == RecordType::A) => {
            Some(Record::from_rdata(owner.clone(), ttl, RData::A(A(v4))))
        }
        IpAddr::V6(v6) if only.is_none_or(|t| t == RecordType::AAAA) => Some(Record::from_rdata(
            owner.clone(),
            ttl,
            RData::AAAA(AAAA(v6)),
        )),
        _ => None,
    }
}

fn ns_name(zone: &Name) -> Name {
    Name::from_ascii("ns.dns.")
        .and_then(|n| n.append_domain(zone))
        .unwrap_or_else(|_| zone.clone())
}

fn ns_addresses(snap: &Snapshot, owner: &Name, only: Option<RecordType>) -> Vec<Record> {
    snap.config
        .ns_addrs
        .iter()
        .filter_map(|ip| address(owner, *ip, snap.config.ttl, only))
        .collect()
}

/// The zone's SOA (CoreDNS `plugin.SOA`: `ns.dns.<zone>`, `hostmaster.<zone>`, minimum = ttl).
fn soa(snap: &Snapshot) -> Record {
    let zone = &snap.config.zone;
    let rname = Name::from_ascii("hostmaster.")
        .and_then(|n| n.append_domain(zone))
        .unwrap_or_else(|_| zone.clone());
    let ttl = snap.config.ttl;
    let data = SOA::new(ns_name(zone), rname, snap.serial, 7200, 1800, 86400, ttl);
    Record::from_rdata(zone.clone(), ttl, RData::SOA(data))
}

fn ok(answers: Vec<Record>, additionals: Vec<Record>) -> Response {
    Response {
        answers,
        additionals,
        ..Response::default()
    }
}

/// The name exists but has no records of the asked type: NOERROR, SOA in the authority section.
fn no_data(snap: &Snapshot) -> Response {
    Response {
        authorities: vec![soa(snap)],
        ..Response::default()
    }
}

fn name_error(snap: &Snapshot) -> Response {
    Response {
        rcode: ResponseCode::NXDomain,
        authorities: vec![soa(snap)],
        ..Response::default()
    }
}

/// Drops repeated records (CoreDNS `dnsutil.Dedup`): a Service with two ports has one A record.
fn dedup(records: &mut Vec<Record>) {
    let mut seen: std::collections::HashSet<(Name, RData)> =
        std::collections::HashSet::with_capacity(records.len());
    records.retain(|r| seen.insert((r.name.to_lowercase(), r.data.clone())));
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
