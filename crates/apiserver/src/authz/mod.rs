//! Authorization (upstream `k8s.io/apiserver/pkg/authorization` and kube-apiserver's
//! `--authorization-mode`): after authentication, every request is described by its [`Attributes`]
//! (user, verb, resource or non-resource path) and allowed or refused with 403 `Forbidden` and
//! upstream's message.
//!
//! Modes: `AlwaysAllow`, and `RBAC` (the default of `rkube server`, as of every kubeadm or k3s
//! cluster): the `system:masters` group is always allowed (upstream's privileged-group authorizer),
//! otherwise [`rbac`] decides from the Roles, ClusterRoles and bindings kept in memory. `Node` is
//! accepted for upstream's `Node,RBAC`: [`node`] decides first for kubelets (`system:node:<name>` in
//! `system:nodes`), from a graph of what their pods name, then RBAC.

pub mod bootstrap_policy;
pub mod impersonation;
pub mod node;
pub mod rbac;

use std::sync::{Arc, RwLock};

use apimachinery::status::{ApiError, Details};

use crate::authn::UserInfo;
use crate::request::{ResourceRequest, Target, Verb};
use crate::watch_cache::EventType;
use crate::ApiServer;

/// What a request does, as the authorizers see it (upstream `authorizer.Attributes`).
#[derive(Clone, Copy, Debug)]
pub struct Attributes<'a> {
    pub user: &'a UserInfo,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection` (and
    /// `impersonate`, ...) for resources; the lowercase HTTP method for paths.
    pub verb: &'a str,
    pub resource_request: bool,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The URL path of a non-resource request.
    pub path: &'a str,
    /// The raw `fieldSelector` of a list or watch ("" when none): the Node authorizer lets kubelets
    /// list their own pods by `spec.nodeName`.
    pub field_selector: &'a str,
}

impl<'a> Attributes<'a> {
    /// The attributes of a resource request.
    pub fn resource(user: &'a UserInfo, req: &'a ResourceRequest) -> Attributes<'a> {
        Attributes {
            user,
            verb: req.verb.as_str(),
            resource_request: true,
            group: &req.group,
            version: &req.version,
            resource: &req.resource,
            subresource: req.subresource.as_deref().unwrap_or(""),
            namespace: req.namespace.as_deref().unwrap_or(""),
            name: req.name.as_deref().unwrap_or(""),
            path: "",
            field_selector: "",
        }
    }

    /// The attributes of a request for a path that names no resource (discovery, `/metrics`, ...).
    pub fn path(user: &'a UserInfo, verb: &'a str, path: &'a str) -> Attributes<'a> {
        Attributes {
            user,
            verb,
            resource_request: false,
            group: "",
            version: "",
            resource: "",
            subresource: "",
            namespace: "",
            name: "",
            path,
            field_selector: "",
        }
    }
}

/// The lowercase verb of a non-resource request (upstream: the HTTP method, lowercased).
pub fn path_verb(method: &http::Method) -> String {
    method.as_str().to_ascii_lowercase()
}

/// How requests are authorized (`--authorization-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    AlwaysAllow,
    /// RBAC, with `node` when `Node` was listed too.
    Rbac {
        node: bool,
    },
}

impl Mode {
    /// Parses upstream's comma-separated list (`AlwaysAllow`, `RBAC`, `Node,RBAC`).
    pub fn parse(flag: &str) -> Result<Mode, String> {
        let modes: Vec<&str> = flag.split(',').map(str::trim).collect();
        let unknown: Vec<&&str> = modes
            .iter()
            .filter(|m| !matches!(**m, "AlwaysAllow" | "RBAC" | "Node"))
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "--authorization-mode: unsupported mode(s) {unknown:?}; supported: AlwaysAllow, RBAC, Node"
            ));
        }
        if modes.contains(&"AlwaysAllow") {
            return Ok(Mode::AlwaysAllow);
        }
        if !modes.contains(&"RBAC") {
            return Err("--authorization-mode: Node needs RBAC (use Node,RBAC)".into());
        }
        Ok(Mode::Rbac {
            node: modes.contains(&"Node"),
        })
    }
}

/// The authorizer chain of the server.
pub struct Authorizer {
    mode: Mode,
    index: RwLock<rbac::Index>,
    /// What the Node authorizer reads (kept only in `Node,RBAC` mode).
    node_graph: RwLock<node::graph::Graph>,
}

/// Upstream's `user.SystemPrivilegedGroup`: allowed everything, by the authorizer and the RBAC escalation
/// checks alike.
pub const PRIVILEGED_GROUP: &str = "system:masters";

impl Authorizer {
    pub fn new(mode: Mode) -> Authorizer {
        Authorizer {
            mode,
            index: RwLock::default(),
            node_graph: RwLock::default(),
        }
    }

    /// `Ok(reason)` when allowed, `Err(reason)` (possibly empty) when not.
    pub fn authorize(&self, attrs: &Attributes<'_>) -> Result<String, String> {
        let Mode::Rbac { node } = self.mode else {
            return Ok(String::new());
        };
        if attrs.user.groups.iter().any(|g| g == PRIVILEGED_GROUP) {
            return Ok(String::new());
        }
        let index = self.index.read().unwrap_or_else(|e| e.into_inner());
        // Upstream's union authorizer: the Node authorizer first, for kubelets; then RBAC. A refusal
        // carries the reasons of those that had one.
        let mut reason = String::new();
        if node {
            if let Some(node_name) = crate::authn::node_identity(attrs.user) {
                let graph = self.node_graph.read().unwrap_or_else(|e| e.into_inner());
                let rules = index.cluster_role_rules("system:node");
                match node::authorize(&graph, node_name, attrs, rules) {
                    node::Decision::Allow => return Ok(String::new()),
                    node::Decision::NoOpinion(why) => reason = why,
                }
            }
        }
        if let Some(allowed) = index.allowed_by(attrs) {
            return Ok(allowed);
        }
        Err(reason)
    }

    /// Whether the Node authorizer runs (and its graph must be kept).
    pub fn node_enabled(&self) -> bool {
        self.mode == Mode::Rbac { node: true }
    }

    pub(crate) fn read_node_graph<T>(&self, f: impl FnOnce(&node::graph::Graph) -> T) -> T {
        f(&self.node_graph.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn update_node_graph(&self, f: impl FnOnce(&mut node::graph::Graph)) {
        let mut graph = self.node_graph.write().unwrap_or_else(|e| e.into_inner());
        f(&mut graph);
    }

    /// The rules that apply to `user` in `namespace` (for SelfSubjectRulesReview); `None` when every
    /// request is allowed (AlwaysAllow). `system:masters` gets its rules through the `cluster-admin`
    /// binding, as upstream.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> Option<Vec<rbac::Rule>> {
        if self.mode == Mode::AlwaysAllow {
            return None;
        }
        let index = self.index.read().unwrap_or_else(|e| e.into_inner());
        Some(index.rules_for(user, namespace))
    }

    /// The user's RBAC rules in `namespace` with the resolution errors, for the escalation checks
    /// (upstream's `DefaultRuleResolver.RulesFor` over the same data the authorizer reads).
    pub fn resolve_rules(
        &self,
        user: &UserInfo,
        namespace: &str,
    ) -> (Vec<rbac::Rule>, Vec<String>) {
        let index = self.index.read().unwrap_or_else(|e| e.into_inner());
        index.resolve(user, namespace)
    }

    /// The rules of the role a binding in `namespace` names, if the index holds it.
    pub fn role_reference_rules(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Vec<rbac::Rule>> {
        let index = self.index.read().unwrap_or_else(|e| e.into_inner());
        index
            .role_reference_rules(kind, namespace, name)
            .map(<[rbac::Rule]>::to_vec)
    }

    pub(crate) fn update(&self, f: impl FnOnce(&mut rbac::Index)) {
        let mut index = self.index.write().unwrap_or_else(|e| e.into_inner());
        f(&mut index);
    }
}

/// The 403 for a refused request, worded as upstream's `responsewriters.Forbidden`.
pub fn forbidden(attrs: &Attributes<'_>, reason: &str) -> ApiError {
    let user = &attrs.user.name;
    let mut message = if !attrs.resource_request {
        format!(
            "forbidden: User \"{user}\" cannot {} path \"{}\"",
            attrs.verb, attrs.path
        )
    } else {
        let resource = if attrs.subresource.is_empty() {
            attrs.resource.to_string()
        } else {
            format!("{}/{}", attrs.resource, attrs.subresource)
        };
        let scope = if attrs.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{}\"", attrs.namespace)
        };
        let what = format!(
            "User \"{user}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
            attrs.verb, attrs.group
        );
        let qualified = if attrs.group.is_empty() {
            attrs.resource.to_string()
        } else {
            format!("{}.{}", attrs.resource, attrs.group)
        };
        if attrs.name.is_empty() {
            format!("{qualified} is forbidden: {what}")
        } else {
            format!("{qualified} \"{}\" is forbidden: {what}", attrs.name)
        }
    };
    if !reason.is_empty() {
        message.push_str(": ");
        message.push_str(reason);
    }
    let mut err = ApiError::forbidden(message);
    if attrs.resource_request {
        err.details = Some(Box::new(Details {
            name: attrs.name.to_string(),
            group: attrs.group.to_string(),
            kind: attrs.resource.to_string(),
            ..Default::default()
        }));
    }
    err
}

/// Checks a parsed request; discovery documents are non-resource paths, as upstream. A list or
/// watch with a `metadata.name` field selector names its object, as upstream's RequestInfo sets it
/// (RBAC `resourceNames` and the Node authorizer then apply to it).
pub fn check(
    api: &ApiServer,
    user: &UserInfo,
    method: &http::Method,
    target: &Target,
    path: &str,
    query: &crate::request::Query,
) -> Result<String, ApiError> {
    let verb;
    let selected_name;
    let attrs = match target {
        Target::Resource(req) => {
            let mut attrs = Attributes::resource(user, req);
            if matches!(req.verb, Verb::List | Verb::Watch) {
                attrs.field_selector = query.get("fieldSelector").unwrap_or("");
                selected_name = name_from_field_selector(attrs.field_selector);
                if let Some(name) = &selected_name {
                    attrs.name = name;
                }
            }
            attrs
        }
        _ => {
            verb = path_verb(method);
            Attributes::path(user, &verb, path)
        }
    };
    // The reason an allowed request has goes to the audit log (`authorization.k8s.io/reason`).
    api.authorizer
        .authorize(&attrs)
        .map_err(|reason| forbidden(&attrs, &reason))
}

/// The object a `metadata.name=<name>` field selector requires, when the name could be one (a valid
/// path segment, as upstream checks).
fn name_from_field_selector(selector: &str) -> Option<String> {
    if selector.is_empty() {
        return None;
    }
    let parsed = apimachinery::fields::parse(selector).ok()?;
    let name = parsed.requires_exact_match("metadata.name")?;
    let valid = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '%']);
    valid.then(|| name.to_string())
}

/// Authorizes a connect subresource (log, exec, attach, portforward, proxy). The verb comes from the
/// method as upstream's RequestInfo derives it (GET and HEAD `get`, POST `create`, PUT `update`,
/// PATCH `patch`, DELETE `delete`, others lowercased). A GET of exec, attach or portforward (the
/// WebSocket upgrade kubectl uses) must also be allowed `create`, as upstream with
/// AuthorizePodWebsocketUpgradeCreatePermission (on by default since 1.30): `get` alone must not
/// run commands.
pub fn check_connect(
    api: &ApiServer,
    user: &UserInfo,
    method: &http::Method,
    target: &crate::connect::Target,
) -> Result<String, ApiError> {
    let (resource, subresource) = target.resource();
    let (namespace, name) = target.namespace_and_name();
    let verb = match method.as_str() {
        "GET" | "HEAD" => "get".to_string(),
        "POST" => "create".into(),
        "PUT" => "update".into(),
        "PATCH" => "patch".into(),
        "DELETE" => "delete".into(),
        other => other.to_ascii_lowercase(),
    };
    let attrs = |verb| Attributes {
        user,
        verb,
        resource_request: true,
        group: "",
        version: "v1",
        resource,
        subresource,
        namespace,
        name,
        path: "",
        field_selector: "",
    };
    let mut verbs = vec![verb.as_str()];
    if verb == "get" && matches!(subresource, "exec" | "attach" | "portforward") {
        verbs.push("create");
    }
    let mut reason = String::new();
    for verb in verbs {
        let attrs = attrs(verb);
        reason = api
            .authorizer
            .authorize(&attrs)
            .map_err(|reason| forbidden(&attrs, &reason))?;
    }
    // The last check's reason, for the audit log.
    Ok(reason)
}

const KINDS: [(rbac::Kind, &str, &str); 4] = [
    (rbac::Kind::ClusterRole, "clusterroles", "clusterroles"),
    (rbac::Kind::Role, "roles", "roles"),
    (
        rbac::Kind::ClusterRoleBinding,
        "clusterrolebindings",
        "clusterrolebindings",
    ),
    (rbac::Kind::RoleBinding, "rolebindings", "rolebindings"),
];

/// Loads the RBAC objects from the watch cache into the authorizer's index and keeps following them.
/// The initial state is loaded before this returns, so the server never starts with an empty index.
pub fn start(api: &Arc<ApiServer>) {
    for (kind, storage, plural) in KINDS {
        let cache = api
            .caches
            .ensure(storage, "rbac.authorization.k8s.io", plural);
        let (reset_api, apply_api) = (api.clone(), api.clone());
        crate::watch_cache::follow(
            &api.caches,
            cache,
            move || reset_api.authorizer.update(|index| index.clear(kind)),
            move |event, event_type| apply(&apply_api, kind, &event.object.json, event_type),
        );
    }
}

fn apply(api: &ApiServer, kind: rbac::Kind, json: &[u8], event_type: EventType) {
    let Ok(obj) = serde_json::from_slice::<serde_json::Value>(json) else {
        return;
    };
    let name = crate::objects::name(&obj).to_string();
    let namespace = crate::objects::namespace(&obj).to_string();
    api.authorizer.update(|index| {
        let present = (event_type != EventType::Deleted).then_some(&obj);
        index.apply(kind, &namespace, &name, present);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> UserInfo {
        UserInfo {
            name: "alice".into(),
            uid: String::new(),
            groups: vec!["system:authenticated".into()],
        }
    }

    #[test]
    fn modes() {
        assert_eq!(Mode::parse("AlwaysAllow"), Ok(Mode::AlwaysAllow));
        assert_eq!(Mode::parse("RBAC"), Ok(Mode::Rbac { node: false }));
        assert_eq!(Mode::parse("Node,RBAC"), Ok(Mode::Rbac { node: true }));
        assert!(Mode::parse("Node").is_err());
        assert!(Mode::parse("ABAC").unwrap_err().contains("ABAC"));
    }

    #[test]
    fn forbidden_messages_read_as_upstream() {
        let user = alice();
        let req = ResourceRequest {
            group: String::new(),
            version: "v1".into(),
            namespace: Some("default".into()),
            resource: "pods".into(),
            name: None,
            subresource: None,
            verb: crate::request::Verb::List,
        };
        let err = forbidden(&Attributes::resource(&user, &req), "");
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        let req = ResourceRequest {
            group: "apps".into(),
            version: "v1".into(),
            namespace: None,
            resource: "deployments".into(),
            name: Some("web".into()),
            subresource: Some("scale".into()),
            verb: crate::request::Verb::Get,
        };
        assert_eq!(
            forbidden(&Attributes::resource(&user, &req), "").message,
            "deployments.apps \"web\" is forbidden: User \"alice\" cannot get resource \"deployments/scale\" in API group \"apps\" at the cluster scope"
        );
        assert_eq!(
            forbidden(&Attributes::path(&user, "get", "/metrics"), "").message,
            "forbidden: User \"alice\" cannot get path \"/metrics\""
        );
    }

    #[test]
    fn masters_are_always_allowed_and_always_allow_allows() {
        let rbac = Authorizer::new(Mode::Rbac { node: false });
        let mut admin = alice();
        let attrs = |u: &UserInfo| {
            let u: &UserInfo = u;
            rbac.authorize(&Attributes::path(u, "get", "/metrics"))
        };
        assert!(attrs(&admin).is_err());
        admin.groups.push("system:masters".into());
        assert!(attrs(&admin).is_ok());
        let open = Authorizer::new(Mode::AlwaysAllow);
        assert!(open
            .authorize(&Attributes::path(&alice(), "delete", "/anything"))
            .is_ok());
        assert_eq!(open.rules_for(&alice(), "default"), None);
    }
}
