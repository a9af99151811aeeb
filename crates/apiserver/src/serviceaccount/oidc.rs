//! Service account issuer discovery (upstream `pkg/serviceaccount/openidmetadata.go`): the OpenID
//! Connect provider configuration at `/.well-known/openid-configuration` and the signing keys at
//! `/openid/v1/jwks`, so that other parties can verify service account tokens. Both are ordinary
//! authorized paths (the default policy grants them to `system:serviceaccounts`).

use serde_json::json;

use super::Issuer;

pub const CONFIGURATION_PATH: &str = "/.well-known/openid-configuration";
pub const JWKS_PATH: &str = "/openid/v1/jwks";

/// The provider configuration; `jwks_uri` is served by this server at `external`.
pub fn configuration(issuer: &Issuer, external: &str) -> serde_json::Value {
    json!({
        "issuer": issuer.issuer,
        "jwks_uri": format!("https://{external}{JWKS_PATH}"),
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    })
}

/// The key set.
pub fn jwks(issuer: &Issuer) -> serde_json::Value {
    let keys: Vec<serde_json::Value> = issuer.verifying_keys().iter().map(|k| k.jwk()).collect();
    json!({"keys": keys})
}
