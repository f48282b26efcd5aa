//! Values as error messages show them: whatever their length, in a line a reader can take in.

use std::borrow::Cow;

/// The most characters of a value a message shows whole: more than any name or setting line
/// Quench takes, far fewer than a hostile one (a gate named by 100,000 characters, a TOML line
/// of 200 kB) that would bury the message.
pub const SHOWN_CHARS: usize = 200;

/// `text` itself when it has at most [`SHOWN_CHARS`] characters; else its first and last
/// hundred characters around `…`, with its length: `hhh…hhh (100000 characters)`. Control
/// characters (a NUL, an escape sequence) are shown escaped (`\u{0}`, `\u{1b}`), never sent
/// to the reader's terminal as they are.
pub fn excerpt(text: &str) -> Cow<'_, str> {
    let count = text.chars().count();
    let shown = if count <= SHOWN_CHARS {
        Cow::Borrowed(text)
    } else {
        let half = SHOWN_CHARS / 2;
        let head: String = text.chars().take(half).collect();
        let tail: String = text.chars().skip(count - half).collect();
        Cow::Owned(format!("{head}…{tail} ({count} characters)"))
    };
    if !shown.chars().any(char::is_control) {
        return shown;
    }
    Cow::Owned(
        shown
            .chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_shown_whole_and_long_text_by_its_ends() {
        assert_eq!(excerpt("ry"), "ry");
        let exact = "é".repeat(SHOWN_CHARS);
        assert_eq!(excerpt(&exact), exact.as_str());
        let long = format!("a{}z", "é".repeat(100_000));
        let shown = excerpt(&long);
        assert!(shown.starts_with('a') && shown.contains("…"), "{shown}");
        assert!(shown.ends_with("z (100002 characters)"), "{shown}");
        assert_eq!(
            shown.chars().count(),
            SHOWN_CHARS + 1 + " (100002 characters)".len()
        );
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(excerpt("a\0b\x1b[31m"), "a\\u{0}b\\u{1b}[31m");
        assert_eq!(excerpt("tab\there"), "tab\\there");
    }
}
