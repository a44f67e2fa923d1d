# shellcheck shell=bash
# Shared by the benchmark scripts (sourced, not run).

# bench_driver NAME: builds the `NAME` bench target of e2e/ (harness = false) and prints
# the path of its executable; prints nothing when it did not build.
bench_driver() {
  cargo bench -p flux-e2e --bench "$1" --no-run --message-format=json-render-diagnostics |
    grep '"kind":\["bench"\]' | grep "\"name\":\"$1\"" |
    grep -o '"executable":"[^"]*"' | tail -n 1 | sed 's/^"executable":"//; s/"$//' || true
}
