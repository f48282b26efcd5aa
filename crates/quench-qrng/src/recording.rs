//! Where an analysis's bit strings come from: the `data` table of the qRNG configurations (a
//! recorded file, or the synthetic stand-in sources), and the recording it reads or draws.

use std::collections::BTreeSet;
use std::path::PathBuf;

use quench_data::{BitStrings, QRNG_LABELS};
use quench_support::excerpt::excerpt;
use quench_support::files::in_working_folder_or_source_tree;
use serde::{Deserialize, Serialize};

use crate::{QrngError, synthetic_recording};

/// The two kinds of data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The file at [`DataSettings::path`].
    Recorded,
    /// [`crate::SYNTHETIC_DEVICES`]' stand-in lines.
    Synthetic,
}

/// The `data` table: which bit strings an analysis reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataSettings {
    /// `recorded` (the file at `path`) or `synthetic` (the stand-in sources).
    pub source: Source,
    /// The recorded file (the original's format: 100 bits and a label 1-3 per line); a
    /// relative path is looked up from the working folder, then from the source tree.
    pub path: PathBuf,
    /// Lines per source of a synthetic recording.
    pub synthetic_lines: usize,
    /// Seed of a synthetic recording.
    pub synthetic_seed: u64,
}

impl Default for DataSettings {
    /// The original's recording of three sources, shipped with the repository.
    fn default() -> Self {
        Self {
            source: Source::Recorded,
            path: PathBuf::from("data/qrng/AI_2qubits_training_data.txt"),
            synthetic_lines: 2_000,
            synthetic_seed: 1,
        }
    }
}

/// The bit strings of an analysis and where they came from.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The lines and their sources.
    pub strings: BitStrings,
    /// Where they came from, one line (`data: <path>`, or the synthetic settings).
    pub note: String,
}

impl DataSettings {
    /// The recorded file as it will be read (see [`Self::path`]); `None` for synthetic lines.
    pub fn recorded_path(&self) -> Option<PathBuf> {
        (self.source == Source::Recorded).then(|| in_working_folder_or_source_tree(&self.path))
    }

    /// Reads or draws the bit strings. Refused: a file that cannot be read or parsed (the
    /// error names it and the line), and a recording in which a source has no line (a
    /// classifier of the others would look perfect, a tournament would miss a player).
    pub fn load(&self) -> Result<Recording, QrngError> {
        // Settings of the other source are not used: given anyway, they are a mistake the run
        // would hide (a path with `source = "synthetic"` read nothing).
        let defaults = Self::default();
        let unused = match self.source {
            Source::Synthetic => {
                (self.path != defaults.path).then(|| ("data.path", self.path.display().to_string()))
            }
            Source::Recorded => [
                (
                    "data.synthetic_lines",
                    self.synthetic_lines as u64,
                    defaults.synthetic_lines as u64,
                ),
                (
                    "data.synthetic_seed",
                    self.synthetic_seed,
                    defaults.synthetic_seed,
                ),
            ]
            .into_iter()
            .find(|&(_, given, default)| given != default)
            .map(|(field, given, _)| (field, given.to_string())),
        };
        if let Some((field, value)) = unused {
            return Err(QrngError::config(
                field,
                excerpt(&value),
                "not used by this `data.source`: remove it, or change the source",
            ));
        }
        let Some(path) = self.recorded_path() else {
            // As a recorded file without one of its sources is refused: no source may be empty.
            if self.synthetic_lines == 0 {
                return Err(QrngError::config(
                    "data.synthetic_lines",
                    0,
                    "every synthetic source needs at least one line",
                ));
            }
            return Ok(Recording {
                strings: synthetic_recording(self.synthetic_lines, self.synthetic_seed)?,
                note: format!(
                    "data: synthetic sources, {} lines each (seed {})",
                    self.synthetic_lines, self.synthetic_seed
                ),
            });
        };
        let strings = BitStrings::read(&path, &QRNG_LABELS)?;
        let found: BTreeSet<u32> = strings.labels().iter().copied().collect();
        if let Some(&label) = strings.classes().iter().find(|c| !found.contains(c)) {
            return Err(QrngError::MissingSource {
                path,
                label,
                classes: strings.classes().to_vec(),
            });
        }
        Ok(Recording {
            strings,
            note: format!("data: {}", self.path.display()),
        })
    }
}
