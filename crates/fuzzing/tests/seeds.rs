//! Replays the committed seed corpus (`seeds/<target>/*`) through each fuzz target's
//! body: the crashes libFuzzer found stay fixed, and the valid examples keep working,
//! on stable, in `cargo test --workspace`.

use std::path::Path;

#[test]
fn every_seed_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    for (name, target) in fuzzing::TARGETS {
        let dir = root.join(name);
        let mut seeds: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        seeds.sort();
        assert!(!seeds.is_empty(), "no seeds for {name}");
        for seed in seeds {
            let input = std::fs::read(&seed).unwrap_or_else(|e| panic!("{}: {e}", seed.display()));
            eprintln!("{name}: {}", seed.display());
            target(&input);
        }
    }
}
