//! `POST pods/<name>/binding` (upstream `BindingREST`): sets `spec.nodeName` once, with the
//! `PodScheduled` condition and the binding's annotations.

use apimachinery::status::{ApiError, Qualified};
use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::add_condition;
use crate::objects;
use crate::response::{self, Body};
use crate::rest::common::MAX_RETRIES;
use crate::rest::{decode, storage_error, Ctx};

/// `POST pods/<name>/binding`: sets `spec.nodeName` once (upstream `BindingREST`).
pub async fn bind(ctx: &Ctx<'_>, body: Bytes) -> Result<Response<Body>, ApiError> {
    let binding = decode::parse_body(ctx.headers, &body)?;
    let node = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if node.is_empty() {
        let err = apimachinery::validation::field::FieldError::required(
            &apimachinery::validation::field::FieldPath::root("target").child("name"),
            "",
        );
        return Err(ApiError::invalid(
            &apimachinery::status::Qualified::new("", "Binding"),
            ctx.name(),
            &[err],
        ));
    }
    // As other updates, the first attempt starts from the watch cache's copy (see `crate::rest::update`):
    // the write is conditional on its revision, and a refusal is confirmed against storage.
    let mut from_cache = true;
    for _ in 0..MAX_RETRIES {
        let (mut pod, rv, is_current) = ctx
            .current_for_update(ctx.namespace(), ctx.name(), from_cache)
            .await?;
        from_cache = false;
        if let Err(e) = check_bindable(&ctx.qualified(), ctx.name(), &binding, &pod) {
            if is_current || ctx.still_at(ctx.namespace(), ctx.name(), rv).await? {
                return Err(e);
            }
            continue;
        }
        pod["spec"]["nodeName"] = node.clone().into();
        add_condition(
            &mut pod,
            json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": objects::now_rfc3339()}),
        );
        if let Some(annotations) = binding
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
        {
            for (k, v) in annotations {
                pod["metadata"]["annotations"][k] = v.clone();
            }
        }
        let key = ctx.key(ctx.namespace(), ctx.name());
        match ctx
            .api
            .store
            .update(&key, objects::encode_for_storage(&pod), Some(rv))
            .await
        {
            Ok(_) => {
                return Ok(response::json_response(
                    StatusCode::CREATED,
                    &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
                ))
            }
            Err(storage::Error::Conflict { .. }) => continue,
            Err(e) => return Err(storage_error(e)),
        }
    }
    Err(ApiError::conflict(
        &ctx.qualified(),
        ctx.name(),
        "too many concurrent updates; try again",
    ))
}

/// Why a pod cannot take a binding: another pod (UID), being deleted, or already bound.
fn check_bindable(
    pods: &Qualified,
    name: &str,
    binding: &Value,
    pod: &Value,
) -> Result<(), ApiError> {
    if let Some(uid) = binding.pointer("/metadata/uid").and_then(Value::as_str) {
        if objects::meta_str(pod, "uid") != Some(uid) {
            return Err(ApiError::conflict(
                pods,
                name,
                "the UID in the binding does not match the pod",
            ));
        }
    }
    if objects::meta_str(pod, "deletionTimestamp").is_some() {
        return Err(ApiError::conflict(
            pods,
            name,
            "pod is being deleted, cannot be assigned to a host",
        ));
    }
    if let Some(current) = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        return Err(ApiError::conflict(
            pods,
            name,
            &format!("pod {name} is already assigned to node {current:?}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_live_unbound_pod_with_the_bindings_uid_can_be_bound() {
        let pods = Qualified::new("", "pods");
        let pod = json!({"metadata": {"name": "p", "uid": "u1"}, "spec": {}});
        assert!(check_bindable(&pods, "p", &json!({}), &pod).is_ok());
        let other = json!({"metadata": {"uid": "u2"}});
        let e = check_bindable(&pods, "p", &other, &pod).unwrap_err();
        assert_eq!(e.code, 409);
        assert!(e
            .message
            .contains("the UID in the binding does not match the pod"));
        let deleting =
            json!({"metadata": {"uid": "u1", "deletionTimestamp": "2026-01-01T00:00:00Z"}});
        let e = check_bindable(&pods, "p", &json!({}), &deleting).unwrap_err();
        assert!(e.message.contains("pod is being deleted"));
        let bound = json!({"metadata": {"uid": "u1"}, "spec": {"nodeName": "n1"}});
        let e = check_bindable(&pods, "p", &json!({}), &bound).unwrap_err();
        assert!(
            e.message
                .contains("pod p is already assigned to node \"n1\""),
            "{}",
            e.message
        );
    }
}
