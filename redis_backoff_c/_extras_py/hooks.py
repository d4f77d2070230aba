"""on_retry and on_give_up, the twin of csrc/hooks.c: the value a hook
takes, the attributes, RetryEvent (redis_backoff_c.hooks' NamedTuple) and
the two steps of call_with_retry that call them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from redis_backoff_c import hooks as _hooks

__all__ = ["RetryEvent"]

RetryEvent = _hooks.RetryEvent


def _check_hook(owner: str, name: str, value: Any) -> None:
    """on_retry or on_give_up: None, or a callable."""
    if value is not None and not callable(value):
        raise TypeError(
            f"{owner}() argument '{name}' must be callable or None, not {type(value).__name__}"
        )


def _hook_property(name: str, doc: str) -> Any:
    """The attribute on_retry or on_give_up (`name`) of the twin Retry: None
    or a callable, stored in the instance __dict__ while set; not deleted."""

    def get(self: Any) -> Callable[[RetryEvent], object] | None:
        return self._get(name)  # type: ignore[no-any-return]

    def set_(self: Any, value: Callable[[RetryEvent], object] | None) -> None:
        _check_hook(f"Retry.{name}", "value", value)
        self._store(name, value)

    def delete(self: Any) -> NoReturn:
        raise AttributeError(f"cannot delete attribute '{name}'")

    return property(get, set_, delete, doc)


class _HooksSteps:
    """The hooks' steps of the twin Retry types' call_with_retry (mixed
    into redis_backoff_c._extras_py._Extras)."""

    if TYPE_CHECKING:

        def _extras(self, counted: bool) -> Mapping[str, Any]: ...

    def _retrying(self, counted: bool, error: BaseException, attempt: int, delay: Any) -> None:
        """on_retry(event), just before the backoff sleep (redis_backoff_c.hooks)."""
        hook = self._extras(counted).get("on_retry")
        if hook is not None:
            _hooks._call(hook, RetryEvent(attempt, error, delay, None))

    def _gave_up(self, counted: bool, reason: str, error: BaseException, attempt: int) -> None:
        """on_give_up(event), just before the error is raised."""
        hook = self._extras(counted).get("on_give_up")
        if hook is not None:
            _hooks._call(hook, RetryEvent(attempt, error, None, reason))
