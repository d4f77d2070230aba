# redis_backoff_c._patch: patch() / unpatch(), re-exported by the package.
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass

from redis_backoff_c._speedups import RetryBudget, RetryStats

__all__ = ["PatchReport", "is_patched", "patch", "patched", "unpatch"]

@dataclass(frozen=True)
class PatchReport:
    implementation: str
    active: bool
    classes: Mapping[str, str]
    missing: Mapping[str, str]
    replaced: tuple[str, ...]
    already_patched: bool
    @property
    def count(self) -> int: ...

def patch(
    deadline: float | None = None,
    budget: RetryBudget | None = None,
    stats: RetryStats | None = None,
) -> PatchReport: ...
def unpatch() -> tuple[str, ...]: ...
def is_patched() -> bool: ...
def patched(
    deadline: float | None = None,
    budget: RetryBudget | None = None,
    stats: RetryStats | None = None,
) -> AbstractContextManager[PatchReport]: ...
