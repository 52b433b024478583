#!/usr/bin/env bash
# Sets up and runs the whole test suite: lint, types, docs, pytest on both version sets (newest jax + triton;
# jax/jaxlib 0.11.2 + triton 3.6.0), the wheelhouse (jt built with `python -m build` and installed by name in fresh
# virtualenvs), and each distribution's suite with only it and jt-core installed. Prints each step with the seconds
# elapsed.
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

# run_separated PYTHON: each distribution's suite passes with only that distribution and jt-core installed, so no
# test of one reaches into another: one virtualenv with the packages the suites need, at the versions PYTHON's
# environment has, jt-core's wheel from dist/, and each plugin's wheel in turn (installed, tested, uninstalled).
# The suites run with -P, so that the checkout's jt_* folders do not import as (empty) packages, and with a cache
# folder of their own (JT_CACHE_DIR), so that nothing compiled or built by another environment is served to them.
run_separated() {
    local python="$1" venv="$ROOT/.ci-venv-separate" constraints dist installed rc
    if [ ! -x "$venv/bin/python" ]; then
        step "creating the virtualenv .ci-venv-separate"
        "$(find_python)" -m venv "$venv"
    fi
    step "installing in .ci-venv-separate jax, triton and the test tools at the versions of $("$python" -c 'import sys; print(sys.prefix)'), and jt-core alone from dist/"
    constraints="$(mktemp)"
    "$python" -m pip freeze | grep -v '^jt[-_]' >"$constraints"
    "$venv/bin/python" -m pip install "${PIP_QUIET[@]}" -c "$constraints" \
        jax triton pluggy numpy ml_dtypes pytest pytest-xdist hypothesis flatbuffers || status=1
    rm -f "$constraints"
    "$venv/bin/python" -m pip freeze | sed -n 's/^\(jt[-_][^ =@]*\).*/\1/p' | xargs -r "$venv/bin/python" -m pip uninstall "${PIP_QUIET[@]}" -y
    "$venv/bin/python" -m pip install "${PIP_QUIET[@]}" --no-deps "$ROOT"/dist/jt_core-*.whl || status=1
    for dist in jt_core jt_cuda jt_rocm jt_gluon; do
        if [ "$dist" != jt_core ]; then
            "$venv/bin/python" -m pip install "${PIP_QUIET[@]}" --no-deps "$ROOT"/dist/"$dist"-*.whl || status=1
        fi
        installed="$("$venv/bin/python" -c 'import importlib.metadata as m
print(", ".join(sorted(d.metadata["Name"] for d in m.distributions() if d.metadata["Name"].startswith("jt-"))))')"
        step "pytest $dist/tests with only $installed installed ($workers workers)"
        rc=0
        JT_CACHE_DIR="$venv/jt-cache" JT_STRICT_PLUGINS=1 "$venv/bin/python" -P -m pytest -q -p no:cacheprovider -n "$workers" "$dist/tests" || rc=$?
        if [ "$rc" -ne 0 ]; then status=1; fi
        if [ "$rc" -eq 5 ]; then echo "error: no tests collected"; fi
        if [ "$dist" != jt_core ]; then
            "$venv/bin/python" -m pip uninstall "${PIP_QUIET[@]}" -y "${dist/_/-}" || status=1
        fi
    done
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
for example in jt_example_backend jt_example_launcher; do
    if [ -d "docs/examples/$example/tests" ]; then
        step "pytest of the example plugin docs/examples/$example"
        (cd "docs/examples/$example" && JT_STRICT_PLUGINS=1 "$latest/bin/python" -m pytest -q -p no:cacheprovider) || status=1
    fi
done

build_wheelhouse "$latest/bin/python" || status=1
step "checking the wheelhouse and installing jt by name from it in fresh virtualenvs (tests/check_wheelhouse.py)"
figures="$(mktemp)"
JT_WHEELHOUSE_FIGURES="$figures" "$latest/bin/python" -m pytest -q -p no:cacheprovider -n "$workers" \
    tests/check_wheelhouse.py || status=1
sed 's/^/    /' "$figures"
rm -f "$figures"

run_separated "$latest/bin/python"

make_venv pinned pinned
run_pytest "$ROOT/.ci-venv-pinned" pinned

step "finished"
if [ "$status" -ne 0 ]; then echo "FAILED"; else echo "all checks passed"; fi
exit "$status"
