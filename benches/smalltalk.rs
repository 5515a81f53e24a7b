//! The smalltalk check's CPU per message (`make bench ONLY=smalltalk`): the fastpath's type check
//! (`baton::text::classify_smalltalk`, the default vocabulary) over every labelled message of the
//! project's corpus and of the two sources it did not write (`data/smalltalk/`), smalltalk and
//! requests alike, and the word classes alone (`Lexicon::classify_by_classes`) for comparison: the
//! difference is what the learned reading costs (it runs only on messages the classes refuse). A
//! turn runs the check three or four times, so its cost per message is what a turn pays about four
//! times over. The vocabulary and the learned model are built on first use; that build is timed too.
//!
//! It prints the process CPU time (user plus system) per message, averaged over many passes, and
//! the wall time per message for comparison.

use std::time::Instant;

use baton::text::Lexicon;
use baton_tests::process::process_cpu;

/// `cargo bench -- smalltalk` runs this section (as `make bench ONLY=smalltalk`).
fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    if !(args.is_empty() || args.iter().any(|a| a == "smalltalk")) {
        return;
    }
    let quick = std::env::var_os("BATON_BENCH_QUICK").is_some();
    let messages = messages();
    // The first use builds the vocabulary and learns the model: timed apart.
    let (cpu, wall) = (process_cpu(), Instant::now());
    let lexicon = Lexicon::reference();
    let _ = lexicon.classify("hi");
    println!("smalltalk lexicon and learned model, built on first use:");
    println!(
        "  CPU {:>8.2} ms, wall {:>8.2} ms",
        (process_cpu() - cpu).as_secs_f64() * 1e3,
        wall.elapsed().as_secs_f64() * 1e3
    );
    let passes = if quick { 20 } else { 200 };
    println!("smalltalk check: {} messages x {passes} passes", messages.len());
    let check = |m: &str| lexicon.classify(m).is_some();
    let classes = |m: &str| lexicon.classify_by_classes(m).is_some();
    for (name, read) in [("whole check", &check as &dyn Fn(&str) -> bool), ("classes alone", &classes)] {
        let found = messages.iter().filter(|m| read(m)).count();
        let (cpu, wall) = (process_cpu(), Instant::now());
        let mut taken = 0;
        for _ in 0..passes {
            for m in &messages {
                taken += usize::from(std::hint::black_box(read(std::hint::black_box(m))));
            }
        }
        let (cpu, wall) = (process_cpu() - cpu, wall.elapsed());
        assert_eq!(taken, found * passes, "the check is deterministic");
        let n = (messages.len() * passes) as f64;
        println!("  {name}: {found} taken");
        println!("    CPU per message   {:>8.2} µs", cpu.as_secs_f64() * 1e6 / n);
        println!("    wall per message  {:>8.2} µs", wall.as_secs_f64() * 1e6 / n);
        println!("    per turn (4 runs) {:>8.2} µs CPU", 4.0 * cpu.as_secs_f64() * 1e6 / n);
    }
}
/// Every message of the labelled YAML files (their `- ` list items).
fn messages() -> Vec<String> {
    let files = [
        include_str!("../data/routing/smalltalk-corpus.yaml"),
        include_str!("../data/smalltalk/chatterbot.yaml"),
        include_str!("../data/smalltalk/rasa.yaml"),
    ];
    files
        .iter()
        .flat_map(|f| f.lines())
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(|m| m.trim_matches(|c| c == '"' || c == '\'').to_owned())
        .collect()
}
