#!/usr/bin/env bash
# The abi3 wheel on the other CPythons it claims (pyproject: ">=3.10"; verl 0.9.1 runs on
# 3.10 to 3.12): installs the one wheel CI built into a small virtualenv per interpreter
# (numpy, pytest, hypothesis; no torch, no verl) and runs the binding's tests that need
# neither. 3.10 runs with numpy 1.21.6, the oldest numpy the package declares, so the numpy
# 1.x ABI and the package's numpy < 1.23 paths are covered too.
#
#   bash python/ci/abi3.sh WHEEL
#
# Interpreters are found on PATH (python3.X) or under pyenv's versions; one that this machine
# does not have is reported as skipped (the main venv's 3.11 run covers the package either
# way). Each venv lives in ~/.cache/beacon-rl/ and is reused while its pins are unchanged.
set -euo pipefail
wheel="$1"
root="$(cd "$(dirname "$0")/../.." && pwd)"
cache="${BEACON_RL_CACHE:-$HOME/.cache/beacon-rl}"

pins() {
  case "$1" in
    3.10) echo "numpy==1.21.6 pytest==9.2.0 hypothesis==6.168.5" ;;
    3.12 | 3.13) echo "numpy==2.4.6 pytest==9.2.0 hypothesis==6.170.15" ;;
  esac
}

find_python() {
  # Run each candidate: a pyenv shim exists on PATH even for a version it will not start.
  local v="$1" p
  for p in "$(command -v "python$v" || true)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/"python$v"; do
    if [[ -x "$p" ]] && "$p" -c 'import venv' >/dev/null 2>&1; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

for v in 3.10 3.12 3.13; do
  if ! py="$(find_python "$v")"; then
    echo "abi3: no CPython $v on this machine: skipped"
    continue
  fi
  venv="$cache/venv-abi3-$v"
  want="$("$py" -c 'import platform; print(platform.python_version())') $(pins "$v")"
  if [[ ! -f "$venv/.stamp" || "$(cat "$venv/.stamp")" != "$want" ]]; then
    start=$(date +%s)
    rm -rf "$venv"
    "$py" -m venv "$venv"
    # shellcheck disable=SC2046 # the pins are separate words
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $(pins "$v")
    echo "$want" > "$venv/.stamp"
    echo "abi3: $venv installed in $(( $(date +%s) - start )) s"
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel"
  echo "abi3: CPython $("$venv/bin/python" -c 'import platform, numpy; print(platform.python_version(), "numpy", numpy.__version__)')"
  # test_verl and test_row_scores import torch and verl at the top; the others skip their
  # torch cases. From the repository root, as in the main run.
  (
    cd "$root"
    "$venv/bin/python" -m pytest -q -p no:warnings -p no:cacheprovider python/tests \
      --ignore=python/tests/test_verl.py --ignore=python/tests/test_row_scores.py
  )
done
