//! `etcron-sim [--seeds N] [--from S] [--hole NAME] [--trace] [--threads T]`: runs the fire
//! path's simulation for seeds S..S+N (N may be written `1e6`) on T threads (the machine's
//! cores by default) and prints what it found: the lowest failing seed, or none; `--trace`
//! prints a failing seed's steps.

use std::process::ExitCode;
use std::time::Instant;

use etcron_sim::{first_failure, Holes, Params};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut seeds, mut from, mut trace) = (10_000u64, 0u64, false);
    let mut threads = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get) as u64;
    let mut params = Params::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_default();
        match flag.as_str() {
            "--seeds" => seeds = value().parse::<f64>().map_or(0, |v| v as u64),
            "--from" => from = value().parse().unwrap_or(0),
            "--trace" => trace = true,
            "--threads" => threads = value().parse().unwrap_or(1).max(1),
            "--hole" => {
                let name = value();
                let Some(h) = Holes::named(&name) else {
                    eprintln!("etcron-sim: --hole: one of {}", Holes::NAMES.join(", "));
                    return ExitCode::from(2);
                };
                params.holes = h;
            }
            other => {
                eprintln!("etcron-sim: unknown flag {other}");
                return ExitCode::from(2);
            }
        }
    }
    let started = Instant::now();
    // Each thread takes every T-th block of seeds; the lowest failing seed is reported.
    let found = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                let params = &params;
                s.spawn(move || {
                    let block = 1_000;
                    let mut start = from + k * block;
                    let mut lowest = None;
                    while start < from + seeds && lowest.is_none() {
                        let end = (start + block).min(from + seeds);
                        lowest = first_failure(start..end, params);
                        start += threads * block;
                    }
                    lowest
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok().flatten()).min_by_key(|f| f.0)
    });
    match found {
        Some((seed, violation, steps)) => {
            println!("seed {seed}: {violation} ({:.1}s)", started.elapsed().as_secs_f64());
            if trace {
                for s in steps {
                    println!("{s}");
                }
            }
            ExitCode::from(1)
        }
        None => {
            println!("{seeds} seeds from {from}: no violation ({:.1}s)", started.elapsed().as_secs_f64());
            ExitCode::SUCCESS
        }
    }
}
