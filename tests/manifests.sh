#!/usr/bin/env bash
# tests/manifests.sh -- deploy/kubernetes checked against Kubernetes'
# schemas (issue #45): kubernetes-validate (PyPI, pinned; its bundled
# schemas, strict) for the built-in kinds, and the external-snapshotter's
# VolumeSnapshotClass CRD (its client Go module, pinned, from the Go module
# proxy) for the snapshot class. A missing prerequisite fails the run.
set -euo pipefail

KUBERNETES_VALIDATE=1.37.0
SNAPSHOTTER_CLIENT=v8.7.0
KUBERNETES_VERSION=${KUBERNETES_VERSION:-1.34.0}
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
CACHE=${FARFLASH_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/farflash}
VENV=$CACHE/kubernetes-validate-$KUBERNETES_VALIDATE

command -v go >/dev/null || { echo "manifests.sh: go is needed (the snapshot CRDs' module)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "manifests.sh: python3 is needed" >&2; exit 1; }
if [[ ! -x $VENV/bin/kubernetes-validate ]]; then
	rm -rf "$VENV"
	python3 -m venv "$VENV" || { echo "manifests.sh: python3 -m venv failed (apt-get install python3-venv)" >&2; exit 1; }
	"$VENV/bin/pip" install --quiet "kubernetes-validate==$KUBERNETES_VALIDATE"
fi
CRDS=$(cd /tmp && go mod download -json "github.com/kubernetes-csi/external-snapshotter/client/v8@$SNAPSHOTTER_CLIENT" |
	python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')/config/crd
"$VENV/bin/python" "$ROOT/tests/manifests.py" "$CRDS" "$KUBERNETES_VERSION"
