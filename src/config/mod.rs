//! Configuration: parsing and validation of the JSON the JS layer hands over, into plain Rust types.
//!
//! The JS side serialises the user's config with `JSON.stringify` and a replacer that keeps what
//! JSON would lose: a non-finite number becomes `{"$nonFinite": "NaN" | "Infinity" | "-Infinity"}`
//! and a `Buffer` becomes `{"$buffer": "<latin1 text>"}`. Every validator walks a
//! [`serde_json::Value`], records every problem as a [`ConfigIssue`] with its path, and never stops
//! at the first one, so a [`ConfigError`] names every offending field at once.

pub mod cluster;
pub mod error;
pub(crate) mod mtls;
pub mod protection;
pub mod proxy;
pub(crate) mod requests;
pub(crate) mod socket;
pub(crate) mod tls;
pub mod update;
pub(crate) mod value;

pub use error::{ConfigError, ConfigIssue};
