//! Helpers shared by the integration tests (each test crate uses what it needs).

pub(crate) mod corpus;
pub(crate) mod engine;
pub(crate) mod fixtures;
pub(crate) mod hello;
pub(crate) mod prereq;
pub(crate) mod race;
