//! `/metrics/resource` (upstream `pkg/kubelet/metrics/collectors/resource_metrics.go`): the
//! summary's CPU and memory as Prometheus text, each sample with the millisecond timestamp of its
//! reading. Labels in Prometheus's order (sorted by name), as upstream's registry writes them.

use std::fmt::Write;

use super::Summary;

/// Escapes a label value (backslash, quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A float as Go's `strconv.FormatFloat(v, 'g', -1, 64)` would write counters and gauges here.
fn num(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else if v.abs() >= 1e21 || (v != 0.0 && v.abs() < 1e-4) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

fn family(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn seconds(nanos: u64) -> f64 {
    nanos as f64 / 1e9
}

impl Summary {
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        let ms = |nanos: i64| nanos / 1_000_000;
        let c_labels = |c: &str, p: &super::PodStats| {
            format!(
                "container=\"{}\",namespace=\"{}\",pod=\"{}\"",
                label(c),
                label(&p.namespace),
                label(&p.name)
            )
        };
        let p_labels = |p: &super::PodStats| {
            format!(
                "namespace=\"{}\",pod=\"{}\"",
                label(&p.namespace),
                label(&p.name)
            )
        };

        family(
            &mut out,
            "container_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
            "counter",
        );
        for p in &self.pods {
            for c in &p.containers {
                if let Some(cpu) = &c.cpu {
                    let _ = writeln!(
                        out,
                        "container_cpu_usage_seconds_total{{{}}} {} {}",
                        c_labels(&c.name, p),
                        num(seconds(cpu.usage_core_nano_seconds)),
                        ms(cpu.time_nanos)
                    );
                }
            }
        }
        family(
            &mut out,
            "container_memory_working_set_bytes",
            "[STABLE] Current working set of the container in bytes",
            "gauge",
        );
        for p in &self.pods {
            for c in &p.containers {
                if let Some(m) = &c.memory {
                    let _ = writeln!(
                        out,
                        "container_memory_working_set_bytes{{{}}} {} {}",
                        c_labels(&c.name, p),
                        m.figures.working_set_bytes,
                        ms(m.time_nanos)
                    );
                }
            }
        }
        family(
            &mut out,
            "container_start_time_seconds",
            "[STABLE] Start time of the container since unix epoch in seconds",
            "gauge",
        );
        for p in &self.pods {
            for c in &p.containers {
                let started = c
                    .start_time
                    .as_deref()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .filter(|t| t.as_second() > 0);
                if let Some(t) = started {
                    let _ = writeln!(
                        out,
                        "container_start_time_seconds{{{}}} {}",
                        c_labels(&c.name, p),
                        num(t.as_nanosecond() as f64 / 1e9)
                    );
                }
            }
        }
        family(
            &mut out,
            "node_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
            "counter",
        );
        if let Some(cpu) = &self.node.cpu {
            let _ = writeln!(
                out,
                "node_cpu_usage_seconds_total {} {}",
                num(seconds(cpu.usage_core_nano_seconds)),
                ms(cpu.time_nanos)
            );
        }
        family(
            &mut out,
            "node_memory_working_set_bytes",
            "[STABLE] Current working set of the node in bytes",
            "gauge",
        );
        if let Some(m) = &self.node.memory {
            let _ = writeln!(
                out,
                "node_memory_working_set_bytes {} {}",
                m.figures.working_set_bytes,
                ms(m.time_nanos)
            );
        }
        family(
            &mut out,
            "pod_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
            "counter",
        );
        for p in &self.pods {
            if let Some(cpu) = &p.cpu {
                let _ = writeln!(
                    out,
                    "pod_cpu_usage_seconds_total{{{}}} {} {}",
                    p_labels(p),
                    num(seconds(cpu.usage_core_nano_seconds)),
                    ms(cpu.time_nanos)
                );
            }
        }
        family(
            &mut out,
            "pod_memory_working_set_bytes",
            "[STABLE] Current working set of the pod in bytes",
            "gauge",
        );
        for p in &self.pods {
            if let Some(m) = &p.memory {
                let _ = writeln!(
                    out,
                    "pod_memory_working_set_bytes{{{}}} {} {}",
                    p_labels(p),
                    m.figures.working_set_bytes,
                    ms(m.time_nanos)
                );
            }
        }
        let errors = u8::from(self.errors);
        family(
            &mut out,
            "resource_scrape_error",
            "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
            "gauge",
        );
        let _ = writeln!(out, "resource_scrape_error {errors}");
        family(
            &mut out,
            "scrape_error",
            "[ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise",
            "gauge",
        );
        let _ = writeln!(out, "scrape_error {errors}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;

    #[test]
    fn resource_metrics_text() {
        let at = 1_700_000_000_123_000_000;
        let s = Summary {
            node: NodeStats {
                cpu: Some(Cpu {
                    time_nanos: at,
                    usage_core_nano_seconds: 12_500_000_000,
                    usage_nano_cores: None,
                }),
                ..Default::default()
            },
            pods: vec![PodStats {
                name: "web\"1".into(),
                namespace: "default".into(),
                cpu: Some(Cpu {
                    time_nanos: at,
                    usage_core_nano_seconds: 3_000_000_000,
                    usage_nano_cores: None,
                }),
                containers: vec![ContainerStats {
                    name: "app".into(),
                    start_time: Some("2023-11-14T22:13:20Z".into()),
                    memory: Some(Memory {
                        time_nanos: at,
                        figures: cgroup::Memory {
                            working_set_bytes: 4096,
                            ..Default::default()
                        },
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            errors: true,
        };
        let text = s.to_prometheus();
        assert!(
            text.contains("node_cpu_usage_seconds_total 12.5 1700000000123\n"),
            "{text}"
        );
        assert!(text.contains(
            "container_memory_working_set_bytes{container=\"app\",namespace=\"default\",pod=\"web\\\"1\"} 4096 1700000000123\n"
        ), "{text}");
        assert!(text.contains(
            "pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\\\"1\"} 3 1700000000123\n"
        ), "{text}");
        assert!(text.contains(
            "container_start_time_seconds{container=\"app\",namespace=\"default\",pod=\"web\\\"1\"} 1700000000\n"
        ), "{text}");
        assert!(text.contains("\nresource_scrape_error 1\n"));
        assert!(text.contains("# TYPE node_memory_working_set_bytes gauge\n"));
        assert!(!text.contains("node_memory_working_set_bytes 0"));
    }
}
