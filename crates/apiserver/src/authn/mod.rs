//! Authentication (upstream `k8s.io/apiserver/pkg/authentication`): X.509 client certificates signed by
//! the cluster CA (user = CN, groups = O) and bearer tokens from a static token file
//! (`--token-auth-file`, CSV `token,user,uid,"group1,group2"`) or bootstrap token Secrets
//! ([`bootstrap_token`]). Every authenticated user also gets the
//! group `system:authenticated`. Requests with no credentials are `system:anonymous` (upstream's
//! `--anonymous-auth`, on by default) and meet the authorizer; a credential that does not verify is 401.

pub mod bootstrap_token;

use std::collections::HashMap;
use std::path::Path;

use http::HeaderMap;
use rustls::pki_types::CertificateDer;

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

/// A user with no uid, for tests.
#[cfg(test)]
pub(crate) fn test_user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo {
        name: name.into(),
        uid: String::new(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
    }
}

impl UserInfo {
    /// The API server itself, for the writes it makes on its own behalf (bootstrap objects):
    /// upstream's loopback client is `system:apiserver` in `system:masters`.
    pub fn server() -> &'static UserInfo {
        static SERVER: std::sync::OnceLock<UserInfo> = std::sync::OnceLock::new();
        SERVER.get_or_init(|| UserInfo {
            name: "system:apiserver".into(),
            uid: String::new(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        })
    }

    pub(crate) fn authenticated(mut self) -> UserInfo {
        if !self.groups.iter().any(|g| g == "system:authenticated") {
            self.groups.push("system:authenticated".into());
        }
        self
    }
}

/// The node a user is (upstream `NodeIdentity`): `Some(name)` for `system:node:<name>` in group
/// `system:nodes` (the name may be empty), `None` for everyone else.
pub fn node_identity(user: &UserInfo) -> Option<&str> {
    let name = user.name.strip_prefix("system:node:")?;
    user.groups
        .iter()
        .any(|g| g == "system:nodes")
        .then_some(name)
}

/// The user named by a verified client certificate: CN is the user, each O a group.
pub fn user_from_certificate(cert: &CertificateDer<'_>) -> Option<UserInfo> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let subject = parsed.subject();
    let name = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some(
        UserInfo {
            name,
            uid: String::new(),
            groups,
        }
        .authenticated(),
    )
}

/// The user the first certificate of `pem` names (as [`user_from_certificate`]; not verified here:
/// for the process's own kubeconfig, whose certificate the server would verify on a TLS connection).
pub fn user_from_certificate_pem(pem: &[u8]) -> Option<UserInfo> {
    use rustls::pki_types::pem::PemObject;
    let cert = CertificateDer::pem_slice_iter(pem).next()?.ok()?;
    user_from_certificate(&cert)
}

#[derive(Default)]
pub struct TokenAuthenticator {
    tokens: HashMap<String, UserInfo>,
}

impl TokenAuthenticator {
    /// Reads a static token file. Lines: `token,user,uid[,"group1,group2"]`; `#` starts a comment.
    pub fn from_file(path: &Path) -> Result<TokenAuthenticator, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read token file {}: {e}", path.display()))?;
        let mut tokens = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields = split_csv(line);
            if fields.len() < 3 || fields[0].is_empty() || fields[1].is_empty() {
                return Err(format!(
                    "token file {} line {}: expected token,user,uid[,groups]",
                    path.display(),
                    n + 1
                ));
            }
            let groups = fields
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            let user = UserInfo {
                name: fields[1].clone(),
                uid: fields[2].clone(),
                groups,
            };
            tokens.insert(fields[0].clone(), user.authenticated());
        }
        Ok(TokenAuthenticator { tokens })
    }

    /// The user of an `Authorization: Bearer <token>` header, if the token is known.
    pub fn authenticate(&self, headers: &HeaderMap) -> Option<UserInfo> {
        self.lookup(bearer_token(headers)?)
    }

    /// The user of a token from the file.
    pub fn lookup(&self, token: &str) -> Option<UserInfo> {
        self.tokens.get(token).cloned()
    }
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The user of a request with no credentials (upstream `--anonymous-auth`, on by default):
/// `system:anonymous` in `system:unauthenticated`, left to the authorizer.
pub fn anonymous() -> UserInfo {
    UserInfo {
        name: "system:anonymous".into(),
        uid: String::new(),
        groups: vec!["system:unauthenticated".into()],
    }
}

/// Splits one CSV line, honouring double quotes.
fn split_csv(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(String::new()),
            c => fields.last_mut().expect("never empty").push(c),
        }
    }
    fields.into_iter().map(|f| f.trim().to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_with_quoted_groups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.csv");
        std::fs::write(
            &path,
            "# comment\nsecret1,alice,1001,\"dev,ops\"\nsecret2,bob,1002\n",
        )
        .unwrap();
        let auth = TokenAuthenticator::from_file(&path).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            "Bearer secret1".parse().unwrap(),
        );
        let alice = auth.authenticate(&headers).unwrap();
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.groups, ["dev", "ops", "system:authenticated"]);
        headers.insert(http::header::AUTHORIZATION, "Bearer nope".parse().unwrap());
        assert!(auth.authenticate(&headers).is_none());
        std::fs::write(&path, "only-token\n").unwrap();
        assert!(TokenAuthenticator::from_file(&path).is_err());
    }
}
