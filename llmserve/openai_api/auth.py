"""Optional API keys: `Authorization: Bearer <key>` checked against the keys of the spec
(`openai.api_keys`), of an environment variable (`openai.api_keys_env`, default LLMSERVE_API_KEYS,
comma-separated) and of a file (`openai.api_keys_file`, one key per line, `#` comments). No key
configured anywhere: no check. Keys are compared in constant time and never logged or echoed."""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable
from pathlib import Path

from .errors import APIError


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def load_keys(spec_keys: Iterable[str] = (), env_var: str | None = None, file: str | Path | None = None) -> list[str]:
    keys = [k.strip() for k in spec_keys if k.strip()]
    if env_var and os.environ.get(env_var):
        keys += [k.strip() for k in os.environ[env_var].split(",") if k.strip()]
    if file:
        for line in Path(file).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                keys.append(line)
    return keys


class KeyCheck:
    def __init__(self, keys: Iterable[str]):
        # Only digests are kept: a memory dump or a repr never shows a key.
        self._digests = [_digest(k) for k in keys]

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def check(self, authorization: str | None) -> None:
        if not self._digests:
            return
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise APIError(
                401, "Missing API key: send the header 'Authorization: Bearer <key>'.", code="invalid_api_key"
            )
        d = _digest(token.strip())
        if not any(hmac.compare_digest(d, k) for k in self._digests):
            raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")
