//! JSON documents read strictly: a key given twice in an object is an error, where
//! `serde_json::Value` keeps the last one. The circuits' and the Lindblad jobs' JSON interfaces
//! (and every other reader of JSON documents) parse through [`parse_strict`].

use serde_json::Value;

/// `text` as a JSON value, refusing an object that gives a key twice (the error names it, at
/// its line and column, as serde_json's errors do). A byte-order mark at the start, which
/// Windows editors write and RFC 8259 lets a parser ignore, is skipped.
///
/// # Errors
/// serde_json's syntax errors, and `key "k" given twice`.
pub fn parse_strict(text: &str) -> Result<Value, serde_json::Error> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    serde_json::from_str::<Strict>(text).map(|Strict(value)| value)
}

/// A JSON value whose objects refuse a key given twice: `serde_json::Value` keeps the last
/// one silently, so `{"qubits": 2, "qubits": 3}` would simulate on 3 qubits without a word.
/// Deserialize it where a `Value` would be ([`parse_strict`] for a whole document).
pub struct Strict(pub Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Strict;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Strict, E> {
        Ok(Strict(Value::Null))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Strict, E> {
        Ok(Strict(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Strict, E> {
        Ok(Strict(Value::from(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Strict, E> {
        Ok(Strict(Value::from(v)))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Strict, E> {
        // JSON numbers are finite, so `from` never maps one to null here.
        Ok(Strict(Value::from(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Strict, E> {
        Ok(Strict(Value::from(v)))
    }

    fn visit_string<E>(self, v: String) -> Result<Strict, E> {
        Ok(Strict(Value::String(v)))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Strict(Value::Array(items)))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
        let mut fields = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if fields.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("key {key:?} given twice")));
            }
            let Strict(value) = map.next_value()?;
            fields.insert(key, value);
        }
        Ok(Strict(Value::Object(fields)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_given_twice_is_refused_at_any_depth() {
        let err = parse_strict(r#"{"dim": 2, "dim": 3}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains(r#"key "dim" given twice"#), "{err}");
        let nested = parse_strict(r#"{"a": [{"b": 1, "b": 1}]}"#)
            .unwrap_err()
            .to_string();
        assert!(nested.contains(r#"key "b" given twice"#), "{nested}");
    }

    #[test]
    fn a_leading_byte_order_mark_is_skipped_and_nowhere_else() {
        assert_eq!(
            parse_strict("\u{feff}{\"dim\": 2}").unwrap(),
            serde_json::json!({"dim": 2})
        );
        assert!(parse_strict("{\"dim\": 2}\u{feff}").is_err());
    }

    #[test]
    fn every_json_value_reads_as_serde_json_reads_it() {
        let text = r#"{"n": null, "t": true, "i": -3, "u": 18446744073709551615, "f": 0.5,
                       "s": "x", "a": [1, [2]], "o": {"k": {}}}"#;
        assert_eq!(
            parse_strict(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        assert!(parse_strict("{").is_err());
    }
}
