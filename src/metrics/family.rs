//! What a Prometheus metric family is ([`Family`]) and how one is rendered: text exposition format
//! 0.0.4, read from the `metrics()` JSON.
//!
//! A family names the JSON field(s) it reads ([`Sample::path`], relative to its [`Scope`]'s
//! object) instead of carrying a getter: the value Prometheus shows is then, by construction, the
//! value `metrics()` shows, and a test can check the same names against index.d.ts. The JSON is
//! built once per scrape (`serde_json::to_value` of the snapshot); scrapes are rare and off the
//! connection path, so the counters stay plain relaxed atomics and no metrics library is needed.

use serde_json::Value;
use std::fmt::Write as _;

/// The Prometheus `# TYPE` of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (until the process restarts).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Quantiles and a `_count`.
    Summary,
}

impl Kind {
    /// The `# TYPE` word.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Summary => "summary",
        }
    }
}

/// Which objects of the `metrics()` JSON a family reads, and the labels each one gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The top-level object; no labels.
    Proxy,
    /// Each of `listeners[]`, labelled `listener` (its `address`).
    Listener,
    /// Each of `routeMetrics[]`, labelled `route` and `group` (its `route` and `metricsGroup`).
    Route,
    /// The `cluster` object, when the cluster tier is configured (else the family is left out).
    Cluster,
    /// The `xdp` object, while the XDP filter is attached (else the family is left out).
    Xdp,
}

impl Scope {
    /// The JSON field that holds this scope's object(s) (`None`: the top-level object).
    pub const fn field(self) -> Option<&'static str> {
        match self {
            Scope::Proxy => None,
            Scope::Listener => Some("listeners"),
            Scope::Route => Some("routeMetrics"),
            Scope::Cluster => Some("cluster"),
            Scope::Xdp => Some("xdp"),
        }
    }

    /// Each object of this scope in `root`, with its label set (`k="v"` pairs, comma-joined).
    fn instances(self, root: &Value) -> Vec<(String, &Value)> {
        let label = |o: &Value, names: &[(&str, &str)]| {
            let pairs = names.iter().map(|(label, field)| {
                let v = o.get(*field).and_then(Value::as_str).unwrap_or_default();
                format!("{label}=\"{}\"", escape(v))
            });
            pairs.collect::<Vec<_>>().join(",")
        };
        let each = |names: &'static [(&'static str, &'static str)]| {
            let items = root.get(self.field().unwrap_or_default());
            let items = items.and_then(Value::as_array).map(Vec::as_slice);
            (items.unwrap_or_default().iter())
                .map(|o| (label(o, names), o))
                .collect()
        };
        match self {
            Scope::Proxy => vec![(String::new(), root)],
            Scope::Listener => each(&[("listener", "address")]),
            Scope::Route => each(&[("route", "route"), ("group", "metricsGroup")]),
            Scope::Cluster | Scope::Xdp => {
                let o = root.get(self.field().unwrap_or_default());
                o.filter(|o| o.is_object())
                    .map(|o| (String::new(), o))
                    .into_iter()
                    .collect()
            }
        }
    }
}

/// How a [`Sample`] turns its JSON value into sample values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// The number (or boolean: 1 / 0) as it is; `null` gives no sample.
    Value,
    /// A number of milliseconds, shown in seconds.
    MsAsSeconds,
    /// An object of numbers: one sample per key, the key as the value of this label.
    Each(&'static str),
}

/// One line (or, with [`Read::Each`], one line per key) of a family for each object of its scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Appended to the family's name (`_count` of a summary); usually empty.
    pub suffix: &'static str,
    /// Fixed labels (`action="pass"`), after the scope's; usually empty.
    pub labels: &'static str,
    /// The JSON field read, dot-separated, relative to the scope's object (`upstream.inFlight`).
    pub path: &'static str,
    /// How the value is read.
    pub read: Read,
}

/// The number at `path`, as it is.
pub const fn field(path: &'static str) -> Sample {
    Sample {
        suffix: "",
        labels: "",
        path,
        read: Read::Value,
    }
}

/// The milliseconds at `path`, in seconds.
pub const fn ms_as_seconds(path: &'static str) -> Sample {
    Sample {
        read: Read::MsAsSeconds,
        ..field(path)
    }
}

/// One sample per key of the object at `path`, labelled `label="key"`.
pub const fn each(path: &'static str, label: &'static str) -> Sample {
    Sample {
        read: Read::Each(label),
        ..field(path)
    }
}

impl Sample {
    /// The same sample with fixed `labels` (`k="v"` pairs, comma-joined).
    pub const fn labelled(self, labels: &'static str) -> Sample {
        Sample { labels, ..self }
    }

    /// The same sample with `suffix` appended to the family's name.
    pub const fn suffixed(self, suffix: &'static str) -> Sample {
        Sample { suffix, ..self }
    }

    /// The JSON value at [`Self::path`] under `o`.
    pub fn lookup<'a>(&self, o: &'a Value) -> Option<&'a Value> {
        self.path.split('.').try_fold(o, |o, key| o.get(key))
    }

    /// Writes this sample's lines for the object `o` labelled `scope_labels`.
    fn write(&self, family: &str, scope_labels: &str, o: &Value, out: &mut String) {
        let name = format!("rampart_{family}{}", self.suffix);
        let labels = |extra: &str| {
            let all = [scope_labels, self.labels, extra];
            let all: Vec<&str> = all.into_iter().filter(|l| !l.is_empty()).collect();
            if all.is_empty() {
                String::new()
            } else {
                format!("{{{}}}", all.join(","))
            }
        };
        let Some(v) = self.lookup(o) else { return };
        match self.read {
            Read::Value => {
                if let Some(n) = number(v, 1.0) {
                    let _ = writeln!(out, "{name}{} {n}", labels(""));
                }
            }
            Read::MsAsSeconds => {
                if let Some(n) = number(v, 1000.0) {
                    let _ = writeln!(out, "{name}{} {n}", labels(""));
                }
            }
            Read::Each(label) => {
                for (k, v) in v.as_object().into_iter().flatten() {
                    if let Some(n) = number(v, 1.0) {
                        let extra = format!("{label}=\"{}\"", escape(k));
                        let _ = writeln!(out, "{name}{} {n}", labels(&extra));
                    }
                }
            }
        }
    }
}

/// One declared Prometheus metric family: `rampart_{name}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// The name after `rampart_` (`accepted_connections_total`).
    pub name: &'static str,
    /// Counter, gauge or summary.
    pub kind: Kind,
    /// The `# HELP` text (one line).
    pub help: &'static str,
    /// The objects it reads and the labels they give.
    pub scope: Scope,
    /// What it reads from each object.
    pub samples: &'static [Sample],
}

impl Family {
    /// A counter.
    pub const fn counter(
        name: &'static str,
        help: &'static str,
        scope: Scope,
        samples: &'static [Sample],
    ) -> Family {
        Family {
            name,
            kind: Kind::Counter,
            help,
            scope,
            samples,
        }
    }

    /// A gauge.
    pub const fn gauge(
        name: &'static str,
        help: &'static str,
        scope: Scope,
        samples: &'static [Sample],
    ) -> Family {
        Family {
            kind: Kind::Gauge,
            ..Family::counter(name, help, scope, samples)
        }
    }

    /// A summary (its samples give the quantiles and `_count`).
    pub const fn summary(
        name: &'static str,
        help: &'static str,
        scope: Scope,
        samples: &'static [Sample],
    ) -> Family {
        Family {
            kind: Kind::Summary,
            ..Family::counter(name, help, scope, samples)
        }
    }

    /// Writes `# HELP`, `# TYPE` and every sample of this family in `root` (nothing when its
    /// scope is absent: no cluster tier, no XDP filter attached).
    pub fn write(&self, root: &Value, out: &mut String) {
        let objects = self.scope.instances(root);
        if objects.is_empty() && matches!(self.scope, Scope::Cluster | Scope::Xdp) {
            return;
        }
        let (name, help, kind) = (self.name, self.help, self.kind.as_str());
        let _ = writeln!(
            out,
            "# HELP rampart_{name} {help}\n# TYPE rampart_{name} {kind}"
        );
        for (labels, o) in &objects {
            for s in self.samples {
                s.write(name, labels, o, out);
            }
        }
    }
}

/// A JSON number (or boolean, as 1 / 0) divided by `div`, as Prometheus shows it: integers
/// exactly, other values as Rust prints an `f64`. `None` for `null` and anything else.
fn number(v: &Value, div: f64) -> Option<String> {
    if let Some(b) = v.as_bool() {
        return Some(u8::from(b).to_string());
    }
    if div == 1.0 {
        if let Some(n) = v.as_u64() {
            return Some(n.to_string());
        }
        if let Some(n) = v.as_i64() {
            return Some(n.to_string());
        }
    }
    v.as_f64().map(|n| (n / div).to_string())
}

/// A label value with `\\`, `"` and newlines escaped (format 0.0.4).
pub fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The text exposition of `families` read from `root` (the `metrics()` JSON), in their order.
pub fn render(families: &[Family], root: &Value) -> String {
    let mut out = String::with_capacity(8192);
    for f in families {
        f.write(root, &mut out);
    }
    out
}
