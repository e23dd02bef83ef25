"""Refresh this folder: the Kubernetes API's strict JSON schemas (v1.30.0, the oldest
Kubernetes the manifests are written for) of the kinds deploy/kubernetes/ uses, and only
the definitions those reach.

They come from the `kubernetes-validate` package (Apache-2.0; its schemas are generated
from the Kubernetes API's OpenAPI document), which ships every kind of every version:
108 MB in 17,000 files, most of the test extra's install time, for the few kinds used
here. To refresh, in a scratch virtualenv:

    pip install kubernetes-validate && python tests/unit/node/kubernetes_schemas/refresh.py

A kind added to deploy/kubernetes/ is added to KINDS below, then the folder refreshed.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

VERSION = "v1.30.0"
# "<kind>-<API group>-<version>", the package's file names (group "" for the core API).
KINDS = ("configmap-v1", "deployment-apps-v1", "horizontalpodautoscaler-autoscaling-v2",
         "namespace-v1", "poddisruptionbudget-policy-v1", "secret-v1", "service-v1",
         "statefulset-apps-v1")
REF = re.compile(r'"\$ref": "(?:/api/_definitions\.json)?#/\$defs/([^"]+)"')
HERE = Path(__file__).resolve().parent


def _write(path: Path, doc: object) -> None:
    path.write_text(json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n")


def refresh(source: Path) -> int:
    """Copies the kinds and the definitions they reach; returns how many definitions."""
    defs = json.loads((source / "_definitions.json").read_text())
    todo: list[str] = []
    for kind in KINDS:
        text = (source / f"{kind}.json").read_text()
        _write(HERE / f"{kind}.json", json.loads(text))
        todo += REF.findall(text)
    keep: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in keep:
            keep.add(name)
            todo += REF.findall(json.dumps(defs["$defs"][name]))
    _write(HERE / "_definitions.json", {**defs, "$defs": {n: defs["$defs"][n] for n in sorted(keep)}})
    return len(keep)


if __name__ == "__main__":
    import kubernetes_validate   # the scratch environment's, not a test dependency

    package = Path(kubernetes_validate.__file__).parent
    print(refresh(package / "kubernetes-json-schema" / f"{VERSION}-local-strict"), "definitions")
