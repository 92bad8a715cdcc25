"""Upstream's guided-decoding inputs, read and checked once: `guided_decoding_guide_type` (json,
json_schema, regex, ebnf_grammar, structural_tag) and `guided_decoding_guide` (the schema, regex,
grammar or structural tag; none for json).

Without xgrammar (the tensorrtllm layout's relay runs in a stub that may have only numpy and tokenizers)
this checks the type and the guide's presence and size; `parse` (engine/guided.grammar_of, passed by
preprocessing) also parses the guide, so a bad schema, regex or grammar is a 400 naming the field
before the request reaches an engine. The torch engine compiles it against its vocabulary (cached)
when it parses the token-level request, with the same errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..contract import GUIDE_TYPES, MAX_GUIDE_CHARS
from ..errors import RequestError
from .reader import Reader, check, one

TYPE, GUIDE = "guided_decoding_guide_type", "guided_decoding_guide"


@dataclass(frozen=True)
class Guide:
    type: str
    guide: str  # "" for json


def read_guide(read: Reader, parse: Callable[[str, str], object] | None = None) -> Guide | None:
    """None when the request is not guided. An empty type is none, as upstream (its mapping has no
    entry for it), and an empty guide is no guide (the HTTP generate form `"guided_decoding_guide": ""`).
    `parse(type, guide)` raises ValueError saying what is wrong with the guide."""
    guide_type = one(read, TYPE, str, "")
    guide = one(read, GUIDE, str, "")
    if not guide_type:
        check(GUIDE, not guide, f"needs {TYPE} (one of {', '.join(GUIDE_TYPES)})")
        return None
    check(TYPE, guide_type in GUIDE_TYPES, f"must be one of {', '.join(GUIDE_TYPES)}, got {guide_type!r}")
    if guide_type == "json":
        check(GUIDE, not guide, f"must be empty when {TYPE} is json (any JSON value); send json_schema to constrain it")
    else:
        check(GUIDE, bool(guide), f"is required when {TYPE} is {guide_type}")
    check(GUIDE, len(guide) <= MAX_GUIDE_CHARS, f"is {len(guide)} characters, the limit is {MAX_GUIDE_CHARS}")
    if parse is not None:
        try:
            parse(guide_type, guide)
        except ValueError as e:
            raise RequestError(GUIDE, str(e)) from None
    return Guide(guide_type, guide)
