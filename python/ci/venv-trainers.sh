#!/usr/bin/env bash
# Creates (or reuses) the virtualenv in which CI tests beacon_rl.skyrl and beacon_rl.trl
# against the real skyrl-train 0.3.1 and TRL 1.16 (CPython 3.12, the only version
# skyrl-train 0.3.1 installs on):
#   ${BEACON_RL_VENV_TRAINERS:-$HOME/.cache/beacon-rl/venv-trainers}
# Like venv.sh: outside the repository, reused while its stamp (the lock's hash and the
# interpreter version) matches, installed from requirements-trainers.lock with --no-deps.
# Prints the venv path on its last line of stdout; timings go to stderr and $VENV/install.log.
# Exits 3 (nothing installed) when no CPython 3.12 is found: .ci/run reports the step skipped.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${BEACON_RL_VENV_TRAINERS:-$HOME/.cache/beacon-rl/venv-trainers}"
lock="$here/requirements-trainers.lock"

find_python() {
  # Run each candidate: a pyenv shim exists on PATH even for a version it will not start.
  local p
  for p in "${BEACON_RL_PYTHON312:-}" "$(command -v python3.12 || true)" \
    "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3.12; do
    if [[ -n "$p" && -x "$p" ]] && "$p" -c 'import sys, venv; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

if ! py="$(find_python)"; then
  echo "venv-trainers: no CPython 3.12 on this machine" >&2
  exit 3
fi
want="$(sha256sum < "$lock" | cut -c1-16) $("$py" -c 'import platform; print(platform.python_version())')"
if [[ -f "$venv/.beacon-rl-stamp" && "$(cat "$venv/.beacon-rl-stamp")" == "$want" ]]; then
  echo "venv-trainers: $venv is complete ($want), reused" >&2
  echo "$venv"
  exit 0
fi

start=$(date +%s)
if [[ -x "$venv/bin/python" && "$("$venv/bin/python" -c 'import platform; print(platform.python_version())' 2>/dev/null)" == "${want#* }" ]]; then
  echo "venv-trainers: updating $venv to $want" >&2
else
  echo "venv-trainers: installing into $venv with $py ($want)" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
fi
if [[ "$("$py" -c 'import platform; print(platform.machine())')" != "x86_64" ]]; then
  echo "venv-trainers: the lock is for Linux x86_64; resolving requirements-trainers.txt instead" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements-trainers.txt" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps skyrl-train==0.3.1 >&2
else
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$lock" >&2
fi
"$venv/bin/python" -c 'import torch, trl, transformers, skyrl_train.utils.ppo_utils, pytest, hypothesis' >&2
end=$(date +%s)
size="$(du -sh "$venv" | cut -f1)"
echo "$(date -u +%FT%TZ) installed in $((end - start)) s, size $size ($want)" | tee -a "$venv/install.log" >&2
echo "$want" > "$venv/.beacon-rl-stamp"
echo "$venv"
