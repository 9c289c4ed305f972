#!/usr/bin/env bash
# Builds the user guide (docs/, an mdBook: `target/book/index.html`) and checks that every
# relative link, anchor and mdBook include of it and of the README resolves, and that every
# chapter is in docs/SUMMARY.md. scripts/test.sh runs it first (seconds); mdBook itself is
# installed by scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v mdbook >/dev/null; then
    scripts/setup.sh
fi
mdbook build docs
python3 scripts/check-docs.py
