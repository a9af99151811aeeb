//! Whether the rules a user holds cover the rules they grant (upstream `pkg/registry/rbac/validation`:
//! `Covers` in `policy_comparator.go`, `CompactRules` in `policy_compact.go`, `ConfirmNoEscalation`
//! in `rule.go`; `CompactString` of `pkg/apis/rbac/v1`), and upstream's message naming what is
//! missing, byte for byte (Go's `%q` quoting included).

use std::collections::{BTreeMap, BTreeSet};

use apimachinery::go_format::{quote as go_quote, quote_list as go_quote_list};

use crate::authn::UserInfo;
use crate::authz::rbac::Rule;

/// Whether `owner` covers every rule of `servant`, and the pieces it does not cover (upstream
/// `Covers`). Each servant rule is broken down to one verb on one group and resource (and resource
/// name), or one verb on one URL, so that each piece is covered by a single owner rule or not at all.
pub fn covers(owner: &[Rule], servant: &[Rule]) -> (bool, Vec<Rule>) {
    let uncovered: Vec<Rule> = servant
        .iter()
        .flat_map(breakdown)
        .filter(|piece| !owner.iter().any(|o| rule_covers(o, piece)))
        .collect();
    (uncovered.is_empty(), uncovered)
}

fn breakdown(rule: &Rule) -> Vec<Rule> {
    let mut pieces = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let piece = |names: Vec<String>| Rule {
                    verbs: vec![verb.clone()],
                    api_groups: vec![group.clone()],
                    resources: vec![resource.clone()],
                    resource_names: names,
                    non_resource_urls: Vec::new(),
                };
                if rule.resource_names.is_empty() {
                    pieces.push(piece(Vec::new()));
                } else {
                    pieces.extend(rule.resource_names.iter().map(|n| piece(vec![n.clone()])));
                }
            }
        }
    }
    // Non-resource URLs combine with verbs only.
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            pieces.push(Rule {
                verbs: vec![verb.clone()],
                non_resource_urls: vec![url.clone()],
                ..Rule::default()
            });
        }
    }
    pieces
}

fn has(set: &[String], value: &str) -> bool {
    set.iter().any(|s| s == value)
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| has(set, w))
}

/// `*` covers every resource; `*/<sub>` covers that subresource of any resource. `pods/*` is no
/// wildcard here (nor in the authorizer): it covers only a rule that says `pods/*` too.
fn resources_cover(owner: &[String], wanted: &[String]) -> bool {
    if has(owner, "*") || has_all(owner, wanted) {
        return true;
    }
    wanted.iter().all(|path| {
        has(owner, path)
            || path
                .split_once('/')
                .is_some_and(|(_, sub)| has(owner, &format!("*/{sub}")))
    })
}

/// An owner URL ending in `*` covers every path it prefixes (upstream `nonResourceURLCovers`).
fn url_covers(owner: &str, path: &str) -> bool {
    owner == path || (owner.ends_with('*') && path.starts_with(owner.trim_end_matches('*')))
}

/// Upstream `ruleCovers`: `piece` holds at most one verb, resource, name and URL.
fn rule_covers(owner: &Rule, piece: &Rule) -> bool {
    let verbs = has(&owner.verbs, "*") || has_all(&owner.verbs, &piece.verbs);
    let groups = has(&owner.api_groups, "*") || has_all(&owner.api_groups, &piece.api_groups);
    let resources = resources_cover(&owner.resources, &piece.resources);
    let urls = piece
        .non_resource_urls
        .iter()
        .all(|path| owner.non_resource_urls.iter().any(|o| url_covers(o, path)));
    // An owner rule limited to names never covers a piece without one (a list, a create).
    let names = owner.resource_names.is_empty()
        || (!piece.resource_names.is_empty()
            && has_all(&owner.resource_names, &piece.resource_names));
    verbs && groups && resources && urls && names
}

/// Merges the rules that name one group and one resource and nothing else, and differ only by
/// verb (upstream `CompactRules`), so the missing pieces read as one line per resource.
pub fn compact(rules: Vec<Rule>) -> Vec<Rule> {
    let mut compacted = Vec::with_capacity(rules.len());
    let mut simple: BTreeMap<(String, String), Rule> = BTreeMap::new();
    for rule in rules {
        let is_simple = rule.resource_names.is_empty()
            && rule.non_resource_urls.is_empty()
            && rule.api_groups.len() == 1
            && rule.resources.len() == 1;
        if !is_simple {
            compacted.push(rule);
            continue;
        }
        let key = (rule.api_groups[0].clone(), rule.resources[0].clone());
        match simple.get_mut(&key) {
            Some(existing) => existing.verbs.extend(rule.verbs),
            None => {
                simple.insert(key, rule);
            }
        }
    }
    compacted.extend(simple.into_values());
    compacted
}

/// A rule as upstream's escalation messages print it (`CompactString`):
/// `{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}`.
pub fn compact_string(rule: &Rule) -> String {
    let fields = [
        ("APIGroups", &rule.api_groups),
        ("Resources", &rule.resources),
        ("NonResourceURLs", &rule.non_resource_urls),
        ("ResourceNames", &rule.resource_names),
        ("Verbs", &rule.verbs),
    ];
    let parts: Vec<String> = fields
        .iter()
        .filter(|(_, values)| !values.is_empty())
        .map(|(name, values)| format!("{name}:{}", go_quote_list(values)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// Upstream `utilerrors.NewAggregate(errs).Error()`: one message alone, several (deduplicated)
/// in brackets.
fn aggregate(errors: &[String]) -> String {
    let mut seen = BTreeSet::new();
    let unique: Vec<&str> = errors
        .iter()
        .filter(|e| seen.insert(e.as_str()))
        .map(String::as_str)
        .collect();
    match unique.as_slice() {
        [one] => one.to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// Upstream `ConfirmNoEscalation`: `Err` with upstream's message when the user's rules (`owner`,
/// resolved with `resolution_errors` for bindings whose role is missing) do not cover `rules`.
pub fn confirm_no_escalation(
    user: &UserInfo,
    (owner, resolution_errors): (&[Rule], &[String]),
    rules: &[Rule],
) -> Result<(), String> {
    let (covered, missing) = covers(owner, rules);
    if covered {
        return Ok(());
    }
    // A sorted set, as upstream's `sets.String.List()`.
    let lines: BTreeSet<String> = compact(missing).iter().map(compact_string).collect();
    let mut message = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        go_quote(&user.name),
        go_quote_list(&user.groups),
        lines.into_iter().collect::<Vec<_>>().join("\n")
    );
    if !resolution_errors.is_empty() {
        message.push_str(&format!(
            "; resolution errors: [{}]",
            aggregate(resolution_errors)
        ));
    }
    Err(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: serde_json::Value) -> Rule {
        Rule::from_json(&v)
    }

    fn covered(owner: &[serde_json::Value], servant: serde_json::Value) -> bool {
        let owner: Vec<Rule> = owner.iter().cloned().map(rule).collect();
        covers(&owner, &[rule(servant)]).0
    }

    #[test]
    fn wildcards_cover_verbs_groups_and_resources() {
        let all = json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]});
        let secrets =
            json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]});
        assert!(covered(std::slice::from_ref(&all), secrets.clone()));
        assert!(covered(
            &[json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]})],
            secrets.clone()
        ));
        assert!(covered(
            &[json!({"apiGroups": ["*"], "resources": ["secrets"], "verbs": ["get", "list"]})],
            secrets.clone()
        ));
        // Two owner rules may cover one servant rule between them.
        assert!(covered(
            &[
                json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
                json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]})
            ],
            secrets.clone()
        ));
        assert!(!covered(
            &[json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})],
            secrets
        ));
        // A literal `*` in the servant rule needs a `*` in the owner's.
        assert!(!covered(
            &[json!({"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get"]})],
            json!({"apiGroups": [""], "resources": ["*"], "verbs": ["get"]})
        ));
        // Resource rules never cover URLs, nor the reverse.
        assert!(!covered(
            &[all],
            json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]})
        ));
        assert!(!covered(
            &[json!({"nonResourceURLs": ["*"], "verbs": ["*"]})],
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]})
        ));
    }

    #[test]
    fn resource_names_narrow_what_is_held() {
        let named = json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a", "b"], "verbs": ["get"]});
        assert!(covered(
            std::slice::from_ref(&named),
            json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["get"]})
        ));
        assert!(!covered(
            std::slice::from_ref(&named),
            json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["c"], "verbs": ["get"]})
        ));
        // Named access does not cover all names.
        assert!(!covered(
            &[named],
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]})
        ));
        // Unnamed access covers any name.
        assert!(covered(
            &[json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]})],
            json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["x"], "verbs": ["get"]})
        ));
    }

    #[test]
    fn non_resource_urls_cover_by_prefix() {
        let owner = [json!({"nonResourceURLs": ["/healthz", "/apis/*"], "verbs": ["get"]})];
        let url = |u: &str| json!({"nonResourceURLs": [u], "verbs": ["get"]});
        assert!(covered(&owner, url("/healthz")));
        assert!(!covered(&owner, url("/healthz/etcd")));
        assert!(covered(&owner, url("/apis/apps/v1")));
        assert!(covered(&owner, url("/apis/*")));
        assert!(covered(&owner, url("/apis/")));
        assert!(!covered(&owner, url("/api")));
        assert!(!covered(&owner, url("*")));
        assert!(!covered(
            &owner,
            json!({"nonResourceURLs": ["/healthz"], "verbs": ["post"]})
        ));
        assert!(covered(
            &[json!({"nonResourceURLs": ["*"], "verbs": ["*"]})],
            url("/anything")
        ));
    }

    #[test]
    fn subresources_are_covered_by_name_or_by_star_slash() {
        let logs = json!({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]});
        assert!(covered(
            &[json!({"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]})],
            logs.clone()
        ));
        assert!(covered(
            &[json!({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]})],
            logs.clone()
        ));
        // `pods` is not `pods/log`, and `pods/*` is no wildcard, as upstream.
        assert!(!covered(
            &[json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]})],
            logs.clone()
        ));
        let pods_star = json!({"apiGroups": [""], "resources": ["pods/*"], "verbs": ["get"]});
        assert!(!covered(std::slice::from_ref(&pods_star), logs));
        assert!(covered(std::slice::from_ref(&pods_star), pods_star.clone()));
        assert!(!covered(
            &[json!({"apiGroups": ["*"], "resources": ["*/scale"], "verbs": ["*"]})],
            json!({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]})
        ));
    }

    fn alice() -> UserInfo {
        UserInfo {
            name: "alice".into(),
            uid: String::new(),
            groups: vec!["dev".into(), "system:authenticated".into()],
        }
    }

    #[test]
    fn the_message_lists_compacted_missing_rules_as_upstream() {
        let owner = [rule(
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}),
        )];
        let servant = [
            rule(
                json!({"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list"]}),
            ),
            rule(
                json!({"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"], "verbs": ["patch"]}),
            ),
            rule(json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]})),
        ];
        let err = confirm_no_escalation(&alice(), (&owner, &[]), &servant).unwrap_err();
        assert_eq!(
            err,
            "user \"alice\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n\
             {APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"list\"]}\n\
             {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}\n\
             {APIGroups:[\"apps\"], Resources:[\"deployments\"], ResourceNames:[\"web\"], Verbs:[\"patch\"]}\n\
             {NonResourceURLs:[\"/metrics\"], Verbs:[\"get\"]}"
        );
        assert_eq!(
            confirm_no_escalation(&alice(), (&owner, &[]), &servant[..0]),
            Ok(())
        );
        let cluster_admin = [
            rule(json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]})),
            rule(json!({"nonResourceURLs": ["*"], "verbs": ["*"]})),
        ];
        let errors = ["clusterroles.rbac.authorization.k8s.io \"gone\" not found".to_string()];
        let err = confirm_no_escalation(&alice(), (&[], &errors), &cluster_admin).unwrap_err();
        assert!(err.ends_with(
            ":\n{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}\n{NonResourceURLs:[\"*\"], Verbs:[\"*\"]}\
             ; resolution errors: [clusterroles.rbac.authorization.k8s.io \"gone\" not found]"
        ), "{err}");
        let two = [
            errors[0].clone(),
            "roles.rbac.authorization.k8s.io \"r\" not found".into(),
        ];
        assert!(confirm_no_escalation(&alice(), (&[], &two), &cluster_admin)
            .unwrap_err()
            .ends_with("; resolution errors: [[clusterroles.rbac.authorization.k8s.io \"gone\" not found, roles.rbac.authorization.k8s.io \"r\" not found]]"));
    }
}
