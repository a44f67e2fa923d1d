/// The python interpreter the oracle tests run: `$ORACLE_PYTHON` if set,
/// else `<workspace root>/.venv/bin/python`. Panics (failing the test, never
/// skipping it) when that interpreter does not exist.
pub fn oracle_python() -> std::path::PathBuf {
    let path = match std::env::var_os("ORACLE_PYTHON") {
        Some(path) => std::path::PathBuf::from(path),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python"),
    };
    assert!(
        path.exists(),
        "oracle python {} does not exist: run scripts/test.sh to set up the test environment \
         (or set ORACLE_PYTHON)",
        path.display()
    );
    path
}
