"""Which Kubeflow Trainer releases take the exported TrainJob: its runtimePatches field came
in Trainer v2.2.0 (pkg/apis/trainer/v1alpha1/trainjob_types.go; v2.1.0 had
podTemplateOverrides instead). The TrainJob validates against v2.2.0's published CRD schema
and v2.3.0's (the one test_engines.py validates every export against), and v2.1.0's refuses
the field: docs/engines.md says "v2.2 or later" on this evidence. The schemas and their
sources: tests/fixtures/crds/README.md."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_engines import manifest, strict

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (a test dependency) checks "
                                 "the manifests against the CRD schemas")

CRDS = Path(__file__).parent / "fixtures" / "crds"
SCHEMAS = {"v2.1.0": "trainer.kubeflow.org_trainjobs.v1alpha1.v2.1.0.json",
           "v2.2.0": "trainer.kubeflow.org_trainjobs.v1alpha1.v2.2.0.json",
           "v2.3.0": "trainer.kubeflow.org_trainjobs.v1alpha1.json"}


def schema(tag: str) -> dict:
    return strict(json.loads((CRDS / SCHEMAS[tag]).read_text())["openAPIV3Schema"])


@pytest.mark.parametrize("name", ["pytorch-tcp", "pytorch-ib"])
@pytest.mark.parametrize("tag", ["v2.2.0", "v2.3.0"])
def test_the_trainjob_validates_from_trainer_v2_2(tag, name):
    _plan, _text, data = manifest(name, "trainjob")
    assert data["spec"]["runtimePatches"]  # what an older Trainer refuses is there
    jsonschema.validate(data, schema(tag))


@pytest.mark.parametrize("name", ["pytorch-tcp", "pytorch-ib"])
def test_trainer_v2_1_refuses_runtime_patches_and_only_them(name):
    _plan, _text, data = manifest(name, "trainjob")
    with pytest.raises(jsonschema.ValidationError, match="'runtimePatches' was unexpected"):
        jsonschema.validate(data, schema("v2.1.0"))
    del data["spec"]["runtimePatches"]
    jsonschema.validate(data, schema("v2.1.0"))
