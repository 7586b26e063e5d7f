//! Runs property tests (unit tests only): proptest with a fixed seed, so every run checks the
//! same cases and a failure reproduces, and without regression files.

use std::fmt::Debug;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseResult, TestRng, TestRunner};

/// Checks `test` against `cases` values drawn from `strategy`; panics with the shrunk
/// counterexample on failure.
pub(crate) fn check<S>(cases: u32, strategy: S, test: impl Fn(S::Value) -> TestCaseResult)
where
    S: Strategy,
    S::Value: Debug,
{
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{e}");
    }
}
