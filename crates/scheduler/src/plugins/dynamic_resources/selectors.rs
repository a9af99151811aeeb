//! CEL device selectors (upstream `k8s.io/dynamic-resource-allocation/cel`): an expression over
//! `device.driver`, `device.attributes[domain].name`, `device.capacity[domain].name` (a quantity)
//! and `device.allowMultipleAllocations`, compiled once per expression text and cached.
//!
//! Differences from upstream: version attributes are strings, not semver values; looking up a
//! domain the device has no attributes in is a "no such key" runtime error, where upstream yields
//! an empty map.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use k8s_openapi::api::resource::v1::{Device, DeviceAttribute};
use rkube_cel::{list_value, map_value, quantity_value, Activation, Env, Program, Value};

/// Compiled expressions kept; past it the cache starts over (expressions come from classes and
/// claims, which users create without bound).
const CACHE_LIMIT: usize = 4096;

static ENV: LazyLock<Env> = LazyLock::new(|| Env::new().with_variable("device"));

/// Compiled selectors by expression text; compile errors are cached too.
#[derive(Default)]
pub struct SelectorCache {
    programs: Mutex<HashMap<String, Result<Arc<Program>, String>>>,
}

impl SelectorCache {
    pub fn compile(&self, expr: &str) -> Result<Arc<Program>, String> {
        if let Ok(g) = self.programs.lock() {
            if let Some(p) = g.get(expr) {
                return p.clone();
            }
        }
        let compiled = Program::compile(expr, &ENV)
            .map(Arc::new)
            .map_err(|e| e.to_string());
        if let Ok(mut g) = self.programs.lock() {
            if g.len() >= CACHE_LIMIT {
                g.clear();
            }
            g.insert(expr.to_string(), compiled.clone());
        }
        compiled
    }
}

fn attribute_value(a: &DeviceAttribute) -> Value {
    if let Some(b) = a.bool {
        return Value::Bool(b);
    }
    if let Some(i) = a.int {
        return Value::Int(i);
    }
    if let Some(s) = a.string.as_ref().or(a.version.as_ref()) {
        return Value::String(Arc::new(s.clone()));
    }
    if let Some(v) = &a.bools {
        return list_value(v.iter().map(|b| Value::Bool(*b)).collect());
    }
    if let Some(v) = &a.ints {
        return list_value(v.iter().map(|i| Value::Int(*i)).collect());
    }
    if let Some(v) = a.strings.as_ref().or(a.versions.as_ref()) {
        return list_value(
            v.iter()
                .map(|s| Value::String(Arc::new(s.clone())))
                .collect(),
        );
    }
    Value::Null
}

/// Splits a qualified name (`domain/id`); an unqualified one is in the driver's domain.
pub fn qualify<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    match name.split_once('/') {
        Some((domain, id)) => (domain, id),
        None => (driver, name),
    }
}

/// The `device` variable of a selector.
pub fn device_value(driver: &str, d: &Device) -> Value {
    let mut attrs: HashMap<String, Vec<(String, Value)>> = HashMap::new();
    for (name, a) in d.attributes.iter().flatten() {
        let (domain, id) = qualify(name, driver);
        attrs
            .entry(domain.to_string())
            .or_default()
            .push((id.to_string(), attribute_value(a)));
    }
    let mut caps: HashMap<String, Vec<(String, Value)>> = HashMap::new();
    for (name, c) in d.capacity.iter().flatten() {
        let (domain, id) = qualify(name, driver);
        let q = apimachinery::quantity::Quantity::parse(&c.value.0)
            .unwrap_or_else(|_| apimachinery::quantity::Quantity::zero());
        caps.entry(domain.to_string())
            .or_default()
            .push((id.to_string(), quantity_value(q)));
    }
    // The driver's domain is always present, so `device.attributes[device.driver]` never fails.
    attrs.entry(driver.to_string()).or_default();
    caps.entry(driver.to_string()).or_default();
    let nest = |m: HashMap<String, Vec<(String, Value)>>| {
        map_value(m.into_iter().map(|(k, v)| (k, map_value(v))))
    };
    map_value([
        (
            "driver".to_string(),
            Value::String(Arc::new(driver.to_string())),
        ),
        ("attributes".to_string(), nest(attrs)),
        ("capacity".to_string(), nest(caps)),
        (
            "allowMultipleAllocations".to_string(),
            Value::Bool(d.allow_multiple_allocations == Some(true)),
        ),
    ])
}

/// Evaluates a compiled selector against a device value.
pub fn matches(program: &Program, device: &Value) -> Result<bool, String> {
    let mut act = Activation::new();
    act.bind_value("device", device.clone());
    match program.eval(&act) {
        Ok(Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("expression must return bool, got {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn device() -> Device {
        serde_json::from_value(json!({
            "name": "gpu-0",
            "attributes": {"model": {"string": "a100"}, "index": {"int": 0},
                "other.io/flag": {"bool": true}},
            "capacity": {"memory": {"value": "16Gi"}}
        }))
        .unwrap()
    }

    #[test]
    fn selectors_see_driver_attributes_and_capacity() {
        let cache = SelectorCache::default();
        let v = device_value("gpu.example.com", &device());
        let cases = [
            ("device.driver == 'gpu.example.com'", true),
            ("device.attributes['gpu.example.com'].model == 'a100'", true),
            ("device.attributes['gpu.example.com'].index > 0", false),
            ("device.attributes['other.io'].flag", true),
            (
                "device.capacity['gpu.example.com'].memory.compareTo(quantity('8Gi')) >= 0",
                true,
            ),
            (
                "device.capacity['gpu.example.com'].memory.isGreaterThan(quantity('32Gi'))",
                false,
            ),
            ("device.allowMultipleAllocations", false),
        ];
        for (expr, want) in cases {
            let p = cache.compile(expr).unwrap();
            assert_eq!(matches(&p, &v), Ok(want), "{expr}");
        }
        assert!(cache.compile("device.driver ==").is_err());
        let p = cache
            .compile("device.attributes['gpu.example.com'].missing")
            .unwrap();
        assert!(matches(&p, &v).is_err());
        let p = cache.compile("device.driver").unwrap();
        assert!(matches(&p, &v).unwrap_err().contains("must return bool"));
    }
}
