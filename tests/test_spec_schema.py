"""The JSON Schema file is valid draft 2020-12 and agrees with the model's vocabularies."""
from __future__ import annotations

import json

from jsonschema import Draft202012Validator

from spark_jobs.spec import SCHEMA_PATH
from spark_jobs.spec.model import CDC_OPERATIONS, POLICIES, SOURCE_FORMATS, SOURCE_KINDS, UNKNOWN_KEY_POLICIES
from spark_jobs.spec.node_ops import op_names
from spark_jobs.spec.schema import WRITE, build_schema, schema_text
from tests.test_spec_load import ALL_OPS as ALL_OPS_TEXT, BASE


def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def test_schema_is_valid_draft_2020_12():
    s = schema()
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(s)


def test_the_schema_file_is_the_registry_s():
    """circuit.schema.json is written from the ops' fragments (spec/ops/): an op added or changed
    without writing the file again fails here, with the command that writes it."""
    assert SCHEMA_PATH.read_text() == schema_text(build_schema()), f"circuit.schema.json is stale: run {WRITE}"


def test_schema_vocabularies_match_the_model():
    defs = schema()["$defs"]
    assert tuple(defs["node"]["properties"]["op"]["enum"]) == op_names()
    assert tuple(defs["source"]["properties"]["kind"]["enum"]) == SOURCE_KINDS
    assert tuple(defs["source"]["properties"]["format"]["enum"]) == SOURCE_FORMATS
    assert tuple(defs["source"]["properties"]["ops"]["additionalProperties"]["enum"]) == CDC_OPERATIONS
    assert tuple(defs["source"]["properties"]["unknown_key"]["enum"]) == UNKNOWN_KEY_POLICIES
    policy = defs["expectations"]["items"]["additionalProperties"]["properties"]["policy"]
    assert tuple(policy["enum"]) == POLICIES


def test_valid_circuits_pass_the_schema():
    from spark_jobs.spec.loader import read_yaml

    validator = Draft202012Validator(schema())
    for text in (BASE, ALL_OPS_TEXT):
        assert list(validator.iter_errors(read_yaml(text, "x").data)) == []
