"""The JSON Schema file is valid draft 2020-12 and agrees with the model's vocabularies."""
from __future__ import annotations

import json

from jsonschema import Draft202012Validator

from spark_jobs.spec import SCHEMA_PATH
from spark_jobs.spec.model import (ALL_OPS, CDC_OPERATIONS, POLICIES, SOURCE_FORMATS, SOURCE_KINDS,
                                   UNKNOWN_KEY_POLICIES)
from tests.test_spec_load import ALL_OPS as ALL_OPS_TEXT, BASE


def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def test_schema_is_valid_draft_2020_12():
    s = schema()
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(s)


def test_schema_vocabularies_match_the_model():
    defs = schema()["$defs"]
    assert tuple(defs["node"]["properties"]["op"]["enum"]) == ALL_OPS
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
