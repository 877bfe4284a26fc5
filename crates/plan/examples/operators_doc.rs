//! Prints `docs/operators.md`, the operator reference generated from the registry.
//!
//! `cargo xtask docs` runs it and writes the page; `cargo xtask test` checks it is current.

fn main() {
    print!(
        "{}",
        plan::docs::operators_markdown(&plan::Registry::default())
    );
}
