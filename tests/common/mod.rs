//! Helpers shared by the integration tests (each test crate uses what it needs).

pub mod corpus;
pub mod engine;
pub mod fixtures;
pub mod hello;
pub mod prereq;
pub mod race;
