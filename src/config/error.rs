//! The error type of every config entry point (`new RampartProxy`, `updateConfig`).

use std::fmt;

/// One problem in a config: the path of the offending field (`routes[2].upstreams[0].port`,
/// `protection[1].protection.penaltyBox.durationMs`) and what is wrong, quoting the value and the
/// accepted range. Serializes as `{ path, message }`: an entry of a JS ConfigError's `errors`,
/// of an `'error'` event's `errors` and of `metrics().routeFailures[i].errors`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConfigIssue {
    /// JS-style path of the field, rooted at the object passed in.
    pub path: String,
    /// What is wrong and what is accepted.
    pub message: String,
}

/// Every problem found in one config; nothing was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// All issues, in document order.
    pub issues: Vec<ConfigIssue>,
}

impl ConfigError {
    /// Wraps a non-empty issue list.
    pub fn new(issues: Vec<ConfigIssue>) -> Self {
        ConfigError { issues }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid config ({} problem", self.issues.len())?;
        if self.issues.len() != 1 {
            write!(f, "s")?;
        }
        write!(f, "): ")?;
        for (i, issue) in self.issues.iter().enumerate() {
            if i > 0 {
                write!(f, "; ")?;
            }
            write!(f, "{}: {}", issue.path, issue.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Collects issues while a config is walked.
#[derive(Debug, Default)]
pub struct Issues(pub Vec<ConfigIssue>);

impl Issues {
    /// Records one problem.
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigIssue {
            path: path.into(),
            message: message.into(),
        });
    }
    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Number of issues so far (compare before/after a sub-parse to know whether it added any).
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// `Ok(value)` when no issue was recorded, else the error.
    pub fn finish<T>(self, value: T) -> Result<T, ConfigError> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ConfigError::new(self.0))
        }
    }
}
