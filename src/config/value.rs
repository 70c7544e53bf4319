//! Typed readers over [`serde_json::Value`] that record a [`ConfigIssue`](super::ConfigIssue) on
//! any mismatch. Each returns `None` when the field is absent *or* invalid; check `Issues::len`
//! to tell the two apart.

use super::error::Issues;
use serde_json::{Map, Value};

/// Largest integer a JS number holds exactly (2^53 − 1); durations and counts above it are refused.
pub(crate) const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;
/// Longest duration accepted anywhere (`blockIp`'s `ttlMs`, `penaltyBox.durationMs`, ...), ms:
/// [`MAX_SAFE_INTEGER`].
pub(crate) const MAX_DURATION_MS: u64 = 9_007_199_254_740_991;

/// Deepest nesting of arrays and objects accepted in a value handed over from JS (a
/// `ProxyConfig`, an `updateConfig` argument, `blockIp` / `unblockIp` opts, a `resolveConnection`
/// route): the value itself is level 1, so `{"a": [{}]}` nests 3 levels. No valid config nests
/// more than about 8; the bound keeps every walk over a value (here, serde's parser, the JS
/// encoder) far from the stack's end. index.js cuts what is deeper at level 65, so any depth
/// arrives here and is refused with its path.
pub(crate) const MAX_DEPTH: usize = 64;

/// Why [`parse_bounded`] refused a text.
#[derive(Debug)]
pub(crate) enum ParseError {
    /// Not JSON (or nested past serde's own limit of 128 levels).
    Json(serde_json::Error),
    /// Valid JSON nested deeper than [`MAX_DEPTH`]: one issue naming the first offending value.
    TooDeep(super::ConfigError),
}

/// Parses the JSON text of a value handed over from JS and checks that it nests at most
/// [`MAX_DEPTH`] levels. A deeper value is a [`ParseError::TooDeep`] whose one issue has the path
/// of the first value (in document order) past the bound, rooted at `root` (`""` for a config,
/// `"opts"`, `"route"`), e.g. `routes[0].upstreams[0].x[0][0]...: nested deeper than 64 levels`.
pub(crate) fn parse_bounded(text: &str, root: &str) -> Result<Value, ParseError> {
    let v: Value = serde_json::from_str(text).map_err(ParseError::Json)?;
    match too_deep(&v, MAX_DEPTH) {
        None => Ok(v),
        Some(path) => {
            let mut issues = Issues::default();
            let full = if root.is_empty() {
                path.strip_prefix('.').unwrap_or(&path).to_string()
            } else {
                format!("{root}{path}")
            };
            issues.push(full, format!("nested deeper than {MAX_DEPTH} levels"));
            Err(ParseError::TooDeep(super::ConfigError::new(issues.0)))
        }
    }
}

/// One step of the walk in [`too_deep`]: the children of a container still to visit.
enum Frame<'a> {
    Array(std::iter::Enumerate<std::slice::Iter<'a, Value>>),
    Object(serde_json::map::Iter<'a>),
}

/// The children of `v` to visit, when it is an array or object.
fn frame(v: &Value) -> Option<Frame<'_>> {
    match v {
        Value::Array(a) => Some(Frame::Array(a.iter().enumerate())),
        Value::Object(o) => Some(Frame::Object(o.iter())),
        _ => None,
    }
}

/// The path (`.key` / `[i]` segments from the root) of the first array or object at a level
/// past `max` (the root is level 1), or `None`. Iterative: any depth is walked in constant stack.
fn too_deep(v: &Value, max: usize) -> Option<String> {
    let mut stack: Vec<Frame<'_>> = Vec::new();
    let mut segs: Vec<String> = Vec::new();
    match frame(v) {
        None => return None,
        Some(_) if max == 0 => return Some(String::new()),
        Some(f) => stack.push(f),
    }
    while let Some(top) = stack.last_mut() {
        let (seg, child) = match top {
            Frame::Array(it) => match it.next() {
                Some((i, c)) => (format!("[{i}]"), c),
                None => {
                    stack.pop();
                    segs.pop();
                    continue;
                }
            },
            Frame::Object(it) => match it.next() {
                Some((k, c)) => (format!(".{k}"), c),
                None => {
                    stack.pop();
                    segs.pop();
                    continue;
                }
            },
        };
        if let Some(f) = frame(child) {
            segs.push(seg);
            if stack.len() >= max {
                return Some(segs.concat());
            }
            stack.push(f);
        }
    }
    None
}

/// Joins a parent path and a field name (`a.b` or just `b` at the root).
pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Joins a parent path and an array index (`a[3]`).
pub(crate) fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// Describes a value for an error message the way JS would print it.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(o) => {
            if let Some(Value::String(s)) = o.get("$nonFinite") {
                s.clone()
            } else if let Some(Value::String(s)) = o.get("$invalidString") {
                format!("{s:?} (a string with a lone UTF-16 surrogate, not valid Unicode)")
            } else if o.contains_key("$buffer") {
                "a Buffer".into()
            } else {
                "an object".into()
            }
        }
    }
}

/// Reads a number, including the `{"$nonFinite": ..}` encoding (returned as NaN/±inf so the
/// caller's range check reports it).
pub(crate) fn as_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Object(o) => match o.get("$nonFinite") {
            Some(Value::String(s)) if o.len() == 1 => match s.as_str() {
                "NaN" => Some(f64::NAN),
                "Infinity" => Some(f64::INFINITY),
                "-Infinity" => Some(f64::NEG_INFINITY),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// Requires `v` to be an object; records "must be an object" otherwise.
pub(crate) fn object<'a>(
    v: &'a Value,
    path: &str,
    issues: &mut Issues,
) -> Option<&'a Map<String, Value>> {
    match v {
        Value::Object(o)
            if !o.contains_key("$nonFinite")
                && !o.contains_key("$buffer")
                && !o.contains_key("$invalidString") =>
        {
            Some(o)
        }
        other => {
            issues.push(path, format!("must be an object, got {}", describe(other)));
            None
        }
    }
}

/// Records an issue for every key of `obj` not in `known` (catches typos such as `burts`).
pub(crate) fn reject_unknown(
    obj: &Map<String, Value>,
    known: &[&str],
    path: &str,
    issues: &mut Issues,
) {
    for k in obj.keys() {
        if !known.contains(&k.as_str()) {
            issues.push(
                join(path, k),
                format!("unknown field; expected one of: {}", known.join(", ")),
            );
        }
    }
}

/// Optional field: absent or `null` → `None` without an issue.
pub(crate) fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    match obj.get(key) {
        None | Some(Value::Null) => None,
        Some(v) => Some(v),
    }
}

/// A finite number within `[min, max]`; `integer` additionally requires a whole number.
pub(crate) fn number_in(
    v: &Value,
    path: &str,
    min: f64,
    max: f64,
    integer: bool,
    issues: &mut Issues,
) -> Option<f64> {
    let what = if integer {
        "an integer"
    } else {
        "a finite number"
    };
    match as_number(v) {
        Some(n) if n.is_finite() && n >= min && n <= max && (!integer || n.fract() == 0.0) => {
            Some(n)
        }
        _ => {
            issues.push(
                path,
                format!(
                    "must be {what} in [{}, {}], got {}",
                    fmt_num(min),
                    fmt_num(max),
                    describe(v)
                ),
            );
            None
        }
    }
}

/// A positive integer count (≥ `min`, ≤ 2^53 − 1).
pub(crate) fn count(v: &Value, path: &str, min: u64, issues: &mut Issues) -> Option<u64> {
    number_in(v, path, min as f64, MAX_SAFE_INTEGER, true, issues).map(|n| n as u64)
}

/// A duration in milliseconds: an integer in `[min, 2^53 − 1]`.
pub(crate) fn duration_ms(v: &Value, path: &str, min: u64, issues: &mut Issues) -> Option<u64> {
    number_in(v, path, min as f64, MAX_DURATION_MS as f64, true, issues).map(|n| n as u64)
}

/// A boolean.
pub(crate) fn boolean(v: &Value, path: &str, issues: &mut Issues) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        other => {
            issues.push(path, format!("must be a boolean, got {}", describe(other)));
            None
        }
    }
}

/// A string.
pub(crate) fn string<'a>(v: &'a Value, path: &str, issues: &mut Issues) -> Option<&'a str> {
    match v {
        Value::String(s) => Some(s),
        other => {
            issues.push(path, format!("must be a string, got {}", describe(other)));
            None
        }
    }
}

/// One of a fixed set of strings.
pub(crate) fn one_of<'a>(
    v: &'a Value,
    path: &str,
    allowed: &[&str],
    issues: &mut Issues,
) -> Option<&'a str> {
    match v {
        Value::String(s) if allowed.contains(&s.as_str()) => Some(s),
        other => {
            let quoted: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
            issues.push(
                path,
                format!(
                    "must be one of {}, got {}",
                    quoted.join(", "),
                    describe(other)
                ),
            );
            None
        }
    }
}

/// An array.
pub(crate) fn array<'a>(v: &'a Value, path: &str, issues: &mut Issues) -> Option<&'a Vec<Value>> {
    match v {
        Value::Array(a) => Some(a),
        other => {
            issues.push(path, format!("must be an array, got {}", describe(other)));
            None
        }
    }
}

/// The bytes of a Buffer field (DER data): a JS Buffer / Uint8Array arrives as
/// `{ "$buffer": latin1 }`. Anything else (a string included) is an issue at `path`.
pub(crate) fn buffer_bytes(v: &Value, path: &str, issues: &mut Issues) -> Option<Vec<u8>> {
    decoded_buffer(v, path, issues, "a Buffer")
}

/// PEM text given as a string or a Buffer (`{"$buffer": latin1 text}` after the JS replacer).
pub(crate) fn pem_bytes(v: &Value, path: &str, issues: &mut Issues) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        _ => decoded_buffer(v, path, issues, "a PEM string or Buffer"),
    }
}

/// The bytes of the Buffer `v` (`{ "$buffer": latin1 }`); anything else is an issue at `path`:
/// it must be `expected`.
fn decoded_buffer(v: &Value, path: &str, issues: &mut Issues, expected: &str) -> Option<Vec<u8>> {
    if let Value::Object(o) = v {
        if let Some(Value::String(text)) = o.get("$buffer") {
            let b = latin1_decode(text);
            if b.is_none() {
                issues.push(path, "Buffer could not be decoded");
            }
            return b;
        }
    }
    issues.push(path, format!("must be {expected}, got {}", describe(v)));
    None
}

fn fmt_num(n: f64) -> String {
    if n == MAX_SAFE_INTEGER {
        "2^53-1".into()
    } else {
        format!("{n}")
    }
}

/// Decodes the Buffer transport: the JS side writes each byte as one char U+0000..=U+00FF
/// (`buf.toString('latin1')`), so every char must fit a byte.
fn latin1_decode(s: &str) -> Option<Vec<u8>> {
    s.chars().map(|c| u8::try_from(u32::from(c)).ok()).collect()
}

/// An optional integer field in `[min, max]`.
pub(crate) fn int_field(
    o: &Map<String, Value>,
    path: &str,
    key: &str,
    (min, max): (f64, f64),
    issues: &mut Issues,
) -> Option<u64> {
    field(o, key)
        .and_then(|v| number_in(v, &join(path, key), min, max, true, issues).map(|n| n as u64))
}

/// A finite number > 0 and ≤ `max`, with the documented messages.
pub(crate) fn positive(v: &Value, path: &str, max: f64, issues: &mut Issues) -> Option<f64> {
    match as_number(v) {
        Some(n) if n.is_finite() && n > 0.0 => {
            if n <= max {
                Some(n)
            } else {
                issues.push(path, format!("must be at most {max}, got {}", describe(v)));
                None
            }
        }
        _ => {
            issues.push(
                path,
                format!("must be a finite number > 0, got {}", describe(v)),
            );
            None
        }
    }
}

/// A duration in ms (finite, > 0, ≤ 2^53−1, fractional allowed) → ns, rounded up.
pub(crate) fn duration_ns(v: &Value, path: &str, issues: &mut Issues) -> Option<u64> {
    positive(v, path, MAX_SAFE_INTEGER, issues).map(|ms| {
        let ns = (ms * crate::clock::NS_PER_MS as f64).ceil();
        if ns >= u64::MAX as f64 {
            u64::MAX
        } else {
            ns as u64
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_transport_round_trip() {
        assert_eq!(latin1_decode("h\u{ff}\u{0}").unwrap(), vec![b'h', 0xff, 0]);
        assert!(latin1_decode("\u{100}").is_none());
    }

    #[test]
    fn non_finite_is_reported_by_name() {
        let mut issues = Issues::default();
        let v: Value = serde_json::json!({"$nonFinite": "NaN"});
        assert_eq!(number_in(&v, "x", 1.0, 10.0, false, &mut issues), None);
        assert_eq!(
            issues.0[0].message,
            "must be a finite number in [1, 10], got NaN"
        );
    }

    #[test]
    fn depth_is_bounded_with_a_path() {
        let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        assert!(parse_bounded(&deep(MAX_DEPTH), "").is_ok());
        let Err(ParseError::TooDeep(e)) = parse_bounded(&deep(MAX_DEPTH + 1), "opts") else {
            panic!("expected TooDeep");
        };
        assert_eq!(e.issues.len(), 1);
        assert_eq!(e.issues[0].path, format!("opts{}", "[0]".repeat(MAX_DEPTH)));
        assert_eq!(e.issues[0].message, "nested deeper than 64 levels");
        let text = format!(
            r#"{{"routes":[{{"sni":"a","upstreams":[{{"x":{}}}]}}],"b":{{}}}}"#,
            deep(70)
        );
        let Err(ParseError::TooDeep(e)) = parse_bounded(&text, "") else {
            panic!("expected TooDeep");
        };
        assert_eq!(
            e.issues[0].path,
            format!("routes[0].upstreams[0].x{}", "[0]".repeat(MAX_DEPTH - 5))
        );
        // Scalars add no level; siblings after a shallow subtree are still walked.
        assert!(parse_bounded(r#"{"a":[1,{"b":[]}],"c":{"d":"e"}}"#, "").is_ok());
        assert!(matches!(parse_bounded("[", ""), Err(ParseError::Json(_))));
    }
}
