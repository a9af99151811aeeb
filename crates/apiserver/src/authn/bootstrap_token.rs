//! Bootstrap tokens (upstream `plugin/pkg/auth/authenticator/token/bootstrap` and
//! `k8s.io/cluster-bootstrap`), on with `--enable-bootstrap-token-auth`: a bearer token
//! `<id>.<secret>` (6 and 16 characters of `[a-z0-9]`) authenticates as `system:bootstrap:<id>` in
//! `system:bootstrappers` (plus the secret's `auth-extra-groups`) when the Secret
//! `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token` holds that secret, is
//! marked `usage-bootstrap-authentication: "true"`, is not being deleted and has not expired. This is
//! how a new kubelet joins: its bootstrap credential may only ask for a client certificate.

use base64::Engine;
use serde_json::Value;

use super::UserInfo;

pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
const SECRET_PREFIX: &str = "bootstrap-token-";
const USER_PREFIX: &str = "system:bootstrap:";
pub const DEFAULT_GROUP: &str = "system:bootstrappers";

/// Splits a token into its id and secret, if it has a bootstrap token's shape.
pub fn parse_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let valid = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (valid(id, 6) && valid(secret, 16)).then_some((id, secret))
}

/// The storage key of the Secret a token id names (in the `secrets` watch cache).
pub fn secret_key(token_id: &str) -> String {
    format!("/secrets/kube-system/{SECRET_PREFIX}{token_id}")
}

/// The user of `token`, given the Secret its id names; `None` when the Secret does not vouch for it
/// (upstream logs why and answers "not authenticated", as here).
pub fn authenticate(
    token_id: &str,
    token_secret: &str,
    secret: &Value,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<UserInfo> {
    if secret
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        return None;
    }
    if secret["type"].as_str() != Some(SECRET_TYPE) {
        return None;
    }
    let data = |key: &str| -> Option<String> {
        let encoded = secret.pointer(&format!("/data/{key}"))?.as_str()?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()?;
        String::from_utf8(bytes).ok()
    };
    let stored_secret = data("token-secret").unwrap_or_default();
    if !constant_time_eq(stored_secret.as_bytes(), token_secret.as_bytes()) {
        return None;
    }
    if data("token-id").as_deref() != Some(token_id) {
        return None;
    }
    if let Some(expiration) = data("expiration").filter(|e| !e.is_empty()) {
        // An expiration that does not parse counts as expired, as upstream.
        match chrono::DateTime::parse_from_rfc3339(&expiration) {
            Ok(at) if now <= at => {}
            _ => return None,
        }
    }
    if data("usage-bootstrap-authentication").as_deref() != Some("true") {
        return None;
    }
    let groups = groups(data("auth-extra-groups").as_deref().unwrap_or(""))?;
    Some(UserInfo {
        name: format!("{USER_PREFIX}{token_id}"),
        uid: String::new(),
        groups,
    })
}

/// `system:bootstrappers` plus the extra groups (comma-separated, each `system:bootstrappers:...`),
/// sorted and without repeats; `None` when one is not a bootstrapper group.
fn groups(extra: &str) -> Option<Vec<String>> {
    let mut groups = vec![DEFAULT_GROUP.to_string()];
    for group in extra.split(',').map(str::trim).filter(|g| !g.is_empty()) {
        if !is_bootstrap_group(group) {
            return None;
        }
        groups.push(group.to_string());
    }
    groups.sort();
    groups.dedup();
    Some(groups)
}

/// Upstream's `^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$`.
fn is_bootstrap_group(group: &str) -> bool {
    let Some(rest) = group.strip_prefix("system:bootstrappers:") else {
        return false;
    };
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !rest.is_empty()
        && rest.len() <= 256
        && rest.bytes().all(|b| allowed(b) || b == b':' || b == b'-')
        && rest.bytes().last().is_some_and(allowed)
}

/// Compares without stopping at the first difference, so timing does not leak the secret.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn secret(extra: &[(&str, &str)]) -> Value {
        let mut data = serde_json::Map::new();
        for (k, v) in [
            ("token-id", "abcdef"),
            ("token-secret", "0123456789abcdef"),
            ("usage-bootstrap-authentication", "true"),
        ]
        .iter()
        .chain(extra)
        {
            data.insert(k.to_string(), b64(v).into());
        }
        json!({
            "metadata": {"namespace": "kube-system", "name": "bootstrap-token-abcdef"},
            "type": SECRET_TYPE,
            "data": data
        })
    }

    fn now() -> chrono::DateTime<chrono::Utc> {
        "2026-11-29T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn token_shape() {
        assert_eq!(
            parse_token("abcdef.0123456789abcdef"),
            Some(("abcdef", "0123456789abcdef"))
        );
        for bad in [
            "abcdef0123456789abcdef",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef.0123456789abcde",
            "abcdef.0123456789abcdef.x",
        ] {
            assert_eq!(parse_token(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_valid_token_is_a_bootstrapper() {
        let user = authenticate(
            "abcdef",
            "0123456789abcdef",
            &secret(&[(
                "auth-extra-groups",
                "system:bootstrappers:kubeadm:default-node-token, system:bootstrappers:worker",
            )]),
            now(),
        )
        .unwrap();
        assert_eq!(user.name, "system:bootstrap:abcdef");
        assert_eq!(
            user.groups,
            [
                "system:bootstrappers",
                "system:bootstrappers:kubeadm:default-node-token",
                "system:bootstrappers:worker"
            ]
        );
    }

    #[test]
    fn what_does_not_vouch() {
        let ok = |s: &Value, token_secret| authenticate("abcdef", token_secret, s, now()).is_some();
        assert!(ok(&secret(&[]), "0123456789abcdef"));
        assert!(!ok(&secret(&[]), "0123456789abcdee"), "wrong secret");
        let mut wrong_type = secret(&[]);
        wrong_type["type"] = "Opaque".into();
        assert!(!ok(&wrong_type, "0123456789abcdef"));
        let mut deleting = secret(&[]);
        deleting["metadata"]["deletionTimestamp"] = "2026-11-29T11:00:00Z".into();
        assert!(!ok(&deleting, "0123456789abcdef"));
        assert!(!ok(
            &secret(&[("expiration", "2026-11-29T11:59:59Z")]),
            "0123456789abcdef"
        ));
        assert!(ok(
            &secret(&[("expiration", "2026-11-29T13:00:00+01:00")]),
            "0123456789abcdef"
        ));
        assert!(!ok(
            &secret(&[("expiration", "tomorrow")]),
            "0123456789abcdef"
        ));
        assert!(!ok(
            &secret(&[("usage-bootstrap-authentication", "false")]),
            "0123456789abcdef"
        ));
        assert!(!ok(
            &secret(&[("auth-extra-groups", "system:masters")]),
            "0123456789abcdef"
        ));
        assert!(!ok(
            &secret(&[("auth-extra-groups", "system:bootstrappers:")]),
            "0123456789abcdef"
        ));
    }
}
