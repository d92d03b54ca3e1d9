//! The integration tests, one binary (`cargo test --test it`; a module per former
//! `tests/<name>.rs`). One binary links the crate once instead of once per file, and the
//! helpers in [`common`] (the parity tolerance among them) are written once.
//!
//! Three test files stay separate binaries, because each installs the counting
//! `#[global_allocator]` of `tests/support/counting.rs` (one definition, included with
//! `#[path]`), which must see only its own binary's allocations: `tests/allocations.rs`,
//! `tests/batch_builder.rs` and `tests/parallel.rs`. A new integration test goes here as a
//! module (Cargo.toml has `autotests = false`, so a stray `tests/*.rs` would not be built:
//! `layout::every_test_file_is_built` fails on one).

mod common;

mod ablation;
mod ablation_estimators;
mod api_paths;
#[cfg(feature = "cli")]
mod cli;
mod completion_credit;
mod config_grammar;
mod detectors;
mod detectors_real_data;
mod diagnostics;
mod diagnostics_estimators;
mod diagnostics_paper;
mod difflib_reference;
mod discover;
mod fast_path_equivalence;
mod finite_outputs;
mod fuzz_regressions;
mod gigpo_properties;
mod gigpo_reference;
mod masked_writes;
mod numeric_edges;
mod parity_beacon_official;
mod parity_gigpo;
mod parity_mt_grpo;
mod parity_step_reinforce;
mod parity_tree_grpo;
mod parity_verl;
mod properties_baselines;
mod properties_beacon;
mod properties_turn_level;
mod record;
mod row_scores;
mod row_sums;
mod step_rows;
mod trainer_dtypes;
mod turn_gae;
mod turn_level_bias;

mod layout {
    use std::collections::BTreeSet;
    use std::fs;
    use std::path::Path;

    fn rust_files(dir: &Path) -> BTreeSet<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".rs"))
            .collect()
    }

    /// With `autotests = false`, Cargo builds only the declared targets: every `tests/*.rs`
    /// must be one of the three declared binaries, each of which includes the shared counting
    /// allocator, and every `tests/it/*.rs` a declared module.
    #[test]
    fn every_test_file_is_built() {
        let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
        let top = rust_files(&tests);
        let declared: BTreeSet<String> = ["allocations.rs", "batch_builder.rs", "parallel.rs"]
            .map(String::from)
            .into();
        assert_eq!(
            top, declared,
            "a tests/*.rs file that Cargo.toml does not declare: move it to tests/it/"
        );
        // The counting allocator, and the random source the tests and benches share.
        assert_eq!(
            rust_files(&tests.join("support")),
            BTreeSet::from([
                "counting.rs".to_string(),
                "splitmix64.rs".to_string(),
                "step_order.rs".to_string()
            ])
        );
        for binary in &declared {
            let text = fs::read_to_string(tests.join(binary)).unwrap();
            assert!(
                text.contains("#[path = \"support/counting.rs\"]\nmod counting;"),
                "tests/{binary} does not include the shared counting allocator"
            );
        }
        let main = fs::read_to_string(tests.join("it/main.rs")).unwrap();
        for file in rust_files(&tests.join("it")) {
            let module = file.trim_end_matches(".rs");
            if module != "main" {
                assert!(
                    main.contains(&format!("\nmod {module};\n")),
                    "tests/it/{file} is not a module of tests/it/main.rs"
                );
            }
        }
    }
}
mod parallel_outcome;
mod parallel_whiten;
