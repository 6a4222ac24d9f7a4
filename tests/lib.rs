//! Shared harness for the end-to-end tests (grows with the Harvest issue).
