//! The run as a picture: p99 latency per 10 s window of each kind (log scale) over the server's RSS
//! and CPU, drawn with `plotters` into a PNG.
//!
//! Text needs a font: plotters' pure-Rust `ab_glyph` renderer is given DejaVu Sans from the system
//! (Debian's `fonts-dejavu-core`), so no C font library is linked. Without the font file no PNG is
//! written (the CSV timeline still is).

use std::path::Path;

use plotters::prelude::*;

use super::report::{windowed_p99, Kind, Results};

const FONT_PATHS: [&str; 2] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// Registers the font once per process; false when none can be read.
fn font() -> bool {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *REGISTERED.get_or_init(|| {
        FONT_PATHS.iter().any(|p| {
            std::fs::read(p).is_ok_and(|bytes| {
                // plotters keeps fonts for the life of the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
            })
        })
    })
}

fn colour(kind: Kind) -> RGBColor {
    match kind {
        Kind::Mutating => RGBColor(214, 39, 40),
        Kind::Get => RGBColor(31, 119, 180),
        Kind::ListNamespace => RGBColor(44, 160, 44),
        Kind::ListCluster => RGBColor(148, 103, 189),
        Kind::PodStartup => RGBColor(255, 127, 14),
        Kind::WatchDelay => RGBColor(127, 127, 127),
    }
}

/// Draws `results` into `path`.
pub fn draw(results: &Results, path: &Path) -> Result<(), String> {
    if !font() {
        return Err(format!(
            "no font to draw with (looked for {}; Debian: apt-get install fonts-dejavu-core)",
            FONT_PATHS.join(", ")
        ));
    }
    draw_inner(results, path).map_err(|e| format!("{}: {e}", path.display()))
}

fn draw_inner(results: &Results, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let end = results.seconds.max(1.0);
    let root = BitMapBackend::new(path, (1400, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(520);

    let series: Vec<(Kind, Vec<(f64, f64)>)> = Kind::ALL
        .iter()
        .map(|k| (*k, windowed_p99(&results.of(*k), 10.0, end)))
        .filter(|(_, points)| !points.is_empty())
        .collect();
    let y_max = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, ms)| *ms))
        .fold(10.0_f64, f64::max)
        * 1.5;
    let mut latency = ChartBuilder::on(&top)
        .caption(
            format!(
                "rkube bench density: {} nodes, {} pods: p99 per 10 s",
                results.nodes, results.pods
            ),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..end, (1.0..y_max).log_scale())?;
    latency
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("ms (log)")
        .draw()?;
    for (kind, points) in &series {
        let c = colour(*kind);
        latency
            .draw_series(LineSeries::new(
                points.iter().map(|(t, ms)| (*t, ms.max(1.0))),
                c.stroke_width(2),
            ))?
            .label(kind.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    // The SLO lines that apply to everything but LISTs and watches: 1 s and 5 s.
    for slo in [1_000.0, 5_000.0] {
        if slo < y_max {
            latency.draw_series(LineSeries::new(
                [(0.0, slo), (end, slo)],
                BLACK.mix(0.3).stroke_width(1),
            ))?;
        }
    }
    latency
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;

    let rss_max = results.max_rss().unwrap_or(1.0).max(1.0) * 1.2;
    let mut usage = ChartBuilder::on(&bottom)
        .caption(
            "server RSS (MiB) and CPU (% of one core)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .right_y_label_area_size(60)
        .build_cartesian_2d(0.0..end, 0.0..rss_max)?
        .set_secondary_coord(0.0..end, 0.0..210.0);
    usage
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("RSS MiB")
        .draw()?;
    usage.configure_secondary_axes().y_desc("CPU %").draw()?;
    let rss = RGBColor(31, 119, 180);
    usage
        .draw_series(LineSeries::new(
            results.usage.iter().map(|u| (u.at, u.rss_mib)),
            rss.stroke_width(2),
        ))?
        .label("RSS")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], rss.stroke_width(2)));
    let cpu = RGBColor(255, 127, 14);
    usage
        .draw_secondary_series(LineSeries::new(
            results
                .usage
                .iter()
                .map(|u| (u.at, u.cpu_percent.min(200.0))),
            cpu.stroke_width(1),
        ))?
        .label("CPU")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], cpu.stroke_width(2)));
    usage
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::report::{Sample, Usage};
    use super::*;

    #[test]
    fn draws_a_png() {
        if !font() {
            eprintln!("skipped: no DejaVu Sans on this machine");
            return;
        }
        let mut r = Results {
            nodes: 3,
            pods: 30,
            seconds: 60.0,
            rss_limit_mib: 4096.0,
            ..Default::default()
        };
        for i in 0..60 {
            let t = f64::from(i);
            r.samples.push((Kind::Get, Sample { at: t, ms: 5.0 + t }));
            r.samples.push((Kind::Mutating, Sample { at: t, ms: 20.0 }));
            r.usage.push(Usage {
                at: t,
                rss_mib: 50.0 + t,
                cpu_percent: 30.0,
            });
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("density.png");
        draw(&r, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(bytes.len() > 10_000, "{} bytes", bytes.len());
    }
}
