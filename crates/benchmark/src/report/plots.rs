//! SVG plots of a report: per workload, measured speed-ups against the claimed ranges (and
//! PyTorch's level, where the run had a peer), and quality against time.

use std::path::{Path, PathBuf};

use anyhow::Context;
use plotters::coord::Shift;
use plotters::prelude::*;
use quench_support::files::write_atomically;

use crate::report::{VariantReport, WorkloadReport};

/// Writes the plots of every workload that has something to plot, and removes the plots of
/// registered workloads that this report does not draw (an earlier run's in the same folder,
/// which would otherwise stand beside a report they do not belong to); returns the files
/// written.
pub fn write_plots(workloads: &[WorkloadReport], dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let plot = |name: &str, kind: &str| dir.join(format!("{name}-{kind}.svg"));
    let mut written = Vec::new();
    for w in workloads {
        if w.variants.iter().any(|v| v.speedup.is_some()) {
            let path = plot(&w.name, "speedup");
            speedup_plot(w, &path)?;
            written.push(path);
        }
        if w.variants.iter().filter(|v| v.quality.is_some()).count() >= 2 {
            let path = plot(&w.name, "quality");
            quality_plot(w, &path)?;
            written.push(path);
        }
    }
    for workload in crate::workloads::registry() {
        for kind in ["speedup", "quality"] {
            let path = plot(workload.name(), kind);
            if !written.contains(&path) && path.is_file() {
                std::fs::remove_file(&path)
                    .with_context(|| format!("cannot remove the stale plot {}", path.display()))?;
            }
        }
    }
    Ok(written)
}

/// Draws a 760 x 420 SVG with `draw` and replaces `path` with it atomically (as the reports
/// are), so a reader or a concurrent run never sees half a plot.
fn svg(
    path: &Path,
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<(), Box<dyn std::error::Error>>,
) -> anyhow::Result<()> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (760, 420)).into_drawing_area();
        draw(&root)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("cannot draw {}", path.display()))?;
    }
    write_atomically(path, text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// PyTorch's speed over the baseline's, where the workload ran a peer in the baseline's unit.
fn pytorch_level(w: &WorkloadReport) -> Option<f64> {
    let peer = w.peer.as_ref()?;
    let baseline = w.variants.iter().find(|v| v.baseline)?;
    (baseline.iteration_unit == peer.iteration_unit)
        .then(|| baseline.per_iteration_s.median / peer.per_iteration_s)
}

/// Bars of measured speed-up per variant, with the guide's claimed range drawn over each bar
/// and PyTorch's level as a green line.
fn speedup_plot(w: &WorkloadReport, path: &Path) -> anyhow::Result<()> {
    let bars: Vec<&VariantReport> = w.variants.iter().filter(|v| !v.baseline).collect();
    let pytorch = pytorch_level(w);
    let top = bars
        .iter()
        .flat_map(|v| [v.speedup.unwrap_or(0.0), v.claim.map_or(0.0, |c| c.high)])
        .chain(pytorch)
        .fold(1.0f64, f64::max)
        * 1.15;
    svg(path, |root| {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!(
                    "{}: measured speed-up (bars) vs claimed (red ranges){}",
                    w.name,
                    if pytorch.is_some() {
                        ", PyTorch (green)"
                    } else {
                        ""
                    }
                ),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(60)
            .y_label_area_size(50)
            .build_cartesian_2d((0..bars.len()).into_segmented(), 0f64..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(bars.len().max(1))
            .x_label_formatter(&|x| match x {
                SegmentValue::CenterOf(i) => bars.get(*i).map_or(String::new(), |v| v.name.clone()),
                _ => String::new(),
            })
            .y_desc("speed-up over baseline (x)")
            .draw()?;
        chart.draw_series(bars.iter().enumerate().map(|(i, v)| {
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), v.speedup.unwrap_or(0.0)),
                ],
                BLUE.mix(0.6).filled(),
            );
            bar.set_margin(0, 0, 12, 12);
            bar
        }))?;
        chart.draw_series(bars.iter().enumerate().filter_map(|(i, v)| {
            v.claim.map(|c| {
                let mut range = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), c.low),
                        (SegmentValue::Exact(i + 1), c.high),
                    ],
                    RED.mix(0.35).filled(),
                );
                range.set_margin(0, 0, 30, 30);
                range
            })
        }))?;
        chart.draw_series(LineSeries::new(
            [
                (SegmentValue::Exact(0), 1.0),
                (SegmentValue::Exact(bars.len()), 1.0),
            ],
            BLACK.mix(0.5),
        ))?;
        if let Some(level) = pytorch {
            chart.draw_series(LineSeries::new(
                [
                    (SegmentValue::Exact(0), level),
                    (SegmentValue::Exact(bars.len()), level),
                ],
                GREEN.stroke_width(2),
            ))?;
        }
        root.present()?;
        Ok(())
    })
}

/// One point per variant: median time per run against its quality metric.
fn quality_plot(w: &WorkloadReport, path: &Path) -> anyhow::Result<()> {
    let points: Vec<(f64, f64, &str)> = w
        .variants
        .iter()
        .filter_map(|v| {
            v.quality
                .as_ref()
                .map(|q| (v.per_run_s.median, q.value, v.name.as_str()))
        })
        .collect();
    let metric = w
        .variants
        .iter()
        .find_map(|v| v.quality.as_ref())
        .map_or("quality", |q| q.metric.as_str());
    // The time axis is logarithmic, so its margin is a factor, not a difference.
    let (xmin, xmax) = points
        .iter()
        .map(|p| p.0)
        .filter(|t| t.is_finite() && *t > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), t| {
            (lo.min(t), hi.max(t))
        });
    let (xmin, xmax) = if xmax > 0.0 {
        (xmin / 1.5, xmax * 1.5)
    } else {
        (1e-6, 1.0)
    };
    let (ymin, ymax) = span(points.iter().map(|p| p.1));
    svg(path, |root| {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("{}: {metric} against time per run", w.name),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((xmin..xmax).log_scale(), ymin..ymax)?;
        chart
            .configure_mesh()
            .x_desc("seconds per run (log)")
            .y_desc(metric)
            .draw()?;
        chart.draw_series(points.iter().map(|&(x, y, name)| {
            EmptyElement::at((x, y))
                + Circle::new((0, 0), 5, BLUE.filled())
                + Text::new(name.to_string(), (8, -8), ("sans-serif", 13))
        }))?;
        root.present()?;
        Ok(())
    })
}

/// A plotting range around the values with a margin; never empty.
fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.15).max(hi.abs().max(1e-12) * 0.05);
    (lo - pad, hi + pad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn writes_speedup_and_quality_svgs() {
        let dir = std::env::temp_dir().join(format!("quench-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let report = sample_report();
        let files = write_plots(&report.workloads, &dir).unwrap();
        assert_eq!(files.len(), 2);
        let svg = std::fs::read_to_string(&files[0]).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("batched"),
            "{}",
            &svg[..200.min(svg.len())]
        );
        // The sample's baseline takes 0.4 s an epoch and its peer 0.5 s.
        assert!(svg.contains("PyTorch (green)"));
        assert_eq!(pytorch_level(&report.workloads[0]), Some(0.8));
        let mut other_unit = report.workloads[0].clone();
        if let Some(peer) = other_unit.peer.as_mut() {
            peer.iteration_unit = "step".into();
        }
        assert_eq!(pytorch_level(&other_unit), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn plots_the_report_does_not_draw_go_and_other_files_stay() {
        let dir = tempfile::tempdir().unwrap();
        let earlier = write_plots(&sample_report().workloads, dir.path()).unwrap();
        assert_eq!(earlier.len(), 2);
        let notes = dir.path().join("notes.svg");
        std::fs::write(&notes, "<svg/>").unwrap();
        // A later run in the folder whose variants all failed draws nothing.
        assert!(write_plots(&[], dir.path()).unwrap().is_empty());
        assert!(earlier.iter().all(|path| !path.exists()), "{earlier:?}");
        assert!(notes.exists());
    }

    #[test]
    fn spans_are_never_empty() {
        assert_eq!(span([].into_iter()), (0.0, 1.0));
        let (lo, hi) = span([2.0, 2.0].into_iter());
        assert!(lo < 2.0 && hi > 2.0);
    }
}
