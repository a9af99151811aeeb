//! Consumable capacity (upstream `structured` allocator's `consumable_capacity.go`, feature
//! DRAConsumableCapacity, beta and on by default in 1.36): what one allocation of a device takes
//! of each of its capacities, after the capacity's `requestPolicy` rounded the request up.
//!
//! A device with `allowMultipleAllocations` can be allocated to several requests (of one claim or
//! of many) while the sum of what they consume fits each capacity's value; every such allocation
//! gets a `shareID` and records its `consumedCapacity`. On other devices a request's
//! `capacity.requests` only filters (the device must have that much).
//!
//! Differences: quantities are compared in rkube's `Quantity` (nanounits); the 1.37 fractional
//! range arithmetic (DRAFractionalCapacityRange) is not done, ranges round in whole units as
//! 1.36's. A request whose rounding cannot be represented skips the device (1.36 does the same;
//! 1.37 aborts the allocation).

use apimachinery::quantity::Quantity;
use k8s_openapi::api::resource::v1::{CapacityRequestPolicy, CapacityRequirements, Device};

use super::selectors::qualify;

/// A claim request's `capacity.requests`, parsed: (name as written, amount).
pub type Requests = Vec<(String, Quantity)>;

/// Amounts by capacity name.
pub type Amounts = Vec<(String, Quantity)>;

/// What one allocation takes of one capacity of a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumed {
    /// The capacity's name as the device spells it (the status uses it).
    pub key: String,
    /// `domain/id`, the form the tracker adds up.
    pub norm: String,
    pub amount: Quantity,
    /// The capacity's total.
    pub value: Quantity,
}

pub fn parse(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> Option<Quantity> {
    Quantity::parse(&q.0).ok()
}

/// `domain/id` of a capacity name (unqualified names are in the driver's domain).
pub fn normalize(name: &str, driver: &str) -> String {
    let (domain, id) = qualify(name, driver);
    format!("{domain}/{id}")
}

/// Parses a request's `capacity.requests`; `Err` names a quantity that does not parse.
pub fn requests_of(c: Option<&CapacityRequirements>) -> Result<Requests, String> {
    let mut out = Vec::new();
    for (name, q) in c.and_then(|c| c.requests.as_ref()).into_iter().flatten() {
        let amount =
            parse(q).ok_or_else(|| format!("capacity {name}: invalid quantity {:?}", q.0))?;
        out.push((name.clone(), amount));
    }
    Ok(out)
}

/// Whether a device needs the capacity bookkeeping for a request: it is shareable, or the
/// request names capacities. Everything else is allocated whole without looking at capacity.
pub fn involved(requests: &Requests, device: &Device) -> bool {
    !requests.is_empty() || device.allow_multiple_allocations == Some(true)
}

/// What one allocation of `device` for `requests` consumes of each of its capacities (upstream
/// `cmpRequestOverCapacity` without the sum): `None` when the device lacks a requested capacity,
/// names one twice, or the rounded amount breaks the capacity's policy.
pub fn consumption(requests: &Requests, device: &Device, driver: &str) -> Option<Vec<Consumed>> {
    let caps = device.capacity.as_ref();
    // Every request must name one of the device's capacities, once.
    let mut resolved: Vec<(String, Quantity)> = Vec::with_capacity(requests.len());
    for (name, amount) in requests {
        let norm = normalize(name, driver);
        let known = caps
            .into_iter()
            .flatten()
            .any(|(k, _)| normalize(k, driver) == norm);
        if !known || resolved.iter().any(|(n, _)| *n == norm) {
            return None;
        }
        resolved.push((norm, *amount));
    }
    let mut out = Vec::new();
    for (key, cap) in caps.into_iter().flatten() {
        let norm = normalize(key, driver);
        // A capacity published both with and without the driver's domain counts once: the
        // qualified spelling wins (upstream `resolveDeviceCapacity`).
        if !key.contains('/') && caps.is_some_and(|c| c.contains_key(&norm)) {
            continue;
        }
        let value = parse(&cap.value)?;
        let requested = resolved.iter().find(|(n, _)| *n == norm).map(|(_, q)| *q);
        let policy = cap.request_policy.as_ref();
        let amount = consumed_amount(requested, value, policy)?;
        if amount.sign() < 0 || violates(amount, policy)? {
            return None;
        }
        out.push(Consumed {
            key: key.clone(),
            norm,
            amount,
            value,
        });
    }
    Some(out)
}

/// Whether `taken` (what other allocations hold, by normalized name) plus `c` fits every
/// capacity.
pub fn fits(c: &[Consumed], taken: impl Fn(&str) -> Quantity) -> bool {
    c.iter().all(|c| taken(&c.norm).add(&c.amount) <= c.value)
}

/// Upstream `calculateConsumedQuantity`: the request rounded up by the policy; without a
/// request, the policy's default or else the whole capacity. `None`: a quantity that does not
/// parse or a rounding that does not fit in 64 bits.
fn consumed_amount(
    requested: Option<Quantity>,
    value: Quantity,
    policy: Option<&CapacityRequestPolicy>,
) -> Option<Quantity> {
    let Some(req) = requested else {
        return match policy.and_then(|p| p.default.as_ref()) {
            Some(d) => parse(d),
            None => Some(value),
        };
    };
    let Some(policy) = policy else {
        return Some(req);
    };
    if let Some(range) = &policy.valid_range {
        let min = parse(&range.min)?;
        if req < min {
            return Some(min);
        }
        let Some(step) = range.step.as_ref() else {
            return Some(req);
        };
        let step_q = parse(step)?;
        let (r, s, m) = (
            i128::from(req.value()),
            i128::from(step_q.value()),
            i128::from(min.value()),
        );
        if s <= 0 {
            return Some(req);
        }
        let n = (r - m + s - 1).div_euclid(s);
        let v = i64::try_from(m + s * n).ok()?;
        return Some(Quantity::new(v, step_q.format()));
    }
    if let Some(values) = &policy.valid_values {
        for v in values {
            let v = parse(v)?;
            if req <= v {
                return Some(v);
            }
        }
    }
    Some(req)
}

/// Upstream `violatesPolicy`: `Some(true)` when the amount is not one the policy allows.
fn violates(amount: Quantity, policy: Option<&CapacityRequestPolicy>) -> Option<bool> {
    let Some(policy) = policy else {
        return Some(false);
    };
    if let Some(d) = &policy.default {
        if parse(d)? == amount {
            return Some(false);
        }
    }
    if let Some(range) = &policy.valid_range {
        if let Some(max) = &range.max {
            if amount > parse(max)? {
                return Some(true);
            }
        }
        if let Some(step) = &range.step {
            let (s, m) = (parse(step)?.value(), parse(&range.min)?.value());
            if s > 0 && (i128::from(amount.value()) - i128::from(m)) % i128::from(s) != 0 {
                return Some(true);
            }
        }
        return Some(false);
    }
    if let Some(values) = policy.valid_values.as_ref().filter(|v| !v.is_empty()) {
        for v in values {
            if parse(v)? == amount {
                return Some(false);
            }
        }
        return Some(true);
    }
    Some(false)
}

/// A new `shareID`: a random (version 4) UUID in RFC 4122 form, as upstream's `uuid.NewUUID`.
pub fn new_share_id() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn device(caps: serde_json::Value) -> Device {
        serde_json::from_value(
            json!({"name": "d", "allowMultipleAllocations": true, "capacity": caps}),
        )
        .unwrap()
    }

    fn reqs(r: &[(&str, &str)]) -> Requests {
        r.iter()
            .map(|(n, q)| (n.to_string(), Quantity::parse(q).unwrap()))
            .collect()
    }

    fn amount(c: &[Consumed], key: &str) -> String {
        c.iter().find(|c| c.key == key).unwrap().amount.to_string()
    }

    #[test]
    fn requests_round_up_by_policy() {
        let range = device(json!({"mem": {"value": "8Gi",
            "requestPolicy": {"default": "1Gi", "validRange": {"min": "1Gi", "max": "4Gi", "step": "1Gi"}}}}));
        let c =
            |r: &[(&str, &str)]| consumption(&reqs(r), &range, "drv").map(|c| amount(&c, "mem"));
        assert_eq!(c(&[]), Some("1Gi".into()), "the default without a request");
        assert_eq!(c(&[("mem", "100Mi")]), Some("1Gi".into()), "up to min");
        assert_eq!(
            c(&[("drv/mem", "1500Mi")]),
            Some("2Gi".into()),
            "up to a step"
        );
        assert_eq!(c(&[("mem", "4Gi")]), Some("4Gi".into()));
        assert_eq!(c(&[("mem", "5Gi")]), None, "over max");
        assert_eq!(c(&[("other", "1")]), None, "a capacity the device lacks");
        assert_eq!(c(&[("other.io/mem", "1")]), None, "another domain");

        let values = device(json!({"bw": {"value": "100",
            "requestPolicy": {"default": "10", "validValues": ["10", "20", "50"]}}}));
        let c =
            |r: &[(&str, &str)]| consumption(&reqs(r), &values, "drv").map(|c| amount(&c, "bw"));
        assert_eq!(c(&[("bw", "15")]), Some("20".into()));
        assert_eq!(c(&[("bw", "50")]), Some("50".into()));
        assert_eq!(c(&[("bw", "60")]), None, "over every valid value");

        let plain = device(json!({"mem": {"value": "8Gi"}, "cores": {"value": "4"}}));
        let got = consumption(&reqs(&[("mem", "3Gi")]), &plain, "drv").unwrap();
        assert_eq!(amount(&got, "mem"), "3Gi");
        assert_eq!(
            amount(&got, "cores"),
            "4",
            "an unrequested capacity without policy: all of it"
        );
    }

    #[test]
    fn shares_fit_while_the_sum_does() {
        let d = device(json!({"mem": {"value": "8Gi"}}));
        let c = consumption(&reqs(&[("mem", "4Gi")]), &d, "drv").unwrap();
        let held = |gi: i64| move |_: &str| Quantity::parse(&format!("{gi}Gi")).unwrap();
        assert!(fits(&c, held(0)));
        assert!(fits(&c, held(4)));
        assert!(!fits(&c, held(5)));
    }

    #[test]
    fn share_ids_are_normalized_uuids() {
        let a = new_share_id();
        assert_eq!(a.len(), 36);
        assert_eq!(a.as_bytes()[14], b'4');
        assert_eq!(a, a.to_lowercase());
        assert_ne!(a, new_share_id());
    }
}
