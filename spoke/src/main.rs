//! `flux-spoke`: the spoke controller binary.
fn main() {}
