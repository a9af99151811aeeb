//! Profiles (upstream `pkg/scheduler/profile` and the framework's plugin expansion): one
//! [`Framework`] per configured profile, its plugins placed at each extension point as upstream's
//! `expandMultiPointPlugins` does — plugins named at an extension point first (overrides keep that
//! order), then the multiPoint plugins that implement it, then the other explicit ones — with score
//! weights from the score point, else multiPoint, else 1.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{Profile, EXTENSION_POINTS};
use crate::framework::{Framework, Handle, Plugin};
use crate::queue::Nominator;

/// Does the plugin implement the extension point?
fn implements(p: &dyn Plugin, point: &str) -> bool {
    match point {
        "preEnqueue" => p.as_pre_enqueue().is_some(),
        "queueSort" => p.as_queue_sort().is_some(),
        "preFilter" => p.as_pre_filter().is_some(),
        "filter" => p.as_filter().is_some(),
        "postFilter" => p.as_post_filter().is_some(),
        "preScore" => p.as_pre_score().is_some(),
        "score" => p.as_score().is_some(),
        "reserve" => p.as_reserve().is_some(),
        "permit" => p.as_permit().is_some(),
        "preBind" => p.as_pre_bind().is_some(),
        "bind" => p.as_bind().is_some(),
        "postBind" => p.as_post_bind().is_some(),
        _ => false,
    }
}

/// The plugin names at `point` of a defaulted profile, in order; also checks that every named
/// plugin exists and implements the point.
pub fn enabled_at(profile: &Profile, point: &str) -> Result<Vec<String>, String> {
    let handle = Handle::default();
    let mut cache: HashMap<String, Arc<dyn Plugin>> = HashMap::new();
    let mut get = |name: &str| -> Result<Arc<dyn Plugin>, String> {
        if let Some(p) = cache.get(name) {
            return Ok(p.clone());
        }
        let p = crate::plugins::new_plugin(name, None, &handle)?;
        cache.insert(name.to_string(), p.clone());
        Ok(p)
    };
    Ok(expand(profile, point, &mut get)?
        .into_iter()
        .map(|(n, _)| n)
        .collect())
}

type GetPlugin<'a> = dyn FnMut(&str) -> Result<Arc<dyn Plugin>, String> + 'a;

/// Upstream `expandMultiPointPlugins` for one extension point: (name, weight) in order.
fn expand(
    profile: &Profile,
    point: &str,
    get: &mut GetPlugin<'_>,
) -> Result<Vec<(String, i64)>, String> {
    let plugins = profile.plugins.clone().unwrap_or_default();
    let explicit = plugins.point(point);
    let multi = &plugins.multi_point;
    let mut explicit_names: Vec<String> = Vec::new();
    for p in &explicit.enabled {
        let plugin = get(&p.name)?;
        if !implements(plugin.as_ref(), point) {
            return Err(format!(
                "plugin {:?} does not extend {point} plugin",
                p.name
            ));
        }
        if explicit_names.contains(&p.name) {
            return Err(format!(
                "plugin {:?} already registered as {point:?}",
                p.name
            ));
        }
        explicit_names.push(p.name.clone());
    }
    let disabled: Vec<&str> = explicit.disabled.iter().map(|p| p.name.as_str()).collect();
    let weight_of = |name: &str| -> i64 {
        explicit
            .enabled
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| p.weight)
            .or_else(|| {
                multi
                    .enabled
                    .iter()
                    .find(|p| p.name == name)
                    .and_then(|p| p.weight)
            })
            .filter(|w| *w != 0)
            .unwrap_or(1)
    };
    if disabled.contains(&"*") {
        return Ok(explicit_names
            .iter()
            .map(|n| (n.clone(), weight_of(n)))
            .collect());
    }
    let mut overrides = Vec::new();
    let mut from_multi: Vec<String> = Vec::new();
    for p in &multi.enabled {
        let plugin = get(&p.name)?;
        if !implements(plugin.as_ref(), point) || disabled.contains(&p.name.as_str()) {
            continue;
        }
        if explicit_names.contains(&p.name) {
            overrides.push(p.name.clone());
            continue;
        }
        if from_multi.contains(&p.name) {
            return Err(format!(
                "plugin {:?} already registered as {point:?}",
                p.name
            ));
        }
        from_multi.push(p.name.clone());
    }
    let mut out: Vec<String> = explicit_names
        .iter()
        .filter(|n| overrides.contains(n))
        .cloned()
        .collect();
    out.extend(from_multi);
    out.extend(
        explicit_names
            .iter()
            .filter(|n| !overrides.contains(n))
            .cloned(),
    );
    Ok(out
        .into_iter()
        .map(|n| {
            let w = weight_of(&n);
            (n, w)
        })
        .collect())
}

/// Builds the framework of a defaulted profile.
pub fn new_framework(
    profile: &Profile,
    handle: Handle,
    nominator: Arc<Nominator>,
) -> Result<Framework, String> {
    let mut instances: HashMap<String, Arc<dyn Plugin>> = HashMap::new();
    let mut get = |name: &str| -> Result<Arc<dyn Plugin>, String> {
        if let Some(p) = instances.get(name) {
            return Ok(p.clone());
        }
        let p = crate::plugins::new_plugin(name, profile.args(name), &handle)
            .map_err(|e| format!("profile {:?}: {e}", profile.name()))?;
        instances.insert(name.to_string(), p.clone());
        Ok(p)
    };
    let mut fw = Framework::new(profile.name(), handle.clone(), nominator);
    fw.percentage_of_nodes_to_score = profile.percentage_of_nodes_to_score.map(|p| p as u32);
    for point in EXTENSION_POINTS {
        let list = expand(profile, point, &mut get)?;
        let plugins: Vec<Arc<dyn Plugin>> =
            list.iter().map(|(n, _)| get(n)).collect::<Result<_, _>>()?;
        match *point {
            "preEnqueue" => fw.pre_enqueue = plugins,
            "queueSort" => {
                if plugins.len() != 1 {
                    return Err(format!(
                        "profile {:?}: exactly one queue sort plugin must be enabled, got {}",
                        profile.name(),
                        plugins.len()
                    ));
                }
                fw.queue_sort = plugins.into_iter().next();
            }
            "preFilter" => fw.pre_filter = plugins,
            "filter" => fw.filter = plugins,
            "postFilter" => fw.post_filter = plugins,
            "preScore" => fw.pre_score = plugins,
            "score" => {
                fw.score = plugins
                    .into_iter()
                    .zip(list.iter().map(|(_, w)| *w))
                    .collect()
            }
            "reserve" => fw.reserve = plugins,
            "permit" => fw.permit = plugins,
            "preBind" => fw.pre_bind = plugins,
            "bind" => {
                if plugins.is_empty() {
                    return Err(format!(
                        "profile {:?}: at least one bind plugin is needed",
                        profile.name()
                    ));
                }
                fw.bind = plugins
            }
            "postBind" => fw.post_bind = plugins,
            _ => {}
        }
    }
    for c in &profile.plugin_config {
        if !instances.contains_key(&c.name) && !crate::plugins::known(&c.name) {
            return Err(format!(
                "profile {:?}: pluginConfig for unknown plugin {:?}",
                profile.name(),
                c.name
            ));
        }
    }
    fw.register_events();
    Ok(fw)
}
