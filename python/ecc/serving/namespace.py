# SPDX-License-Identifier: Apache-2.0
"""Keys that say whose embeddings they are: the model, its revision, the dtype,
the row width and the processor's settings come before the content hash, so
two models (or one model under two processors) on one host never read each
other's entries."""

import hashlib
import json
import re

from .._abi import KEY_MAX
from .._types import DTYPE_BYTES, DTYPE_VALUE
from ..errors import invalid

# The readable part of the prefix; the digest is what tells namespaces apart.
_SLUG_MAX = 32
_DIGEST_HEX = 16


def _slug(model):
    tail = model.rstrip("/").split("/")[-1] or "model"
    return re.sub(r"[^A-Za-z0-9._-]", "-", tail)[:_SLUG_MAX]


class Namespace:
    """What an entry's bytes depend on besides the image: keys are
    "<model>@<digest>/<content hash>", the digest covering every setting."""

    def __init__(self, model, hidden, dtype="bfloat16", revision="main", processor=None):
        if not isinstance(model, str) or not model:
            raise invalid(f"Namespace: model must be a non-empty str, not {model!r}")
        if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden <= 0:
            raise invalid(f"Namespace: hidden (the row width in elements) must be a positive "
                          f"int, not {hidden!r}")
        if dtype not in DTYPE_VALUE:
            raise invalid(f"Namespace: dtype {dtype!r} is none of {', '.join(DTYPE_VALUE)}")
        self.model, self.hidden, self.dtype = model, hidden, dtype
        self.revision = str(revision)
        self.processor = dict(processor or {})
        settings = json.dumps([model, self.revision, dtype, hidden, self.processor],
                              sort_keys=True, default=str)
        digest = hashlib.sha256(settings.encode()).hexdigest()[:_DIGEST_HEX]
        self.prefix = f"{_slug(model)}@{digest}/"

    @property
    def row_bytes(self):
        return self.hidden * DTYPE_BYTES[DTYPE_VALUE[self.dtype]]

    def key(self, content_hash):
        """The key of an item's embeddings; refuses a hash that would not fit."""
        if not isinstance(content_hash, str) or not content_hash:
            raise invalid(f"Namespace.key: the content hash must be a non-empty str, "
                          f"not {content_hash!r}")
        key = self.prefix + content_hash
        if len(key.encode("utf-8", "surrogateescape")) > KEY_MAX:
            raise invalid(f"Namespace.key: '{key}' is {len(key.encode())} bytes, above the key "
                          f"limit of {KEY_MAX}: the content hash may have at most "
                          f"{KEY_MAX - len(self.prefix.encode())} bytes")
        return key

    def __repr__(self):
        return f"Namespace({self.prefix!r}: {self.model} {self.revision} {self.dtype}[*, " \
               f"{self.hidden}])"
