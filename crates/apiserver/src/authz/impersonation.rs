//! User impersonation (upstream `k8s.io/apiserver/pkg/endpoints/filters/impersonation.go`):
//! `Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid` and `Impersonate-Extra-*` headers make
//! the request act as another user, once the requester is allowed the `impersonate` verb on each of
//! `users` (or the service account), `groups`, `uids` and `userextras/<key>`. `kubectl --as` and
//! `--as-group` send them.

use apimachinery::status::ApiError;
use http::HeaderMap;

use super::{forbidden, Attributes, Authorizer};
use crate::authn::UserInfo;

const USER: &str = "impersonate-user";
const UID: &str = "impersonate-uid";
const GROUP: &str = "impersonate-group";
const EXTRA_PREFIX: &str = "impersonate-extra-";

/// The user the request acts as: `requester` itself without impersonation headers, else the
/// impersonated user if every part of it is allowed.
pub fn resolve(
    authorizer: &Authorizer,
    requester: UserInfo,
    headers: &HeaderMap,
) -> Result<UserInfo, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect()
    };
    let user = values(USER).into_iter().next();
    let uid = values(UID).into_iter().next();
    let groups = values(GROUP);
    let extras: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(k, v)| {
            let key = k.as_str().strip_prefix(EXTRA_PREFIX)?;
            Some((key.to_string(), v.to_str().ok()?.to_string()))
        })
        .collect();
    let Some(name) = user else {
        if uid.is_some() || !groups.is_empty() || !extras.is_empty() {
            return Err(ApiError::bad_request(format!(
                "requested {} without impersonating a user",
                [
                    (!groups.is_empty()).then_some("groups"),
                    uid.is_some().then_some("uid"),
                    (!extras.is_empty()).then_some("extras"),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ")
            )));
        }
        return Ok(requester);
    };
    let check = |verb_target: Attributes<'_>| -> Result<(), ApiError> {
        authorizer
            .authorize(&verb_target)
            .map(|_| ())
            .map_err(|reason| forbidden(&verb_target, &reason))
    };
    let impersonate = |group: &'static str, resource: &'static str, namespace: &str, name: &str| {
        check(Attributes {
            user: &requester,
            verb: "impersonate",
            resource_request: true,
            group,
            version: "",
            resource,
            subresource: "",
            namespace,
            name,
            path: "",
            field_selector: "",
        })
    };
    let service_account = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'));
    match service_account {
        Some((ns, sa)) => impersonate("", "serviceaccounts", ns, sa)?,
        None => impersonate("", "users", "", &name)?,
    }
    for g in &groups {
        impersonate("", "groups", "", g)?;
    }
    if let Some(uid) = &uid {
        impersonate("authentication.k8s.io", "uids", "", uid)?;
    }
    for (key, value) in &extras {
        let resource = format!("userextras/{key}");
        check(Attributes {
            user: &requester,
            verb: "impersonate",
            resource_request: true,
            group: "authentication.k8s.io",
            version: "",
            resource: &resource,
            subresource: "",
            namespace: "",
            name: value,
            path: "",
            field_selector: "",
        })?;
    }
    let mut all_groups = groups;
    if let Some((ns, _)) = service_account {
        for g in [
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{ns}"),
        ] {
            if !all_groups.contains(&g) {
                all_groups.push(g);
            }
        }
    }
    let implicit = if name == "system:anonymous" {
        "system:unauthenticated"
    } else {
        "system:authenticated"
    };
    if !all_groups.iter().any(|g| g == implicit) {
        all_groups.push(implicit.to_string());
    }
    Ok(UserInfo {
        name,
        uid: uid.unwrap_or_default(),
        groups: all_groups,
    })
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;
    use crate::authz::Mode;

    use crate::authn::test_user as user;

    #[test]
    fn headers_become_the_user_when_allowed() {
        let authz = Authorizer::new(Mode::Rbac { node: false });
        let mut headers = HeaderMap::new();
        let alice = user("alice", &["system:authenticated"]);
        assert_eq!(
            resolve(&authz, alice.clone(), &headers).unwrap(),
            alice,
            "no headers: the requester"
        );
        headers.insert(
            USER,
            HeaderValue::from_static("system:serviceaccount:dev:bot"),
        );
        headers.append(GROUP, HeaderValue::from_static("team"));
        let err = resolve(&authz, alice, &headers).unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "serviceaccounts \"bot\" is forbidden: User \"alice\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"dev\""
        );
        let admin = user("admin", &["system:masters"]);
        let as_bot = resolve(&authz, admin, &headers).unwrap();
        assert_eq!(as_bot.name, "system:serviceaccount:dev:bot");
        assert_eq!(
            as_bot.groups,
            [
                "team",
                "system:serviceaccounts",
                "system:serviceaccounts:dev",
                "system:authenticated"
            ]
        );
    }

    #[test]
    fn groups_without_a_user_are_a_bad_request() {
        let authz = Authorizer::new(Mode::AlwaysAllow);
        let mut headers = HeaderMap::new();
        headers.insert(GROUP, HeaderValue::from_static("team"));
        let err = resolve(&authz, user("a", &[]), &headers).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (400, "requested groups without impersonating a user")
        );
    }
}
