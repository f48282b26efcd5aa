//! `benchmark compare A B`: per-variant ratios of two reports (CPU against GPU, before
//! against after a change), with each report's PyTorch peer where it ran one.

use std::fmt::Write as _;

use crate::numbers::{factor, seconds, significant};
use crate::report::{Report, RunStatus};

/// The comparison table of `a` (the reference) and `b`.
pub fn compare(a: &Report, b: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "A: {} on {} ({}), {}\nB: {} on {} ({}), {}\n",
        a.suite,
        a.machine.device,
        a.machine.device_name,
        a.git_revision,
        b.suite,
        b.machine.device,
        b.machine.device_name,
        b.git_revision
    );
    let _ = writeln!(
        out,
        "{:<40} {:>12} {:>12} {:>9}  quality A -> B",
        "workload/variant", "A per iter", "B per iter", "A/B"
    );
    let mut missing = Vec::new();
    // Two decimals, as the ratios of real runs read; a hand-edited report's 1e308 or infinite
    // ratio in exponent form or as `inf`.
    let ratio = |x: Option<f64>| {
        x.map_or("-".into(), |r| {
            if r.abs() < 1e6 {
                format!("{r:.2}x")
            } else {
                format!("{}x", factor(r))
            }
        })
    };
    for wa in &a.workloads {
        let wb = b.workloads.iter().find(|w| w.name == wa.name);
        if let (Some(pa), Some(pb)) = (&wa.peer, wb.and_then(|w| w.peer.as_ref())) {
            let _ = writeln!(
                out,
                "{:<40} {:>12} {:>12} {:>9}  {} {} -> {} (torch {} -> {})",
                format!("{}/pytorch", wa.name),
                seconds(pa.per_iteration_s),
                seconds(pb.per_iteration_s),
                ratio(Some(pa.per_iteration_s / pb.per_iteration_s)),
                pa.quality_metric,
                significant(pa.quality),
                significant(pb.quality),
                pa.torch,
                pb.torch
            );
        }
        for va in &wa.variants {
            let found = wb.and_then(|w| w.variants.iter().find(|v| v.name == va.name));
            let Some(vb) = found else {
                missing.push(format!("{}/{}", wa.name, va.name));
                continue;
            };
            let quality = match (&va.quality, &vb.quality) {
                (Some(qa), Some(qb)) => format!(
                    "{} {} -> {}",
                    qa.metric,
                    significant(qa.value),
                    significant(qb.value)
                ),
                _ => "-".into(),
            };
            let quality = if va.vs_pytorch.is_some() || vb.vs_pytorch.is_some() {
                format!(
                    "{quality}; vs PyTorch {} -> {}",
                    ratio(va.vs_pytorch),
                    ratio(vb.vs_pytorch)
                )
            } else {
                quality
            };
            let _ = writeln!(
                out,
                "{:<40} {:>12} {:>12} {:>9}  {quality}",
                format!("{}/{}", wa.name, va.name),
                seconds(va.per_iteration_s.median),
                seconds(vb.per_iteration_s.median),
                ratio(Some(va.per_iteration_s.median / vb.per_iteration_s.median))
            );
        }
    }
    if !missing.is_empty() {
        let _ = writeln!(out, "\nonly in A: {}", missing.join(", "));
    }
    // B's variants that A lacks are no disagreement (A is the reference), but are said.
    let extra: Vec<String> = b
        .workloads
        .iter()
        .flat_map(|wb| {
            let wa = a.workloads.iter().find(|w| w.name == wb.name);
            wb.variants
                .iter()
                .filter(move |vb| !wa.is_some_and(|w| w.variants.iter().any(|v| v.name == vb.name)))
                .map(move |vb| format!("{}/{}", wb.name, vb.name))
        })
        .collect();
    if !extra.is_empty() {
        let _ = writeln!(out, "\nonly in B: {}", extra.join(", "));
    }
    out
}

/// Where B's run disagrees with A's. First the reports themselves: either not `complete`
/// (still running, interrupted, failed), of different schemas, A with no variant run, a
/// failed variant or one without a quality in A: a reference that did not measure something
/// agrees with nothing. Then each variant of A that B lacks, failed, or ran without a quality,
/// measured with another metric or direction, and each quality further from A's than `within`
/// of it (relative) or `within` itself (absolute), whichever is larger. Empty when every
/// variant agrees: the check CI runs between the same suite on two devices.
pub fn disagreements(a: &Report, b: &Report, within: f64) -> Vec<String> {
    let mut out = Vec::new();
    for (label, report) in [("A", a), ("B", b)] {
        if report.status != RunStatus::Complete {
            out.push(format!(
                "{label} is not a complete run: its status is {}",
                report.status.name()
            ));
        }
    }
    // A name listed twice (a hand-edited or concatenated report) would be compared by its
    // first entry alone.
    for (label, report) in [("A", a), ("B", b)] {
        let mut seen = std::collections::BTreeSet::new();
        for w in &report.workloads {
            if !seen.insert(w.name.clone()) {
                out.push(format!("{label} lists the workload {} twice", w.name));
            }
            let names = w.variants.iter().map(|v| &v.name);
            let mut variants = std::collections::BTreeSet::new();
            for name in names.chain(w.failed.iter().map(|f| &f.name)) {
                if !variants.insert(name) {
                    out.push(format!("{label} lists {}/{name} twice", w.name));
                }
            }
        }
    }
    if a.schema != b.schema {
        out.push(format!(
            "the reports have different schemas: A {}, B {}",
            a.schema, b.schema
        ));
    }
    if a.workloads.iter().all(|w| w.variants.is_empty()) {
        out.push("A ran no variant: there is nothing to agree with".into());
    }
    for (name, error) in a.workloads.iter().flat_map(|w| {
        w.failed
            .iter()
            .map(move |f| (format!("{}/{}", w.name, f.name), &f.error))
    }) {
        out.push(format!("{name}: failed in A: {error}"));
    }
    for wa in &a.workloads {
        let wb = b.workloads.iter().find(|w| w.name == wa.name);
        for failed in wb.map_or(&[][..], |w| &w.failed[..]) {
            out.push(format!(
                "{}/{}: failed in B: {}",
                wa.name, failed.name, failed.error
            ));
        }
        for va in &wa.variants {
            let name = format!("{}/{}", wa.name, va.name);
            if wb.is_some_and(|w| w.failed.iter().any(|f| f.name == va.name)) {
                continue;
            }
            let Some(vb) = wb.and_then(|w| w.variants.iter().find(|v| v.name == va.name)) else {
                out.push(format!("{name}: not run in B"));
                continue;
            };
            match (&va.quality, &vb.quality) {
                (Some(qa), Some(qb)) if qa.metric != qb.metric => {
                    out.push(format!("{name}: A measured {}, B {}", qa.metric, qb.metric))
                }
                (Some(qa), Some(qb)) if qa.higher_is_better != qb.higher_is_better => {
                    out.push(format!(
                        "{name}: {} is better higher in one report and lower in the other",
                        qa.metric
                    ));
                }
                (Some(qa), Some(qb)) => {
                    let bound = within * qa.value.abs().max(1.0);
                    let gap = (qa.value - qb.value).abs();
                    // A NaN gap (a NaN quality on either side) is a disagreement too.
                    if gap.is_nan() || gap > bound {
                        out.push(format!(
                            "{name}: {} {} in A, {} in B (differ by {}, more than {})",
                            qa.metric,
                            significant(qa.value),
                            significant(qb.value),
                            significant(gap),
                            significant(bound)
                        ));
                    }
                }
                (Some(qa), None) => out.push(format!("{name}: {} missing in B", qa.metric)),
                (None, Some(qb)) => out.push(format!(
                    "{name}: A has no quality where B has {}",
                    qb.metric
                )),
                // A workload that defines no quality metric (the distinguishing tournament's
                // statistics): nothing to compare but that it ran.
                (None, None) => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn ratios_are_reference_time_over_other_time() {
        let a = sample_report();
        let mut b = sample_report();
        b.workloads[0].variants[1].per_iteration_s =
            b.workloads[0].variants[1].per_iteration_s.scaled(0.5);
        b.workloads[0].variants.remove(0);
        let text = compare(&a, &b);
        let line = text
            .lines()
            .find(|l| l.starts_with("qrng-classifier/batched"))
            .unwrap();
        assert!(line.contains("2.00x"), "{line}");
        // The sample's peer takes 0.5 s: batched was 5x PyTorch in A; B's own ratio is kept.
        assert!(line.ends_with("vs PyTorch 5.00x -> 5.00x"), "{line}");
        let peer = text
            .lines()
            .find(|l| l.starts_with("qrng-classifier/pytorch"))
            .unwrap();
        assert!(
            peer.contains("1.00x") && peer.contains("torch 2.15.0 -> 2.15.0"),
            "{peer}"
        );
        assert!(
            text.contains("only in A: qrng-classifier/baseline"),
            "{text}"
        );
        // Variants only in B are said too; A is still the reference of every ratio.
        assert!(!text.contains("only in B"), "{text}");
        let text = compare(&b, &a);
        assert!(text.contains("only in B: qrng-classifier/"), "{text}");
    }

    #[test]
    fn qualities_agree_within_a_relative_or_absolute_bound() {
        // The sample's failed variant is a disagreement wherever it is B's: left out here.
        let clean = || {
            let mut report = sample_report();
            report.workloads[0].failed.clear();
            report
        };
        let a = clean();
        assert!(disagreements(&a, &a, 0.05).is_empty());
        let found = disagreements(&a, &sample_report(), 0.05);
        assert_eq!(
            found,
            ["qrng-classifier/broken: failed in B: quality NaN is not finite"]
        );
        let quality = |r: &mut Report| r.workloads[0].variants[1].quality.as_mut().unwrap().value;
        let mut b = clean();
        let value = quality(&mut b);
        // Within 0.05 absolute of a value below one agrees; 0.06 away does not.
        b.workloads[0].variants[1].quality.as_mut().unwrap().value = value + 0.04;
        assert!(disagreements(&a, &b, 0.05).is_empty());
        b.workloads[0].variants[1].quality.as_mut().unwrap().value = value + 0.06;
        let found = disagreements(&a, &b, 0.05);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("qrng-classifier/batched"), "{found:?}");
        b.workloads[0].variants[1].quality.as_mut().unwrap().value = f64::NAN;
        assert_eq!(disagreements(&a, &b, 0.05).len(), 1);
        // A variant B lacks, or that failed there, disagrees.
        let mut b = clean();
        b.workloads[0].variants.remove(0);
        let found = disagreements(&a, &b, 0.05);
        assert!(found[0].ends_with("not run in B"), "{found:?}");
        let mut b = clean();
        let name = b.workloads[0].variants.remove(0).name;
        b.workloads[0].failed.push(crate::report::FailedVariant {
            name,
            error: "out of memory".into(),
        });
        let found = disagreements(&a, &b, 0.05);
        assert!(found[0].contains("failed in B: out of memory"), "{found:?}");
        // A variant or workload listed twice is refused, whichever report lists it.
        let mut b = clean();
        let copy = b.workloads[0].variants[1].clone();
        b.workloads[0].variants.push(copy);
        let found = disagreements(&a, &b, 0.05);
        assert_eq!(found, ["B lists qrng-classifier/batched twice"]);
        let mut twice = clean();
        let copy = twice.workloads[0].clone();
        twice.workloads.push(copy);
        let found = disagreements(&twice, &a, 0.05);
        assert!(
            found.contains(&"A lists the workload qrng-classifier twice".to_string()),
            "{found:?}"
        );
    }
}
