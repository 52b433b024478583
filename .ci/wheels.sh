#!/usr/bin/env bash
# Builds jt's wheelhouse in dist/: an sdist and a pure wheel of each distribution, and a platform wheel
# (py3-none-manylinux_*) of each distribution with native libraries, which carries them prebuilt.
# Then, by name: pip install --find-links dist jt-core jt-cuda   (or "jt-core[cuda]")
#
# `bash .ci/wheels.sh [PYTHON...]` builds with the PYTHONs given: among them, the environment of each jaxlib some
# platform wheel is compiled against (install_build_tools adds what building takes). By default it makes one
# virtualenv per such jaxlib on first use, $JT_CI_HOME/venv-build-jaxlib-<version>: jt-core's and jt-rocm's libraries
# are compiled against the oldest jaxlib jt supports, jt-cuda's against the version its pyproject.toml names.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
pythons=("$@")
if [ "${#pythons[@]}" -eq 0 ]; then
    for version in $(for dist in $(native_folders); do build_jaxlib "$(find_python)" "$dist"; done | sort -u); do
        venv="$JT_CI_HOME/venv-build-jaxlib-$version"
        if [ ! -x "$venv/bin/python" ]; then
            step "creating the virtualenv $venv"
            mkdir -p "$JT_CI_HOME"
            "$(find_python)" -m venv "$venv"
        fi
        pythons+=("$venv/bin/python")
        step "installing the build tools and jaxlib $version into $venv"
        install_build_tools "$venv/bin/python" "$version"
    done
else
    for python in "${pythons[@]}"; do
        step "installing the build tools into $("$python" -c 'import sys; print(sys.prefix)')"
        install_build_tools "$python"
    done
fi
build_wheelhouse "${pythons[@]}"
step "dist/ holds:"
ls -l dist
