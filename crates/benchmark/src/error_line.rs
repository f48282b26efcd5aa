//! Errors as the benchmark prints them: one line, however deep the chain of causes.

/// The error and its causes on one line, leaving out a cause that its parent's message
/// already quotes (library errors often print their source themselves).
pub fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if !parts
            .last()
            .is_some_and(|previous| previous.contains(&text))
        {
            parts.push(text);
        }
    }
    parts.join(": ")
}
