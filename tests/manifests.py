"""Validates deploy/kubernetes against Kubernetes' schemas (issue #45).

Built-in kinds with kubernetes-validate (strict: unknown fields refused),
the VolumeSnapshotClass with the openAPIV3Schema of the external-snapshotter
CRD (its directory given as the first argument). Every file of the
directory must be in kustomization.yaml's resources; the examples/ are
checked too. A broken manifest must
be refused (checked first, so that a validator that accepts anything fails
the run).

    python tests/manifests.py CRD_DIR [KUBERNETES_VERSION]
"""

import pathlib
import sys

import jsonschema
import kubernetes_validate
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy" / "kubernetes"


def crd_schemas(crd_dir):
    out = {}
    for f in sorted(pathlib.Path(crd_dir).glob("snapshot.storage.k8s.io_*.yaml")):
        crd = yaml.safe_load(f.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for v in crd["spec"]["versions"]:
            schema = dict(v["schema"]["openAPIV3Schema"])
            # As the API server: unknown top-level fields are refused.
            schema["additionalProperties"] = False
            out[(f"{group}/{v['name']}", kind)] = schema
    if not out:
        sys.exit(f"manifests.py: no snapshot.storage.k8s.io CRDs in {crd_dir}")
    return out


def validate(doc, crds, version):
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in crds:
        jsonschema.validate(doc, crds[key])
    else:
        kubernetes_validate.validate(doc, version, strict=True)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    crds = crd_schemas(sys.argv[1])
    version = sys.argv[2] if len(sys.argv) > 2 else "1.34.0"
    broken = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
         "spec": {"replicas": "one", "selector": {}, "template": {}}},
        {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
         "metadata": {"name": "x"}, "driver": "d", "deletionPolicy": "Sometimes"},
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
         "metadata": {"name": "x"}, "provisioner": "p", "parameter": {}},
    ]
    for b in broken:
        try:
            validate(b, crds, version)
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError):
            continue
        sys.exit(f"manifests.py: the validator accepted a broken {b['kind']}")
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    listed = set(kust["resources"])
    files = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    if listed != files:
        sys.exit(f"manifests.py: kustomization.yaml resources {sorted(listed)} != files {sorted(files)}")
    passed = failed = 0
    examples = sorted(str(p.relative_to(DEPLOY)) for p in (DEPLOY / "examples").glob("*.yaml"))
    for name in list(kust["resources"]) + examples:
        for doc in yaml.safe_load_all((DEPLOY / name).read_text()):
            what = f"{name}: {doc.get('kind')} {doc.get('metadata', {}).get('name')}"
            try:
                validate(doc, crds, version)
                passed += 1
                print(f"ok   {what}")
            except Exception as e:  # noqa: BLE001 - every refusal is reported
                failed += 1
                print(f"FAIL {what}: {str(e).splitlines()[0]}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
