"""RetryBudget, the twin of csrc/budget.c: gRFC A6 retry throttling, a
bucket of tokens shared by the copies of a Retry."""

from __future__ import annotations

import threading
from typing import Any, NoReturn, final

from redis_backoff_c._extras_py.args import _bind, _positive, _real

__all__ = ["RetryBudget"]


@final
class RetryBudget:
    """RetryBudget(max_tokens, token_ratio)

    Retry throttling as gRPC's (gRFC A6), shared by every Retry that holds
    it: the bucket starts with max_tokens tokens; each attempt that fails
    with a supported error takes one (never below 0); each call_with_retry
    that succeeds puts token_ratio back (never above max_tokens). A retry
    is allowed only while more than max_tokens / 2 tokens are left; a
    call's first attempt is never refused."""

    __slots__ = ("_lock", "_max_tokens", "_token_ratio", "_max", "_ratio", "_tokens", "_threshold")

    _lock: threading.Lock
    _max_tokens: float
    _token_ratio: float
    _max: float
    _ratio: float
    _tokens: float
    _threshold: float

    def __init_subclass__(cls, **kwargs: Any) -> NoReturn:
        # As the C type: final, so that a subclass cannot change its rules.
        raise TypeError("type 'RetryBudget' is not an acceptable base type")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        max_tokens, token_ratio = _bind(
            "RetryBudget", ("max_tokens", "token_ratio"), 2, args, kwargs, {}
        )
        maximum = _positive("RetryBudget", "max_tokens", max_tokens, False)
        ratio = _positive("RetryBudget", "token_ratio", token_ratio, False)
        self._lock = threading.Lock()
        self._max_tokens = max_tokens
        self._token_ratio = token_ratio
        self._max = maximum
        self._ratio = ratio
        self._tokens = maximum  # gRFC A6: the bucket starts full
        self._threshold = maximum / 2.0

    @property
    def max_tokens(self) -> float:
        """the size of the bucket (read-only)"""
        return self._max_tokens

    @property
    def token_ratio(self) -> float:
        """tokens a successful call_with_retry puts back (read-only)"""
        return self._token_ratio

    @property
    def tokens(self) -> float:
        """the tokens in the bucket now, in [0, max_tokens]"""
        with self._lock:
            return self._tokens

    @property
    def retry_allowed(self) -> bool:
        """whether a retry would be allowed now: tokens > max_tokens / 2"""
        return self.tokens > self._threshold

    def _take(self) -> None:
        """A failed attempt: one token less, never below 0."""
        with self._lock:
            self._tokens = max(self._tokens - 1.0, 0.0)

    def _give(self) -> None:
        """A successful call: token_ratio back, never above max_tokens."""
        with self._lock:
            self._tokens = min(self._tokens + self._ratio, self._max)

    def __repr__(self) -> str:
        return (
            f"RetryBudget(max_tokens={self._max_tokens!r}, "
            f"token_ratio={self._token_ratio!r}, tokens={self.tokens!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled by value: (RetryBudget, (max_tokens, token_ratio), tokens).
        return (type(self), (self._max_tokens, self._token_ratio), self.tokens)

    def __setstate__(self, state: float) -> None:
        tokens = _real("RetryBudget.__setstate__", "state", state)
        if not 0.0 <= tokens <= self._max:
            raise ValueError(
                "RetryBudget.__setstate__() argument 'state' must be a token count "
                f"in [0, max_tokens], not {state!r}"
            )
        with self._lock:
            self._tokens = tokens
