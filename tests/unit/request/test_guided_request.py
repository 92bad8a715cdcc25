"""request/guided.py: upstream's guided-decoding inputs, checked once at the edge: an unknown type, a
missing or stray guide and a guide that does not parse are each an error naming the field, before the
request reaches an engine."""

import pytest

from llmserve.engine.guided import grammar_of
from llmserve.errors import RequestError
from llmserve.request.guided import GUIDE, TYPE, Guide, read_guide

from .fields import field_error, reader
from .test_token_request import error, parse

SCHEMA = '{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}'


def guide(**fields):
    return read_guide(reader(**fields), grammar_of)


def guide_error(**fields) -> tuple[str, str]:
    with pytest.raises(RequestError) as e:
        guide(**fields)
    return field_error(e), str(e.value)


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("json", None),
        ("json", ""),
        ("json_schema", SCHEMA),
        ("regex", r"\d{3}-\d{4}"),
        ("ebnf_grammar", 'root ::= "yes" | "no"'),
        (
            "structural_tag",
            '{"type": "structural_tag", "format": {"type": "const_string", "value": "hi"}}',
        ),
    ],
)
def test_every_upstream_type_is_accepted(kind, text):
    assert guide(**{TYPE: kind, GUIDE: text}) == Guide(kind, text or "")


def test_absent_or_empty_type_is_not_guided():
    assert guide() is None
    assert guide(**{TYPE: ""}) is None


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({TYPE: "xml"}, TYPE, "must be one of json, json_schema, regex, ebnf_grammar, structural_tag, got 'xml'"),
        ({GUIDE: SCHEMA}, GUIDE, f"needs {TYPE}"),
        ({TYPE: "json", GUIDE: SCHEMA}, GUIDE, "must be empty when"),
        ({TYPE: "json_schema"}, GUIDE, "is required when guided_decoding_guide_type is json_schema"),
        ({TYPE: "json_schema", GUIDE: "{not json"}, GUIDE, "is not valid JSON"),
        (
            {TYPE: "json_schema", GUIDE: '{"type": "objekt"}'},
            GUIDE,
            'not a valid json_schema: Unsupported type "objekt"',
        ),
        ({TYPE: "regex", GUIDE: "(abc"}, GUIDE, "not a valid regex: Regex parsing error at position 5"),
        ({TYPE: "ebnf_grammar", GUIDE: "root ::= foo"}, GUIDE, 'Rule "foo" is not defined'),
        ({TYPE: "structural_tag", GUIDE: '{"type": "nope"}'}, GUIDE, "not a valid structural_tag"),
        ({TYPE: "regex", GUIDE: "a" * 70000}, GUIDE, "the limit is 65536"),
    ],
)
def test_bad_guides_name_the_field(fields, field, says):
    got, message = guide_error(**fields)
    assert got == field and says in message
    assert "/project/cpp" not in message  # xgrammar's C++ location is stripped


def test_token_level_request_carries_the_guide_and_refuses_min_tokens_with_it():
    assert parse(**{TYPE: "regex", GUIDE: "[0-9]+"}).guide == Guide("regex", "[0-9]+")
    assert parse().guide is None
    field, message = error(**{TYPE: "json", "min_tokens": 2})
    assert field == "min_tokens" and "grammar decides where the output ends" in message
