//! The structured-parameters allocator (upstream `k8s.io/dynamic-resource-allocation/structured`),
//! for one node: finds devices in the node's ResourceSlices for every request of the claims to
//! allocate, or says there are none. A depth-first search with backtracking, as upstream's, over
//! requests (`exactly`: `ExactCount` or `All`; `firstAvailable`: the subrequests in order) and the
//! devices of each; `matchAttribute`/`distinctAttribute` constraints are checked as devices are
//! picked. Devices with `allowMultipleAllocations` are shared while their capacity lasts and
//! devices that consume a pool's shared counters are allocated while the counters last
//! ([`sharing`]); device taints with effect NoSchedule or NoExecute keep a device from requests
//! that do not tolerate them.
//!
//! Not done: DeviceTaintRules (DRADeviceTaintRules is off by default in 1.36, its API beta and
//! off), binding conditions, devices backing extended resources.

use std::cell::{OnceCell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    AllocationResult, Device, DeviceAllocationConfiguration, DeviceAllocationResult, DeviceClass,
    DeviceRequestAllocationResult, DeviceTaint, DeviceToleration, ResourceClaim, ResourceSlice,
};
use rkube_cel::{Program, Value};

use super::capacity::{self, Requests};
use super::selectors::{self, qualify, SelectorCache};
use super::slices::{CounterAmounts, PoolCounters};
use super::tracker::{SharedUse, Taken, NO_ID};
use crate::framework::NodeInfo;
use crate::plugins::node_affinity::node_selector_matches;

mod sharing;

/// Upstream `AllocationResultsMaxSize`: devices one claim may get.
pub const ALLOCATION_RESULTS_MAX_SIZE: usize = 32;

/// Search steps (devices tried) for one node before giving up on it: bounds a cycle whatever the
/// claims ask for (upstream bounds it only by the scheduling context).
const STEP_LIMIT: usize = 100_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Exact(usize),
    All,
}

/// One way to satisfy a request: the request itself, or one of its `firstAvailable` subrequests.
#[derive(Clone)]
pub struct Alt {
    /// `request` or `request/subrequest`, as in the allocation result.
    pub name: String,
    pub class: Arc<DeviceClass>,
    /// Class selectors then request selectors, with their descriptions for errors.
    pub selectors: Vec<(Arc<Program>, String)>,
    pub mode: Mode,
    pub admin: bool,
    pub tolerations: Vec<DeviceToleration>,
    /// `capacity.requests` (consumable capacity); empty for most requests.
    pub capacity: Requests,
}

#[derive(Clone)]
pub struct Request {
    pub claim: usize,
    /// The request's own name (constraints name it).
    pub name: String,
    pub alts: Vec<Alt>,
    /// A `firstAvailable` request (its alternatives are subrequests, which Score ranks).
    pub first_available: bool,
}

#[derive(Clone)]
struct Constraint {
    claim: usize,
    /// Requests it applies to (empty: all of the claim's).
    requests: Vec<String>,
    attribute: String,
    distinct: bool,
}

/// Why claims cannot be prepared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrepareError {
    /// A request names a DeviceClass that does not exist (the pod waits for it).
    ClassMissing(String),
    /// A selector does not compile, or a request asks for too many devices.
    Invalid(String),
}

/// The claims to allocate, prepared once per pod (PreFilter).
#[derive(Clone, Default)]
pub struct Prepared {
    pub claims: Vec<Arc<ResourceClaim>>,
    pub requests: Vec<Request>,
    constraints: Vec<Constraint>,
    /// Per request, the index of its first alternative among all requests' alternatives (the
    /// search's selector results are one flat table).
    alt_base: Vec<usize>,
    alts_total: usize,
}

fn compile_selectors(
    out: &mut Vec<(Arc<Program>, String)>,
    sels: Option<&Vec<k8s_openapi::api::resource::v1::DeviceSelector>>,
    what: &str,
    cache: &SelectorCache,
) -> Result<(), String> {
    for (i, s) in sels.into_iter().flatten().enumerate() {
        let Some(cel) = &s.cel else { continue };
        let p = cache
            .compile(&cel.expression)
            .map_err(|e| format!("{what}: selector #{i}: CEL compile error: {e}"))?;
        out.push((p, format!("{what}: selector #{i}")));
    }
    Ok(())
}

impl Prepared {
    /// Compiles the selectors of `claims` and their classes. `Err` for what makes the claims
    /// unusable (a bad expression, an oversized request).
    pub fn new(
        claims: Vec<Arc<ResourceClaim>>,
        class: impl Fn(&str) -> Option<Arc<DeviceClass>>,
        cache: &SelectorCache,
    ) -> Result<Prepared, PrepareError> {
        let mut requests = Vec::new();
        let mut constraints = Vec::new();
        for (ci, claim) in claims.iter().enumerate() {
            let ckey = format!(
                "{}/{}",
                claim.metadata.namespace.as_deref().unwrap_or(""),
                claim.metadata.name.as_deref().unwrap_or("")
            );
            let Some(devices) = &claim.spec.devices else {
                continue;
            };
            for r in devices.requests.iter().flatten() {
                let mut alts = Vec::new();
                let mut subs = Vec::new();
                if let Some(e) = &r.exactly {
                    subs.push((
                        r.name.clone(),
                        &e.device_class_name,
                        e.selectors.as_ref(),
                        e.allocation_mode.as_deref(),
                        e.count,
                        e.admin_access == Some(true),
                        e.tolerations.clone(),
                        e.capacity.as_ref(),
                    ));
                }
                for s in r.first_available.iter().flatten() {
                    subs.push((
                        format!("{}/{}", r.name, s.name),
                        &s.device_class_name,
                        s.selectors.as_ref(),
                        s.allocation_mode.as_deref(),
                        s.count,
                        false,
                        s.tolerations.clone(),
                        s.capacity.as_ref(),
                    ));
                }
                for (name, class_name, sels, mode, count, admin, tolerations, cap) in subs {
                    let Some(cls) = class(class_name) else {
                        return Err(PrepareError::ClassMissing(format!(
                            "request {name}: device class {class_name} does not exist"
                        )));
                    };
                    let mode = match mode.unwrap_or("ExactCount") {
                        "All" => Mode::All,
                        _ => {
                            let n = count.unwrap_or(1).max(0) as usize;
                            if n > ALLOCATION_RESULTS_MAX_SIZE {
                                return Err(PrepareError::Invalid(format!(
                                    "claim {ckey}, request {name}: number of requested devices {n} exceeds the claim limit of {ALLOCATION_RESULTS_MAX_SIZE}"
                                )));
                            }
                            Mode::Exact(n)
                        }
                    };
                    let mut selectors = Vec::new();
                    let cname = cls.metadata.name.clone().unwrap_or_default();
                    compile_selectors(
                        &mut selectors,
                        cls.spec.selectors.as_ref(),
                        &format!("class {cname}"),
                        cache,
                    )
                    .map_err(PrepareError::Invalid)?;
                    compile_selectors(
                        &mut selectors,
                        sels,
                        &format!("claim {ckey}, request {name}"),
                        cache,
                    )
                    .map_err(PrepareError::Invalid)?;
                    let capacity = capacity::requests_of(cap).map_err(|e| {
                        PrepareError::Invalid(format!("claim {ckey}, request {name}: {e}"))
                    })?;
                    alts.push(Alt {
                        name,
                        class: cls,
                        selectors,
                        mode,
                        admin,
                        tolerations: tolerations.unwrap_or_default(),
                        capacity,
                    });
                }
                requests.push(Request {
                    claim: ci,
                    name: r.name.clone(),
                    alts,
                    first_available: r.exactly.is_none(),
                });
            }
            for c in devices.constraints.iter().flatten() {
                let (attribute, distinct) = match (&c.match_attribute, &c.distinct_attribute) {
                    (Some(a), _) => (a.clone(), false),
                    (None, Some(a)) => (a.clone(), true),
                    (None, None) => continue,
                };
                constraints.push(Constraint {
                    claim: ci,
                    requests: c.requests.clone().unwrap_or_default(),
                    attribute,
                    distinct,
                });
            }
        }
        let mut alt_base = Vec::with_capacity(requests.len());
        let mut alts_total = 0;
        for r in &requests {
            alt_base.push(alts_total);
            alts_total += r.alts.len();
        }
        Ok(Prepared {
            claims,
            requests,
            constraints,
            alt_base,
            alts_total,
        })
    }
}

/// Selector results of one device, by compiled program (the index keeps the device unchanged, so a
/// result holds until the slice changes): every pod asking for the same class would otherwise
/// evaluate the same expressions on every node again. At most [`MEMO_LIMIT`] programs per device.
#[derive(Default)]
pub struct SelectorMemo(std::sync::Mutex<Vec<(Arc<Program>, bool)>>);

const MEMO_LIMIT: usize = 16;

impl SelectorMemo {
    fn get(&self, p: &Arc<Program>) -> Option<bool> {
        let g = self.0.lock().ok()?;
        g.iter().find(|(q, _)| Arc::ptr_eq(p, q)).map(|(_, r)| *r)
    }

    fn put(&self, p: &Arc<Program>, r: bool) {
        if let Ok(mut g) = self.0.lock() {
            if g.len() >= MEMO_LIMIT {
                g.clear();
            }
            g.push((p.clone(), r));
        }
    }
}

/// A device of a slice the node can use.
pub struct NodeDevice<'a> {
    pub slice: &'a ResourceSlice,
    pub device: &'a Device,
    value: OnceCell<Value>,
    /// The value built in advance (the slice index's).
    prebuilt: Option<&'a Value>,
    memo: Option<&'a SelectorMemo>,
    /// The tracker's id for the device ([`NO_ID`]: checked by name).
    id: u32,
}

impl<'a> NodeDevice<'a> {
    pub fn new(slice: &'a ResourceSlice, device: &'a Device) -> NodeDevice<'a> {
        NodeDevice {
            slice,
            device,
            value: OnceCell::new(),
            prebuilt: None,
            memo: None,
            id: NO_ID,
        }
    }

    pub fn with_value(
        slice: &'a ResourceSlice,
        device: &'a Device,
        value: &'a Value,
        memo: &'a SelectorMemo,
        id: u32,
    ) -> NodeDevice<'a> {
        NodeDevice {
            prebuilt: Some(value),
            memo: Some(memo),
            id,
            ..NodeDevice::new(slice, device)
        }
    }

    fn value(&self) -> &Value {
        if let Some(v) = self.prebuilt {
            return v;
        }
        self.value
            .get_or_init(|| selectors::device_value(&self.slice.spec.driver, self.device))
    }

    fn attribute(&self, qualified: &str) -> Option<String> {
        let driver = &self.slice.spec.driver;
        let (domain, id) = qualify(qualified, driver);
        self.device
            .attributes
            .iter()
            .flatten()
            .find_map(|(k, v)| (qualify(k, driver) == (domain, id)).then(|| format!("{v:?}")))
    }
}

/// Upstream `DeviceToleration.ToleratesTaint`.
pub fn tolerates(t: &DeviceToleration, taint: &DeviceTaint) -> bool {
    if let Some(e) = t.effect.as_deref().filter(|e| !e.is_empty()) {
        if e != taint.effect {
            return false;
        }
    }
    let key = t.key.as_deref().unwrap_or("");
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        "Equal" => {
            key == taint.key
                && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

fn taints_tolerated(device: &Device, tolerations: &[DeviceToleration]) -> bool {
    device.taints.iter().flatten().all(|taint| {
        !matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute")
            || tolerations.iter().any(|t| tolerates(t, taint))
    })
}

struct Search<'p, 'd> {
    prep: &'p Prepared,
    devices: &'d [NodeDevice<'d>],
    taken: &'p Taken<'p>,
    /// The interner epoch of the devices' ids.
    epoch: u64,
    /// Pools whose slices are not all there (All requests cannot be decided).
    incomplete: &'p HashSet<(String, String)>,
    /// Shared counters by pool (partitionable devices).
    counters: &'p HashMap<(String, String), PoolCounters>,
    /// Devices picked whole so far (shareable devices are never marked).
    used: Vec<bool>,
    /// What this search gave out so far of shareable devices, by device index.
    allocating: HashMap<usize, SharedUse>,
    /// Per pool, counters left by (counter set, counter): computed when first needed.
    counters_left: HashMap<(String, String), CounterAmounts>,
    /// Per entry of `picked`, what taking the device changed (undone on backtracking).
    undo: Vec<sharing::Undo>,
    /// Selector results by alternative (`Prepared::alt_base`) and device, evaluated on first need.
    memo: Vec<Option<bool>>,
    /// (request, alternative, device) picked so far.
    picked: Vec<(usize, usize, usize)>,
    steps: usize,
    error: Option<String>,
}

impl Search<'_, '_> {
    fn selectable(&mut self, r: usize, a: usize, d: usize) -> bool {
        let slot = (self.prep.alt_base[r] + a) * self.devices.len() + d;
        if let Some(v) = self.memo[slot] {
            return v;
        }
        let alt = &self.prep.requests[r].alts[a];
        let dev = &self.devices[d];
        let mut ok = taints_tolerated(dev.device, &alt.tolerations);
        if ok {
            for (p, what) in &alt.selectors {
                let known = dev.memo.and_then(|m| m.get(p));
                let result = match known {
                    Some(r) => Ok(r),
                    None => selectors::matches(p, dev.value()),
                };
                if let (None, Ok(r), Some(m)) = (known, &result, dev.memo) {
                    m.put(p, *r);
                }
                match result {
                    Ok(true) => {}
                    Ok(false) => {
                        ok = false;
                        break;
                    }
                    Err(e) => {
                        if self.error.is_none() {
                            self.error = Some(format!("{what}: CEL runtime error: {e}"));
                        }
                        ok = false;
                        break;
                    }
                }
            }
        }
        self.memo[slot] = Some(ok);
        ok
    }

    fn free(&self, a: &Alt, d: usize) -> bool {
        let dev = &self.devices[d];
        !self.used[d]
            && (a.admin
                || !self.taken.contains_id(
                    dev.id,
                    self.epoch,
                    &dev.slice.spec.driver,
                    &dev.slice.spec.pool.name,
                    &dev.device.name,
                ))
    }

    /// Whether adding device `d` for request `r` keeps the claim's constraints.
    fn constraints_ok(&self, r: usize, d: usize) -> bool {
        let req = &self.prep.requests[r];
        for c in self
            .prep
            .constraints
            .iter()
            .filter(|c| c.claim == req.claim)
        {
            if !c.requests.is_empty() && !c.requests.contains(&req.name) {
                continue;
            }
            let Some(v) = self.devices[d].attribute(&c.attribute) else {
                return false;
            };
            for &(pr, _, pd) in &self.picked {
                let preq = &self.prep.requests[pr];
                if preq.claim != c.claim
                    || (!c.requests.is_empty() && !c.requests.contains(&preq.name))
                {
                    continue;
                }
                let same = self.devices[pd].attribute(&c.attribute).as_ref() == Some(&v);
                if same == c.distinct {
                    return false;
                }
            }
        }
        true
    }

    fn request(&mut self, r: usize) -> bool {
        if r == self.prep.requests.len() {
            return true;
        }
        for a in 0..self.prep.requests[r].alts.len() {
            let alt = &self.prep.requests[r].alts[a];
            let ok = match alt.mode {
                Mode::Exact(n) => self.pick(r, a, n, 0),
                Mode::All => self.all(r, a),
            };
            if ok {
                return true;
            }
            if self.error.is_some() || self.steps > STEP_LIMIT {
                return false;
            }
        }
        false
    }

    fn pick(&mut self, r: usize, a: usize, remaining: usize, from: usize) -> bool {
        if remaining == 0 {
            return self.request(r + 1);
        }
        let n = self.devices.len();
        let mut d = from;
        while d + remaining <= n {
            self.steps += 1;
            if self.steps > STEP_LIMIT || self.error.is_some() {
                return false;
            }
            let alt = &self.prep.requests[r].alts[a];
            if self.free(alt, d) && self.selectable(r, a, d) && self.constraints_ok(r, d) {
                if let Some(undo) = self.take(r, a, d) {
                    self.push(r, a, d, undo);
                    if self.pick(r, a, remaining - 1, d + 1) {
                        return true;
                    }
                    self.pop();
                }
            }
            d += 1;
        }
        false
    }

    /// `All`: every matching device of the node, at least one, all free.
    fn all(&mut self, r: usize, a: usize) -> bool {
        let mut chosen = Vec::new();
        for d in 0..self.devices.len() {
            self.steps += 1;
            if !self.selectable(r, a, d) {
                continue;
            }
            let dev = &self.devices[d];
            let pool = (
                dev.slice.spec.driver.clone(),
                dev.slice.spec.pool.name.clone(),
            );
            if self.incomplete.contains(&pool) {
                let req = &self.prep.requests[r];
                self.error = Some(format!(
                    "claim {}, request {}: asks for all devices, but resource pool {} is currently being updated",
                    self.prep.claims[req.claim].metadata.name.as_deref().unwrap_or(""),
                    req.alts[a].name,
                    pool.1
                ));
                return false;
            }
            if !self.free(&self.prep.requests[r].alts[a], d) || !self.constraints_ok(r, d) {
                return false;
            }
            chosen.push(d);
        }
        if chosen.is_empty() {
            return false;
        }
        let mut pushed = 0;
        for &d in &chosen {
            match self.take(r, a, d) {
                Some(undo) => {
                    self.push(r, a, d, undo);
                    pushed += 1;
                }
                None => break,
            }
        }
        if pushed == chosen.len() && self.request(r + 1) {
            return true;
        }
        for _ in 0..pushed {
            self.pop();
        }
        false
    }
}

/// The node selector of an allocation from these devices' slices: the node itself for node-local
/// devices, else the first slice's selector, else none (all nodes).
fn allocation_node_selector(devs: &[&NodeDevice<'_>], node: &str) -> Option<NodeSelector> {
    let local = devs.iter().any(|d| {
        d.slice
            .spec
            .node_name
            .as_deref()
            .is_some_and(|n| !n.is_empty())
            || d.device.node_name.as_deref().is_some_and(|n| !n.is_empty())
    });
    if local {
        return Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_fields: Some(vec![NodeSelectorRequirement {
                    key: "metadata.name".into(),
                    operator: "In".into(),
                    values: Some(vec![node.to_string()]),
                }]),
                ..Default::default()
            }],
        });
    }
    devs.iter().find_map(|d| {
        d.device
            .node_selector
            .clone()
            .or_else(|| d.slice.spec.node_selector.clone())
    })
}

/// Devices a search picked on one node: (request, alternative, index into the node's devices).
/// Filter keeps only these; the allocation results are built for the chosen node alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Picks(pub Vec<(usize, usize, usize)>);

impl Picks {
    /// Upstream `computeScore` (prioritized list): `8 - position` of the subrequest each
    /// `firstAvailable` request got.
    pub fn score(&self, prep: &Prepared) -> i64 {
        let mut seen: Vec<usize> = Vec::new();
        let mut total = 0;
        for &(r, a, _) in &self.0 {
            if prep.requests[r].first_available && !seen.contains(&r) {
                seen.push(r);
                total += FIRST_AVAILABLE_MAX - a as i64;
            }
        }
        total
    }
}

/// Upstream `FirstAvailableDeviceRequestMaxSize`.
const FIRST_AVAILABLE_MAX: i64 = 8;

/// Finds devices for every prepared claim on a node: `Ok(None)` when they do not suffice, `Err`
/// when a claim or class cannot be evaluated (upstream aborts the pod's cycle then). `epoch` is
/// the interner epoch of the devices' ids; `counters` the slice index's shared counters.
pub fn allocate(
    prep: &Prepared,
    devices: &[NodeDevice<'_>],
    taken: &Taken<'_>,
    epoch: u64,
    incomplete: &HashSet<(String, String)>,
    counters: &HashMap<(String, String), PoolCounters>,
) -> Result<Option<Picks>, String> {
    let (mut used, mut memo) = SCRATCH.with(RefCell::take);
    used.clear();
    used.resize(devices.len(), false);
    memo.clear();
    memo.resize(prep.alts_total * devices.len(), None);
    let mut s = Search {
        prep,
        devices,
        taken,
        epoch,
        incomplete,
        counters,
        used,
        allocating: HashMap::new(),
        counters_left: HashMap::new(),
        undo: Vec::new(),
        memo,
        picked: Vec::new(),
        steps: 0,
        error: None,
    };
    let found = s.request(0);
    let Search {
        used,
        memo,
        picked,
        error,
        ..
    } = s;
    if memo.capacity() <= SCRATCH_KEPT {
        SCRATCH.with(|x| x.replace((used, memo)));
    }
    if let Some(e) = error {
        return Err(e);
    }
    Ok(found.then_some(Picks(picked)))
}

thread_local! {
    /// The `used` and `memo` tables of this thread's last search, reused: Filter searches every
    /// node of every pod, and their two allocations per node showed in the DRA benchmark's profile.
    static SCRATCH: RefCell<(Vec<bool>, Vec<Option<bool>>)> = RefCell::default();
}

/// Selector-result slots (alternatives x devices) a thread keeps between searches at most.
const SCRATCH_KEPT: usize = 1 << 16;

/// The allocation results of `picks` (from [`allocate`] with the same `devices`), one per
/// prepared claim.
pub fn results(
    prep: &Prepared,
    node: &NodeInfo,
    devices: &[NodeDevice<'_>],
    picks: &Picks,
) -> Vec<AllocationResult> {
    let mut out = Vec::with_capacity(prep.claims.len());
    for (ci, claim) in prep.claims.iter().enumerate() {
        let mut results = Vec::new();
        let mut config = Vec::new();
        let mut devs = Vec::new();
        let mut classes_done = HashSet::new();
        for &(r, a, d) in picks
            .0
            .iter()
            .filter(|(r, _, _)| prep.requests[*r].claim == ci)
        {
            let alt = &prep.requests[r].alts[a];
            let Some(dev) = devices.get(d) else { continue };
            devs.push(dev);
            let (share_id, consumed_capacity) = sharing::share_of(alt, dev);
            results.push(DeviceRequestAllocationResult {
                request: alt.name.clone(),
                driver: dev.slice.spec.driver.clone(),
                pool: dev.slice.spec.pool.name.clone(),
                device: dev.device.name.clone(),
                admin_access: alt.admin.then_some(true),
                tolerations: (!alt.tolerations.is_empty()).then(|| alt.tolerations.clone()),
                share_id,
                consumed_capacity,
                ..Default::default()
            });
            if classes_done.insert(alt.name.clone()) {
                for c in alt.class.spec.config.iter().flatten() {
                    config.push(DeviceAllocationConfiguration {
                        source: "FromClass".into(),
                        requests: Some(vec![alt.name.clone()]),
                        opaque: c.opaque.clone(),
                    });
                }
            }
        }
        if let Some(d) = &claim.spec.devices {
            for c in d.config.iter().flatten() {
                config.push(DeviceAllocationConfiguration {
                    source: "FromClaim".into(),
                    requests: c.requests.clone(),
                    opaque: c.opaque.clone(),
                });
            }
        }
        out.push(AllocationResult {
            devices: Some(DeviceAllocationResult {
                results: Some(results),
                config: (!config.is_empty()).then_some(config),
            }),
            node_selector: allocation_node_selector(&devs, node.name()),
            ..Default::default()
        });
    }
    out
}

/// Whether a slice (or, with per-device node selection, a device) is usable on the node.
pub fn slice_on_node(slice: &ResourceSlice, device: Option<&Device>, node: &NodeInfo) -> bool {
    let (node_name, all, sel) = match device {
        Some(d) if slice.spec.per_device_node_selection == Some(true) => (
            d.node_name.as_deref(),
            d.all_nodes,
            d.node_selector.as_ref(),
        ),
        _ => (
            slice.spec.node_name.as_deref(),
            slice.spec.all_nodes,
            slice.spec.node_selector.as_ref(),
        ),
    };
    if let Some(n) = node_name.filter(|n| !n.is_empty()) {
        return n == node.name();
    }
    if all == Some(true) {
        return true;
    }
    sel.is_some_and(|s| node_selector_matches(s, node))
}
