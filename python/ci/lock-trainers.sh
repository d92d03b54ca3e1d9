#!/usr/bin/env bash
# Regenerates requirements-trainers.lock from requirements-trainers.txt (run by hand with
# CPython 3.12 on Linux x86_64, then commit the lock; the venv's stamp follows its hash).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${BEACON_RL_PYTHON312:-$(command -v python3.12)}"
tmp="$(mktemp -d)"
"$py" -m venv "$tmp/v"
"$tmp/v/bin/pip" install --quiet --dry-run --ignore-installed --report "$tmp/r.json" -r "$here/requirements-trainers.txt"
{
  echo "# Full pinned closure of requirements-trainers.txt for CPython 3.12 on Linux x86_64 (pip --dry-run"
  echo "# --report, $(date -u +%F)) plus skyrl-train without its dependencies; installed with --no-deps."
  echo "# Regenerate: python/ci/lock-trainers.sh"
  "$tmp/v/bin/python" -c '
import json, sys
r = json.load(open(sys.argv[1]))
pins = [i["metadata"]["name"] + "==" + i["metadata"]["version"] for i in r["install"]]
pins.append("skyrl-train==0.3.1")
print("\n".join(sorted(pins, key=str.lower)))
' "$tmp/r.json"
} > "$here/requirements-trainers.lock"
rm -rf "$tmp"
