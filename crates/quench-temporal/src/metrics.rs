//! Scores of a direction classifier and of the two predictors a model must beat.

use quench_data::{MarketData, MarketPart};
use serde::{Deserialize, Serialize};

use super::model::CLASSES;

/// Accuracy and macro-averaged F1 of predicted classes against labels.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    /// Fraction predicted right.
    pub accuracy: f64,
    /// Mean over the three classes of `2 precision recall / (precision + recall)`; a class
    /// never predicted and never present counts 0, as scikit-learn's `zero_division=0`.
    pub macro_f1: f64,
}

impl Scores {
    /// Of `predicted` against `labels` (same length; NaN scores for none).
    pub fn of(predicted: &[i64], labels: &[i64]) -> Self {
        let n = labels.len().min(predicted.len());
        let mut confusion = [[0usize; CLASSES]; CLASSES];
        let mut right = 0;
        for (&p, &l) in predicted.iter().zip(labels) {
            right += usize::from(p == l);
            if let (Ok(p), Ok(l)) = (usize::try_from(p), usize::try_from(l))
                && p < CLASSES
                && l < CLASSES
            {
                confusion[l][p] += 1;
            }
        }
        let f1 = (0..CLASSES).map(|c| {
            let tp = confusion[c][c] as f64;
            let predicted_c: usize = (0..CLASSES).map(|l| confusion[l][c]).sum();
            let actual_c: usize = confusion[c].iter().sum();
            let denominator = (predicted_c + actual_c) as f64;
            if denominator == 0.0 {
                0.0
            } else {
                2.0 * tp / denominator
            }
        });
        Self {
            accuracy: right as f64 / n as f64,
            macro_f1: f1.sum::<f64>() / CLASSES as f64,
        }
    }
}

/// What predicting without a model scores on the validation and test parts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Baselines {
    /// The training part's most frequent class.
    pub majority_class: i64,
    /// Always predicting it: validation.
    pub majority_validation: Scores,
    /// Always predicting it: test.
    pub majority_test: Scores,
    /// Predicting the move that ended at the window's last bar: validation.
    pub last_move_validation: Scores,
    /// Predicting the move that ended at the window's last bar: test.
    pub last_move_test: Scores,
}

/// The majority-class and "same as last move" baselines of `data`.
pub fn baselines(data: &MarketData) -> Baselines {
    let mut counts = [0usize; CLASSES];
    for &l in data.train.windows.labels() {
        if let Some(c) = usize::try_from(l).ok().and_then(|l| counts.get_mut(l)) {
            *c += 1;
        }
    }
    // Ties go to the lower class, so the choice is deterministic.
    let majority =
        (0..CLASSES).fold(0, |best, c| if counts[c] > counts[best] { c } else { best }) as i64;
    let constant =
        |part: &MarketPart| Scores::of(&vec![majority; part.windows.len()], part.windows.labels());
    let persist = |part: &MarketPart| Scores::of(&part.last_move, part.windows.labels());
    Baselines {
        majority_class: majority,
        majority_validation: constant(&data.validation),
        majority_test: constant(&data.test),
        last_move_validation: persist(&data.validation),
        last_move_test: persist(&data.test),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macro_f1_matches_a_worked_example() {
        // Confusion (rows true, columns predicted): [[2,1,0],[0,1,1],[0,0,1]].
        let labels = [0, 0, 0, 1, 1, 2];
        let predicted = [0, 0, 1, 1, 2, 2];
        let s = Scores::of(&predicted, &labels);
        assert!((s.accuracy - 4.0 / 6.0).abs() < 1e-12);
        // F1: class 0 2*2/(2+3) = 0.8, class 1 2*1/(2+2) = 0.5, class 2 2*1/(2+1) = 2/3.
        let want = (0.8 + 0.5 + 2.0 / 3.0) / 3.0;
        assert!((s.macro_f1 - want).abs() < 1e-12, "{}", s.macro_f1);
    }

    #[test]
    fn a_constant_predictor_scores_one_class_only() {
        let labels = [1, 1, 1, 0, 2];
        let s = Scores::of(&[1; 5], &labels);
        assert!((s.accuracy - 0.6).abs() < 1e-12);
        assert!((s.macro_f1 - (2.0 * 3.0 / 8.0) / 3.0).abs() < 1e-12);
    }
}
