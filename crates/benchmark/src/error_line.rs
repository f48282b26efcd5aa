//! Errors as the benchmark prints them: one line, however deep the chain of causes.

/// The error and its causes on one line, leaving out a cause that its parent's message
/// already quotes (library errors often print their source themselves). A message of several
/// lines (the TOML parser's: the problem, then where) has its lines joined.
pub fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = joined_lines(&cause.to_string());
        if !parts
            .last()
            .is_some_and(|previous| previous.contains(&text))
        {
            parts.push(text);
        }
    }
    parts.join(": ")
}

/// `text`'s non-empty lines, trimmed, joined by single spaces.
pub fn joined_lines(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_join_on_one_line_with_their_own_lines_joined() {
        let inner =
            anyhow::anyhow!("invalid type: integer `5`, expected path string\nin `config`\n");
        let err = inner.context("invalid parameters of workload `sgld`");
        assert_eq!(
            one_line(&err),
            "invalid parameters of workload `sgld`: invalid type: integer `5`, expected path \
             string in `config`"
        );
    }

    #[test]
    fn a_cause_its_parent_quotes_is_left_out() {
        let err = anyhow::anyhow!("disk full").context("writing report.json: disk full");
        assert_eq!(one_line(&err), "writing report.json: disk full");
    }
}
