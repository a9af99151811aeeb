//! Where the kubelet keeps its client certificate (upstream client-go `util/certificate`
//! `FileStore`): `<cert-dir>/kubelet-client-<timestamp>.pem` holds a certificate and its key,
//! `kubelet-client-current.pem` is a symlink to the newest, switched atomically, so a crash never
//! leaves a half-written credential. The kubeconfig the kubelet writes points at the symlink.

use std::path::{Path, PathBuf};

use super::csr::KeyAndCert;

const PREFIX: &str = "kubelet-client";

#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct StoreError {
    pub path: PathBuf,
    pub message: String,
}

fn err(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// The validity of a certificate, in seconds since the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
}

/// The validity of the first certificate in `pem`.
pub fn validity(pem: &str) -> Option<Validity> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = block.parse_x509().ok()?;
    Some(Validity {
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
    })
}

pub struct CertStore {
    dir: PathBuf,
}

impl CertStore {
    pub fn new(dir: impl Into<PathBuf>) -> CertStore {
        CertStore { dir: dir.into() }
    }

    /// The symlink the kubeconfig names.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{PREFIX}-current.pem"))
    }

    /// The current certificate and its validity, if there is one that parses.
    pub fn current(&self) -> Option<(String, Validity)> {
        let pem = std::fs::read_to_string(self.current_path()).ok()?;
        let validity = validity(&pem)?;
        Some((pem, validity))
    }

    /// Writes a new pair and makes it current.
    pub fn update(&self, pair: &KeyAndCert) -> Result<PathBuf, StoreError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| err(&self.dir, e))?;
        let stamp = jiff::Timestamp::now().strftime("%Y-%m-%d-%H-%M-%S%.f");
        let file = self.dir.join(format!("{PREFIX}-{stamp}.pem"));
        let mut contents = pair.cert_pem.trim_end().to_string();
        contents.push('\n');
        contents.push_str(&pair.key_pem);
        write_private(&file, contents.as_bytes())?;
        let current = self.current_path();
        let staged = self.dir.join(format!("{PREFIX}-current.pem.tmp"));
        let _ = std::fs::remove_file(&staged);
        std::os::unix::fs::symlink(&file, &staged).map_err(|e| err(&staged, e))?;
        std::fs::rename(&staged, &current).map_err(|e| err(&current, e))?;
        Ok(current)
    }
}

/// Writes a file only its owner may read (it holds a private key).
fn write_private(path: &Path, contents: &[u8]) -> Result<(), StoreError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| err(path, e))?;
    f.write_all(contents).map_err(|e| err(path, e))
}

/// Writes the kubeconfig the kubelet runs with: the bootstrap kubeconfig's cluster (server and CA)
/// and the certificate at `cert` as its credential (upstream `writeKubeconfigFromBootstrapping`).
pub fn write_kubeconfig(
    path: &Path,
    bootstrap: &kube::config::Kubeconfig,
    cert: &Path,
) -> Result<(), StoreError> {
    use kube::config::{AuthInfo, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext};
    let context = bootstrap
        .current_context
        .as_ref()
        .and_then(|name| bootstrap.contexts.iter().find(|c| &c.name == name))
        .and_then(|c| c.context.as_ref());
    let cluster = context
        .and_then(|c| bootstrap.clusters.iter().find(|n| n.name == c.cluster))
        .or(bootstrap.clusters.first())
        .and_then(|n| n.cluster.clone())
        .ok_or_else(|| err(path, "the bootstrap kubeconfig names no cluster"))?;
    let cert = cert.display().to_string();
    let config = Kubeconfig {
        clusters: vec![NamedCluster {
            name: "default-cluster".into(),
            cluster: Some(cluster),
            ..Default::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: "default-auth".into(),
            auth_info: Some(AuthInfo {
                client_certificate: Some(cert.clone()),
                client_key: Some(cert),
                ..Default::default()
            }),
            ..Default::default()
        }],
        contexts: vec![NamedContext {
            name: "default-context".into(),
            context: Some(Context {
                cluster: "default-cluster".into(),
                user: Some("default-auth".into()),
                namespace: Some("default".into()),
                ..Default::default()
            }),
            ..Default::default()
        }],
        current_context: Some("default-context".into()),
        kind: Some("Config".into()),
        api_version: Some("v1".into()),
        ..Default::default()
    };
    let yaml = serde_yaml_ng::to_string(&config).map_err(|e| err(path, e))?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| err(parent, e))?;
    }
    let staged = path.with_extension("tmp");
    write_private(&staged, yaml.as_bytes())?;
    std::fs::rename(&staged, path).map_err(|e| err(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(days: i64) -> KeyAndCert {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let now = std::time::SystemTime::now();
        params.not_before = now.into();
        params.not_after = (now + std::time::Duration::from_secs(days as u64 * 86400)).into();
        let cert = params.self_signed(&key).unwrap();
        KeyAndCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    #[test]
    fn the_newest_pair_is_current() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path().join("pki"));
        assert!(store.current().is_none());
        store.update(&self_signed(1)).unwrap();
        let (_, first) = store.current().unwrap();
        assert!((first.not_after - first.not_before - 86400).abs() <= 1);
        store.update(&self_signed(2)).unwrap();
        let (pem, second) = store.current().unwrap();
        assert!(second.not_after > first.not_after);
        assert!(
            pem.contains("PRIVATE KEY"),
            "the key travels with the certificate"
        );
        let files = std::fs::read_dir(dir.path().join("pki")).unwrap().count();
        assert_eq!(files, 3, "two pairs and the symlink");
    }
}
