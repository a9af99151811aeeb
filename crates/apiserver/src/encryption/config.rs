//! The `--encryption-provider-config` file: upstream's `EncryptionConfiguration` at
//! `apiserver.config.k8s.io/v1` (`k8s.io/apiserver/pkg/apis/apiserver/v1`), decoded strictly and
//! validated as `validation_encryption.go` does, with its messages.
//!
//! Deliberately different: `kms` providers are refused (rkube has no KMS plugin client), so a file
//! that names one fails clearly instead of starting a server that cannot read its data.

use std::collections::HashSet;

use base64::Engine as _;
use serde::Deserialize;

pub const API_VERSION: &str = "apiserver.config.k8s.io/v1";
pub const KIND: &str = "EncryptionConfiguration";

/// A validated configuration: which resources, and their providers in order (the first one writes).
#[derive(Clone, Debug)]
pub struct EncryptionConfiguration {
    pub resources: Vec<ResourceConfiguration>,
}

#[derive(Clone, Debug)]
pub struct ResourceConfiguration {
    /// As written: `secrets`, `deployments.apps`, `*.apps`, `*.` (the core group), `*.*`.
    pub resources: Vec<String>,
    pub providers: Vec<ProviderConfiguration>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    AesGcm,
    AesCbc,
    Secretbox,
}

#[derive(Clone, Debug)]
pub enum ProviderConfiguration {
    Identity,
    Keyed {
        kind: ProviderKind,
        /// Names with their decoded secrets, in order (the first one writes).
        keys: Vec<(String, Vec<u8>)>,
    },
}

/// A `group/resource` pair as upstream's `schema.ParseGroupResource` splits `resource.group` at the
/// first dot: `secrets` is the core group's, `*.` every resource of the core group, `*.*` everything.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn parse(s: &str) -> GroupResource {
        match s.split_once('.') {
            Some((resource, group)) => GroupResource {
                group: group.into(),
                resource: resource.into(),
            },
            None => GroupResource {
                group: String::new(),
                resource: s.into(),
            },
        }
    }

    pub fn is_any(&self) -> bool {
        self.group == "*" && self.resource == "*"
    }

    /// How upstream's messages name it (`*.` for the core group's wildcard).
    pub fn yaml_string(&self) -> String {
        if self.group.is_empty() {
            if self.resource == "*" {
                "*.".into()
            } else {
                self.resource.clone()
            }
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

// The file as written. Unknown fields are errors, as upstream decodes strictly.

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    resources: Vec<FileResource>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileResource {
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    providers: Vec<FileProvider>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileProvider {
    aesgcm: Option<FileKeys>,
    aescbc: Option<FileKeys>,
    secretbox: Option<FileKeys>,
    identity: Option<FileIdentity>,
    /// Accepted in any shape only to be refused with a message that says so.
    kms: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileKeys {
    #[serde(default)]
    keys: Vec<FileKey>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileKey {
    #[serde(default)]
    name: String,
    #[serde(default)]
    secret: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileIdentity {}

const AES_KEY_SIZES: &[usize] = &[16, 24, 32];
const SECRETBOX_KEY_SIZES: &[usize] = &[32];

/// Decodes and validates a configuration file's contents (YAML or JSON). The error lists every
/// problem found, joined as upstream's aggregate errors are.
pub fn parse(data: &[u8]) -> Result<EncryptionConfiguration, String> {
    if data.iter().all(u8::is_ascii_whitespace) {
        return Err("the file is empty".into());
    }
    let file: File = serde_yaml_ng::from_slice(data).map_err(|e| e.to_string())?;
    match (file.api_version.as_deref(), file.kind.as_deref()) {
        (Some(API_VERSION), Some(KIND)) => {}
        (_, None | Some("")) => return Err("Object 'Kind' is missing".into()),
        (version, Some(kind)) => {
            return Err(format!(
                "no kind {kind:?} is registered for version {:?} (want apiVersion {API_VERSION}, \
                 kind {KIND})",
                version.unwrap_or("")
            ))
        }
    }
    let mut errors = Vec::new();
    let config = validate(file, &mut errors);
    if errors.is_empty() {
        Ok(config)
    } else {
        Err(aggregate(errors))
    }
}

fn validate(file: File, errors: &mut Vec<String>) -> EncryptionConfiguration {
    if file.resources.is_empty() {
        errors.push("resources: Required value: at least one resources is required".into());
    }
    let mut resources = Vec::new();
    for (i, entry) in file.resources.into_iter().enumerate() {
        let r = format!("resources[{i}].resources");
        let p = format!("resources[{i}].providers");
        if entry.resources.is_empty() {
            errors.push(format!("{r}: Required value: at least one {r} is required"));
        }
        validate_overlap(&entry.resources, &r, errors);
        validate_names(&entry.resources, &r, errors);
        if entry.providers.is_empty() {
            errors.push(format!("{p}: Required value: at least one {p} is required"));
        }
        let mut providers = Vec::new();
        for (j, provider) in entry.providers.into_iter().enumerate() {
            let path = format!("{p}[{j}]");
            if let Some(provider) = validate_provider(provider, &path, errors) {
                providers.push(provider);
            }
        }
        resources.push(ResourceConfiguration {
            resources: entry.resources,
            providers,
        });
    }
    if errors.is_empty() {
        check_masking(&resources, errors);
    }
    EncryptionConfiguration { resources }
}

fn go_strings(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// Duplicates and wildcards that mask other entries of the same list.
fn validate_overlap(resources: &[String], path: &str, errors: &mut Vec<String>) {
    let parsed: Vec<GroupResource> = resources.iter().map(|r| GroupResource::parse(r)).collect();
    let (mut duplicate, mut overlap) = (false, false);
    for (i, a) in parsed.iter().enumerate() {
        for (j, b) in parsed.iter().enumerate() {
            if i == j {
                continue;
            }
            if a == b {
                duplicate = true;
                continue;
            }
            if a.is_any() || (a.group == b.group && (a.resource == "*" || b.resource == "*")) {
                overlap = true;
            }
        }
    }
    let value = go_strings(resources);
    if duplicate {
        errors.push(format!(
            "{path}: Invalid value: {value}: the same resource cannot be specified multiple times"
        ));
    }
    if overlap {
        errors.push(format!(
            "{path}: Invalid value: {value}: using overlapping resources such as 'secrets' and \
             '*.' in the same resource list is not allowed as they will be masked"
        ));
    }
}

fn validate_names(resources: &[String], path: &str, errors: &mut Vec<String>) {
    for (j, res) in resources.iter().enumerate() {
        let gr = GroupResource::parse(res);
        let problem = if res.to_lowercase() != *res {
            "resource name should not contain capital letters"
        } else if res == "*" {
            "use '*.' to encrypt all the resources from core API group or *.* to encrypt all \
             resources"
        } else if matches!(
            res.as_str(),
            "apiserveripinfo" | "serviceipallocations" | "servicenodeportallocations"
        ) {
            "resources which do not have REST API/s cannot be encrypted"
        } else if gr.group == "events.k8s.io" {
            "'*.events.k8s.io' objects are stored using the 'events' API group in etcd. Use \
             'events' instead in the config file"
        } else if gr.group == "extensions" {
            "'extensions' group has been removed and cannot be used for encryption"
        } else if gr.group == "*" && gr.resource != "*" {
            "encrypting the same resource across groups is not supported"
        } else {
            continue;
        };
        errors.push(format!("{path}[{j}]: Invalid value: {res:?}: {problem}"));
    }
}

fn validate_provider(
    provider: FileProvider,
    path: &str,
    errors: &mut Vec<String>,
) -> Option<ProviderConfiguration> {
    let found = [
        provider.kms.is_some(),
        provider.aesgcm.is_some(),
        provider.aescbc.is_some(),
        provider.secretbox.is_some(),
        provider.identity.is_some(),
    ]
    .iter()
    .filter(|f| **f)
    .count();
    if found == 0 {
        errors.push(format!(
            "{path}: Invalid value: {{}}: provider does not contain any of the expected \
             providers: KMS, AESGCM, AESCBC, Secretbox, Identity"
        ));
        return None;
    }
    if found > 1 {
        errors.push(format!(
            "{path}: Invalid value: more than one provider specified in a single element, \
             should split into different list elements"
        ));
        return None;
    }
    if provider.kms.is_some() {
        errors.push(format!(
            "{path}.kms: Unsupported value: rkube has no KMS plugin client; use aescbc, aesgcm \
             or secretbox"
        ));
        return None;
    }
    if provider.identity.is_some() {
        return Some(ProviderConfiguration::Identity);
    }
    let (kind, name, keys, sizes) = if let Some(k) = provider.aesgcm {
        (ProviderKind::AesGcm, "aesgcm", k.keys, AES_KEY_SIZES)
    } else if let Some(k) = provider.aescbc {
        (ProviderKind::AesCbc, "aescbc", k.keys, AES_KEY_SIZES)
    } else {
        let k = provider.secretbox?;
        (
            ProviderKind::Secretbox,
            "secretbox",
            k.keys,
            SECRETBOX_KEY_SIZES,
        )
    };
    let keys = validate_keys(keys, &format!("{path}.{name}.keys"), sizes, errors)?;
    Some(ProviderConfiguration::Keyed { kind, keys })
}

fn validate_keys(
    keys: Vec<FileKey>,
    path: &str,
    sizes: &[usize],
    errors: &mut Vec<String>,
) -> Option<Vec<(String, Vec<u8>)>> {
    if keys.is_empty() {
        errors.push(format!(
            "{path}: Required value: at least one keys is required"
        ));
        return None;
    }
    let before = errors.len();
    let mut out = Vec::new();
    for (i, key) in keys.into_iter().enumerate() {
        let at = format!("{path}[{i}]");
        if key.name.is_empty() {
            errors.push(format!(
                "{at}.name: Required value: name is a mandatory field for a key"
            ));
        }
        if key.secret.is_empty() {
            errors.push(format!(
                "{at}.secret: Required value: secret is a mandatory field for a key"
            ));
            continue;
        }
        // The secret itself never appears in a message (upstream prints REDACTED).
        let Ok(secret) = base64::engine::general_purpose::STANDARD.decode(key.secret.trim()) else {
            errors.push(format!(
                "{at}.secret: Invalid value: \"REDACTED\": secrets must be base64 encoded"
            ));
            continue;
        };
        if !sizes.contains(&secret.len()) {
            let expected: Vec<String> = sizes.iter().map(usize::to_string).collect();
            errors.push(format!(
                "{at}.secret: Invalid value: \"REDACTED\": secret is not of the expected length, \
                 got {}, expected one of [{}]",
                secret.len(),
                expected.join(" ")
            ));
            continue;
        }
        out.push((key.name, secret));
    }
    (errors.len() == before).then_some(out)
}

/// Upstream's rule when building transformers: a resource after a `*.group` or `*.*` of an earlier
/// entry would never be used.
fn check_masking(resources: &[ResourceConfiguration], errors: &mut Vec<String>) {
    let mut seen: HashSet<GroupResource> = HashSet::new();
    for entry in resources {
        for res in &entry.resources {
            let gr = GroupResource::parse(res);
            let group_any = GroupResource {
                group: gr.group.clone(),
                resource: "*".into(),
            };
            let any = GroupResource::parse("*.*");
            for mask in [group_any, any] {
                if seen.contains(&mask) {
                    errors.push(format!(
                        "resource {:?} is masked by earlier rule {:?}",
                        gr.yaml_string(),
                        mask.yaml_string()
                    ));
                    return;
                }
            }
        }
        seen.extend(entry.resources.iter().map(|r| GroupResource::parse(r)));
    }
}

/// Go's aggregate error text: one message alone, several in brackets, duplicates once.
pub fn aggregate(errors: Vec<String>) -> String {
    let mut seen = HashSet::new();
    let unique: Vec<String> = errors
        .into_iter()
        .filter(|e| seen.insert(e.clone()))
        .collect();
    if unique.len() == 1 {
        unique.into_iter().next().unwrap_or_default()
    } else {
        format!("[{}]", unique.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY16: &str = "MTIzNDU2Nzg5MDEyMzQ1Ng=="; // "1234567890123456"
    const KEY32: &str = "MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTI="; // 32 bytes

    fn config(body: &str) -> Result<EncryptionConfiguration, String> {
        parse(format!("apiVersion: {API_VERSION}\nkind: {KIND}\n{body}").as_bytes())
    }

    #[test]
    fn parses_every_provider_in_order() {
        let c = config(&format!(
            "resources:
- resources: [secrets, configmaps, '*.apps']
  providers:
  - aescbc: {{keys: [{{name: key1, secret: {KEY32}}}, {{name: key0, secret: {KEY16}}}]}}
  - aesgcm: {{keys: [{{name: g, secret: {KEY16}}}]}}
  - secretbox: {{keys: [{{name: s, secret: {KEY32}}}]}}
  - identity: {{}}
- resources: ['*.*']
  providers: [{{identity: {{}}}}]
"
        ))
        .unwrap();
        assert_eq!(c.resources.len(), 2);
        let providers = &c.resources[0].providers;
        assert_eq!(providers.len(), 4);
        match &providers[0] {
            ProviderConfiguration::Keyed { kind, keys } => {
                assert_eq!(*kind, ProviderKind::AesCbc);
                assert_eq!(keys[0].0, "key1");
                assert_eq!(keys[0].1.len(), 32);
                assert_eq!(keys[1].1, b"1234567890123456");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(providers[3], ProviderConfiguration::Identity));
    }

    #[test]
    fn json_is_accepted() {
        let json = format!(
            r#"{{"apiVersion":"{API_VERSION}","kind":"{KIND}","resources":[{{"resources":["secrets"],
            "providers":[{{"aesgcm":{{"keys":[{{"name":"k","secret":"{KEY16}"}}]}}}}]}}]}}"#
        );
        assert!(parse(json.as_bytes()).is_ok());
    }

    #[test]
    fn refuses_what_upstream_refuses() {
        let cases = [
            ("resources: []", "at least one resources is required"),
            (
                "resources: [{resources: [secrets], providers: []}]",
                "resources[0].providers: Required value",
            ),
            (
                "resources: [{resources: [], providers: [{identity: {}}]}]",
                "resources[0].resources: Required value",
            ),
            (
                "resources: [{resources: [secrets], providers: [{aescbc: {keys: []}}]}]",
                "resources[0].providers[0].aescbc.keys: Required value: at least one keys",
            ),
            (
                "resources: [{resources: [secrets], providers: [{aescbc: {keys: [{name: a, secret: MTIz}]}}]}]",
                "secret is not of the expected length, got 3, expected one of [16 24 32]",
            ),
            (
                &format!("resources: [{{resources: [secrets], providers: [{{secretbox: {{keys: [{{name: a, secret: {KEY16}}}]}}}}]}}]"),
                "got 16, expected one of [32]",
            ),
            (
                "resources: [{resources: [secrets], providers: [{aesgcm: {keys: [{name: a, secret: '!!'}]}}]}]",
                "secrets must be base64 encoded",
            ),
            (
                &format!("resources: [{{resources: [secrets], providers: [{{aesgcm: {{keys: [{{secret: {KEY16}}}]}}}}]}}]"),
                "keys[0].name: Required value",
            ),
            (
                "resources: [{resources: [secrets], providers: [{}]}]",
                "provider does not contain any of the expected providers",
            ),
            (
                "resources: [{resources: [secrets], providers: [{identity: {}, aescbc: {keys: []}}]}]",
                "more than one provider specified in a single element",
            ),
            (
                "resources: [{resources: [secrets], providers: [{kms: {name: k, endpoint: 'unix:///k.sock'}}]}]",
                "rkube has no KMS plugin client",
            ),
            (
                "resources: [{resources: [secrets, secrets], providers: [{identity: {}}]}]",
                "the same resource cannot be specified multiple times",
            ),
            (
                "resources: [{resources: [secrets, '*.'], providers: [{identity: {}}]}]",
                "overlapping resources",
            ),
            (
                "resources: [{resources: ['*'], providers: [{identity: {}}]}]",
                "use '*.' to encrypt all the resources",
            ),
            (
                "resources: [{resources: [Secrets], providers: [{identity: {}}]}]",
                "should not contain capital letters",
            ),
            (
                "resources: [{resources: [events.events.k8s.io], providers: [{identity: {}}]}]",
                "Use 'events' instead",
            ),
            (
                "resources: [{resources: [serviceipallocations], providers: [{identity: {}}]}]",
                "do not have REST API/s",
            ),
            (
                "resources: [{resources: ['secrets.*'], providers: [{identity: {}}]}]",
                "across groups is not supported",
            ),
            (
                "resources: [{resources: ['*.'], providers: [{identity: {}}]}, {resources: [secrets], providers: [{identity: {}}]}]",
                "resource \"secrets\" is masked by earlier rule \"*.\"",
            ),
            (
                "resources: [{resources: ['*.*'], providers: [{identity: {}}]}, {resources: [deployments.apps], providers: [{identity: {}}]}]",
                "resource \"deployments.apps\" is masked by earlier rule \"*.*\"",
            ),
            (
                "resources: [{resources: [secrets], providers: [{identity: {}}], extra: 1}]",
                "unknown field `extra`",
            ),
        ];
        for (body, want) in cases {
            let err = config(body).expect_err(body);
            assert!(err.contains(want), "{body}: {err} lacks {want:?}");
        }
    }

    #[test]
    fn secrets_never_appear_in_errors() {
        let err = config(
            "resources: [{resources: [secrets], providers: [{aescbc: {keys: [{name: a, secret: c2VjcmV0}]}}]}]",
        )
        .unwrap_err();
        assert!(
            !err.contains("c2VjcmV0") && err.contains("REDACTED"),
            "{err}"
        );
    }

    #[test]
    fn kind_and_version_are_checked() {
        assert!(parse(b"").unwrap_err().contains("empty"));
        let err = parse(b"apiVersion: v1\nkind: ConfigMap\nresources: []").unwrap_err();
        assert!(err.contains("no kind \"ConfigMap\""), "{err}");
        assert!(parse(b"resources: []").unwrap_err().contains("Kind"));
    }

    #[test]
    fn group_resources_split_at_the_first_dot() {
        let gr = GroupResource::parse;
        assert_eq!(gr("secrets").group, "");
        assert_eq!(gr("deployments.apps").group, "apps");
        assert_eq!(gr("widgets.example.com").group, "example.com");
        assert_eq!(gr("*.").resource, "*");
        assert!(gr("*.*").is_any());
        assert_eq!(gr("*.").yaml_string(), "*.");
    }
}
