#!/usr/bin/env bash
# Sets up and runs the whole test suite: lint, types, docs, and pytest on both version sets
# (newest jax + triton; jax/jaxlib 0.11.2 + triton 3.6.0).
source "$(dirname "$0")/env.sh"
cd "$ROOT"
status=0
run_pytest() {
    local venv="$1" label="$2" rc=0
    echo "== pytest ($label: $("$venv/bin/python" -c 'import jax, triton; print(f"jax {jax.__version__}, triton {triton.__version__}")'))"
    JT_STRICT_PLUGINS=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider "${@:3}" || rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then status=1; fi
    if [ "$rc" -eq 5 ]; then echo "error: no tests collected"; status=1; fi
}

latest="$(make_venv latest latest | tail -n 1)"
echo "== ruff"
"$latest/bin/ruff" check . || status=1
"$latest/bin/ruff" format --check . || status=1
echo "== mypy"
"$latest/bin/mypy" || status=1
echo "== import contracts"
"$latest/bin/lint-imports" || status=1
echo "== mkdocs"
if [ -f docs/mkdocs.yml ]; then
    "$latest/bin/mkdocs" build --strict -q -f docs/mkdocs.yml -d "$ROOT/.ci-venv-latest/site" || status=1
fi
run_pytest "$latest" latest
if [ -d docs/examples/jt_example_backend/tests ]; then
    (cd docs/examples/jt_example_backend && JT_STRICT_PLUGINS=1 "$latest/bin/python" -m pytest -q -p no:cacheprovider) || status=1
fi

pinned="$(make_venv pinned pinned | tail -n 1)"
run_pytest "$pinned" pinned

if [ "$status" -ne 0 ]; then echo "FAILED"; else echo "all checks passed"; fi
exit "$status"
