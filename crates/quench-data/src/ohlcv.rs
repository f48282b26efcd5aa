//! OHLCV bars of one symbol, and the reader of MetaTrader-5 style exports.
//!
//! A file holds one symbol (its file stem), one bar per line, fields separated by commas or
//! by tabs (a tab on the first non-blank line means tabs). Its columns are time, open, high,
//! low, close, tick volume, spread and real volume:
//!
//! - With a header line (a first line none of whose fields is a number), the columns follow
//!   the header. Names are matched case-insensitively with angle brackets stripped, as the
//!   MT5 terminal writes them: `time` (also `datetime`, `timestamp`), `date`, `open`,
//!   `high`, `low`, `close`, `tick_volume` (also `tickvol`), `spread`, `real_volume` (also
//!   `vol`). `date` and `time` together are separate date and clock columns. The volume and
//!   spread columns may be missing (they read as 0); any other name is refused.
//! - Without a header, a line has the 8 columns in the order above, or 9 where the first two
//!   are a separate date and clock.
//!
//! Times are UTC: integer unix seconds, `YYYY-MM-DD HH:MM[:SS]` or `YYYY.MM.DD HH:MM[:SS]`
//! (also with `T` between date and clock, `/` in the date, or a date alone for daily bars),
//! or a date column and a clock column. Blank lines are skipped, `\r\n` endings and a UTF-8
//! byte-order mark accepted. The file is read a line at a time: a line longer than
//! [`MAX_OHLCV_LINE`] bytes or a file of more than [`MAX_BARS`] bars is refused, naming the
//! line, and the bars' memory is estimated from the file's size before reading.
//!
//! Every bar must be possible (positive finite prices, `low <= open, close <= high`, finite
//! non-negative volumes and spread) and later than the one before; a violation is a
//! [`DataError`] naming the file, line and column. A step between bars longer than the
//! file's most common step (a weekend, a holiday, a feed outage) is reported as a [`Gap`],
//! not refused.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use serde::Serialize;

use crate::DataError;
use crate::civil::{DAY, days_from_civil};
use crate::qrng::UTF8_BOM;

/// The bars of one symbol, oldest first: every column has one value per bar.
#[derive(Debug, Clone, PartialEq)]
pub struct Bars {
    /// The symbol (the file stem for a file that was read).
    pub symbol: String,
    /// Opening time of each bar, unix seconds (UTC), strictly increasing.
    pub time: Vec<i64>,
    /// Opening price.
    pub open: Vec<f64>,
    /// Highest price.
    pub high: Vec<f64>,
    /// Lowest price.
    pub low: Vec<f64>,
    /// Closing price.
    pub close: Vec<f64>,
    /// Number of price changes (ticks) in the bar.
    pub tick_volume: Vec<f64>,
    /// Spread, in the file's unit (MT5: points, i.e. the last quoted digit).
    pub spread: Vec<f64>,
    /// Traded volume; 0 for FX, where no exchange reports it.
    pub real_volume: Vec<f64>,
}

/// The bars read from one file and the gaps found between them.
#[derive(Debug, Clone, PartialEq)]
pub struct OhlcvFile {
    /// The bars.
    pub bars: Bars,
    /// Every step longer than the file's most common one, in time order.
    pub gaps: Vec<Gap>,
}

/// A step between consecutive bars longer than the file's most common step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Gap {
    /// The line of the bar after the gap.
    pub line: usize,
    /// Time of the bar before the gap, unix seconds.
    pub from: i64,
    /// Time of the bar after the gap, unix seconds.
    pub to: i64,
    /// Bars of the common step that would fit strictly between the two.
    pub missing: usize,
}

/// A price or volume column, for messages and for finding a field's position on a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Open,
    High,
    Low,
    Close,
    TickVolume,
    Spread,
    RealVolume,
}

impl Field {
    const ALL: [Self; 7] = [
        Self::Open,
        Self::High,
        Self::Low,
        Self::Close,
        Self::TickVolume,
        Self::Spread,
        Self::RealVolume,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::High => "high",
            Self::Low => "low",
            Self::Close => "close",
            Self::TickVolume => "tick_volume",
            Self::Spread => "spread",
            Self::RealVolume => "real_volume",
        }
    }
}

/// Why a bar is impossible: the field to blame, its value and the reason.
#[derive(Debug, Clone, PartialEq)]
struct BarFault {
    field: Field,
    value: f64,
    reason: String,
}

/// The checks that make a bar possible, in the order of [`Field::ALL`] for the values.
/// One function serves the reader and [`Bars::validate`], so generated and read bars obey
/// the same rules.
fn bar_fault(values: [f64; 7]) -> Option<BarFault> {
    let [open, high, low, close, ..] = values;
    let fault = |field: Field, reason: String| {
        let value = values[Field::ALL.iter().position(|&f| f == field).unwrap_or(0)];
        Some(BarFault {
            field,
            value,
            reason,
        })
    };
    for (&field, &value) in Field::ALL.iter().zip(&values) {
        if !value.is_finite() {
            return fault(field, "is not finite".into());
        }
    }
    for (&field, &value) in Field::ALL.iter().zip(&values).take(4) {
        if value <= 0.0 {
            return fault(field, "is not a positive price".into());
        }
    }
    if high < low {
        return fault(Field::High, format!("is below low {low}"));
    }
    for (field, value) in [(Field::Open, open), (Field::Close, close)] {
        if value < low || value > high {
            return fault(field, format!("is outside [low, high] = [{low}, {high}]"));
        }
    }
    for (&field, &value) in Field::ALL.iter().zip(&values).skip(4) {
        if value < 0.0 {
            return fault(field, "is negative".into());
        }
    }
    None
}

impl Bars {
    /// No bars yet, for `symbol`.
    pub(crate) fn empty(symbol: String) -> Self {
        Self {
            symbol,
            time: Vec::new(),
            open: Vec::new(),
            high: Vec::new(),
            low: Vec::new(),
            close: Vec::new(),
            tick_volume: Vec::new(),
            spread: Vec::new(),
            real_volume: Vec::new(),
        }
    }

    /// Appends one bar; `values` in the order open, high, low, close, tick volume, spread,
    /// real volume.
    pub(crate) fn push(&mut self, time: i64, values: [f64; 7]) {
        let [open, high, low, close, tick_volume, spread, real_volume] = values;
        self.time.push(time);
        self.open.push(open);
        self.high.push(high);
        self.low.push(low);
        self.close.push(close);
        self.tick_volume.push(tick_volume);
        self.spread.push(spread);
        self.real_volume.push(real_volume);
    }

    /// Number of bars (the length of `close`).
    pub fn len(&self) -> usize {
        self.close.len()
    }

    /// Whether there is no bar.
    pub fn is_empty(&self) -> bool {
        self.close.is_empty()
    }

    /// The price and volume columns, in the order of [`Field::ALL`].
    fn columns(&self) -> [&[f64]; 7] {
        [
            &self.open,
            &self.high,
            &self.low,
            &self.close,
            &self.tick_volume,
            &self.spread,
            &self.real_volume,
        ]
    }

    /// Checks bars built in memory by the rules the reader applies to a file: all columns as
    /// long as `close`, every bar possible, times strictly increasing.
    pub fn validate(&self) -> Result<(), DataError> {
        let columns = self.columns();
        let lengths = std::iter::once(("time", self.time.len())).chain(
            Field::ALL
                .iter()
                .zip(&columns)
                .map(|(f, c)| (f.name(), c.len())),
        );
        for (field, len) in lengths {
            if len != self.len() {
                return Err(DataError::BarColumns {
                    symbol: self.symbol.clone(),
                    field,
                    len,
                    expected: self.len(),
                });
            }
        }
        for bar in 0..self.len() {
            if let Some(fault) = bar_fault(columns.map(|c| c[bar])) {
                return Err(DataError::BarInvalid {
                    symbol: self.symbol.clone(),
                    bar,
                    field: fault.field.name(),
                    value: fault.value.to_string(),
                    reason: fault.reason,
                });
            }
            if bar > 0 && self.time[bar] <= self.time[bar - 1] {
                return Err(DataError::BarInvalid {
                    symbol: self.symbol.clone(),
                    bar,
                    field: "time",
                    value: crate::civil::format_utc(self.time[bar]),
                    reason: format!(
                        "is not after bar {}'s {}",
                        bar - 1,
                        crate::civil::format_utc(self.time[bar - 1])
                    ),
                });
            }
        }
        Ok(())
    }

    /// Reads and validates the OHLCV file at `path` (format in the module documentation);
    /// the symbol is the file stem.
    pub fn read(path: &Path) -> Result<OhlcvFile, DataError> {
        crate::loads::loaded(format_args!("bars of {}", path.display()));
        let io = |source| DataError::Io {
            path: path.to_path_buf(),
            source,
        };
        let size = fs::metadata(path).map_err(io)?;
        if !size.is_file() {
            // A device or a pipe would be read without end.
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        // The bars, 72 bytes each from lines of at least about 16 bytes; the file itself is
        // read a line at a time.
        quench_support::budget::check_fits(
            || format!("reading {}", path.display()),
            u128::from(size.len()) * 5,
        )?;
        let file = fs::File::open(path).map_err(io)?;
        let mut lines = Lines {
            reader: std::io::BufReader::new(file),
            buffer: Vec::new(),
            number: 0,
            path,
        };
        let empty = || DataError::OhlcvEmpty {
            path: path.to_path_buf(),
        };
        let (first_line, first) = lines.next_line()?.ok_or_else(empty)?;
        let separator = if first.contains(&b'\t') { b'\t' } else { b',' };
        if !first.contains(&b',') && first.contains(&b';') {
            return Err(DataError::OhlcvHeader {
                path: path.to_path_buf(),
                line: first_line,
                detail: "fields are separated by ';': Quench reads commas or tabs (replace the \
                         semicolons, and decimal commas by points)"
                    .into(),
            });
        }
        let head = split(first, separator);
        let is_header = !head.iter().any(|field| parse_number(field).is_some());
        let symbol = path.file_stem().map_or_else(
            || path.display().to_string(),
            |stem| stem.to_string_lossy().into_owned(),
        );
        let mut reader = Reader {
            path,
            separator,
            layout: if is_header {
                Layout::from_header(path, first_line, &head)?
            } else {
                Layout::positional(path, first_line, head.len())?
            },
            bars: Bars::empty(symbol),
            lines: Vec::new(),
        };
        if !is_header {
            reader.push(first_line, first)?;
        }
        while let Some((line, text)) = lines.next_line()? {
            if reader.bars.len() == MAX_BARS {
                return Err(DataError::OhlcvLimit {
                    path: path.to_path_buf(),
                    line,
                    detail: format!(
                        "more than {MAX_BARS} bars (the reader's limit: split the file by years)"
                    ),
                });
            }
            reader.push(line, text)?;
        }
        if reader.bars.is_empty() {
            return Err(empty());
        }
        let gaps = find_gaps(&reader.bars.time, &reader.lines);
        Ok(OhlcvFile {
            bars: reader.bars,
            gaps,
        })
    }

    /// Reads every file of `paths` with [`Bars::read`], one symbol each, in order; the first
    /// failure ends the reading.
    pub fn read_all<P: AsRef<Path>>(
        paths: impl IntoIterator<Item = P>,
    ) -> Result<Vec<OhlcvFile>, DataError> {
        paths
            .into_iter()
            .map(|path| Self::read(path.as_ref()))
            .collect()
    }
}

/// The most bars [`Bars::read`] takes from one file: 20 million, 38 years of one-minute bars
/// (1.4 GB of bars in memory).
pub const MAX_BARS: usize = 20_000_000;

/// The longest line [`Bars::read`] takes, bytes: an OHLCV row is under 200.
pub const MAX_OHLCV_LINE: usize = 4_096;

/// The non-blank lines of an OHLCV file, one at a time, numbered from 1, without their line
/// ending; a UTF-8 byte-order mark is read past and a UTF-16 one refused.
struct Lines<'a> {
    reader: std::io::BufReader<fs::File>,
    buffer: Vec<u8>,
    /// Lines read so far, blank ones included.
    number: usize,
    path: &'a Path,
}

impl Lines<'_> {
    /// The next non-blank line and its number, borrowed until the next call.
    fn next_line(&mut self) -> Result<Option<(usize, &[u8])>, DataError> {
        use std::io::{BufRead as _, Read as _};
        let limit = MAX_OHLCV_LINE as u64 + 2;
        // The line's place in the buffer: found in the loop, borrowed after it.
        let (start, end) = loop {
            self.buffer.clear();
            let read = (&mut self.reader)
                .take(limit)
                .read_until(b'\n', &mut self.buffer)
                .map_err(|source| DataError::Io {
                    path: self.path.to_path_buf(),
                    source,
                })?;
            if read == 0 {
                return Ok(None);
            }
            self.number += 1;
            let mut start = 0;
            if self.number == 1 {
                if self.buffer.starts_with(b"\xFF\xFE") || self.buffer.starts_with(b"\xFE\xFF") {
                    return Err(DataError::OhlcvHeader {
                        path: self.path.to_path_buf(),
                        line: 1,
                        detail: "the file is UTF-16 (it starts with a UTF-16 byte-order mark); \
                                 save it as UTF-8"
                            .into(),
                    });
                }
                if self.buffer.starts_with(UTF8_BOM) {
                    start = UTF8_BOM.len();
                }
            }
            let ended = self.buffer.last() == Some(&b'\n');
            let text = &self.buffer[start..];
            let text = text.strip_suffix(b"\n").unwrap_or(text);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            if text.len() > MAX_OHLCV_LINE || (!ended && read as u64 == limit) {
                return Err(DataError::OhlcvLimit {
                    path: self.path.to_path_buf(),
                    line: self.number,
                    detail: format!(
                        "longer than {MAX_OHLCV_LINE} bytes: not an OHLCV row (is it a text file \
                         of bars?)"
                    ),
                });
            }
            if !text.trim_ascii().is_empty() {
                break (start, start + text.len());
            }
        };
        Ok(Some((self.number, &self.buffer[start..end])))
    }
}

/// The fields of `line`, trimmed of white space.
fn split(line: &[u8], separator: u8) -> Vec<&[u8]> {
    line.split(|&b| b == separator)
        .map(<[u8]>::trim_ascii)
        .collect()
}

fn parse_number(field: &[u8]) -> Option<f64> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// Where the time of a line is.
#[derive(Debug, Clone, Copy)]
enum TimeColumns {
    /// One column: unix seconds, or date and clock.
    Single(usize),
    /// A date column and a clock column.
    Split { date: usize, clock: usize },
}

/// The position (from 0) of every column on a line.
#[derive(Debug, Clone)]
struct Layout {
    fields: usize,
    time: TimeColumns,
    /// Positions of the columns of [`Field::ALL`]; `None` for a missing volume or spread.
    values: [Option<usize>; 7],
}

impl Layout {
    /// The layout of a file without header, which has `fields` fields on its first line.
    fn positional(path: &Path, line: usize, fields: usize) -> Result<Self, DataError> {
        let (time, first_value) = match fields {
            8 => (TimeColumns::Single(0), 1),
            9 => (TimeColumns::Split { date: 0, clock: 1 }, 2),
            found => {
                return Err(DataError::OhlcvFieldCount {
                    path: path.to_path_buf(),
                    line,
                    expected: 8,
                    found,
                });
            }
        };
        Ok(Self {
            fields,
            time,
            values: std::array::from_fn(|i| Some(first_value + i)),
        })
    }

    /// The layout that the header `names` declares.
    fn from_header(path: &Path, line: usize, names: &[&[u8]]) -> Result<Self, DataError> {
        let header = |detail: String| DataError::OhlcvHeader {
            path: path.to_path_buf(),
            line,
            detail,
        };
        let (mut time, mut date) = (None, None);
        let mut values = [None; 7];
        for (position, raw) in names.iter().enumerate() {
            let name = String::from_utf8_lossy(raw)
                .trim_matches(|c| c == '<' || c == '>')
                .to_ascii_lowercase();
            let slot = match name.as_str() {
                "time" | "datetime" | "timestamp" => &mut time,
                "date" => &mut date,
                "open" => &mut values[0],
                "high" => &mut values[1],
                "low" => &mut values[2],
                "close" => &mut values[3],
                "tick_volume" | "tickvol" => &mut values[4],
                "spread" => &mut values[5],
                "real_volume" | "vol" => &mut values[6],
                _ => {
                    return Err(header(format!(
                        "column {}: unknown name {:?} (known: time, date, open, high, low, \
                         close, tick_volume or tickvol, spread, real_volume or vol)",
                        position + 1,
                        crate::error::excerpt(raw)
                    )));
                }
            };
            if let Some(earlier) = slot.replace(position) {
                return Err(header(format!(
                    "column {}: {name:?} repeats column {}",
                    position + 1,
                    earlier + 1
                )));
            }
        }
        let time = match (date, time) {
            (Some(date), Some(clock)) => TimeColumns::Split { date, clock },
            (Some(column), None) | (None, Some(column)) => TimeColumns::Single(column),
            (None, None) => return Err(header("has no time or date column".into())),
        };
        for (field, position) in Field::ALL.iter().zip(&values).take(4) {
            if position.is_none() {
                return Err(header(format!("has no {} column", field.name())));
            }
        }
        Ok(Self {
            fields: names.len(),
            time,
            values,
        })
    }
}

/// Reads the data lines of one file.
struct Reader<'a> {
    path: &'a Path,
    separator: u8,
    layout: Layout,
    bars: Bars,
    /// The line of every bar, for messages and gaps.
    lines: Vec<usize>,
}

impl Reader<'_> {
    /// Validates line `line` and appends its bar.
    fn push(&mut self, line: usize, text: &[u8]) -> Result<(), DataError> {
        let fields = split(text, self.separator);
        if fields.len() != self.layout.fields {
            return Err(DataError::OhlcvFieldCount {
                path: self.path.to_path_buf(),
                line,
                expected: self.layout.fields,
                found: fields.len(),
            });
        }
        let syntax =
            |column: usize, field: &'static str, expected: &'static str| DataError::OhlcvSyntax {
                path: self.path.to_path_buf(),
                line,
                column: column + 1,
                field,
                text: crate::error::excerpt(fields[column]),
                expected,
            };
        let time = match self.layout.time {
            TimeColumns::Single(column) => parse_time(fields[column]).ok_or_else(|| {
                syntax(
                    column,
                    "time",
                    "unix seconds of the years 1900-9999 (not milliseconds) or a date like \
                     2024-01-31 13:45[:00]",
                )
            })?,
            TimeColumns::Split { date, clock } => {
                let days = parse_date(fields[date])
                    .ok_or_else(|| syntax(date, "date", "a date like 2024.01.31"))?;
                let seconds = parse_clock(fields[clock])
                    .ok_or_else(|| syntax(clock, "time", "a time of day like 13:45[:00]"))?;
                days * DAY + seconds
            }
        };
        let mut values = [0.0; 7];
        for ((value, &field), position) in
            values.iter_mut().zip(&Field::ALL).zip(self.layout.values)
        {
            if let Some(column) = position {
                *value = parse_number(fields[column])
                    .ok_or_else(|| syntax(column, field.name(), "a number"))?;
            }
        }
        if let Some(fault) = bar_fault(values) {
            let position = Field::ALL.iter().position(|&f| f == fault.field);
            return Err(DataError::OhlcvValue {
                path: self.path.to_path_buf(),
                line,
                column: position
                    .and_then(|p| self.layout.values[p])
                    .map_or(0, |column| column + 1),
                field: fault.field.name(),
                value: fault.value,
                reason: fault.reason,
            });
        }
        if let (Some(&previous), Some(&previous_line)) = (self.bars.time.last(), self.lines.last())
            && time <= previous
        {
            return Err(DataError::OhlcvTimeOrder {
                path: self.path.to_path_buf(),
                line,
                time,
                previous_line,
                previous,
            });
        }
        self.bars.push(time, values);
        self.lines.push(line);
        Ok(())
    }
}

/// Unix seconds of 1900-01-01 00:00:00 UTC.
const UNIX_1900: i64 = -2_208_988_800;
/// Unix seconds of 9999-12-31 23:59:59 UTC.
const UNIX_9999_END: i64 = 253_402_300_799;

/// Unix seconds: an integer, or a date with an optional clock after a space or `T`.
fn parse_time(field: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(field).ok()?;
    if let Ok(seconds) = text.parse::<i64>() {
        // Years 1900 to 9999, as dates are: milliseconds or a corrupted field fall outside,
        // and differences of any two times stay far from i64's limits.
        return (UNIX_1900..=UNIX_9999_END)
            .contains(&seconds)
            .then_some(seconds);
    }
    match text.split_once([' ', 'T']) {
        Some((date, clock)) => {
            Some(parse_date(date.as_bytes())? * DAY + parse_clock(clock.trim().as_bytes())?)
        }
        None => Some(parse_date(field)? * DAY),
    }
}

/// Days since 1970-01-01 of `YYYY-MM-DD`, `YYYY.MM.DD` or `YYYY/MM/DD`.
fn parse_date(field: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(field).ok()?;
    let mut parts = text.split(['-', '.', '/']);
    let (Some(year), Some(month), Some(day), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    if year.len() != 4 || !all_digits(year) || !all_digits(month) || !all_digits(day) {
        return None;
    }
    days_from_civil(year.parse().ok()?, month.parse().ok()?, day.parse().ok()?)
}

/// Seconds since midnight of `HH:MM` or `HH:MM:SS`.
fn parse_clock(field: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(field).ok()?;
    let mut parts = text.split(':');
    let hour = parts.next()?;
    let minute = parts.next()?;
    let second = parts.next().unwrap_or("0");
    if parts.next().is_some() || ![hour, minute, second].into_iter().all(all_digits) {
        return None;
    }
    let (hour, minute, second): (i64, i64, i64) = (
        hour.parse().ok()?,
        minute.parse().ok()?,
        second.parse().ok()?,
    );
    (hour < 24 && minute < 60 && second < 60).then_some(hour * 3600 + minute * 60 + second)
}

fn all_digits(text: &str) -> bool {
    !text.is_empty() && text.len() <= 4 && text.bytes().all(|b| b.is_ascii_digit())
}

/// Every step of `time` longer than its most common step (the smallest of equally common
/// ones); `lines[i]` is the line of bar `i`.
fn find_gaps(time: &[i64], lines: &[usize]) -> Vec<Gap> {
    let mut counts: HashMap<i64, usize> = HashMap::new();
    for pair in time.windows(2) {
        *counts.entry(pair[1] - pair[0]).or_default() += 1;
    }
    let Some(step) = counts
        .iter()
        .max_by_key(|&(&step, &count)| (count, std::cmp::Reverse(step)))
        .map(|(&step, _)| step)
    else {
        return Vec::new();
    };
    (1..time.len())
        .filter(|&i| time[i] - time[i - 1] > step)
        .map(|i| Gap {
            line: lines[i],
            from: time[i - 1],
            to: time[i],
            missing: usize::try_from((time[i] - time[i - 1] - 1) / step).unwrap_or(usize::MAX),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_files::Scratch;

    fn read(name: &str, text: &str) -> Result<OhlcvFile, DataError> {
        let scratch = Scratch::new();
        Bars::read(&scratch.write(name, text.as_bytes()))
    }

    const T0: i64 = 1_704_067_200; // 2024-01-01 00:00:00 UTC

    #[test]
    fn reads_a_headerless_csv_of_unix_seconds() {
        let file = read(
            "EURUSD.csv",
            &format!(
                "{T0},1.10,1.12,1.09,1.11,120,12,0\n{},1.11,1.13,1.10,1.12,80,10,0\n",
                T0 + 900
            ),
        )
        .unwrap();
        let bars = &file.bars;
        assert_eq!(bars.symbol, "EURUSD");
        assert_eq!(bars.time, vec![T0, T0 + 900]);
        assert_eq!(bars.open, vec![1.10, 1.11]);
        assert_eq!(bars.high, vec![1.12, 1.13]);
        assert_eq!(bars.low, vec![1.09, 1.10]);
        assert_eq!(bars.close, vec![1.11, 1.12]);
        assert_eq!(bars.tick_volume, vec![120.0, 80.0]);
        assert_eq!(bars.spread, vec![12.0, 10.0]);
        assert_eq!(bars.real_volume, vec![0.0, 0.0]);
        assert!(file.gaps.is_empty());
        bars.validate().unwrap();
    }

    #[test]
    fn reads_an_mt5_terminal_export_with_separate_date_and_time() {
        let text = "\u{feff}<DATE>\t<TIME>\t<OPEN>\t<HIGH>\t<LOW>\t<CLOSE>\t<TICKVOL>\t<VOL>\t<SPREAD>\r\n\
                    2024.01.01\t00:00:00\t1.10\t1.12\t1.09\t1.11\t120\t0\t12\r\n\
                    2024.01.01\t00:15\t1.11\t1.13\t1.10\t1.12\t80\t5\t10\r\n\r\n";
        let bars = read("GBPUSD_M15.txt", text).unwrap().bars;
        assert_eq!(bars.symbol, "GBPUSD_M15");
        assert_eq!(bars.time, vec![T0, T0 + 900]);
        assert_eq!(bars.spread, vec![12.0, 10.0]);
        assert_eq!(bars.real_volume, vec![0.0, 5.0]);
        assert_eq!(bars.tick_volume, vec![120.0, 80.0]);
    }

    #[test]
    fn header_order_and_date_styles_are_followed() {
        let text = "Close,Open,Time,Low,High\n\
                    1.11,1.10,2024-01-01 00:00,1.09,1.12\n\
                    1.12,1.11,2024.01.01T00:15:00,1.10,1.13\n\
                    1.12,1.11,2024/01/01 00:30,1.10,1.13\n";
        let bars = read("x.csv", text).unwrap().bars;
        assert_eq!(bars.time, vec![T0, T0 + 900, T0 + 1800]);
        assert_eq!(bars.open, vec![1.10, 1.11, 1.11]);
        assert_eq!(bars.close, vec![1.11, 1.12, 1.12]);
        assert_eq!(bars.tick_volume, vec![0.0; 3]);
        // Nine headerless fields: separate date and clock.
        let bars = read("y.csv", "2024-01-02,00:00,1,1,1,1,0,0,0\n")
            .unwrap()
            .bars;
        assert_eq!(bars.time, vec![T0 + DAY]);
        // A date alone is midnight (daily bars).
        let bars = read("d.csv", "time,open,high,low,close\n2024-01-02,1,1,1,1\n")
            .unwrap()
            .bars;
        assert_eq!(bars.time, vec![T0 + DAY]);
    }

    #[test]
    fn gaps_are_reported_with_the_missing_bars() {
        let day = |d: i64, minutes: i64| T0 + d * DAY + minutes * 60;
        // Friday 2024-01-05 23:30 and 23:45, then Monday 00:00, 00:15, 00:30, then 01:30: the
        // weekend misses the 2 x 96 bars of Saturday and Sunday.
        let times = [
            day(4, 1410),
            day(4, 1425),
            day(7, 0),
            day(7, 15),
            day(7, 30),
            day(7, 90),
        ];
        let text: String = times
            .iter()
            .map(|t| format!("{t},1,1,1,1,0,0,0\n"))
            .collect();
        let gaps = read("g.csv", &text).unwrap().gaps;
        assert_eq!(
            gaps,
            vec![
                Gap {
                    line: 3,
                    from: times[1],
                    to: times[2],
                    missing: 2 * 96
                },
                Gap {
                    line: 6,
                    from: times[4],
                    to: times[5],
                    missing: 3
                }
            ]
        );
    }

    /// The error of reading `body` after a valid first bar.
    fn second_line_error(body: &str) -> DataError {
        read(
            "bad.csv",
            &format!("time,open,high,low,close,tick_volume,spread,real_volume\n{T0},1,1,1,1,0,0,0\n{body}\n"),
        )
        .unwrap_err()
    }

    #[test]
    fn impossible_bars_name_line_column_and_value() {
        let t = T0 + 900;
        for (body, column, field) in [
            (format!("{t},1.0,1.1,1.2,1.0,0,0,0"), 3, "high"),
            (format!("{t},1.3,1.2,1.0,1.1,0,0,0"), 2, "open"),
            (format!("{t},1.1,1.2,1.0,0.9,0,0,0"), 5, "close"),
            (format!("{t},0,1.2,1.0,1.1,0,0,0"), 2, "open"),
            (format!("{t},1.1,1.2,-1,1.1,0,0,0"), 4, "low"),
            (format!("{t},1.1,inf,1.0,1.1,0,0,0"), 3, "high"),
            (format!("{t},1.1,1.2,1.0,1.1,-1,0,0"), 6, "tick_volume"),
            (format!("{t},1.1,1.2,1.0,1.1,1,-2,0"), 7, "spread"),
            (format!("{t},1.1,1.2,1.0,1.1,1,2,NaN"), 8, "real_volume"),
        ] {
            let err = second_line_error(&body);
            match &err {
                DataError::OhlcvValue {
                    line: 3,
                    column: c,
                    field: f,
                    ..
                } if *c == column && *f == field => {}
                _ => panic!("{body}: {err}"),
            }
            assert!(err.to_string().contains("bad.csv: line 3"), "{err}");
        }
        let err = second_line_error(&format!("{t},1.3,1.2,1.0,1.1,0,0,0"));
        assert!(
            err.to_string().contains("1.3 is outside [low, high]"),
            "{err}"
        );
    }

    #[test]
    fn malformed_fields_name_line_column_and_text() {
        let t = T0 + 900;
        let err = second_line_error(&format!("{t},1.1,1.2x,1.0,1.1,0,0,0"));
        assert!(
            matches!(
                &err,
                DataError::OhlcvSyntax { line: 3, column: 3, field: "high", text, .. } if text == "1.2x"
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("\"1.2x\" is not a number"),
            "{err}"
        );
        for time in [
            "2024-02-30 00:00",
            "2024-01-01 24:00",
            "yesterday",
            "2024-1-1x",
        ] {
            let err = second_line_error(&format!("{time},1,1,1,1,0,0,0"));
            assert!(
                matches!(
                    err,
                    DataError::OhlcvSyntax {
                        line: 3,
                        column: 1,
                        field: "time",
                        ..
                    }
                ),
                "{time}: {err}"
            );
        }
        assert!(matches!(
            second_line_error(&format!("{t},1,1,1,1,0,0")),
            DataError::OhlcvFieldCount {
                line: 3,
                expected: 8,
                found: 7,
                ..
            }
        ));
    }

    #[test]
    fn encodings_separators_and_non_files_get_a_hint() {
        let err = read("semi.csv", "time;open;high;low;close\n1704067200;1;1;1;1\n").unwrap_err();
        assert!(err.to_string().contains("separated by ';'"), "{err}");
        let scratch = Scratch::new();
        let utf16: Vec<u8> = [0xFF, 0xFE]
            .into_iter()
            .chain("time,open\n".encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        let err = Bars::read(&scratch.write("wide.csv", &utf16)).unwrap_err();
        assert!(err.to_string().contains("UTF-16"), "{err}");
        if Path::new("/dev/zero").exists() {
            let err = Bars::read(Path::new("/dev/zero")).unwrap_err();
            assert!(err.to_string().contains("not a regular file"), "{err}");
        }
    }

    #[test]
    fn a_long_field_is_quoted_in_part() {
        let long = "9".repeat(3_000);
        let err = second_line_error(&format!("{T0}x{long},1,1,1,1,0,0,0"));
        let text = err.to_string();
        assert!(
            text.contains("…") && text.contains(" (3011 characters)") && text.len() < 600,
            "{text}"
        );
    }

    #[test]
    fn a_line_longer_than_a_row_is_refused_unread() {
        // A 50 MB one-line file was read whole and echoed into the error.
        let long = "9".repeat(100_000);
        let err = second_line_error(&format!("{T0}x{long},1,1,1,1,0,0,0"));
        let text = err.to_string();
        assert!(
            matches!(err, DataError::OhlcvLimit { line: 3, .. })
                && text.contains("longer than 4096 bytes")
                && text.len() < 300,
            "{text}"
        );
    }

    #[test]
    fn times_outside_the_years_of_dates_are_refused() {
        // Milliseconds, the second after 9999, i64's extremes.
        for t in [
            "1704067200000",
            "253402300800",
            "-9223372036854775808",
            "9223372036854775807",
        ] {
            let err = second_line_error(&format!("{t},1,1,1,1,0,0,0"));
            assert!(
                matches!(
                    &err,
                    DataError::OhlcvSyntax {
                        line: 3,
                        field: "time",
                        ..
                    }
                ),
                "{err}"
            );
            assert!(err.to_string().contains("not milliseconds"), "{err}");
        }
    }

    #[test]
    fn time_must_increase() {
        for t in [T0, T0 - 900] {
            let err = second_line_error(&format!("{t},1,1,1,1,0,0,0"));
            assert!(
                matches!(
                    err,
                    DataError::OhlcvTimeOrder {
                        line: 3,
                        previous_line: 2,
                        previous: T0,
                        ..
                    }
                ),
                "{err}"
            );
            assert!(
                err.to_string()
                    .contains("is not after line 2's 2024-01-01 00:00:00"),
                "{err}"
            );
        }
    }

    #[test]
    fn bad_headers_and_empty_files_are_refused() {
        for (text, needle) in [
            (
                "time,open,high,low,close,volume\n",
                "unknown name \"volume\"",
            ),
            (
                "time,open,high,low,close,open\n",
                "\"open\" repeats column 2",
            ),
            ("time,open,high,low\n", "has no close column"),
            ("open,high,low,close\n", "has no time or date column"),
        ] {
            let err = read("h.csv", text).unwrap_err();
            assert!(
                matches!(err, DataError::OhlcvHeader { line: 1, .. })
                    && err.to_string().contains(needle),
                "{text}: {err}"
            );
        }
        for text in ["", "\n\n", "time,open,high,low,close\n"] {
            assert!(
                matches!(read("e.csv", text), Err(DataError::OhlcvEmpty { .. })),
                "{text:?}"
            );
        }
        assert!(matches!(
            read("f.csv", "1,2,3\n"),
            Err(DataError::OhlcvFieldCount {
                line: 1,
                expected: 8,
                found: 3,
                ..
            })
        ));
    }

    #[test]
    fn read_all_reads_one_symbol_per_file() {
        let scratch = Scratch::new();
        let a = scratch.write("A.csv", format!("{T0},1,1,1,1,0,0,0\n").as_bytes());
        let b = scratch.write("B.csv", format!("{T0},2,2,2,2,0,0,0\n").as_bytes());
        let files = Bars::read_all([&a, &b]).unwrap();
        let symbols: Vec<_> = files.iter().map(|f| f.bars.symbol.as_str()).collect();
        assert_eq!(symbols, ["A", "B"]);
        assert!(Bars::read_all([a, scratch.dir().join("absent.csv")]).is_err());
    }

    #[test]
    fn validate_checks_columns_bars_and_order() {
        let mut bars = Bars::empty("S".into());
        bars.push(T0, [1.0, 1.2, 0.9, 1.1, 5.0, 1.0, 0.0]);
        bars.push(T0 + 60, [1.1, 1.2, 1.0, 1.0, 5.0, 1.0, 0.0]);
        bars.validate().unwrap();
        let mut short = bars.clone();
        short.spread.pop();
        assert!(matches!(
            short.validate(),
            Err(DataError::BarColumns {
                field: "spread",
                len: 1,
                expected: 2,
                ..
            })
        ));
        let mut low = bars.clone();
        low.low[1] = 1.05;
        assert!(matches!(
            low.validate(),
            Err(DataError::BarInvalid {
                bar: 1,
                field: "close",
                ..
            })
        ));
        let mut late = bars.clone();
        late.time[1] = T0;
        assert!(matches!(
            late.validate(),
            Err(DataError::BarInvalid {
                bar: 1,
                field: "time",
                ..
            })
        ));
    }
}
