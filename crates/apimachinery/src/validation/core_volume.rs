//! Pod volumes (upstream `pkg/apis/core/validation/validation.go`: `ValidateVolumes`,
//! `validateVolumeSource` and the checks of the common volume sources).
//!
//! Deliberately different: volume sources get their common checks only (required names and paths,
//! file modes), not every field of every storage plugin.

use std::collections::HashSet;

use serde_json::Value;

use super::core_container::validate_local_descending_path;
use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{get, get_arr, get_int, str_or_empty};
use super::names;

const FILE_MODE_MSG: &str = "must be a number between 0 and 0777 (octal), both inclusive";

/// Volume source fields, with the (sometimes misspelt) path upstream reports for a second source.
const VOLUME_SOURCES: [(&str, &str); 30] = [
    ("emptyDir", "emptyDir"),
    ("hostPath", "hostPath"),
    ("gitRepo", "gitRepo"),
    ("gcePersistentDisk", "gcePersistentDisk"),
    ("awsElasticBlockStore", "awsElasticBlockStore"),
    ("secret", "secret"),
    ("nfs", "nfs"),
    ("iscsi", "iscsi"),
    ("glusterfs", "glusterfs"),
    ("flocker", "flocker"),
    ("persistentVolumeClaim", "persistentVolumeClaim"),
    ("rbd", "rbd"),
    ("cinder", "cinder"),
    ("cephfs", "cephFS"),
    ("quobyte", "quobyte"),
    ("downwardAPI", "downwarAPI"),
    ("fc", "fc"),
    ("flexVolume", "flexVolume"),
    ("configMap", "configMap"),
    ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"),
    ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"),
    ("azureDisk", "azureDisk"),
    ("storageos", "storageos"),
    ("projected", "projected"),
    ("scaleIO", "scaleIO"),
    ("csi", "csi"),
    ("ephemeral", "ephemeral"),
    ("image", "image"),
];

fn validate_mode(src: &Value, key: &str, path: &FieldPath) -> ErrorList {
    match get_int(src, &[key]) {
        Some(m) if !(0..=0o777).contains(&m) => {
            vec![FieldError::invalid(&path.child(key), m, FILE_MODE_MSG)]
        }
        _ => Vec::new(),
    }
}

fn validate_key_to_paths(src: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    for (i, item) in get_arr(src, &["items"]).iter().enumerate() {
        let p = path.child("items").index(i);
        if str_or_empty(item, &["key"]).is_empty() {
            errs.push(FieldError::required(&p.child("key"), ""));
        }
        let ip = str_or_empty(item, &["path"]);
        if ip.is_empty() {
            errs.push(FieldError::required(&p.child("path"), ""));
        } else {
            errs.extend(validate_local_descending_path(ip, &p.child("path")));
            if ip.starts_with("..") {
                errs.push(FieldError::invalid(
                    &p.child("path"),
                    ip,
                    "must not start with '..'",
                ));
            }
        }
        errs.extend(validate_mode(item, "mode", &p));
    }
    errs
}

fn validate_volume_source(kind: &str, src: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let required = |errs: &mut ErrorList, key: &str| {
        if str_or_empty(src, &[key]).is_empty() {
            errs.push(FieldError::required(&path.child(key), ""));
        }
    };
    match kind {
        "hostPath" => {
            required(&mut errs, "path");
            let p = str_or_empty(src, &["path"]);
            if p.split('/').any(|s| s == "..") {
                errs.push(FieldError::invalid(
                    &path.child("path"),
                    p,
                    "must not contain '..'",
                ));
            }
            let t = str_or_empty(src, &["type"]);
            let types = [
                "",
                "BlockDevice",
                "CharDevice",
                "Directory",
                "DirectoryOrCreate",
                "File",
                "FileOrCreate",
                "Socket",
            ];
            if !types.contains(&t) {
                errs.push(FieldError::not_supported(&path.child("type"), t, &types));
            }
        }
        "secret" => {
            required(&mut errs, "secretName");
            errs.extend(validate_mode(src, "defaultMode", path));
            errs.extend(validate_key_to_paths(src, path));
        }
        "configMap" => {
            required(&mut errs, "name");
            errs.extend(validate_mode(src, "defaultMode", path));
            errs.extend(validate_key_to_paths(src, path));
        }
        "downwardAPI" => errs.extend(validate_mode(src, "defaultMode", path)),
        "persistentVolumeClaim" => required(&mut errs, "claimName"),
        "nfs" => {
            required(&mut errs, "server");
            required(&mut errs, "path");
            let p = str_or_empty(src, &["path"]);
            if !p.is_empty() && !p.starts_with('/') {
                errs.push(FieldError::invalid(
                    &path.child("path"),
                    p,
                    "must be an absolute path",
                ));
            }
        }
        "csi" => required(&mut errs, "driver"),
        "ephemeral" if get(src, &["volumeClaimTemplate"]).is_none() => {
            errs.push(FieldError::required(&path.child("volumeClaimTemplate"), ""));
        }
        "projected" => {
            errs.extend(validate_mode(src, "defaultMode", path));
            for (i, s) in get_arr(src, &["sources"]).iter().enumerate() {
                let sp = path.child("sources").index(i);
                let kinds = [
                    "secret",
                    "configMap",
                    "downwardAPI",
                    "serviceAccountToken",
                    "clusterTrustBundle",
                    "podCertificate",
                ];
                let set: Vec<&str> = kinds
                    .iter()
                    .copied()
                    .filter(|k| get(s, &[k]).is_some())
                    .collect();
                if set.len() > 1 {
                    errs.push(FieldError::forbidden(
                        &sp,
                        "may not specify more than 1 volume type per source",
                    ));
                }
                if let Some(t) = get(s, &["serviceAccountToken"]) {
                    let tp = sp.child("serviceAccountToken");
                    if str_or_empty(t, &["path"]).is_empty() {
                        errs.push(FieldError::required(&tp.child("path"), ""));
                    }
                    if let Some(e) = get_int(t, &["expirationSeconds"]) {
                        if e < 600 {
                            errs.push(FieldError::invalid(
                                &tp.child("expirationSeconds"),
                                e,
                                "may not specify a duration less than 10 minutes",
                            ));
                        } else if e > 1 << 32 {
                            errs.push(FieldError::invalid(
                                &tp.child("expirationSeconds"),
                                e,
                                "may not specify a duration larger than 2^32 seconds",
                            ));
                        }
                    }
                }
            }
        }
        _ => {}
    }
    errs
}

/// Upstream's `ValidateVolumes`: returns the names of the volumes that validated, for volume mounts.
pub(crate) fn validate_volumes(spec: &Value, path: &FieldPath) -> (HashSet<String>, ErrorList) {
    let mut names_ok = HashSet::new();
    let mut errs = ErrorList::new();
    for (i, vol) in get_arr(spec, &["volumes"]).iter().enumerate() {
        let ip = path.index(i);
        let mut el = ErrorList::new();
        let mut n = 0;
        for (key, bad_path) in VOLUME_SOURCES {
            let Some(src) = get(vol, &[key]) else {
                continue;
            };
            if n > 0 {
                el.push(FieldError::forbidden(
                    &ip.child(bad_path),
                    "may not specify more than 1 volume type",
                ));
            } else {
                n += 1;
                el.extend(validate_volume_source(key, src, &ip.child(key)));
            }
        }
        if n == 0 {
            el.push(FieldError::required(&ip, "must specify a volume type"));
        }
        let name = str_or_empty(vol, &["name"]);
        if name.is_empty() {
            el.push(FieldError::required(&ip.child("name"), ""));
        } else {
            el.extend(
                names::is_dns1123_label(name)
                    .into_iter()
                    .map(|m| FieldError::invalid(&ip.child("name"), name, m)),
            );
        }
        if names_ok.contains(name) {
            el.push(FieldError::duplicate(&ip.child("name"), name));
        }
        if el.is_empty() {
            names_ok.insert(name.to_string());
        } else {
            errs.extend(el);
        }
    }
    (names_ok, errs)
}
