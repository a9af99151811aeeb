//! One HPA's sync (upstream `reconcileAutoscaler` and `computeReplicasForMetrics`).

use super::*;

/// Upstream `computeReplicasForMetrics`: the highest proposal of the valid metrics; an error when
/// every metric failed, or some did and the others would scale down.
async fn replicas_for_metrics(
    s: &mut Sync<'_>,
    scale: &Scale,
) -> Result<(i32, String, Vec<MetricStatus>), String> {
    let selector_str = scale
        .status
        .as_ref()
        .and_then(|st| st.selector.clone())
        .unwrap_or_default();
    if selector_str.is_empty() {
        let msg = "selector is required";
        s.event(true, "SelectorRequired", msg);
        s.condition(
            "ScalingActive",
            false,
            "InvalidSelector",
            "the HPA target's scale is missing a selector".into(),
        );
        return Err(msg.into());
    }
    let selector = match apimachinery::labels::parse(&selector_str) {
        Ok(sel) => sel,
        Err(e) => {
            let msg = format!(
                "couldn't convert selector into a corresponding internal selector object: {e}"
            );
            s.event(true, "InvalidSelector", &msg);
            s.condition("ScalingActive", false, "InvalidSelector", msg.clone());
            return Err(msg);
        }
    };
    let ns = s.hpa.metadata.namespace.clone().unwrap_or_default();
    let pods = selected_pods(s.c, &ns, &selector);
    let selecting = hpas_selecting(s.c, &s.key, &selector, &pods);
    if selecting.len() > 1 {
        let msg = format!(
            "pods by selector {selector_str} are controlled by multiple HPAs: [{}]",
            selecting.join(" ")
        );
        s.event(true, "AmbiguousSelector", &msg);
        s.condition("ScalingActive", false, "AmbiguousSelector", msg.clone());
        return Err(msg);
    }
    let spec_replicas = scale.spec.as_ref().and_then(|sp| sp.replicas).unwrap_or(0);
    let specs = s.hpa.spec.metrics.clone().unwrap_or_default();
    let tol = tolerances(&s.hpa, s.c.options.tolerance);
    let mut statuses = vec![MetricStatus::default(); specs.len()];
    let (mut replicas, mut metric) = (0i32, String::new());
    let mut invalid = 0usize;
    let mut first_invalid: Option<(&'static str, String)> = None;
    let mut first_error = String::new();
    for (i, spec) in specs.iter().enumerate() {
        match metric_replicas(s, spec, spec_replicas, &selector_str, &pods, tol).await {
            Ok((r, name, status)) => {
                statuses[i] = status;
                if replicas == 0 || r > replicas {
                    replicas = r;
                    metric = name;
                }
            }
            Err(cond) => {
                if first_invalid.is_none() {
                    first_error = cond
                        .1
                        .trim_start_matches("the HPA was unable to compute the replica count: ")
                        .to_string();
                    first_invalid = Some(cond);
                }
                invalid += 1;
            }
        }
    }
    if invalid >= specs.len() || (invalid > 0 && replicas < spec_replicas) {
        if let Some((reason, message)) = first_invalid {
            s.condition("ScalingActive", false, reason, message);
        }
        return Err(format!(
            "invalid metrics ({invalid} invalid out of {}), first error is: {first_error}",
            specs.len()
        ));
    }
    s.condition(
        "ScalingActive",
        true,
        "ValidMetricFound",
        format!("the HPA was able to successfully calculate a replica count from {metric}"),
    );
    // Upstream leaves zero-valued entries for failed metrics; an entry without a type would not
    // pass status validation, so they are dropped.
    statuses.retain(|m| !m.type_.is_empty());
    Ok((replicas, metric, statuses))
}

async fn get_scale(s: &mut Sync<'_>) -> Result<(Scale, Api<DynamicObject>, String), String> {
    let ns = s.hpa.metadata.namespace.clone().unwrap_or_default();
    let target = s.hpa.spec.scale_target_ref.clone();
    let reference = format!("{}/{}/{}", target.kind, ns, target.name);
    let api_version = target.api_version.clone().unwrap_or_default();
    if api_version.matches('/').count() > 1 {
        let e = format!("unexpected GroupVersion string: {api_version}");
        s.failed_get_scale(&e);
        return Err(format!(
            "invalid API version in scale target reference: {e}"
        ));
    }
    let ar = match mapping(s.c, &api_version, &target.kind).await {
        Ok(ar) => ar,
        Err(e) => {
            s.failed_get_scale(&e);
            return Err(e);
        }
    };
    let api: Api<DynamicObject> = Api::namespaced_with(s.c.client.clone(), &ns, &ar);
    match api.get_scale(&target.name).await {
        Ok(scale) => Ok((scale, api, reference)),
        Err(e) => {
            let msg = crate::api_error_message(&e);
            s.failed_get_scale(&msg);
            Err(format!(
                "failed to query scale subresource for {reference}: {msg}"
            ))
        }
    }
}

/// Upstream `reconcileAutoscaler`.
pub(super) async fn reconcile(c: &Ctx, key: &str) -> Result<(), String> {
    let Some(shared) = c.hpas.get(key) else {
        c.history.lock().expect("history lock").remove(key);
        c.selectors.lock().expect("selectors lock").remove(key);
        return Ok(());
    };
    let original = shared.status.clone().unwrap_or_default();
    let mut s = Sync {
        c,
        hpa: (*shared).clone(),
        key: key.to_string(),
    };
    let result = reconcile_inner(&mut s).await;
    update_status_if_needed(&mut s, &original).await?;
    result
}

async fn reconcile_inner(s: &mut Sync<'_>) -> Result<(), String> {
    let (mut scale, api, reference) = get_scale(s).await?;
    s.condition(
        "AbleToScale",
        true,
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale".into(),
    );
    let current = scale.spec.as_ref().and_then(|sp| sp.replicas).unwrap_or(0);
    let now = Timestamp::now();
    s.c.history
        .lock()
        .expect("history lock")
        .entry(s.key.clone())
        .or_default()
        .record_initial(current, now);
    let spec = s.hpa.spec.clone();
    let min = spec.min_replicas.unwrap_or(1);
    let max = spec.max_replicas;
    let mut statuses = Vec::new();
    let mut desired;
    let mut reason = String::new();
    let mut rescale = true;
    let mut ret = Ok(());
    if current == 0 && min != 0 {
        desired = 0;
        rescale = false;
        s.condition(
            "ScalingActive",
            false,
            "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero".into(),
        );
    } else if current > max {
        reason = "Current number of replicas above Spec.MaxReplicas".into();
        desired = max;
    } else if current < min {
        reason = "Current number of replicas below Spec.MinReplicas".into();
        desired = min;
    } else {
        let (proposed, metric, st) = match replicas_for_metrics(s, &scale).await {
            Ok(r) => r,
            Err(e) => {
                set_current(s, current, Vec::new(), None);
                s.event(true, "FailedComputeMetricsReplicas", &e);
                return Err(format!(
                    "failed to compute desired number of replicas based on listed metrics for {reference}: {e}"
                ));
            }
        };
        statuses = st;
        desired = proposed.max(0);
        if desired > current {
            reason = format!("{metric} above target");
        }
        if desired < current {
            reason = "All metrics below target".into();
        }
        let downscale = s.c.options.downscale_stabilization.as_secs() as i64;
        let normalized = {
            let mut h = s.c.history.lock().expect("history lock");
            let h = h.entry(s.key.clone()).or_default();
            match &spec.behavior {
                None => h.normalize(current, desired, min, max, downscale, now),
                Some(b) => {
                    let (up, down) = normalize::rules_with_defaults(b, downscale as i32);
                    h.normalize_with_behavior(current, desired, min, max, &up, &down, now)
                }
            }
        };
        s.condition(
            "AbleToScale",
            true,
            normalized.able_to_scale.0,
            normalized.able_to_scale.1.into(),
        );
        s.condition(
            "ScalingLimited",
            normalized.limited,
            normalized.scaling_limited.0,
            normalized.scaling_limited.1.into(),
        );
        desired = normalized.replicas;
        rescale = desired != current;
    }
    if rescale {
        if let Some(sp) = scale.spec.as_mut() {
            sp.replicas = Some(desired);
        } else {
            scale.spec = Some(Default::default());
            scale.spec.as_mut().expect("just set").replicas = Some(desired);
        }
        let name = spec.scale_target_ref.name.clone();
        if let Err(e) = api
            .replace_scale(&name, &PostParams::default(), &scale)
            .await
        {
            let msg = crate::api_error_message(&e);
            s.event(
                true,
                "FailedRescale",
                &format!("New size: {desired}; reason: {reason}; error: {msg}"),
            );
            s.condition(
                "AbleToScale",
                false,
                "FailedUpdateScale",
                format!("the HPA controller was unable to update the target scale: {msg}"),
            );
            set_current(s, current, statuses, None);
            return Err(format!("failed to rescale {reference}: {msg}"));
        }
        s.condition(
            "AbleToScale",
            true,
            "SucceededRescale",
            format!("the HPA controller was able to update the target scale to {desired}"),
        );
        s.event(
            false,
            "SuccessfulRescale",
            &format!("New size: {desired}; reason: {reason}"),
        );
        if let Some(b) = &spec.behavior {
            let downscale = s.c.options.downscale_stabilization.as_secs() as i32;
            let (up, down) = normalize::rules_with_defaults(b, downscale);
            s.c.history
                .lock()
                .expect("history lock")
                .entry(s.key.clone())
                .or_default()
                .store_scale_event((&up, &down), current, desired, now);
        }
        tracing::info!(hpa = %s.key, %reference, current, desired, %reason, "successfully rescaled");
    } else {
        desired = current;
        ret = Ok(());
    }
    set_current(s, current, statuses, Some((desired, rescale)));
    ret
}

/// Upstream `setStatus` (with `Some(desired, rescaled)`) and `setCurrentReplicasAndMetricsInStatus`.
fn set_current(
    s: &mut Sync<'_>,
    current: i32,
    metrics: Vec<MetricStatus>,
    desired: Option<(i32, bool)>,
) {
    let st = s.status();
    st.current_replicas = Some(current);
    st.current_metrics = (!metrics.is_empty()).then_some(metrics);
    if let Some((desired, rescaled)) = desired {
        st.desired_replicas = desired;
        if rescaled {
            st.last_scale_time = Some(Time(Timestamp::now()));
        }
    }
}

/// Upstream `updateStatusIfNeeded`.
async fn update_status_if_needed(
    s: &mut Sync<'_>,
    original: &HorizontalPodAutoscalerStatus,
) -> Result<(), String> {
    let status = s.hpa.status.clone().unwrap_or_default();
    if &status == original {
        return Ok(());
    }
    let ns = s.hpa.metadata.namespace.clone().unwrap_or_default();
    let name = s.hpa.metadata.name.clone().unwrap_or_default();
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(s.c.client.clone(), &ns);
    match api
        .replace_status(&name, &PostParams::default(), &s.hpa)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) => {
            let msg = crate::api_error_message(&e);
            s.event(true, "FailedUpdateStatus", &msg);
            Err(format!("failed to update status for {name}: {msg}"))
        }
    }
}
