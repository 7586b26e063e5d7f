//! The fire path's simulation in CI: 10,000 seeds of the protocol as built keep every
//! invariant, and each of the known holes, re-introduced on its own, is found within them.

use etcron_sim::{first_failure, Holes, Params};

const SEEDS: u64 = 10_000;

#[test]
fn the_protocol_keeps_every_invariant_over_the_ci_seeds() {
    if let Some((seed, violation, trace)) = first_failure(0..SEEDS, &Params::default()) {
        panic!("seed {seed}: {violation}\n{}", trace.join("\n"));
    }
}

#[test]
fn each_known_hole_is_found_within_the_ci_seeds() {
    for name in Holes::NAMES {
        let params = Params { holes: Holes::named(name).unwrap_or_default(), ..Params::default() };
        let found = first_failure(0..SEEDS, &params);
        assert!(found.is_some(), "hole {name} was not found in {SEEDS} seeds");
        if let Some((seed, violation, _)) = found {
            println!("{name}: seed {seed}: {violation}");
        }
    }
}
