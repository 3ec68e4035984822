#!/usr/bin/env bash
# helm as the test bed's scripts find it: the binary `make kube-deps` (or `make helm-deps`)
# built into the cache (e2e/kube/lib.sh), never one from PATH of another version.
#
#   helm.sh ARGS...   runs that helm with ARGS
set -euo pipefail
KUBE_SCRIPT=chart
# shellcheck source=../e2e/kube/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../e2e/kube/lib.sh"

need_bins helm
exec "$KUBE_BIN/helm" "$@"
