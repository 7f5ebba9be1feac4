#!/usr/bin/env bash
# Quick start, command 1: install, build, and run the main job on the embedded default:
# `kvpool replay` of the Mooncake conversation trace (DRAM + flash tiers on a file under
# kvpool-data/), with a progress bar and a results table. Extra arguments go to replay.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
exec build/kvpool replay "$@"
