#!/usr/bin/env bash
# Sets up, then trains the example CNN on the openreg device with the default engine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${PYTHON:-python3}" examples/train.py "$@"
