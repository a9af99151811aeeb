//! Simulated DRA drivers: each node publishes, per configured driver, one ResourceSlice in a pool
//! of its own (named after the node), as a kubelet plugin does. Device `<prefix>-<i>` carries the
//! attributes `model` (string), `index` (int) and `uuid` (string) and the capacity `memory`.
//! The slice is owned by the Node, so deleting the node collects it.

use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::PostParams;
use kube::Api;
use serde_json::{json, Value};

/// Devices of one driver on every node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSpec {
    pub driver: String,
    pub count: usize,
}

/// Upstream `ResourceSliceMaxDevices`: devices one slice may list.
pub const MAX_DEVICES_PER_SLICE: usize = 128;

impl DeviceSpec {
    /// `DRIVER=COUNT`, e.g. `gpu.example.com=8`.
    pub fn parse(s: &str) -> Result<DeviceSpec, String> {
        let (driver, count) = s
            .split_once('=')
            .ok_or_else(|| format!("devices {s:?}: expected DRIVER=COUNT"))?;
        let count: usize = count
            .parse()
            .map_err(|_| format!("devices {s:?}: {count:?} is not a count"))?;
        if driver.is_empty() || driver.len() > 63 || !driver.contains('.') {
            return Err(format!(
                "devices {s:?}: the driver must be a DNS subdomain of at most 63 characters with a dot"
            ));
        }
        if count > MAX_DEVICES_PER_SLICE {
            return Err(format!(
                "devices {s:?}: at most {MAX_DEVICES_PER_SLICE} devices per node and driver"
            ));
        }
        Ok(DeviceSpec {
            driver: driver.to_string(),
            count,
        })
    }

    /// The device name prefix: the driver's first label (`gpu` for `gpu.example.com`).
    fn prefix(&self) -> &str {
        self.driver.split('.').next().unwrap_or("dev")
    }
}

pub fn slice_name(node: &str, driver: &str) -> String {
    format!("{node}-{}", driver.replace('.', "-"))
}

pub fn slice_object(spec: &DeviceSpec, node: &str, node_uid: Option<&str>) -> Value {
    let devices: Vec<Value> = (0..spec.count)
        .map(|i| {
            json!({
                "name": format!("{}-{i}", spec.prefix()),
                "attributes": {
                    "model": {"string": format!("sim-{}", spec.prefix())},
                    "index": {"int": i},
                    "uuid": {"string": format!("{node}-{}-{i}", spec.prefix())},
                },
                "capacity": {"memory": {"value": "16Gi"}},
            })
        })
        .collect();
    let mut meta = json!({"name": slice_name(node, &spec.driver)});
    if let Some(uid) = node_uid {
        meta["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Node", "name": node,
            "uid": uid, "controller": true}]);
    }
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": meta,
        "spec": {
            "driver": spec.driver, "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        }
    })
}

/// Creates the node's slices, or updates them when they differ (an earlier run's other count).
pub async fn publish(
    client: &kube::Client,
    specs: &[DeviceSpec],
    node: &str,
    node_uid: Option<&str>,
) -> Result<(), String> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    for spec in specs {
        let want: ResourceSlice = serde_json::from_value(slice_object(spec, node, node_uid))
            .map_err(|e| e.to_string())?;
        let name = slice_name(node, &spec.driver);
        match api.create(&PostParams::default(), &want).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let mut have = api
                    .get(&name)
                    .await
                    .map_err(|e| format!("resourceslice {name}: {e}"))?;
                if have.spec.devices != want.spec.devices {
                    have.spec = want.spec;
                    have.spec.pool.generation += 1;
                    api.replace(&name, &PostParams::default(), &have)
                        .await
                        .map_err(|e| format!("resourceslice {name}: {e}"))?;
                }
            }
            Err(e) => return Err(format!("resourceslice {name}: {e}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_and_slices() {
        let s = DeviceSpec::parse("gpu.example.com=8").unwrap();
        assert_eq!(s.count, 8);
        assert!(DeviceSpec::parse("gpu").is_err());
        assert!(DeviceSpec::parse("gpu=1").is_err());
        assert!(DeviceSpec::parse("gpu.example.com=x").is_err());
        assert!(DeviceSpec::parse("gpu.example.com=129").is_err());
        let v = slice_object(&s, "sim-0", Some("u"));
        let slice: ResourceSlice = serde_json::from_value(v).unwrap();
        assert_eq!(
            slice.metadata.name.as_deref(),
            Some("sim-0-gpu-example-com")
        );
        let devices = slice.spec.devices.unwrap();
        assert_eq!(devices.len(), 8);
        assert_eq!(devices[7].name, "gpu-7");
        assert_eq!(slice.spec.pool.name, "sim-0");
        assert_eq!(slice.spec.node_name.as_deref(), Some("sim-0"));
    }
}
