//! The cluster's certificates (what kubeadm's `certs` phase makes for upstream): a CA, the API server's
//! serving certificate, an admin client certificate in group `system:masters`, and the client
//! certificate the API server presents to kubelets (kubeadm's `apiserver-kubelet-client`), kept under
//! `<data-dir>/pki/`. The CA and client credentials are made once; the serving certificate is re-issued
//! at every start so its names always cover the address being served.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

#[derive(Debug, thiserror::Error)]
#[error("certificates in {dir}: {message}")]
pub struct PkiError {
    dir: PathBuf,
    message: String,
}

/// PEM text of the cluster's credentials.
#[derive(Clone)]
pub struct Pki {
    pub dir: PathBuf,
    pub ca_cert: String,
    pub serving_cert: String,
    pub serving_key: String,
    pub admin_cert: String,
    pub admin_key: String,
    /// What the API server presents to kubelets (`--kubelet-client-certificate` by default).
    pub kubelet_client_cert: String,
    pub kubelet_client_key: String,
}

/// DNS names the serving certificate always carries (the in-cluster names of the `kubernetes` Service).
const SERVICE_NAMES: &[&str] = &[
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// Loads the CA and admin credential from `<data_dir>/pki`, making them on first start, and issues a
/// fresh serving certificate for `hosts` (IP addresses or names) plus the usual service names.
pub fn ensure(data_dir: &Path, hosts: &[String]) -> Result<Pki, PkiError> {
    let dir = data_dir.join("pki");
    let err = |message: String| PkiError {
        dir: dir.clone(),
        message,
    };
    std::fs::create_dir_all(&dir).map_err(|e| err(format!("cannot create: {e}")))?;
    let (ca_cert, ca_key) = load_or_make(&dir, "ca", |_| make_ca("rkube-ca")).map_err(err)?;
    let ca_key_pair = KeyPair::from_pem(&ca_key).map_err(|e| err(format!("ca.key: {e}")))?;
    let issuer =
        Issuer::from_ca_cert_pem(&ca_cert, ca_key_pair).map_err(|e| err(format!("ca.crt: {e}")))?;

    let (admin_cert, admin_key) = load_or_make(&dir, "admin", |_| {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "kubernetes-admin");
        params
            .distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.not_after = rcgen::date_time_ymd(2036, 1, 1);
        let cert = params.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    })
    .map_err(err)?;

    // kubeadm's apiserver-kubelet-client: kubelets authorize it as a cluster administrator.
    let (kubelet_client_cert, kubelet_client_key) =
        load_or_make(&dir, "apiserver-kubelet-client", |_| {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params
                .distinguished_name
                .push(DnType::CommonName, "kube-apiserver-kubelet-client");
            params
                .distinguished_name
                .push(DnType::OrganizationName, "system:masters");
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            params.not_after = rcgen::date_time_ymd(2036, 1, 1);
            let cert = params.signed_by(&key, &issuer)?;
            Ok((cert.pem(), key.serialize_pem()))
        })
        .map_err(err)?;

    let mut names: Vec<String> = SERVICE_NAMES.iter().map(|s| s.to_string()).collect();
    names.extend(["127.0.0.1".to_string(), "::1".to_string()]);
    for host in hosts {
        if !host.is_empty() && host != "0.0.0.0" && host != "::" && !names.contains(host) {
            names.push(host.clone());
        }
    }
    let serving = (|| -> Result<(String, String), rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_after = rcgen::date_time_ymd(2036, 1, 1);
        let cert = params.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    })()
    .map_err(|e| err(format!("cannot issue the serving certificate: {e}")))?;
    write_private(&dir.join("apiserver.crt"), &serving.0).map_err(err)?;
    write_private(&dir.join("apiserver.key"), &serving.1).map_err(err)?;

    Ok(Pki {
        dir,
        ca_cert,
        serving_cert: serving.0,
        serving_key: serving.1,
        admin_cert,
        admin_key,
        kubelet_client_cert,
        kubelet_client_key,
    })
}

/// Replaces the generated credentials with the operator's files (upstream's `--client-ca-file`,
/// `--tls-cert-file` and `--tls-private-key-file`): the CA bundle client certificates are verified
/// against, and the serving certificate with its key (both or neither).
pub fn use_files(
    pki: &mut Pki,
    client_ca: Option<&Path>,
    serving_cert: Option<&Path>,
    serving_key: Option<&Path>,
) -> Result<(), String> {
    let read = |flag: &str, p: &Path| {
        std::fs::read_to_string(p).map_err(|e| format!("{flag} {}: {e}", p.display()))
    };
    if let Some(p) = client_ca {
        pki.ca_cert = read("--client-ca-file", p)?;
    }
    match (serving_cert, serving_key) {
        (Some(c), Some(k)) => {
            pki.serving_cert = read("--tls-cert-file", c)?;
            pki.serving_key = read("--tls-private-key-file", k)?;
        }
        (None, None) => {}
        _ => return Err("--tls-cert-file and --tls-private-key-file go together".into()),
    }
    Ok(())
}

/// A serving certificate for `names` (DNS names or IP addresses) signed by the cluster CA of
/// `<data_dir>/pki` (made by [`ensure`]): what `rkube server` gives its local kubelet, so that the
/// kubelet can be verified with `--kubelet-certificate-authority <data-dir>/pki/ca.crt`.
pub fn issue_serving(
    data_dir: &Path,
    common_name: &str,
    names: &[String],
) -> Result<(String, String), PkiError> {
    let dir = data_dir.join("pki");
    let err = |message: String| PkiError {
        dir: dir.clone(),
        message,
    };
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name)).map_err(|e| err(format!("cannot read {name}: {e}")))
    };
    let (ca_cert, ca_key) = (read("ca.crt")?, read("ca.key")?);
    let ca_key = KeyPair::from_pem(&ca_key).map_err(|e| err(format!("ca.key: {e}")))?;
    let issuer =
        Issuer::from_ca_cert_pem(&ca_cert, ca_key).map_err(|e| err(format!("ca.crt: {e}")))?;
    (|| -> Result<(String, String), rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names.to_vec())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_after = rcgen::date_time_ymd(2036, 1, 1);
        let cert = params.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    })()
    .map_err(|e| {
        err(format!(
            "cannot issue a serving certificate for {common_name}: {e}"
        ))
    })
}

/// Reads `<name>.crt` and `<name>.key`, or makes and writes them.
/// A new self-signed CA named `common_name`: (certificate PEM, key PEM).
pub(crate) fn make_ca(common_name: &str) -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_after = rcgen::date_time_ymd(2036, 1, 1);
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

pub(crate) fn load_or_make(
    dir: &Path,
    name: &str,
    make: impl FnOnce(()) -> Result<(String, String), rcgen::Error>,
) -> Result<(String, String), String> {
    let (crt, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    if crt.exists() && key.exists() {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
        };
        return Ok((read(&crt)?, read(&key)?));
    }
    let (cert, private) = make(()).map_err(|e| format!("cannot make {name} certificate: {e}"))?;
    write_private(&key, &private)?;
    write_private(&crt, &cert)?;
    Ok((cert, private))
}

pub(crate) fn write_private(path: &Path, contents: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    f.write_all(contents.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A kubeconfig for the admin credential, as kubectl reads it.
pub fn admin_kubeconfig(pki: &Pki, server_url: &str) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: rkube
  cluster:
    server: {server_url}
    certificate-authority-data: {ca}
users:
- name: rkube-admin
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: rkube
  context:
    cluster: rkube
    user: rkube-admin
    namespace: default
current-context: rkube
preferences: {{}}
",
        ca = b64(&pki.ca_cert),
        cert = b64(&pki.admin_cert),
        key = b64(&pki.admin_key),
    )
}

/// Writes `contents` to `path` with owner-only permissions, atomically.
pub fn write_kubeconfig(path: &Path, contents: &str) -> Result<(), String> {
    write_private(path, contents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makes_then_reuses_the_ca_and_admin_credential() {
        let dir = tempfile::tempdir().unwrap();
        let first = ensure(dir.path(), &["127.0.0.2".into()]).unwrap();
        let second = ensure(dir.path(), &[]).unwrap();
        assert_eq!(first.ca_cert, second.ca_cert);
        assert_eq!(first.admin_cert, second.admin_cert);
        assert_eq!(first.kubelet_client_cert, second.kubelet_client_cert);
        assert!(dir.path().join("pki/apiserver-kubelet-client.key").exists());
        let (cert, _) =
            issue_serving(dir.path(), "node-1", &["node-1".into(), "127.0.0.1".into()]).unwrap();
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(
            first.serving_cert, second.serving_cert,
            "serving cert re-issued"
        );
        let kubeconfig = admin_kubeconfig(&first, "https://127.0.0.1:6443");
        assert!(kubeconfig.contains("server: https://127.0.0.1:6443"));
    }

    #[test]
    fn operator_files_replace_the_generated_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let mut pki = ensure(dir.path(), &[]).unwrap();
        let generated = pki.clone();
        let ca = dir.path().join("pki/ca.crt");
        assert!(
            use_files(&mut pki, None, Some(&ca), None).is_err(),
            "cert without key"
        );
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert, "CERT").unwrap();
        std::fs::write(&key, "KEY").unwrap();
        use_files(&mut pki, Some(&cert), Some(&cert), Some(&key)).unwrap();
        assert_eq!(
            (pki.ca_cert.as_str(), pki.serving_key.as_str()),
            ("CERT", "KEY")
        );
        assert_eq!(pki.admin_cert, generated.admin_cert);
        let missing = dir.path().join("none.pem");
        let err = use_files(&mut pki, Some(&missing), None, None).unwrap_err();
        assert!(err.starts_with("--client-ca-file"), "{err}");
    }
}
