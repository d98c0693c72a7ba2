//! The test kit.
