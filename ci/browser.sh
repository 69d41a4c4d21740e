#!/usr/bin/env bash
# Install Debian's chromium for tests/test_browser.py (the /bacc page in a real browser)
# and the documentation screenshots. Needs root and apt-get; a no-op when it is there.
# tests/test_browser.py skips, saying so, when /usr/bin/chromium is missing.
set -euo pipefail

if [[ -x /usr/bin/chromium ]]; then
    exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "ci/browser.sh: chromium is missing and cannot be installed here (needs root and apt-get);" \
         "tests/test_browser.py will skip with the reason" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium >/dev/null
