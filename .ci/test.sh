#!/usr/bin/env bash
# Sets up and runs the whole test suite: lint, types, docs; the wheelhouse (jt built with `python -m build`, its
# platform wheels in the older sets' environments, and installed by name in fresh virtualenvs without a compiler, on
# Python 3.12 and on a TPU VM's stack); pytest on the newest jax + triton, twice (the CPU's compiled path, then what
# runs kernels on the CPU's launchers in Triton's interpreter with the race check, compared with the compiled path);
# on jax/jaxlib 0.11.2 + triton 3.6.0 (Python 3.12) and on jax/jaxlib 0.10.2 + triton 3.8.0 (Python 3.11) each
# distribution's suite with only it and jt-core installed, from the platform wheels, without a compiler; and on the
# first of those the suite across distributions. Prints each step with the seconds elapsed.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
status=0
# Test processes: two by default (the CI machine's cores); JT_TEST_WORKERS=0 runs them in this process.
workers="${JT_TEST_WORKERS:-2}"
run_pytest() {
    local venv="$1" label="$2" rc=0 log
    step "pytest on $label ($("$venv/bin/python" -c 'import jax, triton; print(f"jax {jax.__version__}, triton {triton.__version__}")'), $workers workers)"
    # The output is shown once the run ends, so that it is not cut into by the lines of the work running beside it.
    log="$(mktemp)"
    JT_DOCS_SITE="$site" JT_STRICT_PLUGINS=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider -n "$workers" "${@:3}" \
        >"$log" 2>&1 || rc=$?
    cat "$log"
    rm -f "$log"
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then status=1; fi
    if [ "$rc" -eq 5 ]; then echo "error: no tests collected"; status=1; fi
}

# wheel_of DIST: the wheel of DIST in dist/ that pip would take here: its platform wheel, else its pure wheel.
wheel_of() {
    local found
    found="$(ls "$ROOT"/dist/"$1"-*-py3-none-manylinux_*.whl 2>/dev/null | head -n 1)"
    echo "${found:-$(ls "$ROOT"/dist/"$1"-*-py3-none-any.whl)}"
}

# prepare_separated PYTHON NAME, then run_separated NAME: each distribution's suite passes with only that distribution
# and jt-core installed, so no test of one reaches into another: one virtualenv, $JT_CI_HOME/NAME, of PYTHON's
# version, with the packages the suites need, at the versions PYTHON's environment has, jt-core's wheel from dist/,
# and each plugin's wheel in turn (installed, tested, uninstalled);
# the platform wheels, whose native libraries are prebuilt. The suites run where no compiler is (no C or C++ compiler
# on PATH, CXX and CC unset: tests that build skip), so nothing is built, which is checked after them; with -P, so
# that the checkout's jt_* folders do not import as (empty) packages; and with a cache folder of their own
# (JT_TEST_CACHE_DIR, which jt_core.testing points the sessions' JT_CACHE_DIR and TRITON_CACHE_DIR into), so that
# nothing compiled or built by another environment is served to them, and what they build is found afterwards.
prepare_separated() {
    local python="$1" venv="$JT_CI_HOME/$2" constraints
    if [ ! -x "$venv/bin/python" ]; then
        step "creating the virtualenv $venv"
        "$(find_python "$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')")" -m venv "$venv"
    fi
    step "installing in $2 jax, triton, pytest-xdist and what the test extras name, at the versions of $("$python" -c 'import sys; print(sys.prefix)')"
    constraints="$(mktemp)"
    "$python" -m pip freeze | grep -v -e '^jt[-_]' -e '^-e ' >"$constraints"
    # shellcheck disable=SC2046  # one requirement a word
    "$venv/bin/python" -m pip install "${PIP_QUIET[@]}" -c "$constraints" \
        jax triton pluggy numpy ml_dtypes flatbuffers pytest-xdist $(test_requirements "$venv/bin/python") || status=1
    rm -f "$constraints"
    "$venv/bin/python" -m pip freeze | sed -n 's/^\(jt[-_][^ =@]*\).*/\1/p' | xargs -r "$venv/bin/python" -m pip uninstall "${PIP_QUIET[@]}" -y
}

# run_separated NAME [ARG...]: the suites in $JT_CI_HOME/NAME (prepare_separated made it), with jt-core's wheel from
# dist/ and each plugin's in turn; the ARGs go to pytest for jt-core's suite.
run_separated() {
    local venv="$JT_CI_HOME/$1" dist installed rc bare args
    local core_args=("${@:2}")
    "$venv/bin/python" -m pip install "${PIP_QUIET[@]}" --no-deps "$(wheel_of jt_core)" || status=1
    rm -rf "$venv/jt-cache"
    bare="$("$venv/bin/python" -c 'import sys; from jt_core.testing import no_compiler_path
print(no_compiler_path(sys.argv[1]))' "$venv/no-compiler-bin")" || status=1
    for dist in jt_core jt_cuda jt_rocm jt_gluon jt_tpu; do
        if [ "$dist" != jt_core ]; then
            "$venv/bin/python" -m pip install "${PIP_QUIET[@]}" --no-deps "$(wheel_of "$dist")" || status=1
        fi
        installed="$("$venv/bin/python" -c 'import importlib.metadata as m
print(", ".join(sorted(d.metadata["Name"] for d in m.distributions() if d.metadata["Name"].startswith("jt-"))))')"
        args=()
        if [ "$dist" = jt_core ]; then args=("${core_args[@]}"); fi
        step "pytest $dist/tests${args[*]:+ ${args[*]}} with only $installed installed, no compiler ($("$venv/bin/python" -c 'import sys, jax, triton; print(f"Python {sys.version.split()[0]}, jax {jax.__version__}, triton {triton.__version__}")'), $workers workers)"
        rc=0
        env -u CXX -u CC PATH="$venv/bin:$bare" JT_TEST_CACHE_DIR="$venv/jt-cache" JT_STRICT_PLUGINS=1 \
            "$venv/bin/python" -P -m pytest -q -p no:cacheprovider -n "$workers" "$dist/tests" "${args[@]}" || rc=$?
        if [ "$rc" -ne 0 ]; then status=1; fi
        if [ "$rc" -eq 5 ]; then echo "error: no tests collected"; fi
        if [ "$dist" != jt_core ]; then
            "$venv/bin/python" -m pip uninstall "${PIP_QUIET[@]}" -y "${dist/_/-}" || status=1
        fi
    done
    if [ -n "$(find "$venv/jt-cache" -name 'lib*.so*' 2>/dev/null)" ]; then
        echo "error: the suites built native libraries where the platform wheels carry them prebuilt:"
        find "$venv/jt-cache" -name 'lib*.so*'
        status=1
    fi
}

# jt-core's tests whose subject is the machine's files and processes rather than jax or Triton: caches on disk and
# across processes, the files jt keeps private, a long run's memory.
MACHINE_TESTS=()
for name in cache_disk cache_processes testing_caches files_private memory_bounds; do
    MACHINE_TESTS+=(--ignore "jt_core/tests/test_$name.py")
done

make_venv latest latest
latest="$VENV"
step "ruff"
"$latest/bin/ruff" check . || status=1
"$latest/bin/ruff" format --check . || status=1
step "mypy"
"$latest/bin/mypy" || status=1
step "import contracts (lint-imports)"
"$latest/bin/lint-imports" --no-logo || status=1
step "mkdocs build --strict"
# The suites' checks of the site (tests/test_docs_site.py) read this build (JT_DOCS_SITE) instead of making their own.
site="$JT_CI_HOME/site"
rm -rf "$site"
NO_MKDOCS_2_WARNING=1 "$latest/bin/mkdocs" build --strict -q -f docs/mkdocs.yml -d "$site" || status=1
# While the suites of the newest set run, beside them (mostly downloads and installs, in one process at a time): the
# virtualenvs of the pinned and the py311 sets; the wheelhouse, its platform wheels built in their environments (the
# py311 set's jaxlib is the oldest jt supports, whose XLA FFI headers jt-core's and jt-rocm's prebuilt libraries are
# compiled against; the pinned set's is the one jt-cuda's names), checked, and installed by name in fresh virtualenvs;
# and the virtualenvs of the separated suites. Their steps are printed as they start, marked "beside"; what a step
# prints is shown only when it fails.
prepared_rc="$(mktemp)"
(
    status=0
    STEP_LABEL=beside
    make_venv pinned pinned
    make_venv py311 py311 runtime  # its suites run in venv-separate-py311, whose tools prepare_separated installs
    install_build_tools "$JT_CI_HOME/venv-py311/bin/python" || status=1
    install_build_tools "$JT_CI_HOME/venv-pinned/bin/python" || status=1
    build_wheelhouse "$JT_CI_HOME/venv-py311/bin/python" "$JT_CI_HOME/venv-pinned/bin/python" || status=1
    step "checking the wheelhouse and installing jt by name from it in fresh virtualenvs (tests/check_wheelhouse.py)"
    figures="$(mktemp)"
    check_log="$(mktemp)"
    JT_WHEELHOUSE_FIGURES="$figures" JT_WHEELHOUSE_PYTHON311="$(find_python "$JT_OLDEST_PYTHON_VERSION")" \
        logged "$check_log" "$latest/bin/python" -m pytest -q -p no:cacheprovider tests/check_wheelhouse.py || status=1
    step "the wheelhouse: $(tail -n 1 "$check_log")"
    sed 's/^/    /' "$figures"
    rm -f "$figures" "$check_log"
    prepare_separated "$JT_CI_HOME/venv-pinned/bin/python" venv-separate
    prepare_separated "$JT_CI_HOME/venv-py311/bin/python" venv-separate-py311
    echo "$status" >"$prepared_rc"  # not reached when a step that must succeed failed (errexit holds here)
) &
prepared=$!

# The suites, the examples, the example plugins' own suites (tests/test_docs_examples.py) and the docs' code run on
# the CPU's compiled path (the default); then again in Triton's interpreter with the race check, which finds no race
# and no unwritten output in any kernel they run; in that second run every call the compiled path takes also runs
# compiled, and the two results are compared (JT_CPU_DIFFERENTIAL=1): bit for bit, or within a stated tolerance where
# the kernel sums or calls transcendentals. The second run leaves out jt-cuda's, jt-rocm's and jt-gluon's suites
# (they lower for their devices), the example plugins' suites (a toy platform's) and jt-core's tests of the machine's
# files and processes (their kernels are the suite's own, run again for their caches).
run_pytest "$latest" latest
JT_CPU_RACE_CHECK=1 JT_CPU_UNWRITTEN=error JT_CPU_DIFFERENTIAL=1 run_pytest "$latest" \
    "latest, in the interpreter with JT_CPU_RACE_CHECK=1 JT_CPU_UNWRITTEN=error, compared with the compiled path" \
    jt_core/tests jt_tpu/tests tests "${MACHINE_TESTS[@]}" \
    --deselect tests/test_docs_examples.py::test_example_plugin_passes_its_own_tests

wait "$prepared" || true
if [ "$(cat "$prepared_rc" 2>/dev/null)" != 0 ]; then
    echo "error: the work beside the suites failed (its steps above say where)"
    status=1
fi
rm -f "$prepared_rc"
pinned="$JT_CI_HOME/venv-pinned"

# The pinned set: each distribution's suite from the platform wheels with only it and jt-core installed, without a
# compiler (the tests that build a library run on the newest set above), then the suite across distributions.
run_separated venv-separate
run_pytest "$pinned" "pinned, the suite across distributions (tests/)" tests
# The py311 set, a TPU VM's stack: each distribution's suite the same way, jt-core's without its tests of the
# machine's files and processes (MACHINE_TESTS), which the other two sets run. What jax 0.10 cannot do is skipped,
# saying why (docs/pages/cpu.md); jt-cuda's prebuilt handler, compiled against jaxlib 0.11.2 for its record stage, is not
# loaded there, and the tests that need it skip without a compiler.
run_separated venv-separate-py311 "${MACHINE_TESTS[@]}"

step "finished"
if [ "$status" -ne 0 ]; then echo "FAILED"; else echo "all checks passed"; fi
exit "$status"
