#!/usr/bin/env bash
# Sets up and runs the whole test suite: lint, types, docs, pytest on both version sets (newest jax + triton;
# jax/jaxlib 0.11.2 + triton 3.6.0), and the wheelhouse: jt built with `python -m build` and installed by name in
# fresh virtualenvs. Prints each step with the seconds elapsed.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
status=0
# Test processes: two by default (the CI machine's cores); JT_TEST_WORKERS=0 runs them in this process.
workers="${JT_TEST_WORKERS:-2}"
run_pytest() {
    local venv="$1" label="$2" rc=0
    step "pytest on $label ($("$venv/bin/python" -c 'import jax, triton; print(f"jax {jax.__version__}, triton {triton.__version__}")'), $workers workers)"
    JT_STRICT_PLUGINS=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider -n "$workers" "${@:3}" || rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then status=1; fi
    if [ "$rc" -eq 5 ]; then echo "error: no tests collected"; status=1; fi
}

make_venv latest latest
latest="$VENV"
step "ruff"
"$latest/bin/ruff" check . || status=1
"$latest/bin/ruff" format --check . || status=1
step "mypy"
"$latest/bin/mypy" || status=1
step "import contracts (lint-imports)"
"$latest/bin/lint-imports" || status=1
step "mkdocs build --strict"
NO_MKDOCS_2_WARNING=1 "$latest/bin/mkdocs" build --strict -q -f docs/mkdocs.yml -d "$ROOT/.ci-venv-latest/site" || status=1
run_pytest "$latest" latest
# The CPU race check finds no race and no unwritten output in any kernel the suites, the examples and the docs run.
JT_CPU_RACE_CHECK=1 JT_CPU_UNWRITTEN=error run_pytest "$latest" "latest, with JT_CPU_RACE_CHECK=1 JT_CPU_UNWRITTEN=error"
if [ -d docs/examples/jt_example_backend/tests ]; then
    step "pytest of the example plugin docs/examples/jt_example_backend"
    (cd docs/examples/jt_example_backend && JT_STRICT_PLUGINS=1 "$latest/bin/python" -m pytest -q -p no:cacheprovider) || status=1
fi

build_wheelhouse "$latest/bin/python" || status=1
step "checking the wheelhouse and installing jt by name from it in fresh virtualenvs (tests/check_wheelhouse.py)"
figures="$(mktemp)"
JT_WHEELHOUSE_FIGURES="$figures" "$latest/bin/python" -m pytest -q -p no:cacheprovider -n "$workers" \
    tests/check_wheelhouse.py || status=1
sed 's/^/    /' "$figures"
rm -f "$figures"

make_venv pinned pinned
run_pytest "$ROOT/.ci-venv-pinned" pinned

step "finished"
if [ "$status" -ne 0 ]; then echo "FAILED"; else echo "all checks passed"; fi
exit "$status"
