//! What `rkube bench density` measured, judged against upstream's scalability SLOs
//! (sig-scalability `slos.md`): the pure part, so it can be tested without a cluster.

use std::fmt::Write as _;

/// One API call or one observation: when (seconds since the run started) and how long, in ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub at: f64,
    pub ms: f64,
}

/// The kinds of latency the bench records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Creates, updates, patches and deletes (upstream: "mutating API calls").
    Mutating,
    /// GET of a single object.
    Get,
    /// LIST in one namespace.
    ListNamespace,
    /// LIST across the cluster (one page of `limit=500`, as informers and kubectl read).
    ListCluster,
    /// A pod from the watch's first sight to Running with every container started.
    PodStartup,
    /// A write acknowledged to the write's event arriving on a watch.
    WatchDelay,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Mutating,
        Kind::Get,
        Kind::ListNamespace,
        Kind::ListCluster,
        Kind::PodStartup,
        Kind::WatchDelay,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Mutating => "mutating API calls",
            Kind::Get => "GET",
            Kind::ListNamespace => "LIST (namespace)",
            Kind::ListCluster => "LIST (cluster, per page)",
            Kind::PodStartup => "pod startup",
            Kind::WatchDelay => "watch delay",
        }
    }

    /// Upstream's SLO on the 99th percentile, in ms, where it sets one.
    pub fn p99_slo_ms(self) -> Option<f64> {
        match self {
            Kind::Mutating | Kind::Get => Some(1_000.0),
            Kind::ListNamespace => Some(5_000.0),
            Kind::ListCluster => Some(30_000.0),
            Kind::PodStartup => Some(5_000.0),
            Kind::WatchDelay => None,
        }
    }
}

/// The `q` quantile (0..=1) of `values` by the nearest-rank method; `None` when empty.
pub fn quantile(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = (q * values.len() as f64).ceil() as usize;
    Some(values[rank.clamp(1, values.len()) - 1])
}

/// p50, p99 and max of a kind's samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

pub fn summarize(samples: &[Sample]) -> Option<Summary> {
    let mut ms: Vec<f64> = samples.iter().map(|s| s.ms).collect();
    Some(Summary {
        count: ms.len(),
        p50: quantile(&mut ms, 0.50)?,
        p99: quantile(&mut ms, 0.99)?,
        max: quantile(&mut ms, 1.0)?,
    })
}

/// The p99 of each window of `width` seconds from 0 to `end`: (window start, p99); windows without
/// samples are left out.
pub fn windowed_p99(samples: &[Sample], width: f64, end: f64) -> Vec<(f64, f64)> {
    let n = (end / width).ceil().max(1.0) as usize;
    let mut buckets: Vec<Vec<f64>> = vec![Vec::new(); n];
    for s in samples {
        let i = ((s.at / width) as usize).min(n - 1);
        buckets[i].push(s.ms);
    }
    buckets
        .iter_mut()
        .enumerate()
        .filter_map(|(i, b)| quantile(b, 0.99).map(|p| (i as f64 * width, p)))
        .collect()
}

/// The server's resources at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Usage {
    pub at: f64,
    pub rss_mib: f64,
    /// CPU used since the previous sample, in percent of one core.
    pub cpu_percent: f64,
}

/// Everything a run produced.
#[derive(Debug, Default)]
pub struct Results {
    pub samples: Vec<(Kind, Sample)>,
    pub usage: Vec<Usage>,
    /// Pods bound per second over the create phase (scheduler_perf's average throughput).
    pub scheduling_throughput: f64,
    pub pods: usize,
    pub nodes: usize,
    pub seconds: f64,
    /// RSS limit the run is judged against, MiB.
    pub rss_limit_mib: f64,
}

impl Results {
    pub fn of(&self, kind: Kind) -> Vec<Sample> {
        self.samples
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, s)| *s)
            .collect()
    }

    pub fn max_rss(&self) -> Option<f64> {
        self.usage.iter().map(|u| u.rss_mib).reduce(f64::max)
    }

    /// The names of the SLOs missed; a kind without samples counts as missed (nothing shows it met).
    pub fn missed(&self) -> Vec<String> {
        let mut missed = Vec::new();
        for kind in Kind::ALL {
            let Some(slo) = kind.p99_slo_ms() else {
                continue;
            };
            match summarize(&self.of(kind)) {
                Some(s) if s.p99 <= slo => {}
                Some(_) => missed.push(format!("{} p99", kind.name())),
                None => missed.push(format!("{} (no samples)", kind.name())),
            }
        }
        match self.max_rss() {
            Some(rss) if rss <= self.rss_limit_mib => {}
            Some(_) => missed.push("RSS".to_string()),
            None => {}
        }
        missed
    }

    /// The table printed at the end, and its last line `SLOs: met` or `SLOs: missed: ...`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} nodes, {} pods, {:.0} s",
            self.nodes, self.pods, self.seconds
        );
        let _ = writeln!(
            out,
            "| SLI | samples | p50 | p99 | max | SLO (p99) |\n|---|---|---|---|---|---|"
        );
        for kind in Kind::ALL {
            let slo = kind
                .p99_slo_ms()
                .map_or("-".to_string(), |ms| format!("<= {}", secs(ms)));
            match summarize(&self.of(kind)) {
                Some(s) => {
                    let _ = writeln!(
                        out,
                        "| {} | {} | {} | {} | {} | {slo} |",
                        kind.name(),
                        s.count,
                        secs(s.p50),
                        secs(s.p99),
                        secs(s.max)
                    );
                }
                None => {
                    let _ = writeln!(out, "| {} | 0 | - | - | - | {slo} |", kind.name());
                }
            }
        }
        let _ = writeln!(
            out,
            "scheduling throughput: {:.1} pods/s (average over the create phase)",
            self.scheduling_throughput
        );
        if let Some(rss) = self.max_rss() {
            let cpu: Vec<f64> = self.usage.iter().map(|u| u.cpu_percent).collect();
            let avg_cpu = cpu.iter().sum::<f64>() / cpu.len().max(1) as f64;
            let _ = writeln!(
                out,
                "server: RSS max {rss:.0} MiB (limit {:.0} MiB), last {:.0} MiB; CPU average {avg_cpu:.0}% of one core",
                self.rss_limit_mib,
                self.usage.last().map_or(0.0, |u| u.rss_mib),
            );
        }
        let missed = self.missed();
        if missed.is_empty() {
            out.push_str("SLOs: met\n");
        } else {
            let _ = writeln!(out, "SLOs: missed: {}", missed.join(", "));
        }
        out
    }

    /// One line per second of the run: RSS, CPU and each latency kind's p99 in that second.
    pub fn timeline_csv(&self) -> String {
        let mut out = String::from("second,rss_mib,cpu_percent");
        for kind in Kind::ALL {
            let _ = write!(out, ",{}_p99_ms", csv_name(kind));
        }
        out.push('\n');
        let per_kind: Vec<Vec<(f64, f64)>> = Kind::ALL
            .iter()
            .map(|k| windowed_p99(&self.of(*k), 1.0, self.seconds))
            .collect();
        for second in 0..self.seconds.ceil() as usize {
            let t = second as f64;
            let usage = self.usage.iter().find(|u| u.at.floor() == t);
            let _ = write!(
                out,
                "{second},{},{}",
                usage.map_or(String::new(), |u| format!("{:.1}", u.rss_mib)),
                usage.map_or(String::new(), |u| format!("{:.0}", u.cpu_percent))
            );
            for series in &per_kind {
                match series.iter().find(|(at, _)| *at == t) {
                    Some((_, p)) => {
                        let _ = write!(out, ",{p:.1}");
                    }
                    None => out.push(','),
                }
            }
            out.push('\n');
        }
        out
    }
}

fn csv_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Mutating => "mutating",
        Kind::Get => "get",
        Kind::ListNamespace => "list_namespace",
        Kind::ListCluster => "list_cluster",
        Kind::PodStartup => "pod_startup",
        Kind::WatchDelay => "watch_delay",
    }
}

/// A duration in ms as people read it.
fn secs(ms: f64) -> String {
    if ms < 1_000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.2} s", ms / 1_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at: f64, ms: f64) -> Sample {
        Sample { at, ms }
    }

    #[test]
    fn nearest_rank_quantiles() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&mut v, 0.99), Some(99.0));
        assert_eq!(quantile(&mut v, 0.5), Some(50.0));
        assert_eq!(quantile(&mut v, 1.0), Some(100.0));
        assert_eq!(quantile(&mut [7.0], 0.99), Some(7.0));
        assert_eq!(quantile(&mut [], 0.5), None);
    }

    #[test]
    fn windows_hold_their_own_samples() {
        let samples = [s(0.1, 5.0), s(0.9, 50.0), s(2.5, 7.0), s(99.0, 1.0)];
        // The empty second window is left out; the late sample joins the last one.
        assert_eq!(
            windowed_p99(&samples, 1.0, 3.0),
            vec![(0.0, 50.0), (2.0, 7.0)]
        );
        // A sample past the end lands in the last window.
        let w = windowed_p99(&[s(10.0, 3.0)], 1.0, 3.0);
        assert_eq!(w, vec![(2.0, 3.0)]);
    }

    #[test]
    fn slos_met_and_missed() {
        let mut r = Results {
            rss_limit_mib: 4096.0,
            ..Default::default()
        };
        for kind in Kind::ALL {
            r.samples.push((kind, s(1.0, 10.0)));
        }
        r.usage.push(Usage {
            at: 1.0,
            rss_mib: 100.0,
            cpu_percent: 50.0,
        });
        assert!(r.missed().is_empty());
        assert!(r.render().ends_with("SLOs: met\n"));
        // One slow GET in a hundred is within p99; two are not.
        for i in 0..98 {
            r.samples.push((Kind::Get, s(f64::from(i), 10.0)));
        }
        r.samples.push((Kind::Get, s(2.0, 1_500.0)));
        assert!(r.missed().is_empty(), "{:?}", r.missed());
        r.samples.push((Kind::Get, s(3.0, 1_500.0)));
        assert_eq!(r.missed(), vec!["GET p99".to_string()]);
        r.usage.push(Usage {
            at: 2.0,
            rss_mib: 5_000.0,
            cpu_percent: 10.0,
        });
        let rendered = r.render();
        assert!(
            rendered.ends_with("SLOs: missed: GET p99, RSS\n"),
            "{rendered}"
        );
        // A kind never measured is not counted as met.
        let empty = Results::default();
        assert!(empty.missed().contains(&"GET (no samples)".to_string()));
    }

    #[test]
    fn timeline_has_a_line_per_second() {
        let r = Results {
            samples: vec![(Kind::Get, s(0.5, 12.0)), (Kind::Mutating, s(1.2, 30.0))],
            usage: vec![Usage {
                at: 1.0,
                rss_mib: 64.0,
                cpu_percent: 20.0,
            }],
            seconds: 2.0,
            ..Default::default()
        };
        let csv = r.timeline_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("second,rss_mib,cpu_percent,mutating_p99_ms,get_p99_ms"));
        assert_eq!(lines[1], "0,,,,12.0,,,,");
        assert_eq!(lines[2], "1,64.0,20,30.0,,,,,");
    }
}
